//! The model of a race's slow turn: an OpenAI-compatible mock server that
//! answers as the table's scripted model does (`scripted: TEXT`), but only
//! once the test releases that text, so that a turn started before another
//! lands after it. Surfaces in other processes reach it as
//! `openai:gpt-test` with `OPENAI_BASE_URL`; the proxy's clients ask for
//! [`PROXY_NAME`].

use serde_json::{Value, json};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

/// The model name the CLI and the web API use.
pub(crate) const MODEL: &str = "openai:gpt-test";
/// The name the proxy's `[proxy.models]` maps to [`MODEL`].
pub(crate) const PROXY_NAME: &str = "conform-slow";
/// How long a wait for a request or a release lasts before it gives up:
/// it guards against a hang, it measures nothing.
const PATIENCE: Duration = Duration::from_secs(30);

pub(crate) struct SlowModel {
    server: MockServer,
    gate: Arc<Gate>,
}

/// The texts whose requests arrived, and those released.
#[derive(Default)]
struct Gate {
    texts: Mutex<Texts>,
    changed: Condvar,
}

#[derive(Default)]
struct Texts {
    arrived: Vec<String>,
    released: Vec<String>,
}

impl Gate {
    /// Wait until `done` holds of the texts; false when patience ran out.
    fn wait(&self, done: impl Fn(&Texts) -> bool) -> bool {
        let deadline = Instant::now() + PATIENCE;
        let mut texts = self.texts.lock().unwrap();
        while !done(&texts) {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            texts = self.changed.wait_timeout(texts, left).unwrap().0;
        }
        true
    }

    fn change(&self, change: impl FnOnce(&mut Texts)) {
        change(&mut self.texts.lock().unwrap());
        self.changed.notify_all();
    }
}

impl SlowModel {
    pub(crate) async fn start() -> SlowModel {
        let server = MockServer::start().await;
        let gate = Arc::new(Gate::default());
        Mock::given(wiremock::matchers::method("POST"))
            .respond_with(Answer { gate: gate.clone() })
            .mount(&server)
            .await;
        SlowModel { server, gate }
    }

    /// `OPENAI_BASE_URL` for it.
    pub(crate) fn base_url(&self) -> String {
        format!("{}/v1", self.server.uri())
    }

    /// Wait until the request whose last user message is `text` has
    /// arrived (and is held).
    pub(crate) fn wait_for(&self, text: &str) {
        let arrived = self
            .gate
            .wait(|texts| texts.arrived.iter().any(|arrived| arrived == text));
        assert!(arrived, "the slow turn {text:?} never reached its model");
    }

    /// Let the request for `text` be answered.
    pub(crate) fn release(&self, text: &str) {
        self.gate
            .change(|texts| texts.released.push(text.to_string()));
    }
}

/// The answer, given once its text is released. The mock server runs on a
/// thread of its own, and one slow request at a time, so holding it there
/// holds nothing else.
struct Answer {
    gate: Arc<Gate>,
}

impl Respond for Answer {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let text = last_user_text(request).unwrap_or_default();
        self.gate.change(|texts| texts.arrived.push(text.clone()));
        // Unreleased after PATIENCE, it answers anyway: the race's check
        // then fails on the graph, not on a hang.
        self.gate
            .wait(|texts| texts.released.iter().any(|released| released == &text));
        let reply = json!({
            "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "gpt-test",
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": format!("scripted: {text}")}}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 4, "total_tokens": 9}
        });
        ResponseTemplate::new(200).set_body_json(reply)
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
