/*!
Accepting and serving connections, with limits a hostile or broken client
cannot outlast:

- at most [`ConnectionLimits::max_connections`] connections are served at
  once; the next ones wait in the kernel's accept queue until one ends;
- a request must arrive within [`ConnectionLimits::read_timeout`]: its head
  (hyper's header-read timeout, which runs from the moment the server
  waits for a request, so it also closes a connection that opens and sends
  nothing), and then its body (`ReadDeadline`). A client that trickles
  either is dropped;
- a connection is closed when no byte has moved for
  [`ConnectionLimits::idle_timeout`] while no request is being handled
  (an idle keep-alive connection, a half-sent request), or while the
  server waits to write (a client that stopped reading its response). A
  request whose handler is still working (a slow model call) is never cut.

Shutdown is graceful: the listener closes, idle connections close, and the
server waits for requests in flight to finish.
*/

use axum::Router;
use axum::body::{Body, Bytes, HttpBody};
use axum::extract::Request;
use http_body::{Frame, SizeHint};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll, ready};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};
use tokio::time::{Instant, Sleep};
use tower_service::Service;

/// How long and how many.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// The longest a client may take to send a request's head (counted
    /// from when the server starts waiting for it), and then its body.
    pub read_timeout: Duration,
    /// How long a connection may sit with no byte moving while no request
    /// is being handled, or while a response waits for the client to read.
    pub idle_timeout: Duration,
    /// Connections served at once; more wait to be accepted.
    pub max_connections: usize,
}

impl Default for ConnectionLimits {
    fn default() -> ConnectionLimits {
        ConnectionLimits {
            read_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(15),
            max_connections: 256,
        }
    }
}

/// Serve `app` on `listener` until `shutdown` resolves, then finish the
/// requests in flight.
pub(crate) async fn serve(
    listener: TcpListener,
    app: Router,
    limits: ConnectionLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    // Semaphores hold at most u32::MAX >> 3 permits.
    let slots = limits.max_connections.clamp(1, Semaphore::MAX_PERMITS);
    let permits = Arc::new(Semaphore::new(slots));
    let (stop, stopping) = watch::channel(false);
    tokio::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            permit = permits.clone().acquire_owned() => permit.expect("the semaphore is never closed"),
            () = &mut shutdown => break,
        };
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(error) => {
                    accept_failed(error).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        // Replies stream token by token: send each write at once.
        let _ = stream.set_nodelay(true);
        let app = app.clone();
        let stopping = stopping.clone();
        tokio::spawn(async move {
            serve_connection(stream, app, limits, stopping).await;
            drop(permit);
        });
    }
    drop(listener);
    let _ = stop.send(true);
    // Every connection holds a permit until it ends.
    let _ = permits.acquire_many(slots as u32).await;
}

/// Errors of one incoming connection are that connection's; running out of
/// file descriptors passes, so wait a moment instead of spinning.
async fn accept_failed(error: io::Error) {
    use io::ErrorKind::*;
    if matches!(
        error.kind(),
        ConnectionRefused | ConnectionAborted | ConnectionReset | Interrupted
    ) {
        return;
    }
    tracing::error!(%error, "cannot accept a connection");
    tokio::time::sleep(Duration::from_millis(500)).await;
}

/// Serve one connection (any byte stream) until it ends, idles out, or the
/// server stops.
pub(crate) async fn serve_connection<IO>(
    io: IO,
    app: Router,
    limits: ConnectionLimits,
    mut stopping: watch::Receiver<bool>,
) where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let activity = Arc::new(Activity::new());
    let io = TokioIo::new(Watched {
        io,
        activity: activity.clone(),
    });
    let service = PerConnection {
        app,
        activity: activity.clone(),
        read_timeout: limits.read_timeout,
    };
    let connection = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.read_timeout)
        .serve_connection(io, service);
    tokio::pin!(connection);
    let mut stopped = *stopping.borrow();
    if stopped {
        connection.as_mut().graceful_shutdown();
    }
    loop {
        tokio::select! {
            result = connection.as_mut() => {
                if let Err(error) = result {
                    tracing::debug!(%error, "connection ended with an error");
                }
                return;
            }
            () = activity.idle(limits.idle_timeout) => {
                tracing::debug!("closing an idle connection");
                return;
            }
            changed = stopping.changed(), if !stopped => {
                stopped = true;
                if changed.is_err() || *stopping.borrow() {
                    connection.as_mut().graceful_shutdown();
                }
            }
        }
    }
}

/// What a connection is doing, shared by its byte stream, its requests
/// and its watchdog.
#[derive(Debug)]
struct Activity {
    start: Instant,
    /// When a byte last moved, in milliseconds after `start`.
    last_progress_ms: AtomicU64,
    /// Requests whose response has not been fully sent.
    in_flight: AtomicUsize,
    /// A write is waiting for the client to read.
    write_blocked: AtomicBool,
}

impl Activity {
    fn new() -> Activity {
        Activity {
            start: Instant::now(),
            last_progress_ms: AtomicU64::new(0),
            in_flight: AtomicUsize::new(0),
            write_blocked: AtomicBool::new(false),
        }
    }

    fn progress(&self) {
        let now = self.start.elapsed().as_millis() as u64;
        self.last_progress_ms.store(now, Ordering::Relaxed);
    }

    fn quiet_for(&self) -> Duration {
        let last = Duration::from_millis(self.last_progress_ms.load(Ordering::Relaxed));
        self.start.elapsed().saturating_sub(last)
    }

    /// Resolves once the connection has been idle for `limit`: no byte
    /// moved for that long, and either no request is being handled or a
    /// write is waiting for the client.
    async fn idle(&self, limit: Duration) {
        loop {
            let quiet = self.quiet_for();
            if quiet >= limit {
                let waiting_on_client = self.in_flight.load(Ordering::Acquire) == 0
                    || self.write_blocked.load(Ordering::Acquire);
                if waiting_on_client {
                    return;
                }
                // A handler is working: look again later.
                tokio::time::sleep(limit).await;
            } else {
                tokio::time::sleep(limit - quiet).await;
            }
        }
    }

    fn begin_request(self: &Arc<Activity>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        InFlight(self.clone())
    }
}

/// One request being handled; ends when its response body is dropped
/// (sent, or abandoned).
#[derive(Debug)]
struct InFlight(Arc<Activity>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.progress();
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A byte stream that reports every byte it moves to its [`Activity`].
struct Watched<IO> {
    io: IO,
    activity: Arc<Activity>,
}

impl<IO: AsyncRead + Unpin> AsyncRead for Watched<IO> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let result = ready!(Pin::new(&mut self.io).poll_read(cx, buf));
        if buf.filled().len() > before {
            self.activity.progress();
        }
        Poll::Ready(result)
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Watched<IO> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.io).poll_write(cx, buf);
        self.note_write(&polled);
        polled
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        self.note_write(&polled);
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

impl<IO> Watched<IO> {
    fn note_write(&self, polled: &Poll<io::Result<usize>>) {
        match polled {
            Poll::Pending => self.activity.write_blocked.store(true, Ordering::Release),
            Poll::Ready(Ok(written)) => {
                self.activity.write_blocked.store(false, Ordering::Release);
                if *written > 0 {
                    self.activity.progress();
                }
            }
            Poll::Ready(Err(_)) => self.activity.write_blocked.store(false, Ordering::Release),
        }
    }
}

/// The application as one connection sees it: each request's body is read
/// against the read deadline, and each response counts as in flight until
/// its body is done.
#[derive(Clone)]
struct PerConnection {
    app: Router,
    activity: Arc<Activity>,
    read_timeout: Duration,
}

impl hyper::service::Service<hyper::Request<Incoming>> for PerConnection {
    type Response = axum::response::Response;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn call(&self, request: hyper::Request<Incoming>) -> Self::Future {
        let in_flight = self.activity.begin_request();
        let request: Request = request.map(|body| {
            Body::new(ReadDeadline {
                body,
                deadline: Instant::now() + self.read_timeout,
                limit: self.read_timeout,
                sleep: None,
            })
        });
        let mut app = self.app.clone();
        Box::pin(async move {
            let response = app.call(request).await?;
            Ok(response.map(|body| {
                Body::new(Tracked {
                    body,
                    _in_flight: in_flight,
                })
            }))
        })
    }
}

/// Why a request body stopped.
#[derive(Debug, thiserror::Error)]
#[error(
    "the request body did not arrive within {} s (the server's read timeout)",
    .0.as_secs()
)]
pub struct BodyTimedOut(Duration);

/// A request body that must arrive whole by a deadline.
struct ReadDeadline {
    body: Incoming,
    deadline: Instant,
    limit: Duration,
    /// Armed the first time the body has nothing to give.
    sleep: Option<Pin<Box<Sleep>>>,
}

impl HttpBody for ReadDeadline {
    type Data = Bytes;
    type Error = axum::BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        if let Poll::Ready(frame) = Pin::new(&mut self.body).poll_frame(cx) {
            return Poll::Ready(frame.map(|frame| frame.map_err(Into::into)));
        }
        let deadline = self.deadline;
        let sleep = self
            .sleep
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        ready!(sleep.as_mut().poll(cx));
        Poll::Ready(Some(Err(BodyTimedOut(self.limit).into())))
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// A response body that keeps its request counted as in flight.
struct Tracked {
    body: Body,
    _in_flight: InFlight,
}

impl HttpBody for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::routing::get;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn limits() -> ConnectionLimits {
        ConnectionLimits {
            read_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(5),
            max_connections: 4,
        }
    }

    /// An app with a large answer, one that takes a minute, and one that
    /// reads its body.
    fn app() -> Router {
        Router::new()
            .route("/big", get(|| async { "x".repeat(1 << 20) }))
            .route(
                "/slow",
                get(|| async {
                    tokio::time::sleep(Duration::from_secs(60)).await;
                    "done"
                }),
            )
            .route(
                "/echo",
                axum::routing::post(|body: Bytes| async move { body }),
            )
    }

    fn start(io: tokio::io::DuplexStream) -> (tokio::task::JoinHandle<()>, watch::Sender<bool>) {
        let (stop, stopping) = watch::channel(false);
        let served = tokio::spawn(serve_connection(io, app(), limits(), stopping));
        (served, stop)
    }

    /// Read until the server closes; everything it sent.
    async fn read_to_close(client: &mut tokio::io::DuplexStream) -> String {
        let mut all = Vec::new();
        let _ = client.read_to_end(&mut all).await;
        String::from_utf8_lossy(&all).into_owned()
    }

    #[tokio::test(start_paused = true)]
    async fn a_client_that_stops_reading_its_response_is_dropped() {
        // A pipe far smaller than the response: the server's writes block.
        let (mut client, server) = tokio::io::duplex(4096);
        let (served, _stop) = start(server);
        client
            .write_all(b"GET /big HTTP/1.1\r\nHost: localhost\r\n\r\n")
            .await
            .unwrap();
        // Never read; with time paused, the idle limit passes at once.
        tokio::time::timeout(Duration::from_secs(3600), served)
            .await
            .expect("the stalled connection was dropped")
            .unwrap();
        let received = read_to_close(&mut client).await;
        assert!(received.starts_with("HTTP/1.1 200"), "{received:.40}");
        assert!(received.len() < 1 << 20, "the response was cut off");
    }

    #[tokio::test(start_paused = true)]
    async fn a_handler_at_work_is_never_idle_and_a_quiet_keep_alive_is() {
        let (mut client, server) = tokio::io::duplex(1 << 16);
        let (served, _stop) = start(server);
        client
            .write_all(b"GET /slow HTTP/1.1\r\nHost: localhost\r\n\r\n")
            .await
            .unwrap();
        let mut head = vec![0; 256];
        let read = client.read(&mut head).await.unwrap();
        let head = String::from_utf8_lossy(&head[..read]).into_owned();
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        assert!(head.ends_with("done"), "{head}");
        // The minute of work was far past the idle limit; now the kept-alive
        // connection idles out, before the read timeout would close it.
        let answered = Instant::now();
        tokio::time::timeout(Duration::from_secs(3600), served)
            .await
            .expect("the idle keep-alive connection was closed")
            .unwrap();
        let idled = answered.elapsed();
        assert!(
            idled >= limits().idle_timeout && idled < limits().read_timeout,
            "closed after {idled:?} of (paused) time"
        );
        assert_eq!(read_to_close(&mut client).await, "");
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_that_trickles_past_the_read_timeout_is_refused() {
        let (mut client, server) = tokio::io::duplex(1 << 16);
        let (served, _stop) = start(server);
        client
            .write_all(b"POST /echo HTTP/1.1\r\nHost: localhost\r\nContent-Length: 1000\r\n\r\nx")
            .await
            .unwrap();
        let trickle = async {
            loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
                if client.write_all(b"x").await.is_err() {
                    break;
                }
            }
        };
        tokio::time::timeout(Duration::from_secs(3600), async {
            tokio::select! {
                () = trickle => {}
                _ = served => {}
            }
        })
        .await
        .expect("the trickling body was cut off");
        let received = read_to_close(&mut client).await;
        assert!(!received.starts_with("HTTP/1.1 200"), "{received}");
    }

    #[tokio::test(start_paused = true)]
    async fn stopping_lets_the_request_in_flight_finish() {
        let (mut client, server) = tokio::io::duplex(1 << 16);
        let (served, stop) = start(server);
        client
            .write_all(b"GET /slow HTTP/1.1\r\nHost: localhost\r\n\r\n")
            .await
            .unwrap();
        // With time paused this returns once the server is waiting on the
        // handler's minute.
        tokio::time::sleep(Duration::from_secs(1)).await;
        stop.send(true).unwrap();
        let received = read_to_close(&mut client).await;
        assert!(received.starts_with("HTTP/1.1 200"), "{received}");
        assert!(received.ends_with("done"), "{received}");
        served.await.unwrap();
    }
}
