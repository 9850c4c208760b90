//! The servers the fault matrix talks to: wiremock answering a sequence of
//! responses. What wiremock cannot do (a body that is cut or stalls
//! mid-stream) is the test kit's raw TCP server, re-exported here.

pub use skein_testkit::{Fault, FaultServer, refused};
use wiremock::matchers::method;
use wiremock::{Mock, MockServer, ResponseTemplate};

/// A fixture of the providers' tests (their real wire formats).
pub fn fixture(path: &str) -> String {
    let full = format!(
        "{}/../skein-providers/tests/data/{path}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read_to_string(&full).unwrap_or_else(|error| panic!("{full}: {error}"))
}

pub fn sse(body: impl Into<String>) -> ResponseTemplate {
    ResponseTemplate::new(200).set_body_raw(body.into().into_bytes(), "text/event-stream")
}

pub fn json(status: u16, body: impl Into<String>) -> ResponseTemplate {
    ResponseTemplate::new(status).set_body_raw(body.into().into_bytes(), "application/json")
}

/// An OpenAI stream replying `text`.
pub fn openai_text(text: &str) -> String {
    let content = serde_json::to_string(text).unwrap();
    format!(
        "data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"role\":\"assistant\",\"content\":{content}}},\"finish_reason\":null}}]}}\n\n\
         data: {{\"choices\":[{{\"index\":0,\"delta\":{{}},\"finish_reason\":\"stop\"}}]}}\n\n\
         data: [DONE]\n\n"
    )
}

/// An OpenAI stream calling tool `name` with raw `arguments`.
pub fn openai_tool_call(name: &str, arguments: &str) -> String {
    let arguments = serde_json::to_string(arguments).unwrap();
    format!(
        "data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"role\":\"assistant\",\"tool_calls\":[{{\"index\":0,\"id\":\"call_1\",\"type\":\"function\",\"function\":{{\"name\":\"{name}\",\"arguments\":{arguments}}}}}]}},\"finish_reason\":null}}]}}\n\n\
         data: {{\"choices\":[{{\"index\":0,\"delta\":{{}},\"finish_reason\":\"tool_calls\"}}]}}\n\n\
         data: [DONE]\n\n"
    )
}

/// A wiremock server answering the n-th request with `responses[n]`, and
/// every later one with the last response.
pub async fn sequence(responses: Vec<ResponseTemplate>) -> MockServer {
    let server = MockServer::start().await;
    let last = responses.len() - 1;
    for (i, response) in responses.into_iter().enumerate() {
        let mock = Mock::given(method("POST")).respond_with(response);
        let mock = if i < last {
            mock.up_to_n_times(1)
        } else {
            mock
        };
        mock.mount(&server).await;
    }
    server
}
