/*!
[`Conversation`]: a named bookmark into the graph with default tools, hooks
and a chain limit, optionally attached to a store: its identity, settings
and state, built with [`ConversationBuilder`].

A turn starts from a point (a thread, its annotations, and the run that
produced its head) and runs as [`crate::turn`] says; where it leaves the
handle is [`crate::settle`]'s: moved forward, or (another writer having
moved the head while it ran) in a new branch where it started, which the
handle follows. A conversation with a store is written to it only once
its first turn succeeds. A model call that fails keeps, by the failure rule
([`commit::failed`]), its input messages and its failed run, and moves
nothing: a failed first turn creates no conversation. Loading and
branching stored conversations is [`crate::open`]'s; writing one made in
memory after the fact, [`crate::write`]'s.

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

use crate::commit::Bookmark;
use crate::input::TurnInput;
use crate::model::Model;
use crate::prompt::{ChainPrompt, Prompt};
use crate::response::Fork;
use crate::turn::TurnStart;
use skein_core::{
    BoxFuture, ConversationId, ConversationSettings, NodeId, Origin, RunRecord, Thread, ToolCall,
    ToolResult,
};
use skein_engine::{CallDecision, DEFAULT_CHAIN_LIMIT, DriftTracker, Tool};
use skein_store::Store;
use std::sync::{Arc, Mutex, MutexGuard};

/// Inspects, changes or cancels each tool call before it runs.
pub type BeforeCallHook =
    Arc<dyn for<'a> Fn(&'a ToolCall) -> BoxFuture<'a, CallDecision> + Send + Sync>;
/// Sees each tool call and its result.
pub type AfterCallHook =
    Arc<dyn for<'a> Fn(&'a ToolCall, &'a ToolResult) -> BoxFuture<'a, ()> + Send + Sync>;

/// A conversation: cheap to clone, every clone is the same conversation.
#[derive(Clone)]
pub struct Conversation {
    pub(crate) shared: Arc<Shared>,
}

pub(crate) struct Shared {
    pub(crate) model: Model,
    pub(crate) tools: Vec<Arc<dyn Tool>>,
    pub(crate) chain_limit: u32,
    pub(crate) store: Option<Store>,
    pub(crate) hooks: Mutex<Hooks>,
    pub(crate) state: Mutex<State>,
}

/// Which conversation a handle is: it changes only when the handle follows
/// its own turn into a branch (the head having moved under the turn).
#[derive(Clone, Debug)]
pub(crate) struct Identity {
    pub(crate) id: ConversationId,
    pub(crate) name: Option<String>,
    pub(crate) origin: Option<Origin>,
}

#[derive(Clone, Default)]
pub(crate) struct Hooks {
    pub(crate) before: Option<BeforeCallHook>,
    pub(crate) after: Option<AfterCallHook>,
}

pub(crate) struct State {
    pub(crate) identity: Identity,
    pub(crate) point: TurnStart,
    /// Tool name to input-schema hash, across every call of the
    /// conversation.
    pub(crate) drift: DriftTracker,
    /// Whether the attached store holds the conversation yet.
    pub(crate) stored: bool,
    /// The runs of this conversation's turns made in memory, for
    /// [`Response::log`].
    pub(crate) runs: Vec<RunRecord>,
    /// How many times a turn of this handle moved it (see
    /// [`TurnUnderWay`]).
    pub(crate) moves: u64,
    /// How many turns of this handle are running.
    pub(crate) running: usize,
}

impl std::fmt::Debug for Conversation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let identity = self.state().identity.clone();
        f.debug_struct("Conversation")
            .field("id", &identity.id)
            .field("name", &identity.name)
            .field("model", &self.shared.model)
            .field("head", &self.head())
            .finish_non_exhaustive()
    }
}

/// Builds a [`Conversation`].
#[must_use]
pub struct ConversationBuilder {
    pub(crate) model: Model,
    pub(crate) name: Option<String>,
    pub(crate) tools: Vec<Arc<dyn Tool>>,
    pub(crate) chain_limit: u32,
    pub(crate) hooks: Hooks,
    pub(crate) store: Option<Store>,
    pub(crate) start: TurnStart,
    pub(crate) origin: Option<Origin>,
    pub(crate) stored: bool,
    pub(crate) drift: DriftTracker,
    /// The id to keep (a stored or copied conversation's); a fresh one
    /// otherwise.
    pub(crate) id: Option<ConversationId>,
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
                model: self.model,
                tools: self.tools,
                chain_limit: self.chain_limit,
                store: self.store,
                hooks: Mutex::new(self.hooks),
                state: Mutex::new(State {
                    identity: Identity {
                        id: self.id.unwrap_or_else(ConversationId::random),
                        name: self.name,
                        origin: self.origin,
                    },
                    point: self.start,
                    drift: self.drift,
                    stored: self.stored,
                    runs: Vec::new(),
                    moves: 0,
                    running: 0,
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
            start: TurnStart::default(),
            origin: None,
            stored: false,
            drift: DriftTracker::default(),
            id: None,
        }
    }

    /// Its id: the same in memory and in a store. It changes only when a
    /// turn of this handle lands in a new branch because another writer
    /// moved the head while it ran: the handle follows its turn there (see
    /// [`OnMoved`](crate::OnMoved)).
    pub fn id(&self) -> ConversationId {
        self.state().identity.id.clone()
    }

    pub fn name(&self) -> Option<String> {
        self.state().identity.name.clone()
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
    pub fn origin(&self) -> Option<Origin> {
        self.state().identity.origin.clone()
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
        let identity = self.state().identity.clone();
        builder.id = Some(identity.id);
        builder.name = identity.name;
        builder.origin = identity.origin;
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
        let head = self.state().point.clone();
        Fork::new(self.clone(), head)
    }

    /// Branch before the first message: a new conversation with no history
    /// and this one's settings, whose origin names this conversation and no
    /// node (a thread's first message asked again, or edited).
    pub fn fork_from_start(&self) -> Fork {
        Fork::new(self.clone(), TurnStart::default())
    }

    /// A branch of this conversation at `at`: the same model, tools, chain
    /// limit and store; hooks only when `keep_hooks`.
    pub(crate) fn branch(
        &self,
        at: TurnStart,
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
    pub(crate) fn copy_settings(&self, model: Model) -> ConversationBuilder {
        let mut builder = Conversation::builder(model)
            .tools(self.shared.tools.clone())
            .chain_limit(self.shared.chain_limit);
        builder.drift = self.state().drift.clone();
        builder
    }

    pub(crate) fn state(&self) -> MutexGuard<'_, State> {
        self.shared
            .state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub(crate) fn hooks(&self) -> MutexGuard<'_, Hooks> {
        self.shared
            .hooks
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The conversation as its turns' writes see it.
    pub(crate) fn bookmark(&self) -> Bookmark {
        let state = self.state();
        Bookmark {
            id: state.identity.id.clone(),
            stored: state.stored,
            name: state.identity.name.clone(),
            origin: state.identity.origin.clone(),
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
}
