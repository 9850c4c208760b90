/*!
The embedding cache on PostgreSQL: the port of `crate::embeddings` (the
vector encoding is shared).
*/

use super::PgStore;
use crate::backend::BoxFuture;
use crate::embeddings::{EmbeddingCache, decode, encode};
use crate::error::Result;
use deadpool_postgres::Client;
use skein_core::Digest;

impl EmbeddingCache for PgStore {
    fn cached_embedding<'a>(
        &'a self,
        embedder: &'a str,
        digest: &'a Digest,
    ) -> BoxFuture<'a, Result<Option<Vec<f32>>>> {
        Box::pin(self.read_embedding(embedder, digest))
    }

    fn cache_embedding<'a>(
        &'a self,
        embedder: &'a str,
        digest: &'a Digest,
        vector: &'a [f32],
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(self.write_embedding(embedder, digest, vector))
    }
}

impl PgStore {
    async fn read_embedding(&self, embedder: &str, digest: &Digest) -> Result<Option<Vec<f32>>> {
        let digest = digest.as_bytes().as_slice();
        let rows = self
            .rows(
                "SELECT vector FROM embeddings WHERE embedder = $1 AND digest = $2",
                &[&embedder, &digest],
            )
            .await?;
        rows.first()
            .map(|row| decode(row.get::<_, &[u8]>(0)))
            .transpose()
    }

    async fn write_embedding(&self, embedder: &str, digest: &Digest, vector: &[f32]) -> Result<()> {
        let bytes = encode(vector);
        write_retrying!(self, |tx| {
            insert_embedding(tx, embedder, digest, &bytes).await
        })
    }
}

async fn insert_embedding(
    tx: &Client,
    embedder: &str,
    digest: &Digest,
    bytes: &[u8],
) -> Result<()> {
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
}
