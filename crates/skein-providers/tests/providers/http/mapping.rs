/*!
Request bodies as the servers receive them: roles, tool calls and results,
raw arguments byte for byte, attachments, tools, options, and for Anthropic
the system prompt, the late system message, merged turns and cache control.
*/

use super::common::*;
use serde_json::json;
use skein_core::{
    Annotation, Attachment, CacheHint, GenerationOptions, Message, ModelRequest, Part, Provider,
    ProviderError, Role, Thread, ToolCall, ToolResult, ToolSpec,
};
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

fn call(id: &str, name: &str, arguments: &str) -> Part {
    Part::ToolCall(ToolCall {
        id: id.into(),
        name: name.into(),
        arguments: arguments.into(),
    })
}

fn result(call_id: &str, content: &str, is_error: bool) -> Part {
    Part::ToolResult(ToolResult {
        call_id: call_id.into(),
        content: content.into(),
        is_error,
    })
}

const ODD_ARGUMENTS: &str = "{ \"city\" :\"Paris\" ,\n \"days\":2}";

fn weather_tool() -> ToolSpec {
    ToolSpec::new(
        "weather",
        "Current weather for a city",
        json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
    )
}

#[tokio::test]
async fn openai_bodies_map_roles_tools_results_images_and_options() {
    let server = server_answering("openai/text_stream.sse").await;
    let thread = Thread::from_messages([
        Message::system("You are terse."),
        Message::new(
            Role::User,
            vec![
                Part::text("What is in this picture, and the weather?"),
                Part::Attachment(Attachment {
                    media_type: "image/png".into(),
                    data: vec![0x89, b'P', b'N', b'G'],
                }),
            ],
        ),
        Message::new(
            Role::Assistant,
            vec![
                Part::text("Let me check."),
                call("call_1", "weather", ODD_ARGUMENTS),
                call("call_2", "weather", "not even json"),
            ],
        ),
        Message::new(
            Role::Tool,
            vec![
                result("call_1", "sunny, 21 C", false),
                result("call_2", "invalid arguments", true),
            ],
        ),
        Message::user("Thanks."),
    ]);
    let mut request = ModelRequest::new("gpt-4o-mini", thread);
    request.tools = vec![weather_tool()];
    request.output_schema =
        Some(json!({"type": "object", "properties": {"answer": {"type": "string"}}}));
    request.options = GenerationOptions {
        temperature: Some(0.25),
        top_p: Some(0.5),
        seed: Some(42),
        max_tokens: Some(100),
    };
    openai(&server.uri()).complete(request).await.unwrap();
    let body = request_body(&server, 0).await;
    assert_eq!(
        body["messages"],
        json!([
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": [
                {"type": "text", "text": "What is in this picture, and the weather?"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw=="}}
            ]},
            {"role": "assistant", "content": "Let me check.", "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": ODD_ARGUMENTS}},
                {"id": "call_2", "type": "function", "function": {"name": "weather", "arguments": "not even json"}}
            ]},
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21 C"},
            {"role": "tool", "tool_call_id": "call_2", "content": "invalid arguments"},
            {"role": "user", "content": "Thanks."}
        ])
    );
    assert_eq!(
        body["tools"],
        json!([{"type": "function", "function": {
            "name": "weather",
            "description": "Current weather for a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
        }}])
    );
    assert_eq!(
        body["response_format"],
        json!({"type": "json_schema", "json_schema": {"name": "output", "schema": {"type": "object", "properties": {"answer": {"type": "string"}}}}})
    );
    assert_eq!(body["temperature"], json!(0.25));
    assert_eq!(body["top_p"], json!(0.5));
    assert_eq!(body["seed"], json!(42));
    assert_eq!(body["max_tokens"], json!(100));
    // The arguments travel as a JSON string whose value is the stored text
    // byte for byte.
    let text = request_text(&server, 0).await;
    let encoded = serde_json::to_string(ODD_ARGUMENTS).unwrap();
    assert!(text.contains(&format!("\"arguments\":{encoded}")), "{text}");
}

#[tokio::test]
async fn openai_refuses_non_image_attachments_before_sending() {
    let server = server_answering("openai/text_stream.sse").await;
    let thread = Thread::from_messages([Message::new(
        Role::User,
        vec![Part::Attachment(Attachment {
            media_type: "audio/wav".into(),
            data: vec![1, 2, 3],
        })],
    )]);
    let error = openai(&server.uri())
        .complete(ModelRequest::new("m", thread))
        .await
        .unwrap_err();
    assert!(
        matches!(
            &error,
            ProviderError::BadRequest { message, context_too_long: false } if message.contains("audio/wav")
        ),
        "{error:?}"
    );
    assert_eq!(received(&server).await, 0);
}

/// A conversation with every feature the Anthropic mapping handles.
fn anthropic_thread() -> Thread {
    Thread::from_messages([
        Message::system("You are a weather bot."),
        Message::system("Answer in English."),
        Message::user("Weather in Paris, London and Rome?"),
        Message::new(
            Role::Assistant,
            vec![
                Part::text("Checking."),
                call("call_1", "weather", ODD_ARGUMENTS),
                call("call_2", "weather", ""),
                call("call_3", "weather", "not even json"),
            ],
        ),
        Message::new(
            Role::Tool,
            vec![
                result("call_1", "sunny", false),
                result("call_2", "missing city", true),
                result("call_3", "invalid arguments", true),
            ],
        ),
        Message::system("From now on, answer in one word."),
        Message::user("So?"),
    ])
}

#[tokio::test]
async fn anthropic_bodies_map_system_tools_results_late_system_and_cache_control() {
    let server = server_answering("anthropic/text_stream.sse").await;
    let thread = anthropic_thread();
    let nodes: Vec<_> = thread.nodes().iter().map(|node| node.id()).collect();
    let mut request = ModelRequest::new("claude-sonnet-4-5", thread.clone());
    // Cache hints: the first system block, the first user text, and the
    // second tool result.
    request
        .annotations
        .add(nodes[0], 0, Annotation::CacheHint(CacheHint::Ephemeral));
    request
        .annotations
        .add(nodes[2], 0, Annotation::CacheHint(CacheHint::Ephemeral));
    request
        .annotations
        .add(nodes[4], 1, Annotation::CacheHint(CacheHint::Ephemeral));
    // A source tag is not a cache hint.
    request
        .annotations
        .add(nodes[6], 0, Annotation::Source("facts".into()));
    request.tools = vec![weather_tool()];
    request.output_schema = Some(json!({"type": "object"}));
    request.options = GenerationOptions {
        temperature: Some(0.0),
        top_p: None,
        seed: Some(7),
        max_tokens: None,
    };
    anthropic(&server.uri()).complete(request).await.unwrap();
    let body = request_body(&server, 0).await;
    assert_eq!(
        body["system"],
        json!([
            {"type": "text", "text": "You are a weather bot.", "cache_control": {"type": "ephemeral"}},
            {"type": "text", "text": "Answer in English."}
        ])
    );
    assert_eq!(
        body["messages"],
        json!([
            {"role": "user", "content": [
                {"type": "text", "text": "Weather in Paris, London and Rome?", "cache_control": {"type": "ephemeral"}}
            ]},
            {"role": "assistant", "content": [
                {"type": "text", "text": "Checking."},
                {"type": "tool_use", "id": "call_1", "name": "weather", "input": {"city": "Paris", "days": 2}},
                {"type": "tool_use", "id": "call_2", "name": "weather", "input": {}},
                {"type": "tool_use", "id": "call_3", "name": "weather", "input": {"_raw_arguments": "not even json"}}
            ]},
            // The tool results, the late system message and the user message
            // merge into one user turn.
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "call_1", "content": "sunny", "is_error": false},
                {"type": "tool_result", "tool_use_id": "call_2", "content": "missing city", "is_error": true,
                 "cache_control": {"type": "ephemeral"}},
                {"type": "tool_result", "tool_use_id": "call_3", "content": "invalid arguments", "is_error": true},
                {"type": "text", "text": "From now on, answer in one word."},
                {"type": "text", "text": "So?"}
            ]}
        ])
    );
    assert_eq!(
        body["tools"],
        json!([{
            "name": "weather",
            "description": "Current weather for a city",
            "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
        }])
    );
    assert_eq!(body["max_tokens"], json!(4096));
    assert_eq!(body["temperature"], json!(0.0));
    assert!(body.get("seed").is_none());
    assert!(body.get("output_format").is_none() && body.get("response_format").is_none());
    // The input is the stored text itself, embedded byte for byte.
    let text = request_text(&server, 0).await;
    assert!(
        text.contains(&format!("\"input\":{ODD_ARGUMENTS}")),
        "{text}"
    );
    // Nothing stored changed.
    assert_eq!(thread, anthropic_thread());
}

#[tokio::test]
async fn anthropic_merges_same_role_turns_and_puts_results_first() {
    let server = server_answering("anthropic/text_stream.sse").await;
    let thread = Thread::from_messages([
        Message::user("First."),
        Message::user("Second."),
        Message::new(Role::Assistant, vec![call("call_9", "weather", "{}")]),
        Message::user("While you wait:"),
        Message::new(Role::Tool, vec![result("call_9", "rain", false)]),
        Message::assistant("It rains."),
        Message::assistant(" Take an umbrella."),
    ]);
    let mut request = ModelRequest::new("m", thread);
    request.options.max_tokens = Some(256);
    anthropic(&server.uri()).complete(request).await.unwrap();
    let body = request_body(&server, 0).await;
    assert_eq!(
        body["messages"],
        json!([
            {"role": "user", "content": [
                {"type": "text", "text": "First."},
                {"type": "text", "text": "Second."}
            ]},
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": "call_9", "name": "weather", "input": {}}
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "call_9", "content": "rain", "is_error": false},
                {"type": "text", "text": "While you wait:"}
            ]},
            {"role": "assistant", "content": [
                {"type": "text", "text": "It rains."},
                {"type": "text", "text": " Take an umbrella."}
            ]}
        ])
    );
    assert_eq!(body["max_tokens"], json!(256));
    assert!(body.get("system").is_none());
}

#[tokio::test]
async fn anthropic_maps_images_and_documents_and_refuses_others() {
    let server = server_answering("anthropic/text_stream.sse").await;
    let thread = Thread::from_messages([Message::new(
        Role::User,
        vec![
            Part::Attachment(Attachment {
                media_type: "image/jpeg".into(),
                data: vec![0xff, 0xd8, 0xff],
            }),
            Part::Attachment(Attachment {
                media_type: "application/pdf".into(),
                data: b"%PDF".to_vec(),
            }),
            Part::text("Describe both."),
        ],
    )]);
    anthropic(&server.uri())
        .complete(ModelRequest::new("m", thread))
        .await
        .unwrap();
    let body = request_body(&server, 0).await;
    assert_eq!(
        body["messages"][0]["content"],
        json!([
            {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": "/9j/"}},
            {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBERg=="}},
            {"type": "text", "text": "Describe both."}
        ])
    );
    let thread = Thread::from_messages([Message::new(
        Role::User,
        vec![Part::Attachment(Attachment {
            media_type: "video/mp4".into(),
            data: vec![0],
        })],
    )]);
    let error = anthropic(&server.uri())
        .complete(ModelRequest::new("m", thread))
        .await
        .unwrap_err();
    assert!(
        matches!(&error, ProviderError::BadRequest { message, .. } if message.contains("video/mp4"))
    );
    assert_eq!(received(&server).await, 1);
}
