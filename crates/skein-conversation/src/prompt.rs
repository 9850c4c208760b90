/*!
The builders that make a turn: [`Prompt`] (one model call) and
[`ChainPrompt`] (a tool loop). Both end in `send().await` or
`send_blocking()`, which behave identically.

What a turn may override for itself only: the tools offered (an empty list
offers none), the model (the history is kept), generation options, a system
message, streaming and cancellation. Everything else comes from the
conversation, as explicit inputs of the request: nothing is inherited from
an earlier execution.
*/

use crate::blocking::wait;
use crate::conversation::{Conversation, Point};
use crate::error::Result;
use crate::model::Model;
use crate::response::{ChainResponse, Response};
use skein_core::provider::GenerationOptions;
use skein_engine::{CancellationToken, Tool};
use std::sync::Arc;

/// Receives the reply's text as it streams.
pub type TextSink = Box<dyn FnMut(&str) + Send>;

/// What one turn asks for, besides the conversation's defaults.
#[derive(Default)]
pub(crate) struct TurnInput {
    pub(crate) text: String,
    pub(crate) system: Option<String>,
    pub(crate) tools: Option<Vec<Arc<dyn Tool>>>,
    pub(crate) model: Option<Model>,
    pub(crate) options: GenerationOptions,
    pub(crate) on_text: Option<TextSink>,
    pub(crate) cancel: Option<CancellationToken>,
    pub(crate) chain_limit: Option<u32>,
    pub(crate) schema: Option<serde_json::Value>,
}

/// One prompt: a user message sent after a conversation's history.
#[must_use = "a prompt does nothing until it is sent"]
pub struct Prompt {
    pub(crate) conversation: Conversation,
    /// Where the turn starts; the conversation's head at send time when
    /// `None`.
    pub(crate) from: Option<Point>,
    pub(crate) input: TurnInput,
}

macro_rules! turn_settings {
    ($builder:ident) => {
        impl $builder {
            /// A system message sent before the user message of this turn.
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
    pub(crate) fn new(conversation: Conversation, from: Option<Point>, text: String) -> Prompt {
        Prompt {
            conversation,
            from,
            input: TurnInput {
                text,
                ..TurnInput::default()
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
        }
    }
}

/// A tool loop: model calls, with the tools run between them, until a reply
/// calls no tool, the chain limit is reached, or `before_call` stops it.
#[must_use = "a chain does nothing until it is sent"]
pub struct ChainPrompt {
    conversation: Conversation,
    from: Option<Point>,
    input: TurnInput,
}

impl ChainPrompt {
    /// At most `limit` model calls for this loop (at least one), instead of
    /// the conversation's chain limit.
    pub fn limit(mut self, limit: u32) -> ChainPrompt {
        self.input.chain_limit = Some(limit.max(1));
        self
    }

    pub async fn send(self) -> Result<ChainResponse> {
        self.conversation.send_chain(self.from, self.input).await
    }

    /// [`ChainPrompt::send`], blocking.
    pub fn send_blocking(self) -> Result<ChainResponse> {
        wait(self.send())
    }
}
