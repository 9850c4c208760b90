/*!
Tool results must answer the calls before them, as OpenAI and Anthropic
require, whichever API a history came through: each result in a tool
message answers a call of the assistant message right before it, once, and
every call is answered before the conversation goes on. A history may end
with an assistant's calls and no results yet, but not with only some of
them answered. A history that breaks this is refused, never recorded.

The check runs on the mapped messages (so a `previous_response_id`'s
stored history counts too); each API says where each message and part
came from ([`ParamPaths`]), so the refusal names the request's own field.
*/

use super::turn::ProxyError;
use skein::core::{Message, Role, Thread};

/// Where a mapped message and each of its parts came from in the request,
/// in OpenAI's `param` notation (`messages.[2]`, `messages.[2].tool_call_id`).
/// A message none of whose parts is ever named alone (no tool call or
/// result) may leave `parts` empty: its parts are then at `message`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ParamPaths {
    pub message: MessagePath,
    pub parts: Vec<String>,
}

/// Where a message came from: a path, or the `messages` array's item at an
/// index, spelled out only when a refusal names it (a long history's plain
/// messages each cost no string).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MessagePath {
    Named(String),
    InMessages(usize),
}

impl Default for MessagePath {
    fn default() -> MessagePath {
        MessagePath::Named(String::new())
    }
}

impl From<String> for MessagePath {
    fn from(path: String) -> MessagePath {
        MessagePath::Named(path)
    }
}

impl From<&str> for MessagePath {
    fn from(path: &str) -> MessagePath {
        MessagePath::Named(path.to_string())
    }
}

impl std::fmt::Display for MessagePath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MessagePath::Named(path) => f.write_str(path),
            MessagePath::InMessages(index) => write!(f, "messages.[{index}]"),
        }
    }
}

impl ParamPaths {
    /// A message whose parts all stand at `message` + `suffix`.
    pub fn uniform(message: impl Into<MessagePath>, parts: usize, suffix: &str) -> ParamPaths {
        let message = message.into();
        ParamPaths {
            parts: vec![format!("{message}{suffix}"); parts],
            message,
        }
    }

    /// A message of `messages` none of whose parts is named alone.
    pub fn plain(index: usize) -> ParamPaths {
        ParamPaths {
            message: MessagePath::InMessages(index),
            parts: Vec::new(),
        }
    }

    fn part(&self, index: usize) -> String {
        match self.parts.get(index) {
            Some(part) => part.clone(),
            None => self.message.to_string(),
        }
    }
}

/// Check `messages`, placed by `places` (parallel to them).
pub fn check(messages: &[Message], places: &[ParamPaths]) -> Result<(), ProxyError> {
    let unplaced = ParamPaths::default();
    let place = |index: usize| places.get(index).unwrap_or(&unplaced);
    let mut index = 0;
    while index < messages.len() {
        let message = &messages[index];
        if message.role == Role::Tool {
            // A tool message that no assistant call comes before.
            let at = place(index).part(0);
            return Err(ProxyError::invalid(format!(
                "`{at}`: a tool result must answer a tool call of the assistant message \
                 right before it, and there is no such call"
            ))
            .at(at));
        }
        let calls: Vec<&str> = message.tool_calls().map(|call| call.id.as_str()).collect();
        if message.role != Role::Assistant || calls.is_empty() {
            index += 1;
            continue;
        }
        let assistant = index;
        // Where each call was answered.
        let mut answered: Vec<Option<String>> = vec![None; calls.len()];
        let next = assistant + 1;
        if let Some(results) = messages.get(next).filter(|next| next.role == Role::Tool) {
            for (part, result) in results.parts.iter().enumerate() {
                let skein::core::Part::ToolResult(result) = result else {
                    continue;
                };
                let at = place(next).part(part);
                let Some(call) = calls.iter().position(|call| *call == result.call_id) else {
                    return Err(ProxyError::invalid(format!(
                        "`{at}`: `{}` matches no tool call of the assistant message before it \
                         (`{}` calls {})",
                        result.call_id,
                        place(assistant).message,
                        quoted(&calls)
                    ))
                    .at(at));
                };
                if let Some(first) = &answered[call] {
                    return Err(ProxyError::invalid(format!(
                        "`{at}`: tool call `{}` already has its result (`{first}`)",
                        result.call_id
                    ))
                    .at(at));
                }
                answered[call] = Some(at.to_string());
            }
            index = next + 1;
        } else {
            index = next;
        }
        let missing: Vec<usize> = (0..calls.len())
            .filter(|call| answered[*call].is_none())
            .collect();
        let Some(&first_missing) = missing.first() else {
            continue;
        };
        let some_answered = missing.len() < calls.len();
        let when = match messages.get(index) {
            Some(_) => format!("before `{}`", place(index).message),
            None if some_answered => "(some are answered, so the rest must be too)".to_string(),
            None => continue,
        };
        let missing: Vec<&str> = missing.iter().map(|call| calls[*call]).collect();
        // The place of the first unanswered call among the message's parts.
        let part = message
            .parts
            .iter()
            .enumerate()
            .filter(|(_, part)| matches!(part, skein::core::Part::ToolCall(_)))
            .nth(first_missing)
            .map_or(0, |(part, _)| part);
        let at = place(assistant).part(part);
        return Err(ProxyError::invalid(format!(
            "`{}`: the assistant's tool calls {} have no result: every call needs a tool \
             result right after the message that makes it, {when}",
            place(assistant).message,
            quoted(&missing)
        ))
        .at(at));
    }
    Ok(())
}

/// Check `messages` (placed by `places`) as the messages after `before`:
/// a result answers the call right before it, so only `before`'s last
/// message that is not a tool message, and those after it, are read again.
pub fn check_after(
    before: &Thread,
    messages: &[Message],
    places: &[ParamPaths],
) -> Result<(), ProxyError> {
    let mut last: Vec<Message> = Vec::new();
    for node in before.ancestors() {
        last.push(node.message().clone());
        if node.message().role != Role::Tool {
            break;
        }
    }
    last.reverse();
    let mut window_places = vec![ParamPaths::default(); last.len()];
    window_places.extend_from_slice(places);
    last.extend_from_slice(messages);
    check(&last, &window_places)
}

fn quoted(ids: &[&str]) -> String {
    ids.iter()
        .map(|id| format!("`{id}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use skein::core::{Part, ToolCall, ToolResult};

    fn calls(ids: &[&str]) -> Message {
        Message::new(
            Role::Assistant,
            ids.iter()
                .map(|id| {
                    Part::ToolCall(ToolCall {
                        id: id.to_string(),
                        name: "f".into(),
                        arguments: "{}".into(),
                    })
                })
                .collect(),
        )
    }

    fn results(ids: &[&str]) -> Message {
        Message::tool_results(ids.iter().map(|id| ToolResult {
            call_id: id.to_string(),
            content: "x".into(),
            is_error: false,
        }))
    }

    /// Each message placed at `m.[i]`, its parts at `m.[i].[j]`.
    fn checked(messages: &[Message]) -> Result<(), ProxyError> {
        let places: Vec<ParamPaths> = messages
            .iter()
            .enumerate()
            .map(|(i, message)| ParamPaths {
                message: format!("m.[{i}]").into(),
                parts: (0..message.parts.len())
                    .map(|j| format!("m.[{i}].[{j}]"))
                    .collect(),
            })
            .collect();
        check(messages, &places)
    }

    #[test]
    fn results_answer_the_calls_right_before_them() {
        let user = Message::user("hi");
        assert!(
            checked(&[
                user.clone(),
                calls(&["a", "b"]),
                results(&["b", "a"]),
                user.clone()
            ])
            .is_ok()
        );
        assert!(
            checked(&[user.clone(), calls(&["a"])]).is_ok(),
            "calls awaiting results"
        );
        let stray = checked(&[calls(&["a"]), results(&["z"])]).unwrap_err();
        assert!(
            stray.message.contains("`z` matches no tool call"),
            "{stray}"
        );
        assert!(stray.message.contains("`m.[0]` calls `a`"), "{stray}");
        assert_eq!(stray.param.as_deref(), Some("m.[1].[0]"));
        let twice = checked(&[calls(&["a", "b"]), results(&["a", "a"])]).unwrap_err();
        assert!(
            twice
                .message
                .contains("already has its result (`m.[1].[0]`)"),
            "{twice}"
        );
        assert_eq!(twice.param.as_deref(), Some("m.[1].[1]"));
        let skipped = checked(&[calls(&["a", "b"]), results(&["a"]), user.clone()]).unwrap_err();
        assert!(skipped.message.contains("`b` have no result"), "{skipped}");
        assert!(skipped.message.contains("before `m.[2]`"), "{skipped}");
        assert_eq!(skipped.param.as_deref(), Some("m.[0].[1]"));
        let partial = checked(&[calls(&["a", "b"]), results(&["b"])]).unwrap_err();
        assert!(partial.message.contains("some are answered"), "{partial}");
        let unanswered = checked(&[calls(&["a"]), user.clone()]).unwrap_err();
        assert!(unanswered.message.contains("`a`"), "{unanswered}");
        let orphan = checked(&[user.clone(), results(&["a"])]).unwrap_err();
        assert_eq!(orphan.param.as_deref(), Some("m.[1].[0]"));
        // A call of an earlier assistant message does not count.
        let late = checked(&[
            calls(&["a"]),
            results(&["a"]),
            Message::assistant("ok"),
            results(&["a"]),
        ])
        .unwrap_err();
        assert_eq!(late.param.as_deref(), Some("m.[3].[0]"), "{late}");
    }

    #[test]
    fn unplaced_messages_are_still_checked() {
        let error = check(&[calls(&["a"]), results(&["z"])], &[]).unwrap_err();
        assert!(error.message.contains("`z`"), "{error}");
    }
}
