//! Shared test harness: a provider wrapper that keeps every request it
//! received, an embedder that counts its calls, scripted engines, and the
//! advisor example.

#![allow(dead_code)]

#[path = "../../../examples/advisor.rs"]
pub mod advisor;

use skein_core::{BoxFuture, BoxStream, ModelRequest, Provider, ProviderError, StreamEvent};
use skein_engine::Engine;
use skein_providers::Scripted;
use skein_recorded::{
    EmbedError, Embedder, LexicalEmbedder, RecordedChat, RecordedChatBuilder, Source,
};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// Passes calls to `inner` and keeps each request as received.
pub struct Recording {
    inner: Arc<dyn Provider>,
    pub requests: Mutex<Vec<ModelRequest>>,
}

impl Recording {
    pub fn new(inner: Arc<dyn Provider>) -> Arc<Recording> {
        Arc::new(Recording {
            inner,
            requests: Mutex::new(Vec::new()),
        })
    }

    pub fn scripted(script: &str) -> Arc<Recording> {
        Recording::new(Arc::new(Scripted::from_toml_str(script).unwrap()))
    }

    pub fn take(&self) -> Vec<ModelRequest> {
        std::mem::take(&mut self.requests.lock().unwrap())
    }

    pub fn count(&self) -> usize {
        self.requests.lock().unwrap().len()
    }
}

impl Provider for Recording {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn stream(
        &self,
        request: ModelRequest,
    ) -> BoxStream<'static, Result<StreamEvent, ProviderError>> {
        self.requests.lock().unwrap().push(request.clone());
        self.inner.stream(request)
    }
}

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

/// The advisor desk's builder on `provider`, with the lexical embedder.
pub fn advisor_builder(provider: Arc<dyn Provider>) -> RecordedChatBuilder {
    RecordedChat::builder(engine(provider), "advisor")
        .system("You are an investment advisor. Answer BUY or HOLD when asked.")
        .source(Source::fact(
            "fundamentals",
            "fundamentals: revenue flat, margins stable",
        ))
        .source(Source::fact(
            "social-sentiment",
            "social-sentiment: bullish, retail chatter at a three-month high",
        ))
        .source(Source::document(
            "analyst-note",
            "analyst-note: price target unchanged",
        ))
        .embedder(Arc::new(LexicalEmbedder::default()))
}

/// The advisor's three turns recorded.
pub async fn advisor_chat(provider: Arc<dyn Provider>) -> RecordedChat {
    let mut chat = advisor_builder(provider).build().await.unwrap();
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
