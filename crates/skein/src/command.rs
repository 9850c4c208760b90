/*!
Command tools: an executable offered to a model as a tool. The model's
arguments (JSON that already matched the tool's schema) go to the command
on standard input; what it prints on standard output is the tool's result.

A command that fails is an error result the model sees (the tool loop goes
on): a non-zero exit (with the last line it wrote on standard error), no
answer within its timeout (it is killed), output that is not UTF-8 or is
larger than the cap. The command runs without a shell, in the caller's
working directory and environment.
*/

use skein_core::{BoxFuture, ToolSpec};
use skein_engine::{Tool, ToolError};
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// How long a command may take by default.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// The most a command's result may hold by default, in bytes.
pub const DEFAULT_MAX_OUTPUT: usize = 1 << 20;

/// An executable as a tool.
#[derive(Clone, Debug)]
pub struct CommandTool {
    spec: ToolSpec,
    program: String,
    args: Vec<String>,
    timeout: Duration,
    max_output: usize,
}

/// A command tool that cannot be made.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CommandToolError {
    #[error("tool `{tool}` has no command to run")]
    NoCommand { tool: String },
    #[error("tool `{tool}`'s schema must be a JSON object (a JSON Schema of its arguments)")]
    SchemaNotObject { tool: String },
}

impl CommandTool {
    /// `command` is the program and its arguments; `schema` the JSON Schema
    /// of the arguments the model may pass.
    pub fn new(
        name: impl Into<String>,
        description: impl Into<String>,
        command: Vec<String>,
        schema: serde_json::Value,
    ) -> Result<CommandTool, CommandToolError> {
        let name = name.into();
        let mut command = command.into_iter();
        let program = command.next().filter(|program| !program.is_empty());
        let Some(program) = program else {
            return Err(CommandToolError::NoCommand { tool: name });
        };
        if !schema.is_object() {
            return Err(CommandToolError::SchemaNotObject { tool: name });
        }
        Ok(CommandTool {
            spec: ToolSpec::new(name, description, schema),
            program,
            args: command.collect(),
            timeout: DEFAULT_TIMEOUT,
            max_output: DEFAULT_MAX_OUTPUT,
        })
    }

    /// Stop the command after `timeout` (default [`DEFAULT_TIMEOUT`]).
    pub fn timeout(mut self, timeout: Duration) -> CommandTool {
        self.timeout = timeout;
        self
    }

    /// The most its result may hold, in bytes (default
    /// [`DEFAULT_MAX_OUTPUT`]).
    pub fn max_output(mut self, bytes: usize) -> CommandTool {
        self.max_output = bytes;
        self
    }

    /// The program and its arguments.
    pub fn command(&self) -> impl Iterator<Item = &str> {
        std::iter::once(self.program.as_str()).chain(self.args.iter().map(String::as_str))
    }

    async fn run(&self, arguments: serde_json::Value) -> Result<String, ToolError> {
        let name = &self.spec.name;
        let mut child = tokio::process::Command::new(&self.program)
            .args(&self.args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|error| {
                ToolError(format!(
                    "tool `{name}` could not start `{}`: {error}",
                    self.program
                ))
            })?;
        let mut stdin = child.stdin.take().expect("stdin is piped");
        let mut stdout = child.stdout.take().expect("stdout is piped");
        let mut stderr = child.stderr.take().expect("stderr is piped");
        let input = arguments.to_string();
        let cap = self.max_output as u64 + 1;
        let exchange = async {
            // A command that exits without reading its input is fine.
            let write = async {
                let _ = stdin.write_all(input.as_bytes()).await;
                drop(stdin);
            };
            let mut out = Vec::new();
            let mut err = Vec::new();
            let mut out_pipe = (&mut stdout).take(cap);
            let mut err_pipe = (&mut stderr).take(64 * 1024);
            let read_out = out_pipe.read_to_end(&mut out);
            let read_err = err_pipe.read_to_end(&mut err);
            let (_, out_read, _) = tokio::join!(write, read_out, read_err);
            out_read.map_err(|error| {
                ToolError(format!("tool `{name}`: cannot read its output: {error}"))
            })?;
            let status = child.wait().await.map_err(|error| {
                ToolError(format!("tool `{name}`: cannot wait for it: {error}"))
            })?;
            Ok::<_, ToolError>((status, out, err))
        };
        let (status, out, err) = match tokio::time::timeout(self.timeout, exchange).await {
            Ok(outcome) => outcome?,
            Err(_) => {
                return Err(ToolError(format!(
                    "tool `{name}` did not answer within {} and was stopped",
                    timeout_words(self.timeout)
                )));
            }
        };
        if !status.success() {
            let said = String::from_utf8_lossy(&err);
            let last = said.lines().rev().find(|line| !line.trim().is_empty());
            return Err(ToolError(match (status.code(), last) {
                (Some(code), Some(line)) => {
                    format!("tool `{name}` exited with status {code}: {}", line.trim())
                }
                (Some(code), None) => format!("tool `{name}` exited with status {code}"),
                (None, _) => format!("tool `{name}` was killed by a signal"),
            }));
        }
        if out.len() > self.max_output {
            return Err(ToolError(format!(
                "tool `{name}` printed more than {} bytes",
                self.max_output
            )));
        }
        String::from_utf8(out)
            .map_err(|_| ToolError(format!("tool `{name}` printed output that is not UTF-8")))
    }
}

impl Tool for CommandTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn call(&self, arguments: serde_json::Value) -> BoxFuture<'_, Result<String, ToolError>> {
        Box::pin(self.run(arguments))
    }
}

/// A timeout in words: `5 s`, or `200 ms` when not whole seconds (tool
/// and MCP errors say it so).
pub(crate) fn timeout_words(timeout: Duration) -> String {
    match timeout.as_millis() {
        ms if ms % 1000 == 0 => format!("{} s", ms / 1000),
        ms => format!("{ms} ms"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn sh(name: &str, script: &str) -> CommandTool {
        CommandTool::new(
            name,
            "a test tool",
            vec!["sh".into(), "-c".into(), script.into()],
            json!({"type": "object"}),
        )
        .unwrap()
    }

    #[tokio::test]
    async fn the_arguments_arrive_on_stdin_and_stdout_is_the_result() {
        let tool = sh("upper", "tr a-z A-Z");
        assert_eq!(
            tool.call(json!({"text": "hi"})).await.unwrap(),
            r#"{"TEXT":"HI"}"#
        );
    }

    #[tokio::test]
    async fn failures_are_errors_that_say_what_happened() {
        let error = sh("fails", "echo 'first' >&2; echo 'no such city' >&2; exit 3")
            .call(json!({}))
            .await
            .unwrap_err();
        assert_eq!(error.0, "tool `fails` exited with status 3: no such city");

        let error = sh("slow", "sleep 5")
            .timeout(Duration::from_millis(200))
            .call(json!({}))
            .await
            .unwrap_err();
        assert_eq!(
            error.0,
            "tool `slow` did not answer within 200 ms and was stopped"
        );

        let error = sh("loud", "head -c 100 /dev/zero | tr '\\0' a")
            .max_output(10)
            .call(json!({}))
            .await
            .unwrap_err();
        assert_eq!(error.0, "tool `loud` printed more than 10 bytes");

        let error = CommandTool::new(
            "missing",
            "",
            vec!["/nonexistent/tool".into()],
            json!({"type": "object"}),
        )
        .unwrap()
        .call(json!({}))
        .await
        .unwrap_err();
        assert!(
            error
                .0
                .starts_with("tool `missing` could not start `/nonexistent/tool`"),
            "{}",
            error.0
        );
    }

    #[test]
    fn a_tool_needs_a_command_and_an_object_schema() {
        assert!(matches!(
            CommandTool::new("t", "", vec![], json!({})),
            Err(CommandToolError::NoCommand { .. })
        ));
        assert!(matches!(
            CommandTool::new("t", "", vec!["true".into()], json!(true)),
            Err(CommandToolError::SchemaNotObject { .. })
        ));
    }
}
