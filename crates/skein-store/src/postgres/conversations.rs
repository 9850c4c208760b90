/*!
Conversation bookmarks on PostgreSQL: create, fork, rename, list, and
moving a bookmark, always as a compare-and-set on the head the caller
started from.

The compare-and-set is one `UPDATE ... WHERE head IS NOT DISTINCT FROM
$expected`. Under read committed, a concurrent writer's committed move makes
PostgreSQL re-check that condition against the new row, so exactly one of
two racing writers moves the bookmark and the other sees zero rows changed
and reports [`StoreError::HeadMoved`] (its nodes and runs still commit).
*/

use super::PgStore;
use super::graph::{find_missing, nodes_of, queue_nodes};
use super::pipeline::{Param, Pipeline};
use super::runs::queue_run;
use crate::conversations::{CasOutcome, CommitStage, ConversationRow};
use crate::error::{Result, StoreError};
use crate::graph::{AppendReport, mark_all};
use crate::records::{
    Conversation, ConversationId, ListPosition, NewConversation, TurnCommit, now_ms,
};
use deadpool_postgres::GenericClient;
use skein_core::NodeId;
use tokio_postgres::Row;

const SELECT_CONVERSATION: &str = "SELECT c.id, c.name, c.head, (SELECT n.depth FROM nodes n WHERE n.id = c.head),
        c.forked_from_node, c.forked_from_conversation, c.forked_from_rerun, c.created, c.updated, c.meta
     FROM conversations c";

fn bytes(id: &Option<NodeId>) -> Option<&[u8]> {
    id.as_ref().map(|id| id.0.as_slice())
}

/// The SQL for a conversation's new `updated`, as on SQLite
/// (conversations.rs explains why): now, or just past the latest.
macro_rules! next_updated {
    ($now:literal) => {
        concat!(
            "GREATEST(",
            $now,
            ", (SELECT COALESCE(MAX(updated), 0) + 1 FROM conversations))"
        )
    };
}

impl PgStore {
    pub fn create_conversation(&self, new: NewConversation) -> Result<Conversation> {
        let id = new.id.clone().unwrap_or_else(ConversationId::random);
        let now = now_ms();
        let meta = new.meta.clone().unwrap_or_else(|| serde_json::json!({}));
        let meta_text = serde_json::to_string(&meta)?;
        let origin = new.origin.clone().unwrap_or_default();
        self.write(async |tx| {
            if let Some(head) = new.head
                && !node_exists(tx, head).await?
            {
                return Err(StoreError::NodeNotFound(head));
            }
            let statement = tx
                .prepare_cached(concat!(
                    "INSERT INTO conversations(id, name, head, forked_from_node, forked_from_conversation,
                         forked_from_rerun, created, updated, meta)
                     VALUES ($1, $2, $3, $4, $5, $6, $7, ",
                    next_updated!("$7"),
                    ", $8)"
                ))
                .await?;
            tx.execute(
                &statement,
                &[
                    &id.as_str(),
                    &new.name,
                    &bytes(&new.head),
                    &bytes(&origin.node),
                    &origin.conversation.as_ref().map(ConversationId::as_str),
                    &origin.rerun,
                    &now,
                    &meta_text,
                ],
            )
            .await?;
            Ok(())
        })?;
        self.conversation(&id)
    }

    pub fn conversation(&self, id: &ConversationId) -> Result<Conversation> {
        self.read(async |client| {
            let statement = client
                .prepare_cached(&format!("{SELECT_CONVERSATION} WHERE c.id = $1"))
                .await?;
            let row = client.query_opt(&statement, &[&id.as_str()]).await?;
            row.map(|row| conversation_from_row(&row))
                .ok_or_else(|| StoreError::ConversationNotFound(id.to_string()))
        })
    }

    pub fn list_conversations(&self, limit: usize) -> Result<Vec<Conversation>> {
        self.query_conversations(
            &format!("{SELECT_CONVERSATION} ORDER BY c.updated DESC, c.id LIMIT $1"),
            &(limit.min(i64::MAX as usize) as i64),
        )
    }

    pub fn list_conversations_after(
        &self,
        after: &ListPosition,
        limit: usize,
    ) -> Result<Vec<Conversation>> {
        let limit = limit.min(i64::MAX as usize) as i64;
        self.read(async |client| {
            let statement = client
                .prepare_cached(&format!(
                    "{SELECT_CONVERSATION}
                     WHERE c.updated <= $1 AND (c.updated < $1 OR c.id > $2)
                     ORDER BY c.updated DESC, c.id LIMIT $3"
                ))
                .await?;
            let rows = client
                .query(&statement, &[&after.updated_ms, &after.id.as_str(), &limit])
                .await?;
            Ok(rows.iter().map(conversation_from_row).collect())
        })
    }

    pub fn conversations_at(&self, node: NodeId) -> Result<Vec<Conversation>> {
        self.query_conversations(
            &format!("{SELECT_CONVERSATION} WHERE c.head = $1 ORDER BY c.updated DESC"),
            &node.0.as_slice(),
        )
    }

    fn query_conversations(
        &self,
        sql: &str,
        param: &(dyn tokio_postgres::types::ToSql + Sync),
    ) -> Result<Vec<Conversation>> {
        self.read(async |client| {
            let statement = client.prepare_cached(sql).await?;
            let rows = client.query(&statement, &[param]).await?;
            Ok(rows.iter().map(conversation_from_row).collect())
        })
    }

    pub fn rename_conversation(&self, id: &ConversationId, name: Option<&str>) -> Result<()> {
        self.update_conversation(
            id,
            concat!(
                "UPDATE conversations SET name = $2, updated = ",
                next_updated!("$3"),
                " WHERE id = $1"
            ),
            &name,
        )
    }

    pub fn set_conversation_meta(
        &self,
        id: &ConversationId,
        meta: &serde_json::Value,
    ) -> Result<()> {
        let text = serde_json::to_string(meta)?;
        self.update_conversation(
            id,
            concat!(
                "UPDATE conversations SET meta = $2, updated = ",
                next_updated!("$3"),
                " WHERE id = $1"
            ),
            &text,
        )
    }

    fn update_conversation(
        &self,
        id: &ConversationId,
        sql: &str,
        value: &(dyn tokio_postgres::types::ToSql + Sync),
    ) -> Result<()> {
        let changed = self.write(async |tx| {
            let statement = tx.prepare_cached(sql).await?;
            Ok(tx
                .execute(&statement, &[&id.as_str(), value, &now_ms()])
                .await?)
        })?;
        if changed == 0 {
            return Err(StoreError::ConversationNotFound(id.to_string()));
        }
        Ok(())
    }

    pub fn move_head(
        &self,
        id: &ConversationId,
        expected: Option<NodeId>,
        new: NodeId,
    ) -> Result<()> {
        let outcome = self.write(async |tx| {
            if !node_exists(tx, new).await? {
                return Err(StoreError::NodeNotFound(new));
            }
            compare_and_set_head(tx, id, expected, new).await
        })?;
        outcome.into_result(id, expected, Some(new))
    }

    pub fn commit_turn_observed(
        &self,
        turn: &TurnCommit<'_>,
        probe: &mut (dyn FnMut(CommitStage) + Send),
    ) -> Result<AppendReport> {
        let head = turn
            .thread
            .head_id()
            .ok_or_else(|| StoreError::MalformedRow("a turn must end at a node".into()))?;
        let key = self.key();
        let (written, marks, outcome) = self.write(async |tx| {
            // Nodes, runs and the bookmark move go out in one round trip,
            // executed in that order.
            let (missing, mut marks) = find_missing(tx, key, turn.thread).await?;
            let cas = tx.prepare_cached(COMPARE_AND_SET).await?;
            let mut pipeline = Pipeline::new();
            let nodes = queue_nodes(&mut pipeline, tx, nodes_of(&missing)).await?;
            for run in turn.runs {
                queue_run(&mut pipeline, tx, run).await?;
            }
            let moved = pipeline.push(
                tx,
                cas,
                cas_params(turn.conversation, turn.expected_head, head),
            );
            let changed = pipeline.run().await?;
            probe(CommitStage::NodesWritten);
            probe(CommitStage::RunsWritten);
            let outcome = cas_outcome(tx, turn.conversation, changed[moved]).await?;
            probe(CommitStage::HeadMoved);
            marks.extend(missing);
            Ok((nodes.map_or(0, |at| changed[at] as usize), marks, outcome))
        })?;
        mark_all(&marks, key);
        outcome.into_result(turn.conversation, turn.expected_head, Some(head))?;
        Ok(AppendReport {
            written,
            head: Some(head),
        })
    }
}

pub(crate) async fn node_exists(client: &impl GenericClient, id: NodeId) -> Result<bool> {
    let statement = client
        .prepare_cached("SELECT 1 FROM nodes WHERE id = $1")
        .await?;
    Ok(client
        .query_opt(&statement, &[&id.0.as_slice()])
        .await?
        .is_some())
}

const COMPARE_AND_SET: &str = concat!(
    "UPDATE conversations SET head = $2, updated = ",
    next_updated!("$3"),
    " WHERE id = $1 AND head IS NOT DISTINCT FROM $4"
);

fn cas_params(id: &ConversationId, expected: Option<NodeId>, new: NodeId) -> Vec<Param> {
    vec![
        Box::new(id.0.clone()),
        Box::new(new.0.to_vec()),
        Box::new(now_ms()),
        Box::new(expected.map(|id| id.0.to_vec())),
    ]
}

async fn compare_and_set_head(
    tx: &impl GenericClient,
    id: &ConversationId,
    expected: Option<NodeId>,
    new: NodeId,
) -> Result<CasOutcome> {
    let statement = tx.prepare_cached(COMPARE_AND_SET).await?;
    let mut pipeline = Pipeline::new();
    pipeline.push(tx, statement, cas_params(id, expected, new));
    let changed = pipeline.run().await?;
    cas_outcome(tx, id, changed[0]).await
}

/// What a compare-and-set that changed `changed` rows means; on a lost race,
/// where the bookmark stands now.
async fn cas_outcome(
    tx: &impl GenericClient,
    id: &ConversationId,
    changed: u64,
) -> Result<CasOutcome> {
    if changed == 1 {
        return Ok(CasOutcome::Moved);
    }
    let statement = tx
        .prepare_cached("SELECT head FROM conversations WHERE id = $1")
        .await?;
    match tx.query_opt(&statement, &[&id.as_str()]).await? {
        None => Err(StoreError::ConversationNotFound(id.to_string())),
        Some(row) => Ok(CasOutcome::Lost {
            actual: row.get::<_, Option<&[u8]>>(0).and_then(NodeId::from_slice),
        }),
    }
}

fn conversation_from_row(row: &Row) -> Conversation {
    ConversationRow {
        id: row.get(0),
        name: row.get(1),
        head: row.get(2),
        head_depth: row.get(3),
        origin_node: row.get(4),
        origin_conversation: row.get(5),
        origin_rerun: row.get(6),
        created_ms: row.get(7),
        updated_ms: row.get(8),
        meta: row.get(9),
    }
    .into_conversation()
}
