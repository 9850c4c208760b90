/*!
Conversation bookmarks, what both backends share: where a turn lands
([`Landed`]) and the outcome of the compare-and-set that moves a bookmark,
the conversation a lost race branches into, the row a conversation is read
from ([`ConversationRow`], and the columns it reads), and the stages of a
turn's transaction that crash tests stop at.

A bookmark only moves as a compare-and-set on the head the caller started
from, inside the turn's one transaction; the SQL is in
sqlite/conversations.rs and postgres/conversations.rs.
*/

use crate::error::{HeadMoved, Result, StoreError};
use crate::records::{
    Committed, ConversationId, ConversationRecord, NewConversation, OnConflict, Origin, Target,
    TurnCommit,
};
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
