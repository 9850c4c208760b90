//! The embedding cache (in memory and in the store). The embedders
//! themselves are tested where they live, in skein-providers (the
//! OpenAI-compatible client in `tests/http/embed.rs`).

use crate::common::Counting;
use skein_recorded::{CachedEmbedder, Embedder};
use skein_store::Store;
use std::sync::Arc;

fn texts(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
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
