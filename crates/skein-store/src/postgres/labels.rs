/*!
Labels on PostgreSQL: the port of sqlite/labels.rs. Adding a label locks
its nodes (`FOR KEY SHARE`, as a turn locks the node it builds on), so a
deletion deciding at the same time either sees the label or has deleted
the node first (and the label is refused: no such node).
*/

use super::PgStore;
use crate::backend::BoxFuture;
use crate::codec::node_id;
use crate::error::{Result, StoreError};
use crate::labels::{Label, LabelCount, Labels};
use deadpool_postgres::Client;
use skein_core::{NodeId, now_ms};

impl Labels for PgStore {
    fn add_label<'a>(&'a self, name: &'a str, nodes: &'a [NodeId]) -> BoxFuture<'a, Result<u64>> {
        Box::pin(async move {
            let created = now_ms();
            let mut writer = self.writer().await?;
            loop {
                match writer
                    .attempt(add_attempt(writer.client(), name, nodes, created))
                    .await
                {
                    Ok(added) => return Ok(writer.done(added)),
                    Err(error) => writer.again(error).await?,
                }
            }
        })
    }

    fn remove_label<'a>(
        &'a self,
        name: &'a str,
        nodes: &'a [NodeId],
    ) -> BoxFuture<'a, Result<u64>> {
        Box::pin(async move {
            let mut writer = self.writer().await?;
            loop {
                match writer
                    .attempt(remove_attempt(writer.client(), name, nodes))
                    .await
                {
                    Ok(removed) => return Ok(writer.done(removed)),
                    Err(error) => writer.again(error).await?,
                }
            }
        })
    }

    fn labelled<'a>(
        &'a self,
        name: &'a str,
        after: Option<NodeId>,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<Label>>> {
        Box::pin(async move {
            let after = after.map_or_else(Vec::new, |node| node.as_bytes().to_vec());
            let rows = self
                .rows(
                    "SELECT node, created FROM labels WHERE name = $1 AND node > $2
                     ORDER BY node LIMIT $3",
                    &[&name, &after, &(limit as i64)],
                )
                .await?;
            rows.iter()
                .map(|row| {
                    Ok(Label {
                        name: name.to_string(),
                        node: node_id(row.get::<_, &[u8]>(0))?,
                        created_ms: row.get(1),
                    })
                })
                .collect()
        })
    }

    fn labels_of(&self, node: NodeId) -> BoxFuture<'_, Result<Vec<String>>> {
        Box::pin(async move {
            let rows = self
                .rows(
                    "SELECT name FROM labels WHERE node = $1 ORDER BY name",
                    &[&node.0.as_slice()],
                )
                .await?;
            Ok(rows.iter().map(|row| row.get(0)).collect())
        })
    }

    fn label_counts(&self) -> BoxFuture<'_, Result<Vec<LabelCount>>> {
        Box::pin(async move {
            let rows = self
                .rows(
                    "SELECT name, count(*) FROM labels GROUP BY name ORDER BY name",
                    &[],
                )
                .await?;
            Ok(rows
                .iter()
                .map(|row| LabelCount {
                    name: row.get(0),
                    nodes: row.get::<_, i64>(1) as u64,
                })
                .collect())
        })
    }
}

async fn add_attempt(tx: &Client, name: &str, nodes: &[NodeId], created: i64) -> Result<u64> {
    let lock = tx
        .prepare_cached("SELECT 1 FROM nodes WHERE id = $1 FOR KEY SHARE")
        .await?;
    let insert = tx
        .prepare_cached(
            "INSERT INTO labels(name, node, created) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
        )
        .await?;
    let mut added = 0;
    for node in nodes {
        let id = node.0.as_slice();
        if tx.query_opt(&lock, &[&id]).await?.is_none() {
            return Err(StoreError::NodeNotFound(*node));
        }
        added += tx.execute(&insert, &[&name, &id, &created]).await?;
    }
    Ok(added)
}

async fn remove_attempt(tx: &Client, name: &str, nodes: &[NodeId]) -> Result<u64> {
    let ids: Vec<&[u8]> = nodes.iter().map(|node| node.0.as_slice()).collect();
    let delete = tx
        .prepare_cached("DELETE FROM labels WHERE name = $1 AND node = ANY($2)")
        .await?;
    Ok(tx.execute(&delete, &[&name, &ids]).await?)
}
