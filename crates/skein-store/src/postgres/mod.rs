/*!
The PostgreSQL backend (what [`crate::Store`] opens for a `postgres://`
URL): its handle, opening a URL, the connection pool, and read and write
transactions with retry on serialization failures and deadlocks. Its
operations are split like SQLite's (sqlite/): each file implements the
backend trait the top-level module of the same name declares, and shares
the non-SQL half of its concern with SQLite through that module.

settings.rs reads the URL (the client's parameters plus skein's own:
`sslmode` and `sslrootcert`, for tls.rs, `pool_max`, and the hosts and
`target_session_attrs`, for hosts.rs); pool.rs makes the pool and says
where its connections are made and taken; router.rs says which server a
read goes to when the store has a standby (`read_url`). A connection that
breaks (the server restarted, an administrator ended the session, the
network dropped it) is discarded and the call runs again once on a fresh
one, so a call after a loss reconnects; a write is repeated only if it had
not begun committing. The blocking API's calls block; see bridge.rs for
how that is done without stalling an async runtime, and for the async
API, which does not block.
*/

/// Evaluate `$body` (a block awaiting statements on the connection bound
/// to `$client`) on a pooled connection taken from any runtime, and once
/// more on a new one if that connection broke ([`Connection::settle`]):
/// the loop of every read. A macro rather than a function taking the body
/// as a closure: a future calling a closure on a borrowed connection cannot
/// be shown `Send` by today's compiler, and the async API needs it to be.
macro_rules! reading {
    ($store:expr, |$client:ident| $body:block) => {{
        let shared: &std::sync::Arc<$crate::postgres::Shared> = &$store.shared;
        let route = $crate::postgres::router::read_route(shared, $store.route).await;
        let mut reconnected = false;
        loop {
            let (route, client) = $crate::postgres::checkout_for_read(shared, route).await?;
            let connection = shared.router.connection(route);
            let held = $crate::postgres::Held(Some(client));
            let result: $crate::error::Result<_> = async {
                let $client = held.client();
                $body
            }
            .await;
            if let Some(result) = connection.settle(held, result, &mut reconnected) {
                break result;
            }
        }
    }};
}

/// Evaluate `$body` (a block awaiting statements on the connection bound
/// to `$client`) in a transaction and commit it, attempt after attempt as
/// [`Writer`] says, so `$body` must be safe to repeat: the one retry loop
/// of every write. A macro for the reason [`reading!`] is one.
macro_rules! write_retrying {
    ($store:expr, |$client:ident| $body:block) => {{
        let mut writer = $store.writer().await?;
        loop {
            let attempt = {
                let $client = writer.client();
                writer.attempt(async { $body }).await
            };
            match attempt {
                Ok(value) => break Ok::<_, $crate::error::StoreError>(writer.done(value)),
                Err(error) => writer.again(error).await?,
            }
        }
    }};
}

mod bodies;
pub(crate) mod bridge;
mod calls;
mod conversations;
mod embeddings;
mod family;
mod forget;
mod graph;
mod hosts;
mod labels;
mod offers;
mod pipeline;
mod places;
mod pool;
mod replays;
mod reruns;
mod resolve;
mod router;
mod runs;
pub(crate) mod schema;
pub mod scratch;
mod search;
mod settings;
mod tls;
mod transfer;
mod usage;
mod verify;

use crate::backend::{Backend, BoxFuture};
use crate::error::{Result, StoreError};
use crate::location::redact;
use crate::open::OpenMode;
use deadpool_postgres::{Client, Pool, PoolError};
use router::{Route, Router};
use settings::Settings;
use skein_core::StoreKey;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};
use tls::SslMode;
use tokio_postgres::Row;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;

/// How long a call waits for a free pooled connection.
const WAIT_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a write keeps retrying serialization failures and deadlocks
/// before reporting [`StoreError::Busy`].
const RETRY_GIVE_UP: Duration = Duration::from_secs(120);

/// A handle on one PostgreSQL database (one schema of it: the URL's
/// `options=-c search_path=...` picks another). Cheap to clone.
#[derive(Clone)]
pub(crate) struct PgStore {
    shared: Arc<Shared>,
    /// Where this handle's reads go (router.rs).
    route: Route,
}

struct Shared {
    location_path: PathBuf,
    key: StoreKey,
    router: Router,
    /// Opened with [`OpenMode::ReadOnly`]: every write is refused.
    read_only: bool,
    recent: crate::bodies::Recent,
}

impl Backend for PgStore {
    fn name(&self) -> &'static str {
        "postgres"
    }

    fn works_on_caller_thread(&self) -> bool {
        false
    }

    #[cfg(any(test, feature = "testkit"))]
    fn raw_connection(&self) -> Result<rusqlite::Connection> {
        Err(StoreError::Task(
            "raw_connection is SQLite-only; use debug_execute".into(),
        ))
    }

    fn is_read_only(&self) -> bool {
        self.shared.read_only
    }

    fn location(&self) -> String {
        self.shared.router.primary.location.clone()
    }

    fn path(&self) -> &Path {
        &self.shared.location_path
    }

    fn key(&self) -> StoreKey {
        self.shared.key
    }

    #[cfg(any(test, feature = "testkit"))]
    fn debug_execute(&self, sql: &str) -> Result<u64> {
        self.read(async |client| Ok(client.execute(sql, &[]).await?))
    }

    #[cfg(any(test, feature = "testkit"))]
    fn debug_query_i64(&self, sql: &str) -> Result<i64> {
        self.read(async |client| Ok(client.query_one(sql, &[]).await?.try_get(0)?))
    }

    fn recent_bodies(&self) -> &crate::bodies::Recent {
        &self.shared.recent
    }

    fn meter(&self) -> Option<crate::costs::CostMeter> {
        None
    }

    fn reads(&self) -> Option<Arc<dyn Backend>> {
        self.shared.router.standby.as_ref()?;
        Some(Arc::new(PgStore {
            shared: Arc::clone(&self.shared),
            route: Route::Standby,
        }))
    }
}

impl PgStore {
    /// Connect to the database `url` names, migrating it to the current
    /// schema. The database must exist; its tables are created on first use
    /// when `mode` is [`OpenMode::Create`], and must be there otherwise.
    pub fn open(url: &str, mode: OpenMode, read_url: Option<&str>) -> Result<PgStore> {
        let connection = Connection::open(url)?;
        // The standby's pool connects on first use: a standby that cannot
        // be reached sends reads to the primary (checkout_for_read).
        let standby = read_url.map(Connection::open).transpose()?;
        let location = &connection.location;
        let (key, opened_at) = bridge::block_on(|| async {
            let mut client = connection.checkout().await?;
            let installed = schema::installed_version(&client).await?;
            let denied = |found: i64| {
                move |error: StoreError| match &error {
                    StoreError::Postgres(cause)
                        if cause.code() == Some(&SqlState::INSUFFICIENT_PRIVILEGE) =>
                    {
                        StoreError::MigrationDenied {
                            location: location.clone(),
                            found,
                            supported: schema::SCHEMA_VERSION,
                            reason: describe(cause),
                        }
                    }
                    _ => error,
                }
            };
            match (installed, mode) {
                (None, OpenMode::Create) => {
                    schema::migrate(&mut client).await.map_err(denied(0))?;
                }
                (None, _) => {
                    let schema: String = client
                        .query_one("SELECT current_schema()::text", &[])
                        .await?
                        .get(0);
                    return Err(StoreError::NotSkein {
                        location: location.clone(),
                        reason: format!("schema `{schema}` has no skein tables"),
                    });
                }
                (Some(found), _) if found > schema::SCHEMA_VERSION => {
                    return Err(StoreError::NewerSchema {
                        found,
                        supported: schema::SCHEMA_VERSION,
                    });
                }
                (Some(found), _) if found == schema::SCHEMA_VERSION => {}
                (Some(found), OpenMode::ReadOnly) => {
                    schema::migrate(&mut client).await.map_err(|error| {
                        StoreError::OutdatedReadOnly {
                            location: location.clone(),
                            found,
                            supported: schema::SCHEMA_VERSION,
                            reason: error.to_string(),
                        }
                    })?;
                }
                (Some(found), _) => schema::migrate(&mut client).await.map_err(denied(found))?,
            }
            let key: String = client
                .query_one("SELECT value FROM meta WHERE key = 'store_key'", &[])
                .await?
                .get(0);
            let key = key
                .parse::<StoreKey>()
                .map_err(|_| StoreError::Task(format!("store key `{key}` is not a number")))?;
            // Reads from the standby wait for what this open migrated.
            let opened_at = match &standby {
                Some(_) => router::wal_position(&client).await.ok(),
                None => None,
            };
            Ok((key, opened_at))
        })?;
        let location_path = PathBuf::from(location);
        let router = Router::new(connection, standby);
        if let Some(lsn) = opened_at {
            router.committed_at(lsn);
        }
        Ok(PgStore {
            shared: Arc::new(Shared {
                location_path,
                key,
                router,
                read_only: mode == OpenMode::ReadOnly,
                recent: Default::default(),
            }),
            route: Route::Primary,
        })
    }

    /// Run `work` on a pooled connection, outside any explicit transaction,
    /// blocking (export, import and verify, which the async API does not
    /// offer); once more on a new connection if it broke.
    pub(crate) fn read<T: Send>(
        &self,
        mut work: impl AsyncFnMut(&Client) -> Result<T> + Send,
    ) -> Result<T> {
        bridge::block_on(|| async move { reading!(self, |client| { work(client).await }) })
    }

    /// A read as a task of the PostgreSQL runtime ([`bridge::on_runtime`]),
    /// for queries returning many rows (the caller is woken once, not per
    /// batch of rows); await it from any runtime. `work` owns what it needs.
    pub(crate) async fn read_spawned<T>(
        &self,
        work: impl for<'c> Fn(&'c Client) -> BoxFuture<'c, Result<T>> + Send + Sync + 'static,
    ) -> Result<T>
    where
        T: Send + 'static,
    {
        let store = self.clone();
        bridge::on_runtime(async move { reading!(store, |client| { work(client).await }) }).await
    }

    /// The rows of one statement, awaited on the caller's task (its
    /// connection made on the PostgreSQL runtime when one must be made),
    /// once more on a new connection if it broke.
    pub(crate) async fn rows(&self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<Vec<Row>> {
        reading!(self, |client| {
            let statement = client.prepare_cached(sql).await?;
            Ok(client.query(&statement, params).await?)
        })
    }

    /// Run `work` in a transaction (read committed) and commit it, blocking
    /// (import), retrying as [`Writer`] says, so `work` must be safe to repeat.
    pub(crate) fn write<T: Send>(
        &self,
        mut work: impl AsyncFnMut(&Client) -> Result<T> + Send,
    ) -> Result<T> {
        bridge::block_on(|| async move { write_retrying!(self, |client| { work(client).await }) })
    }

    /// A connection holding the session advisory lock `key`, or `None`
    /// when another session holds it. The lock lasts until
    /// [`PgStore::advisory_unlock`], or until the connection ends (dropped
    /// unreleased, it is closed, not pooled).
    fn advisory_lock(&self, key: i64) -> Result<Option<Held>> {
        bridge::block_on(|| async {
            let mut held = Held(Some(checkout_anywhere(&self.shared, Route::Primary).await?));
            let locked: bool = held
                .client()
                .query_one("SELECT pg_try_advisory_lock($1)", &[&key])
                .await?
                .get(0);
            if locked {
                Ok(Some(held))
            } else {
                held.release();
                Ok(None)
            }
        })
    }

    /// Release the advisory lock `held` holds, and the connection to the
    /// pool.
    fn advisory_unlock(&self, mut held: Held, key: i64) -> Result<()> {
        bridge::block_on(|| async move {
            held.client()
                .execute("SELECT pg_advisory_unlock($1)", &[&key])
                .await?;
            held.release();
            Ok(())
        })
    }

    /// A connection held for a write, from any runtime (refused when the
    /// store is read-only). The caller runs attempts on it until one
    /// succeeds or [`Writer::again`] gives up.
    pub(crate) async fn writer(&self) -> Result<Writer> {
        if self.shared.read_only {
            return Err(StoreError::ReadOnly {
                location: self.shared.router.primary.location.clone(),
            });
        }
        Ok(Writer {
            held: Held(Some(checkout_anywhere(&self.shared, Route::Primary).await?)),
            shared: Arc::clone(&self.shared),
            started: Instant::now(),
            pause: Duration::from_millis(2),
            reconnected: false,
            unusable: AtomicBool::new(false),
        })
    }
}

/// The pool and what its errors are reported with.
struct Connection {
    pool: Pool,
    /// The URL's hosts: which of them failed how when none could be used.
    hosts: Arc<hosts::Hosts>,
    location: String,
    ssl_mode: SslMode,
    /// How long making one connection may take, over all the URL's hosts.
    connect_timeout: Duration,
}

impl Connection {
    /// A pool for the database `url` names; no connection is made yet.
    fn open(url: &str) -> Result<Connection> {
        let location = redact(url);
        let settings = Settings::parse(url, &location)?;
        let tls = tls::connector(settings.ssl_mode, settings.root_file.as_deref(), &location)?;
        let hosts = Arc::new(hosts::Hosts::new(settings.hosts, settings.session));
        // Each host may take up to connect_timeout, as with libpq.
        let create_timeout = settings.connect_timeout * hosts.attempts();
        let pool = Pool::builder(pool::manager(settings.config, Arc::clone(&hosts), tls))
            .max_size(settings.pool_max)
            .runtime(deadpool_postgres::Runtime::Tokio1)
            .wait_timeout(Some(WAIT_TIMEOUT))
            .create_timeout(Some(create_timeout))
            .build()
            .map_err(|error| StoreError::BadUrl {
                location: location.clone(),
                reason: error.to_string(),
            })?;
        Ok(Connection {
            pool,
            hosts,
            location,
            ssl_mode: settings.ssl_mode,
            connect_timeout: create_timeout,
        })
    }

    /// A pooled connection, waited for or made on the PostgreSQL runtime
    /// (where this runs), with connection failures told apart from
    /// everything else: they mean the server is down, the URL is wrong, or
    /// TLS cannot be had as its `sslmode` asks.
    async fn checkout(&self) -> Result<Client> {
        let location = || self.location.clone();
        self.pool.get().await.map_err(|error| match error {
            PoolError::Backend(error) => match tls::problem(&error, self.ssl_mode) {
                Some(problem) => StoreError::Tls {
                    location: location(),
                    mode: self.ssl_mode.name().to_string(),
                    problem,
                },
                // Refused, timed out, bad password, no such database: all
                // say the server cannot be used as the URL names it.
                None => StoreError::Unreachable {
                    location: location(),
                    reason: self
                        .hosts
                        .take_failure()
                        .unwrap_or_else(|| describe(&error)),
                },
            },
            PoolError::Timeout(deadpool_postgres::TimeoutType::Wait) => StoreError::Busy {
                seconds: WAIT_TIMEOUT.as_secs(),
            },
            PoolError::Timeout(_) => StoreError::Unreachable {
                location: location(),
                reason: format!("no answer within {} s", self.connect_timeout.as_secs()),
            },
            other => StoreError::Task(format!("PostgreSQL connection pool: {other}")),
        })
    }

    /// After a read on `held`: its result, or `None` when the connection
    /// broke and the read is worth making once more on a new one (the
    /// broken one is discarded, never pooled again). A second loss is
    /// [`StoreError::ConnectionLost`].
    fn settle<T>(
        &self,
        mut held: Held,
        result: Result<T>,
        reconnected: &mut bool,
    ) -> Option<Result<T>> {
        match result {
            Err(error) if lost(&error).is_some() => {
                // Dropped unreleased: discarded.
                drop(held);
                if std::mem::replace(reconnected, true) {
                    return Some(Err(self.lost(&error)));
                }
                None
            }
            other => {
                held.release();
                Some(other)
            }
        }
    }

    fn lost(&self, error: &StoreError) -> StoreError {
        StoreError::ConnectionLost {
            location: self.location.clone(),
            reason: describe_store(error),
        }
    }
}

/// How one attempt at a transaction ended.
enum Attempt<T> {
    /// Committed, or rolled back with the connection clean again.
    Done(Result<T>),
    /// Failed, and the rollback failed too: the connection must go.
    Dirty(StoreError),
    /// The connection broke; `committing` if `COMMIT` had been sent.
    Lost { error: StoreError, committing: bool },
}

/// One attempt at a transaction: `BEGIN`, `work`, then `COMMIT`, or
/// `ROLLBACK` if anything failed.
async fn transaction<T>(client: &Client, work: impl Future<Output = Result<T>>) -> Attempt<T> {
    let mut begin = pin!(client.batch_execute("BEGIN"));
    // The first poll writes BEGIN, so it precedes work's first statement on
    // the wire; its answer is collected below.
    let begun = match begin.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(result) => Some(result),
        Poll::Pending => None,
    };
    let result = work.await;
    let begun = match begun {
        Some(result) => result,
        None => begin.await,
    };
    let failure = match (begun, result) {
        (Ok(()), Ok(value)) => {
            return match client.batch_execute("COMMIT").await {
                Ok(()) => Attempt::Done(Ok(value)),
                Err(error) => {
                    let error = StoreError::from(error);
                    if lost(&error).is_some() {
                        Attempt::Lost {
                            error,
                            committing: true,
                        }
                    } else {
                        Attempt::Done(Err(error))
                    }
                }
            };
        }
        (Err(error), _) => StoreError::from(error),
        (Ok(()), Err(error)) => error,
    };
    if lost(&failure).is_some() {
        // The server rolls back a transaction whose connection ends.
        return Attempt::Lost {
            error: failure,
            committing: false,
        };
    }
    match client.batch_execute("ROLLBACK").await {
        Ok(()) => Attempt::Done(Err(failure)),
        Err(_) => Attempt::Dirty(failure),
    }
}

/// A connection held for one write: transactions (read committed) on it
/// and the retry policy between them. A serialization failure, deadlock or
/// lane taken by a concurrent writer (graph.rs) rolls back and is worth
/// another attempt, until [`RETRY_GIVE_UP`]; a connection lost before
/// `COMMIT` was sent is replaced once and the attempt made again on the new
/// one; one lost while committing leaves the outcome unknown
/// ([`StoreError::CommitUnknown`]). A writer dropped before [`Writer::done`]
/// or a final [`Writer::again`] (a panic, or an async caller dropping the
/// future mid-transaction) closes its connection, which rolls back whatever
/// was open. A struct rather than a function taking the attempt as a
/// closure: a future calling a closure on a borrowed connection cannot be
/// shown to be `Send` by today's compiler, and async callers need it to be.
pub(crate) struct Writer {
    shared: Arc<Shared>,
    held: Held,
    started: Instant,
    pause: Duration,
    reconnected: bool,
    /// The last attempt left the connection broken or mid-transaction: it
    /// must never go back to the pool.
    unusable: AtomicBool,
}

impl Writer {
    pub(crate) fn client(&self) -> &Client {
        self.held.client()
    }

    /// One attempt: `BEGIN`, `work` (a future made on [`Writer::client`]),
    /// then `COMMIT`, or `ROLLBACK` if anything failed (the connection is
    /// then clean again). `BEGIN` is sent together with the first statement
    /// of `work`, saving a round trip.
    pub(crate) async fn attempt<T>(&self, work: impl Future<Output = Result<T>>) -> Result<T> {
        match transaction(self.client(), work).await {
            Attempt::Done(Ok(value)) => {
                self.note_commit().await;
                Ok(value)
            }
            Attempt::Done(result) => result,
            Attempt::Lost {
                error,
                committing: true,
            } => {
                self.unusable.store(true, Ordering::Relaxed);
                Err(StoreError::CommitUnknown {
                    location: self.shared.router.primary.location.clone(),
                    reason: describe_store(&error),
                })
            }
            Attempt::Dirty(error) | Attempt::Lost { error, .. } => {
                self.unusable.store(true, Ordering::Relaxed);
                Err(error)
            }
        }
    }

    /// Keep where the primary's WAL stands after a commit, for reads from
    /// a standby to wait for (router.rs). Unknown if the question fails: a
    /// read may then miss this write on the standby, never lose it.
    async fn note_commit(&self) {
        let router = &self.shared.router;
        if router.tracks_commits()
            && let Ok(lsn) = router::wal_position(self.client()).await
        {
            router.committed_at(lsn);
        }
    }

    /// After a failed attempt: `Ok` (once a pause has passed, or on a new
    /// connection) when another is worth making, else the error to report.
    pub(crate) async fn again(&mut self, error: StoreError) -> Result<()> {
        if lost(&error).is_some() {
            if self.reconnected {
                return Err(self.shared.router.primary.lost(&error));
            }
            self.reconnected = true;
            // The broken connection is discarded (never released to the
            // pool) before a new one is asked for: the new one may need its
            // slot (`pool_max=1` waited out the pool's whole timeout here,
            // whenever the broken connection had been taken before its
            // closing was noticed: a test flaky under load).
            drop(std::mem::replace(&mut self.held, Held(None)));
            self.held = Held(Some(checkout_anywhere(&self.shared, Route::Primary).await?));
            self.unusable.store(false, Ordering::Relaxed);
            return Ok(());
        }
        if self.unusable.load(Ordering::Relaxed) {
            // Dropped unreleased with the writer: discarded.
            return Err(error);
        }
        if !is_retryable(&error) {
            self.held.release();
            return Err(error);
        }
        if self.started.elapsed() >= RETRY_GIVE_UP {
            self.held.release();
            return Err(StoreError::Busy {
                seconds: self.started.elapsed().as_secs(),
            });
        }
        sleep_anywhere(self.pause + jitter(self.pause)).await?;
        self.pause = (self.pause * 2).min(Duration::from_millis(200));
        Ok(())
    }

    /// The write succeeded: the connection goes back to the pool.
    pub(crate) fn done<T>(mut self, value: T) -> T {
        self.held.release();
        value
    }
}

/// A pooled connection, from any runtime: an idle one is taken on the
/// caller's task; waiting for one, or making one, is done on the
/// PostgreSQL runtime (pool.rs), whose workers then carry a new
/// connection's I/O for as long as it lives (the caller's runtime may end
/// before it does).
async fn checkout_anywhere(shared: &Arc<Shared>, route: Route) -> Result<Client> {
    if bridge::on_own_runtime() {
        return shared.router.connection(route).checkout().await;
    }
    if let Some(client) = pool::take_idle(&shared.router.connection(route).pool).await {
        return Ok(client);
    }
    let shared = Arc::clone(shared);
    bridge::on_runtime(async move { shared.router.connection(route).checkout().await }).await
}

/// A pooled connection for a read that `route` sends to: the standby's, or
/// the primary's when the standby cannot be reached.
async fn checkout_for_read(shared: &Arc<Shared>, route: Route) -> Result<(Route, Client)> {
    match checkout_anywhere(shared, route).await {
        Err(StoreError::Unreachable { .. } | StoreError::Tls { .. }) if route == Route::Standby => {
            Ok((
                Route::Primary,
                checkout_anywhere(shared, Route::Primary).await?,
            ))
        }
        other => other.map(|client| (route, client)),
    }
}

/// Wait `pause`, on the PostgreSQL runtime's timers unless this thread runs
/// it (the caller's runtime may have none).
async fn sleep_anywhere(pause: Duration) -> Result<()> {
    if bridge::on_own_runtime() {
        tokio::time::sleep(pause).await;
        return Ok(());
    }
    bridge::on_runtime(async move {
        tokio::time::sleep(pause).await;
        Ok(())
    })
    .await
}

/// A pooled connection that is discarded, not returned to the pool, if it
/// is dropped while it may be unusable (a transaction may be open after a
/// panic in `work`, or the connection broke): closing it makes the server
/// roll back.
struct Held(Option<Client>);

impl Held {
    fn client(&self) -> &Client {
        self.0.as_ref().expect("held until released")
    }

    /// Back to the pool: no transaction is open.
    fn release(&mut self) {
        self.0.take();
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if let Some(client) = self.0.take() {
            drop(deadpool_postgres::Object::take(client));
        }
    }
}

/// The client error of `error` if it says the connection broke: closed,
/// reset, or ended by the server (shut down, terminated by an
/// administrator, idle too long).
fn lost(error: &StoreError) -> Option<&tokio_postgres::Error> {
    let StoreError::Postgres(error) = error else {
        return None;
    };
    let ended_by_server = matches!(
        error.code(),
        Some(code) if *code == SqlState::ADMIN_SHUTDOWN
            || *code == SqlState::CRASH_SHUTDOWN
            || *code == SqlState::CANNOT_CONNECT_NOW
            || *code == SqlState::IDLE_SESSION_TIMEOUT
            || *code == SqlState::IDLE_IN_TRANSACTION_SESSION_TIMEOUT
    );
    let mut io = false;
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        io |= cause.is::<std::io::Error>();
        source = cause.source();
    }
    (error.is_closed() || ended_by_server || io).then_some(error)
}

fn describe_store(error: &StoreError) -> String {
    match error {
        StoreError::Postgres(error) => describe(error),
        other => other.to_string(),
    }
}

/// An error with its chain of causes ("error connecting to server:
/// Connection refused"), since the client's own message stops at the first.
pub fn describe(error: &tokio_postgres::Error) -> String {
    if let Some(db) = error.as_db_error() {
        return db.message().to_string();
    }
    let mut text = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

fn is_retryable(error: &StoreError) -> bool {
    match error {
        StoreError::Interfered(_) => true,
        StoreError::Postgres(error) => {
            matches!(
                error.code(),
                Some(code) if *code == SqlState::T_R_SERIALIZATION_FAILURE
                    || *code == SqlState::T_R_DEADLOCK_DETECTED
            ) || graph::is_lane_conflict(error)
        }
        _ => false,
    }
}

/// Up to `pause` of extra wait, so writers that collided do not retry in
/// lockstep.
fn jitter(pause: Duration) -> Duration {
    let noise = u64::from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .subsec_nanos(),
    );
    Duration::from_nanos(noise % (pause.as_nanos() as u64).max(1))
}
