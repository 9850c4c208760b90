//! Opening a database: choosing the backend from the location, many
//! processes' first opens migrating once, and the errors that say what to do
//! when a location cannot be used.

mod common;

use common::{Backend, FreshLocation};
use skein_store::{Store, StoreError};

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
/// scratch schema's search_path) and add that plans never scan a whole
/// table.
#[test]
fn postgres_sessions_keep_the_url_options_and_never_scan_whole_tables() {
    if common::postgres_base("postgres_sessions_keep_the_url_options_and_never_scan_whole_tables")
        .is_none()
    {
        return;
    }
    let db = common::TempStore::new(Backend::Postgres);
    let setting = |name: &str| {
        db.store
            .debug_query_i64(&format!(
                "SELECT CASE WHEN current_setting('{name}') LIKE 'skein_test_%' \
                 OR current_setting('{name}') = 'off' THEN 1 ELSE 0 END::bigint"
            ))
            .unwrap()
    };
    assert_eq!(setting("search_path"), 1);
    assert_eq!(setting("enable_seqscan"), 1);
}

#[test]
fn a_path_that_is_not_a_url_opens_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("postgres.db")).unwrap();
    assert_eq!(store.backend_name(), "sqlite");
}

for_each_backend!(concurrent_first_opens_migrate_once);
