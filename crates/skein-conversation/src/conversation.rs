/*!
[`Conversation`]: a named bookmark into the graph with default tools, hooks
and a chain limit, optionally attached to a store; and how a turn runs on
it.

A turn starts from a point (a thread, its annotations, and the run that
produced its head), renders the request through the engine with the
conversation's defaults as explicit inputs, and then moves the bookmark
from that point to the new head by compare-and-set: in memory, and in the
store when one is attached (the turn's nodes, runs and bookmark move in one
transaction). A conversation with a store is written to it only once its
first turn succeeds. A model call that fails keeps, by the failure rule
([`commit::failed`]), its input messages and its failed run, and moves
nothing: a failed first turn creates no conversation. When another writer
moved the head while the turn ran, the turn fails with
[`Error::HeadMoved`], or, when it asks to ([`OnMoved::Branch`], what the
command line and the web view do), lands in a new conversation branching
where it started.

Hooks (`before_call`, `after_call`) are closures: they live in memory only
and never reach the store. A loaded conversation has none until they are
set again; a fork starts without them (a hook often closes over state that
belongs to one line of work, such as an approval queue or a counter, and
silently sharing it with an independent branch would surprise). A chain
may bring hooks of its own, which replace the conversation's for that
chain only ([`ChainPrompt::before_call`]).

Schema drift: the conversation remembers, per tool name, the input schema
last offered, and warns when a call offers the name under another one. A
loaded conversation starts from the tool sets its recorded calls offered
(and those of the conversations it was forked from, up to the fork), so a
tool whose schema changed since yesterday's turn warns on today's.
*/

use crate::commit::{self, Bookmark, OnMoved};
use crate::error::{Error, Result};
use crate::input::TurnInput;
use crate::model::Model;
use crate::prompt::{ChainHooks, ChainPrompt, Prompt, TextSink, TurnSpec};
use crate::response::{ChainResponse, Fork, Response};
use crate::service::{self, FailedLoop, Landing, TurnError, TurnRequest};
use futures_util::future::join;
use skein_core::{
    Annotations, BoxFuture, ConversationId, ConversationSettings, Message, NodeId, Origin,
    Relation, RunRecord, Thread, ToolCall, ToolResult,
};
use skein_engine::{
    AfterCall, BeforeCall, CallDecision, Chain, DEFAULT_CHAIN_LIMIT, DriftTracker, Exchange,
    Prepared, Request, RunId, RunOutput, Tool,
};
use skein_store::{ConversationRecord, Store, StoreError};
use std::collections::HashSet;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};

/// Inspects, changes or cancels each tool call before it runs.
pub type BeforeCallHook =
    Arc<dyn for<'a> Fn(&'a ToolCall) -> BoxFuture<'a, CallDecision> + Send + Sync>;
/// Sees each tool call and its result.
pub type AfterCallHook =
    Arc<dyn for<'a> Fn(&'a ToolCall, &'a ToolResult) -> BoxFuture<'a, ()> + Send + Sync>;

/// Where a turn starts: a thread with its annotations, and the run that
/// produced its head (when known), which the turn continues.
#[derive(Clone, Debug, Default)]
pub(crate) struct Point {
    pub(crate) thread: Thread,
    pub(crate) annotations: Annotations,
    pub(crate) run: Option<RunId>,
}

impl Point {
    pub(crate) fn head(&self) -> Option<NodeId> {
        self.thread.head_id()
    }

    /// Where `run`'s reply left `thread` (the call's own history, or a
    /// chain's with its tool results): with the annotations `run` sent,
    /// continuing `run`.
    pub(crate) fn after(thread: Thread, run: &RunOutput) -> Point {
        Point {
            thread,
            annotations: captured(run).annotations().clone(),
            run: Some(run.run.clone()),
        }
    }

    /// A stored `thread`, continuing `last_run` (the newest run that
    /// produced its head).
    pub(crate) fn stored(thread: Thread, last_run: Option<RunRecord>) -> Point {
        Point {
            thread,
            annotations: last_run
                .as_ref()
                .map(|run| run.annotations.clone())
                .unwrap_or_default(),
            run: last_run.map(|run| run.id),
        }
    }
}

/// Where a finished turn landed.
enum Landed {
    /// The conversation it ran in moved forward to it.
    Here,
    /// A new branch, the conversation having moved on while it ran.
    Branched(Conversation),
    /// Nowhere: the conversation had moved on (its head is now this).
    Lost(Option<NodeId>),
}

/// The exchange a run captured (every turn-layer run captures one).
pub(crate) fn captured(run: &RunOutput) -> &Exchange {
    run.exchange
        .as_ref()
        .expect("the turn layer always captures")
}

/// A conversation: cheap to clone, every clone is the same conversation.
#[derive(Clone)]
pub struct Conversation {
    shared: Arc<Shared>,
}

struct Shared {
    id: ConversationId,
    name: Option<String>,
    model: Model,
    tools: Vec<Arc<dyn Tool>>,
    chain_limit: u32,
    store: Option<Store>,
    origin: Option<Origin>,
    hooks: Mutex<Hooks>,
    state: Mutex<State>,
}

#[derive(Clone, Default)]
struct Hooks {
    before: Option<BeforeCallHook>,
    after: Option<AfterCallHook>,
}

struct State {
    point: Point,
    /// Tool name to input-schema hash, across every call of the
    /// conversation.
    drift: DriftTracker,
    /// Whether the attached store holds the conversation yet.
    stored: bool,
    /// The runs of this conversation's turns made in memory, for
    /// [`Response::log`].
    runs: Vec<RunRecord>,
}

impl std::fmt::Debug for Conversation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conversation")
            .field("id", &self.shared.id)
            .field("name", &self.shared.name)
            .field("model", &self.shared.model)
            .field("head", &self.head())
            .finish_non_exhaustive()
    }
}

/// Builds a [`Conversation`].
#[must_use]
pub struct ConversationBuilder {
    model: Model,
    name: Option<String>,
    tools: Vec<Arc<dyn Tool>>,
    chain_limit: u32,
    hooks: Hooks,
    store: Option<Store>,
    start: Point,
    origin: Option<Origin>,
    stored: bool,
    drift: DriftTracker,
    /// The id to keep (a stored or copied conversation's); a fresh one
    /// otherwise.
    id: Option<ConversationId>,
}

impl ConversationBuilder {
    /// The name the stored conversation takes. One that reads as an id
    /// (4 to 64 hex digits) is refused by the store when the conversation
    /// is written; surfaces check it first with
    /// [`skein_store::check_conversation_name`], before any model runs.
    pub fn name(mut self, name: impl Into<String>) -> ConversationBuilder {
        self.name = Some(name.into());
        self
    }

    /// The tools every turn offers unless it says otherwise.
    pub fn tools(mut self, tools: impl IntoIterator<Item = Arc<dyn Tool>>) -> ConversationBuilder {
        self.tools = tools.into_iter().collect();
        self
    }

    pub fn tool(mut self, tool: Arc<dyn Tool>) -> ConversationBuilder {
        self.tools.push(tool);
        self
    }

    /// At most `limit` model calls per chain (at least one; the default is
    /// [`DEFAULT_CHAIN_LIMIT`]).
    pub fn chain_limit(mut self, limit: u32) -> ConversationBuilder {
        self.chain_limit = limit.max(1);
        self
    }

    pub fn before_call(
        mut self,
        hook: impl for<'a> Fn(&'a ToolCall) -> BoxFuture<'a, CallDecision> + Send + Sync + 'static,
    ) -> ConversationBuilder {
        self.hooks.before = Some(Arc::new(hook));
        self
    }

    pub fn after_call(
        mut self,
        hook: impl for<'a> Fn(&'a ToolCall, &'a ToolResult) -> BoxFuture<'a, ()> + Send + Sync + 'static,
    ) -> ConversationBuilder {
        self.hooks.after = Some(Arc::new(hook));
        self
    }

    /// Record every turn in `store`. The conversation is written there when
    /// its first turn succeeds.
    pub fn store(mut self, store: &Store) -> ConversationBuilder {
        self.store = Some(store.clone());
        self
    }

    pub fn build(self) -> Conversation {
        Conversation {
            shared: Arc::new(Shared {
                id: self.id.unwrap_or_else(ConversationId::random),
                name: self.name,
                model: self.model,
                tools: self.tools,
                chain_limit: self.chain_limit,
                store: self.store,
                origin: self.origin,
                hooks: Mutex::new(self.hooks),
                state: Mutex::new(State {
                    point: self.start,
                    drift: self.drift,
                    stored: self.stored,
                    runs: Vec::new(),
                }),
            }),
        }
    }
}

impl Conversation {
    pub fn builder(model: Model) -> ConversationBuilder {
        ConversationBuilder {
            model,
            name: None,
            tools: Vec::new(),
            chain_limit: DEFAULT_CHAIN_LIMIT,
            hooks: Hooks::default(),
            store: None,
            start: Point::default(),
            origin: None,
            stored: false,
            drift: DriftTracker::default(),
            id: None,
        }
    }

    /// Its id: the same in memory and in a store.
    pub fn id(&self) -> &ConversationId {
        &self.shared.id
    }

    pub fn name(&self) -> Option<&str> {
        self.shared.name.as_deref()
    }

    /// The default model.
    pub fn model(&self) -> &Model {
        &self.shared.model
    }

    /// The default tools.
    pub fn tools(&self) -> &[Arc<dyn Tool>] {
        &self.shared.tools
    }

    pub fn chain_limit(&self) -> u32 {
        self.shared.chain_limit
    }

    pub fn store(&self) -> Option<&Store> {
        self.shared.store.as_ref()
    }

    /// Where it was forked from, if it was.
    pub fn origin(&self) -> Option<&Origin> {
        self.shared.origin.as_ref()
    }

    /// The newest node, `None` before the first turn.
    pub fn head(&self) -> Option<NodeId> {
        self.state().point.head()
    }

    /// The whole history.
    pub fn thread(&self) -> Thread {
        self.state().point.thread.clone()
    }

    /// Whether the attached store holds the conversation yet.
    pub fn is_stored(&self) -> bool {
        self.shared.store.is_some() && self.state().stored
    }

    /// The same conversation (id, history, settings, hooks) with no store:
    /// its turns from here on are kept in memory only (`skein prompt
    /// --no-log`). `response.log` can still store them later.
    pub fn without_store(&self) -> Conversation {
        let mut builder = self.copy_settings(self.shared.model.clone());
        builder.id = Some(self.shared.id.clone());
        builder.name = self.shared.name.clone();
        builder.origin = self.shared.origin.clone();
        builder.hooks = self.hooks().clone();
        builder.start = self.state().point.clone();
        builder.build()
    }

    /// Set or replace the `before_call` hook (hooks are never stored).
    pub fn set_before_call(
        &self,
        hook: impl for<'a> Fn(&'a ToolCall) -> BoxFuture<'a, CallDecision> + Send + Sync + 'static,
    ) {
        self.hooks().before = Some(Arc::new(hook));
    }

    /// Set or replace the `after_call` hook (hooks are never stored).
    pub fn set_after_call(
        &self,
        hook: impl for<'a> Fn(&'a ToolCall, &'a ToolResult) -> BoxFuture<'a, ()> + Send + Sync + 'static,
    ) {
        self.hooks().after = Some(Arc::new(hook));
    }

    /// A prompt after the conversation's head: text, messages, or nothing
    /// new (see [`TurnInput`]).
    pub fn prompt(&self, input: impl Into<TurnInput>) -> Prompt {
        Prompt::new(self.clone(), None, input.into())
    }

    /// A tool loop after the conversation's head, with its tools and hooks
    /// (or the chain's own: [`ChainPrompt::before_call`]).
    pub fn chain(&self, input: impl Into<TurnInput>) -> ChainPrompt {
        self.prompt(input).chain()
    }

    /// Branch at the conversation's head.
    pub fn fork(&self) -> Fork {
        Fork::new(self.clone(), self.state().point.clone())
    }

    /// Branch before the first message: a new conversation with no history
    /// and this one's settings, whose origin names this conversation and no
    /// node (a thread's first message asked again, or edited).
    pub fn fork_from_start(&self) -> Fork {
        Fork::new(self.clone(), Point::default())
    }

    /// The stored `conversation` standing at `point` (its head, or, for a
    /// fork's source, nowhere: `up_to` then bounds what its calls offered
    /// to the fork's node's depth). Reads only its tool offers (and its
    /// origins'), never its runs.
    pub(crate) async fn stored(
        store: &Store,
        conversation: ConversationRecord,
        point: Point,
        up_to: Option<&Thread>,
        home: &Model,
        on_home: bool,
    ) -> Result<Conversation> {
        let drift = recorded_drift(store, &conversation, up_to.unwrap_or(&point.thread)).await?;
        let settings = &conversation.settings;
        let model = match on_home {
            true => home.clone(),
            false => crate::settings::model(&conversation, home)?,
        };
        let tools = crate::settings::tools(settings, &model, &conversation.id)?;
        let mut builder = Conversation::builder(model)
            .tools(tools)
            .chain_limit(
                conversation
                    .settings
                    .chain_limit
                    .unwrap_or(DEFAULT_CHAIN_LIMIT),
            )
            .store(store);
        builder.name = conversation.name.clone();
        builder.origin = conversation.origin.clone();
        builder.start = point;
        builder.stored = true;
        builder.drift = drift;
        builder.id = Some(conversation.id);
        Ok(builder.build())
    }

    /// A branch of this conversation at `at`: the same model, tools, chain
    /// limit and store; hooks only when `keep_hooks`.
    pub(crate) fn branch(
        &self,
        at: Point,
        name: Option<String>,
        model: Option<Model>,
        keep_hooks: bool,
        from: Option<ConversationId>,
    ) -> Conversation {
        let mut builder = self.copy_settings(model.unwrap_or_else(|| self.shared.model.clone()));
        builder.name = name;
        builder.store = self.shared.store.clone();
        builder.origin = Some(Origin {
            node: at.head(),
            conversation: from,
            rerun: None,
        });
        if keep_hooks {
            builder.hooks = self.hooks().clone();
        }
        builder.start = at;
        builder.build()
    }

    /// A builder with this conversation's tools, chain limit and drift
    /// record, on `model`.
    fn copy_settings(&self, model: Model) -> ConversationBuilder {
        let mut builder = Conversation::builder(model)
            .tools(self.shared.tools.clone())
            .chain_limit(self.shared.chain_limit);
        builder.drift = self.state().drift.clone();
        builder
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.shared
            .state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn hooks(&self) -> MutexGuard<'_, Hooks> {
        self.shared
            .hooks
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Where a turn from `from` runs: here when `from` is the head (or not
    /// given), otherwise on a new branch at `from` that keeps this
    /// conversation's settings and hooks (replying to an earlier response
    /// never moves a bookmark backwards).
    fn target(&self, from: Option<Point>) -> (Conversation, Point) {
        let current = self.state().point.clone();
        match from {
            Some(point) if point.head() != current.head() => (
                self.branch(
                    point.clone(),
                    None,
                    None,
                    true,
                    Some(self.shared.id.clone()),
                ),
                point,
            ),
            _ => (self.clone(), current),
        }
    }

    pub(crate) async fn send(&self, from: Option<Point>, input: TurnSpec) -> Result<Response> {
        let (conversation, from) = self.target(from);
        conversation.run_prompt(from, input).await
    }

    pub(crate) async fn send_chain(
        &self,
        from: Option<Point>,
        input: TurnSpec,
        hooks: ChainHooks,
    ) -> Result<ChainResponse> {
        let (conversation, from) = self.target(from);
        conversation.run_chain(from, input, hooks).await
    }

    /// The request a turn from `from` would send first, resolved and
    /// rendered by the engine, with nothing run or recorded.
    pub(crate) fn prepare_turn(&self, from: Option<Point>, input: &TurnSpec) -> Result<Prepared> {
        let (conversation, from) = self.target(from);
        let (model, tools) = conversation.model_and_tools(input);
        let specs: Vec<_> = tools.iter().map(|tool| tool.spec().clone()).collect();
        let request = conversation.request(&from, &model, input).tools(specs);
        Ok(model.engine().prepare(&request)?)
    }

    /// The request of a turn: the history, then the configured prompt's
    /// messages when the input names one, then an optional system message
    /// and the turn's own messages, with this turn's model and options.
    fn request(&self, from: &Point, model: &Model, input: &TurnSpec) -> Request {
        let mut request = match input.input.configured_prompt() {
            Some(prompt) => match prompt.version {
                Some(version) => Request::prompt_version(prompt.id.clone(), version),
                None => Request::prompt(prompt.id.clone()),
            },
            None => Request::default(),
        };
        for (name, value) in input.input.variables() {
            request = request.var(name.clone(), value.clone());
        }
        request = request.with_messages(
            input
                .system
                .iter()
                .map(|system| Message::system(system.clone())),
        );
        for appended in input.input.messages() {
            request =
                request.annotated_message(appended.message.clone(), appended.annotations.clone());
        }
        let mut request = request
            .history(from.thread.clone(), from.annotations.clone())
            .options(input.options.clone())
            .capture();
        if let Some(run) = &from.run {
            request = request.relation(Relation::ContinuationOf(run.clone()));
        }
        if let Some(token) = &input.cancel {
            request = request.cancel_with(token.clone());
        }
        if let Some(schema) = &input.schema {
            request = request.output_contract(schema.clone());
        }
        model.bind(request)
    }

    /// The turn's own model and tools, else the conversation's.
    fn model_and_tools(&self, input: &TurnSpec) -> (Model, Vec<Arc<dyn Tool>>) {
        (
            input
                .model
                .clone()
                .unwrap_or_else(|| self.shared.model.clone()),
            input
                .tools
                .clone()
                .unwrap_or_else(|| self.shared.tools.clone()),
        )
    }

    async fn run_prompt(&self, from: Point, mut input: TurnSpec) -> Result<Response> {
        let (model, tools) = self.model_and_tools(&input);
        let specs: Vec<_> = tools.iter().map(|tool| tool.spec().clone()).collect();
        let warnings = self.state().drift.check(&specs);
        let request = self.request(&from, &model, &input).tools(specs);
        let (request, sink) = streaming(request, input.on_text.take());
        let turn = self.turn_request(&model, request, &from, input.on_moved);
        let done = streamed(turn.call(), sink).await?;
        let output = done.output;
        let to = Point::after(captured(&output).thread().clone(), &output);
        let records = vec![output.record(Some(&self.shared.id))];
        match self.settle(&from, &to, records, done.landed, input.on_moved) {
            Landed::Here => Ok(Response::new(output, self.clone(), warnings)),
            Landed::Branched(branch) => Ok(Response::new(output, branch, warnings)),
            Landed::Lost(current) => Err(Error::HeadMoved {
                conversation: self.shared.id.clone(),
                current,
                response: Box::new(Response::new(output, self.clone(), warnings)),
            }),
        }
    }

    async fn run_chain(
        &self,
        from: Point,
        mut input: TurnSpec,
        own: ChainHooks,
    ) -> Result<ChainResponse> {
        let (model, tools) = self.model_and_tools(&input);
        let hooks = self.hooks().clone();
        let mut chain = Chain::new(tools)
            .limit(input.chain_limit.unwrap_or(self.shared.chain_limit))
            .drift(self.state().drift.clone());
        // The chain's own hook, else the conversation's, each on its own.
        let before = own.before.or_else(|| hooks.before.map(shared_before));
        let after = own.after.or_else(|| hooks.after.map(shared_after));
        if let Some(before) = before {
            chain = chain.before_call(before);
        }
        if let Some(after) = after {
            chain = chain.after_call(after);
        }
        let request = self.request(&from, &model, &input);
        let (request, sink) = streaming(request, input.on_text.take());
        let turn = self.turn_request(&model, request, &from, input.on_moved);
        let outcome = streamed(turn.tool_loop(&mut chain), sink).await;
        self.state().drift = chain.tracker().clone();
        let done = match outcome {
            Ok(done) => done,
            Err(TurnError::Loop(failed)) => {
                let FailedLoop {
                    error,
                    completed,
                    thread,
                    landed,
                    ..
                } = *failed;
                // The completed calls landed (the failed one's run with
                // them); the conversation stands where they end.
                if let (Some(thread), Some(last)) = (thread, completed.last()) {
                    let to = Point::after(thread, last);
                    let records = self.records(&completed);
                    self.settle(&from, &to, records, landed, input.on_moved);
                }
                return Err(Error::ChainFailed {
                    error,
                    completed: completed.len(),
                });
            }
            Err(other) => return Err(other.into()),
        };
        let output = done.output;
        let to = Point::after(output.thread.clone(), output.last());
        let records = self.records(&output.responses);
        match self.settle(&from, &to, records, done.landed, input.on_moved) {
            Landed::Here => Ok(ChainResponse::new(output, self.clone())),
            Landed::Branched(branch) => Ok(ChainResponse::new(output, branch)),
            Landed::Lost(current) => Err(Error::HeadMoved {
                conversation: self.shared.id.clone(),
                current,
                response: Box::new(ChainResponse::new(output, self.clone()).last().clone()),
            }),
        }
    }

    /// The turn service's request for a turn of this conversation from
    /// `from`: recorded in its store (created there by its first turn),
    /// when it has one.
    fn turn_request(
        &self,
        model: &Model,
        request: Request,
        from: &Point,
        on_moved: OnMoved,
    ) -> TurnRequest {
        let turn = TurnRequest::new(model.engine(), request);
        match &self.shared.store {
            Some(store) => turn.recorded(
                store,
                Landing::In {
                    conversation: self.bookmark(),
                    from: from.head(),
                    on_moved,
                },
            ),
            None => turn,
        }
    }

    /// The records of `outputs`, this conversation's.
    fn records(&self, outputs: &[RunOutput]) -> Vec<RunRecord> {
        outputs
            .iter()
            .map(|output| output.record(Some(&self.shared.id)))
            .collect()
    }

    /// Move the bookmark from `from` to `to` as the turn service `landed`
    /// it. Without a store the move is made here, in memory, by the same
    /// rule: when the head had moved, `on_moved` says whether the turn is
    /// lost or lands in a new branch at `from`.
    fn settle(
        &self,
        from: &Point,
        to: &Point,
        records: Vec<RunRecord>,
        landed: service::Landed,
        on_moved: OnMoved,
    ) -> Landed {
        match landed {
            service::Landed::In(_) => {
                let mut state = self.state();
                state.stored = true;
                state.point = to.clone();
                state.runs.extend(records);
                Landed::Here
            }
            service::Landed::Branched { conversation, .. } => {
                Landed::Branched(self.race_branch(conversation, from, to, records))
            }
            service::Landed::Joined(record) => Landed::Branched(self.joined(*record, to, records)),
            service::Landed::Lost { current } => Landed::Lost(current),
            service::Landed::Unrecorded | service::Landed::Kept => {
                let mut state = self.state();
                if state.point.head() == from.head() {
                    state.point = to.clone();
                    state.runs.extend(records);
                    return Landed::Here;
                }
                let current = state.point.head();
                drop(state);
                match on_moved {
                    OnMoved::Fail => Landed::Lost(current),
                    OnMoved::Branch => Landed::Branched(self.race_branch(
                        ConversationId::random(),
                        from,
                        to,
                        records,
                    )),
                }
            }
        }
    }

    /// The conversation `id` a turn from `from` to `to` landed in when this
    /// one had moved on: this one's settings and hooks, its origin this
    /// conversation at `from` (as the store records it), already at `to`.
    fn race_branch(
        &self,
        id: ConversationId,
        from: &Point,
        to: &Point,
        mut records: Vec<RunRecord>,
    ) -> Conversation {
        let mut builder = self.copy_settings(self.shared.model.clone());
        builder.id = Some(id.clone());
        builder.store = self.shared.store.clone();
        builder.stored = self.shared.store.is_some();
        builder.origin = Some(Origin {
            node: from.head(),
            conversation: Some(self.shared.id.clone()),
            rerun: None,
        });
        builder.hooks = self.hooks().clone();
        builder.start = to.clone();
        let branch = builder.build();
        for record in &mut records {
            record.conversation = Some(id.clone());
        }
        branch.state().runs.extend(records);
        branch
    }

    /// The stored conversation `record` a new branch's turn joined instead
    /// of branching from it (the reply was its head already): this one's
    /// settings and hooks, `record`'s identity, at `to`.
    fn joined(
        &self,
        record: ConversationRecord,
        to: &Point,
        mut records: Vec<RunRecord>,
    ) -> Conversation {
        let mut builder = self.copy_settings(self.shared.model.clone());
        builder.id = Some(record.id.clone());
        builder.name = record.name;
        builder.store = self.shared.store.clone();
        builder.stored = true;
        builder.origin = record.origin;
        builder.hooks = self.hooks().clone();
        builder.start = to.clone();
        let joined = builder.build();
        for run in &mut records {
            run.conversation = Some(record.id.clone());
        }
        joined.state().runs.extend(records);
        joined
    }

    /// Write the conversation to its store now, at its current head.
    pub(crate) async fn persist_now(&self) -> Result<()> {
        let Some(store) = self.shared.store.clone() else {
            return Ok(());
        };
        let (stored, thread) = {
            let state = self.state();
            (state.stored, state.point.thread.clone())
        };
        if stored {
            return Ok(());
        }
        commit::create(&store, &self.bookmark(), thread).await?;
        self.state().stored = true;
        Ok(())
    }

    /// The conversation as its turns' writes see it.
    pub(crate) fn bookmark(&self) -> Bookmark {
        Bookmark {
            id: self.shared.id.clone(),
            stored: self.state().stored,
            name: self.shared.name.clone(),
            origin: self.shared.origin.clone(),
            settings: self.settings(),
        }
    }

    /// What a store keeps of the conversation's settings: never hooks,
    /// never credentials.
    pub fn settings(&self) -> ConversationSettings {
        let model = &self.shared.model;
        ConversationSettings {
            model: Some(model.name().to_string()),
            profile: (!model.is_opened_by_name()).then(|| model.profile().to_string()),
            tools: self
                .shared
                .tools
                .iter()
                .map(|tool| tool.spec().name.clone())
                .collect(),
            chain_limit: Some(self.shared.chain_limit),
            ..ConversationSettings::default()
        }
    }

    /// Store the conversation up to its head in `store` (its bookmark
    /// created, or moved forward), with the runs made in memory that
    /// produced its messages; nodes already there are shared. What
    /// [`Response::log`] does for the head's response, for a conversation
    /// whose responses are gone (the Python package's `conversation.log`).
    /// Returns the conversation's id.
    pub async fn log(&self, store: &Store) -> Result<ConversationId> {
        let head = self.state().point.clone();
        self.log_at(store, &head).await
    }

    /// [`Conversation::log`], blocking.
    pub fn log_blocking(&self, store: &Store) -> Result<ConversationId> {
        crate::blocking::wait(self.log(store))
    }

    /// Store the thread ending at `at` in `store` as this conversation (its
    /// bookmark created, or moved forward), with the runs made in memory
    /// that produced its nodes. Nodes already there are shared.
    pub(crate) async fn log_at(&self, store: &Store, at: &Point) -> Result<ConversationId> {
        let nodes: HashSet<NodeId> = at
            .thread
            .nodes()
            .into_iter()
            .map(|node| node.id())
            .collect();
        let runs: Vec<RunRecord> = self
            .state()
            .runs
            .iter()
            .filter(|run| run.output_head.is_some_and(|head| nodes.contains(&head)))
            .cloned()
            .collect();
        commit::log(store, self.bookmark(), at.thread.clone(), runs).await?;
        Ok(self.shared.id.clone())
    }
}

/// What a stored conversation's calls offered, for drift detection, as
/// `thread` (its history, or the part of it a fork starts from) holds them:
/// its tool offers up to the thread's head and those of the conversations it
/// was forked from, each up to its fork, applied oldest first. Reads one
/// row per change of a tool's schema, never the runs.
async fn recorded_drift(
    store: &Store,
    conversation: &ConversationRecord,
    thread: &Thread,
) -> skein_store::Result<DriftTracker> {
    let api = store.nonblocking();
    let depth_of = |node: Option<NodeId>| {
        node.and_then(|node| thread.ancestors().find(|held| held.id() == node))
            .map(|held| held.depth())
    };
    let mut bound = thread.head().map(|head| head.depth());
    let mut levels = Vec::new();
    let mut visited = HashSet::new();
    let mut next = Some((conversation.id.clone(), conversation.origin.clone()));
    while let Some((id, origin)) = next.take() {
        if !visited.insert(id.clone()) {
            break;
        }
        levels.push(api.tool_offers(&id, bound).await?);
        let Some(origin) = origin else { break };
        bound = match (bound, depth_of(origin.node)) {
            (Some(bound), Some(fork)) => Some(bound.min(fork)),
            (bound, fork) => bound.or(fork),
        };
        next = match origin.conversation {
            Some(parent) => match api.conversation(&parent).await {
                Ok(parent) => Some((parent.id, parent.origin)),
                // An origin the store does not hold (a partial import)
                // ends the walk; it has nothing to learn from.
                Err(StoreError::ConversationNotFound(_)) => None,
                Err(error) => return Err(error),
            },
            None => None,
        };
    }
    let mut drift = DriftTracker::default();
    for offer in levels.into_iter().rev().flatten() {
        drift.remember_schema(offer.name, offer.schema);
    }
    Ok(drift)
}

/// A conversation's `before_call` as one chain's hook.
fn shared_before(hook: BeforeCallHook) -> BeforeCall {
    Box::new(move |call| hook(call))
}

/// A conversation's `after_call` as one chain's hook.
fn shared_after(hook: AfterCallHook) -> AfterCall {
    Box::new(move |call, result| hook(call, result))
}

/// The request with a text channel when a sink wants the stream.
fn streaming(
    request: Request,
    sink: Option<TextSink>,
) -> (
    Request,
    Option<(TextSink, tokio::sync::mpsc::UnboundedReceiver<String>)>,
) {
    match sink {
        None => (request, None),
        Some(sink) => {
            let (sender, receiver) = tokio::sync::mpsc::unbounded_channel();
            (request.text_channel(sender), Some((sink, receiver)))
        }
    }
}

/// Drive `work`, handing streamed text to the sink as it arrives. The
/// channel closes when `work` drops its request.
async fn streamed<T>(
    work: impl Future<Output = T>,
    sink: Option<(TextSink, tokio::sync::mpsc::UnboundedReceiver<String>)>,
) -> T {
    let Some((mut sink, mut receiver)) = sink else {
        return work.await;
    };
    let drain = async move {
        while let Some(text) = receiver.recv().await {
            sink(&text);
        }
    };
    join(work, drain).await.0
}
