//! End-to-end tests of the `skein` binary against temporary databases.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// A temporary database and a command builder for the binary.
struct Skein {
    dir: tempfile::TempDir,
}

impl Skein {
    fn new() -> Skein {
        Skein {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn db(&self) -> PathBuf {
        self.dir.path().join("skein.db")
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_skein"));
        command
            .arg("--db")
            .arg(self.db())
            .args(args)
            .stdin(Stdio::null());
        command.env_remove("SKEIN_DB");
        // The deterministic model, unless a test asks for another, and a
        // configuration file of the test's own.
        command.env("SKEIN_MODEL", "echo");
        command.env("SKEIN_CONFIG", self.dir.path().join("config.toml"));
        command
    }

    fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().unwrap()
    }

    /// Run, expect success, return stdout.
    fn ok(&self, args: &[&str]) -> String {
        let output = self.run(args);
        assert!(
            output.status.success(),
            "skein {args:?} failed ({:?}): {}",
            output.status.code(),
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8(output.stdout).unwrap()
    }

    fn json(&self, args: &[&str]) -> Value {
        let mut all = vec!["--json"];
        all.extend_from_slice(args);
        serde_json::from_str(&self.ok(&all)).unwrap()
    }

    fn count(&self, table: &str) -> i64 {
        let conn = skein::Store::open(self.db())
            .unwrap()
            .raw_connection()
            .unwrap();
        conn.query_row(&format!("SELECT count(*) FROM {table}"), [], |row| {
            row.get(0)
        })
        .unwrap()
    }
}

fn script() -> String {
    format!(
        "scripted:{}",
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data/advisor.toml")
            .display()
    )
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn prompt_prints_the_record_as_json_and_continue_extends_it() {
    let skein = Skein::new();
    let first = skein.json(&["prompt", "-s", "You are terse.", "hello"]);
    for key in ["conversation", "node", "run", "text"] {
        assert!(first[key].is_string(), "missing {key}: {first}");
    }
    assert!(
        first["text"]
            .as_str()
            .unwrap()
            .contains("history: 2 messages")
    );
    let second = skein.json(&["prompt", "-c", "again"]);
    assert_eq!(second["conversation"], first["conversation"]);
    assert!(
        second["text"]
            .as_str()
            .unwrap()
            .contains("history: 4 messages")
    );
    let cid = first["conversation"].as_str().unwrap();
    let third = skein.json(&["prompt", "--cid", &cid[..8], "third"]);
    assert_eq!(third["conversation"], first["conversation"]);
    assert_eq!(skein.count("nodes"), 7);
    assert_eq!(skein.count("runs"), 3);
}

#[test]
fn text_streams_to_stdout_and_ids_go_to_stderr() {
    let skein = Skein::new();
    let output = skein.run(&["prompt", "hi"]);
    assert!(output.status.success());
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        "echo: \"hi\" (history: 1 messages, system: no, tools: 0)\n"
    );
    assert!(
        stderr(&output).contains("conversation "),
        "{}",
        stderr(&output)
    );
}

#[test]
fn prompt_text_can_come_from_stdin() {
    let skein = Skein::new();
    let mut child = skein
        .command(&["--json", "prompt"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"from a pipe")
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    let record: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert!(record["text"].as_str().unwrap().contains("from a pipe"));
}

#[test]
fn reply_to_a_head_extends_and_reply_to_an_inner_node_branches() {
    let skein = Skein::new();
    let first = skein.json(&["prompt", "one"]);
    let second = skein.json(&["prompt", "-c", "two"]);
    let cid = second["conversation"].as_str().unwrap().to_string();

    let extended = skein.json(&["reply", &second["node"].as_str().unwrap()[..10], "three"]);
    assert_eq!(extended["conversation"].as_str().unwrap(), cid);

    let output = skein.run(&[
        "--json",
        "reply",
        first["node"].as_str().unwrap(),
        "a branch",
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(stderr(&output).contains("branched"), "{}", stderr(&output));
    let branch: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_ne!(branch["conversation"].as_str().unwrap(), cid);
    // The original conversation's head did not move backwards.
    let log = skein.json(&["log", "--cid", &cid]);
    assert_eq!(log["conversation"]["head"], extended["node"]);
    assert_eq!(log["messages"].as_array().unwrap().len(), 6);
}

#[test]
fn fork_creates_a_conversation_at_any_node_and_can_run_a_first_turn() {
    let skein = Skein::new();
    let first = skein.json(&["prompt", "one"]);
    skein.json(&["prompt", "-c", "two"]);
    let node = first["node"].as_str().unwrap();
    let fork = skein.json(&["fork", node, "--name", "what-if"]);
    assert_eq!(fork["head"].as_str().unwrap(), node);
    assert_eq!(fork["name"], "what-if");
    assert_eq!(fork["origin"]["node"].as_str().unwrap(), node);

    let with_turn = skein.json(&["fork", node, "a different second question"]);
    let log = skein.json(&["log", "--cid", with_turn["conversation"].as_str().unwrap()]);
    let messages = log["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 4);
    assert_eq!(
        messages[2]["parts"][0]["text"],
        "a different second question"
    );

    let tree = skein.ok(&["tree", with_turn["conversation"].as_str().unwrap()]);
    assert!(tree.contains("├─ ") && tree.contains("└─ "), "{tree}");
    assert!(tree.contains("(what-if)"), "{tree}");
}

#[test]
fn unknown_and_ambiguous_ids_exit_3_with_a_clear_message() {
    let skein = Skein::new();
    skein.json(&["prompt", "one"]);
    let output = skein.run(&["show", "ffffffffffff"]);
    assert_eq!(output.status.code(), Some(3));
    assert!(
        stderr(&output).contains("no node starts with"),
        "{}",
        stderr(&output)
    );
    let output = skein.run(&["reply", "not-hex", "x"]);
    assert_eq!(output.status.code(), Some(3));
    assert!(
        stderr(&output).contains("hexadecimal"),
        "{}",
        stderr(&output)
    );
    for i in 0..40 {
        skein.json(&["prompt", &format!("filler {i}")]);
    }
    let ambiguous = (0..16)
        .map(|d| format!("{d:x}"))
        .map(|p| skein.run(&["show", &p]))
        .find(|o| o.status.code() == Some(3) && stderr(o).contains("matches several"));
    assert!(
        ambiguous.is_some(),
        "with 120 nodes some one-digit prefix is ambiguous"
    );
}

#[test]
fn scripted_models_follow_their_rules_and_failures_are_recorded() {
    let skein = Skein::new();
    let model = script();
    let bullish = skein.json(&[
        "prompt",
        "-m",
        &model,
        "-s",
        "facts: social-sentiment: bullish",
        "Should we BUY or HOLD?",
    ]);
    assert_eq!(bullish["text"], "BUY");
    let add = skein.json(&["prompt", "-c", "How much should we allocate?"]);
    assert_eq!(add["text"], "ADD", "the conversation remembers its model");
    let bearish = skein.json(&[
        "prompt",
        "-m",
        &model,
        "-s",
        "facts: none",
        "Should we BUY or HOLD?",
    ]);
    assert_eq!(bearish["text"], "HOLD");

    let nodes = skein.count("nodes");
    let output = skein.run(&["prompt", "-m", &model, "fail please"]);
    assert_eq!(output.status.code(), Some(5), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("upstream overloaded"),
        "{}",
        stderr(&output)
    );
    assert_eq!(skein.count("nodes"), nodes, "a failed turn adds no node");
    let log = skein.json(&["log", "-n", "1"]);
    assert_eq!(log[0]["run"]["status"], "failed");

    let output = skein.run(&["prompt", "-m", "gpt-imaginary", "hi"]);
    assert_eq!(output.status.code(), Some(5));
    assert!(
        stderr(&output).contains("echo"),
        "lists the available models: {}",
        stderr(&output)
    );
}

#[test]
fn export_import_and_verify_round_trip_and_reject_tampering() {
    let skein = Skein::new();
    let first = skein.json(&["prompt", "-s", "sys", "one"]);
    skein.json(&["prompt", "-c", "two"]);
    skein.json(&["fork", first["node"].as_str().unwrap(), "branch"]);
    let export = skein.dir.path().join("export.jsonl");
    skein.ok(&["export", "-o", export.to_str().unwrap()]);

    let other = Skein::new();
    let report = other.json(&["import", export.to_str().unwrap()]);
    assert_eq!(report["nodes_written"], skein.count("nodes"));
    other.ok(&["verify"]);
    assert_eq!(other.ok(&["export"]), skein.ok(&["export"]));

    let tampered = skein.dir.path().join("tampered.jsonl");
    let text = std::fs::read_to_string(&export)
        .unwrap()
        .replacen("\"one\"", "\"uno\"", 1);
    std::fs::write(&tampered, text).unwrap();
    let fresh = Skein::new();
    let output = fresh.run(&["import", tampered.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(6), "{}", stderr(&output));
    assert!(stderr(&output).contains("line"), "{}", stderr(&output));
    assert_eq!(fresh.count("nodes"), 0);

    let conn = skein::Store::open(skein.db())
        .unwrap()
        .raw_connection()
        .unwrap();
    let body = skein::core::encoding::encode_body(&skein::Message::user("forged"), 4096).bytes;
    conn.execute("UPDATE nodes SET body = ?1 WHERE seq = 2", [body])
        .unwrap();
    let output = skein.run(&["verify"]);
    assert_eq!(output.status.code(), Some(6));
    assert!(String::from_utf8_lossy(&output.stdout).contains("id_mismatch"));
}

#[test]
fn version_and_help_work_without_a_database() {
    let output = Command::new(env!("CARGO_BIN_EXE_skein"))
        .args(["--version"])
        .env("SKEIN_DB", "/nonexistent/dir/that/cannot/exist.db")
        .output()
        .unwrap();
    assert!(output.status.success());
    assert!(String::from_utf8_lossy(&output.stdout).starts_with("skein "));
    let output = Command::new(env!("CARGO_BIN_EXE_skein"))
        .arg("bogus")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
}

#[test]
fn the_default_model_is_the_embedded_smollm2() {
    let skein = Skein::new();
    let mut command = skein.command(&[
        "--json",
        "prompt",
        "-s",
        "You are a helpful assistant. Answer in one short sentence.",
        "What is the capital of France?",
    ]);
    command.env_remove("SKEIN_MODEL").env("SKEIN_THREADS", "1");
    let output = command.output().unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    let record: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert!(
        record["text"].as_str().unwrap().contains("Paris"),
        "{record}"
    );
    let log = skein.json(&["log", "-n", "1"]);
    assert_eq!(log[0]["run"]["provider"], "local");
    assert_eq!(log[0]["run"]["model"], "smollm2");
}

#[test]
fn the_default_model_meets_a_schema_on_the_first_attempt() {
    // The local model decodes under a grammar derived from the schema, so
    // the engine validates the first candidate and repairs nothing.
    let skein = Skein::new();
    let schema = r#"{"type": "object", "required": ["trip"], "properties": {"trip": {
        "type": "object", "required": ["city", "days", "items"], "properties": {
            "city": {"type": "string"}, "days": {"type": "integer", "minimum": 1},
            "items": {"type": "array", "minItems": 1, "maxItems": 5, "items": {
                "type": "object", "required": ["name", "count"], "properties": {
                    "name": {"type": "string"}, "count": {"type": "integer", "minimum": 1}}}}}}}}"#;
    let mut command = skein.command(&[
        "--json",
        "prompt",
        "--schema",
        schema,
        "Plan what to pack for a three-day trip to Rome.",
    ]);
    command.env_remove("SKEIN_MODEL").env("SKEIN_THREADS", "1");
    let output = command.output().unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    let record: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(record["finish_reason"], "stop");
    let reply: Value = serde_json::from_str(record["text"].as_str().unwrap()).unwrap();
    assert!(
        reply["trip"]["items"]
            .as_array()
            .is_some_and(|items| !items.is_empty()),
        "{reply}"
    );
    let log = skein.json(&["log", "-n", "1"]);
    let events = log[0]["run"]["events"].as_array().unwrap();
    let attempts = events
        .iter()
        .filter(|e| e["event"] == "attempt_started")
        .count();
    assert_eq!(attempts, 1, "{events:?}");
    assert!(events.iter().all(|e| e["event"] != "repair"), "{events:?}");
}

#[test]
fn models_list_shows_the_embedded_model_and_every_backend() {
    let listing = Skein::new().json(&["models", "list"]);
    assert_eq!(listing["local"][0]["name"], "smollm2");
    let backends: Vec<&str> = listing["backends"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b.as_str().unwrap())
        .collect();
    assert!(
        backends.contains(&"openai:MODEL") && backends.contains(&"scripted:PATH"),
        "{backends:?}"
    );
}

/// How one HTTP provider is reached, replies and rejects a key.
struct Wire {
    model: &'static str,
    key_variable: &'static str,
    url_variable: &'static str,
    /// Appended to the mock server's address to make the base URL.
    url_suffix: &'static str,
    /// The header that carries the key, and its value for `key`.
    key_header: (&'static str, fn(&str) -> String),
    reply: fn() -> Value,
    rejection: fn(&str) -> Value,
}

const WIRES: [Wire; 2] = [
    Wire {
        model: "openai:gpt-test",
        key_variable: "OPENAI_API_KEY",
        url_variable: "OPENAI_BASE_URL",
        url_suffix: "/v1",
        key_header: ("authorization", |key| format!("Bearer {key}")),
        reply: || {
            serde_json::json!({
                "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "gpt-test",
                "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "Hello from the mock."}}],
                "usage": {"prompt_tokens": 5, "completion_tokens": 4, "total_tokens": 9}
            })
        },
        rejection: |key| {
            serde_json::json!({
                "error": {"message": format!("Incorrect API key provided: {key}"), "type": "invalid_request_error"}
            })
        },
    },
    Wire {
        model: "anthropic:claude-test",
        key_variable: "ANTHROPIC_API_KEY",
        url_variable: "ANTHROPIC_BASE_URL",
        url_suffix: "",
        key_header: ("x-api-key", str::to_string),
        reply: || {
            serde_json::json!({
                "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-test",
                "content": [{"type": "text", "text": "Hello from the mock."}],
                "stop_reason": "end_turn", "stop_sequence": null,
                "usage": {"input_tokens": 5, "output_tokens": 4}
            })
        },
        rejection: |key| {
            serde_json::json!({
                "type": "error",
                "error": {"type": "authentication_error", "message": format!("invalid x-api-key: {key}")}
            })
        },
    },
];

/// For each HTTP provider: a turn with a known key, a turn the server
/// rejects while echoing the key back, then a search for the key in the
/// database files (WAL included), the export, the JSON log, and every
/// byte the binary printed, errors included.
#[test]
fn a_known_api_key_never_reaches_the_database_exports_or_output() {
    use wiremock::matchers::method;
    use wiremock::{Mock, MockServer, ResponseTemplate};
    const KEY: &str = "sk-test-SECRET-4242";
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let skein = Skein::new();
    let mut haystacks = Vec::new();
    for wire in &WIRES {
        let serve = |response: ResponseTemplate| {
            runtime.block_on(async {
                let server = MockServer::start().await;
                Mock::given(method("POST"))
                    .respond_with(response)
                    .mount(&server)
                    .await;
                server
            })
        };
        let server = serve(ResponseTemplate::new(200).set_body_json((wire.reply)()));
        let rejecting = serve(ResponseTemplate::new(401).set_body_json((wire.rejection)(KEY)));
        let run = |args: &[&str], server: &MockServer| {
            let mut command = skein.command(args);
            command.env(wire.key_variable, KEY).env(
                wire.url_variable,
                format!("{}{}", server.uri(), wire.url_suffix),
            );
            command.output().unwrap()
        };
        let ok = run(&["--json", "prompt", "-m", wire.model, "hi"], &server);
        assert!(ok.status.success(), "{}: {}", wire.model, stderr(&ok));
        let record: Value = serde_json::from_slice(&ok.stdout).unwrap();
        assert_eq!(record["text"], "Hello from the mock.", "{}", wire.model);
        // The key was really sent, so finding it nowhere below means something.
        let requests = runtime.block_on(server.received_requests()).unwrap();
        let (header, value) = wire.key_header;
        assert_eq!(requests[0].headers[header], value(KEY).as_str());

        let failed = run(&["prompt", "-m", wire.model, "hi again"], &rejecting);
        assert_eq!(failed.status.code(), Some(5), "{}", stderr(&failed));
        assert!(
            stderr(&failed).contains("credentials"),
            "{}: {}",
            wire.model,
            stderr(&failed)
        );
        let runs: Value =
            serde_json::from_slice(&run(&["--json", "log", "-n", "1"], &server).stdout).unwrap();
        assert_eq!(runs[0]["run"]["status"], "failed", "{}", wire.model);
        haystacks.extend([ok.stdout, ok.stderr, failed.stdout, failed.stderr]);
    }
    let export = skein.run(&["export"]);
    let log = skein.run(&["--json", "log", "-n", "10"]);
    assert!(export.status.success() && log.status.success());
    assert_eq!(
        serde_json::from_slice::<Value>(&log.stdout)
            .unwrap()
            .as_array()
            .unwrap()
            .len(),
        4,
        "two turns and two failed runs are logged"
    );
    haystacks.extend([export.stdout, export.stderr, log.stdout, log.stderr]);
    for entry in std::fs::read_dir(skein.dir.path()).unwrap() {
        haystacks.push(std::fs::read(entry.unwrap().path()).unwrap());
    }
    assert!(haystacks.len() >= 13, "the database file was searched too");
    for haystack in haystacks {
        assert!(
            !String::from_utf8_lossy(&haystack).contains(KEY),
            "the key leaked"
        );
    }
}

fn tools_script() -> String {
    format!(
        "scripted:{}",
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data/tools.toml")
            .display()
    )
}

#[test]
fn a_builtin_tool_turns_the_prompt_into_a_recorded_tool_loop() {
    let skein = Skein::new();
    let model = tools_script();
    let reply = skein.json(&[
        "prompt",
        "-m",
        &model,
        "-T",
        "skein_version",
        "which version?",
    ]);
    assert_eq!(
        reply["text"],
        format!("version is {}", env!("CARGO_PKG_VERSION"))
    );
    assert_eq!(reply["chain_status"], "completed");
    assert_eq!(skein.count("runs"), 2, "one run per model call");
    assert_eq!(skein.count("run_tools"), 2, "each run records its tool set");
    // user, assistant (call), tool result, assistant
    assert_eq!(skein.count("nodes"), 4);

    // The conversation keeps its tools by name: -c loops again without -T.
    let again = skein.json(&["prompt", "-c", "and now?"]);
    assert_eq!(
        again["text"],
        format!("version is {}", env!("CARGO_PKG_VERSION"))
    );
    assert_eq!(skein.count("runs"), 4);
}

#[test]
fn the_chain_limit_ends_a_tool_loop_with_a_note() {
    let skein = Skein::new();
    let model = tools_script();
    let output = skein.run(&[
        "prompt",
        "-m",
        &model,
        "-T",
        "skein_version",
        "--chain-limit",
        "1",
        "which version?",
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("limit of 1"),
        "{}",
        stderr(&output)
    );
    assert_eq!(skein.count("runs"), 1);
    let zero = skein.run(&["prompt", "--chain-limit", "0", "-T", "skein_time", "hi"]);
    assert_eq!(zero.status.code(), Some(2), "clap rejects a zero limit");
}

#[test]
fn an_unknown_tool_is_an_error_listing_the_builtin_ones() {
    let skein = Skein::new();
    let output = skein.run(&["prompt", "-T", "teleport", "hi"]);
    assert_eq!(output.status.code(), Some(1));
    let message = stderr(&output);
    assert!(message.contains("teleport"), "{message}");
    assert!(message.contains("skein_time"), "{message}");
    assert_eq!(skein.count("conversations"), 0);
}

#[test]
fn chat_runs_turns_forks_and_replies_from_stdin() {
    let skein = Skein::new();
    let first = skein.json(&["prompt", "one"]);
    let node = first["node"].as_str().unwrap().to_string();
    let mut child = skein
        .command(&["chat"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        let stdin = child.stdin.as_mut().unwrap();
        writeln!(stdin, "!reply {}", &node[..12]).unwrap();
        writeln!(stdin, "two").unwrap();
        writeln!(stdin, "!fork").unwrap();
        writeln!(stdin, "three").unwrap();
        writeln!(stdin, "!nonsense").unwrap();
        writeln!(stdin, "!quit").unwrap();
    }
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("two"), "{stdout}");
    assert!(stdout.contains("three"), "{stdout}");
    assert!(
        stderr(&output).contains("forked at node"),
        "{}",
        stderr(&output)
    );
    assert!(
        stderr(&output).contains("unknown command"),
        "{}",
        stderr(&output)
    );
    // The first conversation grew by one turn; the fork holds the third.
    assert_eq!(skein.count("conversations"), 2);
    assert_eq!(skein.count("nodes"), 6);
    let tree = skein.ok(&["tree"]);
    assert!(tree.contains("three"), "{tree}");
}

#[test]
fn conversations_and_log_filters_list_what_was_asked() {
    let skein = Skein::new();
    skein.json(&["prompt", "--name", "rivers", "tell me about the Danube"]);
    let second = skein.json(&["prompt", "and lakes?"]);
    let cid = second["conversation"].as_str().unwrap().to_string();
    skein.json(&["prompt", "--cid", &cid, "Lake Geneva please"]);

    let conversations = skein.json(&["conversations"]);
    assert_eq!(conversations.as_array().unwrap().len(), 2);
    assert_eq!(conversations[0]["id"], cid, "newest first");
    assert!(skein.ok(&["conversations"]).contains("rivers"));

    let found = skein.json(&["log", "-q", "DANUBE"]);
    assert_eq!(
        found.as_array().unwrap().len(),
        1,
        "case-insensitive search"
    );
    let in_one = skein.json(&["log", "--cid", &cid[..8], "-q", "lake"]);
    assert_eq!(in_one.as_array().unwrap().len(), 2);
    assert_eq!(
        skein.json(&["log", "-m", "echo"]).as_array().unwrap().len(),
        3
    );
    assert!(
        skein
            .json(&["log", "-m", "smollm2"])
            .as_array()
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        skein
            .json(&["log", "-q", "lake", "-n", "1"])
            .as_array()
            .unwrap()
            .len(),
        1
    );
    assert!(
        skein
            .ok(&["log", "-q", "volcano"])
            .contains("no turns match")
    );
}

#[test]
fn the_default_model_is_kept_in_the_configuration_file() {
    let skein = Skein::new();
    let config = skein.dir.path().join("config.toml");
    let path = skein.ok(&["config", "path"]);
    assert_eq!(path.trim(), config.to_str().unwrap());

    // SKEIN_MODEL wins over the file; without it the file decides.
    let run = |args: &[&str]| {
        let mut command = skein.command(args);
        command.env_remove("SKEIN_MODEL");
        command.output().unwrap()
    };
    let shown = run(&["--json", "config", "show"]);
    let shown: Value = serde_json::from_slice(&shown.stdout).unwrap();
    assert_eq!(shown["default_model"]["value"], "smollm2");
    assert_eq!(shown["default_model"]["source"], "built_in");

    let set = run(&["models", "default", "echo"]);
    assert!(set.status.success(), "{}", stderr(&set));
    assert!(
        std::fs::read_to_string(&config)
            .unwrap()
            .contains("default_model = \"echo\"")
    );
    let shown = run(&["--json", "config", "show"]);
    let shown: Value = serde_json::from_slice(&shown.stdout).unwrap();
    assert_eq!(shown["default_model"]["value"], "echo");
    assert_eq!(shown["default_model"]["source"], "config_file");
    let reply = run(&["--json", "prompt", "hello"]);
    let reply: Value = serde_json::from_slice(&reply.stdout).unwrap();
    assert!(
        reply["text"].as_str().unwrap().starts_with("echo:"),
        "{reply}"
    );

    let bogus = run(&["models", "default", "gpt-imaginary"]);
    assert_eq!(bogus.status.code(), Some(1));
    assert!(stderr(&bogus).contains("available"), "{}", stderr(&bogus));

    std::fs::write(&config, "default_modle = 1\n").unwrap();
    let broken = run(&["prompt", "hi"]);
    assert!(!broken.status.success());
    assert!(
        stderr(&broken).contains("config.toml"),
        "{}",
        stderr(&broken)
    );
}

#[test]
fn completions_and_the_man_page_come_from_the_command_definitions() {
    let skein = Skein::new();
    let bash = skein.ok(&["completions", "bash"]);
    assert!(bash.contains("conversations") && bash.contains("--chain-limit"));
    let man = skein.ok(&["man"]);
    assert!(
        man.contains(".TH skein 1"),
        "{}",
        &man[..200.min(man.len())]
    );
    assert!(man.contains("serve"));
}

#[test]
fn a_sourced_turn_with_a_tool_is_recorded_explained_and_rerun_with_its_tool() {
    let skein = Skein::new();
    let model = tools_script();
    let version = format!("version is {}", env!("CARGO_PKG_VERSION"));
    let turn = skein.json(&[
        "prompt",
        "-m",
        &model,
        "--source",
        "notes=release notes: nothing yet",
        "-T",
        "skein_version",
        "which version?",
    ]);
    assert_eq!(turn["text"], version, "{turn}");
    let sources: Vec<&str> = turn["sources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|source| source["id"].as_str().unwrap())
        .collect();
    assert!(
        sources.contains(&"notes") && sources.contains(&"skein_version"),
        "{turn}"
    );
    let node = turn["node"].as_str().unwrap()[..12].to_string();
    assert_eq!(skein.count("runs"), 2, "the tool loop's two model calls");

    let report = skein.ok(&["explain", &node, "--embedder", "lexical"]);
    assert!(report.contains("skein_version"), "{report}");
    // Without the notes, the loop runs again and calls the tool again.
    let without_notes = skein.json(&["rerun", &node, "--ignore", "notes", "--embedder", "lexical"]);
    assert_eq!(without_notes["answers"][0], version, "{without_notes}");
    // Without the tool, the model cannot call it.
    let without_tool = skein.json(&[
        "rerun",
        &node,
        "--ignore",
        "skein_version",
        "--embedder",
        "lexical",
    ]);
    assert_eq!(
        without_tool["answers"][0], "no tools: which version?",
        "{without_tool}"
    );
}

#[test]
fn the_advisor_desk_is_explained_rerun_and_forked_from_the_command_line() {
    let skein = Skein::new();
    let model = format!(
        "scripted:{}",
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../skein-recorded/examples/data/advisor.toml")
            .display()
    );
    skein.json(&[
        "prompt",
        "-m",
        &model,
        "-s",
        "You are an investment advisor. Answer BUY or HOLD when asked.",
        "--source",
        "fundamentals=fundamentals: revenue flat, margins stable",
        "--source",
        "social-sentiment=social-sentiment: bullish, retail chatter at a three-month high",
        "--source",
        "analyst-note=analyst-note: price target unchanged",
        "How is the position looking?",
    ]);
    let buy = skein.json(&["prompt", "-c", "Should we BUY or HOLD this position?"]);
    assert!(buy["text"].as_str().unwrap().starts_with("BUY"), "{buy}");
    let node = buy["node"].as_str().unwrap()[..12].to_string();
    let add = skein.json(&["prompt", "-c", "How much should we allocate?"]);
    assert!(add["text"].as_str().unwrap().starts_with("ADD"), "{add}");

    let report = skein.ok(&["explain", &node, "--embedder", "lexical"]);
    assert!(report.contains("correlational"), "{report}");
    let first = report
        .lines()
        .find(|line| line.starts_with("1 "))
        .unwrap_or_default();
    assert!(first.contains("social-sentiment"), "{report}");

    let unknown = skein.run(&[
        "rerun",
        &node,
        "--ignore",
        "weather",
        "--embedder",
        "lexical",
    ]);
    assert_eq!(unknown.status.code(), Some(1));
    assert!(
        stderr(&unknown).contains("social-sentiment"),
        "lists the removable ones"
    );

    let rerun = skein.json(&[
        "rerun",
        &node,
        "--ignore",
        "social-sentiment",
        "--baseline",
        "--embedder",
        "lexical",
    ]);
    assert_eq!(rerun["verdict"], "confirmed", "{rerun}");
    assert!(rerun["answers"][0].as_str().unwrap().starts_with("HOLD"));
    let rerun_id = rerun["rerun"].as_str().unwrap()[..12].to_string();

    let fork = skein.json(&[
        "fork",
        "--from-rerun",
        &rerun_id,
        "How much should we allocate?",
    ]);
    assert!(fork["text"].as_str().unwrap().starts_with("KEEP"), "{fork}");
    // The original conversation never changed.
    let original = skein.json(&["log", "-q", "allocation", "-n", "5"]);
    assert_eq!(
        original.as_array().unwrap().len(),
        2,
        "ADD and KEEP, each once"
    );
    let tree = skein.ok(&["tree", buy["conversation"].as_str().unwrap()]);
    assert!(tree.contains("confirmed"), "{tree}");
}

#[test]
fn schema_options_and_no_log_shape_a_turn() {
    let skein = Skein::new();
    let unrecorded = skein.json(&["prompt", "--no-log", "just between us"]);
    assert_eq!(unrecorded["recorded"], false);
    assert_eq!(skein.count("nodes"), 0, "--no-log writes nothing");
    assert_eq!(skein.count("conversations"), 0);

    let first = skein.json(&[
        "prompt",
        "-o",
        "temperature",
        "0.2",
        "-o",
        "seed",
        "7",
        "hello",
    ]);
    assert_eq!(first["recorded"], true);
    let runs = skein.json(&["log", "-n", "1"]);
    assert_eq!(runs[0]["run"]["options"]["temperature"], 0.2);
    assert_eq!(runs[0]["run"]["options"]["seed"], 7);
    let bad = skein.run(&["prompt", "-o", "temprature", "0.2", "hi"]);
    assert_eq!(bad.status.code(), Some(1));
    assert!(stderr(&bad).contains("temperature"), "{}", stderr(&bad));

    // -c --no-log continues the history without recording the turn.
    let nodes = skein.count("nodes");
    let aside = skein.json(&["prompt", "-c", "--no-log", "an aside"]);
    assert_eq!(aside["conversation"], first["conversation"]);
    assert_eq!(skein.count("nodes"), nodes);

    // The echo model's reply is not JSON, so a schema fails after repairs,
    // and the failure is recorded as a failed run.
    let schema = r#"{"type": "object", "required": ["answer"]}"#;
    let refused = skein.run(&["prompt", "--schema", schema, "give me JSON"]);
    assert_eq!(refused.status.code(), Some(5), "{}", stderr(&refused));
    assert!(
        stderr(&refused).contains("output contract"),
        "{}",
        stderr(&refused)
    );
    let not_json = skein.run(&["prompt", "--schema", "[1, 2]", "x"]);
    assert_eq!(not_json.status.code(), Some(2), "clap rejects it");
}

#[test]
fn a_reply_cut_at_the_token_limit_says_so() {
    let skein = Skein::new();
    let whole = skein.run(&["--json", "prompt", "hello"]);
    assert!(whole.status.success(), "{}", stderr(&whole));
    let record: Value = serde_json::from_slice(&whole.stdout).unwrap();
    assert_eq!(record["finish_reason"], "stop");
    assert!(!stderr(&whole).contains("cut"), "{}", stderr(&whole));

    let limit = ["-o", "max_tokens", "2"];
    let cut = skein.json(&["prompt", limit[0], limit[1], limit[2], "a longer question"]);
    assert_eq!(cut["finish_reason"], "length");
    assert_eq!(cut["text"].as_str().unwrap().split_whitespace().count(), 2);
    let printed = skein.run(&["prompt", limit[0], limit[1], limit[2], "a longer question"]);
    assert!(printed.status.success(), "{}", stderr(&printed));
    assert!(
        stderr(&printed).contains("reply cut at the 2-token limit; raise it with -o max_tokens N"),
        "{}",
        stderr(&printed)
    );
}

#[test]
fn a_failed_reply_at_a_node_that_heads_nothing_leaves_no_branch_behind() {
    let skein = Skein::new();
    let model = script();
    let first = skein.json(&["prompt", "-m", &model, "hello"]);
    let node = first["node"].as_str().unwrap()[..12].to_string();
    skein.json(&["prompt", "-c", "and then?"]);
    let conversations = skein.count("conversations");
    let failed = skein.run(&["reply", &node, "-m", &model, "fail please"]);
    assert_eq!(failed.status.code(), Some(5), "{}", stderr(&failed));
    assert_eq!(
        skein.count("conversations"),
        conversations,
        "no empty branch"
    );
    let ok = skein.json(&["reply", &node, "-m", &model, "once more"]);
    assert_ne!(ok["conversation"], first["conversation"]);
    assert_eq!(skein.count("conversations"), conversations + 1);
}
