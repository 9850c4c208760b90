/*!
The Anthropic provider against a mock server speaking the Messages wire
format: replies (streamed and plain JSON), tool use, cache usage, and each
failure.
*/

use super::common::*;
use skein_core::{FinishReason, Provider, ProviderError, StreamEvent, Usage};
use wiremock::matchers::{body_partial_json, header, method, path};
use wiremock::{Mock, MockServer};

async fn serve(response: wiremock::ResponseTemplate) -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/messages"))
        .respond_with(response)
        .mount(&server)
        .await;
    server
}

#[tokio::test]
async fn streamed_text_assembles_with_usage_and_the_right_headers() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/messages"))
        .and(header("x-api-key", KEY))
        .and(header("anthropic-version", "2023-06-01"))
        .and(body_partial_json(serde_json::json!({
            "model": "test-model",
            "max_tokens": 4096,
            "stream": true,
        })))
        .respond_with(sse(fixture("anthropic/text_stream.sse")))
        .expect(1)
        .mount(&server)
        .await;
    let provider = anthropic(&server.uri());
    assert_eq!(provider.name(), "anthropic");
    let (events, error) = collect(provider.stream(ask("Hello"))).await;
    assert_eq!(error, None);
    let texts = events
        .iter()
        .filter(|event| matches!(event, StreamEvent::Text(_)))
        .count();
    assert_eq!(texts, 3);
    let response = assemble(&events).unwrap();
    assert_eq!(
        response.message.joined_text(),
        "Hello! How can I help? \u{e9}t\u{e9} \u{1f600}"
    );
    assert_eq!(response.finish_reason, FinishReason::Stop);
    assert_eq!(
        response.usage,
        Usage {
            input_tokens: Some(25),
            output_tokens: Some(15),
            cache_read_tokens: None,
            cache_write_tokens: None,
        }
    );
}

#[tokio::test]
async fn a_plain_json_reply_is_decoded() {
    let server = serve(json(200, fixture("anthropic/text.json"))).await;
    let response = anthropic(&server.uri()).complete(ask("Hi")).await.unwrap();
    assert_eq!(response.message.joined_text(), "Hi! My name is Claude.");
    // Anthropic's 2095 uncached tokens plus the 1800 read from the cache.
    assert_eq!(response.usage.input_tokens, Some(2095 + 1800));
    assert_eq!(response.usage.output_tokens, Some(503));
    assert_eq!(response.usage.cache_read_tokens, Some(1800));
    assert_eq!(response.usage.cache_write_tokens, Some(0));
}

#[tokio::test]
async fn a_plain_json_tool_use_keeps_its_input_text_exactly() {
    let server = serve(json(200, fixture("anthropic/tool_use.json"))).await;
    let response = anthropic(&server.uri())
        .complete(ask("Weather?"))
        .await
        .unwrap();
    assert_eq!(
        response.message.joined_text(),
        "I'll check the current weather in San Francisco for you."
    );
    let calls: Vec<_> = response.message.tool_calls().collect();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].id, "toolu_01A09q90qw90lq917835lq9");
    assert_eq!(calls[0].name, "get_weather");
    assert_eq!(
        calls[0].arguments,
        r#"{"location": "San Francisco, CA",  "unit": "celsius"}"#
    );
    assert_eq!(response.finish_reason, FinishReason::ToolCalls);
}

#[tokio::test]
async fn streamed_tool_use_concatenates_the_partial_json_exactly() {
    let server = serve(sse(fixture("anthropic/tool_use_stream.sse"))).await;
    let (events, error) = collect(anthropic(&server.uri()).stream(ask("Weather?"))).await;
    assert_eq!(error, None);
    let pieces = events
        .iter()
        .filter(|event| matches!(event, StreamEvent::ToolCall { .. }))
        .count();
    assert!(pieces >= 8, "{pieces} pieces");
    let response = assemble(&events).unwrap();
    assert_eq!(
        response.message.joined_text(),
        "Okay, let's check the weather for San Francisco, CA:"
    );
    let calls: Vec<_> = response.message.tool_calls().collect();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].id, "toolu_01T1x1fJ34qAmk2tNTrN7Up6");
    assert_eq!(
        calls[0].arguments,
        r#"{"location": "San Francisco, CA", "unit": "fahrenheit"}"#
    );
    assert_eq!(response.finish_reason, FinishReason::ToolCalls);
    assert_eq!(response.usage.output_tokens, Some(89));
}

#[tokio::test]
async fn parallel_tool_uses_are_numbered_in_order() {
    let server = serve(sse(fixture("anthropic/parallel_tool_use_stream.sse"))).await;
    let response = anthropic(&server.uri()).complete(ask("Two")).await.unwrap();
    let calls: Vec<_> = response.message.tool_calls().collect();
    let summary: Vec<(&str, &str, &str)> = calls
        .iter()
        .map(|call| {
            (
                call.id.as_str(),
                call.name.as_str(),
                call.arguments.as_str(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            ("toolu_01A", "get_weather", r#"{"location": "Paris"}"#),
            (
                "toolu_01B",
                "get_weather",
                r#"{"location": "Tokyo", "unit":"celsius"}"#
            ),
            // No argument pieces: the start block's `{}`.
            ("toolu_01C", "get_time", "{}"),
        ]
    );
}

#[tokio::test]
async fn cache_writes_and_reads_are_reported() {
    let server = serve(sse(fixture("anthropic/cache_write_stream.sse"))).await;
    let response = anthropic(&server.uri()).complete(ask("Doc")).await.unwrap();
    assert_eq!(
        response.usage,
        Usage {
            // 21 uncached plus the 188086 written to the cache.
            input_tokens: Some(21 + 188086),
            output_tokens: Some(393),
            cache_read_tokens: Some(0),
            cache_write_tokens: Some(188_086),
        }
    );
    let server = serve(sse(fixture("anthropic/cache_read_stream.sse"))).await;
    let response = anthropic(&server.uri()).complete(ask("Doc")).await.unwrap();
    assert_eq!(response.usage.cache_read_tokens, Some(188_086));
    assert_eq!(response.usage.cache_write_tokens, Some(0));
    assert_eq!(response.finish_reason, FinishReason::Length);
}

#[tokio::test]
async fn a_stream_without_message_stop_is_truncated_and_gives_no_message() {
    let server = serve(sse(fixture("anthropic/truncated_stream.sse"))).await;
    let provider = anthropic(&server.uri());
    assert_eq!(
        provider.complete(ask("Hi")).await,
        Err(ProviderError::TruncatedStream)
    );
    assert_eq!(received(&server).await, 1);
}

#[tokio::test]
async fn an_error_event_mid_stream_is_typed_and_not_retried() {
    let server = serve(sse(fixture("anthropic/error_stream.sse"))).await;
    let (events, error) = collect(anthropic(&server.uri()).stream(ask("Hi"))).await;
    assert!(
        events
            .iter()
            .any(|event| matches!(event, StreamEvent::Text(_)))
    );
    assert_eq!(
        error,
        Some(ProviderError::Server {
            status: 529,
            message: "overloaded_error: Overloaded".into()
        })
    );
    assert!(retries(&events).is_empty());
    assert_eq!(received(&server).await, 1);
}

#[tokio::test]
async fn malformed_events_are_malformed_responses() {
    let server = serve(sse(fixture("anthropic/malformed_stream.sse"))).await;
    let error = anthropic(&server.uri())
        .complete(ask("Hi"))
        .await
        .unwrap_err();
    assert!(
        matches!(error, ProviderError::MalformedResponse { .. }),
        "{error:?}"
    );
}

#[tokio::test]
async fn a_prompt_too_long_is_a_context_too_long_bad_request() {
    let server = serve(json(400, fixture("anthropic/error_prompt_too_long.json"))).await;
    let error = anthropic(&server.uri())
        .complete(ask("Hi"))
        .await
        .unwrap_err();
    assert_eq!(
        error,
        ProviderError::BadRequest {
            message: "invalid_request_error: prompt is too long: 208310 tokens > 200000 maximum"
                .into(),
            context_too_long: true,
        }
    );
    assert_eq!(received(&server).await, 1);
}

#[tokio::test]
async fn overloaded_529_is_retried_then_reported_as_a_server_error() {
    let server = serve(json(529, fixture("anthropic/error_overloaded.json"))).await;
    let (events, error) = collect(anthropic(&server.uri()).stream(ask("Hi"))).await;
    let retries = retries(&events);
    assert_eq!(retries.len(), 2);
    assert_eq!(retries[0].0, 1);
    assert_eq!(retries[1].0, 2);
    assert!(retries[0].1.contains("Overloaded"), "{}", retries[0].1);
    assert_eq!(
        error,
        Some(ProviderError::Server {
            status: 529,
            message: "overloaded_error: Overloaded".into()
        })
    );
    assert_eq!(received(&server).await, 3);
}

#[tokio::test]
async fn a_403_is_authentication_and_not_retried() {
    let server = serve(json(403, fixture("anthropic/error_authentication.json"))).await;
    let error = anthropic(&server.uri())
        .complete(ask("Hi"))
        .await
        .unwrap_err();
    assert_eq!(
        error,
        ProviderError::Authentication {
            message: "authentication_error: invalid x-api-key".into()
        }
    );
    assert_eq!(received(&server).await, 1);
}
