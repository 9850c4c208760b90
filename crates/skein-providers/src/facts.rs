/*!
What the deterministic providers read from a request: the facts that echo
summaries, script conditions and reply substitutions are computed from.

Definitions (shared by [`crate::Echo`] and [`crate::Scripted`]):

- a message's *text* is its text parts joined with nothing in between;
- the *last user message* is the most recent message with role `user`
  (after tool results it is the user message that started the tool loop);
- the *previous assistant message* is the most recent assistant message
  that comes before the last user message;
- the *last tool result* is the last tool-result part of the most recent
  message that has one;
- *history* is the number of messages in the request thread, the last one
  included.

The scripted model builds these facts over the whole request (its rules
may search any message); the echo model reads only the thread's tail and
the figures of `summary`, so its calls cost the same at any depth.
*/

use skein_core::{Message, ModelRequest, Part, Role, ToolResult};
use std::borrow::Cow;

/// A request, with the texts every condition looks at computed once.
pub(crate) struct RequestFacts<'a> {
    request: &'a ModelRequest,
    messages: Vec<&'a Message>,
    /// The text of each message, in thread order (borrowed unless the
    /// message has several text parts to join: the echo model builds these
    /// facts on every call, over the whole history).
    texts: Vec<Cow<'a, str>>,
    last_user: Option<usize>,
}

impl<'a> RequestFacts<'a> {
    pub(crate) fn new(request: &'a ModelRequest) -> RequestFacts<'a> {
        let messages = request.thread.messages();
        let texts = messages.iter().map(|m| text_of(m)).collect();
        let last_user = messages.iter().rposition(|m| m.role == Role::User);
        RequestFacts {
            request,
            messages,
            texts,
            last_user,
        }
    }

    /// The number of messages in the request thread.
    pub(crate) fn history(&self) -> usize {
        self.messages.len()
    }

    pub(crate) fn last_message(&self) -> Option<&'a Message> {
        self.messages.last().copied()
    }

    pub(crate) fn last_role(&self) -> Option<Role> {
        self.last_message().map(|m| m.role)
    }

    /// The texts of the system messages.
    pub(crate) fn system_texts(&self) -> impl Iterator<Item = &str> {
        self.messages
            .iter()
            .zip(&self.texts)
            .filter(|(m, _)| m.role == Role::System)
            .map(|(_, text)| text.as_ref())
    }

    /// Every message's text and every tool result's content.
    pub(crate) fn searchable_texts(&self) -> impl Iterator<Item = &str> {
        let results = self
            .messages
            .iter()
            .flat_map(|m| m.tool_results_iter())
            .map(|r| r.content.as_str());
        self.texts.iter().map(Cow::as_ref).chain(results)
    }

    pub(crate) fn last_user_text(&self) -> Option<&str> {
        self.last_user.map(|i| self.texts[i].as_ref())
    }

    pub(crate) fn previous_assistant_text(&self) -> Option<&str> {
        let before = self.last_user?;
        self.messages[..before]
            .iter()
            .rposition(|m| m.role == Role::Assistant)
            .map(|i| self.texts[i].as_ref())
    }

    pub(crate) fn last_tool_result(&self) -> Option<&'a ToolResult> {
        self.messages
            .iter()
            .rev()
            .find_map(|m| m.tool_results_iter().last())
    }

    pub(crate) fn tool_offered(&self, name: &str) -> bool {
        self.request.tools.iter().any(|tool| tool.name == name)
    }
}

/// A message's text parts joined with nothing in between, without copying
/// when there is only one.
pub(crate) fn text_of(message: &Message) -> Cow<'_, str> {
    let mut texts = message.parts.iter().filter_map(Part::as_text);
    match (texts.next(), texts.next()) {
        (None, _) => Cow::Borrowed(""),
        (Some(only), None) => Cow::Borrowed(only),
        _ => Cow::Owned(message.joined_text()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use skein_core::Thread;

    fn request(messages: Vec<Message>) -> ModelRequest {
        ModelRequest::new("test", Thread::from_messages(messages))
    }

    #[test]
    fn previous_assistant_is_the_one_before_the_last_user_message() {
        let req = request(vec![
            Message::assistant("first"),
            Message::user("q1"),
            Message::assistant("second"),
            Message::user("q2"),
            Message::assistant("after"),
        ]);
        let facts = RequestFacts::new(&req);
        assert_eq!(facts.last_user_text(), Some("q2"));
        assert_eq!(facts.previous_assistant_text(), Some("second"));
        assert_eq!(facts.last_role(), Some(Role::Assistant));
        assert_eq!(facts.history(), 5);
    }

    #[test]
    fn no_user_message_means_no_previous_assistant() {
        let req = request(vec![Message::system("s"), Message::assistant("a")]);
        let facts = RequestFacts::new(&req);
        assert_eq!(facts.last_user_text(), None);
        assert_eq!(facts.previous_assistant_text(), None);
    }

    #[test]
    fn last_tool_result_is_the_last_part_of_the_newest_tool_message() {
        let result = |id: &str, content: &str| ToolResult {
            call_id: id.into(),
            content: content.into(),
            is_error: false,
        };
        let req = request(vec![
            Message::user("q"),
            Message::tool_results([result("a", "old")]),
            Message::tool_results([result("b", "one"), result("c", "two")]),
            Message::assistant("done"),
        ]);
        let facts = RequestFacts::new(&req);
        assert_eq!(facts.last_tool_result().unwrap().content, "two");
        let searchable: Vec<&str> = facts.searchable_texts().collect();
        assert!(searchable.contains(&"old"));
        assert!(searchable.contains(&"done"));
    }
}
