//! The graph: shared prefixes stored once, stateless clients writing only
//! their tail, forks, blobs, loading, children and subtrees.

mod common;

use common::{Backend, TempStore, history};
use skein_core::{Attachment, Message, Part, Role, Thread, ToolCall, ToolResult};
use skein_store::{NewConversation, StoreError};

fn two_conversations_sharing_a_50_message_prefix_store_it_once(backend: Backend) {
    let db = TempStore::new(backend);
    let prefix = history("You are terse.", 50);
    let left = prefix
        .push(Message::user("left?"))
        .push(Message::assistant("left."));
    let right = prefix
        .push(Message::user("right?"))
        .push(Message::assistant("right."));
    assert_eq!(db.store.append(&left).unwrap().written, 52);
    assert_eq!(db.store.append(&right).unwrap().written, 2);
    assert_eq!(db.count("nodes"), 54);
}

fn a_stateless_client_resending_its_history_writes_only_the_new_tail(backend: Backend) {
    let db = TempStore::new(backend);
    let mut messages = vec![Message::system("sys")];
    for turn in 0..20 {
        messages.push(Message::user(format!("q{turn}")));
        messages.push(Message::assistant(format!("a{turn}")));
        // A fresh thread each turn: no in-memory persistence marks at all.
        let thread = Thread::from_messages(messages.clone());
        let report = db.store.append(&thread).unwrap();
        let expected = if turn == 0 { 3 } else { 2 };
        assert_eq!(report.written, expected, "turn {turn}");
    }
    assert_eq!(db.count("nodes"), 41);
}

fn appending_an_already_persisted_thread_writes_nothing(backend: Backend) {
    let db = TempStore::new(backend);
    let thread = history("s", 10);
    db.store.append(&thread).unwrap();
    assert!(thread.head().unwrap().is_persisted_in(db.store.key()));
    assert_eq!(db.store.append(&thread).unwrap().written, 0);
    // A second handle on the same database shares the key, so it trusts the marks too.
    let other = db.reopen();
    assert_eq!(other.key(), db.store.key());
    assert_eq!(other.append(&thread).unwrap().written, 0);
}

fn a_thread_loads_back_equal_from_any_head(backend: Backend) {
    let db = TempStore::new(backend);
    let thread = history("sys", 30);
    db.store.append(&thread).unwrap();
    let loaded = db.store.load_thread(thread.head_id().unwrap()).unwrap();
    assert_eq!(loaded, thread);
    let original: Vec<Message> = thread.messages().into_iter().cloned().collect();
    let back: Vec<Message> = loaded.messages().into_iter().cloned().collect();
    assert_eq!(back, original);
    let middle = thread.nodes()[12].id();
    let prefix = db.store.load_thread(middle).unwrap();
    assert_eq!(prefix.len(), 13);
    assert_eq!(prefix.head_id(), Some(middle));
    assert!(prefix.head().unwrap().is_persisted_in(db.store.key()));
}

/// Branches off the middle and off the tip, branches of branches, and
/// conversations growing in turn: every head loads back exactly its thread.
fn every_head_of_a_branching_tree_loads_its_own_thread(backend: Backend) {
    let db = TempStore::new(backend);
    let trunk = history("sys", 20);
    db.store.append(&trunk).unwrap();
    let mut heads = vec![trunk.clone()];
    let nodes = trunk.nodes();
    for (at, branch) in [(5, "middle"), (0, "root"), (19, "tip"), (5, "middle again")] {
        let base = db.store.load_thread(nodes[at].id()).unwrap();
        let thread = base
            .push(Message::user(branch))
            .push(Message::assistant(branch));
        db.store.append(&thread).unwrap();
        heads.push(thread);
    }
    // A branch of a branch, and two branches that grow alternately.
    let nested = heads[1].nodes()[7].id();
    let nested = db
        .store
        .load_thread(nested)
        .unwrap()
        .push(Message::user("nested"));
    db.store.append(&nested).unwrap();
    heads.push(nested);
    let (mut left, mut right) = (heads[2].clone(), heads[2].clone());
    for turn in 0..5 {
        left = left.push(Message::user(format!("left {turn}")));
        right = right.push(Message::user(format!("right {turn}")));
        db.store.append(&left).unwrap();
        db.store.append(&right).unwrap();
    }
    heads.extend([left, right]);
    for thread in &heads {
        for node in thread.nodes() {
            let loaded = db.store.load_thread(node.id()).unwrap();
            assert_eq!(loaded.head_id(), Some(node.id()));
            assert_eq!(loaded.len() as u64, node.depth() + 1);
        }
        assert_eq!(
            &db.store.load_thread(thread.head_id().unwrap()).unwrap(),
            thread
        );
    }
    assert!(db.store.verify().unwrap().is_ok());
}

fn loading_an_unknown_head_is_a_typed_error(backend: Backend) {
    let db = TempStore::new(backend);
    let missing = Thread::from_messages([Message::user("never stored")])
        .head_id()
        .unwrap();
    assert!(
        matches!(db.store.load_thread(missing), Err(StoreError::NodeNotFound(id)) if id == missing)
    );
}

fn exact_bytes_of_every_part_kind_survive_storage(backend: Backend) {
    let db = TempStore::new(backend);
    let big_document = "lorem ipsum ".repeat(1000);
    let thread = Thread::from_messages([
        Message::system(format!("  leading and trailing space  \n{big_document}")),
        Message::user("Use the tool"),
        Message::new(
            Role::Assistant,
            vec![
                Part::text(""),
                Part::ToolCall(ToolCall {
                    id: "call_1".into(),
                    name: "search".into(),
                    arguments: "{ \"q\" :\t\"rust\" , }".into(),
                }),
            ],
        ),
        Message::new(
            Role::Tool,
            vec![Part::ToolResult(ToolResult {
                call_id: "call_1".into(),
                content: "boom".into(),
                is_error: true,
            })],
        ),
        Message::new(
            Role::User,
            vec![Part::Attachment(Attachment {
                media_type: "application/octet-stream".into(),
                data: (0..=255u8).cycle().take(10_000).collect(),
            })],
        ),
    ]);
    db.store.append(&thread).unwrap();
    assert_eq!(
        db.count("blobs"),
        2,
        "the document and the attachment exceed the threshold"
    );
    let loaded = db.store.load_thread(thread.head_id().unwrap()).unwrap();
    let original: Vec<Message> = thread.messages().into_iter().cloned().collect();
    let back: Vec<Message> = loaded.messages().into_iter().cloned().collect();
    assert_eq!(back, original);
}

fn the_same_large_document_in_many_conversations_is_stored_once(backend: Backend) {
    let db = TempStore::new(backend);
    let document = "a long retrieved document. ".repeat(400);
    for i in 0..10 {
        let thread = Thread::from_messages([
            Message::system(format!("conversation {i}")),
            Message::user(document.clone()),
        ]);
        db.store.append(&thread).unwrap();
    }
    assert_eq!(db.count("blobs"), 1);
    assert_eq!(db.count("nodes"), 20);
}

fn children_and_subtrees_show_branches(backend: Backend) {
    let db = TempStore::new(backend);
    let base = history("sys", 3);
    let a = base.push(Message::user("a"));
    let b = base.push(Message::user("b"));
    db.store.append(&a).unwrap();
    db.store.append(&b).unwrap();
    let children = db.store.children(base.head_id().unwrap()).unwrap();
    assert_eq!(children, vec![a.head_id().unwrap(), b.head_id().unwrap()]);
    let root = base.nodes()[0].id();
    let tree = db.store.subtree(root, 100).unwrap();
    assert_eq!(tree.len(), 5);
    assert_eq!(tree[0].parent, None);
    assert_eq!(
        tree.iter().filter(|e| e.parent == base.head_id()).count(),
        2
    );
    assert_eq!(
        db.store.subtree(root, 2).unwrap().len(),
        2,
        "limit is honoured"
    );
}

/// The tail of a thread, read without loading what lies above it.
fn ancestry_is_the_last_nodes_of_a_thread_oldest_first(backend: Backend) {
    let db = TempStore::new(backend);
    let thread = history("sys", 6);
    let fork = thread.parent().push(Message::user("elsewhere"));
    db.store.append(&thread).unwrap();
    db.store.append(&fork).unwrap();
    let nodes = thread.nodes();
    let head = thread.head_id().unwrap();

    let whole = db.store.ancestry(head, 100).unwrap();
    let ids: Vec<_> = whole.iter().map(|entry| entry.id).collect();
    let expected: Vec<_> = nodes.iter().map(|node| node.id()).collect();
    assert_eq!(ids, expected, "the whole thread, root first, no fork");
    assert_eq!(whole[0].parent, None);
    assert_eq!(whole[0].depth, 0);
    assert_eq!(
        whole.last().unwrap().preview,
        nodes.last().unwrap().message().joined_text()
    );

    let tail = db.store.ancestry(head, 3).unwrap();
    assert_eq!(
        tail.iter().map(|entry| entry.id).collect::<Vec<_>>(),
        expected[expected.len() - 3..]
    );
    assert_eq!(tail[0].parent, Some(expected[expected.len() - 4]));
    assert_eq!(tail[0].depth, expected.len() as u64 - 3);
    assert!(db.store.ancestry(head, 0).unwrap().is_empty());
    let unknown = Thread::new().push(Message::user("never stored"));
    assert!(matches!(
        db.store.ancestry(unknown.head_id().unwrap(), 5),
        Err(StoreError::NodeNotFound(_))
    ));
}

fn fork_at_a_middle_node_leaves_the_original_untouched(backend: Backend) {
    let db = TempStore::new(backend);
    let thread = history("sys", 20);
    db.store.append(&thread).unwrap();
    let original = db
        .store
        .create_conversation(NewConversation {
            name: Some("original".into()),
            head: thread.head_id(),
            ..Default::default()
        })
        .unwrap();
    let middle = thread.nodes()[9].id();
    let fork = db
        .store
        .fork(middle, Some("what-if".into()), Some(original.id.clone()))
        .unwrap();
    assert_eq!(fork.head, Some(middle));
    assert_eq!(fork.len, 10);
    let origin = fork.origin.clone().unwrap();
    assert_eq!(origin.node, Some(middle));
    assert_eq!(origin.conversation, Some(original.id.clone()));

    // The fork takes its own turns.
    common::append_turn(&db.store, &fork.id, "fork turn 1");
    common::append_turn(&db.store, &fork.id, "fork turn 2");

    let after = db.store.conversation(&original.id).unwrap();
    assert_eq!(
        after.head,
        thread.head_id(),
        "the original's head never moves"
    );
    let fork_thread = db
        .store
        .load_thread(db.store.conversation(&fork.id).unwrap().head.unwrap())
        .unwrap();
    assert_eq!(fork_thread.len(), 14);
    let fork_messages = fork_thread.messages();
    let prefix: Vec<&Message> = thread.messages().into_iter().take(10).collect();
    assert_eq!(&fork_messages[..10], &prefix[..]);
    assert_eq!(fork_messages[10].joined_text(), "fork turn 1");
    assert_eq!(db.count("nodes"), 24);
}

fn forking_an_unknown_node_is_refused(backend: Backend) {
    let db = TempStore::new(backend);
    let missing = Thread::from_messages([Message::user("nowhere")])
        .head_id()
        .unwrap();
    assert!(matches!(
        db.store.fork(missing, None, None),
        Err(StoreError::NodeNotFound(_))
    ));
    assert_eq!(db.count("conversations"), 0);
}

fn a_20k_deep_thread_loads_and_drops_on_a_small_stack(backend: Backend) {
    let db = TempStore::new(backend);
    let thread = Thread::from_messages((0..20_000).map(|i| Message::user(i.to_string())));
    db.store.append(&thread).unwrap();
    let store = db.store.clone();
    let head = thread.head_id().unwrap();
    drop(thread);
    std::thread::Builder::new()
        .stack_size(512 * 1024)
        .spawn(move || {
            let loaded = store.load_thread(head).unwrap();
            assert_eq!(loaded.len(), 20_000);
        })
        .unwrap()
        .join()
        .unwrap();
}

for_each_backend!(
    two_conversations_sharing_a_50_message_prefix_store_it_once,
    a_stateless_client_resending_its_history_writes_only_the_new_tail,
    appending_an_already_persisted_thread_writes_nothing,
    a_thread_loads_back_equal_from_any_head,
    every_head_of_a_branching_tree_loads_its_own_thread,
    loading_an_unknown_head_is_a_typed_error,
    exact_bytes_of_every_part_kind_survive_storage,
    the_same_large_document_in_many_conversations_is_stored_once,
    children_and_subtrees_show_branches,
    ancestry_is_the_last_nodes_of_a_thread_oldest_first,
    fork_at_a_middle_node_leaves_the_original_untouched,
    forking_an_unknown_node_is_refused,
    a_20k_deep_thread_loads_and_drops_on_a_small_stack,
);
