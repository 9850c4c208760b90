/*!
Anthropic Messages (`POST /v1/messages`), as the proxy reads and writes
them: the request mapped onto skein's messages, the reply written back
whole or as Anthropic's stream events (`message_start`,
`content_block_start`/`_delta`/`_stop`, `message_delta`, `message_stop`).

The mapping is the inverse of the Anthropic provider's
(`skein_providers::http::anthropic`), so a history means the same parts
whichever API carried it:

- `system` (a string, or text blocks) is the leading system message, one
  text part per block.
- A `user` turn's `tool_result` blocks become a tool message (one result
  each, in order), and its other blocks a user message after it: the
  shape OpenAI's tool messages and skein's tool loop give the same
  history. A result's content is its text (text blocks concatenated);
  `is_error` is kept.
- `tool_use` blocks are tool calls. Their `input` is a JSON object, which
  a client re-serialises as it likes: the graph step
  ([`super::graph`]) matches it, by JSON value, against the stored call
  the proxy answered with, so the exact argument text the model wrote is
  kept; an `input` no stored node has is kept as the client sent it.
- `image` and `document` blocks with base64 (or, for a document, plain
  text) sources are attachment parts ([`super::media`]).
- `cache_control` on a text, media, tool-use or tool-result block is a
  cache-hint annotation on its part (recorded on the run, never in the
  node); on a tool definition it has no part to stand on and is not kept.
- Empty text blocks add no part (a message left with none is kept,
  empty, as chat completions keep theirs). `max_tokens`, `temperature` and `top_p`
  are the generation options; `stop_sequences`, `top_k`, `tool_choice`,
  `metadata` and `thinking` are not used.

Blocks skein has no part for (`thinking`, server tools, search results,
media by URL or file id) are refused with a 400 naming them, never
dropped.
*/

use super::media;
use super::results::ParamPaths;
use super::turn::{Api, ErrorKind, Events, ProxyError, Reply, Turn, named_event};
use axum::body::Bytes;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::value::RawValue;
use serde_json::{Value, json};
use skein::core::provider::GenerationOptions;
use skein::core::{
    Annotation, Attachment, CacheHint, Message, Part, Role, ToolCall, ToolResult, ToolSpec,
};
use skein::providers::http::tool_use_input;
use skein::store::RunId;

/// A Messages request.
#[derive(Debug, Deserialize)]
pub struct MessagesRequest {
    pub model: Option<String>,
    pub max_tokens: Option<u32>,
    pub system: Option<Box<RawValue>>,
    pub messages: Vec<WireMessage>,
    #[serde(default)]
    pub tools: Vec<WireTool>,
    #[serde(default)]
    pub stream: bool,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    /// `metadata.user_id`: a session marker.
    pub metadata: Option<Value>,
    /// Message threads (`anthropic-beta: message-threads-…`): refused with
    /// the code the SDK falls back from.
    pub thread: Option<Value>,
    /// Extended thinking: not honoured, reported.
    pub thinking: Option<Value>,
    pub tool_choice: Option<Value>,
}

#[derive(Debug, Deserialize)]
pub struct WireMessage {
    pub role: String,
    /// A string, or an array of blocks (read in a second step, so a
    /// `tool_use` input keeps its bytes).
    pub content: Box<RawValue>,
}

#[derive(Debug, Deserialize)]
pub struct Block {
    #[serde(rename = "type")]
    pub kind: String,
    pub text: Option<String>,
    pub source: Option<Source>,
    pub id: Option<String>,
    pub name: Option<String>,
    pub input: Option<Box<RawValue>>,
    pub tool_use_id: Option<String>,
    pub content: Option<Box<RawValue>>,
    #[serde(default)]
    pub is_error: bool,
    pub cache_control: Option<Value>,
}

#[derive(Debug, Deserialize)]
pub struct Source {
    #[serde(rename = "type")]
    pub kind: String,
    pub media_type: Option<String>,
    pub data: Option<String>,
}

#[derive(Debug, Deserialize)]
pub struct WireTool {
    #[serde(rename = "type", default)]
    pub kind: Option<String>,
    pub name: String,
    pub description: Option<String>,
    pub input_schema: Option<Value>,
}

/// A string, or an array of `T`.
enum Either<T> {
    Text(String),
    List(Vec<T>),
}

fn string_or_list<T: DeserializeOwned>(raw: &RawValue) -> Result<Either<T>, serde_json::Error> {
    if raw.get().trim_start().starts_with('"') {
        serde_json::from_str(raw.get()).map(Either::Text)
    } else {
        serde_json::from_str(raw.get()).map(Either::List)
    }
}

/// What the mapping builds: the messages, their annotations and the tool
/// calls whose input a client re-encoded.
#[derive(Default)]
struct Mapped {
    messages: Vec<Message>,
    places: Vec<ParamPaths>,
    annotations: Vec<(usize, u32, Annotation)>,
    reencoded: Vec<(usize, usize, Value)>,
}

impl Mapped {
    /// Append `message`, from `place`, with its cache hints, given by part
    /// index.
    fn push(&mut self, message: Message, place: ParamPaths, cached: Vec<u32>) {
        self.places.push(place);
        let index = self.messages.len();
        for part in cached {
            self.annotations
                .push((index, part, Annotation::CacheHint(CacheHint::Ephemeral)));
        }
        self.messages.push(message);
    }
}

impl MessagesRequest {
    /// The request as a [`Turn`], or why it cannot be mapped.
    pub fn turn(&self) -> Result<Turn, ProxyError> {
        if self.messages.is_empty() {
            return Err(ProxyError::invalid("`messages` is empty").at("messages"));
        }
        if self.thread.is_some() {
            return Err(ProxyError::invalid(
                "the recording proxy does not keep message threads: send the whole history \
                 each request (the Anthropic SDK falls back to it on this error)",
            )
            .at("thread")
            .code("thread_unsupported_request"));
        }
        let offers_tools = self.offers_tools()?;
        let mut mapped = Mapped::default();
        if let Some(system) = &self.system {
            system_message(system, &mut mapped)?;
        }
        for (index, message) in self.messages.iter().enumerate() {
            map_message(message, index, &mut mapped)?;
        }
        Ok(Turn {
            messages: mapped.messages,
            places: mapped.places,
            annotations: mapped.annotations,
            tools: match offers_tools {
                true => self.tool_specs()?,
                false => Vec::new(),
            },
            options: GenerationOptions {
                temperature: self.temperature,
                top_p: self.top_p,
                seed: None,
                max_tokens: self.max_tokens,
            },
            model: self.model.clone(),
            stream: self.stream,
            record: true,
            reencoded: mapped.reencoded,
            previous: None,
            session: super::turn::session_of(self.metadata.as_ref(), None),
            unhonoured: self.unhonoured(),
        })
    }

    /// Whether the tools are offered, as `tool_choice` says: `auto` (or
    /// none given) offers them, `none` does not; forcing a call (`any`,
    /// `tool`) is refused, since the proxy's models cannot be made to.
    fn offers_tools(&self) -> Result<bool, ProxyError> {
        let Some(choice) = &self.tool_choice else {
            return Ok(true);
        };
        match choice.get("type").and_then(Value::as_str) {
            Some("auto") => Ok(true),
            Some("none") => Ok(false),
            Some(forced @ ("any" | "tool")) => Err(ProxyError::invalid(format!(
                "`tool_choice` `{forced}` forces a tool call, which the recording proxy's models \
                 cannot be made to do: send `auto` (or leave it out) and check the reply"
            ))
            .at("tool_choice.type")),
            _ => Err(ProxyError::invalid(
                "`tool_choice` needs a `type`: `auto`, `none`, `any` or `tool`",
            )
            .at("tool_choice")),
        }
    }

    /// The fields given that the proxy's models answer without.
    fn unhonoured(&self) -> Vec<&'static str> {
        let thinking = self.thinking.as_ref().is_some_and(|thinking| {
            thinking.get("type").and_then(Value::as_str) != Some("disabled")
        });
        thinking.then_some("thinking").into_iter().collect()
    }

    fn tool_specs(&self) -> Result<Vec<ToolSpec>, ProxyError> {
        self.tools
            .iter()
            .enumerate()
            .map(|(index, tool)| match tool.kind.as_deref() {
                None | Some("custom") => Ok(ToolSpec::new(
                    tool.name.clone(),
                    tool.description.clone().unwrap_or_default(),
                    tool.input_schema
                        .clone()
                        .unwrap_or_else(super::chat::no_parameters),
                )),
                Some(other) => Err(ProxyError::invalid(format!(
                    "tool type `{other}` is a server tool the recording proxy cannot run; \
                     only client tools (with `input_schema`) are supported"
                ))
                .at(format!("tools.[{index}].type"))),
            })
            .collect()
    }
}

fn system_message(system: &RawValue, mapped: &mut Mapped) -> Result<(), ProxyError> {
    let refuse = |message: String| ProxyError::invalid(message).at("system");
    let blocks = match string_or_list::<Block>(system).map_err(|problem| {
        refuse(format!(
            "`system` is not a string or text blocks: {problem}"
        ))
    })? {
        Either::Text(text) => {
            let parts = non_empty(text);
            let place = ParamPaths::uniform("system".into(), parts.len(), "");
            mapped.push(Message::new(Role::System, parts), place, Vec::new());
            return Ok(());
        }
        Either::List(blocks) => blocks,
    };
    let mut parts = Vec::new();
    let mut places = Vec::new();
    let mut cached = Vec::new();
    for (index, block) in blocks.into_iter().enumerate() {
        if block.kind != "text" {
            return Err(refuse(format!(
                "a `{}` block cannot stand in `system` (text only)",
                block.kind
            )));
        }
        let text = block.text.unwrap_or_default();
        if text.is_empty() {
            continue;
        }
        if block.cache_control.is_some() {
            cached.push(parts.len() as u32);
        }
        parts.push(Part::text(text));
        places.push(format!("system.[{index}]"));
    }
    let place = ParamPaths {
        message: "system".into(),
        parts: places,
    };
    mapped.push(Message::new(Role::System, parts), place, cached);
    Ok(())
}

fn non_empty(text: String) -> Vec<Part> {
    if text.is_empty() {
        Vec::new()
    } else {
        vec![Part::text(text)]
    }
}

fn map_message(wire: &WireMessage, index: usize, mapped: &mut Mapped) -> Result<(), ProxyError> {
    let at = format!("messages.[{index}].content");
    let refuse = |message: String| {
        ProxyError::invalid(format!("messages[{index}]: {message}")).at(at.clone())
    };
    let role = match wire.role.as_str() {
        "user" => Role::User,
        "assistant" => Role::Assistant,
        other => {
            return Err(ProxyError::invalid(format!(
                "messages[{index}]: role `{other}` is not supported (user, assistant; the system prompt is `system`)"
            ))
            .at(format!("messages.[{index}].role")));
        }
    };
    let blocks = match string_or_list::<Block>(&wire.content)
        .map_err(|problem| refuse(format!("`content` is not a string or blocks: {problem}")))?
    {
        Either::Text(text) => {
            let parts = non_empty(text);
            let place = ParamPaths::uniform(format!("messages.[{index}]"), parts.len(), ".content");
            mapped.push(Message::new(role, parts), place, Vec::new());
            return Ok(());
        }
        Either::List(blocks) => blocks,
    };
    // A user turn's results go first, in a tool message of their own:
    // (parts, cached part indices, places).
    let mut results = (Vec::new(), Vec::new(), Vec::new());
    let mut parts = (Vec::new(), Vec::new(), Vec::new());
    let mut reencoded = Vec::new();
    for (block_index, block) in blocks.into_iter().enumerate() {
        let block_at = format!("messages.[{index}].content.[{block_index}]");
        let cached = block.cache_control.is_some();
        let part = match (role, block.kind.as_str()) {
            (_, "text") => match block.text {
                Some(text) if text.is_empty() => continue,
                Some(text) => Part::text(text),
                None => return Err(refuse("a `text` block needs `text`".into())),
            },
            (Role::User, "image" | "document") => Part::Attachment(
                attachment(&block)
                    .map_err(|problem| refuse(format!("{}: {problem}", block.kind)))?,
            ),
            (Role::User, "tool_result") => {
                let Some(call_id) = block.tool_use_id.clone() else {
                    return Err(refuse("a `tool_result` block needs `tool_use_id`".into()));
                };
                let content = match &block.content {
                    None => String::new(),
                    Some(content) => result_text(content).map_err(refuse)?,
                };
                if cached {
                    results.1.push(results.0.len() as u32);
                }
                results.2.push(format!("{block_at}.tool_use_id"));
                results.0.push(Part::ToolResult(ToolResult {
                    call_id,
                    content,
                    is_error: block.is_error,
                }));
                continue;
            }
            (Role::Assistant, "tool_use") => {
                let (Some(id), Some(name), Some(input)) = (&block.id, &block.name, &block.input)
                else {
                    return Err(refuse(
                        "a `tool_use` block needs `id`, `name` and `input`".into(),
                    ));
                };
                let value: Value = serde_json::from_str(input.get())
                    .map_err(|problem| refuse(format!("`input` is not JSON: {problem}")))?;
                reencoded.push((parts.0.len(), value));
                Part::ToolCall(ToolCall {
                    id: id.clone(),
                    name: name.clone(),
                    arguments: input.get().to_string(),
                })
            }
            (_, kind) => {
                return Err(refuse(format!(
                    "a `{kind}` block in a {} message is not supported by the recording proxy \
                     ({})",
                    wire.role,
                    match role {
                        Role::User => "text, image, document, tool_result",
                        _ => "text, tool_use",
                    }
                )));
            }
        };
        if cached {
            parts.1.push(parts.0.len() as u32);
        }
        parts.2.push(block_at);
        parts.0.push(part);
    }
    let at = format!("messages.[{index}]");
    let place = |parts| ParamPaths {
        message: at.clone(),
        parts,
    };
    // A turn of results alone is a tool message; any other turn keeps its
    // message, empty or not, as chat completions keep theirs.
    let answers = !results.0.is_empty();
    if answers {
        mapped.push(
            Message::new(Role::Tool, results.0),
            place(results.2),
            results.1,
        );
    }
    if !answers || !parts.0.is_empty() {
        let at_message = mapped.messages.len();
        mapped.reencoded.extend(
            reencoded
                .into_iter()
                .map(|(part, value)| (at_message, part, value)),
        );
        mapped.push(Message::new(role, parts.0), place(parts.2), parts.1);
    }
    Ok(())
}

/// The text of a `tool_result`'s content: a string, or text blocks
/// concatenated.
fn result_text(content: &RawValue) -> Result<String, String> {
    match string_or_list::<Block>(content)
        .map_err(|problem| format!("a `tool_result`'s `content` is not a string or blocks: {problem}"))?
    {
        Either::Text(text) => Ok(text),
        Either::List(blocks) => blocks
            .into_iter()
            .map(|block| match (block.kind.as_str(), block.text) {
                ("text", Some(text)) => Ok(text),
                (kind, _) => Err(format!(
                    "a `{kind}` block inside a `tool_result` is not supported by the recording proxy (text only)"
                )),
            })
            .collect(),
    }
}

/// An `image` or `document` block's attachment.
fn attachment(block: &Block) -> Result<Attachment, String> {
    let Some(source) = &block.source else {
        return Err("the block needs a `source`".into());
    };
    match (source.kind.as_str(), &source.media_type, &source.data) {
        ("base64", Some(media_type), Some(data)) => media::from_base64(media_type, data),
        ("text", media_type, Some(data)) if block.kind == "document" => Ok(media::from_text(
            media_type.as_deref().unwrap_or("text/plain"),
            data,
        )),
        ("base64" | "text", _, _) => Err(format!(
            "a `{}` source needs `media_type` and `data`",
            source.kind
        )),
        (kind, _, _) => Err(format!(
            "a `{kind}` source is not supported: the recording proxy takes media inline \
             (`base64`, or `text` for a document) and never fetches it"
        )),
    }
}

/// How a Messages reply is written back.
pub struct Messages;

impl Api for Messages {
    type Events = MessageEvents;

    fn body(&self, reply: &Reply<'_>) -> Value {
        let content: Vec<Value> = reply
            .message()
            .parts
            .iter()
            .filter_map(content_block)
            .collect();
        json!({
            "id": message_id(reply.run()),
            "type": "message",
            "role": "assistant",
            "model": reply.model,
            "content": content,
            "stop_reason": stop_reason(reply),
            "stop_sequence": null,
            "usage": usage(reply),
        })
    }

    fn events(&self, model: &str) -> MessageEvents {
        MessageEvents {
            model: model.to_string(),
            text_block: None,
            blocks: 0,
        }
    }

    fn error(error: &ProxyError) -> Response {
        (error.status, axum::Json(error_body(error))).into_response()
    }
}

fn error_body(error: &ProxyError) -> Value {
    let kind = match error.kind {
        ErrorKind::InvalidRequest => "invalid_request_error",
        ErrorKind::Authentication => "authentication_error",
        ErrorKind::NotFound => "not_found_error",
        ErrorKind::RateLimit => "rate_limit_error",
        ErrorKind::Server => "api_error",
    };
    match error.code {
        Some(code) => json!({"type": "error", "error": {
            "type": kind, "message": error.message, "details": {"error_code": code},
        }}),
        None => json!({"type": "error", "error": {"type": kind, "message": error.message}}),
    }
}

fn message_id(run: &RunId) -> String {
    format!("msg_{run}")
}

/// A reply part as a content block (a text part left empty is none).
fn content_block(part: &Part) -> Option<Value> {
    match part {
        Part::Text { text } if text.is_empty() => None,
        Part::Text { text } => Some(json!({"type": "text", "text": text})),
        Part::ToolCall(call) => Some(json!({
            "type": "tool_use",
            "id": call.id,
            "name": call.name,
            "input": tool_use_input(&call.arguments),
        })),
        _ => None,
    }
}

fn stop_reason(reply: &Reply<'_>) -> &'static str {
    if reply.calls() {
        "tool_use"
    } else if reply.cut() {
        "max_tokens"
    } else {
        "end_turn"
    }
}

/// Anthropic's usage is never absent: a figure the model did not report
/// is 0.
fn usage(reply: &Reply<'_>) -> Value {
    let usage = reply.usage;
    json!({
        "input_tokens": usage.input_tokens.unwrap_or(0),
        "output_tokens": usage.output_tokens.unwrap_or(0),
    })
}

/// The events of one streamed Messages reply.
pub struct MessageEvents {
    model: String,
    /// The index of the open text block, once text has come.
    text_block: Option<usize>,
    /// Blocks started so far.
    blocks: usize,
}

impl MessageEvents {
    fn block_start(&mut self, block: Value) -> Bytes {
        let index = self.blocks;
        self.blocks += 1;
        named_event(
            "content_block_start",
            &json!({"type": "content_block_start", "index": index, "content_block": block}),
        )
    }

    fn delta(index: usize, delta: Value) -> Bytes {
        named_event(
            "content_block_delta",
            &json!({"type": "content_block_delta", "index": index, "delta": delta}),
        )
    }

    fn block_stop(index: usize) -> Bytes {
        named_event(
            "content_block_stop",
            &json!({"type": "content_block_stop", "index": index}),
        )
    }
}

impl Events for MessageEvents {
    fn start(&mut self, run: &RunId) -> Vec<Bytes> {
        vec![named_event(
            "message_start",
            &json!({"type": "message_start", "message": {
                "id": message_id(run),
                "type": "message",
                "role": "assistant",
                "model": self.model,
                "content": [],
                "stop_reason": null,
                "stop_sequence": null,
                "usage": {"input_tokens": 0, "output_tokens": 0},
            }}),
        )]
    }

    fn text(&mut self, text: &str) -> Vec<Bytes> {
        let mut frames = Vec::new();
        let index = match self.text_block {
            Some(index) => index,
            None => {
                let index = self.blocks;
                frames.push(self.block_start(json!({"type": "text", "text": ""})));
                self.text_block = Some(index);
                index
            }
        };
        frames.push(Self::delta(
            index,
            json!({"type": "text_delta", "text": text}),
        ));
        frames
    }

    fn finish(&mut self, reply: &Reply<'_>) -> Vec<Bytes> {
        let mut frames = Vec::new();
        if let Some(index) = self.text_block.take() {
            frames.push(Self::block_stop(index));
        }
        for call in reply.message().tool_calls() {
            let index = self.blocks;
            frames.push(self.block_start(json!({
                "type": "tool_use", "id": call.id, "name": call.name, "input": {}
            })));
            frames.push(Self::delta(
                index,
                json!({"type": "input_json_delta", "partial_json": tool_use_input(&call.arguments).get()}),
            ));
            frames.push(Self::block_stop(index));
        }
        frames.push(named_event(
            "message_delta",
            &json!({
                "type": "message_delta",
                "delta": {"stop_reason": stop_reason(reply), "stop_sequence": null},
                "usage": usage(reply),
            }),
        ));
        frames.push(named_event(
            "message_stop",
            &json!({"type": "message_stop"}),
        ));
        frames
    }

    fn fail(&mut self, error: &ProxyError) -> Vec<Bytes> {
        vec![named_event("error", &error_body(error))]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn turn(body: Value) -> Result<Turn, ProxyError> {
        serde_json::from_value::<MessagesRequest>(body)
            .unwrap()
            .turn()
    }

    #[test]
    fn a_tool_round_trip_maps_as_the_chat_api_maps_it() {
        let anthropic = turn(json!({
            "model": "m", "max_tokens": 10,
            "system": [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
            "messages": [
                {"role": "user", "content": "weather?"},
                {"role": "assistant", "content": [
                    {"type": "text", "text": "Let me look."},
                    {"type": "tool_use", "id": "c1", "name": "get_weather", "input": {"city":"Paris"}}
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "c1", "content": [{"type": "text", "text": "sunny"}]},
                    {"type": "text", "text": "thanks", "cache_control": {"type": "ephemeral"}}
                ]}
            ]
        }))
        .unwrap();
        let chat: super::super::chat::ChatRequest = serde_json::from_value(json!({"messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "weather?"},
            {"role": "assistant", "content": "Let me look.", "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}
            ]},
            {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
            {"role": "user", "content": "thanks"}
        ]}))
        .unwrap();
        assert_eq!(anthropic.messages, chat.thread_messages().unwrap().0);
        assert_eq!(
            anthropic.places[3].parts,
            ["messages.[2].content.[0].tool_use_id"]
        );
        let hint = Annotation::CacheHint(CacheHint::Ephemeral);
        assert_eq!(
            anthropic.annotations,
            vec![(0, 0, hint.clone()), (4, 0, hint)]
        );
        assert_eq!(anthropic.reencoded, vec![(2, 1, json!({"city": "Paris"}))]);
    }

    #[test]
    fn what_has_no_part_is_refused_with_its_place() {
        let refused = |content: Value| {
            turn(json!({"messages": [{"role": "user", "content": content}]})).unwrap_err()
        };
        let thinking = refused(json!([{"type": "thinking", "thinking": "hm"}]));
        assert!(
            thinking.message.contains("`thinking`"),
            "{}",
            thinking.message
        );
        assert_eq!(thinking.param.as_deref(), Some("messages.[0].content"));
        let remote = refused(
            json!([{"type": "image", "source": {"type": "url", "url": "https://x/y.png"}}]),
        );
        assert!(
            remote.message.contains("never fetches"),
            "{}",
            remote.message
        );
        let image_result = refused(
            json!([{"type": "tool_result", "tool_use_id": "c", "content": [
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}
            ]}]),
        );
        assert!(image_result.message.contains("inside a `tool_result`"));
        let role = turn(json!({"messages": [{"role": "system", "content": "x"}]})).unwrap_err();
        assert_eq!(role.param.as_deref(), Some("messages.[0].role"));
        let server_tool = turn(json!({"messages": [{"role": "user", "content": "x"}],
            "tools": [{"type": "web_search_20250305", "name": "web_search"}]}))
        .unwrap_err();
        assert_eq!(server_tool.param.as_deref(), Some("tools.[0].type"));
    }

    #[test]
    fn an_empty_message_is_kept_as_every_api_keeps_it() {
        let history = |assistant: Value| {
            json!([
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": assistant},
                {"role": "user", "content": "more"}
            ])
        };
        let chat: super::super::chat::ChatRequest =
            serde_json::from_value(json!({"messages": history(json!(""))})).unwrap();
        let expected = chat.thread_messages().unwrap().0;
        assert_eq!(expected.len(), 3);
        for empty in [json!(""), json!([]), json!([{"type": "text", "text": ""}])] {
            let mapped = turn(json!({"messages": history(empty.clone())})).unwrap();
            assert_eq!(mapped.messages, expected, "{empty}");
            assert_eq!(mapped.places.len(), 3);
        }
        let responses: super::super::responses::ResponsesRequest =
            serde_json::from_value(json!({"input": history(json!(""))})).unwrap();
        assert_eq!(responses.turn().unwrap().messages, expected);
    }

    #[test]
    fn media_blocks_are_attachments() {
        let mapped = turn(json!({"messages": [{"role": "user", "content": [
            {"type": "text", "text": "what is this?"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw=="}},
            {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "notes"}}
        ]}]}))
        .unwrap();
        let parts = &mapped.messages[0].parts;
        assert!(matches!(&parts[1], Part::Attachment(a) if a.media_type == "image/png"));
        assert!(matches!(&parts[2], Part::Attachment(a) if a.data == b"notes"));
    }
}
