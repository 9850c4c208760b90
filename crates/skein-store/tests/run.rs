//! Where `Store::run` does its work: in place on a multi-thread runtime
//! (without stalling the runtime's other tasks), on the blocking pool from a
//! current-thread runtime, and in place inside `blocking_caller`.

mod common;

use common::{Backend, TempStore};
use skein_store::blocking_caller;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::ThreadId;
use std::time::{Duration, Instant};

async fn thread_of_run(db: &TempStore) -> ThreadId {
    db.store
        .run(|store| {
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
                .run(move |_| {
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
