/*!
Switching provider in the middle of a conversation: tool-call ids and
argument encodings produced by one provider are mapped for the other on the
wire, and the stored thread never changes.
*/

use super::common::*;
use serde_json::json;
use skein_core::{Message, ModelRequest, Part, Provider, Role, Thread, ToolCall, ToolResult};
use skein_providers::deterministic_call_id;
use wiremock::matchers::method;
use wiremock::{Mock, MockServer};

async fn server_answering(fixture_path: &str) -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(sse(fixture(fixture_path)))
        .mount(&server)
        .await;
    server
}

/// A turn whose call was made by a model skein controls (a `call_<hex>` id)
/// plus one from a server with ids Anthropic rejects.
fn thread_with_calls(first_id: &str, second_id: &str) -> Thread {
    Thread::from_messages([
        Message::user("Weather in Paris and Oslo?"),
        Message::new(
            Role::Assistant,
            vec![
                Part::ToolCall(ToolCall {
                    id: first_id.into(),
                    name: "weather".into(),
                    arguments: "{\"city\": \"Paris\"}".into(),
                }),
                Part::ToolCall(ToolCall {
                    id: second_id.into(),
                    name: "weather".into(),
                    arguments: "{\"city\":\"Oslo\"}".into(),
                }),
            ],
        ),
        Message::tool_results([
            ToolResult {
                call_id: first_id.into(),
                content: "sunny".into(),
                is_error: false,
            },
            ToolResult {
                call_id: second_id.into(),
                content: "snow".into(),
                is_error: false,
            },
        ]),
    ])
}

#[tokio::test]
async fn a_thread_with_call_hex_ids_goes_to_anthropic_and_openai_unchanged() {
    let hex_id = deterministic_call_id(None, 0);
    assert!(hex_id.starts_with("call_"));
    let odd_id = "functions.weather:1";
    let thread = thread_with_calls(&hex_id, odd_id);
    let head = thread.head_id();

    let server = server_answering("anthropic/text_stream.sse").await;
    anthropic(&server.uri())
        .complete(ModelRequest::new("claude", thread.clone()))
        .await
        .unwrap();
    let body = request_body(&server, 0).await;
    let uses = &body["messages"][1]["content"];
    let results = &body["messages"][2]["content"];
    assert_eq!(uses[0]["id"], json!(hex_id));
    assert_eq!(results[0]["tool_use_id"], json!(hex_id));
    // The id Anthropic would reject is mapped, identically on both sides,
    // to one it accepts.
    let mapped = uses[1]["id"].as_str().unwrap();
    assert_ne!(mapped, odd_id);
    assert!(
        mapped
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    );
    assert_eq!(results[1]["tool_use_id"], json!(mapped));
    assert_eq!(uses[0]["input"], json!({"city": "Paris"}));

    let server = server_answering("openai/text_stream.sse").await;
    openai(&server.uri())
        .complete(ModelRequest::new("gpt", thread.clone()))
        .await
        .unwrap();
    let body = request_body(&server, 0).await;
    let messages = &body["messages"];
    assert_eq!(messages[1]["tool_calls"][0]["id"], json!(hex_id));
    assert_eq!(messages[1]["tool_calls"][1]["id"], json!(odd_id));
    assert_eq!(messages[2]["tool_call_id"], json!(hex_id));
    assert_eq!(messages[3]["tool_call_id"], json!(odd_id));
    assert_eq!(
        messages[1]["tool_calls"][0]["function"]["arguments"],
        json!("{\"city\": \"Paris\"}")
    );

    // The stored history is untouched.
    assert_eq!(thread.head_id(), head);
    let calls: Vec<_> = thread.messages()[1]
        .tool_calls()
        .map(|call| call.id.clone())
        .collect();
    assert_eq!(calls, [hex_id, odd_id.to_owned()]);
}

#[tokio::test]
async fn a_tool_use_from_anthropic_continues_on_openai() {
    // Turn one on Anthropic: a streamed tool use.
    let server = server_answering("anthropic/tool_use_stream.sse").await;
    let question = Thread::from_messages([Message::user("Weather in San Francisco?")]);
    let reply = anthropic(&server.uri())
        .complete(ModelRequest::new("claude", question.clone()))
        .await
        .unwrap();
    let call = reply.message.tool_calls().next().unwrap().clone();
    let thread = question
        .push(reply.message.clone())
        .push(Message::tool_results([ToolResult {
            call_id: call.id.clone(),
            content: "64 F, foggy".into(),
            is_error: false,
        }]));

    // Turn two on OpenAI.
    let server = server_answering("openai/text_stream.sse").await;
    let answer = openai(&server.uri())
        .complete(ModelRequest::new("gpt", thread.clone()))
        .await
        .unwrap();
    assert_eq!(
        answer.message.joined_text(),
        "Hello! How can I assist you today?"
    );
    let body = request_body(&server, 0).await;
    let messages = &body["messages"];
    assert_eq!(messages[1]["role"], "assistant");
    assert_eq!(
        messages[1]["content"],
        json!("Okay, let's check the weather for San Francisco, CA:")
    );
    assert_eq!(
        messages[1]["tool_calls"][0]["id"],
        json!("toolu_01T1x1fJ34qAmk2tNTrN7Up6")
    );
    // The arguments are the partial-JSON text Anthropic streamed, exactly.
    assert_eq!(
        messages[1]["tool_calls"][0]["function"]["arguments"],
        json!(r#"{"location": "San Francisco, CA", "unit": "fahrenheit"}"#)
    );
    assert_eq!(messages[2]["role"], "tool");
    assert_eq!(
        messages[2]["tool_call_id"],
        json!("toolu_01T1x1fJ34qAmk2tNTrN7Up6")
    );

    // And back to Anthropic: the raw text is the tool_use input verbatim.
    let server = server_answering("anthropic/text_stream.sse").await;
    anthropic(&server.uri())
        .complete(ModelRequest::new("claude", thread))
        .await
        .unwrap();
    let text = request_text(&server, 0).await;
    assert!(
        text.contains(r#""input":{"location": "San Francisco, CA", "unit": "fahrenheit"}"#),
        "{text}"
    );
}
