/*!
Starting a connection to an MCP server: the child process or the HTTP
session, the protocol handshake, and what a stdio server says on standard
error (kept, its last lines, to explain why it failed or stopped).
*/

use super::{McpError, Transport};
use reqwest::header::{HeaderName, HeaderValue};
use rmcp::model::{ClientCapabilities, ClientConfig, Implementation};
use rmcp::service::{ClientInitializeError, RoleClient, RunningService, ServiceError, ServiceExt};
use rmcp::transport::streamable_http_client::{
    StreamableHttpClientTransportConfig, StreamableHttpError,
};
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use std::collections::{HashMap, VecDeque};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, BufReader};

/// A live connection.
pub(crate) type Service = RunningService<RoleClient, ClientConfig>;

/// How many of a server's last lines on standard error are kept.
const KEPT_LINES: usize = 20;
/// The longest line kept, in bytes.
const KEPT_LINE: usize = 1000;
/// How long to wait for a failed server's last words once it is gone.
const LAST_WORDS: Duration = Duration::from_secs(2);

/// The last lines a stdio server wrote on standard error.
#[derive(Clone, Default)]
pub(crate) struct Stderr {
    lines: Arc<Mutex<VecDeque<String>>>,
    reader: Arc<Mutex<Option<tokio::task::JoinHandle<()>>>>,
}

impl Stderr {
    /// Keep the last lines of `pipe`, read on a task of its own.
    fn follow(pipe: tokio::process::ChildStderr) -> Stderr {
        let stderr = Stderr::default();
        let lines = stderr.lines.clone();
        let reader = tokio::spawn(async move {
            let mut pipe = BufReader::new(pipe).lines();
            while let Ok(Some(line)) = pipe.next_line().await {
                let mut line = line.trim_end().to_string();
                if line.is_empty() {
                    continue;
                }
                if line.len() > KEPT_LINE {
                    let mut end = KEPT_LINE;
                    while !line.is_char_boundary(end) {
                        end -= 1;
                    }
                    line.truncate(end);
                }
                let mut lines = lines.lock().unwrap_or_else(|poison| poison.into_inner());
                if lines.len() == KEPT_LINES {
                    lines.pop_front();
                }
                lines.push_back(line);
            }
        });
        *stderr
            .reader
            .lock()
            .unwrap_or_else(|poison| poison.into_inner()) = Some(reader);
        stderr
    }

    /// The last line the server wrote, once it has closed standard error
    /// (or after a short wait when something else keeps it open).
    pub(crate) async fn last_words(&self) -> Option<String> {
        let reader = self
            .reader
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
            .take();
        if let Some(reader) = reader {
            let _ = tokio::time::timeout(LAST_WORDS, reader).await;
        }
        self.lines
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
            .back()
            .cloned()
    }
}

/// Who skein says it is in the handshake.
fn client_config() -> ClientConfig {
    ClientConfig::new(
        ClientCapabilities::default(),
        Implementation::new("skein", env!("CARGO_PKG_VERSION")),
    )
}

/// Start `transport` and complete the handshake within `timeout`.
pub(crate) async fn connect(
    server: &str,
    transport: &Transport,
    timeout: Duration,
) -> Result<(Service, Stderr), McpError> {
    let (started, stderr) = match transport {
        Transport::Stdio { command, env, cwd } => {
            let (program, args) = command.split_first().ok_or_else(|| McpError::NoCommand {
                server: server.to_string(),
            })?;
            let mut process = tokio::process::Command::new(program);
            process.args(args).envs(env).kill_on_drop(true);
            if let Some(cwd) = cwd {
                process.current_dir(cwd);
            }
            let (child, pipe) = TokioChildProcess::builder(process)
                .stderr(Stdio::piped())
                .spawn()
                .map_err(|error| McpError::Spawn {
                    server: server.to_string(),
                    program: program.clone(),
                    error: error.to_string(),
                })?;
            let stderr = pipe.map(Stderr::follow).unwrap_or_default();
            let started = tokio::time::timeout(timeout, client_config().serve(child)).await;
            (started, stderr)
        }
        Transport::Http { url, headers } => {
            let config = StreamableHttpClientTransportConfig::with_uri(url.as_str())
                .custom_headers(header_map(server, headers)?);
            skein_providers::http::install_crypto_provider();
            let client = reqwest::Client::builder()
                .connect_timeout(timeout)
                .user_agent(concat!("skein/", env!("CARGO_PKG_VERSION")))
                .build()
                .map_err(|error| McpError::Handshake {
                    server: server.to_string(),
                    message: format!("cannot build the HTTP client: {error}"),
                    said: None,
                })?;
            let transport = StreamableHttpClientTransport::with_client(client, config);
            let started = tokio::time::timeout(timeout, client_config().serve(transport)).await;
            (started, Stderr::default())
        }
    };
    match started {
        Ok(Ok(service)) => Ok((service, stderr)),
        Ok(Err(error)) => Err(McpError::Handshake {
            server: server.to_string(),
            message: handshake_failure(&error),
            said: stderr.last_words().await,
        }),
        Err(_) => Err(McpError::StartTimeout {
            server: server.to_string(),
            after: timeout,
            said: stderr.last_words().await,
        }),
    }
}

/// Why the handshake failed, in words (rmcp's own messages name its
/// internal types).
fn handshake_failure(error: &ClientInitializeError) -> String {
    match error {
        ClientInitializeError::TransportError { error, .. } => {
            format!("the handshake failed: {}", chain(error.error.as_ref()))
        }
        ClientInitializeError::ConnectionClosed(_) => {
            "it closed the connection during the handshake".to_string()
        }
        ClientInitializeError::JsonRpcError(data) => {
            format!("it refused the handshake: {}", data.message)
        }
        other => format!("the handshake failed: {}", chain(other)),
    }
}

/// A broken connection, in words.
pub(crate) fn broken(error: &ServiceError) -> String {
    match error {
        ServiceError::TransportClosed => "the connection closed".to_string(),
        ServiceError::TransportSend(error) => chain(error.error.as_ref()),
        other => chain(other),
    }
}

/// An error and its sources, each said once (an HTTP client's error is
/// unwrapped, which rmcp keeps without naming it a source).
fn chain(error: &(dyn std::error::Error + 'static)) -> String {
    if let Some(StreamableHttpError::Client(client)) =
        error.downcast_ref::<StreamableHttpError<reqwest::Error>>()
    {
        return chain(client);
    }
    let mut said = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !said.contains(&text) {
            said.push_str(": ");
            said.push_str(&text);
        }
        source = cause.source();
    }
    said
}

/// The configured headers as HTTP headers; a name or value HTTP cannot
/// carry is an error naming the header (never its value, which may be a
/// credential).
fn header_map(
    server: &str,
    headers: &std::collections::BTreeMap<String, String>,
) -> Result<HashMap<HeaderName, HeaderValue>, McpError> {
    headers
        .iter()
        .map(|(name, value)| {
            let bad = || McpError::BadHeader {
                server: server.to_string(),
                header: name.clone(),
            };
            Ok((
                HeaderName::from_bytes(name.as_bytes()).map_err(|_| bad())?,
                HeaderValue::from_str(value).map_err(|_| bad())?,
            ))
        })
        .collect()
}
