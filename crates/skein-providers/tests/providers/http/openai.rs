/*!
The OpenAI-compatible provider against a mock server speaking the chat
completions wire format: replies (streamed and plain JSON), tool calls,
usage, and each failure.
*/

use super::common::*;
use futures_util::StreamExt;
use skein_core::{FinishReason, Provider, ProviderError, Role, StreamEvent, Usage};
use wiremock::matchers::{body_partial_json, header, method, path};
use wiremock::{Mock, MockServer};

async fn serve(response: wiremock::ResponseTemplate) -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(response)
        .mount(&server)
        .await;
    server
}

#[tokio::test]
async fn streamed_text_arrives_in_pieces_and_assembles_exactly() {
    let server = serve(sse(fixture("openai/text_stream.sse"))).await;
    let provider = openai(&server.uri());
    assert_eq!(provider.name(), "openai");
    let (events, error) = collect(provider.stream(ask("Hello!"))).await;
    assert_eq!(error, None);
    let texts: Vec<&str> = events
        .iter()
        .filter_map(|event| match event {
            StreamEvent::Text(text) => Some(text.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(texts.len(), 9, "one event per delta: {texts:?}");
    let response = assemble(&events).unwrap();
    assert_eq!(response.message.role, Role::Assistant);
    assert_eq!(
        response.message.joined_text(),
        "Hello! How can I assist you today?"
    );
    assert_eq!(response.finish_reason, FinishReason::Stop);
    assert_eq!(
        response.usage,
        Usage {
            input_tokens: Some(9),
            output_tokens: Some(12),
            cache_read_tokens: Some(0),
            cache_write_tokens: None,
        }
    );
    assert_eq!(events.last(), Some(&StreamEvent::Done(FinishReason::Stop)));
}

#[tokio::test]
async fn the_request_asks_for_a_stream_with_usage_and_sends_the_key() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .and(header("authorization", format!("Bearer {KEY}").as_str()))
        .and(header("content-type", "application/json"))
        .and(body_partial_json(serde_json::json!({
            "model": "test-model",
            "stream": true,
            "stream_options": {"include_usage": true},
        })))
        .respond_with(sse(fixture("openai/text_stream.sse")))
        .expect(1)
        .mount(&server)
        .await;
    let response = openai(&server.uri()).complete(ask("Hi")).await.unwrap();
    assert_eq!(
        response.message.joined_text(),
        "Hello! How can I assist you today?"
    );
}

#[tokio::test]
async fn a_plain_json_reply_is_decoded() {
    let server = serve(json(200, fixture("openai/text.json"))).await;
    let response = openai(&server.uri()).complete(ask("Hi")).await.unwrap();
    assert_eq!(
        response.message.joined_text(),
        "Hello! How can I assist you today?"
    );
    assert_eq!(response.finish_reason, FinishReason::Stop);
    assert_eq!(response.usage.input_tokens, Some(19));
    assert_eq!(response.usage.output_tokens, Some(10));
}

#[tokio::test]
async fn a_plain_json_tool_call_keeps_its_arguments_exactly() {
    let server = serve(json(200, fixture("openai/tool_calls.json"))).await;
    let response = openai(&server.uri())
        .complete(ask("Weather?"))
        .await
        .unwrap();
    let calls: Vec<_> = response.message.tool_calls().collect();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].id, "call_abc123");
    assert_eq!(calls[0].name, "get_current_weather");
    assert_eq!(calls[0].arguments, "{\n\"location\": \"Boston, MA\"\n}");
    assert_eq!(response.finish_reason, FinishReason::ToolCalls);
    assert_eq!(response.usage.cache_read_tokens, Some(64));
}

#[tokio::test]
async fn a_tool_call_split_across_many_deltas_is_the_exact_concatenation() {
    let server = serve(sse(fixture("openai/tool_call_stream.sse"))).await;
    let (events, error) = collect(openai(&server.uri()).stream(ask("Weather in Paris?"))).await;
    assert_eq!(error, None);
    let pieces = events
        .iter()
        .filter(|event| matches!(event, StreamEvent::ToolCall { .. }))
        .count();
    assert!(pieces > 10, "{pieces} pieces");
    let response = assemble(&events).unwrap();
    let calls: Vec<_> = response.message.tool_calls().collect();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].id, "call_DdmO9pD3xa9XTPNJ32zg2hcA");
    assert_eq!(calls[0].name, "get_current_weather");
    assert_eq!(
        calls[0].arguments,
        r#"{"location": "Paris, France",  "unit":"celsius"}"#
    );
    assert_eq!(response.message.joined_text(), "");
    assert_eq!(response.finish_reason, FinishReason::ToolCalls);
}

#[tokio::test]
async fn parallel_tool_calls_keep_their_order_and_arguments() {
    let server = serve(sse(fixture("openai/parallel_tool_calls_stream.sse"))).await;
    let response = openai(&server.uri())
        .complete(ask("Two cities"))
        .await
        .unwrap();
    let calls: Vec<_> = response.message.tool_calls().collect();
    assert_eq!(calls.len(), 2);
    assert_eq!(
        (calls[0].id.as_str(), calls[0].arguments.as_str()),
        ("call_aaa111", r#"{"location": "Paris"}"#)
    );
    assert_eq!(
        (calls[1].id.as_str(), calls[1].arguments.as_str()),
        ("call_bbb222", r#"{"location": "Tokyo", "unit": "celsius"}"#)
    );
    assert_eq!(calls[1].name, "get_current_weather");
    assert_eq!(response.usage.input_tokens, Some(90));
    assert_eq!(response.usage.cache_read_tokens, None);
}

#[tokio::test]
async fn cached_prompt_tokens_are_cache_reads() {
    let server = serve(sse(fixture("openai/cached_usage_stream.sse"))).await;
    let response = openai(&server.uri()).complete(ask("Again")).await.unwrap();
    assert_eq!(
        response.usage,
        Usage {
            input_tokens: Some(2006),
            output_tokens: Some(300),
            cache_read_tokens: Some(1920),
            cache_write_tokens: None,
        }
    );
}

#[tokio::test]
async fn a_stream_cut_before_its_end_is_truncated_and_gives_no_message() {
    let server = serve(sse(fixture("openai/truncated_stream.sse"))).await;
    let provider = openai(&server.uri());
    let (events, error) = collect(provider.stream(ask("Hi"))).await;
    assert!(
        events
            .iter()
            .any(|event| matches!(event, StreamEvent::Text(_)))
    );
    assert_eq!(error, Some(ProviderError::TruncatedStream));
    assert_eq!(
        provider.complete(ask("Hi")).await,
        Err(ProviderError::TruncatedStream)
    );
    // Never retried: the reply had started.
    assert_eq!(received(&server).await, 2);
}

#[tokio::test]
async fn malformed_chunks_are_malformed_responses() {
    let server = serve(sse(fixture("openai/malformed_stream.sse"))).await;
    let error = openai(&server.uri()).complete(ask("Hi")).await.unwrap_err();
    assert!(
        matches!(&error, ProviderError::MalformedResponse { message } if message.contains("oops")),
        "{error:?}"
    );
    let server = serve(json(200, "{\"choices\": [")).await;
    let error = openai(&server.uri()).complete(ask("Hi")).await.unwrap_err();
    assert!(
        matches!(error, ProviderError::MalformedResponse { .. }),
        "{error:?}"
    );
}

#[tokio::test]
async fn an_error_inside_the_stream_is_typed_with_its_message() {
    let server = serve(sse(fixture("openai/error_stream.sse"))).await;
    let error = openai(&server.uri()).complete(ask("Hi")).await.unwrap_err();
    let ProviderError::Server { status, message } = error else {
        panic!("{error:?}")
    };
    assert_eq!(status, 500);
    assert!(message.contains("The server had an error while processing your request."));
    // The error came before any event of the reply (the first chunk only
    // names the role), so it was retried like a 500 status.
    assert_eq!(received(&server).await, 3);
}

#[tokio::test]
async fn context_too_long_is_a_bad_request_that_says_so() {
    let server = serve(json(400, fixture("openai/error_context_length.json"))).await;
    let error = openai(&server.uri()).complete(ask("Hi")).await.unwrap_err();
    let ProviderError::BadRequest {
        message,
        context_too_long,
    } = error
    else {
        panic!("{error:?}")
    };
    assert!(context_too_long);
    assert!(message.contains("maximum context length is 128000 tokens"));
    assert_eq!(received(&server).await, 1, "a bad request is never retried");
}

#[tokio::test]
async fn an_unknown_model_is_a_plain_bad_request_not_retried() {
    let body = r#"{"error": {"message": "The model `gpt-9` does not exist or you do not have access to it.", "type": "invalid_request_error", "param": null, "code": "model_not_found"}}"#;
    let server = serve(json(404, body)).await;
    let error = openai(&server.uri()).complete(ask("Hi")).await.unwrap_err();
    assert!(
        matches!(
            &error,
            ProviderError::BadRequest { message, context_too_long: false } if message.contains("gpt-9")
        ),
        "{error:?}"
    );
    assert_eq!(received(&server).await, 1);
}

#[tokio::test]
async fn a_401_is_an_authentication_error_and_is_not_retried() {
    let server = serve(json(401, fixture("openai/error_invalid_key.json"))).await;
    let (events, error) = collect(openai(&server.uri()).stream(ask("Hi"))).await;
    assert!(retries(&events).is_empty());
    assert!(
        matches!(
            &error,
            Some(ProviderError::Authentication { message }) if message.contains("Incorrect API key provided")
        ),
        "{error:?}"
    );
    assert_eq!(received(&server).await, 1);
}

#[tokio::test]
async fn a_rate_limit_that_persists_is_rate_limited_after_the_retries() {
    let server = serve(
        json(429, fixture("openai/error_rate_limit.json")).insert_header("retry-after-ms", "20"),
    )
    .await;
    let (events, error) = collect(openai(&server.uri()).stream(ask("Hi"))).await;
    let retries = retries(&events);
    assert_eq!(retries.len(), 2);
    assert_eq!(retries[0].2, std::time::Duration::from_millis(20));
    assert!(
        matches!(
            &error,
            Some(ProviderError::RateLimited { message, retry_after: Some(delay) })
                if message.contains("Rate limit reached") && *delay == std::time::Duration::from_millis(20)
        ),
        "{error:?}"
    );
    assert_eq!(received(&server).await, 3);
}

#[tokio::test]
async fn insufficient_quota_is_not_retried() {
    let body = r#"{"error": {"message": "You exceeded your current quota, please check your plan and billing details.", "type": "insufficient_quota", "param": null, "code": "insufficient_quota"}}"#;
    let server = serve(json(429, body)).await;
    let error = openai(&server.uri()).complete(ask("Hi")).await.unwrap_err();
    assert!(matches!(error, ProviderError::RateLimited { .. }));
    assert_eq!(received(&server).await, 1);
}

#[tokio::test]
async fn the_stream_yields_text_before_the_body_ends() {
    // Events are yielded as chunks arrive: the first text is available
    // while the server still holds the rest of the body.
    let first = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"early\"},\"finish_reason\":null}]}\n\n";
    let mut server = FaultServer::start(Fault::Stall(vec![first.to_owned()])).await;
    let provider = openai(&server.url());
    let mut stream = provider.stream(ask("Hi"));
    let event = tokio::time::timeout(std::time::Duration::from_secs(2), stream.next())
        .await
        .expect("the first event arrives before the body ends");
    assert_eq!(event, Some(Ok(StreamEvent::Text("early".into()))));
    drop(stream);
    let seen = server.seen().await;
    assert!(seen.closed_after.is_some());
}
