/*!
Where Rust futures run for Python callers, always with the GIL released.

- [`block_on`]: a synchronous call runs the future on the calling thread, on
  a current-thread runtime kept per thread, marked as a blocking caller (so
  a SQLite store works in place, as skein's own `*_blocking` forms do).
  [`block_on_cancellable`] also polls for signals every 100 ms: Ctrl-C
  cancels the turn's token, and `KeyboardInterrupt` is raised once the
  cancelled turn has ended.
- [`spawn`] and [`into_future`]: the asyncio API. Work runs on one
  process-wide multi-thread runtime; an asyncio future on the caller's
  running loop is resolved through `loop.call_soon_threadsafe`, and
  cancelling it cancels the turn's token.
- [`on_python_thread`]: application code (tools, hooks) runs with the GIL on
  a thread of its own, never on a runtime's thread, so it may block or call
  skein's synchronous API without stalling or deadlocking the turn.

The running asyncio loop travels with an async turn as a task-local
([`event_loop`]), so an `async def` tool is awaited on the loop that awaits
the turn.
*/

use pyo3::prelude::*;
use pyo3::types::PyCFunction;
use skein::engine::CancellationToken;
use std::cell::RefCell;
use std::future::Future;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// How often a blocking call looks for Ctrl-C.
const SIGNAL_POLL: Duration = Duration::from_millis(100);

tokio::task_local! {
    static EVENT_LOOP: Arc<Py<PyAny>>;
}

thread_local! {
    static LOCAL_RUNTIME: RefCell<Option<tokio::runtime::Runtime>> = const { RefCell::new(None) };
}

/// The asyncio loop awaiting the current turn, if it is an async one.
pub fn event_loop() -> Option<Arc<Py<PyAny>>> {
    EVENT_LOOP.try_with(Arc::clone).ok()
}

/// The process-wide runtime of the asyncio API and of streamed turns.
fn shared() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("skein-py")
            .enable_all()
            .build()
            .expect("the runtime of skein's asyncio API starts")
    })
}

/// Run `work` on a current-thread runtime kept for this thread.
fn drive<T>(work: impl FnOnce(&tokio::runtime::Runtime) -> T) -> PyResult<T> {
    if tokio::runtime::Handle::try_current().is_ok() {
        return Err(pyo3::exceptions::PyRuntimeError::new_err(
            "a blocking skein call was made inside skein's own runtime (from a signal handler?); \
             call it from ordinary Python code",
        ));
    }
    let runtime = match LOCAL_RUNTIME.with(|cell| cell.borrow_mut().take()) {
        Some(runtime) => runtime,
        None => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|error| {
                pyo3::exceptions::PyOSError::new_err(format!(
                    "cannot start a runtime for a blocking call: {error}"
                ))
            })?,
    };
    let out = skein::store::blocking_caller(|| work(&runtime));
    LOCAL_RUNTIME.with(|cell| *cell.borrow_mut() = Some(runtime));
    Ok(out)
}

/// Run `future` to completion on this thread with the GIL released.
pub fn block_on<T: Send>(py: Python<'_>, future: impl Future<Output = T> + Send) -> PyResult<T> {
    py.detach(|| drive(|runtime| runtime.block_on(future)))
}

/// [`block_on`] for a future made where it runs, by `make`: one whose
/// `Send` the compiler cannot prove (a replay worker's stream of claims)
/// never crosses a thread, only what makes it does.
pub fn block_on_made<T: Send, F: Future<Output = T>>(
    py: Python<'_>,
    make: impl FnOnce() -> F + Send,
) -> PyResult<T> {
    py.detach(|| drive(|runtime| runtime.block_on(make())))
}

/// [`block_on`] for a turn: Ctrl-C cancels `cancel`; the turn's outcome is
/// returned with the `KeyboardInterrupt` to raise, if one came.
pub fn block_on_cancellable<T: Send>(
    py: Python<'_>,
    cancel: &CancellationToken,
    future: impl Future<Output = T> + Send,
) -> PyResult<(T, Option<PyErr>)> {
    py.detach(|| {
        drive(|runtime| {
            runtime.block_on(async {
                let mut future = std::pin::pin!(future);
                let mut interrupt = None;
                loop {
                    match tokio::time::timeout(SIGNAL_POLL, future.as_mut()).await {
                        Ok(out) => return (out, interrupt),
                        Err(_) if interrupt.is_none() => {
                            if let Err(error) = Python::attach(|py| py.check_signals()) {
                                cancel.cancel();
                                interrupt = Some(error);
                            }
                        }
                        Err(_) => {}
                    }
                }
            })
        })
    })
}

/// Wait for `ready` to say yes, polling it every 100 ms with the GIL
/// released, and looking for Ctrl-C in between (which cancels `cancel` and
/// is raised at once: the work goes on to its cancelled end elsewhere).
pub fn wait_until(
    py: Python<'_>,
    cancel: &CancellationToken,
    mut ready: impl FnMut(Duration) -> bool + Send,
) -> PyResult<()> {
    loop {
        if py.detach(|| ready(SIGNAL_POLL)) {
            return Ok(());
        }
        if let Err(error) = py.check_signals() {
            cancel.cancel();
            return Err(error);
        }
    }
}

/// Run `future` on the shared runtime, carrying `event_loop` to its tools.
pub fn spawn(
    event_loop: Option<Arc<Py<PyAny>>>,
    future: impl Future<Output = ()> + Send + 'static,
) {
    match event_loop {
        Some(event_loop) => drop(shared().spawn(EVENT_LOOP.scope(event_loop, future))),
        None => drop(shared().spawn(future)),
    }
}

/// The running asyncio loop (a `RuntimeError` outside one).
pub fn running_loop(py: Python<'_>) -> PyResult<Arc<Py<PyAny>>> {
    let event_loop = py.import("asyncio")?.call_method0("get_running_loop")?;
    Ok(Arc::new(event_loop.unbind()))
}

/// An asyncio future, on the running loop, for `future`'s outcome turned
/// into a Python value by `convert` (with the GIL). Cancelling the asyncio
/// future cancels `cancel`.
pub fn into_future<'py, T, F, C>(
    py: Python<'py>,
    cancel: Option<CancellationToken>,
    future: F,
    convert: C,
) -> PyResult<Bound<'py, PyAny>>
where
    T: Send + 'static,
    F: Future<Output = T> + Send + 'static,
    C: FnOnce(Python<'_>, T) -> PyResult<Py<PyAny>> + Send + 'static,
{
    let event_loop = running_loop(py)?;
    let py_future = event_loop.bind(py).call_method0("create_future")?;
    if let Some(token) = cancel {
        let on_done = PyCFunction::new_closure(py, None, None, move |args, _| -> PyResult<()> {
            if args.get_item(0)?.call_method0("cancelled")?.is_truthy()? {
                token.cancel();
            }
            Ok(())
        })?;
        py_future.call_method1("add_done_callback", (on_done,))?;
    }
    let resolve = py.import("skein._aio")?.getattr("_resolve")?.unbind();
    let target = py_future.clone().unbind();
    let loop_ref = event_loop.clone();
    spawn(Some(event_loop), async move {
        let out = future.await;
        Python::attach(|py| {
            let (ok, value) = match convert(py, out) {
                Ok(value) => (true, value),
                Err(error) => (false, error.into_value(py).into_any()),
            };
            let event_loop = loop_ref.bind(py);
            // A loop closed before the work ended has nobody waiting.
            let closed = event_loop
                .call_method0("is_closed")
                .and_then(|closed| closed.is_truthy())
                .unwrap_or(true);
            if closed {
                return;
            }
            let scheduled =
                event_loop.call_method1("call_soon_threadsafe", (resolve, target, ok, value));
            if let Err(error) = scheduled {
                error.write_unraisable(py, None);
            }
        });
    });
    Ok(py_future)
}

/// Run `work` with the GIL on a thread of its own (see the module doc).
/// The error is the Python exception's text, or why the thread failed.
pub async fn on_python_thread<T: Send + 'static>(
    work: impl FnOnce(Python<'_>) -> PyResult<T> + Send + 'static,
) -> Result<T, String> {
    let (sender, receiver) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("skein-py-call".into())
        .spawn(move || {
            let out = Python::attach(|py| work(py).map_err(|error| error.to_string()));
            let _ = sender.send(out);
        })
        .map_err(|error| format!("cannot start a thread for the Python call: {error}"))?;
    receiver
        .await
        .map_err(|_| "the Python call ended without an answer (it panicked)".to_string())?
}
