/*!
The request, as the proxy reads it (see [`super`]).
*/

use super::reply::Responses;
use crate::proxy::media;
use crate::proxy::results::ParamPaths;
use crate::proxy::turn::{Continued, Previous, ProxyError, Turn};
use serde::Deserialize;
use serde_json::{Value, json};
use skein::core::provider::GenerationOptions;
use skein::core::{Message, Part, Role, ToolCall, ToolResult, ToolSpec};
/// A Responses request.
#[derive(Debug, Deserialize)]
pub struct ResponsesRequest {
    pub model: Option<String>,
    pub input: Value,
    pub instructions: Option<String>,
    #[serde(default)]
    pub tools: Vec<Value>,
    #[serde(default)]
    pub stream: bool,
    pub store: Option<bool>,
    pub previous_response_id: Option<String>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub max_output_tokens: Option<u32>,
    /// The end user, a session marker when `metadata` names none.
    pub user: Option<String>,
    pub metadata: Option<Value>,
}

/// The prefix of the response ids the proxy gives.
pub(super) const RESPONSE_PREFIX: &str = "resp_";

impl ResponsesRequest {
    /// The request as a [`Turn`], or why it cannot be mapped.
    pub fn turn(&self) -> Result<Turn, ProxyError> {
        let mut messages = Vec::new();
        let mut places = Vec::new();
        if let Some(instructions) = self.instructions.as_ref().filter(|text| !text.is_empty()) {
            messages.push(Message::system(instructions.clone()));
            places.push(ParamPaths::uniform("instructions", 1, ""));
        }
        let instructions = messages.len();
        match &self.input {
            Value::String(text) => {
                messages.push(Message::user(text.clone()));
                places.push(ParamPaths::uniform("input", 1, ""));
            }
            Value::Array(items) => {
                for (index, item) in items.iter().enumerate() {
                    map_item(item, index, &mut messages, &mut places)?;
                }
            }
            _ => {
                return Err(
                    ProxyError::invalid("`input` must be a string or a list of items").at("input"),
                );
            }
        }
        if messages.len() == instructions && self.previous_response_id.is_none() {
            return Err(ProxyError::invalid("`input` is empty").at("input"));
        }
        let previous = self.previous_response_id.as_ref().map(|given| Previous {
            given: given.clone(),
            run: Previous::run_named(given, RESPONSE_PREFIX),
            instructions,
            of: Continued::Response,
        });
        Ok(Turn {
            messages,
            places,
            tools: self.tool_specs()?,
            options: GenerationOptions {
                temperature: self.temperature,
                top_p: self.top_p,
                seed: None,
                max_tokens: self.max_output_tokens,
            },
            model: self.model.clone(),
            stream: self.stream,
            record: self.store.unwrap_or(true),
            previous,
            session: crate::proxy::turn::session_of(self.metadata.as_ref(), self.user.as_deref()),
            client: crate::proxy::turn::client_of(self.user.as_deref()),
            ..Turn::default()
        })
    }

    fn tool_specs(&self) -> Result<Vec<ToolSpec>, ProxyError> {
        self.tools
            .iter()
            .enumerate()
            .map(|(index, tool)| {
                let at = |field: &str| format!("tools.[{index}].{field}");
                match tool.get("type").and_then(Value::as_str) {
                    Some("function") => {}
                    other => {
                        return Err(ProxyError::invalid(format!(
                            "tool type `{}` is not supported; only `function` tools are",
                            other.unwrap_or("(none)")
                        ))
                        .at(at("type")));
                    }
                }
                let name = tool.get("name").and_then(Value::as_str).ok_or_else(|| {
                    ProxyError::invalid("a function tool needs a `name`").at(at("name"))
                })?;
                Ok(ToolSpec::new(
                    name,
                    tool.get("description")
                        .and_then(Value::as_str)
                        .unwrap_or_default(),
                    tool.get("parameters")
                        .filter(|schema| !schema.is_null())
                        .cloned()
                        .unwrap_or_else(crate::proxy::chat::no_parameters),
                ))
            })
            .collect()
    }

    /// How the reply is written back: the request's settings are echoed
    /// in the response object, as OpenAI does.
    pub fn api(&self) -> Responses {
        Responses {
            echo: json!({
                "instructions": self.instructions,
                "previous_response_id": self.previous_response_id,
                "store": self.store.unwrap_or(true),
                "temperature": self.temperature,
                "top_p": self.top_p,
                "max_output_tokens": self.max_output_tokens,
                "tools": self.tools,
            }),
        }
    }
}

pub(super) fn map_item(
    item: &Value,
    index: usize,
    messages: &mut Vec<Message>,
    places: &mut Vec<ParamPaths>,
) -> Result<(), ProxyError> {
    let at = format!("input.[{index}]");
    let refuse = |field: &str, message: String| {
        ProxyError::invalid(format!("input[{index}]: {message}")).at(if field.is_empty() {
            format!("input.[{index}]")
        } else {
            format!("input.[{index}].{field}")
        })
    };
    let text = |field: &str| {
        item.get(field)
            .and_then(Value::as_str)
            .ok_or_else(|| refuse(field, format!("`{field}` must be a string")))
    };
    let kind = item.get("type").and_then(Value::as_str);
    match kind {
        Some("message") | None if item.get("role").is_some() => {
            let role = match text("role")? {
                "user" => Role::User,
                "system" | "developer" => Role::System,
                "assistant" => Role::Assistant,
                other => {
                    return Err(refuse(
                        "role",
                        format!(
                            "role `{other}` is not supported (user, system, developer, assistant)"
                        ),
                    ));
                }
            };
            let parts =
                content(item.get("content"), role).map_err(|message| refuse("content", message))?;
            places.push(ParamPaths::uniform(at, parts.len(), ".content"));
            messages.push(Message::new(role, parts));
        }
        Some("function_call") => {
            let call = Part::ToolCall(ToolCall {
                id: text("call_id")?.to_string(),
                name: text("name")?.to_string(),
                arguments: text("arguments")?.to_string(),
            });
            match (messages.last_mut(), places.last_mut()) {
                (Some(last), Some(place)) if last.role == Role::Assistant => {
                    last.parts.push(call);
                    place.parts.push(at);
                }
                _ => {
                    messages.push(Message::new(Role::Assistant, vec![call]));
                    places.push(ParamPaths::uniform(at, 1, ""));
                }
            }
        }
        Some("function_call_output") => {
            let output = match item.get("output") {
                Some(Value::String(output)) => output.clone(),
                Some(Value::Array(parts)) => parts
                    .iter()
                    .map(|part| match (part.get("type").and_then(Value::as_str), part.get("text")) {
                        (Some("input_text" | "output_text"), Some(Value::String(text))) => {
                            Ok(text.as_str())
                        }
                        (kind, _) => Err(refuse(
                            "output",
                            format!(
                                "a `{}` part inside a function call's output is not supported (text only)",
                                kind.unwrap_or("(untyped)")
                            ),
                        )),
                    })
                    .collect::<Result<String, _>>()?,
                _ => return Err(refuse("output", "`output` must be a string or text parts".into())),
            };
            let result = Part::ToolResult(ToolResult {
                call_id: text("call_id")?.to_string(),
                content: output,
                is_error: false,
            });
            let at = format!("{at}.call_id");
            match (messages.last_mut(), places.last_mut()) {
                (Some(last), Some(place)) if last.role == Role::Tool => {
                    last.parts.push(result);
                    place.parts.push(at);
                }
                _ => {
                    messages.push(Message::new(Role::Tool, vec![result]));
                    places.push(ParamPaths::uniform(at.clone(), 1, ""));
                }
            }
        }
        other => {
            return Err(refuse(
                "type",
                format!(
                    "item type `{}` is not supported by the recording proxy (message, function_call, function_call_output)",
                    other.unwrap_or("(none)")
                ),
            ));
        }
    }
    Ok(())
}

/// A message item's content as parts.
pub(super) fn content(content: Option<&Value>, role: Role) -> Result<Vec<Part>, String> {
    let parts = match content {
        Some(Value::String(text)) if text.is_empty() => return Ok(Vec::new()),
        Some(Value::String(text)) => return Ok(vec![Part::text(text.clone())]),
        Some(Value::Array(parts)) => parts,
        _ => return Err("`content` must be a string or a list of parts".into()),
    };
    let mut out = Vec::with_capacity(parts.len());
    for part in parts {
        let kind = part.get("type").and_then(Value::as_str).unwrap_or("(none)");
        let field = |name: &str| part.get(name).and_then(Value::as_str);
        let attachment = match kind {
            "input_text" | "output_text" => {
                let text = field("text").ok_or(format!("a `{kind}` part needs `text`"))?;
                if !text.is_empty() {
                    out.push(Part::text(text));
                }
                continue;
            }
            "input_image" => match (field("image_url"), field("file_id")) {
                (Some(url), _) => media::from_data_url(url),
                (None, Some(id)) => Err(format!(
                    "image `{id}` is a file id of the provider's files API; the recording proxy takes images inline (`image_url` as a data URL)"
                )),
                (None, None) => Err("an `input_image` part needs `image_url`".into()),
            },
            "input_file" => match (field("file_data"), field("file_id"), field("file_url")) {
                (Some(data), _, _) => media::from_data_url(data),
                (None, Some(reference), _) | (None, None, Some(reference)) => Err(format!(
                    "file `{reference}` is not inline; the recording proxy takes files as `file_data` (a data URL)"
                )),
                (None, None, None) => Err("an `input_file` part needs `file_data`".into()),
            },
            other => {
                return Err(format!(
                    "content part type `{other}` is not supported by the recording proxy \
                     (input_text, output_text, input_image, input_file)"
                ));
            }
        }?;
        if role != Role::User {
            return Err(format!("a `{kind}` part may stand only in a user message"));
        }
        out.push(Part::Attachment(attachment));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use skein::store::RunId;

    fn turn(body: Value) -> Result<Turn, ProxyError> {
        serde_json::from_value::<ResponsesRequest>(body)
            .unwrap()
            .turn()
    }

    #[test]
    fn items_map_as_the_chat_api_maps_the_same_history() {
        let responses = turn(json!({
            "instructions": "Be brief.",
            "input": [
                {"role": "user", "content": "weather?"},
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Let me look."}]},
                {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{\"city\": \"Paris\"}"},
                {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
                {"role": "user", "content": [{"type": "input_text", "text": "thanks"}]}
            ]
        }))
        .unwrap();
        let chat: crate::proxy::chat::ChatRequest = serde_json::from_value(json!({"messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "weather?"},
            {"role": "assistant", "content": "Let me look.", "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}
            ]},
            {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
            {"role": "user", "content": "thanks"}
        ]}))
        .unwrap();
        assert_eq!(responses.messages, chat.thread_messages().unwrap().0);
        assert_eq!(responses.places.len(), responses.messages.len());
        assert_eq!(
            responses.places[2].parts,
            ["input.[1].content", "input.[2]"]
        );
        assert!(responses.record);
        assert!(responses.previous.is_none());
    }

    #[test]
    fn a_previous_response_names_its_run_and_store_false_records_nothing() {
        let run = RunId::random();
        let mapped = turn(json!({
            "input": [{"type": "function_call_output", "call_id": "c1", "output": "sunny"}],
            "previous_response_id": format!("resp_{run}"),
            "store": false,
        }))
        .unwrap();
        let previous = mapped.previous.unwrap();
        assert_eq!(previous.run, Some(run));
        assert_eq!(previous.instructions, 0);
        assert!(!mapped.record);
        let foreign = turn(json!({"input": "hi", "previous_response_id": "resp_abc"})).unwrap();
        assert_eq!(foreign.previous.unwrap().run, None);
    }

    #[test]
    fn unsupported_items_and_parts_are_refused_with_their_place() {
        let reasoning = turn(json!({"input": [{"type": "reasoning", "summary": []}]})).unwrap_err();
        assert_eq!(reasoning.param.as_deref(), Some("input.[0].type"));
        let remote = turn(json!({"input": [{"role": "user", "content": [
            {"type": "input_image", "image_url": "https://example.com/cat.png"}
        ]}]}))
        .unwrap_err();
        assert_eq!(remote.param.as_deref(), Some("input.[0].content"));
        assert!(
            remote.message.contains("does not fetch"),
            "{}",
            remote.message
        );
        let hosted = turn(json!({"input": "hi", "tools": [{"type": "web_search"}]})).unwrap_err();
        assert_eq!(hosted.param.as_deref(), Some("tools.[0].type"));
        assert!(turn(json!({"input": []})).is_err());
    }
}
