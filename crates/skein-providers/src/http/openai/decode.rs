/*!
OpenAI chat-completions replies (SSE chunks or one JSON body) as
[`StreamEvent`]s.

Streams: each `data:` chunk's first choice (index 0) gives text deltas
(`delta.content`) and tool-call deltas (`delta.tool_calls[]`, by their
`index`; the first delta of a call carries its id and name, the
`function.arguments` pieces are passed on exactly, so they concatenate to
the exact string the server sent); `finish_reason` is remembered; a chunk
with `usage` gives usage (`prompt_tokens`, `completion_tokens`,
`prompt_tokens_details.cached_tokens` as cache reads). `data: [DONE]` ends
the reply. A server that ends the body after a finish reason without
`[DONE]` has still finished; one that ends it before any finish reason has
truncated the reply. A chunk `{"error": {...}}` is a typed error.

A server that repeats a call's name in later deltas (some compatible
servers do) has the repeat dropped, since names are not split in practice
and the assembler would otherwise double them.

JSON bodies: `choices[0].message` (`content`, `tool_calls`), `finish_reason`
and `usage` the same way. The reply's `model` (the first chunk's, in a
stream) is passed on as the model that answered.
*/

use crate::http::errors::{details_from_value, error_for_details};
use crate::http::secret::Secret;
use crate::http::sse::SseEvent;
use crate::http::transport::{Decoder, malformed, parse_json};
use serde::Deserialize;
use skein_core::{FinishReason, ProviderError, StreamEvent, Usage};

#[derive(Deserialize)]
struct Chunk {
    model: Option<String>,
    choices: Option<Vec<ChunkChoice>>,
    usage: Option<WireUsage>,
    error: Option<serde_json::Value>,
}

#[derive(Deserialize)]
struct ChunkChoice {
    #[serde(default)]
    index: u32,
    delta: Option<Delta>,
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct Delta {
    content: Option<String>,
    tool_calls: Option<Vec<DeltaToolCall>>,
}

#[derive(Deserialize)]
struct DeltaToolCall {
    index: Option<usize>,
    id: Option<String>,
    function: Option<WireFunction>,
}

#[derive(Deserialize)]
struct WireFunction {
    name: Option<String>,
    arguments: Option<String>,
}

#[derive(Deserialize)]
struct WireUsage {
    prompt_tokens: Option<u64>,
    completion_tokens: Option<u64>,
    prompt_tokens_details: Option<PromptDetails>,
}

#[derive(Deserialize)]
struct PromptDetails {
    cached_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct Completion {
    model: Option<String>,
    choices: Option<Vec<CompletionChoice>>,
    usage: Option<WireUsage>,
    error: Option<serde_json::Value>,
}

#[derive(Deserialize)]
struct CompletionChoice {
    #[serde(default)]
    index: u32,
    message: Option<CompletionMessage>,
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct CompletionMessage {
    content: Option<String>,
    tool_calls: Option<Vec<CompletionToolCall>>,
}

#[derive(Deserialize)]
struct CompletionToolCall {
    id: Option<String>,
    function: WireFunction,
}

impl WireUsage {
    fn to_usage(&self) -> Usage {
        Usage {
            input_tokens: self.prompt_tokens,
            output_tokens: self.completion_tokens,
            cache_read_tokens: self
                .prompt_tokens_details
                .as_ref()
                .and_then(|details| details.cached_tokens),
            cache_write_tokens: None,
        }
    }
}

/// A finish reason by its OpenAI name.
pub(crate) fn finish_reason(name: &str) -> FinishReason {
    match name {
        "stop" => FinishReason::Stop,
        "length" => FinishReason::Length,
        "tool_calls" | "function_call" => FinishReason::ToolCalls,
        "content_filter" => FinishReason::ContentFilter,
        other => FinishReason::Other(other.to_owned()),
    }
}

/// Decoder state for one reply.
pub(crate) struct OpenAiDecoder {
    secret: Option<Secret>,
    finish: Option<FinishReason>,
    /// Per call index: its name, once sent.
    names: Vec<Option<String>>,
    /// Whether the answering model was passed on (every chunk names it).
    model_told: bool,
    done: bool,
}

impl OpenAiDecoder {
    pub(crate) fn new(secret: Option<Secret>) -> OpenAiDecoder {
        OpenAiDecoder {
            secret,
            finish: None,
            names: Vec::new(),
            model_told: false,
            done: false,
        }
    }

    fn error(&self, value: &serde_json::Value) -> ProviderError {
        error_for_details(&details_from_value(value), self.secret.as_ref())
    }

    fn finish(&mut self, out: &mut Vec<StreamEvent>) {
        let inferred = if self.names.is_empty() {
            FinishReason::Stop
        } else {
            FinishReason::ToolCalls
        };
        let reason = self.finish.take().unwrap_or(inferred);
        self.done = true;
        out.push(StreamEvent::Done(reason));
    }

    /// Pass on the model the server says answered, once.
    fn model(&mut self, model: Option<String>, out: &mut Vec<StreamEvent>) {
        if let Some(model) = model.filter(|model| !model.is_empty() && !self.model_told) {
            self.model_told = true;
            out.push(StreamEvent::Model(model));
        }
    }

    fn tool_delta(&mut self, position: usize, call: DeltaToolCall, out: &mut Vec<StreamEvent>) {
        let index = call.index.unwrap_or(position);
        if index >= self.names.len() {
            self.names.resize(index + 1, None);
        }
        let (name, arguments) = match call.function {
            Some(function) => (function.name, function.arguments.unwrap_or_default()),
            None => (None, String::new()),
        };
        let name = name.filter(|name| !name.is_empty()).filter(|name| {
            let seen = &mut self.names[index];
            if seen.as_deref() == Some(name.as_str()) {
                false
            } else {
                *seen = Some(name.clone());
                true
            }
        });
        let id = call.id.filter(|id| !id.is_empty());
        if id.is_none() && name.is_none() && arguments.is_empty() {
            return;
        }
        out.push(StreamEvent::ToolCall {
            index,
            id,
            name,
            arguments,
        });
    }
}

impl Decoder for OpenAiDecoder {
    type Event = StreamEvent;

    fn event(&mut self, event: SseEvent, out: &mut Vec<StreamEvent>) -> Result<(), ProviderError> {
        if self.done {
            return Ok(());
        }
        if event.is_done() {
            self.finish(out);
            return Ok(());
        }
        let chunk: Chunk = parse_json(event.data.as_bytes(), "a stream chunk")?;
        if let Some(error) = chunk.error.filter(|value| !value.is_null()) {
            return Err(self.error(&error));
        }
        self.model(chunk.model, out);
        for choice in chunk.choices.unwrap_or_default() {
            if choice.index != 0 {
                continue;
            }
            if let Some(delta) = choice.delta {
                if let Some(text) = delta.content.filter(|text| !text.is_empty()) {
                    out.push(StreamEvent::Text(text));
                }
                for (position, call) in delta.tool_calls.unwrap_or_default().into_iter().enumerate()
                {
                    self.tool_delta(position, call, out);
                }
            }
            if let Some(reason) = choice.finish_reason {
                self.finish = Some(finish_reason(&reason));
            }
        }
        if let Some(usage) = chunk.usage {
            out.push(StreamEvent::Usage(usage.to_usage()));
        }
        Ok(())
    }

    fn body(&mut self, body: &[u8], out: &mut Vec<StreamEvent>) -> Result<(), ProviderError> {
        let completion: Completion = parse_json(body, "the reply")?;
        if let Some(error) = completion.error.filter(|value| !value.is_null()) {
            return Err(self.error(&error));
        }
        self.model(completion.model, out);
        let choice = completion
            .choices
            .unwrap_or_default()
            .into_iter()
            .find(|choice| choice.index == 0)
            .ok_or_else(|| malformed("the reply has no choices"))?;
        if let Some(message) = choice.message {
            if let Some(text) = message.content.filter(|text| !text.is_empty()) {
                out.push(StreamEvent::Text(text));
            }
            for (index, call) in message
                .tool_calls
                .unwrap_or_default()
                .into_iter()
                .enumerate()
            {
                self.names.push(call.function.name.clone());
                out.push(StreamEvent::ToolCall {
                    index,
                    id: call.id,
                    name: call.function.name,
                    arguments: call.function.arguments.unwrap_or_default(),
                });
            }
        }
        if let Some(usage) = completion.usage {
            out.push(StreamEvent::Usage(usage.to_usage()));
        }
        self.finish = choice.finish_reason.as_deref().map(finish_reason);
        self.finish(out);
        Ok(())
    }

    fn end(&mut self, out: &mut Vec<StreamEvent>) -> Result<(), ProviderError> {
        if self.finish.is_some() {
            self.finish(out);
            Ok(())
        } else {
            Err(ProviderError::TruncatedStream)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(chunks: &[&str]) -> (Vec<StreamEvent>, Result<(), ProviderError>) {
        let mut decoder = OpenAiDecoder::new(None);
        let mut out = Vec::new();
        for data in chunks {
            let event = SseEvent {
                event: None,
                data: (*data).to_owned(),
            };
            if let Err(error) = decoder.event(event, &mut out) {
                return (out, Err(error));
            }
        }
        let result = if decoder.done {
            Ok(())
        } else {
            decoder.end(&mut out)
        };
        (out, result)
    }

    #[test]
    fn the_answering_model_is_passed_on_once_from_a_stream_and_from_a_body() {
        let (events, result) = run(&[
            r#"{"model":"gpt-4o-mini-2024-07-18","choices":[{"index":0,"delta":{"content":"Hel"}}]}"#,
            r#"{"model":"gpt-4o-mini-2024-07-18","choices":[{"index":0,"delta":{"content":"lo"},"finish_reason":"stop"}]}"#,
            "[DONE]",
        ]);
        result.unwrap();
        let models: Vec<&StreamEvent> = events
            .iter()
            .filter(|event| matches!(event, StreamEvent::Model(_)))
            .collect();
        assert_eq!(
            models,
            vec![&StreamEvent::Model("gpt-4o-mini-2024-07-18".into())]
        );
        let mut out = Vec::new();
        OpenAiDecoder::new(None)
            .body(
                br#"{"model":"gpt-4.1-2025-04-14","choices":[{"index":0,"message":{"content":"hi"},"finish_reason":"stop"}]}"#,
                &mut out,
            )
            .unwrap();
        assert_eq!(out[0], StreamEvent::Model("gpt-4.1-2025-04-14".into()));
    }

    #[test]
    fn repeated_names_are_dropped_and_arguments_kept_exactly() {
        let (events, result) = run(&[
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c","function":{"name":"f","arguments":"{\"a\""}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"name":"f","arguments":": 1}"}}]},"finish_reason":"tool_calls"}]}"#,
            "[DONE]",
        ]);
        result.unwrap();
        assert_eq!(
            events,
            vec![
                StreamEvent::ToolCall {
                    index: 0,
                    id: Some("c".into()),
                    name: Some("f".into()),
                    arguments: "{\"a\"".into()
                },
                StreamEvent::ToolCall {
                    index: 0,
                    id: None,
                    name: None,
                    arguments: ": 1}".into()
                },
                StreamEvent::Done(FinishReason::ToolCalls),
            ]
        );
    }

    #[test]
    fn a_finish_reason_without_done_still_finishes_but_nothing_is_truncated() {
        let (events, result) =
            run(&[r#"{"choices":[{"index":0,"delta":{"content":"x"},"finish_reason":"length"}]}"#]);
        result.unwrap();
        assert_eq!(
            events.last(),
            Some(&StreamEvent::Done(FinishReason::Length))
        );
        let (_, result) =
            run(&[r#"{"choices":[{"index":0,"delta":{"content":"x"},"finish_reason":null}]}"#]);
        assert_eq!(result, Err(ProviderError::TruncatedStream));
    }
}
