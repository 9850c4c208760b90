//! Opening a database: choosing the backend from the location, many
//! processes' first opens migrating once, the open modes (only commands that
//! record create a database; read-only handles never write; another
//! application's data is never touched), and the errors that say what to do
//! when a location cannot be used.

#[cfg(feature = "postgres")]
mod connections;

use crate::common::{Backend, FreshLocation, TempStore, append_turn};
use skein_store::{NewConversation, OpenMode, RunRecord, Store, StoreError};
use std::path::Path;

/// Eight threads open the same fresh database at once: one migrates, all
/// end up on the same schema and store key.
fn concurrent_first_opens_migrate_once(backend: Backend) {
    let fresh = FreshLocation::new(backend);
    let barrier = std::sync::Barrier::new(8);
    let keys: Vec<_> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..8)
            .map(|_| {
                scope.spawn(|| {
                    barrier.wait();
                    let store = Store::open(&fresh.location).expect("open");
                    assert_eq!(
                        store.backend_name(),
                        match backend {
                            Backend::Sqlite => "sqlite",
                            Backend::Postgres => "postgres",
                        }
                    );
                    store.key()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(keys.iter().all(|key| *key == keys[0]), "{keys:?}");
    let store = Store::open(&fresh.location).unwrap();
    assert_eq!(
        store
            .debug_query_i64("SELECT count(*) FROM meta WHERE key = 'store_key'")
            .unwrap(),
        1
    );
}

#[cfg(not(feature = "postgres"))]
#[test]
fn a_url_without_postgres_support_says_how_to_get_it() {
    let error = Store::open("postgres://me:secret@db.invalid/skein").unwrap_err();
    assert!(
        matches!(error, StoreError::NoPostgresSupport { .. }),
        "{error}"
    );
    let message = error.to_string();
    assert!(
        message.contains("built without PostgreSQL support"),
        "{message}"
    );
    assert!(message.contains("postgres` feature"), "{message}");
    assert!(!message.contains("secret"), "{message}");
}

#[cfg(feature = "postgres")]
#[test]
fn an_unreachable_server_is_reported_with_what_to_check() {
    // Port 1 on loopback: nothing listens, the connection is refused at once.
    let error = Store::open("postgresql://me:secret@127.0.0.1:1/skein").unwrap_err();
    assert!(matches!(error, StoreError::Unreachable { .. }), "{error}");
    let message = error.to_string();
    assert!(message.contains("refused"), "{message}");
    assert!(message.contains("check that it is running"), "{message}");
    assert!(message.contains("me:***@127.0.0.1:1"), "{message}");
    assert!(!message.contains("secret"), "{message}");
}

#[cfg(feature = "postgres")]
#[test]
fn a_malformed_url_is_reported() {
    let error = Store::open("postgres://me@127.0.0.1:notaport/skein").unwrap_err();
    assert!(matches!(error, StoreError::BadUrl { .. }), "{error}");
}

/// The store's sessions keep the URL's own server options (here the
/// scratch schema's search_path) and its `application_name`, and leave the
/// planner free to choose any plan (no `enable_seqscan=off`).
#[test]
fn postgres_sessions_keep_the_url_options_and_leave_the_planner_alone() {
    if crate::common::postgres_base(
        "postgres_sessions_keep_the_url_options_and_leave_the_planner_alone",
    )
    .is_none()
    {
        return;
    }
    let db = TempStore::new(Backend::Postgres);
    let store = Store::open(format!("{}&application_name=skein_web_1", db.location())).unwrap();
    let setting = |name: &str, expected: &str| {
        store
            .debug_query_i64(&format!(
                "SELECT (current_setting('{name}') LIKE '{expected}')::int::bigint"
            ))
            .unwrap()
            == 1
    };
    assert!(setting("search_path", "skein_test_%"));
    assert!(setting("application_name", "skein_web_1"));
    assert!(setting("enable_seqscan", "on"));
    assert!(setting("jit", "off"));
}

#[test]
fn a_path_that_is_not_a_url_opens_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("postgres.db")).unwrap();
    assert_eq!(store.backend_name(), "sqlite");
}

/// Opening for reading, or for work on what exists, where there is no skein
/// database fails and creates nothing: no file, no directory, no table.
fn reading_where_there_is_no_database_creates_nothing(backend: Backend) {
    let fresh = FreshLocation::new(backend);
    let location = match backend {
        Backend::Sqlite => Path::new(&fresh.location)
            .with_file_name("mistyped/dir/skein.db")
            .display()
            .to_string(),
        Backend::Postgres => fresh.location.clone(),
    };
    for mode in [OpenMode::ReadOnly, OpenMode::Existing] {
        let error = Store::open_with(&location, mode).unwrap_err();
        match backend {
            Backend::Sqlite => {
                assert!(matches!(error, StoreError::NoDatabase { .. }), "{error}");
                assert!(error.to_string().contains("nothing was created"), "{error}");
            }
            Backend::Postgres => {
                assert!(matches!(error, StoreError::NotSkein { .. }), "{error}");
                assert!(error.to_string().contains("no skein tables"), "{error}");
            }
        }
    }
    match backend {
        Backend::Sqlite => {
            let mistyped = Path::new(&fresh.location).with_file_name("mistyped");
            assert!(!mistyped.exists(), "{} was created", mistyped.display());
        }
        Backend::Postgres => assert_eq!(fresh.tables(), Vec::<String>::new()),
    }
    // Creating makes one, which the other modes then open.
    Store::open_with(&location, OpenMode::Create).unwrap();
    for mode in [OpenMode::ReadOnly, OpenMode::Existing] {
        Store::open_with(&location, mode).unwrap();
    }
}

/// Where another application keeps its tables, a read-only or existing
/// open refuses and changes nothing (on PostgreSQL a schema shared with
/// other tables is fine to create skein's in; see the SQLite test below for
/// a file, which every mode refuses).
fn another_applications_tables_are_never_migrated_by_readers(backend: Backend) {
    let fresh = FreshLocation::new(backend);
    fresh.plant_foreign_table();
    for mode in [OpenMode::ReadOnly, OpenMode::Existing] {
        let error = Store::open_with(&fresh.location, mode).unwrap_err();
        assert!(matches!(error, StoreError::NotSkein { .. }), "{error}");
        assert!(error.to_string().contains("left untouched"), "{error}");
    }
    assert_eq!(fresh.tables(), vec!["notes".to_string()]);
}

/// A read-only handle reads everything a writer sees and refuses every
/// write with a typed error, before touching the database.
fn a_read_only_store_reads_everything_and_writes_nothing(backend: Backend) {
    let db = TempStore::new(backend);
    let conversation = db
        .store
        .create_conversation(NewConversation::default())
        .unwrap();
    for i in 0..3 {
        append_turn(&db.store, &conversation.id, &format!("turn {i}"));
    }
    let mut expected = Vec::new();
    db.store.export(&mut expected).unwrap();

    let reader = Store::open_with(db.location(), OpenMode::ReadOnly).unwrap();
    assert!(reader.is_read_only());
    assert!(!db.store.is_read_only());
    let head = reader.conversation(&conversation.id).unwrap().head.unwrap();
    assert_eq!(reader.load_thread(head).unwrap().len(), 6);
    assert_eq!(reader.list_conversations(10).unwrap().len(), 1);
    assert_eq!(reader.recent_runs(10).unwrap().len(), 3);
    assert!(reader.verify().unwrap().is_ok());
    let mut exported = Vec::new();
    reader.export(&mut exported).unwrap();
    assert_eq!(exported, expected);

    let refused = |result: Result<(), StoreError>| match result {
        Err(StoreError::ReadOnly { location }) => assert!(!location.is_empty()),
        other => panic!("expected a read-only refusal, got {other:?}"),
    };
    let thread = crate::common::history("another", 3);
    refused(reader.append(&thread).map(drop));
    refused(
        reader
            .create_conversation(NewConversation::default())
            .map(drop),
    );
    refused(reader.record_run(&RunRecord::new("echo", "echo")));
    refused(reader.move_head(&conversation.id, Some(head), head));
    refused(reader.import(&mut expected.as_slice()).map(drop));
    assert_eq!(db.count("conversations"), 1);
    assert_eq!(db.count("nodes"), 6);
    assert_eq!(db.count("runs"), 3);
}

/// SQLite: the file opened read-only is opened with
/// `SQLITE_OPEN_READ_ONLY`, so even a raw write through its connection
/// fails. (Tests run as root, for whom a `chmod 444` file is writable; the
/// CLI test `read_commands_work_on_a_read_only_mount` reads a database on a
/// read-only mount, where writing is impossible for anyone.)
#[test]
fn a_read_only_sqlite_handle_uses_read_only_connections() {
    let db = TempStore::new(Backend::Sqlite);
    let reader = Store::open_with(db.location(), OpenMode::ReadOnly).unwrap();
    let conn = reader.raw_connection().unwrap();
    assert!(conn.is_readonly(rusqlite::MAIN_DB).unwrap());
    let error = conn
        .execute("INSERT INTO meta(key, value) VALUES ('x', 'y')", [])
        .unwrap_err();
    assert!(error.to_string().contains("readonly"), "{error}");
}

/// SQLite: another application's database, a file that is not SQLite, a
/// directory: every mode refuses them, and the file is left byte for byte
/// as it was (no skein table, journal mode and `user_version` unchanged).
#[test]
fn files_that_are_not_skein_databases_are_refused_untouched() {
    let fresh = FreshLocation::new(Backend::Sqlite);
    fresh.plant_foreign_table();
    let foreign = Path::new(&fresh.location).to_path_buf();
    let dir = foreign.parent().unwrap().to_path_buf();
    let text = dir.join("notes.txt");
    std::fs::write(&text, "just some notes, long enough to hold a header\n").unwrap();
    // Shorter than SQLite's header: still not a database, never a blank one.
    let tiny = dir.join("tiny.txt");
    std::fs::write(&tiny, "hi\n").unwrap();
    let cases = [
        (foreign.clone(), "another application"),
        (text.clone(), "not a SQLite database"),
        (tiny.clone(), "not a SQLite database"),
        (dir.join("a-directory"), "directory"),
    ];
    std::fs::create_dir(dir.join("a-directory")).unwrap();
    for (path, says) in &cases {
        let before = std::fs::read(path).ok();
        for mode in [OpenMode::Create, OpenMode::Existing, OpenMode::ReadOnly] {
            let error = Store::open_with(path, mode).unwrap_err();
            assert!(matches!(error, StoreError::NotSkein { .. }), "{error}");
            assert!(error.to_string().contains(says), "{mode:?}: {error}");
        }
        assert_eq!(
            std::fs::read(path).ok(),
            before,
            "{} changed",
            path.display()
        );
    }
    let conn = rusqlite::Connection::open(&foreign).unwrap();
    let journal: String = conn
        .pragma_query_value(None, "journal_mode", |row| row.get(0))
        .unwrap();
    let version: i64 = conn
        .pragma_query_value(None, "user_version", |row| row.get(0))
        .unwrap();
    assert_eq!((journal.as_str(), version), ("delete", 11));
    assert_eq!(fresh.tables(), vec!["notes".to_string()]);
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["a-directory", "notes.txt", "skein.db", "tiny.txt"]);
}

/// SQLite: an empty file (say, made by `touch`) becomes a database only
/// when creating; reading it is refused and leaves it empty.
#[test]
fn an_empty_file_is_initialised_only_when_creating() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.db");
    std::fs::write(&empty, b"").unwrap();
    for mode in [OpenMode::ReadOnly, OpenMode::Existing] {
        let error = Store::open_with(&empty, mode).unwrap_err();
        assert!(error.to_string().contains("it is empty"), "{error}");
    }
    assert_eq!(std::fs::metadata(&empty).unwrap().len(), 0);
    let store = Store::open_with(&empty, OpenMode::Create).unwrap();
    assert!(store.verify().unwrap().is_ok());
    Store::open_with(&empty, OpenMode::ReadOnly).unwrap();
}

/// SQLite: a database of an older skein opened read-only is upgraded first
/// when it can be written (its queries would fail on the missing columns
/// otherwise), then read through read-only connections.
#[test]
fn an_older_database_opened_read_only_is_upgraded_first() {
    let db = TempStore::new(Backend::Sqlite);
    let conversation = db
        .store
        .create_conversation(NewConversation::default())
        .unwrap();
    append_turn(&db.store, &conversation.id, "before the upgrade");
    db.store
        .raw_connection()
        .unwrap()
        .execute_batch(
            "DROP TABLE labels; DROP TABLE replay_turns; DROP TABLE replays; DROP TABLE tool_calls; DROP TABLE tool_offers; DROP TABLE node_search; DROP TABLE run_links; DROP INDEX conversations_by_root; ALTER TABLE conversations DROP COLUMN root;
             ALTER TABLE nodes DROP COLUMN root;
             ALTER TABLE runs DROP COLUMN events;
             DROP INDEX conversations_by_origin; ALTER TABLE conversations DROP COLUMN imported; ALTER TABLE runs DROP COLUMN finish_reason;
             ALTER TABLE runs DROP COLUMN turn; ALTER TABLE runs DROP COLUMN step; ALTER TABLE runs DROP COLUMN requested_model; ALTER TABLE runs DROP COLUMN response_model;
             PRAGMA user_version = 4;",
        )
        .unwrap();
    let reader = Store::open_with(db.location(), OpenMode::ReadOnly).unwrap();
    assert_eq!(reader.recent_runs(10).unwrap().len(), 1);
    assert_eq!(db.store.debug_query_i64("PRAGMA user_version").unwrap(), 25);
}

/// SQLite: schema 21 rebuilds `runs` and `blobs` of an older database as
/// rowid tables (large rows in a `WITHOUT ROWID` table were read whole on
/// every insert): every run, with its request body and tool set, and every
/// blob comes through, and the database verifies.
#[test]
fn runs_and_blobs_become_rowid_tables_and_keep_their_rows() {
    use skein_core::{Message, Thread, ToolSpec};
    use skein_store::TurnCommit;
    let db = TempStore::new(Backend::Sqlite);
    let conversation = db
        .store
        .create_conversation(NewConversation::default())
        .unwrap();
    let document = "a long retrieved document. ".repeat(400);
    let thread = Thread::from_messages([Message::user(document), Message::assistant("read")]);
    let mut run = RunRecord::new("echo", "echo");
    run.conversation = Some(conversation.id.clone());
    run.input_head = thread.parent().head_id();
    run.output_head = thread.head_id();
    run.request = Some(format!("{{\"messages\": \"{}\"}}", "x".repeat(50_000)));
    run.tools = vec![ToolSpec::new(
        "search",
        "finds",
        serde_json::json!({"type": "object"}),
    )];
    db.store
        .commit_turn(&TurnCommit::continuing(
            &conversation.id,
            None,
            &thread,
            std::slice::from_ref(&run),
        ))
        .unwrap();
    let recorded = db.store.run_record(&run.id).unwrap();
    let table_sql = |table: &str| {
        db.store
            .raw_connection()
            .unwrap()
            .query_row(
                "SELECT sql FROM sqlite_schema WHERE name = ?1",
                [table],
                |row| row.get::<_, String>(0),
            )
            .unwrap()
    };
    // Back to schema 20's tables, as an older skein left them.
    let mut older = String::new();
    for table in ["runs", "blobs"] {
        let current = table_sql(table);
        older.push_str(&format!(
            "CREATE TABLE {table}_old {} WITHOUT ROWID;
             INSERT INTO {table}_old SELECT * FROM {table};
             DROP TABLE {table};
             ALTER TABLE {table}_old RENAME TO {table};",
            &current[current.find('(').unwrap()..]
        ));
    }
    let raw = db.store.raw_connection().unwrap();
    raw.execute_batch(&format!(
        "PRAGMA foreign_keys = OFF; {older}
         CREATE INDEX runs_by_conversation ON runs(conversation, started);
         CREATE INDEX runs_by_output ON runs(output_head);
         PRAGMA user_version = 20;"
    ))
    .unwrap();
    drop(raw);
    assert!(table_sql("runs").ends_with("WITHOUT ROWID"));
    let reopened = Store::open(db.location()).unwrap();
    for table in ["runs", "blobs"] {
        assert!(!table_sql(table).contains("WITHOUT ROWID"), "{table}");
    }
    assert_eq!(reopened.run_record(&run.id).unwrap(), recorded);
    assert_eq!(
        reopened
            .load_thread(thread.head_id().unwrap())
            .unwrap()
            .messages(),
        thread.messages()
    );
    assert_eq!(
        reopened
            .debug_query_i64("SELECT count(*) FROM sqlite_schema WHERE name = 'runs_by_output'")
            .unwrap(),
        1,
        "the rebuilt table keeps its indexes"
    );
    assert!(reopened.verify().unwrap().is_ok());
}

for_each_backend!(
    concurrent_first_opens_migrate_once,
    reading_where_there_is_no_database_creates_nothing,
    another_applications_tables_are_never_migrated_by_readers,
    a_read_only_store_reads_everything_and_writes_nothing,
);

/// SQLite: a database skein creates, and the WAL beside it, are readable
/// and writable by their owner only (they hold every message).
#[cfg(unix)]
#[test]
fn a_new_database_and_its_wal_are_its_owners_only() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nested").join("skein.db");
    let store = Store::open(&path).unwrap();
    let conversation = store
        .create_conversation(NewConversation::default())
        .unwrap();
    append_turn(&store, &conversation.id, "hello");
    for suffix in ["", "-wal"] {
        let mut file = path.clone().into_os_string();
        file.push(suffix);
        let mode = std::fs::metadata(&file).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "{file:?}");
    }
}

/// SQLite: opening a database to write it never opens and closes one of
/// its files outside SQLite. A process's POSIX locks on a file go with the
/// first descriptor of it the process closes, whoever opened it: a check
/// that opened the `-shm` (or the database) to see whether it can be
/// written dropped the write lock another connection of the same process
/// held, and another process then wrote under it (the attempt reverted in
/// 3e96fda). Here a connection holds a write transaction, the database is
/// opened again in the same process (`Existing`, then `Create`, each
/// checking that it can write), and another process (Python's sqlite3)
/// must still find it locked: neither a write transaction nor leaving WAL
/// mode (which needs the database file's lock) gets through. Skipped,
/// saying so, without `python3`.
#[cfg(unix)]
#[test]
fn opening_a_database_to_write_keeps_the_locks_other_connections_hold() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("skein.db");
    let store = Store::open(&path).unwrap();
    let conversation = store
        .create_conversation(NewConversation::default())
        .unwrap();
    append_turn(&store, &conversation.id, "hello");
    let holder = rusqlite::Connection::open(&path).unwrap();
    holder.execute_batch("BEGIN IMMEDIATE").unwrap();
    holder
        .execute(
            "INSERT INTO meta(key, value) VALUES ('held', 'by this process')",
            [],
        )
        .unwrap();
    for mode in [OpenMode::Existing, OpenMode::Create, OpenMode::ReadOnly] {
        let again = Store::open_with(&path, mode).unwrap();
        assert_eq!(again.list_conversations(10).unwrap().len(), 1);
    }
    let script = "import sqlite3, sys\n\
        db = sqlite3.connect(sys.argv[1], timeout=0, isolation_level=None)\n\
        for attempt in ('BEGIN IMMEDIATE', 'PRAGMA journal_mode=DELETE'):\n\
        \x20   try:\n\
        \x20       print(attempt, '->', db.execute(attempt).fetchall())\n\
        \x20   except sqlite3.OperationalError as error:\n\
        \x20       print(attempt, '->', error)\n";
    let Ok(output) = std::process::Command::new("python3")
        .args(["-c", script])
        .arg(&path)
        .output()
    else {
        eprintln!(
            "SKIPPED opening_a_database_to_write_keeps_the_locks_other_connections_hold: no python3"
        );
        return;
    };
    let said = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(
        said,
        "BEGIN IMMEDIATE -> database is locked\n\
         PRAGMA journal_mode=DELETE -> database is locked\n",
        "another process got past this one's locks"
    );
    holder.execute_batch("COMMIT").unwrap();
    assert_eq!(store.list_conversations(10).unwrap().len(), 1);
}

/// SQLite: a database this process cannot write (its directory and files
/// made read-only) is refused up front by the modes that write, with
/// `StoreError::CannotWrite` naming what is not writable, even when a
/// reader left its `-wal` and `-shm` files behind (which make reading
/// work, so SQLite would open it without a word and fail at the first
/// write); it still opens read-only and reads. Root writes through
/// `chmod`, so this test probes with a write of its own and is skipped
/// (saying so) when that write succeeds; the CLI tests
/// `read_commands_work_on_a_read_only_mount` and
/// `plain_serve_serves_a_database_it_cannot_write_read_only` cover a real
/// read-only mount, which binds root too.
#[cfg(unix)]
#[test]
fn a_database_that_cannot_be_written_is_refused_up_front_even_with_wal_files() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("skein.db");
    let store = Store::open(&path).unwrap();
    let conversation = store
        .create_conversation(NewConversation::default())
        .unwrap();
    append_turn(&store, &conversation.id, "hello");
    drop(store);
    // A reader leaves the WAL files behind.
    let reader = Store::open_with(&path, OpenMode::ReadOnly).unwrap();
    assert_eq!(reader.list_conversations(10).unwrap().len(), 1);
    drop(reader);
    let files: Vec<_> = ["", "-wal", "-shm"]
        .iter()
        .map(|suffix| {
            let mut name = path.clone().into_os_string();
            name.push(suffix);
            std::path::PathBuf::from(name)
        })
        .collect();
    for file in &files {
        assert!(file.exists(), "{file:?} is missing");
    }
    /// Gives the directory and files their rights back, however the test ends.
    struct Restore<'a>(&'a Path, &'a [std::path::PathBuf]);
    impl Drop for Restore<'_> {
        fn drop(&mut self) {
            let _ = std::fs::set_permissions(self.0, std::fs::Permissions::from_mode(0o700));
            for file in self.1 {
                let _ = std::fs::set_permissions(file, std::fs::Permissions::from_mode(0o600));
            }
        }
    }
    let _restore = Restore(dir.path(), &files);
    for file in &files {
        std::fs::set_permissions(file, std::fs::Permissions::from_mode(0o444)).unwrap();
    }
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o555)).unwrap();
    let probe = dir.path().join("probe");
    if std::fs::write(&probe, "x").is_ok() {
        let _ = std::fs::remove_file(&probe);
        eprintln!(
            "SKIPPED a_database_that_cannot_be_written_is_refused_up_front_even_with_wal_files: \
             this user (root?) writes through chmod, so nothing here is read-only"
        );
        return;
    }
    for mode in [OpenMode::Create, OpenMode::Existing] {
        match Store::open_with(&path, mode) {
            Err(StoreError::CannotWrite { location, reason }) => {
                assert_eq!(location, path.display().to_string());
                assert!(reason.contains("skein.db is not writable"), "{reason}");
            }
            Err(other) => panic!("{mode:?}: {other}"),
            Ok(_) => panic!("{mode:?}: a database nobody can write opened to be written"),
        }
    }
    let reader = Store::open_with(&path, OpenMode::ReadOnly).unwrap();
    assert_eq!(reader.list_conversations(10).unwrap().len(), 1);
}
