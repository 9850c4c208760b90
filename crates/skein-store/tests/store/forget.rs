//! Deleting conversations (`Store::forget`), on both backends: a graph with
//! forks, a rerun with a fork from its answer, shared prefixes, a failed
//! run, a shared blob and cached embeddings, deleted one conversation at a
//! time in several orders; after each deletion every remaining conversation
//! loads as before, `verify` is clean, and exactly the nodes, blobs and
//! embeddings that remaining rows reach (computed here from the rows, by
//! loading threads) are stored. Also: a dry run changes nothing and plans
//! exactly what the deletion then does; a filter skips a conversation
//! updated after it was selected; a turn built on nodes deleted meanwhile
//! writes them again.

use crate::common::{Backend, TempStore, append_turn, spawn_child};
use skein_core::encoding::encode_body;
use skein_core::{Digest, Message, NodeId, Part, Thread};
use skein_store::{
    BLOB_THRESHOLD, ConversationId, Filter, NewConversation, Origin, RerunCommit, RunRecord,
    RunStatus, SearchQuery, Selection, Store, StoreError, Target, TurnCommit,
};
use std::collections::{BTreeMap, HashSet};
use std::io::BufRead;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

for_each_backend!(
    deleting_in_any_order_keeps_exactly_what_remains_reachable,
    a_dry_run_plans_exactly_what_the_deletion_does_and_changes_nothing,
    a_filter_deletes_old_proxy_conversations_and_skips_ones_updated_since,
    a_client_filter_deletes_the_conversations_holding_that_clients_runs,
    a_turn_built_on_deleted_nodes_writes_them_again,
    deleting_a_family_takes_its_forks_but_not_sharers,
    writers_and_a_deletion_loop_lose_no_turn_and_leave_nothing_dangling,
    collecting_garbage_removes_only_what_nothing_reaches,
    killing_a_deletion_at_any_moment_leaves_a_database_that_verifies,
    a_deleted_origin_is_recorded_and_a_missing_one_is_a_finding,
    collecting_in_batches_reports_progress_and_does_what_the_dry_run_planned,
    a_killed_collection_leaves_a_database_that_verifies_and_the_next_completes,
    exclusive_work_runs_once_at_a_time,
    a_deleted_conversations_words_leave_the_file_after_the_vacuum,
);

const EMBEDDER: &str = "test-embedder";

/// A document long enough to be stored as a blob, shared by two
/// conversations under different parents.
fn document() -> String {
    "a long document. ".repeat(BLOB_THRESHOLD / 8)
}

/// Commit `thread` as a new conversation with one run producing its head.
fn start(store: &Store, thread: &Thread, name: &str) -> ConversationId {
    let mut run = RunRecord::new("m", "scripted");
    run.input_head = thread.parent().head_id();
    run.output_head = thread.head_id();
    let turn = TurnCommit {
        target: Target::New(Box::new(NewConversation {
            name: Some(name.into()),
            ..NewConversation::default()
        })),
        thread: Some(thread),
        runs: std::slice::from_ref(&run),
    };
    store.commit_turn(&turn).unwrap().conversation.unwrap()
}

/// Continue `id` with `thread` (which extends its head).
fn continue_with(store: &Store, id: &ConversationId, thread: &Thread) {
    let head = store.conversation(id).unwrap().head;
    let mut run = RunRecord::new("m", "scripted");
    run.input_head = thread.parent().head_id();
    run.output_head = thread.head_id();
    store
        .commit_turn(&TurnCommit::continuing(
            id,
            head,
            thread,
            std::slice::from_ref(&run),
        ))
        .unwrap();
}

/// The test graph: five conversations and a rerun.
/// - `a`: S, u1, a1, u2, a2
/// - `b`: forked from `a` at a1, then u3, a3
/// - `c`: S, "other question", the shared document, a reply; plus a failed
///   run whose input is one more user message
/// - `d`: the document under another parent, then a reply
/// - a rerun of `a`'s turn a2 (request S', u1, a1', u2; answer HOLD), and
///   `e` forked from its answer, continued once
fn build(store: &Store) -> Vec<ConversationId> {
    let base = Thread::from_messages([
        Message::system("S"),
        Message::user("u1"),
        Message::assistant("a1"),
    ]);
    let a_thread = base
        .push(Message::user("u2"))
        .push(Message::assistant("a2"));
    let a = start(store, &base, "a");
    continue_with(store, &a, &a_thread);

    let b = store
        .fork(base.head_id().unwrap(), Some("b".into()), Some(a.clone()))
        .unwrap()
        .id;
    continue_with(
        store,
        &b,
        &base
            .push(Message::user("u3"))
            .push(Message::assistant("a3")),
    );

    let c_thread = Thread::from_messages([
        Message::system("S"),
        Message::user("other question"),
        Message::user(document()),
        Message::assistant("c reply"),
    ]);
    let c = start(store, &c_thread, "c");
    let failed_input = c_thread.push(Message::user("c failed question"));
    let mut failed = RunRecord::new("m", "scripted");
    failed.status = RunStatus::Failed;
    failed.conversation = Some(c.clone());
    failed.input_head = failed_input.head_id();
    store
        .commit_turn(&TurnCommit {
            target: Target::Detached,
            thread: Some(&failed_input),
            runs: std::slice::from_ref(&failed),
        })
        .unwrap();

    let d_thread = Thread::from_messages([
        Message::system("D system"),
        Message::user(document()),
        Message::assistant("d reply"),
    ]);
    let d = start(store, &d_thread, "d");

    let answer = Thread::from_messages([
        Message::system("S'"),
        Message::user("u1"),
        Message::assistant("a1'"),
        Message::user("u2"),
        Message::assistant("HOLD"),
    ]);
    let mut sample = RunRecord::new("m", "scripted");
    sample.input_head = answer.parent().head_id();
    sample.output_head = answer.head_id();
    let rerun = crate::reruns::record(&a, &a_thread, &answer, &sample);
    store
        .commit_rerun(&RerunCommit {
            record: &rerun,
            threads: std::slice::from_ref(&answer),
            runs: std::slice::from_ref(&sample),
        })
        .unwrap();
    let e = store
        .create_conversation(NewConversation {
            name: Some("e".into()),
            head: answer.head_id(),
            origin: Some(Origin {
                node: answer.head_id(),
                conversation: Some(a.clone()),
                rerun: Some(rerun.id.clone()),
            }),
            ..NewConversation::default()
        })
        .unwrap()
        .id;
    continue_with(
        store,
        &e,
        &answer
            .push(Message::user("e question"))
            .push(Message::assistant("e reply")),
    );

    for text in ["u1", "a2", "c reply", "d reply", "HOLD", "e reply", "S"] {
        store
            .cache_embedding(EMBEDDER, &Digest::of(text.as_bytes()), &[1.0])
            .unwrap();
    }
    vec![a, b, c, d, e]
}

/// Every node the remaining rows reach, found by loading threads: the
/// conversations' heads and origins, the runs' heads, the reruns' nodes.
fn reachable(store: &Store) -> BTreeMap<NodeId, Message> {
    let mut heads: Vec<NodeId> = Vec::new();
    for conversation in store.list_conversations(1000).unwrap() {
        heads.extend(conversation.head);
        heads.extend(conversation.origin.and_then(|origin| origin.node));
    }
    for run in store.recent_runs(1000).unwrap() {
        heads.extend(run.input_head);
        heads.extend(run.output_head);
    }
    for rerun in store.all_reruns().unwrap() {
        heads.push(rerun.turn_node);
        heads.extend(rerun.request_head);
        heads.extend(rerun.answer_head);
    }
    let mut nodes = BTreeMap::new();
    for head in heads {
        for node in store.load_thread(head).unwrap().nodes().into_iter() {
            nodes.insert(node.id(), node.message().clone());
        }
    }
    nodes
}

/// Each conversation's thread, as loaded.
fn threads(store: &Store) -> BTreeMap<ConversationId, Vec<(NodeId, Message)>> {
    store
        .list_conversations(1000)
        .unwrap()
        .into_iter()
        .map(|conversation| {
            let nodes = match conversation.head {
                Some(head) => store
                    .load_thread(head)
                    .unwrap()
                    .nodes()
                    .into_iter()
                    .map(|node| (node.id(), node.message().clone()))
                    .collect(),
                None => Vec::new(),
            };
            (conversation.id, nodes)
        })
        .collect()
}

/// Check the store holds exactly what its remaining rows reach.
fn assert_exactly_reachable(db: &TempStore, step: &str) {
    let store = &db.store;
    let report = store.verify().unwrap();
    assert!(report.is_ok(), "{step}: {:?}", report.problems);
    let nodes = reachable(store);
    assert_eq!(db.count("nodes") as usize, nodes.len(), "{step}: nodes");
    let blobs: HashSet<Digest> = nodes
        .values()
        .flat_map(|message| {
            encode_body(message, BLOB_THRESHOLD)
                .blobs
                .into_iter()
                .map(|(digest, _)| digest)
        })
        .collect();
    assert_eq!(db.count("blobs") as usize, blobs.len(), "{step}: blobs");
    let texts: HashSet<String> = nodes
        .values()
        .flat_map(|message| message.parts.iter())
        .filter_map(|part| match part {
            Part::Text { text } => Some(text.clone()),
            _ => None,
        })
        .collect();
    for text in ["u1", "a2", "c reply", "d reply", "HOLD", "e reply", "S"] {
        let cached = store
            .cached_embedding(EMBEDDER, &Digest::of(text.as_bytes()))
            .unwrap()
            .is_some();
        if !texts.contains(text) {
            assert!(!cached, "{step}: the embedding of {text:?} outlived it");
        }
    }
    // The search index finds no removed text.
    for word in ["u3", "a3", "other", "HOLD"] {
        let found = store.search(&SearchQuery::new(word)).unwrap().matches.len();
        let present = nodes.values().any(|message| {
            message.parts.iter().any(|part| {
                matches!(part, Part::Text { text } if text.split_whitespace().any(|w| w == word))
            })
        });
        assert_eq!(found > 0, present, "{step}: search for {word:?}");
    }
}

/// A small deterministic shuffle (no RNG crate needed).
fn shuffled(mut items: Vec<usize>, mut seed: u64) -> Vec<usize> {
    for i in (1..items.len()).rev() {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let j = (seed >> 33) as usize % (i + 1);
        items.swap(i, j);
    }
    items
}

fn deleting_in_any_order_keeps_exactly_what_remains_reachable(backend: Backend) {
    for seed in [1, 2, 3, 4] {
        let db = TempStore::new(backend);
        let store = &db.store;
        let ids = build(store);
        assert_exactly_reachable(&db, "built");
        let order = shuffled((0..ids.len()).collect(), seed);
        for (step, index) in order.into_iter().enumerate() {
            let before = threads(store);
            let id = &ids[index];
            let gone = store
                .forget(&Selection::Conversations(vec![id.clone()]), false)
                .unwrap();
            assert_eq!(gone.conversations, vec![id.clone()]);
            let step = format!("seed {seed}, step {step}: deleted {index}");
            let after = threads(store);
            let mut expected = before;
            expected.remove(id);
            assert_eq!(after, expected, "{step}: remaining conversations changed");
            assert!(matches!(
                store.conversation(id),
                Err(StoreError::ConversationNotFound(_))
            ));
            assert!(store.runs_of_conversation(id).unwrap().is_empty());
            assert!(store.reruns_of_conversation(id).unwrap().is_empty());
            assert_exactly_reachable(&db, &step);
        }
        assert_eq!(db.count("nodes"), 0);
        assert_eq!(db.count("runs"), 0);
        assert_eq!(db.count("blobs"), 0);
    }
}

fn a_dry_run_plans_exactly_what_the_deletion_does_and_changes_nothing(backend: Backend) {
    let db = TempStore::new(backend);
    let store = &db.store;
    let ids = build(store);
    let a = Selection::Conversations(vec![ids[0].clone()]);
    let nodes = db.count("nodes");
    let plan = store.forget(&a, true).unwrap();
    assert!(plan.dry_run);
    assert_eq!(db.count("nodes"), nodes);
    assert!(store.conversation(&ids[0]).is_ok());
    assert_eq!(store.runs_of_conversation(&ids[0]).unwrap().len(), 2);
    let done = store.forget(&a, false).unwrap();
    assert_eq!(
        Forgot::from(&plan),
        Forgot::from(&done),
        "the plan is what was done"
    );
    // The plan's sharers were looked up with `a` still stored, leaving it
    // out: exactly the deletion's (`a`'s head, at the end of the lane its
    // kept messages are in, used to hide `b` from the plan).
    let names = |report: &skein_store::Forgotten| {
        let mut names: Vec<String> = report
            .shared_with
            .iter()
            .map(|c| c.name.clone().unwrap_or_default())
            .collect();
        names.sort();
        names
    };
    assert!(!plan.shared_with.is_empty());
    assert_eq!(names(&plan), names(&done));
    assert_eq!(plan.more_sharers, done.more_sharers);
    // `a`'s S, u1, a1 stay for `b` (and S for `c`); u2 and a2 were reached
    // only by `a`'s runs and its rerun's turn node, which went with it. The
    // rerun's five request and answer messages stay for `e`, forked there.
    assert_eq!(done.messages, 2);
    assert_eq!(done.runs, 3, "two turns and the rerun's sample");
    assert_eq!(done.reruns, 1);
    assert_eq!(done.kept_messages, 3 + 5);
    let sharers: HashSet<&str> = done
        .shared_with
        .iter()
        .map(|c| c.name.as_deref().unwrap())
        .collect();
    assert!(sharers.contains("b"), "{sharers:?}");
    assert!(!sharers.contains("a"));
    assert!(done.to_string().contains("8 message(s) kept: shared with"));
    assert_exactly_reachable(&db, "after a");
}

/// What a report counts, without whether it was a dry run.
#[derive(Debug, PartialEq)]
struct Forgot(Vec<ConversationId>, [u64; 6]);

impl From<&skein_store::Forgotten> for Forgot {
    fn from(report: &skein_store::Forgotten) -> Forgot {
        Forgot(
            report.conversations.clone(),
            [
                report.runs,
                report.reruns,
                report.messages,
                report.blobs,
                report.embeddings,
                report.kept_messages,
            ],
        )
    }
}

fn a_filter_deletes_old_proxy_conversations_and_skips_ones_updated_since(backend: Backend) {
    let db = TempStore::new(backend);
    let store = &db.store;
    let ids = build(store);
    // Mark `c` and `d` as recorded by the proxy.
    for id in &ids[2..4] {
        let mut settings = store.conversation(id).unwrap().settings;
        settings.proxy = true;
        store.set_conversation_settings(id, &settings).unwrap();
    }
    let newest = store
        .list_conversations(1000)
        .unwrap()
        .iter()
        .map(|c| c.updated_ms)
        .max()
        .unwrap();
    // Nothing is older than the oldest.
    let none = store
        .forget(
            &Selection::Matching(Filter::default().updated_before_ms(0)),
            false,
        )
        .unwrap();
    assert!(none.conversations.is_empty());
    let proxy = Selection::Matching(Filter::default().proxy_only().updated_before_ms(newest + 1));
    let done = store.forget(&proxy, false).unwrap();
    let mut deleted = done.conversations.clone();
    deleted.sort();
    let mut expected = ids[2..4].to_vec();
    expected.sort();
    assert_eq!(deleted, expected);
    assert_eq!(store.list_conversations(1000).unwrap().len(), 3);
    assert_exactly_reachable(&db, "after the proxy's");

    // A conversation that was updated after a filter saw it is kept.
    let conversation = store.conversation(&ids[0]).unwrap();
    append_turn(store, &ids[0], "a later turn");
    let swept = store
        .forget_as_seen(&[(ids[0].clone(), conversation.updated_ms)], false)
        .unwrap();
    assert_eq!(swept.skipped, vec![ids[0].clone()]);
    assert!(swept.conversations.is_empty());
    assert!(store.conversation(&ids[0]).is_ok());
    assert_exactly_reachable(&db, "after the skip");
}

/// Commit `thread` as a new conversation whose run the recording proxy's
/// `client` made (none: no client).
fn start_for(store: &Store, thread: &Thread, client: Option<&str>) -> ConversationId {
    let mut run = RunRecord::new("m", "scripted");
    run.input_head = thread.parent().head_id();
    run.output_head = thread.head_id();
    run.client = client.map(str::to_string);
    let turn = TurnCommit {
        target: Target::New(Box::default()),
        thread: Some(thread),
        runs: std::slice::from_ref(&run),
    };
    store.commit_turn(&turn).unwrap().conversation.unwrap()
}

/// Each run keeps the client that made it (read back, exported and
/// imported), and a filter by client deletes exactly the conversations
/// holding one of its runs, among those the other conditions select.
fn a_client_filter_deletes_the_conversations_holding_that_clients_runs(backend: Backend) {
    let db = TempStore::new(backend);
    let store = &db.store;
    let exchange = |text: &str| {
        Thread::new()
            .push(Message::user(text))
            .push(Message::assistant(format!("re: {text}")))
    };
    let alice = start_for(store, &exchange("from alice"), Some("alice"));
    let bob = start_for(store, &exchange("from bob"), Some("bob"));
    let nobody = start_for(store, &exchange("from nobody"), None);
    // Bob's conversation, continued by alice: it holds runs of both.
    let head = store.conversation(&bob).unwrap().head.unwrap();
    let shared = store
        .load_thread(head)
        .unwrap()
        .push(Message::user("alice joins"))
        .push(Message::assistant("welcome"));
    let mut run = RunRecord::new("m", "scripted");
    run.input_head = shared.parent().head_id();
    run.output_head = shared.head_id();
    run.client = Some("alice".into());
    store
        .commit_turn(&TurnCommit::continuing(
            &bob,
            Some(head),
            &shared,
            std::slice::from_ref(&run),
        ))
        .unwrap();
    // A conversation's runs' clients, sorted.
    let clients = |store: &Store, id: &ConversationId| -> Vec<Option<String>> {
        let mut clients: Vec<Option<String>> = store
            .runs_of_conversation(id)
            .unwrap()
            .into_iter()
            .map(|run| run.client)
            .collect();
        clients.sort();
        clients
    };
    assert_eq!(clients(store, &alice), [Some("alice".to_string())]);
    assert_eq!(
        clients(store, &bob),
        [Some("alice".to_string()), Some("bob".to_string())]
    );
    assert_eq!(clients(store, &nobody), [None]);

    let mut export = Vec::new();
    store.export(&mut export).unwrap();
    let imported = TempStore::new(backend);
    imported.store.import(&mut export.as_slice()).unwrap();
    assert_eq!(
        clients(&imported.store, &bob),
        clients(store, &bob),
        "an export carries each run's client"
    );

    let of = |client: &str| Selection::Matching(Filter::default().client(client));
    let nobody_named = store.forget(&of("carol"), false).unwrap();
    assert!(nobody_named.conversations.is_empty());
    let planned = store.forget(&of("alice"), true).unwrap();
    let mut deleted = planned.conversations.clone();
    deleted.sort();
    let mut expected = vec![alice.clone(), bob.clone()];
    expected.sort();
    assert_eq!(deleted, expected, "alice's own and the one she joined");
    // Another condition narrows it: none of these is the proxy's.
    let proxy_only = Filter::default().client("alice").proxy_only();
    assert!(
        store
            .forget(&Selection::Matching(proxy_only), false)
            .unwrap()
            .conversations
            .is_empty()
    );
    let done = store.forget(&of("alice"), false).unwrap();
    assert_eq!(done.conversations.len(), 2);
    let left: Vec<ConversationId> = store
        .list_conversations(10)
        .unwrap()
        .into_iter()
        .map(|conversation| conversation.id)
        .collect();
    assert_eq!(left, [nobody]);
    assert!(
        store
            .forget(&of("bob"), false)
            .unwrap()
            .conversations
            .is_empty()
    );
    assert_exactly_reachable(&db, "after alice's");
}

fn a_turn_built_on_deleted_nodes_writes_them_again(backend: Backend) {
    let db = TempStore::new(backend);
    let store = &db.store;
    let ids = build(store);
    let d = store.conversation(&ids[3]).unwrap();
    // A turn loaded `d` (its nodes are marked stored here)...
    let loaded = store.load_thread(d.head.unwrap()).unwrap();
    // ... then `d` was deleted while the model answered ...
    store
        .forget(&Selection::Conversations(vec![d.id.clone()]), false)
        .unwrap();
    assert!(!store.contains(d.head.unwrap()).unwrap());
    // ... and the turn lands in a new conversation: the nodes it builds on
    // are written again, so nothing dangles.
    let thread = loaded
        .push(Message::user("after deletion"))
        .push(Message::assistant("still here"));
    let id = start(store, &thread, "d again");
    let head = store.conversation(&id).unwrap().head.unwrap();
    assert_eq!(
        store
            .load_thread(head)
            .unwrap()
            .nodes()
            .into_iter()
            .map(|n| n.id())
            .collect::<Vec<_>>(),
        thread
            .nodes()
            .into_iter()
            .map(|n| n.id())
            .collect::<Vec<_>>()
    );
    assert_exactly_reachable(&db, "after the late turn");
    // Continuing the deleted conversation itself fails with a typed error
    // and writes nothing.
    let nodes = db.count("nodes");
    let late = thread.push(Message::user("to the deleted one"));
    let run = RunRecord::new("m", "scripted");
    let refused = store.commit_turn(&TurnCommit::continuing(
        &d.id,
        d.head,
        &late,
        std::slice::from_ref(&run),
    ));
    assert!(
        matches!(refused, Err(StoreError::ConversationNotFound(_))),
        "{refused:?}"
    );
    assert_eq!(db.count("nodes"), nodes);
}

fn deleting_a_family_takes_its_forks_but_not_sharers(backend: Backend) {
    let db = TempStore::new(backend);
    let store = &db.store;
    let ids = build(store);
    let done = store
        .forget(&Selection::Family(ids[1].clone()), false)
        .unwrap();
    let mut deleted = done.conversations.clone();
    deleted.sort();
    // `b` was forked from `a`, and `e` from `a`'s rerun; `c` only shares
    // the system prompt, and `d` nothing.
    let mut expected = vec![ids[0].clone(), ids[1].clone(), ids[4].clone()];
    expected.sort();
    assert_eq!(deleted, expected);
    assert!(done.shared_with.iter().any(|c| c.id == ids[2]));
    assert_exactly_reachable(&db, "after the family");
    assert!(matches!(
        store.forget(&Selection::Family(ids[1].clone()), false),
        Err(StoreError::ConversationNotFound(_))
    ));
}

/// Four writers for three seconds: each grows a conversation of its own
/// (never deleted) and starts new conversations from whatever conversation
/// it finds, while a deleter deletes the ones found. Every turn a writer
/// saw commit is still stored unless the deleter deleted its conversation;
/// afterwards `verify` is clean and exactly the reachable nodes remain.
fn writers_and_a_deletion_loop_lose_no_turn_and_leave_nothing_dangling(backend: Backend) {
    let db = TempStore::new(backend);
    let store = db.store.clone();
    build(&store);
    let stop = Arc::new(AtomicBool::new(false));
    let started: Arc<Mutex<Vec<ConversationId>>> = Arc::default();
    let deleted: Arc<Mutex<HashSet<ConversationId>>> = Arc::default();
    let writers: Vec<_> = (0..4)
        .map(|writer| {
            let (store, stop, started) = (store.clone(), stop.clone(), started.clone());
            std::thread::spawn(move || {
                let own = start(
                    &store,
                    &Thread::from_messages([Message::user(format!("writer {writer}"))]),
                    &format!("own {writer}"),
                );
                let mut turns = 0;
                while !stop.load(Ordering::Relaxed) {
                    append_turn(&store, &own, &format!("{writer}.{turns}"));
                    turns += 1;
                    if let Some(thread) = some_thread(&store, turns) {
                        let thread = thread
                            .push(Message::user(format!("from {writer}.{turns}")))
                            .push(Message::assistant("ok"));
                        let id = start(&store, &thread, &format!("w{writer}.{turns}"));
                        started.lock().unwrap().push(id);
                    }
                }
                (own, turns)
            })
        })
        .collect();
    let deleter = {
        let (store, stop, deleted) = (store.clone(), stop.clone(), deleted.clone());
        std::thread::spawn(move || {
            let mut round = 0_usize;
            while !stop.load(Ordering::Relaxed) {
                round += 1;
                let victims: Vec<ConversationId> = store
                    .list_conversations(1000)
                    .unwrap()
                    .into_iter()
                    .filter(|c| !c.name.as_deref().unwrap_or("").starts_with("own"))
                    .enumerate()
                    .filter(|(i, _)| (i + round).is_multiple_of(3))
                    .map(|(_, c)| c.id)
                    .collect();
                let done = store
                    .forget(&Selection::Conversations(victims), false)
                    .unwrap();
                deleted.lock().unwrap().extend(done.conversations);
            }
        })
    };
    std::thread::sleep(Duration::from_secs(3));
    stop.store(true, Ordering::Relaxed);
    let deadline = Instant::now() + Duration::from_secs(60);
    for writer in writers {
        let (own, turns) = writer.join().unwrap();
        assert!(turns > 0);
        let own = store.conversation(&own).unwrap();
        // One first message, then two per turn: no turn lost.
        assert_eq!(own.len, 1 + 2 * turns as u64);
    }
    deleter.join().unwrap();
    assert!(Instant::now() < deadline);
    let deleted = deleted.lock().unwrap();
    for id in started.lock().unwrap().iter() {
        match store.conversation(id) {
            Ok(conversation) => {
                store.load_thread(conversation.head.unwrap()).unwrap();
            }
            Err(StoreError::ConversationNotFound(_)) => {
                assert!(deleted.contains(id), "conversation {id} was lost");
            }
            Err(other) => panic!("{other}"),
        }
    }
    assert_exactly_reachable(&db, "after the race");
}

/// The thread of some stored conversation (the `pick`th, wrapping), or
/// none when it was deleted while being read.
fn some_thread(store: &Store, pick: usize) -> Option<Thread> {
    let conversations = store.list_conversations(1000).unwrap();
    let conversation = &conversations[pick % conversations.len()];
    match store.load_thread(conversation.head?) {
        Ok(thread) => Some(thread),
        Err(StoreError::NodeNotFound(_)) => None,
        Err(other) => panic!("{other}"),
    }
}

/// Nodes stored with nothing pointing at them (appended on their own, as
/// another tool's writes may leave them) are collected; what they share
/// with a conversation stays.
fn collecting_garbage_removes_only_what_nothing_reaches(backend: Backend) {
    let db = TempStore::new(backend);
    let store = &db.store;
    build(store);
    let nodes = db.count("nodes");
    assert_eq!(store.collect_garbage(false).unwrap().messages, 0);
    let orphan = Thread::from_messages([
        Message::system("S"),
        Message::user("u1"),
        Message::assistant("a1"),
        Message::user("an orphan question"),
        Message::assistant("an orphan answer"),
    ]);
    store.append(&orphan).unwrap();
    store
        .append(&Thread::from_messages([Message::user("alone")]))
        .unwrap();
    assert_eq!(db.count("nodes"), nodes + 3);
    let plan = store.collect_garbage(true).unwrap();
    assert_eq!((plan.messages, plan.conversations.len()), (3, 0));
    assert_eq!(db.count("nodes"), nodes + 3);
    let done = store.collect_garbage(false).unwrap();
    assert_eq!(done.messages, 3);
    assert_eq!(db.count("nodes"), nodes);
    assert_exactly_reachable(&db, "after collecting");
}

/// Deleting a conversation that a fork names as its origin records the
/// deletion, so `verify` counts the fork's origin as deleted on purpose;
/// the record goes once no fork names it. An origin conversation that is
/// missing without a record (another tool's write, a partial copy) is a
/// finding of its own kind.
fn a_deleted_origin_is_recorded_and_a_missing_one_is_a_finding(backend: Backend) {
    let db = TempStore::new(backend);
    let store = &db.store;
    let ids = build(store);
    let (a, b) = (&ids[0], &ids[1]);
    assert_eq!(
        store
            .conversation(b)
            .unwrap()
            .origin
            .and_then(|origin| origin.conversation)
            .as_ref(),
        Some(a)
    );
    let plan = store
        .forget(&Selection::Conversations(vec![a.clone()]), true)
        .unwrap();
    assert_eq!(plan.conversations, vec![a.clone()]);
    assert_eq!(
        db.count("deleted_conversations"),
        0,
        "a dry run records nothing"
    );

    store
        .forget(&Selection::Conversations(vec![a.clone()]), false)
        .unwrap();
    assert_eq!(db.count("deleted_conversations"), 1);
    let report = store.verify().unwrap();
    assert!(report.is_ok(), "{:?}", report.problems);
    assert_eq!(report.origins_deleted, 2, "b and e");
    // An export carries the record, so the forks import as forks of a
    // deleted conversation, not as dangling ones.
    let mut export = Vec::new();
    store.export(&mut export).unwrap();
    let copy = TempStore::new(backend);
    copy.store.import(&mut export.as_slice()).unwrap();
    let imported = copy.store.verify().unwrap();
    assert!(imported.is_ok(), "{:?}", imported.problems);
    assert_eq!(imported.origins_deleted, 2);

    // `e` (forked from a's rerun) names it too.
    store
        .forget(&Selection::Conversations(vec![b.clone()]), false)
        .unwrap();
    assert_eq!(db.count("deleted_conversations"), 1);
    store
        .forget(&Selection::Conversations(vec![ids[4].clone()]), false)
        .unwrap();
    assert_eq!(
        db.count("deleted_conversations"),
        0,
        "no fork names it any more"
    );
    assert_eq!(store.verify().unwrap().origins_deleted, 0);

    // `c` is nobody's origin: deleting it records nothing.
    let c = &ids[2];
    store
        .forget(&Selection::Conversations(vec![c.clone()]), false)
        .unwrap();
    assert_eq!(db.count("deleted_conversations"), 0);

    let d = &ids[3];
    assert_eq!(
        store
            .debug_execute(&format!(
                "UPDATE conversations SET forked_from_conversation = 'nowhere' WHERE id = '{d}'"
            ))
            .unwrap(),
        1
    );
    let report = store.verify().unwrap();
    assert_eq!(report.origins_deleted, 0);
    assert_eq!(
        serde_json::to_value(&report.problems).unwrap(),
        serde_json::json!([{
            "problem": "missing_origin_conversation",
            "conversation": d.as_str(),
            "origin": "nowhere",
        }])
    );
}

/// Store `chains` threads of `depth` messages that nothing references
/// (as another tool's writes might leave), the first two messages of each
/// the test graph's own `S` and `u1` (so they share kept messages).
fn orphans(store: &Store, chains: usize, depth: usize) {
    for chain in 0..chains {
        let mut thread = Thread::from_messages([Message::system("S"), Message::user("u1")]);
        for at in 0..depth {
            thread = thread.push(Message::assistant(format!("orphan {chain}.{at}")));
        }
        store.append(&thread).unwrap();
    }
}

/// A collection in batches deletes exactly what its dry run planned (the
/// same figures, kept messages and sharers), children before parents, one
/// bounded transaction per batch, telling its progress after each.
fn collecting_in_batches_reports_progress_and_does_what_the_dry_run_planned(backend: Backend) {
    let db = TempStore::new(backend);
    let store = &db.store;
    build(store);
    let nodes = db.count("nodes");
    orphans(store, 6, 5);
    assert_eq!(db.count("nodes"), nodes + 30);
    let mut told = Vec::new();
    let plan = store
        .collect_garbage_with(true, 7, &mut |progress| told.push(progress))
        .unwrap();
    assert!(told.is_empty(), "a dry run deletes nothing batch by batch");
    assert_eq!(plan.messages, 30);
    assert_eq!(db.count("nodes"), nodes + 30);
    let done = store
        .collect_garbage_with(false, 7, &mut |progress| told.push(progress))
        .unwrap();
    assert_eq!(Forgot::from(&plan), Forgot::from(&done));
    assert_eq!(plan.kept_messages, done.kept_messages);
    assert_eq!(plan.kept_messages as i64, nodes);
    assert_eq!(plan.shared_with, done.shared_with);
    let collected: Vec<u64> = told.iter().map(|progress| progress.collected).collect();
    assert_eq!(collected, [7, 14, 21, 28, 30]);
    assert!(told.iter().all(|progress| progress.planned == 30));
    assert_exactly_reachable(&db, "after collecting in batches");
    let again = store.collect_garbage_with(false, 7, &mut |_| {}).unwrap();
    assert_eq!(again.messages, 0);
}

/// Child entry point: collect garbage in batches of 5, saying `BATCH` after
/// each and pausing a little, until killed (or done).
#[test]
#[ignore = "run as a child process by the killed-collection test"]
fn child_collect_in_batches() {
    let Ok(location) = std::env::var("SKEIN_TEST_DB") else {
        return;
    };
    let store = Store::open(location).unwrap();
    println!("READY");
    store
        .collect_garbage_with(false, 5, &mut |progress| {
            println!("BATCH {} {}", progress.collected, progress.planned);
            std::thread::sleep(Duration::from_millis(30));
        })
        .unwrap();
    println!("DONE");
}

/// A collection killed after some batches (possibly inside the next) leaves
/// a database that verifies, every message something reaches still
/// stored, and only messages nothing reaches left over; the next
/// collection deletes exactly those.
fn a_killed_collection_leaves_a_database_that_verifies_and_the_next_completes(backend: Backend) {
    let db = TempStore::new(backend);
    build(&db.store);
    let reachable_before = reachable(&db.store);
    orphans(&db.store, 20, 10);
    let before = db.count("nodes");
    assert_eq!(before as usize, reachable_before.len() + 200);
    let mut child = spawn_child(
        "forget::child_collect_in_batches",
        &[("SKEIN_TEST_DB", db.location())],
    );
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut batches = 0;
    let mut line = String::new();
    while batches < 3 {
        line.clear();
        assert!(stdout.read_line(&mut line).unwrap() > 0, "the child died");
        if line.contains("BATCH") {
            batches += 1;
        }
        assert!(
            !line.contains("DONE"),
            "the collection ended before it was killed"
        );
    }
    child.kill().unwrap();
    assert!(!child.wait().unwrap().success());

    let store = db.reopen();
    let report = store.verify().unwrap();
    assert!(report.is_ok(), "{:?}", report.problems);
    let left = store.debug_query_i64("SELECT count(*) FROM nodes").unwrap();
    assert!(
        left <= before - 15,
        "three batches of 5 were deleted: {left} of {before} left"
    );
    assert!(
        left > reachable_before.len() as i64,
        "the kill came before the end"
    );
    assert_eq!(reachable(&store), reachable_before);
    let rest = store.collect_garbage(false).unwrap();
    assert_eq!(rest.messages as i64, left - reachable_before.len() as i64);
    assert_exactly_reachable(&db, "after the next collection");
}

/// Work run exclusively under a name does not run while other work holds
/// that name (on PostgreSQL, across connections and processes: an
/// advisory lock); on SQLite it always runs.
fn exclusive_work_runs_once_at_a_time(backend: Backend) {
    let db = TempStore::new(backend);
    let other = db.reopen();
    let outer = db
        .store
        .exclusively("test job", || {
            let inner = other.exclusively("test job", || Ok(1)).unwrap();
            let unrelated = other.exclusively("another job", || Ok(2)).unwrap();
            Ok((inner, unrelated))
        })
        .unwrap();
    match backend {
        Backend::Postgres => assert_eq!(outer, Some((None, Some(2)))),
        Backend::Sqlite => assert_eq!(outer, Some((Some(1), Some(2)))),
    }
    // Released when the work ended, and when it failed.
    assert_eq!(other.exclusively("test job", || Ok(3)).unwrap(), Some(3));
    let failed: skein_store::Result<Option<()>> = db
        .store
        .exclusively("test job", || Err(StoreError::Task("failed".into())));
    assert!(failed.is_err());
    assert_eq!(other.exclusively("test job", || Ok(4)).unwrap(), Some(4));
}

/// Child entry point: build the test graph and delete it again, over and
/// over, until killed (and collect what nothing reaches each tenth round).
#[test]
#[ignore = "run as a child process by the kill-during-deletion test"]
fn child_build_and_delete_until_killed() {
    let Ok(location) = std::env::var("SKEIN_TEST_DB") else {
        return;
    };
    let store = Store::open(location).unwrap();
    println!("READY");
    // What a killed predecessor left (its names would be taken).
    store
        .forget(&Selection::Matching(Filter::default()), false)
        .unwrap();
    for round in 0.. {
        let ids = build(&store);
        for id in ids.iter().rev() {
            store
                .forget(&Selection::Conversations(vec![id.clone()]), false)
                .unwrap();
        }
        if round % 10 == 0 {
            store.collect_garbage(false).unwrap();
        }
    }
}

/// Ten SIGKILLs at random moments of a child building and deleting: after
/// each, the database verifies and holds exactly what its rows reach.
fn killing_a_deletion_at_any_moment_leaves_a_database_that_verifies(backend: Backend) {
    let db = TempStore::new(backend);
    let mut seed = 0x5eed_u64;
    for round in 0..10 {
        let mut child = spawn_child(
            "forget::child_build_and_delete_until_killed",
            &[("SKEIN_TEST_DB", db.location())],
        );
        let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        while !line.trim_end().ends_with("READY") {
            line.clear();
            assert!(stdout.read_line(&mut line).unwrap() > 0, "the child died");
        }
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        std::thread::sleep(Duration::from_millis(20 + (seed >> 33) % 200));
        assert!(
            child.try_wait().unwrap().is_none(),
            "round {round}: the child stopped before it was killed"
        );
        child.kill().unwrap();
        assert!(!child.wait().unwrap().success());
        let store = db.reopen();
        let report = store.verify().unwrap();
        assert!(report.is_ok(), "round {round}: {:?}", report.problems);
        let nodes = store.debug_query_i64("SELECT count(*) FROM nodes").unwrap();
        assert_eq!(nodes as usize, reachable(&store).len(), "round {round}");
    }
}

/// Deleting a conversation, then the vacuum step (`skein gc`'s last), leaves
/// no byte of its words in the database file: not in its nodes, not in the
/// search index's segments, not in free pages.
fn a_deleted_conversations_words_leave_the_file_after_the_vacuum(backend: Backend) {
    let db = TempStore::new(backend);
    let store = &db.store;
    let kept = Thread::from_messages([Message::user("an ordinary question")]);
    start(store, &kept, "kept");
    let secret = Thread::from_messages([
        Message::user("the quokkasecret password"),
        Message::assistant("noted, quokkasecret"),
    ]);
    let doomed = start(store, &secret, "doomed");
    // Indexed in a segment of its own, then more segments after it.
    for n in 0..3 {
        let other = Thread::from_messages([Message::user(format!("filler {n}"))]);
        start(store, &other, &format!("filler {n}"));
    }
    assert!(
        !store
            .search(&SearchQuery::new("quokkasecret"))
            .unwrap()
            .matches
            .is_empty()
    );
    store
        .forget(&Selection::Conversations(vec![doomed]), false)
        .unwrap();
    store.vacuum().unwrap();
    assert!(
        store
            .search(&SearchQuery::new("quokkasecret"))
            .unwrap()
            .matches
            .is_empty()
    );
    if backend == Backend::Sqlite {
        for suffix in ["", "-wal"] {
            let file = format!("{}{suffix}", db.location());
            let bytes = std::fs::read(&file).unwrap_or_default();
            assert!(
                !bytes.windows(12).any(|window| window == b"quokkasecret"),
                "{file} still holds the deleted words"
            );
        }
    }
    assert!(store.verify().unwrap().is_ok());
}
