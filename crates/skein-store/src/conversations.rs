/*!
Conversation bookmarks, what both backends share: where a turn lands
([`Landed`]) and the outcome of the compare-and-set that moves a bookmark,
the conversation a lost race branches into, the row a conversation is read
from ([`ConversationRow`], and the columns it reads), and the stages of a
turn's transaction that crash tests stop at.

A bookmark only moves as a compare-and-set on the head the caller started
from, inside the turn's one transaction; the SQL is in
sqlite/conversations.rs and postgres/conversations.rs.

This module declares `Conversations`, the backend trait
sqlite/conversations.rs and postgres/conversations.rs implement, and holds
the public operations that call it: the async ones on `AsyncStore` and their
blocking forms on `Store`.
*/

use crate::CommitStageProbe;
use crate::async_store::AsyncStore;
use crate::backend::BoxFuture;
use crate::error::{HeadMoved, Result, StoreError};
use crate::records::{
    Committed, ConversationId, ConversationRecord, ListPosition, NewConversation, OnConflict,
    Origin, Target, TurnCommit,
};
use crate::store::Store;
use skein_core::{ConversationSettings, NodeId};

/// The columns [`ConversationRow`] reads, from `conversations c`, on both
/// backends. The depth is a subquery, not a join: SQLite flags joined
/// statements with bound parameters for re-preparation, which defeats the
/// statement cache.
macro_rules! conversation_columns {
    () => {
        "c.id, c.name, c.head, (SELECT n.depth FROM nodes n WHERE n.id = c.head),
        c.forked_from_node, c.forked_from_conversation, c.forked_from_rerun, c.created, c.updated, c.meta,
        c.imported"
    };
}

pub(crate) use conversation_columns;

/// Conversation bookmarks and the turn commit: the SQL is in
/// sqlite/conversations.rs and postgres/conversations.rs.
pub(crate) trait Conversations {
    #[cfg(any(test, feature = "testkit"))]
    fn create_conversation(
        &self,
        new: NewConversation,
    ) -> BoxFuture<'_, Result<ConversationRecord>>;
    fn conversation<'a>(
        &'a self,
        id: &'a ConversationId,
    ) -> BoxFuture<'a, Result<ConversationRecord>>;
    fn list_conversations(&self, limit: usize) -> BoxFuture<'_, Result<Vec<ConversationRecord>>>;
    fn list_conversations_after<'a>(
        &'a self,
        after: &'a ListPosition,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<ConversationRecord>>>;
    fn conversations_at(&self, node: NodeId) -> BoxFuture<'_, Result<Vec<ConversationRecord>>>;
    fn conversations_by_ids<'a>(
        &'a self,
        ids: &'a [ConversationId],
    ) -> BoxFuture<'a, Result<Vec<ConversationRecord>>>;
    fn rename_conversation<'a>(
        &'a self,
        id: &'a ConversationId,
        name: Option<&'a str>,
    ) -> BoxFuture<'a, Result<()>>;
    #[cfg(any(test, feature = "testkit"))]
    fn set_conversation_settings<'a>(
        &'a self,
        id: &'a ConversationId,
        settings: &'a ConversationSettings,
    ) -> BoxFuture<'a, Result<()>>;
    #[cfg(any(test, feature = "testkit"))]
    fn move_head<'a>(
        &'a self,
        id: &'a ConversationId,
        expected: Option<NodeId>,
        new: NodeId,
    ) -> BoxFuture<'a, Result<()>>;
    /// The turn commit, with `probe` called at each stage inside the
    /// transaction (crash tests die there).
    fn commit_turn<'a>(
        &'a self,
        turn: &'a TurnCommit<'a>,
        probe: &'a mut (dyn FnMut(CommitStageProbe) + Send),
    ) -> BoxFuture<'a, Result<Committed>>;
}

/// Where a turn landed, inside its transaction.
pub(crate) enum Landed {
    Detached,
    Moved(ConversationId),
    /// The head had moved and the turn failed (its nodes and runs stay).
    Lost {
        id: ConversationId,
        actual: Option<NodeId>,
    },
    Branched {
        into: ConversationId,
        actual: Option<NodeId>,
    },
}

impl Landed {
    /// The conversation the turn's runs belong to (`None`: the one each
    /// names).
    pub(crate) fn conversation(&self) -> Option<&ConversationId> {
        match self {
            Landed::Detached => None,
            Landed::Moved(id) | Landed::Lost { id, .. } => Some(id),
            Landed::Branched { into, .. } => Some(into),
        }
    }

    /// The conversation whose thread now holds the turn (moved to it, or
    /// created or branched at it).
    pub(crate) fn holding_turn(&self) -> Option<&ConversationId> {
        match self {
            Landed::Moved(id) | Landed::Branched { into: id, .. } => Some(id),
            Landed::Detached | Landed::Lost { .. } => None,
        }
    }

    pub(crate) fn into_committed(
        self,
        target: &Target,
        head: Option<NodeId>,
        written: usize,
    ) -> Result<Committed> {
        let (conversation, branched_from) = match self {
            Landed::Detached => (None, None),
            Landed::Moved(id) => (Some(id), None),
            Landed::Branched { into, actual } => (Some(into), Some(actual)),
            Landed::Lost { id, actual } => {
                let expected = match target {
                    Target::Existing { expected_head, .. } => *expected_head,
                    _ => None,
                };
                return CasOutcome::Lost { actual }
                    .into_result(&id, expected, head)
                    .map(|()| unreachable!("a lost race is an error"));
            }
        };
        Ok(Committed {
            conversation,
            head,
            written,
            branched_from,
        })
    }
}

/// The shortest text read as an id prefix before a name: shorter hex text
/// (`e`, `add`) may be a name.
pub(crate) const SHORTEST_ID_PREFIX: usize = 4;

/// The fewest and most hexadecimal digits a name may not consist of
/// alone: the shortest id prefix people type, and a node id's length.
const ID_LIKE_DIGITS: std::ops::RangeInclusive<usize> = SHORTEST_ID_PREFIX..=64;

/// Refuse a conversation name that could be read as an id: 4 to 64
/// hexadecimal digits, in any case, around whitespace. Every way a name is
/// set (creating, renaming, a turn that creates or branches a conversation)
/// passes here; surfaces call it too, to refuse such a name before any
/// model runs. Names already stored are read as they are.
pub fn check_conversation_name(name: &str) -> Result<()> {
    let trimmed = name.trim();
    let id_like = ID_LIKE_DIGITS.contains(&trimmed.len())
        && trimmed.bytes().all(|byte| byte.is_ascii_hexdigit());
    match id_like {
        true => Err(StoreError::NameLooksLikeId(name.to_string())),
        false => Ok(()),
    }
}

/// [`check_conversation_name`] for every conversation `turn` may create.
pub(crate) fn check_turn_names(turn: &TurnCommit<'_>) -> Result<()> {
    let new = match &turn.target {
        Target::New(new)
        | Target::Existing {
            on_conflict: OnConflict::Branch(new),
            ..
        } => Some(new),
        _ => None,
    };
    match new.and_then(|new| new.name.as_deref()) {
        Some(name) => check_conversation_name(name),
        None => Ok(()),
    }
}

/// The error for `name`, which conversation `by` (an id) already has.
pub(crate) fn name_taken(name: &str, by: String) -> StoreError {
    StoreError::NameTaken {
        name: name.to_string(),
        by,
    }
}

/// The head a turn moves its conversation to; a thread must have one.
pub(crate) fn turn_head(turn: &TurnCommit<'_>) -> Result<Option<NodeId>> {
    match turn.thread {
        None => Ok(None),
        Some(thread) => thread
            .head_id()
            .map(Some)
            .ok_or_else(|| StoreError::MalformedRow("a turn must end at a node".into())),
    }
}

/// The conversation a branch made on a lost race is created as: origin at
/// the node the turn started from, in the conversation it continued.
pub(crate) fn branch_row(
    new: &NewConversation,
    from: &ConversationId,
    expected: Option<NodeId>,
) -> NewConversation {
    let mut new = new.clone();
    new.id.get_or_insert_with(ConversationId::random);
    new.origin = Some(Origin {
        node: expected,
        conversation: Some(from.clone()),
        rerun: None,
    });
    new
}

/// Points inside a turn's transaction, for crash tests.
#[doc(hidden)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CommitStage {
    NodesWritten,
    RunsWritten,
    HeadMoved,
}

pub(crate) enum CasOutcome {
    Moved,
    Lost { actual: Option<NodeId> },
}

impl CasOutcome {
    pub(crate) fn into_result(
        self,
        id: &ConversationId,
        expected: Option<NodeId>,
        turn_head: Option<NodeId>,
    ) -> Result<()> {
        match self {
            CasOutcome::Moved => Ok(()),
            CasOutcome::Lost { actual } => Err(StoreError::HeadMoved(Box::new(HeadMoved {
                conversation: id.to_string(),
                expected,
                actual,
                turn_head,
            }))),
        }
    }
}

/// A conversation row's columns, as either backend reads them.
pub(crate) struct ConversationRow<'r> {
    pub id: String,
    pub name: Option<String>,
    pub head: Option<&'r [u8]>,
    pub head_depth: Option<i64>,
    pub origin_node: Option<&'r [u8]>,
    pub origin_conversation: Option<String>,
    pub origin_rerun: Option<String>,
    pub created_ms: i64,
    pub updated_ms: i64,
    pub meta: &'r str,
    pub imported: bool,
}

impl ConversationRow<'_> {
    pub(crate) fn into_conversation(self) -> ConversationRecord {
        let origin_node = self.origin_node.and_then(NodeId::from_slice);
        let origin = (origin_node.is_some()
            || self.origin_conversation.is_some()
            || self.origin_rerun.is_some())
        .then(|| Origin {
            node: origin_node,
            conversation: self.origin_conversation.map(ConversationId),
            rerun: self.origin_rerun.map(skein_core::RerunId),
        });
        ConversationRecord {
            id: ConversationId(self.id),
            name: self.name,
            head: self.head.and_then(NodeId::from_slice),
            len: self.head_depth.map_or(0, |depth| depth as u64 + 1),
            origin,
            created_ms: self.created_ms,
            updated_ms: self.updated_ms,
            // Unreadable settings (only a tampered row has them) read as the
            // defaults; `skein verify` reports the row.
            settings: ConversationSettings::from_json(self.meta).unwrap_or_default(),
            imported: self.imported,
        }
    }
}

impl AsyncStore<'_> {
    #[cfg(any(test, feature = "testkit"))]
    /// [`Store::create_conversation`].
    pub async fn create_conversation(&self, new: NewConversation) -> Result<ConversationRecord> {
        if let Some(name) = &new.name {
            check_conversation_name(name)?;
        }
        self.store.backend().create_conversation(new).await
    }

    #[cfg(any(test, feature = "testkit"))]
    /// [`Store::fork`].
    pub async fn fork(
        &self,
        node: NodeId,
        name: Option<String>,
        from: Option<ConversationId>,
    ) -> Result<ConversationRecord> {
        self.create_conversation(NewConversation {
            id: None,
            name,
            head: Some(node),
            origin: Some(Origin {
                node: Some(node),
                conversation: from,
                rerun: None,
            }),
            settings: Default::default(),
        })
        .await
    }

    /// [`Store::conversation`].
    pub async fn conversation(&self, id: &ConversationId) -> Result<ConversationRecord> {
        self.store.backend().conversation(id).await
    }

    /// [`Store::list_conversations`].
    pub async fn list_conversations(&self, limit: usize) -> Result<Vec<ConversationRecord>> {
        self.store.backend().list_conversations(limit).await
    }

    /// [`Store::list_conversations_after`].
    pub async fn list_conversations_after(
        &self,
        after: &ListPosition,
        limit: usize,
    ) -> Result<Vec<ConversationRecord>> {
        self.store
            .backend()
            .list_conversations_after(after, limit)
            .await
    }

    /// [`Store::conversations_at`].
    pub async fn conversations_at(&self, node: NodeId) -> Result<Vec<ConversationRecord>> {
        self.store.backend().conversations_at(node).await
    }

    /// [`Store::conversations_by_ids`].
    pub async fn conversations_by_ids(
        &self,
        ids: &[ConversationId],
    ) -> Result<Vec<ConversationRecord>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        self.store.backend().conversations_by_ids(ids).await
    }

    /// [`Store::rename_conversation`].
    pub async fn rename_conversation(&self, id: &ConversationId, name: Option<&str>) -> Result<()> {
        if let Some(name) = name {
            check_conversation_name(name)?;
        }
        self.store.backend().rename_conversation(id, name).await
    }

    #[cfg(any(test, feature = "testkit"))]
    /// [`Store::set_conversation_settings`].
    pub async fn set_conversation_settings(
        &self,
        id: &ConversationId,
        settings: &ConversationSettings,
    ) -> Result<()> {
        self.store
            .backend()
            .set_conversation_settings(id, settings)
            .await
    }

    #[cfg(any(test, feature = "testkit"))]
    /// [`Store::move_head`].
    pub async fn move_head(
        &self,
        id: &ConversationId,
        expected: Option<NodeId>,
        new: NodeId,
    ) -> Result<()> {
        self.store.backend().move_head(id, expected, new).await
    }

    /// [`Store::commit_turn`]. On SQLite, from a current-thread runtime, a
    /// turn that would wait for another writer is committed on the
    /// blocking pool from a copy (its thread's nodes are shared, so they
    /// are marked as stored all the same).
    pub async fn commit_turn(&self, turn: &TurnCommit<'_>) -> Result<Committed> {
        check_turn_names(turn)?;
        let mut no_probe = |_| {};
        self.store.backend().commit_turn(turn, &mut no_probe).await
    }
}

impl Store {
    #[cfg(any(test, feature = "testkit"))]
    /// Create a conversation, optionally starting at an existing node. A
    /// name that reads as an id is refused
    /// ([`StoreError::NameLooksLikeId`](crate::StoreError::NameLooksLikeId),
    /// see [`check_conversation_name`](crate::check_conversation_name)),
    /// and so is one another conversation has
    /// ([`StoreError::NameTaken`](crate::StoreError::NameTaken)).
    pub fn create_conversation(&self, new: NewConversation) -> Result<ConversationRecord> {
        self.wait(self.nonblocking().create_conversation(new))
    }

    #[cfg(any(test, feature = "testkit"))]
    /// Fork: a new conversation whose head is `node` (any stored node),
    /// recording where it came from. O(1); the origin is never touched.
    pub fn fork(
        &self,
        node: NodeId,
        name: Option<String>,
        from: Option<ConversationId>,
    ) -> Result<ConversationRecord> {
        self.wait(self.nonblocking().fork(node, name, from))
    }

    pub fn conversation(&self, id: &ConversationId) -> Result<ConversationRecord> {
        self.wait(self.nonblocking().conversation(id))
    }

    /// Conversations, most recently updated first.
    pub fn list_conversations(&self, limit: usize) -> Result<Vec<ConversationRecord>> {
        self.wait(self.nonblocking().list_conversations(limit))
    }

    /// The conversations listed after `after` (the last one of the previous
    /// page), in the same order, at most `limit`. Paging this way lists every
    /// conversation once; one updated while the pages are read moves to the
    /// front of the listing and is not listed again.
    pub fn list_conversations_after(
        &self,
        after: &ListPosition,
        limit: usize,
    ) -> Result<Vec<ConversationRecord>> {
        self.wait(self.nonblocking().list_conversations_after(after, limit))
    }

    /// Conversations whose head is exactly `node`.
    pub fn conversations_at(&self, node: NodeId) -> Result<Vec<ConversationRecord>> {
        self.wait(self.nonblocking().conversations_at(node))
    }

    /// The conversations of these ids that exist, in no order, in one
    /// statement (a listing naming the conversations of many rows).
    pub fn conversations_by_ids(&self, ids: &[ConversationId]) -> Result<Vec<ConversationRecord>> {
        self.wait(self.nonblocking().conversations_by_ids(ids))
    }

    /// Name the conversation (`None` removes its name). A name that reads
    /// as an id, or that another conversation has, is refused, as on
    /// creation, and nothing changes.
    pub fn rename_conversation(&self, id: &ConversationId, name: Option<&str>) -> Result<()> {
        self.wait(self.nonblocking().rename_conversation(id, name))
    }

    #[cfg(any(test, feature = "testkit"))]
    /// Replace the conversation's settings.
    pub fn set_conversation_settings(
        &self,
        id: &ConversationId,
        settings: &ConversationSettings,
    ) -> Result<()> {
        self.wait(self.nonblocking().set_conversation_settings(id, settings))
    }

    #[cfg(any(test, feature = "testkit"))]
    /// Move a bookmark from `expected` to `new` (a stored node), or report
    /// [`StoreError::HeadMoved`](crate::StoreError::HeadMoved) if someone else moved it first.
    pub fn move_head(
        &self,
        id: &ConversationId,
        expected: Option<NodeId>,
        new: NodeId,
    ) -> Result<()> {
        self.wait(self.nonblocking().move_head(id, expected, new))
    }

    /// Commit a turn in one transaction: its nodes, its runs, and where it
    /// lands (the bookmark moved by compare-and-set, a conversation created
    /// with it, or none for a failed first turn). When the bookmark moved
    /// since `expected_head`, the nodes and runs are still committed
    /// (nothing is lost) and the turn either fails with
    /// [`StoreError::HeadMoved`](crate::StoreError::HeadMoved) naming the node where it stands, or
    /// branches into a new conversation, as the target's `on_conflict` says.
    /// A conversation it would create under a name that reads as an id is
    /// refused before anything is written; one under a name another
    /// conversation has ([`StoreError::NameTaken`](crate::StoreError::NameTaken))
    /// is refused inside the transaction, which then writes nothing.
    pub fn commit_turn(&self, turn: &TurnCommit<'_>) -> Result<Committed> {
        check_turn_names(turn)?;
        self.wait(self.backend().commit_turn(turn, &mut |_| {}))
    }

    #[cfg(any(test, feature = "testkit"))]
    /// [`Store::commit_turn`] with a probe called at each stage inside the
    /// transaction; crash tests use it to die mid-turn.
    #[doc(hidden)]
    pub fn commit_turn_observed(
        &self,
        turn: &TurnCommit<'_>,
        probe: &mut (dyn FnMut(CommitStageProbe) + Send),
    ) -> Result<Committed> {
        check_turn_names(turn)?;
        self.wait(self.backend().commit_turn(turn, probe))
    }
}
