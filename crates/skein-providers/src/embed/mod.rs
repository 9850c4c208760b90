/*!
Embedders: turn texts into vectors whose cosine similarity says how alike
two texts are. Recorded chats use them for attribution and for the default
rerun comparator (and cache their vectors in the store:
`skein_recorded::CachedEmbedder`).

- [`LexicalEmbedder`]: deterministic hashed bag of words, no model files;
  for tests and for texts that differ in words, not meaning.
- [`OpenAiEmbedder`]: an OpenAI-compatible `/embeddings` endpoint, over the
  chat providers' HTTP transport (timeouts, retries with `Retry-After`,
  typed errors, keys that never print).
- [`MiniLmEmbedder`]: the local sentence embedder (all-MiniLM-L6-v2),
  run by `skein-local` through llama.cpp, which the embedded chat model
  already builds. Without the `local` feature it fails to load with
  [`EmbedError::NoLocalModel`].
*/

mod lexical;
mod minilm;
mod openai;

pub use lexical::LexicalEmbedder;
pub use minilm::MiniLmEmbedder;
pub use openai::OpenAiEmbedder;

use crate::http::SetupError;
use skein_core::{BoxFuture, ProviderError};

/// Why texts could not be embedded.
///
/// Variants that show the error they wrap keep it in a field, not as the
/// `source()`, so a chain printer says each cause once.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EmbedError {
    /// The embeddings endpoint failed (after the transport's retries) or
    /// answered something unusable. `status` is the HTTP status of the
    /// error response that ended the call, when one did.
    #[error(
        "the embeddings endpoint failed{}: {error}",
        .status.map(|status| format!(" (status {status})")).unwrap_or_default()
    )]
    Endpoint {
        status: Option<u16>,
        error: ProviderError,
    },
    /// The endpoint is misconfigured (its base URL).
    #[error("the embedder is misconfigured: {0}")]
    Setup(SetupError),
    /// The embedder returned a different number of vectors than texts.
    #[error("the embedder returned {got} vectors for {expected} texts")]
    Count { expected: usize, got: usize },
    /// The local sentence embedder failed to load or to run.
    #[cfg(feature = "local")]
    #[error("the embedding model failed: {0}")]
    Model(skein_local::SentenceError),
    /// The local sentence embedder was left out of this build (the
    /// `local` feature).
    #[error(
        "this skein was built without the embedded models, so it cannot run the MiniLM \
         embedder; rebuild it with the `local` feature (e.g. `cargo install --path crates/skein-cli --features local`) \
         or use another embedder"
    )]
    NoLocalModel,
    /// An embedder wrapping another could not do its own part (the
    /// embedding cache could not read or write its store).
    #[error("the embedding cache failed: {0}")]
    Cache(Box<dyn std::error::Error + Send + Sync>),
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
