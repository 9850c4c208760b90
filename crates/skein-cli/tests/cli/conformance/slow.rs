//! The model of a race's slow turn: an OpenAI-compatible mock server that
//! answers as the table's scripted model does (`scripted: TEXT`), after
//! [`HOLD`](super::HOLD), so that a turn started before another lands
//! after it. Surfaces in other processes reach it as `openai:gpt-test`
//! with `OPENAI_BASE_URL`; the proxy's clients ask for [`PROXY_NAME`].

use serde_json::{Value, json};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

/// The model name the CLI and the web API use.
pub(crate) const MODEL: &str = "openai:gpt-test";
/// The name the proxy's `[proxy.models]` maps to [`MODEL`].
pub(crate) const PROXY_NAME: &str = "conform-slow";

pub(crate) struct SlowModel {
    server: MockServer,
}

impl SlowModel {
    pub(crate) async fn start() -> SlowModel {
        let server = MockServer::start().await;
        Mock::given(wiremock::matchers::method("POST"))
            .respond_with(Answer)
            .mount(&server)
            .await;
        SlowModel { server }
    }

    /// `OPENAI_BASE_URL` for it.
    pub(crate) fn base_url(&self) -> String {
        format!("{}/v1", self.server.uri())
    }

    /// Whether a request whose last message says `text` has arrived.
    pub(crate) async fn has_received(&self, text: &str) -> bool {
        let requests = self.server.received_requests().await.unwrap_or_default();
        requests
            .iter()
            .any(|request| last_user_text(request).as_deref() == Some(text))
    }

    /// Wait until it has.
    pub(crate) fn wait_for(&self, runtime: &tokio::runtime::Runtime, text: &str) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while !runtime.block_on(self.has_received(text)) {
            assert!(
                std::time::Instant::now() < deadline,
                "the slow turn {text:?} never reached its model"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
}

struct Answer;

impl Respond for Answer {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let text = last_user_text(request).unwrap_or_default();
        let reply = json!({
            "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "gpt-test",
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": format!("scripted: {text}")}}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 4, "total_tokens": 9}
        });
        ResponseTemplate::new(200)
            .set_body_json(reply)
            .set_delay(super::HOLD)
    }
}

/// The text of a chat completions request's last user message.
fn last_user_text(request: &Request) -> Option<String> {
    let body: Value = serde_json::from_slice(&request.body).ok()?;
    let last = body["messages"]
        .as_array()?
        .iter()
        .rev()
        .find(|message| message["role"] == "user")?;
    Some(match &last["content"] {
        Value::String(text) => text.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|part| part["text"].as_str())
            .collect(),
        _ => String::new(),
    })
}
