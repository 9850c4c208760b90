/*!
The bridge from the store's blocking API to the async PostgreSQL client.

One tokio runtime per process (two worker threads, started on first use and
never dropped) owns every PostgreSQL connection's I/O. A blocking call drives
its future on the calling thread with that runtime's `block_on`, so the
future may borrow the caller's arguments and the I/O keeps flowing on the
runtime's own workers. How the calling thread is allowed to block depends on
where it is:

- a plain thread, or inside [`crate::Store::run_blocking`] (tokio's blocking pool,
  marked by [`blocking_section`]): block directly;
- a worker of a multi-thread tokio runtime (a caller that skipped
  `Store::run_blocking`): `block_in_place` first, so that runtime moves its other
  tasks to another worker instead of stalling them;
- the thread of a current-thread runtime, which must never block inside
  itself: the work runs on a short-lived scoped thread while this one waits
  (correct, but slower: use `Store::run_blocking`).

Nested runtimes never arise, so `block_on` cannot panic on re-entry.

The async API ([`crate::Store::nonblocking`]) awaits the same futures on
the caller's task instead, blocking nothing and never entering
[`block_on`]: each of its operations is one async function that the
blocking API drives here. Its statements, and taking an idle pooled
connection, run on the caller's task with no hop. What hops to this
runtime ([`on_runtime`]) is what must outlive the caller's runtime or needs
a timer it may not have: making a new connection (its I/O task lives
here), waiting for a free one when all `pool_max` are in use, and the
pause before a write's retry (pool.rs says how). So any runtime, even one
without I/O or timer drivers, may drive the store, and be dropped after.

A call whose future owns what it needs can instead run as a task of that
runtime ([`on_runtime`]), beside the connections' I/O: a large result then
passes from the connection to the query inside the runtime, and the caller
is woken once, when it is done (loading a thread does this). Driven from
the calling thread, the query is handed each batch of rows the connection
reads (a few kilobytes) through a channel that holds one, so a thread of a
thousand messages costs a hundred or so round trips between the two
threads.
*/

use crate::error::{Result, StoreError};
use std::cell::Cell;
use std::future::Future;
use std::sync::OnceLock;
use tokio::runtime::{Handle, Runtime, RuntimeFlavor};

thread_local! {
    static IN_BLOCKING_SECTION: Cell<bool> = const { Cell::new(false) };
}

static RUNTIME: OnceLock<std::result::Result<Runtime, String>> = OnceLock::new();

fn runtime() -> Result<&'static Runtime> {
    RUNTIME
        .get_or_init(|| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .thread_name("skein-postgres")
                .enable_io()
                .enable_time()
                .build()
                .map_err(|error| error.to_string())
        })
        .as_ref()
        .map_err(|error| StoreError::Task(format!("cannot start the PostgreSQL runtime: {error}")))
}

/// Run `work` with this thread marked as one that may block (tokio's
/// blocking pool, entered through `Store::run_blocking`).
pub(crate) fn blocking_section<T>(work: impl FnOnce() -> T) -> T {
    let before = IN_BLOCKING_SECTION.with(|flag| flag.replace(true));
    let result = work();
    IN_BLOCKING_SECTION.with(|flag| flag.set(before));
    result
}

/// Run `work` as a task of the PostgreSQL runtime and await it, from any
/// runtime (or inside [`block_on`]). A panic in `work` is resumed here.
pub(crate) async fn on_runtime<T>(
    work: impl Future<Output = Result<T>> + Send + 'static,
) -> Result<T>
where
    T: Send + 'static,
{
    match runtime()?.spawn(work).await {
        Ok(result) => result,
        Err(error) if error.is_panic() => std::panic::resume_unwind(error.into_panic()),
        Err(error) => Err(StoreError::Task(format!(
            "a PostgreSQL task ended: {error}"
        ))),
    }
}

/// Whether this thread is running the PostgreSQL runtime (a worker, or a
/// caller inside its `block_on`), where its connections may be made and
/// its timers used directly.
pub(crate) fn on_own_runtime() -> bool {
    let Ok(current) = Handle::try_current() else {
        return false;
    };
    runtime().is_ok_and(|own| own.handle().id() == current.id())
}

/// Build the future with `make` and wait for it, from any thread.
pub(crate) fn block_on<T, F>(make: impl FnOnce() -> F + Send) -> Result<T>
where
    F: Future<Output = Result<T>>,
    T: Send,
{
    let runtime = runtime()?;
    let may_block = IN_BLOCKING_SECTION.with(Cell::get);
    match Handle::try_current() {
        _ if may_block => runtime.block_on(make()),
        Err(_) => runtime.block_on(make()),
        Ok(handle) if handle.runtime_flavor() == RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(|| runtime.block_on(make()))
        }
        Ok(_) => std::thread::scope(|scope| {
            scope
                .spawn(|| runtime.block_on(make()))
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
        }),
    }
}
