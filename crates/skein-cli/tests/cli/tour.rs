/*!
The README's tour, run as pasted, so it cannot rot.

The shell block after the `<!-- tour` comment in README.md runs under
`bash -euo pipefail` (and `-x`, so a failure shows the trace) in a
temporary directory holding a link to `examples/` (the tour runs from the
repository's root), with this build of
`skein` first on `PATH`, the echo model as the default (the embedded model
is too slow for every test run; the tour's tool step names its scripted
model itself) and `TMPDIR` inside the directory (the tour's `mktemp -d`
database lands there). Commands that never end by themselves (`skein
chat`, `skein serve`) are shown in a block of their own after the tour,
which the test does not run (pasted after other commands, `skein chat`
would read them as its input). Then the records the tour left are checked:
the tool loop called the tool, the fork and the branch exist, the tree
shows them.
*/

use serde_json::Value;
use skein_testkit::Cli;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn readme() -> String {
    std::fs::read_to_string(repository().join("README.md")).unwrap()
}

/// The body of the fenced block that directly follows the HTML comment
/// starting with `marker`, and the text after that block.
fn block_after<'a>(text: &'a str, marker: &str) -> (&'a str, &'a str) {
    let start = text
        .find(marker)
        .unwrap_or_else(|| panic!("README.md has no `{marker}` comment"));
    let comment_end = start + text[start..].find("-->").expect("unclosed comment") + 3;
    let rest = text[comment_end..].trim_start();
    assert!(
        rest.starts_with("```"),
        "the `{marker}` comment must be directly followed by a fenced block"
    );
    let body = &rest[rest.find('\n').unwrap() + 1..];
    let end = body.find("\n```").expect("unclosed fenced block") + 1;
    (&body[..end], &body[end + 3..])
}

/// The first fenced block of `text`.
fn first_block(text: &str) -> &str {
    let start = text.find("```").expect("no fenced block");
    let body = &text[start..];
    let body = &body[body.find('\n').unwrap() + 1..];
    &body[..body.find("\n```").expect("unclosed fenced block") + 1]
}

/// The lines of commands (neither blank nor comments) of a shell block.
fn commands(block: &str) -> Vec<&str> {
    block
        .lines()
        .filter(|line| !line.trim().is_empty() && !line.trim_start().starts_with('#'))
        .collect()
}

/// The temporary directory the tour ran in, its output, and its database.
struct Ran {
    dir: tempfile::TempDir,
    output: Output,
    db: PathBuf,
}

impl Ran {
    fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.output.stdout).into_owned()
    }

    /// Run `skein --db DB --json ARGS` and parse its output.
    fn json(&self, args: &[&str]) -> Value {
        Cli::new(crate::BIN, &self.db)
            .config(self.dir.path().join("config.toml"))
            .json(args)
    }

    fn conversation_named(&self, name: &str) -> Value {
        self.json(&["conversations", "-n", "100"])
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == name)
            .unwrap_or_else(|| panic!("no conversation named {name}"))
            .clone()
    }
}

fn run_tour() -> Ran {
    let readme = readme();
    let (script, _) = block_after(&readme, "<!-- tour");
    let dir = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(repository().join("examples"), dir.path().join("examples")).unwrap();
    let tmp = dir.path().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let db_file = dir.path().join("tour-db");
    // After the tour: say which database it made.
    let script = format!("{script}printf '%s' \"$SKEIN_DB\" > \"$TOUR_DB_FILE\"\n");
    std::fs::write(dir.path().join("tour.sh"), script).unwrap();

    let bin = Path::new(crate::BIN);
    let path = std::env::join_paths(std::iter::once(bin.parent().unwrap().to_path_buf()).chain(
        std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()),
    ))
    .unwrap();
    let output = Command::new("bash")
        .args(["-xeuo", "pipefail", "tour.sh"])
        .current_dir(dir.path())
        .env("PATH", path)
        .env("TMPDIR", &tmp)
        .env("TOUR_DB_FILE", &db_file)
        .env("SKEIN_MODEL", "echo")
        .env("SKEIN_CONFIG", dir.path().join("config.toml"))
        .env_remove("SKEIN_DB")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "the README's tour failed ({:?}); its trace:\n{}\nits output:\n{}",
        output.status.code(),
        String::from_utf8_lossy(&output.stderr),
        String::from_utf8_lossy(&output.stdout)
    );
    let db = PathBuf::from(std::fs::read_to_string(&db_file).unwrap());
    assert!(
        db.starts_with(&tmp),
        "the tour's database {} is not a fresh one under TMPDIR",
        db.display()
    );
    Ran { dir, output, db }
}

#[test]
fn the_readme_shows_commands_that_never_end_apart_from_the_tour() {
    let readme = readme();
    let (tour, after) = block_after(&readme, "<!-- tour");
    let tour = commands(tour);
    assert!(
        tour.len() >= 10,
        "the tour block looks truncated: {tour:#?}"
    );
    let never_end = |line: &&str| line.starts_with("skein chat") || line.starts_with("skein serve");
    assert!(
        !tour.iter().any(never_end),
        "the tour test would wait forever: show `skein chat` and `skein serve` in the block after the tour"
    );
    let apart = commands(first_block(after));
    assert!(
        !apart.is_empty() && apart.iter().all(never_end),
        "the block after the tour shows only the commands that never end: {apart:#?}"
    );
}

#[test]
fn the_readme_tour_runs_as_pasted() {
    let ran = run_tour();

    // The continuation, the branch and the fork share the first reply.
    let capitals = ran.conversation_named("capitals");
    let what_if = ran.conversation_named("what-if");
    let paris = &what_if["origin"]["node"];
    assert!(paris.is_string(), "the fork has no origin node: {what_if}");
    let messages = ran.json(&["log", "--cid", capitals["id"].as_str().unwrap()])["messages"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(messages.len(), 5, "capitals: system, France, Italy");
    assert_eq!(&messages[2]["node"], paris);
    let branches: Vec<Value> = ran
        .json(&["conversations", "-n", "100"])
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| &c["origin"]["node"] == paris)
        .cloned()
        .collect();
    assert_eq!(
        branches.len(),
        2,
        "the reply's branch and the fork: {branches:?}"
    );

    // The tree drew the three branches at the first reply.
    let stdout = ran.stdout();
    let short = |id: &Value| id.as_str().unwrap()[..12].to_owned();
    for (head, label) in [(&capitals, " (capitals)"), (&what_if, " (what-if)")] {
        let mark = format!("◀ {}{label}", short(&head["id"]));
        assert!(stdout.contains(&mark), "no `{mark}` in the tree:\n{stdout}");
    }
    assert!(stdout.contains(&format!("{} assistant", short(paris))));
    assert!(stdout.contains("├─") && stdout.contains("└─"), "{stdout}");
    // The search found the question about Germany in its conversation.
    assert!(
        stdout.contains("user\n  And of Germany?"),
        "no search match in:\n{stdout}"
    );

    // The tool loop called the tool and answered with its result.
    let turns = ran.json(&["log", "-n", "100"]);
    let calling = turns
        .as_array()
        .unwrap()
        .iter()
        .find(|turn| turn["run"]["finish_reason"] == "tool_calls")
        .unwrap_or_else(|| {
            let finished: Vec<String> = turns
                .as_array()
                .unwrap()
                .iter()
                .map(|t| format!("{} -> {}", t["prompt"], t["run"]["finish_reason"]))
                .collect();
            panic!("no run called a tool: {finished:#?}")
        });
    assert_eq!(calling["run"]["tools"][0]["name"], "skein_time");
    let conversation = calling["run"]["conversation"].as_str().unwrap();
    let messages = ran.json(&["log", "--cid", conversation])["messages"].clone();
    let parts = |i: usize| messages[i]["parts"].as_array().unwrap().clone();
    let roles: Vec<&str> = messages
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["user", "assistant", "tool", "assistant"]);
    let call = parts(1)
        .into_iter()
        .find(|p| p["type"] == "tool_call")
        .expect("the model's first call asks for the tool");
    assert_eq!(call["name"], "skein_time");
    let result = &parts(2)[0];
    assert_eq!(result["type"], "tool_result");
    assert_eq!(result["call_id"], call["id"]);
    assert_eq!(result["is_error"], false);
    let time = result["content"].as_str().unwrap();
    let answer = format!("It is {time}.");
    assert_eq!(parts(3)[0]["text"], answer.as_str());
    assert!(
        stdout.contains(&format!("Let me check the clock.\n{answer}\n")),
        "each model call's text on its own line:\n{stdout}"
    );

    // The export holds everything; verify found nothing wrong.
    let export = std::fs::read_to_string(ran.dir.path().join("backup.jsonl")).unwrap();
    assert!(export.lines().count() > 10, "{export}");
    assert!(stdout.contains("all consistent"), "{stdout}");
}

#[test]
fn the_readme_shows_the_rules_of_the_tours_scripted_model() {
    let readme = readme();
    let (shown, _) = block_after(&readme, "<!-- examples/tools.toml");
    let file = std::fs::read_to_string(repository().join("examples/tools.toml")).unwrap();
    assert!(
        file.contains(shown),
        "README.md's rules differ from examples/tools.toml:\n{shown}"
    );
}
