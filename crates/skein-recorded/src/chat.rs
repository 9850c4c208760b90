/*!
`RecordedChat`: a conversation recorded turn by turn, and its builder.

`send` renders the turn's request (system text, sources as tagged parts,
the native history, the user message) and asks the turn layer's turn
service to run it through the tool loop and record it, as a whole turn;
then it freezes the turn's evidence. Sends take `&mut self`, so two sends
on one chat can never overlap: the compiler rejects it. A turn that fails,
pauses or hits the chain limit records no turn, in memory or in the store;
its model calls are kept for usage (a failed call's request and failed run,
as the failure rule keeps them, and the calls completed before), marked so
that no load takes them for a turn.

With a store attached, the chat is a conversation: each turn commits its
nodes, its runs and the bookmark move in one transaction. When another
writer (a second process resuming the same conversation) moved the head
while the turn ran, the turn lands in a branch there, by the landing rule,
and the chat goes on in that branch (its id is the branch's). The chat can
be loaded again from the conversation's id: whole, one turn alone, or
resumed to continue ([`persist`](crate::persist)). A chat holds the
evidence of the turns it was loaded with or sent (`Holds`); for the others
`turn(k)` is an error naming the way to load them.
*/

use crate::embed::Embedder;
use crate::error::{RecordedError, Result};
use crate::evidence::Turn;
use crate::layout::{Layout, tag_tool_parts};
use crate::persist::{Loaded, LoadedTurn, TurnAt};
use crate::reason::Report;
use crate::source::{
    Ablation, HookContext, Purpose, Source, SourceHook, SourceInfo, SourceKind, tagged_kind,
};
use skein_conversation::Bookmark;
use skein_conversation::service::{self, FailedLoop, Landed, Landing, TurnError, TurnRequest};
use skein_core::provider::GenerationOptions;
use skein_core::{
    Annotation, Annotations, BoxFuture, ConversationId, ConversationSettings, Message, NodeId,
    Origin, Part, RecordedSettings, Relation, RerunId, Role, RunRecord, StoredSource, Thread,
    ToolCall, TurnStep, Usage,
};
use skein_engine::{CallDecision, Chain, ChainOutput, ChainStatus, Engine, Tool};
use skein_store::Store;
use std::collections::HashMap;
use std::sync::Arc;

/// Decides each tool call of a turn's tool loop; `CallDecision::Stop`
/// pauses the loop, which a recorded turn refuses.
pub type BeforeCallFn =
    Arc<dyn for<'a> Fn(&'a ToolCall) -> BoxFuture<'a, CallDecision> + Send + Sync>;

/// What every turn, probe and fork of a chat shares.
#[derive(Clone)]
pub(crate) struct Config {
    pub(crate) engine: Engine,
    pub(crate) profile: String,
    pub(crate) model: Option<String>,
    pub(crate) system: Option<String>,
    pub(crate) sources: Vec<Source>,
    pub(crate) tools: Vec<Arc<dyn Tool>>,
    pub(crate) hook: Option<Arc<dyn SourceHook>>,
    pub(crate) before_call: Option<BeforeCallFn>,
    pub(crate) chain_limit: u32,
    pub(crate) options: GenerationOptions,
    pub(crate) store: Option<Store>,
    pub(crate) embedder: Option<Arc<dyn Embedder>>,
    /// The model a stored conversation names (else the profile), and
    /// whether it names a configured profile (else a model opened by name).
    pub(crate) model_name: Option<(String, bool)>,
}

/// What a rerun left behind for provenance checks.
#[derive(Clone, Debug)]
pub(crate) struct Stamp {
    pub(crate) turn: usize,
    pub(crate) answer_head: NodeId,
    /// The sources the rerun removed, sorted.
    pub(crate) removed: Vec<String>,
}

/// A chat whose every turn can be explained, re-run without chosen
/// sources, and forked.
///
/// Two sends on one chat cannot overlap: `send` borrows the chat mutably
/// until its turn is recorded, so this does not compile.
///
/// ```compile_fail,E0499
/// # async fn overlap(chat: &mut skein_recorded::RecordedChat) {
/// let first = chat.send("one");
/// let second = chat.send("two");
/// let _ = futures_util::future::join(first, second).await;
/// # }
/// ```
///
/// Sent one after the other, they are fine:
///
/// ```
/// # async fn sequential(chat: &mut skein_recorded::RecordedChat) -> skein_recorded::Result<()> {
/// chat.send("one").await?;
/// chat.send("two").await?;
/// # Ok(()) }
/// ```
pub struct RecordedChat {
    pub(crate) config: Arc<Config>,
    /// The chat's conversation: its id is the chat's identity, stored or
    /// not; with a store, the first turn creates it there.
    pub(crate) bookmark: Bookmark,
    pub(crate) removed: Ablation,
    pub(crate) history: Thread,
    /// The evidence of the turns it holds, in order ([`Holds`] says which).
    pub(crate) turns: Vec<Arc<Turn>>,
    pub(crate) holds: Holds,
    pub(crate) reports: HashMap<usize, Arc<Report>>,
    pub(crate) reruns: HashMap<RerunId, Stamp>,
}

impl std::fmt::Debug for RecordedChat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecordedChat")
            .field("id", self.bookmark.id())
            .field("turns", &self.turns.len())
            .field("removed", &self.removed)
            .finish_non_exhaustive()
    }
}

/// Which turns of its conversation a chat holds the evidence of; `turn`
/// answers for the others without building them.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Holds {
    /// Every turn: a chat built here, or loaded whole.
    All,
    /// One stored turn alone (a [`LoadedTurn`](crate::LoadedTurn)'s chat).
    One(Loaded),
    /// The turns sent since it was resumed after its `stored` stored turns
    /// ([`RecordedChatBuilder::resume`]).
    SentSince { stored: usize },
}

/// Builds a [`RecordedChat`].
pub struct RecordedChatBuilder {
    config: Config,
    name: Option<String>,
    seed: Option<Thread>,
    removed: Ablation,
}

impl RecordedChatBuilder {
    /// The system text, the first part of the system message.
    pub fn system(mut self, text: impl Into<String>) -> Self {
        self.config.system = Some(text.into());
        self
    }

    /// Declare a source, rendered on every turn as one tagged part of the
    /// system message (in declaration order, after the system text).
    pub fn source(mut self, source: Source) -> Self {
        self.config.sources.push(source);
        self
    }

    pub fn sources(mut self, sources: impl IntoIterator<Item = Source>) -> Self {
        self.config.sources.extend(sources);
        self
    }

    /// Offer a tool; it is a source named by the tool's name.
    pub fn tool(mut self, tool: Arc<dyn Tool>) -> Self {
        self.config.tools.push(tool);
        self
    }

    /// The hook for sources only the application can render; called for
    /// live turns, probes, baselines and fork turns alike.
    pub fn hook(mut self, hook: Arc<dyn SourceHook>) -> Self {
        self.config.hook = Some(hook);
        self
    }

    /// Decide each tool call before it runs (stopping pauses the turn,
    /// which records nothing).
    pub fn before_call(mut self, hook: BeforeCallFn) -> Self {
        self.config.before_call = Some(hook);
        self
    }

    /// At most `limit` model calls per turn (default 10).
    pub fn chain_limit(mut self, limit: u32) -> Self {
        self.config.chain_limit = limit.max(1);
        self
    }

    /// Generation options laid over the profile's.
    pub fn options(mut self, options: GenerationOptions) -> Self {
        self.config.options = options;
        self
    }

    /// Use this model instead of the profile's.
    pub fn model(mut self, model: impl Into<String>) -> Self {
        self.config.model = Some(model.into());
        self
    }

    /// Persist turns, reruns and forks in `store`.
    pub fn store(mut self, store: Store) -> Self {
        self.config.store = Some(store);
        self
    }

    /// The embedder `reason` and the default rerun comparator use when
    /// their options name none.
    pub fn embedder(mut self, embedder: Arc<dyn Embedder>) -> Self {
        self.config.embedder = Some(embedder);
        self
    }

    /// The stored conversation's name (refused by the store when it reads
    /// as an id: see `skein_store::check_conversation_name`).
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Start from an existing history (rehydration by hand). Its system
    /// message, if any, is replaced on each turn by the chat's own; its
    /// authenticity is the caller's responsibility.
    pub fn seed(mut self, history: Thread) -> Self {
        self.seed = Some(history);
        self
    }

    /// Sources removed from every turn and probe of the chat.
    pub fn removed(mut self, ids: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.removed.extend(ids.into_iter().map(Into::into));
        self
    }

    /// The model a stored conversation names, and whether it is a
    /// configured profile's name (else a model opened by name, such as
    /// `echo` or `openai:gpt-4o-mini`). Without it the conversation names
    /// the profile.
    pub fn remember_model(mut self, name: impl Into<String>, is_profile: bool) -> Self {
        self.config.model_name = Some((name.into(), is_profile));
        self
    }

    /// Build the chat. With a store, its conversation is created there by
    /// its first turn, in the same transaction.
    pub async fn build(self) -> Result<RecordedChat> {
        let history = self.seed.unwrap_or_default();
        let config = Arc::new(self.config);
        RecordedChat::create(config, history, self.removed, self.name, None, false).await
    }

    /// Load the recorded chat stored as `conversation` (this builder must
    /// carry a store and the same engine, sources, tools and hook): its
    /// history and every turn's evidence, at a cost in proportion to the
    /// chat; a damaged turn fails the load. To explain, re-run or fork one
    /// turn, [`load_turn`](Self::load_turn); to go on with the chat,
    /// [`resume`](Self::resume).
    pub async fn load(self, conversation: &ConversationId) -> Result<RecordedChat> {
        crate::persist::load(Arc::new(self.config), conversation).await
    }

    /// Resume the recorded chat stored as `conversation` to continue it
    /// (this builder must carry a store and the same engine, sources,
    /// tools and hook): its history, layout, removals and turn count, at
    /// the cost of one history load and the conversation's run records,
    /// whatever the chat's length. It holds the evidence of the turns sent
    /// from now on; its stored turns are not built (a damaged one does not
    /// stop the chat going on), and `turn(k)` of one is
    /// [`RecordedError::TurnBeforeResume`]. Each turn sent is what `send`
    /// on the whole loaded chat records.
    pub async fn resume(self, conversation: &ConversationId) -> Result<RecordedChat> {
        crate::persist::resume(Arc::new(self.config), conversation).await
    }

    /// Load one recorded turn of a stored chat, alone: at the cost of that
    /// turn (its two threads), whatever the chat's length. Its operations
    /// give what the same operations on the whole loaded chat give.
    pub async fn load_turn(self, at: TurnAt) -> Result<LoadedTurn> {
        crate::persist::load_turn(Arc::new(self.config), at).await
    }

    /// [`load_turn`](Self::load_turn) of a turn of conversation `id`,
    /// which the caller has already resolved.
    pub(crate) async fn load_turn_in(self, id: ConversationId, at: TurnAt) -> Result<LoadedTurn> {
        crate::persist::load_turn_in(Arc::new(self.config), id, at).await
    }
}

impl RecordedChat {
    /// A builder running turns on `engine` with `profile`.
    pub fn builder(engine: Engine, profile: impl Into<String>) -> RecordedChatBuilder {
        RecordedChatBuilder {
            config: Config {
                engine,
                profile: profile.into(),
                model: None,
                system: None,
                sources: Vec::new(),
                tools: Vec::new(),
                hook: None,
                before_call: None,
                chain_limit: skein_engine::DEFAULT_CHAIN_LIMIT,
                options: GenerationOptions::default(),
                store: None,
                embedder: None,
                model_name: None,
            },
            name: None,
            seed: None,
            removed: Ablation::new(),
        }
    }

    /// A builder running turns on `model` (a profile, or a model opened by
    /// name, with its own model name when it overrides the profile's),
    /// whose conversation remembers the model so that later turns from any
    /// surface go on with it, as with any conversation the turn layer
    /// records.
    pub fn on_model(model: &skein_conversation::Model) -> RecordedChatBuilder {
        let builder = RecordedChat::builder(model.engine().clone(), model.profile())
            .remember_model(model.name(), !model.is_opened_by_name());
        match model.model_override() {
            Some(name) => builder.model(name),
            None => builder,
        }
    }

    /// A chat over `history`. With a store, its conversation is created
    /// now when `persist` (a fork, which exists before its first turn),
    /// else by its first turn.
    pub(crate) async fn create(
        config: Arc<Config>,
        history: Thread,
        removed: Ablation,
        name: Option<String>,
        origin: Option<Origin>,
        persist: bool,
    ) -> Result<RecordedChat> {
        let now = config
            .store
            .as_ref()
            .filter(|_| persist)
            .map(|store| (store, history.clone()));
        let bookmark =
            service::new_conversation(name, origin, config.settings(&removed), now).await?;
        Ok(RecordedChat {
            config,
            bookmark,
            removed,
            history,
            turns: Vec::new(),
            holds: Holds::All,
            reports: HashMap::new(),
            reruns: HashMap::new(),
        })
    }

    /// The chat's identity: its conversation's id (stored or not). Rerun
    /// results carry it.
    pub fn id(&self) -> &str {
        self.bookmark.id().as_str()
    }

    /// The conversation, when a store is attached (created there by the
    /// first turn, or at once for a fork).
    pub fn conversation(&self) -> Option<&ConversationId> {
        self.config.store.as_ref().map(|_| self.bookmark.id())
    }

    /// Where a fork came from.
    pub fn origin(&self) -> Option<&Origin> {
        self.bookmark.origin()
    }

    /// Sources removed from every turn and probe of this chat.
    pub fn removed(&self) -> &Ablation {
        &self.removed
    }

    /// The history after the last turn (or the seed).
    pub fn history(&self) -> &Thread {
        &self.history
    }

    /// The recorded turns, numbered from 0 ([`Turn::index`]). A chat
    /// [resumed](RecordedChatBuilder::resume) to continue holds only the
    /// turns sent since, numbered after its stored ones.
    pub fn turns(&self) -> &[Arc<Turn>] {
        &self.turns
    }

    /// How many turns the chat has, stored and sent, held or not.
    pub(crate) fn turn_count(&self) -> usize {
        match self.holds {
            Holds::All => self.turns.len(),
            Holds::One(at) => at.turns,
            Holds::SentSince { stored } => stored + self.turns.len(),
        }
    }

    /// Turn `k`'s evidence.
    pub fn turn(&self, k: usize) -> Result<&Arc<Turn>> {
        let held = match self.holds {
            Holds::All => self.turns.get(k),
            Holds::One(at) if k == at.turn => self.turns.first(),
            Holds::One(at) if k < at.turns => {
                return Err(RecordedError::TurnNotLoaded {
                    turn: k,
                    loaded: at.turn,
                });
            }
            Holds::SentSince { stored } if k < stored => {
                return Err(RecordedError::TurnBeforeResume { turn: k, stored });
            }
            Holds::SentSince { stored } => self.turns.get(k - stored),
            Holds::One(_) => None,
        };
        held.ok_or(RecordedError::TurnOutOfRange {
            turn: k,
            turns: self.turn_count(),
        })
    }

    /// The number of the turn whose final reply is `node`, among the turns
    /// the chat holds.
    pub fn turn_of_node(&self, node: NodeId) -> Result<usize> {
        self.turns
            .iter()
            .find(|turn| turn.node() == node)
            .map(|turn| turn.index())
            .ok_or(RecordedError::NotATurn(node))
    }

    /// Run one turn and freeze its evidence. Failed, paused and unfinished
    /// turns record no turn (their model calls are kept for usage, marked
    /// [`Relation::Unrecorded`]).
    pub async fn send(&mut self, text: impl Into<String>) -> Result<&Arc<Turn>> {
        let text = text.into();
        let index = self.turn_count();
        let hooked = self
            .hook_sources(index, &text, &self.removed, Purpose::Live)
            .await?;
        let layout = self.live_layout(&text, &hooked);
        let mut sources: Vec<SourceInfo> = Vec::new();
        for source in self
            .config
            .sources
            .iter()
            .filter(|s| !self.removed.contains(&s.id))
        {
            push_source(&mut sources, &source.id, source.kind, false);
        }
        for source in &hooked {
            push_source(&mut sources, &source.id, source.kind, true);
        }
        let (mut chain, turn) = self.config.turn(
            &layout,
            |name| !self.removed.contains(name),
            self.config.options.clone(),
            |request| {
                sources.iter().fold(request, |request, source| {
                    request.relation(Relation::Source(
                        serde_json::to_string(source).expect("plain data"),
                    ))
                })
            },
        );
        let turn = match &self.config.store {
            Some(store) => turn
                .recorded(
                    store,
                    Landing::extend(self.bookmark.clone(), self.history.head_id()),
                )
                .mark(Arc::new(move |step, record| {
                    record.turn = step.map(|step| TurnStep {
                        turn: index as u32,
                        step: step as u32,
                    });
                })),
            None => turn,
        };
        let done = turn
            .tool_loop(&mut chain)
            .await
            .map_err(|error| LoopFailure::from(error).error)?;
        let output = self
            .config
            .completed(done.output, index)
            .map_err(|failure| failure.error)?;
        self.follow(&done.landed);
        let first = &output.responses[0];
        let tools = first.tools.clone();
        for tool in &tools {
            push_source(&mut sources, &tool.name, SourceKind::Tool, false);
        }
        let request = first.prepared.thread.clone();
        let annotations = first.prepared.annotations.clone();
        let known: HashMap<String, SourceKind> = self
            .config
            .sources
            .iter()
            .map(|source| (source.id.clone(), source.kind))
            .collect();
        for (_, tags) in annotations.iter() {
            for tag in tags {
                if let Annotation::Source(id) = tag {
                    let kind = tagged_kind(id, &known, &request);
                    push_source(&mut sources, id, kind, false);
                }
            }
        }
        let turn = Turn {
            index,
            user_text: text,
            request,
            annotations,
            tools,
            sources,
            removed: self.removed.clone(),
            thread: output.thread.clone(),
            runs: output.responses.iter().map(|r| r.run.clone()).collect(),
            events: output
                .responses
                .iter()
                .flat_map(|r| r.events.clone())
                .collect(),
            usage: output
                .responses
                .iter()
                .fold(Usage::default(), |sum, r| sum.add(&r.usage)),
        };
        self.history = output.thread;
        self.turns.push(Arc::new(turn));
        Ok(self.turns.last().expect("just pushed"))
    }

    /// Stand where the turn service `landed` the chat's turn: in its
    /// conversation (now stored), or, when another writer moved it on
    /// while the turn ran, in the branch the turn became.
    fn follow(&mut self, landed: &Landed) {
        self.bookmark.follow(landed, self.history.head_id());
    }

    /// Keep the model calls of a rerun that records nothing
    /// ([`service::keep_unrecorded`], as the failure rule keeps a failed call): the
    /// messages they sent and received and their runs, marked
    /// [`Relation::Unrecorded`], in the chat's conversation when the store
    /// holds it; nothing moves. Usage counts them; no load sees a turn.
    pub(crate) async fn keep_unrecorded(&self, kept: Option<Unrecorded>) {
        let (Some(store), Some(kept)) = (&self.config.store, kept) else {
            return;
        };
        let kept_runs = service::keep_unrecorded(
            store,
            Some(&self.bookmark),
            &kept.thread,
            kept.runs,
            kept.why,
        );
        if let Err(error) = kept_runs.await {
            tracing::warn!("cannot keep the runs of an unrecorded turn: {error}");
        }
    }

    /// The hook's sources for one call, minus anything removed.
    pub(crate) async fn hook_sources(
        &self,
        turn: usize,
        user_text: &str,
        ablation: &Ablation,
        purpose: Purpose,
    ) -> Result<Vec<Source>> {
        let Some(hook) = &self.config.hook else {
            return Ok(Vec::new());
        };
        let sources = hook
            .sources(HookContext {
                ablation,
                user_text,
                turn,
                purpose,
            })
            .await
            .map_err(|error| RecordedError::Hook { turn, error })?;
        Ok(sources
            .into_iter()
            .filter(|source| !ablation.contains(&source.id))
            .collect())
    }

    /// A live turn's request: the system message (text, static sources,
    /// hook sources), the history without its system message, the user
    /// message.
    fn live_layout(&self, text: &str, hooked: &[Source]) -> Layout {
        // A chat that declares no system text and no sources (one loaded
        // from a conversation recorded without a layout) keeps the system
        // message its history has.
        let renders_system =
            self.config.system.is_some() || !self.config.sources.is_empty() || !hooked.is_empty();
        let mut layout = Layout::default();
        if let Some(system) = &self.config.system {
            layout.push(Message::new(Role::System, vec![Part::text(system.clone())]));
        }
        let parts = self
            .config
            .sources
            .iter()
            .chain(hooked)
            .filter(|source| !self.removed.contains(&source.id))
            .map(|source| (source.id.clone(), source.text.clone()))
            .collect();
        layout.append_to_system(parts);
        let mut tags = Annotations::new();
        tag_tool_parts(&self.history, &mut tags);
        let mut history = Layout::of(&self.history, &tags);
        if renders_system
            && history
                .entries
                .first()
                .is_some_and(|entry| entry.message.role == Role::System)
        {
            history.entries.remove(0);
        }
        history.remove(&self.removed);
        layout.entries.extend(history.entries);
        layout.push(Message::user(text));
        layout
    }
}

fn push_source(sources: &mut Vec<SourceInfo>, id: &str, kind: SourceKind, hook: bool) {
    if !sources.iter().any(|s| s.id == id) {
        sources.push(SourceInfo {
            id: id.to_string(),
            kind,
            hook,
        });
    }
}

/// A turn's tool loop that did not complete, and the model calls it made.
pub(crate) struct LoopFailure {
    pub(crate) error: RecordedError,
    pub(crate) kept: Option<Unrecorded>,
}

impl From<RecordedError> for LoopFailure {
    fn from(error: RecordedError) -> LoopFailure {
        LoopFailure { error, kept: None }
    }
}

/// Model calls a recorded chat made but records no turn or rerun for: the
/// thread their records name (requests and replies) and the records.
pub(crate) struct Unrecorded {
    pub(crate) thread: Thread,
    pub(crate) runs: Vec<RunRecord>,
    /// Why nothing was recorded: the target of [`Relation::Unrecorded`].
    pub(crate) why: &'static str,
}

impl Config {
    /// What the chat's conversation stores: its layout, its removals and
    /// its model.
    pub(crate) fn settings(&self, removed: &Ablation) -> ConversationSettings {
        let (model, profile) = match &self.model_name {
            Some((name, true)) => (Some(name.clone()), Some(self.profile.clone())),
            Some((name, false)) => (Some(name.clone()), None),
            None => (self.model.clone(), Some(self.profile.clone())),
        };
        ConversationSettings {
            model,
            profile,
            chain_limit: Some(self.chain_limit),
            recorded: Some(RecordedSettings {
                removed: removed.iter().cloned().collect(),
                system: self.system.clone(),
                sources: self
                    .sources
                    .iter()
                    .map(|source| StoredSource {
                        id: source.id.clone(),
                        kind: source.kind.as_str().to_string(),
                        text: source.text.clone(),
                    })
                    .collect(),
            }),
            ..ConversationSettings::default()
        }
    }

    /// The tool loop for `layout`, offering the tools `offer` accepts (by
    /// name), and the turn service's request for it: whole, since a
    /// recorded turn's evidence is all or nothing.
    pub(crate) fn turn(
        &self,
        layout: &Layout,
        offer: impl Fn(&str) -> bool,
        options: GenerationOptions,
        decorate: impl FnOnce(skein_engine::Request) -> skein_engine::Request,
    ) -> (Chain, TurnRequest) {
        let tools: Vec<Arc<dyn Tool>> = self
            .tools
            .iter()
            .filter(|tool| offer(&tool.spec().name))
            .cloned()
            .collect();
        let mut chain = Chain::new(tools).limit(self.chain_limit);
        if let Some(hook) = &self.before_call {
            let hook = hook.clone();
            chain = chain.before_call(Box::new(move |call| hook(call)));
        }
        let mut request = layout
            .request()
            .profile(self.profile.clone())
            .options(options);
        if let Some(model) = &self.model {
            request = request.model(model.clone());
        }
        (
            chain,
            TurnRequest::new(&self.engine, decorate(request)).whole(),
        )
    }

    /// Run `layout` through the tool loop, recording nothing: the caller
    /// records what it ran (a rerun's sample). Paused, unfinished and
    /// failed loops are errors that carry their model calls.
    pub(crate) async fn run_unrecorded(
        &self,
        layout: &Layout,
        offer: impl Fn(&str) -> bool,
        options: GenerationOptions,
        turn: usize,
        decorate: impl FnOnce(skein_engine::Request) -> skein_engine::Request,
    ) -> std::result::Result<ChainOutput, LoopFailure> {
        let (mut chain, request) = self.turn(layout, offer, options, decorate);
        let done = request.tool_loop(&mut chain).await?;
        self.completed(done.output, turn)
            .map_err(|failure| *failure)
    }

    /// A loop that ran to its end, or, paused or stopped by its limit, the
    /// error a recorded turn is then, with its model calls.
    pub(crate) fn completed(
        &self,
        output: ChainOutput,
        turn: usize,
    ) -> std::result::Result<ChainOutput, Box<LoopFailure>> {
        let (why, error) = match output.status {
            ChainStatus::Completed => return Ok(output),
            ChainStatus::Stopped => ("paused", RecordedError::Paused { turn }),
            ChainStatus::LimitReached => (
                "chain_limit",
                RecordedError::ChainLimit {
                    turn,
                    limit: self.chain_limit,
                },
            ),
        };
        Err(Box::new(LoopFailure {
            error,
            kept: Some(Unrecorded {
                runs: output.responses.iter().map(|r| r.record(None)).collect(),
                thread: output.thread,
                why,
            }),
        }))
    }
}

impl From<TurnError> for LoopFailure {
    /// A tool loop that failed, keeping the calls it completed and the
    /// failed one (whose request holds what the completed ones said).
    fn from(error: TurnError) -> LoopFailure {
        let TurnError::Loop(failed) = error else {
            return LoopFailure::from(RecordedError::from(error));
        };
        let FailedLoop {
            error,
            completed,
            thread,
            failed,
            ..
        } = *failed;
        let mut runs: Vec<RunRecord> = completed.iter().map(|r| r.record(None)).collect();
        let thread = match failed {
            Some(call) => {
                let mut record = call.record;
                record.input_head = call.input.head_id();
                runs.push(record);
                Some(call.input)
            }
            None => thread,
        };
        LoopFailure {
            error: error.into(),
            kept: thread.map(|thread| Unrecorded {
                thread,
                runs,
                why: "failed",
            }),
        }
    }
}
