/*!
What a database backend provides: the [`Backend`] trait that SQLite
(sqlite/) and PostgreSQL (postgres/) implement, and [`crate::Store`] holds
as `Arc<dyn Backend>`.

It is split into one trait per concern, each implemented in the backend's
file of the same name (graph.rs, conversations.rs, runs.rs, ...), so a
backend's file holds its whole answer to one concern. Everything that needs
no SQL (prefix resolution, family assembly, usage accounting, an import's
checks, search's query language) is written once above this line, on
`Store`, and reaches the database only through these traits.
*/

use crate::error::Result;
use crate::family::{FamilyLimits, FamilyRows};
use crate::graph::{AppendReport, StoredNode, TreeEntry};
use crate::records::{
    Committed, ConversationId, ConversationRecord, ListPosition, NewConversation, RerunId, RunId,
    RunRecord, TurnCommit,
};
use crate::reruns::{RerunCommit, RerunRecord};
use crate::resolve::IdTable;
use crate::search::{ConversationRef, Parsed};
use crate::transfer::{ImportReport, Line};
use crate::usage::RunRow;
use crate::verify::VerifyReport;
use crate::{CommitStageProbe, ConversationSettings};
use skein_core::{Digest, Message, NodeId, Role, StoreKey, Thread};
use std::collections::HashSet;
use std::future::Future;
use std::io::Write;
use std::path::Path;
use std::pin::Pin;

/// A future a backend returns from an async operation.
pub(crate) type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// One database: the handle's own facts, and every concern's operations.
pub(crate) trait Backend:
    Graph
    + Conversations
    + Runs
    + Reruns
    + Families
    + Search
    + IdRanges
    + UsageRows
    + EmbeddingCache
    + Transfer
    + Verify
    + Send
    + Sync
{
    /// `"sqlite"` or `"postgres"`.
    fn name(&self) -> &'static str;

    /// Whether a blocking call does its work on the calling thread (SQLite)
    /// rather than waiting on I/O driven elsewhere (PostgreSQL): such work
    /// may run in place for a caller that is blocked anyway (see
    /// [`crate::blocking_caller`]).
    fn works_on_caller_thread(&self) -> bool;

    fn is_read_only(&self) -> bool;

    /// The SQLite file, or the PostgreSQL URL without its password.
    fn location(&self) -> String;

    /// The SQLite file; for PostgreSQL, the location as a path.
    fn path(&self) -> &Path;

    fn key(&self) -> StoreKey;

    /// A raw SQLite connection for tests; PostgreSQL has none.
    fn raw_connection(&self) -> Result<rusqlite::Connection>;

    fn debug_execute(&self, sql: &str) -> Result<u64>;

    fn debug_query_i64(&self, sql: &str) -> Result<i64>;
}

/// Nodes and threads (graph.rs).
pub(crate) trait Graph {
    fn append(&self, thread: &Thread) -> Result<AppendReport>;
    fn load_thread(&self, head: NodeId) -> Result<Thread>;
    fn load_thread_async(&self, head: NodeId) -> BoxFuture<'_, Result<Thread>>;
    fn node(&self, id: NodeId) -> Result<StoredNode>;
    fn node_async(&self, id: NodeId) -> BoxFuture<'_, Result<StoredNode>>;
    fn contains(&self, id: NodeId) -> Result<bool>;
    fn contains_async(&self, id: NodeId) -> BoxFuture<'_, Result<bool>>;
    fn children(&self, id: NodeId) -> Result<Vec<NodeId>>;
    fn children_async(&self, id: NodeId) -> BoxFuture<'_, Result<Vec<NodeId>>>;
    fn subtree(&self, root: NodeId, limit: usize) -> Result<Vec<TreeEntry>>;
    fn ancestry(&self, head: NodeId, limit: usize) -> Result<Vec<TreeEntry>>;
}

/// Conversation bookmarks and the turn commit (conversations.rs).
pub(crate) trait Conversations {
    fn create_conversation(&self, new: NewConversation) -> Result<ConversationRecord>;
    fn conversation(&self, id: &ConversationId) -> Result<ConversationRecord>;
    fn conversation_async<'a>(
        &'a self,
        id: &'a ConversationId,
    ) -> BoxFuture<'a, Result<ConversationRecord>>;
    fn list_conversations(&self, limit: usize) -> Result<Vec<ConversationRecord>>;
    fn list_conversations_async(
        &self,
        limit: usize,
    ) -> BoxFuture<'_, Result<Vec<ConversationRecord>>>;
    fn list_conversations_after(
        &self,
        after: &ListPosition,
        limit: usize,
    ) -> Result<Vec<ConversationRecord>>;
    fn list_conversations_after_async<'a>(
        &'a self,
        after: &'a ListPosition,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<ConversationRecord>>>;
    fn conversations_at(&self, node: NodeId) -> Result<Vec<ConversationRecord>>;
    fn conversations_at_async(
        &self,
        node: NodeId,
    ) -> BoxFuture<'_, Result<Vec<ConversationRecord>>>;
    fn rename_conversation(&self, id: &ConversationId, name: Option<&str>) -> Result<()>;
    fn set_conversation_settings(
        &self,
        id: &ConversationId,
        settings: &ConversationSettings,
    ) -> Result<()>;
    fn move_head(&self, id: &ConversationId, expected: Option<NodeId>, new: NodeId) -> Result<()>;
    fn commit_turn_observed(
        &self,
        turn: &TurnCommit<'_>,
        probe: &mut (dyn FnMut(CommitStageProbe) + Send),
    ) -> Result<Committed>;
    fn commit_turn_async<'a>(
        &'a self,
        turn: &'a TurnCommit<'a>,
    ) -> BoxFuture<'a, Result<Committed>>;
}

/// Run records (runs.rs).
pub(crate) trait Runs {
    fn record_run(&self, run: &RunRecord) -> Result<()>;
    fn run_record(&self, id: &RunId) -> Result<RunRecord>;
    fn run_record_async<'a>(&'a self, id: &'a RunId) -> BoxFuture<'a, Result<RunRecord>>;
    fn runs_of_conversation(&self, id: &ConversationId) -> Result<Vec<RunRecord>>;
    fn runs_of_conversation_async<'a>(
        &'a self,
        id: &'a ConversationId,
    ) -> BoxFuture<'a, Result<Vec<RunRecord>>>;
    fn runs_producing(&self, node: NodeId) -> Result<Vec<RunRecord>>;
    fn runs_producing_async(&self, node: NodeId) -> BoxFuture<'_, Result<Vec<RunRecord>>>;
    fn recent_runs(&self, limit: usize) -> Result<Vec<RunRecord>>;
}

/// Reruns of recorded turns (reruns.rs).
pub(crate) trait Reruns {
    fn commit_rerun(&self, commit: &RerunCommit<'_>) -> Result<()>;
    fn commit_rerun_async<'a>(&'a self, commit: &'a RerunCommit<'a>) -> BoxFuture<'a, Result<()>>;
    fn rerun(&self, id: &RerunId) -> Result<RerunRecord>;
    fn rerun_async<'a>(&'a self, id: &'a RerunId) -> BoxFuture<'a, Result<RerunRecord>>;
    fn reruns_of_conversation(&self, id: &ConversationId) -> Result<Vec<RerunRecord>>;
    fn reruns_of_conversation_async<'a>(
        &'a self,
        id: &'a ConversationId,
    ) -> BoxFuture<'a, Result<Vec<RerunRecord>>>;
    fn reruns_of_node(&self, node: NodeId) -> Result<Vec<RerunRecord>>;
    fn reruns_answering(&self, node: NodeId) -> Result<Vec<RerunRecord>>;
    fn all_reruns(&self) -> Result<Vec<RerunRecord>>;
}

/// The rows a conversation's family is assembled from (family.rs).
pub(crate) trait Families {
    fn family(&self, id: &ConversationId, limits: FamilyLimits) -> Result<FamilyRows>;
}

/// The full-text index (search.rs).
pub(crate) trait Search {
    /// Up to `limit` nodes matching `query`, newest first, within the
    /// thread ending at `within` when given.
    fn search_nodes(
        &self,
        query: &Parsed,
        role: Option<Role>,
        within: Option<NodeId>,
        limit: usize,
    ) -> Result<Vec<(NodeId, Message)>>;
    /// Up to `cap` conversations whose thread holds `node`.
    fn containing(&self, node: NodeId, cap: usize) -> Result<Vec<ConversationRef>>;
}

/// The ids in a range, for prefix resolution (resolve.rs).
pub(crate) trait IdRanges {
    fn node_ids_between(&self, low: &[u8], high: &[u8], limit: usize) -> Result<Vec<NodeId>>;
    fn node_ids_between_async<'a>(
        &'a self,
        low: &'a [u8],
        high: &'a [u8],
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<NodeId>>>;
    fn conversation_ids_named(&self, name: &str, limit: usize) -> Result<Vec<String>>;
    fn conversation_ids_named_async<'a>(
        &'a self,
        name: &'a str,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<String>>>;
    fn text_ids_between(
        &self,
        table: IdTable,
        low: &str,
        high: &str,
        limit: usize,
    ) -> Result<Vec<String>>;
    fn text_ids_between_async<'a>(
        &'a self,
        table: IdTable,
        low: &'a str,
        high: &'a str,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<String>>>;
}

/// The rows usage accounts are added up from (usage.rs).
pub(crate) trait UsageRows {
    fn run_rows(&self, ids: &[RunId]) -> Result<Vec<RunRow>>;
    fn conversation_run_rows(&self, id: &ConversationId) -> Result<Vec<(RunId, Option<NodeId>)>>;
    fn runs_with_output(&self, node: NodeId) -> Result<Vec<RunId>>;
    fn ancestor_ids(&self, head: NodeId) -> Result<HashSet<NodeId>>;
    fn link_sources(&self, kind: &str, targets: &[&str]) -> Result<Vec<RunId>>;
    fn link_targets(&self, kind: &str, runs: &[RunId]) -> Result<Vec<String>>;
}

/// The embedding cache (embeddings.rs).
pub(crate) trait EmbeddingCache {
    fn cached_embedding(&self, embedder: &str, digest: &Digest) -> Result<Option<Vec<f32>>>;
    fn cached_embedding_async<'a>(
        &'a self,
        embedder: &'a str,
        digest: &'a Digest,
    ) -> BoxFuture<'a, Result<Option<Vec<f32>>>>;
    fn cache_embedding(&self, embedder: &str, digest: &Digest, vector: &[f32]) -> Result<()>;
    fn cache_embedding_async<'a>(
        &'a self,
        embedder: &'a str,
        digest: &'a Digest,
        vector: &'a [f32],
    ) -> BoxFuture<'a, Result<()>>;
}

/// Export's node section and import's one transaction (transfer.rs).
pub(crate) trait Transfer {
    fn export_nodes(&self, out: &mut dyn Write) -> Result<()>;
    fn import_lines(&self, lines: &[(usize, Line)]) -> Result<ImportReport>;
}

/// Streaming every row through the shared checks (verify.rs).
pub(crate) trait Verify {
    fn verify(&self) -> Result<VerifyReport>;
}
