/*!
[`Store`], the handle every caller uses: it opens the backend the location
names (a `postgres://` or `postgresql://` URL opens PostgreSQL, anything else
is a SQLite file path) as a [`Backend`] and passes each operation to it.
Behaviour that needs no SQL (export's record section, import's checks,
prefix resolution in resolve.rs) runs here once for both backends.
*/

use crate::async_store::AsyncStore;
use crate::backend::Backend;
use crate::blocking;
use crate::bodies::RequestBody;
use crate::costs::CostMeter;
use crate::error::Result;
use crate::graph::{StoredNode, TreeEntry};
use crate::offers::ToolOffer;
use crate::open::OpenMode;
use crate::records::{
    Committed, ConversationId, ConversationRecord, ListPosition, RunId, RunRecord, TurnCommit,
};
use crate::sqlite::SqliteStore;
use crate::transfer::{self, ImportReport};
use crate::verify::VerifyReport;
#[cfg(any(test, feature = "testkit"))]
use crate::{CommitStageProbe, graph::AppendReport, records::NewConversation};
use skein_core::thread::Node;
use skein_core::{NodeId, StoreKey, Thread};
use std::future::Future;
use std::io::{BufRead, Write};
use std::path::Path;
use std::sync::Arc;

/// A handle on one database, SQLite or PostgreSQL. Cheap to clone; share it
/// freely.
///
/// Its methods block on I/O; each waits for the same operation of the
/// async API, [`Store::nonblocking`] ([`AsyncStore`]), which async code
/// awaits instead: `store.nonblocking().load_thread(head).await`. Each
/// operation has one body per backend: on PostgreSQL an async function
/// awaiting tokio-postgres on the caller's task, on SQLite the SQL run where
/// [`Store::run_blocking`] runs work (in place for a blocking method).
/// Export, import, verify and usage accounts are blocking only: run them,
/// or a closure making several blocking calls in a row, with
/// [`Store::run_blocking`].
#[derive(Clone)]
pub struct Store {
    backend: Arc<dyn Backend>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("location", &self.location())
            .finish_non_exhaustive()
    }
}

impl Store {
    /// Open the database at `location`, creating it if needed and migrating
    /// it to the current schema: a `postgres://` URL opens that PostgreSQL
    /// database (which must exist), anything else is a SQLite file. The
    /// same as [`Store::open_with`] with [`OpenMode::Create`].
    pub fn open(location: impl AsRef<Path>) -> Result<Store> {
        Store::open_with(location, OpenMode::Create)
    }

    /// Open the database at `location` as `mode` says: created when
    /// missing, or required to exist, or only read (see [`OpenMode`]).
    /// Whatever the mode, a location that holds something other than a
    /// skein database is refused untouched ([`StoreError::NotSkein`](crate::StoreError::NotSkein)).
    pub fn open_with(location: impl AsRef<Path>, mode: OpenMode) -> Result<Store> {
        let location = location.as_ref();
        let backend = match location
            .to_str()
            .filter(|text| crate::location::is_postgres_url(text))
        {
            Some(url) => open_postgres(url, mode, None)?,
            None => Arc::new(SqliteStore::open(location, mode)?),
        };
        Ok(Store { backend })
    }

    /// [`Store::open_with`] a PostgreSQL primary, with `read_url` naming a
    /// standby of it (or several hosts, libpq's way) for the reads of
    /// [`Store::reads`]. This handle's own reads still go to the primary.
    /// `read_url` needs `location` to be a PostgreSQL URL too.
    pub fn open_with_reads(
        location: impl AsRef<Path>,
        read_url: &str,
        mode: OpenMode,
    ) -> Result<Store> {
        let location = location.as_ref();
        let url = location
            .to_str()
            .filter(|text| crate::location::is_postgres_url(text));
        let read_is_url = crate::location::is_postgres_url(read_url);
        match url {
            Some(url) if read_is_url => Ok(Store {
                backend: open_postgres(url, mode, Some(read_url))?,
            }),
            _ => Err(crate::StoreError::BadUrl {
                location: crate::location::redact(read_url),
                reason: format!(
                    "a read URL names a PostgreSQL standby: it takes a postgres:// URL, and the \
                     database ({}) must be a postgres:// URL too",
                    crate::location::redact(&location.display().to_string())
                ),
            }),
        }
    }

    /// A handle on the same database whose reads go to the standby the
    /// store was opened with ([`Store::open_with_reads`]), for reads where
    /// a view a moment old is acceptable: listings, families, search, the
    /// web view's pages. After a write through any handle of this store,
    /// its reads wait (briefly) for the standby to have replayed it, else
    /// go to the primary: a process reads its own writes. Writes go to the
    /// primary. Without a standby (or on SQLite), a clone of this handle.
    pub fn reads(&self) -> Store {
        Store {
            backend: self
                .backend
                .reads()
                .unwrap_or_else(|| Arc::clone(&self.backend)),
        }
    }

    /// Whether this handle only reads: opened with [`OpenMode::ReadOnly`].
    pub fn is_read_only(&self) -> bool {
        self.backend().is_read_only()
    }

    pub(crate) fn backend(&self) -> &dyn Backend {
        &*self.backend
    }

    /// The async API: the operations async callers make one at a time,
    /// awaited without blocking the runtime (see [`AsyncStore`]).
    pub fn nonblocking(&self) -> AsyncStore<'_> {
        AsyncStore { store: self }
    }

    /// Which backend this handle talks to: `"sqlite"` or `"postgres"`.
    pub fn backend_name(&self) -> &'static str {
        self.backend.name()
    }

    /// Whether this handle created the database (a SQLite file that was
    /// missing, opened with [`OpenMode::Create`](crate::OpenMode::Create))
    /// and nothing is recorded in it yet (no message, conversation, run,
    /// rerun, label or replay, whoever would have written it): what a
    /// command that failed before its first write may remove again, once
    /// every handle on it is closed.
    pub fn created_blank(&self) -> Result<bool> {
        self.backend().created_blank()
    }

    /// The SQLite file, or the PostgreSQL URL without its password.
    pub fn location(&self) -> String {
        self.backend().location()
    }

    /// The SQLite file this store opened. For PostgreSQL, the URL without
    /// its password, as a path (prefer [`Store::location`]).
    pub fn path(&self) -> &Path {
        self.backend().path()
    }

    /// The key nodes are marked with once this database holds them. It
    /// identifies the database, not this handle.
    pub fn key(&self) -> StoreKey {
        self.backend().key()
    }

    /// Run blocking store work from async code without stalling the
    /// runtime's other tasks. No transaction is held across an `.await`.
    ///
    /// - On a multi-thread runtime the work runs on the calling worker inside
    ///   `block_in_place`, which hands that worker's other tasks to another
    ///   thread: no thread hop, so a short read costs what the read costs.
    /// - On a current-thread runtime it runs on tokio's blocking pool, and
    ///   the task waits for it. Two thread wake-ups per call; on a loaded
    ///   machine they can cost as much as the read.
    /// - Inside [`crate::blocking_caller`] (skein's blocking API, whose private
    ///   runtime drives one call for a caller that is waiting anyway) SQLite
    ///   work runs in place.
    pub async fn run_blocking<T, F>(&self, work: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Store) -> Result<T> + Send + 'static,
    {
        blocking::run(self, self.backend.works_on_caller_thread(), work).await
    }

    /// Wait for one of the async API's operations: every blocking method is
    /// one. On PostgreSQL through the bridge (postgres/bridge.rs); on
    /// SQLite on this thread, where the work then runs in place.
    pub(crate) fn wait<T: Send>(
        &self,
        operation: impl Future<Output = Result<T>> + Send,
    ) -> Result<T> {
        #[cfg(feature = "postgres")]
        if !self.backend.works_on_caller_thread() {
            return crate::postgres::bridge::block_on(move || operation);
        }
        blocking::in_place(operation)
    }

    #[cfg(any(test, feature = "testkit"))]
    /// Store every node of `thread` this database does not hold yet, in one
    /// transaction. Marks the nodes as persisted here once committed.
    pub fn append(&self, thread: &Thread) -> Result<AppendReport> {
        self.wait(self.nonblocking().append(thread))
    }

    /// Load the thread whose head is `head`: one range scan per lane the
    /// thread runs through (PostgreSQL: all in one query).
    pub fn load_thread(&self, head: NodeId) -> Result<Thread> {
        self.wait(self.nonblocking().load_thread(head))
    }

    /// One node by id, without loading its thread.
    pub fn node(&self, id: NodeId) -> Result<StoredNode> {
        self.wait(self.nonblocking().node(id))
    }

    /// Whether the database holds the node.
    pub fn contains(&self, id: NodeId) -> Result<bool> {
        self.wait(self.nonblocking().contains(id))
    }

    /// The nodes whose parent is `id`, oldest first.
    pub fn children(&self, id: NodeId) -> Result<Vec<NodeId>> {
        self.wait(self.nonblocking().children(id))
    }

    /// The stored messages that make a tool call of id `call_id` (at most
    /// `limit`, oldest first): where a call a request carries was made.
    pub fn nodes_calling(&self, call_id: &str, limit: usize) -> Result<Vec<NodeId>> {
        self.wait(self.nonblocking().nodes_calling(call_id, limit))
    }

    /// The subtree under `root` (inclusive): its `limit` nodes nearest the
    /// root (breadth first), in topological order. Reads no further, however
    /// large the subtree.
    pub fn subtree(&self, root: NodeId, limit: usize) -> Result<Vec<TreeEntry>> {
        self.wait(self.nonblocking().subtree(root, limit))
    }

    /// The last `limit` nodes of the thread ending at `head` (the head
    /// included), oldest first, with one-line previews: the whole thread when
    /// it is no longer, so the first entry is the root exactly when its
    /// `parent` is `None`. Reads at most `limit` nodes, however deep the
    /// thread.
    pub fn ancestry(&self, head: NodeId, limit: usize) -> Result<Vec<TreeEntry>> {
        self.wait(self.nonblocking().ancestry(head, limit))
    }

    #[cfg(any(test, feature = "testkit"))]
    /// Create a conversation, optionally starting at an existing node. A
    /// name that reads as an id is refused
    /// ([`StoreError::NameLooksLikeId`](crate::StoreError::NameLooksLikeId),
    /// see [`check_conversation_name`](crate::check_conversation_name)),
    /// and so is one another conversation has
    /// ([`StoreError::NameTaken`](crate::StoreError::NameTaken)).
    pub fn create_conversation(&self, new: NewConversation) -> Result<ConversationRecord> {
        self.wait(self.nonblocking().create_conversation(new))
    }

    #[cfg(any(test, feature = "testkit"))]
    /// Fork: a new conversation whose head is `node` (any stored node),
    /// recording where it came from. O(1); the origin is never touched.
    pub fn fork(
        &self,
        node: NodeId,
        name: Option<String>,
        from: Option<ConversationId>,
    ) -> Result<ConversationRecord> {
        self.wait(self.nonblocking().fork(node, name, from))
    }

    pub fn conversation(&self, id: &ConversationId) -> Result<ConversationRecord> {
        self.wait(self.nonblocking().conversation(id))
    }

    /// Conversations, most recently updated first.
    pub fn list_conversations(&self, limit: usize) -> Result<Vec<ConversationRecord>> {
        self.wait(self.nonblocking().list_conversations(limit))
    }

    /// The conversations listed after `after` (the last one of the previous
    /// page), in the same order, at most `limit`. Paging this way lists every
    /// conversation once; one updated while the pages are read moves to the
    /// front of the listing and is not listed again.
    pub fn list_conversations_after(
        &self,
        after: &ListPosition,
        limit: usize,
    ) -> Result<Vec<ConversationRecord>> {
        self.wait(self.nonblocking().list_conversations_after(after, limit))
    }

    /// Conversations whose head is exactly `node`.
    pub fn conversations_at(&self, node: NodeId) -> Result<Vec<ConversationRecord>> {
        self.wait(self.nonblocking().conversations_at(node))
    }

    /// The conversations of these ids that exist, in no order, in one
    /// statement (a listing naming the conversations of many rows).
    pub fn conversations_by_ids(&self, ids: &[ConversationId]) -> Result<Vec<ConversationRecord>> {
        self.wait(self.nonblocking().conversations_by_ids(ids))
    }

    /// Name the conversation (`None` removes its name). A name that reads
    /// as an id, or that another conversation has, is refused, as on
    /// creation, and nothing changes.
    pub fn rename_conversation(&self, id: &ConversationId, name: Option<&str>) -> Result<()> {
        self.wait(self.nonblocking().rename_conversation(id, name))
    }

    #[cfg(any(test, feature = "testkit"))]
    /// Replace the conversation's settings.
    pub fn set_conversation_settings(
        &self,
        id: &ConversationId,
        settings: &skein_core::ConversationSettings,
    ) -> Result<()> {
        self.wait(self.nonblocking().set_conversation_settings(id, settings))
    }

    #[cfg(any(test, feature = "testkit"))]
    /// Move a bookmark from `expected` to `new` (a stored node), or report
    /// [`StoreError::HeadMoved`](crate::StoreError::HeadMoved) if someone else moved it first.
    pub fn move_head(
        &self,
        id: &ConversationId,
        expected: Option<NodeId>,
        new: NodeId,
    ) -> Result<()> {
        self.wait(self.nonblocking().move_head(id, expected, new))
    }

    /// Commit a turn in one transaction: its nodes, its runs, and where it
    /// lands (the bookmark moved by compare-and-set, a conversation created
    /// with it, or none for a failed first turn). When the bookmark moved
    /// since `expected_head`, the nodes and runs are still committed
    /// (nothing is lost) and the turn either fails with
    /// [`StoreError::HeadMoved`](crate::StoreError::HeadMoved) naming the node where it stands, or
    /// branches into a new conversation, as the target's `on_conflict` says.
    /// A conversation it would create under a name that reads as an id is
    /// refused before anything is written; one under a name another
    /// conversation has ([`StoreError::NameTaken`](crate::StoreError::NameTaken))
    /// is refused inside the transaction, which then writes nothing.
    pub fn commit_turn(&self, turn: &TurnCommit<'_>) -> Result<Committed> {
        crate::conversations::check_turn_names(turn)?;
        self.wait(self.backend().commit_turn(turn, &mut |_| {}))
    }

    #[cfg(any(test, feature = "testkit"))]
    /// [`Store::commit_turn`] with a probe called at each stage inside the
    /// transaction; crash tests use it to die mid-turn.
    #[doc(hidden)]
    pub fn commit_turn_observed(
        &self,
        turn: &TurnCommit<'_>,
        probe: &mut (dyn FnMut(CommitStageProbe) + Send),
    ) -> Result<Committed> {
        crate::conversations::check_turn_names(turn)?;
        self.wait(self.backend().commit_turn(turn, probe))
    }

    #[cfg(any(test, feature = "testkit"))]
    /// Record a run on its own, as belonging to its `conversation`. Turns,
    /// failed ones included, go through [`Store::commit_turn`].
    pub fn record_run(&self, run: &RunRecord) -> Result<()> {
        self.wait(self.nonblocking().record_run(run))
    }

    pub fn run_record(&self, id: &RunId) -> Result<RunRecord> {
        self.wait(self.nonblocking().run_record(id))
    }

    /// The exact request body run `id` kept (a proxied run's), put
    /// together from its content-addressed pieces and checked against the
    /// digest the run recorded; where erasure took pieces of it, what is
    /// left with the erased spans named. `None` when the run kept no body;
    /// [`StoreError::RunNotFound`] when there is no such run.
    pub fn request_body(&self, id: &RunId) -> Result<Option<RequestBody>> {
        self.wait(self.nonblocking().request_body(id))
    }

    /// The runs of a conversation, oldest first.
    pub fn runs_of_conversation(&self, id: &ConversationId) -> Result<Vec<RunRecord>> {
        self.wait(self.nonblocking().runs_of_conversation(id))
    }

    /// The runs that produced `node` (many runs may produce one node).
    pub fn runs_producing(&self, node: NodeId) -> Result<Vec<RunRecord>> {
        self.wait(self.nonblocking().runs_producing(node))
    }

    /// [`AsyncStore::tool_offers`]: what `conversation`'s own calls
    /// offered, one row per change of a tool's schema, up to a depth.
    pub fn tool_offers(
        &self,
        conversation: &ConversationId,
        up_to_depth: Option<u64>,
    ) -> Result<Vec<ToolOffer>> {
        self.wait(self.nonblocking().tool_offers(conversation, up_to_depth))
    }

    /// The most recent runs, newest first.
    pub fn recent_runs(&self, limit: usize) -> Result<Vec<RunRecord>> {
        self.wait(self.nonblocking().recent_runs(limit))
    }

    /// The most recent runs of the user's own turns, newest first: the
    /// runs a replay made (its replayed answers) are left out, so a replay
    /// never fills `skein log`.
    pub fn recent_turns(&self, limit: usize) -> Result<Vec<RunRecord>> {
        self.wait(self.backend().recent_runs(limit, true))
    }

    /// Write the whole database as JSONL ([`Store::import`] reads it back):
    /// the same file, byte for byte, whichever backend holds the graph.
    pub fn export(&self, out: &mut dyn Write) -> Result<()> {
        self.backend().export_nodes(out)?;
        let conversations = self.list_conversations(usize::MAX >> 1)?;
        let runs = self.recent_runs(usize::MAX >> 1)?;
        transfer::write_records(out, conversations, runs, self.all_reruns()?)?;
        self.backend().export_bodies(out)?;
        self.export_replays_and_labels(out)
    }

    /// Every replay with its turns, then every label, a page at a time; then
    /// the deleted conversations remaining forks name.
    fn export_replays_and_labels(&self, out: &mut dyn Write) -> Result<()> {
        const PAGE: usize = 1000;
        for replay in self.all_replays()? {
            let id = replay.id.clone();
            transfer::write_replay(out, replay)?;
            let mut after = None;
            loop {
                let page = self.replay_turns(&id, after, PAGE)?;
                after = page.last().map(|turn| turn.seq);
                for turn in page {
                    transfer::write_replay_turn(out, turn)?;
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
                    transfer::write_label(out, label)?;
                }
                if after.is_none() {
                    break;
                }
            }
        }
        for deleted in self.backend().deleted_origins()? {
            transfer::write_deleted(out, deleted)?;
        }
        out.flush()?;
        Ok(())
    }

    /// Import a JSONL export. All or nothing. A line longer than
    /// [`transfer::DEFAULT_IMPORT_LINE_LIMIT`] is refused
    /// ([`StoreError::LineTooLong`](crate::StoreError::LineTooLong)).
    pub fn import(&self, input: &mut dyn BufRead) -> Result<ImportReport> {
        self.import_with_line_limit(input, transfer::DEFAULT_IMPORT_LINE_LIMIT)
    }

    /// [`Store::import`] with another limit on one line's length, in bytes
    /// (a node line holds its attachments, base64-encoded).
    pub fn import_with_line_limit(
        &self,
        input: &mut dyn BufRead,
        max_line: usize,
    ) -> Result<ImportReport> {
        let lines = transfer::parse_lines(input, max_line)?;
        transfer::check_ids(&lines)?;
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
        let lines = transfer::record_lines(nodes, conversations, runs);
        self.backend().import_lines(&lines)
    }

    /// Check the whole database. Problems are reported, never repaired.
    pub fn verify(&self) -> Result<VerifyReport> {
        self.backend().verify()
    }

    #[cfg(any(test, feature = "testkit"))]
    /// Every (table, column) of the live schema (crate::places's test reads
    /// it).
    pub fn schema_columns(&self) -> Result<Vec<(String, String)>> {
        self.backend().columns()
    }

    #[cfg(any(test, feature = "testkit"))]
    /// A raw SQLite connection for tests that must tamper with or inspect
    /// rows; an error on PostgreSQL (use [`Store::debug_execute`]).
    #[doc(hidden)]
    pub fn raw_connection(&self) -> Result<rusqlite::Connection> {
        self.backend.raw_connection()
    }

    #[cfg(any(test, feature = "testkit"))]
    /// Run one SQL statement with no parameters outside any store
    /// operation, for tests that tamper with rows on either backend; returns
    /// the rows changed.
    #[doc(hidden)]
    pub fn debug_execute(&self, sql: &str) -> Result<u64> {
        self.backend().debug_execute(sql)
    }

    /// Count the statements this handle runs and the rows they return, from
    /// now on, so a test can state what an operation may cost (see
    /// [`CostMeter`]); the same meter each time it is asked. SQLite only:
    /// `None` on PostgreSQL. Counting costs a few nanoseconds per row.
    pub fn meter(&self) -> Option<CostMeter> {
        self.backend.meter()
    }

    #[cfg(any(test, feature = "testkit"))]
    /// The first column of the first row of `sql`, as an integer, for tests.
    #[doc(hidden)]
    pub fn debug_query_i64(&self, sql: &str) -> Result<i64> {
        self.backend().debug_query_i64(sql)
    }
}

#[cfg(feature = "postgres")]
fn open_postgres(url: &str, mode: OpenMode, read_url: Option<&str>) -> Result<Arc<dyn Backend>> {
    Ok(Arc::new(crate::postgres::PgStore::open(
        url, mode, read_url,
    )?))
}

#[cfg(not(feature = "postgres"))]
fn open_postgres(url: &str, _mode: OpenMode, _read_url: Option<&str>) -> Result<Arc<dyn Backend>> {
    Err(crate::StoreError::NoPostgresSupport {
        location: crate::location::redact(url),
    })
}
