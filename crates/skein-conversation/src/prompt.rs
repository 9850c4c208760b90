/*!
The builders that make a turn: [`Prompt`] (one model call) and
[`ChainPrompt`] (a tool loop). Both end in `send().await` or
`send_blocking()`, which behave identically.

What a turn adds is a [`TurnInput`] (text, messages, a configured prompt,
or nothing); `prepare` renders it without running anything. What it
may override for itself only: the tools offered (an empty list offers
none), the model (the history is kept), generation options, a system
message, streaming and cancellation, and where it lands when another
writer moved the conversation on while it ran; a chain also its limit and
its `before_call` / `after_call` hooks. Everything else comes from the
conversation, as explicit inputs of the request: nothing is inherited from
an earlier execution.

A chain's own hooks replace the conversation's for that chain only, each
hook on its own (the seed's per-call arguments: `before_call or
self.before_call`): a chain given only `before_call` still runs the
conversation's `after_call`. The conversation's hooks are never changed.
*/

use crate::blocking::wait;
use crate::commit::OnMoved;
use crate::conversation::Conversation;
use crate::error::Result;
use crate::input::TurnInput;
use crate::model::Model;
use crate::response::{ChainResponse, Response};
use crate::turn::TurnStart;
use skein_core::provider::GenerationOptions;
use skein_core::{BoxFuture, ToolCall, ToolResult};
use skein_engine::{AfterCall, BeforeCall, CallDecision, CancellationToken, Prepared, Tool};
use std::sync::Arc;

/// Receives the reply's text as it streams.
pub type TextSink = Box<dyn FnMut(&str) + Send>;

/// What one turn asks for, besides the conversation's defaults.
#[derive(Default)]
pub(crate) struct TurnSpec {
    pub(crate) input: TurnInput,
    pub(crate) system: Option<String>,
    pub(crate) tools: Option<Vec<Arc<dyn Tool>>>,
    pub(crate) model: Option<Model>,
    pub(crate) options: GenerationOptions,
    pub(crate) on_text: Option<TextSink>,
    pub(crate) cancel: Option<CancellationToken>,
    pub(crate) chain_limit: Option<u32>,
    pub(crate) schema: Option<serde_json::Value>,
    pub(crate) on_moved: OnMoved,
}

/// A chain's own hooks: each replaces the conversation's for that chain.
#[derive(Default)]
pub(crate) struct ChainHooks {
    pub(crate) before: Option<BeforeCall>,
    pub(crate) after: Option<AfterCall>,
}

/// One prompt: a turn's input (see [`TurnInput`]) sent after a
/// conversation's history.
#[must_use = "a prompt does nothing until it is sent"]
pub struct Prompt {
    pub(crate) conversation: Conversation,
    /// Where the turn starts; the conversation's head at send time when
    /// `None`.
    pub(crate) from: Option<TurnStart>,
    pub(crate) input: TurnSpec,
}

macro_rules! turn_settings {
    ($builder:ident) => {
        impl $builder {
            /// A system message sent before this turn's input.
            pub fn system(mut self, text: impl Into<String>) -> $builder {
                self.input.system = Some(text.into());
                self
            }

            /// Offer these tools on this turn instead of the conversation's
            /// (an empty list offers none).
            pub fn tools(mut self, tools: impl IntoIterator<Item = Arc<dyn Tool>>) -> $builder {
                self.input.tools = Some(tools.into_iter().collect());
                self
            }

            /// Send this turn to another model, with the same history.
            pub fn model(mut self, model: &Model) -> $builder {
                self.input.model = Some(model.clone());
                self
            }

            /// Generation options for this turn, laid over the profile's.
            pub fn options(mut self, options: GenerationOptions) -> $builder {
                self.input.options = options;
                self
            }

            /// Receive the reply's text as it streams.
            pub fn on_text(mut self, sink: impl FnMut(&str) + Send + 'static) -> $builder {
                self.input.on_text = Some(Box::new(sink));
                self
            }

            /// Ask for a reply matching this JSON Schema: the engine validates
            /// it and repairs it when the profile allows (see
            /// [`Response::output`](crate::Response::output)`().value`).
            pub fn schema(mut self, schema: serde_json::Value) -> $builder {
                self.input.schema = Some(schema);
                self
            }

            /// What the turn does when another writer moved the
            /// conversation's head while it ran: by default
            /// ([`OnMoved::Branch`], the landing rule, as on every surface)
            /// it lands in a new conversation branching where it started
            /// (origin: the conversation and that node), the response
            /// belongs to that branch, and the conversation handle follows
            /// it there unless another of its own turns moved it meanwhile
            /// ([`Conversation::id`](crate::Conversation::id) then names the
            /// branch); with [`OnMoved::Fail`] it fails with
            /// [`Error::HeadMoved`](crate::Error::HeadMoved), its response
            /// kept there, and nothing moves.
            pub fn on_moved(mut self, policy: OnMoved) -> $builder {
                self.input.on_moved = policy;
                self
            }

            /// Cancel the turn when `token` is cancelled.
            pub fn cancel_with(mut self, token: CancellationToken) -> $builder {
                self.input.cancel = Some(token);
                self
            }
        }
    };
}

turn_settings!(Prompt);
turn_settings!(ChainPrompt);

impl Prompt {
    pub(crate) fn new(
        conversation: Conversation,
        from: Option<TurnStart>,
        input: TurnInput,
    ) -> Prompt {
        Prompt {
            conversation,
            from,
            input: TurnSpec {
                input,
                ..TurnSpec::default()
            },
        }
    }

    /// The conversation the turn will run in (for a fork's first prompt,
    /// the new branch, stored only once the turn succeeds).
    pub fn conversation(&self) -> &Conversation {
        &self.conversation
    }

    /// Whether the turn offers any tool (its own, or the conversation's).
    pub fn offers_tools(&self) -> bool {
        match &self.input.tools {
            Some(tools) => !tools.is_empty(),
            None => !self.conversation.tools().is_empty(),
        }
    }

    /// The fully rendered request this turn would send, without running
    /// it or recording anything (the seed's *Prepare*): the history, the
    /// configured prompt's messages and the turn's own with their
    /// annotations, and the profile, backend, model, options, tools, output
    /// contract and session id, resolved exactly as sending resolves them.
    /// Errors sending would meet while preparing (an unknown prompt, a
    /// missing variable, a template error) are returned here.
    pub fn prepare(&self) -> Result<Prepared> {
        self.conversation
            .prepare_turn(self.from.clone(), &self.input)
    }

    /// Make one model call, offering the tools without running them.
    pub async fn send(self) -> Result<Response> {
        self.conversation.send(self.from, self.input).await
    }

    /// [`Prompt::send`], blocking.
    pub fn send_blocking(self) -> Result<Response> {
        wait(self.send())
    }

    /// Run the turn as a tool loop instead.
    pub fn chain(self) -> ChainPrompt {
        ChainPrompt {
            conversation: self.conversation,
            from: self.from,
            input: self.input,
            hooks: ChainHooks::default(),
        }
    }
}

/// A tool loop: model calls, with the tools run between them, until a reply
/// calls no tool, the chain limit is reached, or `before_call` stops it.
#[must_use = "a chain does nothing until it is sent"]
pub struct ChainPrompt {
    conversation: Conversation,
    from: Option<TurnStart>,
    input: TurnSpec,
    hooks: ChainHooks,
}

impl ChainPrompt {
    /// At most `limit` model calls for this loop (at least one), instead of
    /// the conversation's chain limit.
    pub fn limit(mut self, limit: u32) -> ChainPrompt {
        self.input.chain_limit = Some(limit.max(1));
        self
    }

    /// Decide each tool call of this chain (run it, possibly with changed
    /// arguments, skip it, or stop the chain) instead of the conversation's
    /// `before_call`, which stays as it is for later turns.
    pub fn before_call(
        mut self,
        hook: impl for<'a> FnMut(&'a ToolCall) -> BoxFuture<'a, CallDecision> + Send + 'static,
    ) -> ChainPrompt {
        self.hooks.before = Some(Box::new(hook));
        self
    }

    /// See each tool call of this chain and its result instead of the
    /// conversation's `after_call`, which stays as it is for later turns.
    pub fn after_call(
        mut self,
        hook: impl for<'a> FnMut(&'a ToolCall, &'a ToolResult) -> BoxFuture<'a, ()> + Send + 'static,
    ) -> ChainPrompt {
        self.hooks.after = Some(Box::new(hook));
        self
    }

    /// The first model call's request, rendered and resolved, without
    /// running anything (see [`Prompt::prepare`]).
    pub fn prepare(&self) -> Result<Prepared> {
        self.conversation
            .prepare_turn(self.from.clone(), &self.input)
    }

    pub async fn send(self) -> Result<ChainResponse> {
        self.conversation
            .send_chain(self.from, self.input, self.hooks)
            .await
    }

    /// [`ChainPrompt::send`], blocking.
    pub fn send_blocking(self) -> Result<ChainResponse> {
        wait(self.send())
    }
}
