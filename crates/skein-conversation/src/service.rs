/*!
The turn service: the one place a turn is run and recorded. Every surface
(a [`Conversation`](crate::Conversation), a recorded chat's turns, reruns
and forks, the recording proxy, and through them the command line, the web
view and Python) says *what* it wants in a [`TurnRequest`]: the engine and
the request it rendered (its history, new messages, tools, options and
channels), and where the turn lands ([`Landing`]); it gets back the run's
output and where it [`Landed`]. No surface runs the engine to record a turn
or builds a bookmark itself (`crates/skein-cli/tests/cli/tidy.rs` checks).

The landing rule (DESIGN.md): a turn extends the head it started from; it
branches when its start point heads nothing or the head moved under it (the
loser of a race becomes a branch whose origin is the conversation and node
it started from, unless the surface asked to be told instead,
[`OnMoved::Fail`]); a new conversation exists only once its first turn has
succeeded. [`Landing::Found`] applies the same rule to a request that
carries its whole history and names no conversation (the proxy): the
conversation it continues is found in the graph (`crate::landing`).

The failure rule (`commit::failed`): a model call that fails stores its
input messages and a failed run pointing at them, in one transaction;
nothing else moves. A tool loop whose later call fails lands the calls it
completed (with the failed run, in the same transaction), unless the
surface asked for a [whole](TurnRequest::whole) turn (a recorded chat's
turn, whose evidence is all or nothing): then a loop that fails, pauses or
reaches its limit lands nothing, and its calls are kept for usage, marked
[`Relation::Unrecorded`].

A call cancelled after it started is a failure of its own: recorded
traffic ([`Landing::Found`], the proxy, whose client went away) keeps it as
a `cancelled` run with the text it had produced as that run's output
(never a turn of any conversation); every other surface keeps nothing of
it, since a person who stops a reply (Ctrl-C in `skein chat`, a cancelled
task) means "never mind".
*/

use crate::commit::{self, Bookmark, FailedCall, OnMoved};
use crate::landing;
use crate::telemetry;
use skein_core::{ConversationId, ConversationSettings, NodeId, Relation, RunRecord, Thread};
use skein_engine::{Chain, ChainOutput, ChainStatus, Engine, EngineError, Request, RunOutput};
use skein_store::{Committed, Store, StoreError};
use std::sync::Arc;

/// What a surface adds to each run record before it is written (the
/// proxy's exact request body, a recorded turn's step): called with the
/// call's index in the turn, `None` for a call that failed.
pub type RunMark = Arc<dyn Fn(Option<usize>, &mut RunRecord) + Send + Sync>;

/// Where a turn lands.
#[derive(Clone, Debug)]
pub enum Landing {
    /// Nowhere: nothing is written (a conversation with no store, a proxied
    /// request that asked not to be stored).
    Unrecorded,
    /// In `conversation` (created by this turn when the store does not hold
    /// it yet), moving its head from `from`, where the turn started; when
    /// another writer moved the head first, `on_moved` says what happens.
    In {
        conversation: Bookmark,
        from: Option<NodeId>,
        on_moved: OnMoved,
    },
    /// Wherever the request leads in the graph: a request that carries its
    /// whole history and names no conversation (see `crate::landing`).
    Found(Finding),
}

impl Landing {
    /// Extend `conversation` from `from`; a lost race becomes a branch.
    pub fn extend(conversation: Bookmark, from: Option<NodeId>) -> Landing {
        Landing::In {
            conversation,
            from,
            on_moved: OnMoved::Branch,
        }
    }

    /// The conversation a failed call's run belongs to: the one the turn
    /// continues, when the store holds it (a found turn's is looked up).
    fn owner(&self) -> Option<&Bookmark> {
        match self {
            Landing::In { conversation, .. } => Some(conversation),
            Landing::Unrecorded | Landing::Found(_) => None,
        }
    }
}

/// What a request found in the graph lands by, besides its messages.
#[derive(Clone, Debug, Default)]
pub struct Finding {
    /// The conversation's name: it continues only a conversation of this
    /// name, and names one it starts.
    pub name: Option<String>,
    /// A session the client named: the conversation of that name, which
    /// the request continues (or branches, when its history left the
    /// session's head); an unknown session starts a conversation of its
    /// own, with no origin, even where its messages are stored already.
    pub session: Option<String>,
    /// The settings of a conversation it starts that branches from none.
    pub settings: ConversationSettings,
    /// A keyed client of the recording proxy: the request reaches only
    /// the conversations whose settings name this client (its own
    /// requests made them); every other conversation is as if it were not
    /// there, so the request never continues, joins, branches or links
    /// to one. `None`: every conversation is reachable.
    pub client: Option<String>,
}

/// Where a turn landed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Landed {
    /// Nothing was written.
    Unrecorded,
    /// In this conversation: its head moved to the turn (or stood there
    /// already), or the turn created it, or (a regenerate whose reply was
    /// stored) its run joined it.
    In(ConversationId),
    /// In a new conversation branching where the turn started, because the
    /// conversation it continued (`from`) had moved on, or because its
    /// start heads nothing.
    Branched {
        conversation: ConversationId,
        from: ConversationId,
    },
    /// Nowhere, the head having moved under a turn that asked to be told
    /// ([`OnMoved::Fail`]): its nodes and runs are stored; the head is now
    /// `current`.
    Lost { current: Option<NodeId> },
    /// Nowhere: a [whole](TurnRequest::whole) turn that paused or reached
    /// its limit; its calls are kept for usage.
    Kept,
}

impl Landed {
    /// The conversation the turn is in, if any.
    pub fn conversation(&self) -> Option<&ConversationId> {
        match self {
            Landed::In(id)
            | Landed::Branched {
                conversation: id, ..
            } => Some(id),
            Landed::Unrecorded | Landed::Lost { .. } | Landed::Kept => None,
        }
    }
}

/// A turn that ran: its output and where it landed.
#[derive(Debug)]
pub struct TurnDone<O> {
    pub output: O,
    pub landed: Landed,
    /// The conversations a [found](Landing::Found) turn probably continues,
    /// which the evidence could not tell apart, so the turn was linked to
    /// none of them (see `crate::landing`); its runs name each as a
    /// [`PROBABLY_CONTINUES`](crate::PROBABLY_CONTINUES) relation.
    /// Empty for every other turn.
    pub probably_continues: Vec<ConversationId>,
}

/// A turn that did not complete.
#[derive(Debug, thiserror::Error)]
pub enum TurnError {
    /// The model call failed (or was refused before it started). When it
    /// had started, its input and failed run are recorded.
    #[error(transparent)]
    Call(EngineError),
    /// A model call of a tool loop failed.
    #[error("{} (after {} completed model call(s))", .0.error, .0.completed.len())]
    Loop(Box<FailedLoop>),
    /// The turn ran but could not be written.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A tool loop whose model call failed after `completed` calls. Unless the
/// turn was whole, they landed (`landed`, at `thread`).
#[derive(Debug)]
pub struct FailedLoop {
    pub error: EngineError,
    pub completed: Vec<RunOutput>,
    /// The history after the last completed call.
    pub thread: Option<Thread>,
    /// The failed call, when it had started (recorded unless the turn
    /// records nothing).
    pub failed: Option<FailedCall>,
    pub landed: Landed,
}

/// What a surface asks the turn service for: run `request` on `engine`
/// (one call, or a tool loop) and record it where its landing says.
#[must_use = "a turn request does nothing until it is called"]
pub struct TurnRequest {
    engine: Engine,
    request: Request,
    store: Option<Store>,
    landing: Landing,
    mark: Option<RunMark>,
    whole: bool,
}

impl TurnRequest {
    /// Run `request` (bound to its model or profile) on `engine`,
    /// recording nothing until [`recorded`](Self::recorded).
    pub fn new(engine: &Engine, request: Request) -> TurnRequest {
        TurnRequest {
            engine: engine.clone(),
            request,
            store: None,
            landing: Landing::Unrecorded,
            mark: None,
            whole: false,
        }
    }

    /// Record the turn in `store`, landing as `landing` says.
    pub fn recorded(mut self, store: &Store, landing: Landing) -> TurnRequest {
        self.store = Some(store.clone());
        self.landing = landing;
        self
    }

    /// Add the surface's evidence to each run record.
    pub fn mark(mut self, mark: RunMark) -> TurnRequest {
        self.mark = Some(mark);
        self
    }

    /// All or nothing: a tool loop that fails, pauses or reaches its limit
    /// lands nothing (see the module docs).
    pub fn whole(mut self) -> TurnRequest {
        self.whole = true;
        self
    }

    /// Whether a call that failed with `error` is kept (see the module
    /// docs: a cancelled one only by recorded traffic).
    fn keeps(&self, error: &EngineError) -> bool {
        !matches!(error, EngineError::Cancelled { .. }) || matches!(self.landing, Landing::Found(_))
    }

    /// Run one model call and record it.
    pub async fn call(mut self) -> Result<TurnDone<RunOutput>, TurnError> {
        let request = std::mem::take(&mut self.request);
        let execution = self
            .engine
            .prepare_execution(request)
            .map_err(TurnError::Call)?;
        let prepared = execution.prepared().clone();
        let output = match execution.run().await {
            Ok(output) => output,
            Err(error) => {
                if let Some(call) = commit::failed_call(&self.engine, &prepared, &error)
                    && self.keeps(&error)
                {
                    self.record_failure(call).await;
                }
                return Err(TurnError::Call(error));
            }
        };
        let records = self.records(std::slice::from_ref(&output));
        let thread = output
            .exchange
            .as_ref()
            .map(|exchange| exchange.thread().clone());
        let written = self.land(thread, records).await?;
        Ok(TurnDone {
            output,
            landed: written.landed,
            probably_continues: written.probably_continues,
        })
    }

    /// Run a tool loop (`chain`: its tools, limit, hooks and drift record)
    /// and record it.
    pub async fn tool_loop(
        mut self,
        chain: &mut Chain,
    ) -> Result<TurnDone<ChainOutput>, TurnError> {
        let request = std::mem::take(&mut self.request);
        let outcome = chain.run(&self.engine, request).await;
        let failure = match outcome {
            Ok(output) => return self.loop_ran(output).await,
            Err(failure) => failure,
        };
        let failed = failure
            .failed_call
            .as_deref()
            .filter(|_| self.keeps(&failure.error))
            .and_then(|call| commit::failed_call(&self.engine, call, &failure.error));
        let mut records = self.records(&failure.completed);
        let landed = match (&failure.thread, failure.completed.is_empty(), self.whole) {
            // The completed calls land, and the failed one, whose input
            // is where they end, keeps its run: one write.
            (Some(thread), false, false) => {
                records.extend(failed.clone().map(|call| self.marked_failure(call)));
                self.land(Some(thread.clone()), records).await?.landed
            }
            _ => {
                let kept = match failed.clone() {
                    Some(call) => {
                        let thread = call.input.clone();
                        records.push(self.marked_failure(call));
                        Some(thread)
                    }
                    None => failure.thread.clone(),
                };
                if let Some(thread) = kept {
                    self.keep(&thread, records, "failed").await;
                }
                Landed::Unrecorded
            }
        };
        Err(TurnError::Loop(Box::new(FailedLoop {
            error: failure.error,
            completed: failure.completed,
            thread: failure.thread,
            failed,
            landed,
        })))
    }

    async fn loop_ran(self, output: ChainOutput) -> Result<TurnDone<ChainOutput>, TurnError> {
        let records = self.records(&output.responses);
        let why = match output.status {
            ChainStatus::Stopped => "paused",
            ChainStatus::LimitReached => "chain_limit",
            ChainStatus::Completed => "",
        };
        if self.whole && output.status != ChainStatus::Completed {
            self.keep(&output.thread, records, why).await;
            return Ok(TurnDone {
                output,
                landed: Landed::Kept,
                probably_continues: Vec::new(),
            });
        }
        let written = self.land(Some(output.thread.clone()), records).await?;
        Ok(TurnDone {
            output,
            landed: written.landed,
            probably_continues: written.probably_continues,
        })
    }

    /// The runs' records, marked by the surface.
    fn records(&self, outputs: &[RunOutput]) -> Vec<RunRecord> {
        outputs
            .iter()
            .enumerate()
            .map(|(index, output)| {
                let mut record = output.record(None);
                if let Some(mark) = &self.mark {
                    mark(Some(index), &mut record);
                }
                record
            })
            .collect()
    }

    fn marked_failure(&self, call: FailedCall) -> RunRecord {
        let mut record = call.record;
        record.input_head = call.input.head_id();
        if let Some(mark) = &self.mark {
            mark(None, &mut record);
        }
        record
    }

    /// Write the turn (`thread`, the history after it, and its runs) where
    /// its landing says.
    async fn land(
        &self,
        thread: Option<Thread>,
        runs: Vec<RunRecord>,
    ) -> Result<landing::Found, StoreError> {
        let traced = telemetry::Traced::of(&thread, &runs);
        let written = self.write(thread, runs).await?;
        if let Some(traced) = traced {
            traced
                .emit(&self.landing, &written.landed, self.store.as_ref())
                .await;
        }
        Ok(written)
    }

    async fn write(
        &self,
        thread: Option<Thread>,
        runs: Vec<RunRecord>,
    ) -> Result<landing::Found, StoreError> {
        let Some(store) = &self.store else {
            return Ok(Landed::Unrecorded.into());
        };
        match &self.landing {
            Landing::Unrecorded => Ok(Landed::Unrecorded.into()),
            Landing::In {
                conversation,
                from,
                on_moved,
            } => {
                let written =
                    commit::commit(store, conversation, *from, thread, runs, *on_moved).await;
                Ok(match written {
                    Ok(committed) => landed_in(conversation, committed),
                    Err(StoreError::HeadMoved(moved)) => Landed::Lost {
                        current: moved.actual,
                    },
                    Err(error) => return Err(error),
                }
                .into())
            }
            Landing::Found(finding) => {
                let thread = thread.expect("a found turn lands a thread");
                landing::found(store, thread, runs, finding).await
            }
        }
    }

    /// Keep a failed call by the failure rule, logged when it cannot be.
    async fn record_failure(&self, call: FailedCall) {
        if let Some(traced) = telemetry::Traced::of(
            &Some(call.input.clone()),
            std::slice::from_ref(&call.record),
        ) {
            traced.emit(&self.landing, &Landed::Unrecorded, None).await;
        }
        let Some(store) = &self.store else { return };
        if matches!(self.landing, Landing::Unrecorded) {
            return;
        }
        let mut call = call;
        if let Some(mark) = &self.mark {
            mark(None, &mut call.record);
        }
        let found = match &self.landing {
            Landing::Found(finding) => landing::failed_in(store, &call.input, finding)
                .await
                .unwrap_or_else(|error| {
                    tracing::warn!(
                        "cannot tell which conversation a failed request continued: {error}"
                    );
                    None
                }),
            _ => None,
        };
        let owner = found.as_ref().or(self.landing.owner());
        if let Err(error) = commit::failed(store, owner, &call).await {
            tracing::warn!("cannot record the failed run: {error}");
        }
    }

    /// Keep calls no turn records, marked unrecorded for `why`.
    async fn keep(&self, thread: &Thread, runs: Vec<RunRecord>, why: &str) {
        let Some(store) = &self.store else { return };
        if matches!(self.landing, Landing::Unrecorded) {
            return;
        }
        if let Err(error) = keep_unrecorded(store, self.landing.owner(), thread, runs, why).await {
            tracing::warn!("cannot keep the runs of an unrecorded turn: {error}");
        }
    }
}

/// A conversation the store does not hold yet, with this name, origin
/// and settings: its first turn that succeeds creates it (a turn layer's
/// [`Landing::extend`] of it). With `now`, it is created at once, starting
/// at the end of that thread (a fork that exists before its first turn).
pub async fn new_conversation(
    name: Option<String>,
    origin: Option<skein_store::Origin>,
    settings: ConversationSettings,
    now: Option<(&Store, Thread)>,
) -> Result<Bookmark, StoreError> {
    let mut bookmark = Bookmark::unstored(name, origin, settings);
    if let Some((store, thread)) = now {
        commit::create(store, &bookmark, thread).await?;
        bookmark.stored = true;
    }
    Ok(bookmark)
}

/// Keep model calls that no turn records, so that usage counts them: a
/// whole turn that failed, paused or reached its limit, or a rerun whose
/// samples did not all succeed. Their runs are marked
/// [`Relation::Unrecorded`] for `why`, in no turn, with the nodes of
/// `thread` they name, in `conversation` when the store holds it; nothing
/// moves (`commit::keep`).
pub async fn keep_unrecorded(
    store: &Store,
    conversation: Option<&Bookmark>,
    thread: &Thread,
    mut runs: Vec<RunRecord>,
    why: &str,
) -> Result<Committed, StoreError> {
    for record in &mut runs {
        record.turn = None;
        record.relations.push(Relation::Unrecorded(why.to_string()));
    }
    commit::keep(store, conversation, thread, runs).await
}

/// Where a commit to `conversation` landed.
fn landed_in(conversation: &Bookmark, committed: Committed) -> Landed {
    match (committed.branched_from, committed.conversation) {
        (Some(_), Some(into)) => Landed::Branched {
            conversation: into,
            from: conversation.id.clone(),
        },
        (_, into) => Landed::In(into.unwrap_or_else(|| conversation.id.clone())),
    }
}
