/*!
The store's error type. Database failures keep their `rusqlite` (or, with
the `postgres` feature, `tokio-postgres`) error; conflicts and lookups that
fail are their own variants so callers can match them.

Like every skein error, a message is complete on its own: a variant that
shows the error it wraps does not also return it from `source()`, so a
chain printer (anyhow's `{:#}`) never says a cause twice.
*/

use skein_core::NodeId;
use skein_core::encoding::DecodeError;

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// Another writer moved the conversation's bookmark after this turn
    /// started. The turn's nodes (and runs) are stored; the bookmark was not
    /// moved.
    #[error(transparent)]
    HeadMoved(Box<HeadMoved>),
    #[error("no node {0} in this database")]
    NodeNotFound(NodeId),
    /// No conversation has this id (or, when the text reads
    /// `named \`...\``, this name). Surfaces add where to list them (the
    /// command line: `skein conversations`, with the database's location).
    #[error("no conversation {0} in this database")]
    ConversationNotFound(String),
    #[error("no run {0} in this database")]
    RunNotFound(String),
    #[error("no rerun {0} in this database")]
    RerunNotFound(String),
    #[error(
        "`{0}` is no label name: give a non-empty name without surrounding spaces or control \
         characters (at most 200 bytes)"
    )]
    LabelName(String),
    #[error("no replay {0} in this database (list them with `skein replay --list`)")]
    ReplayNotFound(String),
    /// A worker finished a replayed turn it no longer held (its lease
    /// passed and another worker claimed it). Nothing was written.
    #[error(
        "turn {seq} of replay {replay} is no longer held by this worker (its lease passed); \
         nothing was written, the worker holding it now records it"
    )]
    ReplayTurnLost { replay: String, seq: u64 },
    /// A replayed turn was given a status it cannot finish with.
    #[error("a replayed turn finishes done, diverged or failed, not {0}")]
    ReplayTurnNotFinal(&'static str),
    #[error("no {kind} starts with `{prefix}`")]
    UnknownPrefix { kind: &'static str, prefix: String },
    #[error("`{prefix}` matches several {kind}s ({}); give more digits", .candidates.join(", "))]
    AmbiguousPrefix {
        kind: &'static str,
        prefix: String,
        candidates: Vec<String>,
    },
    #[error(
        "several conversations are named `{name}` ({}); give one's id instead",
        .candidates.join(", ")
    )]
    AmbiguousName {
        name: String,
        candidates: Vec<String>,
    },
    #[error("`{0}` is not an id: ids are hexadecimal")]
    NotAnId(String),
    /// A conversation name that reads as an id (4 to 64 hexadecimal
    /// digits) was refused when set: ids and names are typed in the same
    /// places, and such a name could stand for another conversation's id.
    /// Nothing was written.
    #[error(
        "`{0}` cannot name a conversation: a name cannot look like an id (4 to 64 hexadecimal \
         digits), since it could be taken for another conversation's id; choose a name with a \
         non-hex character"
    )]
    NameLooksLikeId(String),
    /// A conversation name was refused when set because conversation `by`
    /// (its id) already has it: a name finds one conversation. Checked in
    /// the write's own transaction, so two writers cannot both take it.
    /// Nothing was written.
    #[error(
        "conversation {by} is already named `{name}`: choose another name, or continue it with \
         --cid {name}"
    )]
    NameTaken { name: String, by: String },
    #[error("stored node {id} cannot be decoded: {error}")]
    Corrupt { id: NodeId, error: DecodeError },
    #[error("a stored row is malformed: {0} (run `skein verify`)")]
    MalformedRow(String),
    /// An import was refused; the transaction was rolled back. `line` is
    /// the export line at fault, or 0 when the problem is not tied to one
    /// (an empty file, an `llm` database).
    #[error("import aborted{}, nothing was imported: {problem}", at_line(*.line))]
    Import { line: usize, problem: String },
    /// An export line longer than the import's line limit: refused before
    /// it is read whole, so an endless input cannot exhaust memory.
    #[error(
        "import aborted at line {line}, nothing was imported: the line is longer than \
         the limit of {} per line", mebibytes(*.limit)
    )]
    LineTooLong { line: usize, limit: usize },
    /// A command that only reads (or only works on an existing database)
    /// named a SQLite file that does not exist. Nothing was created.
    #[error(
        "there is no database at {location} (nothing was created: only commands that \
         record something create a database)"
    )]
    NoDatabase { location: String },
    /// The location holds something that is not a skein database (another
    /// application's SQLite file, a non-SQLite file, a PostgreSQL schema
    /// without skein's tables). It was left untouched.
    #[error("{location} is not a skein database ({reason}); it was left untouched")]
    NotSkein { location: String, reason: String },
    /// The store was opened read-only and the operation writes.
    #[error("{location} was opened read-only, and this operation writes")]
    ReadOnly { location: String },
    /// A database opened to be written ([`crate::OpenMode::Create`],
    /// [`crate::OpenMode::Existing`]) that this process cannot write (a
    /// read-only mount, a file or directory without write permission),
    /// refused when it is opened rather than at its first write. It can
    /// still be opened with [`crate::OpenMode::ReadOnly`].
    #[error(
        "the database {location} is read-only here ({reason}): nothing can be recorded in it \
         (commands that only show what is recorded still work)"
    )]
    CannotWrite { location: String, reason: String },
    /// A database opened read-only needs a schema upgrade it cannot get.
    #[error(
        "the database {location} has schema version {found}, older than this skein's \
         ({supported}), and cannot be upgraded while it is read-only: {reason}"
    )]
    OutdatedReadOnly {
        location: String,
        found: i64,
        supported: i64,
        reason: String,
    },
    #[error(
        "the database has schema version {found}, newer than this skein supports ({supported}); upgrade skein"
    )]
    NewerSchema { found: i64, supported: i64 },
    #[error(
        "the database stayed busy for {seconds} s (another process holds a long write); try again"
    )]
    Busy { seconds: u64 },
    /// A concurrent writer got in the way of a write in a way only doing it
    /// again resolves (PostgreSQL: two writers filed nodes in the same lane
    /// at once). The store repeats such writes itself, so this is seen only
    /// as [`StoreError::Busy`] once retries run out.
    #[error("a concurrent write interfered ({0}); try again")]
    Interfered(&'static str),
    /// A write tried in place on a current-thread runtime found the
    /// database's writer taken, and gave way before doing anything rather
    /// than stall the runtime; the store then does it on the blocking pool,
    /// so callers never see this.
    #[doc(hidden)]
    #[error("the write would have waited for another writer")]
    WouldWait,
    #[error("database error: {0}")]
    Database(rusqlite::Error),
    #[cfg(feature = "postgres")]
    #[error("PostgreSQL error: {}", crate::postgres::describe(.0))]
    Postgres(tokio_postgres::Error),
    #[error(
        "this skein was built without PostgreSQL support, so it cannot open {location}; \
         rebuild it with the `postgres` feature (e.g. `cargo install --path crates/skein-cli --features postgres`) \
         or give the path of a SQLite file"
    )]
    NoPostgresSupport { location: String },
    #[error("`{location}` is not a usable PostgreSQL URL: {reason}")]
    BadUrl { location: String, reason: String },
    #[error(
        "cannot reach the PostgreSQL server at {location}: {reason}; check that it is running \
         and that the URL's host, port, user, password and database are right"
    )]
    Unreachable { location: String, reason: String },
    /// The server could not be used over TLS as the URL's `sslmode` asks.
    #[error(
        "cannot connect to the PostgreSQL server at {location} as sslmode={mode} asks: {problem}"
    )]
    Tls {
        location: String,
        mode: String,
        problem: TlsProblem,
    },
    /// The PostgreSQL role may not create or upgrade skein's tables (it is
    /// not their owner); the role that owns them must open it first.
    #[error(
        "the database {location} needs skein's schema {} (version {found} to {supported}) and \
         this role may not change it ({reason}); open it once with the URL of the role that owns \
         skein's tables (docs/postgres.md)",
        if *.found == 0 { "created" } else { "upgraded" }
    )]
    MigrationDenied {
        location: String,
        found: i64,
        supported: i64,
        reason: String,
    },
    /// The connection broke before the write was committed: the server
    /// rolled it back, so none of it was kept. The next call reconnects.
    #[error(
        "the connection to the PostgreSQL server at {location} was lost ({reason}); \
         nothing of the unfinished write was kept, try again"
    )]
    ConnectionLost { location: String, reason: String },
    /// The connection broke while the server was committing: the write
    /// may or may not have been kept (read it back to know).
    #[error(
        "the connection to the PostgreSQL server at {location} was lost while committing \
         ({reason}); the write may or may not have been kept"
    )]
    CommitUnknown { location: String, reason: String },
    #[error("i/o error: {0}")]
    Io(std::io::Error),
    /// A search query the store cannot run (see [`crate::search`]).
    #[error(transparent)]
    Search(#[from] crate::search::SearchError),
    #[error("invalid JSON in a stored record: {0}")]
    Json(serde_json::Error),
    #[error("a store task failed: {0}")]
    Task(String),
}

/// Why a TLS connection to a PostgreSQL server failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TlsProblem {
    /// The mode requires TLS and the server does not offer it.
    #[error("the server does not offer TLS")]
    NotOffered,
    /// `sslmode=disable`, and the server accepts only TLS connections.
    #[error(
        "the server refuses connections without TLS ({server}); use sslmode=require or stronger"
    )]
    RequiredByServer { server: String },
    /// `sslmode=verify-full`: the certificate names other hosts.
    #[error(
        "the server's certificate is for {}, not `{expected}`; connect by a name the certificate \
         lists, or use sslmode=verify-ca to check only who signed it",
        if .presented.is_empty() { "no host name".to_string() } else { .presented.join(", ") }
    )]
    WrongHost {
        expected: String,
        presented: Vec<String>,
    },
    /// `sslmode=verify-ca` or `verify-full`: no trusted authority signed the
    /// certificate (or it is expired, revoked, or unfit for a server).
    #[error(
        "the server's certificate is not trusted ({reason}); give the certificate of the \
         authority that signed it with sslrootcert=PATH"
    )]
    Untrusted { reason: String },
    /// The handshake failed for another reason.
    #[error("the TLS handshake failed: {reason}")]
    Handshake { reason: String },
}

impl From<rusqlite::Error> for StoreError {
    fn from(error: rusqlite::Error) -> StoreError {
        StoreError::Database(error)
    }
}

#[cfg(feature = "postgres")]
impl From<tokio_postgres::Error> for StoreError {
    fn from(error: tokio_postgres::Error) -> StoreError {
        StoreError::Postgres(error)
    }
}

impl From<std::io::Error> for StoreError {
    fn from(error: std::io::Error) -> StoreError {
        StoreError::Io(error)
    }
}

/// A JSON error that is a failed write or read (a full disk under an
/// export) is that i/o error, not a stored record's fault.
impl From<serde_json::Error> for StoreError {
    fn from(error: serde_json::Error) -> StoreError {
        if error.is_io() {
            return StoreError::Io(error.into());
        }
        StoreError::Json(error)
    }
}

/// Where a lost bookmark race left things.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "conversation {conversation} moved to {} while this turn ran (it started from {}); \
     the turn is stored at node {} but the conversation was not moved: \
     reply to that node or fork from it to keep it",
    short(.actual), short(.expected), short(.turn_head)
)]
pub struct HeadMoved {
    pub conversation: String,
    /// The head the turn started from.
    pub expected: Option<NodeId>,
    /// Where the bookmark is now.
    pub actual: Option<NodeId>,
    /// Where the turn stands (stored, unbookmarked).
    pub turn_head: Option<NodeId>,
}

fn at_line(line: usize) -> String {
    match line {
        0 => String::new(),
        line => format!(" at line {line}"),
    }
}

fn mebibytes(bytes: usize) -> String {
    match bytes % (1 << 20) {
        0 => format!("{} MiB", bytes >> 20),
        _ => format!("{bytes} bytes"),
    }
}

fn short(id: &Option<NodeId>) -> String {
    id.map_or_else(|| "(empty)".to_string(), |id| id.short())
}
