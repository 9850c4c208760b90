//! Past one database server: several hosts in one PostgreSQL URL (libpq's
//! `host1,host2` and `target_session_attrs`: a dead first host is skipped,
//! on the blocking and the async API alike, and a URL no host can serve
//! says which host failed how), and a turn committed again after its
//! outcome was unknown (a primary lost mid-commit) landing once.

use crate::common::{Backend, TempStore, append_turn, history};
use skein_core::{ConversationId, Message, Thread};
use skein_store::{
    Committed, NewConversation, OnConflict, RunRecord, Store, StoreError, Target, TurnCommit,
};

for_each_backend!(
    a_turn_committed_twice_lands_once,
    a_repeat_still_refuses_a_name_another_conversation_has,
);

fn run_for(thread: &Thread, conversation: &ConversationId) -> RunRecord {
    let mut run = RunRecord::new("echo", "echo");
    run.conversation = Some(conversation.clone());
    run.input_head = thread.parent().head_id();
    run.output_head = thread.head_id();
    run
}

/// Where a commit landed, without what differs between a first write and
/// a repeat (how many nodes were new).
fn landing(
    committed: &Committed,
) -> (
    Option<ConversationId>,
    Option<skein_core::NodeId>,
    Option<Option<skein_core::NodeId>>,
) {
    (
        committed.conversation.clone(),
        committed.head,
        committed.branched_from,
    )
}

/// Each kind of landing (a new conversation, a head moved forward, a
/// branch after a lost race) committed a second time, as the turn layer
/// does after `CommitUnknown`: the same landing, one row for each run and
/// conversation, and a graph that verifies.
fn a_turn_committed_twice_lands_once(backend: Backend) {
    let db = TempStore::new(backend);
    let store = &db.store;
    let id = ConversationId::random();
    let first = history("retried", 3);
    let runs = [run_for(&first, &id)];
    let create = TurnCommit {
        target: Target::New(Box::new(NewConversation {
            id: Some(id.clone()),
            name: Some("retried".into()),
            ..NewConversation::default()
        })),
        thread: Some(&first),
        runs: &runs,
    };
    let made = store.commit_turn(&create).unwrap();
    let again = store.commit_turn(&create).unwrap();
    assert_eq!(landing(&again), landing(&made));
    assert_eq!(again.written, 0, "nothing new the second time");

    let second = first
        .push(Message::user("and then?"))
        .push(Message::assistant("then this"));
    let runs = [run_for(&second, &id)];
    let forward = TurnCommit::continuing(&id, first.head_id(), &second, &runs);
    let moved = store.commit_turn(&forward).unwrap();
    assert_eq!(
        landing(&store.commit_turn(&forward).unwrap()),
        landing(&moved)
    );
    assert_eq!(store.conversation(&id).unwrap().head, second.head_id());

    // A turn from the old head loses its race and branches, into the same
    // branch both times.
    let late = first
        .push(Message::user("meanwhile"))
        .push(Message::assistant("elsewhere"));
    let runs = [run_for(&late, &id)];
    let branching = TurnCommit {
        target: Target::Existing {
            id: id.clone(),
            expected_head: first.head_id(),
            on_conflict: OnConflict::Branch(Box::new(NewConversation {
                id: Some(ConversationId::random()),
                ..NewConversation::default()
            })),
        },
        thread: Some(&late),
        runs: &runs,
    };
    let branched = store.commit_turn(&branching).unwrap();
    assert_ne!(branched.conversation.as_ref(), Some(&id));
    assert_eq!(
        landing(&store.commit_turn(&branching).unwrap()),
        landing(&branched)
    );

    assert_eq!(db.count("conversations"), 2);
    assert_eq!(db.count("runs"), 3);
    let report = store.verify().unwrap();
    assert!(report.is_ok(), "{:?}", report.problems);
}

/// A different conversation under the name of a new one is still refused
/// on a repeat: only the conversation's own row counts as already made.
fn a_repeat_still_refuses_a_name_another_conversation_has(backend: Backend) {
    let db = TempStore::new(backend);
    let store = &db.store;
    store
        .create_conversation(NewConversation {
            name: Some("taken".into()),
            ..NewConversation::default()
        })
        .unwrap();
    let id = ConversationId::random();
    let thread = history("named", 3);
    let runs = [run_for(&thread, &id)];
    let create = TurnCommit {
        target: Target::New(Box::new(NewConversation {
            id: Some(id),
            name: Some("taken".into()),
            ..NewConversation::default()
        })),
        thread: Some(&thread),
        runs: &runs,
    };
    let error = store.commit_turn(&create).unwrap_err();
    assert!(matches!(error, StoreError::NameTaken { .. }), "{error}");
}

/// A loopback port nothing listens on: bound, then released.
fn dead_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// `url` (`postgres://user@host:port/...`) with `first` listed before its
/// own host.
fn with_first_host(url: &str, first: &str) -> String {
    let (credentials, rest) = url.split_once('@').expect("a URL with a user");
    format!("{credentials}@{first},{rest}")
}

fn with_param(url: &str, param: &str) -> String {
    let separator = if url.contains('?') { '&' } else { '?' };
    format!("{url}{separator}{param}")
}

#[test]
fn a_dead_first_host_is_skipped_by_both_apis() {
    let test = "a_dead_first_host_is_skipped_by_both_apis";
    if crate::common::postgres_base(test).is_none() {
        return;
    }
    let db = TempStore::new(Backend::Postgres);
    let dead = format!("127.0.0.1:{}", dead_port());
    let url = with_param(
        &with_first_host(&db.location(), &dead),
        "target_session_attrs=read-write&connect_timeout=2",
    );
    let store = Store::open(&url).expect("the second host serves");
    let id = store
        .create_conversation(NewConversation::default())
        .unwrap()
        .id;
    append_turn(&store, &id, "through the second host");
    let head = store.conversation(&id).unwrap().head.unwrap();
    assert_eq!(store.load_thread(head).unwrap().len(), 2);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let loaded = runtime
        .block_on(store.nonblocking().load_thread(head))
        .unwrap();
    assert_eq!(loaded.head_id(), Some(head));
    // The turn is in the database the single-host URL names.
    assert_eq!(db.count("conversations"), 1);
}

#[test]
fn no_usable_host_is_reported_host_by_host() {
    let test = "no_usable_host_is_reported_host_by_host";
    if crate::common::postgres_base(test).is_none() {
        return;
    }
    let db = TempStore::new(Backend::Postgres);
    let dead = format!("127.0.0.1:{}", dead_port());
    // The test server is a primary: its sessions are not read-only.
    let url = with_param(
        &with_first_host(&db.location(), &dead),
        "target_session_attrs=read-only",
    );
    let error = Store::open(&url).expect_err("no host is read-only");
    let StoreError::Unreachable { reason, .. } = &error else {
        panic!("expected Unreachable, got {error}");
    };
    assert!(
        reason.contains("target_session_attrs=read-only"),
        "{reason}"
    );
    assert!(reason.contains(&format!("{dead}: ")), "{reason}");
    assert!(reason.contains("refused"), "{reason}");
    assert!(reason.contains("not read only"), "{reason}");
}

#[test]
fn prefer_standby_takes_a_primary_when_no_standby_answers() {
    let test = "prefer_standby_takes_a_primary_when_no_standby_answers";
    if crate::common::postgres_base(test).is_none() {
        return;
    }
    let db = TempStore::new(Backend::Postgres);
    let dead = format!("127.0.0.1:{}", dead_port());
    let url = with_param(
        &with_first_host(&db.location(), &dead),
        "target_session_attrs=prefer-standby",
    );
    let store = Store::open(&url).expect("the primary is taken on the second pass");
    let id = store
        .create_conversation(NewConversation::default())
        .unwrap()
        .id;
    assert_eq!(store.conversation(&id).unwrap().id, id);
}

/// A read URL belongs to a PostgreSQL database and must name one itself:
/// anything else is refused before any connection is made, saying so.
#[test]
fn a_read_url_needs_postgres_on_both_sides() {
    let dir = tempfile::tempdir().unwrap();
    let sqlite = dir.path().join("skein.db");
    for (location, read) in [
        (
            sqlite.to_str().unwrap(),
            "postgres://me:secret@replica/skein",
        ),
        ("postgres://me:secret@127.0.0.1:1/skein", "replica.db"),
    ] {
        let error = Store::open_with_reads(location, read, skein_store::OpenMode::Create)
            .expect_err("refused");
        let StoreError::BadUrl { reason, location } = &error else {
            panic!("expected BadUrl, got {error}");
        };
        assert!(reason.contains("postgres:// URL"), "{reason}");
        assert!(!location.contains("secret"), "{location}");
    }
    assert!(!sqlite.exists(), "nothing was created");
}
