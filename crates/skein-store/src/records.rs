/*!
The typed rows the store keeps besides nodes: conversations (bookmarks),
runs (occurrences of model calls) and the write a turn commits.
*/

use serde::{Deserialize, Serialize};
use skein_core::{Annotations, NodeId, Thread, ToolSpec, Usage, provider::GenerationOptions};
use std::fmt;

macro_rules! random_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(pub String);

        impl $name {
            /// A fresh random id: 32 hex digits, so every prefix is evenly
            /// spread and short prefixes stay unambiguous.
            pub fn random() -> $name {
                $name(uuid::Uuid::new_v4().simple().to_string())
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }

            /// The form the CLI prints.
            pub fn short(&self) -> &str {
                &self.0[..self.0.len().min(skein_core::id::SHORT_ID_LEN)]
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
}

random_id!(
    /// A conversation (bookmark) id.
    ConversationId
);
random_id!(
    /// A run id.
    RunId
);
random_id!(
    /// A rerun id: one counterfactual re-run of a recorded turn.
    RerunId
);

/// Where a conversation came from when it was forked.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Origin {
    /// The node the fork starts at.
    pub node: Option<NodeId>,
    /// The conversation it was forked from, when known.
    pub conversation: Option<ConversationId>,
    /// The rerun whose counterfactual answer it starts from, if any.
    pub rerun: Option<String>,
}

/// A named, movable bookmark into the graph.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Conversation {
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
    /// Free-form settings the layers above keep (default model, tools by
    /// name, chain limit): never hooks, never credentials.
    pub meta: serde_json::Value,
}

impl Conversation {
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
    pub meta: Option<serde_json::Value>,
}

/// How a run ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    Succeeded,
    Failed,
    Cancelled,
}

impl RunStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Succeeded => "succeeded",
            RunStatus::Failed => "failed",
            RunStatus::Cancelled => "cancelled",
        }
    }

    pub(crate) fn parse(text: &str) -> Option<RunStatus> {
        match text {
            "succeeded" => Some(RunStatus::Succeeded),
            "failed" => Some(RunStatus::Failed),
            "cancelled" => Some(RunStatus::Cancelled),
            _ => None,
        }
    }
}

/// A relationship from a run to another run or grouping (continuation of
/// an exchange, branch, sequence, chain, explicit association). The engine
/// owns the meaning of `kind`; the store keeps it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Relation {
    pub kind: String,
    pub target: String,
}

/// One logical model call, as recorded.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    pub id: RunId,
    pub conversation: Option<ConversationId>,
    /// The request's thread head (the message the model answered).
    pub input_head: Option<NodeId>,
    /// The assistant node the run produced; `None` for a failed run.
    pub output_head: Option<NodeId>,
    pub model: String,
    pub provider: String,
    pub profile: Option<String>,
    pub backend: Option<String>,
    pub status: RunStatus,
    pub usage: Usage,
    /// False when some attempt of the run did not report its usage.
    pub usage_complete: bool,
    pub started_ms: i64,
    pub finished_ms: Option<i64>,
    pub error: Option<String>,
    pub annotations: Annotations,
    /// The tools offered on this call, exactly.
    pub tools: Vec<ToolSpec>,
    pub options: GenerationOptions,
    pub relations: Vec<Relation>,
    /// The exact request body, as a client sent it to the recording proxy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<String>,
    /// The run's observation events (metadata only), oldest first, in the
    /// engine's JSON form less their run id (the record's own): the store
    /// keeps them without interpreting them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub events: Vec<serde_json::Value>,
}

impl RunRecord {
    /// A run record with the given identity and nothing else filled in.
    pub fn new(model: impl Into<String>, provider: impl Into<String>) -> RunRecord {
        RunRecord {
            id: RunId::random(),
            conversation: None,
            input_head: None,
            output_head: None,
            model: model.into(),
            provider: provider.into(),
            profile: None,
            backend: None,
            status: RunStatus::Succeeded,
            usage: Usage::default(),
            usage_complete: true,
            started_ms: now_ms(),
            finished_ms: None,
            error: None,
            annotations: Annotations::new(),
            tools: Vec::new(),
            options: GenerationOptions::default(),
            relations: Vec::new(),
            request: None,
            events: Vec::new(),
        }
    }
}

/// One turn's write: the thread it produced, the runs that produced it, and
/// the bookmark move, committed together or not at all.
#[derive(Clone, Debug)]
pub struct TurnCommit<'a> {
    pub conversation: &'a ConversationId,
    /// The head the turn started from: the bookmark moves only if it still
    /// points there.
    pub expected_head: Option<NodeId>,
    /// The thread after the turn; its head becomes the conversation's head.
    pub thread: &'a Thread,
    pub runs: &'a [RunRecord],
}

/// Unix time in milliseconds.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_millis() as i64)
}
