//! The graph: shared prefixes stored once, stateless clients writing only
//! their tail, forks, blobs, loading, children and subtrees; families by
//! origin links, and the conversations sharing their messages by content;
//! full-text search over message text.

use crate::common::{Backend, TempStore, history};
use skein_core::{Attachment, Message, Part, Role, Thread, ToolCall, ToolResult};
use skein_store::{
    ConversationId, ConversationRecord, FamilyLimits, FamilyRows, NewConversation, OnConflict,
    Origin, Problem, RerunCommit, RerunId, RerunRecord, RunRecord, SearchError, SearchQuery,
    SearchResults, Store, StoreError, Target, TurnCommit,
};

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
    crate::common::append_turn(&db.store, &fork.id, "fork turn 1");
    crate::common::append_turn(&db.store, &fork.id, "fork turn 2");

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

/// A conversation created at `thread`'s head (its nodes stored first), with
/// an origin.
fn conversation_at(
    store: &Store,
    name: &str,
    thread: &Thread,
    origin: Option<Origin>,
) -> ConversationRecord {
    store.append(thread).unwrap();
    store
        .create_conversation(NewConversation {
            name: Some(name.into()),
            head: thread.head_id(),
            origin,
            ..Default::default()
        })
        .unwrap()
}

fn ids(rows: &[skein_store::Rooted]) -> Vec<&str> {
    rows.iter()
        .map(|row| row.conversation.name.as_deref().unwrap())
        .collect()
}

const ALL: FamilyLimits = FamilyLimits {
    members: 1000,
    shares: 1000,
};

/// main: hello → hi → more? → more.; fork of main at "hi"; fork of the
/// fork; a reply branch made by a turn that lost its race; a rerun of
/// main's second turn and a fork from its answer. Beside them, conversations
/// that share nodes without an origin link: the same first exchange asked
/// again, and one that merely starts at main's "hi" (as the proxy records an
/// edited history); and one that shares nothing.
fn a_family_is_its_origin_links_with_reruns_and_lookalikes_only_share(backend: Backend) {
    let db = TempStore::new(backend);
    let store = &db.store;
    let first = Thread::new()
        .push(Message::user("hello"))
        .push(Message::assistant("hi"));
    let main_thread = first
        .push(Message::user("more?"))
        .push(Message::assistant("more."));
    let main = conversation_at(store, "main", &main_thread, None);
    let hi = first.head_id().unwrap();
    let fork = conversation_at(
        store,
        "fork",
        &first.push(Message::user("other?")),
        Some(Origin {
            node: Some(hi),
            conversation: Some(main.id.clone()),
            rerun: None,
        }),
    );
    let fork_thread = store.load_thread(fork.head.unwrap()).unwrap();
    let fork_of_fork = conversation_at(
        store,
        "fork-of-fork",
        &fork_thread.push(Message::assistant("other.")),
        Some(Origin {
            node: fork.head,
            conversation: Some(fork.id.clone()),
            rerun: None,
        }),
    );
    // A turn of main that started at "hi" after main moved on branches.
    let late = first
        .push(Message::user("late?"))
        .push(Message::assistant("late."));
    let committed = store
        .commit_turn(&TurnCommit {
            target: Target::Existing {
                id: main.id.clone(),
                expected_head: Some(hi),
                on_conflict: OnConflict::Branch(Box::new(NewConversation {
                    name: Some("branch".into()),
                    ..Default::default()
                })),
            },
            thread: Some(&late),
            runs: &[],
        })
        .unwrap();
    let branch = committed.conversation.unwrap();
    assert_ne!(branch, main.id);
    // A rerun of main's second turn, and a conversation forked from its
    // answer.
    let answer = main_thread.parent().push(Message::assistant("less."));
    let run = RunRecord::new("echo", "echo");
    let rerun = RerunRecord {
        id: RerunId::random(),
        conversation: main.id.clone(),
        turn: 1,
        turn_node: main_thread.head_id().unwrap(),
        request_head: main_thread.parent().head_id(),
        answer_head: answer.head_id(),
        ablation: vec!["facts".into()],
        samples: 1,
        sample_runs: vec![run.id.clone()],
        baseline_runs: vec![],
        verdict: Some("confirmed".into()),
        summary: "changed".into(),
        detail: serde_json::json!({}),
        created_ms: 5,
    };
    store
        .commit_rerun(&RerunCommit {
            record: &rerun,
            threads: std::slice::from_ref(&answer),
            runs: std::slice::from_ref(&run),
        })
        .unwrap();
    conversation_at(
        store,
        "from-rerun",
        &answer,
        Some(Origin {
            node: answer.head_id(),
            conversation: Some(main.id.clone()),
            rerun: Some(rerun.id.clone()),
        }),
    );
    // Lookalikes.
    conversation_at(store, "again", &first.push(Message::user("again?")), None);
    conversation_at(
        store,
        "bare",
        &first.push(Message::user("edited?")),
        Some(Origin {
            node: Some(hi),
            conversation: None,
            rerun: None,
        }),
    );
    conversation_at(
        store,
        "unrelated",
        &Thread::new().push(Message::user("goodbye")),
        None,
    );

    let family = store.family(&fork_of_fork.id, ALL).unwrap();
    let members = ids(&family.members);
    let at = |name: &str| members.iter().position(|m| *m == name).unwrap();
    assert_eq!(members[0], "main", "the first of the origin links first");
    assert!(at("fork") < at("fork-of-fork"), "each after its origin");
    let mut sorted = members.clone();
    sorted.sort();
    assert_eq!(
        sorted,
        ["branch", "fork", "fork-of-fork", "from-rerun", "main"]
    );
    assert!(!family.more_members);
    assert_eq!(family.reruns, vec![rerun.clone()]);
    let mut sharing = ids(&family.shares);
    sharing.sort();
    assert_eq!(sharing, ["again", "bare"]);
    assert!(!family.more_shares);
    let root = first.nodes()[0].id();
    assert!(family.members[..3].iter().all(|m| m.root == Some(root)));
    assert!(family.shares.iter().all(|m| m.root == Some(root)));

    // The same family from any member.
    for from in [&main.id, &branch] {
        let again = store.family(from, ALL).unwrap();
        assert_eq!(ids(&again.members), members);
        assert_eq!(ids(&again.shares), ids(&family.shares));
    }
    // A lookalike's family is itself; the others share with it.
    // (Found by name: "bare" and "again" may be created in the same
    // millisecond, which leaves their order open.)
    let again_id = family
        .shares
        .iter()
        .find(|share| share.conversation.name.as_deref() == Some("again"))
        .unwrap()
        .conversation
        .id
        .clone();
    let lookalike = store.family(&again_id, ALL).unwrap();
    assert_eq!(ids(&lookalike.members), ["again"]);
    assert!(lookalike.reruns.is_empty());
    let mut sharing = ids(&lookalike.shares);
    sharing.sort();
    assert_eq!(
        sharing,
        [
            "bare",
            "branch",
            "fork",
            "fork-of-fork",
            "from-rerun",
            "main"
        ]
    );

    // Limits cut the family off the asked conversation's line, and say so.
    let cut = |members, shares| {
        store
            .family(&fork_of_fork.id, FamilyLimits { members, shares })
            .unwrap()
    };
    let line = cut(0, 1);
    assert_eq!(ids(&line.members), ["main", "fork", "fork-of-fork"]);
    assert!(line.more_members);
    assert_eq!(line.shares.len(), 1);
    assert!(line.more_shares);
    assert_eq!(
        line.reruns,
        vec![rerun],
        "reruns of the members that were read"
    );
    let one_more = cut(1, 0);
    assert_eq!(one_more.members.len(), 4);
    assert!(one_more.more_members);
    assert!(one_more.shares.is_empty() && one_more.more_shares);
    let exact = cut(2, 2);
    assert_eq!(exact.members.len(), 5);
    assert!(!exact.more_members && !exact.more_shares);

    assert!(matches!(
        store.family(&ConversationId::random(), ALL),
        Err(StoreError::ConversationNotFound(_))
    ));
    assert!(store.verify().unwrap().is_ok());
}

/// A conversation's root follows its head wherever the head moves; a
/// conversation with no head shares nothing; a damaged root is reported.
fn roots_follow_heads_and_verify_checks_them(backend: Backend) {
    let db = TempStore::new(backend);
    let store = &db.store;
    let one = Thread::from_messages([Message::user("one"), Message::assistant("1")]);
    let two = Thread::from_messages([Message::user("two"), Message::assistant("2")]);
    let a = conversation_at(store, "a", &one, None);
    let b = conversation_at(store, "b", &two, None);
    let empty = store
        .create_conversation(NewConversation::default())
        .unwrap();
    let shares = |id: &ConversationId| -> Vec<ConversationId> {
        let family: FamilyRows = store.family(id, ALL).unwrap();
        family
            .shares
            .into_iter()
            .map(|row| row.conversation.id)
            .collect()
    };
    assert!(shares(&a.id).is_empty());
    assert!(shares(&empty.id).is_empty());
    // b's head jumps to a's tree: now they share.
    store
        .move_head(&b.id, b.head, one.head_id().unwrap())
        .unwrap();
    assert_eq!(shares(&a.id), vec![b.id.clone()]);
    // A first turn of the empty conversation in b's old tree shares nothing.
    store
        .commit_turn(&TurnCommit::continuing(
            &empty.id,
            None,
            &two.push(Message::user("?")),
            &[],
        ))
        .unwrap();
    assert!(shares(&empty.id).is_empty());
    assert!(store.verify().unwrap().is_ok());

    let node = two.head_id().unwrap();
    let wrong = db.bytes_literal(one.nodes()[0].id().as_bytes());
    let root = match backend {
        // SQLite keeps the root's seq.
        Backend::Sqlite => "12345".to_string(),
        Backend::Postgres => wrong,
    };
    store
        .debug_execute(&format!(
            "UPDATE nodes SET root = {root} WHERE id = {}",
            db.bytes_literal(node.as_bytes())
        ))
        .unwrap();
    store
        .debug_execute(&format!(
            "UPDATE conversations SET root = NULL WHERE id = '{}'",
            a.id
        ))
        .unwrap();
    let problems = store.verify().unwrap().problems;
    assert!(
        problems.contains(&Problem::RootMismatch { id: node.to_hex() }),
        "{problems:?}"
    );
    assert!(
        problems.contains(&Problem::ConversationRootMismatch {
            conversation: a.id.to_string()
        }),
        "{problems:?}"
    );
}

/// A database from before roots (schema 6) gets every node's and
/// conversation's root on open, and its families find what shares with them.
fn a_database_from_before_roots_gets_them_on_open(backend: Backend) {
    let db = TempStore::new(backend);
    let store = &db.store;
    let base = history("sys", 5);
    let main = conversation_at(store, "main", &base.push(Message::user("a")), None);
    let branch_point = base.nodes()[2].id();
    let thread = store.load_thread(branch_point).unwrap();
    let again = conversation_at(store, "again", &thread.push(Message::user("b")), None);
    conversation_at(store, "other", &history("other", 3), None);
    for statement in [
        "DROP TABLE run_links",
        "DROP INDEX conversations_by_root",
        "ALTER TABLE conversations DROP COLUMN root",
        "ALTER TABLE nodes DROP COLUMN root",
        "ALTER TABLE runs DROP COLUMN requested_model",
    ] {
        store.debug_execute(statement).unwrap();
    }
    db.drop_search_index();
    db.undo_schemas_from_11();
    db.set_schema_version(6);
    let reopened = db.reopen();
    let family = reopened.family(&main.id, ALL).unwrap();
    assert_eq!(ids(&family.members), ["main"]);
    assert_eq!(family.shares.len(), 1);
    assert_eq!(family.shares[0].conversation.id, again.id);
    assert_eq!(family.members[0].root, Some(base.nodes()[0].id()));
    assert!(reopened.verify().unwrap().is_ok());
}

fn search(store: &Store, text: &str) -> SearchResults {
    store.search(&SearchQuery::new(text)).unwrap()
}

fn found(results: &SearchResults) -> Vec<skein_core::NodeId> {
    results.matches.iter().map(|m| m.node).collect()
}

/// Words are found in user and assistant messages, in a text part large
/// enough to be stored as a blob, case-insensitively, with a snippet around
/// them and the conversation whose thread holds them; attachments, tool
/// calls and tool results are not searched.
fn search_finds_words_in_text_parts_only(backend: Backend) {
    let db = TempStore::new(backend);
    let store = &db.store;
    let document = format!(
        "{} the Needlework is at the end",
        "padding words ".repeat(800)
    );
    assert!(document.len() > skein_store::BLOB_THRESHOLD);
    let thread = Thread::new()
        .push(Message::user("Where is the ZEBRA crossing?"))
        .push(Message::assistant("Past the yellow giraffe."))
        .push(Message::new(
            Role::User,
            vec![
                Part::text("read this"),
                Part::text(document.clone()),
                Part::Attachment(Attachment {
                    media_type: "text/plain".into(),
                    data: b"attachedword inside a file".to_vec(),
                }),
            ],
        ))
        .push(Message::new(
            Role::Assistant,
            vec![Part::ToolCall(ToolCall {
                id: "c1".into(),
                name: "lookup".into(),
                arguments: r#"{"q":"toolcallword"}"#.into(),
            })],
        ))
        .push(Message::new(
            Role::Tool,
            vec![Part::ToolResult(ToolResult {
                call_id: "c1".into(),
                content: "toolresultword".into(),
                is_error: false,
            })],
        ));
    let main = conversation_at(store, "main", &thread, None);
    let nodes: Vec<_> = thread.nodes().iter().map(|node| node.id()).collect();

    let zebra = search(store, "zebra");
    assert_eq!(found(&zebra), [nodes[0]]);
    let hit = &zebra.matches[0];
    assert_eq!(hit.role, Role::User);
    assert_eq!(hit.snippet, "Where is the ZEBRA crossing?");
    assert_eq!(hit.highlights, [(13, 18)]);
    assert_eq!(hit.conversations.len(), 1);
    assert_eq!(hit.conversations[0].id, main.id);
    assert_eq!(hit.conversations[0].name.as_deref(), Some("main"));
    assert!(!zebra.truncated);

    let giraffe = search(store, "Giraffe");
    assert_eq!(found(&giraffe), [nodes[1]]);
    assert_eq!(giraffe.matches[0].role, Role::Assistant);

    let needle = search(store, "needlework");
    assert_eq!(found(&needle), [nodes[2]]);
    let snippet = &needle.matches[0].snippet;
    assert!(
        snippet.starts_with('…') && snippet.contains("Needlework"),
        "{snippet}"
    );

    for absent in ["attachedword", "toolcallword", "toolresultword", "nowhere"] {
        assert!(search(store, absent).matches.is_empty(), "{absent}");
    }
    // Words must all appear; phrases in order; prefixes.
    assert_eq!(found(&search(store, "yellow giraffe")), [nodes[1]]);
    assert!(search(store, "zebra giraffe").matches.is_empty());
    assert_eq!(found(&search(store, "\"yellow giraffe\"")), [nodes[1]]);
    assert!(search(store, "\"giraffe yellow\"").matches.is_empty());
    assert_eq!(found(&search(store, "gira*")), [nodes[1]]);
    assert_eq!(found(&search(store, "\"the yel\"*")), [nodes[1]]);
    // Role filter.
    let only_users = store
        .search(&SearchQuery::new("the").role(Some(Role::User)))
        .unwrap();
    assert_eq!(found(&only_users), [nodes[2], nodes[0]]);
}

/// Matches come newest first, `limit` at most with `truncated` set beyond
/// it; a conversation filter keeps its thread's nodes only; each match names
/// the conversations whose thread holds it.
fn search_orders_limits_and_filters_by_conversation(backend: Backend) {
    let db = TempStore::new(backend);
    let store = &db.store;
    let main = store
        .create_conversation(NewConversation {
            name: Some("main".into()),
            ..Default::default()
        })
        .unwrap();
    for i in 0..4 {
        crate::common::append_turn(store, &main.id, &format!("common topic {i}"));
    }
    let head = store.conversation(&main.id).unwrap().head.unwrap();
    let thread = store.load_thread(head).unwrap();
    let nodes: Vec<_> = thread.nodes().iter().map(|node| node.id()).collect();
    // A fork at the second turn's prompt, continued: its thread shares the
    // first two turns' nodes.
    let fork = store
        .fork(nodes[2], Some("fork".into()), Some(main.id.clone()))
        .unwrap();
    crate::common::append_turn(store, &fork.id, "common detour");

    let all = search(store, "common");
    assert_eq!(all.matches.len(), 10);
    let newest_first: Vec<_> = all.matches.iter().map(|m| m.snippet.as_str()).collect();
    assert_eq!(newest_first[0], "reply to common detour");
    assert_eq!(newest_first[9], "common topic 0");

    let limited = store.search(&SearchQuery::new("common").limit(3)).unwrap();
    assert!(limited.truncated);
    assert_eq!(found(&limited), found(&all)[..3]);
    let exact = store.search(&SearchQuery::new("common").limit(10)).unwrap();
    assert!(!exact.truncated);
    assert!(
        store
            .search(&SearchQuery::new("common").limit(0))
            .unwrap()
            .matches
            .is_empty()
    );

    let in_fork = store
        .search(&SearchQuery::new("common").conversation(Some(fork.id.clone())))
        .unwrap();
    let in_fork_nodes = found(&in_fork);
    assert_eq!(
        in_fork_nodes.len(),
        5,
        "three shared messages and the fork's turn"
    );
    assert!(in_fork_nodes.contains(&nodes[0]) && in_fork_nodes.contains(&nodes[2]));
    assert!(!in_fork_nodes.contains(&nodes[4]));
    assert!(
        in_fork
            .matches
            .iter()
            .all(|m| m.conversations[0].id == fork.id)
    );

    // The first prompt is in both threads (either may be named); the last
    // turn only in main's, the detour only in the fork's.
    let first = all.matches.iter().find(|m| m.node == nodes[0]).unwrap();
    assert!(!first.conversations.is_empty());
    assert!(
        first
            .conversations
            .iter()
            .all(|c| c.id == main.id || c.id == fork.id)
    );
    let last = all.matches.iter().find(|m| m.node == nodes[7]).unwrap();
    assert_eq!(last.conversations.len(), 1);
    assert_eq!(last.conversations[0].id, main.id);
    let detour = &all.matches[1];
    assert_eq!(detour.snippet, "common detour");
    assert_eq!(detour.conversations[0].id, fork.id);

    // A node no conversation leads to still matches, naming none.
    let orphan = thread.push(Message::user("common orphan"));
    store
        .append(&orphan.push(Message::assistant("orphan reply")))
        .unwrap();
    let found_orphan = search(store, "\"common orphan\"");
    assert_eq!(found_orphan.matches.len(), 1);
    assert!(found_orphan.matches[0].conversations.is_empty());
    // A conversation on a branch below it (another lane) is found by the
    // walk down from it.
    let adopter = conversation_at(
        store,
        "adopter",
        &orphan.push(Message::assistant("another reply")),
        None,
    );
    let found_orphan = search(store, "\"common orphan\"");
    assert_eq!(found_orphan.matches[0].conversations.len(), 1);
    assert_eq!(found_orphan.matches[0].conversations[0].id, adopter.id);

    assert!(matches!(
        store.search(&SearchQuery::new("common").conversation(Some(ConversationId("nope".into())))),
        Err(StoreError::ConversationNotFound(_))
    ));
}

/// More matches than a backend reads unordered from its index (PostgreSQL
/// then walks `seq` instead) still come newest first.
fn many_matches_still_come_newest_first(backend: Backend) {
    let db = TempStore::new(backend);
    let mut thread = Thread::new();
    for i in 0..500 {
        thread = thread.push(if i % 2 == 0 {
            Message::user(format!("plenty {i}"))
        } else {
            Message::assistant(format!("plenty {i} back"))
        });
    }
    db.store.append(&thread).unwrap();
    let nodes = thread.nodes();
    let newest = db
        .store
        .search(&SearchQuery::new("plenty").limit(3))
        .unwrap();
    assert!(newest.truncated);
    assert_eq!(
        found(&newest),
        [nodes[499].id(), nodes[498].id(), nodes[497].id()]
    );
    let users = db
        .store
        .search(&SearchQuery::new("plenty").limit(2).role(Some(Role::User)))
        .unwrap();
    assert_eq!(found(&users), [nodes[498].id(), nodes[496].id()]);
    let one = db.store.search(&SearchQuery::new("plenty 234")).unwrap();
    assert_eq!(found(&one), [nodes[234].id()]);
}

/// Queries either engine would choke on are typed errors or plain searches,
/// never database errors.
fn malformed_searches_are_typed_errors_never_database_errors(backend: Backend) {
    let db = TempStore::new(backend);
    let store = &db.store;
    conversation_at(
        store,
        "main",
        &Thread::new().push(Message::user("select the rows where name is bobby")),
        None,
    );
    let error = |text: &str| store.search(&SearchQuery::new(text)).unwrap_err();
    assert!(matches!(
        error(r#"say "unbalanced"#),
        StoreError::Search(SearchError::UnclosedQuote)
    ));
    assert!(matches!(
        error("*"),
        StoreError::Search(SearchError::NoWords)
    ));
    assert!(matches!(
        error("\"\""),
        StoreError::Search(SearchError::NoWords)
    ));
    assert!(matches!(
        error(&"long ".repeat(1000)),
        StoreError::Search(SearchError::TooLong { .. })
    ));
    assert!(matches!(
        error(&"w ".repeat(100)),
        StoreError::Search(SearchError::TooManyTerms { .. })
    ));
    assert!(error("*").to_string().contains("no words"));
    for odd in [
        "bobby'; DROP TABLE nodes; --",
        "NEAR(rows bobby)",
        "name:bobby",
        "^bobby",
        "bobby OR rows",
        "bobby & !rows",
        "(bobby) <-> rows",
        "bobby:*",
        "-rows +bobby",
        "'bobby'",
        "bobby\\",
        "x*y* bobby**",
        &"ü".repeat(200),
    ] {
        if let Err(error) = store.search(&SearchQuery::new(odd)) {
            assert!(matches!(error, StoreError::Search(_)), "{odd}: {error}");
        }
    }
    assert_eq!(
        search(store, "bobby'; DROP TABLE nodes; --").matches.len(),
        0
    );
    assert_eq!(search(store, "'bobby'").matches.len(), 1);
    // Words joined by other characters are a phrase.
    assert_eq!(search(store, "is:bobby").matches.len(), 1);
    assert_eq!(search(store, "name:bobby").matches.len(), 0);
}

/// A database from before search gets every stored node indexed on open
/// (a blob-stored part included).
fn a_database_from_before_search_is_indexed_on_open(backend: Backend) {
    let db = TempStore::new(backend);
    let large = format!("{} hidden treasure", "filler ".repeat(1000));
    let thread = history("sys", 5)
        .push(Message::user("an early elephant"))
        .push(Message::assistant(large));
    conversation_at(&db.store, "old", &thread, None);
    db.drop_search_index();
    db.undo_schemas_from_11();
    db.set_schema_version(9);
    let reopened = db.reopen();
    assert_eq!(
        found(&search(&reopened, "elephant")),
        [thread.nodes()[5].id()]
    );
    assert_eq!(
        found(&search(&reopened, "treasure")),
        [thread.nodes()[6].id()]
    );
    assert_eq!(search(&reopened, "question").matches.len(), 2);
    // New nodes are indexed as they are written.
    reopened
        .append(&thread.push(Message::user("a later elephant")))
        .unwrap();
    assert_eq!(search(&reopened, "elephant").matches.len(), 2);
}

/// What an import writes (an export, records made in memory) is searchable.
fn imports_are_searchable(backend: Backend) {
    let source = TempStore::new(backend);
    let thread = Thread::new()
        .push(Message::user("exported marmalade"))
        .push(Message::assistant(format!(
            "{} big marmalade",
            "jar ".repeat(2000)
        )));
    let conversation = conversation_at(&source.store, "jam", &thread, None);
    let mut export = Vec::new();
    source.store.export(&mut export).unwrap();

    let target = TempStore::new(backend);
    target.store.import(&mut export.as_slice()).unwrap();
    let imported = search(&target.store, "marmalade");
    assert_eq!(
        found(&imported),
        [thread.nodes()[1].id(), thread.nodes()[0].id()]
    );
    assert_eq!(imported.matches[0].conversations[0].id, conversation.id);

    let records = TempStore::new(backend);
    let other = Thread::new().push(Message::user("recorded quince"));
    let mut conversation = records
        .store
        .create_conversation(NewConversation::default())
        .unwrap();
    conversation.head = other.head_id();
    conversation.id = ConversationId::random();
    records
        .store
        .import_records(other.nodes(), vec![conversation.clone()], vec![])
        .unwrap();
    let quince = search(&records.store, "quince");
    assert_eq!(found(&quince), [other.head_id().unwrap()]);
    assert_eq!(quince.matches[0].conversations[0].id, conversation.id);
}

/// The message that made a call is found by the call's id (an agent's
/// handoff is linked by it), on a new database and, after the migration
/// that added the index, on one from before it.
fn a_call_is_found_by_its_id_in_new_and_migrated_databases(backend: Backend) {
    let db = TempStore::new(backend);
    let calls = Message::new(
        Role::Assistant,
        vec![
            Part::ToolCall(ToolCall {
                id: "call_Zq9Xw7Lp2Rk4".into(),
                name: "transfer".into(),
                arguments: "{}".into(),
            }),
            Part::ToolCall(ToolCall {
                id: "call_second".into(),
                name: "lookup".into(),
                arguments: "{\"q\": 1}".into(),
            }),
        ],
    );
    let thread = Thread::new()
        .push(Message::user("hand me over"))
        .push(calls)
        .push(Message::tool_results([ToolResult {
            call_id: "call_Zq9Xw7Lp2Rk4".into(),
            content: "done".into(),
            is_error: false,
        }]));
    db.store.append(&thread).unwrap();
    let caller = thread.parent().head_id().unwrap();
    let found = |store: &Store| {
        (
            store.nodes_calling("call_Zq9Xw7Lp2Rk4", 8).unwrap(),
            store.nodes_calling("call_second", 8).unwrap(),
            store.nodes_calling("call_never", 8).unwrap(),
        )
    };
    let expected = (vec![caller], vec![caller], vec![]);
    assert_eq!(found(&db.store), expected, "a result is not a call");
    db.store.debug_execute("DROP TABLE tool_calls").unwrap();
    db.set_schema_version(12);
    assert_eq!(found(&db.reopen()), expected, "filled by the migration");
}

for_each_backend!(
    a_call_is_found_by_its_id_in_new_and_migrated_databases,
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
    a_family_is_its_origin_links_with_reruns_and_lookalikes_only_share,
    roots_follow_heads_and_verify_checks_them,
    a_database_from_before_roots_gets_them_on_open,
    search_finds_words_in_text_parts_only,
    search_orders_limits_and_filters_by_conversation,
    many_matches_still_come_newest_first,
    malformed_searches_are_typed_errors_never_database_errors,
    a_database_from_before_search_is_indexed_on_open,
    imports_are_searchable,
);
