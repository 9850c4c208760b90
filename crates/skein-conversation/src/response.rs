/*!
What a turn returns, and how to go on from it: [`Response`] (one model
call), [`ChainResponse`] (every call of a tool loop) and [`Fork`] (a new
conversation branching at a response).

Every response belongs to a conversation (an ad-hoc one when it came from
`model.prompt`). `reply` continues that conversation from the response;
`fork` starts an independent one there. Neither needs the response to be
stored: node ids exist before anything is written, so a fork of an
unlogged response works, and logging it later stores the shared prefix
once.
*/

use crate::blocking::wait;
use crate::conversation::Conversation;
use crate::error::Result;
use crate::input::TurnInput;
use crate::model::Model;
use crate::prompt::Prompt;
use crate::service::Landed;
use crate::turn::{TurnStart, captured};
use skein_core::{Message, NodeId, Thread, ToolCall, ToolSpec, Usage};
use skein_engine::{ChainOutput, ChainStatus, DriftWarning, Exchange, RunId, RunOutput};
use skein_store::{ConversationId, Store};
use std::sync::Arc;

/// One model call's result.
#[derive(Clone)]
pub struct Response {
    output: Arc<RunOutput>,
    conversation: Conversation,
    warnings: Vec<DriftWarning>,
    /// The model that answered (the turn's own, else the conversation's):
    /// a fork of the response runs on it unless told otherwise.
    model: Model,
    /// Where the turn landed.
    landed: Landed,
}

impl std::fmt::Debug for Response {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Response")
            .field("run", &self.output.run)
            .field("head", &self.head())
            .field("text", &self.text())
            .finish_non_exhaustive()
    }
}

impl Response {
    pub(crate) fn new(
        output: RunOutput,
        conversation: Conversation,
        warnings: Vec<DriftWarning>,
        model: Model,
        landed: Landed,
    ) -> Response {
        Response {
            output: Arc::new(output),
            conversation,
            warnings,
            model,
            landed,
        }
    }

    /// Where the turn landed: in the conversation it continued (or
    /// started), in a new branch because that conversation moved on while
    /// it ran ([`Landed::Branched`], naming both), or nowhere (not
    /// recorded). Surfaces say what happened from this, never by comparing
    /// conversation ids.
    pub fn landed(&self) -> &Landed {
        &self.landed
    }

    /// The model that answered: the turn's own (`.model(...)` on its
    /// prompt), else the conversation's.
    pub fn model(&self) -> &Model {
        &self.model
    }

    /// The reply's text parts, joined.
    pub fn text(&self) -> String {
        self.output.text()
    }

    /// The reply message.
    pub fn message(&self) -> &Message {
        &self.output.message
    }

    /// The tool calls the model made.
    pub fn tool_calls(&self) -> impl Iterator<Item = &ToolCall> {
        self.output.message.tool_calls()
    }

    pub fn usage(&self) -> Usage {
        self.output.usage
    }

    pub fn run_id(&self) -> &RunId {
        &self.output.run
    }

    /// The exact request and the reply, as captured.
    pub fn exchange(&self) -> &Exchange {
        captured(&self.output)
    }

    /// The history up to and including the reply.
    pub fn thread(&self) -> &Thread {
        self.exchange().thread()
    }

    /// The reply's node id.
    pub fn head(&self) -> NodeId {
        self.exchange().head()
    }

    /// The tools offered on this call, exactly (recorded on its run).
    pub fn tools(&self) -> &[ToolSpec] {
        &self.output.tools
    }

    /// Tools offered under a different input schema than earlier in the
    /// conversation or chain.
    pub fn warnings(&self) -> &[DriftWarning] {
        &self.warnings
    }

    /// Everything the engine reported about the run.
    pub fn output(&self) -> &RunOutput {
        &self.output
    }

    /// The conversation the response belongs to.
    pub fn conversation(&self) -> &Conversation {
        &self.conversation
    }

    pub(crate) fn point(&self) -> TurnStart {
        TurnStart::after(self.thread().clone(), &self.output)
    }

    /// Continue the conversation from this response, with its tools, hooks,
    /// chain limit and store. When the conversation has moved on since,
    /// the turn branches into a new conversation here instead (a bookmark
    /// never moves backwards). The input is text, messages, or nothing new
    /// (see [`TurnInput`]).
    pub fn reply(&self, input: impl Into<TurnInput>) -> Prompt {
        Prompt::new(self.conversation.clone(), Some(self.point()), input.into())
    }

    /// A new conversation branching at this response, running on the
    /// model that gave it (as `llm`'s `fork` does: `model or self.model`)
    /// unless [`Fork::model`] says otherwise. Always a conversation of its
    /// own: even when its first answer is the one its origin ends with, the
    /// origin's bookmark never moves.
    pub fn fork(&self) -> Fork {
        Fork::new(self.conversation.clone(), self.point()).model(&self.model)
    }

    /// Store the whole thread up to this response in `store` (sharing every
    /// node already there) as its conversation, with the runs that produced
    /// it. Returns the conversation's id.
    pub async fn log(&self, store: &Store) -> Result<ConversationId> {
        self.conversation.log_at(store, &self.point()).await
    }

    /// [`Response::log`], blocking.
    pub fn log_blocking(&self, store: &Store) -> Result<ConversationId> {
        wait(self.log(store))
    }
}

/// Every model call of a tool loop, in order.
#[derive(Clone, Debug)]
pub struct ChainResponse {
    id: String,
    responses: Vec<Response>,
    status: ChainStatus,
    end: TurnStart,
    conversation: Conversation,
}

impl ChainResponse {
    pub(crate) fn new(
        output: ChainOutput,
        conversation: Conversation,
        model: &Model,
        landed: Landed,
    ) -> ChainResponse {
        let end = TurnStart::after(output.thread.clone(), output.last());
        // Drift warnings belong to the call that offered the tools; a chain
        // offers one tool set, so they surface on its first response.
        let mut warnings = Some(output.warnings);
        let responses = output
            .responses
            .into_iter()
            .map(|call| {
                Response::new(
                    call,
                    conversation.clone(),
                    warnings.take().unwrap_or_default(),
                    model.clone(),
                    landed.clone(),
                )
            })
            .collect();
        ChainResponse {
            id: output.id,
            responses,
            status: output.status,
            end,
            conversation,
        }
    }

    /// The id every run of the chain is related to.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Every model call's response, in order.
    pub fn responses(&self) -> &[Response] {
        &self.responses
    }

    /// The final response.
    pub fn last(&self) -> &Response {
        self.responses
            .last()
            .expect("a chain makes at least one call")
    }

    /// The final response's text.
    pub fn text(&self) -> String {
        self.last().text()
    }

    pub fn status(&self) -> ChainStatus {
        self.status
    }

    /// Every drift warning of the chain.
    pub fn warnings(&self) -> Vec<DriftWarning> {
        self.responses
            .iter()
            .flat_map(|response| response.warnings().iter().cloned())
            .collect()
    }

    /// Usage of every call together.
    pub fn usage(&self) -> Usage {
        self.responses
            .iter()
            .fold(Usage::default(), |total, response| {
                total.add(&response.usage())
            })
    }

    /// The history at the end: the final reply, and when the chain was
    /// stopped, the results given for its calls.
    pub fn thread(&self) -> &Thread {
        &self.end.thread
    }

    pub fn conversation(&self) -> &Conversation {
        &self.conversation
    }

    /// Continue from the end of the chain (when a `before_call` hook
    /// stopped it, from the results given for its calls: an empty
    /// [`TurnInput`] lets the model go on from them).
    pub fn reply(&self, input: impl Into<TurnInput>) -> Prompt {
        Prompt::new(
            self.conversation.clone(),
            Some(self.end.clone()),
            input.into(),
        )
    }
}

/// A new conversation branching at a response (or at a conversation's
/// head): the same tools, chain limit and store, an independent future, and
/// no hooks.
#[must_use]
pub struct Fork {
    source: Conversation,
    at: TurnStart,
    name: Option<String>,
    model: Option<Model>,
    /// The conversation the origin names: the source, unless the source
    /// is a stand-in at a stored node (see [`Conversation::fork_at`]).
    from: Option<ConversationId>,
}

impl Fork {
    pub(crate) fn new(source: Conversation, at: TurnStart) -> Fork {
        Fork {
            from: Some(source.id()),
            source,
            at,
            name: None,
            model: None,
        }
    }

    /// Name `from` as the conversation the fork came from instead of the
    /// source (a stand-in that only lends its settings).
    pub(crate) fn coming_from(mut self, from: Option<ConversationId>) -> Fork {
        self.from = from;
        self
    }

    /// The node the fork starts at (`None` at an empty conversation).
    pub fn node(&self) -> Option<NodeId> {
        self.at.head()
    }

    /// The new conversation's name (refused by the store when it reads as
    /// an id: see [`ConversationBuilder::name`](crate::ConversationBuilder::name)).
    pub fn name(mut self, name: impl Into<String>) -> Fork {
        self.name = Some(name.into());
        self
    }

    /// The new conversation's default model.
    pub fn model(mut self, model: &Model) -> Fork {
        self.model = Some(model.clone());
        self
    }

    fn branch(self) -> Conversation {
        self.source
            .branch(self.at, self.name, self.model, false, self.from)
    }

    /// Create the new conversation. With a store attached it is recorded
    /// there at once, with its origin.
    pub async fn create(self) -> Result<Conversation> {
        let conversation = self.branch();
        if conversation.store().is_some() {
            conversation.persist_now().await?;
        }
        Ok(conversation)
    }

    /// [`Fork::create`], blocking.
    pub fn create_blocking(self) -> Result<Conversation> {
        wait(self.create())
    }

    /// The new conversation, not stored yet: its first turn that succeeds
    /// records it, with its origin (a fork with a turn to come never
    /// leaves an empty conversation behind).
    pub fn conversation(self) -> Conversation {
        self.branch()
    }

    /// The new conversation's first prompt. With a store attached, the
    /// conversation is recorded when that turn succeeds.
    pub fn prompt(self, input: impl Into<TurnInput>) -> Prompt {
        self.branch().prompt(input)
    }
}
