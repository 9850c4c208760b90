/*!
Conversation bookmarks on SQLite: create, fork, rename, list, and the one
operation that moves a bookmark: committing a turn (or an explicit head
move), always as a compare-and-set on the head the caller started from. A
turn's nodes, runs and landing are one `BEGIN IMMEDIATE` transaction.
*/

use super::SqliteStore;
use super::graph::append_nodes;
#[cfg(any(test, feature = "testkit"))]
use super::graph::seq_of;
use super::offers::record_offers;
use super::runs::insert_run;
use crate::backend::{Backend, BoxFuture};
use crate::blocking;
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
use rusqlite::{Connection, OptionalExtension, Row, params};
#[cfg(any(test, feature = "testkit"))]
use skein_core::ConversationSettings;
use skein_core::NodeId;

const SELECT_CONVERSATION: &str =
    concat!("SELECT ", conversation_columns!(), " FROM conversations c");

/// The SQL for a conversation's new `updated`: now (the parameter `$now`
/// names), or one millisecond past the database's latest when that is not
/// earlier. Turns take well under a millisecond, so clock time alone would
/// tie, and "most recently updated first" would fall back to id order; this
/// keeps it the order of the writes. (PostgreSQL's twin is in
/// postgres/conversations.rs.)
macro_rules! next_updated {
    ($now:literal) => {
        concat!(
            "MAX(",
            $now,
            ", (SELECT IFNULL(MAX(updated), 0) + 1 FROM conversations))"
        )
    };
}

/// The SQL for the root of the node the parameter `$head` names: what a
/// conversation's `root` column holds (schema.rs), set wherever its head is.
macro_rules! root_of {
    ($head:literal) => {
        concat!("(SELECT root FROM nodes WHERE id = ", $head, ")")
    };
}

impl Conversations for SqliteStore {
    #[cfg(any(test, feature = "testkit"))]
    fn create_conversation(
        &self,
        new: NewConversation,
    ) -> BoxFuture<'_, Result<ConversationRecord>> {
        self.deferred(move |store| store.create_conversation(new.clone()))
    }

    fn conversation<'a>(
        &'a self,
        id: &'a ConversationId,
    ) -> BoxFuture<'a, Result<ConversationRecord>> {
        let id = id.clone();
        self.point_read(move |store| store.conversation(&id))
    }

    fn list_conversations(&self, limit: usize) -> BoxFuture<'_, Result<Vec<ConversationRecord>>> {
        self.deferred(move |store| store.list_conversations(limit))
    }

    fn list_conversations_after<'a>(
        &'a self,
        after: &'a ListPosition,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<ConversationRecord>>> {
        let after = after.clone();
        self.deferred(move |store| store.list_conversations_after(&after, limit))
    }

    fn conversations_at(&self, node: NodeId) -> BoxFuture<'_, Result<Vec<ConversationRecord>>> {
        self.point_read(move |store| store.conversations_at(node))
    }

    fn conversations_by_ids<'a>(
        &'a self,
        ids: &'a [ConversationId],
    ) -> BoxFuture<'a, Result<Vec<ConversationRecord>>> {
        let ids = ids.to_vec();
        self.deferred(move |store| store.conversations_by_ids(&ids))
    }

    fn rename_conversation<'a>(
        &'a self,
        id: &'a ConversationId,
        name: Option<&'a str>,
    ) -> BoxFuture<'a, Result<()>> {
        let (id, name) = (id.clone(), name.map(str::to_string));
        self.deferred(move |store| store.rename_conversation(&id, name.as_deref()))
    }

    #[cfg(any(test, feature = "testkit"))]
    fn set_conversation_settings<'a>(
        &'a self,
        id: &'a ConversationId,
        settings: &'a ConversationSettings,
    ) -> BoxFuture<'a, Result<()>> {
        let (id, settings) = (id.clone(), settings.clone());
        self.deferred(move |store| store.set_conversation_settings(&id, &settings))
    }

    #[cfg(any(test, feature = "testkit"))]
    fn move_head<'a>(
        &'a self,
        id: &'a ConversationId,
        expected: Option<NodeId>,
        new: NodeId,
    ) -> BoxFuture<'a, Result<()>> {
        let id = id.clone();
        self.deferred(move |store| store.move_head(&id, expected, new))
    }

    /// In place, with `probe`; on the blocking pool (a write on a
    /// current-thread runtime that would wait for another writer, which
    /// has no probe to give) from a copy of the turn, whose thread's nodes
    /// are shared, so they are marked as stored all the same.
    fn commit_turn<'a>(
        &'a self,
        turn: &'a TurnCommit<'a>,
        probe: &'a mut (dyn FnMut(CommitStage) + Send),
    ) -> BoxFuture<'a, Result<Committed>> {
        Box::pin(blocking::run_borrowing(
            self,
            |store| store.commit_turn_observed(turn, probe),
            || {
                let target = turn.target.clone();
                let thread = turn.thread.cloned();
                let runs = turn.runs.to_vec();
                move |store: &SqliteStore| {
                    let turn = TurnCommit {
                        target,
                        thread: thread.as_ref(),
                        runs: &runs,
                    };
                    store.commit_turn_observed(&turn, &mut |_| {})
                }
            },
        ))
    }
}

impl SqliteStore {
    #[cfg(any(test, feature = "testkit"))]
    /// Create a conversation, optionally starting at an existing node.
    pub(crate) fn create_conversation(&self, new: NewConversation) -> Result<ConversationRecord> {
        let id = self.write(|tx| {
            if let Some(head) = new.head
                && seq_of(tx, head)?.is_none()
            {
                return Err(StoreError::NodeNotFound(head));
            }
            insert_conversation(tx, &new, new.head, Insert::Strict)
        })?;
        self.conversation(&id)
    }

    pub(crate) fn conversation(&self, id: &ConversationId) -> Result<ConversationRecord> {
        self.read(|conn| {
            conn.prepare_cached(&format!("{SELECT_CONVERSATION} WHERE c.id = ?1"))?
                .query_row([id.as_str()], conversation_from_row)
                .optional()?
                .ok_or_else(|| StoreError::ConversationNotFound(id.to_string()))
        })
    }

    pub(crate) fn conversations_by_ids(
        &self,
        ids: &[ConversationId],
    ) -> Result<Vec<ConversationRecord>> {
        let ids: Vec<&str> = ids.iter().map(ConversationId::as_str).collect();
        let json = serde_json::to_string(&ids)?;
        self.read(|conn| {
            let mut stmt = conn.prepare_cached(&format!(
                "{SELECT_CONVERSATION} WHERE c.id IN (SELECT value FROM json_each(?1))"
            ))?;
            let rows = stmt.query_map([json.as_str()], conversation_from_row)?;
            Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
        })
    }

    pub(crate) fn list_conversations(&self, limit: usize) -> Result<Vec<ConversationRecord>> {
        self.read(|conn| {
            let mut stmt = conn.prepare_cached(&format!(
                "{SELECT_CONVERSATION} ORDER BY c.updated DESC, c.id LIMIT ?1"
            ))?;
            let rows = stmt.query_map([limit as i64], conversation_from_row)?;
            Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
        })
    }

    /// The next page of the listing after `after`. `updated <= ?` first
    /// lets the `updated` index bound the scan.
    pub(crate) fn list_conversations_after(
        &self,
        after: &ListPosition,
        limit: usize,
    ) -> Result<Vec<ConversationRecord>> {
        self.read(|conn| {
            let mut stmt = conn.prepare_cached(&format!(
                "{SELECT_CONVERSATION}
                 WHERE c.updated <= ?1 AND (c.updated < ?1 OR c.id > ?2)
                 ORDER BY c.updated DESC, c.id LIMIT ?3"
            ))?;
            let rows = stmt.query_map(
                params![after.updated_ms, after.id.as_str(), limit as i64],
                conversation_from_row,
            )?;
            Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
        })
    }

    /// Conversations whose head is exactly `node`.
    pub(crate) fn conversations_at(&self, node: NodeId) -> Result<Vec<ConversationRecord>> {
        self.read(|conn| {
            let mut stmt = conn.prepare_cached(&format!(
                "{SELECT_CONVERSATION} WHERE c.head = ?1 ORDER BY c.updated DESC"
            ))?;
            let rows = stmt.query_map([node.as_bytes()], conversation_from_row)?;
            Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
        })
    }

    pub(crate) fn rename_conversation(
        &self,
        id: &ConversationId,
        name: Option<&str>,
    ) -> Result<()> {
        self.update_conversation(id, |tx| {
            refuse_taken_name(tx, name, Some(id))?;
            tx.prepare_cached(concat!(
                "UPDATE conversations SET name = ?2, updated = ",
                next_updated!("?3"),
                " WHERE id = ?1"
            ))?
            .execute(params![id.as_str(), name, now_ms()])
            .map_err(Into::into)
        })
    }

    #[cfg(any(test, feature = "testkit"))]
    /// Replace the conversation's settings.
    pub(crate) fn set_conversation_settings(
        &self,
        id: &ConversationId,
        settings: &ConversationSettings,
    ) -> Result<()> {
        let text = settings.to_json();
        self.update_conversation(id, |tx| {
            tx.prepare_cached(concat!(
                "UPDATE conversations SET meta = ?2, updated = ",
                next_updated!("?3"),
                " WHERE id = ?1"
            ))?
            .execute(params![id.as_str(), text, now_ms()])
            .map_err(Into::into)
        })
    }

    #[cfg(any(test, feature = "testkit"))]
    /// Move a bookmark from `expected` to `new` (a stored node), or report
    /// [`StoreError::HeadMoved`] if someone else moved it first.
    pub(crate) fn move_head(
        &self,
        id: &ConversationId,
        expected: Option<NodeId>,
        new: NodeId,
    ) -> Result<()> {
        let outcome = self.write(|tx| {
            if seq_of(tx, new)?.is_none() {
                return Err(StoreError::NodeNotFound(new));
            }
            compare_and_set_head(tx, id, expected, new)
        })?;
        outcome.into_result(id, expected, Some(new))
    }

    /// [`Store::commit_turn`] with a probe called at each stage inside the
    /// transaction; crash tests use it to die mid-turn.
    #[doc(hidden)]
    pub(crate) fn commit_turn_observed(
        &self,
        turn: &TurnCommit<'_>,
        probe: &mut (dyn FnMut(CommitStage) + Send),
    ) -> Result<Committed> {
        let head = turn_head(turn)?;
        // Bodies are cut before the write lock is taken.
        let runs: Vec<RunToStore<'_>> = turn
            .runs
            .iter()
            .map(|run| RunToStore::cut(run, turn.thread, Some(self.recent_bodies())))
            .collect();
        let mut marks = Vec::new();
        let (written, landed) = self.write(|tx| {
            marks.clear();
            let written = match turn.thread {
                Some(thread) => append_nodes(tx, self.key(), thread, &mut marks)?,
                None => 0,
            };
            probe(CommitStage::NodesWritten);
            let landed = land(tx, &turn.target, head)?;
            probe(CommitStage::HeadMoved);
            for to_store in &runs {
                let owner = landed.conversation().or(to_store.run.conversation.as_ref());
                insert_run(tx, to_store, owner)?;
            }
            if let Some(conversation) = landed.holding_turn() {
                record_offers(tx, conversation, turn.thread, turn.runs)?;
            }
            probe(CommitStage::RunsWritten);
            Ok((written, landed))
        })?;
        mark_all(&marks, self.key());
        landed.into_committed(&turn.target, head, written)
    }
}

impl SqliteStore {
    fn update_conversation(
        &self,
        id: &ConversationId,
        mut update: impl FnMut(&Connection) -> Result<usize>,
    ) -> Result<()> {
        let changed = self.write(|tx| update(tx))?;
        if changed == 0 {
            return Err(StoreError::ConversationNotFound(id.to_string()));
        }
        Ok(())
    }
}

/// Move, create or branch the turn's conversation.
fn land(tx: &Connection, target: &Target, head: Option<NodeId>) -> Result<Landed> {
    Ok(match target {
        Target::Detached => Landed::Detached,
        Target::New(new) => Landed::Moved(insert_conversation(tx, new, head, Insert::Once)?),
        Target::Existing {
            id,
            expected_head,
            on_conflict,
        } => {
            let Some(head) = head else {
                // Runs only: the conversation must exist, and stays put.
                require_conversation(tx, id)?;
                return Ok(Landed::Moved(id.clone()));
            };
            match (
                compare_and_set_head(tx, id, *expected_head, head)?,
                on_conflict,
            ) {
                (CasOutcome::Moved, _) => Landed::Moved(id.clone()),
                // Another writer got there with the same turn (a
                // deterministic model, the same request): it stands where
                // this turn would put it.
                (CasOutcome::Lost { actual }, _) if actual == Some(head) => {
                    Landed::Moved(id.clone())
                }
                (CasOutcome::Lost { actual }, OnConflict::Fail) => Landed::Lost {
                    id: id.clone(),
                    actual,
                },
                (CasOutcome::Lost { actual }, OnConflict::Branch(new)) => Landed::Branched {
                    into: insert_conversation(
                        tx,
                        &branch_row(new, id, *expected_head),
                        Some(head),
                        Insert::Once,
                    )?,
                    actual,
                },
            }
        }
    })
}

fn require_conversation(tx: &Connection, id: &ConversationId) -> Result<()> {
    tx.prepare_cached("SELECT 1 FROM conversations WHERE id = ?1")?
        .query_row([id.as_str()], |_| Ok(()))
        .optional()?
        .ok_or_else(|| StoreError::ConversationNotFound(id.to_string()))
}

/// Whether a conversation's row may already be there.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Insert {
    /// No: an id taken is an error (the test API's `create_conversation`).
    #[cfg(any(test, feature = "testkit"))]
    Strict,
    /// A turn's conversation, which a commit retried after its outcome was
    /// unknown finds already made: the row is left as it is.
    Once,
}

/// Insert a conversation row with its head at `head`; returns its id.
fn insert_conversation(
    tx: &Connection,
    new: &NewConversation,
    head: Option<NodeId>,
    insert: Insert,
) -> Result<ConversationId> {
    let own = new.id.as_ref().filter(|_| insert == Insert::Once);
    refuse_taken_name(tx, new.name.as_deref(), own)?;
    let id = new.id.clone().unwrap_or_else(ConversationId::random);
    let origin = new.origin.clone().unwrap_or_default();
    macro_rules! insert_sql {
        ($($conflict:literal)?) => {
            concat!(
                "INSERT INTO conversations(id, name, head, forked_from_node, forked_from_conversation,
                     forked_from_rerun, created, updated, meta, root)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ",
                next_updated!("?7"),
                ", ?8, ",
                root_of!("?3"),
                ")",
                $($conflict)?
            )
        };
    }
    let sql = match insert {
        #[cfg(any(test, feature = "testkit"))]
        Insert::Strict => insert_sql!(),
        Insert::Once => insert_sql!(" ON CONFLICT(id) DO NOTHING"),
    };
    tx.prepare_cached(sql)?.execute(params![
        id.as_str(),
        new.name,
        head.as_ref().map(NodeId::as_bytes),
        origin.node.as_ref().map(NodeId::as_bytes),
        origin.conversation.as_ref().map(ConversationId::as_str),
        origin.rerun.as_ref().map(|rerun| rerun.as_str()),
        now_ms(),
        new.settings.to_json(),
    ])?;
    Ok(id)
}

/// Refuse `name` when a conversation other than `except` has it. Writes
/// run in `BEGIN IMMEDIATE` transactions, one at a time, so no other
/// writer can take the name between this check and the commit. Names
/// stored twice before the check existed stay as they are.
fn refuse_taken_name(
    tx: &Connection,
    name: Option<&str>,
    except: Option<&ConversationId>,
) -> Result<()> {
    let Some(name) = name else {
        return Ok(());
    };
    let by: Option<String> = tx
        .prepare_cached("SELECT id FROM conversations WHERE name = ?1 AND id IS NOT ?2 LIMIT 1")?
        .query_row(params![name, except.map(ConversationId::as_str)], |row| {
            row.get(0)
        })
        .optional()?;
    match by {
        Some(by) => Err(name_taken(name, by)),
        None => Ok(()),
    }
}

fn compare_and_set_head(
    conn: &Connection,
    id: &ConversationId,
    expected: Option<NodeId>,
    new: NodeId,
) -> Result<CasOutcome> {
    let changed = conn
        .prepare_cached(concat!(
            "UPDATE conversations SET head = ?2, updated = ",
            next_updated!("?3"),
            " WHERE id = ?1 AND head IS ?4"
        ))?
        .execute(params![
            id.as_str(),
            new.as_bytes(),
            now_ms(),
            expected.as_ref().map(NodeId::as_bytes)
        ])?;
    if changed == 1 {
        // The root changes only when the head leaves its tree; writing it
        // only then keeps `conversations_by_root` out of every turn.
        conn.prepare_cached(concat!(
            "UPDATE conversations SET root = ",
            root_of!("?2"),
            " WHERE id = ?1 AND root IS NOT ",
            root_of!("?2")
        ))?
        .execute(params![id.as_str(), new.as_bytes()])?;
        return Ok(CasOutcome::Moved);
    }
    let actual: Option<Option<Vec<u8>>> = conn
        .prepare_cached("SELECT head FROM conversations WHERE id = ?1")?
        .query_row([id.as_str()], |row| row.get(0))
        .optional()?;
    match actual {
        None => Err(StoreError::ConversationNotFound(id.to_string())),
        Some(actual) => Ok(CasOutcome::Lost {
            actual: actual.as_deref().and_then(NodeId::from_slice),
        }),
    }
}

pub(crate) fn conversation_from_row(row: &Row<'_>) -> rusqlite::Result<ConversationRecord> {
    let head: Option<Vec<u8>> = row.get(2)?;
    let origin_node: Option<Vec<u8>> = row.get(4)?;
    let meta: String = row.get(9)?;
    Ok(ConversationRow {
        id: row.get(0)?,
        name: row.get(1)?,
        head: head.as_deref(),
        head_depth: row.get(3)?,
        origin_node: origin_node.as_deref(),
        origin_conversation: row.get(5)?,
        origin_rerun: row.get(6)?,
        created_ms: row.get(7)?,
        updated_ms: row.get(8)?,
        meta: &meta,
        imported: row.get(10)?,
    }
    .into_conversation())
}
