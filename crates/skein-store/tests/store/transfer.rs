//! Export, import and verify: identical ids across databases, tampered
//! exports and records pointing at nothing rejected whole, endless lines
//! refused at the line limit, tampered rows reported. (The import from an
//! `llm` database, which writes through `import_records`, is tested with
//! it, in `crates/skein/tests/import.rs`.)

use crate::common::{Backend, TempStore, append_turn};
use serde_json::Value;
use skein_core::{Attachment, Message, Part, Role, ToolSpec};
use skein_store::{
    NewConversation, RerunCommit, RerunId, RerunRecord, RunRecord, Store, StoreError,
};
use std::io::{BufReader, Read};

fn populated(backend: Backend) -> TempStore {
    let db = TempStore::new(backend);
    let conversation = db
        .store
        .create_conversation(NewConversation {
            name: Some("main".into()),
            ..Default::default()
        })
        .unwrap();
    for i in 0..5 {
        append_turn(&db.store, &conversation.id, &format!("turn {i}"));
    }
    let head = db
        .store
        .conversation(&conversation.id)
        .unwrap()
        .head
        .unwrap();
    let thread = db.store.load_thread(head).unwrap();
    let middle = thread.nodes()[4].id();
    let fork = db
        .store
        .fork(middle, Some("fork".into()), Some(conversation.id.clone()))
        .unwrap();
    append_turn(&db.store, &fork.id, "forked turn");
    let with_blob = thread.push(Message::new(
        Role::User,
        vec![Part::Attachment(Attachment {
            media_type: "image/png".into(),
            data: vec![7; 9000],
        })],
    ));
    db.store.append(&with_blob).unwrap();
    // A rerun of the main line's first turn without its system prompt.
    let turn = thread.nodes()[2].id();
    let answer = skein_core::Thread::from_messages([
        Message::user("turn 0"),
        Message::assistant("another reply"),
    ]);
    let mut run = RunRecord::new("echo", "echo");
    run.input_head = answer.parent().head_id();
    run.output_head = answer.head_id();
    let rerun = RerunRecord {
        id: RerunId::random(),
        conversation: conversation.id.clone(),
        turn: 0,
        turn_node: turn,
        request_head: run.input_head,
        answer_head: run.output_head,
        ablation: vec!["system".into()],
        samples: 1,
        sample_runs: vec![run.id.clone()],
        baseline_runs: vec![],
        verdict: None,
        summary: "the reply changed".into(),
        detail: serde_json::json!({"answers": ["another reply"]}),
        created_ms: 42,
    };
    db.store
        .commit_rerun(&RerunCommit {
            record: &rerun,
            threads: std::slice::from_ref(&answer),
            runs: std::slice::from_ref(&run),
        })
        .unwrap();
    db
}

fn export(store: &Store) -> String {
    let mut out = Vec::new();
    store.export(&mut out).unwrap();
    String::from_utf8(out).unwrap()
}

/// The node ids an export lists, in file order.
fn exported_ids(text: &str) -> Vec<skein_core::NodeId> {
    text.lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap())
        .filter(|line| line["kind"] == "node")
        .map(|line| line["id"].as_str().unwrap().parse().unwrap())
        .collect()
}

fn export_then_import_into_an_empty_database_reproduces_identical_ids(backend: Backend) {
    let source = populated(backend);
    let text = export(&source.store);
    let target = TempStore::new(backend);
    let report = target.store.import(&mut text.as_bytes()).unwrap();
    assert_eq!(report.nodes_written as i64, source.count("nodes"));
    assert_eq!(report.conversations, 2);
    assert_eq!(report.runs as i64, source.count("runs"));
    let ids = exported_ids(&text);
    assert_eq!(ids.len() as i64, source.count("nodes"));
    for id in &ids {
        assert!(target.store.contains(*id).unwrap(), "{id:?} imported");
    }
    assert_eq!(target.count("blobs"), 1);
    assert!(target.store.verify().unwrap().is_ok());
    // Conversations, forks and runs come across too.
    for conversation in source.store.list_conversations(10).unwrap() {
        let mut imported = target.store.conversation(&conversation.id).unwrap();
        assert!(
            imported.imported,
            "marked as imported where it was imported"
        );
        imported.imported = false;
        assert_eq!(imported, conversation);
    }
    for run in source.store.recent_runs(100).unwrap() {
        assert_eq!(target.store.run_record(&run.id).unwrap(), run);
    }
    let reruns = source.store.all_reruns().unwrap();
    assert_eq!(reruns.len(), 1);
    assert_eq!(report.reruns, 1);
    assert_eq!(target.store.all_reruns().unwrap(), reruns);
    // Exporting the import gives the same file; importing again changes nothing.
    assert_eq!(export(&target.store), text);
    let again = target.store.import(&mut text.as_bytes()).unwrap();
    assert_eq!(again.nodes_written, 0);
    assert_eq!(again.nodes_present as i64, source.count("nodes"));
}

/// A version 1 export (before reruns were exported) still imports.
fn an_export_from_before_reruns_still_imports(backend: Backend) {
    let source = populated(backend);
    let text = export(&source.store);
    let version_1: Vec<String> = text
        .lines()
        .filter(|line| {
            ![
                "rerun",
                "replay",
                "replay_turn",
                "label",
                "deleted_conversation",
                "request_piece",
                "run_body",
            ]
            .iter()
            .any(|kind| line.starts_with(&format!("{{\"kind\":\"{kind}\"")))
        })
        .map(|line| line.replacen("\"version\":5", "\"version\":1", 1))
        .collect();
    assert!(version_1[0].contains("\"version\":1"), "{}", version_1[0]);
    let target = TempStore::new(backend);
    let report = target
        .store
        .import(&mut version_1.join("\n").as_bytes())
        .unwrap();
    assert_eq!(report.nodes_written as i64, source.count("nodes"));
    assert_eq!(report.reruns, 0);
    let future = text.replacen("\"version\":5", "\"version\":6", 1);
    let error = target.store.import(&mut future.as_bytes()).unwrap_err();
    assert!(error.to_string().contains("versions 1 to 5"), "{error}");
}

/// A rerun whose re-run turn is in neither the file nor the database would
/// have dangling provenance: the import stops at its line, and keeps nothing.
fn a_rerun_of_an_unknown_turn_aborts_the_import(backend: Backend) {
    let source = populated(backend);
    let text = export(&source.store);
    let turn = source.store.all_reruns().unwrap()[0].turn_node.to_hex();
    let unknown = "ab".repeat(32);
    let lines: Vec<String> = text
        .lines()
        .map(|line| match line.starts_with("{\"kind\":\"rerun\"") {
            true => line.replace(&turn, &unknown),
            false => line.to_string(),
        })
        .collect();
    let at = lines
        .iter()
        .position(|line| line.contains(&unknown))
        .unwrap()
        + 1;
    let target = TempStore::new(backend);
    match target.store.import(&mut lines.join("\n").as_bytes()) {
        Err(StoreError::Import { line, problem }) => {
            assert_eq!(line, at);
            assert!(problem.contains("re-ran node"), "{problem}");
        }
        other => panic!("expected an import error, got {other:?}"),
    }
    assert_eq!(target.count("nodes"), 0);
    assert_eq!(target.count("reruns"), 0);
}

fn a_node_listed_twice_is_imported_once(backend: Backend) {
    let source = populated(backend);
    let text = export(&source.store);
    let mut lines: Vec<&str> = text.lines().collect();
    let repeated = lines[3];
    lines.insert(5, repeated);
    let doubled = lines.join("\n");
    let target = TempStore::new(backend);
    let report = target.store.import(&mut doubled.as_bytes()).unwrap();
    assert_eq!(report.nodes_written as i64, source.count("nodes"));
    assert_eq!(report.nodes_present, 1);
    assert_eq!(export(&target.store), text);
}

fn a_tampered_export_is_rejected_whole_naming_the_line(backend: Backend) {
    let source = populated(backend);
    let text = export(&source.store);
    let tampered = text.replacen("reply to turn 3", "reply to turn 3 (edited)", 1);
    assert_ne!(tampered, text);
    let line = tampered
        .lines()
        .position(|l| l.contains("(edited)"))
        .unwrap()
        + 1;
    let target = TempStore::new(backend);
    let error = target.store.import(&mut tampered.as_bytes()).unwrap_err();
    match &error {
        StoreError::Import { line: at, problem } => {
            assert_eq!(*at, line);
            assert!(problem.contains("does not match"), "{problem}");
        }
        other => panic!("expected an import error, got {other}"),
    }
    assert_eq!(target.count("nodes"), 0, "nothing is imported");
    assert_eq!(target.count("conversations"), 0);
}

fn malformed_lines_and_orphans_abort_the_import(backend: Backend) {
    let source = populated(backend);
    let text = export(&source.store);
    let target = TempStore::new(backend);

    let broken = text.replacen("\"kind\":\"node\"", "\"kind\":\"nod\"", 1);
    assert!(matches!(
        target.store.import(&mut broken.as_bytes()),
        Err(StoreError::Import { line: 2, .. })
    ));

    let mut lines: Vec<&str> = text.lines().collect();
    lines.remove(1); // the root node: every other node becomes an orphan
    let orphaned = lines.join("\n");
    let error = target.store.import(&mut orphaned.as_bytes()).unwrap_err();
    assert!(
        error
            .to_string()
            .contains("neither in the database nor earlier"),
        "{error}"
    );

    let headless = text.lines().skip(1).collect::<Vec<_>>().join("\n");
    assert!(matches!(
        target.store.import(&mut headless.as_bytes()),
        Err(StoreError::Import { line: 1, .. })
    ));
    assert!(matches!(
        target.store.import(&mut &b""[..]),
        Err(StoreError::Import { .. })
    ));
    assert_eq!(target.count("nodes"), 0);
}

fn verify_reports_a_tampered_row_and_a_tampered_blob(backend: Backend) {
    let db = populated(backend);
    assert!(db.store.verify().unwrap().is_ok());
    // Rewrite one node's body with other (valid) content.
    let body = skein_core::encoding::encode_body(&Message::user("forged"), 4096).bytes;
    let forged = db.bytes_literal(&body);
    let changed = db
        .store
        .debug_execute(&format!(
            "UPDATE nodes SET body = {forged} WHERE seq = (SELECT seq FROM nodes ORDER BY seq LIMIT 1 OFFSET 2)"
        ))
        .unwrap();
    assert_eq!(changed, 1);
    let zero = db.bytes_literal(&[0]);
    db.store
        .debug_execute(&format!("UPDATE blobs SET bytes = {zero}"))
        .unwrap();
    let report = db.store.verify().unwrap();
    assert!(!report.is_ok());
    let kinds: Vec<String> = report
        .problems
        .iter()
        .map(|p| {
            serde_json::to_value(p).unwrap()["problem"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert!(kinds.contains(&"id_mismatch".to_string()), "{kinds:?}");
    assert!(kinds.contains(&"blob_mismatch".to_string()), "{kinds:?}");
}

fn a_database_from_a_newer_skein_is_refused(backend: Backend) {
    let db = TempStore::new(backend);
    db.set_schema_version(99);
    let error = Store::open(db.location()).unwrap_err();
    assert!(
        matches!(error, StoreError::NewerSchema { found: 99, .. }),
        "{error}"
    );
}

/// Records whose references point at nothing (in neither the database nor
/// earlier in the file) abort the import at their line, and nothing is
/// imported: conversations' heads and origins, runs' conversations and
/// heads, reruns' conversations and runs.
fn records_pointing_at_nothing_abort_the_import(backend: Backend) {
    let source = populated(backend);
    let text = export(&source.store);
    let unknown_node = Value::String("cd".repeat(32));
    let unknown_id = Value::String("0".repeat(32));
    type Edit = Box<dyn Fn(&mut Value) -> bool>;
    let set = |field: &'static str, value: Value| -> Edit {
        Box::new(move |line: &mut Value| {
            if line[field].is_null() {
                return false;
            }
            line[field] = value.clone();
            true
        })
    };
    let cases: Vec<(&str, Edit, &str)> = vec![
        (
            "conversation",
            set("head", unknown_node.clone()),
            "has head node cdcdcdcdcdcd",
        ),
        (
            "conversation",
            Box::new({
                let unknown = unknown_node.clone();
                move |line: &mut Value| {
                    if line["origin"].is_null() {
                        return false;
                    }
                    line["origin"]["node"] = unknown.clone();
                    true
                }
            }),
            "was forked at node cdcdcdcdcdcd",
        ),
        (
            "run",
            set("conversation", unknown_id.clone()),
            "belongs to conversation 000000000000",
        ),
        (
            "run",
            set("input_head", unknown_node.clone()),
            "answered node cdcdcdcdcdcd",
        ),
        (
            "run",
            set("output_head", unknown_node.clone()),
            "produced node cdcdcdcdcdcd",
        ),
        (
            "rerun",
            set("conversation", unknown_id.clone()),
            "re-ran a turn of conversation",
        ),
        (
            "rerun",
            set("sample_runs", Value::Array(vec![unknown_id.clone()])),
            "has sample run 000000000000",
        ),
    ];
    for (kind, edit, says) in cases {
        let mut at = None;
        let lines: Vec<String> = text
            .lines()
            .enumerate()
            .map(|(index, line)| {
                let mut value: Value = serde_json::from_str(line).unwrap();
                if at.is_none() && value["kind"] == kind && edit(&mut value) {
                    at = Some(index + 1);
                    return value.to_string();
                }
                line.to_string()
            })
            .collect();
        let at = at.unwrap_or_else(|| panic!("no {kind} line to edit for {says}"));
        let target = TempStore::new(backend);
        match target.store.import(&mut lines.join("\n").as_bytes()) {
            Err(StoreError::Import { line, problem }) => {
                assert_eq!(line, at, "{problem}");
                assert!(problem.contains(says), "{problem}");
                assert!(
                    problem.contains("neither in the database nor earlier"),
                    "{problem}"
                );
            }
            other => panic!("{kind} that {says}: expected an import error, got {other:?}"),
        }
        for table in ["nodes", "conversations", "runs", "reruns"] {
            assert_eq!(target.count(table), 0, "{table} after {says}");
        }
    }
}

/// An endless line (`skein import /dev/zero`) is refused once it passes the
/// line limit, which counts a line's bytes without its newline.
fn an_endless_line_is_refused_at_the_line_limit(backend: Backend) {
    struct Zeros;
    impl Read for Zeros {
        fn read(&mut self, buffer: &mut [u8]) -> std::io::Result<usize> {
            buffer.fill(0);
            Ok(buffer.len())
        }
    }
    let target = TempStore::new(backend);
    let error = target
        .store
        .import_with_line_limit(&mut BufReader::new(Zeros), 1 << 20)
        .unwrap_err();
    assert!(
        matches!(error, StoreError::LineTooLong { line: 1, limit } if limit == 1 << 20),
        "{error}"
    );
    assert!(error.to_string().contains("limit of 1 MiB"), "{error}");

    let text = export(&populated(backend).store);
    let (longest, length) = text
        .lines()
        .enumerate()
        .map(|(index, line)| (index + 1, line.len()))
        .max_by_key(|(_, length)| *length)
        .unwrap();
    match target
        .store
        .import_with_line_limit(&mut text.as_bytes(), length - 1)
    {
        Err(StoreError::LineTooLong { line, limit }) => {
            assert_eq!((line, limit), (longest, length - 1));
        }
        other => panic!("expected the line limit, got {other:?}"),
    }
    assert_eq!(target.count("nodes"), 0);
    target
        .store
        .import_with_line_limit(&mut text.as_bytes(), length)
        .unwrap();
}

/// `verify` checks runs and origins too: a run whose conversation, input
/// or output head is gone, a tool a run offered whose definition is gone,
/// a conversation whose origin node is gone, each reported by kind.
fn verify_reports_runs_and_origins_pointing_at_nothing(backend: Backend) {
    let db = populated(backend);
    let conversations = db.store.list_conversations(10).unwrap();
    let main = conversations
        .iter()
        .find(|c| c.name.as_deref() == Some("main"))
        .unwrap();
    let fork = conversations
        .iter()
        .find(|c| c.name.as_deref() == Some("fork"))
        .unwrap();
    let mut with_tool = RunRecord::new("echo", "echo");
    with_tool.conversation = Some(main.id.clone());
    with_tool.tools = vec![ToolSpec::new("clock", "the time", serde_json::json!({}))];
    db.store.record_run(&with_tool).unwrap();
    let runs = db.store.runs_of_conversation(&main.id).unwrap();
    let report = db.store.verify().unwrap();
    assert!(report.is_ok(), "{:?}", report.problems);
    assert_eq!(report.runs as i64, db.count("runs"));

    let (first, second) = (&runs[0].id, &runs[1].id);
    let unknown = db.bytes_literal(&[0xcd; 32]);
    for sql in [
        format!("UPDATE runs SET conversation = 'gone' WHERE id = '{first}'"),
        format!(
            "UPDATE runs SET input_head = {unknown}, output_head = {unknown} WHERE id = '{second}'"
        ),
        format!(
            "UPDATE conversations SET forked_from_node = {unknown} WHERE id = '{}'",
            fork.id
        ),
    ] {
        assert_eq!(db.store.debug_execute(&sql).unwrap(), 1, "{sql}");
    }
    // The tool's row goes, past the foreign key that protects it.
    match backend {
        Backend::Sqlite => db
            .store
            .raw_connection()
            .unwrap()
            .execute_batch("PRAGMA foreign_keys = OFF; DELETE FROM tools;")
            .unwrap(),
        Backend::Postgres => {
            db.store
                .debug_execute("ALTER TABLE run_tools DROP CONSTRAINT run_tools_tool_hash_fkey")
                .unwrap();
            db.store.debug_execute("DELETE FROM tools").unwrap();
        }
    }
    let report = db.store.verify().unwrap();
    let mut problems: Vec<Value> = report
        .problems
        .iter()
        .map(|problem| serde_json::to_value(problem).unwrap())
        .collect();
    problems.sort_by_key(|problem| problem.to_string());
    let node = "cd".repeat(32);
    let tool = hex(with_tool.tools[0].hash().as_bytes());
    let mut expected = vec![
        serde_json::json!({"problem": "dangling_origin", "conversation": fork.id.as_str(), "node": node}),
        serde_json::json!({"problem": "run_without_conversation", "run": first.as_str(), "conversation": "gone"}),
        serde_json::json!({"problem": "run_without_node", "run": second.as_str(), "head": "input", "node": node}),
        serde_json::json!({"problem": "run_without_node", "run": second.as_str(), "head": "output", "node": node}),
        serde_json::json!({"problem": "run_without_tool", "run": with_tool.id.as_str(), "tool": tool}),
    ];
    expected.sort_by_key(|problem| problem.to_string());
    assert_eq!(problems, expected);
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// SQLite → PostgreSQL → SQLite: every backend writes the very same export,
/// so ids, conversations, forks, runs and blobs survive the move both ways.
#[test]
fn postgres_sqlite_exports_round_trip_between_backends() {
    if crate::common::postgres_base("postgres_sqlite_exports_round_trip_between_backends").is_none()
    {
        return;
    }
    let source = populated(Backend::Sqlite);
    let text = export(&source.store);
    let postgres = TempStore::new(Backend::Postgres);
    let report = postgres.store.import(&mut text.as_bytes()).unwrap();
    assert_eq!(report.nodes_written as i64, source.count("nodes"));
    assert!(postgres.store.verify().unwrap().is_ok());
    assert_eq!(export(&postgres.store), text);
    assert_eq!(postgres.count("blobs"), 1);
    let back = TempStore::new(Backend::Sqlite);
    back.store
        .import(&mut export(&postgres.store).as_bytes())
        .unwrap();
    assert_eq!(export(&back.store), text);
}

/// `Store::run_blocking` from a multi-thread and a current-thread runtime (and inside
/// `blocking_caller`), and a blocking call made straight from an async task
/// (which a caller should not do, but which must still work rather than
/// panic or deadlock).
fn async_callers_reach_the_store_from_either_runtime(backend: Backend) {
    let db = TempStore::new(backend);
    let multi = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let current = || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    };
    let runtimes = [(multi, false), (current(), false), (current(), true)];
    for (i, (runtime, as_blocking_caller)) in runtimes.into_iter().enumerate() {
        let store = db.store.clone();
        let drive = move || {
            runtime.block_on(async move {
                let thread = crate::common::history(&format!("sys {i}"), 5);
                let stored = thread.clone();
                let report = store
                    .run_blocking(move |store| store.append(&stored))
                    .await
                    .unwrap();
                assert_eq!(report.written, 5);
                let head = thread.head_id().unwrap();
                let loaded = store
                    .run_blocking(move |store| store.load_thread(head))
                    .await
                    .unwrap();
                assert_eq!(loaded, thread);
                let direct = tokio::spawn(async move { store.load_thread(head) })
                    .await
                    .unwrap()
                    .unwrap();
                assert_eq!(direct, thread);
            });
        };
        if as_blocking_caller {
            skein_store::blocking_caller(drive);
        } else {
            drive();
        }
    }
}

for_each_backend!(
    export_then_import_into_an_empty_database_reproduces_identical_ids,
    an_export_from_before_reruns_still_imports,
    a_rerun_of_an_unknown_turn_aborts_the_import,
    a_node_listed_twice_is_imported_once,
    a_tampered_export_is_rejected_whole_naming_the_line,
    malformed_lines_and_orphans_abort_the_import,
    verify_reports_a_tampered_row_and_a_tampered_blob,
    a_database_from_a_newer_skein_is_refused,
    async_callers_reach_the_store_from_either_runtime,
    records_pointing_at_nothing_abort_the_import,
    an_endless_line_is_refused_at_the_line_limit,
    verify_reports_runs_and_origins_pointing_at_nothing,
);
