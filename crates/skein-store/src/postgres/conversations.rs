/*!
ConversationRecord bookmarks on PostgreSQL: create, fork, rename, list, and
moving a bookmark, always as a compare-and-set on the head the caller
started from.

The compare-and-set is one `UPDATE ... WHERE head IS NOT DISTINCT FROM
$expected`. Under read committed, a concurrent writer's committed move makes
PostgreSQL re-check that condition against the new row, so exactly one of
two racing writers moves the bookmark and the other sees zero rows changed
and reports [`StoreError::HeadMoved`] (its nodes and runs still commit).
*/

use super::PgStore;
use super::graph::{find_missing, queue_nodes};
use super::offers::record_offers;
use super::pipeline::{Param, Pipeline};
use super::runs::queue_run;
use crate::backend::{Backend, BoxFuture};
use crate::bodies::RunToStore;
use crate::conversations::{
    CasOutcome, CommitStage, ConversationRow, Conversations, Landed, branch_row,
    conversation_columns, name_taken, turn_head,
};
use crate::error::{Result, StoreError};
use crate::graph::mark_all;
use crate::records::{
    Committed, ConversationId, ConversationRecord, ListPosition, NewConversation, OnConflict,
    Target, TurnCommit, now_ms,
};
use deadpool_postgres::{Client, GenericClient};
#[cfg(any(test, feature = "testkit"))]
use skein_core::ConversationSettings;
use skein_core::{Node, NodeId, StoreKey};
use tokio_postgres::Row;

const SELECT_CONVERSATION: &str =
    concat!("SELECT ", conversation_columns!(), " FROM conversations c");

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

impl Conversations for PgStore {
    #[cfg(any(test, feature = "testkit"))]
    fn create_conversation(
        &self,
        new: NewConversation,
    ) -> BoxFuture<'_, Result<ConversationRecord>> {
        Box::pin(async move {
            let id = write_retrying!(self, |tx| {
                if let Some(head) = new.head
                    && !node_exists(tx, head).await?
                {
                    return Err(StoreError::NodeNotFound(head));
                }
                refuse_taken_name(tx, new.name.as_deref(), None).await?;
                let statement = tx.prepare_cached(INSERT_CONVERSATION).await?;
                let (id, params) = conversation_params(&new, new.head);
                let mut pipeline = Pipeline::new();
                pipeline.push(tx, statement, params);
                pipeline.run().await?;
                Ok(id)
            })?;
            self.conversation_by_id(&id).await
        })
    }

    fn conversation<'a>(
        &'a self,
        id: &'a ConversationId,
    ) -> BoxFuture<'a, Result<ConversationRecord>> {
        Box::pin(self.conversation_by_id(id))
    }

    fn list_conversations(&self, limit: usize) -> BoxFuture<'_, Result<Vec<ConversationRecord>>> {
        Box::pin(self.listing(None, limit))
    }

    fn list_conversations_after<'a>(
        &'a self,
        after: &'a ListPosition,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<ConversationRecord>>> {
        Box::pin(self.listing(Some(after), limit))
    }

    fn conversations_at(&self, node: NodeId) -> BoxFuture<'_, Result<Vec<ConversationRecord>>> {
        Box::pin(self.conversations_headed_at(node))
    }

    fn conversations_by_ids<'a>(
        &'a self,
        ids: &'a [ConversationId],
    ) -> BoxFuture<'a, Result<Vec<ConversationRecord>>> {
        Box::pin(async move {
            let ids: Vec<&str> = ids.iter().map(ConversationId::as_str).collect();
            let rows = self
                .rows(
                    &format!("{SELECT_CONVERSATION} WHERE c.id = ANY($1)"),
                    &[&ids],
                )
                .await?;
            Ok(rows.iter().map(conversation_from_row).collect())
        })
    }

    fn rename_conversation<'a>(
        &'a self,
        id: &'a ConversationId,
        name: Option<&'a str>,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let changed = write_retrying!(self, |tx| {
                refuse_taken_name(tx, name, Some(id)).await?;
                let statement = tx
                    .prepare_cached(concat!(
                        "UPDATE conversations SET name = $2, updated = ",
                        next_updated!("$3"),
                        " WHERE id = $1"
                    ))
                    .await?;
                Ok(tx
                    .execute(&statement, &[&id.as_str(), &name, &now_ms()])
                    .await?)
            })?;
            match changed {
                0 => Err(StoreError::ConversationNotFound(id.to_string())),
                _ => Ok(()),
            }
        })
    }

    #[cfg(any(test, feature = "testkit"))]
    fn set_conversation_settings<'a>(
        &'a self,
        id: &'a ConversationId,
        settings: &'a ConversationSettings,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let text = settings.to_json();
            self.update_conversation(
                id,
                concat!(
                    "UPDATE conversations SET meta = $2, updated = ",
                    next_updated!("$3"),
                    " WHERE id = $1"
                ),
                Some(text.as_str()),
            )
            .await
        })
    }

    #[cfg(any(test, feature = "testkit"))]
    fn move_head<'a>(
        &'a self,
        id: &'a ConversationId,
        expected: Option<NodeId>,
        new: NodeId,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let outcome = write_retrying!(self, |tx| {
                if !node_exists(tx, new).await? {
                    return Err(StoreError::NodeNotFound(new));
                }
                compare_and_set_head(tx, id, expected, new).await
            })?;
            outcome.into_result(id, expected, Some(new))
        })
    }

    fn commit_turn<'a>(
        &'a self,
        turn: &'a TurnCommit<'a>,
        probe: &'a mut (dyn FnMut(CommitStage) + Send),
    ) -> BoxFuture<'a, Result<Committed>> {
        Box::pin(self.commit_turn_observed(turn, probe))
    }
}

impl PgStore {
    #[cfg(any(test, feature = "testkit"))]
    /// Set one text column of conversation `id` by `sql` (`$2` the value).
    async fn update_conversation(
        &self,
        id: &ConversationId,
        sql: &str,
        value: Option<&str>,
    ) -> Result<()> {
        let changed = write_retrying!(self, |tx| {
            let statement = tx.prepare_cached(sql).await?;
            Ok(tx
                .execute(&statement, &[&id.as_str(), &value, &now_ms()])
                .await?)
        })?;
        if changed == 0 {
            return Err(StoreError::ConversationNotFound(id.to_string()));
        }
        Ok(())
    }

    /// The listing, most recently updated first, from its start or after
    /// `after`. `updated <= $1` first lets the `updated` index bound the
    /// scan.
    async fn listing(
        &self,
        after: Option<&ListPosition>,
        limit: usize,
    ) -> Result<Vec<ConversationRecord>> {
        let limit = limit.min(i64::MAX as usize) as i64;
        let rows = match after {
            None => {
                self.rows(
                    &format!("{SELECT_CONVERSATION} ORDER BY c.updated DESC, c.id LIMIT $1"),
                    &[&limit],
                )
                .await?
            }
            Some(after) => {
                self.rows(
                    &format!(
                        "{SELECT_CONVERSATION}
                         WHERE c.updated <= $1 AND (c.updated < $1 OR c.id > $2)
                         ORDER BY c.updated DESC, c.id LIMIT $3"
                    ),
                    &[&after.updated_ms, &after.id.as_str(), &limit],
                )
                .await?
            }
        };
        Ok(rows.iter().map(conversation_from_row).collect())
    }

    async fn conversations_headed_at(&self, node: NodeId) -> Result<Vec<ConversationRecord>> {
        let rows = self
            .rows(
                &format!("{SELECT_CONVERSATION} WHERE c.head = $1 ORDER BY c.updated DESC"),
                &[&node.0.as_slice()],
            )
            .await?;
        Ok(rows.iter().map(conversation_from_row).collect())
    }

    async fn conversation_by_id(&self, id: &ConversationId) -> Result<ConversationRecord> {
        let rows = self
            .rows(
                &format!("{SELECT_CONVERSATION} WHERE c.id = $1"),
                &[&id.as_str()],
            )
            .await?;
        rows.first()
            .map(conversation_from_row)
            .ok_or_else(|| StoreError::ConversationNotFound(id.to_string()))
    }

    async fn commit_turn_observed(
        &self,
        turn: &TurnCommit<'_>,
        probe: &mut (dyn FnMut(CommitStage) + Send),
    ) -> Result<Committed> {
        let head = turn_head(turn)?;
        let key = self.key();
        let runs: Vec<RunToStore<'_>> = turn
            .runs
            .iter()
            .map(|run| RunToStore::cut(run, turn.thread, Some(self.recent_bodies())))
            .collect();
        let (written, marks, landed) = write_retrying!(self, |tx| {
            commit_attempt(tx, key, turn, &runs, head, &mut *probe).await
        })?;
        mark_all(&marks, key);
        landed.into_committed(&turn.target, head, written)
    }
}

/// One attempt at writing a turn, inside its transaction: the nodes written,
/// the nodes to mark once it commits, and where it landed.
async fn commit_attempt<'t>(
    tx: &Client,
    key: StoreKey,
    turn: &TurnCommit<'t>,
    runs: &[RunToStore<'_>],
    head: Option<NodeId>,
    probe: &mut (dyn FnMut(CommitStage) + Send),
) -> Result<(usize, Vec<&'t Node>, Landed)> {
    // Nodes, the bookmark's move (or the new conversation) and the
    // runs go out in one round trip, executed in that order; a lost
    // race that branches takes one more.
    let missing = match turn.thread {
        Some(thread) => Some(find_missing(tx, key, thread).await?),
        None => None,
    };
    let mut pipeline = Pipeline::new();
    let nodes = match &missing {
        Some(missing) => queue_nodes(&mut pipeline, tx, missing.rows()).await?,
        None => None,
    };
    let (conversation, moved) = match (&turn.target, head) {
        (Target::Detached, _) => (None, None),
        (Target::New(new), _) => {
            refuse_taken_name(tx, new.name.as_deref(), new.id.as_ref()).await?;
            let statement = tx.prepare_cached(INSERT_CONVERSATION_ONCE).await?;
            let (id, params) = conversation_params(new, head);
            pipeline.push(tx, statement, params);
            (Some(id), None)
        }
        (Target::Existing { id, .. }, None) => {
            if !conversation_exists(tx, id).await? {
                return Err(StoreError::ConversationNotFound(id.to_string()));
            }
            (Some(id.clone()), None)
        }
        (
            Target::Existing {
                id, expected_head, ..
            },
            Some(head),
        ) => {
            let cas = tx.prepare_cached(COMPARE_AND_SET).await?;
            let at = pipeline.push(tx, cas, cas_params(id, *expected_head, head));
            (Some(id.clone()), Some(at))
        }
    };
    for to_store in runs {
        let owner = conversation.as_ref().or(to_store.run.conversation.as_ref());
        queue_run(&mut pipeline, tx, to_store, owner).await?;
    }
    let changed = pipeline.run().await?;
    probe(CommitStage::NodesWritten);
    let landed = match (&turn.target, moved) {
        (
            Target::Existing {
                id,
                expected_head,
                on_conflict,
            },
            Some(at),
        ) => match (cas_outcome(tx, id, changed[at]).await?, on_conflict) {
            (CasOutcome::Moved, _) => Landed::Moved(id.clone()),
            // Another writer got there with the same turn.
            (CasOutcome::Lost { actual }, _) if actual == head => Landed::Moved(id.clone()),
            (CasOutcome::Lost { actual }, OnConflict::Fail) => Landed::Lost {
                id: id.clone(),
                actual,
            },
            (CasOutcome::Lost { actual }, OnConflict::Branch(new)) => {
                let into = branch(tx, &branch_row(new, id, *expected_head), head, turn).await?;
                Landed::Branched { into, actual }
            }
        },
        _ => match conversation {
            Some(id) => Landed::Moved(id),
            None => Landed::Detached,
        },
    };
    if let Some(conversation) = landed.holding_turn() {
        record_offers(tx, conversation, turn.thread, turn.runs).await?;
    }
    probe(CommitStage::HeadMoved);
    probe(CommitStage::RunsWritten);
    let marks = missing
        .map(|missing| missing.into_marks())
        .unwrap_or_default();
    let written = match &nodes {
        Some(nodes) => nodes.written(tx, &changed).await?,
        None => 0,
    };
    Ok((written, marks, landed))
}

/// Create the conversation a turn that lost its race branches into, and
/// move the turn's runs to it.
async fn branch(
    tx: &impl GenericClient,
    new: &NewConversation,
    head: Option<NodeId>,
    turn: &TurnCommit<'_>,
) -> Result<ConversationId> {
    refuse_taken_name(tx, new.name.as_deref(), new.id.as_ref()).await?;
    let insert = tx.prepare_cached(INSERT_CONVERSATION_ONCE).await?;
    let (id, params) = conversation_params(new, head);
    let reassign = tx
        .prepare_cached("UPDATE runs SET conversation = $1 WHERE id = ANY($2)")
        .await?;
    let runs: Vec<String> = turn.runs.iter().map(|run| run.id.0.clone()).collect();
    let mut pipeline = Pipeline::new();
    pipeline.push(tx, insert, params);
    pipeline.push(tx, reassign, vec![Box::new(id.0.clone()), Box::new(runs)]);
    pipeline.run().await?;
    Ok(id)
}

/// Refuse `name` when a conversation other than `except` has it. Under
/// read committed two transactions could both find the name free, so the
/// check first takes a transaction-scoped advisory lock on the name (in
/// this schema): a second writer waits for the first to commit, then sees
/// its row. Names stored twice before the check existed stay as they are.
async fn refuse_taken_name(
    tx: &impl GenericClient,
    name: Option<&str>,
    except: Option<&ConversationId>,
) -> Result<()> {
    let Some(name) = name else {
        return Ok(());
    };
    let lock = tx
        .prepare_cached(
            "SELECT pg_advisory_xact_lock(hashtext('skein-name:' || current_schema() || ':' || $1::text))",
        )
        .await?;
    tx.execute(&lock, &[&name]).await?;
    let find = tx
        .prepare_cached(
            "SELECT id FROM conversations WHERE name = $1 AND id IS DISTINCT FROM $2::text LIMIT 1",
        )
        .await?;
    let except = except.map(ConversationId::as_str);
    match tx.query_opt(&find, &[&name, &except]).await? {
        Some(row) => Err(name_taken(name, row.get(0))),
        None => Ok(()),
    }
}

async fn conversation_exists(tx: &impl GenericClient, id: &ConversationId) -> Result<bool> {
    let statement = tx
        .prepare_cached("SELECT 1 FROM conversations WHERE id = $1 FOR KEY SHARE")
        .await?;
    Ok(tx.query_opt(&statement, &[&id.as_str()]).await?.is_some())
}

/// The SQL for the root of the node the parameter `$head` names: a
/// conversation's `root`, set wherever its head is (as on SQLite).
macro_rules! root_of {
    ($head:literal) => {
        concat!("(SELECT root FROM nodes WHERE id = ", $head, ")")
    };
}

/// A conversation's row, refused if its id is taken (the test API's
/// `create_conversation`).
#[cfg(any(test, feature = "testkit"))]
const INSERT_CONVERSATION: &str = concat!(
    "INSERT INTO conversations(id, name, head, forked_from_node, forked_from_conversation,
         forked_from_rerun, created, updated, meta, root)
     VALUES ($1, $2, $3, $4, $5, $6, $7, ",
    next_updated!("$7"),
    ", $8, ",
    root_of!("$3::bytea"),
    ")"
);

/// A turn's conversation's row, which a commit retried after its outcome
/// was unknown finds already made.
const INSERT_CONVERSATION_ONCE: &str = concat!(
    "INSERT INTO conversations(id, name, head, forked_from_node, forked_from_conversation,
         forked_from_rerun, created, updated, meta, root)
     VALUES ($1, $2, $3, $4, $5, $6, $7, ",
    next_updated!("$7"),
    ", $8, ",
    root_of!("$3::bytea"),
    ") ON CONFLICT (id) DO NOTHING"
);

/// The parameters of [`INSERT_CONVERSATION_ONCE`] for `new` with its head at
/// `head`, and the conversation's id.
fn conversation_params(
    new: &NewConversation,
    head: Option<NodeId>,
) -> (ConversationId, Vec<Param>) {
    let id = new.id.clone().unwrap_or_else(ConversationId::random);
    let origin = new.origin.clone().unwrap_or_default();
    let params: Vec<Param> = vec![
        Box::new(id.0.clone()),
        Box::new(new.name.clone()),
        Box::new(head.map(|id| id.0.to_vec())),
        Box::new(origin.node.map(|id| id.0.to_vec())),
        Box::new(origin.conversation.map(|id| id.0)),
        Box::new(origin.rerun.map(|id| id.0)),
        Box::new(now_ms()),
        Box::new(new.settings.to_json()),
    ];
    (id, params)
}

#[cfg(any(test, feature = "testkit"))]
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
    "UPDATE conversations SET head = $2, root = ",
    root_of!("$2::bytea"),
    ", updated = ",
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

#[cfg(any(test, feature = "testkit"))]
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

pub(crate) fn conversation_from_row(row: &Row) -> ConversationRecord {
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
        imported: row.get(10),
    }
    .into_conversation()
}
