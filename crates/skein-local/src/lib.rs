/*!
skein's embedded local model: a GGUF chat model (by default
SmolLM2-135M-Instruct, Q4_1) run in-process through llama.cpp, so skein works
offline with no service to run.

- [`LocalModel`] implements `skein_core::Provider`. The llama.cpp context is
  not `Send`, so it lives on a dedicated thread (`worker`) that owns the
  model and its KV cache; requests and streamed tokens cross over channels.
- Prefix reuse: the worker keeps the KV cache of the previous prompt and
  evaluates only what differs, in chunks aligned to absolute positions, so a
  reply is bit-for-bit the one a cold evaluation gives (`worker` explains).
- `sampler` chooses each token: repetition control (llama.cpp's
  penalties and DRY samplers, [`Repetition`]) before greedy or seeded
  sampling, under a grammar derived from the request's output schema.
- [`template`] renders the chat template stored in the GGUF metadata.
- [`utf8`] decodes token pieces that may split a character.
- [`catalog`] knows where the models come from and how to fetch, check
  and unpack them (`skein models pull`).
- [`sentence`]: the local sentence embedder (all-MiniLM-L6-v2) through
  llama.cpp's embedding mode, after [`bert`] converted its safetensors to a
  GGUF (written by the small `gguf` module).
*/

pub mod bert;
pub mod catalog;
mod config;
mod gguf;
mod model;
mod sampler;
pub mod sentence;
pub mod template;
pub mod utf8;
mod worker;

pub use catalog::{
    Companion, KnownModel, MINILM, PullError, PullProgress, SMOLLM2, default_models_dir, known,
    model_path, pull, verify_file,
};
pub use config::{LocalConfig, Repetition};
pub use model::{LocalError, LocalModel, LocalStats};
pub use sentence::{SentenceEmbedder, SentenceError};
