//! Conversation names and ids: a name that reads as an id is refused on
//! every write that sets one, and resolving text always prefers an id (or a
//! unique prefix of one) over a name, so a name cannot stand in for another
//! conversation's id, even one stored before names were checked.

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

for_each_backend!(
    a_short_hex_name_wins_over_an_id_prefix_that_short,
    creating_or_renaming_with_an_id_like_name_writes_nothing,
    a_race_branch_with_an_id_like_name_writes_nothing,
    an_id_wins_over_a_stored_name_that_spells_it,
);
