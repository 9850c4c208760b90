/*!
The id range queries prefix resolution needs, on PostgreSQL (the parsing and
choosing are shared in crate::resolve). Node ids compare as bytes; text ids
are declared `COLLATE "C"`, so their ranges are byte ranges too.
*/

use super::PgStore;
use crate::backend::IdRanges;
use crate::codec::node_id;
use crate::error::Result;
use crate::resolve::IdTable;
use skein_core::NodeId;

impl IdRanges for PgStore {
    fn node_ids_between(&self, low: &[u8], high: &[u8], limit: usize) -> Result<Vec<NodeId>> {
        let rows = self.read(async |client| {
            let statement = client
                .prepare_cached(
                    "SELECT id FROM nodes WHERE id BETWEEN $1 AND $2 ORDER BY id LIMIT $3",
                )
                .await?;
            Ok(client
                .query(&statement, &[&low, &high, &(limit as i64)])
                .await?)
        })?;
        rows.iter().map(|row| node_id(row.get(0))).collect()
    }

    fn conversation_ids_named(&self, name: &str, limit: usize) -> Result<Vec<String>> {
        let rows = self.read(async |client| {
            let statement = client
                .prepare_cached(
                    "SELECT id FROM conversations WHERE name = $1 ORDER BY updated DESC, id LIMIT $2",
                )
                .await?;
            Ok(client
                .query(&statement, &[&name, &(limit as i64)])
                .await?)
        })?;
        Ok(rows.iter().map(|row| row.get(0)).collect())
    }

    fn text_ids_between(
        &self,
        table: IdTable,
        low: &str,
        high: &str,
        limit: usize,
    ) -> Result<Vec<String>> {
        let sql = format!(
            "SELECT id FROM {} WHERE id >= $1 AND id < $2 ORDER BY id LIMIT $3",
            table.name()
        );
        let rows = self.read(async |client| {
            let statement = client.prepare_cached(&sql).await?;
            Ok(client
                .query(&statement, &[&low, &high, &(limit as i64)])
                .await?)
        })?;
        Ok(rows.iter().map(|row| row.get(0)).collect())
    }
}
