/*!
Providers for tests and benches (the `provider` feature): [`Recording`]
wraps a model and keeps every request it is sent; [`Fixed`] answers every
call with the same events without reading the request.
*/

use skein_core::{
    AttachmentSupport, BoxStream, FinishReason, ModelRequest, Provider, ProviderError, StreamEvent,
    Usage,
};
use skein_providers::{Echo, Scripted};
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

/// Passes every call to its inner model (name, attachment support and
/// stream unchanged) and keeps each request as received.
pub struct Recording {
    inner: Arc<dyn Provider>,
    requests: Mutex<Vec<ModelRequest>>,
}

impl Recording {
    /// Record the calls made to `inner`.
    pub fn new(inner: Arc<dyn Provider>) -> Arc<Recording> {
        Arc::new(Recording {
            inner,
            requests: Mutex::new(Vec::new()),
        })
    }

    /// The scripted model on these rules (TOML text; see
    /// `skein_providers::scripted`), recorded. Panics on a bad script.
    pub fn scripted(script: &str) -> Arc<Recording> {
        Recording::new(Arc::new(
            Scripted::from_toml_str(script).expect("the test script loads"),
        ))
    }

    /// The echo model, recorded.
    pub fn echo() -> Arc<Recording> {
        Recording::new(Arc::new(Echo))
    }

    /// Every request so far, oldest first.
    pub fn requests(&self) -> Vec<ModelRequest> {
        self.lock().clone()
    }

    /// The most recent request; panics when there was none.
    pub fn last(&self) -> ModelRequest {
        self.lock().last().cloned().expect("a request was made")
    }

    /// Every request so far, forgetting them.
    pub fn take(&self) -> Vec<ModelRequest> {
        std::mem::take(&mut *self.lock())
    }

    /// How many requests were made.
    pub fn count(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<ModelRequest>> {
        self.requests.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Provider for Recording {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn attachments(&self) -> AttachmentSupport {
        self.inner.attachments()
    }

    fn stream(
        &self,
        request: ModelRequest,
    ) -> BoxStream<'static, Result<StreamEvent, ProviderError>> {
        self.lock().push(request.clone());
        self.inner.stream(request)
    }
}

/// Answers every call with the same items, unread and at once (the stream
/// is never pending): the cheapest model there is, for seeing the cost of
/// everything around it. Counts its calls.
pub struct Fixed {
    items: Vec<Result<StreamEvent, ProviderError>>,
    attachments: AttachmentSupport,
    calls: AtomicUsize,
}

impl Fixed {
    /// Reply `text`, finish reason `stop`, no usage figures.
    pub fn reply(text: impl Into<String>) -> Fixed {
        Fixed::items(vec![
            Ok(StreamEvent::Text(text.into())),
            Ok(StreamEvent::Done(FinishReason::Stop)),
        ])
    }

    /// Fail every call with `error`.
    pub fn failing(error: ProviderError) -> Fixed {
        Fixed::items(vec![Err(error)])
    }

    fn items(items: Vec<Result<StreamEvent, ProviderError>>) -> Fixed {
        Fixed {
            items,
            attachments: AttachmentSupport::Any,
            calls: AtomicUsize::new(0),
        }
    }

    /// Report `usage` before the last item (the finish).
    pub fn with_usage(mut self, usage: Usage) -> Fixed {
        let at = self.items.len().saturating_sub(1);
        self.items.insert(at, Ok(StreamEvent::Usage(usage)));
        self
    }

    /// Say the model takes these attachments (by default any).
    pub fn with_attachments(mut self, attachments: AttachmentSupport) -> Fixed {
        self.attachments = attachments;
        self
    }

    /// How many calls reached the model.
    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }
}

impl Provider for Fixed {
    fn name(&self) -> &str {
        "fixed"
    }

    fn attachments(&self) -> AttachmentSupport {
        self.attachments
    }

    fn stream(&self, _: ModelRequest) -> BoxStream<'static, Result<StreamEvent, ProviderError>> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        Box::pin(Items(self.items.clone().into_iter()))
    }
}

/// Precomputed items, one per poll; never pending.
struct Items(std::vec::IntoIter<Result<StreamEvent, ProviderError>>);

impl futures_core::Stream for Items {
    type Item = Result<StreamEvent, ProviderError>;

    fn poll_next(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        Poll::Ready(self.get_mut().0.next())
    }
}
