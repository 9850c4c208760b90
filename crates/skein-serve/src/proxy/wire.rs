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

/// Why a request cannot be mapped: shown to the client as a 400.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{0}")]
pub struct Unsupported(pub String);

impl ChatRequest {
    /// The conversation the client sent, as skein messages.
    pub fn thread_messages(&self) -> Result<Vec<Message>, Unsupported> {
        if self.messages.is_empty() {
            return Err(Unsupported("`messages` is empty".into()));
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
        Ok(messages)
    }

    /// The tools offered, as skein tool specs.
    pub fn tool_specs(&self) -> Result<Vec<ToolSpec>, Unsupported> {
        self.tools
            .iter()
            .map(|tool| {
                if tool.kind != "function" {
                    return Err(Unsupported(format!(
                        "tool type `{}` is not supported; only `function` tools are",
                        tool.kind
                    )));
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

    pub fn options(&self) -> Result<GenerationOptions, Unsupported> {
        if self.n.is_some_and(|n| n != 1) {
            return Err(Unsupported(
                "`n` other than 1 is not supported: the proxy records one reply per request".into(),
            ));
        }
        Ok(GenerationOptions {
            temperature: self.temperature,
            top_p: self.top_p,
            seed: self.seed,
            max_tokens: self.max_completion_tokens.or(self.max_tokens),
        })
    }
}

fn map_message(wire: &WireMessage, index: usize) -> Result<Message, Unsupported> {
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
                Unsupported(format!(
                    "messages[{index}]: a `tool` message needs `tool_call_id`"
                ))
            })?;
            Ok(Message::tool_results([ToolResult {
                call_id,
                content: texts.concat(),
                is_error: false,
            }]))
        }
        other => Err(Unsupported(format!(
            "messages[{index}]: role `{other}` is not supported (system, developer, user, assistant, tool)"
        ))),
    }
}

/// The non-empty texts of a message's content.
fn texts(content: Option<&WireContent>, index: usize) -> Result<Vec<String>, Unsupported> {
    match content {
        None => Ok(Vec::new()),
        Some(WireContent::Text(text)) if text.is_empty() => Ok(Vec::new()),
        Some(WireContent::Text(text)) => Ok(vec![text.clone()]),
        Some(WireContent::Parts(parts)) => parts
            .iter()
            .filter_map(|part| match (part.kind.as_str(), &part.text) {
                ("text", Some(text)) if text.is_empty() => None,
                ("text", Some(text)) => Some(Ok(text.clone())),
                (kind, _) => Some(Err(Unsupported(format!(
                    "messages[{index}]: content part type `{kind}` is not supported by the recording proxy (text only)"
                )))),
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
        assert!(image.thread_messages().unwrap_err().0.contains("image_url"));
        let role = request(serde_json::json!([{"role": "wizard", "content": "x"}]));
        assert!(role.thread_messages().unwrap_err().0.contains("wizard"));
        let orphan = request(serde_json::json!([{"role": "tool", "content": "x"}]));
        assert!(
            orphan
                .thread_messages()
                .unwrap_err()
                .0
                .contains("tool_call_id")
        );
        assert!(request(serde_json::json!([])).thread_messages().is_err());
    }
}
