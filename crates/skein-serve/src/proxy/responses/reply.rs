/*!
The reply written back whole, errors, and what the streamed form shares.
*/

use super::*;
use crate::proxy::turn::{Api, ProxyError, Reply};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};
use skein::core::ToolCall;
use skein::store::RunId;

/// How a Responses reply is written back.
pub struct Responses {
    /// The request's settings, echoed in every response object.
    pub(super) echo: Value,
}

impl Responses {
    /// The response object around `output`.
    pub(super) fn response(
        &self,
        id: &str,
        created: i64,
        model: &str,
        status: &str,
    ) -> Map<String, Value> {
        let mut response = Map::new();
        for (key, value) in [
            ("id", json!(id)),
            ("object", json!("response")),
            ("created_at", json!(created)),
            ("status", json!(status)),
            ("model", json!(model)),
            ("output", json!([])),
            ("error", Value::Null),
            ("incomplete_details", Value::Null),
            ("metadata", json!({})),
            ("parallel_tool_calls", json!(true)),
            ("tool_choice", json!("auto")),
            ("text", json!({"format": {"type": "text"}})),
            ("truncation", json!("disabled")),
            ("usage", Value::Null),
        ] {
            response.insert(key.into(), value);
        }
        if let Value::Object(echo) = &self.echo {
            response.extend(echo.clone());
        }
        response
    }

    pub(super) fn finished(&self, reply: &Reply<'_>) -> Value {
        let mut response = self.response(
            &response_id(reply.run()),
            reply.created(),
            reply.model,
            if reply.cut() {
                "incomplete"
            } else {
                "completed"
            },
        );
        response.insert("output".into(), Value::Array(output(reply)));
        if reply.cut() {
            response.insert(
                "incomplete_details".into(),
                json!({"reason": "max_output_tokens"}),
            );
        }
        response.insert("usage".into(), usage(reply));
        Value::Object(response)
    }
}

impl Api for Responses {
    type Events = ResponseEvents;

    fn body(&self, reply: &Reply<'_>) -> Value {
        self.finished(reply)
    }

    fn events(&self, model: &str) -> ResponseEvents {
        ResponseEvents {
            api: Responses {
                echo: self.echo.clone(),
            },
            model: model.to_string(),
            sequence: 0,
            message: None,
            run: RunId(String::new()),
            created: skein::store::records::now_ms() / 1000,
        }
    }

    fn error(error: &ProxyError) -> Response {
        (
            error.status,
            axum::Json(crate::proxy::chat::error_body(error)),
        )
            .into_response()
    }
}

pub(super) fn response_id(run: &RunId) -> String {
    format!("{RESPONSE_PREFIX}{run}")
}

pub(super) fn message_item_id(run: &RunId) -> String {
    format!("msg_{run}")
}

pub(super) fn message_item(id: &str, text: &str, status: &str) -> Value {
    json!({
        "type": "message",
        "id": id,
        "status": status,
        "role": "assistant",
        "content": if status == "completed" { json!([text_part(text)]) } else { json!([]) },
    })
}

pub(super) fn text_part(text: &str) -> Value {
    json!({"type": "output_text", "text": text, "annotations": [], "logprobs": []})
}

pub(super) fn call_item(call: &ToolCall, arguments: &str, status: &str) -> Value {
    json!({
        "type": "function_call",
        "id": format!("fc_{}", call.id),
        "call_id": call.id,
        "name": call.name,
        "arguments": arguments,
        "status": status,
    })
}

/// The reply's output items: its text as one message (left out when it
/// only calls tools), then one item per call.
pub(super) fn output(reply: &Reply<'_>) -> Vec<Value> {
    let text = reply.message().joined_text();
    let mut items = Vec::new();
    if !text.is_empty() || !reply.calls() {
        items.push(message_item(
            &message_item_id(reply.run()),
            &text,
            "completed",
        ));
    }
    for call in reply.message().tool_calls() {
        items.push(call_item(call, &call.arguments, "completed"));
    }
    items
}

pub(super) fn usage(reply: &Reply<'_>) -> Value {
    let usage = reply.usage;
    match (usage.input_tokens, usage.output_tokens) {
        (Some(input), Some(output)) => json!({
            "input_tokens": input,
            "input_tokens_details": {"cached_tokens": usage.cache_read_tokens.unwrap_or(0)},
            "output_tokens": output,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": input + output,
        }),
        _ => Value::Null,
    }
}
