/*!
Labels on SQLite (crate::labels says what they are): one write transaction
per change, which checks that every node is stored first.
*/

use super::SqliteStore;
use crate::backend::BoxFuture;
use crate::codec::node_id;
use crate::error::{Result, StoreError};
use crate::labels::{Label, LabelCount, Labels};
use rusqlite::{OptionalExtension, params};
use skein_core::{NodeId, now_ms};

impl Labels for SqliteStore {
    fn add_label<'a>(&'a self, name: &'a str, nodes: &'a [NodeId]) -> BoxFuture<'a, Result<u64>> {
        let (name, nodes) = (name.to_string(), nodes.to_vec());
        self.deferred(move |store| store.add_label(&name, &nodes))
    }

    fn remove_label<'a>(
        &'a self,
        name: &'a str,
        nodes: &'a [NodeId],
    ) -> BoxFuture<'a, Result<u64>> {
        let (name, nodes) = (name.to_string(), nodes.to_vec());
        self.deferred(move |store| store.remove_label(&name, &nodes))
    }

    fn labelled<'a>(
        &'a self,
        name: &'a str,
        after: Option<NodeId>,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<Label>>> {
        let name = name.to_string();
        self.deferred(move |store| store.labelled(&name, after, limit))
    }

    fn labels_of(&self, node: NodeId) -> BoxFuture<'_, Result<Vec<String>>> {
        self.point_read(move |store| store.labels_of(node))
    }

    fn label_counts(&self) -> BoxFuture<'_, Result<Vec<LabelCount>>> {
        self.deferred(|store| store.label_counts())
    }
}

impl SqliteStore {
    fn add_label(&self, name: &str, nodes: &[NodeId]) -> Result<u64> {
        let created = now_ms();
        self.write(|tx| {
            let mut added = 0;
            for node in nodes {
                let stored = tx
                    .prepare_cached("SELECT 1 FROM nodes WHERE id = ?1")?
                    .query_row([node.as_bytes()], |_| Ok(()))
                    .optional()?;
                if stored.is_none() {
                    return Err(StoreError::NodeNotFound(*node));
                }
                added +=
                    tx.prepare_cached(
                        "INSERT INTO labels(name, node, created) VALUES (?1, ?2, ?3)
                         ON CONFLICT DO NOTHING",
                    )?
                    .execute(params![name, node.as_bytes(), created])? as u64;
            }
            Ok(added)
        })
    }

    fn remove_label(&self, name: &str, nodes: &[NodeId]) -> Result<u64> {
        self.write(|tx| {
            let mut removed = 0;
            for node in nodes {
                removed += tx
                    .prepare_cached("DELETE FROM labels WHERE name = ?1 AND node = ?2")?
                    .execute(params![name, node.as_bytes()])? as u64;
            }
            Ok(removed)
        })
    }

    fn labelled(&self, name: &str, after: Option<NodeId>, limit: usize) -> Result<Vec<Label>> {
        let after = after.map_or_else(Vec::new, |node| node.as_bytes().to_vec());
        self.read(|conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT node, created FROM labels WHERE name = ?1 AND node > ?2
                 ORDER BY node LIMIT ?3",
            )?;
            let rows = stmt
                .query_map(params![name, after, limit as i64], |row| {
                    Ok((row.get::<_, Vec<u8>>(0)?, row.get::<_, i64>(1)?))
                })?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            rows.into_iter()
                .map(|(node, created_ms)| {
                    Ok(Label {
                        name: name.to_string(),
                        node: node_id(&node)?,
                        created_ms,
                    })
                })
                .collect()
        })
    }

    fn labels_of(&self, node: NodeId) -> Result<Vec<String>> {
        self.read(|conn| {
            let mut stmt =
                conn.prepare_cached("SELECT name FROM labels WHERE node = ?1 ORDER BY name")?;
            let names = stmt
                .query_map([node.as_bytes()], |row| row.get(0))?
                .collect::<rusqlite::Result<Vec<String>>>()?;
            Ok(names)
        })
    }

    fn label_counts(&self) -> Result<Vec<LabelCount>> {
        self.read(|conn| {
            let mut stmt = conn
                .prepare_cached("SELECT name, count(*) FROM labels GROUP BY name ORDER BY name")?;
            let counts = stmt
                .query_map([], |row| {
                    Ok(LabelCount {
                        name: row.get(0)?,
                        nodes: row.get::<_, i64>(1)? as u64,
                    })
                })?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            Ok(counts)
        })
    }
}
