/*!
Tools from Model Context Protocol servers: skein as an MCP client (the
official SDK, `rmcp`), over stdio (a child process) or streamable HTTP.

An [`McpServer`] is a declaration and a connection its tools share. It
starts lazily, when its tools are first listed ([`McpServer::tools`]) or
called, and is started again by the next call after it stopped. Each of
its tools is an [`McpTool`], a [`Tool`] like any other: offered to a model
under the name `SERVER__TOOL` (see [`names`]), its calls and results
recorded with the exact tool set of each run, its schema compared across
turns by the schema-drift warnings.

Failures keep the turn going, as every tool failure does: a server that
stops during a call, refuses it, does not answer within the timeout, or
answers with an error result is an error result the model sees
([`McpCallError`], shown to the model through [`ToolError`]). A server that
cannot be started or listed is an [`McpError`] naming it.

```no_run
# async fn demo() -> Result<(), Box<dyn std::error::Error>> {
use skein::mcp::{McpServer, Transport};
use skein::Tool;

let files = McpServer::new(
    "files",
    Transport::stdio(["npx", "-y", "@modelcontextprotocol/server-filesystem", "."]),
)?;
let tools = files.tools().await?; // starts the server
assert!(tools.iter().all(|tool| tool.spec().name.starts_with("files__")));
# Ok(())
# }
```
*/

mod connect;
mod content;
pub mod names;

use crate::command::{DEFAULT_MAX_OUTPUT, size_words, timeout_words};
use connect::{Service, Stderr};
use rmcp::model::CallToolRequestParams;
use rmcp::service::ServiceError;
use skein_core::{BoxFuture, ToolSpec};
use skein_engine::{Tool, ToolError};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// How long a server may take to start (and list its tools), and to
/// answer a call, unless told otherwise.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// How to reach an MCP server. Its `Debug` form leaves out header and
/// environment values, which may be credentials.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Transport {
    /// A program that speaks MCP on its standard input and output, run
    /// without a shell, with the caller's environment plus `env`.
    Stdio {
        command: Vec<String>,
        env: BTreeMap<String, String>,
        cwd: Option<PathBuf>,
    },
    /// A streamable HTTP endpoint (`http://` or `https://`), with headers
    /// sent on every request (an `Authorization`, say).
    Http {
        url: String,
        headers: BTreeMap<String, String>,
    },
}

impl std::fmt::Debug for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Transport::Stdio { command, env, cwd } => f
                .debug_struct("Stdio")
                .field("command", command)
                .field("env", &env.keys().collect::<Vec<_>>())
                .field("cwd", cwd)
                .finish(),
            Transport::Http { url, headers } => f
                .debug_struct("Http")
                .field("url", url)
                .field("headers", &headers.keys().collect::<Vec<_>>())
                .finish(),
        }
    }
}

impl Transport {
    /// A program and its arguments.
    pub fn stdio<S: Into<String>>(command: impl IntoIterator<Item = S>) -> Transport {
        Transport::Stdio {
            command: command.into_iter().map(Into::into).collect(),
            env: BTreeMap::new(),
            cwd: None,
        }
    }

    /// A streamable HTTP endpoint.
    pub fn http(url: impl Into<String>) -> Transport {
        Transport::Http {
            url: url.into(),
            headers: BTreeMap::new(),
        }
    }
}

/// A server that cannot be declared, started or listed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum McpError {
    #[error("`{server}` cannot name an MCP server: {problem}")]
    InvalidName {
        server: String,
        problem: &'static str,
    },
    #[error("MCP server `{server}` has no command to run")]
    NoCommand { server: String },
    #[error("MCP server `{server}` has the URL `{url}`, which {problem}")]
    InvalidUrl {
        server: String,
        url: String,
        problem: String,
    },
    #[error("MCP server `{server}`: header `{header}` is not a valid HTTP header")]
    BadHeader { server: String, header: String },
    #[error("MCP server `{server}` could not be started: cannot run `{program}`: {error}")]
    Spawn {
        server: String,
        program: String,
        error: String,
    },
    #[error("MCP server `{server}` could not be started: {message}{}", last_words(.said))]
    Handshake {
        server: String,
        message: String,
        said: Option<String>,
    },
    #[error("MCP server `{server}` did not start within {}{}", timeout_words(*.after), last_words(.said))]
    StartTimeout {
        server: String,
        after: Duration,
        said: Option<String>,
    },
    #[error("MCP server `{server}` did not list its tools: {message}")]
    ListTools { server: String, message: String },
    #[error(
        "MCP server `{server}` has tools `{first}` and `{second}`, which would both be offered as `{offered}`"
    )]
    NameClash {
        server: String,
        offered: String,
        first: String,
        second: String,
    },
}

/// A call that did not give the tool's answer. Shown to the model as the
/// call's error result.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum McpCallError {
    /// The server was not running and could not be started again.
    #[error("{error}")]
    Unavailable { error: McpError },
    /// The server exited, or the connection to it broke, during the call.
    #[error(
        "MCP server `{server}` stopped during the call to `{tool}` ({detail}); the next call {}",
        if *.child { "starts it again" } else { "connects to it again" }
    )]
    Stopped {
        server: String,
        tool: String,
        detail: String,
        /// Whether it is a child process (a stdio server).
        child: bool,
    },
    /// The server answered the call with a protocol error.
    #[error("MCP server `{server}` refused the call to `{tool}`: {message}")]
    Refused {
        server: String,
        tool: String,
        message: String,
    },
    #[error("MCP server `{server}` did not answer the call to `{tool}` within {}", timeout_words(*.after))]
    TimedOut {
        server: String,
        tool: String,
        after: Duration,
    },
    /// The tool ran and reported an error: its own words.
    #[error("{message}")]
    Failed { message: String },
    /// The arguments are not a JSON object (MCP tools take one).
    #[error("the arguments of `{tool}` must be a JSON object")]
    NotAnObject { tool: String },
    /// The result is larger than a tool result may be (as a command
    /// tool's, [`DEFAULT_MAX_OUTPUT`]).
    #[error(
        "MCP server `{server}` answered the call to `{tool}` with more than {}: ask the tool for less",
        size_words(*.limit)
    )]
    TooLarge {
        server: String,
        tool: String,
        limit: usize,
    },
}

/// `text`, unless it is larger than `limit` bytes.
fn capped(text: String, server: &str, tool: &str, limit: usize) -> Result<String, McpCallError> {
    if text.len() > limit {
        return Err(McpCallError::TooLarge {
            server: server.to_string(),
            tool: tool.to_string(),
            limit,
        });
    }
    Ok(text)
}

fn last_words(said: &Option<String>) -> String {
    match said {
        Some(line) => format!("; it said: {line}"),
        None => String::new(),
    }
}

/// An MCP server: its declaration and the connection its tools share.
/// Cloning shares the connection.
#[derive(Clone)]
pub struct McpServer {
    inner: Arc<Inner>,
}

struct Inner {
    name: String,
    transport: Transport,
    timeout: Duration,
    live: tokio::sync::Mutex<Option<Live>>,
    /// Connections started so far, which numbers the next one.
    started: AtomicU64,
}

/// A running connection, numbered so a failed call forgets only the
/// connection it failed on.
struct Live {
    service: Service,
    stderr: Stderr,
    generation: u64,
}

impl std::fmt::Debug for McpServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpServer")
            .field("name", &self.inner.name)
            .field("transport", &self.inner.transport)
            .finish_non_exhaustive()
    }
}

impl McpServer {
    /// Declare a server (nothing starts yet). Its name must suit the
    /// names its tools are offered under ([`names::server_name_problem`]).
    pub fn new(name: impl Into<String>, transport: Transport) -> Result<McpServer, McpError> {
        let name = name.into();
        if let Some(problem) = names::server_name_problem(&name) {
            return Err(McpError::InvalidName {
                server: name,
                problem,
            });
        }
        match &transport {
            Transport::Stdio { command, .. } if command.first().is_none_or(String::is_empty) => {
                return Err(McpError::NoCommand { server: name });
            }
            Transport::Http { url, .. } => {
                let problem = match reqwest::Url::parse(url) {
                    Err(error) => Some(format!("is not a URL: {error}")),
                    Ok(parsed) if !matches!(parsed.scheme(), "http" | "https") => Some(format!(
                        "should start with http:// or https://, not {}:",
                        parsed.scheme()
                    )),
                    Ok(_) => None,
                };
                if let Some(problem) = problem {
                    return Err(McpError::InvalidUrl {
                        server: name,
                        url: url.clone(),
                        problem,
                    });
                }
            }
            _ => {}
        }
        Ok(McpServer {
            inner: Arc::new(Inner {
                name,
                transport,
                timeout: DEFAULT_TIMEOUT,
                live: tokio::sync::Mutex::new(None),
                started: AtomicU64::new(0),
            }),
        })
    }

    /// How long the server may take to start, and to answer a call
    /// (default [`DEFAULT_TIMEOUT`]). Set it before sharing the server.
    pub fn timeout(self, timeout: Duration) -> McpServer {
        McpServer {
            inner: Arc::new(Inner {
                name: self.inner.name.clone(),
                transport: self.inner.transport.clone(),
                timeout,
                live: tokio::sync::Mutex::new(None),
                started: AtomicU64::new(0),
            }),
        }
    }

    pub fn name(&self) -> &str {
        &self.inner.name
    }

    pub fn transport(&self) -> &Transport {
        &self.inner.transport
    }

    /// The server's tools, started first if it is not running. Each is
    /// offered under `SERVER__TOOL`; two tools that would be offered under
    /// one name are an error.
    pub async fn tools(&self) -> Result<Vec<McpTool>, McpError> {
        let (service, _, _) = self.connection().await?;
        let listed = tokio::time::timeout(self.inner.timeout, service.list_all_tools()).await;
        let listed = match listed {
            Ok(Ok(listed)) => listed,
            Ok(Err(error)) => {
                return Err(McpError::ListTools {
                    server: self.inner.name.clone(),
                    message: error.to_string(),
                });
            }
            Err(_) => {
                return Err(McpError::ListTools {
                    server: self.inner.name.clone(),
                    message: format!("no answer within {}", timeout_words(self.inner.timeout)),
                });
            }
        };
        let mut tools: Vec<McpTool> = Vec::with_capacity(listed.len());
        for tool in listed {
            let offered = names::offered_name(&self.inner.name, &tool.name);
            if let Some(known) = tools.iter().find(|known| known.spec.name == offered) {
                return Err(McpError::NameClash {
                    server: self.inner.name.clone(),
                    offered,
                    first: known.remote.clone(),
                    second: tool.name.to_string(),
                });
            }
            let description = tool
                .description
                .as_deref()
                .or(tool.title.as_deref())
                .unwrap_or_default()
                .to_string();
            let schema = serde_json::Value::Object((*tool.input_schema).clone());
            tools.push(McpTool {
                server: self.clone(),
                remote: tool.name.to_string(),
                spec: ToolSpec::new(offered, description, schema),
            });
        }
        Ok(tools)
    }

    /// Call the server's tool `tool` (its own name, not the offered one).
    pub async fn call(
        &self,
        tool: &str,
        arguments: serde_json::Value,
    ) -> Result<String, McpCallError> {
        let arguments = match arguments {
            serde_json::Value::Object(arguments) => Some(arguments),
            serde_json::Value::Null => None,
            _ => {
                return Err(McpCallError::NotAnObject {
                    tool: tool.to_string(),
                });
            }
        };
        let (peer, generation, stderr) = self
            .connection()
            .await
            .map_err(|error| McpCallError::Unavailable { error })?;
        let mut params = CallToolRequestParams::new(tool.to_string());
        params.arguments = arguments;
        let server = self.inner.name.clone();
        let answer = tokio::time::timeout(self.inner.timeout, peer.call_tool(params)).await;
        let error = match answer {
            Err(_) => {
                return Err(McpCallError::TimedOut {
                    server,
                    tool: tool.to_string(),
                    after: self.inner.timeout,
                });
            }
            Ok(Ok(result)) => {
                let text = capped(content::text_of(&result), &server, tool, DEFAULT_MAX_OUTPUT)?;
                return if result.is_error == Some(true) {
                    Err(McpCallError::Failed { message: text })
                } else {
                    Ok(text)
                };
            }
            Ok(Err(error)) => error,
        };
        Err(match error {
            ServiceError::McpError(error) => McpCallError::Refused {
                server,
                tool: tool.to_string(),
                message: error.message.to_string(),
            },
            ServiceError::Timeout { timeout } => McpCallError::TimedOut {
                server,
                tool: tool.to_string(),
                after: timeout,
            },
            ServiceError::UnexpectedResponse => McpCallError::Refused {
                server,
                tool: tool.to_string(),
                message: "it answered with something other than a tool result".into(),
            },
            broken => {
                self.forget(generation).await;
                let detail = connect::broken(&broken);
                let detail = match stderr.last_words().await {
                    Some(line) => format!("{detail}; it said: {line}"),
                    None => detail,
                };
                McpCallError::Stopped {
                    server,
                    tool: tool.to_string(),
                    detail,
                    child: matches!(self.inner.transport, Transport::Stdio { .. }),
                }
            }
        })
    }

    /// Close the connection, if there is one (a stdio server's input is
    /// closed so it exits; an HTTP session is ended). The next use starts
    /// the server again.
    pub async fn close(&self) {
        let live = self.inner.live.lock().await.take();
        if let Some(mut live) = live {
            let _ = live
                .service
                .close_with_timeout(Duration::from_secs(5))
                .await;
        }
    }

    /// A peer on the running connection, starting one when there is none
    /// or it has closed.
    async fn connection(
        &self,
    ) -> Result<(rmcp::service::Peer<rmcp::service::RoleClient>, u64, Stderr), McpError> {
        let mut live = self.inner.live.lock().await;
        if let Some(running) = live.as_ref()
            && !running.service.is_closed()
        {
            return Ok((
                running.service.peer().clone(),
                running.generation,
                running.stderr.clone(),
            ));
        }
        let generation = self.inner.started.fetch_add(1, Ordering::Relaxed);
        let (service, stderr) =
            connect::connect(&self.inner.name, &self.inner.transport, self.inner.timeout).await?;
        let peer = service.peer().clone();
        *live = Some(Live {
            service,
            stderr: stderr.clone(),
            generation,
        });
        Ok((peer, generation, stderr))
    }

    /// Drop the connection numbered `generation`, if it is still the
    /// current one.
    async fn forget(&self, generation: u64) {
        let mut live = self.inner.live.lock().await;
        if live
            .as_ref()
            .is_some_and(|running| running.generation == generation)
        {
            *live = None;
        }
    }
}

/// One tool of an MCP server, offered as `SERVER__TOOL`.
#[derive(Clone, Debug)]
pub struct McpTool {
    server: McpServer,
    remote: String,
    spec: ToolSpec,
}

impl McpTool {
    /// The server it belongs to.
    pub fn server(&self) -> &McpServer {
        &self.server
    }

    /// Its name on the server.
    pub fn remote_name(&self) -> &str {
        &self.remote
    }
}

impl Tool for McpTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn call(&self, arguments: serde_json::Value) -> BoxFuture<'_, Result<String, ToolError>> {
        Box::pin(async move {
            self.server
                .call(&self.remote, arguments)
                .await
                .map_err(|error| ToolError(error.to_string()))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_output_keeps_header_and_environment_values_out() {
        let mut transport = Transport::http("https://example.com/mcp");
        if let Transport::Http { headers, .. } = &mut transport {
            headers.insert("Authorization".into(), "Bearer SECRET-TOKEN".into());
        }
        let server = McpServer::new("search", transport).unwrap();
        let shown = format!("{server:?}");
        assert!(
            shown.contains("Authorization") && !shown.contains("SECRET"),
            "{shown}"
        );
        let mut transport = Transport::stdio(["server"]);
        if let Transport::Stdio { env, .. } = &mut transport {
            env.insert("API_KEY".into(), "SECRET-KEY".into());
        }
        let shown = format!("{transport:?}");
        assert!(
            shown.contains("API_KEY") && !shown.contains("SECRET"),
            "{shown}"
        );
    }

    #[test]
    fn a_result_past_the_tool_result_cap_is_refused_as_command_tools_are() {
        let at_cap = "x".repeat(DEFAULT_MAX_OUTPUT);
        assert_eq!(
            capped(at_cap.clone(), "big", "dump", DEFAULT_MAX_OUTPUT).unwrap(),
            at_cap
        );
        let error = capped(at_cap + "x", "big", "dump", DEFAULT_MAX_OUTPUT).unwrap_err();
        assert_eq!(
            error.to_string(),
            "MCP server `big` answered the call to `dump` with more than 1 MiB: ask the tool for less"
        );
    }

    #[test]
    fn declarations_are_checked_before_anything_starts() {
        let invalid = |server: &str, transport: Transport| {
            McpServer::new(server, transport).unwrap_err().to_string()
        };
        assert_eq!(
            invalid("a.b", Transport::stdio(["x"])),
            "`a.b` cannot name an MCP server: only ASCII letters, digits, `_` and `-` may be used"
        );
        assert_eq!(
            invalid("empty", Transport::stdio(Vec::<String>::new())),
            "MCP server `empty` has no command to run"
        );
        assert!(
            invalid("ftp", Transport::http("ftp://example.com/mcp"))
                .contains("should start with http:// or https://, not ftp:"),
        );
        assert!(invalid("word", Transport::http("not a url")).contains("is not a URL"));
    }
}
