/*!
The embedding cache on SQLite: one row per (embedder id, content digest),
vectors encoded as crate::embeddings says.
*/

use super::SqliteStore;
use crate::backend::EmbeddingCache;
use crate::embeddings::{decode, encode};
use crate::error::Result;
use rusqlite::{OptionalExtension, params};
use skein_core::Digest;

impl EmbeddingCache for SqliteStore {
    fn cached_embedding(&self, embedder: &str, digest: &Digest) -> Result<Option<Vec<f32>>> {
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

    fn cache_embedding(&self, embedder: &str, digest: &Digest, vector: &[f32]) -> Result<()> {
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
