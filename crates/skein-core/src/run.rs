/*!
Runs as they are recorded, and the ids every layer shares: a [`RunRecord`]
is one logical model call (an occurrence, never content), with typed
[`Relation`]s to other runs and groupings; [`ConversationId`], [`RunId`] and
[`RerunId`] name bookmarks, runs and counterfactual reruns.

These are plain data: the engine produces run records, the store keeps them,
and neither needs the other to name them.
*/

use crate::provider::{FinishReason, GenerationOptions, Usage};
use crate::{Annotations, Digest, NodeId, ToolSpec};
use serde::{Deserialize, Serialize};
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
                &self.0[..self.0.len().min(crate::id::SHORT_ID_LEN)]
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
random_id!(
    /// A replay id: a selection of recorded turns re-sent with one change.
    ReplayId
);

/// Where a conversation came from.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Origin {
    /// The node it starts at.
    pub node: Option<NodeId>,
    /// The conversation it branched from, when it branched from one (a
    /// fork, a reply to an earlier node, a fork from a rerun). A
    /// conversation without one that starts at a stored node merely shares
    /// those messages by content.
    pub conversation: Option<ConversationId>,
    /// The rerun whose counterfactual answer it starts from, if any.
    pub rerun: Option<RerunId>,
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

    pub fn parse(text: &str) -> Option<RunStatus> {
        match text {
            "succeeded" => Some(RunStatus::Succeeded),
            "failed" => Some(RunStatus::Failed),
            "cancelled" => Some(RunStatus::Cancelled),
            _ => None,
        }
    }
}

/// A relationship from a run to another run or to a grouping. Stored as
/// `{"kind": ..., "target": ...}`; kinds this build does not know are kept
/// as [`Relation::Other`] and written back unchanged.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(into = "StoredRelation", from = "StoredRelation")]
#[non_exhaustive]
pub enum Relation {
    /// The run continued the exchange the target run produced.
    ContinuationOf(RunId),
    /// The run belongs to the coordinator sequence with this id.
    Sequence(String),
    /// The run started the coordinator sequence with this id.
    SequenceStart(String),
    /// The application made this run on behalf of the target run.
    AssociatedWith(RunId),
    /// The run is one model call of the tool loop with this id.
    Chain(String),
    /// The run belongs to the engine session with this id.
    Session(String),
    /// The run is a sample or baseline of this rerun.
    Rerun(RerunId),
    /// The run is a model call of a replayed turn of this replay.
    Replay(ReplayId),
    /// A context source present in a recorded turn's request, as the JSON
    /// the recorded-chat layer writes.
    Source(String),
    /// The configured prompt the run's request rendered (its id, version,
    /// variables and the messages it rendered), as the JSON the engine
    /// writes: what a replay needs to render another version in its place.
    Prompt(String),
    /// The run is a model call of a recorded chat that recorded nothing (a
    /// turn that failed, paused or hit its chain limit, or a rerun whose
    /// sample failed), kept so that usage counts it; the target says which
    /// (`failed`, `paused`, `chain_limit`, `rerun_failed`). A recorded
    /// chat never loads such a run as a turn.
    Unrecorded(String),
    /// The run was recorded elsewhere and came in with imported data (the
    /// target says what: `cases`, a cases file): usage counts it only
    /// where it is named, never as work spent here.
    Imported(String),
    /// A relation of a kind this build does not know.
    Other { kind: String, target: String },
}

/// How the stored kind of every relation a replay's runs carry begins:
/// `replay` (a replayed turn's model call) and `replay.judge` (the call a
/// `judge` comparator made while replaying). The store's SQL tests the same
/// prefix (`"kind":"replay`), so the user's history leaves the same runs
/// out in memory and in either backend.
pub const REPLAY_KINDS: &str = "replay";

impl Relation {
    /// Whether this relation marks a run a replay made (its replayed
    /// turns' calls and its judge's), never one of the user's own turns.
    pub fn is_replays(&self) -> bool {
        match self {
            Relation::Replay(_) => true,
            Relation::Other { kind, .. } => kind.starts_with(REPLAY_KINDS),
            _ => false,
        }
    }
}

/// A relation's stored form.
#[derive(Clone, Serialize, Deserialize)]
struct StoredRelation {
    kind: String,
    target: String,
}

impl From<Relation> for StoredRelation {
    fn from(relation: Relation) -> StoredRelation {
        let (kind, target) = match relation {
            Relation::ContinuationOf(run) => ("continuation_of", run.0),
            Relation::Sequence(id) => ("sequence", id),
            Relation::SequenceStart(id) => ("sequence_start", id),
            Relation::AssociatedWith(run) => ("associated_with", run.0),
            Relation::Chain(id) => ("chain", id),
            Relation::Session(id) => ("session", id),
            Relation::Rerun(id) => ("recorded.rerun", id.0),
            Relation::Replay(id) => ("replay", id.0),
            Relation::Source(json) => ("recorded.source", json),
            Relation::Prompt(json) => ("prompt", json),
            Relation::Unrecorded(why) => ("recorded.unrecorded", why),
            Relation::Imported(from) => ("imported", from),
            Relation::Other { kind, target } => return StoredRelation { kind, target },
        };
        StoredRelation {
            kind: kind.to_string(),
            target,
        }
    }
}

impl From<StoredRelation> for Relation {
    fn from(stored: StoredRelation) -> Relation {
        let StoredRelation { kind, target } = stored;
        match kind.as_str() {
            "continuation_of" => Relation::ContinuationOf(RunId(target)),
            "sequence" => Relation::Sequence(target),
            "sequence_start" => Relation::SequenceStart(target),
            "associated_with" => Relation::AssociatedWith(RunId(target)),
            "chain" => Relation::Chain(target),
            "session" => Relation::Session(target),
            "recorded.rerun" => Relation::Rerun(RerunId(target)),
            "replay" => Relation::Replay(ReplayId(target)),
            "recorded.source" => Relation::Source(target),
            "prompt" => Relation::Prompt(target),
            "recorded.unrecorded" => Relation::Unrecorded(target),
            "imported" => Relation::Imported(target),
            _ => Relation::Other { kind, target },
        }
    }
}

/// Where a run stands in a recorded chat: the turn's number and the run's
/// position in that turn's tool loop, both from 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct TurnStep {
    pub turn: u32,
    pub step: u32,
}

/// A stored run's request body, by reference: the BLAKE3 digest of its
/// exact bytes and their length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestRef {
    pub digest: Digest,
    pub len: u64,
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
    /// Why generation ended (`length`: the token limit cut the reply).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish_reason: Option<FinishReason>,
    /// The run's place in a recorded chat, when it belongs to one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn: Option<TurnStep>,
    /// The exact request body, as a client sent it to the recording proxy,
    /// given when the run is recorded (and carried whole by exports). The
    /// store keeps it as content-addressed pieces, not in the run (DESIGN
    /// invariant 13): a stored run read back leaves this empty and says in
    /// [`request_ref`](RunRecord::request_ref) that it kept one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<String>,
    /// What a stored run keeps of its request body: its digest and length
    /// (the store's `request_body` reads the bytes back).
    #[serde(skip)]
    pub request_ref: Option<RequestRef>,
    /// The model the client asked the recording proxy for (its own name,
    /// e.g. `gpt-4o-mini`), which the proxy's model table mapped to
    /// [`model`](RunRecord::model).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requested_model: Option<String>,
    /// The model the provider says answered (its response's `model`, e.g.
    /// a dated version of the alias in [`model`](RunRecord::model)), when
    /// it said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_model: Option<String>,
    /// Which client of the recording proxy made the call, as it identified
    /// itself (the `x-skein-client` header, else OpenAI's `user` or
    /// Anthropic's `metadata.user_id`); per-client retention and selections
    /// read it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<String>,
    /// The run's observation events (metadata only), oldest first, in the
    /// engine's JSON form less their run id (the record's own): the store
    /// keeps them without interpreting them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub events: Vec<serde_json::Value>,
}

impl RunRecord {
    /// Whether the run came in with imported data ([`Relation::Imported`]).
    pub fn is_imported(&self) -> bool {
        self.relations
            .iter()
            .any(|relation| matches!(relation, Relation::Imported(_)))
    }

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
            finish_reason: None,
            turn: None,
            request: None,
            request_ref: None,
            requested_model: None,
            response_model: None,
            client: None,
            events: Vec::new(),
        }
    }

    /// The targets of this run's relations that `pick` selects.
    pub fn related<'a, T>(
        &'a self,
        pick: impl Fn(&'a Relation) -> Option<T> + 'a,
    ) -> impl Iterator<Item = T> + 'a {
        self.relations.iter().filter_map(pick)
    }
}

/// Unix time in milliseconds.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_millis() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relations_keep_their_stored_form_and_unknown_kinds_round_trip() {
        let relations = vec![
            Relation::ContinuationOf(RunId("r1".into())),
            Relation::Chain("c".into()),
            Relation::Rerun(RerunId("x".into())),
            Relation::Replay(ReplayId("p".into())),
            Relation::Unrecorded("paused".into()),
            Relation::Prompt(r#"{"id":"ask"}"#.into()),
            Relation::Other {
                kind: "future.kind".into(),
                target: "t".into(),
            },
        ];
        let json = serde_json::to_string(&relations).unwrap();
        assert_eq!(
            json,
            r#"[{"kind":"continuation_of","target":"r1"},{"kind":"chain","target":"c"},{"kind":"recorded.rerun","target":"x"},{"kind":"replay","target":"p"},{"kind":"recorded.unrecorded","target":"paused"},{"kind":"prompt","target":"{\"id\":\"ask\"}"},{"kind":"future.kind","target":"t"}]"#
        );
        let back: Vec<Relation> = serde_json::from_str(&json).unwrap();
        assert_eq!(back, relations);
    }
}
