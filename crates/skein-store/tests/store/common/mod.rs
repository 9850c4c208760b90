//! Shared helpers for the store's integration tests: a fresh database per
//! test on each backend, turn builders and re-running this test binary as a
//! child process.
//!
//! Every behavioural test is written once, as a function taking a
//! [`Backend`], and [`for_each_backend!`] turns it into `sqlite::NAME` and
//! `postgres::NAME` tests. The PostgreSQL variants run against the server
//! `SKEIN_TEST_POSTGRES` names (a URL; each test gets a schema of its own,
//! dropped afterwards). When it is unset they print that they were skipped
//! and pass; when it is set they must reach the server or fail.

#![allow(dead_code, reason = "each test module uses a part of the kit")]

use skein_core::{Message, Thread};
use skein_store::{ConversationId, RunRecord, Store, TurnCommit};
use std::io::Write as _;
use std::process::Command;

/// Which database a test runs against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// The server PostgreSQL tests use, or `None` (after saying so on the
/// terminal, past the test harness's capture) when they are to be skipped.
pub fn postgres_base(test: &str) -> Option<String> {
    let url = std::env::var("SKEIN_TEST_POSTGRES")
        .ok()
        .filter(|url| !url.is_empty());
    match url {
        Some(url) => {
            if !cfg!(feature = "postgres") {
                panic!(
                    "SKEIN_TEST_POSTGRES is set but these tests were built without PostgreSQL: \
                     run them with `--features postgres`"
                );
            }
            Some(url)
        }
        None => {
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED postgres::{test}: set SKEIN_TEST_POSTGRES=postgres://... to run it"
            );
            None
        }
    }
}

/// Turn `fn name(backend: Backend)` functions into a `sqlite::name` and a
/// `postgres::name` test each.
#[macro_export]
macro_rules! for_each_backend {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[test]
                fn $name() {
                    super::$name($crate::common::Backend::Sqlite);
                }
            )*
        }
        mod postgres {
            $(
                #[test]
                fn $name() {
                    if $crate::common::postgres_base(stringify!($name)).is_some() {
                        super::$name($crate::common::Backend::Postgres);
                    }
                }
            )*
        }
    };
}

/// Where a fresh, never-opened database can be created, and the guard that
/// removes it (a temp dir, or a scratch schema).
pub struct FreshLocation {
    pub location: String,
    _dir: Option<tempfile::TempDir>,
    #[cfg(feature = "postgres")]
    _schema: Option<skein_store::scratch::ScratchSchema>,
}

impl FreshLocation {
    pub fn new(backend: Backend) -> FreshLocation {
        match backend {
            Backend::Sqlite => {
                let dir = tempfile::tempdir().expect("temp dir");
                FreshLocation {
                    location: dir.path().join("skein.db").display().to_string(),
                    _dir: Some(dir),
                    #[cfg(feature = "postgres")]
                    _schema: None,
                }
            }
            #[cfg(feature = "postgres")]
            Backend::Postgres => {
                let base = std::env::var("SKEIN_TEST_POSTGRES").expect("SKEIN_TEST_POSTGRES");
                let schema =
                    skein_store::scratch::ScratchSchema::create(&base).unwrap_or_else(|error| {
                        panic!("SKEIN_TEST_POSTGRES is set but unusable: {error}")
                    });
                FreshLocation {
                    location: schema.url().to_string(),
                    _dir: None,
                    _schema: Some(schema),
                }
            }
            #[cfg(not(feature = "postgres"))]
            Backend::Postgres => {
                unreachable!("postgres_base refuses to run PostgreSQL tests without the feature")
            }
        }
    }
}

impl FreshLocation {
    /// The tables at this location, sorted, read without opening a store
    /// (which could create some): none when there is nothing there.
    pub fn tables(&self) -> Vec<String> {
        #[cfg(feature = "postgres")]
        if let Some(schema) = &self._schema {
            return schema.tables().expect("list the schema's tables");
        }
        let path = std::path::Path::new(&self.location);
        if !path.exists() {
            return Vec::new();
        }
        let conn =
            rusqlite::Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
                .unwrap();
        let mut statement = conn
            .prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
            .unwrap();
        statement
            .query_map([], |row| row.get(0))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap()
    }

    /// Create another application's table here (and nothing of skein's).
    pub fn plant_foreign_table(&self) {
        let sql = "CREATE TABLE notes (id INTEGER PRIMARY KEY, text TEXT NOT NULL);
                   INSERT INTO notes VALUES (1, 'not skein''s');";
        #[cfg(feature = "postgres")]
        if let Some(schema) = &self._schema {
            schema.execute(sql).expect("plant a table");
            return;
        }
        let conn = rusqlite::Connection::open(&self.location).unwrap();
        conn.execute_batch(sql).unwrap();
        conn.pragma_update(None, "user_version", 11).unwrap();
    }
}

/// A fresh, empty database that lives as long as this value.
pub struct TempStore {
    pub store: Store,
    pub backend: Backend,
    location: String,
    _dir: Option<tempfile::TempDir>,
    #[cfg(feature = "postgres")]
    _schema: Option<skein_store::scratch::ScratchSchema>,
}

impl TempStore {
    pub fn new(backend: Backend) -> TempStore {
        match backend {
            Backend::Sqlite => {
                let dir = tempfile::tempdir().expect("temp dir");
                let location = dir.path().join("skein.db").display().to_string();
                TempStore {
                    store: Store::open(&location).expect("open store"),
                    backend,
                    location,
                    _dir: Some(dir),
                    #[cfg(feature = "postgres")]
                    _schema: None,
                }
            }
            Backend::Postgres => TempStore::postgres(),
        }
    }

    #[cfg(feature = "postgres")]
    fn postgres() -> TempStore {
        let base = std::env::var("SKEIN_TEST_POSTGRES").expect("SKEIN_TEST_POSTGRES");
        let schema = skein_store::scratch::ScratchSchema::create(&base)
            .unwrap_or_else(|error| panic!("SKEIN_TEST_POSTGRES is set but unusable: {error}"));
        let location = schema.url().to_string();
        let store = Store::open(&location).expect("open store");
        assert_eq!(store.backend_name(), "postgres");
        TempStore {
            store,
            backend: Backend::Postgres,
            location,
            _dir: None,
            _schema: Some(schema),
        }
    }

    #[cfg(not(feature = "postgres"))]
    fn postgres() -> TempStore {
        unreachable!("postgres_base refuses to run PostgreSQL tests without the feature")
    }

    /// What `Store::open` takes to open this database again (a file path or
    /// a URL), e.g. in a child process.
    pub fn location(&self) -> String {
        self.location.clone()
    }

    pub fn reopen(&self) -> Store {
        Store::open(&self.location).expect("reopen store")
    }

    pub fn count(&self, table: &str) -> i64 {
        self.store
            .debug_query_i64(&format!("SELECT count(*) FROM {table}"))
            .unwrap()
    }

    /// `bytes` as a SQL literal of this backend.
    pub fn bytes_literal(&self, bytes: &[u8]) -> String {
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        match self.backend {
            Backend::Sqlite => format!("x'{hex}'"),
            Backend::Postgres => format!("'\\x{hex}'::bytea"),
        }
    }

    /// Remove the full-text index, as a database from before it lacks it
    /// (set the schema version below search's migration after this).
    pub fn drop_search_index(&self) {
        let sql = match self.backend {
            Backend::Sqlite => "DROP TABLE node_search",
            Backend::Postgres => "ALTER TABLE nodes DROP COLUMN search",
        };
        self.store.debug_execute(sql).unwrap();
    }

    /// Undo what migrations 11 and later did, so that reopening the
    /// database runs them again: on PostgreSQL, 11 added lanes (on SQLite
    /// it changed nothing); 12 added what each conversation's calls offered;
    /// 13 the tool calls by id; 14 added replays; 16 labels. Tests that set
    /// an older schema version call this first.
    pub fn undo_schemas_from_11(&self) {
        self.store.debug_execute("DROP TABLE labels").unwrap();
        self.store.debug_execute("DROP TABLE replay_turns").unwrap();
        self.store.debug_execute("DROP TABLE replays").unwrap();
        self.store.debug_execute("DROP TABLE tool_calls").unwrap();
        self.store.debug_execute("DROP TABLE tool_offers").unwrap();
        self.store
            .debug_execute("ALTER TABLE runs DROP COLUMN response_model")
            .unwrap();
        if self.backend == Backend::Postgres {
            self.store
                .debug_execute("ALTER TABLE nodes DROP COLUMN lane")
                .unwrap();
        }
    }

    /// PostgreSQL: hold an `EXCLUSIVE` lock on `table` until the guard is
    /// dropped (writers wait for it, readers do not).
    #[cfg(feature = "postgres")]
    pub fn lock_table(&self, table: &str) -> skein_store::scratch::TableLock {
        self._schema
            .as_ref()
            .expect("a PostgreSQL test database")
            .lock_table(table)
            .unwrap()
    }

    /// Pretend a newer skein migrated this database.
    pub fn set_schema_version(&self, version: i64) {
        let sql = match self.backend {
            Backend::Sqlite => format!("PRAGMA user_version = {version}"),
            Backend::Postgres => format!("UPDATE skein_schema SET version = {version}"),
        };
        self.store.debug_execute(&sql).unwrap();
    }
}

/// A thread of `n` alternating user/assistant messages after a system prompt.
pub fn history(system: &str, n: usize) -> Thread {
    let mut thread = Thread::new().push(Message::system(system));
    for i in 0..n.saturating_sub(1) {
        thread = if i % 2 == 0 {
            thread.push(Message::user(format!("question {i}")))
        } else {
            thread.push(Message::assistant(format!("answer {i}")))
        };
    }
    thread
}

/// Run one user/assistant turn on `conversation` from its current head,
/// retrying on a head-moved conflict. Returns how many conflicts it met.
pub fn append_turn(store: &Store, conversation: &ConversationId, text: &str) -> usize {
    let mut conflicts = 0;
    loop {
        let current = store.conversation(conversation).unwrap();
        let base = match current.head {
            Some(head) => store.load_thread(head).unwrap(),
            None => Thread::new(),
        };
        let thread = base
            .push(Message::user(text.to_string()))
            .push(Message::assistant(format!("reply to {text}")));
        let mut run = RunRecord::new("echo", "echo");
        run.conversation = Some(conversation.clone());
        run.input_head = thread.parent().head_id();
        run.output_head = thread.head_id();
        let turn = TurnCommit::continuing(
            conversation,
            current.head,
            &thread,
            std::slice::from_ref(&run),
        );
        match store.commit_turn(&turn) {
            Ok(_) => return conflicts,
            Err(skein_store::StoreError::HeadMoved(_)) => conflicts += 1,
            Err(other) => panic!("turn failed: {other}"),
        }
    }
}

/// Re-run this test binary, executing only the ignored test `name` with the
/// given environment.
pub fn spawn_child(name: &str, env: &[(&str, String)]) -> std::process::Child {
    let mut command = Command::new(std::env::current_exe().unwrap());
    command.args([
        "--ignored",
        "--exact",
        name,
        "--nocapture",
        "--test-threads=1",
    ]);
    for (key, value) in env {
        command.env(key, value);
    }
    command.stdout(std::process::Stdio::piped());
    command.stderr(std::process::Stdio::piped());
    command.spawn().expect("spawn child test process")
}
