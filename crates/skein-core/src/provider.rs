/*!
The provider trait: what every model backend (local, scripted, HTTP)
implements, with its request, stream-event, response and usage types.

A provider turns a [`ModelRequest`] into a stream of [`StreamEvent`]s; the
[`ResponseAssembler`] folds a stream into a [`ModelResponse`]. Dropping the
stream cancels the call. Mapping a request onto a provider's wire format
(ids, argument encodings, where a system message may stand) is the adapter's
job; stored nodes are never rewritten for a provider.
*/

use crate::annotation::Annotations;
use crate::message::{Message, Part, Role, ToolCall};
use crate::thread::Thread;
use crate::tool::ToolSpec;
use serde::{Deserialize, Serialize};
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

/// A boxed, `Send` future, as trait objects return.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A boxed, `Send` stream, as trait objects return.
pub type BoxStream<'a, T> = Pin<Box<dyn futures_core::Stream<Item = T> + Send + 'a>>;

/// Sampling and length options. `None` leaves the provider's default.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GenerationOptions {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
}

impl GenerationOptions {
    /// The values every backend accepts: `temperature` from 0 to 2,
    /// `top_p` above 0 and at most 1, `max_tokens` at least 1. The error
    /// names the option, the value and the range.
    pub fn check(&self) -> Result<(), String> {
        if let Some(temperature) = self.temperature
            && !(0.0..=2.0).contains(&temperature)
        {
            return Err(format!(
                "temperature {temperature} is out of range: use a number from 0 to 2"
            ));
        }
        if let Some(top_p) = self.top_p
            && !(top_p > 0.0 && top_p <= 1.0)
        {
            return Err(format!(
                "top_p {top_p} is out of range: use a number above 0 and at most 1"
            ));
        }
        if self.max_tokens == Some(0) {
            return Err("max_tokens 0 would allow no reply at all: use at least 1".into());
        }
        Ok(())
    }
}

/// One model call's input.
#[derive(Clone, Debug)]
pub struct ModelRequest {
    /// The model name as the backend knows it.
    pub model: String,
    /// The whole history, ending with the message the model answers.
    pub thread: Thread,
    pub annotations: Annotations,
    /// The tools offered on this call (and only this call).
    pub tools: Vec<ToolSpec>,
    pub options: GenerationOptions,
    /// A JSON Schema the reply should satisfy, for providers that can
    /// constrain output (validation happens in the engine regardless).
    pub output_schema: Option<serde_json::Value>,
}

impl ModelRequest {
    pub fn new(model: impl Into<String>, thread: Thread) -> ModelRequest {
        ModelRequest {
            model: model.into(),
            thread,
            annotations: Annotations::new(),
            tools: Vec::new(),
            options: GenerationOptions::default(),
            output_schema: None,
        }
    }
}

/// Token counts. Each figure is `None` when the backend did not report it:
/// absent is never the same as zero.
///
/// `input_tokens` counts every prompt token, including those served from or
/// written to a prompt cache; `cache_read_tokens` and `cache_write_tokens`
/// say how many of them were. Adapters whose provider reports otherwise
/// (Anthropic) convert.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub input_tokens: Option<u64>,
    pub output_tokens: Option<u64>,
    pub cache_read_tokens: Option<u64>,
    pub cache_write_tokens: Option<u64>,
}

impl Usage {
    /// Figure-wise sum; a figure stays present if either side has it.
    pub fn add(&self, other: &Usage) -> Usage {
        fn sum(a: Option<u64>, b: Option<u64>) -> Option<u64> {
            match (a, b) {
                (None, None) => None,
                (a, b) => Some(a.unwrap_or(0) + b.unwrap_or(0)),
            }
        }
        Usage {
            input_tokens: sum(self.input_tokens, other.input_tokens),
            output_tokens: sum(self.output_tokens, other.output_tokens),
            cache_read_tokens: sum(self.cache_read_tokens, other.cache_read_tokens),
            cache_write_tokens: sum(self.cache_write_tokens, other.cache_write_tokens),
        }
    }
}

/// Why generation ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum FinishReason {
    Stop,
    /// The token limit cut the reply.
    Length,
    ToolCalls,
    ContentFilter,
    Other(String),
}

impl FinishReason {
    /// Its name as skein shows it (the CLI's `--json`, the web view):
    /// `stop`, `length`, `tool_calls`, `content_filter` or the provider's
    /// own word.
    pub fn name(&self) -> &str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
            FinishReason::ToolCalls => "tool_calls",
            FinishReason::ContentFilter => "content_filter",
            FinishReason::Other(other) => other,
        }
    }
}

/// One event of a streamed model call.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum StreamEvent {
    /// A piece of reply text (always whole characters).
    Text(String),
    /// A piece of a tool call. The first piece for an index carries the id
    /// and name; argument pieces concatenate to the raw JSON text.
    ToolCall {
        index: usize,
        id: Option<String>,
        name: Option<String>,
        arguments: String,
    },
    /// Usage figures; later events replace earlier figures they repeat.
    Usage(Usage),
    /// The model the provider says answered (its response's `model`: a
    /// dated version of an alias, say); the last one given counts.
    Model(String),
    /// The transport is retrying after a failure (visible in observations).
    Retrying {
        attempt: u32,
        reason: String,
        delay: Duration,
    },
    /// The reply is complete. A stream that ends without this is truncated.
    Done(FinishReason),
}

/// A completed model call.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelResponse {
    /// The assistant message: text first (when any), then tool calls.
    pub message: Message,
    pub usage: Usage,
    pub finish_reason: FinishReason,
    /// Transport retries the call needed, with their reasons.
    pub retries: Vec<String>,
    /// The model the provider says answered, when it said
    /// ([`StreamEvent::Model`]).
    pub model: Option<String>,
}

/// Why a model call failed. The provider's own message is kept.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ProviderError {
    #[error("rate limited by the provider: {message}")]
    RateLimited {
        message: String,
        retry_after: Option<Duration>,
    },
    #[error("the provider rejected the credentials: {message}")]
    Authentication { message: String },
    #[error("the provider rejected the request: {message}")]
    BadRequest {
        message: String,
        context_too_long: bool,
    },
    #[error("the provider failed (status {status}): {message}")]
    Server { status: u16, message: String },
    #[error("the provider did not answer in time ({phase})")]
    Timeout { phase: String },
    #[error("could not reach the provider: {message}")]
    Connection { message: String },
    #[error("the provider sent a malformed response: {message}")]
    MalformedResponse { message: String },
    #[error("the response stream ended before the reply was complete")]
    TruncatedStream,
    #[error("the model call was cancelled")]
    Cancelled,
    #[error("model `{model}` is not available: {hint}")]
    ModelUnavailable { model: String, hint: String },
    /// An in-process backend (the local model) failed.
    #[error("the model backend failed: {message}")]
    Backend { message: String },
    /// A failure a scripted model was told to produce.
    #[error("scripted failure: {message}")]
    Scripted { message: String },
    /// The reply passed the bound set on its text and the call was stopped
    /// there.
    #[error(
        "the reply passed the bound of {limit} bytes of text and was stopped: ask for a shorter \
         reply (a lower max_tokens, or a prompt that asks for less)"
    )]
    ReplyTooLong { limit: usize },
    /// The call was still running at the deadline set on its reply and was
    /// stopped there.
    #[error("the reply was not finished within {} s and was stopped", .within.as_secs_f64())]
    ReplyTooSlow { within: Duration },
}

impl ProviderError {
    /// Whether a transport retry could help.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            ProviderError::RateLimited { .. }
                | ProviderError::Server { .. }
                | ProviderError::Connection { .. }
                | ProviderError::Timeout { .. }
        )
    }
}

/// Which attachments a model can take, by media type. The engine refuses
/// a request with any other before calling the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum AttachmentSupport {
    /// Any attachment.
    Any,
    /// None: the model reads text only.
    None,
    /// These media types; `type/*` stands for every subtype of `type`.
    Only(&'static [&'static str]),
}

impl AttachmentSupport {
    /// Whether an attachment of `media_type` can be sent.
    pub fn accepts(&self, media_type: &str) -> bool {
        match self {
            AttachmentSupport::Any => true,
            AttachmentSupport::None => false,
            AttachmentSupport::Only(types) => {
                types
                    .iter()
                    .any(|accepted| match accepted.strip_suffix("/*") {
                        Some(kind) => media_type
                            .split_once('/')
                            .is_some_and(|(given, _)| given.eq_ignore_ascii_case(kind)),
                        None => accepted.eq_ignore_ascii_case(media_type),
                    })
            }
        }
    }
}

impl std::fmt::Display for AttachmentSupport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AttachmentSupport::Any => f.write_str("any attachment"),
            AttachmentSupport::None => f.write_str("text only"),
            AttachmentSupport::Only(types) => write!(f, "{}", types.join(", ")),
        }
    }
}

/// A model backend.
pub trait Provider: Send + Sync {
    /// A short name for errors and records (`echo`, `openai`, ...).
    fn name(&self) -> &str;

    /// The attachments the model can take (by default any: a provider
    /// that cannot take one also refuses it when it maps the request).
    fn attachments(&self) -> AttachmentSupport {
        AttachmentSupport::Any
    }

    /// Start a model call. The stream owns everything it needs; dropping it
    /// cancels the call.
    fn stream(
        &self,
        request: ModelRequest,
    ) -> BoxStream<'static, Result<StreamEvent, ProviderError>>;

    /// Run a model call to completion.
    fn complete(
        &self,
        request: ModelRequest,
    ) -> BoxFuture<'static, Result<ModelResponse, ProviderError>> {
        let mut stream = self.stream(request);
        Box::pin(async move {
            let mut assembler = ResponseAssembler::new();
            while let Some(event) = std::future::poll_fn(|cx| stream.as_mut().poll_next(cx)).await {
                assembler.push(event?)?;
            }
            assembler.finish()
        })
    }
}

/// Folds stream events into a [`ModelResponse`].
#[derive(Debug, Default)]
pub struct ResponseAssembler {
    text: String,
    calls: Vec<PartialCall>,
    usage: Usage,
    retries: Vec<String>,
    finish: Option<FinishReason>,
    model: Option<String>,
}

#[derive(Debug, Default)]
struct PartialCall {
    id: Option<String>,
    name: Option<String>,
    arguments: String,
}

impl ResponseAssembler {
    pub fn new() -> ResponseAssembler {
        ResponseAssembler::default()
    }

    /// Take one event. Events after `Done` are a malformed stream.
    pub fn push(&mut self, event: StreamEvent) -> Result<(), ProviderError> {
        if self.finish.is_some() {
            return Err(ProviderError::MalformedResponse {
                message: "an event arrived after the end of the reply".into(),
            });
        }
        match event {
            StreamEvent::Text(text) => self.text.push_str(&text),
            StreamEvent::ToolCall {
                index,
                id,
                name,
                arguments,
            } => {
                if index >= self.calls.len() {
                    self.calls.resize_with(index + 1, PartialCall::default);
                }
                let call = &mut self.calls[index];
                if id.is_some() {
                    call.id = id;
                }
                if let Some(name) = name {
                    call.name.get_or_insert_with(String::new).push_str(&name);
                }
                call.arguments.push_str(&arguments);
            }
            StreamEvent::Usage(usage) => {
                let merge = |new: Option<u64>, old: Option<u64>| new.or(old);
                self.usage = Usage {
                    input_tokens: merge(usage.input_tokens, self.usage.input_tokens),
                    output_tokens: merge(usage.output_tokens, self.usage.output_tokens),
                    cache_read_tokens: merge(usage.cache_read_tokens, self.usage.cache_read_tokens),
                    cache_write_tokens: merge(
                        usage.cache_write_tokens,
                        self.usage.cache_write_tokens,
                    ),
                };
            }
            StreamEvent::Retrying {
                attempt, reason, ..
            } => {
                self.retries.push(format!("attempt {attempt}: {reason}"));
            }
            StreamEvent::Model(model) => self.model = Some(model),
            StreamEvent::Done(reason) => self.finish = Some(reason),
        }
        Ok(())
    }

    /// The text received so far.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The complete response, or a truncated-stream error when `Done` never
    /// arrived (no partial assistant message is ever produced).
    pub fn finish(self) -> Result<ModelResponse, ProviderError> {
        let finish_reason = self.finish.ok_or(ProviderError::TruncatedStream)?;
        let mut parts = Vec::with_capacity(1 + self.calls.len());
        if !self.text.is_empty() {
            parts.push(Part::text(self.text));
        }
        for (index, call) in self.calls.into_iter().enumerate() {
            let (Some(id), Some(name)) = (call.id, call.name) else {
                return Err(ProviderError::MalformedResponse {
                    message: format!("tool call {index} has no id or no name"),
                });
            };
            parts.push(Part::ToolCall(ToolCall {
                id,
                name,
                arguments: call.arguments,
            }));
        }
        Ok(ModelResponse {
            message: Message::new(Role::Assistant, parts),
            usage: self.usage,
            finish_reason,
            retries: self.retries,
            model: self.model,
        })
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn attachment_support_matches_media_types_and_their_wildcards() {
        let images = AttachmentSupport::Only(&["image/*", "application/pdf"]);
        assert!(images.accepts("image/png") && images.accepts("IMAGE/webp"));
        assert!(images.accepts("application/pdf"));
        assert!(!images.accepts("application/json") && !images.accepts("image"));
        assert!(!AttachmentSupport::None.accepts("text/plain"));
        assert!(AttachmentSupport::Any.accepts("anything/at-all"));
        assert_eq!(images.to_string(), "image/*, application/pdf");
        assert_eq!(AttachmentSupport::None.to_string(), "text only");
    }

    use super::*;

    #[test]
    fn generation_options_are_checked_against_the_ranges_every_backend_takes() {
        let options = |temperature, top_p, max_tokens| GenerationOptions {
            temperature,
            top_p,
            seed: None,
            max_tokens,
        };
        assert_eq!(options(Some(0.0), Some(1.0), Some(1)).check(), Ok(()));
        assert_eq!(options(Some(2.0), Some(0.01), None).check(), Ok(()));
        assert_eq!(GenerationOptions::default().check(), Ok(()));
        for bad in [
            options(Some(-5.0), None, None),
            options(Some(2.5), None, None),
            options(None, Some(7.0), None),
            options(None, Some(0.0), None),
            options(None, None, Some(0)),
        ] {
            assert!(bad.check().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn assembles_text_and_split_tool_calls() {
        let mut assembler = ResponseAssembler::new();
        let events = [
            StreamEvent::Text("Hel".into()),
            StreamEvent::Text("lo".into()),
            StreamEvent::ToolCall {
                index: 1,
                id: Some("b".into()),
                name: Some("two".into()),
                arguments: "{}".into(),
            },
            StreamEvent::ToolCall {
                index: 0,
                id: Some("a".into()),
                name: Some("one".into()),
                arguments: "{\"x\":".into(),
            },
            StreamEvent::ToolCall {
                index: 0,
                id: None,
                name: None,
                arguments: " 1}".into(),
            },
            StreamEvent::Usage(Usage {
                input_tokens: Some(3),
                ..Usage::default()
            }),
            StreamEvent::Usage(Usage {
                output_tokens: Some(2),
                ..Usage::default()
            }),
            StreamEvent::Done(FinishReason::ToolCalls),
        ];
        for event in events {
            assembler.push(event).unwrap();
        }
        let response = assembler.finish().unwrap();
        assert_eq!(response.message.joined_text(), "Hello");
        let calls: Vec<_> = response.message.tool_calls().collect();
        assert_eq!(calls[0].arguments, "{\"x\": 1}");
        assert_eq!(calls[1].name, "two");
        assert_eq!(response.usage.input_tokens, Some(3));
        assert_eq!(response.usage.output_tokens, Some(2));
        assert_eq!(response.usage.cache_read_tokens, None);
    }

    #[test]
    fn a_stream_without_done_is_truncated() {
        let mut assembler = ResponseAssembler::new();
        assembler.push(StreamEvent::Text("partial".into())).unwrap();
        assert_eq!(assembler.finish(), Err(ProviderError::TruncatedStream));
    }

    #[test]
    fn a_call_without_a_name_is_malformed() {
        let mut assembler = ResponseAssembler::new();
        assembler
            .push(StreamEvent::ToolCall {
                index: 0,
                id: Some("a".into()),
                name: None,
                arguments: "{}".into(),
            })
            .unwrap();
        assembler
            .push(StreamEvent::Done(FinishReason::ToolCalls))
            .unwrap();
        assert!(matches!(
            assembler.finish(),
            Err(ProviderError::MalformedResponse { .. })
        ));
    }

    #[test]
    fn usage_sums_keep_absence_distinct_from_zero() {
        let a = Usage {
            input_tokens: Some(2),
            ..Usage::default()
        };
        let b = Usage {
            input_tokens: Some(3),
            output_tokens: Some(1),
            ..Usage::default()
        };
        let sum = a.add(&b);
        assert_eq!(sum.input_tokens, Some(5));
        assert_eq!(sum.output_tokens, Some(1));
        assert_eq!(sum.cache_read_tokens, None);
    }
}
