/*!
Reruns on PostgreSQL: the port of `crate::reruns` (its SQL only; the row
parsing is shared). A rerun's threads, runs and row are written in one
transaction.
*/

use super::PgStore;
use super::graph::{find_missing, queue_nodes};
use super::pipeline::{Param, Pipeline};
use super::runs::queue_run;
use crate::backend::{Backend, BoxFuture};
use crate::bodies::RunToStore;
use crate::error::{Result, StoreError};
use crate::graph::mark_all;
use crate::records::{ConversationId, RerunId};
use crate::reruns::{RawRerun, RerunCommit, RerunRecord, Reruns, SELECT_RERUN};
use deadpool_postgres::{Client, GenericClient};
use skein_core::{Node, NodeId, StoreKey};
use tokio_postgres::Row;
use tokio_postgres::types::ToSql;

impl Reruns for PgStore {
    fn commit_rerun<'a>(&'a self, commit: &'a RerunCommit<'a>) -> BoxFuture<'a, Result<()>> {
        Box::pin(self.write_rerun(commit))
    }

    fn rerun<'a>(&'a self, id: &'a RerunId) -> BoxFuture<'a, Result<RerunRecord>> {
        Box::pin(self.rerun_by_id(id))
    }

    fn reruns_of_conversation<'a>(
        &'a self,
        id: &'a ConversationId,
    ) -> BoxFuture<'a, Result<Vec<RerunRecord>>> {
        Box::pin(self.reruns_in(id))
    }

    fn reruns_of_node(&self, node: NodeId) -> BoxFuture<'_, Result<Vec<RerunRecord>>> {
        Box::pin(async move {
            self.query_reruns(
                format!("{SELECT_RERUN} WHERE turn_node = $1 ORDER BY created, id"),
                &[&node.0.as_slice()],
            )
            .await
        })
    }

    fn reruns_answering(&self, node: NodeId) -> BoxFuture<'_, Result<Vec<RerunRecord>>> {
        Box::pin(async move {
            self.query_reruns(
                format!("{SELECT_RERUN} WHERE answer_head = $1 ORDER BY created, id"),
                &[&node.0.as_slice()],
            )
            .await
        })
    }

    fn all_reruns(&self) -> BoxFuture<'_, Result<Vec<RerunRecord>>> {
        Box::pin(self.query_reruns(format!("{SELECT_RERUN} ORDER BY created, id"), &[]))
    }
}

impl PgStore {
    /// A rerun's threads, runs and row in one transaction.
    async fn write_rerun(&self, commit: &RerunCommit<'_>) -> Result<()> {
        let key = self.key();
        let marks = write_retrying!(self, |tx| { rerun_attempt(tx, key, commit).await })?;
        mark_all(&marks, key);
        Ok(())
    }

    async fn rerun_by_id(&self, id: &RerunId) -> Result<RerunRecord> {
        self.query_reruns(format!("{SELECT_RERUN} WHERE id = $1"), &[&id.as_str()])
            .await?
            .pop()
            .ok_or_else(|| StoreError::RerunNotFound(id.to_string()))
    }

    async fn reruns_in(&self, id: &ConversationId) -> Result<Vec<RerunRecord>> {
        self.query_reruns(
            format!("{SELECT_RERUN} WHERE conversation = $1 ORDER BY created, id"),
            &[&id.as_str()],
        )
        .await
    }

    async fn query_reruns(
        &self,
        sql: String,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<RerunRecord>> {
        let rows = self.rows(&sql, params).await?;
        rows.iter().map(|row| raw_rerun(row).finish()).collect()
    }
}

/// One attempt at writing a rerun, inside its transaction: the nodes to
/// mark once it commits.
async fn rerun_attempt<'t>(
    tx: &Client,
    key: StoreKey,
    commit: &RerunCommit<'t>,
) -> Result<Vec<&'t Node>> {
    let mut marks = Vec::new();
    // Threads one after another: a later one may hang under nodes an
    // earlier one adds.
    for thread in commit.threads {
        let missing = find_missing(tx, key, thread).await?;
        let mut pipeline = Pipeline::new();
        let nodes = queue_nodes(&mut pipeline, tx, missing.rows()).await?;
        let changed = pipeline.run().await?;
        if let Some(nodes) = nodes {
            nodes.written(tx, &changed).await?;
        }
        marks.extend(missing.into_marks());
    }
    let mut pipeline = Pipeline::new();
    for run in commit.runs {
        let to_store = RunToStore::cut(run, None, None);
        queue_run(&mut pipeline, tx, &to_store, run.conversation.as_ref()).await?;
    }
    queue_rerun(&mut pipeline, tx, commit.record).await?;
    pipeline.run().await?;
    Ok(marks)
}

pub(super) fn raw_rerun(row: &Row) -> RawRerun {
    RawRerun {
        id: row.get(0),
        conversation: row.get(1),
        turn: row.get::<_, i64>(2) as u32,
        turn_node: row.get(3),
        request_head: row.get(4),
        answer_head: row.get(5),
        ablation: row.get(6),
        samples: row.get::<_, i64>(7) as u32,
        sample_runs: row.get(8),
        baseline_runs: row.get(9),
        verdict: row.get(10),
        summary: row.get(11),
        detail: row.get(12),
        created_ms: row.get(13),
    }
}

/// Queue the insertion of a rerun's row (its threads and runs go first).
pub(crate) async fn queue_rerun<'c, C: GenericClient>(
    pipeline: &mut Pipeline<'c>,
    tx: &'c C,
    record: &RerunRecord,
) -> Result<()> {
    let insert = tx
        .prepare_cached(
            "INSERT INTO reruns(id, conversation, turn, turn_node, request_head, answer_head,
                 ablation, samples, sample_runs, baseline_runs, verdict, summary, detail, created)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)",
        )
        .await?;
    let id = |id: &Option<NodeId>| id.as_ref().map(|id| id.0.to_vec());
    let params: Vec<Param> = vec![
        Box::new(record.id.0.clone()),
        Box::new(record.conversation.0.clone()),
        Box::new(i64::from(record.turn)),
        Box::new(record.turn_node.0.to_vec()),
        Box::new(id(&record.request_head)),
        Box::new(id(&record.answer_head)),
        Box::new(serde_json::to_string(&record.ablation)?),
        Box::new(i64::from(record.samples)),
        Box::new(serde_json::to_string(&record.sample_runs)?),
        Box::new(serde_json::to_string(&record.baseline_runs)?),
        Box::new(record.verdict.clone()),
        Box::new(record.summary.clone()),
        Box::new(serde_json::to_string(&record.detail)?),
        Box::new(record.created_ms),
    ];
    pipeline.push(tx, insert, params);
    Ok(())
}
