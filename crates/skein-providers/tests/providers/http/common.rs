/*!
Shared helpers: fixtures, provider configurations with small timeouts, SSE
responses for wiremock and stream collection. What wiremock cannot do (a
body that stalls or is cut mid-way, a request that never gets an answer) is
the test kit's raw TCP server, re-exported here.
*/

use futures_util::StreamExt;
use skein_core::{
    BoxStream, Message, ModelRequest, ProviderError, ResponseAssembler, StreamEvent, Thread,
};
use skein_providers::http::{
    Anthropic, Credential, HttpConfig, OpenAiCompatible, RetryPolicy, Timeouts,
};
pub use skein_testkit::{Fault, FaultServer, refused};
use std::time::Duration;
use wiremock::ResponseTemplate;

/// The key every test provider sends.
pub const KEY: &str = "sk-test-SECRET-123";

pub fn fixture(path: &str) -> String {
    let full = format!("{}/tests/data/{path}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&full).unwrap_or_else(|error| panic!("{full}: {error}"))
}

/// Small timeouts and fast, deterministic retries (at most 2).
pub fn config(base_url: &str) -> HttpConfig {
    HttpConfig::new(base_url, Credential::value(KEY))
        .with_timeouts(Timeouts {
            connect: Duration::from_secs(2),
            first_byte: Duration::from_secs(2),
            idle: Duration::from_secs(1),
        })
        .with_retry(RetryPolicy {
            max_retries: 2,
            base_delay: Duration::from_millis(5),
            max_delay: Duration::from_secs(5),
            jitter: false,
        })
}

pub fn openai(base_url: &str) -> OpenAiCompatible {
    OpenAiCompatible::new(config(&format!("{base_url}/v1"))).unwrap()
}

pub fn anthropic(base_url: &str) -> Anthropic {
    Anthropic::new(config(base_url)).unwrap()
}

/// A request with one user message.
pub fn ask(text: &str) -> ModelRequest {
    ModelRequest::new("test-model", Thread::from_messages([Message::user(text)]))
}

/// A 200 streaming `body` as server-sent events.
pub fn sse(body: impl Into<String>) -> ResponseTemplate {
    ResponseTemplate::new(200)
        .insert_header("content-type", "text/event-stream")
        .set_body_raw(body.into().into_bytes(), "text/event-stream")
}

/// A JSON response.
pub fn json(status: u16, body: impl Into<String>) -> ResponseTemplate {
    ResponseTemplate::new(status).set_body_raw(body.into().into_bytes(), "application/json")
}

/// Every item of a stream: the events before the end, and the error that
/// ended it (if one did).
pub async fn collect(
    mut stream: BoxStream<'static, Result<StreamEvent, ProviderError>>,
) -> (Vec<StreamEvent>, Option<ProviderError>) {
    let mut events = Vec::new();
    while let Some(item) = stream.next().await {
        match item {
            Ok(event) => events.push(event),
            Err(error) => {
                assert!(stream.next().await.is_none(), "an item after an error");
                return (events, Some(error));
            }
        }
    }
    (events, None)
}

/// The events of a call, assembled.
pub fn assemble(events: &[StreamEvent]) -> Result<skein_core::ModelResponse, ProviderError> {
    let mut assembler = ResponseAssembler::new();
    for event in events {
        assembler.push(event.clone())?;
    }
    assembler.finish()
}

/// The `Retrying` events of a call.
pub fn retries(events: &[StreamEvent]) -> Vec<(u32, String, Duration)> {
    events
        .iter()
        .filter_map(|event| match event {
            StreamEvent::Retrying {
                attempt,
                reason,
                delay,
            } => Some((*attempt, reason.clone(), *delay)),
            _ => None,
        })
        .collect()
}

/// The JSON body of the `n`-th request a mock server received.
pub async fn request_body(server: &wiremock::MockServer, n: usize) -> serde_json::Value {
    let requests = server.received_requests().await.unwrap();
    serde_json::from_slice(&requests[n].body).unwrap()
}

/// The raw text of the `n`-th request body a mock server received.
pub async fn request_text(server: &wiremock::MockServer, n: usize) -> String {
    let requests = server.received_requests().await.unwrap();
    String::from_utf8(requests[n].body.clone()).unwrap()
}

pub async fn received(server: &wiremock::MockServer) -> usize {
    server.received_requests().await.unwrap().len()
}
