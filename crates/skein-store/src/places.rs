/*!
Every place in the database that can hold content (DESIGN invariant 13:
every message lives once, in the graph; whatever else holds a copy of its
text is listed here with what forgetting does to it).

[`CONTENT`] lists the columns that hold message content or a copy of it,
each with its [`Erasing`] rule: what [`Store::redact`] does to it. The
graph's own places (the message, what is kept by its parts' digests, the
request bodies that carried it) have a rule each backend's forget.rs
carries out; every other place is a [`Copies`] rule (which rows may hold
a copy, and the value without it) that one loop per backend applies to
every place listed, so a place added here is erased without new SQL.
Deleting removes a copy with the row holding it (a run, a conversation,
a replay, a rerun), and `gc` what only deleted rows reached.
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
use crate::forget::{
    change_without, detail_without, error_without, events_without, meta_without, relations_without,
    selection_without,
};
use crate::store::Store;
use serde::Serialize;
use skein_core::Message;

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
    /// What erasing (`redact`) and deleting do to it, in words.
    pub forgetting: &'static str,
    /// What erasing a message does to it, as the backends carry it out.
    pub erasing: Erasing,
}

/// What erasing a message does to a place.
#[derive(Clone, Copy, Debug)]
pub enum Erasing {
    /// The message's own row: its parts become tombstones.
    Tombstone,
    /// Kept for the message's parts (by their digests, or as its row of a
    /// word index): removed with them.
    WithItsParts,
    /// Pieces of the request bodies that carried the message: erased
    /// (bodies/skeleton.rs).
    CarriedBodies,
    /// A copy in rows outside the graph, rewritten by its rule.
    Copies(Copies),
}

/// A copy of content in rows outside the graph, and how erasing reaches
/// it: every row [`Copies::reach`] and [`Copies::may_hold`] select gets
/// [`Copies::without`] of its value, written back by its [`Copies::key`].
#[derive(Clone, Copy, Debug)]
pub struct Copies {
    /// The table's primary key columns.
    pub key: &'static [&'static str],
    /// Which rows may hold a copy of the erased message's content.
    pub reach: Reach,
    /// An SQL condition both backends read alike, narrowing those rows to
    /// the ones that may hold a copy at all (cheap, never exact).
    pub may_hold: &'static str,
    /// The value without the erased message's content; `None` leaves it
    /// as it is (a value it already rewrote included).
    pub without: fn(&str, &Message) -> Option<String>,
}

/// The rows a [`Copies`] rule reads.
#[derive(Clone, Copy, Debug)]
pub enum Reach {
    /// Those one of whose node columns lies at or below the erased
    /// message: a thread through it (a run's request carried it).
    Below(&'static [&'static str]),
    /// Those whose node column is the erased message itself (the run that
    /// produced it).
    At(&'static str),
    /// Every row: a copy tied to no thread (words the user typed, which a
    /// message happens to hold).
    Every,
}

const fn both(
    table: &'static str,
    column: &'static str,
    stored: Stored,
    holds: &'static str,
    forgetting: &'static str,
    erasing: Erasing,
) -> Place {
    Place {
        table,
        column,
        stored,
        sqlite: true,
        postgres: true,
        holds,
        forgetting,
        erasing,
    }
}

/// The nodes of a run's thread: what its request carried and what it
/// produced.
const RUN_THREAD: &[&str] = &["input_head", "output_head"];

/// A table keyed by its `id`.
const ID: &[&str] = &["id"];

/// Every column that holds message content or a copy of it.
pub const CONTENT: &[Place] = &[
    both(
        "nodes",
        "body",
        Stored::Bytes,
        "the messages (the graph)",
        "redact replaces the parts by tombstones; delete and gc remove the nodes nothing reaches",
        Erasing::Tombstone,
    ),
    both(
        "blobs",
        "bytes",
        Stored::Bytes,
        "large parts (attachments, long texts) by digest",
        "removed with the last node referencing them",
        Erasing::WithItsParts,
    ),
    both(
        "request_pieces",
        "bytes",
        Stored::Bytes,
        "proxied requests' exact bodies as skeletons in content-defined pieces: the \
         envelope, and any text no reference to a node matched (bodies/skeleton.rs)",
        "a reference reads the erased node; redact also erases the pieces of the bodies \
         that carried the message; delete releases the pieces only deleted runs held",
        Erasing::CarriedBodies,
    ),
    both(
        "runs",
        "error",
        Stored::Text,
        "a provider's error text, which may quote the request",
        "replaced when a message the request carried is erased; deleted with the run",
        Erasing::Copies(Copies {
            key: ID,
            reach: Reach::Below(RUN_THREAD),
            may_hold: "error IS NOT NULL",
            without: error_without,
        }),
    ),
    both(
        "runs",
        "events",
        Stored::Text,
        "observation events of the call that produced a message",
        "cleared when the message is erased; deleted with the run",
        Erasing::Copies(Copies {
            key: ID,
            reach: Reach::At("output_head"),
            may_hold: "events <> '[]'",
            without: events_without,
        }),
    ),
    both(
        "runs",
        "relations",
        Stored::Text,
        "a configured prompt's variables (`prompt` relation)",
        "the prompt relation is removed when a message of the thread is erased",
        Erasing::Copies(Copies {
            key: ID,
            reach: Reach::Below(RUN_THREAD),
            may_hold: "relations LIKE '%\"kind\":\"prompt\"%'",
            without: relations_without,
        }),
    ),
    both(
        "conversations",
        "meta",
        Stored::Text,
        "a title made from the first prompt; a recorded chat's system text and sources",
        "the title and the copied texts go when the message holding them is erased",
        Erasing::Copies(Copies {
            key: ID,
            reach: Reach::Below(&["head"]),
            may_hold: "meta LIKE '%\"title\"%' OR meta LIKE '%\"recorded\"%'",
            without: meta_without,
        }),
    ),
    both(
        "replays",
        "change",
        Stored::Text,
        "a replay's replacement system prompt and source texts",
        "replaced when a message holding them is erased",
        Erasing::Copies(Copies {
            key: ID,
            reach: Reach::Every,
            may_hold: "change LIKE '%\"system\"%' OR change LIKE '%\"replace_sources\"%'",
            without: change_without,
        }),
    ),
    both(
        "replays",
        "selection",
        Stored::Text,
        "the search words a replay selected turns by",
        "replaced when a message holding them is erased",
        Erasing::Copies(Copies {
            key: ID,
            reach: Reach::Every,
            may_hold: "selection LIKE '%\"search\"%'",
            without: selection_without,
        }),
    ),
    both(
        "replay_turns",
        "detail",
        Stored::Text,
        "why the comparator decided (it may quote either answer)",
        "replaced when a message of the compared threads is erased",
        Erasing::Copies(Copies {
            key: &["replay", "seq"],
            reach: Reach::Below(&["turn_node", "request_node", "answer_head"]),
            may_hold: "detail LIKE '%\"why\"%'",
            without: detail_without,
        }),
    ),
    both(
        "reruns",
        "detail",
        Stored::Text,
        "why each sample was judged changed (it may quote either answer)",
        "replaced when a message of the compared threads is erased",
        Erasing::Copies(Copies {
            key: ID,
            reach: Reach::Below(&["turn_node", "request_head", "answer_head"]),
            may_hold: "detail LIKE '%\"why\"%'",
            without: detail_without,
        }),
    ),
    both(
        "embeddings",
        "vector",
        Stored::Bytes,
        "vectors computed from messages' texts (no text, but derived from it)",
        "removed with the text's message (by the text's digest)",
        Erasing::WithItsParts,
    ),
    Place {
        table: "node_search",
        column: "words",
        stored: Stored::WordIndex,
        sqlite: true,
        postgres: false,
        holds: "every message's words (SQLite's full-text index)",
        forgetting: "the message's row is deleted and the index merged, so no old segment keeps it",
        erasing: Erasing::WithItsParts,
    },
    Place {
        table: "nodes",
        column: "search",
        stored: Stored::WordIndex,
        sqlite: false,
        postgres: true,
        holds: "every message's words (PostgreSQL's tsvector)",
        forgetting: "cleared with the message",
        erasing: Erasing::WithItsParts,
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

/// The places of [`CONTENT`] that erasing rewrites by a [`Copies`] rule,
/// on SQLite or (with `postgres`) on PostgreSQL.
pub(crate) fn copy_rules(
    postgres: bool,
) -> impl Iterator<Item = (&'static Place, &'static Copies)> {
    CONTENT
        .iter()
        .filter(move |place| {
            if postgres {
                place.postgres
            } else {
                place.sqlite
            }
        })
        .filter_map(|place| match &place.erasing {
            Erasing::Copies(copies) => Some((place, copies)),
            _ => None,
        })
}

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::forget::derived_title;

    const MARKER: &str = "zebra-4417-quartz";

    /// A value `place` may hold when a message holding [`MARKER`] is
    /// erased: a rule added without a sample here fails the test below.
    fn sample(place: &Place) -> Option<String> {
        let title = derived_title(&Message::user(MARKER)).unwrap();
        let json = match (place.table, place.column) {
            ("runs", "error") => return Some(format!("400: invalid content '{MARKER}'")),
            ("runs", "events") => serde_json::json!([{ "name": "log", "text": MARKER }]),
            ("runs", "relations") => serde_json::json!([
                { "kind": "chain", "target": "c1" },
                { "kind": "prompt", "target": format!("{{\"code\":\"{MARKER}\"}}") },
            ]),
            ("conversations", "meta") => serde_json::json!({
                "title": title,
                "recorded": { "system": MARKER, "sources": [{ "id": "a", "text": MARKER }] },
            }),
            ("replays", "change") => serde_json::json!({
                "system": MARKER, "replace_sources": { "a": MARKER },
            }),
            ("replays", "selection") => serde_json::json!({ "search": MARKER }),
            ("replay_turns", "detail") => {
                serde_json::json!({ "why": format!("'{MARKER}' changed") })
            }
            ("reruns", "detail") => serde_json::json!({ "why": [MARKER, "other"] }),
            _ => return None,
        };
        Some(json.to_string())
    }

    #[test]
    fn every_copy_rule_erases_what_its_place_holds_and_leaves_it_erased() {
        let original = Message::user(MARKER);
        for place in CONTENT {
            let Erasing::Copies(copies) = place.erasing else {
                continue;
            };
            let name = format!("{}.{}", place.table, place.column);
            let value = sample(place)
                .unwrap_or_else(|| panic!("{name} has a copy rule: give it a sample value here"));
            let erased = (copies.without)(&value, &original)
                .unwrap_or_else(|| panic!("{name}: {value} was left as it is"));
            assert!(!erased.contains(MARKER), "{name}: {erased}");
            // A rewritten value is left alone: erasing again changes nothing.
            assert_eq!((copies.without)(&erased, &original), None, "{name}");
        }
    }

    #[test]
    fn a_copy_the_erased_message_did_not_hold_is_left() {
        let other = Message::user("an unrelated message");
        for (table, column, value) in [
            ("conversations", "meta", r#"{"title":"zebra-4417-quartz"}"#),
            ("replays", "change", r#"{"system":"zebra-4417-quartz"}"#),
            ("replays", "selection", r#"{"search":"zebra"}"#),
        ] {
            let place = CONTENT
                .iter()
                .find(|place| (place.table, place.column) == (table, column))
                .unwrap();
            let Erasing::Copies(copies) = place.erasing else {
                panic!("{table}.{column} has no copy rule");
            };
            assert_eq!((copies.without)(value, &other), None, "{table}.{column}");
        }
    }
}
