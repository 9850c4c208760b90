/*!
Export and import on PostgreSQL. The file format, parsing and every check
that needs no database are shared with SQLite (crate::transfer); this is only
the reading of nodes for export and the all-or-nothing write of an import.

Export reads nodes in pages of [`PAGE`] by `seq`, so memory stays bounded
whatever the graph's size.
*/

use super::PgStore;
use super::graph::{decode, fetch_blobs, queue_nodes};
use super::pipeline::Pipeline;
use super::runs::queue_run;
use crate::codec::{node_id, optional_node_id};
use crate::error::Result;
use crate::transfer::{
    ImportReport, Line, bad_conversation, check_same_head, orphan, write_header, write_node,
};
use deadpool_postgres::GenericClient;
use skein_core::{Message, NodeId};
use std::collections::HashMap;
use std::io::Write;

/// Nodes read per query by export and verify.
pub(crate) const PAGE: i64 = 1000;

impl PgStore {
    pub fn export_nodes(&self, out: &mut dyn Write) -> Result<()> {
        write_header(out)?;
        let mut after = 0_i64;
        loop {
            let (rows, blobs) = self.read(async |client| {
                let statement = client
                    .prepare_cached(
                        "SELECT seq, id, parent, body FROM nodes WHERE seq > $1 ORDER BY seq LIMIT $2",
                    )
                    .await?;
                let rows = client.query(&statement, &[&after, &PAGE]).await?;
                let blobs = fetch_blobs(client, rows.iter().map(|row| row.get::<_, &[u8]>(3))).await?;
                Ok((rows, blobs))
            })?;
            let Some(last) = rows.last() else {
                return Ok(());
            };
            after = last.get(0);
            for row in &rows {
                let id = node_id(row.get(1))?;
                let message = decode(id, row.get(3), &blobs)?;
                write_node(out, id, optional_node_id(row.get(2))?, message)?;
            }
        }
    }

    pub fn import_lines(&self, lines: &[(usize, Line)]) -> Result<ImportReport> {
        self.write(async |tx| {
            let mut report = ImportReport::default();
            // Depths of nodes met so far, so a parent earlier in the file
            // costs no query.
            let mut depths: HashMap<NodeId, i64> = HashMap::new();
            for (number, line) in lines {
                let number = *number;
                match line {
                    Line::Header { .. } => {}
                    Line::Node { id, parent, role, parts } => {
                        if let Some(depth) = stored_depth(tx, *id).await? {
                            depths.insert(*id, depth);
                            report.nodes_present += 1;
                            continue;
                        }
                        let depth = match parent {
                            None => 0,
                            Some(parent) => {
                                let known = match depths.get(parent) {
                                    Some(depth) => Some(*depth),
                                    None => stored_depth(tx, *parent).await?,
                                };
                                known.ok_or_else(|| orphan(number, id, parent))? + 1
                            }
                        };
                        let message = Message::new(*role, parts.clone());
                        let node = (*id, *parent, depth as u64, &message);
                        let mut pipeline = Pipeline::new();
                        queue_nodes(&mut pipeline, tx, std::iter::once(node)).await?;
                        pipeline.run().await?;
                        depths.insert(*id, depth);
                        report.nodes_written += 1;
                    }
                    Line::Conversation(conversation) => {
                        let statement = tx
                            .prepare_cached("SELECT head FROM conversations WHERE id = $1")
                            .await?;
                        if let Some(row) = tx.query_opt(&statement, &[&conversation.id.as_str()]).await? {
                            check_same_head(number, conversation, row.get(0))?;
                            continue;
                        }
                        let origin = conversation.origin.clone().unwrap_or_default();
                        let statement = tx
                            .prepare_cached(
                                "INSERT INTO conversations(id, name, head, forked_from_node, forked_from_conversation,
                                     forked_from_rerun, created, updated, meta)
                                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
                            )
                            .await?;
                        tx.execute(
                            &statement,
                            &[
                                &conversation.id.as_str(),
                                &conversation.name,
                                &conversation.head.as_ref().map(|id| id.0.as_slice()),
                                &origin.node.as_ref().map(|id| id.0.as_slice()),
                                &origin.conversation.as_ref().map(|c| c.as_str()),
                                &origin.rerun,
                                &conversation.created_ms,
                                &conversation.updated_ms,
                                &serde_json::to_string(&conversation.meta)?,
                            ],
                        )
                        .await
                        .map_err(|error| bad_conversation(number, conversation, error))?;
                        report.conversations += 1;
                    }
                    Line::Run(run) => {
                        let statement = tx.prepare_cached("SELECT 1 FROM runs WHERE id = $1").await?;
                        if tx.query_opt(&statement, &[&run.id.as_str()]).await?.is_none() {
                            let mut pipeline = Pipeline::new();
                            queue_run(&mut pipeline, tx, run).await?;
                            pipeline.run().await?;
                            report.runs += 1;
                        }
                    }
                }
            }
            Ok(report)
        })
    }
}

async fn stored_depth(client: &impl GenericClient, id: NodeId) -> Result<Option<i64>> {
    let statement = client
        .prepare_cached("SELECT depth FROM nodes WHERE id = $1")
        .await?;
    Ok(client
        .query_opt(&statement, &[&id.0.as_slice()])
        .await?
        .map(|row| row.get(0)))
}
