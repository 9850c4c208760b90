/*!
[`FaultServer`]: a raw TCP server for the HTTP failures a mock server
cannot produce, and [`refused`], an address nobody listens on.

Every connection the server accepts reads one request (headers, then
`content-length` bytes of body) and then meets the same [`Fault`]: no
answer at all, or a chunked `200 text/event-stream` head and some chunks,
after which the server either holds the connection open (a stall),
closes it without ending the body (a cut), or holds it until the test
releases it and then ends the body (a slow reply, [`Fault::Hold`]). The
server counts the connections it accepted (a client's retries show
there), says when one is held ([`FaultServer::held`]: a stall's or a
hold's chunks were sent) and when a client closed a stalled or silent
connection ([`FaultServer::closed`], however long that took), and reports
what each one saw ([`Seen`]).
*/

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};

/// How long a held connection waits for the client to close before its
/// [`Seen`] is reported without a close (the connection stays open).
pub const PATIENCE: Duration = Duration::from_secs(5);

/// What the server does after reading a request.
#[derive(Clone, Debug)]
pub enum Fault {
    /// Never answer; hold the connection open.
    Silence,
    /// Send the response head and these chunks, then hold the connection
    /// open without another byte.
    Stall(Vec<String>),
    /// Send the response head and these chunks, then close the connection
    /// without ending the chunked body (a reset mid-stream).
    Cut(Vec<String>),
    /// Send the response head (with `connection: close`) and the first
    /// chunks, wait until [`FaultServer::release`], then send the second
    /// chunks, end the body and close: a reply held open as long as the
    /// test needs, then finished.
    Hold(Vec<String>, Vec<String>),
}

/// What one connection saw.
#[derive(Clone, Debug)]
pub struct Seen {
    /// The request arrived in full.
    pub request_read: bool,
    /// For a held connection: the client closed its side within
    /// [`PATIENCE`], and how long after the fault was delivered. `None`
    /// for a cut or a released hold (the server closed first) or a client
    /// that kept waiting.
    pub closed_after: Option<Duration>,
}

/// A raw TCP server on a free loopback port, running one [`Fault`] on every
/// connection until the test's runtime ends.
pub struct FaultServer {
    address: SocketAddr,
    accepted: Arc<AtomicUsize>,
    seen: mpsc::UnboundedReceiver<Seen>,
    held: mpsc::UnboundedReceiver<()>,
    closed: mpsc::UnboundedReceiver<()>,
    release: watch::Sender<bool>,
}

impl FaultServer {
    /// Listen and serve `fault`; call within a Tokio runtime.
    pub async fn start(fault: Fault) -> FaultServer {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a free loopback port");
        let address = listener.local_addr().expect("a bound address");
        let accepted = Arc::new(AtomicUsize::new(0));
        let (report, seen) = mpsc::unbounded_channel();
        let (holding, held) = mpsc::unbounded_channel();
        let (closing, closed) = mpsc::unbounded_channel();
        let (release, released) = watch::channel(false);
        let counter = accepted.clone();
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                counter.fetch_add(1, Ordering::SeqCst);
                let hold = Hold {
                    holding: holding.clone(),
                    released: released.clone(),
                    closing: closing.clone(),
                };
                tokio::spawn(serve(socket, fault.clone(), report.clone(), hold));
            }
        });
        FaultServer {
            address,
            accepted,
            seen,
            held,
            closed,
            release,
        }
    }

    /// `127.0.0.1:PORT`.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.address)
    }

    /// How many connections the server has accepted.
    pub fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }

    /// What the next connection to be done with saw (in the order they
    /// finish): after a cut at once, after a stall or silence when the
    /// client closes or [`PATIENCE`] runs out.
    pub async fn seen(&mut self) -> Seen {
        self.seen.recv().await.expect("the server runs")
    }

    /// Wait until the next connection is held ([`Fault::Hold`], or
    /// [`Fault::Stall`]): its request was read and its first chunks sent.
    pub async fn held(&mut self) {
        self.held.recv().await.expect("the server runs");
    }

    /// Wait until the client of the next stalled or silent connection to
    /// be done with closes its side, however long that takes.
    pub async fn closed(&mut self) {
        self.closed.recv().await.expect("the server runs");
    }

    /// Let every held connection finish, and every later one go through
    /// without holding.
    pub fn release(&self) {
        self.release.send_replace(true);
    }
}

/// What a connection reports to (held, closed by its client) and what a
/// [`Fault::Hold`] waits on.
struct Hold {
    holding: mpsc::UnboundedSender<()>,
    released: watch::Receiver<bool>,
    closing: mpsc::UnboundedSender<()>,
}

/// The chunked encoding of `chunks`.
fn chunked(chunks: &[String]) -> String {
    chunks
        .iter()
        .map(|chunk| format!("{:x}\r\n{chunk}\r\n", chunk.len()))
        .collect()
}

async fn serve(
    mut socket: TcpStream,
    fault: Fault,
    report: mpsc::UnboundedSender<Seen>,
    mut hold: Hold,
) {
    let request_read = read_request(&mut socket).await;
    if let Fault::Stall(chunks) | Fault::Cut(chunks) | Fault::Hold(chunks, _) = &fault {
        let close = match fault {
            Fault::Hold(..) => "connection: close\r\n",
            _ => "",
        };
        let out = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n{close}transfer-encoding: chunked\r\n\r\n{}",
            chunked(chunks)
        );
        let _ = socket.write_all(out.as_bytes()).await;
        let _ = socket.flush().await;
    }
    if let Fault::Stall(_) = &fault {
        let _ = hold.holding.send(());
    }
    if let Fault::Hold(_, rest) = &fault {
        let _ = hold.holding.send(());
        // The sender lives in the server: it outlives every connection.
        let _ = hold.released.wait_for(|released| *released).await;
        let out = format!("{}0\r\n\r\n", chunked(rest));
        let _ = socket.write_all(out.as_bytes()).await;
        let _ = socket.shutdown().await;
        let _ = report.send(Seen {
            request_read,
            closed_after: None,
        });
        return;
    }
    if let Fault::Cut(_) = fault {
        drop(socket);
        let _ = report.send(Seen {
            request_read,
            closed_after: None,
        });
        return;
    }
    let start = Instant::now();
    let closed = tokio::time::timeout(PATIENCE, until_closed(&mut socket))
        .await
        .is_ok();
    let _ = report.send(Seen {
        request_read,
        closed_after: closed.then(|| start.elapsed()),
    });
    if !closed {
        // Out of patience, but a stall stays a stall.
        until_closed(&mut socket).await;
    }
    let _ = hold.closing.send(());
}

/// Read (and drop) whatever the client sends until it closes its side.
async fn until_closed(socket: &mut TcpStream) {
    let mut buffer = [0u8; 1024];
    while let Ok(n) = socket.read(&mut buffer).await {
        if n == 0 {
            break;
        }
    }
}

/// Read one request: headers, then `content-length` bytes of body. False
/// when the client closed first.
async fn read_request(socket: &mut TcpStream) -> bool {
    let mut data = Vec::new();
    let mut buffer = [0u8; 4096];
    loop {
        if let Some(end) = data.windows(4).position(|window| window == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&data[..end]).to_ascii_lowercase();
            let length: usize = head
                .lines()
                .find_map(|line| line.strip_prefix("content-length:"))
                .and_then(|value| value.trim().parse().ok())
                .unwrap_or(0);
            if data.len() >= end + 4 + length {
                return true;
            }
        }
        match socket.read(&mut buffer).await {
            Ok(0) | Err(_) => return false,
            Ok(n) => data.extend_from_slice(&buffer[..n]),
        }
    }
}

/// An address nobody listens on (a port bound, then let go).
pub fn refused() -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free loopback port");
    let address = listener.local_addr().expect("a bound address");
    drop(listener);
    address
}
