/*!
The embedding cache: vectors keyed by (embedder id, content digest), so a
text embedded once by one embedder is never embedded again by it, across
processes. Vectors are stored as little-endian `f32`s (encoded here for
both backends; the SQL is in sqlite/embeddings.rs and
postgres/embeddings.rs).
*/

use crate::async_store::AsyncStore;
use crate::error::{Result, StoreError};
use crate::store::Store;
use skein_core::Digest;

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
