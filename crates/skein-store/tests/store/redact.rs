//! Erasing a message in place (`Store::redact`), on both backends: a secret
//! in the middle of a thread with three forks below it is erased; every id
//! stays, every thread loads with the node in its place, `verify` counts it
//! as erased and finds no problem; the secret's bytes leave the search
//! index, the blob table, the embedding cache, a proxied run's request, a
//! configured prompt's record of its variables, the
//! export (whose import keeps the erasure) and, after the vacuum step, the
//! SQLite file itself.

use crate::common::{Backend, TempStore};
use skein_core::{Attachment, Digest, Message, NodeId, Part, Role, Thread};
use skein_store::{NewConversation, Relation, RunRecord, SearchQuery, Store, Target, TurnCommit};

for_each_backend!(
    a_secret_mid_thread_is_erased_everywhere_and_every_id_stays,
    a_node_that_is_not_stored_is_refused,
);

const SECRET: &str = "the launch code is zebra-4417-quartz";

/// The secret's attachment, large enough to be a blob.
fn secret_attachment() -> Vec<u8> {
    SECRET.repeat(200).into_bytes()
}

fn ids_of(store: &Store, head: NodeId) -> Vec<NodeId> {
    store
        .load_thread(head)
        .unwrap()
        .nodes()
        .into_iter()
        .map(|node| node.id())
        .collect()
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack
        .windows(needle.len())
        .any(|window| window == needle)
}

fn a_secret_mid_thread_is_erased_everywhere_and_every_id_stays(backend: Backend) {
    let db = TempStore::new(backend);
    let store = &db.store;
    let secret = Message::new(
        Role::User,
        vec![
            Part::text(SECRET),
            Part::Attachment(Attachment {
                media_type: "text/plain".into(),
                data: secret_attachment(),
            }),
        ],
    );
    let below = Thread::from_messages([Message::system("S"), Message::user("u1")])
        .push(secret)
        .push(Message::assistant("noted"));
    let secret_node = below.parent().head_id().unwrap();
    let mut heads = Vec::new();
    for (index, turn) in ["main", "fork one", "fork two", "fork three"]
        .into_iter()
        .enumerate()
    {
        let thread = below
            .push(Message::user(format!("{turn} question")))
            .push(Message::assistant(format!("{turn} answer")));
        let mut run = RunRecord::new("m", "scripted");
        run.input_head = thread.parent().head_id();
        run.output_head = thread.head_id();
        // A proxied run keeps the client's exact request, secret included.
        run.request = Some(format!(
            r#"{{"messages":[{{"content":"{SECRET}"}}],"i":{index}}}"#
        ));
        // A configured prompt's record holds its variables, the secret
        // among them; the run's other relations are not content.
        run.relations = vec![
            Relation::Chain(format!("chain-{index}")),
            Relation::Prompt(format!(
                r#"{{"id":"ask","variables":{{"code":"{SECRET}"}}}}"#
            )),
        ];
        let committed = store
            .commit_turn(&TurnCommit {
                target: Target::New(Box::new(NewConversation {
                    name: Some(turn.replace(' ', "-")),
                    ..NewConversation::default()
                })),
                thread: Some(&thread),
                runs: std::slice::from_ref(&run),
            })
            .unwrap();
        heads.push((committed.head.unwrap(), run.id));
    }
    // A call that failed after the secret, whose provider quoted it back.
    let failed_input = below.push(Message::user("one more"));
    let mut failed = RunRecord::new("m", "scripted");
    failed.status = skein_store::RunStatus::Failed;
    failed.input_head = failed_input.head_id();
    failed.error = Some(format!("400 Bad Request: invalid content \"{SECRET}\""));
    store
        .commit_turn(&TurnCommit {
            target: Target::Detached,
            thread: Some(&failed_input),
            runs: std::slice::from_ref(&failed),
        })
        .unwrap();
    store
        .cache_embedding("e", &Digest::of(SECRET.as_bytes()), &[1.0])
        .unwrap();
    let before: Vec<Vec<NodeId>> = heads.iter().map(|(head, _)| ids_of(store, *head)).collect();
    assert!(
        !store
            .search(&SearchQuery::new("zebra"))
            .unwrap()
            .matches
            .is_empty()
    );
    assert_eq!(db.count("blobs"), 1);
    let holding: Vec<(&str, &str)> = store
        .places_holding(SECRET)
        .unwrap()
        .iter()
        .map(|place| (place.table, place.column))
        .collect();
    for place in [
        ("nodes", "body"),
        ("blobs", "bytes"),
        ("request_pieces", "bytes"),
    ] {
        assert!(holding.contains(&place), "{place:?} not in {holding:?}");
    }

    let redacted = store
        .redact(secret_node, "alice", "pasted a secret")
        .unwrap();
    assert_eq!(store.places_holding(SECRET).unwrap(), []);
    assert_eq!(redacted.parts, 2);
    assert_eq!(redacted.blobs, 1);
    assert_eq!(redacted.embeddings, 1);
    // The four runs' prompt records and the failed call's error, by place.
    let copies: Vec<(&str, &str, u64)> = redacted
        .copies
        .iter()
        .map(|held| (held.table, held.column, held.rows))
        .collect();
    assert_eq!(
        copies,
        [("runs", "error", 1), ("runs", "relations", 4)],
        "{copies:?}"
    );
    let error = store.run_record(&failed.id).unwrap().error.unwrap();
    assert!(
        !error.contains(SECRET) && error.starts_with("[erased"),
        "{error}"
    );
    assert_eq!(redacted.body_pieces_erased, 4);

    // Ids and places unchanged; the node reads as erased, with its note.
    for ((head, run), ids) in heads.iter().zip(&before) {
        assert_eq!(&ids_of(store, *head), ids);
        let record = store.run_record(run).unwrap();
        // The body that carried the secret reads back erased, never stale.
        let body = store.request_body(run).unwrap().expect("a kept body");
        assert_eq!(body.whole(), None);
        assert_eq!(body.erased().len(), 1);
        assert_eq!(body.erased()[0], 0..body.len());
        assert!(!body.display().contains(SECRET), "{}", body.display());
        assert_eq!(
            record.request_ref.map(|kept| kept.len),
            Some(body.len() as u64)
        );
        assert!(
            matches!(&record.relations[..], [Relation::Chain(chain)] if chain.starts_with("chain-")),
            "{:?}",
            record.relations
        );
    }
    let node = store.node(secret_node).unwrap();
    assert!(node.message.is_erased());
    let Part::Erased(erased) = &node.message.parts[0] else {
        panic!("{:?}", node.message)
    };
    assert_eq!(erased.digest, Digest::of(SECRET.as_bytes()));
    assert_eq!(
        (erased.erased_by.as_str(), erased.reason.as_str()),
        ("alice", "pasted a secret")
    );
    let report = store.verify().unwrap();
    assert!(report.is_ok(), "{:?}", report.problems);
    assert_eq!(report.erased, 1);
    assert!(
        store
            .search(&SearchQuery::new("zebra"))
            .unwrap()
            .matches
            .is_empty()
    );
    assert_eq!(db.count("blobs"), 0);
    assert_eq!(
        store
            .cached_embedding("e", &Digest::of(SECRET.as_bytes()))
            .unwrap(),
        None
    );
    // Erasing it again changes nothing and is no error.
    assert_eq!(store.redact(secret_node, "bob", "again").unwrap().parts, 0);
    assert!(matches!(&store.node(secret_node).unwrap().message.parts[0],
        Part::Erased(again) if again.erased_by == "alice"));

    // The export carries the tombstone, not the secret; an import keeps it.
    let mut export = Vec::new();
    store.export(&mut export).unwrap();
    assert!(!contains(&export, b"zebra"), "the export holds the secret");
    assert!(contains(&export, b"\"erased\""));
    let other = TempStore::new(backend);
    other.store.import(&mut export.as_slice()).unwrap();
    let imported = other.store.verify().unwrap();
    assert!(imported.is_ok(), "{:?}", imported.problems);
    assert_eq!(imported.erased, 1);
    for ((head, _), ids) in heads.iter().zip(&before) {
        assert_eq!(&ids_of(&other.store, *head), ids);
    }

    // After the vacuum step the database file holds no byte of it.
    store.vacuum().unwrap();
    if backend == Backend::Sqlite {
        for suffix in ["", "-wal"] {
            let file = format!("{}{suffix}", db.location());
            let bytes = std::fs::read(&file).unwrap_or_default();
            assert!(!contains(&bytes, b"zebra"), "{file} holds the secret");
        }
    }
    let report = store.verify().unwrap();
    assert!(report.is_ok(), "{:?}", report.problems);
}

fn a_node_that_is_not_stored_is_refused(backend: Backend) {
    let db = TempStore::new(backend);
    let missing = Thread::from_messages([Message::user("never stored")])
        .head_id()
        .unwrap();
    assert!(matches!(
        db.store.redact(missing, "alice", "why"),
        Err(skein_store::StoreError::NodeNotFound(_))
    ));
}
