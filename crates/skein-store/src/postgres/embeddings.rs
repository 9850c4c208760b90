/*!
The embedding cache on PostgreSQL: the port of `crate::embeddings` (the
vector encoding is shared).
*/

use super::PgStore;
use crate::backend::EmbeddingCache;
use crate::embeddings::{decode, encode};
use crate::error::Result;
use skein_core::Digest;

impl EmbeddingCache for PgStore {
    fn cached_embedding(&self, embedder: &str, digest: &Digest) -> Result<Option<Vec<f32>>> {
        let row = self.read(async |client| {
            let statement = client
                .prepare_cached("SELECT vector FROM embeddings WHERE embedder = $1 AND digest = $2")
                .await?;
            Ok(client
                .query_opt(&statement, &[&embedder, &digest.as_bytes().as_slice()])
                .await?)
        })?;
        row.map(|row| decode(row.get::<_, &[u8]>(0))).transpose()
    }

    fn cache_embedding(&self, embedder: &str, digest: &Digest, vector: &[f32]) -> Result<()> {
        let bytes = encode(vector);
        self.write(async |tx| {
            let statement = tx
                .prepare_cached(
                    "INSERT INTO embeddings(embedder, digest, vector) VALUES ($1, $2, $3)
                     ON CONFLICT DO NOTHING",
                )
                .await?;
            tx.execute(
                &statement,
                &[&embedder, &digest.as_bytes().as_slice(), &bytes],
            )
            .await?;
            Ok(())
        })
    }
}
