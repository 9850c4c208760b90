/*!
The embedding cache: vectors keyed by (embedder id, content digest), so a
text embedded once by one embedder is never embedded again by it, across
processes. Vectors are stored as little-endian `f32`s (encoded here for
both backends; the SQL is in sqlite/embeddings.rs and
postgres/embeddings.rs).

This module declares `EmbeddingCache`, the backend trait
sqlite/embeddings.rs and postgres/embeddings.rs implement, and holds the
public operations that call it: the async ones on `AsyncStore` and their
blocking forms on `Store`.
*/

use crate::async_store::AsyncStore;
use crate::backend::BoxFuture;
use crate::error::{Result, StoreError};
use crate::store::Store;
use skein_core::Digest;

/// The embedding cache: the SQL is in sqlite/embeddings.rs and
/// postgres/embeddings.rs.
pub(crate) trait EmbeddingCache {
    fn cached_embedding<'a>(
        &'a self,
        embedder: &'a str,
        digest: &'a Digest,
    ) -> BoxFuture<'a, Result<Option<Vec<f32>>>>;
    fn cache_embedding<'a>(
        &'a self,
        embedder: &'a str,
        digest: &'a Digest,
        vector: &'a [f32],
    ) -> BoxFuture<'a, Result<()>>;
}

impl Store {
    /// The cached vector of the content with `digest` under `embedder`.
    pub fn cached_embedding(&self, embedder: &str, digest: &Digest) -> Result<Option<Vec<f32>>> {
        self.wait(self.nonblocking().cached_embedding(embedder, digest))
    }

    /// Remember a vector (an existing entry is kept: vectors are a pure
    /// function of the embedder and the content).
    pub fn cache_embedding(&self, embedder: &str, digest: &Digest, vector: &[f32]) -> Result<()> {
        self.wait(self.nonblocking().cache_embedding(embedder, digest, vector))
    }
}

/// A vector as stored: little-endian `f32`s.
impl AsyncStore<'_> {
    /// [`Store::cached_embedding`].
    pub async fn cached_embedding(
        &self,
        embedder: &str,
        digest: &Digest,
    ) -> Result<Option<Vec<f32>>> {
        self.store
            .backend()
            .cached_embedding(embedder, digest)
            .await
    }

    /// [`Store::cache_embedding`].
    pub async fn cache_embedding(
        &self,
        embedder: &str,
        digest: &Digest,
        vector: &[f32],
    ) -> Result<()> {
        self.store
            .backend()
            .cache_embedding(embedder, digest, vector)
            .await
    }
}

pub(crate) fn encode(vector: &[f32]) -> Vec<u8> {
    vector.iter().flat_map(|x| x.to_le_bytes()).collect()
}

pub(crate) fn decode(bytes: &[u8]) -> Result<Vec<f32>> {
    if !bytes.len().is_multiple_of(4) {
        return Err(StoreError::MalformedRow(format!(
            "a cached embedding has {} bytes, not a multiple of 4",
            bytes.len()
        )));
    }
    Ok(bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect())
}
