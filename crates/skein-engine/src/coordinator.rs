/*!
The sequential coordinator: application-directed turns on one branch of a
conversation (seed 002, decisions 3 and 4).

Starting from a captured [`Exchange`], the coordinator calls the
application's callback with a [`TurnView`] (the current exchange, the newly
completed response if any, turns used and remaining) and the caller's
[`CancellationToken`]. The callback answers [`Next::Continue`] with an
ordinary [`Request`], or [`Next::Stop`], or an error. On `Continue` the
coordinator runs the request as a continuation of the current exchange
(with capture forced on) and calls back with the result. It never looks at
content: deciding what a reply means, and what to ask next, is the
application's.

```
use skein_core::{Message, Role};
use skein_engine::coordinator::{Next, Outcome};
use skein_engine::{BackendDef, BackendKind, Catalog, Engine, Profile, Request};

let catalog = Catalog::new()
    .backend(BackendDef::new("echo", BackendKind::Echo).capacity(1))
    .profile(Profile::new("quick", "echo", "echo"));
let engine = Engine::new(catalog)?;
let runtime = tokio::runtime::Builder::new_current_thread().build()?;
runtime.block_on(async {
    let start = engine
        .run(Request::messages([Message::user("hello")]).profile("quick").capture())
        .await?;
    let start = start.exchange.expect("captured");
    let mut replies = Vec::new();
    let outcome = engine
        .coordinator(&start, 2)
        .run_with(&mut replies, |replies, turn, _cancel| {
            Box::pin(async move {
                if let Some(response) = turn.response() {
                    replies.push(response.text());
                }
                if replies.len() == 1 {
                    return Ok(Next::Stop);
                }
                Ok(Next::Continue(
                    Request::messages([Message::user("again")]).profile("quick"),
                ))
            })
        })
        .await?;
    assert_eq!(outcome, Outcome::Stopped);
    assert_eq!(replies.len(), 1);
    Ok::<_, Box<dyn std::error::Error>>(())
})?;
# Ok::<_, Box<dyn std::error::Error>>(())
```

# The contract

**Delivery.** Every completed response is delivered to the callback exactly
once, the last permitted one included: there is one response-processing
path. The first callback receives the starting exchange and no response.

**Outcomes.** [`Next::Stop`] ends with [`Outcome::Stopped`]. A
[`Next::Continue`] when no turns remain ends with [`Outcome::Exhausted`]
and the request is not executed. Using the whole budget is not exhaustion
by itself: a callback that stops after the last permitted response ends
`Stopped`. With a budget of zero the callback is still invoked once, with
the starting exchange: `Stop` gives `Stopped`, `Continue` gives
`Exhausted`, an error is returned as the error.

**Cancellation.** The token is checked immediately before every callback
invocation, the first included. When it is cancelled the callback is not
invoked and [`CoordinateError::Cancelled`] is returned, carrying the one
completed response the callback had not yet received, if there is one. The
token is checked again after the callback returns, before another execution
starts (a `Stop`, or a `Continue` with no turns left, starts none: those end
`Stopped` and `Exhausted` as usual). The callback receives the same token
and is never forcibly stopped: cooperating with cancellation during its own
work is its business. Each execution runs under the token too (a child of
it, also cancelled by a token the callback put on its request), so a
cancellation during generation ends the run as
[`EngineError::Cancelled`], reported here as `Cancelled` with nothing
undelivered.

**Errors.** An execution error ends coordination as
[`CoordinateError::Execution`], holding the engine's own
[`EngineError`] to match on. A callback error ends it as
[`CoordinateError::Callback`], holding the callback's own error boxed, to
downcast ([`CoordinateError::callback_error`]). Nothing is replayed. A
response whose callback failed was delivered, and is not delivered again.
The result is deliberately small: an [`Outcome`], or an error; the
undelivered response exists only in the cancellation case, and there is no
archive of earlier responses (the callback had each of them).

**What a turn is.** The budget (`additional_turns`) bounds the continuation
executions the coordinator starts, nothing else. Transport retries and
structural repairs happen inside one execution and consume nothing more;
model calls the callback makes are application work and consume nothing.
A turn is consumed when the coordinator starts the execution, whatever
becomes of it: **a failed execution counts as a used turn**. Since any
failure ends coordination with its error, the rule shows only in the
record: the failed run is listed, marked failed, among the sequence's runs
in the ledger. (A request rejected while it is prepared, such as an unknown
prompt, never becomes a run and leaves no ledger entry.)

**Capacity.** The coordinator holds nothing across the callback: every run
releases its admission permit before it returns (DESIGN.md invariant 9), so
the callback can call the model on the same backend even at capacity one.

**Accounting.** Each coordinator has a sequence id ([`Coordinator::sequence`],
[`TurnView::sequence`]). The starting exchange's run gets a
`sequence_start` relation (when this engine's ledger knows it) and each
continuation a `sequence` relation, so
[`Ledger::sequence`](crate::Ledger::sequence) reports the start once,
every coordinated continuation, and what is associated with them; several
coordinators from one exchange each report the shared start once, and a
total over their union counts it once. Callback model calls are related to
the turn they served explicitly, with [`TurnView::associate`] (or
`Request::associated_with(turn.run())` by hand).

**Observation.** When a [`SequenceSink`] is installed
([`set_sequence_sink`]; the turn layer's OpenTelemetry export installs
one), it is told of every sequence once it ends, with its completed
continuations, so a sequence can be traced as a whole.
*/

use crate::engine::Engine;
use crate::error::EngineError;
use crate::exchange::Exchange;
use crate::execute::RunOutput;
use crate::observe::RunId;
use crate::request::Request;
pub use futures_core::future::BoxFuture;
use serde::Serialize;
use skein_core::{Relation, RunRecord};
use std::sync::RwLock;
use tokio_util::sync::CancellationToken;

/// The error type a callback returns: any error, boxed. `?` converts into
/// it; [`CoordinateError::callback_error`] gets the original back.
pub type CallbackError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// What the application wants after a turn.
#[derive(Debug)]
#[allow(
    clippy::large_enum_variant,
    reason = "built once per turn; boxing buys nothing"
)]
pub enum Next {
    /// Run this request as a continuation of the current exchange.
    Continue(Request),
    /// End coordination: the application is done with this branch.
    Stop,
}

/// How coordination ended normally. Neither is an error, and neither says
/// anything about what the application made of the content.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The callback returned [`Next::Stop`].
    Stopped,
    /// The callback asked for another turn and the budget had none left;
    /// that request was not executed.
    Exhausted,
}

/// Why coordination ended abnormally.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CoordinateError {
    /// The caller's token was cancelled. `undelivered` is the completed
    /// response the callback had not received yet, when there was one.
    #[error("{}", cancelled_message(.undelivered))]
    Cancelled { undelivered: Option<Box<RunOutput>> },
    /// A continuation failed; the engine's error, as it was.
    #[error("a coordinated continuation failed: {0}")]
    Execution(EngineError),
    /// The callback failed; its own error, boxed.
    #[error("the coordinator callback failed: {0}")]
    Callback(CallbackError),
}

fn cancelled_message(undelivered: &Option<Box<RunOutput>>) -> String {
    match undelivered {
        Some(output) => format!(
            "coordination was cancelled; the completed response of run {} was not delivered",
            output.run
        ),
        None => "coordination was cancelled".to_string(),
    }
}

impl CoordinateError {
    pub fn is_cancelled(&self) -> bool {
        matches!(self, CoordinateError::Cancelled { .. })
    }

    /// The completed response cancellation kept from the callback.
    pub fn undelivered(&self) -> Option<&RunOutput> {
        match self {
            CoordinateError::Cancelled { undelivered } => undelivered.as_deref(),
            _ => None,
        }
    }

    /// Take the completed response cancellation kept from the callback.
    pub fn into_undelivered(self) -> Option<RunOutput> {
        match self {
            CoordinateError::Cancelled { undelivered } => undelivered.map(|output| *output),
            _ => None,
        }
    }

    /// The callback's own error, when it is a `T`.
    pub fn callback_error<T: std::error::Error + 'static>(&self) -> Option<&T> {
        match self {
            CoordinateError::Callback(error) => error.downcast_ref::<T>(),
            _ => None,
        }
    }
}

/// What the callback sees of the branch at one turn.
#[derive(Clone, Copy, Debug)]
pub struct TurnView<'a> {
    exchange: &'a Exchange,
    response: Option<&'a RunOutput>,
    turns_used: u32,
    turns_remaining: u32,
    sequence: &'a str,
}

impl<'a> TurnView<'a> {
    /// The exchange a `Continue` would continue: the start on the first
    /// callback, then each new response's exchange.
    pub fn exchange(&self) -> &'a Exchange {
        self.exchange
    }

    /// The response completed since the previous callback; `None` on the
    /// first callback, which receives the starting exchange only.
    pub fn response(&self) -> Option<&'a RunOutput> {
        self.response
    }

    /// Continuation executions started so far.
    pub fn turns_used(&self) -> u32 {
        self.turns_used
    }

    /// Continuations still permitted. At zero, `Continue` ends `Exhausted`.
    pub fn turns_remaining(&self) -> u32 {
        self.turns_remaining
    }

    /// This coordinator's sequence id, as the ledger knows it.
    pub fn sequence(&self) -> &'a str {
        self.sequence
    }

    /// The run of the turn being served: the starting exchange's run on the
    /// first callback, then the run of the response just delivered.
    pub fn run(&self) -> &'a RunId {
        self.exchange.run()
    }

    /// Relate a model call the callback makes to this turn: the call joins
    /// this coordinator's sequence, and, from the second callback on, is
    /// associated with the run of the response it serves. On the first
    /// callback it is not associated with the starting run, which other
    /// branches from the same exchange share: that would make it count in
    /// their sequences too.
    pub fn associate(&self, request: Request) -> Request {
        let request = request.relation(Relation::Sequence(self.sequence.to_string()));
        match self.response {
            Some(response) => request.associated_with(&response.run),
            None => request,
        }
    }
}

/// A sequential coordinator for one branch, ready to run. Build it with
/// [`Engine::coordinator`].
pub struct Coordinator {
    engine: Engine,
    start: Exchange,
    additional_turns: u32,
    cancel: CancellationToken,
    sequence: String,
}

impl std::fmt::Debug for Coordinator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Coordinator")
            .field("start", &self.start.run())
            .field("additional_turns", &self.additional_turns)
            .field("sequence", &self.sequence)
            .finish_non_exhaustive()
    }
}

impl Engine {
    /// A coordinator starting from `start`, permitted `additional_turns`
    /// continuation executions. It gets a fresh sequence id and a token
    /// that is never cancelled unless [`Coordinator::cancel_with`] says
    /// otherwise.
    pub fn coordinator(&self, start: &Exchange, additional_turns: u32) -> Coordinator {
        Coordinator {
            engine: self.clone(),
            start: start.clone(),
            additional_turns,
            cancel: CancellationToken::new(),
            sequence: RunId::random().0,
        }
    }

    /// Coordinate turns from `start` under `cancel` with a stateless (or
    /// `Arc`-sharing) callback. See the [module](crate::coordinator).
    pub async fn coordinate<F>(
        &self,
        cancel: &CancellationToken,
        start: &Exchange,
        additional_turns: u32,
        next: F,
    ) -> Result<Outcome, CoordinateError>
    where
        F: for<'a> FnMut(
                TurnView<'a>,
                &'a CancellationToken,
            ) -> BoxFuture<'a, Result<Next, CallbackError>>
            + Send,
    {
        self.coordinator(start, additional_turns)
            .cancel_with(cancel.clone())
            .run(next)
            .await
    }
}

impl Coordinator {
    /// Use the caller's token: checked around every callback and passed to
    /// the callback and to every execution.
    pub fn cancel_with(mut self, cancel: CancellationToken) -> Coordinator {
        self.cancel = cancel;
        self
    }

    /// Use this sequence id instead of a fresh one (it must be unique in
    /// the engine's ledger for its report to mean this branch only).
    pub fn sequence_id(mut self, sequence: impl Into<String>) -> Coordinator {
        self.sequence = sequence.into();
        self
    }

    /// The sequence id the ledger will know this branch by.
    pub fn sequence(&self) -> &str {
        &self.sequence
    }

    /// Run with a callback whose futures borrow only the turn view and the
    /// token (share application state through the closure's captures).
    pub async fn run<F>(self, mut next: F) -> Result<Outcome, CoordinateError>
    where
        F: for<'a> FnMut(
                TurnView<'a>,
                &'a CancellationToken,
            ) -> BoxFuture<'a, Result<Next, CallbackError>>
            + Send,
    {
        self.run_with(&mut next, |next, turn, cancel| next(turn, cancel))
            .await
    }

    /// Run with a callback that also gets `&mut state`, which its future may
    /// hold across its own awaits (an assessment call, say).
    pub async fn run_with<S, F>(
        self,
        state: &mut S,
        mut next: F,
    ) -> Result<Outcome, CoordinateError>
    where
        S: Send + ?Sized,
        F: for<'a> FnMut(
                &'a mut S,
                TurnView<'a>,
                &'a CancellationToken,
            ) -> BoxFuture<'a, Result<Next, CallbackError>>
            + Send,
    {
        let Coordinator {
            engine,
            start,
            additional_turns,
            cancel,
            sequence,
        } = self;
        engine
            .ledger()
            .relate(start.run(), Relation::SequenceStart(sequence.clone()));
        let sink = sequence_sink();
        // The completed continuations, kept only for a sink.
        let mut done: Vec<RunOutput> = Vec::new();
        // The continuation whose model call failed, kept only for a sink.
        let mut failed_call: Option<RunRecord> = None;
        let mut current = start.clone();
        // A completed response not yet handed to the callback.
        let mut completed: Option<RunOutput> = None;
        let mut used = 0u32;
        let outcome = async {
            loop {
                // Immediately before every callback, the first included.
                if cancel.is_cancelled() {
                    return Err(CoordinateError::Cancelled {
                        undelivered: completed.take().map(Box::new),
                    });
                }
                let delivered = completed.take();
                let view = TurnView {
                    exchange: &current,
                    response: delivered.as_ref(),
                    turns_used: used,
                    turns_remaining: additional_turns - used,
                    sequence: &sequence,
                };
                let request = match next(&mut *state, view, &cancel).await {
                    Err(error) => return Err(CoordinateError::Callback(error)),
                    Ok(Next::Stop) => return Ok(Outcome::Stopped),
                    Ok(Next::Continue(request)) => request,
                };
                drop(delivered);
                if used == additional_turns {
                    return Ok(Outcome::Exhausted);
                }
                // Again before another execution starts.
                if cancel.is_cancelled() {
                    return Err(CoordinateError::Cancelled { undelivered: None });
                }
                // The turn is consumed now, whatever becomes of the execution.
                used += 1;
                let kept = sink.is_some().then_some(&mut failed_call);
                match continuation(&engine, &current, request, &cancel, &sequence, kept).await {
                    Ok(output) => {
                        current = output
                            .exchange
                            .clone()
                            .expect("the coordinator forces capture");
                        if sink.is_some() {
                            done.push(output.clone());
                        }
                        completed = Some(output);
                    }
                    Err(EngineError::Cancelled { .. }) if cancel.is_cancelled() => {
                        return Err(CoordinateError::Cancelled { undelivered: None });
                    }
                    Err(error) => return Err(CoordinateError::Execution(error)),
                }
            }
        }
        .await;
        if let Some(sink) = sink {
            sink(&SequenceDone {
                sequence: &sequence,
                start: start.run(),
                runs: &done,
                failed: outcome.is_err(),
                failed_call: failed_call.as_ref(),
            });
        }
        outcome
    }
}

/// A coordinator sequence that ended, as a [`SequenceSink`] is told.
#[derive(Debug)]
pub struct SequenceDone<'a> {
    /// The sequence id its runs carry ([`Relation::Sequence`]).
    pub sequence: &'a str,
    /// The run of the exchange it started from.
    pub start: &'a RunId,
    /// Its completed continuations, in order (a failed execution is not
    /// among them).
    pub runs: &'a [RunOutput],
    /// It ended in an error: a failed or cancelled execution, or the
    /// callback's.
    pub failed: bool,
    /// The run of the continuation whose model call failed after it
    /// started, with the usage the ledger counted for it (a failed
    /// execution that made no call has none).
    pub failed_call: Option<&'a RunRecord>,
}

/// Told of every coordinator sequence of the process once it ends (the
/// turn layer's telemetry makes a span of it). Called on the coordinator's
/// task: it must not block.
pub type SequenceSink = fn(&SequenceDone<'_>);

static SEQUENCE_SINK: RwLock<Option<SequenceSink>> = RwLock::new(None);

/// Tell `sink` of every coordinator sequence that ends from now on
/// (`None`: tell nobody, and keep no runs for it).
pub fn set_sequence_sink(sink: Option<SequenceSink>) {
    *SEQUENCE_SINK
        .write()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = sink;
}

fn sequence_sink() -> Option<SequenceSink> {
    *SEQUENCE_SINK
        .read()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Run `request` as a captured continuation of `current` in `sequence`,
/// cancelled by the coordinator's token or by the request's own.
async fn continuation(
    engine: &Engine,
    current: &Exchange,
    mut request: Request,
    cancel: &CancellationToken,
    sequence: &str,
    failed_call: Option<&mut Option<RunRecord>>,
) -> Result<RunOutput, EngineError> {
    let own = request.cancel.take();
    let token = cancel.child_token();
    let request = request
        .capture()
        .cancel_with(token.clone())
        .relation(Relation::Sequence(sequence.to_string()));
    let execution = engine.prepare_continuation(current, request)?;
    let prepared = failed_call.is_some().then(|| execution.prepared().clone());
    let run = execution.run();
    let output = match own {
        None => run.await,
        Some(own) => {
            let mut run = std::pin::pin!(run);
            tokio::select! {
                biased;
                output = &mut run => output,
                () = own.cancelled() => {
                    token.cancel();
                    run.await
                }
            }
        }
    };
    if let (Err(error), Some(prepared), Some(failed_call)) = (&output, prepared, failed_call) {
        *failed_call = prepared.failed_record(error).map(|mut record| {
            if let Some(entry) = engine.ledger().entry(&record.id) {
                record.usage = entry.usage;
                record.usage_complete = entry.usage_complete;
            }
            record
        });
    }
    output
}
