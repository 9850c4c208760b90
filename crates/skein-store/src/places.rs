/*!
Every place in the database that can hold content (DESIGN invariant 13:
every message lives once, in the graph; whatever else holds a copy of its
text is listed here with what forgetting does to it).

[`CONTENT`] lists the columns that hold message content or a copy of it,
each with the rule that reaches it when a message is erased or deleted
(forget.rs and each backend's forget.rs carry the rules out);
[`NO_CONTENT`] lists every other column with why it holds none. A store
test reads the live schema of both backends and fails on a column that is
on neither list, so a new table or column that could keep text is
classified before it lands. [`Store::places_holding`] searches every
content place for a text: what `skein verify --find TEXT` prints, and
what the erasure tests assert is empty after `redact` and `gc`.

This module declares `Places`, the backend trait sqlite/places.rs and
postgres/places.rs implement, and holds the public operations that call it:
on `Store`, blocking only.
*/

use crate::error::Result;
use crate::store::Store;
use serde::Serialize;

/// Reading the content places: the SQL is in sqlite/places.rs and
/// postgres/places.rs.
pub(crate) trait Places {
    /// How many rows of `place` hold `text`; `None` when this backend has
    /// no such place.
    fn rows_holding(&self, place: &Place, text: &str) -> Result<Option<u64>>;
    #[cfg(any(test, feature = "testkit"))]
    /// Every (table, column) of the live schema.
    fn columns(&self) -> Result<Vec<(String, String)>>;
}

/// How a place stores what it holds, which decides how it is searched.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stored {
    /// Text (JSON included).
    Text,
    /// Bytes (a message's encoding, a piece of a request body).
    Bytes,
    /// A full-text index of messages' words (searched by its own query).
    WordIndex,
}

/// One column that can hold content.
#[derive(Clone, Copy, Debug)]
pub struct Place {
    pub table: &'static str,
    pub column: &'static str,
    pub stored: Stored,
    /// Which backends have it.
    pub sqlite: bool,
    pub postgres: bool,
    /// What content it holds.
    pub holds: &'static str,
    /// What erasing (`redact`) and deleting do to it.
    pub forgetting: &'static str,
}

const fn both(
    table: &'static str,
    column: &'static str,
    stored: Stored,
    holds: &'static str,
    forgetting: &'static str,
) -> Place {
    Place {
        table,
        column,
        stored,
        sqlite: true,
        postgres: true,
        holds,
        forgetting,
    }
}

/// Every column that holds message content or a copy of it.
pub const CONTENT: &[Place] = &[
    both(
        "nodes",
        "body",
        Stored::Bytes,
        "the messages (the graph)",
        "redact replaces the parts by tombstones; delete and gc remove the nodes nothing reaches",
    ),
    both(
        "blobs",
        "bytes",
        Stored::Bytes,
        "large parts (attachments, long texts) by digest",
        "removed with the last node referencing them",
    ),
    both(
        "request_pieces",
        "bytes",
        Stored::Bytes,
        "proxied requests' exact bodies as skeletons in content-defined pieces: the \
         envelope, and any text no reference to a node matched (bodies/skeleton.rs)",
        "a reference reads the erased node; redact also erases the pieces of the bodies \
         that carried the message; delete releases the pieces only deleted runs held",
    ),
    both(
        "runs",
        "error",
        Stored::Text,
        "a provider's error text, which may quote the request",
        "replaced when a message the request carried is erased; deleted with the run",
    ),
    both(
        "runs",
        "events",
        Stored::Text,
        "observation events of the call that produced a message",
        "cleared when the message is erased; deleted with the run",
    ),
    both(
        "runs",
        "relations",
        Stored::Text,
        "a configured prompt's variables (`prompt` relation)",
        "the prompt relation is removed when a message of the thread is erased",
    ),
    both(
        "conversations",
        "meta",
        Stored::Text,
        "a title made from the first prompt; a recorded chat's system text and sources",
        "the title and the copied texts go when the message holding them is erased",
    ),
    both(
        "replays",
        "change",
        Stored::Text,
        "a replay's replacement system prompt and source texts",
        "replaced when a message holding them is erased",
    ),
    both(
        "replays",
        "selection",
        Stored::Text,
        "the search words a replay selected turns by",
        "replaced when a message holding them is erased",
    ),
    both(
        "replay_turns",
        "detail",
        Stored::Text,
        "why the comparator decided (it may quote either answer)",
        "replaced when a message of the compared threads is erased",
    ),
    both(
        "reruns",
        "detail",
        Stored::Text,
        "why each sample was judged changed (it may quote either answer)",
        "replaced when a message of the compared threads is erased",
    ),
    both(
        "embeddings",
        "vector",
        Stored::Bytes,
        "vectors computed from messages' texts (no text, but derived from it)",
        "removed with the text's message (by the text's digest)",
    ),
    Place {
        table: "node_search",
        column: "words",
        stored: Stored::WordIndex,
        sqlite: true,
        postgres: false,
        holds: "every message's words (SQLite's full-text index)",
        forgetting: "the message's row is deleted and the index merged, so no old segment keeps it",
    },
    Place {
        table: "nodes",
        column: "search",
        stored: Stored::WordIndex,
        sqlite: false,
        postgres: true,
        holds: "every message's words (PostgreSQL's tsvector)",
        forgetting: "cleared with the message",
    },
];

/// Every other column, with why it holds no content. A column on neither
/// list fails the store's schema test.
pub const NO_CONTENT: &[(&str, &[&str], &str)] = &[
    (
        "nodes",
        &[
            "seq",
            "id",
            "parent",
            "depth",
            "role",
            "lane",
            "root",
            "blob_refs",
        ],
        "ids, positions and digests",
    ),
    ("blobs", &["digest"], "a digest"),
    (
        "request_pieces",
        &["seq", "id", "parent", "erased", "len"],
        "ids, the erased bytes' digest and lengths",
    ),
    (
        "runs",
        &[
            "id",
            "conversation",
            "input_head",
            "output_head",
            "model",
            "provider",
            "profile",
            "backend",
            "status",
            "input_tokens",
            "output_tokens",
            "cache_read_tokens",
            "cache_write_tokens",
            "usage_complete",
            "started",
            "finished",
            "annotations",
            "options",
            "finish_reason",
            "turn",
            "step",
            "requested_model",
            "response_model",
            "client",
            "request_piece",
            "request_digest",
            "request_len",
        ],
        "ids, model names, figures, times, generation options and annotations (cache hints \
         and source names by node and part)",
    ),
    (
        "tools",
        &["hash", "name", "description", "input_schema"],
        "tool definitions, which are configuration, not messages",
    ),
    ("run_tools", &["run_id", "position", "tool_hash"], "ids"),
    (
        "tool_offers",
        &["conversation", "depth", "name", "schema"],
        "tool names and definitions by conversation",
    ),
    ("tool_calls", &["call_id", "node"], "a provider's call ids"),
    ("run_links", &["kind", "target", "run_id"], "ids"),
    (
        "conversations",
        &[
            "id",
            "name",
            "head",
            "forked_from_node",
            "forked_from_conversation",
            "forked_from_rerun",
            "created",
            "updated",
            "imported",
            "root",
        ],
        "ids, the name the user gave, times",
    ),
    ("deleted_conversations", &["id", "deleted"], "ids and times"),
    (
        "reruns",
        &[
            "id",
            "conversation",
            "turn",
            "turn_node",
            "request_head",
            "answer_head",
            "ablation",
            "samples",
            "sample_runs",
            "baseline_runs",
            "verdict",
            "summary",
            "created",
        ],
        "ids, the removed sources' names, figures and a summary made of them",
    ),
    (
        "replays",
        &["id", "model", "settings", "turns", "created"],
        "ids, model names, comparators, figures",
    ),
    (
        "replay_turns",
        &[
            "replay",
            "seq",
            "conversation",
            "turn_node",
            "request_node",
            "status",
            "worker",
            "lease_until",
            "answer_head",
            "runs",
            "decision",
            "comparator",
            "finished",
            "model",
        ],
        "ids, states, decisions and model names",
    ),
    ("embeddings", &["embedder", "digest"], "names and digests"),
    (
        "labels",
        &["name", "node", "created"],
        "the label names the user gave",
    ),
    (
        "meta",
        &["key", "value"],
        "counters and settings of the store",
    ),
    (
        "skein_schema",
        &["version"],
        "the schema version (PostgreSQL)",
    ),
    (
        "node_search_data",
        &["id", "block"],
        "the full-text index's storage (searched through `node_search`)",
    ),
    (
        "node_search_idx",
        &["segid", "term", "pgno"],
        "the full-text index's storage (searched through `node_search`)",
    ),
    (
        "node_search_config",
        &["k", "v"],
        "the full-text index's settings",
    ),
];

/// A content place that holds a text, and in how many rows.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Holding {
    pub table: &'static str,
    pub column: &'static str,
    pub rows: u64,
}

impl Store {
    /// Every place of [`CONTENT`] that holds `text` (byte for byte; in a
    /// word index, as a phrase of its words), with how many rows: after
    /// every message holding it is erased, none should. Reads every row
    /// of every content place: a check, not a query for a request path.
    pub fn places_holding(&self, text: &str) -> Result<Vec<Holding>> {
        let mut found = Vec::new();
        for place in CONTENT {
            if let Some(rows) = self.backend().rows_holding(place, text)?
                && rows > 0
            {
                found.push(Holding {
                    table: place.table,
                    column: place.column,
                    rows,
                });
            }
        }
        Ok(found)
    }

    #[cfg(any(test, feature = "testkit"))]
    /// Every (table, column) of the live schema (crate::places's test reads
    /// it).
    pub fn schema_columns(&self) -> Result<Vec<(String, String)>> {
        self.backend().columns()
    }
}
