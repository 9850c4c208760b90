/*!
The recording proxy: `POST /v1/chat/completions` in OpenAI's format
(streaming and not), forwarded to the configured model through the engine,
every exchange recorded into the graph ([`record`]) with the exact request
body kept on its run. `GET /v1/models` lists the one model served.

The client's own API key is never forwarded or stored: the proxy calls the
model with the credential its configuration gives.
*/

mod record;
pub mod wire;

use crate::AppState;
use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use futures_util::future::join;
use serde_json::{Value, json};
use skein::Model;
use skein::core::{FinishReason, Message, Usage};
use skein::engine::{Request, RunOutput};
use std::sync::Arc;
use tokio::sync::mpsc;
use wire::ChatRequest;

/// The proxy's routes, with the request body limit.
pub fn routes(body_limit: usize) -> Router<Arc<AppState>> {
    Router::new()
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/models", get(models))
        .layer(DefaultBodyLimit::max(body_limit))
}

async fn models(State(state): State<Arc<AppState>>) -> Response {
    let Some(model) = &state.proxy else {
        return not_proxying();
    };
    Json(json!({
        "object": "list",
        "data": [{"id": model.name(), "object": "model", "created": 0, "owned_by": "skein"}]
    }))
}

async fn chat_completions(State(state): State<Arc<AppState>>, body: Bytes) -> Response {
    let Some(model) = state.proxy.clone() else {
        return not_proxying();
    };
    let Ok(body) = String::from_utf8(body.to_vec()) else {
        return error(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            "the body is not UTF-8",
        );
    };
    let request: ChatRequest = match serde_json::from_str(&body) {
        Ok(request) => request,
        Err(problem) => {
            return error(
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                &format!("the body is not a chat-completions request: {problem}"),
            );
        }
    };
    let prepared = request.thread_messages().and_then(|messages| {
        Ok(Request::messages(messages)
            .tools(request.tool_specs()?)
            .options(request.options()?)
            .capture())
    });
    let engine_request = match prepared {
        Ok(prepared) => model.bind(prepared),
        Err(refused) => {
            return error_at(
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                &refused.message,
                refused.param.as_deref(),
            );
        }
    };
    let exchange = Exchange { state, model, body };
    if request.stream {
        let include_usage = request
            .stream_options
            .as_ref()
            .is_some_and(|options| options.include_usage);
        exchange.stream(engine_request, include_usage)
    } else {
        exchange.complete(engine_request).await
    }
}

/// One proxied request in flight.
struct Exchange {
    state: Arc<AppState>,
    model: Model,
    body: String,
}

impl Exchange {
    async fn complete(self, request: Request) -> Response {
        let output = match self.model.engine().run(request).await {
            Ok(output) => output,
            Err(failure) => return model_failed(&failure),
        };
        let recorded = match self.record(&output).await {
            Ok(recorded) => recorded,
            Err(response) => return response,
        };
        let message = &output.message;
        let mut reply = json!({"role": "assistant", "content": content(message)});
        let calls = wire::wire_calls(message);
        if !calls.is_empty() {
            reply["tool_calls"] = json!(calls);
        }
        let mut completion = json!({
            "id": completion_id(&output),
            "object": "chat.completion",
            "created": created(&output),
            "model": self.model.name(),
            "choices": [{"index": 0, "message": reply, "finish_reason": finish(&output)}],
        });
        if let Some(usage) = usage(output.usage) {
            completion["usage"] = usage;
        }
        (
            [
                ("x-skein-conversation", recorded.conversation.to_string()),
                ("x-skein-node", recorded.node.to_string()),
            ],
            axum::Json(completion),
        )
            .into_response()
    }

    fn stream(self, request: Request, include_usage: bool) -> Response {
        let (chunks, body) = mpsc::channel::<Result<Bytes, std::io::Error>>(64);
        tokio::spawn(async move {
            let (texts, mut deltas) = mpsc::unbounded_channel::<String>();
            let format = Chunks::new(&self.model);
            let started = format.delta(&json!({"role": "assistant", "content": ""}), None);
            let _ = chunks.send(Ok(started)).await;
            let work = self.model.engine().run(request.text_channel(texts));
            let forward = async {
                while let Some(text) = deltas.recv().await {
                    if chunks
                        .send(Ok(format.delta(&json!({ "content": text }), None)))
                        .await
                        .is_err()
                    {
                        break;
                    }
                }
            };
            let (outcome, ()) = join(work, forward).await;
            let output = match outcome {
                Ok(output) => output,
                Err(failure) => {
                    let message = format!("the model failed: {failure}");
                    let _ = chunks.send(Ok(format.error(&message))).await;
                    return;
                }
            };
            if let Err(problem) = self.record(&output).await {
                tracing::error!("the proxy could not record an exchange: {problem:?}");
                let _ = chunks
                    .send(Ok(format.error("the reply could not be recorded")))
                    .await;
                return;
            }
            let calls = wire::wire_calls(&output.message);
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
                let _ = chunks
                    .send(Ok(format.delta(&json!({ "tool_calls": indexed }), None)))
                    .await;
            }
            let _ = chunks
                .send(Ok(format.delta(&json!({}), Some(finish(&output)))))
                .await;
            if include_usage && let Some(usage) = usage(output.usage) {
                let _ = chunks.send(Ok(format.usage(usage))).await;
            }
            let _ = chunks
                .send(Ok(Bytes::from_static(b"data: [DONE]\n\n")))
                .await;
        });
        let stream = futures_util::stream::unfold(body, |mut body| async move {
            body.recv().await.map(|chunk| (chunk, body))
        });
        (
            [
                (header::CONTENT_TYPE, "text/event-stream"),
                (header::CACHE_CONTROL, "no-cache"),
            ],
            Body::from_stream(stream),
        )
            .into_response()
    }

    async fn record(&self, output: &RunOutput) -> Result<record::Recorded, Response> {
        record::record(
            &self.state.store,
            output,
            self.body.clone(),
            self.model.name().to_string(),
        )
        .await
        .map_err(|problem| {
            error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "server_error",
                &format!("the reply could not be recorded: {problem}"),
            )
        })
    }
}

/// The chunks of one streamed reply: one id, model and time for all.
struct Chunks {
    id: String,
    model: String,
    created: i64,
}

impl Chunks {
    fn new(model: &Model) -> Chunks {
        Chunks {
            id: format!("chatcmpl-{}", skein::store::RunId::random()),
            model: model.name().to_string(),
            created: skein::store::records::now_ms() / 1000,
        }
    }

    fn delta(&self, delta: &Value, finish: Option<&str>) -> Bytes {
        self.line(&json!({
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }))
    }

    fn usage(&self, usage: Value) -> Bytes {
        self.line(&json!({
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [],
            "usage": usage,
        }))
    }

    fn error(&self, message: &str) -> Bytes {
        self.line(&json!({"error": {"message": message, "type": "server_error", "code": null}}))
    }

    fn line(&self, value: &Value) -> Bytes {
        Bytes::from(format!("data: {value}\n\n"))
    }
}

fn completion_id(output: &RunOutput) -> String {
    format!("chatcmpl-{}", output.run)
}

fn created(output: &RunOutput) -> i64 {
    output.started_ms / 1000
}

/// The reply's text, or `null` when it only calls tools.
fn content(message: &Message) -> Value {
    let text = message.joined_text();
    if text.is_empty() && message.tool_calls().next().is_some() {
        Value::Null
    } else {
        Value::String(text)
    }
}

fn finish(output: &RunOutput) -> &'static str {
    if output.message.tool_calls().next().is_some() {
        return "tool_calls";
    }
    match output.finish_reason {
        FinishReason::Length => "length",
        FinishReason::ContentFilter => "content_filter",
        FinishReason::ToolCalls => "tool_calls",
        _ => "stop",
    }
}

fn usage(usage: Usage) -> Option<Value> {
    let (input, output) = (usage.input_tokens?, usage.output_tokens?);
    Some(json!({
        "prompt_tokens": input,
        "completion_tokens": output,
        "total_tokens": input + output,
    }))
}

#[allow(non_snake_case)]
fn Json(value: Value) -> Response {
    axum::Json(value).into_response()
}

fn error(status: StatusCode, kind: &str, message: &str) -> Response {
    error_at(status, kind, message, None)
}

/// An error in OpenAI's format; `param` names the offending field.
fn error_at(status: StatusCode, kind: &str, message: &str, param: Option<&str>) -> Response {
    (
        status,
        axum::Json(json!({
            "error": {"message": message, "type": kind, "param": param, "code": null}
        })),
    )
        .into_response()
}

fn model_failed(failure: &skein::engine::EngineError) -> Response {
    error(
        StatusCode::BAD_GATEWAY,
        "server_error",
        &format!("the model failed: {failure}"),
    )
}

fn not_proxying() -> Response {
    error(
        StatusCode::NOT_FOUND,
        "invalid_request_error",
        "this server does not proxy: start it with `skein serve --proxy`",
    )
}
