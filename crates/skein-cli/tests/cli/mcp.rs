/*!
MCP servers' tools end to end: a real server (`tests/data/mcp_server.py`,
on the reference `mcp` package from the test venv) over stdio and
streamable HTTP, a scripted model (`tests/data/mcp_tools.toml`) that calls
its tools, and the records the loops leave.
*/

use super::{Rows as _, scripted, temp};
use serde_json::Value;
use skein::core::{Part, Role, ToolResult};
use skein_testkit::Cli;
use skein_testkit::cli::stderr;
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// The test venv's `python`, which must have the `mcp` package (an older
/// venv is missing it: `scripts/python-clients` adds it).
fn python() -> Option<PathBuf> {
    crate::python::python_with("mcp")
}

fn server_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/mcp_server.py")
}

/// `skein` with the test server declared as `demo` (stdio) in its
/// configuration file, plus `extra` configuration.
fn with_demo(python: &Path, extra: &str) -> Cli {
    let skein = temp();
    let config = format!(
        "[mcp.servers.demo]\ncommand = [{:?}, {:?}, \"stdio\"]\n{extra}",
        python.display().to_string(),
        server_script().display().to_string(),
    );
    std::fs::write(skein.dir().join("config.toml"), config).unwrap();
    skein
}

/// The names of the tools each run of `conversation` offered, in order.
fn offered(skein: &Cli, conversation: &str) -> Vec<Vec<String>> {
    let store = skein::Store::open(skein.db()).unwrap();
    let id = store.resolve_conversation(conversation).unwrap();
    store
        .runs_of_conversation(&id)
        .unwrap()
        .iter()
        .map(|run| run.tools.iter().map(|tool| tool.name.clone()).collect())
        .collect()
}

/// Every tool result in the thread ending at `node`, in order.
fn tool_results(skein: &Cli, node: &str) -> Vec<ToolResult> {
    let store = skein::Store::open(skein.db()).unwrap();
    let thread = store
        .load_thread(store.resolve_node(node).unwrap())
        .unwrap();
    thread
        .messages()
        .into_iter()
        .filter(|message| message.role == Role::Tool)
        .flat_map(|message| message.parts.clone())
        .filter_map(|part| match part {
            Part::ToolResult(result) => Some(result),
            _ => None,
        })
        .collect()
}

/// `skein tools` lists the server's tools (kind `mcp`, with schema
/// hashes); a loop calls two of them; every run records exactly the tools
/// offered (not the server's third); a continued conversation starts the
/// server again for its stored tools; a schema the server changed since
/// warns.
#[test]
fn a_stdio_servers_tools_run_in_a_recorded_tool_loop() {
    let Some(python) = python() else { return };
    let skein = with_demo(&python, "");
    let listed = skein.json(&["tools"]);
    let demo: Vec<&Value> = listed
        .as_array()
        .unwrap()
        .iter()
        .filter(|tool| tool["kind"] == "mcp")
        .collect();
    let names: Vec<&str> = demo
        .iter()
        .map(|tool| tool["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["demo__add", "demo__shout", "demo__crash"]);
    assert!(
        demo.iter()
            .all(|tool| tool["server"] == "demo"
                && tool["schema_hash"].as_str().unwrap().len() == 64)
    );
    assert_eq!(demo[0]["description"], "Add two integers.");
    assert!(
        skein
            .ok(&["tools"])
            .lines()
            .any(|line| line.starts_with("demo__shout ") && line.contains("  mcp ")),
        "{}",
        skein.ok(&["tools"])
    );

    let model = scripted("mcp_tools.toml");
    let answer = skein.json(&[
        "prompt",
        "-m",
        &model,
        "-T",
        "demo.add",
        "-T",
        "demo__shout",
        "go",
    ]);
    assert_eq!(answer["text"], "done: HELLO");
    assert_eq!(answer["chain_status"], "completed");
    let cid = answer["conversation"].as_str().unwrap().to_string();
    let both = vec!["demo__add".to_string(), "demo__shout".to_string()];
    assert_eq!(offered(&skein, &cid), vec![both.clone(); 3]);
    let results = tool_results(&skein, answer["node"].as_str().unwrap());
    assert_eq!(
        results
            .iter()
            .map(|result| (result.content.as_str(), result.is_error))
            .collect::<Vec<_>>(),
        [("5", false), ("HELLO", false)]
    );

    // A later process continues with the stored tools: the server starts
    // again for them.
    let again = skein.json(&["prompt", "-m", &model, "-c", "again"]);
    assert_eq!(again["text"], "done: 5");
    assert_eq!(offered(&skein, &cid).len(), 5);
    assert!(offered(&skein, &cid).iter().all(|tools| *tools == both));

    // The server now has another schema for `shout`: the next turn warns.
    let output = skein
        .command(&["prompt", "-m", &model, "-c", "louder"])
        .env("SKEIN_TEST_MCP_LOUDER", "1")
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(
        stderr(&output)
            .matches("warning: tool `demo__shout` is offered with a different input schema")
            .count(),
        1,
        "{}",
        stderr(&output)
    );
    assert!(!stderr(&output).contains("demo__add` is offered"));
}

/// A server that exits in the middle of a call: the call is an error
/// result naming the server and what it said, the loop goes on, and the
/// next call starts the server again.
#[test]
fn a_server_that_dies_mid_call_is_an_error_result_and_the_loop_goes_on() {
    let Some(python) = python() else { return };
    let skein = with_demo(&python, "");
    let model = scripted("mcp_tools.toml");
    let answer = skein.json(&["prompt", "-m", &model, "-T", "demo.*", "crash now"]);
    assert_eq!(answer["text"], "tool said: 5");
    let results = tool_results(&skein, answer["node"].as_str().unwrap());
    assert_eq!(results.len(), 2);
    assert!(results[0].is_error);
    assert!(
        results[0]
            .content
            .starts_with("MCP server `demo` stopped during the call to `crash`"),
        "{}",
        results[0].content
    );
    assert!(
        results[0].content.contains("it said: crashing on purpose"),
        "{}",
        results[0].content
    );
    assert_eq!(
        (results[1].content.as_str(), results[1].is_error),
        ("5", false)
    );
    let all: Vec<String> = ["demo__add", "demo__shout", "demo__crash"]
        .map(String::from)
        .to_vec();
    assert_eq!(
        offered(&skein, answer["conversation"].as_str().unwrap()),
        vec![all; 2]
    );
}

/// The test server over streamable HTTP, on a port it chose; stopped when
/// dropped.
struct HttpServer {
    child: Child,
    url: String,
}

impl HttpServer {
    fn start(python: &Path) -> HttpServer {
        let mut child = Command::new(python)
            .arg(server_script())
            .arg("http")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut port = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut port)
            .unwrap();
        let port: u16 = port.trim().parse().expect("the server prints its port");
        HttpServer {
            child,
            url: format!("http://127.0.0.1:{port}/mcp"),
        }
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A server declared on the command line (`--mcp NAME=URL`, replacing
/// the configuration's `demo`) over streamable HTTP: the same loop; then
/// a call that ends the server is an error result, and so is the next
/// call, which finds nothing to connect to; the loop goes on.
#[test]
fn a_streamable_http_server_declared_on_the_command_line_serves_its_tools() {
    let Some(python) = python() else { return };
    let skein = with_demo(&python, "");
    let server = HttpServer::start(&python);
    let flag = format!("demo={}", server.url);
    let model = scripted("mcp_tools.toml");
    let listed = skein.json(&["tools", "--mcp", &flag]);
    assert_eq!(
        listed
            .as_array()
            .unwrap()
            .iter()
            .filter(|tool| tool["server"] == "demo")
            .count(),
        3
    );
    let answer = skein.json(&[
        "prompt",
        "-m",
        &model,
        "--mcp",
        &flag,
        "-T",
        "demo.add",
        "-T",
        "demo.shout",
        "go",
    ]);
    assert_eq!(answer["text"], "done: HELLO");

    let prepared = skein.ok(&["prepare", "--mcp", &flag, "-T", "demo.add", "go"]);
    assert!(prepared.contains("tools: demo__add"), "{prepared}");

    let answer = skein.json(&[
        "prompt", "-m", &model, "--mcp", &flag, "-T", "demo.*", "crash",
    ]);
    let results = tool_results(&skein, answer["node"].as_str().unwrap());
    assert!(results.iter().all(|result| result.is_error), "{results:?}");
    assert!(
        results[0]
            .content
            .starts_with("MCP server `demo` stopped during the call to `crash`"),
        "{}",
        results[0].content
    );
    assert!(
        results[1]
            .content
            .starts_with("MCP server `demo` could not be started"),
        "{}",
        results[1].content
    );
    assert_eq!(
        answer["text"].as_str().unwrap(),
        format!("tool said: {}", results[1].content)
    );
}

/// `prepare` declares the servers `--mcp` names as the turn commands do,
/// so `-T` finds them there (here one that cannot start, which needs no
/// Python; the streamable HTTP test lists a live one's tool).
#[test]
fn prepare_takes_the_mcp_servers_of_its_command_line_as_prompt_does() {
    let skein = temp();
    for command in ["prepare", "prompt"] {
        let output = skein.run(&[
            command,
            "--mcp",
            "gone=/nonexistent/server",
            "-T",
            "gone.*",
            "hi",
        ]);
        assert!(!output.status.success(), "{command}");
        let said = stderr(&output);
        assert!(
            said.contains("MCP server `gone` could not be started"),
            "{command}: {said}"
        );
    }
}

/// A server that fails to start is an error naming it and what it said;
/// `skein tools` still lists the rest, then fails the same way. Bad
/// declarations are refused before anything starts.
#[test]
fn a_server_that_fails_to_start_is_a_clear_error_naming_it() {
    let Some(python) = python() else { return };
    let skein = with_demo(
        &python,
        "[mcp.servers.broken]\ncommand = [\"sh\", \"-c\", \"echo 'no API key in the environment' >&2; exit 1\"]\n",
    );
    let output = skein.run(&["prompt", "-T", "broken.*", "hi"]);
    assert!(!output.status.success());
    let said = stderr(&output);
    assert!(
        said.contains("MCP server `broken` could not be started")
            && said.contains("it said: no API key in the environment"),
        "{said}"
    );
    assert_eq!(skein.count("runs"), 0, "nothing ran");

    let output = skein.run(&["--json", "tools"]);
    assert!(!output.status.success());
    let listed: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert!(
        listed
            .as_array()
            .unwrap()
            .iter()
            .any(|tool| tool["name"] == "demo__add")
    );
    assert!(
        stderr(&output).contains("MCP server `broken` could not be started"),
        "{}",
        stderr(&output)
    );

    let missing = skein.run(&[
        "prompt",
        "--mcp",
        "gone=/nonexistent/server",
        "-T",
        "gone.*",
        "hi",
    ]);
    assert!(
        stderr(&missing)
            .contains("MCP server `gone` could not be started: cannot run `/nonexistent/server`"),
        "{}",
        stderr(&missing)
    );
    for (args, expected) in [
        (
            vec!["prompt", "-T", "demo", "hi"],
            "`demo` is an MCP server: offer its tools with `-T demo.*`",
        ),
        (
            vec!["prompt", "-T", "demo.nope", "hi"],
            "MCP server `demo` has no tool `nope`; it has: add, shout, crash",
        ),
        (
            vec!["prompt", "-T", "elsewhere.x", "hi"],
            "names no MCP server `elsewhere`; MCP servers: broken (-T broken.*), demo (-T demo.*)",
        ),
        (
            vec!["prompt", "--mcp", "a__b=true", "hi"],
            "`a__b` cannot name an MCP server",
        ),
    ] {
        let output = skein.run(&args);
        assert!(!output.status.success(), "{args:?}");
        assert!(
            stderr(&output).contains(expected),
            "{args:?}: {}",
            stderr(&output)
        );
    }

    std::fs::write(
        skein.dir().join("config.toml"),
        "[mcp.servers.both]\ncommand = \"x\"\nurl = \"http://127.0.0.1:1/mcp\"\n",
    )
    .unwrap();
    let output = skein.run(&["tools"]);
    assert!(
        stderr(&output).contains("[mcp.servers.both]")
            && stderr(&output).contains("give a `command` or a `url`, not both"),
        "{}",
        stderr(&output)
    );
}
