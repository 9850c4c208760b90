//! End-to-end tests of the `skein` binary against temporary databases.

#[path = "mcp.rs"]
mod mcp;
#[path = "tour.rs"]
mod tour;

use serde_json::Value;
use skein_testkit::Cli;
use skein_testkit::cli::stderr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// The built binary in a temporary directory of its own.
fn temp() -> Cli {
    Cli::temp(crate::BIN)
}

/// Rows of the test's database.
pub(crate) trait Rows {
    fn count(&self, table: &str) -> i64;
}

impl Rows for Cli {
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

#[test]
fn prompt_prints_the_record_as_json_and_continue_extends_it() {
    let skein = temp();
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
    let skein = temp();
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
    let skein = temp();
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
    let skein = temp();
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

/// Going on with a stored conversation, or any turn given `-m`, never
/// opens the default model: with the default the embedded SmolLM2 and its
/// file missing (`SKEIN_MODEL_PATH` names none), `reply NODE -m echo`,
/// `prompt --cid X -m echo`, `fork NODE -m echo` and the same without `-m`
/// on a conversation recorded on `echo` all run; only a turn that does
/// use the default fails.
#[test]
fn a_turn_that_does_not_use_the_default_model_never_opens_it() {
    let skein = temp();
    let missing = skein.dir().join("no-such-model.gguf");
    let without_default = |args: &[&str]| {
        let mut command = skein.command(args);
        command
            .env("SKEIN_MODEL", "smollm2")
            .env("SKEIN_MODEL_PATH", &missing);
        command.output().unwrap()
    };
    let ok = |args: &[&str]| -> Value {
        let mut all = vec!["--json"];
        all.extend_from_slice(args);
        let output = without_default(&all);
        assert!(output.status.success(), "{args:?}: {}", stderr(&output));
        serde_json::from_slice(&output.stdout).unwrap()
    };
    // The default is out of reach indeed.
    let failed = without_default(&["prompt", "hello"]);
    assert!(!failed.status.success());
    assert!(
        stderr(&failed).contains("SKEIN_MODEL_PATH"),
        "{}",
        stderr(&failed)
    );

    let first = ok(&["prompt", "-m", "echo", "one"]);
    let cid = first["conversation"].as_str().unwrap().to_string();
    let node = first["node"].as_str().unwrap().to_string();
    let replied = ok(&["reply", &node, "-m", "echo", "two"]);
    assert_eq!(replied["conversation"].as_str().unwrap(), cid);
    let prompted = ok(&["prompt", "--cid", &cid, "-m", "echo", "three"]);
    assert_eq!(prompted["conversation"].as_str().unwrap(), cid);
    // Without -m, the conversation's own model (echo) is the turn's.
    let head = ok(&["prompt", "--cid", &cid, "four"]);
    assert_eq!(head["conversation"].as_str().unwrap(), cid);
    let on = ok(&["reply", head["node"].as_str().unwrap(), "five"]);
    assert_eq!(on["conversation"].as_str().unwrap(), cid);
    // At an inner node: a branch with its owner's settings, or -m's.
    for args in [
        vec!["reply", node.as_str(), "a branch"],
        vec!["reply", node.as_str(), "-m", "echo", "another"],
        vec!["fork", node.as_str(), "a fork"],
        vec!["fork", node.as_str(), "-m", "echo", "another fork"],
    ] {
        let branch = ok(&args);
        assert_ne!(branch["conversation"].as_str().unwrap(), cid, "{args:?}");
    }
    let log = skein.json(&["log", "-n", "1"]);
    assert_eq!(log[0]["run"]["provider"], "echo", "{log}");
}

/// The web view goes on with a stored conversation as `skein reply` does:
/// on the conversation's own model, never opening the default first
/// (issue 46: every page action opened it, and failed where it was not
/// downloaded). The default here is smollm2 at a missing file; a reply at
/// the head of a conversation recorded on `echo`, and a fork with a first
/// turn, run on `echo`.
#[test]
fn the_web_view_goes_on_with_a_stored_conversation_without_the_default_model() {
    let skein = temp();
    let missing = skein.dir().join("no-such-model.gguf");
    let missing = missing.to_str().unwrap();
    let first = skein.json(&["prompt", "-m", "echo", "one"]);
    let node = first["node"].as_str().unwrap();
    let server = crate::serve::Server::start_with_env(
        &skein.db(),
        &[],
        &[("SKEIN_MODEL", "smollm2"), ("SKEIN_MODEL_PATH", missing)],
    );
    let (status, session) = crate::proxy::get(&server.address, "/api/session");
    assert_eq!(status, 200, "{session}");
    let session: Value = serde_json::from_str(&session).unwrap();
    let csrf = session["csrf"].as_str().unwrap();
    for (path, text) in [
        (format!("/api/nodes/{node}/reply"), "two"),
        (format!("/api/nodes/{node}/fork"), "a fork"),
    ] {
        let (status, events) = crate::proxy::post_with(
            &server.address,
            &path,
            &serde_json::json!({ "text": text }).to_string(),
            &[("x-skein-csrf", csrf)],
        );
        assert_eq!(status, 200, "{path}: {events}");
        assert!(events.contains("event: done"), "{path}: {events}");
        assert!(
            events.contains(&format!("echo: \\\"{text}\\\"")),
            "{path}: {events}"
        );
    }
    drop(server);
    let log = skein.json(&["log", "-n", "2"]);
    assert_eq!(log[0]["run"]["provider"], "echo", "{log}");
    assert_eq!(log[1]["run"]["provider"], "echo", "{log}");
}

#[test]
fn fork_creates_a_conversation_at_any_node_and_can_run_a_first_turn() {
    let skein = temp();
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

/// `tree` draws a conversation's family by origin (a fork at a node no
/// conversation heads, a fork of that fork, a reply to an earlier message)
/// and labels a conversation that merely began with the same prompt (the
/// echo model answers it identically, so the two share nodes) as sharing
/// messages, never as a member; asked from the lookalike, the roles swap.
#[test]
fn tree_draws_the_family_by_origin_and_labels_lookalikes_as_sharing() {
    let skein = temp();
    let first = skein.json(&["prompt", "--name", "main", "hello"]);
    let main = first["conversation"].as_str().unwrap().to_string();
    let hi = first["node"].as_str().unwrap().to_string();
    skein.json(&["prompt", "-c", "more?"]);
    let fork = skein.json(&["fork", &hi, "--name", "fork", "other?"]);
    skein.json(&[
        "fork",
        fork["node"].as_str().unwrap(),
        "--name",
        "deeper",
        "deeper?",
    ]);
    let branch = skein.json(&["reply", &hi, "a reply branch?"]);
    let branch = branch["conversation"].as_str().unwrap().to_string();
    let again = skein.json(&["prompt", "--name", "again", "hello"]);
    let again = again["conversation"].as_str().unwrap().to_string();
    assert_eq!(
        again.len(),
        main.len(),
        "two conversations, sharing their first two nodes"
    );

    let tree = skein.ok(&["tree", &main]);
    for member in ["(main)", "(fork)", "(deeper)", &branch[..12]] {
        let line = tree.lines().find(|line| line.contains(member)).unwrap();
        assert!(!line.contains("shares"), "{member} is a member: {tree}");
    }
    let lookalike = tree.lines().find(|line| line.contains("(again)")).unwrap();
    assert!(
        lookalike.contains("[shares messages by content, not forked from this family]"),
        "{tree}"
    );
    assert!(tree.contains("├─ ") && tree.contains("└─ "), "{tree}");

    let names = |list: &Value| -> Vec<String> {
        let mut names: Vec<String> = list
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap_or("-").to_string())
            .collect();
        names.sort();
        names
    };
    let json = skein.json(&["tree", &main]);
    assert_eq!(
        names(&json["conversations"]),
        ["-", "deeper", "fork", "main"],
        "the reply branch has no name"
    );
    assert_eq!(names(&json["shares"]), ["again"]);
    assert_eq!(json["truncated"], false);
    assert_eq!(json["roots"].as_array().unwrap().len(), 1);

    let from_again = skein.json(&["tree", &again]);
    assert_eq!(names(&from_again["conversations"]), ["again"]);
    assert_eq!(
        names(&from_again["shares"]),
        ["-", "deeper", "fork", "main"]
    );
    let text = skein.ok(&["tree", &again]);
    let main_line = text.lines().find(|line| line.contains("(main)")).unwrap();
    assert!(main_line.contains("shares messages"), "{text}");
}

#[test]
fn continuing_before_any_conversation_exits_3_and_says_how_to_start() {
    let skein = temp();
    for args in [
        &["prompt", "-c", "next"][..],
        &["prepare", "-c", "next"][..],
    ] {
        let output = skein.run(args);
        assert_eq!(
            output.status.code(),
            Some(3),
            "{args:?}: {}",
            stderr(&output)
        );
        assert!(
            stderr(&output).contains("start one with `skein prompt TEXT`"),
            "{args:?}: {}",
            stderr(&output)
        );
    }
}

#[test]
fn unknown_and_ambiguous_ids_exit_3_with_a_clear_message() {
    let skein = temp();
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
    let skein = temp();
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
    let conversations = skein.count("conversations");
    let output = skein.run(&["prompt", "-m", &model, "fail please"]);
    assert_eq!(output.status.code(), Some(5), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("upstream overloaded"),
        "{}",
        stderr(&output)
    );
    assert_eq!(
        skein.count("nodes"),
        nodes + 1,
        "a failed turn keeps the user's message, and no reply"
    );
    assert_eq!(skein.count("conversations"), conversations);
    let log = skein.json(&["log", "-n", "1"]);
    assert_eq!(log[0]["run"]["status"], "failed");
    assert_eq!(log[0]["prompt"], "fail please");
    assert_eq!(log[0]["reply"], Value::Null);
    skein.ok(&["verify"]);

    // A failed turn of a conversation: the head stays, the message is its
    // failed run's prompt and can be found and shown.
    let head = skein.json(&["prompt", "-c", "How much should we allocate?"])["node"].clone();
    let output = skein.run(&["prompt", "-c", "fail please, walrus"]);
    assert_eq!(output.status.code(), Some(5), "{}", stderr(&output));
    let again = skein.json(&["prompt", "-c", "How much should we allocate?"]);
    let recent = skein.json(&["log", "-n", "2"]);
    assert_eq!(recent[0]["prompt"], "fail please, walrus", "{recent}");
    assert_eq!(recent[0]["run"]["conversation"], again["conversation"]);
    let text = skein.ok(&["log", "-n", "2"]);
    assert!(text.contains("> fail please, walrus"), "{text}");
    assert!(
        text.contains("! the provider failed (status 503)"),
        "{text}"
    );
    let found = skein.json(&["search", "walrus"]);
    let matches = found["matches"].as_array().unwrap();
    assert_eq!(matches.len(), 1, "{found}");
    let input = matches[0]["node"].as_str().unwrap();
    let shown = skein.json(&["show", input]);
    assert_eq!(
        shown["node"]["parent"], head,
        "after the head it was sent at"
    );
    let shown = skein.ok(&["show", input]);
    assert!(shown.contains("fail please, walrus"), "{shown}");
    let reply = skein.json(&["show", again["node"].as_str().unwrap()]);
    let user = reply["node"]["parent"].as_str().unwrap();
    assert_eq!(
        skein.json(&["show", user])["node"]["parent"],
        head,
        "the head never moved to it"
    );
    skein.ok(&["verify"]);

    let output = skein.run(&["prompt", "-m", "gpt-imaginary", "hi"]);
    assert_eq!(output.status.code(), Some(2), "a usage error");
    assert!(
        stderr(&output).contains("echo"),
        "lists the available models: {}",
        stderr(&output)
    );
}

#[test]
fn export_import_and_verify_round_trip_and_reject_tampering() {
    let skein = temp();
    let first = skein.json(&["prompt", "-s", "sys", "one"]);
    skein.json(&["prompt", "-c", "two"]);
    skein.json(&["fork", first["node"].as_str().unwrap(), "branch"]);
    let export = skein.dir().join("export.jsonl");
    skein.ok(&["export", "-o", export.to_str().unwrap()]);

    let other = temp();
    let report = other.json(&["import", export.to_str().unwrap()]);
    assert_eq!(report["nodes_written"], skein.count("nodes"));
    other.ok(&["verify"]);
    assert_eq!(other.ok(&["export"]), skein.ok(&["export"]));

    let tampered = skein.dir().join("tampered.jsonl");
    let text = std::fs::read_to_string(&export)
        .unwrap()
        .replacen("\"one\"", "\"uno\"", 1);
    std::fs::write(&tampered, text).unwrap();
    let fresh = temp();
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
    let output = Command::new(crate::BIN)
        .args(["--version"])
        .env("SKEIN_DB", "/nonexistent/dir/that/cannot/exist.db")
        .output()
        .unwrap();
    assert!(output.status.success());
    assert!(String::from_utf8_lossy(&output.stdout).starts_with("skein "));
    // One edit away from a command: a typo, not a prompt.
    let output = Command::new(crate::BIN)
        .arg("lgo")
        .env("SKEIN_DB", "/nonexistent/dir/that/cannot/exist.db")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("similar subcommand"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn the_default_model_is_the_embedded_smollm2() {
    let skein = temp();
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
    let skein = temp();
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
    let listing = temp().json(&["models", "list"]);
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
    let skein = temp();
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
    for entry in std::fs::read_dir(skein.dir()).unwrap() {
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
    let skein = temp();
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

/// Schema drift across processes. The built-in tools are fixed, so the
/// changed schema comes from the records: the conversation is exported,
/// its runs rewritten to have offered `skein_version` with an argument (as
/// an older skein's might have), and imported into another database. A
/// later process continuing it warns, although the tool loop's last call
/// is not the one that first offered the tool.
#[test]
fn a_tool_whose_schema_changed_since_a_recorded_turn_warns_in_a_later_process() {
    const WARNING: &str = "warning: tool `skein_version` is offered with a different input schema";
    let skein = temp();
    let model = tools_script();
    let first = skein.json(&[
        "prompt",
        "-m",
        &model,
        "-T",
        "skein_version",
        "which version?",
    ]);
    let cid = first["conversation"].as_str().unwrap().to_string();
    let same = skein.run(&["prompt", "-m", &model, "--cid", &cid, "and now?"]);
    assert!(same.status.success(), "{}", stderr(&same));
    assert!(!stderr(&same).contains("warning"), "{}", stderr(&same));

    let older: Vec<String> = skein
        .ok(&["export"])
        .lines()
        .map(|line| {
            let mut record: Value = serde_json::from_str(line).unwrap();
            if record["kind"] == "run" {
                for tool in record["tools"].as_array_mut().unwrap() {
                    tool["input_schema"] = serde_json::json!({
                        "type": "object",
                        "properties": {"verbose": {"type": "boolean"}}
                    });
                }
            }
            record.to_string()
        })
        .collect();
    let other = temp();
    let file = other.dir().join("older.jsonl");
    std::fs::write(&file, older.join("\n") + "\n").unwrap();
    other.ok(&["import", file.to_str().unwrap()]);

    let output = other.run(&["prompt", "-m", &model, "--cid", &cid, "and today?"]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(
        String::from_utf8_lossy(&output.stdout).trim(),
        format!("version is {}", env!("CARGO_PKG_VERSION")),
        "a loop of two model calls"
    );
    assert_eq!(
        stderr(&output).matches(WARNING).count(),
        1,
        "{}",
        stderr(&output)
    );
    // The turn offered today's schema: the next one has nothing to warn of.
    let next = other.run(&["prompt", "-m", &model, "--cid", &cid, "and again?"]);
    assert!(next.status.success(), "{}", stderr(&next));
    assert!(!stderr(&next).contains("warning"), "{}", stderr(&next));
}

#[test]
fn the_chain_limit_ends_a_tool_loop_with_a_note() {
    let skein = temp();
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
    let skein = temp();
    let output = skein.run(&["prompt", "-T", "teleport", "hi"]);
    assert_eq!(output.status.code(), Some(2), "a usage error");
    let message = stderr(&output);
    assert!(message.contains("teleport"), "{message}");
    assert!(message.contains("skein_time"), "{message}");
    assert_eq!(skein.count("conversations"), 0);
}

#[test]
fn chat_runs_turns_forks_and_replies_from_stdin() {
    let skein = temp();
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
        // A fork waiting for its first turn is the branch already.
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
    assert!(
        stderr(&output).contains("is already a new branch"),
        "{}",
        stderr(&output)
    );
    // The first conversation grew by one turn; the fork holds the third,
    // and its origin is the conversation it was forked from.
    assert_eq!(skein.count("conversations"), 2);
    assert_eq!(skein.count("nodes"), 6);
    let conversations = skein.json(&["conversations"]);
    let conversations = conversations.as_array().unwrap();
    let fork = conversations
        .iter()
        .find(|c| !c["origin"].is_null())
        .unwrap();
    assert!(
        conversations
            .iter()
            .any(|c| c["id"] == fork["origin"]["conversation"]),
        "{conversations:?}"
    );
    let tree = skein.ok(&["tree"]);
    assert!(tree.contains("three"), "{tree}");
}

#[test]
fn conversations_and_log_filters_list_what_was_asked() {
    let skein = temp();
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
    // Words, not substrings: `lake` is not `lakes`, `lake*` is.
    let in_one = skein.json(&["log", "--cid", &cid[..8], "-q", "lake"]);
    assert_eq!(in_one.as_array().unwrap().len(), 1);
    let in_one = skein.json(&["log", "--cid", &cid[..8], "-q", "lake*"]);
    assert_eq!(in_one.as_array().unwrap().len(), 2);
    let log_text = skein.ok(&["log", "-q", "danube"]);
    assert!(
        log_text.contains("> tell me about the Danube"),
        "{log_text}"
    );
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
    let unclosed = skein.run(&["log", "-q", "\"lake"]);
    assert!(!unclosed.status.success());
    assert!(
        stderr(&unclosed).contains("unclosed quote"),
        "{}",
        stderr(&unclosed)
    );
}

#[test]
fn search_finds_messages_by_their_words_with_their_conversations() {
    let skein = temp();
    let first = skein.json(&[
        "prompt",
        "--name",
        "rivers",
        "tell me about the Danube delta",
    ]);
    let rivers = first["conversation"].as_str().unwrap().to_string();
    let other = skein.json(&["prompt", "the Danube in winter"]);
    let winter = other["conversation"].as_str().unwrap().to_string();
    skein.json(&["prompt", "--cid", &winter, "and the Rhine?"]);

    let all = skein.json(&["search", "danube", "-n", "50"]);
    let matches = all["matches"].as_array().unwrap();
    let users: Vec<_> = matches.iter().filter(|m| m["role"] == "user").collect();
    assert_eq!(users.len(), 2, "{all}");
    assert_eq!(
        users[0]["conversations"][0]["id"],
        winter.as_str(),
        "newest first"
    );
    assert_eq!(users[1]["conversations"][0]["name"], "rivers");
    assert!(
        users[1]["snippet"]
            .as_str()
            .unwrap()
            .contains("Danube delta")
    );
    assert_eq!(all["truncated"], false);

    let text = skein.ok(&["search", "delta", "--role", "user"]);
    assert!(text.contains("(rivers)"), "{text}");
    assert!(text.contains("tell me about the Danube delta"), "{text}");
    assert!(text.contains(&rivers[..12]), "{text}");

    let in_winter = skein.json(&["search", "danube", "--cid", &winter[..8], "--role", "user"]);
    assert_eq!(in_winter["matches"].as_array().unwrap().len(), 1);
    let one = skein.json(&["search", "danube", "-n", "1"]);
    assert_eq!(one["matches"].as_array().unwrap().len(), 1);
    assert_eq!(one["truncated"], true);

    assert!(
        skein
            .ok(&["search", "volcano"])
            .contains("no messages match")
    );
    for (bad, says) in [("\"open", "unclosed quote"), ("*", "no words")] {
        let output = skein.run(&["search", bad]);
        assert!(!output.status.success(), "{bad}");
        assert!(stderr(&output).contains(says), "{bad}: {}", stderr(&output));
    }
}

#[test]
fn the_default_model_is_kept_in_the_configuration_file() {
    let skein = temp();
    let config = skein.dir().join("config.toml");
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

    // An unknown model name is exit code 2, a usage error, as everywhere
    // (docs/cli.md).
    let bogus = run(&["models", "default", "gpt-imaginary"]);
    assert_eq!(bogus.status.code(), Some(2), "{}", stderr(&bogus));
    assert!(
        stderr(&bogus).contains("did you mean `openai:gpt-imaginary`? Available"),
        "{}",
        stderr(&bogus)
    );
    let bogus = run(&["models", "default", "bogus"]);
    assert_eq!(bogus.status.code(), Some(2), "{}", stderr(&bogus));

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
    let skein = temp();
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
    let skein = temp();
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

/// A source keeps the kind it was declared with on every turn of its
/// conversation: continued with `--source` again, or without it (the turn
/// only carries the source's tag), by `-c` or `--cid`.
#[test]
fn a_source_keeps_its_kind_on_every_turn_of_its_conversation() {
    let skein = temp();
    let hotel = skein.dir().join("hotel.txt");
    std::fs::write(&hotel, "Hotel Bellevue: check-in from 15:00").unwrap();
    let source = format!("hotel=@{}", hotel.display());
    let first = skein.json(&["prompt", "--source", &source, "When is check-in?"]);
    assert_eq!(first["sources"][0]["kind"], "fact", "{first}");
    let cid = first["conversation"].as_str().unwrap().to_string();
    let plain = skein.json(&["prompt", "-c", "And check-out?"]);
    let by_cid = skein.json(&["prompt", "--cid", &cid, "Any parking?"]);
    let again = skein.json(&["prompt", "-c", "--source", &source, "Breakfast?"]);
    assert_eq!(again["sources"][0]["kind"], "fact", "{again}");
    for turn in [&first, &plain, &by_cid, &again] {
        assert_eq!(turn["conversation"], cid.as_str(), "{turn}");
        let node = turn["node"].as_str().unwrap();
        let report = skein.json(&["explain", node, "--embedder", "lexical"]);
        let kinds: Vec<(&str, &str)> = report["suspects"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| (s["id"].as_str().unwrap(), s["kind"].as_str().unwrap()))
            .collect();
        assert_eq!(
            kinds,
            [("hotel", "fact")],
            "turn {}: {report}",
            report["turn"]
        );
    }
}

#[test]
fn the_advisor_desk_is_explained_rerun_and_forked_from_the_command_line() {
    let skein = temp();
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
    let skein = temp();
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
    assert_eq!(bad.status.code(), Some(2), "a usage error");
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
    let not_object = skein.run(&["prompt", "--schema", "[1, 2]", "x"]);
    assert_eq!(not_object.status.code(), Some(2), "a usage error");
    assert_eq!(
        stderr(&not_object),
        "error: --schema `[1, 2]` is not a JSON Schema: a schema is a JSON object, `{...}`\n"
    );
}

#[test]
fn a_reply_cut_at_the_token_limit_says_so() {
    let skein = temp();
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
    let skein = temp();
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

/// `config show` names the database in force without its password, from
/// `--db`, `SKEIN_DB` or the configuration file, in text and JSON, in the
/// URL's credentials or as a `password=` parameter.
#[test]
fn config_show_never_prints_a_postgres_password() {
    let skein = temp();
    let config = skein.dir().join("config.toml");
    let urls = [
        (
            "postgres://me:s3cr3t-pw@127.0.0.1:1/skein",
            "postgres://me:***@127.0.0.1:1/skein",
        ),
        (
            "postgresql://me@127.0.0.1:1/skein?password=s3cr3t-pw",
            "postgresql://me@127.0.0.1:1/skein?password=***",
        ),
    ];
    for (url, shown) in urls {
        for source in ["flag", "environment", "config_file"] {
            for json in [false, true] {
                let mut command = Command::new(crate::BIN);
                command.env_remove("SKEIN_DB").env("SKEIN_CONFIG", &config);
                std::fs::write(&config, "").unwrap();
                match source {
                    "flag" => {
                        command.args(["--db", url]);
                    }
                    "environment" => {
                        command.env("SKEIN_DB", url);
                    }
                    _ => std::fs::write(&config, format!("db = \"{url}\"\n")).unwrap(),
                }
                if json {
                    command.arg("--json");
                }
                let output = command.args(["config", "show"]).output().unwrap();
                let (out, err) = (String::from_utf8_lossy(&output.stdout), stderr(&output));
                assert!(output.status.success(), "{source}: {err}");
                assert!(
                    !out.contains("s3cr3t") && !err.contains("s3cr3t"),
                    "{source}: {out}{err}"
                );
                assert!(out.contains(shown), "{source} (json: {json}): {out}");
                if json {
                    let value: Value = serde_json::from_str(&out).unwrap();
                    assert_eq!(value["db"]["value"], shown);
                    assert_eq!(value["db"]["source"], source);
                }
            }
        }
    }
}

/// The names in a directory, sorted.
fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// `export -o`: a regular file is replaced whole through a temporary file
/// of its own (an unrelated `X.partial` survives, a failed export leaves
/// nothing behind and the old file as it was); a directory is refused; a
/// device or pipe is written through, so `-o /dev/stdout` works and
/// `-o /dev/full` fails with the device left in place.
#[test]
fn export_to_a_path_replaces_files_whole_and_writes_through_devices() {
    let skein = temp();
    skein.json(&["prompt", "one"]);
    skein.json(&["prompt", "-c", "two"]);
    let expected = skein.ok(&["export"]);
    let out = tempfile::tempdir().unwrap();
    let target = out.path().join("export.jsonl");
    let unrelated = out.path().join("export.partial");
    std::fs::write(&unrelated, "someone else's file").unwrap();
    std::fs::write(&target, "an older export").unwrap();
    skein.ok(&["export", "-o", target.to_str().unwrap()]);
    assert_eq!(std::fs::read_to_string(&target).unwrap(), expected);
    assert_eq!(
        std::fs::read_to_string(&unrelated).unwrap(),
        "someone else's file"
    );
    assert_eq!(listing(out.path()), ["export.jsonl", "export.partial"]);

    // A directory is refused, and nothing is left beside it.
    let dir = out.path().join("a-directory");
    std::fs::create_dir(&dir).unwrap();
    let output = skein.run(&["export", "-o", dir.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stderr(&output).contains("is a directory"),
        "{}",
        stderr(&output)
    );
    assert_eq!(
        listing(out.path()),
        ["a-directory", "export.jsonl", "export.partial"]
    );
    assert!(listing(&dir).is_empty());

    // Devices and pipes are written through.
    assert_eq!(skein.ok(&["export", "-o", "/dev/stdout"]), expected);
    if Path::new("/dev/full").exists() {
        let output = skein.run(&["export", "-o", "/dev/full"]);
        assert_eq!(output.status.code(), Some(1));
        // The write failed, not a stored record.
        let said = stderr(&output);
        assert!(
            said.starts_with("error: cannot write the export to /dev/full: ")
                && said.contains("No space left"),
            "{said}"
        );
        assert!(!said.contains("invalid JSON"), "{said}");
        use std::os::unix::fs::FileTypeExt;
        let kind = std::fs::symlink_metadata("/dev/full").unwrap().file_type();
        assert!(kind.is_char_device(), "/dev/full is no longer a device");
    }

    // An export that fails midway (a node that cannot be decoded) leaves
    // the old file as it was and no temporary file.
    let conn = rusqlite::Connection::open(skein.db()).unwrap();
    conn.execute("UPDATE nodes SET body = x'ff' WHERE seq = 2", [])
        .unwrap();
    drop(conn);
    let output = skein.run(&["export", "-o", target.to_str().unwrap()]);
    assert!(!output.status.success());
    assert!(
        stderr(&output).contains("cannot write the export"),
        "{}",
        stderr(&output)
    );
    assert_eq!(std::fs::read_to_string(&target).unwrap(), expected);
    let fresh = out.path().join("fresh.jsonl");
    assert!(
        !skein
            .run(&["export", "-o", fresh.to_str().unwrap()])
            .status
            .success()
    );
    assert_eq!(
        listing(out.path()),
        ["a-directory", "export.jsonl", "export.partial"]
    );
}

/// Three exports of three different databases to one path at once, five
/// times: each leaves a whole file, so the path always holds exactly one
/// of the three exports and no temporary file remains.
#[test]
fn concurrent_exports_to_one_path_each_write_a_whole_file() {
    let databases: Vec<Cli> = (0..3)
        .map(|i| {
            let skein = temp();
            // Long enough that the exports' writes overlap (from stdin: too
            // long for an argument).
            let mut child = skein
                .command(&["prompt"])
                .stdin(Stdio::piped())
                .stdout(Stdio::null())
                .spawn()
                .unwrap();
            let text = format!("{i}").repeat(300_000);
            std::io::Write::write_all(&mut child.stdin.take().unwrap(), text.as_bytes()).unwrap();
            assert!(child.wait().unwrap().success());
            skein
        })
        .collect();
    let expected: Vec<String> = databases
        .iter()
        .map(|skein| skein.ok(&["export"]))
        .collect();
    let out = tempfile::tempdir().unwrap();
    let target = out.path().join("same.jsonl");
    for round in 0..5 {
        let children: Vec<_> = databases
            .iter()
            .map(|skein| {
                skein
                    .command(&["export", "-o", target.to_str().unwrap()])
                    .stdout(Stdio::null())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for child in children {
            let output = child.wait_with_output().unwrap();
            assert!(
                output.status.success(),
                "round {round}: {}",
                stderr(&output)
            );
        }
        let written = std::fs::read_to_string(&target).unwrap();
        assert!(
            expected.contains(&written),
            "round {round}: the file is none of the exports ({} bytes)",
            written.len()
        );
        assert_eq!(listing(out.path()), ["same.jsonl"], "round {round}");
    }
}

/// Commands that only read, or work on what is recorded, fail with exit
/// code 3 on a database path that does not exist, and create nothing.
#[test]
fn read_commands_on_a_missing_database_fail_and_create_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("mistyped/sub/skein.db");
    let export = dir.path().join("export.jsonl");
    let commands: [&[&str]; 12] = [
        &["log"],
        &["log", "--cid", "abc"],
        &["tree"],
        &["show", "abc"],
        &["conversations"],
        &["export"],
        &["export", "-o", export.to_str().unwrap()],
        &["verify"],
        &["serve", "--bind", "127.0.0.1:0"],
        &["explain", "abc"],
        &["reply", "abc", "hello"],
        &["fork", "abc"],
    ];
    for args in commands {
        let output = Cli::new(crate::BIN, &missing)
            .config(dir.path().join("config.toml"))
            .run(args);
        assert_eq!(
            output.status.code(),
            Some(3),
            "{args:?}: {}",
            stderr(&output)
        );
        assert!(
            stderr(&output).contains("there is no database at"),
            "{args:?}: {}",
            stderr(&output)
        );
        assert!(
            stderr(&output).contains("--db"),
            "{args:?}: {}",
            stderr(&output)
        );
        assert!(
            listing(dir.path()).is_empty(),
            "{args:?} created {:?}",
            listing(dir.path())
        );
    }
}

/// Another application's SQLite file, or a file that is not SQLite at all,
/// given as the database is refused by every command, byte for byte
/// untouched, with nothing created beside it.
#[test]
fn a_file_that_is_not_a_skein_database_is_refused_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let foreign = dir.path().join("app.sqlite");
    let conn = rusqlite::Connection::open(&foreign).unwrap();
    conn.execute_batch(
        "CREATE TABLE notes (id INTEGER PRIMARY KEY, text TEXT);
         INSERT INTO notes VALUES (1, 'mine'); PRAGMA user_version = 7;",
    )
    .unwrap();
    drop(conn);
    let text = dir.path().join("notes.txt");
    std::fs::write(&text, "shopping list: milk, bread, a much longer line\n").unwrap();
    let export = temp();
    export.json(&["prompt", "hello"]);
    let file = export.dir().join("export.jsonl");
    export.ok(&["export", "-o", file.to_str().unwrap()]);
    for db in [&foreign, &text] {
        let before = std::fs::read(db).unwrap();
        let commands: [&[&str]; 7] = [
            &["log"],
            &["conversations"],
            &["verify"],
            &["export"],
            &["prompt", "hi"],
            &["import", file.to_str().unwrap()],
            &["reply", "abc", "hi"],
        ];
        for args in commands {
            let output = Cli::new(crate::BIN, db)
                .config(dir.path().join("config.toml"))
                .run(args);
            assert_eq!(
                output.status.code(),
                Some(1),
                "{args:?}: {}",
                stderr(&output)
            );
            assert!(
                stderr(&output).contains("is not a skein database")
                    && stderr(&output).contains("left untouched"),
                "{args:?}: {}",
                stderr(&output)
            );
            assert_eq!(
                std::fs::read(db).unwrap(),
                before,
                "{args:?} changed {}",
                db.display()
            );
        }
    }
    assert_eq!(listing(dir.path()), ["app.sqlite", "notes.txt"]);
}

/// An export larger than its write buffer onto a full disk: the error is
/// the write's (no space left), not a stored record's JSON.
#[test]
fn an_export_onto_a_full_disk_says_the_disk_is_full() {
    if !Path::new("/dev/full").exists() {
        eprintln!("SKIPPED an_export_onto_a_full_disk_says_the_disk_is_full: no /dev/full");
        return;
    }
    let skein = temp();
    skein.json(&["prompt", "-m", "echo", &"many words ".repeat(4000)]);
    let output = skein.run(&["export", "-o", "/dev/full"]);
    assert_eq!(output.status.code(), Some(1));
    let said = stderr(&output);
    assert!(
        said.starts_with("error: cannot write the export to /dev/full: i/o error: No space left"),
        "{said}"
    );
    assert!(!said.contains("invalid JSON"), "{said}");
}

/// The reading commands work on a database nobody can write: on a
/// read-only bind mount (in a mount namespace of the test's own, since the
/// tests run as root, for whom `chmod 444` blocks nothing), without `-wal`
/// and `-shm` files (opened `immutable`) and with them.
#[test]
fn read_commands_work_on_a_read_only_mount() {
    let skein = temp();
    let first = skein.json(&["prompt", "one"]);
    skein.json(&["prompt", "-c", "two"]);
    let expected = skein.ok(&["export"]);
    let dir = skein.dir().to_str().unwrap().to_string();
    let outside = tempfile::tempdir().unwrap();
    let exported = outside.path().join("export.jsonl");
    // The writers are gone: their last connection removed the WAL files,
    // and `export` (a reader) may have left them again; clear them both
    // ways across the two rounds below.
    for round in ["without WAL files", "with WAL files"] {
        if round == "without WAL files" {
            for suffix in ["-wal", "-shm"] {
                let _ = std::fs::remove_file(format!("{}{suffix}", skein.db().display()));
            }
        } else {
            skein.ok(&["log"]);
            assert!(Path::new(&format!("{}-shm", skein.db().display())).exists());
        }
        let read_only = |args: &[&str]| {
            // `mount` fails without the right to make a mount namespace;
            // then the test cannot run here.
            let script = format!(
                "mount --bind {dir} {dir} && mount -o remount,bind,ro {dir} || exit 99; \
                 touch {dir}/probe 2>/dev/null && exit 98; exec \"$@\""
            );
            let mut command = Command::new("unshare");
            command
                .args(["-rm", "sh", "-c", &script, "sh", crate::BIN, "--db"])
                .arg(skein.db())
                .args(args)
                .env_remove("SKEIN_DB")
                .env("SKEIN_CONFIG", skein.dir().join("config.toml"))
                .stdin(Stdio::null());
            command.output().ok()
        };
        let Some(probe) = read_only(&["--version"]).filter(|o| o.status.code() == Some(0)) else {
            eprintln!(
                "SKIPPED read_commands_work_on_a_read_only_mount: cannot make a read-only mount here"
            );
            return;
        };
        assert!(probe.status.success());
        let node = first["node"].as_str().unwrap();
        let conversation = first["conversation"].as_str().unwrap();
        let commands: [&[&str]; 8] = [
            &["log"],
            &["log", "--cid", conversation],
            &["verify"],
            &["export"],
            &["export", "-o", exported.to_str().unwrap()],
            &["show", node],
            &["tree"],
            &["conversations"],
        ];
        for args in commands {
            let output = read_only(args).unwrap();
            assert!(
                output.status.success(),
                "{round}: {args:?}: {}",
                stderr(&output)
            );
            if args == ["export"] {
                assert_eq!(String::from_utf8_lossy(&output.stdout), expected);
            }
        }
        assert_eq!(std::fs::read_to_string(&exported).unwrap(), expected);
        // Writing is refused when the database is opened, saying it is
        // read-only and why (leftover WAL files, which make reading work,
        // do not pass it off as writable), and no turn is run.
        let output = read_only(&["prompt", "-c", "three"]).unwrap();
        assert!(
            !output.status.success(),
            "{round}: a write succeeded on a read-only mount"
        );
        let error = stderr(&output);
        assert!(
            error.contains(&format!(
                "the database {} is read-only here ({} is not writable: Read-only file system",
                skein.db().display(),
                skein.db().display()
            )),
            "{round}: {error}"
        );
        assert!(output.stdout.is_empty(), "{round}: a turn ran");
    }
}

/// Plain `skein serve` on a database nobody can write (a read-only bind
/// mount, as above) serves it read-only, as `--read-only` does, with a
/// note saying so and why, instead of failing; with the `-wal` and `-shm`
/// files a reader left too (which make reading work, and once had it
/// served as writable, its first write failing).
#[test]
fn plain_serve_serves_a_database_it_cannot_write_read_only() {
    let skein = temp();
    skein.json(&["prompt", "one"]);
    for round in ["without WAL files", "with WAL files"] {
        if round == "with WAL files" {
            skein.ok(&["log"]);
            assert!(Path::new(&format!("{}-shm", skein.db().display())).exists());
        }
        if !serve_read_only_mount(&skein, round) {
            return;
        }
    }
}

/// `skein serve` on `skein`'s database through a read-only bind mount;
/// `false` when no such mount can be made here (the test is skipped).
fn serve_read_only_mount(skein: &Cli, round: &str) -> bool {
    let dir = skein.dir().to_str().unwrap().to_string();
    let script = format!(
        "mount --bind {dir} {dir} && mount -o remount,bind,ro {dir} || exit 99; \
         touch {dir}/probe 2>/dev/null && exit 98; timeout -s INT 4 \"$@\"; exit 0"
    );
    let output = Command::new("unshare")
        .args(["-rm", "sh", "-c", &script, "sh", crate::BIN, "--db"])
        .arg(skein.db())
        .args(["serve", "--bind", "127.0.0.1:0"])
        .env_remove("SKEIN_DB")
        .env("SKEIN_CONFIG", skein.dir().join("config.toml"))
        .stdin(Stdio::null())
        .output();
    let Some(output) = output.ok().filter(|o| o.status.code() == Some(0)) else {
        eprintln!(
            "SKIPPED plain_serve_serves_a_database_it_cannot_write_read_only: cannot make a \
             read-only mount here"
        );
        return false;
    };
    let said = stderr(&output);
    assert!(
        said.contains("serving it read-only, as --read-only does"),
        "{round}: {said}"
    );
    assert!(
        said.contains("is not writable: Read-only file system"),
        "{round}: {said}"
    );
    assert!(
        said.contains("(read-only; Ctrl-C stops)"),
        "{round}: {said}"
    );
    true
}

/// `import` reads an endless input (`/dev/zero`) only up to the line limit,
/// then stops with exit code 6 and an error that names the limit and how
/// to raise it.
#[test]
fn importing_an_endless_line_stops_at_the_limit() {
    let skein = temp();
    for (args, limit) in [(vec![], "64 MiB"), (vec!["--max-line-mib", "2"], "2 MiB")] {
        let mut all = vec!["import", "/dev/zero"];
        all.extend(args);
        let output = skein.run(&all);
        assert_eq!(output.status.code(), Some(6), "{}", stderr(&output));
        let message = stderr(&output);
        assert!(
            message.contains(&format!("the limit of {limit} per line")),
            "{message}"
        );
        assert!(message.contains("--max-line-mib"), "{message}");
        assert!(message.contains("nothing was imported"), "{message}");
    }
    let output = skein
        .command(&["import", "/dev/zero"])
        .env("SKEIN_IMPORT_MAX_LINE_MIB", "1")
        .output()
        .unwrap();
    assert!(
        stderr(&output).contains("the limit of 1 MiB"),
        "{}",
        stderr(&output)
    );
}

/// The scripted model of a test data file.
fn scripted(file: &str) -> String {
    format!(
        "scripted:{}",
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data")
            .join(file)
            .display()
    )
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// A loopback port nothing listens on.
fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

#[test]
fn failures_say_each_cause_once_and_what_to_do() {
    let skein = temp();
    let mut command = skein.command(&["prompt", "-m", "openai:gpt-test", "hi"]);
    command.env("OPENAI_API_KEY", "sk-test").env(
        "OPENAI_BASE_URL",
        format!("http://127.0.0.1:{}/v1", closed_port()),
    );
    let unreachable = command.output().unwrap();
    assert_eq!(unreachable.status.code(), Some(5));
    assert_eq!(stdout(&unreachable), "", "no blank line before the error");
    let message = stderr(&unreachable);
    let (head, tail) = message.split_once("): ").unwrap();
    assert!(
        head.starts_with("error: generation failed (run "),
        "{message}"
    );
    assert_eq!(
        tail,
        "could not reach the provider: error sending request: client error (Connect): \
         tcp connect error: Connection refused (os error 111)\n"
    );

    let unknown = skein.run(&["prompt", "-m", "gpt-4o", "hi"]);
    assert_eq!(unknown.status.code(), Some(2));
    assert_eq!(
        stderr(&unknown),
        "error: unknown model `gpt-4o`; did you mean `openai:gpt-4o`? Available: smollm2, \
         local:PATH, openai:MODEL, anthropic:MODEL, echo, scripted:PATH\n"
    );
    let claude = skein.run(&["prompt", "-m", "claude-3-5-sonnet", "hi"]);
    assert!(
        stderr(&claude).contains("did you mean `anthropic:claude-3-5-sonnet`?"),
        "{}",
        stderr(&claude)
    );

    let missing = skein.run(&["prompt", "-m", "local:/nonexistent/model.gguf", "hi"]);
    assert_eq!(missing.status.code(), Some(5));
    assert_eq!(
        stderr(&missing),
        "error: no model file at /nonexistent/model.gguf: `local:PATH` needs the path of a \
         GGUF model file: check it\n"
    );

    let mut command = skein.command(&["prompt", "-m", "openai:gpt-4o", "hi"]);
    command
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL");
    let no_key = command.output().unwrap();
    assert_eq!(
        stderr(&no_key),
        "error: the environment variable OPENAI_API_KEY is not set: set it to your API key \
         (for example `export OPENAI_API_KEY=...`), or save the key with `skein keys set openai`\n"
    );
    // Only the call that reached for the provider failed as a model call:
    // it keeps its run and its message; the others stopped before any call.
    assert_eq!(skein.count("runs"), 1);
    assert_eq!(skein.count("nodes"), 1);
}

#[test]
fn json_durations_are_milliseconds() {
    let skein = temp();
    skein.json(&["prompt", "hello"]);
    let log = skein.json(&["log", "-n", "1"]);
    let events = log[0]["run"]["events"].as_array().unwrap();
    let admitted = events
        .iter()
        .find(|event| event["event"] == "admitted")
        .unwrap_or_else(|| panic!("{events:?}"));
    assert!(admitted["waited_ms"].is_number(), "{admitted}");
    assert!(
        !skein.ok(&["--json", "log"]).contains("nanos"),
        "no Rust Duration anywhere"
    );
}

#[test]
fn closed_pipes_end_quietly_and_full_disks_are_errors() {
    let skein = temp();
    // A message far larger than a pipe's buffer, so writing it must meet
    // the closed end.
    let big = "many words here ".repeat(20_000);
    let record: Value = serde_json::from_slice(
        &skein
            .run_with_stdin(&["--json", "prompt"], big.as_bytes())
            .stdout,
    )
    .unwrap();
    let cid = record["conversation"].as_str().unwrap().to_string();
    let node = record["node"].as_str().unwrap().to_string();
    let lines: String = (0..1500).map(|i| format!("line {i}\n")).collect();
    assert!(
        skein
            .run_with_stdin(&["chat", "-c"], lines.as_bytes())
            .status
            .success()
    );
    for args in [
        &["log", "--cid", cid.as_str()][..],
        &["show", node.as_str()],
        &["tree", "--limit", "5000"],
        &["export"],
    ] {
        let mut child = skein
            .command(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut first = [0u8; 10];
        std::io::Read::read_exact(child.stdout.as_mut().unwrap(), &mut first).unwrap();
        drop(child.stdout.take());
        let output = child.wait_with_output().unwrap();
        assert_eq!(
            output.status.code(),
            Some(0),
            "{args:?}: {}",
            stderr(&output)
        );
        assert_eq!(stderr(&output), "", "{args:?}");
    }

    let full = || {
        std::fs::File::options()
            .write(true)
            .open("/dev/full")
            .unwrap()
    };
    let no_space = "error: cannot write the output: no space left on the device (the disk or the output is full)\n";
    for args in [&["log"][..], &["export"], &["tree"], &["conversations"]] {
        let output = skein.command(args).stdout(full()).output().unwrap();
        assert_eq!(output.status.code(), Some(1), "{args:?}");
        assert_eq!(stderr(&output), no_space, "{args:?}");
    }
    let nodes = skein.count("nodes");
    let output = skein
        .command(&["prompt", "-c", "one more"])
        .stdout(full())
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let message = stderr(&output);
    assert!(
        message.starts_with("conversation "),
        "where the turn is: {message}"
    );
    assert!(message.ends_with(no_space), "{message}");
    assert_eq!(skein.count("nodes"), nodes + 2, "the turn is recorded");
}

#[test]
fn command_line_inputs_are_capped_and_checked() {
    let skein = temp();
    // Too large an input is exit code 1; a value that is wrong, a usage
    // error, exit code 2.
    let refused_with = |code: i32, args: &[&str], expected: &str| {
        let output = skein.run(args);
        assert_eq!(output.status.code(), Some(code), "{args:?}");
        assert_eq!(stderr(&output), format!("error: {expected}\n"), "{args:?}");
    };
    let refused = |args: &[&str], expected: &str| refused_with(1, args, expected);
    let wrong = |args: &[&str], expected: &str| refused_with(2, args, expected);
    refused(
        &["prompt", "--source", "notes=@/dev/zero", "hi"],
        "the --source file /dev/zero is larger than 16 MiB (the --max-input limit); raise it \
         with --max-input BYTES (or SKEIN_MAX_INPUT) if you mean it",
    );
    refused(
        &["prompt", "--schema", "/dev/zero", "hi"],
        "the --schema file /dev/zero is larger than 16 MiB (the --max-input limit); raise it \
         with --max-input BYTES (or SKEIN_MAX_INPUT) if you mean it",
    );
    wrong(
        &["prompt", "--schema", "true", "hi"],
        "--schema `true` is not a JSON Schema: a schema is a JSON object, `{...}`",
    );
    let neither = skein.run(&["prompt", "--schema", "answer.json", "hi"]);
    assert!(
        stderr(&neither).starts_with("error: --schema `answer.json` is neither JSON ("),
        "{}",
        stderr(&neither)
    );
    wrong(
        &["prompt", "-o", "temperature", "-5", "hi"],
        "bad -o option: temperature -5 is out of range: use a number from 0 to 2",
    );
    wrong(
        &["prompt", "-o", "top_p", "7", "hi"],
        "bad -o option: top_p 7 is out of range: use a number above 0 and at most 1",
    );
    wrong(
        &["prompt", "-o", "max_tokens", "0", "hi"],
        "bad -o option: max_tokens 0 would allow no reply at all: use at least 1",
    );
    let stdin = skein.run_with_stdin(&["--max-input", "1K", "prompt"], &[b'a'; 2048]);
    assert_eq!(stdin.status.code(), Some(1));
    assert_eq!(
        stderr(&stdin),
        "error: the text on stdin is larger than 1 KiB (the --max-input limit); raise it with \
         --max-input BYTES (or SKEIN_MAX_INPUT) if you mean it\n"
    );
    assert_eq!(skein.count("nodes"), 0, "nothing refused was recorded");

    // The limit holds for all of a command's inputs together, not each.
    let dir = tempfile::tempdir().unwrap();
    let notes = dir.path().join("notes.txt");
    std::fs::write(&notes, "n".repeat(600)).unwrap();
    let notes = notes.to_str().unwrap();
    let one = skein.run(&["--max-input", "1000", "prompt", "-f", notes, "hi"]);
    assert!(one.status.success(), "{}", stderr(&one));
    let nodes = skein.count("nodes");
    refused(
        &[
            "--max-input",
            "1000",
            "prompt",
            "-f",
            notes,
            "-a",
            notes,
            "hi",
        ],
        &format!(
            "the attachment {notes} takes this command's inputs past 1000 bytes all together \
             (the --max-input limit, 600 bytes read before it); raise it with --max-input BYTES \
             (or SKEIN_MAX_INPUT) if you mean it"
        ),
    );
    assert_eq!(skein.count("nodes"), nodes, "nothing refused was recorded");

    // A negative number is a value, and an accepted one is recorded.
    let cooled = skein.json(&["prompt", "-o", "seed", "3", "-o", "temperature", "0", "hi"]);
    assert_eq!(cooled["recorded"], true);
    let token = skein.run(&["serve", "--bind", "0.0.0.0:0", "--token", "short"]);
    assert_eq!(token.status.code(), Some(2));
    assert!(
        stderr(&token).contains("at least 16 characters"),
        "{}",
        stderr(&token)
    );
}

#[test]
fn piped_stdin_follows_the_prompt_text_after_a_blank_line() {
    let skein = temp();
    let output = skein.run_with_stdin(
        &["--json", "prompt", "summarise"],
        b"notes line 1\nline 2\n",
    );
    assert!(output.status.success(), "{}", stderr(&output));
    let record: Value = serde_json::from_slice(&output.stdout).unwrap();
    let log = skein.json(&["log", "--cid", record["conversation"].as_str().unwrap()]);
    assert_eq!(
        log["messages"][0]["parts"][0]["text"],
        "summarise\n\nnotes line 1\nline 2\n"
    );
    let empty = skein.run_with_stdin(&["prompt"], b"");
    assert_eq!(empty.status.code(), Some(1));
    assert_eq!(
        stderr(&empty),
        "error: stdin was empty: give the text as an argument, or pipe it on stdin\n"
    );
    // With TEXT, an empty stdin adds nothing.
    let alone = skein.json(&["prompt", "just this"]);
    assert!(alone["text"].as_str().unwrap().contains("\"just this\""));
}

#[test]
fn shortcuts_an_llm_user_expects() {
    let skein = temp();
    // A first argument that is no command is a prompt.
    let output = skein.run(&["hello there", "-s", "be brief"]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(
        stdout(&output),
        "echo: \"hello there\" (history: 2 messages, system: yes, tools: 0)\n"
    );
    skein.ok(&["--json", "second"]);
    assert_eq!(skein.count("conversations"), 2);
    assert_eq!(skein.json(&["models"]), skein.json(&["models", "list"]));
    assert_eq!(skein.ok(&["logs"]), skein.ok(&["log"]));

    // -c: the latest conversation; -u: usage per turn and in total.
    let latest = skein.json(&["log", "-c"]);
    assert_eq!(latest["messages"][0]["parts"][0]["text"], "second");
    skein.json(&["prompt", "-c", "third"]);
    let usage = skein.ok(&["log", "-c", "-u"]);
    // Echo runs on this machine: exactly free, no `$?` and no "at least".
    assert!(
        usage.contains("  = 1 in / 9 out tokens · $0.000000\n"),
        "{usage}"
    );
    assert!(
        usage.contains("  = 11 in / 9 out tokens · $0.000000"),
        "{usage}"
    );
    assert!(
        usage.contains(
            "total over 2 turn(s): 12 in / 18 out tokens\n\
             cost: $0.000000 (models of this machine cost nothing)"
        ),
        "{usage}"
    );
    let short = skein.ok(&["log", "--short"]);
    assert_eq!(short.lines().count(), 3, "one line per turn: {short}");
    assert!(
        short.lines().all(|line| line.contains(" echo > ")),
        "{short}"
    );
    let messages = skein.ok(&["log", "-c", "-s"]);
    assert_eq!(
        messages.lines().count(),
        5,
        "a heading, one line per message: {messages}"
    );
}

#[test]
fn reply_fork_and_chat_take_the_turn_flags_of_prompt() {
    let skein = temp();
    let first = skein.json(&["prompt", "one"]);
    let node = first["node"].as_str().unwrap().to_string();
    let nodes = skein.count("nodes");
    let aside = skein.json(&["reply", &node, "-o", "max_tokens", "2", "--no-log", "aside"]);
    assert_eq!(aside["recorded"], false);
    assert_eq!(aside["text"], "echo: \"aside\"");
    assert_eq!(skein.count("nodes"), nodes, "--no-log wrote nothing");

    let forked = skein.json(&[
        "fork", &node, "-s", "be brief", "-o", "seed", "5", "what if",
    ]);
    let run = &skein.json(&["log", "-n", "1"])[0]["run"];
    assert_eq!(run["options"]["seed"], 5);
    let log = skein.json(&["log", "--cid", forked["conversation"].as_str().unwrap()]);
    assert_eq!(log["messages"][2]["role"], "system");
    let refused = skein.run(&["fork", &node, "--no-log"]);
    assert_eq!(refused.status.code(), Some(1));

    let schema = r#"{"type": "object", "required": ["answer"]}"#;
    let model = scripted("repaired.toml");
    let output = skein.run_with_stdin(
        &["chat", "-m", &model, "--schema", schema, "--no-log"],
        b"is it?\n",
    );
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(
        stdout(&output),
        "{\"answer\": \"yes\"}\n",
        "only the valid reply"
    );
    let start = skein.json(&["prompt", "-m", &model, "hello"]);
    let start = start["node"].as_str().unwrap();
    let reply = skein.run(&["reply", start, "--schema", schema, "is it?"]);
    assert_eq!(
        stdout(&reply),
        "{\"answer\": \"yes\"}\n",
        "{}",
        stderr(&reply)
    );
}

#[test]
fn a_tool_loop_prints_each_model_call_on_its_own_line() {
    let skein = temp();
    let output = skein.run(&[
        "prompt",
        "-m",
        &scripted("chatty_tools.toml"),
        "-T",
        "skein_version",
        "which version?",
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let version = env!("CARGO_PKG_VERSION");
    assert_eq!(
        stdout(&output),
        format!("Let me check.\nversion is {version}\n")
    );
    assert!(
        stderr(&output).starts_with(&format!("[tool skein_version({{}}) -> {version}]\n")),
        "{}",
        stderr(&output)
    );
}

/// The landing rule on the command line: `prompt --cid` and `reply NODE`
/// turns whose conversation another process moves on while they run both
/// succeed, each in a new branch whose origin is the conversation and the
/// node they started from (said on stderr, and in `--json`'s
/// `branched_from`); the conversation keeps the winner's turn.
#[test]
fn a_turn_that_loses_the_race_for_the_head_lands_in_a_branch() {
    turns_that_lose_the_race_land_in_branches(&temp());
}

/// The body of [`a_turn_that_loses_the_race_for_the_head_lands_in_a_branch`]
/// on `skein`'s database (SQLite here, PostgreSQL in `postgres.rs`).
pub(crate) fn turns_that_lose_the_race_land_in_branches(skein: &Cli) {
    use wiremock::matchers::{body_string_contains, method};
    use wiremock::{Mock, MockServer, ResponseTemplate};
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let reply = (WIRES[0].reply)();
    let server = runtime.block_on(async {
        let server = MockServer::start().await;
        Mock::given(method("POST"))
            .and(body_string_contains("slow"))
            .respond_with(
                ResponseTemplate::new(200)
                    .set_body_json(reply.clone())
                    .set_delay(std::time::Duration::from_secs(3)),
            )
            .mount(&server)
            .await;
        Mock::given(method("POST"))
            .respond_with(ResponseTemplate::new(200).set_body_json(reply))
            .mount(&server)
            .await;
        server
    });
    let command = |args: &[&str]| {
        let mut command = skein.command(args);
        command
            .env("OPENAI_API_KEY", "sk-test")
            .env("OPENAI_BASE_URL", format!("{}/v1", server.uri()));
        command
    };
    let first = command(&["--json", "prompt", "-m", "openai:gpt-test", "start"])
        .output()
        .unwrap();
    assert!(first.status.success(), "{}", stderr(&first));
    let first: Value = serde_json::from_slice(&first.stdout).unwrap();
    let cid = first["conversation"].as_str().unwrap().to_string();
    let start = first["node"].as_str().unwrap().to_string();
    // Two turns go on from the head: `prompt --cid` and `reply NODE`.
    let slow = [
        command(&["--json", "prompt", "--cid", &cid, "slow one"]),
        command(&["--json", "reply", &start[..12], "slow two"]),
    ]
    .map(|mut command| {
        command
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    });
    // Once their requests are at the server, another turn moves the head.
    while runtime.block_on(server.received_requests()).unwrap().len() < 3 {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let fast = command(&["--json", "prompt", "--cid", &cid, "fast one"])
        .output()
        .unwrap();
    assert!(fast.status.success(), "{}", stderr(&fast));
    let fast: Value = serde_json::from_slice(&fast.stdout).unwrap();
    assert_eq!(fast["conversation"], cid.as_str());
    assert_eq!(fast["branched_from"], Value::Null);
    let mut branches = Vec::new();
    for lost in slow {
        let lost = lost.wait_with_output().unwrap();
        let message = stderr(&lost);
        assert!(lost.status.success(), "{message}");
        assert!(
            message.contains(&format!(
                "conversation {} moved on while this turn ran: the reply landed in a new branch, conversation ",
                &cid[..12]
            )),
            "{message}"
        );
        let landed: Value = serde_json::from_slice(&lost.stdout).unwrap();
        assert_eq!(landed["branched_from"], cid.as_str(), "{landed}");
        let branch = landed["conversation"].as_str().unwrap().to_string();
        assert_ne!(branch, cid);
        // The branch holds the reply, and its origin is where the turn
        // started.
        let log = skein.json(&["log", "--cid", &branch]);
        assert_eq!(log["conversation"]["head"], landed["node"]);
        assert_eq!(log["conversation"]["origin"]["conversation"], cid.as_str());
        assert_eq!(log["conversation"]["origin"]["node"], start.as_str());
        assert_eq!(log["messages"].as_array().unwrap().len(), 4);
        branches.push(branch);
    }
    assert_ne!(branches[0], branches[1]);
    let main = skein.json(&["log", "--cid", &cid]);
    assert_eq!(main["conversation"]["head"], fast["node"]);
    // Both branches are in the conversation's family, and nothing dangles.
    let tree = skein.ok(&["tree", &cid]);
    for branch in &branches {
        let line = tree.lines().find(|line| line.contains(&branch[..12]));
        let line = line.unwrap_or_else(|| panic!("{branch} not in {tree}"));
        assert!(!line.contains("shares"), "{tree}");
    }
    assert_eq!(skein.json(&["conversations"]).as_array().unwrap().len(), 3);
    skein.ok(&["verify"]);
}

/// The user messages of the database, by text, with their parents.
fn user_nodes(skein: &Cli) -> Vec<(String, Option<String>)> {
    let export = skein.ok(&["export"]);
    export
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap())
        .filter(|record| record["kind"] == "node" && record["role"] == "user")
        .map(|node| {
            (
                node["parts"][0]["text"].as_str().unwrap().to_string(),
                node["parent"].as_str().map(str::to_string),
            )
        })
        .collect()
}

/// A scripted model in the test's directory answering `scripted: TEXT`.
fn scripted_echo(skein: &Cli) -> String {
    let rules = skein.dir().join("scripted-echo.toml");
    std::fs::write(&rules, "[[rules]]\nreply = \"scripted: {last_user}\"\n").unwrap();
    format!("scripted:{}", rules.display())
}

/// A scripted model in the test's directory whose every call fails.
fn failing_model(skein: &Cli) -> String {
    let rules = skein.dir().join("fails.toml");
    std::fs::write(
        &rules,
        "[[rules]]\nerror = { kind = \"bad_request\", message = \"the model is down\" }\n",
    )
    .unwrap();
    format!("scripted:{}", rules.display())
}

/// `!reply NODE` goes on as `skein reply NODE` does: on the model of the
/// conversation NODE belongs to (at its head, or in a branch at an inner
/// node), not on the chat's own.
#[test]
fn chat_reply_answers_on_the_model_of_the_nodes_conversation() {
    let skein = temp();
    let model = scripted_echo(&skein);
    let first = skein.json(&["prompt", "-m", &model, "one"]);
    let second = skein.json(&["prompt", "-c", "two"]);
    let inner = first["node"].as_str().unwrap()[..12].to_string();
    let head = second["node"].as_str().unwrap()[..12].to_string();
    // The chat runs on the default model, the echo.
    let script = format!("hello\n!reply {head}\nthree\n!reply {inner}\nfour\n");
    let output = skein.run_with_stdin(&["chat"], script.as_bytes());
    let (out, err) = (stdout(&output), stderr(&output));
    assert!(output.status.success(), "{err}");
    assert!(out.contains("echo: \"hello\""), "{out}");
    assert!(out.contains("scripted: three"), "{out}");
    assert!(out.contains("scripted: four"), "{out}");
    assert!(
        !out.contains("echo: \"three\"") && !out.contains("echo: \"four\""),
        "{out}"
    );
    let cid = second["conversation"].as_str().unwrap();
    assert!(
        err.contains(&format!(
            "continuing conversation {} from its head",
            &cid[..12]
        )),
        "{err}"
    );
    // `skein reply` answers on the same model.
    let reply = skein.json(&["reply", &inner, "five"]);
    assert_eq!(reply["text"], "scripted: five");
    // The first conversation (extended by three), the chat's own, and the
    // two branches at the inner node (four, five).
    assert_eq!(skein.count("conversations"), 4);
    let log = skein.json(&["log", "--cid", cid]);
    assert_eq!(log["messages"].as_array().unwrap().len(), 6);
}

/// `!retry` of a thread's first message branches at that message, and
/// `!edit` of it from the start of the chat's conversation (a branch that
/// names it as its origin with no node): each keeps its model, and is a
/// member of its family (never listed as sharing messages by content). A
/// retry the deterministic model answers the same is a branch all the same
/// (it shares the reply's node, never the bookmark): the conversation it
/// came from does not move.
#[test]
fn retry_and_edit_of_a_first_message_record_the_conversation_as_origin() {
    let skein = temp();
    let model = scripted_echo(&skein);
    let output = skein.run_with_stdin(
        &["chat", "-m", &model, "--name", "main"],
        b"first\n!retry\n!edit first, reworded\n",
    );
    let (out, err) = (stdout(&output), stderr(&output));
    assert!(output.status.success(), "{err}");
    assert!(out.contains("scripted: first, reworded"), "{out}");
    assert!(err.contains("answered again, as a sibling branch"), "{err}");
    assert!(err.contains("edited, as a sibling branch"), "{err}");
    let conversations = skein.json(&["conversations"]);
    let conversations = conversations.as_array().unwrap();
    assert_eq!(conversations.len(), 3, "{conversations:?}");
    let main = conversations
        .iter()
        .find(|c| c["name"] == "main")
        .unwrap_or_else(|| panic!("{conversations:?}"));
    let main_id = main["id"].as_str().unwrap();
    let runs = skein.json(&["logs", "--cid", main_id, "-n", "10"]);
    assert_eq!(runs.as_array().map(Vec::len), Some(1), "{runs}");
    let retry = conversations
        .iter()
        .find(|c| c["origin"]["conversation"] == main_id)
        .unwrap_or_else(|| panic!("no branch of main: {conversations:?}"));
    assert_eq!(retry["head"], main["head"], "the same reply, the same node");
    let first = skein.json(&["log", "--cid", main_id]);
    assert_eq!(
        retry["origin"]["node"], first["messages"][0]["node"],
        "{retry}"
    );
    assert_eq!(retry["meta"]["model"], model.as_str(), "{retry}");
    let edit = conversations
        .iter()
        .find(|c| c["origin"]["conversation"] == retry["id"])
        .unwrap_or_else(|| panic!("no branch of the retry: {conversations:?}"));
    assert_eq!(edit["origin"]["node"], Value::Null, "{edit}");
    assert_eq!(edit["meta"]["model"], model.as_str(), "{edit}");
    let tree = skein.json(&["tree", main_id]);
    assert_eq!(tree["conversations"].as_array().unwrap().len(), 3, "{tree}");
    assert!(tree["shares"].as_array().unwrap().is_empty(), "{tree}");
    let drawn = skein.ok(&["tree", main_id]);
    assert!(!drawn.contains("shares messages by content"), "{drawn}");
}

/// `skein again NODE [TEXT]` is the turn layer's one way to ask a stored
/// message again: a user message retried (a branch at it) or edited (a
/// branch where it stood; from the start for a first message), a reply
/// regenerated (a branch at its request). The conversation it came from
/// never moves; asking a reply with new text, or a system message, is a
/// bad command line (exit 2) that records nothing.
#[test]
fn again_retries_edits_and_regenerates_a_stored_message() {
    let skein = temp();
    let model = scripted_echo(&skein);
    let first = skein.json(&["prompt", "-m", &model, "--name", "main", "one"]);
    let main = first["conversation"].as_str().unwrap().to_string();
    skein.json(&["prompt", "--cid", &main, "two"]);
    let log = skein.json(&["log", "--cid", &main]);
    let ids: Vec<String> = log["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|message| message["node"].as_str().unwrap().to_string())
        .collect();
    let [one, answer, two, reply] = &ids[..] else {
        panic!("{log}")
    };
    let origin_of = |turn: &Value| {
        let id = turn["conversation"].as_str().unwrap();
        skein
            .json(&["conversations"])
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["id"] == id)
            .map(|c| c["origin"].clone())
            .unwrap()
    };

    let retried = skein.json(&["again", &two[..12]]);
    assert_eq!(retried["text"], "scripted: two");
    assert_eq!(
        retried["node"].as_str(),
        Some(reply.as_str()),
        "the same reply"
    );
    assert_eq!(origin_of(&retried)["node"].as_str(), Some(two.as_str()));

    let edited = skein.json(&["again", &two[..12], "two, reworded", "--name", "reworded"]);
    assert_eq!(edited["text"], "scripted: two, reworded");
    let origin = origin_of(&edited);
    assert_eq!(origin["node"].as_str(), Some(answer.as_str()), "{origin}");
    assert_eq!(
        origin["conversation"].as_str(),
        Some(main.as_str()),
        "{origin}"
    );

    let regenerated = skein.json(&["again", reply]);
    assert_eq!(origin_of(&regenerated)["node"].as_str(), Some(two.as_str()));

    let first_edited = skein.json(&["again", one, "one, reworded"]);
    assert_eq!(first_edited["text"], "scripted: one, reworded");
    let origin = origin_of(&first_edited);
    assert_eq!(origin["node"], Value::Null, "from the start: {origin}");
    assert_eq!(
        origin["conversation"].as_str(),
        Some(main.as_str()),
        "{origin}"
    );

    let conversations = skein.json(&["conversations"]);
    let refused = skein.run(&["again", reply, "new words"]);
    assert_eq!(refused.status.code(), Some(2), "{}", stderr(&refused));
    assert!(
        stderr(&refused).contains("a reply is regenerated, not edited"),
        "{}",
        stderr(&refused)
    );
    let system = skein.json(&["prompt", "-m", &model, "-s", "be brief", "three"]);
    let system_log = skein.json(&["log", "--cid", system["conversation"].as_str().unwrap()]);
    let system_node = system_log["messages"][0]["node"]
        .as_str()
        .unwrap()
        .to_string();
    let conversations_before = skein.json(&["conversations"]);
    let refused = skein.run(&["again", &system_node]);
    assert_eq!(refused.status.code(), Some(2), "{}", stderr(&refused));
    assert!(
        stderr(&refused).contains("a system message"),
        "{}",
        stderr(&refused)
    );
    assert_eq!(skein.json(&["conversations"]), conversations_before);
    assert_eq!(conversations.as_array().unwrap().len(), 5);
    let main_now = skein.json(&["log", "--cid", &main]);
    assert_eq!(
        main_now["messages"].as_array().unwrap().len(),
        4,
        "main never moves"
    );
    assert!(skein.run(&["verify"]).status.success());
}

/// An edit of a message after a system prompt branches at the system
/// message, which many conversations may share: the branch still takes the
/// settings of the conversation that asked the message (its model and
/// tools), never a stand-in's.
#[test]
fn again_after_a_shared_system_prompt_keeps_the_asking_conversations_settings() {
    let skein = temp();
    let model = scripted_echo(&skein);
    let first = skein.json(&[
        "prompt",
        "-m",
        &model,
        "-s",
        "be brief",
        "-T",
        "skein_version",
        "one",
    ]);
    let main = first["conversation"].as_str().unwrap().to_string();
    // Another conversation shares the system message.
    skein.json(&["prompt", "-s", "be brief", "other"]);
    let log = skein.json(&["log", "--cid", &main]);
    assert_eq!(log["messages"][0]["role"], "system", "{log}");
    let asked = log["messages"][1]["node"].as_str().unwrap().to_string();
    let edited = skein.json(&["again", &asked, "one, reworded"]);
    assert_eq!(edited["text"], "scripted: one, reworded");
    let conversations = skein.json(&["conversations"]);
    let branch = conversations
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == edited["conversation"])
        .unwrap()
        .clone();
    assert_eq!(
        branch["origin"]["conversation"].as_str(),
        Some(main.as_str()),
        "{branch}"
    );
    assert_eq!(branch["meta"]["model"], model.as_str(), "{branch}");
    assert_eq!(
        branch["meta"]["tools"],
        serde_json::json!(["skein_version"]),
        "{branch}"
    );
}

/// A fork with a first turn is stored with that turn: when the model call
/// fails, `skein fork NODE TEXT` exits 5 and leaves no conversation behind,
/// as a failed `skein prompt` does; the database verifies.
#[test]
fn a_failed_first_turn_of_a_fork_leaves_no_conversation_behind() {
    failed_first_turns_leave_no_conversation(&temp());
}

/// The body of [`a_failed_first_turn_of_a_fork_leaves_no_conversation_behind`]
/// on `skein`'s database (SQLite here, PostgreSQL in `postgres.rs`).
pub(crate) fn failed_first_turns_leave_no_conversation(skein: &Cli) {
    let first = skein.json(&["prompt", "one"]);
    let node = first["node"].as_str().unwrap()[..12].to_string();
    let fails = failing_model(skein);
    let before = skein.json(&["conversations"]);
    for args in [
        vec!["fork", node.as_str(), "-m", fails.as_str(), "a first turn"],
        vec![
            "fork",
            node.as_str(),
            "--name",
            "doomed",
            "-m",
            fails.as_str(),
            "again",
        ],
        vec!["prompt", "-m", fails.as_str(), "a new one"],
    ] {
        let failed = skein.run(&args);
        let message = stderr(&failed);
        assert_eq!(failed.status.code(), Some(5), "{args:?}: {message}");
        assert!(message.contains("the model is down"), "{message}");
        assert_eq!(skein.json(&["conversations"]), before, "{args:?}");
    }
    let verify = skein.run(&["verify"]);
    assert!(verify.status.success(), "{}", stderr(&verify));
    // A fork without a turn is still made at once.
    let fork = skein.json(&["fork", &node, "--name", "kept"]);
    assert_eq!(fork["name"], "kept");
    assert_eq!(skein.json(&["conversations"]).as_array().unwrap().len(), 2);
}

#[test]
fn piped_chat_has_multi_line_messages_retries_edits_and_views() {
    let skein = temp();
    let first = skein.json(&["prompt", "zero"]);
    let inner = first["node"].as_str().unwrap()[..12].to_string();
    skein.json(&["prompt", "-c", "after zero"]);
    let script = format!(
        "!multi\nline one\nline two\n!end\nsecond\n!retry\n!edit second, reworded\n!log\n!tree\n!reply {inner}\nfrom the inner node\n!quit\n"
    );
    let output = skein.run_with_stdin(&["chat"], script.as_bytes());
    assert!(output.status.success(), "{}", stderr(&output));
    let (out, err) = (stdout(&output), stderr(&output));
    assert!(
        out.starts_with("echo: \"line one\nline two\" (history: 1 messages"),
        "{out}"
    );
    // The echo answers the retry the same: a branch all the same.
    assert!(
        err.contains(" answered again, as a sibling branch: conversation "),
        "{err}"
    );
    assert!(
        err.contains(" edited, as a sibling branch: conversation "),
        "{err}"
    );
    assert!(
        err.contains(&format!(
            "node {inner} heads no conversation: the next message starts a new branch there, conversation "
        )),
        "{err}"
    );
    assert!(out.contains("echo: \"second, reworded\""), "{out}");
    assert!(out.contains("├─ "), "!tree draws the branches: {out}");
    assert!(
        out.contains(" echo > second"),
        "!log lists the turns: {out}"
    );

    let users = user_nodes(&skein);
    let parent_of = |text: &str| {
        users
            .iter()
            .find(|(t, _)| t == text)
            .unwrap_or_else(|| panic!("no user message {text:?} in {users:?}"))
            .1
            .clone()
    };
    // The edit is a sibling of the message it edits; the retry shares the
    // request itself (the echo model answers it the same way, so the reply
    // node is shared too; the retry's branch and run are its own).
    assert_eq!(parent_of("second, reworded"), parent_of("second"));
    assert_eq!(users.iter().filter(|(t, _)| t == "second").count(), 1);
    let second_runs = skein
        .json(&["log", "-q", "second", "-n", "10"])
        .as_array()
        .unwrap()
        .len();
    assert_eq!(
        second_runs, 3,
        "the turn, its retry and the edit, which keeps the word"
    );
    let reworded = skein.json(&["log", "-q", "\"second reworded\"", "-n", "10"]);
    assert_eq!(reworded.as_array().unwrap().len(), 1, "{reworded}");
    // zero, the multi-line one, the retry, the edit, the inner branch.
    assert_eq!(skein.count("conversations"), 5);

    let nothing = skein.run_with_stdin(&["chat"], b"!retry\n!edit new\n!tree\n");
    assert!(nothing.status.success());
    assert!(
        stderr(&nothing).contains("error: nothing to answer again yet: send a first message"),
        "{}",
        stderr(&nothing)
    );
    assert!(stderr(&nothing).contains("error: nothing to edit yet"));
}

#[test]
fn chat_on_a_terminal_edits_in_place_keeps_a_history_and_survives_ctrl_c() {
    let skein = temp();
    let data = skein.dir().join("data");
    let mut command = skein.command(&["chat"]);
    command.env("XDG_DATA_HOME", &data);
    let mut terminal = crate::pty::Terminal::spawn(command);
    // Each line is typed once its prompt is shown (the line editor may
    // drop what is typed before it reads).
    terminal.wait_for_count("> ", 1);
    terminal.send("one\r");
    terminal.wait_for("echo: \"one\"");
    terminal.wait_for_count("> ", 2);
    terminal.send("two\r");
    terminal.wait_for("echo: \"two\"");
    terminal.wait_for_count("> ", 3);
    // Ctrl-C at the prompt clears the line; the chat goes on.
    terminal.send("half a line\x03");
    terminal.wait_for_count("> ", 4);
    terminal.send("!edit\r");
    terminal.wait_for("edit> two");
    terminal.send(", edited\r");
    terminal.wait_for("echo: \"two, edited\"");
    terminal.wait_for_count("> ", 6);
    terminal.send("!quit\r");
    assert_eq!(terminal.finish(), Some(0));
    let users = user_nodes(&skein);
    let parent = |text: &str| users.iter().find(|(t, _)| t == text).unwrap().1.clone();
    assert_eq!(parent("two, edited"), parent("two"), "a sibling branch");
    assert!(!users.iter().any(|(t, _)| t.contains("half")));
    // The history file keeps bare commands only, for its owner: what was
    // typed lives in the graph, where erasure reaches it.
    let path = data.join("skein/chat_history");
    let history = std::fs::read_to_string(&path).unwrap();
    assert_eq!(history.lines().collect::<Vec<_>>(), ["!edit", "!quit"]);
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&path).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);

    // Continued, the conversation's own messages are recalled (up arrow).
    let mut command = skein.command(&["chat", "-c"]);
    command.env("XDG_DATA_HOME", &data);
    let mut terminal = crate::pty::Terminal::spawn(command);
    terminal.wait_for_count("> ", 1);
    terminal.send("\x1b[A\r");
    terminal.wait_for("echo: \"two, edited\"");
    terminal.wait_for_count("> ", 2);
    terminal.send("!quit\r");
    assert_eq!(terminal.finish(), Some(0));

    // With -n nothing is written: not the turn, not the history.
    std::fs::remove_file(&path).unwrap();
    let mut command = skein.command(&["chat", "-n"]);
    command.env("XDG_DATA_HOME", &data);
    let mut terminal = crate::pty::Terminal::spawn(command);
    terminal.wait_for_count("> ", 1);
    terminal.send("!tree\r");
    terminal.wait_for_count("> ", 2);
    terminal.send("!quit\r");
    assert_eq!(terminal.finish(), Some(0));
    assert!(!path.exists());
}

#[test]
fn ctrl_c_stops_a_reply_in_chat_and_records_nothing_of_it() {
    use wiremock::matchers::{body_string_contains, method};
    use wiremock::{Mock, MockServer, ResponseTemplate};
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let reply = (WIRES[0].reply)();
    let server = runtime.block_on(async {
        let server = MockServer::start().await;
        Mock::given(method("POST"))
            .and(body_string_contains("never mind"))
            .respond_with(
                ResponseTemplate::new(200)
                    .set_body_json(reply.clone())
                    .set_delay(std::time::Duration::from_secs(120)),
            )
            .mount(&server)
            .await;
        Mock::given(method("POST"))
            .respond_with(ResponseTemplate::new(200).set_body_json(reply))
            .mount(&server)
            .await;
        server
    });
    let skein = temp();
    let mut command = skein.command(&["chat", "-m", "openai:gpt-test"]);
    command
        .env("OPENAI_API_KEY", "sk-test")
        .env("OPENAI_BASE_URL", format!("{}/v1", server.uri()))
        .env("XDG_DATA_HOME", skein.dir().join("data"));
    let mut terminal = crate::pty::Terminal::spawn(command);
    terminal.wait_for("> ");
    terminal.send("never mind\r");
    while runtime
        .block_on(server.received_requests())
        .unwrap()
        .is_empty()
    {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    terminal.interrupt();
    terminal.wait_for("(stopped: the cut reply was not recorded)");
    assert_eq!(skein.count("nodes"), 0, "nothing of the cut turn");
    assert_eq!(skein.count("runs"), 0);
    terminal.wait_for_count("> ", 2);
    terminal.send("hello\r");
    terminal.wait_for("Hello from the mock.");
    terminal.wait_for_count("> ", 3);
    terminal.send("!quit\r");
    assert_eq!(terminal.finish(), Some(0));
    assert_eq!(skein.count("nodes"), 2, "the next turn is recorded");
}

#[test]
fn text_from_models_and_imports_reaches_a_terminal_escaped() {
    let skein = temp();
    // C0 and C1 controls, and bidi controls (a right-to-left override and
    // an isolate) that would reorder what the terminal shows.
    let hostile = "red \x1b[31mALERT\x07 \u{9b}2J \u{202e}lave\u{2066} done";
    let record = skein.json(&["prompt", "--name", "bell\x07name\u{202d}", hostile]);
    let node = record["node"].as_str().unwrap().to_string();
    for args in [
        &["prompt", "-c", hostile][..],
        &["log"],
        &["log", "-c"],
        &["show", &node],
        &["tree"],
        &["conversations"],
    ] {
        let (code, output) = crate::pty::Terminal::spawn(skein.command(args)).finish_with_output();
        assert_eq!(code, Some(0), "{args:?}: {output}");
        for raw in ['\x1b', '\x07', '\u{9b}', '\u{202e}', '\u{2066}', '\u{202d}'] {
            assert!(
                !output.contains(raw),
                "{args:?} printed {raw:?}: {output:?}"
            );
        }
        let shown = match args[0] {
            "conversations" => "bell\\x07name\\u{202d}",
            "tree" | "log" if args.len() == 1 => "\\x1b[31mALERT\\x07 \\u{9b}2J",
            _ => "red \\x1b[31mALERT\\x07 \\u{9b}2J \\u{202e}lave\\u{2066} done",
        };
        assert!(output.contains(shown), "{args:?}: {output}");
    }
    // JSON stays exact: serde's own escapes for C0, the rest as it is.
    let (code, json) =
        crate::pty::Terminal::spawn(skein.command(&["--json", "show", &node])).finish_with_output();
    assert_eq!(code, Some(0));
    assert!(
        json.contains("red \\u001b[31mALERT\\u0007 \u{9b}2J \u{202e}lave\u{2066} done"),
        "{json:?}"
    );
    // So does human text written to a pipe (for the program reading it).
    let piped = skein.ok(&["show", &node]);
    assert!(piped.contains(hostile), "{piped:?}");
}

/// A conversation whose stored tools this command does not know (an MCP
/// server declared with `--mcp` when it began, a command tool since
/// removed from config.toml): the error says what a command-line user
/// declares, not how a program registers a tool.
#[test]
fn a_stored_tool_this_command_lacks_is_an_error_saying_what_to_declare() {
    let skein = temp();
    skein.json(&["prompt", "-m", "echo", "first"]);
    let store = skein::Store::open(skein.db()).unwrap();
    for (name, tool) in [("with-mcp", "demo__add"), ("with-command", "shout")] {
        store
            .create_conversation(skein::store::NewConversation {
                name: Some(name.into()),
                settings: skein::core::ConversationSettings {
                    model: Some("echo".into()),
                    tools: vec![tool.into()],
                    ..Default::default()
                },
                ..Default::default()
            })
            .unwrap();
    }
    let said = |name: &str| {
        let output = skein.run(&["prompt", "--cid", name, "again"]);
        assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
        let said = stderr(&output);
        assert!(!said.contains("EngineBuilder"), "{said}");
        assert!(!said.contains("open_with_tools"), "{said}");
        said
    };
    let mcp = said("with-mcp");
    assert!(
        mcp.contains(
            "offers tool `demo__add` of the MCP server `demo`, which this command does not \
             declare: declare it again as when the conversation began (`--mcp demo=COMMAND` or \
             `--mcp demo=URL`), or once for all commands under `[mcp.servers.demo]` in config.toml"
        ),
        "{mcp}"
    );
    let command = said("with-command");
    assert!(
        command.contains(
            "offers tool `shout`, which this command does not know: define it under \
             `[tools.shout]` in config.toml"
        ),
        "{command}"
    );
}

/// The last run the database recorded.
fn last_run(skein: &Cli) -> skein::store::RunRecord {
    skein::Store::open(skein.db())
        .unwrap()
        .recent_runs(1)
        .unwrap()
        .remove(0)
}

/// A stored conversation, by id or name.
fn stored(skein: &Cli, id: &str) -> skein::store::ConversationRecord {
    let store = skein::Store::open(skein.db()).unwrap();
    let id = store.resolve_conversation(id).unwrap();
    store.conversation(&id).unwrap()
}

/// `-m` sends a continued turn to the model it names, in both directions,
/// with `-c`, `--cid`, `reply` and `chat`; without `-m` the conversation's
/// own model answers, and its stored settings never change.
#[test]
fn the_model_named_with_m_answers_a_continued_turn() {
    let skein = temp();
    let answers = scripted("answers.toml");
    let first = skein.json(&["prompt", "-m", &answers, "--name", "s", "start"]);
    assert_eq!(first["text"], "SCRIPTED, NO SYSTEM");
    // The named model answers, not the stored one.
    let echoed = skein.json(&["prompt", "-m", "echo", "-c", "PRIVATE"]);
    assert!(echoed["text"].as_str().unwrap().contains("PRIVATE"));
    assert_eq!(last_run(&skein).profile.as_deref(), Some("echo"));
    let echoed = skein.json(&["prompt", "-m", "echo", "--cid", "s", "again"]);
    assert!(echoed["text"].as_str().unwrap().contains("again"));
    let node = echoed["node"].as_str().unwrap().to_string();
    let replied = skein.json(&["reply", &node, "-m", "echo", "and more"]);
    assert!(replied["text"].as_str().unwrap().contains("and more"));
    // Without -m, the conversation's own model.
    let own = skein.json(&["prompt", "--cid", "s", "yours"]);
    assert_eq!(own["text"], "SCRIPTED, NO SYSTEM");
    assert_eq!(
        stored(&skein, "s").settings.model.as_deref(),
        Some(&*answers)
    );

    // The other way round: an echo conversation, a scripted turn.
    skein.json(&["prompt", "-m", "echo", "--name", "echoed", "hello"]);
    let scripted = skein.json(&["prompt", "-m", &answers, "--cid", "echoed", "hi"]);
    assert_eq!(scripted["text"], "SCRIPTED, NO SYSTEM");
    assert_eq!(last_run(&skein).profile.as_deref(), Some(&*answers));
    let chat = skein
        .command(&["chat", "-m", &answers, "--cid", "echoed"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write;
            child.stdin.take().unwrap().write_all(b"from chat\n")?;
            child.wait_with_output()
        })
        .unwrap();
    assert!(chat.status.success(), "{}", stderr(&chat));
    assert!(String::from_utf8_lossy(&chat.stdout).contains("SCRIPTED, NO SYSTEM"));
    assert_eq!(
        stored(&skein, "echoed").settings.model.as_deref(),
        Some("echo")
    );
}

/// `reply NODE` and `fork NODE` at a node no conversation heads keep the
/// settings of the conversation the node belongs to (model, tools, chain
/// limit) and name it as their origin.
#[test]
fn branches_at_a_node_that_heads_nothing_keep_their_conversations_settings() {
    let skein = temp();
    let answers = scripted("answers.toml");
    let first = skein.json(&[
        "prompt",
        "-m",
        &answers,
        "-T",
        "skein_time",
        "--chain-limit",
        "3",
        "--name",
        "source",
        "one",
    ]);
    skein.json(&["prompt", "--cid", "source", "two"]);
    let node = first["node"].as_str().unwrap();
    let source = stored(&skein, "source");
    for branch in [
        skein.json(&["reply", node, "three"]),
        skein.json(&["fork", node, "--name", "f", "four"]),
    ] {
        assert_eq!(branch["text"], "SCRIPTED, NO SYSTEM");
        let conversation = stored(&skein, branch["conversation"].as_str().unwrap());
        assert_eq!(conversation.settings.model.as_deref(), Some(&*answers));
        assert_eq!(conversation.settings.tools, ["skein_time"]);
        assert_eq!(conversation.settings.chain_limit, Some(3));
        let origin = conversation.origin.unwrap();
        assert_eq!(origin.conversation.as_ref(), Some(&source.id));
        assert_eq!(origin.node.unwrap().to_string(), node);
    }
}

/// A conversation's name works wherever its id does; an unnamed one is
/// titled by its first prompt in listings; a name two conversations share
/// is ambiguous.
#[test]
fn conversations_are_named_wherever_an_id_is_accepted_and_titled_otherwise() {
    let skein = temp();
    skein.json(&[
        "prompt",
        "--name",
        "capitals",
        "What is the capital of France?",
    ]);
    skein.json(&["prompt", "--cid", "capitals", "And of Italy?"]);
    let log = skein.ok(&["log", "--cid", "capitals"]);
    assert!(log.contains("And of Italy?"), "{log}");
    let tree = skein.ok(&["tree", "capitals"]);
    assert!(tree.contains("capitals"), "{tree}");
    skein.json(&["prompt", "Which rivers cross Paris?\nSecond line."]);
    let listed = skein.ok(&["conversations"]);
    assert!(listed.contains("capitals"), "{listed}");
    assert!(listed.contains("Which rivers cross Paris?"), "{listed}");
    assert!(!listed.contains("Second line"), "{listed}");
    let tree = skein.ok(&["tree"]);
    assert!(tree.contains("Which rivers cross Paris?"), "{tree}");
    let json = skein.json(&["conversations"]);
    assert_eq!(json[0]["meta"]["title"], "Which rivers cross Paris?");

    // A name already taken is refused when set; a database of an older
    // skein may hold two conversations of one name, which are ambiguous.
    let taken = skein.run(&["prompt", "--name", "capitals", "A second one"]);
    assert_eq!(taken.status.code(), Some(2), "{}", stderr(&taken));
    let second = skein.json(&["prompt", "A second one"]);
    skein::Store::open(skein.db())
        .unwrap()
        .raw_connection()
        .unwrap()
        .execute(
            "UPDATE conversations SET name = 'capitals' WHERE id = ?1",
            [second["conversation"].as_str().unwrap()],
        )
        .unwrap();
    let output = skein.run(&["log", "--cid", "capitals"]);
    assert_eq!(output.status.code(), Some(3), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("several conversations are named `capitals`"),
        "{}",
        stderr(&output)
    );
    let output = skein.run(&["prompt", "--cid", "nobody", "hi"]);
    assert_eq!(output.status.code(), Some(3), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("named `nobody`"),
        "{}",
        stderr(&output)
    );
}

/// A model failure exits 5 however the turn was run, and leaves its failed
/// run; a first turn that failed leaves no conversation.
#[test]
fn model_failures_exit_5_and_keep_their_run_on_every_command() {
    let skein = temp();
    let answers = scripted("answers.toml");
    let output = skein.run(&["prompt", "-m", &answers, "please fail"]);
    assert_eq!(output.status.code(), Some(5), "{}", stderr(&output));
    assert_eq!(skein.count("conversations"), 0);
    assert_eq!(last_run(&skein).status, skein::store::RunStatus::Failed);

    let output = skein.run(&[
        "prompt",
        "-m",
        &answers,
        "--source",
        "w=rain",
        "please fail",
    ]);
    assert_eq!(output.status.code(), Some(5), "{}", stderr(&output));
    assert_eq!(skein.count("conversations"), 0);
    assert_eq!(skein.count("runs"), 2);

    // A reply that never meets its schema (echo answers with the prompt).
    let output = skein.run(&[
        "prompt",
        "--schema",
        r#"{"type":"integer"}"#,
        "not a number",
    ]);
    assert_eq!(output.status.code(), Some(5), "{}", stderr(&output));
    assert_eq!(skein.count("conversations"), 0);
    let failed = last_run(&skein);
    assert_eq!(failed.status, skein::store::RunStatus::Failed);
    assert!(failed.error.unwrap().contains("output contract"));
    assert_eq!(skein.count("runs"), 3);

    // A rerun whose model call fails.
    let turn = skein.json(&[
        "prompt",
        "-m",
        &answers,
        "--source",
        "weather=rain",
        "this needs the weather",
    ]);
    let node = turn["node"].as_str().unwrap();
    let output = skein.run(&[
        "rerun",
        node,
        "--ignore",
        "weather",
        "--samples",
        "2",
        "--embedder",
        "lexical",
    ]);
    assert_eq!(output.status.code(), Some(5), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("no weather, no answer"),
        "{}",
        stderr(&output)
    );
}

/// `fork --from-rerun` keeps the turn's system message, less only the
/// removed sources, for the fork's later turns too.
#[test]
fn a_fork_from_a_rerun_keeps_the_system_message_less_the_removed_sources() {
    let skein = temp();
    let answers = scripted("answers.toml");
    let turn = skein.json(&[
        "prompt",
        "-m",
        &answers,
        "-s",
        "You are terse.",
        "--source",
        "weather=heavy rain",
        "--source",
        "budget=200 euros",
        "Where to?",
    ]);
    assert_eq!(turn["text"], "SCRIPTED, HAS SYSTEM");
    let rerun = skein.json(&[
        "rerun",
        turn["node"].as_str().unwrap(),
        "--ignore",
        "weather",
        "--samples",
        "2",
        "--embedder",
        "lexical",
    ]);
    assert_eq!(rerun["answers"][0], "SCRIPTED, HAS SYSTEM");
    let fork = skein.json(&[
        "fork",
        "--from-rerun",
        rerun["rerun"].as_str().unwrap(),
        "And next?",
    ]);
    assert_eq!(fork["text"], "SCRIPTED, HAS SYSTEM");
    let next = skein.json(&[
        "prompt",
        "--cid",
        fork["conversation"].as_str().unwrap(),
        "Then?",
    ]);
    assert_eq!(next["text"], "SCRIPTED, HAS SYSTEM");
    // The fork's system message: the system text and the kept source only.
    let store = skein::Store::open(skein.db()).unwrap();
    let thread = store
        .load_thread(next["node"].as_str().unwrap().parse().unwrap())
        .unwrap();
    let system = thread.messages()[0].joined_text();
    assert!(
        system.contains("You are terse.") && system.contains("200 euros"),
        "{system}"
    );
    assert!(!system.contains("heavy rain"), "{system}");
}

/// An imported conversation never makes skein open a file of this machine
/// as a model: its stored `local:`/`scripted:` name is refused until the
/// user names it; and an error about a file that is not a rule file never
/// shows the file's text.
#[test]
fn imported_data_never_chooses_a_local_model_file() {
    let skein = temp();
    skein.json(&["prompt", "--name", "trap", "hello"]);
    let export = skein.ok(&["export"]);
    let secret = skein.dir().join("secret.txt");
    std::fs::write(&secret, "SECRET-LINE-123 is here\n").unwrap();
    let model = format!("scripted:{}", secret.display());
    let crafted = export.replace(
        r#""model":"echo""#,
        &format!(r#""model":{}"#, serde_json::to_string(&model).unwrap()),
    );
    assert_ne!(crafted, export);
    let other = temp();
    let file = other.dir().join("crafted.jsonl");
    std::fs::write(&file, crafted).unwrap();
    other.ok(&["import", file.to_str().unwrap()]);
    let output = other.run(&["prompt", "--cid", "trap", "hi"]);
    assert_ne!(output.status.code(), Some(0));
    let message = stderr(&output);
    assert!(message.contains("was imported with model"), "{message}");
    assert!(!message.contains("SECRET-LINE"), "{message}");
    // Named on the command line, the file is opened, and its text still
    // stays out of the error.
    let output = other.run(&["prompt", "-m", &model, "--cid", "trap", "hi"]);
    assert_eq!(output.status.code(), Some(5), "{}", stderr(&output));
    assert!(stderr(&output).contains("line 1"), "{}", stderr(&output));
    assert!(
        !stderr(&output).contains("SECRET-LINE"),
        "{}",
        stderr(&output)
    );
    // A conversation recorded here keeps the file its user named.
    let answers = scripted("answers.toml");
    other.json(&["prompt", "-m", &answers, "--name", "mine", "start"]);
    assert_eq!(
        other.json(&["prompt", "--cid", "mine", "go on"])["text"],
        "SCRIPTED, NO SYSTEM"
    );
}

/// Command tools declared in the configuration file: listed by `skein
/// tools` with their schema hashes, offered with `-T`, given the model's
/// arguments on stdin; one that times out or exits non-zero is an error
/// result the model sees, and the loop goes on.
#[test]
fn command_tools_run_and_fail_as_tool_results() {
    let skein = temp();
    std::fs::write(
        skein.dir().join("config.toml"),
        r#"
[tools.shout]
command = ["tr", "a-z", "A-Z"]
description = "Upper-case the arguments"
schema = { type = "object", properties = { text = { type = "string" } } }

[tools.slow]
command = ["sleep", "5"]
schema = { type = "object" }
timeout = 1

[tools.broken]
command = ["sh", "-c", "echo 'cannot reach the weather service' >&2; exit 2"]
schema = { type = "object" }
"#,
    )
    .unwrap();
    let listed = skein.json(&["tools"]);
    let shout = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|tool| tool["name"] == "shout")
        .unwrap();
    assert_eq!(shout["kind"], "command");
    assert_eq!(shout["schema_hash"].as_str().unwrap().len(), 64);
    // Columns line up whatever the names' lengths.
    let text = skein.ok(&["tools"]);
    let columns: std::collections::BTreeSet<Option<usize>> =
        text.lines().map(|line| line.find(" schema ")).collect();
    assert_eq!(columns.len(), 1, "{text}");
    let kinds: std::collections::BTreeSet<Option<usize>> = text
        .lines()
        .map(|line| {
            ["builtin", "command"]
                .iter()
                .find_map(|kind| line.find(&format!("  {kind}")))
        })
        .collect();
    assert_eq!(kinds.len(), 1, "{text}");
    assert!(
        text.lines()
            .any(|line| line.starts_with("skein_time ") && line.contains(" builtin ")),
        "{text}"
    );

    let model = scripted("command_tools.toml");
    let answer = skein.json(&["prompt", "-m", &model, "-T", "shout", "go"]);
    assert_eq!(answer["text"], r#"tool said: {"TEXT":"HI"}"#);
    let answer = skein.json(&["prompt", "-m", &model, "-T", "slow", "go"]);
    assert_eq!(
        answer["text"],
        "tool said: tool `slow` did not answer within 1 s and was stopped"
    );
    let answer = skein.json(&["prompt", "-m", &model, "-T", "broken", "go"]);
    assert_eq!(
        answer["text"],
        "tool said: tool `broken` exited with status 2: cannot reach the weather service"
    );
    let output = skein.run(&["prompt", "-m", &model, "-T", "nope", "go"]);
    assert!(!output.status.success());
    assert!(
        stderr(&output).contains("available: skein_version, skein_time, broken, shout, slow"),
        "{}",
        stderr(&output)
    );
}

/// `skein usage` in a process of its own after each turn: figures come
/// from the recorded runs, the prefix a fork shares counts once in its
/// family, and a run without figures makes a total incomplete.
#[test]
fn usage_totals_come_from_the_database_and_count_shared_work_once() {
    let skein = temp();
    let first = skein.json(&["prompt", "one"]);
    let a = first["conversation"].as_str().unwrap().to_string();
    let second = skein.json(&["prompt", "-c", "two"]);
    let branch = skein.json(&["fork", first["node"].as_str().unwrap(), "bee"]);
    let b = branch["conversation"].as_str().unwrap().to_string();
    let runs = |id: &str| -> Vec<(String, u64)> {
        let store = skein::Store::open(skein.db()).unwrap();
        let id = store.resolve_conversation(id).unwrap();
        store
            .runs_of_conversation(&id)
            .unwrap()
            .into_iter()
            .map(|run| (run.id.to_string(), run.usage.input_tokens.unwrap()))
            .collect()
    };
    let (a_runs, b_runs) = (runs(&a), runs(&b));
    assert_eq!((a_runs.len(), b_runs.len()), (2, 1));
    let input = |runs: &[&(String, u64)]| runs.iter().map(|(_, n)| n).sum::<u64>();

    let family = skein.json(&["usage", "--family", &b]);
    assert_eq!(family["scope"]["family"], b.as_str());
    assert_eq!(family["runs"].as_array().unwrap().len(), 3, "{family}");
    assert_eq!(
        family["input_tokens"]["value"],
        input(&[&a_runs[0], &a_runs[1], &b_runs[0]])
    );
    assert_eq!(family["complete"], true);
    // The fork's own account includes the turn it branched after, not the
    // one that came later in its origin.
    let fork = skein.json(&["usage", "--cid", &b]);
    assert_eq!(fork["runs"].as_array().unwrap().len(), 2, "{fork}");
    let first_run = first["run"].as_str().unwrap();
    assert!(fork["runs"].as_array().unwrap().contains(&first_run.into()));
    assert_eq!(
        fork["input_tokens"]["value"],
        input(&[&a_runs[0], &b_runs[0]])
    );
    // A node's runs, one run, and the text form.
    let node = skein.json(&["usage", second["node"].as_str().unwrap()]);
    assert_eq!(node["runs"], serde_json::json!([second["run"]]));
    let run = skein.json(&["usage", "--run", &first_run[..10]]);
    assert_eq!(run["runs"], serde_json::json!([first_run]));
    let text = skein.ok(&["usage", "--family", &a]);
    assert!(
        text.starts_with(&format!(
            "the family of conversation {}: 3 run(s)\n",
            &a[..12]
        )),
        "{text}"
    );
    // Token figures complete, and the cost too: echo runs on this machine
    // and costs exactly nothing.
    assert!(!text.contains("reported no"), "{text}");
    assert!(
        text.contains("cost: $0.000000 (models of this machine cost nothing)"),
        "{text}"
    );

    // A failed call of the first conversation: its usage is unknown, so the
    // totals that hold it say they are incomplete, and by how many runs.
    let failed = skein.run(&["prompt", "--cid", &a, "-m", &script(), "fail please"]);
    assert_eq!(failed.status.code(), Some(5), "{}", stderr(&failed));
    let total = skein.json(&["usage", "--cid", &a]);
    assert_eq!(total["runs"].as_array().unwrap().len(), 3);
    assert_eq!(total["failed"].as_array().unwrap().len(), 1);
    assert_eq!(total["complete"], false);
    assert_eq!(total["incomplete_runs"], total["failed"]);
    assert_eq!(
        total["input_tokens"]["value"],
        input(&[&a_runs[0], &a_runs[1]])
    );
    let text = skein.ok(&["usage", "--cid", &a]);
    assert!(text.contains("1 failed or cancelled"), "{text}");
    assert!(
        text.contains("input tokens: ") && text.contains("(incomplete: 1 run(s) reported none)"),
        "{text}"
    );
    assert!(text.contains("incomplete: 1 of 3 run(s)"), "{text}");
    // log -u sums the turns it shows the same way.
    let log = skein.json(&["log", "--cid", &a, "-u"]);
    assert_eq!(log["turns"].as_array().unwrap().len(), 3);
    assert_eq!(log["totals"]["incomplete_runs"], total["incomplete_runs"]);
    assert_eq!(log["totals"]["input_tokens"], total["input_tokens"]);
    let log = skein.ok(&["log", "--cid", &a, "-u"]);
    assert!(
        log.contains("(incomplete: 1 turn(s) reported no usage or only part of it)\n"),
        "{log}"
    );

    let none = skein.run(&["usage", "--sequence", "no-such-sequence"]);
    assert_eq!(none.status.code(), Some(3), "{}", stderr(&none));
    let unknown = skein.run(&["usage", "--family", "ffffffffffff"]);
    assert_eq!(unknown.status.code(), Some(3), "{}", stderr(&unknown));
}

/// An engine directory beside the test's configuration file: a prompt
/// whose system message carries a cache hint, on the `quick` profile.
fn engine_dir(skein: &Cli) -> PathBuf {
    let dir = skein.dir().join("engine");
    std::fs::create_dir_all(dir.join("prompts")).unwrap();
    std::fs::write(
        dir.join("backends.toml"),
        "[[backend]]\nname = \"echo\"\nkind = \"echo\"\ncapacity = 2\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("profiles.toml"),
        "[[profile]]\nname = \"quick\"\nbackend = \"echo\"\nmodel = \"echo\"\n\
         options = { temperature = 0.5 }\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("prompts/brief.toml"),
        r#"id = "brief"
default_profile = "quick"

[[messages]]
role = "system"
template = "Shared notes on {{ topic }}."
cache = "ephemeral"

[[messages]]
role = "user"
template = "Tell me about {{ topic }} in {{ words }} words."

[[variables]]
name = "topic"

[[variables]]
name = "words"
required = false
default = 50
"#,
    )
    .unwrap();
    std::fs::write(
        skein.dir().join("config.toml"),
        format!("engine = {:?}\n", dir.display().to_string()),
    )
    .unwrap();
    dir
}

#[test]
fn configured_prompts_are_inspected_prepared_and_run_from_the_command_line() {
    let bare = temp();
    let missing = bare.run(&["inspect", "prompt", "brief"]);
    assert_eq!(missing.status.code(), Some(3));
    assert!(
        stderr(&missing).contains("there is no engine directory yet"),
        "{}",
        stderr(&missing)
    );
    let skein = temp();
    engine_dir(&skein);

    // Inspect: the resources as configured.
    let prompt = skein.ok(&["inspect", "prompt", "brief"]);
    assert!(
        prompt.starts_with("prompt brief · version 1 (versions: 1)\n"),
        "{prompt}"
    );
    assert!(
        prompt.contains("[0] system · cache ephemeral\nShared notes on {{ topic }}."),
        "{prompt}"
    );
    assert!(prompt.contains("variable words (default 50)"), "{prompt}");
    let profile = skein.json(&["inspect", "profile", "quick"]);
    assert_eq!(
        (profile["backend"].as_str(), profile["model"].as_str()),
        (Some("echo"), Some("echo"))
    );
    let backend = skein.json(&["inspect", "backend", "echo"]);
    assert_eq!(backend["backend"]["capacity"], 2);
    for (what, name) in [("prompt", "nope"), ("profile", "nope"), ("backend", "nope")] {
        let output = skein.run(&["inspect", what, name]);
        assert_eq!(output.status.code(), Some(3), "{}", stderr(&output));
        assert!(stderr(&output).contains("(known: "), "{}", stderr(&output));
    }

    // Prepare: the rendered request, and nothing written (not even a database).
    let prepared = skein.json(&[
        "prepare", "-t", "brief", "-p", "topic", "tides", "-p", "words", "9", "Briefly.",
    ]);
    let texts: Vec<&str> = prepared["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["parts"][0]["text"].as_str().unwrap())
        .collect();
    assert_eq!(
        texts,
        [
            "Shared notes on tides.",
            "Tell me about tides in 9 words.",
            "Briefly."
        ]
    );
    assert_eq!(
        prepared["messages"][0]["annotations"],
        serde_json::json!([{"part": 0, "annotations": [{"cache_hint": "ephemeral"}]}])
    );
    assert_eq!(prepared["profile"], "quick", "the prompt's default profile");
    assert_eq!(prepared["options"]["temperature"], 0.5);
    assert!(!skein.db().exists(), "prepare wrote nothing");
    let text = skein.ok(&["prepare", "-t", "brief", "-p", "topic", "tides"]);
    assert!(
        text.contains("system · cache ephemeral on part 0\nShared notes on tides.\n"),
        "{text}"
    );

    // Prompt: rendered, run and recorded like any turn, with the hint on
    // its run; the conversation goes on from a later process.
    let turn = skein.json(&["prompt", "-t", "brief", "-p", "topic", "tides"]);
    assert_eq!(
        turn["text"],
        "echo: \"Tell me about tides in 50 words.\" (history: 2 messages, system: yes, tools: 0)"
    );
    let run = last_run(&skein);
    assert_eq!(run.profile.as_deref(), Some("quick"));
    let hinted: Vec<_> = run
        .annotations
        .iter()
        .filter(|(_, list)| {
            list.contains(&skein::core::Annotation::CacheHint(
                skein::core::CacheHint::Ephemeral,
            ))
        })
        .collect();
    assert_eq!(hinted.len(), 1);
    let reply = skein.json(&["reply", turn["node"].as_str().unwrap(), "and currents?"]);
    assert_eq!(reply["conversation"], turn["conversation"]);
    assert_eq!(last_run(&skein).profile.as_deref(), Some("quick"));
    // -m names another model for the prompt; -c continues with it.
    let other = skein.json(&[
        "prompt", "-c", "-t", "brief", "-p", "topic", "ice", "-m", "echo",
    ]);
    assert_eq!(other["conversation"], turn["conversation"]);
    assert_eq!(last_run(&skein).profile.as_deref(), Some("echo"));

    // Bad input fails before any call and records nothing; nor does
    // preparing a turn after a conversation's history.
    let runs = skein.count("runs");
    let conversation = turn["conversation"].as_str().unwrap();
    let after = skein.json(&["prepare", "--cid", conversation, "what next?"]);
    let messages = after["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 9, "three turns of history, then the text");
    assert_eq!(messages[8]["parts"][0]["text"], "what next?");
    assert_eq!(
        messages[0]["annotations"][0]["annotations"][0]["cache_hint"], "ephemeral",
        "the history keeps its hint"
    );
    for (args, code, says) in [
        (
            &["prompt", "-t", "brief"][..],
            1,
            "needs the variable `topic`",
        ),
        (
            &["prompt", "-t", "brief", "-p", "topik", "x"],
            2,
            "declares no variable `topik`",
        ),
        (
            &["prompt", "-t", "nope"],
            3,
            "no prompt `nope` (known: brief)",
        ),
        (
            &["prompt", "-t", "brief@2", "-p", "topic", "x"],
            3,
            "has no version 2",
        ),
        (
            &["prompt", "-t", "brief", "-s", "x"],
            2,
            "cannot be used with",
        ),
    ] {
        let output = skein.run(args);
        assert_eq!(
            output.status.code(),
            Some(code),
            "{args:?}: {}",
            stderr(&output)
        );
        assert!(
            stderr(&output).contains(says),
            "{args:?}: {}",
            stderr(&output)
        );
    }
    assert_eq!(skein.count("runs"), runs);
}

fn data(file: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(file)
        .display()
        .to_string()
}

/// The parts of the user message a turn's reply answers.
fn user_parts(skein: &Cli, reply: &Value) -> Vec<skein::Part> {
    let store = skein::Store::open(skein.db()).unwrap();
    let reply = store
        .node(store.resolve_node(reply["node"].as_str().unwrap()).unwrap())
        .unwrap();
    store.node(reply.parent.unwrap()).unwrap().message.parts
}

/// `-a`: an image attached in two conversations is one blob, the echo
/// model sees it, `show` names it, and a text-only model refuses it (new
/// or in the history) before any call; `-a -` reads stdin, `--at` gives a
/// type that cannot be told. `-f`: a fragment shared by two prompts is
/// its own part, one blob.
#[test]
fn attachments_and_fragments_are_parts_stored_once() {
    let skein = temp();
    let image = data("pixels.png");
    let size = std::fs::metadata(&image).unwrap().len();
    assert!(
        size >= skein::store::BLOB_THRESHOLD as u64,
        "the fixture makes a blob"
    );
    let first = skein.json(&["prompt", "-a", &image, "what is this?"]);
    assert_eq!(
        first["text"],
        format!(
            "echo: \"what is this?\" [attachment: image/png, {size} bytes] (history: 1 messages, system: no, tools: 0)"
        )
    );
    let second = skein.json(&["prompt", "-a", &image, "and this?"]);
    assert_ne!(first["conversation"], second["conversation"]);
    assert_eq!(skein.count("blobs"), 1, "the image is stored once");
    let parts = user_parts(&skein, &first);
    assert_eq!(parts.len(), 2);
    assert_eq!(parts[0], skein::Part::text("what is this?"));
    let skein::Part::Attachment(attachment) = &parts[1] else {
        panic!("{parts:?}")
    };
    assert_eq!(attachment.media_type, "image/png");
    assert_eq!(attachment.data, std::fs::read(&image).unwrap());
    let store = skein::Store::open(skein.db()).unwrap();
    let user = store
        .node(store.resolve_node(first["node"].as_str().unwrap()).unwrap())
        .unwrap()
        .parent
        .unwrap();
    drop(store);
    let shown = skein.ok(&["show", &user.to_hex()]);
    assert!(
        shown.contains(&format!("part 1: attachment · {size} bytes · blob "))
            && shown.contains(&format!("image/png · {size} bytes")),
        "{shown}"
    );

    // Standard input as the attachment: the same bytes, the same blob.
    let output = skein.run_with_stdin(
        &["--json", "prompt", "-a", "-", "from a pipe"],
        &std::fs::read(&image).unwrap(),
    );
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(
        stdout(&output).contains("[attachment: image/png"),
        "{}",
        stdout(&output)
    );
    assert_eq!(skein.count("blobs"), 1);

    // A text-only model refuses it, before any call: no run, nothing new.
    let (runs, conversations) = (skein.count("runs"), skein.count("conversations"));
    let mut refused = skein.command(&["prompt", "-m", "smollm2", "-a", &image, "what?"]);
    let output = refused.env("SKEIN_THREADS", "1").output().unwrap();
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    assert!(
        stderr(&output).contains(
            "`smollm2` cannot take the `image/png` attachment in message 0 (it takes text only)"
        ),
        "{}",
        stderr(&output)
    );
    let cid = first["conversation"].as_str().unwrap();
    let mut continued = skein.command(&["prompt", "-m", "smollm2", "--cid", cid, "more?"]);
    let output = continued.env("SKEIN_THREADS", "1").output().unwrap();
    assert!(
        stderr(&output).contains("attachment in message 0"),
        "{}",
        stderr(&output)
    );
    assert_eq!(
        (skein.count("runs"), skein.count("conversations")),
        (runs, conversations)
    );

    // A file whose type cannot be told needs --at.
    let blob = skein.dir().join("scan.bin");
    std::fs::write(&blob, [0u8, 1, 2, 0xfe, 0xff]).unwrap();
    let blob = blob.display().to_string();
    let output = skein.run(&["prompt", "-a", &blob, "what?"]);
    assert!(
        stderr(&output).contains(&format!(
            "cannot tell what kind of file the attachment {blob} is"
        )),
        "{}",
        stderr(&output)
    );
    let typed = skein.json(&["prompt", "--at", &blob, "image/jpeg", "what?"]);
    assert!(
        typed["text"]
            .as_str()
            .unwrap()
            .contains("[attachment: image/jpeg, 5 bytes]"),
        "{typed}"
    );

    // A fragment shared by two prompts: its own part, one blob.
    let fragment = skein.dir().join("notes.md");
    let notes = "Meeting notes.\n".repeat(400);
    std::fs::write(&fragment, &notes).unwrap();
    let fragment = fragment.display().to_string();
    // A model whose reply does not quote the fragment (echo's would be a
    // blob of its own).
    let terse = scripted("answers.toml");
    let summary = skein.json(&["prompt", "-m", &terse, "-f", &fragment, "summarise"]);
    let names = skein.json(&[
        "prompt",
        "-m",
        &terse,
        "-f",
        &fragment,
        "-a",
        &image,
        "list the names",
    ]);
    assert_ne!(summary["conversation"], names["conversation"]);
    assert_eq!(skein.count("blobs"), 2, "the image and the fragment");
    assert_eq!(
        user_parts(&skein, &summary),
        [
            skein::Part::text(notes.clone()),
            skein::Part::text("summarise")
        ]
    );
    let parts = user_parts(&skein, &names);
    assert_eq!(
        parts[..2],
        [
            skein::Part::text(notes.clone()),
            skein::Part::text("list the names")
        ]
    );
    assert!(matches!(&parts[2], skein::Part::Attachment(_)));
    let log = skein.ok(&["log", "--cid", summary["conversation"].as_str().unwrap()]);
    let digest = skein::core::Digest::of(notes.as_bytes()).to_hex();
    assert!(
        log.contains(&format!(
            "[part 0: text · {} bytes · blob {}]",
            notes.len(),
            &digest[..12]
        )) && log.contains("[part 1: text]\nsummarise"),
        "{log}"
    );

    // A fork's first turn may be an attachment alone.
    let fork = skein.json(&["fork", first["node"].as_str().unwrap(), "-a", &image]);
    assert!(
        fork["text"]
            .as_str()
            .unwrap()
            .starts_with("echo: \"\" [attachment: image/png"),
        "{fork}"
    );

    for (args, expected) in [
        (
            vec!["prompt", "-a", "/nonexistent.png", "x"],
            "cannot open the attachment /nonexistent.png",
        ),
        (
            vec!["prompt", "-a", "-", "--at", "-", "image/png", "x"],
            "stdin can be attached once",
        ),
        (
            vec!["prompt", "--at", &blob, "jpeg", "x"],
            "`jpeg` is not a media type",
        ),
        (vec!["prompt", "-f", &image, "x"], "is not UTF-8 text"),
        (
            vec!["prompt", "--source", "a=b", "-a", &image, "x"],
            "a turn with --source is text",
        ),
    ] {
        let output = skein.run(&args);
        assert!(!output.status.success(), "{args:?}");
        assert!(
            stderr(&output).contains(expected),
            "{args:?}: {}",
            stderr(&output)
        );
    }
}

fn replay_script() -> String {
    format!(
        "scripted:{}",
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data/replay.toml")
            .display()
    )
}

/// `skein replay --replace-source`: the source's text is replaced in the
/// re-sent request, tag kept, every other part as recorded; a malformed
/// replacement is refused before anything runs.
#[test]
fn a_replay_replaces_a_source_and_sends_everything_else_as_recorded() {
    let skein = temp();
    let first = skein.json(&[
        "prompt",
        "-m",
        "echo",
        "--source",
        "hotel=The hotel is the Lutetia.",
        "--source",
        "budget=200 euros",
        "Where do I sleep?",
    ]);
    let cid = first["conversation"].as_str().unwrap().to_string();
    let output = skein.run(&[
        "replay",
        "--cid",
        &cid,
        "-m",
        "echo",
        "--replace-source",
        "hotel=The hotel is the Ritz.",
        "--format",
        "json",
    ]);
    assert!(
        matches!(output.status.code(), Some(0 | 7)),
        "{}",
        stderr(&output)
    );
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(
        report["change"]["replace_sources"]["hotel"],
        "The hotel is the Ritz."
    );
    let answer: skein::NodeId = report["turns"][0]["answer_node"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let original: skein::NodeId = first["node"].as_str().unwrap().parse().unwrap();
    let store = skein::Store::open(skein.db()).unwrap();
    let texts = |head| {
        store
            .load_thread(head)
            .unwrap()
            .messages()
            .iter()
            .map(|message| message.joined_text())
            .collect::<Vec<_>>()
    };
    let (replayed, recorded) = (texts(answer), texts(original));
    assert_eq!(replayed.len(), recorded.len(), "{replayed:?}");
    assert!(recorded[0].contains("Lutetia") && recorded[0].contains("200 euros"));
    assert!(
        replayed[0].contains("The hotel is the Ritz.")
            && replayed[0].contains("200 euros")
            && !replayed[0].contains("Lutetia"),
        "{replayed:?}"
    );
    assert_eq!(replayed[1], recorded[1], "the question as recorded");
    drop(store);

    let bad = skein.run(&[
        "replay",
        "--cid",
        &cid,
        "-m",
        "echo",
        "--replace-source",
        "hotel",
    ]);
    assert_eq!(bad.status.code(), Some(1));
    assert!(stderr(&bad).contains("ID=TEXT"), "{}", stderr(&bad));
}

/// `skein replay --prompt-version`: a turn that rendered a configured
/// prompt is re-sent with that version's messages (the recorded variables,
/// every other message as recorded); a plain turn fails and says why; a
/// malformed or unknown version is refused before anything is stored.
#[test]
fn a_replay_renders_another_version_of_a_configured_prompt() {
    let skein = temp();
    let dir = engine_dir(&skein);
    let first = skein.json(&["prompt", "-m", "echo", "hello"]);
    let cid = first["conversation"].as_str().unwrap().to_string();
    let prompted = skein.json(&["prompt", "-c", "-t", "brief", "-p", "topic", "tides"]);
    // Version 2 is configured after the turn rendered version 1.
    std::fs::write(
        dir.join("prompts/brief-2.toml"),
        r#"id = "brief"
version = 2
default_profile = "quick"

[[messages]]
role = "user"
template = "In {{ words }} words, {{ topic }}?"

[[variables]]
name = "topic"

[[variables]]
name = "words"
required = false
default = 50
"#,
    )
    .unwrap();
    let output = skein.run(&[
        "replay",
        "--cid",
        &cid,
        "-m",
        "quick",
        "--prompt-version",
        "brief@2",
        "--format",
        "json",
    ]);
    assert_eq!(output.status.code(), Some(7), "{}", stderr(&output));
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(
        report["change"]["prompt_version"],
        serde_json::json!({"id": "brief", "version": 2})
    );
    let turns = report["turns"].as_array().unwrap();
    let by_node = |node: &Value| {
        turns
            .iter()
            .find(|turn| &turn["turn_node"] == node)
            .unwrap()
            .clone()
    };
    let plain = by_node(&first["node"]);
    assert_eq!(plain["result"], "failed");
    assert!(
        plain["why"]
            .as_str()
            .unwrap()
            .contains("rendered no configured prompt `brief`"),
        "{plain}"
    );
    let changed = by_node(&prompted["node"]);
    assert_eq!(changed["result"], "changed", "{changed}");
    let answer: skein::NodeId = changed["answer_node"].as_str().unwrap().parse().unwrap();
    let original: skein::NodeId = prompted["node"].as_str().unwrap().parse().unwrap();
    let store = skein::Store::open(skein.db()).unwrap();
    let texts = |head| {
        store
            .load_thread(head)
            .unwrap()
            .messages()
            .iter()
            .map(|message| message.joined_text())
            .collect::<Vec<_>>()
    };
    let (replayed, recorded) = (texts(answer), texts(original));
    assert_eq!(
        recorded[..4],
        [
            "hello".to_string(),
            first["text"].as_str().unwrap().to_string(),
            "Shared notes on tides.".into(),
            "Tell me about tides in 50 words.".into()
        ]
    );
    assert_eq!(
        replayed[..3],
        [
            recorded[0].clone(),
            recorded[1].clone(),
            "In 50 words, tides?".into()
        ],
        "the history as recorded, then version 2's one message"
    );
    drop(store);

    for (given, says) in [("brief", "ID@VERSION"), ("brief@7", "has version(s) 1, 2")] {
        let replays = skein.count("replays");
        let bad = skein.run(&[
            "replay",
            "--cid",
            &cid,
            "-m",
            "quick",
            "--prompt-version",
            given,
        ]);
        assert_eq!(bad.status.code(), Some(1), "{given}: {}", stderr(&bad));
        assert!(stderr(&bad).contains(says), "{given}: {}", stderr(&bad));
        assert_eq!(
            skein.count("replays"),
            replays,
            "nothing stored for {given}"
        );
    }
}

/// `skein replay`: three turns recorded with a tool, replayed on another
/// scripted model with the tool answered from the recording; the report
/// (text, JSON, JUnit) names the held, changed and diverged turns, exit
/// code 7 says not all held, and resuming a finished replay redoes nothing.
#[test]
fn replay_reports_changed_held_and_diverged_turns_and_exits_7() {
    let skein = temp();
    let model = tools_script();
    let first = skein.json(&[
        "prompt",
        "-m",
        &model,
        "-T",
        "skein_version",
        "which version?",
    ]);
    let cid = first["conversation"].as_str().unwrap().to_string();
    skein.json(&["prompt", "-c", "what time is it?"]);
    skein.json(&["prompt", "-c", "the price?"]);
    let runs_recorded = skein.count("runs");
    let conversations = skein.count("conversations");

    let replay_model = replay_script();
    // The lexical embedder, whose verdicts this test pins (MiniLM, the
    // default where downloaded, scores "0.1.0 it is" lower).
    let output = skein.run(&[
        "replay",
        "--cid",
        &cid,
        "-m",
        &replay_model,
        "--format",
        "json",
        "--embedder",
        "lexical",
    ]);
    assert_eq!(output.status.code(), Some(7), "{}", stderr(&output));
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    let totals = &report["totals"];
    assert_eq!(
        (
            &totals["held"],
            &totals["changed"],
            &totals["diverged"],
            &totals["failed"]
        ),
        (
            &Value::from(1),
            &Value::from(1),
            &Value::from(1),
            &Value::from(0)
        ),
        "{report}"
    );
    // Worst first: the diverged turn, then the changed one, then the held.
    let turns = report["turns"].as_array().unwrap();
    let results: Vec<&str> = turns
        .iter()
        .map(|t| t["result"].as_str().unwrap())
        .collect();
    assert_eq!(results, ["diverged", "changed", "held"]);
    assert_eq!(turns[0]["seq"], 1);
    assert_eq!(turns[0]["why"], "diverged: asked for skein_time({})");
    assert_eq!(turns[1]["comparator"], "specifics");
    assert_eq!(turns[1]["answer"], "It costs 13 euros.");
    assert_eq!(
        turns[2]["answer"],
        format!("{} it is", env!("CARGO_PKG_VERSION"))
    );
    // No conversation was added; the replayed turns' runs were.
    assert_eq!(skein.count("conversations"), conversations);
    assert!(skein.count("runs") > runs_recorded);
    let id = report["replay"].as_str().unwrap().to_string();

    // Resuming a finished replay replays nothing; the report reads the same.
    let runs = skein.count("runs");
    let junit = skein.run(&["replay", "--resume", &id[..8], "--format", "junit"]);
    assert_eq!(junit.status.code(), Some(7));
    assert_eq!(skein.count("runs"), runs);
    let xml = String::from_utf8(junit.stdout).unwrap();
    assert!(
        xml.contains("tests=\"3\" failures=\"2\" errors=\"0\""),
        "{xml}"
    );
    assert!(xml.contains("<failure type=\"diverged\""), "{xml}");

    let text = skein.run(&["replay", "--resume", &id]);
    let text = String::from_utf8(text.stdout).unwrap();
    assert!(text.contains("DIVERGED turn 1"), "{text}");
    assert!(
        text.contains("1 changed · 1 held · 1 diverged · 0 failed"),
        "{text}"
    );

    // A swapped tool schema is what the replay offers; the call is still
    // answered from the recording.
    let tool = skein.dir().join("version.json");
    std::fs::write(
        &tool,
        r#"{"name": "skein_version", "description": "The version, swapped", "input_schema": {"type": "object"}}"#,
    )
    .unwrap();
    let node = first["node"].as_str().unwrap();
    let swapped = skein.run(&[
        "replay",
        node,
        "-m",
        &replay_model,
        "--add-tool",
        tool.to_str().unwrap(),
        "--format",
        "json",
        "--embedder",
        "lexical",
    ]);
    assert_eq!(swapped.status.code(), Some(0), "{}", stderr(&swapped));
    let report: Value = serde_json::from_slice(&swapped.stdout).unwrap();
    let run = report["turns"][0]["runs"][0].as_str().unwrap();
    let store = skein::Store::open(skein.db()).unwrap();
    let offered = store
        .run_record(&skein::store::RunId(run.into()))
        .unwrap()
        .tools;
    assert_eq!(offered.len(), 1);
    assert_eq!(offered[0].description, "The version, swapped");
    drop(store);

    // A bad comparator is refused before anything runs (exit 2).
    let refused = skein.run(&[
        "replay",
        "--cid",
        &cid,
        "-m",
        &replay_model,
        "--compare",
        "nope",
    ]);
    assert_eq!(refused.status.code(), Some(2), "{}", stderr(&refused));
    let unknown = skein.run(&["replay", "--resume", "ffffffff"]);
    assert_eq!(unknown.status.code(), Some(3));
}

/// A `--add-tool` file is checked as a tool before the replay starts: an
/// empty name, or an input schema that is not a JSON object (or describes
/// no object), is refused with what is wrong, and nothing is replayed.
#[test]
fn replay_add_tool_refuses_an_empty_name_and_a_schema_that_is_not_an_object() {
    let skein = temp();
    let turn = skein.json(&["prompt", "hello"]);
    let cid = turn["conversation"].as_str().unwrap().to_string();
    let runs = skein.count("runs");
    let cases = [
        (
            r#"{"name": "", "description": "d", "input_schema": {"type": "object"}}"#,
            "the tool has an empty name",
        ),
        (
            r#"{"name": "t", "description": "d", "input_schema": "object"}"#,
            "the input_schema of tool `t` is a string, not a JSON object",
        ),
        (
            r#"{"name": "t", "description": "d", "input_schema": [1]}"#,
            "the input_schema of tool `t` is an array, not a JSON object",
        ),
        (
            r#"{"name": "t", "description": "d", "input_schema": {"type": "string"}}"#,
            "the input_schema of tool `t` has type \"string\"",
        ),
    ];
    for (at, (definition, problem)) in cases.into_iter().enumerate() {
        let file = skein.dir().join(format!("tool{at}.json"));
        std::fs::write(&file, definition).unwrap();
        let output = skein.run(&[
            "replay",
            "--cid",
            &cid,
            "-m",
            "echo",
            "--add-tool",
            file.to_str().unwrap(),
        ]);
        assert_eq!(
            output.status.code(),
            Some(2),
            "{definition}: {}",
            stderr(&output)
        );
        let error = stderr(&output);
        assert!(
            error.contains(&format!("{} is not a tool to offer", file.display()))
                && error.contains(problem),
            "{definition}: {error}"
        );
    }
    assert_eq!(skein.count("runs"), runs);
}

/// A replay says its id, with the command that resumes it, on stderr
/// before it starts: off a terminal (a script, CI, where the progress bar
/// is hidden) and on one alike, so a killed run can be found and resumed.
#[test]
fn a_replay_names_its_id_on_stderr_first_on_a_terminal_or_not() {
    let skein = temp();
    let first = skein.json(&["prompt", "-m", "echo", "name a river"]);
    let cid = first["conversation"].as_str().unwrap().to_string();
    let replayed = skein.run(&["replay", "--cid", &cid, "-m", "echo", "--format", "json"]);
    assert_eq!(replayed.status.code(), Some(0), "{}", stderr(&replayed));
    let report: Value = serde_json::from_slice(&replayed.stdout).unwrap();
    let id = report["replay"].as_str().unwrap();
    let said = stderr(&replayed);
    assert!(
        said.contains(&format!("replay {id}: 1 turn(s)"))
            && said.contains(&format!("skein replay --resume {id}")),
        "{said}"
    );
    let (code, output) =
        crate::pty::Terminal::spawn(skein.command(&["replay", "--cid", &cid, "-m", "echo"]))
            .finish_with_output();
    assert_eq!(code, Some(0), "{output}");
    let listed = skein.json(&["replays"]);
    let newest = listed["replays"][0]["replay"].as_str().unwrap();
    assert_ne!(newest, id);
    assert!(
        output.contains(&format!(
            "replay {newest}: 1 turn(s); if it stops, `skein replay --resume {newest}` goes on"
        )),
        "{output}"
    );
}

/// `skein replays`: replays listed newest first a page at a time (what
/// changed, the turns by their conversation's name, the results, where
/// each stands), one shown again as it ended (the question re-sent, the
/// conversation's name, what changed at the top; JUnit names cases by
/// them), and one deleted with the answers only it reached, its
/// conversation untouched; `skein replay list` points at `skein replays`.
#[test]
fn replays_are_listed_shown_again_and_deleted() {
    let skein = temp();
    let first = skein.json(&["prompt", "-m", "echo", "--name", "rivers", "Name a river."]);
    skein.json(&["prompt", "--cid", "rivers", "Name another."]);
    let output = skein.run(&[
        "replay",
        "--cid",
        "rivers",
        "-m",
        "echo",
        "--system",
        "Be brief.",
        "--format",
        "json",
    ]);
    assert_eq!(output.status.code(), Some(7), "{}", stderr(&output));
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    let id = report["replay"].as_str().unwrap().to_string();
    assert_eq!(
        report["changes"],
        serde_json::json!(["echo (model unchanged)", "system prompt replaced"])
    );
    assert_eq!(report["original_models"], serde_json::json!(["echo"]));
    assert_eq!(report["state"], "finished");
    assert_eq!(report["selection_text"], "conversation rivers");
    let turns = report["turns"].as_array().unwrap();
    let questions: Vec<&str> = turns
        .iter()
        .map(|t| t["question"].as_str().unwrap())
        .collect();
    assert_eq!(questions, ["Name a river.", "Name another."]);
    for turn in turns {
        assert_eq!(turn["conversation_name"], "rivers");
    }
    // A second replay, of one turn, with another temperature: newest first.
    let node = first["node"].as_str().unwrap();
    let second = skein.json(&[
        "replay",
        node,
        "-m",
        "echo",
        "--temperature",
        "0.5",
        "--format",
        "json",
    ]);
    let second_id = second["replay"].as_str().unwrap().to_string();
    assert_eq!(
        second["changes"],
        serde_json::json!(["echo (model unchanged)", "temperature 0.5"])
    );

    let listed = skein.ok(&["replays"]);
    let lines: Vec<&str> = listed.lines().collect();
    assert_eq!(lines.len(), 2, "{listed}");
    assert!(
        lines[0].starts_with(&second_id[..12])
            && lines[0].contains("echo (model unchanged) · temperature 0.5 · 1 turn(s): 1 turn · ")
            && lines[0].contains("0 changed, 1 held, 0 diverged, 0 failed · finished"),
        "{listed}"
    );
    assert!(
        lines[1].starts_with(&id[..12])
            && lines[1].contains("system prompt replaced · 2 turn(s): conversation rivers · ")
            && lines[1].contains("2 changed, 0 held, 0 diverged, 0 failed · finished"),
        "{listed}"
    );
    // A page at a time.
    let page = skein.ok(&["replays", "-n", "1"]);
    assert!(page.starts_with(&second_id[..12]), "{page}");
    assert!(
        page.contains("older replays: `skein replays -n 1 --page 2`"),
        "{page}"
    );
    let page = skein.ok(&["replays", "list", "-n", "1", "--page", "2"]);
    assert!(
        page.starts_with(&id[..12]) && !page.contains("older"),
        "{page}"
    );
    assert_eq!(
        skein.ok(&["replays", "-n", "1", "--page", "3"]),
        "no replays on page 3\n"
    );
    let json = skein.json(&["replays", "-n", "1"]);
    assert_eq!(json["replays"][0]["replay"], second_id.as_str());
    assert_eq!(json["replays"][0]["state"], "finished");
    assert_eq!(
        (json["page"].as_u64(), json["more"].as_bool()),
        (Some(1), Some(true))
    );

    // `skein replay list` is no node: it points at `skein replays`.
    let mistaken = skein.run(&["replay", "list"]);
    assert_eq!(mistaken.status.code(), Some(2));
    assert!(
        stderr(&mistaken).contains("replays are listed by `skein replays`"),
        "{}",
        stderr(&mistaken)
    );

    // Shown again: the report a replay ends with, exit 7 as it ended.
    let shown = skein.run(&["replays", "show", &id[..8]]);
    assert_eq!(shown.status.code(), Some(7));
    let text = String::from_utf8(shown.stdout).unwrap();
    assert!(
        text.starts_with(&format!(
            "replay {} · echo (model unchanged) · system prompt replaced\n\
             2 turn(s) selected: conversation rivers · finished\n",
            &id[..12]
        )),
        "{text}"
    );
    assert!(text.contains("CHANGED  turn 0 · rivers · "), "{text}");
    assert!(text.contains("  question: Name a river.\n"), "{text}");
    let again = skein.run(&["--json", "replays", "show", &id]);
    let again: Value = serde_json::from_slice(&again.stdout).unwrap();
    assert_eq!(again["turns"], report["turns"]);
    let junit = skein.run(&["replays", "show", &id, "--format", "junit"]);
    let xml = String::from_utf8(junit.stdout).unwrap();
    assert!(
        xml.contains("<testcase name=\"Name a river.\" classname=\"rivers\">")
            && xml.contains("<testcase name=\"Name another.\" classname=\"rivers\">")
            && xml.contains("<property name=\"change\" value=\"echo (model unchanged) · system prompt replaced\"/>"),
        "{xml}"
    );
    assert_eq!(
        skein.run(&["replays", "show", "fffffff"]).status.code(),
        Some(3)
    );
    // Texts come from the graph: a question erased since reads `[erased]`.
    let store = skein::Store::open(skein.db()).unwrap();
    let asked = store
        .node(first["node"].as_str().unwrap().parse().unwrap())
        .unwrap()
        .parent
        .unwrap();
    drop(store);
    skein.ok(&["redact", &asked.to_hex(), "--reason", "a test"]);
    let erased = skein.run(&["--json", "replays", "show", &id]);
    let erased: Value = serde_json::from_slice(&erased.stdout).unwrap();
    let questions: Vec<(u64, &str)> = erased["turns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t["seq"].as_u64().unwrap(), t["question"].as_str().unwrap()))
        .collect();
    assert!(
        questions.contains(&(0, "[erased]")) && questions.contains(&(1, "Name another.")),
        "{questions:?}"
    );

    // Deleted: a dry run changes nothing; then its rows, runs and answers
    // go, and the conversation it replayed stays whole.
    let messages = skein.count("nodes");
    let plan = skein.ok(&["replays", "delete", &id[..8], "--dry-run"]);
    assert!(
        plan.starts_with(&format!(
            "would delete replay {}: 2 replayed turn(s), 2 run(s), ",
            &id[..12]
        )),
        "{plan}"
    );
    assert_eq!(skein.count("replays"), 2);
    let done = skein.json(&["replays", "delete", &id]);
    assert_eq!(done["deleted_replays"], serde_json::json!([id]));
    assert_eq!(
        (done["replay_turns"].as_u64(), done["runs"].as_u64()),
        (Some(2), Some(2))
    );
    assert_eq!(done["conversations"], serde_json::json!([]));
    assert!(done["messages"].as_u64().unwrap() >= 2);
    assert_eq!(skein.count("replays"), 1);
    assert_eq!(
        skein.count("nodes"),
        messages - done["messages"].as_u64().unwrap() as i64
    );
    let log = skein.json(&["log", "--cid", "rivers"]);
    assert_eq!(log["messages"].as_array().unwrap().len(), 4, "{log}");
    assert_eq!(skein.ok(&["replays"]).lines().count(), 1);
    assert_eq!(
        skein.run(&["replays", "delete", &id]).status.code(),
        Some(3)
    );
    let store = skein::Store::open(skein.db()).unwrap();
    assert!(store.verify().unwrap().is_ok());
}

/// Where a replay stands: running while a worker's lease on a turn holds,
/// stopped once it passed (with turns left), finished; a running replay
/// is not deleted from under its worker.
#[test]
fn a_replay_is_running_then_stopped_and_a_running_one_is_not_deleted() {
    let skein = temp();
    let first = skein.json(&["prompt", "-m", "echo", "hello"]);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let store = skein::Store::open(skein.db()).unwrap();
    let id = runtime.block_on(async {
        use skein::recorded::replay::{ReplayPlan, Replayer, Selection};
        let echo = skein::Model::open("echo").unwrap();
        let selection = Selection::new().turn(first["node"].as_str().unwrap().parse().unwrap());
        Replayer::new(&store, echo)
            .start(&selection, &ReplayPlan::new("echo"))
            .await
            .unwrap()
    });
    let row = || skein.ok(&["replays"]);
    assert!(row().contains("· stopped at 0/1"), "{}", row());
    assert!(
        row().contains(&format!(
            "a stopped replay goes on with `skein replay --resume {}`",
            id.short()
        )),
        "{}",
        row()
    );
    store
        .claim_replay_turns(&id, "elsewhere", 1, 60_000)
        .unwrap();
    assert!(row().contains("· running at 0/1"), "{}", row());
    let refused = skein.run(&["replays", "delete", id.as_str()]);
    assert_eq!(refused.status.code(), Some(1));
    assert!(
        stderr(&refused).contains("is running"),
        "{}",
        stderr(&refused)
    );
    assert_eq!(skein.count("replays"), 1);
    // Its worker stops renewing: stopped, and resumed to the end.
    store.renew_replay_leases(&id, "elsewhere", -1).unwrap();
    assert!(row().contains("· stopped at 0/1"), "{}", row());
    let resumed = skein.run(&["replay", "--resume", id.as_str()]);
    assert_eq!(resumed.status.code(), Some(0), "{}", stderr(&resumed));
    assert!(row().ends_with("· finished\n"), "{}", row());
    let deleted = skein.ok(&["replays", "delete", id.as_str()]);
    assert!(deleted.starts_with("deleted replay"), "{deleted}");
}

/// A 500-turn replay killed at 10 points resumes each time where it
/// stopped; finished, every turn was replayed once (one run each) and
/// `verify` is clean.
#[test]
fn a_replay_killed_ten_times_resumes_and_replays_every_turn_once() {
    let skein = temp();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let store = skein::Store::open(skein.db()).unwrap();
    let id = runtime.block_on(async {
        use skein::recorded::replay::{ReplayPlan, Replayer, Selection};
        let echo = skein::Model::open("echo").unwrap();
        let mut selection = Selection::new();
        for c in 0..25 {
            let conversation = skein::Conversation::builder(echo.clone())
                .store(&store)
                .build();
            for t in 0..20 {
                conversation
                    .prompt(format!("conversation {c}, question {t}"))
                    .send()
                    .await
                    .unwrap();
            }
            selection = selection.conversation(conversation.id().clone());
        }
        Replayer::new(&store, echo)
            .start(&selection, &ReplayPlan::new("echo"))
            .await
            .unwrap()
    });
    // Pseudo-random kill points, reproducible.
    let mut seed: u64 = 0x5eed;
    let mut next = || {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        20 + (seed >> 33) % 120
    };
    for _ in 0..10 {
        let before = store.replay_totals(&id).unwrap().done;
        let mut worker = skein
            .command(&["replay", "--resume", id.as_str(), "--lease", "1"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // Killed once it has replayed a turn (a loaded machine may take
        // long to start it), then a little later, mid-replay.
        let started = std::time::Instant::now();
        while store.replay_totals(&id).unwrap().done == before
            && started.elapsed() < std::time::Duration::from_secs(30)
        {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        std::thread::sleep(std::time::Duration::from_millis(next() / 4));
        let _ = worker.kill();
        worker.wait().unwrap();
        // The killed worker's claims pass after its one-second lease.
        std::thread::sleep(std::time::Duration::from_millis(1100));
    }
    let killed = store.replay_totals(&id).unwrap();
    assert!(
        killed.done > 0 && killed.done < 500,
        "the kills fell mid-replay: {killed:?}"
    );
    let last = skein.run(&["replay", "--resume", id.as_str(), "--format", "json"]);
    assert_eq!(last.status.code(), Some(0), "{}", stderr(&last));
    let totals = store.replay_totals(&id).unwrap();
    assert_eq!((totals.done, totals.held), (500, 500));
    let listed: usize = store
        .replay_turns(&id, None, 1000)
        .unwrap()
        .iter()
        .map(|turn| turn.runs.len())
        .sum();
    assert_eq!(listed, 500);
    let replayed = store
        .recent_runs(100_000)
        .unwrap()
        .into_iter()
        .filter(|run| {
            run.relations
                .contains(&skein::store::Relation::Replay(id.clone()))
        })
        .count();
    assert_eq!(replayed, 500, "no turn recorded twice, none half");
    assert!(store.verify().unwrap().is_ok());
}

/// A recorded turn's reply that two conversations share (a fork stands at
/// it): `explain` and `rerun` find the turn in the conversation whose turn
/// produced it, never in the fork that only holds the node, and `reply`
/// goes on in the fork, which the node heads (the turn layer's
/// `producer_of_node` and `owner_of_node`).
#[test]
fn explain_and_rerun_of_a_reply_a_fork_stands_at_find_the_turn_that_made_it() {
    let skein = temp();
    let turn = skein.json(&[
        "prompt",
        "--source",
        "notes=the sky is green today",
        "what colour is the sky?",
    ]);
    let node = turn["node"].as_str().unwrap()[..12].to_string();
    let fork = skein.json(&["fork", &node, "--name", "standing"]);
    let fork_id = fork["id"].as_str().unwrap().to_string();

    let explained = skein.json(&["explain", &node, "--embedder", "lexical"]);
    assert_eq!(explained["suspects"][0]["id"], "notes", "{explained}");
    let rerun = skein.json(&[
        "rerun",
        &node,
        "--ignore",
        "notes",
        "--embedder",
        "lexical",
        "--samples",
        "2",
    ]);
    assert_eq!(rerun["removed"][0], "notes", "{rerun}");
    let reply = skein.json(&["reply", &node, "and the grass?"]);
    assert_eq!(reply["conversation"], fork_id.as_str(), "{reply}");
}

/// `skein tree` draws sibling first messages (edits of a thread's first
/// message) as branches of one family, labels each member with how it
/// joined (`fork of`, `edit or retry of`), and collapses a turn's replays
/// to one label (`2 replays: ...`) without drawing their answers.
#[test]
fn tree_draws_sibling_roots_labels_branch_kinds_and_collapses_replays() {
    let skein = temp();
    let first = skein.json(&["prompt", "-m", "echo", "--name", "main", "one"]);
    let node = first["node"].as_str().unwrap()[..12].to_string();
    skein.json(&["fork", &node, "--name", "side", "two"]);
    let chat = skein.run_with_stdin(&["chat", "--cid", "main"], b"!edit one, reworded\n");
    assert!(chat.status.success(), "{}", stderr(&chat));
    let other = skein.dir().join("other.toml");
    std::fs::write(&other, "[[rules]]\nreply = \"something else\"\n").unwrap();
    let other = format!("scripted:{}", other.display());
    for model in ["echo", other.as_str()] {
        let replayed = skein.run(&["replay", "--cid", "main", "-m", model]);
        assert!(
            matches!(replayed.status.code(), Some(0 | 7)),
            "{}",
            stderr(&replayed)
        );
    }
    let drawn = skein.ok(&["tree", "main"]);
    assert!(drawn.contains("├─ ") && drawn.contains("└─ "), "{drawn}");
    let roots: Vec<&str> = drawn
        .lines()
        .filter(|line| line.starts_with("├─ ") || line.starts_with("└─ "))
        .collect();
    assert_eq!(roots.len(), 2, "two first messages, as siblings: {drawn}");
    assert!(drawn.contains("[fork of "), "{drawn}");
    assert!(drawn.contains("'s first message]"), "{drawn}");
    assert!(drawn.contains("2 replays: 1 changed, 1 held"), "{drawn}");
    assert!(
        !drawn.contains("something else"),
        "a replay's answer is not drawn: {drawn}"
    );
}

/// With no `--embedder`, replays, reruns and explanations compare with
/// MiniLM where it is on the machine, and where it is not, with the
/// lexical embedder, saying so on stderr (never failing for it); naming
/// `minilm` where it is missing fails and says how to fetch it.
#[test]
fn the_default_embedder_is_minilm_where_it_is_downloaded_else_lexical_said_so() {
    let skein = temp();
    let turn = skein.json(&["prompt", "--source", "notes=the sky is green", "the sky?"]);
    let node = turn["node"].as_str().unwrap()[..12].to_string();
    let empty = skein.dir().join("no-models");
    std::fs::create_dir_all(&empty).unwrap();
    let without = |args: &[&str]| {
        skein
            .command(args)
            .env("SKEIN_MODELS_DIR", &empty)
            .output()
            .unwrap()
    };
    for args in [
        vec!["explain", node.as_str()],
        vec!["replay", node.as_str(), "-m", "echo"],
    ] {
        let output = without(&args);
        assert!(output.status.success(), "{args:?}: {}", stderr(&output));
        assert!(
            stderr(&output).contains("comparing with the lexical embedder")
                && stderr(&output).contains("skein models pull minilm"),
            "{args:?}: {}",
            stderr(&output)
        );
    }
    let named = without(&["explain", node.as_str(), "--embedder", "minilm"]);
    assert!(!named.status.success());
    assert!(
        stderr(&named).contains("skein models pull minilm"),
        "{}",
        stderr(&named)
    );
    let unknown = skein.run(&["explain", node.as_str(), "--embedder", "bert"]);
    assert_eq!(unknown.status.code(), Some(2), "{}", stderr(&unknown));
    // Where MiniLM is downloaded (the setup script fetches it), no note.
    let with = skein.run(&["explain", node.as_str()]);
    assert!(with.status.success(), "{}", stderr(&with));
    assert!(
        !stderr(&with).contains("lexical embedder"),
        "{}",
        stderr(&with)
    );
}
