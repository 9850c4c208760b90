/*!
The SQLite backend (what [`crate::Store`] opens for a file path): its
handle, opening, connection setup, the writer/reader split and write
transactions with busy handling. Each of its files implements the backend
trait its namesake top-level module declares (sqlite/graph.rs implements
crate::graph's `Graph`), each operation its blocking body of the same
name on [`SqliteStore`] run where [`blocking::run_own`] says
([`SqliteStore::deferred`]; in place for a blocking caller): graph.rs (nodes, threads, lanes),
conversations.rs (bookmarks and the turn commit), runs.rs, reruns.rs,
family.rs, search.rs (the FTS5 index), resolve.rs (id ranges), usage.rs,
embeddings.rs, transfer.rs (export and import loops), verify.rs,
places.rs (content places) and bodies.rs (request bodies); open.rs
recognises a skein file before anything is written to it, and schema.rs
holds the migrations.

One writer connection (behind a mutex) takes every write in a `BEGIN
IMMEDIATE` transaction, which in WAL mode waits on the busy handler instead
of failing the way a deferred transaction that upgrades to a write does.
Readers come from a small pool and never block the writer. A rusqlite
`Connection` is not `Sync`, so each is only ever used under its mutex.

Opened read-only (open.rs), every connection is read-only and `write`
refuses before touching the database.
*/

pub(crate) mod bodies;
mod calls;
mod conversations;
mod embeddings;
mod family;
pub(crate) mod forget;
mod graph;
mod labels;
mod offers;
pub(crate) mod open;
mod places;
mod replays;
mod reruns;
mod resolve;
mod runs;
pub(crate) mod schema;
mod search;
mod transfer;
mod usage;
mod verify;

use crate::backend::{Backend, BoxFuture};
use crate::blocking;
use crate::costs::CostMeter;
use crate::error::{Result, StoreError};
use crate::open::OpenMode;
use open::{ReadOnlyOpener, SqliteFile};
use rusqlite::config::DbConfig;
use rusqlite::trace::{TraceEvent, TraceEventCodes};
use rusqlite::{Connection, ErrorCode, OpenFlags, TransactionBehavior};
use skein_core::StoreKey;
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// How long one statement waits on another process's lock.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a write keeps retrying before reporting [`StoreError::Busy`].
const BUSY_GIVE_UP: Duration = Duration::from_secs(120);

/// A handle on one SQLite database. Cheap to clone.
#[derive(Clone)]
pub(crate) struct SqliteStore {
    shared: Arc<Shared>,
}

struct Shared {
    path: PathBuf,
    key: StoreKey,
    /// Closed before the writer (fields drop in order): the last connection
    /// to close checkpoints the WAL into the file and removes it, which a
    /// read-only reader cannot do.
    readers: Mutex<Vec<Connection>>,
    writer: Mutex<Connection>,
    /// Set when opened read-only: every connection is read-only (the
    /// "writer" too) and writes are refused.
    read_only: Option<ReadOnlyOpener>,
    /// Set once a caller asked to count costs: every connection, those
    /// made later too, reports to it.
    meter: Mutex<Option<CostMeter>>,
    /// This handle created the file (it was missing, and opened with
    /// [`OpenMode::Create`]).
    created: bool,
    recent: crate::bodies::Recent,
}

impl Backend for SqliteStore {
    fn name(&self) -> &'static str {
        "sqlite"
    }

    fn works_on_caller_thread(&self) -> bool {
        true
    }

    /// Whether this handle only reads (opened with [`OpenMode::ReadOnly`]).
    fn is_read_only(&self) -> bool {
        self.shared.read_only.is_some()
    }

    fn path(&self) -> &Path {
        &self.shared.path
    }

    fn location(&self) -> String {
        self.shared.path.display().to_string()
    }

    /// The key nodes are marked with once this database holds them. It
    /// identifies the database, not this handle.
    fn key(&self) -> StoreKey {
        self.shared.key
    }

    fn created_blank(&self) -> Result<bool> {
        if !self.shared.created {
            return Ok(false);
        }
        self.read(|conn| {
            Ok(conn.query_row(
                "SELECT NOT (EXISTS (SELECT 1 FROM nodes) OR EXISTS (SELECT 1 FROM conversations)
                     OR EXISTS (SELECT 1 FROM runs) OR EXISTS (SELECT 1 FROM reruns)
                     OR EXISTS (SELECT 1 FROM labels) OR EXISTS (SELECT 1 FROM replays))",
                [],
                |row| row.get(0),
            )?)
        })
    }

    #[cfg(any(test, feature = "testkit"))]
    /// A raw connection for tests that must tamper with or inspect rows.
    fn raw_connection(&self) -> Result<Connection> {
        self.connection()
    }

    #[cfg(any(test, feature = "testkit"))]
    fn debug_execute(&self, sql: &str) -> Result<u64> {
        Ok(self.raw_connection()?.execute(sql, [])? as u64)
    }

    fn recent_bodies(&self) -> &crate::bodies::Recent {
        &self.shared.recent
    }

    fn meter(&self) -> Option<CostMeter> {
        let mut meter = lock(&self.shared.meter);
        if let Some(meter) = meter.as_ref() {
            return Some(meter.clone());
        }
        let new = CostMeter::default();
        count_on(&mut lock(&self.shared.writer), &new).ok()?;
        for reader in lock(&self.shared.readers).iter_mut() {
            count_on(reader, &new).ok()?;
        }
        *meter = Some(new.clone());
        Some(new)
    }

    #[cfg(any(test, feature = "testkit"))]
    fn debug_query_i64(&self, sql: &str) -> Result<i64> {
        Ok(self
            .raw_connection()?
            .query_row(sql, [], |row| row.get(0))?)
    }
}

impl SqliteStore {
    /// A blocking body as an operation of the async API: run where
    /// [`blocking::run_own`] says, which is in place for the store's
    /// blocking methods and, on a current-thread runtime, unless a write
    /// would wait (then again on tokio's blocking pool, hence `FnMut`).
    /// `work` owns what it needs.
    pub(crate) fn deferred<T: Send + 'static>(
        &self,
        work: impl FnMut(&SqliteStore) -> Result<T> + Send + 'static,
    ) -> BoxFuture<'_, Result<T>> {
        Box::pin(blocking::run_own(self, work))
    }

    /// A point read as an operation of the async API: run in place, on
    /// whichever thread polls it. A point read looks up a row or a short
    /// index range and, in WAL mode, never waits for a writer, so it costs
    /// the caller's runtime less than the two thread wake-ups a hop to the
    /// blocking pool would (see [`blocking`]); a turn asks several.
    pub(crate) fn point_read<T: Send + 'static>(
        &self,
        work: impl FnOnce(&SqliteStore) -> Result<T> + Send + 'static,
    ) -> BoxFuture<'_, Result<T>> {
        Box::pin(async move { work(self) })
    }

    /// Open the database at `path` as `mode` says (see [`OpenMode`]),
    /// migrating it to the current schema. A file that is not a skein
    /// database is refused before anything is written to it.
    pub fn open(path: &Path, mode: OpenMode) -> Result<SqliteStore> {
        let path = path.to_path_buf();
        let location = || path.display().to_string();
        let opener = ReadOnlyOpener::new(&path);
        let (file, probe) = open::classify(&path, &opener)?;
        let mut created = false;
        match (file, mode) {
            (SqliteFile::Missing, OpenMode::Create) => {
                if let Some(dir) = path.parent().filter(|dir| !dir.as_os_str().is_empty()) {
                    std::fs::create_dir_all(dir)?;
                }
                created = create_owner_only(&path)?;
            }
            (SqliteFile::Missing, _) => {
                return Err(StoreError::NoDatabase {
                    location: location(),
                });
            }
            (SqliteFile::Blank, OpenMode::Create) => {}
            (SqliteFile::Blank, _) => {
                return Err(StoreError::NotSkein {
                    location: location(),
                    reason: "it is empty".into(),
                });
            }
            (SqliteFile::Skein { version }, OpenMode::ReadOnly) => {
                if version < schema::SCHEMA_VERSION {
                    upgrade(&path, version)?;
                } else if version > schema::SCHEMA_VERSION {
                    return Err(StoreError::NewerSchema {
                        found: version,
                        supported: schema::SCHEMA_VERSION,
                    });
                }
                let reader = match probe {
                    Some(probe) => probe,
                    None => opener.connect()?,
                };
                configure(&reader)?;
                return SqliteStore::assemble(path, reader, Some(opener), false);
            }
            (SqliteFile::Skein { .. }, _) => {
                // Asked before any connection writes, and of the files
                // before SQLite opens them: a database it cannot write
                // opens read-only without a word (see `open::unwritable`).
                if let Some(reason) = open::unwritable(&path, None) {
                    return Err(StoreError::CannotWrite {
                        location: location(),
                        reason,
                    });
                }
            }
        }
        let mut writer = connect(&path)?;
        if let Some(reason) = open::unwritable(&path, Some(&writer)) {
            return Err(StoreError::CannotWrite {
                location: location(),
                reason,
            });
        }
        // Two connections switching a new database to WAL at once: SQLite
        // answers the loser "locked" at once, without waiting.
        while_busy(|| Ok(writer.pragma_update(None, "journal_mode", "WAL")?))?;
        schema::migrate(&mut writer)?;
        let store = SqliteStore::assemble(path, writer, None, created)?;
        // The connection that recognised the file reads for the store: its
        // first reader, opened already.
        if let Some(probe) = probe {
            configure(&probe)?;
            lock(&store.shared.readers).push(probe);
        }
        Ok(store)
    }

    fn assemble(
        path: PathBuf,
        writer: Connection,
        read_only: Option<ReadOnlyOpener>,
        created: bool,
    ) -> Result<SqliteStore> {
        let key: String = writer.query_row(
            "SELECT value FROM meta WHERE key = 'store_key'",
            [],
            |row| row.get(0),
        )?;
        let key = key
            .parse()
            .map_err(|_| StoreError::Task(format!("store key `{key}` is not a number")))?;
        Ok(SqliteStore {
            shared: Arc::new(Shared {
                path,
                key,
                writer: Mutex::new(writer),
                readers: Mutex::new(Vec::new()),
                read_only,
                meter: Mutex::new(None),
                created,
                recent: Default::default(),
            }),
        })
    }

    /// A new connection of the kind this handle uses.
    fn connection(&self) -> Result<Connection> {
        let mut conn = match &self.shared.read_only {
            Some(opener) => {
                let conn = opener.connect()?;
                configure(&conn)?;
                conn
            }
            None => connect(&self.shared.path)?,
        };
        if let Some(meter) = lock(&self.shared.meter).as_ref() {
            count_on(&mut conn, meter)?;
        }
        Ok(conn)
    }

    /// Run `work` in a `BEGIN IMMEDIATE` transaction and commit it. When the
    /// database stays locked past the busy timeout the whole transaction is
    /// retried, so "database is locked" never reaches the caller; `work` must
    /// therefore be safe to run again.
    pub(crate) fn write<T>(
        &self,
        mut work: impl FnMut(&rusqlite::Transaction<'_>) -> Result<T>,
    ) -> Result<T> {
        if self.is_read_only() {
            return Err(StoreError::ReadOnly {
                location: self.location(),
            });
        }
        if !blocking::may_wait() {
            let Ok(mut conn) = self.shared.writer.try_lock() else {
                return Err(StoreError::WouldWait);
            };
            let written = write_without_waiting(&mut conn, work);
            // What the caller must hear is whether the write happened.
            // Setting a timeout fails only on misuse; should it, a later
            // write still waits, through `while_busy`'s own back-off.
            let _ = conn.busy_timeout(BUSY_TIMEOUT);
            return written;
        }
        let mut conn = lock(&self.shared.writer);
        while_busy(|| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let value = work(&tx)?;
            tx.commit()?;
            Ok(value)
        })
    }

    /// Run `work` on a reader connection.
    pub(crate) fn read<T>(&self, work: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
        let pooled = lock(&self.shared.readers).pop();
        // Opened read-only, the "writer" is a reader like the others: read
        // with it while it is free rather than open a second connection.
        if pooled.is_none()
            && self.shared.read_only.is_some()
            && let Ok(conn) = self.shared.writer.try_lock()
        {
            return work(&conn);
        }
        let conn = match pooled {
            Some(conn) => conn,
            None => self.connection()?,
        };
        let result = work(&conn);
        let mut readers = lock(&self.shared.readers);
        if readers.len() < 4 {
            readers.push(conn);
        }
        result
    }
}

/// Bring an older skein database opened for reading to the current schema,
/// through a writable connection of its own; reading it otherwise would
/// fail on every missing column.
fn upgrade(path: &Path, found: i64) -> Result<()> {
    let migrated = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(StoreError::from)
    .and_then(|mut conn| {
        conn.busy_timeout(BUSY_TIMEOUT)?;
        schema::migrate(&mut conn)
    });
    migrated.map_err(|error| StoreError::OutdatedReadOnly {
        location: path.display().to_string(),
        found,
        supported: schema::SCHEMA_VERSION,
        reason: error.to_string(),
    })
}

fn connect(path: &Path) -> Result<Connection> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    configure(&conn)?;
    Ok(conn)
}

/// What every connection sets, read-only ones included.
fn configure(conn: &Connection) -> Result<()> {
    conn.busy_timeout(BUSY_TIMEOUT)?;
    // NORMAL is durable against process crashes in WAL mode; only a power
    // loss can drop the last commits, never corrupt the database.
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    conn.set_prepared_statement_cache_capacity(64);
    // Without the query planner stability guarantee, SQLite lets bound values
    // steer plans, and marks any statement whose plan looked at one for
    // re-preparing on `sqlite3_clear_bindings`, which rusqlite calls on every
    // statement it returns to its cache: nearly every cached statement was
    // compiled again on each use. Our queries have one right plan each.
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true)?;
    Ok(())
}

/// Report to `meter` the statements skein runs on `conn` and the rows they
/// return. What SQLite runs inside them is left out: its reads of the
/// schema (on a connection's first use) and the full-text index's upkeep
/// (segment merges every so many inserts, amortised constant), which it
/// traces as statements of their own, their text starting `--`; so counts
/// depend neither on which pooled connection did the work nor on when the
/// index last merged.
fn count_on(conn: &mut Connection, meter: &CostMeter) -> Result<()> {
    let meter = meter.clone();
    // The texts of the statements SQLite ran inside ours, whose rows are
    // left out too (a row event names only its statement; the index's own
    // statements may have no text at all).
    let mut inner: HashSet<String> = HashSet::new();
    conn.trace_v2(
        TraceEventCodes::SQLITE_TRACE_STMT | TraceEventCodes::SQLITE_TRACE_ROW,
        Some(move |event: TraceEvent<'_>| match event {
            TraceEvent::Stmt(statement, traced) => {
                let sql = statement.sql();
                if sql.is_empty() || traced.starts_with("--") || sql.contains("sqlite_master") {
                    if !inner.contains(sql.as_ref()) {
                        inner.insert(sql.into_owned());
                    }
                } else {
                    meter.statement();
                }
            }
            TraceEvent::Row(statement) => {
                let sql = statement.sql();
                if !sql.is_empty() && !inner.contains(sql.as_ref()) {
                    meter.row();
                }
            }
            _ => {}
        }),
    )?;
    Ok(())
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding a connection leaves no open transaction behind
    // (rusqlite rolls back on drop), so the connection is still usable.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Run `attempt` again, backing off, while the database stays locked past
/// the busy timeout (or SQLite would not wait at all), for up to
/// [`BUSY_GIVE_UP`]; then [`StoreError::Busy`]. `attempt` must be safe to
/// run again.
fn while_busy<T>(mut attempt: impl FnMut() -> Result<T>) -> Result<T> {
    let started = Instant::now();
    let mut pause = Duration::from_millis(5);
    loop {
        match attempt() {
            Err(error) if is_busy(&error) && started.elapsed() < BUSY_GIVE_UP => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(250));
            }
            Err(error) if is_busy(&error) => {
                return Err(StoreError::Busy {
                    seconds: started.elapsed().as_secs(),
                });
            }
            other => return other,
        }
    }
}

/// One attempt at a write transaction that takes the database's write
/// lock at once or gives way ([`StoreError::WouldWait`]); should anything
/// in it find the database busy, it rolls back and gives way too, so it can
/// be done again where waiting is allowed. Leaves `conn` without a busy
/// timeout: the caller sets it back.
fn write_without_waiting<T>(
    conn: &mut Connection,
    mut work: impl FnMut(&rusqlite::Transaction<'_>) -> Result<T>,
) -> Result<T> {
    conn.busy_timeout(Duration::ZERO)?;
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(|error| gave_way(error.into()))?;
    let value = work(&tx).map_err(gave_way)?;
    tx.commit().map_err(|error| gave_way(error.into()))?;
    Ok(value)
}

fn gave_way(error: StoreError) -> StoreError {
    match is_busy(&error) {
        true => StoreError::WouldWait,
        false => error,
    }
}

fn is_busy(error: &StoreError) -> bool {
    matches!(
        error,
        StoreError::Database(rusqlite::Error::SqliteFailure(failure, _))
            if matches!(failure.code, ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked)
    )
}

/// Create the new database file at `path` readable and writable by its
/// owner only (0600): it holds every message, and SQLite gives the WAL and
/// shared-memory files it makes beside it the database file's permissions.
/// A file another process created meanwhile is left as it is. `true` when
/// this call created the file.
fn create_owner_only(path: &Path) -> Result<bool> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    match options.open(path) {
        Ok(_) => Ok(true),
        Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
        Err(error) => Err(error.into()),
    }
}
