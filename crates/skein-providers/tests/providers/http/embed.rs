/*!
The OpenAI-compatible embedder over the HTTP transport: the wire format,
vectors in input order, errors without the key, and the transport's retries
(`Retry-After` honoured, a call that keeps failing surfacing the typed
provider error).
*/

use super::common::{config, fixture, json, received};
use skein_core::ProviderError;
use skein_providers::embed::{EmbedError, Embedder, OpenAiEmbedder};
use skein_providers::http::{Credential, HttpConfig};
use std::time::Duration;
use wiremock::matchers::{body_json, header, method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

fn texts(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

#[tokio::test]
async fn the_openai_client_sends_the_wire_format_and_orders_by_index() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/embeddings"))
        .and(header("authorization", "Bearer sk-test"))
        .and(body_json(
            serde_json::json!({"model": "text-embedding-3-small", "input": ["a", "b"]}),
        ))
        .respond_with(ResponseTemplate::new(200).set_body_json(serde_json::json!({
            "object": "list",
            "data": [
                {"object": "embedding", "index": 1, "embedding": [0.0, 1.0]},
                {"object": "embedding", "index": 0, "embedding": [1.0, 0.0]}
            ],
            "model": "text-embedding-3-small",
            "usage": {"prompt_tokens": 2, "total_tokens": 2}
        })))
        .expect(1)
        .mount(&server)
        .await;
    let embedder = OpenAiEmbedder::new(
        HttpConfig::new(
            format!("{}/v1/", server.uri()),
            Credential::value("sk-test"),
        ),
        "text-embedding-3-small",
    )
    .unwrap();
    assert!(embedder.id().starts_with("openai:text-embedding-3-small@"));
    assert!(!format!("{embedder:?}").contains("sk-test"));
    let vectors = embedder.embed(&texts(&["a", "b"])).await.unwrap();
    assert_eq!(vectors, vec![vec![1.0, 0.0], vec![0.0, 1.0]]);
}

#[tokio::test]
async fn the_openai_client_reports_errors_without_the_key() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(401).set_body_string("bad key sk-secret-1"))
        .mount(&server)
        .await;
    let embedder = OpenAiEmbedder::new(
        HttpConfig::new(server.uri(), Credential::value("sk-secret-1")),
        "m",
    )
    .unwrap();
    let error = embedder.embed(&texts(&["a"])).await.unwrap_err();
    let text = error.to_string();
    assert!(text.contains("status 401"), "{text}");
    assert!(!text.contains("sk-secret-1"), "the key is redacted: {text}");

    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200).set_body_json(serde_json::json!({
            "data": [{"index": 0, "embedding": [1.0]}]
        })))
        .mount(&server)
        .await;
    let embedder =
        OpenAiEmbedder::new(HttpConfig::new(server.uri(), Credential::None), "m").unwrap();
    assert!(matches!(
        embedder.embed(&texts(&["a", "b"])).await,
        Err(EmbedError::Count {
            expected: 2,
            got: 1
        })
    ));
    assert!(matches!(
        OpenAiEmbedder::new(HttpConfig::new("ftp://x", Credential::None), "m"),
        Err(EmbedError::Setup(_))
    ));
    let missing = OpenAiEmbedder::new(
        HttpConfig::new(
            server.uri(),
            Credential::env("SKEIN_TEST_NO_SUCH_EMBED_KEY"),
        ),
        "m",
    )
    .unwrap();
    let error = missing.embed(&texts(&["a"])).await.unwrap_err();
    assert!(
        error.to_string().contains("SKEIN_TEST_NO_SUCH_EMBED_KEY"),
        "{error}"
    );
}

/// A server that answers `failures` 429s asking to retry at once, then
/// (if ever) the vectors of two texts.
async fn rate_limited(failures: u64) -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/embeddings"))
        .respond_with(
            json(429, fixture("openai/error_rate_limit.json")).insert_header("retry-after", "0"),
        )
        .up_to_n_times(failures)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/v1/embeddings"))
        .respond_with(ResponseTemplate::new(200).set_body_json(serde_json::json!({
            "data": [
                {"index": 0, "embedding": [1.0, 0.0]},
                {"index": 1, "embedding": [0.0, 1.0]}
            ]
        })))
        .mount(&server)
        .await;
    server
}

/// `common::config` allows two retries: two 429s are retried (at once, as
/// `Retry-After: 0` says), a third ends the call with the provider's typed
/// rate-limit error, the server's delay and the status; a `Retry-After`
/// past the policy's cap is not waited for at all.
#[tokio::test]
async fn an_embedding_call_retries_429s_after_retry_after_then_surfaces_a_typed_error() {
    let embedder = |server: &MockServer| {
        OpenAiEmbedder::new(config(&format!("{}/v1", server.uri())), "m").unwrap()
    };
    let server = rate_limited(2).await;
    let vectors = embedder(&server).embed(&texts(&["a", "b"])).await.unwrap();
    assert_eq!(vectors, vec![vec![1.0, 0.0], vec![0.0, 1.0]]);
    assert_eq!(received(&server).await, 3);

    let server = rate_limited(3).await;
    let error = embedder(&server)
        .embed(&texts(&["a", "b"]))
        .await
        .unwrap_err();
    assert_eq!(received(&server).await, 3, "the first try and two retries");
    let EmbedError::Endpoint {
        status: Some(429),
        error:
            ProviderError::RateLimited {
                message,
                retry_after: Some(delay),
            },
    } = &error
    else {
        panic!("{error:?}");
    };
    assert_eq!(*delay, Duration::ZERO);
    assert!(message.contains("Rate limit reached"), "{message}");
    assert!(error.to_string().contains("status 429"), "{error}");
    assert!(!error.to_string().contains(super::common::KEY), "{error}");

    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(
            json(429, fixture("openai/error_rate_limit.json")).insert_header("retry-after", "3600"),
        )
        .mount(&server)
        .await;
    let error = embedder(&server).embed(&texts(&["a"])).await.unwrap_err();
    assert!(
        matches!(
            error,
            EmbedError::Endpoint {
                status: Some(429),
                error: ProviderError::RateLimited { retry_after: Some(delay), .. },
            } if delay == Duration::from_secs(3600)
        ),
        "{error:?}"
    );
    assert_eq!(received(&server).await, 1);
}
