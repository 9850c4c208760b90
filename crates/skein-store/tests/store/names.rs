//! Conversation names and ids: a name that reads as an id is refused on
//! every write that sets one, and resolving text always prefers an id (or a
//! unique prefix of one) over a name, so a name cannot stand in for another
//! conversation's id, even one stored before names were checked. A name
//! is unique: setting one another conversation has is refused inside the
//! write's transaction, and names stored twice by an older skein stay
//! readable (and ambiguous).

use crate::common::{Backend, TempStore};
use skein_core::{Message, Thread};
use skein_store::{
    ConversationRecord, NewConversation, OnConflict, RunRecord, Store, StoreError, Target,
    TurnCommit, check_conversation_name,
};

/// Names that read as ids: 4 to 64 hexadecimal digits, any case, around
/// whitespace.
const ID_LIKE: [&str; 5] = [
    "0123abcd",
    "ABCD",
    "  cafe\t",
    "0123456789abcdef0123456789abcdef",
    "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
];

/// Names that do not: too few or too many digits, or a non-hex character.
const NOT_ID_LIKE: [&str; 5] = [
    "abc",
    "cafe-2",
    "0123abcg",
    "my chat",
    "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0",
];

fn named(store: &Store, name: &str) -> ConversationRecord {
    store
        .create_conversation(NewConversation {
            name: Some(name.into()),
            ..NewConversation::default()
        })
        .unwrap()
}

/// A first turn creating a conversation named `name`, with its run.
fn first_turn_named(store: &Store, name: &str) -> Result<skein_store::Committed, StoreError> {
    let thread = Thread::from_messages([Message::user("hi"), Message::assistant("hello")]);
    let mut run = RunRecord::new("echo", "echo");
    run.output_head = thread.head_id();
    store.commit_turn(&TurnCommit {
        target: Target::New(Box::new(NewConversation {
            name: Some(name.into()),
            ..NewConversation::default()
        })),
        thread: Some(&thread),
        runs: std::slice::from_ref(&run),
    })
}

fn refused(result: Result<impl std::fmt::Debug, StoreError>, name: &str) {
    match result {
        Err(StoreError::NameLooksLikeId(refused)) => {
            assert_eq!(refused, name);
            let message = StoreError::NameLooksLikeId(refused).to_string();
            assert!(message.contains("cannot look like an id"), "{message}");
            assert!(message.contains("non-hex character"), "{message}");
        }
        other => panic!("{name:?}: expected NameLooksLikeId, got {other:?}"),
    }
}

#[test]
fn only_names_that_read_as_ids_are_refused() {
    for name in ID_LIKE {
        refused(check_conversation_name(name), name);
    }
    for name in NOT_ID_LIKE {
        assert!(check_conversation_name(name).is_ok(), "{name:?}");
    }
}

fn creating_or_renaming_with_an_id_like_name_writes_nothing(backend: Backend) {
    let db = TempStore::new(backend);
    let kept = named(&db.store, "kept");
    for name in ID_LIKE {
        let new = NewConversation {
            name: Some(name.into()),
            ..NewConversation::default()
        };
        refused(db.store.create_conversation(new), name);
        refused(db.store.rename_conversation(&kept.id, Some(name)), name);
        refused(first_turn_named(&db.store, name), name);
    }
    assert_eq!(db.count("conversations"), 1);
    assert_eq!(db.count("nodes"), 0);
    assert_eq!(db.count("runs"), 0);
    assert_eq!(db.store.conversation(&kept.id).unwrap(), kept);
    for name in NOT_ID_LIKE {
        db.store.rename_conversation(&kept.id, Some(name)).unwrap();
        assert_eq!(
            db.store.conversation(&kept.id).unwrap().name.as_deref(),
            Some(name)
        );
    }
    db.store.rename_conversation(&kept.id, None).unwrap();
    let committed = first_turn_named(&db.store, "fine").unwrap();
    assert_eq!(
        db.store
            .conversation(&committed.conversation.unwrap())
            .unwrap()
            .name
            .as_deref(),
        Some("fine")
    );
}

fn a_race_branch_with_an_id_like_name_writes_nothing(backend: Backend) {
    let db = TempStore::new(backend);
    let conversation = named(&db.store, "victim");
    let (nodes, runs) = (db.count("nodes"), db.count("runs"));
    let thread = Thread::from_messages([Message::user("hi"), Message::assistant("hello")]);
    let mut run = RunRecord::new("echo", "echo");
    run.output_head = thread.head_id();
    let turn = TurnCommit {
        target: Target::Existing {
            id: conversation.id.clone(),
            expected_head: None,
            on_conflict: OnConflict::Branch(Box::new(NewConversation {
                name: Some(conversation.id.as_str().to_string()),
                ..NewConversation::default()
            })),
        },
        thread: Some(&thread),
        runs: std::slice::from_ref(&run),
    };
    refused(db.store.commit_turn(&turn), conversation.id.as_str());
    refused(
        runtime().block_on(db.store.nonblocking().commit_turn(&turn)),
        conversation.id.as_str(),
    );
    assert_eq!((db.count("nodes"), db.count("runs")), (nodes, runs));
    assert_eq!(db.store.conversation(&conversation.id).unwrap().head, None);
}

/// A runtime to await the async API on, as an async caller does.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
}

/// Give `impostor` the name `name` as an older skein could: by the row.
fn plant_name(db: &TempStore, impostor: &ConversationRecord, name: &str) {
    db.store
        .debug_execute(&format!(
            "UPDATE conversations SET name = '{name}' WHERE id = '{}'",
            impostor.id.as_str()
        ))
        .unwrap();
}

fn an_id_wins_over_a_stored_name_that_spells_it(backend: Backend) {
    let db = TempStore::new(backend);
    let victim = named(&db.store, "victim");
    let impostor = named(&db.store, "impostor");
    let full = victim.id.as_str().to_string();
    let short = full[..12].to_string();
    for (name, typed) in [
        (full.clone(), full.clone()),
        (short.clone(), short.clone()),
        (short.to_uppercase(), short.to_uppercase()),
        (full[..4].to_string(), full[..4].to_string()),
    ] {
        plant_name(&db, &impostor, &name);
        // The stored name still reads back, and the id still wins.
        assert_eq!(
            db.store.conversation(&impostor.id).unwrap().name.as_deref(),
            Some(name.as_str())
        );
        let unique = !impostor.id.as_str().starts_with(&typed.to_lowercase());
        if unique {
            assert_eq!(db.store.resolve_conversation(&typed).unwrap(), victim.id);
        }
    }
    // A stored id-like name no id starts with still finds its conversation.
    let unclaimed = (0..16u8)
        .map(|digit| format!("{digit:x}").repeat(8))
        .find(|text| {
            !victim.id.as_str().starts_with(text) && !impostor.id.as_str().starts_with(text)
        })
        .unwrap();
    plant_name(&db, &impostor, &unclaimed);
    assert_eq!(
        db.store.resolve_conversation(&unclaimed).unwrap(),
        impostor.id
    );
    assert!(matches!(
        db.store.resolve_conversation("impostor"),
        Err(StoreError::ConversationNotFound(_))
    ));
    assert_eq!(db.store.resolve_conversation("victim").unwrap(), victim.id);
}

/// A name too short to be refused (`e`, `add`) is found by its name even
/// when a conversation's id starts with it; a short prefix nobody has as a
/// name still finds its id.
fn a_short_hex_name_wins_over_an_id_prefix_that_short(backend: Backend) {
    let db = TempStore::new(backend);
    let other = named(&db.store, "other");
    let first = &other.id.as_str()[..1];
    let short = named(&db.store, first);
    assert_eq!(db.store.resolve_conversation(first).unwrap(), short.id);
    let two = &other.id.as_str()[..2];
    if !short.id.as_str().starts_with(two) {
        assert_eq!(db.store.resolve_conversation(two).unwrap(), other.id);
    }
    // Four digits or more read as an id, whatever the names.
    assert_eq!(
        db.store
            .resolve_conversation(&other.id.as_str()[..8])
            .unwrap(),
        other.id
    );
}

/// A branch a lost race creates, named `name`, from `conversation`'s
/// empty head.
fn branch_named(
    store: &Store,
    conversation: &ConversationRecord,
    name: &str,
) -> Result<skein_store::Committed, StoreError> {
    let thread = Thread::from_messages([Message::user("hi"), Message::assistant("hello")]);
    store.commit_turn(&TurnCommit {
        target: Target::Existing {
            id: conversation.id.clone(),
            expected_head: thread.head_id(),
            on_conflict: OnConflict::Branch(Box::new(NewConversation {
                name: Some(name.into()),
                ..NewConversation::default()
            })),
        },
        thread: Some(&thread),
        runs: &[],
    })
}

fn taken(result: Result<impl std::fmt::Debug, StoreError>, name: &str, by: &ConversationRecord) {
    match result {
        Err(error @ StoreError::NameTaken { .. }) => {
            let message = error.to_string();
            let StoreError::NameTaken {
                name: refused,
                by: holder,
            } = error
            else {
                unreachable!()
            };
            assert_eq!((refused.as_str(), holder.as_str()), (name, by.id.as_str()));
            assert!(message.contains("choose another name"), "{message}");
            assert!(message.contains(&format!("--cid {name}")), "{message}");
        }
        other => panic!("{name:?}: expected NameTaken by {}, got {other:?}", by.id),
    }
}

fn a_taken_name_is_refused_on_every_write_that_sets_it(backend: Backend) {
    let db = TempStore::new(backend);
    let holder = named(&db.store, "taken");
    let other = named(&db.store, "other");
    let new = NewConversation {
        name: Some("taken".into()),
        ..NewConversation::default()
    };
    taken(db.store.create_conversation(new), "taken", &holder);
    taken(
        db.store.rename_conversation(&other.id, Some("taken")),
        "taken",
        &holder,
    );
    taken(first_turn_named(&db.store, "taken"), "taken", &holder);
    taken(
        runtime().block_on(
            db.store
                .nonblocking()
                .rename_conversation(&other.id, Some("taken")),
        ),
        "taken",
        &holder,
    );
    taken(branch_named(&db.store, &other, "taken"), "taken", &holder);
    taken(db.store.check_name_free("taken"), "taken", &holder);
    // Nothing of the refused writes was kept.
    assert_eq!(db.count("conversations"), 2);
    assert_eq!((db.count("nodes"), db.count("runs")), (0, 0));
    assert_eq!(db.store.conversation(&other.id).unwrap(), other);
    // Names differ by any character; unnamed conversations are many.
    db.store.check_name_free("Taken").unwrap();
    named(&db.store, "taken ");
    for _ in 0..2 {
        db.store
            .create_conversation(NewConversation::default())
            .unwrap();
    }
    // Renaming to its own name changes nothing; a freed name can be taken.
    db.store
        .rename_conversation(&holder.id, Some("taken"))
        .unwrap();
    db.store.rename_conversation(&holder.id, None).unwrap();
    db.store.check_name_free("taken").unwrap();
    let committed = branch_named(&db.store, &other, "taken").unwrap();
    let branch = committed.conversation.unwrap();
    assert_eq!(db.store.resolve_conversation("taken").unwrap(), branch);
    taken(
        db.store.rename_conversation(&holder.id, Some("taken")),
        "taken",
        &db.store.conversation(&branch).unwrap(),
    );
}

/// Two conversations named alike by an older skein stay readable as
/// ambiguous, and a third is refused.
fn names_stored_twice_before_the_check_stay_ambiguous(backend: Backend) {
    let db = TempStore::new(backend);
    let first = named(&db.store, "twice");
    let second = named(&db.store, "second");
    plant_name(&db, &second, "twice");
    assert!(matches!(
        db.store.resolve_conversation("twice"),
        Err(StoreError::AmbiguousName { .. })
    ));
    match first_turn_named(&db.store, "twice") {
        Err(StoreError::NameTaken { name, by }) => {
            assert_eq!(name, "twice");
            assert!([first.id.as_str(), second.id.as_str()].contains(&by.as_str()));
        }
        other => panic!("expected NameTaken, got {other:?}"),
    }
    // Each of the two keeps its name, and may rename itself to it.
    db.store
        .rename_conversation(&first.id, Some("first"))
        .unwrap();
    taken(
        db.store.rename_conversation(&first.id, Some("twice")),
        "twice",
        &second,
    );
    db.store
        .rename_conversation(&second.id, Some("twice"))
        .unwrap();
    assert_eq!(db.store.resolve_conversation("twice").unwrap(), second.id);
}

/// Writers racing to one name from separate connections: exactly one wins
/// each name, the others are refused.
fn racing_writers_take_a_name_once(backend: Backend) {
    const WRITERS: usize = 4;
    let db = TempStore::new(backend);
    for round in 0..8 {
        let name = format!("race {round}");
        let barrier = std::sync::Barrier::new(WRITERS);
        let results: Vec<_> = std::thread::scope(|scope| {
            let writers: Vec<_> = (0..WRITERS)
                .map(|_| {
                    let store = db.reopen();
                    let (barrier, name) = (&barrier, &name);
                    scope.spawn(move || {
                        barrier.wait();
                        first_turn_named(&store, name)
                    })
                })
                .collect();
            writers.into_iter().map(|w| w.join().unwrap()).collect()
        });
        let won = results.iter().filter(|result| result.is_ok()).count();
        assert_eq!(won, 1, "{name}: {results:?}");
        for result in results.into_iter().filter(Result::is_err) {
            assert!(
                matches!(result, Err(StoreError::NameTaken { .. })),
                "{result:?}"
            );
        }
    }
    assert_eq!(db.count("conversations"), 8);
}

for_each_backend!(
    a_taken_name_is_refused_on_every_write_that_sets_it,
    names_stored_twice_before_the_check_stay_ambiguous,
    racing_writers_take_a_name_once,
    a_short_hex_name_wins_over_an_id_prefix_that_short,
    creating_or_renaming_with_an_id_like_name_writes_nothing,
    a_race_branch_with_an_id_like_name_writes_nothing,
    an_id_wins_over_a_stored_name_that_spells_it,
    conversations_are_read_by_their_ids_together,
);

/// Many conversations read at once by id (a listing naming the
/// conversations of its rows): those that exist, unknown ids left out.
fn conversations_are_read_by_their_ids_together(backend: Backend) {
    let db = TempStore::new(backend);
    let (a, b) = (named(&db.store, "alpha"), named(&db.store, "beta"));
    named(&db.store, "gamma");
    let unknown = skein_store::ConversationId("f00d".repeat(8));
    let mut read = db
        .store
        .conversations_by_ids(&[b.id.clone(), unknown, a.id.clone()])
        .unwrap();
    read.sort_by(|x, y| x.name.cmp(&y.name));
    assert_eq!(read, vec![a, b]);
    assert!(db.store.conversations_by_ids(&[]).unwrap().is_empty());
}

/// Resolving a name (`--cid NAME`, a proxy session) reads the name index,
/// not every conversation.
#[test]
fn a_name_is_looked_up_through_its_index() {
    let db = TempStore::new(Backend::Sqlite);
    let conn = db.store.raw_connection().unwrap();
    let plan: Vec<String> = conn
        .prepare(
            "EXPLAIN QUERY PLAN SELECT id FROM conversations WHERE name = ?1
             ORDER BY updated DESC, id LIMIT ?2",
        )
        .unwrap()
        .query_map(("a name", 2), |row| row.get::<_, String>(3))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert!(
        plan.iter()
            .any(|step| step.contains("conversations_by_name")),
        "{plan:?}"
    );
}
