/*!
An OpenAI-compatible embeddings endpoint (`POST {base_url}/embeddings`),
configured with an [`HttpConfig`] (base URL, credential resolved on every
call and never stored or printed, timeouts, retry policy) and sent through
the HTTP providers' transport: connection failures, timeouts, 429 and 5xx
answers are retried with backoff or after the server's `Retry-After`, and
a call that still fails is an [`EmbedError::Endpoint`] holding the typed
[`ProviderError`] and the status. Retries are not reported (an embedder
has no event stream to announce them in). Vectors are returned in input
order (the response's `index` decides, not its order).
*/

use super::{EmbedError, Embedder};
use crate::http::HttpConfig;
use crate::http::sse::SseEvent;
use crate::http::transport::{Decoder, HttpRequest, KeyHeader, Reply, Transport, malformed};
use serde::Deserialize;
use skein_core::{BoxFuture, ProviderError};
use std::sync::Arc;
use std::time::Duration;

/// Embeddings from an OpenAI-compatible server.
pub struct OpenAiEmbedder {
    transport: Arc<Transport>,
    model: String,
    id: String,
}

impl std::fmt::Debug for OpenAiEmbedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAiEmbedder")
            .field("base_url", &self.transport.config().base_url)
            .field("model", &self.model)
            .finish_non_exhaustive()
    }
}

#[derive(Deserialize)]
struct Response {
    data: Vec<Item>,
}

#[derive(Deserialize)]
struct Item {
    embedding: Vec<f32>,
    index: usize,
}

/// What the transport hands back for one call.
enum Event {
    Retrying,
    Data(Vec<Item>),
}

impl Reply for Event {
    fn retrying(_attempt: u32, _reason: String, _delay: Duration) -> Event {
        Event::Retrying
    }

    fn ends(&self) -> bool {
        matches!(self, Event::Data(_))
    }
}

/// Reads the one JSON body an embeddings call answers with.
struct EmbeddingsDecoder;

impl Decoder for EmbeddingsDecoder {
    type Event = Event;
    const STREAMS: bool = false;

    fn event(&mut self, _event: SseEvent, _out: &mut Vec<Event>) -> Result<(), ProviderError> {
        Err(malformed(
            "the embeddings endpoint answered with an event stream",
        ))
    }

    fn body(&mut self, body: &[u8], out: &mut Vec<Event>) -> Result<(), ProviderError> {
        let parsed: Response = serde_json::from_slice(body)
            .map_err(|error| malformed(format!("the reply is not the embeddings JSON: {error}")))?;
        out.push(Event::Data(parsed.data));
        Ok(())
    }

    fn end(&mut self, _out: &mut Vec<Event>) -> Result<(), ProviderError> {
        Err(ProviderError::TruncatedStream)
    }
}

impl OpenAiEmbedder {
    /// An embedder for `model` at the configured endpoint.
    pub fn new(config: HttpConfig, model: impl Into<String>) -> Result<OpenAiEmbedder, EmbedError> {
        let model = model.into();
        let id = format!("openai:{model}@{}", config.base_url.trim_end_matches('/'));
        Ok(OpenAiEmbedder {
            transport: Arc::new(Transport::new(config).map_err(EmbedError::Setup)?),
            model,
            id,
        })
    }

    fn prepare(&self, texts: &[String]) -> Result<HttpRequest, ProviderError> {
        let body = serde_json::json!({ "model": self.model, "input": texts });
        self.transport.post_json(
            "/embeddings",
            KeyHeader::Bearer,
            Ok(body.to_string().into_bytes()),
        )
    }

    async fn call(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let unusable = |error: ProviderError| EmbedError::Endpoint {
            status: None,
            error,
        };
        let request = self.prepare(texts).map_err(unusable)?;
        let events = self
            .transport
            .call(request, EmbeddingsDecoder)
            .await
            .map_err(|failure| EmbedError::Endpoint {
                status: failure.status,
                error: failure.error,
            })?;
        let items = events
            .into_iter()
            .find_map(|event| match event {
                Event::Data(items) => Some(items),
                Event::Retrying => None,
            })
            .ok_or_else(|| unusable(ProviderError::TruncatedStream))?;
        if items.len() != texts.len() {
            return Err(EmbedError::Count {
                expected: texts.len(),
                got: items.len(),
            });
        }
        let mut out: Vec<Option<Vec<f32>>> = vec![None; texts.len()];
        for item in items {
            match out.get_mut(item.index) {
                Some(slot @ None) => *slot = Some(item.embedding),
                _ => {
                    return Err(unusable(malformed(format!(
                        "the reply has a duplicate or out-of-range index {}",
                        item.index
                    ))));
                }
            }
        }
        Ok(out
            .into_iter()
            .map(|vector| vector.expect("every index seen"))
            .collect())
    }
}

impl Embedder for OpenAiEmbedder {
    fn id(&self) -> &str {
        &self.id
    }

    fn embed<'a>(
        &'a self,
        texts: &'a [String],
    ) -> BoxFuture<'a, Result<Vec<Vec<f32>>, EmbedError>> {
        Box::pin(self.call(texts))
    }
}
