/*!
[`TurnInput`]: what a turn adds after the history. The user's text is the
common case (it becomes one user message, exactly as given); a turn may
instead add a list of messages (several user messages, the results of tool
calls the caller ran itself, parts with annotations such as cache hints or
source tags, attachments), or nothing at all, so that the model goes on
from the history as it stands (for example from tool results it ends with).

Every entry point that starts a turn (`Conversation::prompt` and `chain`,
`Response::reply`, `ChainResponse::reply`, `Fork::prompt`) takes
`impl Into<TurnInput>`, so text keeps working where it always did.
*/

use skein_core::{Annotation, Message};
use skein_engine::RequestMessage;

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

    /// The messages, in order.
    pub fn messages(&self) -> &[RequestMessage] {
        &self.messages
    }

    /// Whether the turn adds nothing.
    pub fn is_empty(&self) -> bool {
        self.messages.is_empty()
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
        TurnInput { messages }
    }
}

impl FromIterator<Message> for TurnInput {
    fn from_iter<I: IntoIterator<Item = Message>>(messages: I) -> TurnInput {
        messages
            .into_iter()
            .fold(TurnInput::new(), TurnInput::message)
    }
}
