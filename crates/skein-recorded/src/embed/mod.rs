/*!
Embedders: turn texts into vectors whose cosine similarity says how alike
two texts are. Used by attribution (`reason`) and by the default rerun
comparator.

- [`LexicalEmbedder`]: deterministic hashed bag of words, no model files;
  for tests and for texts that differ in words, not meaning.
- [`OpenAiEmbedder`]: an OpenAI-compatible `/embeddings` endpoint.
- [`MiniLmEmbedder`]: the local sentence embedder (all-MiniLM-L6-v2),
  run by `skein-local` through llama.cpp, which that crate already builds.
- [`CachedEmbedder`]: wraps any embedder with a cache keyed by content
  digest and embedder id, in memory and (with a store) in the database.
*/

mod cache;
mod lexical;
mod minilm;
mod openai;

pub use cache::CachedEmbedder;
pub use lexical::LexicalEmbedder;
pub use minilm::MiniLmEmbedder;
pub use openai::OpenAiEmbedder;

use skein_core::BoxFuture;

/// Why texts could not be embedded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EmbedError {
    /// The embeddings endpoint failed or answered something unusable.
    #[error("the embeddings endpoint failed: {0}")]
    Endpoint(String),
    /// The endpoint is misconfigured (base URL, credential).
    #[error("the embedder is misconfigured: {0}")]
    Setup(String),
    /// The embedder returned a different number of vectors than texts.
    #[error("the embedder returned {got} vectors for {expected} texts")]
    Count { expected: usize, got: usize },
    /// A local model failed.
    #[error("the embedding model failed: {0}")]
    Model(String),
    /// The embedding cache could not be read or written.
    #[error("the embedding cache failed: {0}")]
    Cache(skein_store::StoreError),
}

// Not `#[from]`: the message shows the store's error, so it is not also
// the source (a chain printer would say it twice).
impl From<skein_store::StoreError> for EmbedError {
    fn from(error: skein_store::StoreError) -> EmbedError {
        EmbedError::Cache(error)
    }
}

/// Something that embeds texts.
pub trait Embedder: Send + Sync {
    /// A stable id naming the embedder and its configuration (model,
    /// dimensions): cached vectors are keyed by it.
    fn id(&self) -> &str;

    /// One vector per text, in order.
    fn embed<'a>(&'a self, texts: &'a [String])
    -> BoxFuture<'a, Result<Vec<Vec<f32>>, EmbedError>>;
}

/// Cosine similarity; 0 when either vector is all zeros.
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let (mut dot, mut na, mut nb) = (0f64, 0f64, 0f64);
    for (x, y) in a.iter().zip(b) {
        dot += f64::from(*x) * f64::from(*y);
        na += f64::from(*x) * f64::from(*x);
        nb += f64::from(*y) * f64::from(*y);
    }
    if na == 0.0 || nb == 0.0 {
        return 0.0;
    }
    (dot / (na.sqrt() * nb.sqrt())) as f32
}

/// Scale a vector to unit length (all-zero vectors stay zero).
pub fn normalise(vector: &mut [f32]) {
    let norm = vector.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        for x in vector {
            *x /= norm;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cosine_of_parallel_orthogonal_and_zero_vectors() {
        assert!((cosine(&[1.0, 2.0], &[2.0, 4.0]) - 1.0).abs() < 1e-6);
        assert!(cosine(&[1.0, 0.0], &[0.0, 3.0]).abs() < 1e-6);
        assert_eq!(cosine(&[0.0, 0.0], &[1.0, 1.0]), 0.0);
        let mut v = vec![3.0, 4.0];
        normalise(&mut v);
        assert!((v[0] - 0.6).abs() < 1e-6 && (v[1] - 0.8).abs() < 1e-6);
    }
}
