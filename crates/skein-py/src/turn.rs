/*!
A turn as Python sees it: lazy, like `llm`'s responses. `model.prompt(...)`
builds the turn-layer `Prompt` (or `ChainPrompt`) and nothing runs until
the response is read (`text()`, a property), iterated (streaming) or
awaited; then the turn layer's `send` runs exactly once, and every reader
sees its outcome.

[`Turn`] holds the unsent prompt, the streamed chunks and the outcome, in
one mutex that is only ever locked with the GIL released (a reader waiting
for the turn must never hold the GIL another thread needs). Reading
synchronously runs the turn in place ([`runtime::block_on_cancellable`]);
iterating or awaiting runs it on the shared runtime and waits for chunks or
the outcome.
*/

use crate::errors::ToPyErr;
use crate::runtime;
use crate::values::warn_drift;
use pyo3::prelude::*;
use pyo3::types::PyString;
use skein::engine::CancellationToken;
use skein::{ChainPrompt, ChainResponse, Prompt, Response};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

/// A turn's outcome: the turn layer's result, shared by every reader.
pub type Outcome<O> = Result<O, Arc<skein::Error>>;

type SendFuture<O> = Pin<Box<dyn Future<Output = Result<O, skein::Error>> + Send>>;

/// A turn-layer builder that can be sent with a text sink and a token.
pub trait Sendable: Send + 'static {
    type Output: Clone + Send + Sync + 'static;

    fn start(
        self,
        sink: Arc<Progress<Self::Output>>,
        cancel: CancellationToken,
    ) -> SendFuture<Self::Output>;

    /// The whole reply's text, for a turn that was never streamed.
    fn text(output: &Self::Output) -> String;

    /// The tool-schema drift the turn found, issued once as Python warnings.
    fn warnings(output: &Self::Output) -> Vec<skein::DriftWarning>;
}

impl Sendable for Prompt {
    type Output = Response;

    fn start(
        self,
        sink: Arc<Progress<Response>>,
        cancel: CancellationToken,
    ) -> SendFuture<Response> {
        Box::pin(
            self.on_text(move |text| sink.push(text))
                .cancel_with(cancel)
                .send(),
        )
    }

    fn text(output: &Response) -> String {
        output.text()
    }

    fn warnings(output: &Response) -> Vec<skein::DriftWarning> {
        output.warnings().to_vec()
    }
}

impl Sendable for ChainPrompt {
    type Output = ChainResponse;

    fn start(
        self,
        sink: Arc<Progress<ChainResponse>>,
        cancel: CancellationToken,
    ) -> SendFuture<ChainResponse> {
        Box::pin(
            self.on_text(move |text| sink.push(text))
                .cancel_with(cancel)
                .send(),
        )
    }

    fn text(output: &ChainResponse) -> String {
        output
            .responses()
            .iter()
            .map(|response| response.text())
            .collect()
    }

    fn warnings(output: &ChainResponse) -> Vec<skein::DriftWarning> {
        output.warnings()
    }
}

/// What a turn has produced so far.
pub struct Progress<O> {
    state: Mutex<State<O>>,
    changed: Condvar,
    notify: tokio::sync::Notify,
}

struct State<O> {
    chunks: Vec<String>,
    outcome: Option<Outcome<O>>,
}

/// The next chunk for a reader at some index.
pub enum Next {
    Chunk(String),
    End,
    Wait,
}

impl<O: Clone> Progress<O> {
    fn new() -> Progress<O> {
        Progress {
            state: Mutex::new(State {
                chunks: Vec::new(),
                outcome: None,
            }),
            changed: Condvar::new(),
            notify: tokio::sync::Notify::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State<O>> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn push(&self, text: &str) {
        self.lock().chunks.push(text.to_string());
        self.changed.notify_all();
        self.notify.notify_waiters();
    }

    fn finish(&self, outcome: Outcome<O>, whole: impl FnOnce(&O) -> String) {
        {
            let mut state = self.lock();
            // A turn that did not stream (a provider that sends its reply at
            // once still streams it; a chain's tool results do not) still
            // reads back as one chunk.
            if state.chunks.is_empty()
                && let Ok(output) = &outcome
            {
                let text = whole(output);
                if !text.is_empty() {
                    state.chunks.push(text);
                }
            }
            state.outcome = Some(outcome);
        }
        self.changed.notify_all();
        self.notify.notify_waiters();
    }

    fn outcome(&self) -> Option<Outcome<O>> {
        self.lock().outcome.clone()
    }

    fn next(&self, index: usize) -> Next {
        let state = self.lock();
        match state.chunks.get(index) {
            Some(chunk) => Next::Chunk(chunk.clone()),
            None if state.outcome.is_some() => Next::End,
            None => Next::Wait,
        }
    }

    /// Wait up to `timeout` for something past `index`.
    fn wait_blocking(&self, index: usize, timeout: Duration) -> Next {
        let state = self.lock();
        let (state, _) = self
            .changed
            .wait_timeout_while(state, timeout, |state| {
                state.chunks.len() <= index && state.outcome.is_none()
            })
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        drop(state);
        self.next(index)
    }

    async fn wait(&self, index: usize) -> Next {
        loop {
            let notified = self.notify.notified();
            let mut notified = std::pin::pin!(notified);
            notified.as_mut().enable();
            match self.next(index) {
                Next::Wait => notified.await,
                next => return next,
            }
        }
    }
}

/// One turn: unsent until first read, then running or done.
pub struct Turn<P: Sendable> {
    pending: Mutex<Option<P>>,
    progress: Arc<Progress<P::Output>>,
    cancel: CancellationToken,
    /// Its drift warnings were issued.
    warned: AtomicBool,
}

impl<P: Sendable> Turn<P> {
    pub fn new(prompt: P) -> Turn<P> {
        Turn {
            pending: Mutex::new(Some(prompt)),
            progress: Arc::new(Progress::new()),
            cancel: CancellationToken::new(),
            warned: AtomicBool::new(false),
        }
    }

    /// A turn that has already run (one call of a chain, whose warnings
    /// the chain issues).
    pub fn done(output: P::Output) -> Turn<P> {
        let turn = Turn {
            pending: Mutex::new(None),
            progress: Arc::new(Progress::new()),
            cancel: CancellationToken::new(),
            warned: AtomicBool::new(true),
        };
        turn.progress.finish(Ok(output), P::text);
        turn
    }

    /// The turn's output (running the turn if needed), or the exception for
    /// its error; the first reader issues its drift warnings.
    pub fn get(&self, py: Python<'_>) -> PyResult<P::Output> {
        let output = self.wait(py)?.map_err(|error| error.to_py(py))?;
        if !self.warned.swap(true, Ordering::Relaxed) {
            warn_drift(py, &P::warnings(&output))?;
        }
        Ok(output)
    }

    fn take(&self) -> Option<P> {
        self.pending
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take()
    }

    /// The turn's outcome, running it here if nobody has started it, else
    /// waiting for it. Ctrl-C cancels the turn and raises.
    pub fn wait(&self, py: Python<'_>) -> PyResult<Outcome<P::Output>> {
        if let Some(outcome) = self.progress.outcome() {
            return Ok(outcome);
        }
        if let Some(prompt) = py.detach(|| self.take()) {
            let future = prompt.start(self.progress.clone(), self.cancel.clone());
            let (outcome, interrupt) = runtime::block_on_cancellable(py, &self.cancel, future)?;
            let outcome = outcome.map_err(Arc::new);
            self.progress.finish(outcome.clone(), P::text);
            return match interrupt {
                Some(interrupt) => Err(interrupt),
                None => Ok(outcome),
            };
        }
        runtime::wait_until(py, &self.cancel, |timeout| {
            matches!(self.progress.wait_blocking(usize::MAX, timeout), Next::End)
        })?;
        Ok(self.progress.outcome().expect("the turn ended"))
    }

    /// Start the turn on the shared runtime if nobody has (`event_loop`: the
    /// asyncio loop its async tools run on).
    pub fn start_background(&self, py: Python<'_>, event_loop: Option<Arc<Py<PyAny>>>) {
        let Some(prompt) = py.detach(|| self.take()) else {
            return;
        };
        let progress = self.progress.clone();
        let future = prompt.start(progress.clone(), self.cancel.clone());
        runtime::spawn(event_loop, async move {
            let outcome = future.await.map_err(Arc::new);
            progress.finish(outcome, P::text);
        });
    }

    /// The chunk at `index` (streaming): `None` once the turn has ended and
    /// every chunk was read.
    pub fn chunk(&self, py: Python<'_>, index: usize) -> PyResult<Option<String>> {
        self.start_background(py, None);
        let mut found = None;
        runtime::wait_until(py, &self.cancel, |timeout| {
            match self.progress.wait_blocking(index, timeout) {
                Next::Chunk(chunk) => {
                    found = Some(Some(chunk));
                    true
                }
                Next::End => {
                    found = Some(None);
                    true
                }
                Next::Wait => false,
            }
        })?;
        Ok(found.flatten())
    }

    /// The next chunk for a Python iterator at `index`: `None` at the end,
    /// where the turn's error, if it failed, is raised.
    pub fn next_chunk(&self, py: Python<'_>, index: usize) -> PyResult<Option<Py<PyString>>> {
        match self.chunk(py, index)? {
            Some(chunk) => Ok(Some(PyString::new(py, &chunk).unbind())),
            None => match self.outcome() {
                Some(Err(error)) => Err(error.to_py(py)),
                _ => Ok(None),
            },
        }
    }

    /// An asyncio future of the chunk at `index` (`None` at the end).
    pub fn chunk_async<'py>(
        self: &Arc<Self>,
        py: Python<'py>,
        index: usize,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.start_background(py, Some(runtime::running_loop(py)?));
        let progress = self.progress.clone();
        runtime::into_future(
            py,
            Some(self.cancel.clone()),
            async move { progress.wait(index).await },
            |py, next| {
                Ok(match next {
                    Next::Chunk(chunk) => chunk.into_pyobject(py)?.into_any().unbind(),
                    _ => py.None(),
                })
            },
        )
    }

    /// An asyncio future that resolves (to `None`) when the turn has ended.
    pub fn done_async<'py>(self: &Arc<Self>, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.start_background(py, Some(runtime::running_loop(py)?));
        let progress = self.progress.clone();
        runtime::into_future(
            py,
            Some(self.cancel.clone()),
            async move { progress.wait(usize::MAX).await },
            |py, _| Ok(py.None()),
        )
    }

    /// The outcome if the turn has ended.
    pub fn outcome(&self) -> Option<Outcome<P::Output>> {
        self.progress.outcome()
    }
}
