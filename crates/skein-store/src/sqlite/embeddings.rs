/*!
The embedding cache on SQLite: one row per (embedder id, content digest),
vectors encoded as crate::embeddings says.
*/

use super::SqliteStore;
use crate::backend::BoxFuture;
use crate::embeddings::{EmbeddingCache, decode, encode};
use crate::error::Result;
use rusqlite::{OptionalExtension, params};
use skein_core::Digest;

impl EmbeddingCache for SqliteStore {
    fn cached_embedding<'a>(
        &'a self,
        embedder: &'a str,
        digest: &'a Digest,
    ) -> BoxFuture<'a, Result<Option<Vec<f32>>>> {
        let (embedder, digest) = (embedder.to_string(), *digest);
        self.deferred(move |store| store.cached_embedding(&embedder, &digest))
    }

    fn cache_embedding<'a>(
        &'a self,
        embedder: &'a str,
        digest: &'a Digest,
        vector: &'a [f32],
    ) -> BoxFuture<'a, Result<()>> {
        let (embedder, digest, vector) = (embedder.to_string(), *digest, vector.to_vec());
        self.deferred(move |store| store.cache_embedding(&embedder, &digest, &vector))
    }
}

impl SqliteStore {
    pub(crate) fn cached_embedding(
        &self,
        embedder: &str,
        digest: &Digest,
    ) -> Result<Option<Vec<f32>>> {
        self.read(|conn| {
            let bytes: Option<Vec<u8>> = conn
                .prepare_cached(
                    "SELECT vector FROM embeddings WHERE embedder = ?1 AND digest = ?2",
                )?
                .query_row(params![embedder, digest.as_bytes()], |row| row.get(0))
                .optional()?;
            bytes.map(|bytes| decode(&bytes)).transpose()
        })
    }

    pub(crate) fn cache_embedding(
        &self,
        embedder: &str,
        digest: &Digest,
        vector: &[f32],
    ) -> Result<()> {
        let bytes = encode(vector);
        self.write(|tx| {
            tx.prepare_cached(
                "INSERT INTO embeddings(embedder, digest, vector) VALUES (?1, ?2, ?3)
                 ON CONFLICT DO NOTHING",
            )?
            .execute(params![embedder, digest.as_bytes(), bytes])?;
            Ok(())
        })
    }
}
