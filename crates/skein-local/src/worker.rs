/*!
The dedicated llama.cpp thread. It owns the model, its context and KV cache,
and serves one request at a time from a channel, streaming events back.

**Prefix reuse without changing output.** The KV cache keeps the tokens of
the previous request (prompt and decoded reply). Every prompt — reused or
cold — is evaluated in chunks aligned to absolute positions (`[0, c)`,
`[c, 2c)`, …, with `n_batch` and `n_ubatch` equal to the chunk size), so a
full chunk is computed from the same inputs over the same cache contents in
either case, and its keys and values are the same bits. Anything else is
not: llama.cpp's results differ with how tokens are split into batches, so
the last, partial chunk of a prompt and the reply's tokens (decoded one at a
time) hold values a cold evaluation of a longer prompt, which covers them
with a full chunk, would not reproduce. A new prompt therefore reuses the
longest common prefix rounded down to a chunk boundary *and* limited to the
full chunks of earlier prompts, and evaluates the rest. (A follow-up turn
extends the previous prompt with the reply, so without that limit its
answer would change with whether the cache still held the previous turn.)

Each reply is decoded with one sampler chain ([`crate::sampler`]):
repetition control, then greedy or seeded sampling, under a grammar when
the request carries an output schema.

Cancellation: when the receiver of the events is dropped, the next send
fails and generation stops; the cache stays consistent with what was
decoded.
*/

use crate::config::{LocalConfig, Repetition};
use crate::model::{LocalError, StatsCounters};
use crate::sampler::{Constraint, Picker};
use crate::template::{CHATML, ChatTemplate};
use crate::utf8::Utf8Decoder;
use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::context::params::LlamaContextParams;
use llama_cpp_2::llama_backend::LlamaBackend;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::model::params::LlamaModelParams;
use llama_cpp_2::token::LlamaToken;
use skein_core::provider::GenerationOptions;
use skein_core::{FinishReason, ProviderError, StreamEvent, Thread, Usage};
use std::num::NonZeroU32;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, SyncSender};
use std::sync::{Arc, OnceLock};
use tokio::sync::mpsc::UnboundedSender;

pub(crate) type EventSender = UnboundedSender<Result<StreamEvent, ProviderError>>;

/// One request for the worker.
pub(crate) struct Job {
    pub thread: Thread,
    pub options: GenerationOptions,
    /// A JSON Schema the reply must satisfy, when the request has one.
    pub output_schema: Option<serde_json::Value>,
    pub events: EventSender,
}

/// llama.cpp's process-wide backend, initialised once.
fn backend() -> Result<&'static LlamaBackend, LocalError> {
    static BACKEND: OnceLock<Result<LlamaBackend, String>> = OnceLock::new();
    BACKEND
        .get_or_init(|| {
            let mut backend = LlamaBackend::init().map_err(|error| error.to_string())?;
            backend.void_logs();
            Ok(backend)
        })
        .as_ref()
        .map_err(|message| LocalError::Load {
            path: Default::default(),
            message: message.clone(),
        })
}

/// llama.cpp's backend and the model at `path`, loaded.
pub(crate) fn load_model(path: &Path) -> Result<(&'static LlamaBackend, LlamaModel), LocalError> {
    let backend = backend()?;
    let model = LlamaModel::load_from_file(backend, path, &LlamaModelParams::default()).map_err(
        |error| LocalError::Load {
            path: path.to_path_buf(),
            message: error.to_string(),
        },
    )?;
    Ok((backend, model))
}

/// Load the model and serve jobs until every sender is gone. Reports the
/// outcome of loading on `ready` before serving.
pub(crate) fn run(
    config: LocalConfig,
    stats: Arc<StatsCounters>,
    jobs: Receiver<Job>,
    ready: SyncSender<Result<(), LocalError>>,
) {
    let (backend, model) = match load_model(&config.path) {
        Ok(loaded) => loaded,
        Err(error) => {
            let _ = ready.send(Err(error));
            return;
        }
    };
    let session = Session::open(&config, backend, &model, stats);
    let mut session = match session {
        Ok(session) => session,
        Err(error) => {
            let _ = ready.send(Err(error));
            return;
        }
    };
    let _ = ready.send(Ok(()));
    drop(ready);
    for job in jobs {
        session.serve(job);
    }
}

struct Session<'m> {
    model: &'m LlamaModel,
    ctx: LlamaContext<'m>,
    template: ChatTemplate,
    /// Tokens whose keys and values are in the cache, by position.
    cached: Vec<LlamaToken>,
    /// How many leading `cached` tokens were evaluated in full, aligned
    /// chunks: the only ones a new prompt may reuse.
    reusable: usize,
    chunk: usize,
    context_tokens: usize,
    prefix_reuse: bool,
    default_max_tokens: u32,
    repetition: Repetition,
    stats: Arc<StatsCounters>,
}

impl<'m> Session<'m> {
    fn open(
        config: &LocalConfig,
        backend: &LlamaBackend,
        model: &'m LlamaModel,
        stats: Arc<StatsCounters>,
    ) -> Result<Session<'m>, LocalError> {
        let chunk = config.chunk_tokens.max(1);
        let threads = config.threads.max(1) as i32;
        let params = LlamaContextParams::default()
            .with_n_ctx(NonZeroU32::new(config.context_tokens.max(chunk)))
            .with_n_batch(chunk)
            .with_n_ubatch(chunk)
            .with_n_seq_max(1)
            .with_n_threads(threads)
            .with_n_threads_batch(threads);
        let ctx = model
            .new_context(backend, params)
            .map_err(|error| LocalError::Load {
                path: config.path.clone(),
                message: format!("cannot create a context: {error}"),
            })?;
        let source = model
            .meta_val_str("tokenizer.chat_template")
            .unwrap_or_else(|_| CHATML.to_string());
        let vocab = model.vocab();
        let token_text = |token: LlamaToken| {
            String::from_utf8_lossy(&vocab.token_to_piece(token, true, None)).into_owned()
        };
        let template =
            ChatTemplate::new(&source, &token_text(vocab.bos()), &token_text(vocab.eos()))
                .map_err(|error| LocalError::Load {
                    path: config.path.clone(),
                    message: format!("the model's chat template does not compile: {error}"),
                })?;
        Ok(Session {
            model,
            ctx,
            template,
            cached: Vec::new(),
            reusable: 0,
            chunk: chunk as usize,
            context_tokens: config.context_tokens as usize,
            prefix_reuse: config.prefix_reuse,
            default_max_tokens: config.default_max_tokens,
            repetition: config.repetition.clone(),
            stats,
        })
    }

    fn serve(&mut self, job: Job) {
        let events = job.events.clone();
        if let Err(error) = self.generate(job) {
            let _ = events.send(Err(error));
        }
    }

    fn generate(&mut self, job: Job) -> Result<(), ProviderError> {
        let messages = job.thread.messages();
        let prompt =
            self.template
                .render(&messages)
                .map_err(|error| ProviderError::BadRequest {
                    message: format!("the chat template cannot render this request: {error}"),
                    context_too_long: false,
                })?;
        let tokens = self.model.vocab().tokenize(prompt.as_bytes(), true, true);
        if tokens.is_empty() {
            return Err(ProviderError::BadRequest {
                message: "the request renders to an empty prompt".into(),
                context_too_long: false,
            });
        }
        if tokens.len() >= self.context_tokens {
            return Err(ProviderError::BadRequest {
                message: format!(
                    "the prompt has {} tokens and this model's context holds {}",
                    tokens.len(),
                    self.context_tokens
                ),
                context_too_long: true,
            });
        }
        let reused = self.reusable_prefix(&tokens);
        self.ctx
            .clear_kv_cache_seq(Some(0), Some(reused as u32), None)
            .map_err(backend_error)?;
        self.cached.truncate(reused);
        self.reusable = reused;
        let mut logits_index = self.evaluate(&tokens, reused)?;
        self.stats.requests.fetch_add(1, Ordering::Relaxed);
        self.stats
            .prompt_tokens
            .fetch_add(tokens.len() as u64, Ordering::Relaxed);
        self.stats
            .reused_tokens
            .fetch_add(reused as u64, Ordering::Relaxed);
        self.stats
            .evaluated_tokens
            .fetch_add((tokens.len() - reused) as u64, Ordering::Relaxed);

        let max_tokens = job.options.max_tokens.unwrap_or(self.default_max_tokens) as usize;
        let (mut picker, constraint) = Picker::new(
            self.model,
            &job.options,
            &self.repetition,
            job.output_schema.as_ref(),
        );
        match constraint {
            Constraint::None => {}
            Constraint::Grammar => {
                self.stats.constrained.fetch_add(1, Ordering::Relaxed);
            }
            Constraint::Unsupported => {
                self.stats.unconstrained.fetch_add(1, Ordering::Relaxed);
            }
        }
        let mut decoder = Utf8Decoder::new();
        let mut batch = LlamaBatch::new(1, 1);
        let mut generated = 0usize;
        let finish = loop {
            if generated >= max_tokens {
                break FinishReason::Length;
            }
            let token = picker.next(&self.ctx, logits_index)?;
            if self.model.vocab().is_eog(token) {
                break FinishReason::Stop;
            }
            generated += 1;
            let text = decoder.push(&self.model.vocab().token_to_piece(token, false, None));
            if !text.is_empty() && job.events.send(Ok(StreamEvent::Text(text))).is_err() {
                // The caller dropped the stream: stop quietly.
                self.stats
                    .generated_tokens
                    .fetch_add(generated as u64, Ordering::Relaxed);
                return Ok(());
            }
            if generated >= max_tokens || self.cached.len() + 1 >= self.context_tokens {
                break FinishReason::Length;
            }
            batch.clear();
            batch
                .add(token, self.cached.len() as i32, &[0], true)
                .map_err(backend_error)?;
            self.ctx.decode(&mut batch).map_err(backend_error)?;
            self.cached.push(token);
            logits_index = 0;
        };
        self.stats
            .generated_tokens
            .fetch_add(generated as u64, Ordering::Relaxed);
        let usage = Usage {
            input_tokens: Some(tokens.len() as u64),
            output_tokens: Some(generated as u64),
            cache_read_tokens: Some(reused as u64),
            cache_write_tokens: None,
        };
        let _ = job.events.send(Ok(StreamEvent::Usage(usage)));
        let _ = job.events.send(Ok(StreamEvent::Done(finish)));
        Ok(())
    }

    /// How many leading tokens of `tokens` the cache already holds in full
    /// chunks, always leaving at least one token to evaluate (its logits
    /// start the reply).
    fn reusable_prefix(&self, tokens: &[LlamaToken]) -> usize {
        if !self.prefix_reuse {
            return 0;
        }
        let common = self
            .cached
            .iter()
            .zip(tokens)
            .take_while(|(cached, wanted)| cached == wanted)
            .count()
            .min(tokens.len() - 1)
            .min(self.reusable);
        common - common % self.chunk
    }

    /// Evaluate `tokens[from..]` in chunks aligned to absolute positions.
    /// Returns the batch index of the last token's logits.
    fn evaluate(&mut self, tokens: &[LlamaToken], from: usize) -> Result<i32, ProviderError> {
        let mut batch = LlamaBatch::new(self.chunk, 1);
        let mut start = from;
        let mut last_index = 0;
        while start < tokens.len() {
            let end = ((start / self.chunk + 1) * self.chunk).min(tokens.len());
            batch.clear();
            for (position, token) in tokens.iter().enumerate().take(end).skip(start) {
                batch
                    .add(*token, position as i32, &[0], position == tokens.len() - 1)
                    .map_err(backend_error)?;
            }
            self.ctx.decode(&mut batch).map_err(backend_error)?;
            self.cached.extend_from_slice(&tokens[start..end]);
            if end - start == self.chunk {
                self.reusable = end;
            }
            last_index = batch.n_tokens() - 1;
            start = end;
        }
        Ok(last_index)
    }
}

fn backend_error(error: impl std::fmt::Display) -> ProviderError {
    ProviderError::Backend {
        message: error.to_string(),
    }
}
