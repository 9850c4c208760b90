/*!
`LocalModel`: the `Provider` face of the worker thread. Loading waits until
the model is in memory (so a bad file fails at once, not at the first
prompt); each request becomes a job on the worker's queue and a stream of
the events it sends back. Requests are served one at a time, in order.
*/

use crate::catalog;
use crate::config::LocalConfig;
use crate::worker::{self, Job};
use skein_core::{BoxStream, ModelRequest, Provider, ProviderError, StreamEvent};
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::task::{Context, Poll};
use tokio::sync::mpsc::UnboundedReceiver;

/// Why a local model could not be loaded.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum LocalError {
    #[error("no model file at {}: {hint}", .path.display())]
    Missing { path: PathBuf, hint: String },
    #[error("cannot load the model {}: {message}", .path.display())]
    Load { path: PathBuf, message: String },
    #[error("the local model's worker thread stopped")]
    WorkerGone,
}

/// Token counts since the model was loaded.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LocalStats {
    pub requests: u64,
    /// Prompt tokens requested.
    pub prompt_tokens: u64,
    /// Prompt tokens whose cached keys and values were reused.
    pub reused_tokens: u64,
    /// Prompt tokens actually evaluated (`prompt_tokens - reused_tokens`).
    pub evaluated_tokens: u64,
    pub generated_tokens: u64,
    /// Requests with an output schema decoded under its grammar.
    pub constrained: u64,
    /// Requests with an output schema llama.cpp could not turn into a
    /// grammar, decoded unconstrained (the engine's validation still holds).
    pub unconstrained: u64,
}

#[derive(Default)]
pub(crate) struct StatsCounters {
    pub requests: AtomicU64,
    pub prompt_tokens: AtomicU64,
    pub reused_tokens: AtomicU64,
    pub evaluated_tokens: AtomicU64,
    pub generated_tokens: AtomicU64,
    pub constrained: AtomicU64,
    pub unconstrained: AtomicU64,
}

/// A GGUF chat model running in this process.
pub struct LocalModel {
    config: LocalConfig,
    jobs: Mutex<mpsc::Sender<Job>>,
    stats: Arc<StatsCounters>,
}

impl std::fmt::Debug for LocalModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalModel")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl LocalModel {
    /// Start the worker and load the model; returns once it is ready.
    pub fn load(config: LocalConfig) -> Result<LocalModel, LocalError> {
        if !config.path.is_file() {
            return Err(LocalError::Missing {
                path: config.path.clone(),
                hint: catalog::missing_hint(),
            });
        }
        let stats = Arc::new(StatsCounters::default());
        let (jobs, queue) = mpsc::channel();
        let (ready_tx, ready_rx) = mpsc::sync_channel(1);
        let worker_config = config.clone();
        let worker_stats = stats.clone();
        std::thread::Builder::new()
            .name("skein-llama".into())
            .spawn(move || worker::run(worker_config, worker_stats, queue, ready_tx))
            .map_err(|error| LocalError::Load {
                path: config.path.clone(),
                message: format!("cannot start the model thread: {error}"),
            })?;
        ready_rx.recv().map_err(|_| LocalError::WorkerGone)??;
        Ok(LocalModel {
            config,
            jobs: Mutex::new(jobs),
            stats,
        })
    }

    pub fn config(&self) -> &LocalConfig {
        &self.config
    }

    pub fn stats(&self) -> LocalStats {
        let read = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        LocalStats {
            requests: read(&self.stats.requests),
            prompt_tokens: read(&self.stats.prompt_tokens),
            reused_tokens: read(&self.stats.reused_tokens),
            evaluated_tokens: read(&self.stats.evaluated_tokens),
            generated_tokens: read(&self.stats.generated_tokens),
            constrained: read(&self.stats.constrained),
            unconstrained: read(&self.stats.unconstrained),
        }
    }
}

impl Provider for LocalModel {
    fn name(&self) -> &str {
        "local"
    }

    /// A small text model: its chat template has no place for images or
    /// documents.
    fn attachments(&self) -> skein_core::AttachmentSupport {
        skein_core::AttachmentSupport::None
    }

    fn stream(
        &self,
        request: ModelRequest,
    ) -> BoxStream<'static, Result<StreamEvent, ProviderError>> {
        let (events, receiver) = tokio::sync::mpsc::unbounded_channel();
        if let Some(refusal) = attachment_refusal(&request) {
            let _ = events.send(Err(refusal));
            drop(events);
            return Box::pin(EventStream { receiver });
        }
        let job = Job {
            thread: request.thread,
            options: request.options,
            output_schema: request.output_schema,
            events: events.clone(),
        };
        let sent = self
            .jobs
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .send(job);
        if sent.is_err() {
            let _ = events.send(Err(ProviderError::Backend {
                message: LocalError::WorkerGone.to_string(),
            }));
        }
        drop(events);
        Box::pin(EventStream { receiver })
    }
}

/// The refusal of a request that carries an attachment: a text model
/// cannot see images, audio or documents, and a placeholder in their stead
/// would let it answer as if it had.
fn attachment_refusal(request: &ModelRequest) -> Option<ProviderError> {
    request
        .thread
        .messages()
        .into_iter()
        .enumerate()
        .find_map(|(position, message)| {
            message.parts.iter().find_map(|part| match part {
                skein_core::Part::Attachment(attachment) => Some(ProviderError::BadRequest {
                    message: format!(
                        "message {position} has a `{}` attachment, and the local model `{}` takes text only; \
                         use a model that takes attachments (e.g. `openai:gpt-4o-mini`, `anthropic:MODEL`)",
                        attachment.media_type, request.model
                    ),
                    context_too_long: false,
                }),
                _ => None,
            })
        })
}

/// The events of one request, as a stream.
struct EventStream {
    receiver: UnboundedReceiver<Result<StreamEvent, ProviderError>>,
}

impl futures_core::Stream for EventStream {
    type Item = Result<StreamEvent, ProviderError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.receiver.poll_recv(cx)
    }
}
