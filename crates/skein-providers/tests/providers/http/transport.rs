/*!
Transport behaviour shared by the HTTP providers: retries and their
`Retrying` events, `Retry-After`, timeouts by phase, bodies cut or stalled
mid-stream, cancellation, client construction and credentials.
*/

use super::common::*;
use futures_util::StreamExt;
use skein_core::{Provider, ProviderError, StreamEvent};
use skein_providers::http::{
    Credential, HttpConfig, OpenAiCompatible, RetryPolicy, SetupError, Timeouts,
    install_crypto_provider,
};
use std::time::{Duration, Instant};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

const TEXT_CHUNK: &str = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"partial\"},\"finish_reason\":null}]}\n\n";

async fn failing_then_ok(failure: ResponseTemplate) -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(failure)
        .up_to_n_times(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(sse(fixture("openai/text_stream.sse")))
        .mount(&server)
        .await;
    server
}

#[tokio::test]
async fn a_429_with_retry_after_one_second_is_retried_after_about_a_second() {
    let server = failing_then_ok(
        json(429, fixture("openai/error_rate_limit.json")).insert_header("retry-after", "1"),
    )
    .await;
    let provider = openai(&server.uri());
    let start = Instant::now();
    let mut stream = provider.stream(ask("Hi"));
    // The retry is announced before the wait, not after it.
    let first = stream.next().await.unwrap().unwrap();
    let announced = start.elapsed();
    let StreamEvent::Retrying {
        attempt,
        reason,
        delay,
    } = first
    else {
        panic!("expected a retry first, got {first:?}")
    };
    assert_eq!(attempt, 1);
    assert_eq!(delay, Duration::from_secs(1));
    assert!(reason.contains("rate limited"), "{reason}");
    assert!(reason.contains("Rate limit reached"), "{reason}");
    assert!(announced < Duration::from_millis(800), "{announced:?}");
    let mut events = vec![StreamEvent::Retrying {
        attempt,
        reason,
        delay,
    }];
    while let Some(event) = stream.next().await {
        events.push(event.unwrap());
    }
    assert!(
        start.elapsed() >= Duration::from_millis(900),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(received(&server).await, 2);
    let response = assemble(&events).unwrap();
    assert_eq!(
        response.message.joined_text(),
        "Hello! How can I assist you today?"
    );
    assert_eq!(response.retries.len(), 1);
}

#[tokio::test]
async fn server_errors_500_502_503_are_retried_then_succeed() {
    for status in [500u16, 502, 503] {
        let server = failing_then_ok(json(status, fixture("openai/error_server.json"))).await;
        let (events, error) = collect(openai(&server.uri()).stream(ask("Hi"))).await;
        assert_eq!(error, None, "status {status}");
        let retries = retries(&events);
        assert_eq!(retries.len(), 1, "status {status}");
        assert!(
            retries[0].1.contains(&status.to_string()),
            "{}",
            retries[0].1
        );
        assert!(
            retries[0].1.contains("The server is overloaded"),
            "{}",
            retries[0].1
        );
        assert_eq!(received(&server).await, 2, "status {status}");
        assert_eq!(
            assemble(&events).unwrap().message.joined_text(),
            "Hello! How can I assist you today?"
        );
    }
}

#[tokio::test]
async fn a_retry_after_longer_than_the_cap_ends_the_call_with_the_delay() {
    let server = failing_then_ok(
        json(429, fixture("openai/error_rate_limit.json")).insert_header("retry-after", "3600"),
    )
    .await;
    let (events, error) = collect(openai(&server.uri()).stream(ask("Hi"))).await;
    assert!(retries(&events).is_empty());
    assert!(
        matches!(
            error,
            Some(ProviderError::RateLimited { retry_after: Some(delay), .. }) if delay == Duration::from_secs(3600)
        ),
        "{error:?}"
    );
    assert_eq!(received(&server).await, 1);
}

#[tokio::test]
async fn connection_failures_are_retried_then_reported() {
    // A port nobody listens on any more.
    let address = refused();
    let provider = openai(&format!("http://{address}"));
    let (events, error) = collect(provider.stream(ask("Hi"))).await;
    let retries = retries(&events);
    assert_eq!(retries.len(), 2);
    assert!(
        retries
            .iter()
            .all(|(_, reason, _)| reason.contains("could not reach"))
    );
    // Exponential backoff without jitter: 5 ms, then 10 ms.
    assert_eq!(retries[0].2, Duration::from_millis(5));
    assert_eq!(retries[1].2, Duration::from_millis(10));
    let Some(ProviderError::Connection { message }) = error else {
        panic!("{error:?}")
    };
    assert!(!message.contains(&address.to_string()), "no URL: {message}");
}

#[tokio::test]
async fn a_slow_first_byte_is_a_first_byte_timeout() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(sse(fixture("openai/text_stream.sse")).set_delay(Duration::from_secs(3)))
        .mount(&server)
        .await;
    let config = config(&format!("{}/v1", server.uri()))
        .with_timeouts(Timeouts {
            connect: Duration::from_secs(1),
            first_byte: Duration::from_millis(200),
            idle: Duration::from_secs(1),
        })
        .with_retry(RetryPolicy::none());
    let provider = OpenAiCompatible::new(config).unwrap();
    let start = Instant::now();
    let error = provider.complete(ask("Hi")).await.unwrap_err();
    assert_eq!(
        error,
        ProviderError::Timeout {
            phase: "first byte".into()
        }
    );
    assert!(start.elapsed() < Duration::from_secs(2));
}

#[tokio::test]
async fn a_stream_that_stalls_mid_way_is_an_idle_timeout_never_retried() {
    let mut server = FaultServer::start(Fault::Stall(vec![TEXT_CHUNK.to_owned()])).await;
    let provider = openai(&server.url());
    let start = Instant::now();
    let (events, error) = collect(provider.stream(ask("Hi"))).await;
    assert_eq!(events, vec![StreamEvent::Text("partial".into())]);
    assert_eq!(
        error,
        Some(ProviderError::Timeout {
            phase: "idle".into()
        })
    );
    // The idle timeout is 1 s.
    assert!(start.elapsed() >= Duration::from_millis(950));
    assert!(start.elapsed() < Duration::from_secs(4));
    let seen = server.seen().await;
    assert!(seen.request_read);
}

#[tokio::test]
async fn a_connection_cut_mid_stream_is_a_truncated_stream() {
    let mut server = FaultServer::start(Fault::Cut(vec![TEXT_CHUNK.to_owned()])).await;
    let provider = openai(&server.url());
    let (events, error) = collect(provider.stream(ask("Hi"))).await;
    assert_eq!(events, vec![StreamEvent::Text("partial".into())]);
    assert_eq!(error, Some(ProviderError::TruncatedStream));
    server.seen().await;

    let server = FaultServer::start(Fault::Cut(vec![TEXT_CHUNK.to_owned()])).await;
    let provider = openai(&server.url());
    assert_eq!(
        provider.complete(ask("Hi")).await,
        Err(ProviderError::TruncatedStream)
    );
}

#[tokio::test]
async fn dropping_the_stream_aborts_the_request_in_flight() {
    let mut server = FaultServer::start(Fault::Silence).await;
    let provider = openai(&server.url());
    let mut stream = provider.stream(ask("Hi"));
    let polled = tokio::time::timeout(Duration::from_millis(300), stream.next()).await;
    assert!(polled.is_err(), "the server never answers");
    drop(stream);
    let seen = server.seen().await;
    assert!(seen.request_read);
    let closed = seen.closed_after.expect("the connection was closed");
    assert!(closed < Duration::from_secs(1), "{closed:?}");
}

#[tokio::test]
async fn dropping_the_stream_mid_body_closes_the_connection() {
    let mut server = FaultServer::start(Fault::Stall(vec![TEXT_CHUNK.to_owned()])).await;
    let provider = openai(&server.url());
    let mut stream = provider.stream(ask("Hi"));
    assert_eq!(
        stream.next().await,
        Some(Ok(StreamEvent::Text("partial".into())))
    );
    drop(stream);
    let closed = server.seen().await.closed_after.expect("closed");
    assert!(closed < Duration::from_secs(1), "{closed:?}");
}

#[tokio::test]
async fn a_missing_key_variable_fails_the_call_naming_it_without_sending() {
    let server = MockServer::start().await;
    let variable = "SKEIN_HTTP_TEST_NEVER_SET_KEY";
    let config = HttpConfig::new(format!("{}/v1", server.uri()), Credential::env(variable));
    let provider = OpenAiCompatible::new(config).unwrap();
    let error = provider.complete(ask("Hi")).await.unwrap_err();
    let ProviderError::Authentication { message } = error else {
        panic!("{error:?}")
    };
    assert!(message.contains(variable), "{message}");
    assert_eq!(received(&server).await, 0);
}

#[tokio::test]
async fn clients_build_with_the_ring_provider_for_https_urls() {
    install_crypto_provider();
    install_crypto_provider();
    assert!(rustls::crypto::CryptoProvider::get_default().is_some());
    let https = HttpConfig::new("https://api.openai.com/v1", Credential::value(KEY));
    OpenAiCompatible::new(https.clone()).unwrap();
    OpenAiCompatible::new(https).unwrap();
    skein_providers::http::Anthropic::new(HttpConfig::new(
        "https://api.anthropic.com",
        Credential::None,
    ))
    .unwrap();
    let error = OpenAiCompatible::new(HttpConfig::new("not a url", Credential::None)).unwrap_err();
    assert!(
        matches!(error, SetupError::InvalidBaseUrl { .. }),
        "{error:?}"
    );
    let error = OpenAiCompatible::new(HttpConfig::new("ftp://example.invalid", Credential::None))
        .unwrap_err();
    assert!(
        matches!(error, SetupError::InvalidBaseUrl { .. }),
        "{error:?}"
    );
}

#[tokio::test]
async fn a_server_without_a_key_gets_no_authorization_header() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(sse(fixture("openai/text_stream.sse")))
        .mount(&server)
        .await;
    let config = HttpConfig::new(format!("{}/v1", server.uri()), Credential::None);
    OpenAiCompatible::new(config)
        .unwrap()
        .complete(ask("Hi"))
        .await
        .unwrap();
    let requests = server.received_requests().await.unwrap();
    assert!(!requests[0].headers.contains_key("authorization"));
}
