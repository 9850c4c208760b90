//! Reruns and the embedding cache (schema migration 3), on both backends:
//! records round trip, a rerun's threads and runs commit with its row,
//! lookups by turn and answer node; and an older SQLite database is
//! upgraded in place.

use crate::common::{Backend, TempStore};
use skein_core::{Digest, Message, Thread};
use skein_store::{
    ConversationId, NewConversation, RerunCommit, RerunId, RerunRecord, RunRecord, Store,
    StoreError,
};

/// A rerun record of `turn` answered by `answer`, sampled by `run`.
pub(crate) fn record(
    conversation: &ConversationId,
    turn: &Thread,
    answer: &Thread,
    run: &RunRecord,
) -> RerunRecord {
    RerunRecord {
        id: RerunId::random(),
        conversation: conversation.clone(),
        turn: 1,
        turn_node: turn.head_id().unwrap(),
        request_head: answer.parent().head_id(),
        answer_head: answer.head_id(),
        ablation: vec!["social-sentiment".into()],
        samples: 2,
        sample_runs: vec![run.id.clone()],
        baseline_runs: vec![],
        verdict: Some("confirmed".into()),
        summary: "1 of 2 changed".into(),
        detail: serde_json::json!({"answers": ["HOLD"]}),
        created_ms: 7,
    }
}

for_each_backend!(
    a_rerun_commits_its_threads_runs_and_row_together,
    embeddings_are_cached_per_embedder_and_digest,
);

fn a_rerun_commits_its_threads_runs_and_row_together(backend: Backend) {
    let db = TempStore::new(backend);
    let store = &db.store;
    let turn = Thread::from_messages([
        Message::system("s + fact"),
        Message::user("q"),
        Message::assistant("BUY"),
    ]);
    store.append(&turn).unwrap();
    let conversation = store
        .create_conversation(NewConversation {
            head: turn.head_id(),
            ..NewConversation::default()
        })
        .unwrap();
    let answer = Thread::from_messages([
        Message::system("s"),
        Message::user("q"),
        Message::assistant("HOLD"),
    ]);
    let mut run = RunRecord::new("m", "scripted");
    run.input_head = answer.parent().head_id();
    run.output_head = answer.head_id();
    let rerun = record(&conversation.id, &turn, &answer, &run);
    store
        .commit_rerun(&RerunCommit {
            record: &rerun,
            threads: std::slice::from_ref(&answer),
            runs: std::slice::from_ref(&run),
        })
        .unwrap();
    assert_eq!(store.rerun(&rerun.id).unwrap(), rerun);
    assert!(store.contains(answer.head_id().unwrap()).unwrap());
    assert_eq!(
        store.run_record(&run.id).unwrap().output_head,
        answer.head_id()
    );
    assert_eq!(
        store.reruns_of_conversation(&conversation.id).unwrap(),
        std::slice::from_ref(&rerun)
    );
    assert_eq!(
        store.reruns_of_node(turn.head_id().unwrap()).unwrap(),
        std::slice::from_ref(&rerun)
    );
    assert_eq!(
        store.reruns_answering(answer.head_id().unwrap()).unwrap(),
        std::slice::from_ref(&rerun)
    );
    assert_eq!(store.resolve_rerun(&rerun.id.0[..6]).unwrap(), rerun.id);
    assert!(matches!(
        store.rerun(&RerunId::random()),
        Err(StoreError::RerunNotFound(_))
    ));

    // A failing row (the same id again) leaves none of its threads behind.
    let other = Thread::from_messages([Message::user("never stored")]);
    let mut duplicate = rerun.clone();
    duplicate.answer_head = other.head_id();
    assert!(
        store
            .commit_rerun(&RerunCommit {
                record: &duplicate,
                threads: std::slice::from_ref(&other),
                runs: &[]
            })
            .is_err()
    );
    assert!(!store.contains(other.head_id().unwrap()).unwrap());
}

fn embeddings_are_cached_per_embedder_and_digest(backend: Backend) {
    let db = TempStore::new(backend);
    let digest = Digest::of(b"hello");
    assert_eq!(db.store.cached_embedding("e", &digest).unwrap(), None);
    db.store
        .cache_embedding("e", &digest, &[0.5, -1.0])
        .unwrap();
    db.store.cache_embedding("e", &digest, &[9.0]).unwrap();
    assert_eq!(
        db.store.cached_embedding("e", &digest).unwrap(),
        Some(vec![0.5, -1.0])
    );
    assert_eq!(db.store.cached_embedding("other", &digest).unwrap(), None);
}

#[test]
fn a_version_2_sqlite_database_gains_the_reruns_tables_on_open() {
    let db = TempStore::new(Backend::Sqlite);
    let path = db.location();
    let conn = db.store.raw_connection().unwrap();
    conn.execute_batch(
        "DROP TABLE labels; DROP TABLE replay_turns; DROP TABLE replays; DROP TABLE tool_calls; DROP TABLE tool_offers; DROP TABLE node_search; DROP TABLE run_links; DROP INDEX conversations_by_root; ALTER TABLE conversations DROP COLUMN root;
         ALTER TABLE nodes DROP COLUMN root;
         DROP TABLE reruns; DROP TABLE embeddings;
         DROP INDEX nodes_by_lane; ALTER TABLE nodes DROP COLUMN lane;
         ALTER TABLE runs DROP COLUMN events;
         DROP INDEX conversations_by_origin; ALTER TABLE conversations DROP COLUMN imported; ALTER TABLE runs DROP COLUMN finish_reason;
         ALTER TABLE runs DROP COLUMN turn; ALTER TABLE runs DROP COLUMN step; ALTER TABLE runs DROP COLUMN requested_model; ALTER TABLE runs DROP COLUMN response_model;
         PRAGMA user_version = 2;",
    )
    .unwrap();
    drop(conn);
    drop(db.store);
    let store = Store::open(&path).unwrap();
    let version: i64 = store
        .raw_connection()
        .unwrap()
        .pragma_query_value(None, "user_version", |row| row.get(0))
        .unwrap();
    assert_eq!(version, 25);
    assert!(
        store
            .reruns_of_conversation(&ConversationId::random())
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        store.cached_embedding("e", &Digest::of(b"x")).unwrap(),
        None
    );
}
