/*!
Where blocking store work runs when async code asks for it
([`crate::Store::run_blocking`], and SQLite's forms of the async
operations), so the caller's runtime never stalls:

- on a worker of a multi-thread runtime, in place inside `block_in_place`,
  which hands that worker's other tasks to another thread: no thread hop,
  so a short read costs what the read costs;
- on a current-thread runtime, SQLite's own operations ([`run_own`],
  [`run_borrowing`]) run in place unless they would wait: a read never
  waits for a writer in WAL mode, and a write that finds the database's
  writer taken (by another thread or process) gives way before it has
  done anything ([`StoreError::WouldWait`], seen only here) and runs on
  tokio's blocking pool instead, where it may wait. The runtime stalls for
  the work's own time, never for another writer's; the common case costs
  no thread hop (two wake-ups, more than a turn's whole write on a loaded
  machine);
- other work on a current-thread runtime (or with none: [`run`], for
  [`crate::Store::run_blocking`]'s arbitrary work) runs on tokio's
  blocking pool while the task waits;
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
use std::thread::{LocalKey, Thread};
use tokio::runtime::RuntimeFlavor;

/// Where blocking work runs.
pub(crate) enum RunsIn {
    /// On this multi-thread runtime worker, under `block_in_place`.
    PlaceOfWorker,
    /// On this thread, as it is (a blocking caller's).
    Place,
    /// On this current-thread runtime's thread, unless the work would wait
    /// for another writer; then on tokio's blocking pool.
    PlaceUnlessWaiting,
    /// On tokio's blocking pool.
    BlockingPool,
}

thread_local! {
    static BLOCKING_CALLER: Cell<bool> = const { Cell::new(false) };
    /// Set while work runs in place on a current-thread runtime: a write
    /// that would wait gives way instead ([`may_wait`]).
    static NOT_WAITING: Cell<bool> = const { Cell::new(false) };
}

/// Whether work on this thread may wait for another writer; when not, a
/// write that would wait returns [`StoreError::WouldWait`] before it does
/// anything.
pub(crate) fn may_wait() -> bool {
    !NOT_WAITING.with(Cell::get)
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
        Ok(RuntimeFlavor::CurrentThread) if works_on_caller_thread => RunsIn::PlaceUnlessWaiting,
        _ => RunsIn::BlockingPool,
    }
}

/// Run `attempt` in place as work that gives way rather than wait.
fn without_waiting<T>(attempt: impl FnOnce() -> Result<T>) -> Result<T> {
    marked(&NOT_WAITING, attempt)
}

/// Run `work` with this thread's `mark` set, and set it back as it was
/// afterwards, should `work` panic too.
fn marked<R>(mark: &'static LocalKey<Cell<bool>>, work: impl FnOnce() -> R) -> R {
    struct Restore(&'static LocalKey<Cell<bool>>, bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            self.0.with(|flag| flag.set(self.1));
        }
    }
    let _restore = Restore(mark, mark.with(|flag| flag.replace(true)));
    work()
}

/// Run `work` on `target` where [`where_to_run`] says, and await it: work
/// that cannot be done again, so on a current-thread runtime it always
/// runs on the blocking pool.
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
        RunsIn::PlaceUnlessWaiting | RunsIn::BlockingPool => on_pool(target, work).await,
    }
}

/// [`run`] for one of SQLite's own operations, which gives way rather
/// than wait when asked to ([`may_wait`]) and can then be done again: on a
/// current-thread runtime it runs in place unless it would wait.
pub(crate) async fn run_own<S, T>(
    target: &S,
    mut work: impl FnMut(&S) -> Result<T> + Send + 'static,
) -> Result<T>
where
    S: Clone + Send + 'static,
    T: Send + 'static,
{
    match where_to_run(true) {
        RunsIn::PlaceUnlessWaiting => match without_waiting(|| work(target)) {
            Err(StoreError::WouldWait) => on_pool(target, work).await,
            done => done,
        },
        RunsIn::PlaceOfWorker => tokio::task::block_in_place(|| blocking_section(|| work(target))),
        RunsIn::Place => work(target),
        RunsIn::BlockingPool => on_pool(target, work).await,
    }
}

async fn on_pool<S, T>(target: &S, work: impl FnOnce(&S) -> Result<T> + Send + 'static) -> Result<T>
where
    S: Clone + Send + 'static,
    T: Send + 'static,
{
    let target = target.clone();
    tokio::task::spawn_blocking(move || blocking_section(|| work(&target)))
        .await
        .map_err(|error| StoreError::Task(error.to_string()))?
}

/// [`run_own`] for work that borrows its inputs: in place wherever
/// `run_own` works in place, and on the blocking pool on owned copies,
/// which `own` makes, where it does not (or where it gave way).
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
        RunsIn::PlaceUnlessWaiting => match without_waiting(|| borrowed(target)) {
            Err(StoreError::WouldWait) => on_pool(target, own()).await,
            done => done,
        },
        RunsIn::BlockingPool => on_pool(target, own()).await,
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
    marked(&BLOCKING_CALLER, drive)
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
