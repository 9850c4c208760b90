/*!
Usage accounts on PostgreSQL: the port of `crate::usage` (its SQL only;
which runs each scope holds is decided there). Lists of ids go to the
server as one array parameter, so each question is one round trip.
*/

use super::PgStore;
use crate::backend::BoxFuture;
use crate::error::Result;
use crate::records::{ConversationId, RunId};
use crate::usage::{RunOutputs, RunRow, UsageRows};
use skein_core::NodeId;
use std::collections::HashSet;

impl UsageRows for PgStore {
    fn run_rows<'a>(&'a self, ids: &'a [RunId]) -> BoxFuture<'a, Result<Vec<RunRow>>> {
        Box::pin(self.run_rows(ids))
    }

    fn conversation_run_rows<'a>(
        &'a self,
        id: &'a ConversationId,
    ) -> BoxFuture<'a, Result<RunOutputs>> {
        Box::pin(self.conversation_run_rows(id))
    }

    fn ancestor_ids(&self, head: NodeId) -> BoxFuture<'_, Result<HashSet<NodeId>>> {
        Box::pin(self.ancestor_ids(head))
    }

    fn link_sources<'a>(
        &'a self,
        kind: &'a str,
        targets: &'a [&'a str],
    ) -> BoxFuture<'a, Result<Vec<RunId>>> {
        Box::pin(self.link_sources(kind, targets))
    }

    fn link_targets<'a>(
        &'a self,
        kind: &'a str,
        runs: &'a [RunId],
    ) -> BoxFuture<'a, Result<Vec<String>>> {
        Box::pin(self.link_targets(kind, runs))
    }
}

impl PgStore {
    async fn run_rows(&self, ids: &[RunId]) -> Result<Vec<RunRow>> {
        let ids: Vec<&str> = ids.iter().map(RunId::as_str).collect();
        let rows = reading!(self, |client| {
            let statement = client
                .prepare_cached(
                    "SELECT id, output_head, status, input_tokens, output_tokens,
                            cache_read_tokens, cache_write_tokens, usage_complete, model, provider
                     FROM runs WHERE id = ANY($1)",
                )
                .await?;
            Ok(client.query(&statement, &[&ids]).await?)
        })?;
        rows.iter()
            .map(|row| {
                RunRow::new(
                    row.get(0),
                    row.get(8),
                    row.get(9),
                    row.get::<_, Option<&[u8]>>(1),
                    row.get::<_, &str>(2),
                    [row.get(3), row.get(4), row.get(5), row.get(6)],
                    row.get(7),
                )
            })
            .collect()
    }

    async fn conversation_run_rows(&self, id: &ConversationId) -> Result<RunOutputs> {
        let rows = reading!(self, |client| {
            let statement = client
                .prepare_cached("SELECT id, output_head FROM runs WHERE conversation = $1")
                .await?;
            Ok(client.query(&statement, &[&id.as_str()]).await?)
        })?;
        Ok(rows
            .iter()
            .map(|row| {
                (
                    RunId(row.get(0)),
                    row.get::<_, Option<&[u8]>>(1).and_then(NodeId::from_slice),
                )
            })
            .collect())
    }

    async fn ancestor_ids(&self, head: NodeId) -> Result<HashSet<NodeId>> {
        let rows = reading!(self, |client| {
            let statement = client
                .prepare_cached(
                    "WITH RECURSIVE up(id, parent) AS (
                         SELECT id, parent FROM nodes WHERE id = $1
                         UNION ALL
                         SELECT n.id, n.parent FROM up JOIN nodes n ON n.id = up.parent
                     )
                     SELECT id FROM up",
                )
                .await?;
            Ok(client.query(&statement, &[&head.0.as_slice()]).await?)
        })?;
        rows.iter()
            .map(|row| crate::codec::node_id(row.get::<_, &[u8]>(0)))
            .collect()
    }

    async fn link_sources(&self, kind: &str, targets: &[&str]) -> Result<Vec<RunId>> {
        let rows = reading!(self, |client| {
            let statement = client
                .prepare_cached("SELECT run_id FROM run_links WHERE kind = $1 AND target = ANY($2)")
                .await?;
            Ok(client.query(&statement, &[&kind, &targets]).await?)
        })?;
        Ok(rows.iter().map(|row| RunId(row.get(0))).collect())
    }

    async fn link_targets(&self, kind: &str, runs: &[RunId]) -> Result<Vec<String>> {
        let runs: Vec<&str> = runs.iter().map(RunId::as_str).collect();
        let rows = reading!(self, |client| {
            let statement = client
                .prepare_cached("SELECT target FROM run_links WHERE run_id = ANY($1) AND kind = $2")
                .await?;
            Ok(client.query(&statement, &[&runs, &kind]).await?)
        })?;
        Ok(rows.iter().map(|row| row.get(0)).collect())
    }
}
