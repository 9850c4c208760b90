//! Where `Store::run_blocking` does its work: in place on a multi-thread runtime
//! (without stalling the runtime's other tasks), on the blocking pool from a
//! current-thread runtime, and in place inside `blocking_caller`; and the
//! async API (`load_thread_async`, `commit_turn_async`), which on PostgreSQL
//! awaits its queries without blocking any thread.

use crate::common::{Backend, TempStore, history};
use skein_core::Message;
use skein_store::{NewConversation, RunRecord, TurnCommit, blocking_caller};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
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
    let bare = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let multi = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
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
            store.commit_turn_async(&turn).await.unwrap();
            store
                .load_thread_async(committed.head_id().unwrap())
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

for_each_backend!(the_async_api_commits_and_loads_turns_from_any_runtime);

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
            writer.commit_turn_async(&turn).await
        });
        while waiting_on_blobs(&store).await == 0 {
            tokio::task::yield_now().await;
        }
        let loaded = store
            .load_thread_async(other.head_id().unwrap())
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
