/*!
Shared helpers: fixtures, provider configurations with small timeouts, SSE
responses for wiremock, stream collection, and a raw TCP server for what
wiremock cannot do (a body that stalls or is cut mid-way, a request that
never gets an answer).
*/

use futures_util::StreamExt;
use skein_core::{
    BoxStream, Message, ModelRequest, ProviderError, ResponseAssembler, StreamEvent, Thread,
};
use skein_providers::http::{
    Anthropic, Credential, HttpConfig, OpenAiCompatible, RetryPolicy, Timeouts,
};
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use wiremock::ResponseTemplate;

/// The key every test provider sends.
pub const KEY: &str = "sk-test-SECRET-123";

pub fn fixture(path: &str) -> String {
    let full = format!("{}/tests/data/{path}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&full).unwrap_or_else(|error| panic!("{full}: {error}"))
}

/// Small timeouts and fast, deterministic retries (at most 2).
pub fn config(base_url: &str) -> HttpConfig {
    HttpConfig::new(base_url, Credential::value(KEY))
        .with_timeouts(Timeouts {
            connect: Duration::from_secs(2),
            first_byte: Duration::from_secs(2),
            idle: Duration::from_secs(1),
        })
        .with_retry(RetryPolicy {
            max_retries: 2,
            base_delay: Duration::from_millis(5),
            max_delay: Duration::from_secs(5),
            jitter: false,
        })
}

pub fn openai(base_url: &str) -> OpenAiCompatible {
    OpenAiCompatible::new(config(&format!("{base_url}/v1"))).unwrap()
}

pub fn anthropic(base_url: &str) -> Anthropic {
    Anthropic::new(config(base_url)).unwrap()
}

/// A request with one user message.
pub fn ask(text: &str) -> ModelRequest {
    ModelRequest::new("test-model", Thread::from_messages([Message::user(text)]))
}

/// A 200 streaming `body` as server-sent events.
pub fn sse(body: impl Into<String>) -> ResponseTemplate {
    ResponseTemplate::new(200)
        .insert_header("content-type", "text/event-stream")
        .set_body_raw(body.into().into_bytes(), "text/event-stream")
}

/// A JSON response.
pub fn json(status: u16, body: impl Into<String>) -> ResponseTemplate {
    ResponseTemplate::new(status).set_body_raw(body.into().into_bytes(), "application/json")
}

/// Every item of a stream: the events before the end, and the error that
/// ended it (if one did).
pub async fn collect(
    mut stream: BoxStream<'static, Result<StreamEvent, ProviderError>>,
) -> (Vec<StreamEvent>, Option<ProviderError>) {
    let mut events = Vec::new();
    while let Some(item) = stream.next().await {
        match item {
            Ok(event) => events.push(event),
            Err(error) => {
                assert!(stream.next().await.is_none(), "an item after an error");
                return (events, Some(error));
            }
        }
    }
    (events, None)
}

/// The events of a call, assembled.
pub fn assemble(events: &[StreamEvent]) -> Result<skein_core::ModelResponse, ProviderError> {
    let mut assembler = ResponseAssembler::new();
    for event in events {
        assembler.push(event.clone())?;
    }
    assembler.finish()
}

/// The `Retrying` events of a call.
pub fn retries(events: &[StreamEvent]) -> Vec<(u32, String, Duration)> {
    events
        .iter()
        .filter_map(|event| match event {
            StreamEvent::Retrying {
                attempt,
                reason,
                delay,
            } => Some((*attempt, reason.clone(), *delay)),
            _ => None,
        })
        .collect()
}

/// The JSON body of the `n`-th request a mock server received.
pub async fn request_body(server: &wiremock::MockServer, n: usize) -> serde_json::Value {
    let requests = server.received_requests().await.unwrap();
    serde_json::from_slice(&requests[n].body).unwrap()
}

/// The raw text of the `n`-th request body a mock server received.
pub async fn request_text(server: &wiremock::MockServer, n: usize) -> String {
    let requests = server.received_requests().await.unwrap();
    String::from_utf8(requests[n].body.clone()).unwrap()
}

pub async fn received(server: &wiremock::MockServer) -> usize {
    server.received_requests().await.unwrap().len()
}

/// What the raw server does after reading the request.
pub enum Script {
    /// Never answer.
    Silence,
    /// Send a chunked 200 event-stream response head and these chunks, then
    /// stall with the connection open.
    Stall(Vec<String>),
    /// Send the head and chunks, then close the connection without ending
    /// the chunked body.
    Cut(Vec<String>),
}

/// What the raw server saw.
#[derive(Debug)]
pub struct Seen {
    /// The request arrived in full.
    pub request_read: bool,
    /// The client closed its side within the server's patience (5 s), and
    /// when, measured from the end of the script.
    pub closed_after: Option<Duration>,
}

/// A one-connection TCP server running `script`.
pub async fn raw_server(script: Script) -> (SocketAddr, tokio::task::JoinHandle<Seen>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.unwrap();
        let request_read = read_request(&mut socket).await;
        let chunks = match &script {
            Script::Silence => None,
            Script::Stall(chunks) | Script::Cut(chunks) => Some(chunks),
        };
        if let Some(chunks) = chunks {
            let mut out = String::from(
                "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n",
            );
            for chunk in chunks {
                out.push_str(&format!("{:x}\r\n{chunk}\r\n", chunk.len()));
            }
            let _ = socket.write_all(out.as_bytes()).await;
            let _ = socket.flush().await;
        }
        if matches!(script, Script::Cut(_)) {
            drop(socket);
            return Seen {
                request_read,
                closed_after: None,
            };
        }
        let start = Instant::now();
        let mut buffer = [0u8; 1024];
        let closed = tokio::time::timeout(Duration::from_secs(5), async {
            loop {
                match socket.read(&mut buffer).await {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
            }
        })
        .await
        .is_ok();
        Seen {
            request_read,
            closed_after: closed.then(|| start.elapsed()),
        }
    });
    (address, task)
}

/// Read one request: headers, then `content-length` bytes of body.
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
