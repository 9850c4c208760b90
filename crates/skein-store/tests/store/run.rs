//! Where `Store::run_blocking` does its work: in place on a multi-thread runtime
//! (without stalling the runtime's other tasks), on the blocking pool from a
//! current-thread runtime, and in place inside `blocking_caller`; where
//! SQLite's own operations run on a current-thread runtime (in place, unless
//! a write would wait for another writer); and the async API
//! (`Store::nonblocking`: loading a thread, committing a turn), which on
//! PostgreSQL awaits its queries without blocking any thread.

use crate::common::{Backend, TempStore, history};
use skein_core::Digest;
use skein_core::Message;
use skein_store::{
    NewConversation, RerunCommit, RerunId, RunId, RunRecord, StoreError, TurnCommit,
    blocking_caller,
};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread::ThreadId;
use std::time::{Duration, Instant};

async fn thread_of_run(db: &TempStore) -> ThreadId {
    db.store
        .run_blocking(|store| {
            store.verify()?;
            Ok(std::thread::current().id())
        })
        .await
        .unwrap()
}

#[test]
fn on_a_current_thread_runtime_the_work_hops_to_the_blocking_pool() {
    let db = TempStore::new(Backend::Sqlite);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let here = std::thread::current().id();
    assert_ne!(runtime.block_on(thread_of_run(&db)), here);
}

#[test]
fn inside_a_blocking_caller_sqlite_work_runs_in_place() {
    let db = TempStore::new(Backend::Sqlite);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let here = std::thread::current().id();
    assert_eq!(
        blocking_caller(|| runtime.block_on(thread_of_run(&db))),
        here
    );
    // The mark ends with the call.
    assert_ne!(runtime.block_on(thread_of_run(&db)), here);
}

/// A current-thread runtime counting the threads it starts: its blocking
/// pool's, since it runs its tasks on the thread that drives it.
fn counting_current_thread_runtime() -> (tokio::runtime::Runtime, Arc<AtomicUsize>) {
    let started = Arc::new(AtomicUsize::new(0));
    let count = started.clone();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .on_thread_start(move || {
            count.fetch_add(1, Ordering::SeqCst);
        })
        .enable_all()
        .build()
        .unwrap();
    (runtime, started)
}

/// On a current-thread runtime, SQLite's own operations (a write, a thread
/// load, a listing) run in place when nothing makes them wait: no thread
/// hop, so no blocking-pool thread is ever started.
#[test]
fn on_a_current_thread_runtime_the_store_s_own_operations_run_in_place() {
    let db = TempStore::new(Backend::Sqlite);
    let (runtime, pool_threads) = counting_current_thread_runtime();
    let head = history("in place", 6);
    runtime.block_on(async {
        let store = db.store.nonblocking();
        let conversation = store
            .create_conversation(NewConversation::default())
            .await
            .unwrap();
        store.append(&head).await.unwrap();
        let loaded = store.load_thread(head.head_id().unwrap()).await.unwrap();
        assert_eq!(loaded.len(), head.len());
        let listed = store.list_conversations(10).await.unwrap();
        assert_eq!(listed[0].id, conversation.id);
    });
    assert_eq!(
        pool_threads.load(Ordering::SeqCst),
        0,
        "an operation hopped"
    );
}

/// A write on a current-thread runtime that finds the database's writer
/// taken by another process gives way to the blocking pool instead of
/// stalling the runtime: other tasks go on while it waits, and it is
/// written once the lock is released, exactly once.
#[test]
fn on_a_current_thread_runtime_a_write_that_would_wait_waits_on_the_pool() {
    let db = TempStore::new(Backend::Sqlite);
    let other = rusqlite::Connection::open(db.location()).unwrap();
    other.execute_batch("BEGIN IMMEDIATE").unwrap();
    let (runtime, pool_threads) = counting_current_thread_runtime();
    let ticks = Arc::new(AtomicUsize::new(0));
    let (created, ticked_while_locked) = runtime.block_on(async {
        let ticking = ticks.clone();
        let ticker = tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(2)).await;
                ticking.fetch_add(1, Ordering::SeqCst);
            }
        });
        let store = db.store.nonblocking();
        let write = store.create_conversation(NewConversation::default());
        let releaser = async {
            tokio::time::sleep(Duration::from_millis(300)).await;
            let ticked = ticks.load(Ordering::SeqCst);
            other.execute_batch("COMMIT").unwrap();
            ticked
        };
        let (created, ticked) = tokio::join!(write, releaser);
        ticker.abort();
        (created.unwrap(), ticked)
    });
    assert!(
        ticked_while_locked >= 10,
        "the runtime stalled while the write waited ({ticked_while_locked} ticks)"
    );
    assert_eq!(
        pool_threads.load(Ordering::SeqCst),
        1,
        "the wait ran on the pool"
    );
    let all = db.store.list_conversations(10).unwrap();
    assert_eq!(all.len(), 1, "the write was done twice");
    assert_eq!(all[0].id, created.id);
}

/// SQLite's point reads (a node, a conversation, a run by id) run in place
/// on any runtime: they answer while the blocking pool is busy with work
/// that waits for them, which a hop to the pool would queue behind.
#[test]
fn point_reads_answer_while_the_blocking_pool_is_busy() {
    let db = TempStore::new(Backend::Sqlite);
    let conversation = db
        .store
        .create_conversation(NewConversation::default())
        .unwrap();
    let head = history("point", 2);
    db.store.append(&head).unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .max_blocking_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let (release, released) = std::sync::mpsc::channel::<()>();
    runtime.block_on(async {
        let busy = tokio::task::spawn_blocking(move || {
            released.recv_timeout(Duration::from_secs(20)).is_ok()
        });
        let store = db.store.nonblocking();
        let reads = tokio::time::timeout(Duration::from_secs(10), async {
            (
                store.conversation(&conversation.id).await.unwrap(),
                store.contains(head.head_id().unwrap()).await.unwrap(),
                store
                    .children(head.parent().head_id().unwrap())
                    .await
                    .unwrap(),
            )
        })
        .await;
        release.send(()).unwrap();
        assert!(busy.await.unwrap(), "the blocking work was released");
        let (found, contained, children) =
            reads.expect("a point read waited for the busy blocking pool");
        assert_eq!(found.id, conversation.id);
        assert!(contained);
        assert_eq!(children, vec![head.head_id().unwrap()]);
    });
}

#[test]
fn on_a_multi_thread_runtime_the_work_runs_in_place_and_other_tasks_go_on() {
    let db = TempStore::new(Backend::Sqlite);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let ticked = Arc::new(AtomicBool::new(false));
    let store = db.store.clone();
    let (seen, tick) = (ticked.clone(), ticked.clone());
    runtime.block_on(async move {
        let ticker = tokio::spawn(async move {
            tokio::task::yield_now().await;
            tick.store(true, Ordering::SeqCst);
        });
        // A task on a worker runs store work that waits until the ticker,
        // another task, has run: it would never finish if it stalled the
        // worker that the ticker needs.
        let worker = tokio::spawn(async move {
            let here = std::thread::current().id();
            let ran_on = store
                .run_blocking(move |_| {
                    let started = Instant::now();
                    while !seen.load(Ordering::SeqCst) {
                        assert!(
                            started.elapsed() < Duration::from_secs(10),
                            "the runtime stalled"
                        );
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    Ok(std::thread::current().id())
                })
                .await
                .unwrap();
            assert_eq!(ran_on, here, "the work hopped to another thread");
        });
        ticker.await.unwrap();
        worker.await.unwrap();
    });
    assert!(ticked.load(Ordering::SeqCst));
}

/// Turns committed and threads loaded through the async API, from a
/// current-thread runtime with neither I/O nor timers of its own and from
/// tasks spawned on a multi-thread runtime, are the turns the blocking API
/// sees.
fn the_async_api_commits_and_loads_turns_from_any_runtime(backend: Backend) {
    let db = TempStore::new(backend);
    let (bare, multi) = runtimes();
    let conversation = db
        .store
        .create_conversation(NewConversation::default())
        .unwrap();
    let mut thread = history("async", 3);
    let mut head = None;
    for turn in 0..6 {
        let next = thread
            .push(Message::user(format!("q{turn}")))
            .push(Message::assistant(format!("a{turn}")));
        let store = db.store.clone();
        let (id, committed) = (conversation.id.clone(), next.clone());
        let work = async move {
            let run = RunRecord::new("echo", "echo");
            let turn = TurnCommit::continuing(&id, head, &committed, std::slice::from_ref(&run));
            store.nonblocking().commit_turn(&turn).await.unwrap();
            store
                .nonblocking()
                .load_thread(committed.head_id().unwrap())
                .await
                .unwrap()
        };
        let loaded = if turn % 2 == 0 {
            bare.block_on(work)
        } else {
            multi.block_on(async { tokio::spawn(work).await.unwrap() })
        };
        assert_eq!(loaded, next);
        assert!(next.head().unwrap().is_persisted_in(db.store.key()));
        thread = next;
        head = thread.head_id();
    }
    let stored = db.store.conversation(&conversation.id).unwrap();
    assert_eq!(stored.head, thread.head_id());
    assert_eq!(db.store.load_thread(stored.head.unwrap()).unwrap(), thread);
    assert!(db.store.verify().unwrap().is_ok());
}

/// Every operation of the async API answers as the blocking API does, its
/// failures included, from a current-thread runtime with neither I/O nor
/// timers of its own and from a task spawned on a multi-thread runtime:
/// conversations (and a missing one), run records, the runs behind a node,
/// a conversation's runs and reruns (and those of a missing one), nodes (one
/// with its message in a blob, and a missing one), reruns written and read
/// (and a missing one), prefixes resolved (by name, by id prefix,
/// ambiguous, matching nothing) and the embedding cache.
fn the_async_api_answers_as_the_blocking_api_does(backend: Backend) {
    let db = TempStore::new(backend);
    let (bare, multi) = runtimes();
    let thread = history("async api", 2);
    db.store.append(&thread).unwrap();
    let head = thread.head_id().unwrap();
    // Its message is kept apart from its row, as a blob.
    let large = thread.push(Message::user("large ".repeat(20_000)));
    db.store.append(&large).unwrap();
    let large = large.head_id().unwrap();
    let named = |name: &str| {
        db.store
            .create_conversation(NewConversation {
                name: Some(name.into()),
                head: Some(head),
                ..NewConversation::default()
            })
            .unwrap()
    };
    let conversation = named("alpha");
    named("twin");
    // Two of one name, as an older skein could store them.
    let second = named("second twin");
    db.store
        .debug_execute(&format!(
            "UPDATE conversations SET name = 'twin' WHERE id = '{}'",
            second.id.as_str()
        ))
        .unwrap();
    let mut run = RunRecord::new("echo", "echo");
    run.output_head = Some(head);
    run.conversation = Some(conversation.id.clone());
    db.store.record_run(&run).unwrap();
    for (round, spawned) in [false, true, false, true].into_iter().enumerate() {
        let store = db.store.clone();
        let (conversation, run, thread) = (conversation.clone(), run.clone(), thread.clone());
        let work = async move {
            let api = store.nonblocking();
            assert_eq!(
                api.conversation(&conversation.id).await.unwrap(),
                conversation
            );
            let missing = skein_store::ConversationId::random();
            assert!(matches!(
                api.conversation(&missing).await,
                Err(StoreError::ConversationNotFound(_))
            ));
            assert_eq!(api.run_record(&run.id).await.unwrap(), run);
            assert!(matches!(
                api.run_record(&RunId::random()).await,
                Err(StoreError::RunNotFound(_))
            ));
            assert_eq!(api.runs_producing(head).await.unwrap(), vec![run.clone()]);
            let at_head = api.conversations_at(head).await.unwrap();
            assert_eq!(at_head.len(), 3);
            assert_eq!(at_head, store.conversations_at(head).unwrap());
            assert_eq!(api.conversations_at(large).await.unwrap(), vec![]);
            let listed = api.list_conversations(2).await.unwrap();
            assert_eq!(listed, store.list_conversations(2).unwrap());
            let rest = api
                .list_conversations_after(&listed[1].position(), 10)
                .await
                .unwrap();
            assert_eq!(
                rest,
                store
                    .list_conversations_after(&listed[1].position(), 10)
                    .unwrap()
            );
            assert_eq!(listed.len() + rest.len(), 3);
            assert!(api.contains(large).await.unwrap());
            assert_eq!(
                api.children(head).await.unwrap(),
                store.children(head).unwrap()
            );
            assert!(api.children(head).await.unwrap().contains(&large));
            assert_eq!(api.children(large).await.unwrap(), vec![]);
            assert_eq!(
                api.runs_producing(thread.parent().head_id().unwrap())
                    .await
                    .unwrap(),
                vec![]
            );
            // A rerun of its own each round: its answer is a new thread.
            let answer = thread.push(Message::assistant(format!("answer {round}")));
            let mut sample = RunRecord::new("echo", "echo");
            sample.output_head = answer.head_id();
            let rerun = crate::reruns::record(&conversation.id, &thread, &answer, &sample);
            api.commit_rerun(&RerunCommit {
                record: &rerun,
                threads: std::slice::from_ref(&answer),
                runs: std::slice::from_ref(&sample),
            })
            .await
            .unwrap();
            assert_eq!(api.rerun(&rerun.id).await.unwrap(), rerun);
            assert_eq!(store.rerun(&rerun.id).unwrap(), rerun);
            let reruns = api.reruns_of_conversation(&conversation.id).await.unwrap();
            assert_eq!(reruns.len(), round + 1);
            assert!(reruns.contains(&rerun));
            assert_eq!(
                reruns,
                store.reruns_of_conversation(&conversation.id).unwrap()
            );
            let runs = api.runs_of_conversation(&conversation.id).await.unwrap();
            assert!(runs.contains(&run), "{runs:?}");
            assert_eq!(runs, store.runs_of_conversation(&conversation.id).unwrap());
            assert_eq!(api.runs_of_conversation(&missing).await.unwrap(), vec![]);
            assert_eq!(api.reruns_of_conversation(&missing).await.unwrap(), vec![]);
            for id in [head, large] {
                assert_eq!(api.node(id).await.unwrap(), store.node(id).unwrap());
            }
            assert_eq!(api.node(large).await.unwrap().parent, Some(head));
            assert_eq!(
                api.node(large).await.unwrap().message,
                Message::user("large ".repeat(20_000))
            );
            let absent = skein_core::NodeId(Digest::of(b"no such node").0);
            assert!(!api.contains(absent).await.unwrap());
            assert!(matches!(
                api.node(absent).await,
                Err(StoreError::NodeNotFound(id)) if id == absent
            ));
            assert_eq!(
                api.load_thread(answer.head_id().unwrap()).await.unwrap(),
                answer
            );
            assert!(matches!(
                api.rerun(&RerunId::random()).await,
                Err(StoreError::RerunNotFound(_))
            ));
            assert_eq!(
                api.resolve_conversation("alpha").await.unwrap(),
                conversation.id
            );
            let prefix = &conversation.id.as_str()[..10];
            assert_eq!(
                api.resolve_conversation(prefix).await.unwrap(),
                conversation.id
            );
            assert!(matches!(
                api.resolve_conversation("twin").await,
                Err(StoreError::AmbiguousName { .. })
            ));
            assert!(matches!(
                api.resolve_conversation("no such name").await,
                Err(StoreError::ConversationNotFound(_))
            ));
            let short = &head.to_string()[..12];
            assert_eq!(api.resolve_node(short).await.unwrap(), head);
            assert_eq!(store.resolve_node(short).unwrap(), head);
            assert!(matches!(
                api.resolve_node("xyz").await,
                Err(StoreError::NotAnId(_))
            ));
            let digest = Digest::of(format!("text {round}").as_bytes());
            let embedder = format!("embedder {round}");
            assert_eq!(
                api.cached_embedding(&embedder, &digest).await.unwrap(),
                None
            );
            api.cache_embedding(&embedder, &digest, &[1.5, -2.0])
                .await
                .unwrap();
            assert_eq!(
                api.cached_embedding(&embedder, &digest).await.unwrap(),
                Some(vec![1.5, -2.0])
            );
            assert_eq!(
                store.cached_embedding(&embedder, &digest).unwrap(),
                Some(vec![1.5, -2.0])
            );
        };
        if spawned {
            multi.block_on(async { tokio::spawn(work).await.unwrap() });
        } else {
            bare.block_on(work);
        }
    }
    assert_eq!(
        db.store
            .reruns_of_conversation(&conversation.id)
            .unwrap()
            .len(),
        4
    );
    assert!(db.store.verify().unwrap().is_ok());
}

/// The async API's writes and walks answer as the blocking API's do, from
/// a bare current-thread runtime and from a task on a multi-thread one:
/// appending a branch, subtrees and ancestries, creating, forking,
/// renaming and re-setting a conversation, moving its head (and a move
/// that lost the race), runs recorded and listed, reruns by node and
/// answer, families, search (and a query it refuses) and run and rerun
/// prefixes.
fn the_async_api_writes_and_walks_as_the_blocking_api_does(backend: Backend) {
    let db = TempStore::new(backend);
    let (bare, multi) = runtimes();
    let trunk = history("walks", 3);
    db.store.append(&trunk).unwrap();
    let root = trunk.nodes()[0].id();
    let head = trunk.head_id().unwrap();
    for (round, spawned) in [false, true].into_iter().enumerate() {
        let store = db.store.clone();
        let trunk = trunk.clone();
        let work = async move {
            let api = store.nonblocking();
            let branch = trunk.push(Message::user(format!("zebra branch {round}")));
            let report = api.append(&branch).await.unwrap();
            assert_eq!((report.written, report.head), (1, branch.head_id()));
            assert!(branch.head().unwrap().is_persisted_in(store.key()));
            let tip = branch.head_id().unwrap();
            assert_eq!(
                api.subtree(root, 100).await.unwrap(),
                store.subtree(root, 100).unwrap()
            );
            // Each earlier round added a branch and its rerun's answer.
            assert_eq!(
                api.subtree(root, 100).await.unwrap().len(),
                trunk.len() + 2 * round + 1
            );
            assert_eq!(
                api.ancestry(tip, 2).await.unwrap(),
                store.ancestry(tip, 2).unwrap()
            );
            assert_eq!(api.ancestry(tip, 2).await.unwrap().len(), 2);
            let absent = skein_core::NodeId(Digest::of(b"absent").0);
            assert!(matches!(
                api.subtree(absent, 5).await,
                Err(StoreError::NodeNotFound(id)) if id == absent
            ));

            let created = api
                .create_conversation(NewConversation {
                    name: Some(format!("walker {round}")),
                    head: Some(head),
                    ..NewConversation::default()
                })
                .await
                .unwrap();
            assert_eq!(store.conversation(&created.id).unwrap(), created);
            assert!(matches!(
                api.create_conversation(NewConversation {
                    head: Some(absent),
                    ..NewConversation::default()
                })
                .await,
                Err(StoreError::NodeNotFound(_))
            ));
            let fork = api
                .fork(
                    head,
                    Some(format!("fork {round}")),
                    Some(created.id.clone()),
                )
                .await
                .unwrap();
            assert_eq!(
                fork.origin.as_ref().unwrap().conversation,
                Some(created.id.clone())
            );
            let renamed = format!("renamed {round}");
            api.rename_conversation(&fork.id, Some(&renamed))
                .await
                .unwrap();
            let settings = skein_core::ConversationSettings {
                model: Some("echo".into()),
                ..Default::default()
            };
            api.set_conversation_settings(&fork.id, &settings)
                .await
                .unwrap();
            let stored = store.conversation(&fork.id).unwrap();
            assert_eq!(
                (stored.name.as_deref(), &stored.settings),
                (Some(renamed.as_str()), &settings)
            );
            api.move_head(&fork.id, Some(head), tip).await.unwrap();
            assert_eq!(store.conversation(&fork.id).unwrap().head, Some(tip));
            assert!(matches!(
                api.move_head(&fork.id, Some(head), tip).await,
                Err(StoreError::HeadMoved { .. })
            ));
            let missing = skein_store::ConversationId::random();
            assert!(matches!(
                api.rename_conversation(&missing, None).await,
                Err(StoreError::ConversationNotFound(_))
            ));

            let mut run = RunRecord::new("echo", "echo");
            run.output_head = Some(tip);
            run.conversation = Some(fork.id.clone());
            api.record_run(&run).await.unwrap();
            assert_eq!(api.recent_runs(1).await.unwrap(), vec![run.clone()]);
            assert_eq!(
                api.recent_runs(10).await.unwrap(),
                store.recent_runs(10).unwrap()
            );
            assert_eq!(
                api.resolve_run(&run.id.as_str()[..12]).await.unwrap(),
                run.id
            );

            let answer = branch.push(Message::assistant(format!("answer {round}")));
            let rerun = crate::reruns::record(&fork.id, &branch, &answer, &run);
            api.commit_rerun(&RerunCommit {
                record: &rerun,
                threads: std::slice::from_ref(&answer),
                runs: &[],
            })
            .await
            .unwrap();
            assert_eq!(api.reruns_of_node(tip).await.unwrap(), vec![rerun.clone()]);
            let answered = answer.head_id().unwrap();
            assert_eq!(
                api.reruns_answering(answered).await.unwrap(),
                vec![rerun.clone()]
            );
            assert_eq!(api.all_reruns().await.unwrap(), store.all_reruns().unwrap());
            assert_eq!(api.all_reruns().await.unwrap().len(), round + 1);
            assert_eq!(
                api.resolve_rerun(&rerun.id.as_str()[..12]).await.unwrap(),
                rerun.id
            );

            let limits = skein_store::FamilyLimits {
                members: 10,
                shares: 10,
            };
            let family = api.family(&fork.id, limits).await.unwrap();
            assert_eq!(family, store.family(&fork.id, limits).unwrap());
            assert!(
                family
                    .members
                    .iter()
                    .any(|m| m.conversation.id == created.id)
            );
            assert_eq!(family.reruns, vec![rerun]);
            assert!(matches!(
                api.family(&missing, limits).await,
                Err(StoreError::ConversationNotFound(_))
            ));

            let query = skein_store::SearchQuery::new("zebra");
            let found = api.search(&query).await.unwrap();
            assert_eq!(found, store.search(&query).unwrap());
            assert_eq!(found.matches.len(), round + 1);
            assert!(matches!(
                api.search(&skein_store::SearchQuery::new("\"\"")).await,
                Err(StoreError::Search(_))
            ));
        };
        if spawned {
            multi.block_on(async { tokio::spawn(work).await.unwrap() });
        } else {
            bare.block_on(work);
        }
    }
    assert!(db.store.verify().unwrap().is_ok());
}

/// A current-thread runtime with neither I/O nor timer drivers of its own,
/// and a multi-thread runtime with both.
fn runtimes() -> (tokio::runtime::Runtime, tokio::runtime::Runtime) {
    let bare = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let multi = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    (bare, multi)
}

for_each_backend!(
    the_async_api_commits_and_loads_turns_from_any_runtime,
    the_async_api_answers_as_the_blocking_api_does,
    the_async_api_writes_and_walks_as_the_blocking_api_does,
);

/// PostgreSQL: a turn waiting on the database (here on a lock another
/// session holds) leaves its current-thread runtime free: the runtime's other
/// task loads a thread meanwhile and then releases the lock. A commit that
/// blocked the runtime's one thread would wait forever.
#[cfg(feature = "postgres")]
#[test]
fn on_postgres_a_waiting_async_commit_leaves_its_runtime_free() {
    if crate::common::postgres_base("on_postgres_a_waiting_async_commit_leaves_its_runtime_free")
        .is_none()
    {
        return;
    }
    let db = TempStore::new(Backend::Postgres);
    let other = history("other", 4);
    db.store.append(&other).unwrap();
    let conversation = db
        .store
        .create_conversation(NewConversation::default())
        .unwrap();
    // A body over the blob threshold: the turn writes a blob first.
    let thread =
        skein_core::Thread::new().push(Message::user("x".repeat(skein_store::BLOB_THRESHOLD + 10)));
    let lock = db.lock_table("blobs");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let store = db.store.clone();
    let (writer, id, committed) = (store.clone(), conversation.id.clone(), thread.clone());
    runtime.block_on(async move {
        let commit = tokio::spawn(async move {
            let run = RunRecord::new("echo", "echo");
            let turn = TurnCommit::continuing(&id, None, &committed, std::slice::from_ref(&run));
            writer.nonblocking().commit_turn(&turn).await
        });
        while waiting_on_blobs(&store).await == 0 {
            tokio::task::yield_now().await;
        }
        let loaded = store
            .nonblocking()
            .load_thread(other.head_id().unwrap())
            .await
            .unwrap();
        assert_eq!(loaded, other);
        drop(lock);
        commit.await.unwrap().unwrap();
    });
    assert_eq!(
        db.store.conversation(&conversation.id).unwrap().head,
        thread.head_id()
    );
}

/// Sessions waiting for a lock on `blobs`, asked from the blocking pool.
#[cfg(feature = "postgres")]
async fn waiting_on_blobs(store: &skein_store::Store) -> i64 {
    let store = store.clone();
    tokio::task::spawn_blocking(move || {
        store
            .debug_query_i64(
                "SELECT count(*) FROM pg_locks WHERE NOT granted AND relation = 'blobs'::regclass",
            )
            .unwrap()
    })
    .await
    .unwrap()
}
