//! The import from `llm` (`skein::import::llm`) on both backends: a
//! crafted logs.db imports exactly what it holds, once; a damaged one
//! imports nothing at all. (`crates/skein-cli/tests/llm_import.rs` imports
//! a database written by the real `llm`.)
//!
//! Each test is a `fn NAME(backend: Backend)` run as `sqlite::NAME` and
//! `postgres::NAME`; the PostgreSQL variants use a fresh schema of the
//! server `SKEIN_TEST_POSTGRES` names, and print `SKIPPED` when it is unset.

use skein::import::llm;
use skein::store::{Store, StoreError};
use std::io::Write as _;
use std::path::{Path, PathBuf};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Backend {
    Sqlite,
    Postgres,
}

/// A fresh, empty database that lives as long as this value.
struct TempStore {
    store: Store,
    _dir: Option<tempfile::TempDir>,
    #[cfg(feature = "postgres")]
    _schema: Option<skein::store::scratch::ScratchSchema>,
}

impl TempStore {
    fn new(backend: Backend) -> TempStore {
        match backend {
            Backend::Sqlite => {
                let dir = tempfile::tempdir().expect("temp dir");
                TempStore {
                    store: Store::open(dir.path().join("skein.db")).expect("open store"),
                    _dir: Some(dir),
                    #[cfg(feature = "postgres")]
                    _schema: None,
                }
            }
            #[cfg(feature = "postgres")]
            Backend::Postgres => {
                let base = std::env::var("SKEIN_TEST_POSTGRES").expect("SKEIN_TEST_POSTGRES");
                let schema =
                    skein::store::scratch::ScratchSchema::create(&base).unwrap_or_else(|error| {
                        panic!("SKEIN_TEST_POSTGRES is set but unusable: {error}")
                    });
                let store = Store::open(schema.url()).expect("open store");
                assert_eq!(store.backend_name(), "postgres");
                TempStore {
                    store,
                    _dir: None,
                    _schema: Some(schema),
                }
            }
            #[cfg(not(feature = "postgres"))]
            Backend::Postgres => unreachable!("postgres_enabled refuses without the feature"),
        }
    }

    fn count(&self, table: &str) -> i64 {
        self.store
            .debug_query_i64(&format!("SELECT count(*) FROM {table}"))
            .unwrap()
    }
}

/// Whether the PostgreSQL variant of `test` runs (after saying so on the
/// terminal when it is skipped).
fn postgres_enabled(test: &str) -> bool {
    if std::env::var("SKEIN_TEST_POSTGRES").is_ok_and(|url| !url.is_empty()) {
        if !cfg!(feature = "postgres") {
            panic!(
                "SKEIN_TEST_POSTGRES is set but these tests were built without PostgreSQL: \
                 run them with `--features postgres`"
            );
        }
        return true;
    }
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED postgres::{test}: set SKEIN_TEST_POSTGRES=postgres://... to run it"
    );
    false
}

macro_rules! for_each_backend {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[test]
                fn $name() {
                    super::$name(super::Backend::Sqlite);
                }
            )*
        }
        mod postgres {
            $(
                #[test]
                fn $name() {
                    if super::postgres_enabled(stringify!($name)) {
                        super::$name(super::Backend::Postgres);
                    }
                }
            )*
        }
    };
}

/// How a crafted `llm` logs.db is damaged.
#[derive(Clone, Copy, Debug)]
enum Damage {
    None,
    /// The last turn names a reply message that does not exist.
    TurnWithoutMessage,
    /// The last thread's tip is a message that does not exist.
    ThreadWithoutTip,
    /// The last turn offers a tool whose input schema is not JSON.
    ToolSchemaNotJson,
    /// A message names a parent that does not exist.
    MessageWithoutParent,
}

/// An `llm` 0.3x logs.db of five threads, each a user message, a reply and
/// the turn that produced it offering one tool, written with the columns
/// `llm` uses, then damaged as asked. Everything damaged sorts last, after
/// what would import.
fn llm_database(dir: &Path, damage: Damage) -> PathBuf {
    let path = dir.join(format!("{damage:?}.db"));
    let llm = rusqlite::Connection::open(&path).unwrap();
    llm.execute_batch(
        "CREATE TABLE threads (id TEXT PRIMARY KEY, name TEXT, tip_message_hash TEXT,
             forked_from TEXT, datetime_utc TEXT);
         CREATE TABLE messages (hash TEXT PRIMARY KEY, parent_hash TEXT, role TEXT);
         CREATE TABLE parts (id INTEGER PRIMARY KEY, message_hash TEXT, type TEXT, text TEXT,
             payload TEXT, position INTEGER);
         CREATE TABLE turns (id TEXT PRIMARY KEY, thread_id TEXT, parent_message_hash TEXT,
             tip_message_hash TEXT, model TEXT, resolved_model TEXT, input_tokens INTEGER,
             output_tokens INTEGER, duration_ms INTEGER, datetime_utc TEXT, options_json TEXT);
         CREATE TABLE tools (id INTEGER PRIMARY KEY, name TEXT, description TEXT, input_schema TEXT);
         CREATE TABLE turn_tools (turn_id TEXT, tool_id INTEGER);
         INSERT INTO tools VALUES (1, 'multiply', 'Multiply two integers.',
             '{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}}}');",
    )
    .unwrap();
    let message = |hash: &str, parent: Option<&str>, role: &str, text: &str| {
        llm.execute(
            "INSERT INTO messages VALUES (?1, ?2, ?3)",
            rusqlite::params![hash, parent, role],
        )
        .unwrap();
        llm.execute(
            "INSERT INTO parts(message_hash, type, text, position) VALUES (?1, 'text', ?2, 0)",
            rusqlite::params![hash, text],
        )
        .unwrap();
    };
    let turn = |id: &str, thread: &str, input: &str, output: &str, minute: u32| {
        llm.execute(
            "INSERT INTO turns VALUES (?1, ?2, ?3, ?4, 'echo', 'echo', 3, 5, 120, ?5, '{}')",
            rusqlite::params![
                id,
                thread,
                input,
                output,
                format!("2026-01-01 10:{minute:02}:00+00:00")
            ],
        )
        .unwrap();
        llm.execute("INSERT INTO turn_tools VALUES (?1, 1)", [id])
            .unwrap();
    };
    for i in 0..5 {
        let (user, reply) = (format!("u{i}"), format!("a{i}"));
        message(&user, None, "user", &format!("question {i}"));
        message(&reply, Some(&user), "assistant", &format!("answer {i}"));
        llm.execute(
            "INSERT INTO threads VALUES (?1, ?2, ?3, NULL, ?4)",
            rusqlite::params![
                format!("t{i}"),
                format!("thread {i}"),
                reply,
                format!("2026-01-01 10:{i:02}:00+00:00")
            ],
        )
        .unwrap();
        turn(&format!("turn{i}"), &format!("t{i}"), &user, &reply, i);
    }
    match damage {
        Damage::None => {}
        Damage::TurnWithoutMessage => turn("turn9", "t4", "a4", "nope", 59),
        Damage::ThreadWithoutTip => {
            llm.execute(
                "INSERT INTO threads VALUES ('t9', 'broken', 'nope', NULL, '2026-01-01 10:59:00+00:00')",
                [],
            )
            .unwrap();
        }
        Damage::ToolSchemaNotJson => {
            llm.execute_batch(
                "INSERT INTO tools VALUES (2, 'broken', 'A tool.', '{not json');
                 INSERT INTO turn_tools VALUES ('turn4', 2);",
            )
            .unwrap();
        }
        Damage::MessageWithoutParent => message("orphan", Some("gone"), "user", "who am I"),
    }
    path
}

/// A damaged `llm` database imports nothing at all (one transaction), and
/// the error says what was wrong and that nothing was imported.
fn a_damaged_llm_database_imports_nothing(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (
            Damage::TurnWithoutMessage,
            "turn turn9 names message nope as its reply",
        ),
        (Damage::ThreadWithoutTip, "thread t9 has tip message nope"),
        (
            Damage::ToolSchemaNotJson,
            "tool broken offered in turn turn4 has an input schema that is not JSON",
        ),
        (
            Damage::MessageWithoutParent,
            "message orphan has parent gone",
        ),
    ];
    for (damage, says) in cases {
        let logs = llm_database(dir.path(), damage);
        let db = TempStore::new(backend);
        let error = llm::import(&db.store, &logs).unwrap_err();
        assert!(
            matches!(error, StoreError::Import { .. }),
            "{damage:?}: {error}"
        );
        let message = error.to_string();
        assert!(message.contains(says), "{damage:?}: {message}");
        assert!(
            message.contains("nothing was imported"),
            "{damage:?}: {message}"
        );
        for table in ["nodes", "conversations", "runs", "run_tools", "tools"] {
            assert_eq!(db.count(table), 0, "{damage:?} left {table} behind");
        }
    }
}

/// An import that writes says what it wrote; importing again writes
/// nothing and says so; a later damaged import keeps what was there and
/// adds nothing.
fn an_llm_import_reports_exactly_what_it_wrote(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let logs = llm_database(dir.path(), Damage::None);
    let db = TempStore::new(backend);
    let report = llm::import(&db.store, &logs).unwrap();
    assert_eq!(
        (
            report.messages,
            report.conversations,
            report.runs,
            report.already_present
        ),
        (10, 5, 5, 0)
    );
    let counts = || ["nodes", "conversations", "runs"].map(|table| db.count(table));
    assert_eq!(counts(), [10, 5, 5]);
    let verified = db.store.verify().unwrap();
    assert!(verified.is_ok(), "{:?}", verified.problems);
    // Conversations keep the llm thread's times, runs their tools.
    let conversations = db.store.list_conversations(10).unwrap();
    assert_eq!(conversations[0].name.as_deref(), Some("thread 4"));
    let run = &db.store.runs_of_conversation(&conversations[0].id).unwrap()[0];
    assert_eq!(run.tools.len(), 1);
    assert_eq!(conversations[0].updated_ms, run.started_ms);

    let again = llm::import(&db.store, &logs).unwrap();
    assert_eq!(
        (again.conversations, again.runs, again.already_present),
        (0, 0, 10)
    );
    assert_eq!(counts(), [10, 5, 5]);

    let damaged = llm_database(dir.path(), Damage::TurnWithoutMessage);
    let error = llm::import(&db.store, &damaged).unwrap_err();
    assert!(
        error.to_string().contains("nothing was imported"),
        "{error}"
    );
    assert_eq!(counts(), [10, 5, 5]);
}

for_each_backend!(
    a_damaged_llm_database_imports_nothing,
    an_llm_import_reports_exactly_what_it_wrote,
);
