/*!
The README's tour, run as pasted, so it cannot rot.

The shell block after the `<!-- tour` comment in README.md runs under
`bash -euo pipefail` (and `-x`, so a failure shows the trace) in a
temporary directory standing for the checkout (it holds a link to
`examples/`; the tour runs from the repository's root), with this build of
`skein` first on `PATH`, the embedded model as the default (greedy, so the
node ids and texts the README shows are the ones printed; the tour's tool
step names its scripted model itself) and `TMPDIR` inside the directory
(the tour's `mktemp -d` database lands there). Commands that never end by
themselves (`skein chat`, `skein serve`) are shown in a block of their own
after the tour, which the test does not run (pasted after other commands,
`skein chat` would read them as its input).

Then: every line the README shows under a command (`#   …`, `(on stderr)`
for stderr) is printed, in that order, conversation and run ids, times and
temporary paths aside (they differ on every run); the records the tour left
are checked (the tool loop called the tool, the fork and the branch exist,
the tree shows them); and the tour left nothing in the checkout.
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
        .env_remove("SKEIN_MODEL")
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

/// Which stream a line the README shows is printed on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stream {
    Stdout,
    Stderr,
}

/// The lines the tour block shows under its commands (`#   …`), with the
/// stream each is printed on; `#   (…)` lines explain and are skipped.
fn shown_output(block: &str) -> Vec<(Stream, String)> {
    block
        .lines()
        .filter_map(|line| line.strip_prefix("#   "))
        .filter(|line| !line.starts_with('('))
        .map(|line| match line.trim_end().strip_suffix("(on stderr)") {
            Some(line) => (Stream::Stderr, line.trim_end().to_string()),
            None => (Stream::Stdout, line.trim_end().to_string()),
        })
        .collect()
}

/// `line` with what differs on every run masked: the ids of
/// conversations and runs (random), times, and temporary paths.
fn masked(line: &str) -> String {
    let mut previous = "";
    let words: Vec<String> = line
        .split(' ')
        .map(|word| {
            let random_id = word.len() == 12
                && word.bytes().all(|b| b.is_ascii_hexdigit())
                && matches!(previous, "conversation" | "run" | "◀" | "of");
            if !word.is_empty() {
                previous = word;
            }
            if random_id {
                "ID".to_string()
            } else if word.starts_with('/') {
                format!("PATH/{}", word.rsplit('/').next().unwrap_or_default())
            } else {
                masked_times(word)
            }
        })
        .collect();
    words.join(" ")
}

/// `word` with each `YYYY-MM-DDTHH:MM:SSZ` replaced by `TIME`.
fn masked_times(word: &str) -> String {
    const SHAPE: &[u8] = b"dddd-dd-ddTdd:dd:ddZ";
    let bytes = word.as_bytes();
    let fits = |at: usize| {
        bytes.len() >= at + SHAPE.len()
            && SHAPE
                .iter()
                .zip(&bytes[at..])
                .all(|(shape, byte)| match shape {
                    b'd' => byte.is_ascii_digit(),
                    other => other == byte,
                })
    };
    match (0..bytes.len()).find(|at| fits(*at)) {
        Some(at) => format!(
            "{}TIME{}",
            &word[..at],
            masked_times(&word[at + SHAPE.len()..])
        ),
        None => word.to_string(),
    }
}

/// Every line of `shown` is a line of what `output` printed on its
/// stream, in the order shown.
fn assert_prints_what_it_shows(shown: &[(Stream, String)], output: &Output) {
    let lines = |bytes: &[u8]| -> Vec<String> {
        String::from_utf8_lossy(bytes).lines().map(masked).collect()
    };
    let (stdout, stderr) = (lines(&output.stdout), lines(&output.stderr));
    let mut next = [0usize, 0usize];
    for (stream, line) in shown {
        let (printed, cursor) = match stream {
            Stream::Stdout => (&stdout, &mut next[0]),
            Stream::Stderr => (&stderr, &mut next[1]),
        };
        let wanted = masked(line);
        match printed[*cursor..]
            .iter()
            .position(|printed| *printed == wanted)
        {
            Some(found) => *cursor += found + 1,
            None => panic!(
                "README.md shows `{line}` on {stream:?}, but the tour printed, from there on:\n{}",
                printed[*cursor..].join("\n")
            ),
        }
    }
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

    // It prints what the README shows, ids and order included.
    let readme = readme();
    let shown = shown_output(block_after(&readme, "<!-- tour").0);
    assert!(shown.len() >= 15, "the tour shows its output: {shown:?}");
    assert_prints_what_it_shows(&shown, &ran.output);

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

    // The export holds everything, beside the database; verify found
    // nothing wrong.
    let export = std::fs::read_to_string(ran.db.with_extension("jsonl")).unwrap();
    assert!(export.lines().count() > 10, "{export}");
    assert!(stdout.contains("all consistent"), "{stdout}");

    // The checkout holds what it held (and the test's own files): the
    // tour wrote only under TMPDIR.
    let mut left: Vec<String> = std::fs::read_dir(ran.dir.path())
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, ["examples", "tmp", "tour-db", "tour.sh"]);
}

#[test]
fn printed_lines_are_compared_with_what_differs_on_every_run_masked() {
    assert_eq!(
        masked("conversation aefa0f97f466 · node 5d19682a6757 · run a1086b967600"),
        "conversation ID · node 5d19682a6757 · run ID"
    );
    assert_eq!(
        masked(
            "│  5d19682a6757 assistant Rome.  ◀ aefa0f97f466 (capitals) [fork of 6525362eb3f5 at 3e1b8fc1a51d]"
        ),
        "│  5d19682a6757 assistant Rome.  ◀ ID (capitals) [fork of ID at 3e1b8fc1a51d]"
    );
    assert_eq!(
        masked("[tool skein_time({}) -> 2026-12-01T05:04:48Z] It is 2026-12-01T05:04:49Z."),
        "[tool skein_time({}) -> TIME] It is TIME."
    );
    assert_eq!(
        masked("exported to /tmp/tmp.AbC/tour.jsonl"),
        "exported to PATH/tour.jsonl"
    );
    // A node id after `node` stays, so a wrong one is caught.
    assert_ne!(masked("node 5d19682a6757"), masked("node 000000000000"));
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
