//! `skein import --from-llm` against a database written by the real `llm`
//! (0.36, with the `llm-echo` model; installed by `scripts/python-clients`
//! and found through `SKEIN_TEST_VENV`): a three-turn conversation, a fork
//! of it, and a tool-using chain; and, in databases written here, the models
//! the conversations keep and the title of an empty prompt.

use skein_testkit::Cli;
use skein_testkit::cli::stderr;
use std::path::Path;
use std::process::Command;

fn skein(db: &Path, args: &[&str]) -> std::process::Output {
    Cli::new(crate::BIN, db).run(args)
}

#[test]
fn an_llm_database_imports_with_its_threads_forks_and_tool_calls() {
    let Some(python) = crate::python::python() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path().join("logs.db");
    let written = Command::new(python)
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/llm_history.py"))
        .arg(&logs)
        .env("LLM_USER_PATH", dir.path())
        .output()
        .unwrap();
    assert!(
        written.status.success(),
        "llm failed: {}",
        String::from_utf8_lossy(&written.stderr)
    );

    let db = dir.path().join("skein.db");
    let output = skein(
        &db,
        &["--json", "import", "--from-llm", logs.to_str().unwrap()],
    );
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let llm = rusqlite_count(&logs, "SELECT count(*) FROM messages");
    assert_eq!(report["messages"], llm);
    assert_eq!(report["conversations"], 3);
    assert_eq!(
        report["runs"],
        rusqlite_count(&logs, "SELECT count(*) FROM turns")
    );

    let store = skein::Store::open(&db).unwrap();
    assert!(store.verify().unwrap().is_ok());
    // One node per llm message: shared prefixes stay shared.
    let nodes: i64 = store
        .raw_connection()
        .unwrap()
        .query_row("SELECT count(*) FROM nodes", [], |row| row.get(0))
        .unwrap();
    assert_eq!(nodes, llm);

    let conversations = store.list_conversations(10).unwrap();
    let main = conversations
        .iter()
        .find(|c| c.name.as_deref() == Some("first question"))
        .expect("the conversation");
    assert_eq!(
        main.settings.model.as_deref(),
        Some("echo"),
        "llm-echo's conversation runs on skein's echo"
    );
    let thread = store.load_thread(main.head.unwrap()).unwrap();
    let texts: Vec<String> = thread.messages().iter().map(|m| m.joined_text()).collect();
    assert_eq!(texts.len(), 7, "system and three turns: {texts:?}");
    assert_eq!(texts[0], "Be brief.");
    assert_eq!(texts[1], "first question");
    assert_eq!(texts[5], "third question");

    let fork = conversations
        .iter()
        .find(|c| c.name.as_deref() == Some("the fork"))
        .expect("the fork");
    let origin = fork.origin.clone().expect("a fork keeps its origin");
    assert_eq!(origin.conversation.as_ref(), Some(&main.id));
    // The fork started at the first reply (node 3 of the main thread).
    assert_eq!(origin.node, thread.nodes().get(2).map(|node| node.id()));
    let fork_thread = store.load_thread(fork.head.unwrap()).unwrap();
    assert_eq!(
        fork_thread.head().unwrap().message().joined_text(),
        "a forked question"
    );
    // What the import wrote is searchable, with the conversation it is in.
    let forked = store
        .search(&skein::store::SearchQuery::new("forked"))
        .unwrap();
    assert_eq!(forked.matches.len(), 1, "{forked:?}");
    assert_eq!(forked.matches[0].conversations[0].id, fork.id);
    let third = store
        .search(&skein::store::SearchQuery::new("third question"))
        .unwrap();
    let asked = thread.nodes()[5].id();
    assert!(
        third
            .matches
            .iter()
            .any(|m| m.node == asked && m.snippet == "third question"),
        "{third:?}"
    );

    // The chain: a tool call with its arguments, and its result.
    let all_parts: Vec<skein::Part> = conversations
        .iter()
        .filter_map(|c| c.head)
        .flat_map(|head| {
            store
                .load_thread(head)
                .unwrap()
                .messages()
                .iter()
                .flat_map(|m| m.parts.clone())
                .collect::<Vec<_>>()
        })
        .collect();
    let call = all_parts
        .iter()
        .find_map(|part| match part {
            skein::Part::ToolCall(call) => Some(call.clone()),
            _ => None,
        })
        .expect("the tool call");
    assert_eq!(call.name, "multiply");
    let arguments: serde_json::Value = serde_json::from_str(&call.arguments).unwrap();
    assert_eq!(arguments, serde_json::json!({"a": 6, "b": 7}));
    let result = all_parts
        .iter()
        .find_map(|part| match part {
            skein::Part::ToolResult(result) => Some(result.clone()),
            _ => None,
        })
        .expect("the tool result");
    assert_eq!(result.call_id, call.id);
    assert_eq!(result.content, "42");
    // Runs keep the tools each turn offered.
    let with_tools: i64 = store
        .raw_connection()
        .unwrap()
        .query_row("SELECT count(DISTINCT run_id) FROM run_tools", [], |row| {
            row.get(0)
        })
        .unwrap();
    assert_eq!(with_tools, 2);

    // Importing again changes nothing.
    let again = skein(
        &db,
        &["--json", "import", "--from-llm", logs.to_str().unwrap()],
    );
    let report: serde_json::Value = serde_json::from_slice(&again.stdout).unwrap();
    assert_eq!(report["conversations"], 0);
    assert_eq!(report["runs"], 0);
}

#[test]
fn a_file_that_is_not_an_llm_database_is_refused_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("skein.db");
    let other = dir.path().join("other.db");
    skein::Store::open(&other).unwrap();
    let output = skein(&db, &["import", "--from-llm", other.to_str().unwrap()]);
    assert!(!output.status.success());
    let message = String::from_utf8_lossy(&output.stderr);
    assert!(message.contains("not an `llm` 0.3x logs.db"), "{message}");
    let missing = skein(&db, &["import", "--from-llm", "/nonexistent/logs.db"]);
    assert!(String::from_utf8_lossy(&missing.stderr).contains("llm logs path"));
}

fn rusqlite_count(path: &Path, sql: &str) -> i64 {
    rusqlite::Connection::open(path)
        .unwrap()
        .query_row(sql, [], |row| row.get(0))
        .unwrap()
}

/// A logs.db whose turn names a message that does not exist imports
/// nothing: exit code 6, and the error says what was wrong and that nothing
/// was imported. (The store's tests cover every kind of damage on both
/// backends.)
#[test]
fn a_damaged_llm_database_is_rejected_whole() {
    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path().join("logs.db");
    rusqlite::Connection::open(&logs)
        .unwrap()
        .execute_batch(
            "CREATE TABLE threads (id TEXT, name TEXT, tip_message_hash TEXT, forked_from TEXT,
                 datetime_utc TEXT);
             CREATE TABLE messages (hash TEXT, parent_hash TEXT, role TEXT);
             CREATE TABLE parts (id INTEGER PRIMARY KEY, message_hash TEXT, type TEXT, text TEXT,
                 payload TEXT, position INTEGER);
             CREATE TABLE turns (id TEXT, thread_id TEXT, parent_message_hash TEXT,
                 tip_message_hash TEXT, model TEXT, resolved_model TEXT, input_tokens INTEGER,
                 output_tokens INTEGER, duration_ms INTEGER, datetime_utc TEXT, options_json TEXT);
             INSERT INTO messages VALUES ('q', NULL, 'user'), ('a', 'q', 'assistant');
             INSERT INTO parts(message_hash, type, text, position)
                 VALUES ('q', 'text', 'question', 0), ('a', 'text', 'answer', 0);
             INSERT INTO threads VALUES ('t', 'a thread', 'a', NULL, '2026-01-01 10:00:00');
             INSERT INTO turns VALUES ('good', 't', 'q', 'a', 'echo', NULL, 1, 1, 5,
                 '2026-01-01 10:00:00', NULL);
             INSERT INTO turns VALUES ('bad', 't', 'a', 'missing', 'echo', NULL, 1, 1, 5,
                 '2026-01-01 10:01:00', NULL);",
        )
        .unwrap();
    let db = dir.path().join("skein.db");
    let output = skein(&db, &["import", "--from-llm", logs.to_str().unwrap()]);
    let message = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(6), "{message}");
    assert!(
        message.contains("turn bad names message missing as its reply"),
        "{message}"
    );
    assert!(message.contains("nothing was imported"), "{message}");
    // The database this import created is gone again: no empty file.
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|entry| entry.unwrap().file_name())
        .collect();
    assert_eq!(left, ["logs.db"], "only the input is left");
}

/// A logs.db of four threads: on `gpt-4o-mini`, on `echo` (a name skein
/// runs as it is), on a model skein has no name for, and an empty prompt
/// (which `llm` names nothing).
fn llm_database_of_models(logs: &Path) {
    rusqlite::Connection::open(logs)
        .unwrap()
        .execute_batch(
            "CREATE TABLE threads (id TEXT, name TEXT, tip_message_hash TEXT, forked_from TEXT,
                 datetime_utc TEXT);
             CREATE TABLE messages (hash TEXT, parent_hash TEXT, role TEXT);
             CREATE TABLE parts (id INTEGER PRIMARY KEY, message_hash TEXT, type TEXT, text TEXT,
                 payload TEXT, position INTEGER);
             CREATE TABLE turns (id TEXT, thread_id TEXT, parent_message_hash TEXT,
                 tip_message_hash TEXT, model TEXT, resolved_model TEXT, input_tokens INTEGER,
                 output_tokens INTEGER, duration_ms INTEGER, datetime_utc TEXT, options_json TEXT);
             INSERT INTO messages VALUES ('q1', NULL, 'user'), ('a1', 'q1', 'assistant'),
                 ('q2', NULL, 'user'), ('a2', 'q2', 'assistant'),
                 ('q3', NULL, 'user'), ('a3', 'q3', 'assistant'),
                 ('a4', NULL, 'assistant');
             INSERT INTO parts(message_hash, type, text, position) VALUES
                 ('q1', 'text', 'on openai', 0), ('a1', 'text', 'answer one', 0),
                 ('q2', 'text', 'on echo', 0), ('a2', 'text', 'answer two', 0),
                 ('q3', 'text', 'on mistral', 0), ('a3', 'text', 'answer three', 0),
                 ('a4', 'text', 'an answer to nothing', 0);
             INSERT INTO threads VALUES
                 ('t1', 'on openai', 'a1', NULL, '2026-01-01 10:00:00'),
                 ('t2', 'on echo', 'a2', NULL, '2026-01-01 10:01:00'),
                 ('t3', 'on mistral', 'a3', NULL, '2026-01-01 10:02:00'),
                 ('t4', '', 'a4', NULL, '2026-01-01 10:03:00');
             INSERT INTO turns VALUES
                 ('u1', 't1', 'q1', 'a1', 'gpt-4o-mini', 'gpt-4o-mini-2024-07-18', 1, 1, 5,
                     '2026-01-01 10:00:00', NULL),
                 ('u2', 't2', 'q2', 'a2', 'echo', NULL, 1, 1, 5, '2026-01-01 10:01:00', NULL),
                 ('u3', 't3', 'q3', 'a3', 'mistral-7b-instruct', NULL, 1, 1, 5,
                     '2026-01-01 10:02:00', NULL),
                 ('u4', 't4', NULL, 'a4', 'echo', NULL, 1, 1, 5, '2026-01-01 10:03:00', NULL);",
        )
        .unwrap();
}

/// An imported conversation keeps its model, under skein's name for it
/// where skein has one (`gpt-4o-mini` is `openai:gpt-4o-mini`), so going
/// on with it answers on that model, not the default; a model skein cannot
/// run is kept as `llm` named it, the summary says so, and continuing
/// asks for `-m`. An empty prompt's conversation has a title that says so,
/// not `()`.
#[test]
fn an_imported_conversation_keeps_its_model_and_an_empty_prompt_a_title() {
    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path().join("logs.db");
    llm_database_of_models(&logs);
    let db = dir.path().join("skein.db");
    let skein = Cli::new(crate::BIN, &db);
    let summary = skein.ok(&["import", "--from-llm", logs.to_str().unwrap()]);
    assert!(
        summary.contains("gpt-4o-mini → openai:gpt-4o-mini"),
        "{summary}"
    );
    assert!(
        summary.contains("which skein cannot run: mistral-7b-instruct"),
        "{summary}"
    );
    let listed = skein.json(&["conversations"]);
    let model_of = |name: &str| {
        listed
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == name)
            .unwrap_or_else(|| panic!("{name}: {listed}"))["meta"]["model"]
            .clone()
    };
    assert_eq!(model_of("on openai"), "openai:gpt-4o-mini");
    assert_eq!(model_of("on echo"), "echo");
    assert_eq!(model_of("on mistral"), "mistral-7b-instruct");
    let empty = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["meta"]["llm_thread"] == "t4")
        .unwrap();
    assert_eq!(empty["name"], serde_json::Value::Null, "{empty}");
    assert_eq!(empty["meta"]["title"], "(empty prompt)", "{empty}");
    let text = skein.ok(&["conversations"]);
    assert!(text.contains("(empty prompt)"), "{text}");
    assert!(!text.contains("()"), "{text}");

    // The default model here is a scripted one: the imported conversation
    // answers on its own model, echo.
    let rules = dir.path().join("default.toml");
    std::fs::write(&rules, "[[rules]]\nreply = \"the default answered\"\n").unwrap();
    let continued = skein
        .command(&["--json", "--cid", "on echo", "and more"])
        .env("SKEIN_MODEL", format!("scripted:{}", rules.display()))
        .output()
        .unwrap();
    assert!(continued.status.success(), "{}", stderr(&continued));
    let reply: serde_json::Value = serde_json::from_slice(&continued.stdout).unwrap();
    assert!(
        reply["text"]
            .as_str()
            .unwrap()
            .starts_with("echo: \"and more\""),
        "{reply}"
    );
    let unknown = skein.run(&["--cid", "on mistral", "and more"]);
    assert_eq!(unknown.status.code(), Some(2), "{}", stderr(&unknown));
    let said = stderr(&unknown);
    assert!(said.contains("`mistral-7b-instruct`"), "{said}");
    assert!(said.contains("-m MODEL"), "{said}");
}
