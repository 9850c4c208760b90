//! Lanes, SQLite's loading index (graph.rs): a database written before
//! lanes existed gets them on first open, and a node filed in the wrong lane
//! is reported by `verify` and makes loading fail rather than return
//! another thread.

mod common;

use common::{Backend, TempStore, history};
use skein_core::{Message, Thread};
use skein_store::{Problem, Store, StoreError};

/// A trunk with branches off its middle and its tip, stored.
fn branching(db: &TempStore) -> Vec<Thread> {
    let trunk = history("sys", 12);
    let middle = Thread::from_messages(trunk.messages()[..6].iter().map(|m| (*m).clone()))
        .push(Message::user("branch"));
    let tip = trunk.push(Message::user("tip"));
    for thread in [&trunk, &middle, &tip] {
        db.store.append(thread).unwrap();
    }
    vec![trunk, middle, tip]
}

fn lanes(store: &Store) -> Vec<(i64, Option<i64>)> {
    let conn = store.raw_connection().unwrap();
    let mut stmt = conn
        .prepare("SELECT seq, lane FROM nodes ORDER BY seq")
        .unwrap();
    stmt.query_map([], |row| Ok((row.get(0)?, row.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .map(|(seq, lane): (i64, Option<i64>)| (seq, lane))
        .collect()
}

#[test]
fn a_growing_conversation_is_one_lane_and_a_branch_off_its_middle_starts_another() {
    let db = TempStore::new(Backend::Sqlite);
    branching(&db);
    let lanes = lanes(&db.store);
    // The trunk (12 nodes) and its tip extension share lane 1; the branch
    // off the middle is a lane of its own, numbered by its node's seq.
    assert_eq!(lanes.len(), 14);
    let trunk_lane: Vec<_> = lanes.iter().filter(|(_, lane)| *lane == Some(1)).collect();
    assert_eq!(trunk_lane.len(), 13);
    let (branch_seq, branch_lane) = lanes[12];
    assert_eq!(branch_lane, Some(branch_seq));
}

#[test]
fn a_database_from_before_lanes_gets_them_on_open_and_loads_the_same() {
    let db = TempStore::new(Backend::Sqlite);
    let threads = branching(&db);
    let expected = lanes(&db.store);
    // Take the database back to schema version 3, as an older skein left it.
    db.store
        .raw_connection()
        .unwrap()
        .execute_batch(
            "DROP TABLE node_search; DROP TABLE run_links; DROP INDEX conversations_by_root; ALTER TABLE conversations DROP COLUMN root;
             ALTER TABLE nodes DROP COLUMN root;
             DROP INDEX nodes_by_lane;
             DROP INDEX conversations_by_origin; ALTER TABLE conversations DROP COLUMN imported;
             ALTER TABLE runs DROP COLUMN finish_reason;
             ALTER TABLE runs DROP COLUMN turn;
             ALTER TABLE runs DROP COLUMN step; ALTER TABLE runs DROP COLUMN requested_model;
             ALTER TABLE nodes DROP COLUMN lane;
             ALTER TABLE runs DROP COLUMN events;
             PRAGMA user_version = 3;",
        )
        .unwrap();
    let reopened = db.reopen();
    assert_eq!(lanes(&reopened), expected);
    for thread in &threads {
        let loaded = reopened.load_thread(thread.head_id().unwrap()).unwrap();
        assert_eq!(&loaded, thread);
    }
    assert!(reopened.verify().unwrap().is_ok());
}

#[test]
fn a_node_in_the_wrong_lane_is_reported_and_never_loads_a_wrong_thread() {
    let db = TempStore::new(Backend::Sqlite);
    let threads = branching(&db);
    let tip = threads[2].head_id().unwrap();
    // Move the node that extended the trunk into a lane of no node.
    let conn = db.store.raw_connection().unwrap();
    conn.execute(
        "UPDATE nodes SET lane = 999 WHERE id = ?1",
        [tip.as_bytes()],
    )
    .unwrap();
    let report = db.store.verify().unwrap();
    assert!(
        report
            .problems
            .contains(&Problem::LaneMismatch { id: tip.to_hex() }),
        "{report:?}"
    );
    match db.store.load_thread(tip) {
        Err(StoreError::MalformedRow(message)) => assert!(message.contains("verify"), "{message}"),
        other => panic!("expected a malformed-row error, got {other:?}"),
    }
    // Threads that do not pass through the damaged node still load.
    let trunk = &threads[0];
    assert_eq!(
        &db.store.load_thread(trunk.head_id().unwrap()).unwrap(),
        trunk
    );
}

#[test]
fn lanes_stored_apart_and_interleaved_load_the_same() {
    // One conversation written alone (its lane is stored contiguously and is
    // read by walking the table), and four written in turn (each lane's rows
    // are a quarter of the rows between its ends, so read by the index).
    let db = TempStore::new(Backend::Sqlite);
    let mut alone = history("alone", 1);
    for turn in 0..20 {
        alone = alone
            .push(Message::user(format!("q{turn}")))
            .push(Message::assistant(format!("a{turn}")));
        db.store.append(&alone).unwrap();
    }
    let mut together: Vec<Thread> = (0..4).map(|i| history(&format!("c{i}"), 1)).collect();
    for turn in 0..20 {
        for thread in &mut together {
            *thread = thread.push(Message::user(format!("q{turn}")));
            db.store.append(thread).unwrap();
        }
    }
    for thread in std::iter::once(&alone).chain(&together) {
        let loaded = db.store.load_thread(thread.head_id().unwrap()).unwrap();
        assert_eq!(&loaded, thread);
        let middle = thread.nodes()[9].id();
        assert_eq!(db.store.load_thread(middle).unwrap().len(), 10);
    }
    assert!(db.store.verify().unwrap().is_ok());
}

#[test]
fn a_database_from_before_typed_turns_gets_turn_steps_from_its_relations() {
    let db = TempStore::new(Backend::Sqlite);
    let conversation = db
        .store
        .create_conversation(skein_store::NewConversation::default())
        .unwrap();
    let run = skein_store::RunRecord::new("echo", "echo");
    db.store.record_run(&run).unwrap();
    // As schema version 5 stored a recorded chat's run and settings.
    db.store
        .raw_connection()
        .unwrap()
        .execute_batch(&format!(
            r#"DROP TABLE node_search; DROP TABLE run_links; DROP INDEX conversations_by_root; ALTER TABLE conversations DROP COLUMN root;
               ALTER TABLE nodes DROP COLUMN root;
               DROP INDEX conversations_by_origin; ALTER TABLE conversations DROP COLUMN imported;
               ALTER TABLE runs DROP COLUMN finish_reason;
               ALTER TABLE runs DROP COLUMN turn;
               ALTER TABLE runs DROP COLUMN step; ALTER TABLE runs DROP COLUMN requested_model;
               UPDATE runs SET relations =
                 '[{{"kind":"recorded.turn","target":"3"}},{{"kind":"chain","target":"c"}},{{"kind":"recorded.step","target":"3.1"}}]'
                 WHERE id = '{run}';
               UPDATE conversations SET meta = '{{"recorded":{{"version":1,"removed":["weather"]}}}}'
                 WHERE id = '{conversation}';
               PRAGMA user_version = 5;"#,
            run = run.id,
            conversation = conversation.id,
        ))
        .unwrap();
    let reopened = db.reopen();
    let back = reopened.run_record(&run.id).unwrap();
    assert_eq!(back.turn, Some(skein_store::TurnStep { turn: 3, step: 1 }));
    assert_eq!(
        back.relations,
        vec![skein_store::Relation::Chain("c".into())]
    );
    let settings = reopened.conversation(&conversation.id).unwrap().settings;
    assert_eq!(settings.recorded.unwrap().removed, ["weather"]);
    assert!(
        reopened
            .debug_query_i64(&format!(
                "SELECT count(*) FROM conversations WHERE id = '{}' AND meta LIKE '%version%'",
                conversation.id
            ))
            .unwrap()
            == 0
    );
}
