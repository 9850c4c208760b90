/*!
[`TurnInput`]: what a turn adds after the history. The user's text is the
common case (it becomes one user message, exactly as given); a turn may
instead add a list of messages (several user messages, the results of tool
calls the caller ran itself, parts with annotations such as cache hints or
source tags, attachments), or nothing at all, so that the model goes on
from the history as it stands (for example from tool results it ends with).

A turn may also render a *configured prompt* of the model's engine (its
TOML prompts: [`TurnInput::configured`]) with variables: the engine renders
its messages (with the cache hints their templates carry) after the
history, and any messages given besides follow them. The prompt's output
contract and session id apply as they do to any engine request; its
default profile does not, since a turn runs on the conversation's model
(or the one it names).

Every entry point that starts a turn (`Conversation::prompt` and `chain`,
`Response::reply`, `ChainResponse::reply`, `Fork::prompt`) takes
`impl Into<TurnInput>`, so text keeps working where it always did.
*/

use serde_json::{Map, Value};
use skein_core::{Annotation, Message};
use skein_engine::RequestMessage;

/// A configured prompt of the engine, by id and version (the newest when
/// `None`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfiguredPrompt {
    pub id: String,
    pub version: Option<u32>,
}

/// The messages a turn appends to the history, in order; empty means "go
/// on from the history".
///
/// ```
/// use skein_conversation::TurnInput;
/// use skein_core::{Annotation, CacheHint, Message, Part, Role};
///
/// // Text: one user message.
/// assert_eq!(TurnInput::from("hello").messages().len(), 1);
/// // Several messages, one of whose parts carries a cache hint.
/// let input = TurnInput::new()
///     .annotated(
///         Message::new(Role::User, vec![Part::text("a long document"), Part::text("a question")]),
///         [(0, Annotation::CacheHint(CacheHint::Ephemeral))],
///     )
///     .message(Message::user("and a second question"));
/// assert_eq!(input.messages().len(), 2);
/// // Nothing new: the model goes on from the history.
/// assert!(TurnInput::new().is_empty());
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
#[must_use]
pub struct TurnInput {
    prompt: Option<ConfiguredPrompt>,
    variables: Map<String, Value>,
    messages: Vec<RequestMessage>,
}

impl TurnInput {
    /// No new message: the turn asks the model to go on from the history.
    /// A conversation with no history has nothing to go on from, and such a
    /// turn fails with a request error before any model call.
    pub fn new() -> TurnInput {
        TurnInput::default()
    }

    /// One user message with `text`, exactly as given.
    pub fn text(text: impl Into<String>) -> TurnInput {
        TurnInput::new().message(Message::user(text))
    }

    /// Append a message (any role: a user message, a tool message with the
    /// results of calls the caller ran, a message with attachments).
    pub fn message(mut self, message: Message) -> TurnInput {
        self.messages.push(RequestMessage {
            message,
            annotations: Vec::new(),
        });
        self
    }

    /// Append a message whose parts carry annotations, as (part index,
    /// annotation) pairs. They are kept on the turn's run, keyed by the
    /// message's node, and carried into later turns like any other
    /// annotation of the history. An index past the message's parts is
    /// refused when the turn is sent.
    pub fn annotated(
        mut self,
        message: Message,
        annotations: impl IntoIterator<Item = (u32, Annotation)>,
    ) -> TurnInput {
        self.messages.push(RequestMessage {
            message,
            annotations: annotations.into_iter().collect(),
        });
        self
    }

    /// The messages of the engine's configured prompt `id` (its newest
    /// version), rendered after the history with the variables given by
    /// [`TurnInput::var`]; messages added with [`TurnInput::message`]
    /// follow them. A prompt the engine does not know, a missing or
    /// undeclared variable, or a template error fails the turn before any
    /// model call.
    ///
    /// ```
    /// use skein_conversation::TurnInput;
    ///
    /// let input = TurnInput::configured("summarize").var("topic", "tides").var("words", 40);
    /// assert_eq!(input.configured_prompt().unwrap().id, "summarize");
    /// assert_eq!(input.variables()["words"], 40);
    /// ```
    pub fn configured(id: impl Into<String>) -> TurnInput {
        TurnInput {
            prompt: Some(ConfiguredPrompt {
                id: id.into(),
                version: None,
            }),
            ..TurnInput::default()
        }
    }

    /// Render this version of the configured prompt instead of the newest
    /// (no effect without [`TurnInput::configured`]).
    pub fn version(mut self, version: u32) -> TurnInput {
        if let Some(prompt) = &mut self.prompt {
            prompt.version = Some(version);
        }
        self
    }

    /// Set a variable of the configured prompt. Without
    /// [`TurnInput::configured`] the variable has no prompt to go to and
    /// the turn fails with a request error.
    pub fn var(mut self, name: impl Into<String>, value: impl Into<Value>) -> TurnInput {
        self.variables.insert(name.into(), value.into());
        self
    }

    /// The configured prompt the turn renders, if any.
    pub fn configured_prompt(&self) -> Option<&ConfiguredPrompt> {
        self.prompt.as_ref()
    }

    /// The variables given for the configured prompt.
    pub fn variables(&self) -> &Map<String, Value> {
        &self.variables
    }

    /// The messages given besides a configured prompt, in order.
    pub fn messages(&self) -> &[RequestMessage] {
        &self.messages
    }

    /// Whether the turn adds nothing.
    pub fn is_empty(&self) -> bool {
        self.prompt.is_none() && self.variables.is_empty() && self.messages.is_empty()
    }
}

impl From<&str> for TurnInput {
    fn from(text: &str) -> TurnInput {
        TurnInput::text(text)
    }
}

impl From<String> for TurnInput {
    fn from(text: String) -> TurnInput {
        TurnInput::text(text)
    }
}

impl From<&String> for TurnInput {
    fn from(text: &String) -> TurnInput {
        TurnInput::text(text.clone())
    }
}

impl From<Message> for TurnInput {
    fn from(message: Message) -> TurnInput {
        TurnInput::new().message(message)
    }
}

impl From<RequestMessage> for TurnInput {
    fn from(message: RequestMessage) -> TurnInput {
        TurnInput {
            messages: vec![message],
            ..TurnInput::default()
        }
    }
}

impl From<Vec<Message>> for TurnInput {
    fn from(messages: Vec<Message>) -> TurnInput {
        messages.into_iter().collect()
    }
}

impl<const N: usize> From<[Message; N]> for TurnInput {
    fn from(messages: [Message; N]) -> TurnInput {
        messages.into_iter().collect()
    }
}

impl From<Vec<RequestMessage>> for TurnInput {
    fn from(messages: Vec<RequestMessage>) -> TurnInput {
        TurnInput {
            messages,
            ..TurnInput::default()
        }
    }
}

impl FromIterator<Message> for TurnInput {
    fn from_iter<I: IntoIterator<Item = Message>>(messages: I) -> TurnInput {
        messages
            .into_iter()
            .fold(TurnInput::new(), TurnInput::message)
    }
}
