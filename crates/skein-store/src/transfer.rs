/*!
Export to JSONL and import from it.

The file is a header line, then every node in topological order (a parent
always before its children), then conversations, then runs, then reruns of
recorded turns, then the pieces of recorded request bodies (each once, a
parent before its children) and which of them each run's body is, then
replays with their turns, then labels, then the deleted conversations that
remaining forks name as their origin:

```text
{"kind":"header","format":"skein-export","version":5,"encoding":1}
{"kind":"node","id":"…","parent":null,"role":"user","parts":[{"type":"text","text":"hi"}]}
{"kind":"conversation","id":"…","name":null,"head":"…",…}
{"kind":"run","id":"…","model":"echo",…}
{"kind":"rerun","id":"…","turn_node":"…","ablation":["…"],…}
{"kind":"request_piece","id":"…","parent":"…","bytes":"(base64)","len":…}
{"kind":"run_body","run":"…","piece":"…","digest":"…","len":…}
{"kind":"replay","id":"…","selection":{…},"change":{…},"model":"…",…}
{"kind":"replay_turn","replay":"…","seq":0,"turn_node":"…","status":"done",…}
{"kind":"label","name":"hotel","node":"…","created_ms":…}
{"kind":"deleted_conversation","id":"…","deleted_ms":…}
```

A body's pieces are its skeleton's (crate::bodies): they refer to the
file's nodes, so a proxied conversation's export grows with its messages,
not with every request's whole history. Version 1 files (no reruns),
version 2 files (no replays or labels), version 3 files (no deleted
conversations) and version 4 files (each body whole in its run's
`request`, cut again on import) still import. The embedding cache is not
exported: it is recomputed on demand.

Import recomputes every node id from its parent and content and checks it
against the file. The whole file is parsed and checked in one transaction: a
malformed line, an id mismatch, or a record pointing at nothing (a node's
parent, a conversation's head or origin node, a run's conversation or
heads, a rerun's turn, heads, conversation or runs, a replayed turn's
replay, nodes or runs, a label's node, none of them in the database nor
earlier in the file) aborts the import with an error naming
the line, and nothing is imported. A line longer than the line limit
([`DEFAULT_IMPORT_LINE_LIMIT`] unless the caller sets another) is refused
before it is read whole, so an endless input never exhausts memory.

`import_lines` is also the store's one batch write of nodes,
conversations and runs: `Store::import_records` writes records made in
memory through it (the `llm` import, `skein::import::llm`, does), so they
too are all or nothing on both backends.

The format, parsing and every check that needs no database are here, shared
by both backends; the export and import loops are in sqlite/transfer.rs and
postgres/transfer.rs.

This module declares `Transfer`, the backend trait sqlite/transfer.rs and
postgres/transfer.rs implement, and holds the public operations that call
it: on `Store`, blocking only.
*/

use crate::error::{Result, StoreError};
use crate::forget::DeletedConversation;
use crate::labels::Label;
use crate::records::{ConversationId, ConversationRecord, ReplayId, RunId, RunRecord};
use crate::replays::{ReplayRecord, ReplayTurn};
use crate::reruns::RerunRecord;
use crate::store::Store;
use serde::{Deserialize, Serialize};
use skein_core::encoding::{ENCODING_VERSION, node_id as compute_id};
use skein_core::thread::Node;
use skein_core::{Digest, Message, NodeId, Part, Role};
use std::io::{BufRead, Read, Write};

/// Export's node section and import's one transaction: the SQL is in
/// sqlite/transfer.rs and postgres/transfer.rs.
pub(crate) trait Transfer {
    fn export_nodes(&self, out: &mut dyn Write) -> Result<()>;
    /// Every piece of every recorded request body, parent first, then
    /// which pieces each run's body is.
    fn export_bodies(&self, out: &mut dyn Write) -> Result<()>;
    fn import_lines(&self, lines: &[(usize, Line)]) -> Result<ImportReport>;
    /// The deleted conversations remaining forks name as their origin (the
    /// rows `skein delete` records, for export).
    fn deleted_origins(&self) -> Result<Vec<DeletedConversation>>;
}

/// The longest export line [`crate::Store::import`] reads: 64 MiB, room for
/// a node with a 48 MiB attachment (base64 adds a third).
pub const DEFAULT_IMPORT_LINE_LIMIT: usize = 64 << 20;

const FORMAT: &str = "skein-export";

const FORMAT_VERSION: u32 = 5;

/// The oldest version this build still imports (version 1 had no reruns).
const OLDEST_FORMAT_VERSION: u32 = 1;

#[derive(Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub(crate) enum Line {
    Header {
        format: String,
        version: u32,
        encoding: u8,
    },
    Node {
        id: NodeId,
        parent: Option<NodeId>,
        role: Role,
        parts: Vec<Part>,
    },
    Conversation(Box<ConversationRecord>),
    Run(Box<RunRecord>),
    Rerun(Box<RerunRecord>),
    Replay(Box<ReplayRecord>),
    ReplayTurn(Box<ReplayTurn>),
    Label(Box<Label>),
    DeletedConversation(Box<DeletedConversation>),
    RequestPiece(Box<PieceLine>),
    RunBody(Box<RunBody>),
}

/// A piece of a recorded request body's skeleton (crate::bodies), written
/// after its parent.
#[derive(Serialize, Deserialize)]
pub(crate) struct PieceLine {
    pub id: Digest,
    pub parent: Option<Digest>,
    /// Its bytes; none once erased.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "base64_bytes"
    )]
    pub bytes: Option<Vec<u8>>,
    /// The digest of the bytes it held before erasure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub erased: Option<Digest>,
    pub len: u64,
}

impl PieceLine {
    /// Fail unless the piece is its bytes (or their erasure) and its id is
    /// their hash under its parent.
    pub(crate) fn check(&self, number: usize) -> Result<()> {
        let problem = |problem: String| StoreError::Import {
            line: number,
            problem,
        };
        let digest = match (&self.bytes, &self.erased) {
            (Some(bytes), None) if bytes.len() as u64 == self.len => Digest::of(bytes),
            (None, Some(digest)) => *digest,
            _ => {
                return Err(problem(format!(
                    "piece {} holds neither {} bytes nor the digest of its erased ones",
                    self.id.to_hex(),
                    self.len
                )));
            }
        };
        if crate::bodies::piece_id(self.parent.as_ref(), &digest) != self.id {
            return Err(problem(format!(
                "piece {} does not match its content; the file was altered or damaged",
                self.id.to_hex()
            )));
        }
        Ok(())
    }
}

/// Which pieces a run's request body is: the last (none for an empty
/// body), and the whole body's digest and length.
#[derive(Serialize, Deserialize)]
pub(crate) struct RunBody {
    pub run: RunId,
    pub piece: Option<Digest>,
    pub digest: Digest,
    pub len: u64,
}

/// Bytes as base64 in a line.
mod base64_bytes {
    use base64::Engine as _;
    use base64::engine::general_purpose::STANDARD;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(bytes: &Option<Vec<u8>>, out: S) -> Result<S::Ok, S::Error> {
        match bytes {
            Some(bytes) => out.serialize_str(&STANDARD.encode(bytes)),
            None => out.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(input: D) -> Result<Option<Vec<u8>>, D::Error> {
        Option::<String>::deserialize(input)?
            .map(|text| STANDARD.decode(text.as_bytes()))
            .transpose()
            .map_err(serde::de::Error::custom)
    }
}

/// The lines of records made in memory, numbered 0 (they come from no
/// file): nodes in the order given, then conversations, then runs.
pub(crate) fn record_lines<'a>(
    nodes: impl IntoIterator<Item = &'a Node>,
    conversations: Vec<ConversationRecord>,
    runs: Vec<RunRecord>,
) -> Vec<(usize, Line)> {
    let nodes = nodes.into_iter().map(|node| Line::Node {
        id: node.id(),
        parent: node.parent_id(),
        role: node.message().role,
        parts: node.message().parts.clone(),
    });
    nodes
        .chain(
            conversations
                .into_iter()
                .map(|conversation| Line::Conversation(Box::new(conversation))),
        )
        .chain(runs.into_iter().map(|run| Line::Run(Box::new(run))))
        .map(|line| (0, line))
        .collect()
}

/// What an import did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ImportReport {
    pub nodes_written: usize,
    /// Nodes the database already held (equal content, equal id).
    pub nodes_present: usize,
    pub conversations: usize,
    pub runs: usize,
    pub reruns: usize,
    pub replays: usize,
    pub replay_turns: usize,
    pub labels: usize,
    /// Pieces of recorded request bodies written.
    pub request_pieces: usize,
}

/// Something an import line points at, which must be stored before it.
pub(crate) struct Reference<'a> {
    /// How the line's record relates to it ("has head", "re-ran").
    pub relation: &'static str,
    pub target: Target<'a>,
}

pub(crate) enum Target<'a> {
    Node(NodeId),
    Conversation(&'a ConversationId),
    Run(&'a RunId),
    Replay(&'a ReplayId),
}

/// Everything a conversation, run or rerun line points at. (A
/// conversation's origin conversation and rerun may come later in the file,
/// or be gone, and are provenance only: they are not required.)
pub(crate) fn references(line: &Line) -> Vec<Reference<'_>> {
    let node = |relation, id: &Option<NodeId>| {
        id.map(|id| Reference {
            relation,
            target: Target::Node(id),
        })
    };
    match line {
        Line::Header { .. }
        | Line::Node { .. }
        | Line::Replay(_)
        | Line::DeletedConversation(_)
        | Line::RequestPiece(_) => Vec::new(),
        Line::RunBody(body) => vec![Reference {
            relation: "belongs to",
            target: Target::Run(&body.run),
        }],
        Line::Conversation(conversation) => {
            let origin = conversation.origin.as_ref().and_then(|origin| origin.node);
            [
                node("has head", &conversation.head),
                node("was forked at", &origin),
            ]
            .into_iter()
            .flatten()
            .collect()
        }
        Line::Run(run) => {
            let conversation = run.conversation.as_ref().map(|id| Reference {
                relation: "belongs to",
                target: Target::Conversation(id),
            });
            [
                conversation,
                node("answered", &run.input_head),
                node("produced", &run.output_head),
            ]
            .into_iter()
            .flatten()
            .collect()
        }
        Line::Rerun(rerun) => {
            let mut all: Vec<Reference<'_>> = [
                node("re-ran", &Some(rerun.turn_node)),
                node("has request head", &rerun.request_head),
                node("has answer head", &rerun.answer_head),
            ]
            .into_iter()
            .flatten()
            .collect();
            all.push(Reference {
                relation: "re-ran a turn of",
                target: Target::Conversation(&rerun.conversation),
            });
            for (relation, ids) in [
                ("has sample", &rerun.sample_runs),
                ("has baseline", &rerun.baseline_runs),
            ] {
                all.extend(ids.iter().map(|id| Reference {
                    relation,
                    target: Target::Run(id),
                }));
            }
            all
        }
        Line::ReplayTurn(turn) => {
            let mut all: Vec<Reference<'_>> = [
                node("replayed", &Some(turn.turn_node)),
                node("has request", &Some(turn.request_node)),
                node("has answer", &turn.answer_head),
            ]
            .into_iter()
            .flatten()
            .collect();
            all.push(Reference {
                relation: "belongs to",
                target: Target::Replay(&turn.replay),
            });
            all.extend(turn.runs.iter().map(|id| Reference {
                relation: "has run",
                target: Target::Run(id),
            }));
            all
        }
        Line::Label(label) => node("labels", &Some(label.node)).into_iter().collect(),
    }
}

/// Every piece of every recorded request body, parent first.
pub(crate) const PIECES_PARENT_FIRST: &str = "
    WITH RECURSIVE tree(id, depth) AS (
        SELECT id, 0 FROM request_pieces WHERE parent IS NULL
        UNION ALL
        SELECT p.id, t.depth + 1 FROM request_pieces p JOIN tree t ON p.parent = t.id
    )
    SELECT p.id, p.parent, p.bytes, p.erased, p.len FROM tree t
    JOIN request_pieces p ON p.id = t.id ORDER BY t.depth, p.id";

/// Every run's request body, by its last piece.
pub(crate) const RUN_BODIES: &str = "
    SELECT id, request_piece, request_digest, request_len FROM runs
    WHERE request_digest IS NOT NULL ORDER BY started, id";

/// The import error for a piece line whose parent, or a body line whose
/// last piece, is nowhere.
pub(crate) fn missing_piece(number: usize, subject: &str, piece: &Digest) -> StoreError {
    StoreError::Import {
        line: number,
        problem: format!(
            "{subject} piece {}, which is neither in the database nor earlier in the file",
            piece.to_hex()
        ),
    }
}

/// The import error for a line whose reference points at nothing.
pub(crate) fn dangling(number: usize, line: &Line, reference: &Reference<'_>) -> StoreError {
    let subject = match line {
        Line::Conversation(conversation) => format!("conversation {}", conversation.id.short()),
        Line::Run(run) => format!("run {}", run.id.short()),
        Line::Rerun(rerun) => format!("rerun {}", rerun.id.short()),
        Line::ReplayTurn(turn) => format!("turn {} of replay {}", turn.seq, turn.replay.short()),
        Line::Label(label) => format!("label `{}`", label.name),
        Line::RunBody(_) => "a request body".to_string(),
        Line::Header { .. }
        | Line::Node { .. }
        | Line::Replay(_)
        | Line::DeletedConversation(_)
        | Line::RequestPiece(_) => "the line".to_string(),
    };
    let target = match &reference.target {
        Target::Node(id) => format!("node {}", id.short()),
        Target::Conversation(id) => format!("conversation {}", id.short()),
        Target::Run(id) => format!("run {}", id.short()),
        Target::Replay(id) => format!("replay {}", id.short()),
    };
    StoreError::Import {
        line: number,
        problem: format!(
            "{subject} {} {target}, which is neither in the database nor earlier in the file",
            reference.relation
        ),
    }
}

pub(crate) fn write_header(out: &mut dyn Write) -> Result<()> {
    write_line(
        out,
        &Line::Header {
            format: FORMAT.into(),
            version: FORMAT_VERSION,
            encoding: ENCODING_VERSION,
        },
    )
}

pub(crate) fn write_node(
    out: &mut dyn Write,
    id: NodeId,
    parent: Option<NodeId>,
    message: Message,
) -> Result<()> {
    write_line(
        out,
        &Line::Node {
            id,
            parent,
            role: message.role,
            parts: message.parts,
        },
    )
}

/// After the nodes: every conversation, then every run, then every rerun
/// (each oldest first), read through the store's own queries.
pub(crate) fn write_records(
    out: &mut dyn Write,
    conversations: Vec<ConversationRecord>,
    mut runs: Vec<RunRecord>,
    reruns: Vec<RerunRecord>,
) -> Result<()> {
    for conversation in conversations.into_iter().rev() {
        write_line(out, &Line::Conversation(Box::new(conversation)))?;
    }
    runs.reverse();
    for run in runs {
        write_line(out, &Line::Run(Box::new(run)))?;
    }
    for rerun in reruns {
        write_line(out, &Line::Rerun(Box::new(rerun)))?;
    }
    out.flush()?;
    Ok(())
}

/// After the reruns: each piece of a recorded request body, then which
/// pieces each run's body is.
pub(crate) fn write_piece(out: &mut dyn Write, piece: PieceLine) -> Result<()> {
    write_line(out, &Line::RequestPiece(Box::new(piece)))
}

pub(crate) fn write_run_body(out: &mut dyn Write, body: RunBody) -> Result<()> {
    write_line(out, &Line::RunBody(Box::new(body)))
}

/// After the bodies: a replay, then each of its turns; then labels.
pub(crate) fn write_replay(out: &mut dyn Write, replay: ReplayRecord) -> Result<()> {
    write_line(out, &Line::Replay(Box::new(replay)))
}

pub(crate) fn write_replay_turn(out: &mut dyn Write, turn: ReplayTurn) -> Result<()> {
    write_line(out, &Line::ReplayTurn(Box::new(turn)))
}

pub(crate) fn write_label(out: &mut dyn Write, label: Label) -> Result<()> {
    write_line(out, &Line::Label(Box::new(label)))
}

/// Last: the deleted conversations remaining forks name as their origin.
pub(crate) fn write_deleted(out: &mut dyn Write, deleted: DeletedConversation) -> Result<()> {
    write_line(out, &Line::DeletedConversation(Box::new(deleted)))
}

/// Check every node line's id against its content, before touching any
/// database.
pub(crate) fn check_ids(lines: &[(usize, Line)]) -> Result<()> {
    for (number, line) in lines {
        if let Line::RequestPiece(piece) = line {
            piece.check(*number)?;
        }
        if let Line::Node {
            id,
            parent,
            role,
            parts,
        } = line
        {
            let computed = compute_id(parent.as_ref(), &Message::new(*role, parts.clone()));
            if computed != *id {
                return Err(StoreError::Import {
                    line: *number,
                    problem: format!(
                        "node {} does not match its content (the content hashes to {}); \
                         the file was altered or damaged",
                        id.short(),
                        computed.short()
                    ),
                });
            }
        }
    }
    Ok(())
}

pub(crate) fn orphan(line: usize, id: &NodeId, parent: &NodeId) -> StoreError {
    StoreError::Import {
        line,
        problem: format!(
            "node {} names parent {}, which is neither in the database nor earlier in the file",
            id.short(),
            parent.short()
        ),
    }
}

/// A conversation the database already holds must stand where the file says.
pub(crate) fn check_same_head(
    line: usize,
    conversation: &ConversationRecord,
    stored_head: Option<&[u8]>,
) -> Result<()> {
    if stored_head.and_then(NodeId::from_slice) != conversation.head {
        return Err(StoreError::Import {
            line,
            problem: format!(
                "conversation {} already exists here with a different head",
                conversation.id.short()
            ),
        });
    }
    Ok(())
}

pub(crate) fn bad_conversation(
    line: usize,
    conversation: &ConversationRecord,
    error: impl std::fmt::Display,
) -> StoreError {
    StoreError::Import {
        line,
        problem: format!("conversation {}: {error}", conversation.id.short()),
    }
}

/// What [`read_line_within`] read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BoundedLine {
    /// A line, with its `\n` when it had one.
    Line,
    /// The end of the input: nothing was read.
    End,
    /// A line longer than the limit, of which no more was read.
    TooLong,
}

/// Read the next line of `input` into `line` (cleared first), taking no
/// more than `max_line` bytes and its `\n`: a longer line is
/// [`BoundedLine::TooLong`] before it is read whole, so an endless input
/// (`/dev/zero`, a pipe that never ends a line) never fills memory. Every
/// line skein reads from a file or stdin it is given is read here: exports
/// ([`crate::Store::import`]), cases files, a key typed on stdin.
pub fn read_line_within(
    input: &mut dyn BufRead,
    max_line: usize,
    line: &mut Vec<u8>,
) -> std::io::Result<BoundedLine> {
    line.clear();
    let read = (&mut *input)
        .take(max_line as u64 + 1)
        .read_until(b'\n', line)?;
    Ok(match read {
        0 => BoundedLine::End,
        _ if line.len() > max_line && line.last() != Some(&b'\n') => BoundedLine::TooLong,
        _ => BoundedLine::Line,
    })
}

/// Read an export, line by line, refusing any line longer than `max_line`
/// bytes before it is read whole.
pub(crate) fn parse_lines(input: &mut dyn BufRead, max_line: usize) -> Result<Vec<(usize, Line)>> {
    let mut lines = Vec::new();
    let mut text = Vec::new();
    let mut number = 0;
    loop {
        let read = read_line_within(input, max_line, &mut text)?;
        if read == BoundedLine::End {
            break;
        }
        number += 1;
        if read == BoundedLine::TooLong {
            return Err(StoreError::LineTooLong {
                line: number,
                limit: max_line,
            });
        }
        if text.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let line: Line = serde_json::from_slice(&text).map_err(|error| StoreError::Import {
            line: number,
            problem: format!("not a valid export record: {error}"),
        })?;
        if let Line::Header {
            format,
            version,
            encoding,
        } = &line
        {
            let readable = OLDEST_FORMAT_VERSION..=FORMAT_VERSION;
            if format != FORMAT || !readable.contains(version) || *encoding != ENCODING_VERSION {
                return Err(StoreError::Import {
                    line: number,
                    problem: format!(
                        "unsupported export ({format} version {version}, encoding {encoding}); \
                         this skein reads {FORMAT} versions {OLDEST_FORMAT_VERSION} to \
                         {FORMAT_VERSION}, encoding {ENCODING_VERSION}"
                    ),
                });
            }
        } else if lines.is_empty() {
            return Err(StoreError::Import {
                line: number,
                problem: "the file does not start with a skein export header".into(),
            });
        }
        lines.push((number, line));
    }
    if lines.is_empty() {
        return Err(StoreError::Import {
            line: 0,
            problem: "the file is empty".into(),
        });
    }
    Ok(lines)
}

fn write_line(out: &mut dyn Write, line: &Line) -> Result<()> {
    serde_json::to_writer(&mut *out, line)?;
    out.write_all(b"\n")?;
    Ok(())
}

impl Store {
    /// Write the whole database as JSONL ([`Store::import`] reads it back):
    /// the same file, byte for byte, whichever backend holds the graph.
    pub fn export(&self, out: &mut dyn Write) -> Result<()> {
        self.backend().export_nodes(out)?;
        let conversations = self.list_conversations(usize::MAX >> 1)?;
        let runs = self.recent_runs(usize::MAX >> 1)?;
        write_records(out, conversations, runs, self.all_reruns()?)?;
        self.backend().export_bodies(out)?;
        self.export_replays_and_labels(out)
    }

    /// Every replay with its turns, then every label, a page at a time; then
    /// the deleted conversations remaining forks name.
    fn export_replays_and_labels(&self, out: &mut dyn Write) -> Result<()> {
        const PAGE: usize = 1000;
        for replay in self.all_replays()? {
            let id = replay.id.clone();
            write_replay(out, replay)?;
            let mut after = None;
            loop {
                let page = self.replay_turns(&id, after, PAGE)?;
                after = page.last().map(|turn| turn.seq);
                for turn in page {
                    write_replay_turn(out, turn)?;
                }
                if after.is_none() {
                    break;
                }
            }
        }
        for count in self.label_counts()? {
            let mut after = None;
            loop {
                let page = self.labelled(&count.name, after, PAGE)?;
                after = page.last().map(|label| label.node);
                for label in page {
                    write_label(out, label)?;
                }
                if after.is_none() {
                    break;
                }
            }
        }
        for deleted in self.backend().deleted_origins()? {
            write_deleted(out, deleted)?;
        }
        out.flush()?;
        Ok(())
    }

    /// Import a JSONL export. All or nothing. A line longer than
    /// [`DEFAULT_IMPORT_LINE_LIMIT`] is refused
    /// ([`StoreError::LineTooLong`](crate::StoreError::LineTooLong)).
    pub fn import(&self, input: &mut dyn BufRead) -> Result<ImportReport> {
        self.import_with_line_limit(input, DEFAULT_IMPORT_LINE_LIMIT)
    }

    /// [`Store::import`] with another limit on one line's length, in bytes
    /// (a node line holds its attachments, base64-encoded).
    pub fn import_with_line_limit(
        &self,
        input: &mut dyn BufRead,
        max_line: usize,
    ) -> Result<ImportReport> {
        let lines = parse_lines(input, max_line)?;
        check_ids(&lines)?;
        self.backend().import_lines(&lines)
    }

    /// Write records made in memory (an importer of another tool's data
    /// builds them) in one transaction, through the import's batch write
    /// and with its checks: a record pointing at nothing aborts the write
    /// and nothing is written ([`StoreError::Import`](crate::StoreError::Import), line 0); nodes, runs
    /// and conversations already stored are skipped, but a conversation
    /// stored with another head is refused. `nodes` come from threads, so
    /// their ids are right by construction; they must list each parent
    /// before its children.
    pub fn import_records<'a>(
        &self,
        nodes: impl IntoIterator<Item = &'a Node>,
        conversations: Vec<ConversationRecord>,
        runs: Vec<RunRecord>,
    ) -> Result<ImportReport> {
        let lines = record_lines(nodes, conversations, runs);
        self.backend().import_lines(&lines)
    }
}
