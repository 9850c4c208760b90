/*!
The reply written back as server-sent events.
*/

use super::*;
use crate::proxy::turn::{Events, ProxyError, Reply, named_event};
use axum::body::Bytes;
use serde_json::{Value, json};
use skein::store::RunId;

/// The events of one streamed response.
pub struct ResponseEvents {
    pub(super) api: Responses,
    pub(super) model: String,
    pub(super) sequence: u64,
    /// The open message item's id, once text has come.
    pub(super) message: Option<String>,
    /// The run, known from the start.
    pub(super) run: RunId,
    pub(super) created: i64,
}

impl ResponseEvents {
    fn event(&mut self, kind: &str, mut data: Value) -> Bytes {
        data["type"] = json!(kind);
        data["sequence_number"] = json!(self.sequence);
        self.sequence += 1;
        named_event(kind, &data)
    }

    /// Open the message item (output index 0) and its text part.
    fn open_message(&mut self, id: String) -> Vec<Bytes> {
        let frames = vec![
            self.event(
                "response.output_item.added",
                json!({"output_index": 0, "item": message_item(&id, "", "in_progress")}),
            ),
            self.event(
                "response.content_part.added",
                json!({"item_id": id, "output_index": 0, "content_index": 0, "part": text_part("")}),
            ),
        ];
        self.message = Some(id);
        frames
    }
}

impl Events for ResponseEvents {
    fn start(&mut self, run: &RunId) -> Vec<Bytes> {
        self.run = run.clone();
        let response = Value::Object(self.api.response(
            &response_id(run),
            self.created,
            &self.model,
            "in_progress",
        ));
        vec![
            self.event("response.created", json!({ "response": response })),
            self.event("response.in_progress", json!({ "response": response })),
        ]
    }

    fn text(&mut self, text: &str) -> Vec<Bytes> {
        let mut frames = Vec::new();
        let id = match &self.message {
            Some(id) => id.clone(),
            None => {
                let id = message_item_id(&self.run);
                frames.extend(self.open_message(id.clone()));
                id
            }
        };
        frames.push(self.event(
            "response.output_text.delta",
            json!({"item_id": id, "output_index": 0, "content_index": 0, "delta": text, "logprobs": []}),
        ));
        frames
    }

    fn finish(&mut self, reply: &Reply<'_>) -> Vec<Bytes> {
        let mut frames = Vec::new();
        let text = reply.message().joined_text();
        if self.message.is_none() && (!text.is_empty() || !reply.calls()) {
            frames.extend(self.open_message(message_item_id(reply.run())));
        }
        let mut index = 0;
        if let Some(id) = self.message.take() {
            frames.push(self.event(
                "response.output_text.done",
                json!({"item_id": id, "output_index": 0, "content_index": 0, "text": text, "logprobs": []}),
            ));
            frames.push(self.event(
                "response.content_part.done",
                json!({"item_id": id, "output_index": 0, "content_index": 0, "part": text_part(&text)}),
            ));
            frames.push(self.event(
                "response.output_item.done",
                json!({"output_index": 0, "item": message_item(&id, &text, "completed")}),
            ));
            index = 1;
        }
        for call in reply.message().tool_calls() {
            let id = format!("fc_{}", call.id);
            frames.push(self.event(
                "response.output_item.added",
                json!({"output_index": index, "item": call_item(call, "", "in_progress")}),
            ));
            frames.push(self.event(
                "response.function_call_arguments.delta",
                json!({"item_id": id, "output_index": index, "delta": call.arguments}),
            ));
            frames.push(self.event(
                "response.function_call_arguments.done",
                json!({"item_id": id, "output_index": index, "name": call.name, "arguments": call.arguments}),
            ));
            frames.push(self.event(
                "response.output_item.done",
                json!({"output_index": index, "item": call_item(call, &call.arguments, "completed")}),
            ));
            index += 1;
        }
        let mut response = self.api.finished(reply);
        response["created_at"] = json!(self.created);
        let kind = if reply.cut() {
            "response.incomplete"
        } else {
            "response.completed"
        };
        frames.push(self.event(kind, json!({ "response": response })));
        frames
    }

    fn fail(&mut self, error: &ProxyError) -> Vec<Bytes> {
        let body = crate::proxy::chat::error_body(error);
        vec![self.event(
            "error",
            json!({
                "code": body["error"]["type"],
                "message": error.message,
                "param": error.param,
            }),
        )]
    }
}
