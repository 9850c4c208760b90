/*!
The reply written back whole, errors, and what the streamed form shares.
*/

use super::read::function_kind;
use super::*;
use crate::proxy::turn::{Api, ErrorKind, ProxyError, Reply};
use axum::body::Bytes;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use skein::core::{Message, Usage};
use skein::store::RunId;

/// How a chat completion is written back.
pub struct Chat {
    pub(super) include_usage: bool,
}

impl Api for Chat {
    const READS_RESENT: bool = true;
    type Events = Chunks;

    fn body(&self, reply: &Reply<'_>) -> Value {
        let message = reply.message();
        let mut wire = json!({"role": "assistant", "content": content(message)});
        let calls = wire_calls(message);
        if !calls.is_empty() {
            wire["tool_calls"] = json!(calls);
        }
        let mut completion = json!({
            "id": completion_id(reply.run()),
            "object": "chat.completion",
            "created": reply.created(),
            "model": reply.model,
            "choices": [{"index": 0, "message": wire, "finish_reason": finish(reply)}],
        });
        if let Some(usage) = usage(reply.usage) {
            completion["usage"] = usage;
        }
        completion
    }

    fn events(&self, model: &str) -> Chunks {
        Chunks {
            id: String::new(),
            model: model.to_string(),
            created: skein::store::records::now_ms() / 1000,
            include_usage: self.include_usage,
        }
    }

    fn error(error: &ProxyError) -> Response {
        (error.status, axum::Json(error_body(error))).into_response()
    }
}

/// An error in OpenAI's format; `param` names the offending field. Shared
/// with the Responses API, whose errors have the same shape.
pub fn error_body(error: &ProxyError) -> Value {
    let kind = match error.kind {
        ErrorKind::InvalidRequest | ErrorKind::NotFound => "invalid_request_error",
        ErrorKind::Authentication => "authentication_error",
        ErrorKind::RateLimit => "rate_limit_error",
        ErrorKind::Server => "server_error",
    };
    json!({"error": {"message": error.message, "type": kind, "param": error.param, "code": error.code}})
}

pub(super) fn line(value: &Value) -> Bytes {
    Bytes::from(format!("data: {value}\n\n"))
}

pub(super) fn completion_id(run: &RunId) -> String {
    format!("chatcmpl-{run}")
}

/// The reply's text, or `null` when it only calls tools.
pub(super) fn content(message: &Message) -> Value {
    let text = message.joined_text();
    if text.is_empty() && message.tool_calls().next().is_some() {
        Value::Null
    } else {
        Value::String(text)
    }
}

pub(super) fn finish(reply: &Reply<'_>) -> &'static str {
    use skein::core::FinishReason;
    if reply.calls() {
        return "tool_calls";
    }
    match reply.finish_reason {
        FinishReason::Length => "length",
        FinishReason::ContentFilter => "content_filter",
        FinishReason::ToolCalls => "tool_calls",
        _ => "stop",
    }
}

pub(super) fn usage(usage: Usage) -> Option<Value> {
    let (input, output) = (usage.input_tokens?, usage.output_tokens?);
    Some(json!({
        "prompt_tokens": input,
        "completion_tokens": output,
        "total_tokens": input + output,
    }))
}

/// The reply's tool calls in wire form.
pub fn wire_calls(message: &Message) -> Vec<WireToolCall> {
    message
        .tool_calls()
        .map(|call| WireToolCall {
            id: call.id.clone(),
            kind: function_kind(),
            function: WireFunction {
                name: call.name.clone(),
                arguments: call.arguments.clone(),
            },
        })
        .collect()
}
