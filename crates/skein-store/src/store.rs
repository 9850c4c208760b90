/*!
[`Store`], the handle every caller uses: it opens the backend the location
names (a `postgres://` or `postgresql://` URL opens PostgreSQL, anything else
is a SQLite file path) as a [`Backend`] and passes each operation to it.

This file holds opening, the handle's own facts (location, key, read-only,
the meter, test access) and the plumbing every operation uses
([`Store::nonblocking`], `wait`, [`Store::run_blocking`], `backend`). The
operations themselves, blocking and async, live with their concern: graph.rs,
conversations.rs, runs.rs, transfer.rs (export and import), verify.rs, and
so on, each next to the backend trait it calls.
*/

use crate::async_store::AsyncStore;
use crate::backend::Backend;
use crate::blocking;
use crate::costs::CostMeter;
use crate::error::Result;
use crate::open::OpenMode;
use crate::sqlite::SqliteStore;
use skein_core::StoreKey;
use std::future::Future;
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
