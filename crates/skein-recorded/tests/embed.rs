//! Embedders: the OpenAI-compatible client against a local mock server,
//! and the cache (in memory and in the store).

mod common;

use common::Counting;
use skein_providers::http::{Credential, HttpConfig};
use skein_recorded::{CachedEmbedder, EmbedError, Embedder, OpenAiEmbedder};
use skein_store::Store;
use std::sync::Arc;
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

#[tokio::test]
async fn the_cache_embeds_each_text_once_and_persists_across_opens() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let counting = Counting::new();
    let cached = CachedEmbedder::with_store(counting.clone(), Store::open(&path).unwrap());
    let first = cached
        .embed(&texts(&["alpha beta", "gamma"]))
        .await
        .unwrap();
    let second = cached
        .embed(&texts(&["gamma", "delta", "alpha beta"]))
        .await
        .unwrap();
    assert_eq!(second[0], first[1]);
    assert_eq!(second[2], first[0]);
    assert_eq!(counting.texts.load(std::sync::atomic::Ordering::SeqCst), 3);
    assert_eq!(cached.id(), counting.id());

    let counting2 = Counting::new();
    let reopened = CachedEmbedder::with_store(counting2.clone(), Store::open(&path).unwrap());
    let third = reopened
        .embed(&texts(&["delta", "alpha beta"]))
        .await
        .unwrap();
    assert_eq!(third[1], first[0]);
    assert_eq!(counting2.calls(), 0, "every vector came from the database");
    // Another embedder id shares nothing.
    let other = CachedEmbedder::with_store(
        Arc::new(skein_recorded::LexicalEmbedder::new(8)),
        Store::open(&path).unwrap(),
    );
    assert_eq!(other.embed(&texts(&["gamma"])).await.unwrap()[0].len(), 8);
}
