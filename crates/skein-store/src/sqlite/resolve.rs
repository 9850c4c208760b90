/*!
The ids in a range on SQLite, for prefix resolution (crate::resolve parses
and chooses): node ids by byte range, conversation and run ids by text
range, conversations by exact name.
*/

use super::SqliteStore;
use crate::backend::BoxFuture;
use crate::codec::node_id;
use crate::error::Result;
use crate::resolve::{IdRanges, IdTable};
use rusqlite::params;
use skein_core::NodeId;

impl IdRanges for SqliteStore {
    fn node_ids_between<'a>(
        &'a self,
        low: &'a [u8],
        high: &'a [u8],
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<NodeId>>> {
        let (low, high) = (low.to_vec(), high.to_vec());
        self.deferred(move |store| store.node_ids_between(&low, &high, limit))
    }

    fn conversation_ids_named<'a>(
        &'a self,
        name: &'a str,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<String>>> {
        let name = name.to_string();
        self.point_read(move |store| store.conversation_ids_named(&name, limit))
    }

    fn text_ids_between<'a>(
        &'a self,
        table: IdTable,
        low: &'a str,
        high: &'a str,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<String>>> {
        let (low, high) = (low.to_string(), high.to_string());
        self.deferred(move |store| store.text_ids_between(table, &low, &high, limit))
    }
}

impl SqliteStore {
    /// At most `limit` node ids in `[low, high]`, in order.
    pub(crate) fn node_ids_between(
        &self,
        low: &[u8],
        high: &[u8],
        limit: usize,
    ) -> Result<Vec<NodeId>> {
        self.read(|conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT id FROM nodes WHERE id BETWEEN ?1 AND ?2 ORDER BY id LIMIT ?3",
            )?;
            let rows = stmt.query_map(params![low, high, limit as i64], |row| {
                row.get::<_, Vec<u8>>(0)
            })?;
            rows.map(|row| node_id(&row?)).collect::<Result<Vec<_>>>()
        })
    }

    /// At most `limit` ids of the conversations named exactly `name`.
    pub(crate) fn conversation_ids_named(&self, name: &str, limit: usize) -> Result<Vec<String>> {
        self.read(|conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT id FROM conversations WHERE name = ?1 ORDER BY updated DESC, id LIMIT ?2",
            )?;
            let rows =
                stmt.query_map(params![name, limit as i64], |row| row.get::<_, String>(0))?;
            Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
        })
    }

    /// At most `limit` ids of `table` in `[low, high)`, in order.
    pub(crate) fn text_ids_between(
        &self,
        table: IdTable,
        low: &str,
        high: &str,
        limit: usize,
    ) -> Result<Vec<String>> {
        self.read(|conn| {
            let mut stmt = conn.prepare_cached(&format!(
                "SELECT id FROM {} WHERE id >= ?1 AND id < ?2 ORDER BY id LIMIT ?3",
                table.name()
            ))?;
            let rows = stmt.query_map(params![low, high, limit as i64], |row| {
                row.get::<_, String>(0)
            })?;
            Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
        })
    }
}
