/*!
The local sentence embedder (all-MiniLM-L6-v2 through llama.cpp, from
`skein_local::sentence`) behind the [`Embedder`] trait. 384 dimensions,
unit vectors; fetch the model with `skein models pull minilm`.
*/

use super::{EmbedError, Embedder};
use skein_core::BoxFuture;
use skein_local::{SentenceEmbedder, SentenceError};
use std::path::Path;

/// all-MiniLM-L6-v2, run in-process.
#[derive(Debug)]
pub struct MiniLmEmbedder {
    inner: SentenceEmbedder,
}

impl MiniLmEmbedder {
    /// The model from the models directory (`SKEIN_MODELS_DIR` or the
    /// user's cache), on `threads` threads.
    pub fn load(threads: u32) -> Result<MiniLmEmbedder, EmbedError> {
        SentenceEmbedder::minilm(threads)
            .map(|inner| MiniLmEmbedder { inner })
            .map_err(model_error)
    }

    /// The model from the directory `dir`.
    pub fn load_from(dir: &Path, threads: u32) -> Result<MiniLmEmbedder, EmbedError> {
        SentenceEmbedder::minilm_in(dir, threads)
            .map(|inner| MiniLmEmbedder { inner })
            .map_err(model_error)
    }
}

fn model_error(error: SentenceError) -> EmbedError {
    EmbedError::Model(error.to_string())
}

impl Embedder for MiniLmEmbedder {
    fn id(&self) -> &str {
        "minilm:all-MiniLM-L6-v2"
    }

    fn embed<'a>(
        &'a self,
        texts: &'a [String],
    ) -> BoxFuture<'a, Result<Vec<Vec<f32>>, EmbedError>> {
        Box::pin(async move { self.inner.embed(texts.to_vec()).await.map_err(model_error) })
    }
}
