/*!
A [`ModelRequest`] as an Anthropic Messages request body.

- **System.** The system messages before the first other message become
  the top-level `system`, as text blocks (so each can carry
  `cache_control`). Anthropic has no system role inside `messages`, so a
  system message standing later in the thread is sent as a user-role text
  block with its text unchanged (merged into the neighbouring user turn, see
  below). The stored node keeps its system role.
- **Roles.** User and tool messages become `user` turns, assistant messages
  `assistant` turns. Consecutive turns of the same role are merged into one
  (Anthropic requires alternation); within a merged user turn the
  `tool_result` blocks are moved, in order, ahead of the other blocks, as
  Anthropic requires.
- **Tool calls** become `tool_use` blocks whose `input` is the stored
  argument text embedded verbatim when it is a JSON object. Empty (or
  all-whitespace) arguments, which a tool without parameters produces, are
  sent as `{}`. Anything else (other JSON, or text that is not JSON at all)
  is sent as `{"_raw_arguments": "<the text>"}`, so the model sees exactly
  what it wrote and the request never fails on it.
- **Tool results** become `tool_result` blocks (`tool_use_id`, `content`,
  `is_error`).
- **Ids** that Anthropic would reject are mapped ([`super::super::ids`]),
  identically in `tool_use` and `tool_result`.
- **Cache hints.** A part carrying `Annotation::CacheHint` in
  `request.annotations` (keyed by node id and part index) gets
  `cache_control: {"type": "ephemeral"}` on its block.
- **Attachments**: images (JPEG, PNG, GIF, WebP) become `image` blocks,
  PDFs and plain text `document` blocks, in user and tool messages; any
  other attachment, or one elsewhere, is refused before sending.
- Empty text parts are left out (Anthropic rejects empty text blocks).
- **Options**: `max_tokens` (required by Anthropic: the provider's default,
  4096, when the request sets none), `temperature`, `top_p`. Anthropic has
  no `seed`, and `output_schema` is not sent (the engine validates the
  reply regardless).
*/

use crate::http::ids::anthropic_tool_id;
use crate::http::transport::{json_body, refused};
use base64::Engine as _;
use serde::Serialize;
use serde::ser::SerializeMap;
use serde_json::value::RawValue;
use skein_core::{Attachment, AttachmentSupport, ModelRequest, Part, ProviderError, Role};
use std::borrow::Cow;

/// What Anthropic takes: images as `image` blocks, the rest as `document`
/// blocks.
pub(crate) const ATTACHMENTS: AttachmentSupport = AttachmentSupport::Only(&[
    "image/jpeg",
    "image/png",
    "image/gif",
    "image/webp",
    "application/pdf",
    "text/plain",
]);

#[derive(Serialize)]
struct MessagesRequest<'a> {
    model: &'a str,
    max_tokens: u32,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    system: Vec<Block<'a>>,
    messages: Vec<Turn<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<Tool<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_p: Option<f64>,
    stream: bool,
}

#[derive(Serialize)]
struct Turn<'a> {
    role: &'static str,
    content: Vec<Block<'a>>,
}

#[derive(Serialize)]
struct Tool<'a> {
    name: &'a str,
    description: &'a str,
    input_schema: &'a serde_json::Value,
}

/// One content block, with its cache control.
struct Block<'a> {
    kind: BlockKind<'a>,
    cached: bool,
}

enum BlockKind<'a> {
    Text(&'a str),
    Image(&'a Attachment),
    Document(&'a Attachment),
    ToolUse {
        id: Cow<'a, str>,
        name: &'a str,
        input: Input<'a>,
    },
    ToolResult {
        tool_use_id: Cow<'a, str>,
        content: &'a str,
        is_error: bool,
    },
}

/// A `tool_use` input: the stored text itself, or a stand-in.
enum Input<'a> {
    Raw(&'a RawValue),
    Owned(Box<RawValue>),
}

impl Serialize for Block<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        match &self.kind {
            BlockKind::Text(text) => {
                map.serialize_entry("type", "text")?;
                map.serialize_entry("text", text)?;
            }
            BlockKind::Image(attachment) => {
                map.serialize_entry("type", "image")?;
                map.serialize_entry("source", &Base64Source(attachment))?;
            }
            BlockKind::Document(attachment) => {
                map.serialize_entry("type", "document")?;
                if attachment.media_type == "text/plain" {
                    map.serialize_entry("source", &TextSource(attachment))?;
                } else {
                    map.serialize_entry("source", &Base64Source(attachment))?;
                }
            }
            BlockKind::ToolUse { id, name, input } => {
                map.serialize_entry("type", "tool_use")?;
                map.serialize_entry("id", id)?;
                map.serialize_entry("name", name)?;
                match input {
                    Input::Raw(raw) => map.serialize_entry("input", raw)?,
                    Input::Owned(raw) => map.serialize_entry("input", raw)?,
                }
            }
            BlockKind::ToolResult {
                tool_use_id,
                content,
                is_error,
            } => {
                map.serialize_entry("type", "tool_result")?;
                map.serialize_entry("tool_use_id", tool_use_id)?;
                map.serialize_entry("content", content)?;
                map.serialize_entry("is_error", is_error)?;
            }
        }
        if self.cached {
            map.serialize_entry("cache_control", &CacheControl { kind: "ephemeral" })?;
        }
        map.end()
    }
}

#[derive(Serialize)]
struct CacheControl {
    #[serde(rename = "type")]
    kind: &'static str,
}

struct Base64Source<'a>(&'a Attachment);

impl Serialize for Base64Source<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(3))?;
        map.serialize_entry("type", "base64")?;
        map.serialize_entry("media_type", &self.0.media_type)?;
        map.serialize_entry(
            "data",
            &base64::engine::general_purpose::STANDARD.encode(&self.0.data),
        )?;
        map.end()
    }
}

struct TextSource<'a>(&'a Attachment);

impl Serialize for TextSource<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(3))?;
        map.serialize_entry("type", "text")?;
        map.serialize_entry("media_type", "text/plain")?;
        map.serialize_entry("data", &String::from_utf8_lossy(&self.0.data))?;
        map.end()
    }
}

/// The JSON body for `request`, with `default_max_tokens` when the request
/// sets no limit.
pub(crate) fn body(
    request: &ModelRequest,
    default_max_tokens: u32,
) -> Result<Vec<u8>, ProviderError> {
    let mut system = Vec::new();
    let mut turns: Vec<Turn<'_>> = Vec::new();
    let mut leading = true;
    for (position, node) in request.thread.nodes().into_iter().enumerate() {
        let message = node.message();
        leading &= message.role == Role::System;
        let role = match message.role {
            Role::Assistant => "assistant",
            _ => "user",
        };
        let mut blocks = Vec::with_capacity(message.parts.len());
        for (index, part) in message.parts.iter().enumerate() {
            let cached = request
                .annotations
                .cache_hint(node.id(), index as u32)
                .is_some();
            if let Some(kind) = block(part, message.role, position)? {
                blocks.push(Block { kind, cached });
            }
        }
        if leading {
            system.extend(blocks);
            continue;
        }
        match turns.last_mut() {
            Some(turn) if turn.role == role => turn.content.extend(blocks),
            _ => turns.push(Turn {
                role,
                content: blocks,
            }),
        }
    }
    for turn in &mut turns {
        if turn.role == "user" {
            // A stable partition: results first, in order.
            let (mut results, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut turn.content)
                .into_iter()
                .partition(|block| matches!(block.kind, BlockKind::ToolResult { .. }));
            results.extend(rest);
            turn.content = results;
        }
    }
    let body = MessagesRequest {
        model: &request.model,
        max_tokens: request.options.max_tokens.unwrap_or(default_max_tokens),
        system,
        messages: turns,
        tools: request
            .tools
            .iter()
            .map(|tool| Tool {
                name: &tool.name,
                description: &tool.description,
                input_schema: &tool.input_schema,
            })
            .collect(),
        temperature: request.options.temperature,
        top_p: request.options.top_p,
        stream: true,
    };
    json_body(&body)
}

/// The block for one part, `None` for a part left out.
fn block<'a>(
    part: &'a Part,
    role: Role,
    position: usize,
) -> Result<Option<BlockKind<'a>>, ProviderError> {
    let takes_content = matches!(role, Role::User | Role::Tool);
    Ok(Some(match part {
        Part::Text { text } if text.is_empty() => return Ok(None),
        Part::Text { text } => BlockKind::Text(text),
        Part::Attachment(attachment) if takes_content => attachment_block(attachment, position)?,
        Part::Attachment(_) => {
            return Err(refused(format!(
                "message {position} ({role}) has an attachment; Anthropic takes attachments only in user messages"
            )));
        }
        Part::ToolCall(call) if role == Role::Assistant => BlockKind::ToolUse {
            id: anthropic_tool_id(&call.id),
            name: &call.name,
            input: input(&call.arguments)?,
        },
        Part::ToolCall(_) => {
            return Err(refused(format!(
                "message {position} ({role}) has a tool call; only assistant messages may"
            )));
        }
        Part::ToolResult(result) if takes_content => BlockKind::ToolResult {
            tool_use_id: anthropic_tool_id(&result.call_id),
            content: &result.content,
            is_error: result.is_error,
        },
        Part::ToolResult(_) => {
            return Err(refused(format!(
                "message {position} ({role}) has a tool result; only tool and user messages may"
            )));
        }
        _ => {
            return Err(refused(format!(
                "message {position} has a part of a kind Anthropic cannot take"
            )));
        }
    }))
}

fn attachment_block(
    attachment: &Attachment,
    position: usize,
) -> Result<BlockKind<'_>, ProviderError> {
    let media_type = attachment.media_type.as_str();
    if !ATTACHMENTS.accepts(media_type) {
        return Err(refused(format!(
            "message {position} has a `{media_type}` attachment; Anthropic takes JPEG, PNG, GIF and WebP images, PDFs and plain text"
        )));
    }
    Ok(if media_type.starts_with("image/") {
        BlockKind::Image(attachment)
    } else {
        BlockKind::Document(attachment)
    })
}

/// The `input` of an Anthropic `tool_use` block for a tool call's stored
/// argument text: the text itself when it is a JSON object, `{}` for empty
/// arguments, else `{"_raw_arguments": "<the text>"}` (see the module
/// docs). Whoever speaks Anthropic's format (this provider, the recording
/// proxy answering Anthropic clients) maps arguments this one way.
pub fn tool_use_input(arguments: &str) -> Box<RawValue> {
    match input(arguments) {
        Ok(Input::Raw(raw)) => raw.to_owned(),
        Ok(Input::Owned(raw)) => raw,
        // `input` encodes only JSON it made itself.
        Err(_) => RawValue::from_string("{}".into()).expect("`{}` is JSON"),
    }
}

/// A tool call's arguments as a JSON value: the value of its
/// [`tool_use_input`]. Two calls whose arguments have equal values are the
/// same call, however a client or model spaced or ordered the text: the
/// recording proxy matches calls a client re-encoded this way, and a replay
/// answers a call from the recording this way.
pub fn arguments_value(arguments: &str) -> serde_json::Value {
    serde_json::from_str(tool_use_input(arguments).get())
        .unwrap_or_else(|_| serde_json::Value::Object(serde_json::Map::new()))
}

/// The `input` of a `tool_use` block for stored argument text.
fn input(arguments: &str) -> Result<Input<'_>, ProviderError> {
    if let Ok(raw) = serde_json::from_str::<&RawValue>(arguments)
        && raw.get().trim_start().starts_with('{')
    {
        return Ok(Input::Raw(raw));
    }
    let text = if arguments.trim().is_empty() {
        "{}".to_owned()
    } else {
        serde_json::json!({ "_raw_arguments": arguments }).to_string()
    };
    RawValue::from_string(text)
        .map(Input::Owned)
        .map_err(|error| refused(format!("could not encode tool arguments: {error}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_match_by_value_whatever_their_spacing_and_order() {
        assert_eq!(
            arguments_value("{\"a\": 1, \"b\": [2]}"),
            arguments_value("{ \"b\":[2],\"a\":1 }")
        );
        assert_ne!(arguments_value("{\"a\": 1}"), arguments_value("{\"a\": 2}"));
        assert_eq!(arguments_value(""), arguments_value("{}"));
        assert_eq!(
            arguments_value("not json"),
            serde_json::json!({"_raw_arguments": "not json"})
        );
    }

    #[test]
    fn object_arguments_are_embedded_verbatim_and_others_wrapped() {
        let raw = |text: &str| match input(text).unwrap() {
            Input::Raw(raw) => raw.get().to_owned(),
            Input::Owned(raw) => raw.get().to_owned(),
        };
        assert_eq!(raw("{ \"q\" :  1 }"), "{ \"q\" :  1 }");
        assert_eq!(raw(""), "{}");
        assert_eq!(raw("  "), "{}");
        assert_eq!(raw("[1, 2]"), r#"{"_raw_arguments":"[1, 2]"}"#);
        assert_eq!(raw("{\"q\": "), r#"{"_raw_arguments":"{\"q\": "}"#);
        assert_eq!(raw("not json"), r#"{"_raw_arguments":"not json"}"#);
    }
}
