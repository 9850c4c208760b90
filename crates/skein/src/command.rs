/*!
Command tools: an executable offered to a model as a tool. The model's
arguments (JSON that already matched the tool's schema) go to the command
on standard input; what it prints on standard output is the tool's result.

A command that fails is an error result the model sees (the tool loop goes
on): a non-zero exit (with the last line it wrote on standard error), no
answer within its timeout, output that is not UTF-8 or is larger than the
cap. The command runs without a shell, in the caller's working directory
and environment, and in a process group of its own: stopped (its timeout
passed, its output passed the cap, the call was dropped) it is killed with
every process it started. Its standard output and standard error are read
at once, so neither pipe can fill and hold it up; of standard error only
the end is kept.
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
        let mut command = tokio::process::Command::new(&self.program);
        command
            .args(&self.args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        // Its own process group, so that stopping it stops what it started.
        #[cfg(unix)]
        command.process_group(0);
        let mut child = command.spawn().map_err(|error| {
            ToolError(format!(
                "tool `{name}` could not start `{}`: {error}",
                self.program
            ))
        })?;
        let mut group = ProcessGroup::of(&child);
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
            let read_out = async {
                let read = (&mut stdout).take(cap).read_to_end(&mut out).await;
                // Past the cap nothing more is read, so a command still
                // writing would wait on a full pipe: stop it now.
                if out.len() > self.max_output {
                    group.kill();
                }
                read
            };
            // Read to the end, at once, so a command writing much on
            // standard error never waits on a full pipe.
            let read_err = read_tail(&mut stderr, STDERR_TAIL);
            let (_, out_read, err) = tokio::join!(write, read_out, read_err);
            out_read.map_err(|error| {
                ToolError(format!("tool `{name}`: cannot read its output: {error}"))
            })?;
            let status = child.wait().await.map_err(|error| {
                ToolError(format!("tool `{name}`: cannot wait for it: {error}"))
            })?;
            Ok::<_, ToolError>((status, out, err))
        };
        let outcome = tokio::time::timeout(self.timeout, exchange).await;
        let Ok(outcome) = outcome else {
            group.kill();
            return Err(ToolError(format!(
                "tool `{name}` did not answer within {} and was stopped",
                timeout_words(self.timeout)
            )));
        };
        let (status, out, err) = outcome?;
        // It ended on its own: what it left running on purpose is its own.
        group.disarm();
        if out.len() > self.max_output {
            return Err(ToolError(format!(
                "tool `{name}` printed more than {}",
                size_words(self.max_output)
            )));
        }
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
        String::from_utf8(out)
            .map_err(|_| ToolError(format!("tool `{name}` printed output that is not UTF-8")))
    }
}

/// How much of the end of a command's standard error is kept (its last
/// line explains a failure).
const STDERR_TAIL: usize = 64 * 1024;

/// Read `pipe` to its end, keeping at most its last `keep` bytes.
async fn read_tail(pipe: &mut tokio::process::ChildStderr, keep: usize) -> Vec<u8> {
    let mut tail = Vec::new();
    let mut chunk = [0u8; 8192];
    while let Ok(read @ 1..) = pipe.read(&mut chunk).await {
        tail.extend_from_slice(&chunk[..read]);
        if tail.len() > 2 * keep {
            tail.drain(..tail.len() - keep);
        }
    }
    if tail.len() > keep {
        tail.drain(..tail.len() - keep);
    }
    tail
}

/// The process group a command tool runs in (its own): stopping it stops
/// the processes the command started too. Dropped before the command
/// ended (the call was cancelled), it kills the group.
struct ProcessGroup {
    #[cfg(unix)]
    leader: Option<rustix::process::Pid>,
    armed: bool,
}

impl ProcessGroup {
    #[cfg_attr(not(unix), expect(unused_variables, reason = "no process groups"))]
    fn of(child: &tokio::process::Child) -> ProcessGroup {
        ProcessGroup {
            #[cfg(unix)]
            leader: child
                .id()
                .and_then(|id| rustix::process::Pid::from_raw(i32::try_from(id).ok()?)),
            armed: true,
        }
    }

    fn disarm(&mut self) {
        self.armed = false;
    }

    /// Kill every process of the group. One already gone is no error.
    fn kill(&self) {
        #[cfg(unix)]
        if let Some(leader) = self.leader {
            let _ = rustix::process::kill_process_group(leader, rustix::process::Signal::KILL);
        }
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        if self.armed {
            self.kill();
        }
    }
}

/// A size as tool errors say it: `1 MiB`, `64 KiB`, `10 bytes`.
pub(crate) fn size_words(bytes: usize) -> String {
    match bytes {
        n if n >= 1 << 20 && n % (1 << 20) == 0 => format!("{} MiB", n >> 20),
        n if n >= 1 << 10 && n % (1 << 10) == 0 => format!("{} KiB", n >> 10),
        n => format!("{n} bytes"),
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

    #[tokio::test]
    async fn much_on_standard_error_does_not_hold_the_result_back() {
        let result = sh(
            "chatty",
            "head -c 300000 /dev/zero | tr '\\0' e >&2; echo ok",
        )
        .timeout(Duration::from_secs(10))
        .call(json!({}))
        .await;
        assert_eq!(result.unwrap(), "ok\n");

        // A failure's last line is still its last words, past the kept tail.
        let error = sh(
            "chatty",
            "head -c 300000 /dev/zero | tr '\\0' e >&2; echo >&2; echo 'the end' >&2; exit 4",
        )
        .timeout(Duration::from_secs(10))
        .call(json!({}))
        .await
        .unwrap_err();
        assert_eq!(error.0, "tool `chatty` exited with status 4: the end");
    }

    #[tokio::test]
    async fn a_tool_flooding_its_output_is_stopped_at_the_cap() {
        let started = std::time::Instant::now();
        let error = sh("flood", "yes")
            .timeout(Duration::from_secs(20))
            .call(json!({}))
            .await
            .unwrap_err();
        assert_eq!(error.0, "tool `flood` printed more than 1 MiB");
        assert!(started.elapsed() < Duration::from_secs(10));
    }

    /// Whether process `pid` still runs (a zombie counts as gone).
    fn running(pid: &str) -> bool {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Ok(stat) => !stat.contains(") Z "),
            Err(_) => false,
        }
    }

    #[tokio::test]
    async fn a_stopped_tool_takes_the_processes_it_started_with_it() {
        let dir = tempfile::tempdir().unwrap();
        let pid_file = dir.path().join("pid");
        let script = format!("sleep 30 & echo $! > {}; wait", pid_file.display());
        let error = sh("spawner", &script)
            .timeout(Duration::from_millis(500))
            .call(json!({}))
            .await
            .unwrap_err();
        assert_eq!(
            error.0,
            "tool `spawner` did not answer within 500 ms and was stopped"
        );
        let pid = std::fs::read_to_string(&pid_file).unwrap();
        let pid = pid.trim();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while running(pid) && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(!running(pid), "the tool's child {pid} still runs");
    }

    #[test]
    fn sizes_are_said_in_their_largest_whole_unit() {
        assert_eq!(size_words(1 << 20), "1 MiB");
        assert_eq!(size_words(64 << 10), "64 KiB");
        assert_eq!(size_words(10), "10 bytes");
        assert_eq!(size_words((1 << 20) + 1), "1048577 bytes");
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
