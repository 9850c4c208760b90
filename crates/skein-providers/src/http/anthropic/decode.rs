/*!
Anthropic Messages replies (SSE events or one JSON body) as
[`StreamEvent`]s.

| event | becomes |
|---|---|
| `message_start` | the model that answered (`message.model`); usage: `input_tokens`, `output_tokens`, `cache_creation_input_tokens` (cache writes), `cache_read_input_tokens` (cache reads) |
| `content_block_start` (`text`) | its text, when not empty |
| `content_block_start` (`tool_use`) | the call's first piece: id and name |
| `content_block_delta` (`text_delta`) | text |
| `content_block_delta` (`input_json_delta`) | an argument piece: `partial_json` exactly |
| `content_block_stop` | for a call that got no argument piece, the start block's own `input` text (`{}`), so a call without parameters has valid arguments |
| `message_delta` | the stop reason; usage (`output_tokens` and any other figure it repeats) |
| `message_stop` | `Done` |
| `ping`, unknown events, other block kinds (thinking, server tools) | nothing |
| `error` | a typed error by its `error.type` |

Tool calls are numbered in the order their blocks start, whatever the block
index (text blocks count there, not here). A stream that ends before
`message_stop` is truncated.

Stop reasons: `end_turn` and `stop_sequence` are `Stop`, `max_tokens`
`Length`, `tool_use` `ToolCalls`, `refusal` `ContentFilter`, others
`Other`.

JSON bodies: `content` blocks (a `tool_use` block's `input` kept as its raw
JSON text exactly as received), `model`, `stop_reason` and `usage` the same way; a
body `{"type": "error", ...}` is a typed error.
*/

use crate::http::errors::{details_from_value, error_for_details};
use crate::http::secret::Secret;
use crate::http::sse::SseEvent;
use crate::http::transport::{Decoder, malformed, parse_json};
use serde::Deserialize;
use serde_json::value::RawValue;
use skein_core::{FinishReason, ProviderError, StreamEvent, Usage};
use std::collections::HashMap;

#[derive(Deserialize)]
struct Event {
    #[serde(rename = "type")]
    kind: String,
    message: Option<MessageBody>,
    index: Option<u64>,
    content_block: Option<ContentBlock>,
    delta: Option<Delta>,
    usage: Option<WireUsage>,
    error: Option<serde_json::Value>,
}

#[derive(Deserialize)]
struct MessageBody {
    #[serde(rename = "type")]
    kind: Option<String>,
    model: Option<String>,
    content: Option<Vec<ContentBlock>>,
    stop_reason: Option<String>,
    usage: Option<WireUsage>,
    error: Option<serde_json::Value>,
}

#[derive(Deserialize)]
struct ContentBlock {
    #[serde(rename = "type")]
    kind: String,
    text: Option<String>,
    id: Option<String>,
    name: Option<String>,
    input: Option<Box<RawValue>>,
}

#[derive(Deserialize)]
struct Delta {
    #[serde(rename = "type")]
    kind: Option<String>,
    text: Option<String>,
    partial_json: Option<String>,
    stop_reason: Option<String>,
}

#[derive(Deserialize)]
struct WireUsage {
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    cache_creation_input_tokens: Option<u64>,
    cache_read_input_tokens: Option<u64>,
}

impl WireUsage {
    /// skein's `input_tokens` counts every prompt token, cached or not (as
    /// OpenAI and the local model report it); Anthropic's excludes the
    /// tokens read from or written to its cache, so they are added back.
    fn to_usage(&self) -> Usage {
        let cached = self.cache_creation_input_tokens.unwrap_or(0)
            + self.cache_read_input_tokens.unwrap_or(0);
        Usage {
            input_tokens: self.input_tokens.map(|input| input + cached),
            output_tokens: self.output_tokens,
            cache_read_tokens: self.cache_read_input_tokens,
            cache_write_tokens: self.cache_creation_input_tokens,
        }
    }
}

/// A finish reason by its Anthropic name.
/// Pass on the model the server says answered.
fn push_model(model: Option<String>, out: &mut Vec<StreamEvent>) {
    if let Some(model) = model.filter(|model| !model.is_empty()) {
        out.push(StreamEvent::Model(model));
    }
}

pub(crate) fn stop_reason(name: &str) -> FinishReason {
    match name {
        "end_turn" | "stop_sequence" => FinishReason::Stop,
        "max_tokens" => FinishReason::Length,
        "tool_use" => FinishReason::ToolCalls,
        "refusal" => FinishReason::ContentFilter,
        other => FinishReason::Other(other.to_owned()),
    }
}

/// A tool-use block being streamed.
struct OpenCall {
    index: usize,
    got_arguments: bool,
    start_input: String,
}

/// Decoder state for one reply.
pub(crate) struct AnthropicDecoder {
    secret: Option<Secret>,
    calls: HashMap<u64, OpenCall>,
    next_call: usize,
    finish: Option<FinishReason>,
    done: bool,
}

impl AnthropicDecoder {
    pub(crate) fn new(secret: Option<Secret>) -> AnthropicDecoder {
        AnthropicDecoder {
            secret,
            calls: HashMap::new(),
            next_call: 0,
            finish: None,
            done: false,
        }
    }

    fn error(&self, value: &serde_json::Value) -> ProviderError {
        error_for_details(&details_from_value(value), self.secret.as_ref())
    }

    fn block_start(
        &mut self,
        index: u64,
        block: ContentBlock,
        out: &mut Vec<StreamEvent>,
    ) -> Result<(), ProviderError> {
        match block.kind.as_str() {
            "text" => {
                if let Some(text) = block.text.filter(|text| !text.is_empty()) {
                    out.push(StreamEvent::Text(text));
                }
            }
            "tool_use" => {
                let (Some(id), Some(name)) = (block.id, block.name) else {
                    return Err(malformed("a tool_use block has no id or no name"));
                };
                let call = OpenCall {
                    index: self.next_call,
                    got_arguments: false,
                    start_input: block
                        .input
                        .map_or_else(|| "{}".to_owned(), |raw| raw.get().to_owned()),
                };
                self.next_call += 1;
                out.push(StreamEvent::ToolCall {
                    index: call.index,
                    id: Some(id),
                    name: Some(name),
                    arguments: String::new(),
                });
                self.calls.insert(index, call);
            }
            _ => {}
        }
        Ok(())
    }

    fn block_delta(&mut self, index: u64, delta: Delta, out: &mut Vec<StreamEvent>) {
        match delta.kind.as_deref() {
            Some("text_delta") => {
                if let Some(text) = delta.text.filter(|text| !text.is_empty()) {
                    out.push(StreamEvent::Text(text));
                }
            }
            Some("input_json_delta") => {
                let Some(call) = self.calls.get_mut(&index) else {
                    return;
                };
                if let Some(piece) = delta.partial_json.filter(|piece| !piece.is_empty()) {
                    call.got_arguments = true;
                    out.push(StreamEvent::ToolCall {
                        index: call.index,
                        id: None,
                        name: None,
                        arguments: piece,
                    });
                }
            }
            _ => {}
        }
    }

    fn block_stop(&mut self, index: u64, out: &mut Vec<StreamEvent>) {
        if let Some(call) = self.calls.remove(&index)
            && !call.got_arguments
        {
            out.push(StreamEvent::ToolCall {
                index: call.index,
                id: None,
                name: None,
                arguments: call.start_input,
            });
        }
    }
}

impl Decoder for AnthropicDecoder {
    type Event = StreamEvent;

    fn event(&mut self, event: SseEvent, out: &mut Vec<StreamEvent>) -> Result<(), ProviderError> {
        if self.done {
            return Ok(());
        }
        let parsed: Event = parse_json(event.data.as_bytes(), "a stream event")?;
        let index = parsed.index.unwrap_or(0);
        match parsed.kind.as_str() {
            "message_start" => {
                if let Some(message) = parsed.message {
                    push_model(message.model, out);
                    if let Some(usage) = message.usage {
                        out.push(StreamEvent::Usage(usage.to_usage()));
                    }
                }
            }
            "content_block_start" => {
                if let Some(block) = parsed.content_block {
                    self.block_start(index, block, out)?;
                }
            }
            "content_block_delta" => {
                if let Some(delta) = parsed.delta {
                    self.block_delta(index, delta, out);
                }
            }
            "content_block_stop" => self.block_stop(index, out),
            "message_delta" => {
                if let Some(reason) = parsed.delta.and_then(|delta| delta.stop_reason) {
                    self.finish = Some(stop_reason(&reason));
                }
                if let Some(usage) = parsed.usage {
                    out.push(StreamEvent::Usage(usage.to_usage()));
                }
            }
            "message_stop" => {
                self.done = true;
                out.push(StreamEvent::Done(
                    self.finish.take().unwrap_or(FinishReason::Stop),
                ));
            }
            "error" => {
                let error = parsed.error.unwrap_or(serde_json::Value::Null);
                return Err(self.error(&error));
            }
            _ => {}
        }
        Ok(())
    }

    fn body(&mut self, body: &[u8], out: &mut Vec<StreamEvent>) -> Result<(), ProviderError> {
        let message: MessageBody = parse_json(body, "the reply")?;
        if message.kind.as_deref() == Some("error") {
            let error = message.error.unwrap_or(serde_json::Value::Null);
            return Err(self.error(&error));
        }
        push_model(message.model, out);
        let content = message
            .content
            .ok_or_else(|| malformed("the reply has no content"))?;
        let mut calls = 0;
        for block in content {
            match block.kind.as_str() {
                "text" => {
                    if let Some(text) = block.text.filter(|text| !text.is_empty()) {
                        out.push(StreamEvent::Text(text));
                    }
                }
                "tool_use" => {
                    let arguments = block
                        .input
                        .map_or_else(|| "{}".to_owned(), |raw| raw.get().to_owned());
                    out.push(StreamEvent::ToolCall {
                        index: calls,
                        id: block.id,
                        name: block.name,
                        arguments,
                    });
                    calls += 1;
                }
                _ => {}
            }
        }
        if let Some(usage) = message.usage {
            out.push(StreamEvent::Usage(usage.to_usage()));
        }
        self.done = true;
        out.push(StreamEvent::Done(
            message
                .stop_reason
                .as_deref()
                .map_or(FinishReason::Stop, stop_reason),
        ));
        Ok(())
    }

    fn end(&mut self, _out: &mut Vec<StreamEvent>) -> Result<(), ProviderError> {
        Err(ProviderError::TruncatedStream)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(events: &[&str]) -> Result<Vec<StreamEvent>, ProviderError> {
        let mut decoder = AnthropicDecoder::new(None);
        let mut out = Vec::new();
        for data in events {
            let event = SseEvent {
                event: None,
                data: (*data).to_owned(),
            };
            decoder.event(event, &mut out)?;
        }
        Ok(out)
    }

    #[test]
    fn a_call_without_argument_pieces_gets_the_start_input() {
        let events = run(&[
            r#"{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_1","name":"now","input":{}}}"#,
            r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":""}}"#,
            r#"{"type":"content_block_stop","index":1}"#,
        ])
        .unwrap();
        assert_eq!(
            events,
            vec![
                StreamEvent::ToolCall {
                    index: 0,
                    id: Some("toolu_1".into()),
                    name: Some("now".into()),
                    arguments: String::new()
                },
                StreamEvent::ToolCall {
                    index: 0,
                    id: None,
                    name: None,
                    arguments: "{}".into()
                },
            ]
        );
    }

    #[test]
    fn the_answering_model_comes_from_message_start_and_from_a_body() {
        let events = run(&[
            r#"{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929","content":[],"usage":{"input_tokens":3,"output_tokens":1}}}"#,
        ])
        .unwrap();
        assert_eq!(
            events[0],
            StreamEvent::Model("claude-sonnet-4-5-20250929".into())
        );
        let mut out = Vec::new();
        AnthropicDecoder::new(None)
            .body(
                br#"{"type":"message","model":"claude-haiku-4-5-20251001","content":[{"type":"text","text":"hi"}],"stop_reason":"end_turn"}"#,
                &mut out,
            )
            .unwrap();
        assert_eq!(
            out[0],
            StreamEvent::Model("claude-haiku-4-5-20251001".into())
        );
    }

    #[test]
    fn error_events_are_typed() {
        let error = run(&[
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
        ])
        .unwrap_err();
        assert_eq!(
            error,
            ProviderError::Server {
                status: 529,
                message: "overloaded_error: Overloaded".into()
            }
        );
    }
}
