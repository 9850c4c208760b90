/*!
The PostgreSQL backend's handle: opening a URL, the connection pool, and
read and write transactions with retry on serialization failures and
deadlocks. Its operations are split like SQLite's (graph.rs,
conversations.rs, runs.rs, transfer.rs, verify.rs, resolve.rs) and share
their non-SQL halves with it.

Connections are plain TCP (`NoTls`): point it at a server on the same host or
a trusted network, or tunnel it. The blocking API's calls block; see
bridge.rs for how that is done without stalling an async runtime, and for
the async forms of loading a thread and committing a turn, which do not.
*/

pub(crate) mod bridge;
mod conversations;
mod embeddings;
mod family;
mod graph;
mod pipeline;
mod reruns;
mod resolve;
mod runs;
pub(crate) mod schema;
pub mod scratch;
mod transfer;
mod usage;
mod verify;

use crate::error::{Result, StoreError};
use crate::location::redact;
use crate::open::OpenMode;
use deadpool_postgres::{Client, Manager, ManagerConfig, Pool, PoolError, RecyclingMethod};
use skein_core::StoreKey;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};
use tokio_postgres::NoTls;
use tokio_postgres::error::SqlState;

/// Connections each open store keeps at most. Writers beyond this wait for
/// a free connection (up to [`WAIT_TIMEOUT`]).
pub const POOL_SIZE: usize = 4;
/// How long opening one connection may take before the server counts as
/// unreachable.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
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
}

struct Shared {
    location: String,
    location_path: PathBuf,
    key: StoreKey,
    pool: Pool,
    /// Opened with [`OpenMode::ReadOnly`]: every write is refused.
    read_only: bool,
}

impl PgStore {
    /// Connect to the database `url` names, migrating it to the current
    /// schema. The database must exist; its tables are created on first use
    /// when `mode` is [`OpenMode::Create`], and must be there otherwise.
    pub fn open(url: &str, mode: OpenMode) -> Result<PgStore> {
        let location = redact(url);
        let mut config: tokio_postgres::Config =
            url.parse()
                .map_err(|error: tokio_postgres::Error| StoreError::BadUrl {
                    location: location.clone(),
                    reason: error.to_string(),
                })?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECT_TIMEOUT);
        }
        if config.get_application_name().is_none() {
            config.application_name("skein");
        }
        // Every statement the store runs is meant to be driven by an index
        // (cost proportional to the rows it touches). On a young database,
        // before autovacuum has analyzed the tables, the planner may cache
        // plans made when the tables were empty and keep scanning whole
        // tables after they have grown; ruling sequential scans out keeps
        // the store's cost independent of the database's size. For the same
        // reason JIT compilation is off: those estimates (and with them the
        // cost that triggers it) can be far too high, and compiling a
        // statement that reads a few dozen rows costs tens of milliseconds.
        const SESSION: &str = "-c enable_seqscan=off -c jit=off";
        let options = match config.get_options() {
            Some(options) => format!("{options} {SESSION}"),
            None => SESSION.to_string(),
        };
        config.options(&options);
        let manager = Manager::from_config(
            config,
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(POOL_SIZE)
            .runtime(deadpool_postgres::Runtime::Tokio1)
            .wait_timeout(Some(WAIT_TIMEOUT))
            .create_timeout(Some(CONNECT_TIMEOUT))
            .build()
            .map_err(|error| StoreError::BadUrl {
                location: location.clone(),
                reason: error.to_string(),
            })?;
        let key =
            bridge::block_on(|| async {
                let mut client = checkout(&pool, &location).await?;
                let installed = schema::installed_version(&client).await?;
                match (installed, mode) {
                    (None, OpenMode::Create) => schema::migrate(&mut client).await?,
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
                    (Some(found), OpenMode::ReadOnly) => schema::migrate(&mut client)
                        .await
                        .map_err(|error| StoreError::OutdatedReadOnly {
                            location: location.clone(),
                            found,
                            supported: schema::SCHEMA_VERSION,
                            reason: error.to_string(),
                        })?,
                    (Some(_), _) => schema::migrate(&mut client).await?,
                }
                let key: String = client
                    .query_one("SELECT value FROM meta WHERE key = 'store_key'", &[])
                    .await?
                    .get(0);
                key.parse::<StoreKey>()
                    .map_err(|_| StoreError::Task(format!("store key `{key}` is not a number")))
            })?;
        Ok(PgStore {
            shared: Arc::new(Shared {
                location_path: PathBuf::from(&location),
                location,
                key,
                pool,
                read_only: mode == OpenMode::ReadOnly,
            }),
        })
    }

    pub fn is_read_only(&self) -> bool {
        self.shared.read_only
    }

    pub fn location(&self) -> String {
        self.shared.location.clone()
    }

    pub fn path(&self) -> &Path {
        &self.shared.location_path
    }

    pub fn key(&self) -> StoreKey {
        self.shared.key
    }

    /// Run `work` on a pooled connection, outside any explicit transaction.
    pub(crate) fn read<T: Send>(
        &self,
        work: impl AsyncFnOnce(&Client) -> Result<T> + Send,
    ) -> Result<T> {
        bridge::block_on(|| async move {
            let client = checkout(&self.shared.pool, &self.shared.location).await?;
            work(&client).await
        })
    }

    /// Run `work`, which owns what it needs, on a pooled connection as a
    /// task of the PostgreSQL runtime ([`bridge::on_runtime`]), for queries
    /// returning many rows; await it from any runtime.
    pub(crate) async fn read_spawned<T, F>(
        &self,
        work: impl FnOnce(Client) -> F + Send + 'static,
    ) -> Result<T>
    where
        T: Send + 'static,
        F: Future<Output = Result<T>> + Send + 'static,
    {
        let shared = Arc::clone(&self.shared);
        bridge::on_runtime(async move {
            let client = checkout(&shared.pool, &shared.location).await?;
            work(client).await
        })
        .await
    }

    /// Run `work` in a transaction (read committed) and commit it, retrying
    /// as [`Writer`] says, so `work` must be safe to repeat.
    pub(crate) fn write<T: Send>(
        &self,
        mut work: impl AsyncFnMut(&Client) -> Result<T> + Send,
    ) -> Result<T> {
        bridge::block_on(|| async move {
            let mut writer = self.writer().await?;
            loop {
                match writer.attempt(work(writer.client())).await {
                    Ok(value) => return Ok(writer.done(value)),
                    Err(error) => writer.again(error).await?,
                }
            }
        })
    }

    /// A connection held for a write, from any runtime (refused when the
    /// store is read-only). The caller runs attempts on it until one
    /// succeeds or [`Writer::again`] gives up.
    pub(crate) async fn writer(&self) -> Result<Writer> {
        if self.shared.read_only {
            return Err(StoreError::ReadOnly {
                location: self.shared.location.clone(),
            });
        }
        Ok(Writer {
            held: Held(Some(self.checkout_anywhere().await?)),
            started: Instant::now(),
            pause: Duration::from_millis(2),
        })
    }

    /// A pooled connection, from any runtime: a connection made for it is
    /// made on the PostgreSQL runtime, whose workers then carry its I/O for
    /// as long as it lives (the caller's runtime may end before it does).
    async fn checkout_anywhere(&self) -> Result<Client> {
        if bridge::on_own_runtime() {
            return checkout(&self.shared.pool, &self.shared.location).await;
        }
        let shared = Arc::clone(&self.shared);
        bridge::on_runtime(async move { checkout(&shared.pool, &shared.location).await }).await
    }

    pub fn debug_execute(&self, sql: &str) -> Result<u64> {
        self.read(async |client| Ok(client.execute(sql, &[]).await?))
    }

    pub fn debug_query_i64(&self, sql: &str) -> Result<i64> {
        self.read(async |client| Ok(client.query_one(sql, &[]).await?.try_get(0)?))
    }
}

/// One attempt at a transaction: `BEGIN`, `work`, then `COMMIT`, or
/// `ROLLBACK` if anything failed (the connection is then clean again).
async fn transaction<T>(client: &Client, work: impl Future<Output = Result<T>>) -> Result<T> {
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
    match (begun, result) {
        (Ok(()), Ok(value)) => {
            client.batch_execute("COMMIT").await?;
            Ok(value)
        }
        (begun, result) => {
            client.batch_execute("ROLLBACK").await?;
            Err(match begun {
                Err(error) => error.into(),
                Ok(()) => result.err().expect("one of them failed"),
            })
        }
    }
}

/// A connection held for one write: transactions (read committed) on it
/// and the retry policy between them. A serialization failure, deadlock or
/// lane taken by a concurrent writer (graph.rs) rolls back and is worth
/// another attempt, until [`RETRY_GIVE_UP`]. A writer dropped before
/// [`Writer::done`] or a final [`Writer::again`] (a panic, or an async
/// caller dropping the future mid-transaction) closes its connection, which
/// rolls back whatever was open. A struct rather than a function taking the
/// attempt as a closure: a future calling a closure on a borrowed connection
/// cannot be shown to be `Send` by today's compiler, and async callers need
/// it to be.
pub(crate) struct Writer {
    held: Held,
    started: Instant,
    pause: Duration,
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
        transaction(self.client(), work).await
    }

    /// After a failed attempt: `Ok` (once a pause has passed) when another
    /// is worth making, else the error to report (the connection goes back
    /// to the pool).
    pub(crate) async fn again(&mut self, error: StoreError) -> Result<()> {
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

/// A pooled connection that is discarded, not returned to the pool, if it
/// is dropped while a transaction may be open (a panic in `work`): closing
/// it makes the server roll back.
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

/// A pooled connection, with connection failures told apart from everything
/// else: they mean the server is down or the URL is wrong.
async fn checkout(pool: &Pool, location: &str) -> Result<Client> {
    pool.get().await.map_err(|error| match error {
        // Refused, timed out, bad password, no such database: all say the
        // server cannot be used as the URL names it.
        PoolError::Backend(error) => StoreError::Unreachable {
            location: location.to_string(),
            reason: describe(&error),
        },
        PoolError::Timeout(deadpool_postgres::TimeoutType::Wait) => StoreError::Busy {
            seconds: WAIT_TIMEOUT.as_secs(),
        },
        PoolError::Timeout(_) => StoreError::Unreachable {
            location: location.to_string(),
            reason: format!("no answer within {} s", CONNECT_TIMEOUT.as_secs()),
        },
        other => StoreError::Task(format!("PostgreSQL connection pool: {other}")),
    })
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
