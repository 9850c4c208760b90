//! PostgreSQL connections: the pool's settings from the URL, connections
//! that break between calls (a thread load included) or in the middle of a
//! turn, and TLS against a throwaway cluster given a certificate made here.

use crate::common::{Backend, TempStore, append_turn};
use skein_core::{Message, Thread};
use skein_store::{NewConversation, RunRecord, Store, StoreError, TlsProblem, TurnCommit};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// A plain connection of the test's own, beside the store's pool.
struct Admin {
    runtime: tokio::runtime::Runtime,
    client: tokio_postgres::Client,
}

impl Admin {
    fn connect(url: &str) -> Admin {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let client = runtime.block_on(async {
            let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
                .await
                .expect("admin connection");
            tokio::spawn(connection);
            client
        });
        Admin { runtime, client }
    }

    fn execute(&self, sql: &str) {
        self.runtime
            .block_on(self.client.batch_execute(sql))
            .unwrap_or_else(|error| panic!("{sql}: {error}"));
    }

    fn pids(&self, sql: &str, application: &str) -> Vec<i32> {
        self.runtime
            .block_on(self.client.query(sql, &[&application]))
            .unwrap()
            .iter()
            .map(|row| row.get(0))
            .collect()
    }

    /// End every session of `application`; how many there were.
    fn terminate_all(&self, application: &str) -> usize {
        // Listed first, ended one by one: a condition beside
        // pg_terminate_backend could be evaluated after it, for any session.
        let pids = self.pids(
            "SELECT pid FROM pg_stat_activity WHERE application_name = $1",
            application,
        );
        for pid in &pids {
            self.execute(&format!("SELECT pg_terminate_backend({pid})"));
        }
        pids.len()
    }

    /// Wait until a session of `application` other than `seen` waits for a
    /// lock, and end it; its pid.
    fn terminate_next_waiter(&self, application: &str, seen: &[i32]) -> i32 {
        let give_up = Instant::now() + Duration::from_secs(120);
        loop {
            let waiting = self.pids(
                "SELECT pid FROM pg_stat_activity WHERE application_name = $1 \
                 AND wait_event_type = 'Lock'",
                application,
            );
            if let Some(pid) = waiting.into_iter().find(|pid| !seen.contains(pid)) {
                self.execute(&format!("SELECT pg_terminate_backend({pid})"));
                return pid;
            }
            assert!(
                Instant::now() < give_up,
                "no session of {application} came to wait for the lock"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// The store `db` names, opened again with its own `application_name` (so
/// its sessions can be told apart) and `extra` URL parameters.
fn named_store(db: &TempStore, extra: &str) -> (Store, String) {
    let application = format!("skein_conn_{}", uuid_suffix());
    let store = Store::open(format!(
        "{}&application_name={application}{extra}",
        db.location()
    ))
    .unwrap();
    (store, application)
}

fn uuid_suffix() -> String {
    format!(
        "{:x}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
            ^ u128::from(std::process::id())
    )
}

/// `pool_max` bounds the connections one store holds, however many threads
/// call it at once.
#[test]
fn pool_max_from_the_url_bounds_the_connections() {
    if crate::common::postgres_base("pool_max_from_the_url_bounds_the_connections").is_none() {
        return;
    }
    let db = TempStore::new(Backend::Postgres);
    let (store, application) = named_store(&db, "&pool_max=2");
    let admin = Admin::connect(&db.location());
    let conversation = store
        .create_conversation(NewConversation::default())
        .unwrap()
        .id;
    std::thread::scope(|scope| {
        for thread in 0..8 {
            let (store, conversation) = (&store, &conversation);
            scope.spawn(move || {
                for turn in 0..5 {
                    append_turn(store, conversation, &format!("{thread}.{turn}"));
                }
            });
        }
    });
    let sessions = admin
        .pids(
            "SELECT pid FROM pg_stat_activity WHERE application_name = $1",
            &application,
        )
        .len();
    assert!((1..=2).contains(&sessions), "{sessions} sessions");
    assert_eq!(store.conversation(&conversation).unwrap().len, 80);
}

/// A connection the server ends between calls (an administrator, a
/// restart, an idle timeout) costs nothing: the next call reconnects.
#[test]
fn the_call_after_a_connection_is_ended_reconnects() {
    if crate::common::postgres_base("the_call_after_a_connection_is_ended_reconnects").is_none() {
        return;
    }
    let db = TempStore::new(Backend::Postgres);
    let (store, application) = named_store(&db, "");
    let admin = Admin::connect(&db.location());
    let conversation = store
        .create_conversation(NewConversation::default())
        .unwrap()
        .id;
    append_turn(&store, &conversation, "before");
    for round in 0..3 {
        assert!(admin.terminate_all(&application) >= 1, "round {round}");
        // A read, then a write, each on a connection that was ended.
        assert_eq!(
            store.conversation(&conversation).unwrap().len,
            2 + 2 * round
        );
        assert!(admin.terminate_all(&application) >= 1, "round {round}");
        append_turn(&store, &conversation, &format!("after {round}"));
    }
    assert_eq!(store.conversation(&conversation).unwrap().len, 8);
}

/// Loading a thread (whose rows are read by a task of the store's runtime)
/// on a connection the server ended also reconnects, blocking or async:
/// it succeeds on a new connection instead of failing with the client's
/// error.
#[test]
fn a_thread_loads_after_its_connection_is_ended() {
    if crate::common::postgres_base("a_thread_loads_after_its_connection_is_ended").is_none() {
        return;
    }
    let db = TempStore::new(Backend::Postgres);
    let (store, application) = named_store(&db, "");
    let admin = Admin::connect(&db.location());
    let conversation = store
        .create_conversation(NewConversation::default())
        .unwrap()
        .id;
    append_turn(&store, &conversation, "first");
    append_turn(&store, &conversation, "second");
    let head = store.conversation(&conversation).unwrap().head.unwrap();
    let expected = store.load_thread(head).unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    for round in 0..5 {
        assert!(admin.terminate_all(&application) >= 1, "round {round}");
        assert_eq!(store.load_thread(head).unwrap(), expected, "round {round}");
        assert!(admin.terminate_all(&application) >= 1, "round {round}");
        let loaded = runtime.block_on(store.nonblocking().load_thread(head));
        assert_eq!(loaded.unwrap(), expected, "round {round}");
    }
}

/// A connection the async API needed while driven by a caller's runtime is
/// made on the store's own, so it outlives that runtime: a turn committed
/// and a thread loaded from a current-thread runtime (with no I/O or timer
/// drivers) that is then dropped leave a pooled connection that serves the
/// same store from a new runtime and from the blocking API. With one
/// connection allowed, the server sees the same session throughout: had
/// the connection died with the first runtime, the calls after it would
/// have reconnected.
#[test]
fn a_pooled_connection_outlives_the_caller_runtime_that_made_it() {
    if crate::common::postgres_base("a_pooled_connection_outlives_the_caller_runtime_that_made_it")
        .is_none()
    {
        return;
    }
    let db = TempStore::new(Backend::Postgres);
    let (store, application) = named_store(&db, "&pool_max=1");
    let admin = Admin::connect(&db.location());
    let sessions = || {
        admin.pids(
            "SELECT pid FROM pg_stat_activity WHERE application_name = $1",
            &application,
        )
    };
    let conversation = store
        .create_conversation(NewConversation::default())
        .unwrap()
        .id;
    append_turn(&store, &conversation, "first");
    let before = store.conversation(&conversation).unwrap();
    let base = store.load_thread(before.head.unwrap()).unwrap();
    let thread: Thread = base
        .push(Message::user("second".to_string()))
        .push(Message::assistant("reply to second".to_string()));
    let mut run = RunRecord::new("echo", "echo");
    run.conversation = Some(conversation.clone());
    run.output_head = thread.head_id();
    let runs = [run];
    let turn = TurnCommit::continuing(&conversation, before.head, &thread, &runs);
    let head = thread.head_id().unwrap();

    // The pool's connection is ended and gone, so the first async call
    // must make a new one.
    assert_eq!(admin.terminate_all(&application), 1);
    let give_up = Instant::now() + Duration::from_secs(120);
    while !sessions().is_empty() {
        assert!(Instant::now() < give_up, "the ended session stayed");
        std::thread::sleep(Duration::from_millis(20));
    }
    let bare = || {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
    };
    let first = bare();
    let loaded = first.block_on(async {
        let api = store.nonblocking();
        api.commit_turn(&turn).await.unwrap();
        api.load_thread(head).await.unwrap()
    });
    assert_eq!(loaded, thread);
    drop(first);
    let made = sessions();
    assert_eq!(made.len(), 1, "{made:?}");

    let second = bare();
    second.block_on(async {
        let api = store.nonblocking();
        assert_eq!(
            api.conversation(&conversation).await.unwrap().head,
            Some(head)
        );
        assert_eq!(api.load_thread(head).await.unwrap(), thread);
    });
    drop(second);
    assert_eq!(store.load_thread(head).unwrap(), thread);
    append_turn(&store, &conversation, "third");
    let pid = store
        .debug_query_i64("SELECT pg_backend_pid()::bigint")
        .unwrap();
    assert_eq!(made, [i32::try_from(pid).unwrap()]);
    assert_eq!(sessions(), made);
    assert_eq!(store.conversation(&conversation).unwrap().len, 6);
}

/// A turn whose connection is ended while it waits inside its transaction
/// (here for a lock the test holds on `conversations`) is either all kept
/// or not at all: ended once, it runs again on a new connection and is
/// kept whole; ended on that one too, it fails with
/// [`StoreError::ConnectionLost`] and none of it was kept.
#[test]
fn a_connection_lost_mid_turn_keeps_all_of_the_turn_or_none() {
    if crate::common::postgres_base("a_connection_lost_mid_turn_keeps_all_of_the_turn_or_none")
        .is_none()
    {
        return;
    }
    let db = TempStore::new(Backend::Postgres);
    // One connection at most: the broken one must be given up before its
    // replacement is asked for (it once held the only slot until the
    // pool's 60 s wait ran out, which made the test below flaky under
    // load).
    let (store, application) = named_store(&db, "&pool_max=1");
    let admin = Admin::connect(&db.location());
    // The lock is held on a connection of its own: inside a transaction,
    // pg_stat_activity would keep showing the admin one snapshot.
    let locker = Admin::connect(&db.location());
    let conversation = store
        .create_conversation(NewConversation::default())
        .unwrap()
        .id;
    append_turn(&store, &conversation, "first");
    let before = store.conversation(&conversation).unwrap();
    let base = store.load_thread(before.head.unwrap()).unwrap();
    let thread: Thread = base
        .push(Message::user("second".to_string()))
        .push(Message::assistant("reply to second".to_string()));
    let mut run = RunRecord::new("echo", "echo");
    run.conversation = Some(conversation.clone());
    run.output_head = thread.head_id();
    let runs = [run];
    let turn = TurnCommit::continuing(&conversation, before.head, &thread, &runs);
    let new_head = thread.head_id().unwrap();
    let count = |table: &str| db.count(table);
    let (nodes, stored_runs) = (count("nodes"), count("runs"));

    // Ended on both connections: a typed error, nothing kept.
    locker.execute("BEGIN; LOCK TABLE conversations IN EXCLUSIVE MODE");
    let outcome = std::thread::scope(|scope| {
        let committing = scope.spawn(|| store.commit_turn(&turn));
        let first = admin.terminate_next_waiter(&application, &[]);
        admin.terminate_next_waiter(&application, &[first]);
        committing.join().unwrap()
    });
    locker.execute("ROLLBACK");
    match outcome {
        Err(StoreError::ConnectionLost { location, reason }) => {
            assert!(!location.is_empty());
            assert!(
                reason.contains("terminating connection") || reason.contains("closed"),
                "{reason}"
            );
        }
        other => panic!("expected ConnectionLost, got {other:?}"),
    }
    assert!(!store.contains(new_head).unwrap());
    assert_eq!(store.conversation(&conversation).unwrap().head, before.head);
    assert_eq!((count("nodes"), count("runs")), (nodes, stored_runs));

    // Ended once: repeated on a new connection, kept whole.
    locker.execute("BEGIN; LOCK TABLE conversations IN EXCLUSIVE MODE");
    let outcome = std::thread::scope(|scope| {
        let committing = scope.spawn(|| store.commit_turn(&turn));
        let first = admin.terminate_next_waiter(&application, &[]);
        // The repeat waits for the lock on its new connection: let it go.
        let give_up = Instant::now() + Duration::from_secs(120);
        while !admin
            .pids(
                "SELECT pid FROM pg_stat_activity WHERE application_name = $1 \
                 AND wait_event_type = 'Lock'",
                &application,
            )
            .iter()
            .any(|pid| *pid != first)
        {
            assert!(Instant::now() < give_up, "the turn was not repeated");
            std::thread::sleep(Duration::from_millis(20));
        }
        locker.execute("ROLLBACK");
        committing.join().unwrap()
    });
    outcome.expect("the turn, repeated on a new connection");
    assert_eq!(
        store.conversation(&conversation).unwrap().head,
        Some(new_head)
    );
    assert_eq!(
        (count("nodes"), count("runs")),
        (nodes + 2, stored_runs + 1)
    );
}

/// A cluster of the test's own (never the shared one), stopped and deleted
/// when dropped.
struct Cluster {
    dir: PathBuf,
    url: String,
    script: PathBuf,
}

impl Cluster {
    /// Start one with `scripts/postgres`, or `None` (said loudly) when the
    /// server binaries are missing outside CI.
    fn start(test: &str) -> Option<Cluster> {
        let installed = std::fs::read_dir("/usr/lib/postgresql")
            .map(|entries| {
                entries
                    .flatten()
                    .any(|e| e.path().join("bin/initdb").exists())
            })
            .unwrap_or(false);
        if !installed {
            assert!(
                std::env::var_os("CI").is_none(),
                "{test}: PostgreSQL's server binaries are missing (scripts/postgres installs them)"
            );
            eprintln!("SKIPPED {test}: no PostgreSQL server binaries under /usr/lib/postgresql");
            return None;
        }
        let dir = std::env::temp_dir().join(format!("skein-pg-tls-{}", uuid_suffix()));
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/postgres");
        let output = Command::new(&script)
            .arg("start")
            .arg(&dir)
            .output()
            .expect("scripts/postgres");
        assert!(
            output.status.success(),
            "scripts/postgres start: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let url = String::from_utf8(output.stdout).unwrap().trim().to_string();
        Some(Cluster { dir, url, script })
    }

    /// Write `contents` into the cluster's directory, owned by the server's
    /// user and readable by it alone (the server refuses a key others can
    /// read).
    fn write(&self, name: &str, contents: &str) -> PathBuf {
        let path = self.dir.join(name);
        std::fs::write(&path, contents).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        if is_root() {
            let status = Command::new("chown")
                .arg("postgres:postgres")
                .arg(&path)
                .status()
                .unwrap();
            assert!(status.success());
        }
        path
    }

    fn port(&self) -> u16 {
        let after_host = self.url.rsplit_once(':').unwrap().1;
        after_host.split('/').next().unwrap().parse().unwrap()
    }

    /// A URL for this cluster with `host` and the query `params`.
    fn url(&self, host: &str, params: &str) -> String {
        format!(
            "postgres://postgres@{host}:{}/postgres?{params}",
            self.port()
        )
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = Command::new(&self.script)
            .arg("stop")
            .arg(&self.dir)
            .status();
    }
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|output| output.stdout.trim_ascii() == b"0")
        .unwrap_or(false)
}

/// A certificate authority and a server certificate it signed for
/// `localhost` only, as PEM: (authority, server certificate, server key).
fn certificates(authority_name: &str) -> (String, String, String) {
    use rcgen::{
        BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose,
        IsCa, KeyPair, KeyUsagePurpose,
    };
    let mut authority = CertificateParams::new(Vec::<String>::new()).unwrap();
    authority.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    authority
        .distinguished_name
        .push(DnType::CommonName, authority_name);
    authority.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let authority = CertifiedIssuer::self_signed(authority, KeyPair::generate().unwrap()).unwrap();
    let mut server = CertificateParams::new(vec!["localhost".to_string()]).unwrap();
    server
        .distinguished_name
        .push(DnType::CommonName, "localhost");
    server.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let key = KeyPair::generate().unwrap();
    let certificate = server.signed_by(&key, &authority).unwrap();
    (authority.pem(), certificate.pem(), key.serialize_pem())
}

fn tls_problem(url: &str) -> (String, TlsProblem) {
    match Store::open(url) {
        Err(StoreError::Tls { mode, problem, .. }) => (mode, problem),
        Err(other) => panic!("{url}: expected a TLS error, got {other}"),
        Ok(_) => panic!("{url}: opened"),
    }
}

fn encrypted(store: &Store) -> bool {
    store
        .debug_query_i64("SELECT ssl::int::bigint FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
        .unwrap()
        == 1
}

/// Every `sslmode` against a server with a certificate made here for
/// `localhost`: what each accepts, and the error for what it refuses.
#[test]
fn tls_modes_encrypt_verify_and_refuse_as_libpq_does() {
    let Some(cluster) = Cluster::start("tls_modes_encrypt_verify_and_refuse_as_libpq_does") else {
        return;
    };
    let (authority, certificate, key) = certificates("skein test authority");
    let (stranger, _, _) = certificates("another authority");
    let authority = cluster.write("root.crt", &authority);
    let stranger = cluster.write("stranger.crt", &stranger);
    let certificate = cluster.write("server.crt", &certificate);
    let key = cluster.write("server.key", &key);
    let plain = Store::open(cluster.url("127.0.0.1", "sslmode=disable")).unwrap();
    assert!(!encrypted(&plain));
    let (_, problem) = tls_problem(&cluster.url("127.0.0.1", "sslmode=require"));
    assert_eq!(problem, TlsProblem::NotOffered);
    plain
        .debug_execute(&format!(
            "ALTER SYSTEM SET ssl_cert_file = '{}'",
            certificate.display()
        ))
        .unwrap();
    plain
        .debug_execute(&format!(
            "ALTER SYSTEM SET ssl_key_file = '{}'",
            key.display()
        ))
        .unwrap();
    plain.debug_execute("ALTER SYSTEM SET ssl = on").unwrap();
    plain.debug_execute("SELECT pg_reload_conf()").unwrap();
    drop(plain);

    // The default, `prefer`, encrypts once the server offers TLS; so does
    // `require`, whoever signed the certificate.
    let give_up = Instant::now() + Duration::from_secs(60);
    loop {
        let store = Store::open(cluster.url("127.0.0.1", "")).unwrap();
        if encrypted(&store) {
            break;
        }
        assert!(Instant::now() < give_up, "the server never offered TLS");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(encrypted(
        &Store::open(cluster.url("127.0.0.1", "sslmode=require")).unwrap()
    ));

    // verify-full: the right authority and host name.
    let root = |path: &Path| format!("sslrootcert={}", path.display());
    let full = Store::open(cluster.url(
        "localhost",
        &format!(
            "sslmode=verify-full&hostaddr=127.0.0.1&{}",
            root(&authority)
        ),
    ))
    .unwrap();
    assert!(encrypted(&full));
    // The host name the certificate does not list.
    let (mode, problem) = tls_problem(&cluster.url(
        "127.0.0.1",
        &format!("sslmode=verify-full&{}", root(&authority)),
    ));
    assert_eq!(mode, "verify-full");
    match &problem {
        TlsProblem::WrongHost {
            expected,
            presented,
        } => {
            assert_eq!(expected, "127.0.0.1");
            assert_eq!(presented, &["localhost"]);
        }
        other => panic!("expected WrongHost, got {other:?}"),
    }
    let message = StoreError::Tls {
        location: "here".into(),
        mode,
        problem,
    }
    .to_string();
    assert!(
        message.contains("127.0.0.1") && message.contains("localhost"),
        "{message}"
    );
    // verify-ca checks the authority, not the name.
    let ca = Store::open(cluster.url(
        "127.0.0.1",
        &format!("sslmode=verify-ca&{}", root(&authority)),
    ))
    .unwrap();
    assert!(encrypted(&ca));
    for mode in ["verify-ca", "verify-full", "require"] {
        // Another authority's certificate (with `require`, a root file
        // makes it verify the authority, as libpq does).
        let (_, problem) = tls_problem(&cluster.url(
            "localhost",
            &format!("sslmode={mode}&hostaddr=127.0.0.1&{}", root(&stranger)),
        ));
        assert!(
            matches!(problem, TlsProblem::Untrusted { .. }),
            "{mode}: {problem:?}"
        );
    }
    // No root file: the system's authorities never signed this one.
    let (_, problem) =
        tls_problem(&cluster.url("localhost", "sslmode=verify-ca&hostaddr=127.0.0.1"));
    assert!(
        matches!(problem, TlsProblem::Untrusted { .. }),
        "{problem:?}"
    );
    // A root file that is not there is a bad URL, said before connecting.
    match Store::open(cluster.url(
        "localhost",
        "sslmode=verify-ca&sslrootcert=/nonexistent.pem",
    )) {
        Err(StoreError::BadUrl { reason, .. }) => {
            assert!(reason.contains("/nonexistent.pem"), "{reason}");
        }
        other => panic!("expected BadUrl, got {:?}", other.err()),
    }

    // A server that takes TLS connections only refuses `disable` clearly.
    cluster.write("data/pg_hba.conf", "hostssl all all 127.0.0.1/32 trust\n");
    full.debug_execute("SELECT pg_reload_conf()").unwrap();
    drop(full);
    drop(ca);
    // The server reads pg_hba.conf again on its own time: wait for it.
    let give_up = Instant::now() + Duration::from_secs(60);
    while Store::open(cluster.url("127.0.0.1", "sslmode=disable")).is_ok() {
        assert!(
            Instant::now() < give_up,
            "the server kept taking plain connections"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let (mode, problem) = tls_problem(&cluster.url("127.0.0.1", "sslmode=disable"));
    assert_eq!(mode, "disable");
    assert!(
        matches!(problem, TlsProblem::RequiredByServer { .. }),
        "{problem:?}"
    );
    assert!(encrypted(
        &Store::open(cluster.url("127.0.0.1", "sslmode=require")).unwrap()
    ));
}

/// The planner knows the tables' sizes without waiting for autovacuum: a
/// new database's tables are analyzed by the migrations (`reltuples` is
/// -1 until a table's first `ANALYZE`), and an import of 1,000 rows or
/// more analyzes them again.
#[test]
fn migrations_and_bulk_imports_leave_planner_statistics() {
    if crate::common::postgres_base("migrations_and_bulk_imports_leave_planner_statistics")
        .is_none()
    {
        return;
    }
    let db = TempStore::new(Backend::Postgres);
    let reltuples = |table: &str| {
        db.store
            .debug_query_i64(&format!(
                "SELECT reltuples::bigint FROM pg_class \
                 WHERE oid = to_regclass(quote_ident(current_schema()) || '.{table}')"
            ))
            .unwrap()
    };
    for table in ["nodes", "conversations", "runs", "run_links", "blobs"] {
        assert_eq!(reltuples(table), 0, "{table} was analyzed empty");
    }
    let source = TempStore::new(Backend::Sqlite);
    let conversation = source
        .store
        .create_conversation(NewConversation::default())
        .unwrap()
        .id;
    for turn in 0..600 {
        append_turn(&source.store, &conversation, &format!("turn {turn}"));
    }
    let mut export = Vec::new();
    source.store.export(&mut export).unwrap();
    let report = db.store.import(&mut export.as_slice()).unwrap();
    assert_eq!(report.nodes_written, 1200);
    assert_eq!(reltuples("nodes"), 1200);
    assert_eq!(reltuples("runs"), 600);
}
