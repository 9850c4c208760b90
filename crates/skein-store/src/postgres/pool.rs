/*!
The connection pool, and where its connections are made and taken.

A connection's I/O runs as a task of the runtime that made it, so every
connection is made on the store's own runtime (bridge.rs), whose workers
outlive any caller's: a caller's runtime may be short-lived (the Python
bindings make one per call) and its tasks end with it.

Taking a connection is split in two:

- [`take_idle`], from any task on any runtime (or none): an idle pooled
  connection, taken on the caller's task with no timer and no hop to the
  store's runtime, or `None` when none is idle. It asks the pool for a
  connection without waiting for a free slot, and the pool's connector
  refuses to connect while it does, so an empty pool is reported instead of
  a connection being made on the caller's runtime.
- the pool's own `get`, on the store's runtime only: waits for a free slot
  (up to the pool's wait timeout) and connects when none is idle (up to the
  connect timeout), the new connection's I/O task spawned there.
*/

use super::hosts::Hosts;
use deadpool_postgres::{
    ConfigConnectImpl, Connect, Manager, ManagerConfig, Pool, RecyclingMethod, Timeouts,
};
use std::cell::Cell;
use std::future::{Future, poll_fn};
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::task::Poll;
use tokio_postgres_rustls::MakeRustlsConnect;

thread_local! {
    /// Set while [`take_idle`] polls the pool on this thread: connecting is
    /// refused.
    static IDLE_ONLY: Cell<bool> = const { Cell::new(false) };
    /// Set by the connector when it refused to connect under `IDLE_ONLY`.
    static REFUSED: Cell<bool> = const { Cell::new(false) };
}

/// The pool's manager: connections checked cheaply on reuse (whether they
/// are closed; a broken one is found by the call using it and replaced,
/// mod.rs), made by [`OnStoreRuntime`] on the first of `hosts` usable as
/// the URL asks (hosts.rs).
pub(crate) fn manager(
    config: tokio_postgres::Config,
    hosts: Arc<Hosts>,
    tls: MakeRustlsConnect,
) -> Manager {
    Manager::from_connect(
        config,
        OnStoreRuntime {
            hosts,
            connector: ConfigConnectImpl { tls },
        },
        ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        },
    )
}

/// Connects (to the URL's hosts in turn, with skein's TLS) and spawns the
/// connection's I/O on the current runtime, which is the store's: the
/// pool's `get` runs nowhere else. Inside [`take_idle`] it refuses.
struct OnStoreRuntime {
    hosts: Arc<Hosts>,
    connector: ConfigConnectImpl<MakeRustlsConnect>,
}

type Connecting<'a> = Pin<
    Box<
        dyn Future<
                Output = Result<
                    (tokio_postgres::Client, tokio::task::JoinHandle<()>),
                    tokio_postgres::Error,
                >,
            > + Send
            + 'a,
    >,
>;

impl Connect for OnStoreRuntime {
    fn connect(&self, _all_hosts: &tokio_postgres::Config) -> Connecting<'_> {
        if IDLE_ONLY.get() {
            REFUSED.set(true);
            // Never polled again: take_idle drops the pool's future.
            return Box::pin(std::future::pending());
        }
        debug_assert!(
            super::bridge::on_own_runtime(),
            "PostgreSQL connections are made on the store's runtime"
        );
        Box::pin(self.hosts.connect(&self.connector))
    }
}

/// An idle pooled connection, taken on the caller's task, or `None` when
/// every connection is in use or none has been made yet (the caller then
/// asks the pool on the store's runtime). Needs no runtime: no timer is
/// armed and nothing is spawned.
pub(crate) async fn take_idle(pool: &Pool) -> Option<deadpool_postgres::Client> {
    let no_waiting = Timeouts {
        wait: Some(std::time::Duration::ZERO),
        create: None,
        recycle: None,
    };
    let mut get = pin!(pool.timeout_get(&no_waiting));
    poll_fn(|context| {
        let outer = IDLE_ONLY.replace(true);
        REFUSED.set(false);
        let poll = get.as_mut().poll(context);
        IDLE_ONLY.set(outer);
        match poll {
            Poll::Ready(Ok(client)) => Poll::Ready(Some(client)),
            // No free slot; any other failure is met again, and reported,
            // by the pool's `get` on the store's runtime.
            Poll::Ready(Err(_)) => Poll::Ready(None),
            // Dropping the pool's future before its connection was made
            // gives its slot back.
            Poll::Pending if REFUSED.replace(false) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    })
    .await
}
