/*!
Resolving the short id prefixes people type into full ids: nodes (32-byte
blobs, matched by byte range), conversations, runs, reruns and replays (hex
text, matched by text range). A prefix that matches nothing or several ids is a typed error
that says which. A conversation is also found by its name, but an id (or a
unique prefix of one) always wins over a name, so no name can stand in for
another conversation's id.

The parsing and choosing are shared; each backend only lists the ids in a
range (sqlite/resolve.rs, postgres/resolve.rs).

This module declares `IdRanges`, the backend trait sqlite/resolve.rs and
postgres/resolve.rs implement, and holds the public operations that call it:
the async ones on `AsyncStore` and their blocking forms on `Store`.
*/

use crate::async_store::AsyncStore;
use crate::backend::BoxFuture;
use crate::error::{Result, StoreError};
use crate::records::{ConversationId, ReplayId, RerunId, RunId};
use crate::store::Store;
use skein_core::NodeId;
use skein_core::id::is_hex_prefix;

/// The ids in a range, for prefix resolution: the SQL is in
/// sqlite/resolve.rs and postgres/resolve.rs.
pub(crate) trait IdRanges {
    fn node_ids_between<'a>(
        &'a self,
        low: &'a [u8],
        high: &'a [u8],
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<NodeId>>>;
    fn conversation_ids_named<'a>(
        &'a self,
        name: &'a str,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<String>>>;
    fn text_ids_between<'a>(
        &'a self,
        table: IdTable,
        low: &'a str,
        high: &'a str,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<String>>>;
}

/// Candidates listed in an ambiguity error.
const CANDIDATES: usize = 5;

/// Which id table a text prefix is looked up in.
#[derive(Clone, Copy)]
pub(crate) enum IdTable {
    Conversations,
    Runs,
    Reruns,
    Replays,
}

impl IdTable {
    pub(crate) fn name(self) -> &'static str {
        match self {
            IdTable::Conversations => "conversations",
            IdTable::Runs => "runs",
            IdTable::Reruns => "reruns",
            IdTable::Replays => "replays",
        }
    }
}

impl Store {
    /// The node whose id starts with `prefix` (hex, any case).
    pub fn resolve_node(&self, prefix: &str) -> Result<NodeId> {
        self.wait(self.nonblocking().resolve_node(prefix))
    }

    /// The conversation whose id is `text` or starts with it (any case);
    /// else the one named `text`. An id always wins: a conversation named
    /// like another's id or unique prefix of four digits or more (names
    /// that read as ids are refused when set, but older databases may hold
    /// some) cannot stand in for it. A shorter prefix gives way to a
    /// conversation of that name (`e`, `add`: names that cannot be refused). A name shared by several conversations is ambiguous, and
    /// so is a prefix several ids share when no conversation has it as its
    /// name.
    pub fn resolve_conversation(&self, text: &str) -> Result<ConversationId> {
        self.wait(self.nonblocking().resolve_conversation(text))
    }

    /// The run whose id starts with `prefix`.
    pub fn resolve_run(&self, prefix: &str) -> Result<RunId> {
        self.wait(self.nonblocking().resolve_run(prefix))
    }

    /// The conversation named `name` exactly (ids are not read), if any;
    /// [`StoreError::AmbiguousName`] when several are.
    pub fn conversation_named(&self, name: &str) -> Result<Option<ConversationId>> {
        self.wait(self.nonblocking().conversation_named(name))
    }

    /// Refuse `name` with [`StoreError::NameTaken`] when a conversation
    /// has it already: a surface's check before any model runs. The write
    /// that sets a name checks again in its own transaction, which is what
    /// makes the name unique.
    pub fn check_name_free(&self, name: &str) -> Result<()> {
        self.wait(self.nonblocking().check_name_free(name))
    }

    /// The rerun whose id starts with `prefix`.
    pub fn resolve_rerun(&self, prefix: &str) -> Result<RerunId> {
        self.wait(self.nonblocking().resolve_rerun(prefix))
    }

    /// The replay whose id starts with `prefix`.
    pub fn resolve_replay(&self, prefix: &str) -> Result<ReplayId> {
        self.wait(self.nonblocking().resolve_replay(prefix))
    }
}

impl AsyncStore<'_> {
    /// [`Store::resolve_node`].
    pub async fn resolve_node(&self, prefix: &str) -> Result<NodeId> {
        let (prefix, low, high) = node_range(prefix)?;
        let backend = self.store.backend();
        let ids = backend.node_ids_between(&low, &high, CANDIDATES).await?;
        pick("node", &prefix, ids, |id| id.short())
    }

    /// [`Store::conversation_named`].
    pub async fn conversation_named(&self, name: &str) -> Result<Option<ConversationId>> {
        let backend = self.store.backend();
        by_name(
            name,
            backend.conversation_ids_named(name, CANDIDATES).await?,
        )
    }

    /// [`Store::check_name_free`].
    pub async fn check_name_free(&self, name: &str) -> Result<()> {
        let backend = self.store.backend();
        match backend.conversation_ids_named(name, 1).await?.pop() {
            Some(by) => Err(crate::conversations::name_taken(name, by)),
            None => Ok(()),
        }
    }

    /// [`Store::resolve_conversation`].
    pub async fn resolve_conversation(&self, text: &str) -> Result<ConversationId> {
        let ids = self.conversation_ids_starting(text).await?;
        // Text too short to be refused as a name (`e`, `add`) is a name
        // first: a prefix that short is not an id anyone relies on.
        let reads_as_id = text.trim().len() >= crate::conversations::SHORTEST_ID_PREFIX;
        if let (true, Some([id])) = (reads_as_id, ids.as_deref()) {
            return Ok(ConversationId(id.clone()));
        }
        let backend = self.store.backend();
        let named = backend.conversation_ids_named(text, CANDIDATES).await?;
        if let Some(id) = by_name(text, named)? {
            return Ok(id);
        }
        match ids {
            Some(ids) => pick_conversation(text, ids),
            None => Err(StoreError::ConversationNotFound(format!(
                "named `{}`",
                text.trim()
            ))),
        }
    }

    /// [`Store::resolve_run`].
    pub async fn resolve_run(&self, prefix: &str) -> Result<RunId> {
        let ids = self.text_prefix(IdTable::Runs, prefix).await?;
        pick("run", prefix, ids, |id: &String| {
            id[..12.min(id.len())].to_string()
        })
        .map(RunId)
    }

    /// [`Store::resolve_rerun`].
    pub async fn resolve_rerun(&self, prefix: &str) -> Result<RerunId> {
        let ids = self.text_prefix(IdTable::Reruns, prefix).await?;
        pick("rerun", prefix, ids, |id: &String| {
            id[..12.min(id.len())].to_string()
        })
        .map(RerunId)
    }

    /// [`Store::resolve_replay`].
    pub async fn resolve_replay(&self, prefix: &str) -> Result<ReplayId> {
        let ids = self.text_prefix(IdTable::Replays, prefix).await?;
        pick("replay", prefix, ids, |id: &String| {
            id[..12.min(id.len())].to_string()
        })
        .map(ReplayId)
    }

    /// The conversation ids starting with `text` (a few, when several
    /// do), or `None` when `text` is no id prefix.
    async fn conversation_ids_starting(&self, text: &str) -> Result<Option<Vec<String>>> {
        match self.text_prefix(IdTable::Conversations, text).await {
            Ok(ids) => Ok(Some(ids)),
            Err(StoreError::NotAnId(_)) => Ok(None),
            Err(other) => Err(other),
        }
    }

    async fn text_prefix(&self, table: IdTable, prefix: &str) -> Result<Vec<String>> {
        let (low, high) = text_range(prefix)?;
        self.store
            .backend()
            .text_ids_between(table, &low, &high, CANDIDATES)
            .await
    }
}

/// The prefix, normalised, and the range of node ids it covers.
fn node_range(prefix: &str) -> Result<(String, Vec<u8>, Vec<u8>)> {
    let prefix = normalise(prefix)?;
    let (low, high) = (pad(&prefix, '0'), pad(&prefix, 'f'));
    Ok((prefix, low, high))
}

/// The range of text ids `prefix` covers: 'g' sorts after every hex digit,
/// so it is [prefix, prefix+"g").
fn text_range(prefix: &str) -> Result<(String, String)> {
    let prefix = normalise(prefix)?;
    let end = format!("{prefix}g");
    Ok((prefix, end))
}

/// The conversation ids named `text`: the one, none, or an ambiguity.
fn by_name(text: &str, named: Vec<String>) -> Result<Option<ConversationId>> {
    match named.len() {
        0 => Ok(None),
        1 => Ok(named.into_iter().next().map(ConversationId)),
        _ => Err(StoreError::AmbiguousName {
            name: text.to_string(),
            candidates: named.iter().map(|id| short(id)).collect(),
        }),
    }
}

fn pick_conversation(text: &str, ids: Vec<String>) -> Result<ConversationId> {
    pick("conversation", text, ids, |id: &String| short(id)).map(ConversationId)
}

/// The form of a text id people see.
fn short(id: &str) -> String {
    id[..12.min(id.len())].to_string()
}

fn normalise(prefix: &str) -> Result<String> {
    let prefix = prefix.trim().to_ascii_lowercase();
    if !is_hex_prefix(&prefix) {
        return Err(StoreError::NotAnId(prefix));
    }
    Ok(prefix)
}

/// The 32 bytes of `prefix` padded to 64 hex digits with `fill`.
fn pad(prefix: &str, fill: char) -> Vec<u8> {
    let mut hex = prefix.to_string();
    while hex.len() < 64 {
        hex.push(fill);
    }
    hex.parse::<NodeId>()
        .map(|id| id.0.to_vec())
        .unwrap_or_default()
}

fn pick<T>(
    kind: &'static str,
    prefix: &str,
    mut ids: Vec<T>,
    show: impl Fn(&T) -> String,
) -> Result<T> {
    match ids.len() {
        0 => Err(StoreError::UnknownPrefix {
            kind,
            prefix: prefix.to_string(),
        }),
        1 => Ok(ids.remove(0)),
        _ => Err(StoreError::AmbiguousPrefix {
            kind,
            prefix: prefix.to_string(),
            candidates: ids.iter().map(show).collect(),
        }),
    }
}
