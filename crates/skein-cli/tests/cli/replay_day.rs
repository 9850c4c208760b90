//! The acceptance test of replay as a daily workflow (issue 44), on
//! SQLite through the command line: a user records turns (a named family
//! on scripted models, and a day's traffic on echo), replays the family on
//! two models, starts a replay of the day with its output redirected and
//! kills it, finds it again (on stderr, where its id is said at start, and
//! in `skein replays`), resumes it, reads a report with the questions,
//! labels the regressions, exports them as cases and replays the cases in
//! a fresh database; `skein log` shows only the user's own turns
//! throughout.

use crate::replay_models::{desk, scripted};
use serde_json::Value;
use skein_testkit::Cli;
use skein_testkit::cli::stderr;
use std::collections::BTreeSet;
use std::process::Stdio;
use std::time::{Duration, Instant};

/// How long a poll waits for the replay to move before failing.
const WAIT: Duration = Duration::from_secs(120);

/// Conversations and turns of the day's traffic: enough that a replay of
/// it on one worker is still running when the listing first shows a turn
/// done.
const CONVERSATIONS: usize = 20;
const TURNS: usize = 20;

#[test]
fn a_users_day_of_replays_keeps_log_to_their_own_turns() {
    let skein = Cli::temp(crate::BIN);
    // Record: the desk family on scripted models, then the day's traffic.
    desk(&skein);
    let desk_runs = own_turns(&skein).len();
    record_traffic(&skein);
    let own = own_turns(&skein);
    assert_eq!(own.len(), desk_runs + CONVERSATIONS * TURNS);

    // Replay the family on two models: one report, a row per turn and model.
    let candidates = [scripted("replay.toml"), "echo".to_string()];
    let family = skein.run(&[
        "replay",
        "--family",
        "desk",
        "-m",
        &candidates[0],
        "-m",
        &candidates[1],
        "--compare",
        "exact",
        "--json",
    ]);
    assert_eq!(family.status.code(), Some(7), "{}", stderr(&family));
    let family: Value = serde_json::from_slice(&family.stdout).unwrap();
    assert_eq!(family["selected"], 6, "3 turns × 2 models");
    let family_id = family["replay"].as_str().unwrap().to_string();
    assert_eq!(own_turns(&skein), own, "a replay adds nothing to log");

    // A replay of the day, its output redirected, killed mid-way.
    let out = skein.dir().join("replay.out");
    let err = skein.dir().join("replay.err");
    let mut worker = skein
        .command(&[
            "replay",
            "--since",
            "1d",
            "-m",
            "echo",
            "--concurrency",
            "1",
            "--lease",
            "1",
        ])
        .stdout(Stdio::from(std::fs::File::create(&out).unwrap()))
        .stderr(Stdio::from(std::fs::File::create(&err).unwrap()))
        .spawn()
        .unwrap();
    let day = poll(|| {
        let listed = skein.json(&["replays", "--json"]);
        listed["replays"]
            .as_array()
            .unwrap()
            .iter()
            .find(|row| row["replay"] != family_id.as_str())
            .filter(|row| finished(row) > 0)
            .cloned()
    });
    worker.kill().unwrap();
    worker.wait().unwrap();
    let day_id = day["replay"].as_str().unwrap().to_string();
    let selected = day["selected"].as_u64().unwrap();
    assert_eq!(selected, 3 + (CONVERSATIONS * TURNS) as u64, "{day}");
    assert!(
        finished(&day) < selected,
        "killed mid-way, not after the last turn: {day}"
    );

    // Its id is on stderr, said at start, with the command that resumes it.
    let said = std::fs::read_to_string(&err).unwrap();
    let resume = format!("skein replay --resume {}", &day_id[..12]);
    assert!(said.contains(&day_id[..12]), "{said}");
    assert!(said.contains(&resume), "{said}");
    // And the listing says it stopped once its worker's lease has passed.
    let stopped = poll(|| {
        let listed = skein.json(&["replays", "--json"]);
        listed["replays"]
            .as_array()
            .unwrap()
            .iter()
            .find(|row| row["replay"] == day_id.as_str())
            .filter(|row| row["state"] == "stopped")
            .cloned()
    });
    assert!(finished(&stopped) < selected, "{stopped}");
    let text = skein.ok(&["replays"]);
    assert!(
        text.contains(&resume),
        "the listing names the resume: {text}"
    );
    assert_eq!(
        own_turns(&skein),
        own,
        "a killed replay adds nothing to log"
    );

    // Resume it: every turn replayed, once.
    let resumed = skein.run(&["replay", "--resume", &day_id[..12], "--json"]);
    assert!(
        matches!(resumed.status.code(), Some(0 | 7)),
        "{}",
        stderr(&resumed)
    );
    let resumed: Value = serde_json::from_slice(&resumed.stdout).unwrap();
    assert_eq!(resumed["state"], "finished", "{}", resumed["totals"]);
    assert_eq!(finished(&resumed), selected);
    let turns = resumed["turns"].as_array().unwrap();
    let once: BTreeSet<&str> = turns
        .iter()
        .map(|turn| turn["turn_node"].as_str().unwrap())
        .collect();
    assert_eq!(once.len() as u64, selected, "each turn once");
    assert_eq!(turns.len() as u64, selected);
    assert_eq!(
        own_turns(&skein),
        own,
        "a resumed replay adds nothing to log"
    );

    // Read the family's report again: each turn names its question.
    let report = skein.run(&["replays", "show", &family_id[..12]]);
    assert_eq!(report.status.code(), Some(7), "{}", stderr(&report));
    let report = String::from_utf8(report.stdout).unwrap();
    for question in ["which version?", "what time is it?", "the price?"] {
        assert!(
            report.contains(&format!("question: {question}")),
            "{report}"
        );
    }
    assert!(report.contains("desk"), "the conversation's name: {report}");

    // Label its regressions, export them as cases.
    let changed: BTreeSet<&str> = family["turns"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|turn| turn["result"] == "changed")
        .map(|turn| turn["turn_node"].as_str().unwrap())
        .collect();
    assert!(!changed.is_empty(), "echo answers otherwise: {family}");
    skein.ok(&[
        "label",
        "add",
        "regressions",
        "--replay",
        &family_id,
        "--result",
        "changed",
    ]);
    let labelled = skein.json(&["label", "list", "--json"]);
    assert!(
        labelled
            .as_array()
            .unwrap()
            .iter()
            .any(|label| label["name"] == "regressions" && label["nodes"] == changed.len()),
        "{labelled}"
    );
    let cases = skein.dir().join("regressions.jsonl");
    skein.ok(&[
        "label",
        "export",
        "regressions",
        "--compare",
        "exact",
        "-o",
        cases.to_str().unwrap(),
    ]);
    let lines = std::fs::read_to_string(&cases).unwrap();
    assert_eq!(lines.lines().count(), changed.len(), "{lines}");

    // Replay the cases elsewhere: a fresh database, its log left alone.
    let elsewhere = Cli::temp(crate::BIN);
    let fresh = elsewhere.dir().join("fresh.toml");
    std::fs::write(&fresh, "[[rules]]\nreply = \"A fresh answer.\"\n").unwrap();
    let fresh = format!("scripted:{}", fresh.display());
    let replayed = elsewhere.run(&[
        "replay",
        "--cases",
        cases.to_str().unwrap(),
        "-m",
        &fresh,
        "--json",
    ]);
    assert_eq!(replayed.status.code(), Some(7), "{}", stderr(&replayed));
    let replayed: Value = serde_json::from_slice(&replayed.stdout).unwrap();
    assert_eq!(replayed["selected"].as_u64(), Some(changed.len() as u64));
    let log = elsewhere.ok(&["log", "-n", "0"]);
    assert!(!log.contains("A fresh answer."), "{log}");
    assert_eq!(own_turns(&skein), own, "and nothing changed at home");
}

/// The day's traffic: conversations of questions on echo, recorded through
/// the library into the test's database.
fn record_traffic(skein: &Cli) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let store = skein::Store::open(skein.db()).unwrap();
    runtime.block_on(async {
        let echo = skein::Model::open("echo").unwrap();
        for c in 0..CONVERSATIONS {
            let conversation = skein::Conversation::builder(echo.clone())
                .store(&store)
                .build();
            for t in 0..TURNS {
                conversation
                    .prompt(format!("customer {c}, question {t}"))
                    .send()
                    .await
                    .unwrap();
            }
        }
    });
}

/// The runs `skein log` shows, every one.
fn own_turns(skein: &Cli) -> BTreeSet<String> {
    skein
        .json(&["log", "-n", "0", "--json"])
        .as_array()
        .unwrap()
        .iter()
        .map(|row| row["run"]["id"].as_str().unwrap().to_string())
        .collect()
}

/// A listed replay's turns finished, whatever their result.
fn finished(replay: &Value) -> u64 {
    let totals = &replay["totals"];
    ["held", "changed", "diverged", "failed"]
        .iter()
        .map(|key| totals[key].as_u64().unwrap_or(0))
        .sum()
}

/// `probe` until it finds something, up to [`WAIT`].
fn poll<T>(mut probe: impl FnMut() -> Option<T>) -> T {
    let started = Instant::now();
    loop {
        if let Some(found) = probe() {
            return found;
        }
        assert!(started.elapsed() < WAIT, "waited {WAIT:?} in vain");
        std::thread::sleep(Duration::from_millis(20));
    }
}
