/*!
The reply written back whole, errors, and what the streamed form shares.
*/

use super::*;
use crate::proxy::turn::{Api, ErrorKind, ProxyError, Reply};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use skein::core::Part;
use skein::providers::http::tool_use_input;
use skein::store::RunId;

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

pub(super) fn error_body(error: &ProxyError) -> Value {
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

/// How a reply's `id` begins: the rest is its run's.
pub(super) const MESSAGE_PREFIX: &str = "msg_";

pub(super) fn message_id(run: &RunId) -> String {
    format!("{MESSAGE_PREFIX}{run}")
}

/// A reply part as a content block (a text part left empty is none).
pub(super) fn content_block(part: &Part) -> Option<Value> {
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

pub(super) fn stop_reason(reply: &Reply<'_>) -> &'static str {
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
pub(super) fn usage(reply: &Reply<'_>) -> Value {
    let usage = reply.usage;
    json!({
        "input_tokens": usage.input_tokens.unwrap_or(0),
        "output_tokens": usage.output_tokens.unwrap_or(0),
    })
}
