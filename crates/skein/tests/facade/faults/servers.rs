//! The servers the fault matrix talks to: wiremock answering a sequence of
//! responses, and a raw TCP server for what wiremock cannot do (a body that
//! is cut or stalls mid-stream), counting the connections it accepts.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use wiremock::matchers::method;
use wiremock::{Mock, MockServer, ResponseTemplate};

/// A fixture of the providers' tests (their real wire formats).
pub fn fixture(path: &str) -> String {
    let full = format!(
        "{}/../skein-providers/tests/data/{path}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read_to_string(&full).unwrap_or_else(|error| panic!("{full}: {error}"))
}

pub fn sse(body: impl Into<String>) -> ResponseTemplate {
    ResponseTemplate::new(200).set_body_raw(body.into().into_bytes(), "text/event-stream")
}

pub fn json(status: u16, body: impl Into<String>) -> ResponseTemplate {
    ResponseTemplate::new(status).set_body_raw(body.into().into_bytes(), "application/json")
}

/// An OpenAI stream replying `text`.
pub fn openai_text(text: &str) -> String {
    let content = serde_json::to_string(text).unwrap();
    format!(
        "data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"role\":\"assistant\",\"content\":{content}}},\"finish_reason\":null}}]}}\n\n\
         data: {{\"choices\":[{{\"index\":0,\"delta\":{{}},\"finish_reason\":\"stop\"}}]}}\n\n\
         data: [DONE]\n\n"
    )
}

/// An OpenAI stream calling tool `name` with raw `arguments`.
pub fn openai_tool_call(name: &str, arguments: &str) -> String {
    let arguments = serde_json::to_string(arguments).unwrap();
    format!(
        "data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"role\":\"assistant\",\"tool_calls\":[{{\"index\":0,\"id\":\"call_1\",\"type\":\"function\",\"function\":{{\"name\":\"{name}\",\"arguments\":{arguments}}}}}]}},\"finish_reason\":null}}]}}\n\n\
         data: {{\"choices\":[{{\"index\":0,\"delta\":{{}},\"finish_reason\":\"tool_calls\"}}]}}\n\n\
         data: [DONE]\n\n"
    )
}

/// A wiremock server answering the n-th request with `responses[n]`, and
/// every later one with the last response.
pub async fn sequence(responses: Vec<ResponseTemplate>) -> MockServer {
    let server = MockServer::start().await;
    let last = responses.len() - 1;
    for (i, response) in responses.into_iter().enumerate() {
        let mock = Mock::given(method("POST")).respond_with(response);
        let mock = if i < last {
            mock.up_to_n_times(1)
        } else {
            mock
        };
        mock.mount(&server).await;
    }
    server
}

/// What the raw server does with each request it reads.
#[derive(Clone, Copy)]
pub enum Raw {
    /// Send a 200 event-stream head and `chunk`, then close the connection
    /// without ending the chunked body (a reset mid-stream).
    Cut(&'static str),
    /// Send the head and `chunk`, then hold the connection open silently.
    Stall(&'static str),
}

/// A raw TCP server; the counter says how many connections it accepted.
pub async fn raw(behaviour: Raw) -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let counter = accepted.clone();
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            counter.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(serve(socket, behaviour));
        }
    });
    (address, accepted)
}

async fn serve(mut socket: TcpStream, behaviour: Raw) {
    read_request(&mut socket).await;
    let (Raw::Cut(chunk) | Raw::Stall(chunk)) = behaviour;
    let head =
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";
    let body = format!("{head}{:x}\r\n{chunk}\r\n", chunk.len());
    let _ = socket.write_all(body.as_bytes()).await;
    let _ = socket.flush().await;
    if let Raw::Stall(_) = behaviour {
        let mut buffer = [0u8; 1024];
        while let Ok(n) = socket.read(&mut buffer).await {
            if n == 0 {
                break;
            }
        }
    }
}

/// Read one request: headers, then `content-length` bytes of body.
async fn read_request(socket: &mut TcpStream) {
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
                return;
            }
        }
        match socket.read(&mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(n) => data.extend_from_slice(&buffer[..n]),
        }
    }
}

/// An address nobody listens on.
pub fn refused() -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    drop(listener);
    address
}
