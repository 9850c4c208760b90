/*!
[`Echo`]: a provider that answers with a summary of what it received.

The reply is deterministic and has one of these forms:

```text
echo: "<last user text>" (history: N messages, system: yes|no, tools: K)
echo: "<last user text>" [attachment: <media type>, <size> bytes] (history: ...)
echo: tool results [<call id>: "<content>", <call id> (error): "<content>"] (history: ...)
echo: no user message (history: ...)
```

- the first form is the usual one; the last user message's text is put
  between the quotes exactly as it is (no escaping); the second is the
  same when that message has attachments, one bracket each, in order;
- the third form is used when the last message of the thread has role
  `tool`: each tool result in that message, in order, with `(error)` after
  the call id of a result marked as an error;
- the fourth form is used when the thread has no user message at all.

`N` counts every message of the request thread (the last one included),
`system` says whether any system message is present, `K` is the number of
tools offered. Echo never calls tools. Streaming, `max_tokens` and usage
follow the [crate-level stream contract](crate#streams).
*/

use crate::facts::text_of;
use crate::reply::{Outcome, Reply};
use crate::stream::EventStream;
use skein_core::{BoxStream, ModelRequest, Part, Provider, ProviderError, Role, StreamEvent};
use std::fmt::Write as _;

/// The echo model: replies with a summary of the request.
#[derive(Clone, Copy, Debug, Default)]
pub struct Echo;

impl Echo {
    pub fn new() -> Echo {
        Echo
    }

    /// The reply text Echo gives to `request`.
    pub fn reply_text(request: &ModelRequest) -> String {
        // Only the tail of the thread is read, and the whole-history figures
        // come from `summary`: a call costs the same at any depth.
        let thread = &request.thread;
        let mut text = String::from("echo: ");
        match thread.head().map(|head| head.message()) {
            Some(last) if last.role == Role::Tool => {
                text.push_str("tool results [");
                for (i, result) in last.tool_results_iter().enumerate() {
                    if i > 0 {
                        text.push_str(", ");
                    }
                    let error = if result.is_error { " (error)" } else { "" };
                    let _ = write!(text, "{}{error}: \"{}\"", result.call_id, result.content);
                }
                text.push(']');
            }
            _ => match thread
                .ancestors()
                .find(|node| node.message().role == Role::User)
            {
                Some(user) => {
                    let _ = write!(text, "\"{}\"", text_of(user.message()));
                    for part in &user.message().parts {
                        if let Part::Attachment(attachment) = part {
                            let _ = write!(
                                text,
                                " [attachment: {}, {} bytes]",
                                attachment.media_type,
                                attachment.data.len()
                            );
                        }
                    }
                }
                None => text.push_str("no user message"),
            },
        }
        let summary = crate::summary::summary(thread);
        let system = if summary.has_system { "yes" } else { "no" };
        let _ = write!(
            text,
            " (history: {} messages, system: {system}, tools: {})",
            thread.len(),
            request.tools.len()
        );
        text
    }
}

impl Provider for Echo {
    fn name(&self) -> &str {
        "echo"
    }

    fn stream(
        &self,
        request: ModelRequest,
    ) -> BoxStream<'static, Result<StreamEvent, ProviderError>> {
        let outcome = Outcome::Reply(Reply::text(Echo::reply_text(&request)));
        Box::pin(EventStream::new(outcome.into_events(&request)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use skein_core::{Message, Thread};

    #[test]
    fn an_empty_thread_has_no_user_message() {
        let request = ModelRequest::new("echo", Thread::new());
        assert_eq!(
            Echo::reply_text(&request),
            "echo: no user message (history: 0 messages, system: no, tools: 0)"
        );
    }

    #[test]
    fn an_assistant_tail_still_quotes_the_last_user_message() {
        let thread = Thread::from_messages([Message::user("q"), Message::assistant("a")]);
        let request = ModelRequest::new("echo", thread);
        assert_eq!(
            Echo::reply_text(&request),
            "echo: \"q\" (history: 2 messages, system: no, tools: 0)"
        );
    }

    #[test]
    fn attachments_of_the_last_user_message_are_named_in_order() {
        let parts = vec![
            Part::text("look"),
            Part::Attachment(skein_core::Attachment {
                media_type: "image/png".into(),
                data: vec![0; 12],
            }),
            Part::Attachment(skein_core::Attachment {
                media_type: "application/pdf".into(),
                data: vec![1; 3],
            }),
        ];
        let thread = Thread::from_messages([Message::new(Role::User, parts)]);
        assert_eq!(
            Echo::reply_text(&ModelRequest::new("echo", thread)),
            "echo: \"look\" [attachment: image/png, 12 bytes] [attachment: application/pdf, 3 bytes] \
             (history: 1 messages, system: no, tools: 0)"
        );
    }
}
