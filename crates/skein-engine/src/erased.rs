/*!
Erased content (`skein redact`) meeting a model call. A request whose
history holds an erased part is refused before anything is admitted or
sent, unless a placeholder was chosen: for the request
([`Request::erased_placeholder`](crate::Request::erased_placeholder)) or
for the process ([`set_default_placeholder`], which the configuration
file's `[privacy] erased_placeholder` sets). Then the model is sent the
placeholder where the content was, and the run's events say which
messages it stood for ([`EventKind::ErasedReplaced`](crate::EventKind)).

This is the one place a request's thread is turned into what the
provider is sent, so every surface (CLI, web, Python, recorded chats)
behaves the same. The stored thread is never changed: the run's recorded
request still names the erased message.
*/

use crate::error::{EngineError, Result};
use skein_core::{Erased, ErasedPart, Message, NodeId, Part, Thread, ToolCall, ToolResult};
use std::sync::RwLock;

static DEFAULT_PLACEHOLDER: RwLock<Option<String>> = RwLock::new(None);

/// The placeholder every request of this process sends for erased content
/// unless it chose its own; `None` (the default) refuses such requests.
pub fn set_default_placeholder(placeholder: Option<String>) {
    *DEFAULT_PLACEHOLDER
        .write()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = placeholder;
}

/// The process's placeholder ([`set_default_placeholder`]).
pub fn default_placeholder() -> Option<String> {
    DEFAULT_PLACEHOLDER
        .read()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone()
}

/// What the provider is sent for `thread`.
pub(crate) struct Sendable {
    pub(crate) thread: Thread,
    /// The erased messages a placeholder stood for, root first.
    pub(crate) replaced: Vec<NodeId>,
}

/// `thread` as the provider may see it: unchanged when nothing in it was
/// erased; with `placeholder` in each erased part's place when one was
/// chosen; otherwise the [`EngineError::ErasedContent`] refusal naming the
/// newest erased message.
pub(crate) fn sendable(thread: &Thread, placeholder: Option<&str>) -> Result<Sendable> {
    if !thread.holds_erased() {
        return Ok(Sendable {
            thread: thread.clone(),
            replaced: Vec::new(),
        });
    }
    let nodes: Vec<_> = thread.ancestors().collect();
    let Some(oldest) = nodes.iter().rposition(|node| node.message().is_erased()) else {
        return Ok(Sendable {
            thread: thread.clone(),
            replaced: Vec::new(),
        });
    };
    let Some(placeholder) = placeholder else {
        let newest = nodes
            .iter()
            .find(|node| node.message().is_erased())
            .expect("an erased node was found");
        return Err(EngineError::ErasedContent {
            node: newest.id(),
            reason: newest
                .message()
                .erased_reason()
                .unwrap_or_default()
                .to_string(),
        });
    };
    // Everything before the oldest erased message is shared as it is; from
    // there on each message is copied with the placeholder in place. The
    // copies keep their nodes' ids although their content differs, so that
    // the run's annotations (keyed by node id) still find their parts: this
    // thread goes to the provider only and is never stored.
    let mut sent = nodes[oldest]
        .parent()
        .map_or_else(Thread::new, |parent| Thread::from_head(parent.clone()));
    let mut replaced = Vec::new();
    for node in nodes[..=oldest].iter().rev() {
        let message = node.message();
        if message.is_erased() {
            replaced.push(node.id());
            sent = sent.push_with_id(node.id(), with_placeholder(message, placeholder));
        } else {
            sent = sent.push_with_id(node.id(), message.clone());
        }
    }
    Ok(Sendable {
        thread: sent,
        replaced,
    })
}

/// `message` with each erased part replaced by a part of the same kind
/// carrying `placeholder`, so tool calls and their results still pair up
/// as providers require: a text (or an attachment, whose bytes are gone)
/// becomes the placeholder text; a tool call keeps its id and name, its
/// arguments becoming `{"erased": PLACEHOLDER}` (providers want a JSON
/// object); a tool result keeps its call id and error flag.
fn with_placeholder(message: &Message, placeholder: &str) -> Message {
    let parts = message
        .parts
        .iter()
        .map(|part| match part {
            Part::Erased(Erased { was, .. }) => placeholder_part(was, placeholder),
            other => other.clone(),
        })
        .collect();
    Message {
        role: message.role,
        parts,
    }
}

fn placeholder_part(was: &ErasedPart, placeholder: &str) -> Part {
    match was {
        ErasedPart::Text | ErasedPart::Attachment { .. } => Part::text(placeholder),
        ErasedPart::ToolCall { id, name } => Part::ToolCall(ToolCall {
            id: id.clone(),
            name: name.clone(),
            arguments: serde_json::json!({ "erased": placeholder }).to_string(),
        }),
        ErasedPart::ToolResult { call_id, is_error } => Part::ToolResult(ToolResult {
            call_id: call_id.clone(),
            content: placeholder.to_string(),
            is_error: *is_error,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use skein_core::Role;

    fn erased(part: Part) -> Part {
        Erased::part(&part, "alice", 1, "secret")
    }

    #[test]
    fn each_erased_kind_gets_a_placeholder_of_its_kind_and_ids_stay() {
        let call = Part::ToolCall(ToolCall {
            id: "call_1".into(),
            name: "lookup".into(),
            arguments: r#"{"q":"hunter2"}"#.into(),
        });
        let result = Part::ToolResult(ToolResult {
            call_id: "call_1".into(),
            content: "hunter2".into(),
            is_error: true,
        });
        let original = Thread::from_messages([
            Message::system("s"),
            Message::new(Role::Assistant, vec![Part::text("ok"), call]),
            Message::new(Role::Tool, vec![result]),
            Message::user("after"),
        ]);
        let ids: Vec<NodeId> = original.nodes().iter().map(|node| node.id()).collect();
        let messages: Vec<Message> = original.messages().into_iter().cloned().collect();
        let mut stored = Thread::from_messages([messages[0].clone()]);
        for (index, message) in messages.iter().enumerate().skip(1) {
            let message = if index == 1 || index == 2 {
                Message::new(
                    message.role,
                    message.parts.iter().cloned().map(erased).collect(),
                )
            } else {
                message.clone()
            };
            stored = stored.push_with_id(ids[index], message);
        }

        let sent = sendable(&stored, Some("[gone]")).unwrap();
        assert_eq!(sent.replaced, vec![ids[1], ids[2]]);
        let sent_ids: Vec<NodeId> = sent.thread.nodes().iter().map(|node| node.id()).collect();
        assert_eq!(sent_ids, ids);
        let sent_messages = sent.thread.messages();
        assert_eq!(sent_messages[0], &messages[0]);
        assert_eq!(
            sent_messages[1].parts,
            vec![
                Part::text("[gone]"),
                Part::ToolCall(ToolCall {
                    id: "call_1".into(),
                    name: "lookup".into(),
                    arguments: r#"{"erased":"[gone]"}"#.into(),
                }),
            ]
        );
        assert_eq!(
            sent_messages[2].parts,
            vec![Part::ToolResult(ToolResult {
                call_id: "call_1".into(),
                content: "[gone]".into(),
                is_error: true,
            })]
        );
        assert_eq!(sent_messages[3], &messages[3]);

        match sendable(&stored, None) {
            Err(EngineError::ErasedContent { node, reason }) => {
                assert_eq!(node, ids[2]);
                assert_eq!(reason, "secret");
            }
            Err(other) => panic!("{other}"),
            Ok(_) => panic!("an erased history was sent without a placeholder"),
        }
    }

    #[test]
    fn a_history_without_erasure_is_sent_as_it_is() {
        let thread = Thread::from_messages([Message::user("a"), Message::assistant("b")]);
        let sent = sendable(&thread, None).unwrap();
        assert!(sent.replaced.is_empty());
        assert!(std::sync::Arc::ptr_eq(
            sent.thread.head().unwrap(),
            thread.head().unwrap()
        ));
    }
}
