/*!
The request, as the proxy reads it (see [`super`]).
*/

use super::reply::Chat;
use crate::proxy::media;
use crate::proxy::results::{MessagePath, ParamPaths};
use crate::proxy::turn::{ProxyError, Turn};
use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use skein::core::provider::GenerationOptions;
use skein::core::{Message, Part, Role, ToolCall, ToolResult, ToolSpec};
use std::fmt;

/// A request the proxy accepts.
#[derive(Debug, Deserialize)]
pub struct ChatRequest {
    pub model: Option<String>,
    pub messages: Vec<WireMessage>,
    #[serde(default)]
    pub stream: bool,
    pub stream_options: Option<StreamOptions>,
    #[serde(default)]
    pub tools: Vec<WireTool>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub seed: Option<u64>,
    pub max_tokens: Option<u32>,
    pub max_completion_tokens: Option<u32>,
    pub n: Option<u32>,
    /// The end user, a session marker when `metadata` names none.
    pub user: Option<String>,
    pub metadata: Option<Value>,
}

#[derive(Debug, Default, Deserialize)]
pub struct StreamOptions {
    #[serde(default)]
    pub include_usage: bool,
}

#[derive(Debug, Deserialize)]
pub struct WireMessage {
    pub role: String,
    pub content: Option<WireContent>,
    pub tool_calls: Option<Vec<WireToolCall>>,
    pub tool_call_id: Option<String>,
}

/// A message's content: a string, or an array of parts. Read by its JSON
/// type directly (serde's `untagged` would buffer every message's content
/// first, on every request of a history re-sent whole).
#[derive(Debug)]
pub enum WireContent {
    Text(String),
    Parts(Vec<WirePart>),
}

impl<'de> Deserialize<'de> for WireContent {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Content;
        impl<'de> Visitor<'de> for Content {
            type Value = WireContent;
            fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
                formatter.write_str("a string or an array of content parts")
            }
            fn visit_str<E: de::Error>(self, text: &str) -> Result<WireContent, E> {
                Ok(WireContent::Text(text.to_owned()))
            }
            fn visit_string<E: de::Error>(self, text: String) -> Result<WireContent, E> {
                Ok(WireContent::Text(text))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, parts: A) -> Result<WireContent, A::Error> {
                Vec::deserialize(de::value::SeqAccessDeserializer::new(parts))
                    .map(WireContent::Parts)
            }
        }
        deserializer.deserialize_any(Content)
    }
}

#[derive(Debug, Deserialize)]
pub struct WirePart {
    #[serde(rename = "type")]
    pub kind: String,
    pub text: Option<String>,
    pub image_url: Option<ImageUrl>,
    pub input_audio: Option<InputAudio>,
    pub file: Option<WireFile>,
}

#[derive(Debug, Deserialize)]
pub struct ImageUrl {
    pub url: String,
}

#[derive(Debug, Deserialize)]
pub struct InputAudio {
    pub data: String,
    pub format: String,
}

#[derive(Debug, Deserialize)]
pub struct WireFile {
    pub file_data: Option<String>,
    pub file_id: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WireToolCall {
    pub id: String,
    #[serde(rename = "type", default = "function_kind")]
    pub kind: String,
    pub function: WireFunction,
}

pub(super) fn function_kind() -> String {
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
    pub description: Option<String>,
    pub parameters: Option<Value>,
}

/// A tool's parameters when it declares none.
pub fn no_parameters() -> Value {
    json!({"type": "object", "properties": {}})
}

impl ChatRequest {
    /// The request as a [`Turn`], or why it cannot be mapped. Its
    /// messages' texts move into the turn (a history is not copied).
    pub fn turn(self) -> Result<Turn, ProxyError> {
        let tools = self.tool_specs()?;
        let options = self.options()?;
        let session = super::super::turn::session_of(self.metadata.as_ref(), self.user.as_deref());
        let client = super::super::turn::client_of(self.user.as_deref());
        let (model, stream) = (self.model.clone(), self.stream);
        let (messages, places) = self.thread_messages()?;
        Ok(Turn {
            messages,
            places,
            tools,
            options,
            model,
            stream,
            record: true,
            session,
            client,
            ..Turn::default()
        })
    }

    /// The conversation the client sent, as skein messages, with where
    /// each came from.
    pub fn thread_messages(self) -> Result<(Vec<Message>, Vec<ParamPaths>), ProxyError> {
        if self.messages.is_empty() {
            return Err(ProxyError::invalid("`messages` is empty").at("messages"));
        }
        let mut messages: Vec<Message> = Vec::with_capacity(self.messages.len());
        let mut places: Vec<ParamPaths> = Vec::with_capacity(self.messages.len());
        for (index, wire) in self.messages.into_iter().enumerate() {
            let message = map_message(wire, index)?;
            let place = match message.role {
                Role::Tool => {
                    ParamPaths::uniform(MessagePath::InMessages(index), 1, ".tool_call_id")
                }
                // Only the places of tool calls and results are named by
                // part (`results::check`): a history's many plain
                // messages need only their own.
                _ if message.tool_calls().next().is_none() => ParamPaths::plain(index),
                _ => {
                    let at = format!("messages.[{index}]");
                    let mut calls = 0;
                    let parts = message
                        .parts
                        .iter()
                        .map(|part| match part {
                            Part::ToolCall(_) => {
                                calls += 1;
                                format!("{at}.tool_calls.[{}]", calls - 1)
                            }
                            _ => format!("{at}.content"),
                        })
                        .collect();
                    ParamPaths {
                        message: at.into(),
                        parts,
                    }
                }
            };
            // Consecutive tool messages become one.
            if message.role == Role::Tool
                && let Some(previous) = messages.last_mut()
                && previous.role == Role::Tool
            {
                previous.parts.extend(message.parts);
                places
                    .last_mut()
                    .expect("a place per message")
                    .parts
                    .extend(place.parts);
                continue;
            }
            messages.push(message);
            places.push(place);
        }
        Ok((messages, places))
    }

    /// The tools offered, as skein tool specs.
    pub fn tool_specs(&self) -> Result<Vec<ToolSpec>, ProxyError> {
        self.tools
            .iter()
            .enumerate()
            .map(|(index, tool)| {
                if tool.kind != "function" {
                    return Err(ProxyError::invalid(format!(
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
                        .unwrap_or_else(no_parameters),
                ))
            })
            .collect()
    }

    pub fn options(&self) -> Result<GenerationOptions, ProxyError> {
        if self.n.is_some_and(|n| n != 1) {
            return Err(ProxyError::invalid(
                "`n` other than 1 is not supported: the proxy records one reply per request",
            )
            .at("n"));
        }
        Ok(GenerationOptions {
            temperature: self.temperature,
            top_p: self.top_p,
            seed: self.seed,
            max_tokens: self.max_completion_tokens.or(self.max_tokens),
        })
    }

    /// How the reply is written back.
    pub fn api(&self) -> Chat {
        Chat {
            include_usage: self
                .stream_options
                .as_ref()
                .is_some_and(|options| options.include_usage),
        }
    }
}

fn map_message(wire: WireMessage, index: usize) -> Result<Message, ProxyError> {
    let takes_media = wire.role == "user";
    let content = wire.content;
    let content = || content_parts(content, index, takes_media);
    match wire.role.as_str() {
        "system" | "developer" => Ok(Message::new(Role::System, content()?)),
        "user" => Ok(Message::new(Role::User, content()?)),
        "assistant" => {
            let mut parts = content()?;
            for call in wire.tool_calls.into_iter().flatten() {
                parts.push(Part::ToolCall(ToolCall {
                    id: call.id,
                    name: call.function.name,
                    arguments: call.function.arguments,
                }));
            }
            Ok(Message::new(Role::Assistant, parts))
        }
        "tool" => {
            let call_id = wire.tool_call_id.ok_or_else(|| {
                ProxyError::invalid(format!(
                    "messages[{index}]: a `tool` message needs `tool_call_id`"
                ))
                .at(format!("messages.[{index}].tool_call_id"))
            })?;
            let texts: Vec<String> = content()?
                .into_iter()
                .filter_map(|part| match part {
                    Part::Text { text } => Some(text),
                    _ => None,
                })
                .collect();
            Ok(Message::tool_results([ToolResult {
                call_id,
                content: texts.concat(),
                is_error: false,
            }]))
        }
        other => Err(ProxyError::invalid(format!(
            "messages[{index}]: role `{other}` is not supported (system, developer, user, assistant, tool)"
        ))
        .at(format!("messages.[{index}].role"))),
    }
}

/// The parts of a message's content: its non-empty texts, and (in a user
/// message) its media as attachments.
fn content_parts(
    content: Option<WireContent>,
    index: usize,
    takes_media: bool,
) -> Result<Vec<Part>, ProxyError> {
    let at = || format!("messages.[{index}].content");
    let refuse =
        |message: String| ProxyError::invalid(format!("messages[{index}]: {message}")).at(at());
    match content {
        None => Ok(Vec::new()),
        Some(WireContent::Text(text)) if text.is_empty() => Ok(Vec::new()),
        Some(WireContent::Text(text)) => Ok(vec![Part::text(text)]),
        Some(WireContent::Parts(parts)) => {
            let mut out = Vec::with_capacity(parts.len());
            for mut part in parts {
                if part.kind == "text"
                    && let Some(text) = part.text.take()
                {
                    if !text.is_empty() {
                        out.push(Part::text(text));
                    }
                    continue;
                }
                let media = match (part.kind.as_str(), &part) {
                    (
                        "image_url",
                        WirePart {
                            image_url: Some(image),
                            ..
                        },
                    ) => media::from_data_url(&image.url),
                    (
                        "input_audio",
                        WirePart {
                            input_audio: Some(audio),
                            ..
                        },
                    ) => media::audio_type(&audio.format)
                        .and_then(|kind| media::from_base64(kind, &audio.data)),
                    (
                        "file",
                        WirePart {
                            file: Some(file), ..
                        },
                    ) => match (&file.file_data, &file.file_id) {
                        (Some(data), _) => media::from_data_url(data),
                        (None, Some(id)) => Err(format!(
                            "file `{id}` is a file id of the provider's files API; the recording proxy takes files inline (`file_data`)"
                        )),
                        (None, None) => Err("a `file` part needs `file_data`".into()),
                    },
                    ("text" | "image_url" | "input_audio" | "file", _) => {
                        return Err(refuse(format!(
                            "a `{}` content part is missing its `{}` field",
                            part.kind, part.kind
                        )));
                    }
                    (kind, _) => {
                        return Err(refuse(format!(
                            "content part type `{kind}` is not supported by the recording proxy \
                             (text, image_url, input_audio, file)"
                        )));
                    }
                };
                if !takes_media {
                    return Err(refuse(format!(
                        "a `{}` part may stand only in a user message",
                        part.kind
                    )));
                }
                out.push(Part::Attachment(media.map_err(refuse)?));
            }
            Ok(out)
        }
    }
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
        let (a, places) = plain.thread_messages().unwrap();
        let (b, _) = reserialised.thread_messages().unwrap();
        assert_eq!(a, b);
        assert_eq!(
            places[2].parts,
            ["messages.[2].tool_call_id", "messages.[3].tool_call_id"],
            "each result keeps its own place"
        );
        assert_eq!(
            places[1].parts,
            ["messages.[1].tool_calls.[0]", "messages.[1].tool_calls.[1]"]
        );
        assert_eq!(a.len(), 3, "the two tool messages become one");
        assert_eq!(a[2].tool_results_iter().count(), 2);
    }

    #[test]
    fn unsupported_input_is_a_clear_error() {
        let remote = request(serde_json::json!([
            {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://x/y.png"}}]}
        ]))
        .thread_messages()
        .unwrap_err();
        assert!(
            remote.message.contains("does not fetch"),
            "{}",
            remote.message
        );
        assert_eq!(remote.param.as_deref(), Some("messages.[0].content"));
        let bare = request(serde_json::json!([
            {"role": "user", "content": [{"type": "image_url"}]}
        ]))
        .thread_messages()
        .unwrap_err();
        assert!(
            bare.message.contains("missing its `image_url`"),
            "{}",
            bare.message
        );
        let refusal = request(serde_json::json!([
            {"role": "user", "content": [{"type": "refusal", "refusal": "no"}]}
        ]))
        .thread_messages()
        .unwrap_err();
        assert!(refusal.message.contains("`refusal`"), "{}", refusal.message);
        let in_system = request(serde_json::json!([
            {"role": "system", "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}
        ]))
        .thread_messages()
        .unwrap_err();
        assert!(
            in_system.message.contains("only in a user message"),
            "{}",
            in_system.message
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

    #[test]
    fn media_parts_are_attachments_in_their_place() {
        let messages = request(serde_json::json!([
            {"role": "user", "content": [
                {"type": "text", "text": "what is this?"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw==", "detail": "low"}},
                {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}},
                {"type": "file", "file": {"file_data": "data:application/pdf;base64,JVBERg==", "filename": "a.pdf"}}
            ]}
        ]))
        .thread_messages()
        .unwrap()
        .0;
        let kinds: Vec<&str> = messages[0]
            .parts
            .iter()
            .map(|part| match part {
                Part::Attachment(attachment) => attachment.media_type.as_str(),
                other => other.kind_name(),
            })
            .collect();
        assert_eq!(kinds, ["text", "image/png", "audio/wav", "application/pdf"]);
    }

    fn refusal(messages: Value) -> ProxyError {
        let turn = request(messages).turn().unwrap();
        super::super::super::results::check(&turn.messages, &turn.places).unwrap_err()
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
            stray.message.contains("`messages.[1]` calls `c1`"),
            "the calls are listed: {stray}"
        );
        assert_eq!(stray.param.as_deref(), Some("messages.[3].tool_call_id"));

        let no_call = refusal(serde_json::json!([
            {"role": "user", "content": "hi"},
            {"role": "tool", "tool_call_id": "c1", "content": "one"}
        ]));
        assert_eq!(
            no_call.param.as_deref(),
            Some("messages.[1].tool_call_id"),
            "{no_call}"
        );

        // A call of an earlier assistant message does not count.
        let late = refusal(serde_json::json!([
            {"role": "assistant", "content": null, "tool_calls": [call("c1")]},
            {"role": "tool", "tool_call_id": "c1", "content": "one"},
            {"role": "assistant", "content": "done"},
            {"role": "tool", "tool_call_id": "c1", "content": "again"}
        ]));
        assert_eq!(
            late.param.as_deref(),
            Some("messages.[3].tool_call_id"),
            "{late}"
        );

        let twice = refusal(serde_json::json!([
            {"role": "assistant", "content": null, "tool_calls": [call("c1"), call("c2")]},
            {"role": "tool", "tool_call_id": "c1", "content": "one"},
            {"role": "tool", "tool_call_id": "c1", "content": "one again"},
            {"role": "tool", "tool_call_id": "c2", "content": "two"}
        ]));
        assert!(
            twice
                .message
                .contains("already has its result (`messages.[1].tool_call_id`)"),
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
        assert!(
            skipped.message.contains("before `messages.[2]`"),
            "{skipped}"
        );
        assert_eq!(
            skipped.param.as_deref(),
            Some("messages.[0].tool_calls.[0]")
        );

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
            let turn = request(fine.clone()).turn().unwrap();
            assert!(
                super::super::super::results::check(&turn.messages, &turn.places).is_ok(),
                "{fine}"
            );
        }
    }
}
