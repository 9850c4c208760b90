/*!
The id range queries prefix resolution needs, on PostgreSQL (the parsing and
choosing are shared in crate::resolve). Node ids compare as bytes; text ids
are declared `COLLATE "C"`, so their ranges are byte ranges too.
*/

use super::PgStore;
use crate::backend::BoxFuture;
use crate::codec::node_id;
use crate::error::Result;
use crate::resolve::{IdRanges, IdTable};
use skein_core::NodeId;

impl IdRanges for PgStore {
    fn node_ids_between<'a>(
        &'a self,
        low: &'a [u8],
        high: &'a [u8],
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<NodeId>>> {
        Box::pin(async move {
            let rows = self
                .rows(
                    "SELECT id FROM nodes WHERE id BETWEEN $1 AND $2 ORDER BY id LIMIT $3",
                    &[&low, &high, &(limit as i64)],
                )
                .await?;
            rows.iter().map(|row| node_id(row.get(0))).collect()
        })
    }

    fn conversation_ids_named<'a>(
        &'a self,
        name: &'a str,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<String>>> {
        Box::pin(async move {
            let rows = self
                .rows(
                    "SELECT id FROM conversations WHERE name = $1 ORDER BY updated DESC, id LIMIT $2",
                    &[&name, &(limit as i64)],
                )
                .await?;
            Ok(rows.iter().map(|row| row.get(0)).collect())
        })
    }

    fn text_ids_between<'a>(
        &'a self,
        table: IdTable,
        low: &'a str,
        high: &'a str,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<String>>> {
        Box::pin(async move {
            let sql = format!(
                "SELECT id FROM {} WHERE id >= $1 AND id < $2 ORDER BY id LIMIT $3",
                table.name()
            );
            let rows = self.rows(&sql, &[&low, &high, &(limit as i64)]).await?;
            Ok(rows.iter().map(|row| row.get(0)).collect())
        })
    }
}
