//! The `skein` binary against PostgreSQL: `--db` and `SKEIN_DB` take a
//! `postgres://` URL, and a graph exported from SQLite imports into
//! PostgreSQL and back with identical ids; three `skein replay` workers
//! share one replay. Runs against the server
//! `SKEIN_TEST_POSTGRES` names (each test in a schema of its own); when that
//! is unset the tests say they were skipped and pass.

#![cfg(feature = "postgres")]

use serde_json::Value;
use skein::store::scratch::ScratchSchema;
use skein_testkit::Cli;
use std::io::Write as _;
use std::path::Path;
use std::process::Output;

pub(crate) fn server(test: &str) -> Option<String> {
    let url = std::env::var("SKEIN_TEST_POSTGRES")
        .ok()
        .filter(|url| !url.is_empty());
    if url.is_none() {
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED {test}: set SKEIN_TEST_POSTGRES=postgres://... to run it"
        );
    }
    url
}

/// A schema of its own on the server `SKEIN_TEST_POSTGRES` names, for the
/// test `test` (dropped with it); `None`, said on stderr, when unset.
pub(crate) fn scratch(test: &str) -> Option<ScratchSchema> {
    server(test).map(|base| ScratchSchema::create(&base).unwrap())
}

/// The binary on the database `db` (a path or a URL), with a configuration
/// file of its own.
fn cli(db: &str) -> Cli {
    Cli::temp(crate::BIN).on(db)
}

/// Run it with the database given with `--db`, or through `SKEIN_DB` when
/// `via_env`.
fn skein(db: &str, via_env: bool, args: &[&str]) -> Output {
    let cli = cli(db);
    if via_env { cli.db_in_env() } else { cli }.run(args)
}

fn ok(db: &str, args: &[&str]) -> String {
    cli(db).ok(args)
}

fn json(db: &str, args: &[&str]) -> Value {
    cli(db).json(args)
}

fn path(dir: &Path, name: &str) -> String {
    dir.join(name).display().to_string()
}

#[test]
fn export_from_sqlite_imports_into_postgres_and_back_with_identical_ids() {
    let Some(base) = server("export_from_sqlite_imports_into_postgres_and_back_with_identical_ids")
    else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let sqlite = path(dir.path(), "source.db");
    let first = json(&sqlite, &["prompt", "-s", "sys", "one"]);
    json(&sqlite, &["prompt", "-c", "two"]);
    json(
        &sqlite,
        &["fork", first["node"].as_str().unwrap(), "branch"],
    );
    let export = path(dir.path(), "source.jsonl");
    ok(&sqlite, &["export", "-o", &export]);

    let schema = ScratchSchema::create(&base).unwrap();
    let postgres = schema.url();
    let nodes = std::fs::read_to_string(&export)
        .unwrap()
        .lines()
        .filter(|line| line.contains(r#""kind":"node""#))
        .count();
    assert!(nodes >= 6, "system, two turns and a forked turn");
    let report = json(postgres, &["import", &export]);
    assert_eq!(report["nodes_written"], nodes);
    assert_eq!(report["conversations"], 2);
    ok(postgres, &["verify"]);
    let from_postgres = ok(postgres, &["export"]);
    assert_eq!(
        from_postgres,
        std::fs::read_to_string(&export).unwrap(),
        "PostgreSQL exports the very file SQLite wrote: same ids, same records"
    );
    // The same database through SKEIN_DB, and short ids resolve there too.
    let node = &first["node"].as_str().unwrap()[..10];
    let shown = skein(postgres, true, &["--json", "show", node]);
    assert!(
        shown.status.success(),
        "{}",
        String::from_utf8_lossy(&shown.stderr)
    );

    let back_file = path(dir.path(), "back.jsonl");
    std::fs::write(&back_file, &from_postgres).unwrap();
    let back = path(dir.path(), "back.db");
    json(&back, &["import", &back_file]);
    assert_eq!(ok(&back, &["export"]), from_postgres);
}

#[test]
fn an_unreachable_server_is_a_clear_error_without_the_password() {
    let output = skein(
        "postgres://skein:hunter2@127.0.0.1:1/skein",
        false,
        &["log"],
    );
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("cannot reach the PostgreSQL server"),
        "{stderr}"
    );
    assert!(!stderr.contains("hunter2"), "{stderr}");
}

/// The landing rule on PostgreSQL: turns that lose the race for a head
/// land in branches, and a fork whose first turn fails leaves no
/// conversation (the SQLite tests' bodies, in `commands.rs`).
#[test]
fn the_landing_rule_holds_on_postgres() {
    let Some(base) = server("the_landing_rule_holds_on_postgres") else {
        return;
    };
    for body in [
        crate::commands::turns_that_lose_the_race_land_in_branches,
        crate::commands::failed_first_turns_leave_no_conversation,
    ] {
        let schema = ScratchSchema::create(&base).unwrap();
        body(&cli(schema.url()));
    }
}

/// Three `skein replay --resume` processes share one replay of 300 turns
/// on PostgreSQL; one is killed midway. The others take over its turns
/// once its lease passes, and every turn is replayed exactly once.
#[test]
fn three_replay_workers_share_a_replay_and_survive_one_killed() {
    let Some(base) = server("three_replay_workers_share_a_replay_and_survive_one_killed") else {
        return;
    };
    let schema = ScratchSchema::create(&base).unwrap();
    let url = schema.url().to_string();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let store = skein::Store::open(&url).unwrap();
    let id = runtime.block_on(async {
        use skein::recorded::replay::{ReplayPlan, Replayer, Selection};
        let echo = skein::Model::open("echo").unwrap();
        let mut selection = Selection::new();
        for c in 0..10 {
            let conversation = skein::Conversation::builder(echo.clone())
                .store(&store)
                .build();
            for t in 0..30 {
                conversation
                    .prompt(format!("conversation {c}, question {t}"))
                    .send()
                    .await
                    .unwrap();
            }
            selection = selection.conversation(conversation.id().clone());
        }
        Replayer::new(&store, echo)
            .start(&selection, &ReplayPlan::new("echo"))
            .await
            .unwrap()
    });
    let worker = || {
        cli(&url)
            .command(&[
                "replay",
                "--resume",
                id.as_str(),
                "--lease",
                "2",
                "--format",
                "json",
            ])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let mut doomed = worker();
    let survivors = [worker(), worker()];
    // Killed once the workers are under way.
    while store.replay_totals(&id).unwrap().done < 10 {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    doomed.kill().unwrap();
    doomed.wait().unwrap();
    for survivor in survivors {
        let output = survivor.wait_with_output().unwrap();
        assert_eq!(
            output.status.code(),
            Some(0),
            "every echo turn holds: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let totals = store.replay_totals(&id).unwrap();
    assert_eq!((totals.done, totals.held), (300, 300));
    let turns = store.replay_turns(&id, None, 1000).unwrap();
    let listed: usize = turns.iter().map(|turn| turn.runs.len()).sum();
    let recorded = store
        .recent_runs(100_000)
        .unwrap()
        .into_iter()
        .filter(|run| {
            run.relations
                .contains(&skein::store::Relation::Replay(id.clone()))
        })
        .count();
    assert_eq!(listed, 300, "one model call per turn");
    assert_eq!(recorded, 300, "no turn recorded twice, none half");
    assert!(store.verify().unwrap().is_ok());
}
