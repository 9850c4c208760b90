/*!
The reply written back as server-sent events.
*/

use super::reply::{completion_id, finish, line, usage};
use super::*;
use crate::proxy::turn::{Events, ProxyError, Reply};
use axum::body::Bytes;
use serde_json::{Value, json};
use skein::store::RunId;

/// The chunks of one streamed reply: one id, model and time for all.
pub struct Chunks {
    pub(super) id: String,
    pub(super) model: String,
    pub(super) created: i64,
    pub(super) include_usage: bool,
}

impl Chunks {
    fn delta(&self, delta: &Value, finish: Option<&str>) -> Bytes {
        line(&json!({
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }))
    }
}

impl Events for Chunks {
    fn start(&mut self, run: &RunId) -> Vec<Bytes> {
        self.id = completion_id(run);
        vec![self.delta(&json!({"role": "assistant", "content": ""}), None)]
    }

    fn text(&mut self, text: &str) -> Vec<Bytes> {
        vec![self.delta(&json!({ "content": text }), None)]
    }

    fn finish(&mut self, reply: &Reply<'_>) -> Vec<Bytes> {
        let mut frames = Vec::new();
        let calls = wire_calls(reply.message());
        if !calls.is_empty() {
            let indexed: Vec<Value> = calls
                .iter()
                .enumerate()
                .map(|(index, call)| {
                    let mut call = json!(call);
                    call["index"] = json!(index);
                    call
                })
                .collect();
            frames.push(self.delta(&json!({ "tool_calls": indexed }), None));
        }
        frames.push(self.delta(&json!({}), Some(finish(reply))));
        if self.include_usage
            && let Some(usage) = usage(reply.usage)
        {
            frames.push(line(&json!({
                "id": self.id,
                "object": "chat.completion.chunk",
                "created": self.created,
                "model": self.model,
                "choices": [],
                "usage": usage,
            })));
        }
        frames.push(Bytes::from_static(b"data: [DONE]\n\n"));
        frames
    }

    fn fail(&mut self, error: &ProxyError) -> Vec<Bytes> {
        vec![line(&error_body(error))]
    }
}
