/*!
The typed rows the store keeps besides nodes: conversations (bookmarks) and
the write a turn commits. Run records and the ids every layer shares live in
`skein-core` ([`skein_core::run`]) and are re-exported here.
*/

use serde::{Deserialize, Deserializer, Serialize};
use skein_core::{ConversationSettings, NodeId, Thread};

pub use skein_core::run::{
    ConversationId, Origin, Relation, ReplayId, RequestRef, RerunId, RunId, RunRecord, RunStatus,
    TurnStep, now_ms,
};

/// A named, movable bookmark into the graph, as the store keeps it (the
/// live handle that runs turns is `skein::Conversation`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConversationRecord {
    pub id: ConversationId,
    pub name: Option<String>,
    /// The newest node; `None` for a conversation with no turns yet.
    pub head: Option<NodeId>,
    /// Messages in the conversation's thread (head depth + 1).
    pub len: u64,
    pub origin: Option<Origin>,
    /// Unix time in milliseconds.
    pub created_ms: i64,
    pub updated_ms: i64,
    /// Its settings (model, tools by name, chain limit, title...): never
    /// hooks, never credentials. Exports call them `meta`.
    #[serde(rename = "meta", default, deserialize_with = "settings_or_default")]
    pub settings: ConversationSettings,
    /// Written by an import (an export or an `llm` database) rather than
    /// recorded here. Local to this database: exports do not carry it.
    #[serde(skip)]
    pub imported: bool,
}

impl ConversationRecord {
    /// Its name, else its title, else nothing: what listings show.
    pub fn label(&self) -> Option<&str> {
        self.name.as_deref().or(self.settings.title.as_deref())
    }
}

/// Settings as an export holds them: `null` (written by skein versions
/// that could not read a row's settings) is the defaults.
fn settings_or_default<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<ConversationSettings, D::Error> {
    Ok(Option::<ConversationSettings>::deserialize(deserializer)?.unwrap_or_default())
}

impl ConversationRecord {
    /// Where this conversation stands in the listing (most recently
    /// updated first): where the next page starts after it.
    pub fn position(&self) -> ListPosition {
        ListPosition {
            updated_ms: self.updated_ms,
            id: self.id.clone(),
        }
    }
}

/// A place in the conversation listing, the last conversation of a page:
/// [`crate::Store::list_conversations_after`] goes on from there. Listing
/// order is `updated` descending, then id ascending.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ListPosition {
    pub updated_ms: i64,
    pub id: ConversationId,
}

/// What to create a conversation with.
#[derive(Clone, Debug, Default)]
pub struct NewConversation {
    /// The id to give it; a fresh random one when `None`. (A conversation
    /// made in memory keeps its id when it is stored later.)
    pub id: Option<ConversationId>,
    pub name: Option<String>,
    pub head: Option<NodeId>,
    pub origin: Option<Origin>,
    pub settings: ConversationSettings,
}

/// One turn's write: the thread it produced, the runs that produced it, and
/// where it lands (a bookmark moved by compare-and-set, or a conversation
/// created with it), committed together in one transaction or not at all.
/// A failed run is written the same way, with no thread.
#[derive(Clone, Debug)]
pub struct TurnCommit<'a> {
    pub target: Target,
    /// The thread after the turn; its head becomes the conversation's head.
    /// `None` writes only the runs (a failed run adds no node).
    pub thread: Option<&'a Thread>,
    /// The turn's runs. Each is recorded as belonging to the conversation
    /// the turn lands in, whatever its `conversation` field says (but see
    /// [`Target::Detached`]).
    pub runs: &'a [RunRecord],
}

impl<'a> TurnCommit<'a> {
    /// A turn continuing conversation `id` from `expected_head`, failing
    /// with [`StoreError::HeadMoved`](crate::StoreError::HeadMoved) when
    /// another writer moved the head first.
    pub fn continuing(
        id: &ConversationId,
        expected_head: Option<NodeId>,
        thread: &'a Thread,
        runs: &'a [RunRecord],
    ) -> TurnCommit<'a> {
        TurnCommit {
            target: Target::Existing {
                id: id.clone(),
                expected_head,
                on_conflict: OnConflict::Fail,
            },
            thread: Some(thread),
            runs,
        }
    }
}

/// Where a turn lands.
#[derive(Clone, Debug)]
pub enum Target {
    /// An existing conversation, whose head moves to the thread's head only
    /// if it still points at `expected_head`.
    Existing {
        id: ConversationId,
        expected_head: Option<NodeId>,
        /// What to do when another writer moved the head first.
        on_conflict: OnConflict,
    },
    /// A conversation created in the same transaction, at the thread's head
    /// (its `head` field is ignored).
    New(Box<NewConversation>),
    /// No bookmark moves or is created: the thread's nodes are stored and
    /// each run belongs to the conversation its record names, if any (a
    /// first turn that failed; a response logged after its conversation
    /// moved on).
    Detached,
}

/// What a turn does when its conversation moved on while it ran. Either
/// way its nodes and runs are stored: nothing is lost. (When the other
/// writer moved the head to this very turn's head, as two identical
/// requests to a deterministic model do, the turn simply succeeds.)
#[derive(Clone, Debug)]
pub enum OnConflict {
    /// Fail with [`StoreError::HeadMoved`](crate::StoreError::HeadMoved),
    /// leaving the bookmark where the other writer put it.
    Fail,
    /// Create this conversation at the turn's head instead, in the same
    /// transaction (its `head` and `origin` are set by the store: the
    /// origin names the conversation and the node the turn started from).
    Branch(Box<NewConversation>),
}

/// What a committed turn did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Committed {
    /// The conversation the turn landed in (`None` when detached).
    pub conversation: Option<ConversationId>,
    /// The turn's head.
    pub head: Option<NodeId>,
    /// Nodes this database did not hold before.
    pub written: usize,
    /// Set when the turn branched because the conversation it continued
    /// had moved on: where that conversation's head stood.
    pub branched_from: Option<Option<NodeId>>,
}
