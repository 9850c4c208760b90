/*!
How a database is opened ([`OpenMode`]): created when missing, required to
exist, or only read. Each backend honours the mode when it opens
(sqlite/open.rs recognises a SQLite file as skein's before anything is
written to it; postgres/mod.rs checks for skein's tables).
*/

/// How [`crate::Store::open_with`] treats the location.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum OpenMode {
    /// Create the database if there is none (a SQLite file, with its
    /// directory), and bring it to the current schema. For commands that
    /// record something.
    #[default]
    Create,
    /// The database must exist and be skein's; it is brought to the current
    /// schema and may be written. For commands that work on what is
    /// recorded and may add to it. With this and [`OpenMode::Create`], an
    /// existing SQLite database this process cannot write (a read-only
    /// mount or file, even with `-wal`/`-shm` files left beside it) is
    /// refused when opened, with [`crate::StoreError::CannotWrite`], never
    /// at its first write.
    Existing,
    /// The database must exist and be skein's, and is only read: SQLite
    /// files open with `SQLITE_OPEN_READ_ONLY` (so read-only files and
    /// mounts work), and every write fails with [`crate::StoreError::ReadOnly`].
    /// An older schema is still upgraded first when the database can be
    /// written; when it cannot, the open fails with
    /// [`crate::StoreError::OutdatedReadOnly`].
    ReadOnly,
}
