//! Labels (schema migration 16), on both backends: a label's nodes round
//! trip, page by node id and count; adding is all or nothing (a missing
//! node refuses the whole call); a bad name is refused; a labelled turn
//! survives the deletion of its conversation and garbage collection (the
//! plan counts it), and goes once its label is removed.

use crate::common::{Backend, TempStore};
use skein_core::{Message, NodeId, Thread};
use skein_store::{LabelCount, RunRecord, Selection, Store, StoreError, Target, TurnCommit};

for_each_backend!(
    a_label_round_trips_pages_and_counts,
    adding_a_label_to_a_missing_node_adds_nothing,
    a_labelled_turn_outlives_its_conversation_until_its_label_goes,
);

/// `n` stored turns (a question and its answer), their answers' ids.
fn answers(store: &Store, n: usize) -> Vec<NodeId> {
    (0..n)
        .map(|i| {
            let thread = Thread::from_messages([
                Message::user(format!("question {i}")),
                Message::assistant(format!("answer {i}")),
            ]);
            store.append(&thread).unwrap();
            thread.head_id().unwrap()
        })
        .collect()
}

fn a_label_round_trips_pages_and_counts(backend: Backend) {
    let db = TempStore::new(backend);
    let store = &db.store;
    let nodes = answers(store, 5);
    assert_eq!(store.add_label("hotel", &nodes).unwrap(), 5);
    assert_eq!(
        store.add_label("hotel", &nodes[..2]).unwrap(),
        0,
        "already on"
    );
    assert_eq!(store.add_label("regress", &nodes[..1]).unwrap(), 1);
    let mut paged = Vec::new();
    let mut after = None;
    loop {
        let page = store.labelled("hotel", after, 2).unwrap();
        assert!(page.len() <= 2);
        after = page.last().map(|label| label.node);
        paged.extend(page.into_iter().map(|label| label.node));
        if after.is_none() {
            break;
        }
    }
    let mut sorted = nodes.clone();
    sorted.sort();
    assert_eq!(paged, sorted, "every node once, in id order");
    assert_eq!(
        store.labels_of(nodes[0]).unwrap(),
        vec!["hotel".to_string(), "regress".to_string()]
    );
    assert_eq!(
        store.label_counts().unwrap(),
        vec![
            LabelCount {
                name: "hotel".into(),
                nodes: 5
            },
            LabelCount {
                name: "regress".into(),
                nodes: 1
            },
        ]
    );
    assert_eq!(store.remove_label("hotel", &nodes[..3]).unwrap(), 3);
    assert_eq!(store.remove_label("hotel", &nodes[..3]).unwrap(), 0);
    assert_eq!(store.labelled("hotel", None, 10).unwrap().len(), 2);
    assert!(store.labels_of(nodes[1]).unwrap().is_empty());
    assert!(matches!(
        store.add_label(" padded", &nodes),
        Err(StoreError::LabelName(_))
    ));
}

fn adding_a_label_to_a_missing_node_adds_nothing(backend: Backend) {
    let db = TempStore::new(backend);
    let store = &db.store;
    let mut nodes = answers(store, 2);
    let missing = Thread::from_messages([Message::user("never stored")])
        .head_id()
        .unwrap();
    nodes.insert(1, missing);
    match store.add_label("cases", &nodes) {
        Err(StoreError::NodeNotFound(node)) => assert_eq!(node, missing),
        other => panic!("expected NodeNotFound, got {other:?}"),
    }
    assert!(store.label_counts().unwrap().is_empty(), "all or nothing");
}

fn a_labelled_turn_outlives_its_conversation_until_its_label_goes(backend: Backend) {
    let db = TempStore::new(backend);
    let store = &db.store;
    let thread = Thread::from_messages([
        Message::system("S"),
        Message::user("What is the name of my hotel?"),
        Message::assistant("It is called Hotel Lutetia."),
        Message::user("Thanks"),
        Message::assistant("You are welcome."),
    ]);
    let mut run = RunRecord::new("m", "scripted");
    run.input_head = thread.parent().head_id();
    run.output_head = thread.head_id();
    let id = store
        .commit_turn(&TurnCommit {
            target: Target::New(Box::default()),
            thread: Some(&thread),
            runs: std::slice::from_ref(&run),
        })
        .unwrap()
        .conversation
        .unwrap();
    let lutetia = thread.nodes()[2].id();
    store.add_label("hotel", &[lutetia]).unwrap();

    let plan = store
        .forget(&Selection::Conversations(vec![id.clone()]), true)
        .unwrap();
    let done = store
        .forget(&Selection::Conversations(vec![id]), false)
        .unwrap();
    assert_eq!(plan.labelled_messages, 1, "{plan:?}");
    assert_eq!((plan.messages, plan.kept_messages), (2, 3), "{plan:?}");
    assert_eq!(
        (done.messages, done.kept_messages, done.labelled_messages),
        (2, 3, 1)
    );
    assert!(plan.to_string().contains("1 of them labelled"), "{plan}");
    // The labelled answer and the messages before it load as they were.
    assert_eq!(
        store.load_thread(lutetia).unwrap(),
        thread.at(lutetia).unwrap()
    );
    assert_eq!(store.collect_garbage(false).unwrap().messages, 0);
    assert!(store.verify().unwrap().is_ok());

    store.remove_label("hotel", &[lutetia]).unwrap();
    assert_eq!(store.collect_garbage(false).unwrap().messages, 3);
    assert!(matches!(
        store.node(lutetia),
        Err(StoreError::NodeNotFound(_))
    ));
    assert!(store.verify().unwrap().is_ok());
}
