/*!
The SQLite backend's handle: opening, connection setup, the writer/reader
split and write transactions with busy handling. Its operations live beside
the types they return (graph.rs, conversations.rs, runs.rs, transfer.rs,
verify.rs, resolve.rs); [`crate::Store`] dispatches to it for file paths.

One writer connection (behind a mutex) takes every write in a `BEGIN
IMMEDIATE` transaction, which in WAL mode waits on the busy handler instead
of failing the way a deferred transaction that upgrades to a write does.
Readers come from a small pool and never block the writer. A rusqlite
`Connection` is not `Sync`, so each is only ever used under its mutex.
*/

use crate::error::{Result, StoreError};
use crate::schema;
use rusqlite::config::DbConfig;
use rusqlite::{Connection, ErrorCode, OpenFlags, TransactionBehavior};
use skein_core::StoreKey;
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
    writer: Mutex<Connection>,
    readers: Mutex<Vec<Connection>>,
}

impl SqliteStore {
    /// Open (creating if needed) the database at `path`, migrating it to the
    /// current schema.
    pub fn open(path: &Path) -> Result<SqliteStore> {
        let path = path.to_path_buf();
        if let Some(dir) = path.parent().filter(|dir| !dir.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
        let mut writer = connect(&path)?;
        writer.pragma_update(None, "journal_mode", "WAL")?;
        schema::migrate(&mut writer)?;
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
            }),
        })
    }

    pub fn path(&self) -> &Path {
        &self.shared.path
    }

    pub fn location(&self) -> String {
        self.shared.path.display().to_string()
    }

    /// The key nodes are marked with once this database holds them. It
    /// identifies the database, not this handle.
    pub fn key(&self) -> StoreKey {
        self.shared.key
    }

    /// Run `work` in a `BEGIN IMMEDIATE` transaction and commit it. When the
    /// database stays locked past the busy timeout the whole transaction is
    /// retried, so "database is locked" never reaches the caller; `work` must
    /// therefore be safe to run again.
    pub(crate) fn write<T>(
        &self,
        mut work: impl FnMut(&rusqlite::Transaction<'_>) -> Result<T>,
    ) -> Result<T> {
        let started = Instant::now();
        let mut pause = Duration::from_millis(5);
        let mut conn = lock(&self.shared.writer);
        loop {
            let attempt = (|| {
                let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
                let value = work(&tx)?;
                tx.commit()?;
                Ok(value)
            })();
            match attempt {
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

    /// Run `work` on a reader connection.
    pub(crate) fn read<T>(&self, work: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
        let pooled = lock(&self.shared.readers).pop();
        let conn = match pooled {
            Some(conn) => conn,
            None => connect(&self.shared.path)?,
        };
        let result = work(&conn);
        let mut readers = lock(&self.shared.readers);
        if readers.len() < 4 {
            readers.push(conn);
        }
        result
    }

    /// A raw connection for tests that must tamper with or inspect rows.
    pub fn raw_connection(&self) -> Result<Connection> {
        connect(&self.shared.path)
    }

    pub fn debug_execute(&self, sql: &str) -> Result<u64> {
        Ok(self.raw_connection()?.execute(sql, [])? as u64)
    }

    pub fn debug_query_i64(&self, sql: &str) -> Result<i64> {
        Ok(self
            .raw_connection()?
            .query_row(sql, [], |row| row.get(0))?)
    }
}

fn connect(path: &Path) -> Result<Connection> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
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
    Ok(conn)
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding a connection leaves no open transaction behind
    // (rusqlite rolls back on drop), so the connection is still usable.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn is_busy(error: &StoreError) -> bool {
    matches!(
        error,
        StoreError::Database(rusqlite::Error::SqliteFailure(failure, _))
            if matches!(failure.code, ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked)
    )
}
