/*!
Where blocking store work runs when async code asks for it
([`crate::Store::run_blocking`], and SQLite's forms of the async
operations), so the caller's runtime never stalls:

- on a worker of a multi-thread runtime, in place inside `block_in_place`,
  which hands that worker's other tasks to another thread: no thread hop,
  so a short read costs what the read costs;
- on a current-thread runtime (or with none), on tokio's blocking pool,
  while the task waits: two thread wake-ups per call;
- inside [`blocking_caller`] (skein's blocking API, whose private runtime
  drives one call for a caller that is waiting anyway, and the store's own
  blocking methods, [`in_place`]), in place, for a backend whose work
  happens on the calling thread (SQLite).

SQLite's point reads (a row or a short index range by key, which in WAL
mode never wait for a writer) skip this and run in place on any runtime
(`SqliteStore::point_read`): the read costs less than the hop.
*/

use crate::error::{Result, StoreError};
use std::cell::Cell;
use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::thread::Thread;
use tokio::runtime::RuntimeFlavor;

/// Where blocking work runs.
pub(crate) enum RunsIn {
    /// On this multi-thread runtime worker, under `block_in_place`.
    PlaceOfWorker,
    /// On this thread, as it is (a blocking caller's).
    Place,
    /// On tokio's blocking pool.
    BlockingPool,
}

thread_local! {
    static BLOCKING_CALLER: Cell<bool> = const { Cell::new(false) };
}

/// Where blocking work runs from this thread, for a backend whose work
/// happens on the calling thread when `works_on_caller_thread`.
pub(crate) fn where_to_run(works_on_caller_thread: bool) -> RunsIn {
    if works_on_caller_thread && BLOCKING_CALLER.with(Cell::get) {
        return RunsIn::Place;
    }
    let flavor = tokio::runtime::Handle::try_current().map(|handle| handle.runtime_flavor());
    match flavor {
        Ok(RuntimeFlavor::MultiThread) => RunsIn::PlaceOfWorker,
        _ => RunsIn::BlockingPool,
    }
}

/// Run `work` on `target` where [`where_to_run`] says, and await it.
pub(crate) async fn run<S, T>(
    target: &S,
    works_on_caller_thread: bool,
    work: impl FnOnce(&S) -> Result<T> + Send + 'static,
) -> Result<T>
where
    S: Clone + Send + 'static,
    T: Send + 'static,
{
    match where_to_run(works_on_caller_thread) {
        RunsIn::PlaceOfWorker => tokio::task::block_in_place(|| blocking_section(|| work(target))),
        RunsIn::Place => work(target),
        RunsIn::BlockingPool => {
            let target = target.clone();
            tokio::task::spawn_blocking(move || blocking_section(|| work(&target)))
                .await
                .map_err(|error| StoreError::Task(error.to_string()))?
        }
    }
}

/// [`run`] for work that borrows its inputs: in place wherever `run`
/// works in place, and on the blocking pool on owned copies, which `own`
/// makes, where it does not.
pub(crate) async fn run_borrowing<S, T, O>(
    target: &S,
    borrowed: impl FnOnce(&S) -> Result<T>,
    own: impl FnOnce() -> O,
) -> Result<T>
where
    S: Clone + Send + 'static,
    T: Send + 'static,
    O: FnOnce(&S) -> Result<T> + Send + 'static,
{
    match where_to_run(true) {
        RunsIn::PlaceOfWorker => {
            tokio::task::block_in_place(|| blocking_section(|| borrowed(target)))
        }
        RunsIn::Place => borrowed(target),
        RunsIn::BlockingPool => run(target, true, own()).await,
    }
}

/// Run `work` with this thread marked as one that may block, so a
/// PostgreSQL call inside it blocks directly (postgres/bridge.rs).
#[cfg(feature = "postgres")]
pub(crate) fn blocking_section<T>(work: impl FnOnce() -> T) -> T {
    crate::postgres::bridge::blocking_section(work)
}

#[cfg(not(feature = "postgres"))]
pub(crate) fn blocking_section<T>(work: impl FnOnce() -> T) -> T {
    work()
}

/// Run `drive` (a private current-thread runtime driving one operation for
/// a blocking caller) with [`crate::Store::run_blocking`] allowed to do
/// SQLite work on this thread: the caller is blocked until the operation
/// ends either way, so a hop to the blocking pool would only add two thread
/// wake-ups per call.
pub fn blocking_caller<R>(drive: impl FnOnce() -> R) -> R {
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            BLOCKING_CALLER.with(|flag| flag.set(self.0));
        }
    }
    let _restore = Restore(BLOCKING_CALLER.with(|flag| flag.replace(true)));
    drive()
}

/// Wait for `operation` on this thread as a [`blocking_caller`]: how a
/// blocking method waits for an operation of a backend whose work happens
/// on the calling thread (SQLite), which then runs in place and is done at
/// the first poll. Polled again whenever woken, should it ever wait.
pub(crate) fn in_place<T>(operation: impl Future<Output = T>) -> T {
    struct Unpark(Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    blocking_caller(|| {
        let mut operation = pin!(operation);
        let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
        let mut context = Context::from_waker(&waker);
        loop {
            if let Poll::Ready(value) = operation.as_mut().poll(&mut context) {
                return value;
            }
            std::thread::park();
        }
    })
}
