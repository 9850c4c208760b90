/*!
How a SQLite file is recognised as skein's before anything is written to it.

A command that only reads must never create a database where a path was
mistyped, and no command may turn another application's file into a skein
database. So a SQLite location is classified first, through a read-only
connection that cannot change it:

- missing, or an empty (0-byte or table-less) file: only
  [`OpenMode::Create`] may initialise it;
- a file that does not start with SQLite's header (SQLite says so, reading
  it read-only), a directory, a device: refused;
- a SQLite database is skein's when its schema bookkeeping says so
  (`PRAGMA user_version` at least 1 and a `meta` table holding the store
  key, both written by migration 1 in one transaction); anything else
  (another application's tables, a `user_version` of its own) is refused
  untouched: no table added, journal mode and `user_version` unchanged.

Read-only connections (`SQLITE_OPEN_READ_ONLY`) of a WAL database need its
`-wal` and `-shm` files, which SQLite creates on first read when they are
missing. On read-only media (a read-only mount, a directory the user
cannot write) it cannot, and the first read fails with `SQLITE_CANTOPEN`;
only then, and only when no `-wal` file exists (so every committed
transaction is in the main file, nothing would be missed), the file is
opened again with `immutable=1`, which reads it without the WAL index and
without locks. That is safe exactly because nobody can be writing it: a
writer would have created the `-wal` file. Were one to start later, this
handle would not see its commits.

A database opened to be written must be writable, which SQLite does not
check: it opens a file it cannot write read-only without a word, and a
`-wal` and `-shm` left beside it (by a reader, or a writer that died)
make reads work even on a read-only mount, so only the first write would
fail, after the caller's work (a model call). [`unwritable`] asks first,
and the open is refused with [`StoreError::CannotWrite`]. It asks without
opening anything: `access(2)` for the file, its WAL files (or, where one
is missing, the directory SQLite must create it in), then SQLite itself
(`sqlite3_db_readonly`) on the connection the store will write with. A
file descriptor opened and closed by anyone but SQLite would release
every POSIX lock this process holds on that file, another connection's
included (a write transaction's lock on the `-shm`), and let another
process write under it.
*/

use crate::error::{Result, StoreError};
use rusqlite::{Connection, ErrorCode, OpenFlags, OptionalExtension};
use std::path::{Path, PathBuf};

/// What a SQLite location holds.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum SqliteFile {
    /// Nothing there.
    Missing,
    /// A 0-byte file, or a SQLite database with no schema at all.
    Blank,
    /// A skein database at this schema version.
    Skein { version: i64 },
}

/// Classify the SQLite location `path` without changing it; a file that is
/// not a skein database is an error naming what it is. For a skein
/// database, the read-only connection that recognised it comes back too,
/// for the store to read with (one connection fewer to open).
pub(crate) fn classify(
    path: &Path,
    reader: &ReadOnlyOpener,
) -> Result<(SqliteFile, Option<Connection>)> {
    let mut probe = None;
    let file = classify_with(path, reader, &mut probe)?;
    let recognised = matches!(file, SqliteFile::Skein { .. }) && !reader.immutable();
    Ok((file, probe.filter(|_| recognised)))
}

fn classify_with(
    path: &Path,
    reader: &ReadOnlyOpener,
    probe: &mut Option<Connection>,
) -> Result<SqliteFile> {
    let metadata = match std::fs::metadata(path) {
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            return Ok(SqliteFile::Missing);
        }
        Err(error) => return Err(error.into()),
        Ok(metadata) => metadata,
    };
    let not_skein = |reason: &str| StoreError::NotSkein {
        location: path.display().to_string(),
        reason: reason.to_string(),
    };
    if metadata.is_dir() {
        return Err(not_skein("it is a directory"));
    }
    if !metadata.is_file() {
        return Err(not_skein("it is not a regular file"));
    }
    if metadata.len() == 0 && !sibling(path, "-wal").exists() {
        return Ok(SqliteFile::Blank);
    }
    // SQLite reads the header (and refuses a file that is not one of its
    // databases) through its own descriptor: a descriptor opened and closed
    // here would release the POSIX locks every other connection of this
    // process holds on the file (see the module documentation).
    let conn = match reader.connect() {
        Ok(conn) => probe.insert(conn),
        Err(StoreError::Database(error)) if not_a_database(&error) => {
            return Err(not_skein("it is not a SQLite database"));
        }
        Err(error) => return Err(error),
    };
    let version: i64 = conn.pragma_query_value(None, "user_version", |row| row.get(0))?;
    let objects: i64 =
        conn.query_row("SELECT count(*) FROM sqlite_master", [], |row| row.get(0))?;
    if version == 0 && objects == 0 {
        return Ok(SqliteFile::Blank);
    }
    let has_meta = conn
        .query_row(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta'",
            [],
            |_| Ok(()),
        )
        .optional()?
        .is_some();
    let has_key = has_meta
        && conn
            .query_row("SELECT 1 FROM meta WHERE key = 'store_key'", [], |_| Ok(()))
            .optional()
            .ok()
            .flatten()
            .is_some();
    if version >= 1 && has_key {
        return Ok(SqliteFile::Skein { version });
    }
    Err(not_skein(
        "it is a SQLite database of another application: it has tables, but not skein's \
         schema bookkeeping",
    ))
}

/// Opens read-only connections to one SQLite file, falling back to
/// `immutable=1` on read-only media (see the module documentation). The
/// choice is made on the first connection and kept for the others.
pub(crate) struct ReadOnlyOpener {
    path: PathBuf,
    immutable: std::sync::atomic::AtomicBool,
}

impl ReadOnlyOpener {
    pub fn new(path: &Path) -> ReadOnlyOpener {
        ReadOnlyOpener {
            path: path.to_path_buf(),
            immutable: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Whether connections open the file as immutable.
    pub fn immutable(&self) -> bool {
        self.immutable.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// A read-only connection on which a first read has succeeded.
    pub fn connect(&self) -> Result<Connection> {
        if self.immutable() {
            return open_immutable(&self.path);
        }
        let conn = Connection::open_with_flags(
            &self.path,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        match first_read(&conn) {
            Ok(()) => Ok(conn),
            Err(error) if cannot_open(&error) && !sibling(&self.path, "-wal").exists() => {
                drop(conn);
                let conn = open_immutable(&self.path)?;
                first_read(&conn)?;
                self.immutable
                    .store(true, std::sync::atomic::Ordering::Relaxed);
                Ok(conn)
            }
            Err(error) => Err(error.into()),
        }
    }
}

/// The first read is where SQLite opens the WAL files, and so where read-only
/// media fail.
fn first_read(conn: &Connection) -> rusqlite::Result<()> {
    conn.query_row("SELECT count(*) FROM sqlite_master", [], |_| Ok(()))
}

/// SQLite's answer to a file that is not one of its databases.
fn not_a_database(error: &rusqlite::Error) -> bool {
    matches!(
        error,
        rusqlite::Error::SqliteFailure(failure, _) if failure.code == ErrorCode::NotADatabase
    )
}

fn cannot_open(error: &rusqlite::Error) -> bool {
    matches!(
        error,
        rusqlite::Error::SqliteFailure(failure, _)
            if matches!(failure.code, ErrorCode::CannotOpen | ErrorCode::ReadOnly)
    )
}

fn open_immutable(path: &Path) -> Result<Connection> {
    let absolute = std::path::absolute(path)?;
    let uri = format!("file:{}?mode=ro&immutable=1", uri_path(&absolute));
    Ok(Connection::open_with_flags(
        uri,
        OpenFlags::SQLITE_OPEN_READ_ONLY
            | OpenFlags::SQLITE_OPEN_URI
            | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?)
}

/// Why this process cannot write the skein database at `path`, if it
/// cannot: the file, or a `-wal`/`-shm` file left beside it, is not
/// writable (a read-only mount, no write permission), or a missing one
/// could not be created in its directory, or SQLite opened `writer` (the
/// store's own read-write connection, when it has one) read-only. Nothing
/// is opened (see the module documentation).
pub(crate) fn unwritable(path: &Path, writer: Option<&Connection>) -> Option<String> {
    #[cfg(unix)]
    for suffix in ["", "-wal", "-shm"] {
        let file = sibling(path, suffix);
        let (checked, what) = if suffix.is_empty() || file.exists() {
            (file, String::new())
        } else {
            // SQLite creates a missing WAL file beside the database.
            let dir = path
                .parent()
                .filter(|dir| !dir.as_os_str().is_empty())
                .unwrap_or(Path::new("."))
                .to_path_buf();
            let what = format!(" (its {} must be created there)", file.display());
            (dir, what)
        };
        if let Err(errno) = rustix::fs::access(&checked, rustix::fs::Access::WRITE_OK) {
            return Some(format!(
                "{} is not writable: {}{what}",
                checked.display(),
                std::io::Error::from(errno)
            ));
        }
    }
    writer
        .and_then(|writer| writer.is_readonly(rusqlite::MAIN_DB).ok())
        .filter(|read_only| *read_only)
        .map(|_| format!("SQLite could open {} for reading only", path.display()))
}

/// `path` as the path of a `file:` URI: every byte but unreserved ones and
/// `/` percent-encoded, so `?`, `#` and `%` in a file name stay in the name.
fn uri_path(path: &Path) -> String {
    let mut out = String::new();
    for &byte in path.as_os_str().as_encoded_bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' | b'/' => {
                out.push(byte as char);
            }
            other => out.push_str(&format!("%{other:02X}")),
        }
    }
    out
}

/// `path` with `suffix` appended to its file name (`skein.db-wal`).
pub(crate) fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_os_string();
    name.push(suffix);
    PathBuf::from(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uri_paths_keep_reserved_characters_in_the_name() {
        assert_eq!(
            uri_path(Path::new("/tmp/a b/x?y#z%.db")),
            "/tmp/a%20b/x%3Fy%23z%25.db"
        );
    }
}
