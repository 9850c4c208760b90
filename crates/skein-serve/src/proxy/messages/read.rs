/*!
The request, as the proxy reads it (see [`super`]).
*/

use super::MESSAGE_PREFIX;
use crate::proxy::media;
use crate::proxy::results::{MessagePath, ParamPaths};
use crate::proxy::turn::{Continued, Previous, ProxyError, Turn};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use serde_json::value::RawValue;
use skein::core::provider::GenerationOptions;
use skein::core::{
    Annotation, Attachment, CacheHint, Message, Part, Role, ToolCall, ToolResult, ToolSpec,
};
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
    /// Message threads (`anthropic-beta: message-threads-…`): `create`, or
    /// `continue` from a reply's `previous_message_id` (see [`super`]).
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
pub(super) enum Either<T> {
    Text(String),
    List(Vec<T>),
}

pub(super) fn string_or_list<T: DeserializeOwned>(
    raw: &RawValue,
) -> Result<Either<T>, serde_json::Error> {
    if raw.get().trim_start().starts_with('"') {
        serde_json::from_str(raw.get()).map(Either::Text)
    } else {
        serde_json::from_str(raw.get()).map(Either::List)
    }
}

/// What the mapping builds: the messages, their annotations and the tool
/// calls whose input a client re-encoded.
#[derive(Default)]
pub(super) struct Mapped {
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
        let offers_tools = self.offers_tools()?;
        let previous = self.continues(offers_tools)?;
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
            tools: match offers_tools && previous.is_none() {
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
            previous,
            session: crate::proxy::turn::session_of(self.metadata.as_ref(), None),
            client: crate::proxy::turn::client_of(
                self.metadata
                    .as_ref()
                    .and_then(|metadata| metadata.get("user_id"))
                    .and_then(Value::as_str),
            ),
            unhonoured: self.unhonoured(),
        })
    }

    /// The reply a message thread's `continue` goes on from; `None` for a
    /// request that sends its whole history (with no `thread`, or one it
    /// `create`s: the reply's id is then the thread's handle). A `continue`
    /// may send neither `system` nor `tools`: the thread keeps them.
    fn continues(&self, offers_tools: bool) -> Result<Option<Previous>, ProxyError> {
        let Some(thread) = &self.thread else {
            return Ok(None);
        };
        let refuse = |why: &str, at: &str| ProxyError::invalid(why.to_string()).at(at);
        match thread.get("type").and_then(Value::as_str) {
            Some("create") => Ok(None),
            Some("continue") => {
                let Some(given) = thread.get("previous_message_id").and_then(Value::as_str) else {
                    return Err(refuse(
                        "a thread's `continue` needs `previous_message_id`: the `id` of the reply \
                         it goes on from",
                        "thread.previous_message_id",
                    ));
                };
                if self.system.is_some() || !self.tools.is_empty() {
                    return Err(refuse(
                        "a thread's `continue` cannot send `system` or `tools`: the thread keeps \
                         those it was created with (start a new thread to change them)",
                        if self.system.is_some() {
                            "system"
                        } else {
                            "tools"
                        },
                    ));
                }
                Ok(Some(Previous {
                    given: given.to_string(),
                    run: Previous::run_named(given, MESSAGE_PREFIX),
                    instructions: 0,
                    of: Continued::Thread { offers_tools },
                }))
            }
            _ => Err(refuse(
                "`thread` needs a `type`: `create`, or `continue` with `previous_message_id`",
                "thread.type",
            )),
        }
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
                        .unwrap_or_else(crate::proxy::chat::no_parameters),
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

pub(super) fn system_message(system: &RawValue, mapped: &mut Mapped) -> Result<(), ProxyError> {
    let refuse = |message: String| ProxyError::invalid(message).at("system");
    let blocks = match string_or_list::<Block>(system).map_err(|problem| {
        refuse(format!(
            "`system` is not a string or text blocks: {problem}"
        ))
    })? {
        Either::Text(text) => {
            let parts = non_empty(text);
            let place = ParamPaths::uniform("system", parts.len(), "");
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

pub(super) fn non_empty(text: String) -> Vec<Part> {
    if text.is_empty() {
        Vec::new()
    } else {
        vec![Part::text(text)]
    }
}

pub(super) fn map_message(
    wire: &WireMessage,
    index: usize,
    mapped: &mut Mapped,
) -> Result<(), ProxyError> {
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
            // A text turn has no tool call or result to name alone.
            let parts = non_empty(text);
            let place = ParamPaths::plain(index);
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
    let place = |parts| ParamPaths {
        message: MessagePath::InMessages(index),
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
pub(super) fn result_text(content: &RawValue) -> Result<String, String> {
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
pub(super) fn attachment(block: &Block) -> Result<Attachment, String> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
        let chat: crate::proxy::chat::ChatRequest = serde_json::from_value(json!({"messages": [
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
        let chat: crate::proxy::chat::ChatRequest =
            serde_json::from_value(json!({"messages": history(json!(""))})).unwrap();
        let expected = chat.thread_messages().unwrap().0;
        assert_eq!(expected.len(), 3);
        for empty in [json!(""), json!([]), json!([{"type": "text", "text": ""}])] {
            let mapped = turn(json!({"messages": history(empty.clone())})).unwrap();
            assert_eq!(mapped.messages, expected, "{empty}");
            assert_eq!(mapped.places.len(), 3);
        }
        let responses: crate::proxy::responses::ResponsesRequest =
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
