/*!
Helpers shared by the integration tests: building requests, draining
streams, loading scripts and finding data files.
*/

use serde_json::json;
use skein_core::{
    Message, ModelRequest, ModelResponse, Provider, ProviderError, StreamEvent, Thread, ToolResult,
    ToolSpec,
};
use skein_providers::Scripted;
use std::path::PathBuf;

/// A request over a thread of `messages`.
pub fn request(messages: impl IntoIterator<Item = Message>) -> ModelRequest {
    ModelRequest::new("test-model", Thread::from_messages(messages))
}

/// `request` with tools of these names offered.
pub fn with_tools(mut request: ModelRequest, names: &[&str]) -> ModelRequest {
    request.tools = names
        .iter()
        .map(|name| ToolSpec::new(*name, format!("the {name} tool"), json!({"type": "object"})))
        .collect();
    request
}

pub fn tool_result(call_id: &str, content: &str) -> ToolResult {
    ToolResult {
        call_id: call_id.into(),
        content: content.into(),
        is_error: false,
    }
}

/// A script from inline TOML; panics with the loading error.
pub fn script(text: &str) -> Scripted {
    Scripted::from_toml_str(text).unwrap_or_else(|error| panic!("{error}"))
}

/// A file under `tests/data/`.
pub fn data(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

/// Every item of the provider's raw stream, in order.
pub async fn drain(
    provider: &dyn Provider,
    request: ModelRequest,
) -> Vec<Result<StreamEvent, ProviderError>> {
    let mut stream = provider.stream(request);
    let mut items = Vec::new();
    while let Some(item) = std::future::poll_fn(|cx| stream.as_mut().poll_next(cx)).await {
        items.push(item);
    }
    items
}

/// The raw stream's events, panicking on an error item.
pub async fn events(provider: &dyn Provider, request: ModelRequest) -> Vec<StreamEvent> {
    drain(provider, request)
        .await
        .into_iter()
        .map(|item| item.unwrap_or_else(|error| panic!("stream error: {error}")))
        .collect()
}

pub async fn complete(provider: &dyn Provider, request: ModelRequest) -> ModelResponse {
    provider
        .complete(request)
        .await
        .unwrap_or_else(|error| panic!("call failed: {error}"))
}

/// The reply text of a completed call.
pub async fn reply(provider: &dyn Provider, request: ModelRequest) -> String {
    complete(provider, request).await.message.joined_text()
}

/// The error of a call that must fail.
pub async fn failure(provider: &dyn Provider, request: ModelRequest) -> ProviderError {
    match provider.complete(request).await {
        Ok(response) => panic!("expected a failure, got {response:?}"),
        Err(error) => error,
    }
}

/// The text pieces of a stream, in order.
pub fn text_chunks(events: &[StreamEvent]) -> Vec<&str> {
    events
        .iter()
        .filter_map(|event| match event {
            StreamEvent::Text(text) => Some(text.as_str()),
            _ => None,
        })
        .collect()
}
