/*!
What a database backend provides: the [`Backend`] trait that SQLite
(sqlite/) and PostgreSQL (postgres/) implement, and [`crate::Store`] holds
as `Arc<dyn Backend>`, and the [`BoxFuture`] their async operations return.

[`Backend`] holds the handle's own facts and is the sum of one trait per
concern. A concern is one file stem X: `X.rs` declares its trait (graph.rs
declares `Graph`, resolve.rs `IdRanges`, ...) with the public `AsyncStore`
and `Store` methods that call it and the logic that needs no SQL;
`sqlite/X.rs` and `postgres/X.rs` implement it. The tidy test
(crates/skein-cli/tests/cli/tidy.rs) checks that placement.
*/

use crate::bodies::Bodies;
use crate::conversations::Conversations;
use crate::costs::CostMeter;
use crate::embeddings::EmbeddingCache;
use crate::error::Result;
use crate::family::Families;
use crate::forget::Forget;
use crate::graph::Graph;
use crate::labels::Labels;
use crate::places::Places;
use crate::replays::Replays;
use crate::reruns::Reruns;
use crate::resolve::IdRanges;
use crate::runs::Runs;
use crate::search::Search;
use crate::transfer::Transfer;
use crate::usage::UsageRows;
use crate::verify::Verify;
use skein_core::StoreKey;
use std::future::Future;
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
    + Bodies
    + Places
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
