/*!
The OpenAI chat-completions wire format, as the proxy reads and writes it,
and its mapping onto skein's messages.

Clients encode one message in several equivalent ways; they all map to the
same parts, so a client that re-serialises its history differently each
turn still finds its earlier nodes:
- content as a string, or as an array of text parts (one text part is the
  same as the string; an empty string adds no part);
- `null`, missing or empty content beside tool calls;
- consecutive `tool` messages, which become one tool message holding every
  result (as skein's own tool loop writes them).

Tool results are checked as OpenAI and Anthropic check them
([`ChatRequest::thread_messages`]): each answers a call of the assistant
message right before it, once, and every call is answered before the
conversation goes on. A history that breaks this is refused, never
recorded.
*/

use serde::{Deserialize, Serialize};
use serde_json::Value;
use skein::core::provider::GenerationOptions;
use skein::core::{Message, Part, Role, ToolCall, ToolResult, ToolSpec};

/// A request the proxy accepts.
#[derive(Debug, Deserialize)]
pub struct ChatRequest {
    #[serde(default)]
    pub model: Option<String>,
    pub messages: Vec<WireMessage>,
    #[serde(default)]
    pub stream: bool,
    #[serde(default)]
    pub stream_options: Option<StreamOptions>,
    #[serde(default)]
    pub tools: Vec<WireTool>,
    #[serde(default)]
    pub temperature: Option<f64>,
    #[serde(default)]
    pub top_p: Option<f64>,
    #[serde(default)]
    pub seed: Option<u64>,
    #[serde(default)]
    pub max_tokens: Option<u32>,
    #[serde(default)]
    pub max_completion_tokens: Option<u32>,
    #[serde(default)]
    pub n: Option<u32>,
}

#[derive(Debug, Default, Deserialize)]
pub struct StreamOptions {
    #[serde(default)]
    pub include_usage: bool,
}

#[derive(Debug, Deserialize)]
pub struct WireMessage {
    pub role: String,
    #[serde(default)]
    pub content: Option<WireContent>,
    #[serde(default)]
    pub tool_calls: Option<Vec<WireToolCall>>,
    #[serde(default)]
    pub tool_call_id: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum WireContent {
    Text(String),
    Parts(Vec<WirePart>),
}

#[derive(Debug, Deserialize)]
pub struct WirePart {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub text: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WireToolCall {
    pub id: String,
    #[serde(rename = "type", default = "function_kind")]
    pub kind: String,
    pub function: WireFunction,
}

fn function_kind() -> String {
    "function".into()
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WireFunction {
    pub name: String,
    #[serde(default)]
    pub arguments: String,
}

#[derive(Debug, Deserialize)]
pub struct WireTool {
    #[serde(rename = "type")]
    pub kind: String,
    pub function: WireToolDef,
}

#[derive(Debug, Deserialize)]
pub struct WireToolDef {
    pub name: String,
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    pub parameters: Option<Value>,
}

/// Why a request cannot be mapped: shown to the client as a 400 in
/// OpenAI's error format, with `param` naming the offending field as
/// OpenAI does (`messages.[2].tool_call_id`).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{message}")]
#[non_exhaustive]
pub struct BadRequest {
    pub message: String,
    pub param: Option<String>,
}

impl BadRequest {
    fn new(message: impl Into<String>) -> BadRequest {
        BadRequest {
            message: message.into(),
            param: None,
        }
    }

    fn at(mut self, param: String) -> BadRequest {
        self.param = Some(param);
        self
    }
}

impl ChatRequest {
    /// The conversation the client sent, as skein messages.
    pub fn thread_messages(&self) -> Result<Vec<Message>, BadRequest> {
        if self.messages.is_empty() {
            return Err(BadRequest::new("`messages` is empty").at("messages".into()));
        }
        let mut messages: Vec<Message> = Vec::with_capacity(self.messages.len());
        for (index, wire) in self.messages.iter().enumerate() {
            let message = map_message(wire, index)?;
            // Consecutive tool messages become one.
            if message.role == Role::Tool
                && let Some(previous) = messages.last_mut()
                && previous.role == Role::Tool
            {
                previous.parts.extend(message.parts);
                continue;
            }
            messages.push(message);
        }
        check_tool_results(&self.messages)?;
        Ok(messages)
    }

    /// The tools offered, as skein tool specs.
    pub fn tool_specs(&self) -> Result<Vec<ToolSpec>, BadRequest> {
        self.tools
            .iter()
            .enumerate()
            .map(|(index, tool)| {
                if tool.kind != "function" {
                    return Err(BadRequest::new(format!(
                        "tool type `{}` is not supported; only `function` tools are",
                        tool.kind
                    ))
                    .at(format!("tools.[{index}].type")));
                }
                Ok(ToolSpec::new(
                    tool.function.name.clone(),
                    tool.function.description.clone().unwrap_or_default(),
                    tool.function
                        .parameters
                        .clone()
                        .unwrap_or_else(|| serde_json::json!({"type": "object", "properties": {}})),
                ))
            })
            .collect()
    }

    pub fn options(&self) -> Result<GenerationOptions, BadRequest> {
        if self.n.is_some_and(|n| n != 1) {
            return Err(BadRequest::new(
                "`n` other than 1 is not supported: the proxy records one reply per request",
            )
            .at("n".into()));
        }
        Ok(GenerationOptions {
            temperature: self.temperature,
            top_p: self.top_p,
            seed: self.seed,
            max_tokens: self.max_completion_tokens.or(self.max_tokens),
        })
    }
}

fn map_message(wire: &WireMessage, index: usize) -> Result<Message, BadRequest> {
    let texts = texts(wire.content.as_ref(), index)?;
    let text_parts = || texts.iter().cloned().map(Part::text).collect::<Vec<_>>();
    match wire.role.as_str() {
        "system" | "developer" => Ok(Message::new(Role::System, text_parts())),
        "user" => Ok(Message::new(Role::User, text_parts())),
        "assistant" => {
            let mut parts = text_parts();
            for call in wire.tool_calls.iter().flatten() {
                parts.push(Part::ToolCall(ToolCall {
                    id: call.id.clone(),
                    name: call.function.name.clone(),
                    arguments: call.function.arguments.clone(),
                }));
            }
            Ok(Message::new(Role::Assistant, parts))
        }
        "tool" => {
            let call_id = wire.tool_call_id.clone().ok_or_else(|| {
                BadRequest::new(format!(
                    "messages[{index}]: a `tool` message needs `tool_call_id`"
                ))
                .at(format!("messages.[{index}].tool_call_id"))
            })?;
            Ok(Message::tool_results([ToolResult {
                call_id,
                content: texts.concat(),
                is_error: false,
            }]))
        }
        other => Err(BadRequest::new(format!(
            "messages[{index}]: role `{other}` is not supported (system, developer, user, assistant, tool)"
        ))
        .at(format!("messages.[{index}].role"))),
    }
}

/// Each `tool` message answers a call of the assistant message right before
/// it (the run of tool messages after it), each call at most once, and
/// every call is answered before another message follows. A history may end
/// with an assistant's calls and no results yet, but not with only some of
/// them answered.
fn check_tool_results(messages: &[WireMessage]) -> Result<(), BadRequest> {
    /// The assistant message whose results are being read, and where each
    /// of its calls was answered.
    struct Open<'m> {
        at: usize,
        calls: Vec<(&'m str, Option<usize>)>,
    }
    impl Open<'_> {
        fn unanswered(&self) -> Vec<&str> {
            self.calls
                .iter()
                .filter(|(_, answered)| answered.is_none())
                .map(|(id, _)| *id)
                .collect()
        }
        fn missing(&self, before: &str) -> BadRequest {
            BadRequest::new(format!(
                "messages[{}]: the assistant's tool calls {} have no result: an assistant message \
                 with `tool_calls` must be followed by a `tool` message for each `tool_call_id` {before}",
                self.at,
                quoted(&self.unanswered())
            ))
            .at(format!("messages.[{}].tool_calls", self.at))
        }
    }

    let mut open: Option<Open> = None;
    for (index, message) in messages.iter().enumerate() {
        if message.role == "tool" {
            let Some(open) = open.as_mut() else {
                return Err(BadRequest::new(format!(
                    "messages[{index}]: a `tool` message must answer a tool call of the assistant \
                     message right before it, and there is no such call"
                ))
                .at(format!("messages.[{index}].role")));
            };
            let id = message.tool_call_id.as_deref().unwrap_or_default();
            let Some((_, answered)) = open.calls.iter_mut().find(|(call, _)| *call == id) else {
                let calls: Vec<&str> = open.calls.iter().map(|(call, _)| *call).collect();
                return Err(BadRequest::new(format!(
                    "messages[{index}]: `tool_call_id` `{id}` matches no tool call of the assistant \
                     message before it (messages[{}] calls {})",
                    open.at,
                    quoted(&calls)
                ))
                .at(format!("messages.[{index}].tool_call_id")));
            };
            if let Some(first) = answered {
                return Err(BadRequest::new(format!(
                    "messages[{index}]: tool call `{id}` already has its result in messages[{first}]"
                ))
                .at(format!("messages.[{index}].tool_call_id")));
            }
            *answered = Some(index);
            continue;
        }
        if let Some(closed) = open.take()
            && !closed.unanswered().is_empty()
        {
            return Err(closed.missing(&format!("before messages[{index}]")));
        }
        let calls: Vec<(&str, Option<usize>)> = message
            .tool_calls
            .iter()
            .flatten()
            .map(|call| (call.id.as_str(), None))
            .collect();
        if message.role == "assistant" && !calls.is_empty() {
            open = Some(Open { at: index, calls });
        }
    }
    match open {
        Some(open)
            if open.calls.iter().any(|(_, answered)| answered.is_some())
                && !open.unanswered().is_empty() =>
        {
            Err(open.missing("(some are answered, so the rest must be too)"))
        }
        _ => Ok(()),
    }
}

fn quoted(ids: &[&str]) -> String {
    ids.iter()
        .map(|id| format!("`{id}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The non-empty texts of a message's content.
fn texts(content: Option<&WireContent>, index: usize) -> Result<Vec<String>, BadRequest> {
    match content {
        None => Ok(Vec::new()),
        Some(WireContent::Text(text)) if text.is_empty() => Ok(Vec::new()),
        Some(WireContent::Text(text)) => Ok(vec![text.clone()]),
        Some(WireContent::Parts(parts)) => parts
            .iter()
            .filter_map(|part| match (part.kind.as_str(), &part.text) {
                ("text", Some(text)) if text.is_empty() => None,
                ("text", Some(text)) => Some(Ok(text.clone())),
                (kind, _) => Some(Err(BadRequest::new(format!(
                    "messages[{index}]: content part type `{kind}` is not supported by the recording proxy (text only)"
                ))
                .at(format!("messages.[{index}].content")))),
            })
            .collect(),
    }
}

/// The reply's tool calls in wire form.
pub fn wire_calls(message: &Message) -> Vec<WireToolCall> {
    message
        .tool_calls()
        .map(|call| WireToolCall {
            id: call.id.clone(),
            kind: function_kind(),
            function: WireFunction {
                name: call.name.clone(),
                arguments: call.arguments.clone(),
            },
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(messages: Value) -> ChatRequest {
        serde_json::from_value(serde_json::json!({ "model": "m", "messages": messages })).unwrap()
    }

    #[test]
    fn equivalent_encodings_map_to_the_same_messages() {
        let plain = request(serde_json::json!([
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}},
                {"id": "c2", "type": "function", "function": {"name": "g", "arguments": "{}"}}
            ]},
            {"role": "tool", "tool_call_id": "c1", "content": "one"},
            {"role": "tool", "tool_call_id": "c2", "content": "two"}
        ]));
        let reserialised = request(serde_json::json!([
            {"role": "user", "content": [{"type": "text", "text": "hi"}]},
            {"role": "assistant", "content": "", "tool_calls": [
                {"id": "c1", "function": {"name": "f", "arguments": "{}"}},
                {"id": "c2", "function": {"name": "g", "arguments": "{}"}}
            ]},
            {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "one"}]},
            {"role": "tool", "tool_call_id": "c2", "content": "two"}
        ]));
        let a = plain.thread_messages().unwrap();
        let b = reserialised.thread_messages().unwrap();
        assert_eq!(a, b);
        assert_eq!(a.len(), 3, "the two tool messages become one");
        assert_eq!(a[2].tool_results_iter().count(), 2);
    }

    #[test]
    fn unsupported_input_is_a_clear_error() {
        let image = request(serde_json::json!([
            {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}
        ]));
        assert!(
            image
                .thread_messages()
                .unwrap_err()
                .message
                .contains("image_url")
        );
        let role = request(serde_json::json!([{"role": "wizard", "content": "x"}]));
        assert!(
            role.thread_messages()
                .unwrap_err()
                .message
                .contains("wizard")
        );
        let orphan = request(serde_json::json!([{"role": "tool", "content": "x"}]));
        assert!(
            orphan
                .thread_messages()
                .unwrap_err()
                .message
                .contains("tool_call_id")
        );
        assert!(request(serde_json::json!([])).thread_messages().is_err());
    }

    fn refusal(messages: Value) -> BadRequest {
        request(messages).thread_messages().unwrap_err()
    }

    fn call(id: &str) -> Value {
        serde_json::json!({"id": id, "type": "function", "function": {"name": "f", "arguments": "{}"}})
    }

    #[test]
    fn a_tool_result_must_answer_a_call_of_the_assistant_message_before_it() {
        let stray = refusal(serde_json::json!([
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": null, "tool_calls": [call("c1")]},
            {"role": "tool", "tool_call_id": "c1", "content": "one"},
            {"role": "tool", "tool_call_id": "nope", "content": "two"}
        ]));
        assert!(
            stray.message.contains("`nope` matches no tool call"),
            "{stray}"
        );
        assert!(
            stray.message.contains("`c1`"),
            "the calls are listed: {stray}"
        );
        assert_eq!(stray.param.as_deref(), Some("messages.[3].tool_call_id"));

        let no_call = refusal(serde_json::json!([
            {"role": "user", "content": "hi"},
            {"role": "tool", "tool_call_id": "c1", "content": "one"}
        ]));
        assert_eq!(
            no_call.param.as_deref(),
            Some("messages.[1].role"),
            "{no_call}"
        );

        // A call of an earlier assistant message does not count.
        let late = refusal(serde_json::json!([
            {"role": "assistant", "content": null, "tool_calls": [call("c1")]},
            {"role": "tool", "tool_call_id": "c1", "content": "one"},
            {"role": "assistant", "content": "done"},
            {"role": "tool", "tool_call_id": "c1", "content": "again"}
        ]));
        assert_eq!(late.param.as_deref(), Some("messages.[3].role"), "{late}");

        let twice = refusal(serde_json::json!([
            {"role": "assistant", "content": null, "tool_calls": [call("c1"), call("c2")]},
            {"role": "tool", "tool_call_id": "c1", "content": "one"},
            {"role": "tool", "tool_call_id": "c1", "content": "one again"},
            {"role": "tool", "tool_call_id": "c2", "content": "two"}
        ]));
        assert!(
            twice
                .message
                .contains("already has its result in messages[1]"),
            "{twice}"
        );
    }

    #[test]
    fn every_call_is_answered_before_the_conversation_goes_on() {
        let skipped = refusal(serde_json::json!([
            {"role": "assistant", "content": null, "tool_calls": [call("c1"), call("c2")]},
            {"role": "tool", "tool_call_id": "c2", "content": "two"},
            {"role": "user", "content": "and?"}
        ]));
        assert!(skipped.message.contains("`c1` have no result"), "{skipped}");
        assert!(skipped.message.contains("before messages[2]"), "{skipped}");
        assert_eq!(skipped.param.as_deref(), Some("messages.[0].tool_calls"));

        let partial = refusal(serde_json::json!([
            {"role": "assistant", "content": null, "tool_calls": [call("c1"), call("c2")]},
            {"role": "tool", "tool_call_id": "c1", "content": "one"}
        ]));
        assert!(partial.message.contains("`c2`"), "{partial}");

        // Results in any order, and a history that ends at the calls, are fine.
        for fine in [
            serde_json::json!([
                {"role": "assistant", "content": null, "tool_calls": [call("c1"), call("c2")]},
                {"role": "tool", "tool_call_id": "c2", "content": "two"},
                {"role": "tool", "tool_call_id": "c1", "content": "one"},
                {"role": "user", "content": "thanks"}
            ]),
            serde_json::json!([
                {"role": "user", "content": "weather?"},
                {"role": "assistant", "content": null, "tool_calls": [call("c1")]}
            ]),
        ] {
            assert!(request(fine.clone()).thread_messages().is_ok(), "{fine}");
        }
    }
}
