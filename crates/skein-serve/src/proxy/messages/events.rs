/*!
The reply written back as server-sent events.
*/

use super::*;
use crate::proxy::turn::{Events, ProxyError, Reply, named_event};
use axum::body::Bytes;
use serde_json::{Value, json};
use skein::providers::http::tool_use_input;
use skein::store::RunId;

/// The events of one streamed Messages reply.
pub struct MessageEvents {
    pub(super) model: String,
    /// The index of the open text block, once text has come.
    pub(super) text_block: Option<usize>,
    /// Blocks started so far.
    pub(super) blocks: usize,
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
