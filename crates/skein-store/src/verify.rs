/*!
`verify`: recompute every node id from its parent and content (an erased
part enters with the digest its erasure kept, so an erased node checks and
is counted as erased, while any other change to it is an id mismatch), check depths,
roles and roots, re-hash every blob, check that every conversation's head and
origin node, every run's conversation, heads and offered tools, every
replayed turn's nodes and runs and every label's node are stored, that every
conversation's origin conversation is stored or was deleted on purpose
(recorded in `deleted_conversations` by the deletion), and report each problem found (it never stops at the first, and
never repairs).

The checks are shared by both backends ([`VerifyReport::check_node`] and
friends); each backend only streams its rows through them
(sqlite/verify.rs, postgres/verify.rs).

This module declares `Verify`, the backend trait sqlite/verify.rs and
postgres/verify.rs implement, and holds the public operations that call it:
on `Store`, blocking only.
*/

use crate::bodies::RequestBody;
use crate::error::Result;
use crate::store::Store;
use serde::Serialize;
use skein_core::encoding::node_id;
use skein_core::{Digest, Message, NodeId};

/// Streaming every row through the shared checks: the SQL is in
/// sqlite/verify.rs and postgres/verify.rs.
pub(crate) trait Verify {
    fn verify(&self) -> Result<VerifyReport>;
}

/// One inconsistency `verify` found.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "problem", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Problem {
    /// The stored content hashes to another id: the row was altered.
    IdMismatch { id: String, computed: String },
    /// The body cannot be decoded (or names a missing blob).
    Undecodable { id: String, error: String },
    /// The depth column disagrees with the parent's depth.
    DepthMismatch {
        id: String,
        stored: i64,
        expected: i64,
    },
    /// The role column disagrees with the body.
    RoleMismatch { id: String },
    /// A blob's bytes no longer hash to its digest.
    BlobMismatch { digest: String },
    /// A conversation's head is not a stored node.
    DanglingHead { conversation: String },
    /// A conversation's origin (the node it was forked at) is not stored.
    DanglingOrigin { conversation: String, node: String },
    /// A conversation was forked from a conversation that is not stored
    /// and that no deletion recorded (`skein delete` records the
    /// conversations it deletes that forks still name, so those count in
    /// [`VerifyReport::origins_deleted`] instead).
    MissingOriginConversation {
        conversation: String,
        origin: String,
    },
    /// A run belongs to a conversation that is not stored.
    RunWithoutConversation { run: String, conversation: String },
    /// A run's input head (`head: "input"`) or output head (`"output"`)
    /// is not a stored node.
    RunWithoutNode {
        run: String,
        head: &'static str,
        node: String,
    },
    /// A run offered a tool whose definition is not stored.
    RunWithoutTool { run: String, tool: String },
    /// The node is filed in a lane it does not continue (the loading index;
    /// see graph.rs), so threads through it would not load.
    LaneMismatch { id: String },
    /// The node's `root` is not its parent's (or, for a first message, not
    /// itself), so families would miss conversations sharing its messages.
    RootMismatch { id: String },
    /// The conversation's `root` is not its head's.
    ConversationRootMismatch { conversation: String },
    /// A replayed turn's original (`which: "turn"`), request
    /// (`"request"`) or replayed answer (`"answer"`) is not a stored node.
    ReplayTurnWithoutNode {
        replay: String,
        seq: i64,
        which: String,
        node: String,
    },
    /// A replayed turn lists a run that is not stored.
    ReplayTurnWithoutRun {
        replay: String,
        seq: i64,
        run: String,
    },
    /// A label names a node that is not stored.
    LabelWithoutNode { label: String, node: String },
    /// A piece of a recorded request body (crate::bodies) does not hash to
    /// its id from its parent and its bytes (or its erased bytes' digest),
    /// or its parent is not stored: the bodies through it no longer
    /// reconstruct.
    PieceMismatch { id: String },
    /// A run's request body ends at a piece that is not stored.
    RunWithoutBody { run: String },
    /// A run's request body does not put together into the bytes its run
    /// recorded (a reference to a node that cannot give its text back, a
    /// length or digest that disagrees).
    BodyUnreadable { run: String, why: String },
}

/// What `verify` checked and found.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct VerifyReport {
    pub nodes: u64,
    /// Nodes whose content was erased in place (`skein redact`): their ids
    /// still check against the digests the erasure kept, so they are not
    /// problems.
    pub erased: u64,
    pub blobs: u64,
    pub conversations: u64,
    /// Conversations forked from a conversation deleted on purpose (`skein
    /// delete`, which records it): their origin link names it, and that is
    /// not a problem.
    pub origins_deleted: u64,
    pub runs: u64,
    /// Pieces of recorded request bodies, each checked against its id.
    pub body_pieces: u64,
    /// Of those, pieces erased with a message they held: their ids check
    /// against the digest the erasure kept.
    pub body_pieces_erased: u64,
    /// Recorded request bodies, each put together from its pieces and the
    /// nodes they refer to and checked against its run's digest.
    pub request_bodies: u64,
    pub problems: Vec<Problem>,
}

impl VerifyReport {
    pub fn is_ok(&self) -> bool {
        self.problems.is_empty()
    }
}

/// One node row as a backend read it.
pub(crate) struct NodeRow<'r> {
    pub id: &'r [u8],
    pub parent: Option<&'r [u8]>,
    pub depth: i64,
    pub parent_depth: Option<i64>,
    pub role: i64,
}

impl VerifyReport {
    /// Check one node row; `decode` turns its body into a message.
    pub(crate) fn check_node(
        &mut self,
        row: NodeRow<'_>,
        decode: impl FnOnce(NodeId) -> Result<Message>,
    ) {
        self.nodes += 1;
        let Some(id) = NodeId::from_slice(row.id) else {
            self.problems.push(Problem::Undecodable {
                id: hex(row.id),
                error: "id is not 32 bytes".into(),
            });
            return;
        };
        let parent = row.parent.and_then(NodeId::from_slice);
        let expected_depth = row.parent_depth.map_or(0, |d| d + 1);
        if row.depth != expected_depth {
            self.problems.push(Problem::DepthMismatch {
                id: id.to_hex(),
                stored: row.depth,
                expected: expected_depth,
            });
        }
        match decode(id) {
            Err(error) => self.problems.push(Problem::Undecodable {
                id: id.to_hex(),
                error: error.to_string(),
            }),
            Ok(message) => {
                if message.is_erased() {
                    self.erased += 1;
                }
                if i64::from(message.role.code()) != row.role {
                    self.problems
                        .push(Problem::RoleMismatch { id: id.to_hex() });
                }
                let computed = node_id(parent.as_ref(), &message);
                if computed != id {
                    self.problems.push(Problem::IdMismatch {
                        id: id.to_hex(),
                        computed: computed.to_hex(),
                    });
                }
            }
        }
    }

    pub(crate) fn check_blob(&mut self, digest: &[u8], bytes: &[u8]) {
        self.blobs += 1;
        if Digest::of(bytes).as_bytes().as_slice() != digest {
            self.problems.push(Problem::BlobMismatch {
                digest: hex(digest),
            });
        }
    }

    /// Check one piece of a request body: `parent` is its parent's id
    /// (`Some(None)` when its parent row is missing), `bytes` its bytes or,
    /// erased, `erased` the digest its tombstone keeps.
    pub(crate) fn check_piece(
        &mut self,
        id: &[u8],
        parent: Option<Option<&[u8]>>,
        bytes: Option<&[u8]>,
        erased: Option<&[u8]>,
    ) {
        self.body_pieces += 1;
        let digest = match (bytes, erased) {
            (Some(bytes), _) => Some(Digest::of(bytes)),
            (None, Some(erased)) => {
                self.body_pieces_erased += 1;
                <[u8; 32]>::try_from(erased).ok().map(Digest)
            }
            (None, None) => None,
        };
        let parent = match parent {
            None => Some(None),
            Some(Some(parent)) => <[u8; 32]>::try_from(parent).ok().map(|id| Some(Digest(id))),
            Some(None) => None,
        };
        let checks = match (digest, parent) {
            (Some(digest), Some(parent)) => {
                crate::bodies::piece_id(parent.as_ref(), &digest)
                    .as_bytes()
                    .as_slice()
                    == id
            }
            _ => false,
        };
        if !checks {
            self.problems.push(Problem::PieceMismatch { id: hex(id) });
        }
    }

    /// A run whose request body's last piece is not stored.
    pub(crate) fn missing_body(&mut self, run: String) {
        self.problems.push(Problem::RunWithoutBody { run });
    }

    /// A run's request body, put together: whether it was.
    pub(crate) fn check_body(&mut self, run: String, body: Result<RequestBody>) {
        self.request_bodies += 1;
        if let Err(error) = body {
            self.problems.push(Problem::BodyUnreadable {
                run,
                why: error.to_string(),
            });
        }
    }

    /// A node filed in a lane it neither starts nor continues.
    pub(crate) fn wrong_lane(&mut self, id: &[u8]) {
        self.problems.push(Problem::LaneMismatch { id: hex(id) });
    }

    /// A node whose `root` disagrees with its parent's.
    pub(crate) fn wrong_root(&mut self, id: &[u8]) {
        self.problems.push(Problem::RootMismatch { id: hex(id) });
    }

    /// One conversation, with what its head and origin node are when they
    /// are set but not stored, and whether its `root` is not its head's.
    pub(crate) fn check_conversation(
        &mut self,
        conversation: String,
        missing_head: bool,
        missing_origin: Option<&[u8]>,
        wrong_root: bool,
    ) {
        self.conversations += 1;
        if wrong_root {
            self.problems.push(Problem::ConversationRootMismatch {
                conversation: conversation.clone(),
            });
        }
        if let Some(node) = missing_origin {
            self.problems.push(Problem::DanglingOrigin {
                conversation: conversation.clone(),
                node: hex(node),
            });
        }
        if missing_head {
            self.problems.push(Problem::DanglingHead { conversation });
        }
    }

    /// A conversation whose origin conversation is not stored: deleted on
    /// purpose (the deletion recorded it) or missing.
    pub(crate) fn check_origin(&mut self, conversation: String, origin: String, deleted: bool) {
        if deleted {
            self.origins_deleted += 1;
        } else {
            self.problems.push(Problem::MissingOriginConversation {
                conversation,
                origin,
            });
        }
    }

    /// One run, with its conversation and heads when they are set but not
    /// stored.
    pub(crate) fn check_run(
        &mut self,
        run: String,
        missing_conversation: Option<String>,
        missing_input: Option<&[u8]>,
        missing_output: Option<&[u8]>,
    ) {
        self.runs += 1;
        if let Some(conversation) = missing_conversation {
            self.problems.push(Problem::RunWithoutConversation {
                run: run.clone(),
                conversation,
            });
        }
        for (head, node) in [("input", missing_input), ("output", missing_output)] {
            if let Some(node) = node {
                self.problems.push(Problem::RunWithoutNode {
                    run: run.clone(),
                    head,
                    node: hex(node),
                });
            }
        }
    }

    /// A replayed turn's node that is not stored.
    pub(crate) fn missing_replay_node(
        &mut self,
        replay: String,
        seq: i64,
        which: String,
        node: &[u8],
    ) {
        self.problems.push(Problem::ReplayTurnWithoutNode {
            replay,
            seq,
            which,
            node: hex(node),
        });
    }

    /// A replayed turn's run that is not stored.
    pub(crate) fn missing_replay_run(&mut self, replay: String, seq: i64, run: String) {
        self.problems
            .push(Problem::ReplayTurnWithoutRun { replay, seq, run });
    }

    /// A labelled node that is not stored.
    pub(crate) fn missing_label_node(&mut self, label: String, node: &[u8]) {
        self.problems.push(Problem::LabelWithoutNode {
            label,
            node: hex(node),
        });
    }

    /// A tool a run offered whose definition is not stored.
    pub(crate) fn missing_tool(&mut self, run: String, tool: &[u8]) {
        self.problems.push(Problem::RunWithoutTool {
            run,
            tool: hex(tool),
        });
    }
}

/// Every conversation, whether its head is set but not stored, its origin
/// node when that is set but not stored, and whether its root is not its
/// stored head's. The same SQL on both backends.
pub(crate) const CONVERSATIONS: &str = "SELECT c.id, c.head IS NOT NULL AND n.id IS NULL,
        CASE WHEN o.id IS NULL THEN c.forked_from_node END,
        (c.head IS NULL OR n.id IS NOT NULL) AND c.root IS DISTINCT FROM n.root
     FROM conversations c LEFT JOIN nodes n ON n.id = c.head
     LEFT JOIN nodes o ON o.id = c.forked_from_node
     ORDER BY c.id";

/// The conversations whose origin conversation is not stored, with that
/// origin and whether a deletion recorded it. The same SQL on both
/// backends.
pub(crate) const MISSING_ORIGINS: &str = "SELECT c.id, c.forked_from_conversation, d.id IS NOT NULL
     FROM conversations c
     LEFT JOIN conversations o ON o.id = c.forked_from_conversation
     LEFT JOIN deleted_conversations d ON d.id = c.forked_from_conversation
     WHERE c.forked_from_conversation IS NOT NULL AND o.id IS NULL
     ORDER BY c.id";

/// Runs, each with its conversation, input head and output head when set
/// but not stored (the caller adds paging and order).
pub(crate) const RUNS: &str = "SELECT r.id,
        CASE WHEN c.id IS NULL THEN r.conversation END,
        CASE WHEN i.id IS NULL THEN r.input_head END,
        CASE WHEN o.id IS NULL THEN r.output_head END
     FROM runs r LEFT JOIN conversations c ON c.id = r.conversation
     LEFT JOIN nodes i ON i.id = r.input_head
     LEFT JOIN nodes o ON o.id = r.output_head";

/// The tools runs offered that are not stored, as (run, tool hash).
pub(crate) const MISSING_TOOLS: &str = "SELECT r.run_id, r.tool_hash
     FROM run_tools r LEFT JOIN tools t ON t.hash = r.tool_hash
     WHERE t.hash IS NULL ORDER BY r.run_id, r.position";

/// Replayed turns' nodes that are not stored, as (replay, seq, which,
/// node): an erased node is still stored, so only a deleted one shows.
pub(crate) const MISSING_REPLAY_NODES: &str =
    "SELECT t.replay, t.seq, CAST('turn' AS TEXT), t.turn_node
     FROM replay_turns t WHERE NOT EXISTS (SELECT 1 FROM nodes n WHERE n.id = t.turn_node)
     UNION ALL
     SELECT t.replay, t.seq, CAST('request' AS TEXT), t.request_node
     FROM replay_turns t WHERE NOT EXISTS (SELECT 1 FROM nodes n WHERE n.id = t.request_node)
     UNION ALL
     SELECT t.replay, t.seq, CAST('answer' AS TEXT), t.answer_head
     FROM replay_turns t WHERE t.answer_head IS NOT NULL
         AND NOT EXISTS (SELECT 1 FROM nodes n WHERE n.id = t.answer_head)
     ORDER BY 1, 2, 3";

/// Labels whose node is not stored, as (name, node).
pub(crate) const MISSING_LABEL_NODES: &str = "SELECT l.name, l.node FROM labels l
     WHERE NOT EXISTS (SELECT 1 FROM nodes n WHERE n.id = l.node) ORDER BY 1, 2";

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl Store {
    /// Check the whole database. Problems are reported, never repaired.
    pub fn verify(&self) -> Result<VerifyReport> {
        self.backend().verify()
    }
}
