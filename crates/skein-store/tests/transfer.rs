//! Export, import and verify: identical ids across databases, tampered
//! exports rejected whole, tampered rows reported.

mod common;

use common::{TempStore, append_turn};
use skein_core::{Attachment, Message, Part, Role};
use skein_store::{NewConversation, Store, StoreError};

fn populated() -> TempStore {
    let db = TempStore::new();
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
    db
}

fn export(store: &Store) -> String {
    let mut out = Vec::new();
    store.export(&mut out).unwrap();
    String::from_utf8(out).unwrap()
}

fn ids(db: &TempStore) -> Vec<Vec<u8>> {
    let conn = db.store.raw_connection().unwrap();
    let mut stmt = conn.prepare("SELECT id FROM nodes ORDER BY id").unwrap();
    stmt.query_map([], |row| row.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

#[test]
fn export_then_import_into_an_empty_database_reproduces_identical_ids() {
    let source = populated();
    let text = export(&source.store);
    let target = TempStore::new();
    let report = target.store.import(&mut text.as_bytes()).unwrap();
    assert_eq!(report.nodes_written as i64, source.count("nodes"));
    assert_eq!(report.conversations, 2);
    assert_eq!(report.runs as i64, source.count("runs"));
    assert_eq!(ids(&target), ids(&source));
    assert_eq!(target.count("blobs"), 1);
    assert!(target.store.verify().unwrap().is_ok());
    // Conversations, forks and runs come across too.
    for conversation in source.store.list_conversations(10).unwrap() {
        assert_eq!(
            target.store.conversation(&conversation.id).unwrap(),
            conversation
        );
    }
    for run in source.store.recent_runs(100).unwrap() {
        assert_eq!(target.store.run_record(&run.id).unwrap(), run);
    }
    // Exporting the import gives the same file; importing again changes nothing.
    assert_eq!(export(&target.store), text);
    let again = target.store.import(&mut text.as_bytes()).unwrap();
    assert_eq!(again.nodes_written, 0);
    assert_eq!(again.nodes_present as i64, source.count("nodes"));
}

#[test]
fn a_tampered_export_is_rejected_whole_naming_the_line() {
    let source = populated();
    let text = export(&source.store);
    let tampered = text.replacen("reply to turn 3", "reply to turn 3 (edited)", 1);
    assert_ne!(tampered, text);
    let line = tampered
        .lines()
        .position(|l| l.contains("(edited)"))
        .unwrap()
        + 1;
    let target = TempStore::new();
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

#[test]
fn malformed_lines_and_orphans_abort_the_import() {
    let source = populated();
    let text = export(&source.store);
    let target = TempStore::new();

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
        target.store.import(&mut "".as_bytes()),
        Err(StoreError::Import { .. })
    ));
    assert_eq!(target.count("nodes"), 0);
}

#[test]
fn verify_reports_a_tampered_row_and_a_tampered_blob() {
    let db = populated();
    assert!(db.store.verify().unwrap().is_ok());
    let conn = db.store.raw_connection().unwrap();
    // Rewrite one node's body with other (valid) content.
    let body = skein_core::encoding::encode_body(&Message::user("forged"), 4096).bytes;
    conn.execute("UPDATE nodes SET body = ?1 WHERE seq = 3", [body])
        .unwrap();
    conn.execute("UPDATE blobs SET bytes = x'00'", []).unwrap();
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

#[test]
fn a_database_from_a_newer_skein_is_refused() {
    let db = TempStore::new();
    db.store
        .raw_connection()
        .unwrap()
        .pragma_update(None, "user_version", 99)
        .unwrap();
    let error = Store::open(db.path()).unwrap_err();
    assert!(
        matches!(error, StoreError::NewerSchema { found: 99, .. }),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn async_callers_use_the_blocking_pool() {
    let db = TempStore::new();
    let thread = common::history("sys", 5);
    let stored = thread.clone();
    let report = db
        .store
        .run(move |store| store.append(&stored))
        .await
        .unwrap();
    assert_eq!(report.written, 5);
    let head = thread.head_id().unwrap();
    let loaded = db
        .store
        .run(move |store| store.load_thread(head))
        .await
        .unwrap();
    assert_eq!(loaded, thread);
}
