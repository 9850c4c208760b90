//! Shared test harness: an embedder that counts its calls, scripted
//! engines, and the advisor example; the test kit's recording provider.

#![allow(dead_code, reason = "each test module uses a part of the kit")]

#[path = "../../../examples/advisor.rs"]
pub mod advisor;

use skein_core::{BoxFuture, Provider};
use skein_engine::Engine;
use skein_recorded::{EmbedError, Embedder, LexicalEmbedder, RecordedChat};
pub use skein_testkit::Recording;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// An embedder that counts the texts it embeds.
pub struct Counting {
    inner: LexicalEmbedder,
    pub texts: AtomicUsize,
    pub calls: AtomicUsize,
}

impl Counting {
    pub fn new() -> Arc<Counting> {
        Arc::new(Counting {
            inner: LexicalEmbedder::default(),
            texts: AtomicUsize::new(0),
            calls: AtomicUsize::new(0),
        })
    }

    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }
}

impl Embedder for Counting {
    fn id(&self) -> &str {
        self.inner.id()
    }

    fn embed<'a>(
        &'a self,
        texts: &'a [String],
    ) -> BoxFuture<'a, Result<Vec<Vec<f32>>, EmbedError>> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.texts.fetch_add(texts.len(), Ordering::SeqCst);
        self.inner.embed(texts)
    }
}

pub fn engine(provider: Arc<dyn Provider>) -> Engine {
    advisor::engine(provider)
}

/// The advisor's three turns recorded.
pub async fn advisor_chat(provider: Arc<dyn Provider>) -> RecordedChat {
    let mut chat = advisor::builder(provider).build().await.unwrap();
    record_three(&mut chat).await;
    chat
}

pub async fn record_three(chat: &mut RecordedChat) {
    chat.send("How is the position looking?").await.unwrap();
    chat.send("Should we BUY or HOLD this position?")
        .await
        .unwrap();
    chat.send("How much should we allocate?").await.unwrap();
}

/// The first word before a colon: the advisor's decision.
pub fn decision(text: &str) -> &str {
    text.split(':').next().unwrap_or(text)
}

pub fn decision_changed(a: &str, b: &str) -> bool {
    decision(a) != decision(b)
}
