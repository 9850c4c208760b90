//! Lanes, the loading index of both backends (graph.rs, postgres/graph.rs):
//! a database written before lanes existed gets them on first open, a node
//! filed in the wrong lane is reported by `verify` and makes loading fail
//! rather than return another thread, and writers racing to extend the same
//! lane tip from separate connections each end up in a consistent lane.

use crate::common::{Backend, TempStore, history};
use skein_core::{Message, Thread};
use skein_store::{Problem, Store, StoreError};
use std::sync::{Arc, Barrier};

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
            "DROP TABLE labels; DROP TABLE replay_turns; DROP TABLE replays; DROP TABLE tool_calls; DROP TABLE tool_offers; DROP TABLE node_search; DROP TABLE run_links; DROP INDEX conversations_by_root; ALTER TABLE conversations DROP COLUMN root;
             ALTER TABLE nodes DROP COLUMN root;
             DROP INDEX nodes_by_lane;
             DROP INDEX conversations_by_origin; ALTER TABLE conversations DROP COLUMN imported;
             ALTER TABLE runs DROP COLUMN finish_reason;
             ALTER TABLE runs DROP COLUMN turn;
             ALTER TABLE runs DROP COLUMN step; ALTER TABLE runs DROP COLUMN requested_model; ALTER TABLE runs DROP COLUMN response_model;
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

fn a_node_in_the_wrong_lane_is_reported_and_never_loads_a_wrong_thread(backend: Backend) {
    let db = TempStore::new(backend);
    let threads = branching(&db);
    let tip = threads[2].head_id().unwrap();
    // Move the node that extended the trunk into a lane of no node.
    let nowhere = match backend {
        Backend::Sqlite => "999".to_string(),
        Backend::Postgres => db.bytes_literal(&[7; 32]),
    };
    db.store
        .debug_execute(&format!(
            "UPDATE nodes SET lane = {nowhere} WHERE id = {}",
            db.bytes_literal(tip.as_bytes())
        ))
        .unwrap();
    let report = db.store.verify().unwrap();
    assert_eq!(
        report.problems,
        [Problem::LaneMismatch { id: tip.to_hex() }],
        "{report:?}"
    );
    match db.store.load_thread(tip) {
        Err(StoreError::MalformedRow(message)) => assert!(message.contains("verify"), "{message}"),
        other => panic!("expected a malformed-row error, got {other:?}"),
    }
    // Threads that do not pass through the damaged node still load.
    for thread in &threads[..2] {
        assert_eq!(
            &db.store.load_thread(thread.head_id().unwrap()).unwrap(),
            thread
        );
    }
}

/// A growing conversation is one lane on both backends, and a branch off
/// its middle is another.
fn branches_off_the_middle_start_lanes_and_tips_are_continued(backend: Backend) {
    let db = TempStore::new(backend);
    let threads = branching(&db);
    assert_eq!(
        db.store
            .debug_query_i64("SELECT count(DISTINCT lane) FROM nodes")
            .unwrap(),
        2
    );
    for thread in &threads {
        assert_eq!(
            &db.store.load_thread(thread.head_id().unwrap()).unwrap(),
            thread
        );
    }
    assert!(db.store.verify().unwrap().is_ok());
}

/// Threads written in turn, branched off their middles and tips, and one
/// longer than a page of the PostgreSQL migration (10,000 nodes).
fn a_tangled_graph(db: &TempStore) -> Vec<Thread> {
    let mut threads = branching(db);
    let mut together: Vec<Thread> = (0..3).map(|i| history(&format!("c{i}"), 1)).collect();
    for turn in 0..15 {
        for thread in &mut together {
            *thread = thread.push(Message::user(format!("q{turn}")));
            db.store.append(thread).unwrap();
        }
        if turn % 4 == 1 {
            let middle = together[0].nodes()[turn / 2].id();
            let fork = db
                .store
                .load_thread(middle)
                .unwrap()
                .push(Message::user(format!("fork {turn}")));
            db.store.append(&fork).unwrap();
            threads.push(fork);
        }
    }
    threads.extend(together);
    let long = history("long", 12_001);
    db.store.append(&long).unwrap();
    let off_long = Thread::from_messages(long.messages()[..11_000].iter().map(|m| (*m).clone()))
        .push(Message::user("off the long one"));
    db.store.append(&off_long).unwrap();
    threads.extend([long, off_long]);
    threads
}

/// PostgreSQL's migration 11 files an older database's nodes in the lanes
/// they would have been given when written, and every thread loads back
/// the same (on SQLite, migration 11 changes nothing).
fn a_database_from_before_schema_11_gets_the_same_lanes_on_open(backend: Backend) {
    let db = TempStore::new(backend);
    let threads = a_tangled_graph(&db);
    db.store
        .debug_execute("CREATE TABLE lanes_before AS SELECT id, lane FROM nodes")
        .unwrap();
    db.undo_schemas_from_11();
    db.set_schema_version(10);
    let reopened = db.reopen();
    assert_eq!(
        reopened
            .debug_query_i64(
                "SELECT count(*) FROM nodes n JOIN lanes_before b ON b.id = n.id
                 WHERE b.lane = n.lane"
            )
            .unwrap(),
        db.count("nodes")
    );
    for thread in &threads {
        let loaded = reopened.load_thread(thread.head_id().unwrap()).unwrap();
        assert_eq!(&loaded, thread);
    }
    assert!(reopened.verify().unwrap().is_ok());
}

const WRITERS: usize = 8;
const ROUNDS: usize = 12;

/// Writers on separate store handles (on PostgreSQL, separate pools, so
/// separate connections and transactions, as separate processes would be)
/// extend the same lane tip at the same moment, round after round: in some
/// rounds pairs of writers append the same nodes, and every writer goes on
/// with a long chain of its own. Afterwards every thread loads back equal,
/// `verify` is clean, and exactly one child of each contested tip continued
/// its lane.
fn writers_extending_one_tip_at_once_get_consistent_lanes(backend: Backend) {
    let db = TempStore::new(backend);
    let stores: Vec<_> = (0..WRITERS).map(|_| db.reopen()).collect();
    let mut tip = history("shared", 9);
    db.store.append(&tip).unwrap();
    let mut written: Vec<Thread> = Vec::new();
    let mut contested = Vec::new();
    for round in 0..ROUNDS {
        contested.push(tip.head_id().unwrap());
        let start = Arc::new(Barrier::new(WRITERS));
        let threads: Vec<Thread> = std::thread::scope(|scope| {
            let handles: Vec<_> = stores
                .iter()
                .enumerate()
                .map(|(writer, store)| {
                    let start = Arc::clone(&start);
                    let base = tip.clone();
                    scope.spawn(move || {
                        // In odd rounds writers w and w + 4 write the same
                        // child (and so the same nodes after it).
                        let who = if round % 2 == 1 { writer % 4 } else { writer };
                        let mut thread = base.push(Message::user(format!("w{who} r{round}")));
                        let long = if round % 3 == 0 { 40 } else { 1 };
                        for i in 0..long {
                            thread =
                                thread.push(Message::assistant(format!("w{who} r{round} {i}")));
                        }
                        start.wait();
                        store.append(&thread).unwrap();
                        // A chain of its own, extended turn by turn.
                        for i in 0..3 {
                            thread = thread.push(Message::user(format!("w{who} r{round} own {i}")));
                            store.append(&thread).unwrap();
                        }
                        thread
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        // The next round contests the tip of the first writer's chain.
        tip = threads[0].clone();
        written.extend(threads);
    }
    for thread in &written {
        assert_eq!(
            &db.store.load_thread(thread.head_id().unwrap()).unwrap(),
            thread
        );
    }
    let report = db.store.verify().unwrap();
    assert!(report.is_ok(), "{:?}", report.problems);
    let join = match backend {
        Backend::Sqlite => "c.parent = p.seq",
        Backend::Postgres => "c.parent = p.id",
    };
    for parent in contested {
        let continuing = db
            .store
            .debug_query_i64(&format!(
                "SELECT count(*) FROM nodes c JOIN nodes p ON {join} AND c.lane = p.lane
                 WHERE p.id = {}",
                db.bytes_literal(parent.as_bytes())
            ))
            .unwrap();
        assert_eq!(
            continuing,
            1,
            "children of {} continuing its lane",
            parent.short()
        );
    }
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
            r#"DROP TABLE labels; DROP TABLE replay_turns; DROP TABLE replays; DROP TABLE tool_calls; DROP TABLE tool_offers; DROP TABLE node_search; DROP TABLE run_links; DROP INDEX conversations_by_root; ALTER TABLE conversations DROP COLUMN root;
               ALTER TABLE nodes DROP COLUMN root;
               DROP INDEX conversations_by_origin; ALTER TABLE conversations DROP COLUMN imported;
               ALTER TABLE runs DROP COLUMN finish_reason;
               ALTER TABLE runs DROP COLUMN turn;
               ALTER TABLE runs DROP COLUMN step; ALTER TABLE runs DROP COLUMN requested_model; ALTER TABLE runs DROP COLUMN response_model;
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

/// PostgreSQL: a writer decides its nodes' lanes from what it read before
/// inserting them. Here, in between, another writer continues the tip it
/// meant to continue and a third stores its first node (the same node) in a
/// lane of its own; its insert then skips that node and would file the
/// next one in a lane its parent is not in. The write notices, is retried
/// and files it under its parent.
#[cfg(feature = "postgres")]
#[test]
fn a_writer_whose_first_node_another_stored_in_another_lane_retries() {
    if crate::common::postgres_base(
        "a_writer_whose_first_node_another_stored_in_another_lane_retries",
    )
    .is_none()
    {
        return;
    }
    let db = TempStore::new(Backend::Postgres);
    let base = history("shared", 5);
    db.store.append(&base).unwrap();
    let first = base.push(Message::user("the same first node"));
    // A body over the blob threshold, so the write inserts a blob first and
    // waits there while the table is locked.
    let ours = first.push(Message::assistant(
        "x".repeat(skein_store::BLOB_THRESHOLD + 10),
    ));
    let lock = db.lock_table("blobs");
    let writer = db.reopen();
    std::thread::scope(|scope| {
        let pending = scope.spawn(|| writer.append(&ours).unwrap());
        while db
            .store
            .debug_query_i64(
                "SELECT count(*) FROM pg_locks WHERE NOT granted AND relation = 'blobs'::regclass",
            )
            .unwrap()
            == 0
        {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let other = base.push(Message::user("another child"));
        db.store.append(&other).unwrap();
        db.store.append(&first).unwrap();
        drop(lock);
        assert_eq!(pending.join().unwrap().written, 1);
    });
    let lane_of = |id: skein_core::NodeId| {
        format!(
            "(SELECT lane FROM nodes WHERE id = {})",
            db.bytes_literal(id.as_bytes())
        )
    };
    let head = ours.head_id().unwrap();
    assert_eq!(
        db.store
            .debug_query_i64(&format!(
                "SELECT count(*) WHERE {} = {}",
                lane_of(head),
                lane_of(first.head_id().unwrap())
            ))
            .unwrap(),
        1,
        "the last node continues its parent's lane"
    );
    assert_eq!(db.store.load_thread(head).unwrap(), ours);
    let report = db.store.verify().unwrap();
    assert!(report.is_ok(), "{:?}", report.problems);
}

for_each_backend!(
    a_node_in_the_wrong_lane_is_reported_and_never_loads_a_wrong_thread,
    branches_off_the_middle_start_lanes_and_tips_are_continued,
    a_database_from_before_schema_11_gets_the_same_lanes_on_open,
    writers_extending_one_tip_at_once_get_consistent_lanes,
);
