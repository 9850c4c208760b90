/*!
`skein serve`: one HTTP server with two faces over one store.

- [`web`]: a web view of the conversation graph (conversations, family
  trees with forks, reruns and continuations, node details, branch
  comparison), its assets embedded in the binary, and a workbench acting on
  it through the turn layer (reply, edit, regenerate, fork, rerun), live as
  turns land from any process;
- [`proxy`] (only with `--proxy`): OpenAI chat completions, OpenAI
  Responses and Anthropic Messages endpoints that forward to configured
  models and record every exchange into the graph, where the web view
  shows it.

[`access`] decides who may connect: bound to a loopback address nobody else
can reach it, so no token is needed; bound anywhere else a token is
required, and every request must carry it. It also keeps web pages of other
origins from writing through the browser of the person running the server,
asks the web view's writes for the server's CSRF token, and refuses every
write when the server is read-only.
[`connections`] serves each connection within limits: how many at once, how
long a request may take to arrive, how long a connection may idle.
*/

pub mod access;
pub mod connections;
pub mod proxy;
pub mod web;

pub use connections::ConnectionLimits;
pub use proxy::{ClientKeys, FromRecording, ModelTable, ProxyConfig};
pub use web::models::{ModelChoice, ModelNames, Models};

use access::Access;
use axum::Router;
use skein::Store;
use skein::core::price::PriceTable;
use std::net::SocketAddr;
use std::sync::Arc;

/// How to serve.
#[derive(Clone)]
pub struct ServeConfig {
    pub bind: SocketAddr,
    /// The bearer token requests must carry; required off loopback.
    pub token: Option<String>,
    pub store: Store,
    /// The proxy's models and key rule; `None` serves the web view only.
    pub proxy: Option<ProxyConfig>,
    /// The largest request body the proxy accepts, in bytes.
    pub body_limit: usize,
    /// Connection limits and timeouts.
    pub limits: ConnectionLimits,
    /// Refuse every write: the web view only shows, and nothing is
    /// recorded (`skein serve --read-only`).
    pub read_only: bool,
    /// The models the web view's actions run on.
    pub models: Arc<dyn Models>,
    /// The prices the web view costs runs and families at.
    pub prices: Arc<PriceTable>,
}

/// The default request body limit: 8 MiB, room for long histories.
pub const DEFAULT_BODY_LIMIT: usize = 8 * 1024 * 1024;

/// Why the server cannot start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServeError {
    #[error(
        "binding {bind} makes the server reachable from other machines: give a token with \
         --token (or SKEIN_SERVE_TOKEN), or bind 127.0.0.1"
    )]
    TokenRequired { bind: SocketAddr },
    #[error("cannot listen on {bind}: {error}")]
    Listen {
        bind: SocketAddr,
        error: std::io::Error,
    },
    #[error("the server stopped: {0}")]
    Serve(std::io::Error),
    #[error(
        "client keys keep the proxy's clients apart only if they cannot use the web view, which \
         shows and acts on every conversation: give the server a token (--token, or \
         SKEIN_SERVE_TOKEN), the operator's, and give clients only their keys"
    )]
    ClientKeysNeedToken,
    #[error("the server's token is also a client key: each needs a value of its own")]
    TokenIsAClientKey,
}

/// Shared by every handler.
pub struct AppState {
    pub store: Store,
    /// The web view's pages and event stream read here: the store's
    /// standby when it has one (`Store::reads`), else the store.
    pub reads: Store,
    pub proxy: Option<ProxyConfig>,
    /// Whether requests carry the server's token (in `Authorization`).
    pub token_required: bool,
    /// The proxy's matches of re-encoded messages to the graph.
    pub(crate) memo: Arc<proxy::graph::Memo>,
    /// The threads the proxy recorded last, which re-sent histories
    /// continue.
    pub(crate) threads: proxy::threads::RecentThreads,
    /// The store's erasure count when the proxy last looked: when it
    /// changes, the memo and the kept threads are dropped.
    pub(crate) erasures_seen: std::sync::atomic::AtomicU64,
    /// Turns at the reads that load a graph (see `web::api`).
    pub graph_reads: tokio::sync::Semaphore,
    /// The CSRF token the web view's writes carry (see [`access`]).
    pub csrf: Arc<str>,
    pub read_only: bool,
    pub models: Arc<dyn Models>,
    /// Turns and reruns the web view runs at once.
    pub turns: Arc<tokio::sync::Semaphore>,
    /// The `/api/events` poller and its streams.
    pub events: web::events::Hub,
    pub prices: Arc<PriceTable>,
    /// The replays this server's workers are on (see `web::replays`).
    pub(crate) replaying: std::sync::Mutex<std::collections::HashSet<skein::store::ReplayId>>,
    /// The embedder the web view compares with, chosen the first time one
    /// is needed (see `web::embedder`).
    pub(crate) embedder: tokio::sync::OnceCell<skein::recorded::embed::Chosen>,
}

/// How many family or comparison reads run at once.
const GRAPH_READS: usize = 4;
/// How many model turns (or reruns) the web view runs at once.
pub const WEB_TURNS: usize = 4;

/// The whole application: web view, optional proxy, access control.
pub fn router(config: &ServeConfig) -> Result<Router, ServeError> {
    let mut access = Access::for_bind(config.bind, config.token.clone(), config.read_only)?;
    if let Some(clients) = config
        .proxy
        .as_ref()
        .and_then(|proxy| proxy.clients.as_ref())
    {
        if let Some(token) = config.token.as_deref()
            && clients.client(token).is_some()
        {
            return Err(ServeError::TokenIsAClientKey);
        }
        access = access.with_keyed_proxy()?;
    }
    let state = Arc::new(AppState {
        store: config.store.clone(),
        reads: config.store.reads(),
        proxy: config.proxy.clone(),
        token_required: config
            .token
            .as_deref()
            .is_some_and(|token| !token.is_empty()),
        memo: Arc::default(),
        threads: Default::default(),
        erasures_seen: Default::default(),
        graph_reads: tokio::sync::Semaphore::new(GRAPH_READS),
        csrf: access.csrf(),
        read_only: config.read_only,
        models: config.models.clone(),
        turns: Arc::new(tokio::sync::Semaphore::new(WEB_TURNS)),
        events: web::events::Hub::default(),
        prices: config.prices.clone(),
        replaying: Default::default(),
        embedder: Default::default(),
    });
    let mut app = web::routes();
    if config.proxy.is_some() {
        app = app.merge(proxy::routes(config.body_limit));
    }
    Ok(access.guard(app.with_state(state)))
}

/// Listen on the configured address and serve until `shutdown` resolves.
/// `ready` receives the address actually bound (port 0 picks a free one).
pub async fn serve(
    config: ServeConfig,
    ready: impl FnOnce(SocketAddr),
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    let app = router(&config)?;
    let listener = tokio::net::TcpListener::bind(config.bind)
        .await
        .map_err(|source| ServeError::Listen {
            bind: config.bind,
            error: source,
        })?;
    let bound = listener.local_addr().map_err(ServeError::Serve)?;
    ready(bound);
    connections::serve(listener, app, config.limits, shutdown).await;
    Ok(())
}
