//! An `llm` user's habits on skein's command line: a prompt without
//! `prompt` (flags first, stdin alone), `llm` commands skein lacks refused
//! before anything is sent, saved provider keys (`skein keys`, `--key`)
//! and the flags `llm` users reach for (`-n`, `-u`, `--no-stream`, `-x`,
//! `-d`, `logs -r`, `logs --conversation`, `logs --cid X -n N`).

use serde_json::Value;
use skein_testkit::Cli;
use skein_testkit::cli::stderr;
use std::process::Output;

fn temp() -> Cli {
    Cli::temp(crate::BIN)
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// How many conversations `skein`'s database holds.
fn conversations(skein: &Cli) -> usize {
    skein.json(&["conversations"]).as_array().unwrap().len()
}

#[test]
fn prompt_flags_may_come_before_the_text_as_with_llm() {
    let skein = temp();
    let first = skein.run(&["-m", "echo", "hi"]);
    assert!(first.status.success(), "{}", stderr(&first));
    assert!(
        stdout(&first).starts_with("echo: \"hi\""),
        "{}",
        stdout(&first)
    );
    let more = skein.json(&["-c", "more"]);
    assert!(
        more["text"]
            .as_str()
            .unwrap()
            .contains("history: 3 messages"),
        "-c continued the conversation: {more}"
    );
    assert_eq!(conversations(&skein), 1);
    // A global option among them, and `--db` as `-d` (over `SKEIN_DB`).
    let other = skein.dir().join("other.db");
    let other = other.to_str().unwrap();
    let moved = skein
        .clone()
        .db_in_env()
        .run(&["-d", other, "-s", "terse", "--json", "there"]);
    assert!(moved.status.success(), "{}", stderr(&moved));
    let record: Value = serde_json::from_slice(&moved.stdout).unwrap();
    assert!(
        record["text"].as_str().unwrap().contains("system: yes"),
        "{record}"
    );
    assert!(std::path::Path::new(other).is_file());
    assert_eq!(conversations(&skein), 1, "the other database got the turn");
}

#[test]
fn stdin_alone_is_a_prompt() {
    let skein = temp();
    let output = skein.run_with_stdin(&[], b"from a pipe");
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(
        stdout(&output).contains("from a pipe"),
        "{}",
        stdout(&output)
    );
    let empty = skein.run_with_stdin(&[], b"");
    assert_eq!(empty.status.code(), Some(1), "{}", stderr(&empty));
    assert!(
        stderr(&empty).contains("stdin was empty"),
        "{}",
        stderr(&empty)
    );
}

#[test]
fn an_llm_command_skein_lacks_is_refused_and_nothing_is_sent_or_saved() {
    let skein = temp();
    for args in [
        &["schemas"][..],
        &["schemas", "list"],
        &["plugin"],
        &["plugins"],
        &["install", "llm-gpt4all"],
    ] {
        let output = skein.run(args);
        assert_eq!(
            output.status.code(),
            Some(2),
            "{args:?}: {}",
            stderr(&output)
        );
        let said = stderr(&output);
        assert!(said.contains("skein has no `"), "{args:?}: {said}");
        assert!(said.contains("skein prompt"), "{args:?}: {said}");
    }
    // `keys`, `templates` and `aliases` are skein's own now: their usage,
    // not a prompt.
    for command in ["keys", "templates", "aliases"] {
        let usage = skein.run(&[command]);
        assert_eq!(usage.status.code(), Some(2));
        assert!(
            stderr(&usage).contains(&format!("skein {command}")),
            "{}",
            stderr(&usage)
        );
    }
    assert!(
        !skein.db().exists(),
        "nothing was recorded, no database made"
    );
    // After prompt flags the word is text, as the rule says.
    let sent = skein.json(&["-m", "echo", "schemas"]);
    assert!(
        sent["text"].as_str().unwrap().contains("\"schemas\""),
        "{sent}"
    );
}

/// A mock OpenAI server answering every chat completion, and its runtime.
fn openai_server() -> (tokio::runtime::Runtime, wiremock::MockServer) {
    use wiremock::matchers::method;
    use wiremock::{Mock, MockServer, ResponseTemplate};
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let server = runtime.block_on(async {
        let server = MockServer::start().await;
        Mock::given(method("POST"))
            .respond_with(ResponseTemplate::new(200).set_body_json(serde_json::json!({
                "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "gpt-test",
                "choices": [{"index": 0, "finish_reason": "stop",
                    "message": {"role": "assistant", "content": "Hello from the mock."}}],
                "usage": {"prompt_tokens": 5, "completion_tokens": 4, "total_tokens": 9}
            })))
            .mount(&server)
            .await;
        server
    });
    (runtime, server)
}

/// The `Authorization` header of the last request `server` received.
fn last_authorization(runtime: &tokio::runtime::Runtime, server: &wiremock::MockServer) -> String {
    let requests = runtime.block_on(server.received_requests()).unwrap();
    requests.last().unwrap().headers["authorization"]
        .to_str()
        .unwrap()
        .to_string()
}

/// A key typed at a terminal is never shown: echo is off while it is read,
/// and back on after.
#[test]
fn a_key_typed_on_a_terminal_is_not_echoed() {
    let skein = temp();
    let mut terminal = crate::pty::Terminal::spawn(skein.command(&["keys", "set", "openai"]));
    terminal.wait_for("(it is not shown)");
    terminal.send("sk-typed-0003\r");
    let (code, output) = terminal.finish_with_output();
    assert_eq!(code, Some(0), "{output}");
    assert!(!output.contains("sk-typed"), "the key was shown: {output}");
    assert_eq!(skein.ok(&["keys", "get", "openai"]), "sk-typed-0003\n");
}

#[test]
fn saved_keys_live_in_a_private_file_and_come_after_the_environment() {
    let skein = temp();
    let path = skein.ok(&["keys", "path"]);
    let path = std::path::PathBuf::from(path.trim());
    assert_eq!(
        path,
        skein.dir().join("keys.json"),
        "beside the config file"
    );
    assert!(!path.exists());
    // From stdin, and from --value.
    let set = skein.run_with_stdin(&["keys", "set", "openai"], b"sk-saved-0001\n");
    assert!(set.status.success(), "{}", stderr(&set));
    assert!(!stderr(&set).contains("sk-saved"), "{}", stderr(&set));
    skein.ok(&["keys", "set", "anthropic", "--value", "sk-ant-saved-0002"]);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "readable by its owner only");
    }
    assert_eq!(skein.ok(&["keys", "list"]), "anthropic\nopenai\n");
    assert_eq!(skein.ok(&["keys", "get", "openai"]), "sk-saved-0001\n");
    let missing = skein.run(&["keys", "get", "nobody"]);
    assert_eq!(missing.status.code(), Some(3));
    let shown = skein.ok(&["config", "show"]) + &skein.json(&["config", "show"]).to_string();
    assert!(
        !shown.contains("sk-saved") && !shown.contains("sk-ant"),
        "{shown}"
    );

    let (runtime, server) = openai_server();
    let prompt = |env_key: Option<&str>, extra: &[&str]| {
        let mut args = vec!["prompt", "-m", "openai:gpt-test"];
        args.extend_from_slice(extra);
        args.push("hi");
        let mut command = skein.command(&args);
        command.env("OPENAI_BASE_URL", format!("{}/v1", server.uri()));
        match env_key {
            Some(key) => command.env("OPENAI_API_KEY", key),
            None => command.env_remove("OPENAI_API_KEY"),
        };
        command.output().unwrap()
    };
    let saved = prompt(None, &[]);
    assert!(saved.status.success(), "{}", stderr(&saved));
    assert_eq!(
        last_authorization(&runtime, &server),
        "Bearer sk-saved-0001"
    );
    let env = prompt(Some("sk-env-0003"), &[]);
    assert!(env.status.success(), "{}", stderr(&env));
    assert_eq!(
        last_authorization(&runtime, &server),
        "Bearer sk-env-0003",
        "the environment wins over the file"
    );
    // --key, as a key or as a saved key's name, wins over both.
    prompt(Some("sk-env-0003"), &["--key", "sk-given-0004"]);
    assert_eq!(
        last_authorization(&runtime, &server),
        "Bearer sk-given-0004"
    );
    prompt(Some("sk-env-0003"), &["--key", "anthropic"]);
    assert_eq!(
        last_authorization(&runtime, &server),
        "Bearer sk-ant-saved-0002"
    );

    // A file others can read is refused, saying how to fix it, and shows
    // no key.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let exposed = prompt(None, &[]);
        assert_ne!(exposed.status.code(), Some(0));
        let said = stderr(&exposed) + &stdout(&exposed);
        assert!(said.contains("chmod 600"), "{said}");
        assert!(!said.contains("sk-saved"), "{said}");
        let listed = skein.run(&["keys", "list"]);
        assert!(!listed.status.success());
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
}

#[test]
fn a_saved_key_never_appears_in_an_error() {
    use wiremock::matchers::method;
    use wiremock::{Mock, ResponseTemplate};
    let skein = temp();
    skein.ok(&["keys", "set", "openai", "--value", "sk-leaky-key-0005"]);
    let (runtime, server) = openai_server();
    runtime.block_on(async {
        server.reset().await;
        Mock::given(method("POST"))
            .respond_with(ResponseTemplate::new(401).set_body_json(serde_json::json!({
                "error": {"message": "Incorrect API key provided: sk-leaky-key-0005",
                          "type": "invalid_request_error"}
            })))
            .mount(&server)
            .await;
    });
    let mut command = skein.command(&["prompt", "-m", "openai:gpt-test", "hi"]);
    command
        .env("OPENAI_BASE_URL", format!("{}/v1", server.uri()))
        .env_remove("OPENAI_API_KEY");
    let output = command.output().unwrap();
    assert_eq!(output.status.code(), Some(5), "{}", stderr(&output));
    let said = stderr(&output) + &stdout(&output);
    assert!(!said.contains("sk-leaky"), "{said}");
    assert!(said.contains("****"), "the key is blanked out: {said}");
    // Nor is the run's recorded error.
    let log = skein.ok(&["log"]) + &skein.json(&["log"]).to_string();
    assert!(!log.contains("sk-leaky"), "{log}");
}

#[test]
fn a_missing_key_says_how_to_save_one() {
    let skein = temp();
    let mut command = skein.command(&["prompt", "-m", "openai:gpt-4o", "hi"]);
    command
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL");
    let output = command.output().unwrap();
    assert_eq!(output.status.code(), Some(5));
    assert!(
        stderr(&output).contains("`skein keys set openai`"),
        "{}",
        stderr(&output)
    );
}

/// A scripted model whose reply holds two fenced code blocks.
fn coder(skein: &Cli) -> String {
    let rules = skein.dir().join("coder.toml");
    std::fs::write(
        &rules,
        r#"
[[rules]]
name = "code"
reply = "Here it is:\n```python\nprint('one')\n```\nand another:\n```\nsecond\n```\n"
"#,
    )
    .unwrap();
    format!("scripted:{}", rules.display())
}

#[test]
fn the_output_flags_of_llm_usage_no_stream_and_extract() {
    let skein = temp();
    let model = coder(&skein);
    let extracted = skein.run(&["-m", &model, "-x", "write code"]);
    assert!(extracted.status.success(), "{}", stderr(&extracted));
    assert_eq!(stdout(&extracted), "print('one')\n");
    // The whole reply is recorded all the same.
    let last = skein.ok(&["logs", "-r"]);
    assert!(last.contains("and another:"), "{last}");

    let whole = skein.run(&["--no-stream", "-u", "plain words"]);
    assert!(whole.status.success(), "{}", stderr(&whole));
    assert_eq!(
        stdout(&whole),
        "echo: \"plain words\" (history: 1 messages, system: no, tools: 0)\n"
    );
    assert!(
        stderr(&whole).contains("token usage: 2 input, "),
        "{}",
        stderr(&whole)
    );
    // Without a block, -x prints the whole reply.
    let no_block = skein.ok(&["-x", "no code"]);
    assert!(no_block.starts_with("echo: \"no code\""), "{no_block}");
}

#[test]
fn no_log_records_nothing_and_makes_no_database() {
    let skein = temp();
    for args in [
        &["-n", "hi"][..],
        &["--no-log", "hi"],
        &["prompt", "-n", "hi"],
    ] {
        let output = skein.run(args);
        assert!(output.status.success(), "{args:?}: {}", stderr(&output));
        assert!(stdout(&output).starts_with("echo: \"hi\""));
        assert!(
            stderr(&output).contains("not recorded"),
            "{}",
            stderr(&output)
        );
    }
    let continued = skein.run(&["-n", "-c", "hi"]);
    assert_eq!(continued.status.code(), Some(3), "{}", stderr(&continued));
    assert!(
        std::fs::read_dir(skein.dir()).unwrap().next().is_none(),
        "no database, no file of any kind"
    );
    // With a database, -n -c reads the history and writes nothing.
    skein.ok(&["first"]);
    let before = std::fs::read(skein.db()).unwrap();
    let again = skein.json(&["-n", "-c", "second"]);
    assert!(
        again["text"]
            .as_str()
            .unwrap()
            .contains("history: 3 messages"),
        "{again}"
    );
    assert_eq!(again["recorded"], false);
    assert_eq!(skein.json(&["conversations"])[0]["len"], 2);
    assert_eq!(std::fs::read(skein.db()).unwrap(), before);
}

#[test]
fn a_failed_import_leaves_no_database_behind() {
    let skein = temp();
    let bad = skein.dir().join("bad.jsonl");
    std::fs::write(&bad, "{\"not\": \"an export\"}\n").unwrap();
    let output = skein.run(&["import", bad.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(6), "{}", stderr(&output));
    let left: Vec<_> = std::fs::read_dir(skein.dir())
        .unwrap()
        .map(|entry| entry.unwrap().file_name())
        .collect();
    assert_eq!(left, ["bad.jsonl"], "only the input is left");
    // Into an existing database, a failed import leaves it as it was.
    skein.ok(&["hello"]);
    let output = skein.run(&["import", bad.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(6));
    assert_eq!(conversations(&skein), 1);
}

#[test]
fn logs_as_llm_users_ask_for_them() {
    let skein = temp();
    let first = skein.json(&["--name", "planning", "one"]);
    skein.json(&["-c", "two"]);
    skein.json(&["-c", "three"]);
    skein.json(&["elsewhere"]);
    // -r: the last reply's text only.
    assert_eq!(
        skein.ok(&["logs", "-r"]),
        "echo: \"elsewhere\" (history: 1 messages, system: no, tools: 0)\n"
    );
    // --conversation is --cid, by name too; -r and -n keep to it.
    let cid = first["conversation"].as_str().unwrap();
    for chosen in [cid, "planning"] {
        let reply = skein.ok(&["logs", "--conversation", chosen, "-r"]);
        assert!(reply.starts_with("echo: \"three\""), "{reply}");
        let two = skein.json(&["logs", "--cid", chosen, "-n", "2"]);
        let prompts: Vec<&str> = two
            .as_array()
            .unwrap()
            .iter()
            .map(|turn| turn["prompt"].as_str().unwrap())
            .collect();
        assert_eq!(prompts, ["two", "three"]);
    }
    // Without -n, --cid still shows every message.
    let all = skein.json(&["logs", "--cid", "planning"]);
    assert_eq!(all["messages"].as_array().unwrap().len(), 6);
    let empty = temp();
    empty.ok(&["hi"]);
    let none = empty.run(&["logs", "-r", "-q", "nothing-matches-this"]);
    assert_eq!(none.status.code(), Some(3), "{}", stderr(&none));
}

#[test]
fn body_limit_takes_a_size_as_max_input_does() {
    let skein = temp();
    for size in ["1M", "512K", "1048576"] {
        let help = skein.run(&["serve", "--body-limit", size, "--bind", "not-an-address"]);
        // The size parsed; only the address is refused.
        assert_eq!(help.status.code(), Some(2));
        assert!(
            stderr(&help).contains("--bind"),
            "{size}: {}",
            stderr(&help)
        );
    }
    let bad = skein.run(&["serve", "--body-limit", "lots"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(stderr(&bad).contains("is not a size"), "{}", stderr(&bad));
}

#[test]
fn a_concise_schema_asks_for_an_object_of_those_fields() {
    let skein = temp();
    let rules = skein.dir().join("dog.toml");
    std::fs::write(
        &rules,
        "[[rules]]\nname = \"dog\"\nreply = '{\"name\": \"Rex\", \"age\": 3}'\n",
    )
    .unwrap();
    let model = format!("scripted:{}", rules.display());
    let prepared = skein.json(&["prepare", "--schema", "name, age int: in years", "a dog"]);
    let shown = prepared.to_string();
    assert!(
        shown.contains(r#""age":{"description":"in years","type":"integer"}"#),
        "{shown}"
    );
    let answered = skein.json(&["-m", &model, "--schema", "name, age int", "a dog"]);
    assert_eq!(answered["text"], r#"{"name": "Rex", "age": 3}"#);
    // A reply without a required field fails validation: exit 5.
    let wrong = skein.run(&["-m", &model, "--schema", "name, age int, owner", "a dog"]);
    assert_eq!(wrong.status.code(), Some(5), "{}", stderr(&wrong));
    let typo = skein.run(&["--schema", "schema.jsn", "a dog"]);
    assert_eq!(typo.status.code(), Some(2), "a usage error");
    assert!(
        stderr(&typo).contains("nor a file that exists"),
        "{}",
        stderr(&typo)
    );
}

#[test]
fn attachments_and_fragments_may_be_urls_fetched_within_the_input_limit() {
    use wiremock::matchers::{method, path};
    use wiremock::{Mock, MockServer, ResponseTemplate};
    let png = std::fs::read(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/pixels.png"),
    )
    .unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let server = runtime.block_on(async {
        let server = MockServer::start().await;
        let serve = |at: &str, response: ResponseTemplate| {
            Mock::given(method("GET"))
                .and(path(at.to_string()))
                .respond_with(response)
        };
        serve(
            "/pixels",
            ResponseTemplate::new(200).set_body_bytes(png.clone()),
        )
        .mount(&server)
        .await;
        serve(
            "/notes",
            ResponseTemplate::new(200)
                .insert_header("content-type", "text/markdown; charset=utf-8")
                .set_body_string("# Notes\nfetched words"),
        )
        .mount(&server)
        .await;
        serve(
            "/big",
            ResponseTemplate::new(200).set_body_bytes(vec![b'a'; 4096]),
        )
        .mount(&server)
        .await;
        serve("/gone", ResponseTemplate::new(404))
            .mount(&server)
            .await;
        server
    });
    let url = |at: &str| format!("{}{at}", server.uri());
    let skein = temp();
    let answered = skein.json(&["-a", &url("/pixels"), "-f", &url("/notes"), "what is this?"]);
    let text = answered["text"].as_str().unwrap();
    assert!(
        text.contains(&format!("[attachment: image/png, {} bytes]", png.len())),
        "{text}"
    );
    let stored = skein.json(&["log", "-c"]);
    let parts = stored["messages"][0]["parts"].as_array().unwrap().clone();
    assert_eq!(parts[0]["text"], "# Notes\nfetched words", "{stored}");
    assert_eq!(parts[2]["media_type"], "image/png", "{stored}");

    let big = skein.run(&["--max-input", "1K", "-a", &url("/big"), "x"]);
    assert_eq!(big.status.code(), Some(1));
    assert!(
        stderr(&big).contains("is larger than 1 KiB (the --max-input limit)"),
        "{}",
        stderr(&big)
    );
    let gone = skein.run(&["-f", &url("/gone"), "x"]);
    assert_eq!(gone.status.code(), Some(1));
    assert!(stderr(&gone).contains("404"), "{}", stderr(&gone));
    assert_eq!(
        conversations(&skein),
        1,
        "refused inputs send and record nothing"
    );
}

// The paper cuts a new user found (issue 47): each test fails on the skein
// before the fix.

/// The files in `skein`'s directory, sorted.
fn files(skein: &Cli) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(skein.dir())
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// `log -n 0` shows every turn, as `llm logs -n 0` does (it once said "no
/// turns yet"), on the whole database and on one conversation.
#[test]
fn log_n_0_shows_every_turn_as_llm_logs_does() {
    let skein = temp();
    skein.ok(&["turn 0"]);
    for turn in 1..12 {
        skein.ok(&["-c", &format!("turn {turn}")]);
    }
    let all = skein.json(&["log", "-n", "0"]);
    assert_eq!(all.as_array().unwrap().len(), 12, "{all}");
    assert_eq!(all[0]["prompt"], "turn 0", "oldest first");
    assert_eq!(skein.json(&["log"]).as_array().unwrap().len(), 10);
    let text = skein.ok(&["log", "-n", "0", "-s"]);
    assert_eq!(text.lines().count(), 12, "{text}");
    assert!(!text.contains("no turns yet"), "{text}");
    let of_one = skein.json(&["log", "-c", "-n", "0"]);
    assert_eq!(of_one.as_array().unwrap().len(), 12, "{of_one}");
    // `conversations -n 0` lists them all too.
    skein.ok(&["another"]);
    let listed = skein.json(&["conversations", "-n", "0"]);
    assert_eq!(listed.as_array().unwrap().len(), 2, "{listed}");
}

/// A conversation that is not there: the error names the database it
/// looked in and `skein conversations`, which lists what is there.
#[test]
fn an_unknown_conversation_names_the_database_and_skein_conversations() {
    let skein = temp();
    skein.ok(&["hello"]);
    let db = skein.db().display().to_string();
    for args in [
        &["--cid", "nosuch", "hi"][..],
        &["log", "--cid", "nosuch"],
        &["log", "--cid", "abcdef12"],
        &["delete", "nosuch"],
    ] {
        let output = skein.run(args);
        assert_eq!(output.status.code(), Some(3), "{args:?}");
        let said = stderr(&output);
        assert!(said.contains("`skein conversations`"), "{args:?}: {said}");
        assert!(said.contains(&db), "{args:?}: {said}");
        assert!(!said.contains("skein log"), "{args:?}: {said}");
    }
}

/// A command that fails before it records anything leaves no database
/// behind where it created one (`--db typo.db -c hi` once left 200 KB);
/// a file that was there before stays, and a command that records
/// creates the database as ever.
#[test]
fn a_command_that_fails_before_its_first_write_leaves_no_database() {
    let skein = temp();
    for args in [
        &["-c", "hi"][..],
        &["--cid", "work", "hi"],
        &["-m", "nosuch", "hi"],
        &["-o", "temperature", "9", "hi"],
        &["-T", "teleport", "hi"],
        &["chat", "-c"],
        &["reply", "abcd", "hi"],
        &["redact", "abcd", "--reason", "typo"],
        &["rename", "abcd", "work"],
        &["gc"],
        &["import", "/nonexistent.jsonl"],
        &["label", "import", "/nonexistent.jsonl"],
    ] {
        let output = skein.run(args);
        assert!(!output.status.success(), "{args:?}");
        assert!(
            files(&skein).is_empty(),
            "{args:?} left {:?}: {}",
            files(&skein),
            stderr(&output)
        );
    }
    // A model that cannot be opened (no key) records nothing either.
    let keyless = skein
        .command(&["-m", "openai:gpt-4o", "hi"])
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .output()
        .unwrap();
    assert!(!keyless.status.success());
    assert!(files(&skein).is_empty(), "{:?}", files(&skein));
    // An empty file someone made is not the command's to remove.
    std::fs::write(skein.db(), b"").unwrap();
    let refused = skein.run(&["-m", "nosuch", "hi"]);
    assert_eq!(refused.status.code(), Some(2), "{}", stderr(&refused));
    assert!(skein.db().exists(), "the file that was there stays");
    std::fs::remove_file(skein.db()).unwrap();
    // A failed model call is recorded (its run and message), so its new
    // database stays.
    let unreachable = skein
        .command(&["-m", "openai:gpt-4o", "hi"])
        .env("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
        .output()
        .unwrap();
    assert_eq!(
        unreachable.status.code(),
        Some(5),
        "{}",
        stderr(&unreachable)
    );
    assert!(skein.db().exists(), "the failed run is kept");
}

/// The global options are optional wherever a usage line shows them: one
/// the environment gives is not shown as typed (and so as required).
#[test]
fn usage_lines_show_the_global_options_as_optional() {
    let skein = temp().db_in_env();
    let output = skein
        .command(&["delete"])
        .env("SKEIN_MAX_INPUT", "1M")
        .env("SKEIN_DB_READ", "postgres://standby/db")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let usage = stderr(&output);
    let line = usage
        .lines()
        .find(|line| line.starts_with("Usage:"))
        .unwrap();
    assert!(line.starts_with("Usage: skein delete <ID|"), "{usage}");
    for global in ["--db", "--max-input", "--db-read"] {
        assert!(!line.contains(global), "{usage}");
    }
    // The environment still chooses: a bad size there is refused.
    let bad = skein
        .command(&["log"])
        .env("SKEIN_MAX_INPUT", "lots")
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    assert!(stderr(&bad).contains("SKEIN_MAX_INPUT"), "{}", stderr(&bad));
    skein.ok(&["hello"]);
    assert_eq!(conversations(&skein), 1, "SKEIN_DB names the database");
}

/// `skein COMMAND --help` lists the command's own options first, and the
/// global ones apart, after them.
#[test]
fn a_commands_help_lists_its_own_options_then_the_global_ones() {
    let skein = temp();
    for command in ["log", "prompt", "delete", "rename"] {
        let help = skein.ok(&[command, "--help"]);
        let own = help.find("\nOptions:\n").expect("an Options section");
        let global = help
            .find("\nGlobal options:\n")
            .expect("a Global options section");
        assert!(own < global, "{command}: {help}");
        // The flags a section lists: the words each entry starts with.
        let listed = |section: &str| -> Vec<String> {
            section
                .lines()
                .map(str::trim_start)
                .filter(|line| line.starts_with('-'))
                .flat_map(|line| {
                    line.split_whitespace()
                        .map(|word| word.trim_end_matches(',').to_string())
                        .take_while(|word| word.starts_with('-'))
                        .collect::<Vec<_>>()
                })
                .collect()
        };
        let (own, global) = (listed(&help[own..global]), listed(&help[global..]));
        for option in ["--db", "--db-read", "--json", "--max-input", "--otlp"] {
            assert!(!own.iter().any(|flag| flag == option), "{command}: {help}");
            assert!(
                global.iter().any(|flag| flag == option),
                "{command}: {help}"
            );
        }
        assert!(own.iter().any(|flag| flag == "--help"), "{command}: {help}");
    }
    let help = skein.ok(&["log", "--help"]);
    assert!(help.contains("--cid <ID>"), "{help}");
}

/// A usage error is exit code 2, whether clap or skein finds it: an
/// unknown model (which suggests the nearest known name), tool or `-o`
/// option, a malformed `--schema`.
#[test]
fn usage_errors_exit_2_and_an_unknown_model_suggests_the_nearest() {
    let skein = temp();
    for (args, said) in [
        (
            &["-m", "4o-mini", "hi"][..],
            "did you mean `openai:gpt-4o-mini`?",
        ),
        (
            &["-m", "opnai:gpt-4o", "hi"],
            "did you mean `openai:gpt-4o`?",
        ),
        (&["-m", "ecoh", "hi"], "did you mean `echo`?"),
        (
            &["-m", "claude-3.5-sonnet", "hi"],
            "did you mean `anthropic:claude-3-5-sonnet`?",
        ),
        (&["-m", "scripted:", "hi"], "write `scripted:PATH`"),
        (&["-o", "tempreature", "1", "hi"], "bad -o option"),
        (&["-T", "teleport", "hi"], "unknown tool `teleport`"),
        (&["--schema", "age integer", "hi"], "the types are"),
        (&["models", "default", "4o-mini"], "openai:gpt-4o-mini"),
    ] {
        let output = skein.run(args);
        assert_eq!(
            output.status.code(),
            Some(2),
            "{args:?}: {}",
            stderr(&output)
        );
        assert!(
            stderr(&output).contains(said),
            "{args:?}: {}",
            stderr(&output)
        );
    }
    assert!(!skein.db().exists(), "nothing was recorded");
}

/// Errors speak of the command line, never of Rust APIs: continuing past
/// a redacted message, and a recorded turn's tool loop that hits its limit.
#[test]
fn errors_name_no_rust_api() {
    let skein = temp();
    let first = skein.json(&["secret words"]);
    let node = first["node"].as_str().unwrap();
    skein.ok(&["redact", node, "--reason", "leaked"]);
    let refused = skein.run(&["-c", "more"]);
    assert!(!refused.status.success());
    let said = stderr(&refused);
    assert!(said.contains("erased_placeholder"), "{said}");
    assert!(!said.contains("::"), "{said}");

    let rules = skein.dir().join("clock.toml");
    std::fs::write(
        &rules,
        "[[rules]]\nreply = \"Let me check.\"\ntool_calls = [{ name = \"skein_time\", arguments = \"{}\" }]\n",
    )
    .unwrap();
    let model = format!("scripted:{}", rules.display());
    let looped = skein.run(&[
        "-m",
        &model,
        "-T",
        "skein_time",
        "--chain-limit",
        "2",
        "--source",
        "note=a fact",
        "what time is it?",
    ]);
    assert!(!looped.status.success());
    let said = stderr(&looped);
    assert!(said.contains("--chain-limit N"), "{said}");
    assert!(!said.contains("::"), "{said}");
}

/// Ages take units that cannot be misread: `min`, `h`, `d`, `w`, `mo`,
/// `y`. A bare `m` (one letter from months) is refused with both readings,
/// in `--older-than`, `--since` and `[retention]`.
#[test]
fn ages_take_unambiguous_units_and_a_bare_m_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.toml");
    let skein = temp().config(&config);
    skein.ok(&["hello"]);
    for args in [
        &["delete", "--older-than", "2m", "--dry-run"][..],
        &["replay", "-m", "echo", "--since", "2m"],
    ] {
        let output = skein.run(args);
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        assert!(
            stderr(&output).contains("did you mean `2min` or `2mo`?"),
            "{args:?}: {}",
            stderr(&output)
        );
    }
    for age in ["30min", "12h", "30d", "2w", "6mo", "1y", "2026-11-01"] {
        let plan = skein.json(&["delete", "--older-than", age, "--dry-run"]);
        assert_eq!(plan["dry_run"], true, "{age}: {plan}");
    }
    std::fs::write(&config, "[retention]\nolder_than = \"2m\"\n").unwrap();
    let output = skein.run(&["gc", "--dry-run"]);
    assert!(!output.status.success());
    let said = stderr(&output);
    assert!(said.contains("retention.older_than"), "{said}");
    assert!(said.contains("`2min` or `2mo`"), "{said}");
    std::fs::write(&config, "[retention]\nolder_than = \"0min\"\n").unwrap();
    let plan = skein.json(&["gc", "--dry-run"]);
    assert_eq!(
        plan["retention"][0][1]["conversations"]
            .as_array()
            .unwrap()
            .len(),
        1,
        "{plan}"
    );
}

/// `gc` says what it kept and why: every message something still reaches,
/// counted exactly, and no "shared with" conversations (it deleted none).
#[test]
fn gc_reports_what_it_kept_and_why() {
    let skein = temp();
    for question in ["one", "two", "three"] {
        skein.ok(&["prompt", question]);
    }
    skein.ok(&["-c", "more"]);
    let nodes: i64 = skein::Store::open(skein.db())
        .unwrap()
        .raw_connection()
        .unwrap()
        .query_row("SELECT count(*) FROM nodes", [], |row| row.get(0))
        .unwrap();
    let report = skein.json(&["gc", "--dry-run"]);
    assert_eq!(report["collected"]["kept_messages"], nodes, "{report}");
    assert_eq!(report["collected"]["shared_with"], serde_json::json!([]));
    let text = skein.ok(&["gc"]);
    assert!(
        text.contains(&format!(
            "{nodes} message(s) kept: each is still reached by a conversation"
        )),
        "{text}"
    );
    assert!(!text.contains("shared with"), "{text}");
    assert!(!text.contains("conversation(s), 0 run(s)"), "{text}");
}

/// A scripted model's file is stored by its absolute path, so its
/// conversation goes on from any directory; one an older skein stored
/// relative, which leads nowhere from here, is refused naming where it
/// leads.
#[test]
fn a_scripted_conversation_continues_from_another_directory() {
    let skein = temp();
    let project = skein.dir().join("project");
    let elsewhere = skein.dir().join("elsewhere");
    std::fs::create_dir_all(&project).unwrap();
    std::fs::create_dir_all(&elsewhere).unwrap();
    std::fs::write(
        project.join("rules.toml"),
        "[[rules]]\nreply = \"scripted!\"\n",
    )
    .unwrap();
    let in_dir = |dir: &std::path::Path, args: &[&str]| {
        let mut all = vec!["--json"];
        all.extend_from_slice(args);
        skein.command(&all).current_dir(dir).output().unwrap()
    };
    let first = in_dir(&project, &["-m", "scripted:rules.toml", "hello"]);
    assert!(first.status.success(), "{}", stderr(&first));
    let stored = skein.json(&["conversations"]);
    let absolute = format!("scripted:{}", project.join("rules.toml").display());
    assert_eq!(stored[0]["meta"]["model"], absolute.as_str(), "{stored}");
    let next = in_dir(&elsewhere, &["-c", "again"]);
    assert!(next.status.success(), "{}", stderr(&next));
    let reply: Value = serde_json::from_slice(&next.stdout).unwrap();
    assert_eq!(reply["text"], "scripted!");

    // As an older skein stored it: relative to where it was typed.
    let id = stored[0]["id"].as_str().unwrap();
    skein::Store::open(skein.db())
        .unwrap()
        .raw_connection()
        .unwrap()
        .execute(
            "UPDATE conversations SET meta = json_set(meta, '$.model', 'scripted:rules.toml') \
             WHERE id = ?1",
            [id],
        )
        .unwrap();
    let lost = in_dir(&elsewhere, &["-c", "again"]);
    assert!(!lost.status.success());
    let said = stderr(&lost);
    let leads = elsewhere.join("rules.toml").display().to_string();
    assert!(said.contains("scripted:rules.toml"), "{said}");
    assert!(said.contains(&leads), "{said}");
    assert!(said.contains("-m scripted:"), "{said}");
    let found = in_dir(&project, &["-c", "again"]);
    assert!(found.status.success(), "{}", stderr(&found));
    // The default model is saved the same way.
    let saved = in_dir(&project, &["models", "default", "scripted:rules.toml"]);
    assert!(saved.status.success(), "{}", stderr(&saved));
    let config = std::fs::read_to_string(skein.dir().join("config.toml")).unwrap();
    assert!(config.contains(&format!("\"{absolute}\"")), "{config}");
}
