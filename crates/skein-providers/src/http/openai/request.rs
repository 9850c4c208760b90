/*!
A [`ModelRequest`] as an OpenAI chat-completions request body.

| skein | wire |
|---|---|
| system message | `{"role": "system", "content": ...}` |
| user message | `{"role": "user", "content": ...}` |
| assistant message | `{"role": "assistant", "content": text or null, "tool_calls": [...]}` |
| tool call | `{"id", "type": "function", "function": {"name", "arguments"}}`, `arguments` the stored text exactly |
| tool result | `{"role": "tool", "tool_call_id", "content"}`, one message per result |
| image attachment | `{"type": "image_url", "image_url": {"url": "data:<type>;base64,..."}}` |
| tool spec | `{"type": "function", "function": {"name", "description", "parameters"}}` |
| output schema | `response_format: {"type": "json_schema", "json_schema": {"name": "output", "schema"}}` |
| options | `temperature`, `top_p`, `seed`, `max_tokens` |

`content` is a plain string when a message is one text part (what every
compatible server understands), else an array of text and image parts.
Results in a user message become `tool` messages ahead of it; text or
attachments in a tool message become a user message after its results.
OpenAI has no error flag on tool results: the content goes as it is. Ids
longer than OpenAI accepts are mapped ([`super::super::ids`]). Annotations
are not sent: OpenAI caches prompt prefixes by itself, and source tags are
skein's own.

Refused before sending, as `BadRequest`: attachments that are not images,
attachments outside user and tool messages, tool calls outside assistant
messages, tool results in system or assistant messages.
*/

use crate::http::ids::openai_tool_id;
use crate::http::transport::{json_body, refused};
use base64::Engine as _;
use serde::Serialize;
use skein_core::{Attachment, AttachmentSupport, Message, ModelRequest, Part, ProviderError, Role};
use std::borrow::Cow;

#[derive(Serialize)]
struct ChatRequest<'a> {
    model: &'a str,
    messages: Vec<ChatMessage<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<ChatTool<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    response_format: Option<ResponseFormat<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_p: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    seed: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u32>,
    stream: bool,
    stream_options: StreamOptions,
}

#[derive(Serialize)]
struct StreamOptions {
    include_usage: bool,
}

#[derive(Serialize)]
struct ChatMessage<'a> {
    role: &'static str,
    content: Option<Content<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tool_calls: Vec<WireToolCall<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_call_id: Option<Cow<'a, str>>,
}

#[derive(Serialize)]
#[serde(untagged)]
enum Content<'a> {
    Text(&'a str),
    Parts(Vec<ContentPart<'a>>),
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum ContentPart<'a> {
    Text { text: &'a str },
    ImageUrl { image_url: ImageUrl },
}

#[derive(Serialize)]
struct ImageUrl {
    url: String,
}

#[derive(Serialize)]
struct WireToolCall<'a> {
    id: Cow<'a, str>,
    #[serde(rename = "type")]
    kind: &'static str,
    function: WireFunctionCall<'a>,
}

#[derive(Serialize)]
struct WireFunctionCall<'a> {
    name: &'a str,
    arguments: &'a str,
}

#[derive(Serialize)]
struct ChatTool<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    function: FunctionSpec<'a>,
}

#[derive(Serialize)]
struct FunctionSpec<'a> {
    name: &'a str,
    description: &'a str,
    parameters: &'a serde_json::Value,
}

#[derive(Serialize)]
struct ResponseFormat<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    json_schema: JsonSchema<'a>,
}

#[derive(Serialize)]
struct JsonSchema<'a> {
    name: &'static str,
    schema: &'a serde_json::Value,
}

/// The JSON body for `request`.
pub(crate) fn body(request: &ModelRequest) -> Result<Vec<u8>, ProviderError> {
    let messages = request.thread.messages();
    let mut wire = Vec::with_capacity(messages.len());
    for (position, message) in messages.into_iter().enumerate() {
        map_message(message, position, &mut wire)?;
    }
    let body = ChatRequest {
        model: &request.model,
        messages: wire,
        tools: request
            .tools
            .iter()
            .map(|tool| ChatTool {
                kind: "function",
                function: FunctionSpec {
                    name: &tool.name,
                    description: &tool.description,
                    parameters: &tool.input_schema,
                },
            })
            .collect(),
        response_format: request.output_schema.as_ref().map(|schema| ResponseFormat {
            kind: "json_schema",
            json_schema: JsonSchema {
                name: "output",
                schema,
            },
        }),
        temperature: request.options.temperature,
        top_p: request.options.top_p,
        seed: request.options.seed,
        max_tokens: request.options.max_tokens,
        stream: true,
        stream_options: StreamOptions {
            include_usage: true,
        },
    };
    json_body(&body)
}

fn map_message<'a>(
    message: &'a Message,
    position: usize,
    out: &mut Vec<ChatMessage<'a>>,
) -> Result<(), ProviderError> {
    let role = message.role;
    let mut content = Vec::new();
    let mut calls = Vec::new();
    let mut results = Vec::new();
    for part in &message.parts {
        match part {
            Part::Text { text } => content.push(ContentPart::Text { text }),
            Part::Attachment(attachment) => match role {
                Role::User | Role::Tool => content.push(image(attachment, position)?),
                _ => {
                    return Err(refused(format!(
                        "message {position} ({role}) has an attachment; OpenAI takes attachments only in user messages"
                    )));
                }
            },
            Part::ToolCall(call) => {
                if role != Role::Assistant {
                    return Err(refused(format!(
                        "message {position} ({role}) has a tool call; only assistant messages may"
                    )));
                }
                calls.push(WireToolCall {
                    id: openai_tool_id(&call.id),
                    kind: "function",
                    function: WireFunctionCall {
                        name: &call.name,
                        arguments: &call.arguments,
                    },
                });
            }
            Part::ToolResult(result) => {
                if !matches!(role, Role::User | Role::Tool) {
                    return Err(refused(format!(
                        "message {position} ({role}) has a tool result; only tool and user messages may"
                    )));
                }
                results.push(ChatMessage {
                    role: "tool",
                    content: Some(Content::Text(&result.content)),
                    tool_calls: Vec::new(),
                    tool_call_id: Some(openai_tool_id(&result.call_id)),
                });
            }
            _ => {
                return Err(refused(format!(
                    "message {position} has a part of a kind OpenAI cannot take"
                )));
            }
        }
    }
    out.append(&mut results);
    let wire_role = match role {
        Role::System => "system",
        Role::User | Role::Tool => "user",
        Role::Assistant => "assistant",
    };
    if role == Role::Assistant {
        out.push(ChatMessage {
            role: wire_role,
            content: (!content.is_empty()).then(|| content_of(content)),
            tool_calls: calls,
            tool_call_id: None,
        });
    } else if role != Role::Tool || !content.is_empty() {
        out.push(ChatMessage {
            role: wire_role,
            content: Some(content_of(content)),
            tool_calls: Vec::new(),
            tool_call_id: None,
        });
    }
    Ok(())
}

/// One text part as a plain string, anything else as an array.
fn content_of(mut parts: Vec<ContentPart<'_>>) -> Content<'_> {
    match parts.as_slice() {
        [] => Content::Text(""),
        [ContentPart::Text { .. }] => match parts.pop() {
            Some(ContentPart::Text { text }) => Content::Text(text),
            _ => unreachable!("the slice pattern matched one text part"),
        },
        _ => Content::Parts(parts),
    }
}

/// What chat completions take: images, as data URLs.
pub(crate) const ATTACHMENTS: AttachmentSupport = AttachmentSupport::Only(&["image/*"]);

fn image(attachment: &Attachment, position: usize) -> Result<ContentPart<'static>, ProviderError> {
    if !ATTACHMENTS.accepts(&attachment.media_type) {
        return Err(refused(format!(
            "message {position} has a `{}` attachment; OpenAI chat completions take only images",
            attachment.media_type
        )));
    }
    let data = base64::engine::general_purpose::STANDARD.encode(&attachment.data);
    Ok(ContentPart::ImageUrl {
        image_url: ImageUrl {
            url: format!("data:{};base64,{data}", attachment.media_type),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use skein_core::{GenerationOptions, Thread, ToolCall, ToolResult};

    fn json(request: &ModelRequest) -> serde_json::Value {
        serde_json::from_slice(&body(request).unwrap()).unwrap()
    }

    #[test]
    fn a_simple_request_has_stream_options_and_plain_string_content() {
        let mut request = ModelRequest::new(
            "gpt-4o-mini",
            Thread::from_messages([Message::system("Be brief."), Message::user("Hi")]),
        );
        request.options = GenerationOptions {
            temperature: Some(0.5),
            top_p: None,
            seed: Some(7),
            max_tokens: Some(64),
        };
        assert_eq!(
            json(&request),
            serde_json::json!({
                "model": "gpt-4o-mini",
                "messages": [
                    {"role": "system", "content": "Be brief."},
                    {"role": "user", "content": "Hi"}
                ],
                "temperature": 0.5,
                "seed": 7,
                "max_tokens": 64,
                "stream": true,
                "stream_options": {"include_usage": true}
            })
        );
    }

    #[test]
    fn calls_and_results_map_to_tool_calls_and_tool_messages() {
        let thread = Thread::from_messages([
            Message::user("Weather?"),
            Message::new(
                Role::Assistant,
                vec![Part::ToolCall(ToolCall {
                    id: "call_1".into(),
                    name: "weather".into(),
                    arguments: "{ \"city\":\"Paris\" }".into(),
                })],
            ),
            Message::tool_results([ToolResult {
                call_id: "call_1".into(),
                content: "sunny".into(),
                is_error: false,
            }]),
        ]);
        let value = json(&ModelRequest::new("m", thread));
        let messages = &value["messages"];
        assert_eq!(messages[1]["content"], serde_json::Value::Null);
        assert_eq!(
            messages[1]["tool_calls"][0]["function"]["arguments"],
            "{ \"city\":\"Paris\" }"
        );
        assert_eq!(messages[2]["role"], "tool");
        assert_eq!(messages[2]["tool_call_id"], "call_1");
        assert_eq!(messages.as_array().unwrap().len(), 3);
    }

    #[test]
    fn non_image_attachments_are_refused() {
        let thread = Thread::from_messages([Message::new(
            Role::User,
            vec![Part::Attachment(Attachment {
                media_type: "application/pdf".into(),
                data: vec![1, 2, 3],
            })],
        )]);
        let error = body(&ModelRequest::new("m", thread)).unwrap_err();
        assert!(
            matches!(error, ProviderError::BadRequest { ref message, .. } if message.contains("application/pdf"))
        );
    }
}
