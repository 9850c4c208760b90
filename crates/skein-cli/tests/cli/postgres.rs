//! The `skein` binary against PostgreSQL: `--db` and `SKEIN_DB` take a
//! `postgres://` URL, and a graph exported from SQLite imports into
//! PostgreSQL and back with identical ids. Runs against the server
//! `SKEIN_TEST_POSTGRES` names (each test in a schema of its own); when that
//! is unset the tests say they were skipped and pass.

#![cfg(feature = "postgres")]

use serde_json::Value;
use skein::store::scratch::ScratchSchema;
use skein_testkit::Cli;
use std::io::Write as _;
use std::path::Path;
use std::process::Output;

fn server(test: &str) -> Option<String> {
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
