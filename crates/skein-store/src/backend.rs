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

use crate::CommitStageProbe;
use crate::bodies::RequestBody;
use crate::costs::CostMeter;
use crate::error::Result;
use crate::family::{FamilyLimits, FamilyRows};
use crate::forget::{DeletedConversation, Doomed, Filter, Planned, Scrubbed, Swept};
use crate::graph::{StoredNode, TreeEntry};
use crate::labels::{Label, LabelCount};
use crate::offers::ToolOffer;
use crate::records::{
    Committed, ConversationId, ConversationRecord, ListPosition, ReplayId, RerunId, RunId,
    RunRecord, TurnCommit,
};
use crate::replays::{
    ListedReplay, NewReplayTurn, ReplayPosition, ReplayRecord, ReplayTotals, ReplayTurn,
    ReplayTurnFinish,
};
use crate::reruns::{RerunCommit, RerunRecord};
use crate::resolve::IdTable;
use crate::search::{ConversationRef, Parsed};
use crate::transfer::{ImportReport, Line};
use crate::usage::{RunOutputs, RunRow};
use crate::verify::VerifyReport;
#[cfg(any(test, feature = "testkit"))]
use crate::{ConversationSettings, graph::AppendReport, records::NewConversation};
use skein_core::{Digest, Message, NodeId, Role, StoreKey, Thread};
use std::collections::HashSet;
use std::future::Future;
use std::io::Write;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;

/// A future a backend returns from an async operation.
pub(crate) type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// One database: the handle's own facts, and every concern's operations.
///
/// Each operation is async and has one body per backend: on PostgreSQL it
/// awaits tokio-postgres on the caller's task, on SQLite it runs where
/// [`crate::blocking::run`] says (in place for a blocking caller). The
/// blocking API waits for the same future ([`crate::Store`]'s `wait`).
/// Export, import and verify, bulk work of the command line, are blocking
/// only.
pub(crate) trait Backend:
    Graph
    + Conversations
    + Runs
    + Reruns
    + Replays
    + Labels
    + Families
    + Search
    + IdRanges
    + UsageRows
    + EmbeddingCache
    + Transfer
    + Verify
    + Forget
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

    /// Whether this handle created the database (a SQLite file that was
    /// missing, opened with [`OpenMode::Create`](crate::OpenMode::Create))
    /// and nothing is recorded in it yet: no message, conversation, run,
    /// rerun, label or replay. skein never creates a PostgreSQL database.
    fn created_blank(&self) -> Result<bool> {
        Ok(false)
    }

    #[cfg(any(test, feature = "testkit"))]
    /// A raw SQLite connection for tests; PostgreSQL has none.
    fn raw_connection(&self) -> Result<rusqlite::Connection>;

    #[cfg(any(test, feature = "testkit"))]
    fn debug_execute(&self, sql: &str) -> Result<u64>;

    /// Count this handle's statements and rows from now on (see costs.rs);
    /// `None` where the backend cannot.
    fn meter(&self) -> Option<CostMeter>;

    /// The bodies this handle stored last, which the next body of their
    /// conversations is cut from (bodies/recent.rs); they hold texts, so
    /// whatever forgets clears them.
    fn recent_bodies(&self) -> &crate::bodies::Recent;

    /// A handle on the same database whose reads go to its standby
    /// (postgres/router.rs); `None` when there is none.
    fn reads(&self) -> Option<Arc<dyn Backend>> {
        None
    }

    #[cfg(any(test, feature = "testkit"))]
    fn debug_query_i64(&self, sql: &str) -> Result<i64>;
}

/// Nodes and threads (graph.rs).
pub(crate) trait Graph {
    #[cfg(any(test, feature = "testkit"))]
    fn append<'a>(&'a self, thread: &'a Thread) -> BoxFuture<'a, Result<AppendReport>>;
    fn load_thread(&self, head: NodeId) -> BoxFuture<'_, Result<Thread>>;
    fn node(&self, id: NodeId) -> BoxFuture<'_, Result<StoredNode>>;
    fn contains(&self, id: NodeId) -> BoxFuture<'_, Result<bool>>;
    fn children(&self, id: NodeId) -> BoxFuture<'_, Result<Vec<NodeId>>>;
    fn nodes_calling<'a>(
        &'a self,
        call_id: &'a str,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<NodeId>>>;
    fn subtree(&self, root: NodeId, limit: usize) -> BoxFuture<'_, Result<Vec<TreeEntry>>>;
    fn ancestry(&self, head: NodeId, limit: usize) -> BoxFuture<'_, Result<Vec<TreeEntry>>>;
}

/// Conversation bookmarks and the turn commit (conversations.rs).
pub(crate) trait Conversations {
    #[cfg(any(test, feature = "testkit"))]
    fn create_conversation(
        &self,
        new: NewConversation,
    ) -> BoxFuture<'_, Result<ConversationRecord>>;
    fn conversation<'a>(
        &'a self,
        id: &'a ConversationId,
    ) -> BoxFuture<'a, Result<ConversationRecord>>;
    fn list_conversations(&self, limit: usize) -> BoxFuture<'_, Result<Vec<ConversationRecord>>>;
    fn list_conversations_after<'a>(
        &'a self,
        after: &'a ListPosition,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<ConversationRecord>>>;
    fn conversations_at(&self, node: NodeId) -> BoxFuture<'_, Result<Vec<ConversationRecord>>>;
    fn conversations_by_ids<'a>(
        &'a self,
        ids: &'a [ConversationId],
    ) -> BoxFuture<'a, Result<Vec<ConversationRecord>>>;
    fn rename_conversation<'a>(
        &'a self,
        id: &'a ConversationId,
        name: Option<&'a str>,
    ) -> BoxFuture<'a, Result<()>>;
    #[cfg(any(test, feature = "testkit"))]
    fn set_conversation_settings<'a>(
        &'a self,
        id: &'a ConversationId,
        settings: &'a ConversationSettings,
    ) -> BoxFuture<'a, Result<()>>;
    #[cfg(any(test, feature = "testkit"))]
    fn move_head<'a>(
        &'a self,
        id: &'a ConversationId,
        expected: Option<NodeId>,
        new: NodeId,
    ) -> BoxFuture<'a, Result<()>>;
    /// The turn commit, with `probe` called at each stage inside the
    /// transaction (crash tests die there).
    fn commit_turn<'a>(
        &'a self,
        turn: &'a TurnCommit<'a>,
        probe: &'a mut (dyn FnMut(CommitStageProbe) + Send),
    ) -> BoxFuture<'a, Result<Committed>>;
}

/// Run records (runs.rs).
pub(crate) trait Runs {
    #[cfg(any(test, feature = "testkit"))]
    fn record_run<'a>(&'a self, run: &'a RunRecord) -> BoxFuture<'a, Result<()>>;
    fn run_record<'a>(&'a self, id: &'a RunId) -> BoxFuture<'a, Result<RunRecord>>;
    /// The request body run `id` kept, put together from its pieces
    /// (crate::bodies); `None` when it kept none.
    fn request_body<'a>(&'a self, id: &'a RunId) -> BoxFuture<'a, Result<Option<RequestBody>>>;
    fn runs_of_conversation<'a>(
        &'a self,
        id: &'a ConversationId,
    ) -> BoxFuture<'a, Result<Vec<RunRecord>>>;
    fn runs_producing(&self, node: NodeId) -> BoxFuture<'_, Result<Vec<RunRecord>>>;
    /// What `conversation`'s calls offered, one row per change, up to a
    /// depth of its thread (crate::offers).
    fn tool_offers<'a>(
        &'a self,
        conversation: &'a ConversationId,
        up_to_depth: Option<u64>,
    ) -> BoxFuture<'a, Result<Vec<ToolOffer>>>;
    /// The newest runs; `without_replays` leaves out the ones a replay
    /// made (a `replay` or `replay.judge` relation: `runs::replay_run`).
    fn recent_runs(
        &self,
        limit: usize,
        without_replays: bool,
    ) -> BoxFuture<'_, Result<Vec<RunRecord>>>;
}

/// Reruns of recorded turns (reruns.rs).
pub(crate) trait Reruns {
    fn commit_rerun<'a>(&'a self, commit: &'a RerunCommit<'a>) -> BoxFuture<'a, Result<()>>;
    fn rerun<'a>(&'a self, id: &'a RerunId) -> BoxFuture<'a, Result<RerunRecord>>;
    fn reruns_of_conversation<'a>(
        &'a self,
        id: &'a ConversationId,
    ) -> BoxFuture<'a, Result<Vec<RerunRecord>>>;
    fn reruns_of_node(&self, node: NodeId) -> BoxFuture<'_, Result<Vec<RerunRecord>>>;
    fn reruns_answering(&self, node: NodeId) -> BoxFuture<'_, Result<Vec<RerunRecord>>>;
    fn all_reruns(&self) -> BoxFuture<'_, Result<Vec<RerunRecord>>>;
}

/// Replays of recorded turns and their workers' claims (replays.rs).
pub(crate) trait Replays {
    fn create_replay<'a>(
        &'a self,
        record: &'a ReplayRecord,
        turns: &'a [NewReplayTurn],
    ) -> BoxFuture<'a, Result<()>>;
    fn replay<'a>(&'a self, id: &'a ReplayId) -> BoxFuture<'a, Result<ReplayRecord>>;
    fn all_replays(&self) -> BoxFuture<'_, Result<Vec<ReplayRecord>>>;
    fn list_replays<'a>(
        &'a self,
        after: Option<&'a ReplayPosition>,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<ListedReplay>>>;
    fn claim_replay_turns<'a>(
        &'a self,
        id: &'a ReplayId,
        worker: &'a str,
        limit: usize,
        lease_ms: i64,
    ) -> BoxFuture<'a, Result<Vec<ReplayTurn>>>;
    fn renew_replay_leases<'a>(
        &'a self,
        id: &'a ReplayId,
        worker: &'a str,
        lease_ms: i64,
    ) -> BoxFuture<'a, Result<u64>>;
    fn finish_replay_turn<'a>(
        &'a self,
        finish: &'a ReplayTurnFinish<'a>,
    ) -> BoxFuture<'a, Result<()>>;
    fn replay_turns<'a>(
        &'a self,
        id: &'a ReplayId,
        after: Option<u64>,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<ReplayTurn>>>;
    fn replay_turns_of_node(&self, node: NodeId) -> BoxFuture<'_, Result<Vec<ReplayTurn>>>;
    fn replayed_in<'a>(
        &'a self,
        conversations: &'a [ConversationId],
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<ReplayTurn>>>;
    fn replay_totals<'a>(&'a self, id: &'a ReplayId) -> BoxFuture<'a, Result<ReplayTotals>>;
}

/// Labels on nodes (labels.rs).
pub(crate) trait Labels {
    fn add_label<'a>(&'a self, name: &'a str, nodes: &'a [NodeId]) -> BoxFuture<'a, Result<u64>>;
    fn remove_label<'a>(&'a self, name: &'a str, nodes: &'a [NodeId])
    -> BoxFuture<'a, Result<u64>>;
    fn labelled<'a>(
        &'a self,
        name: &'a str,
        after: Option<NodeId>,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<Label>>>;
    fn labels_of(&self, node: NodeId) -> BoxFuture<'_, Result<Vec<String>>>;
    fn label_counts(&self) -> BoxFuture<'_, Result<Vec<LabelCount>>>;
}

/// The rows a conversation's family is assembled from (family.rs).
pub(crate) trait Families {
    fn family<'a>(
        &'a self,
        id: &'a ConversationId,
        limits: FamilyLimits,
    ) -> BoxFuture<'a, Result<FamilyRows>>;
}

/// The full-text index (search.rs).
pub(crate) trait Search {
    /// Up to `limit` nodes matching `query`, newest first, within the
    /// thread ending at `within` when given; without `replays`, none that
    /// only a replay's runs produced (`runs::replay_only_message`).
    fn search_nodes<'a>(
        &'a self,
        query: &'a Parsed,
        role: Option<Role>,
        within: Option<NodeId>,
        replays: bool,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<(NodeId, Message)>>>;
    /// Up to `cap` conversations whose thread holds `node`, none of
    /// `excluding` (a deletion's, which a dry run still stores: so the
    /// lookup finds the same conversations before and after it).
    fn containing<'a>(
        &'a self,
        node: NodeId,
        cap: usize,
        excluding: &'a [String],
    ) -> BoxFuture<'a, Result<Vec<ConversationRef>>>;
}

/// The ids in a range, for prefix resolution (resolve.rs).
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

/// The rows usage accounts are added up from (usage.rs).
pub(crate) trait UsageRows {
    fn run_rows<'a>(&'a self, ids: &'a [RunId]) -> BoxFuture<'a, Result<Vec<RunRow>>>;
    fn conversation_run_rows<'a>(
        &'a self,
        id: &'a ConversationId,
    ) -> BoxFuture<'a, Result<RunOutputs>>;
    fn ancestor_ids(&self, head: NodeId) -> BoxFuture<'_, Result<HashSet<NodeId>>>;
    fn link_sources<'a>(
        &'a self,
        kind: &'a str,
        targets: &'a [&'a str],
    ) -> BoxFuture<'a, Result<Vec<RunId>>>;
    fn link_targets<'a>(
        &'a self,
        kind: &'a str,
        runs: &'a [RunId],
    ) -> BoxFuture<'a, Result<Vec<String>>>;
}

/// The embedding cache (embeddings.rs).
pub(crate) trait EmbeddingCache {
    fn cached_embedding<'a>(
        &'a self,
        embedder: &'a str,
        digest: &'a Digest,
    ) -> BoxFuture<'a, Result<Option<Vec<f32>>>>;
    fn cache_embedding<'a>(
        &'a self,
        embedder: &'a str,
        digest: &'a Digest,
        vector: &'a [f32],
    ) -> BoxFuture<'a, Result<()>>;
}

/// Export's node section and import's one transaction (transfer.rs).
pub(crate) trait Transfer {
    fn export_nodes(&self, out: &mut dyn Write) -> Result<()>;
    /// Every piece of every recorded request body, parent first, then
    /// which pieces each run's body is.
    fn export_bodies(&self, out: &mut dyn Write) -> Result<()>;
    fn import_lines(&self, lines: &[(usize, Line)]) -> Result<ImportReport>;
}

/// Streaming every row through the shared checks (verify.rs).
pub(crate) trait Verify {
    fn verify(&self) -> Result<VerifyReport>;
    /// How many rows of `place` hold `text` (places.rs); `None` when this
    /// backend has no such place.
    fn rows_holding(&self, place: &crate::places::Place, text: &str) -> Result<Option<u64>>;
    #[cfg(any(test, feature = "testkit"))]
    /// Every (table, column) of the live schema.
    fn columns(&self) -> Result<Vec<(String, String)>>;
}

/// Deleting conversations and collecting what only they reached
/// (forget.rs). Blocking only, like export and verify.
pub(crate) trait Forget {
    /// Delete `doomed`, `replays` (each with its turns' rows and runs) and
    /// `unowned` (runs no conversation holds: failed first turns), and the
    /// rows and nodes only they reached, in one transaction; with
    /// `dry_run` the transaction is rolled back.
    fn forget(
        &self,
        doomed: &[Doomed],
        replays: &[ReplayId],
        unowned: &[String],
        dry_run: bool,
    ) -> Result<Swept>;
    /// The runs no conversation holds that `filter` takes (by when they
    /// started, their client, whether the proxy made them).
    fn unowned_runs(&self, filter: &Filter) -> Result<Vec<String>>;
    /// Every node nothing reaches (children first), read without locking
    /// anything, with how many nodes are kept and the kept ones something
    /// references directly (the deepest [`crate::SHARERS_SHOWN`]).
    fn garbage(&self) -> Result<Planned>;
    /// Delete those of `nodes` that nothing reaches still (a turn may have
    /// built on one since it was planned), with what only they used, in
    /// one transaction that locks only them; with `dry_run` it is rolled
    /// back.
    fn collect_batch(&self, nodes: &[NodeId], dry_run: bool) -> Result<Swept>;
    /// Run `work` unless another connection runs work under `key` now
    /// (false then, and `work` is not run).
    fn exclusively(&self, key: i64, work: &mut dyn FnMut() -> Result<()>) -> Result<bool>;
    /// Replace `node`'s body by `erased` (the same id), and remove what held
    /// `original`'s content elsewhere, in one transaction.
    fn redact(&self, node: NodeId, original: &Message, erased: &Message) -> Result<Scrubbed>;
    /// Rewrite the database without its free pages.
    fn vacuum(&self) -> Result<()>;
    /// The runs that keep a request body, oldest first.
    fn bodied_runs(&self) -> Result<Vec<RunId>>;
    /// Cut the bodies of `runs` again against their stored threads, in one
    /// transaction (crate::bodies, `Store::compact_bodies`).
    fn recut_bodies(&self, runs: &[RunId]) -> Result<crate::bodies::Recut>;
    /// The erasures counted so far (crate::forget::COUNT_ERASURE).
    fn erasures(&self) -> BoxFuture<'_, Result<u64>>;
    /// The deleted conversations remaining forks name as their origin.
    fn deleted_origins(&self) -> Result<Vec<DeletedConversation>>;
    /// The conversations holding a run the recording proxy's client
    /// `client` made (see [`crate::Filter::client`]).
    fn conversations_of_client(&self, client: &str) -> Result<Vec<String>>;
}
