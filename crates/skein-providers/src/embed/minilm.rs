/*!
The local sentence embedder (all-MiniLM-L6-v2 through llama.cpp, from
`skein_local::sentence`) behind the [`Embedder`] trait. 384 dimensions,
unit vectors; fetch the model with `skein models pull minilm`.

Without the `local` feature the type is still there, so code naming it
builds either way, but it never loads: [`MiniLmEmbedder::load`] fails with
[`EmbedError::NoLocalModel`].
*/

use super::{EmbedError, Embedder};
use skein_core::BoxFuture;
use std::path::Path;

/// all-MiniLM-L6-v2, run in-process.
#[derive(Debug)]
pub struct MiniLmEmbedder {
    #[cfg(feature = "local")]
    inner: skein_local::SentenceEmbedder,
    /// Without the embedded models there is no embedder to hold.
    #[cfg(not(feature = "local"))]
    never: std::convert::Infallible,
}

#[cfg(feature = "local")]
impl MiniLmEmbedder {
    /// The model from the models directory (`SKEIN_MODELS_DIR` or the
    /// user's cache), on `threads` threads.
    pub fn load(threads: u32) -> Result<MiniLmEmbedder, EmbedError> {
        skein_local::SentenceEmbedder::minilm(threads)
            .map(|inner| MiniLmEmbedder { inner })
            .map_err(EmbedError::Model)
    }

    /// The model from the directory `dir`.
    pub fn load_from(dir: &Path, threads: u32) -> Result<MiniLmEmbedder, EmbedError> {
        skein_local::SentenceEmbedder::minilm_in(dir, threads)
            .map(|inner| MiniLmEmbedder { inner })
            .map_err(EmbedError::Model)
    }

    async fn vectors(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        self.inner
            .embed(texts.to_vec())
            .await
            .map_err(EmbedError::Model)
    }
}

#[cfg(not(feature = "local"))]
impl MiniLmEmbedder {
    /// Fails: this build has no embedded models.
    pub fn load(_threads: u32) -> Result<MiniLmEmbedder, EmbedError> {
        Err(EmbedError::NoLocalModel)
    }

    /// Fails: this build has no embedded models.
    pub fn load_from(_dir: &Path, _threads: u32) -> Result<MiniLmEmbedder, EmbedError> {
        Err(EmbedError::NoLocalModel)
    }

    async fn vectors(&self, _texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        match self.never {}
    }
}

impl Embedder for MiniLmEmbedder {
    fn id(&self) -> &str {
        "minilm:all-MiniLM-L6-v2"
    }

    fn embed<'a>(
        &'a self,
        texts: &'a [String],
    ) -> BoxFuture<'a, Result<Vec<Vec<f32>>, EmbedError>> {
        Box::pin(self.vectors(texts))
    }
}
