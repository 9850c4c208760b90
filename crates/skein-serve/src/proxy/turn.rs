/*!
What every wire API maps to and from: a [`Turn`] (the request as skein
messages, annotations, tools and options, whatever API it came through),
a [`Reply`] (the finished run, to be written back in the client's
format), the [`Api`] and [`Events`] each wire format implements, and
[`ProxyError`], the one error every API renders in its own shape.
*/

use super::results::ParamPaths;
use axum::body::Bytes;
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::Value;
use skein::core::provider::GenerationOptions;
use skein::core::{Annotation, FinishReason, Message, Part, Role, RunRecord, ToolSpec, Usage};
use skein::engine::RunOutput;
use skein::providers::http::arguments_value;
use skein::store::RunId;

/// One proxied request, API-neutral.
#[derive(Debug, Default)]
pub struct Turn {
    /// The messages the client sent, in order (with `previous` set, the
    /// new ones only: the graph step puts the stored history among them).
    pub messages: Vec<Message>,
    /// Where each message and its parts came from in the request
    /// (parallel to `messages`), for refusals that name the field.
    pub places: Vec<ParamPaths>,
    /// (message index, part index, annotation): Anthropic's
    /// `cache_control` as cache hints.
    pub annotations: Vec<(usize, u32, Annotation)>,
    pub tools: Vec<ToolSpec>,
    pub options: GenerationOptions,
    /// The model the client asked for.
    pub model: Option<String>,
    pub stream: bool,
    /// Whether the exchange is recorded (the Responses API's `store`).
    pub record: bool,
    /// Tool calls whose argument text the client may have re-encoded
    /// (Anthropic's `tool_use.input` is a JSON object; LangChain re-sends
    /// chat completions' `arguments` through `json.dumps`): (message index,
    /// part index, the value it sent). The graph step finds the stored node
    /// they stand for: arguments match by JSON value on every API.
    pub reencoded: Vec<(usize, usize, Value)>,
    /// The Responses API's `previous_response_id`.
    pub previous: Option<Previous>,
    /// The session the request's own fields name (see [`session_of`]).
    pub session: Option<String>,
    /// The client the request's own fields name (see [`client_of`]).
    pub client: Option<String>,
    /// Request fields the proxy does not honour (its models answer without
    /// them): reported in the `x-skein-unhonoured` response header, and
    /// kept in the run's request body.
    pub unhonoured: Vec<&'static str>,
}

/// The session a request's fields name, in this order: `metadata`'s
/// `session_id`, `session` or `user_id` (OpenAI's metadata, Anthropic's
/// `metadata.user_id`), else OpenAI's `user`. A value that would read as
/// an id is prefixed `session ` (a conversation's name never reads as one).
pub fn session_of(metadata: Option<&Value>, user: Option<&str>) -> Option<String> {
    let from_metadata = ["session_id", "session", "user_id"].iter().find_map(|key| {
        metadata
            .and_then(|metadata| metadata.get(key))
            .and_then(Value::as_str)
    });
    let value = from_metadata.or(user)?.trim();
    if value.is_empty() {
        return None;
    }
    let value: String = value.chars().take(super::NAME_LIMIT).collect();
    Some(match skein::store::check_conversation_name(&value) {
        Ok(()) => value,
        Err(_) => format!("session {value}"),
    })
}

/// The client a request's field names (OpenAI's `user`, Anthropic's
/// `metadata.user_id`), trimmed and cut at the header's length limit;
/// `None` when empty. The `x-skein-client` header wins over it.
pub fn client_of(field: Option<&str>) -> Option<String> {
    let value = field?.trim();
    (!value.is_empty()).then(|| value.chars().take(super::NAME_LIMIT).collect())
}

impl Turn {
    /// Offer every assistant tool call of the history whose arguments are
    /// JSON for matching by value (those the API marked already are kept):
    /// a client that re-serialises the model's exact argument text still
    /// continues the stored thread.
    pub fn calls_match_by_value(mut self) -> Turn {
        let marked: std::collections::HashSet<(usize, usize)> = self
            .reencoded
            .iter()
            .map(|(at, part, _)| (*at, *part))
            .collect();
        for (index, message) in self.messages.iter().enumerate() {
            if message.role != Role::Assistant {
                continue;
            }
            for (part, found) in message.parts.iter().enumerate() {
                let Part::ToolCall(call) = found else {
                    continue;
                };
                if marked.contains(&(index, part)) {
                    continue;
                }
                self.reencoded
                    .push((index, part, arguments_value(&call.arguments)));
            }
        }
        self
    }
}

/// A continuation of an earlier reply: the Responses API's
/// `previous_response_id`, or an Anthropic message thread's
/// `previous_message_id`.
#[derive(Debug)]
pub struct Previous {
    /// The id as the client gave it, for messages.
    pub given: String,
    /// The run it names, when it is one of the proxy's reply ids.
    pub run: Option<RunId>,
    /// How many of [`Turn::messages`] are this request's `instructions`:
    /// they take the place of the stored thread's leading system messages
    /// (instructions are not carried over from a previous response).
    pub instructions: usize,
    /// Which API's continuation it is.
    pub of: Continued,
}

impl Previous {
    /// The run a reply id the proxy gave names: `prefix` (`resp_`, `msg_`)
    /// and the run's 32 hex digits; `None` for an id it never gave.
    pub fn run_named(given: &str, prefix: &str) -> Option<RunId> {
        given
            .strip_prefix(prefix)
            .filter(|id| id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit()))
            .map(|id| RunId(id.to_string()))
    }
}

/// What a continuation carries over from the reply it continues.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Continued {
    /// A Responses `previous_response_id`: the history less its system
    /// messages (the request's `instructions` stand in their place); the
    /// request offers its own tools.
    Response,
    /// An Anthropic thread's `continue`: the whole history, its `system`
    /// included, and (unless `tool_choice` is `none`) the tools the reply
    /// was offered (the request may send neither: the thread keeps them).
    Thread { offers_tools: bool },
}

/// A finished run, as the client is answered: one the model just ran, or
/// one answered from the recording.
pub struct Reply<'a> {
    pub run: &'a RunId,
    pub message: &'a Message,
    pub usage: Usage,
    pub finish_reason: FinishReason,
    pub started_ms: i64,
    /// The model name shown to the client: the one it asked for, else the
    /// model that answered.
    pub model: &'a str,
}

impl<'a> Reply<'a> {
    /// The reply of a run that just ended.
    pub fn of(output: &'a RunOutput, model: &'a str) -> Reply<'a> {
        Reply {
            run: &output.run,
            message: &output.message,
            usage: output.usage,
            finish_reason: output.finish_reason.clone(),
            started_ms: output.started_ms,
            model,
        }
    }

    /// The reply a recorded run gave, `message` being its output node's.
    pub fn recorded(run: &'a RunRecord, message: &'a Message, model: &'a str) -> Reply<'a> {
        Reply {
            run: &run.id,
            message,
            usage: run.usage,
            finish_reason: run.finish_reason.clone().unwrap_or(FinishReason::Stop),
            started_ms: run.started_ms,
            model,
        }
    }

    pub fn run(&self) -> &RunId {
        self.run
    }

    pub fn message(&self) -> &Message {
        self.message
    }

    pub fn calls(&self) -> bool {
        self.message.tool_calls().next().is_some()
    }

    /// The reply stopped at the token limit.
    pub fn cut(&self) -> bool {
        !self.calls() && self.finish_reason == FinishReason::Length
    }

    pub fn created(&self) -> i64 {
        self.started_ms / 1000
    }
}

/// One wire API: how its replies and errors are written.
pub trait Api: Send + Sync + 'static {
    type Events: Events;

    /// Whether a re-sent body is read from where it differs from a kept
    /// one (see `super::resent`): its message array is the whole history.
    const READS_RESENT: bool = false;

    /// The whole reply of a request that does not stream.
    fn body(&self, reply: &Reply<'_>) -> Value;

    /// The event writer of a streamed reply.
    fn events(&self, model: &str) -> Self::Events;

    /// An error in the API's own shape.
    fn error(error: &ProxyError) -> Response;
}

/// The events of one streamed reply, as server-sent-event frames.
pub trait Events: Send + 'static {
    /// The reply begins (the run's id is known).
    fn start(&mut self, run: &RunId) -> Vec<Bytes>;
    /// A piece of the reply's text.
    fn text(&mut self, text: &str) -> Vec<Bytes>;
    /// The reply is complete (and recorded).
    fn finish(&mut self, reply: &Reply<'_>) -> Vec<Bytes>;
    /// The run failed after the stream began.
    fn fail(&mut self, error: &ProxyError) -> Vec<Bytes>;
}

/// What went wrong, in terms every API has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    InvalidRequest,
    Authentication,
    NotFound,
    RateLimit,
    /// skein or the model it forwards to failed.
    Server,
}

/// An error answered to a client.
#[derive(Clone, Debug, thiserror::Error)]
#[error("{message}")]
#[non_exhaustive]
pub struct ProxyError {
    pub status: StatusCode,
    pub kind: ErrorKind,
    pub message: String,
    /// The offending field, in OpenAI's notation (`messages.[2].content`).
    pub param: Option<String>,
    /// A machine-readable code clients act on (Anthropic's
    /// `error.details.error_code`, OpenAI's `error.code`).
    pub code: Option<&'static str>,
}

impl ProxyError {
    pub fn new(status: StatusCode, kind: ErrorKind, message: impl Into<String>) -> ProxyError {
        ProxyError {
            status,
            kind,
            message: message.into(),
            param: None,
            code: None,
        }
    }

    /// With the code clients act on.
    pub fn code(mut self, code: &'static str) -> ProxyError {
        self.code = Some(code);
        self
    }

    pub fn invalid(message: impl Into<String>) -> ProxyError {
        ProxyError::new(StatusCode::BAD_REQUEST, ErrorKind::InvalidRequest, message)
    }

    pub fn at(mut self, param: impl Into<String>) -> ProxyError {
        self.param = Some(param.into());
        self
    }

    pub fn server(message: impl Into<String>) -> ProxyError {
        ProxyError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            ErrorKind::Server,
            message,
        )
    }
}

/// A server-sent event with an `event:` name (Anthropic, Responses).
pub fn named_event(name: &str, data: &Value) -> Bytes {
    Bytes::from(format!("event: {name}\ndata: {data}\n\n"))
}
