//! The replay selection table: one row per way of choosing turns
//! (`NODE`, `--cid`, `--family`, `--label`, `--cases`, each filter alone,
//! and combinations; `tests/data/replay_selections.json`), one column per
//! surface that starts a replay (the command line's `skein replay --json`
//! and the web API's `POST /api/replays`, then its report), in the
//! conformance table's style. The Python package runs the same rows from
//! the same file in `crates/skein-py/tests/test_replay_selection.py`.
//!
//! Each cell replays its selection on the echo model on one shared
//! database (SQLite, then PostgreSQL when `SKEIN_TEST_POSTGRES` names a
//! server) and must select exactly the row's turns, each once (by their
//! questions), or refuse the selection when the row says nothing is
//! selected; every surface of a row must select the very same turns (by
//! their answers' nodes). The web API takes a cases file's lines
//! themselves (`cases`), the other surfaces its path.
//!
//! The fixture is made through the command line on a scratch database,
//! exported, and imported into the table's: the export is where the two
//! runs the filters need are set apart (`gamma`'s run recorded for the
//! proxy client `checkout`, as the recording proxy records one; `old`'s
//! run started in 2020), since no surface makes a turn in the past.

use crate::serve::Server;
use serde_json::{Value, json};
use skein_testkit::Cli;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// What a surface did with a row's selection.
#[derive(Debug, PartialEq, Eq)]
enum Selected {
    /// The replay ran on these turns: (question, answer node), in the
    /// order its report lists them.
    Turns(Vec<(String, String)>),
    /// Refused before anything was stored.
    Refused,
}

/// A surface that starts replays.
trait Surface {
    fn name(&self) -> &'static str;
    fn replay(&self, place: &Place, select: &Value) -> Selected;
}

/// The rows, as the data file holds them.
fn rows() -> Vec<Value> {
    let path = crate::conformance::data("replay_selections.json");
    let table: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    table["rows"].as_array().unwrap().clone()
}

/// The table's database, served, with its fixture.
struct Place {
    cli: Cli,
    server: Server,
    runtime: tokio::runtime::Runtime,
    /// Each turn's answer node, by its question.
    answers: BTreeMap<String, String>,
    /// Cases files, by the label exported.
    cases: BTreeMap<String, PathBuf>,
}

/// When the `old` conversation's run started: 2020-06-01, UTC.
const OLD_MS: i64 = 1_590_969_600_000;

impl Place {
    fn open(db: &str, cli: Cli) -> Place {
        let answers = fixture(&cli);
        cli.ok(&[
            "label",
            "add",
            "hot",
            &answers["apple two"],
            &answers["cherry four"],
        ]);
        let file = cli.dir().join("hot.jsonl");
        cli.ok(&["label", "export", "hot", "-o", file.to_str().unwrap()]);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let server = Server::start(Path::new(db), &["-m", "echo"]);
        Place {
            cli,
            server,
            runtime,
            answers,
            cases: BTreeMap::from([("hot".to_string(), file)]),
        }
    }

    /// The answer node of the turn asking `question`.
    fn answer(&self, question: &str) -> &str {
        self.answers
            .get(question)
            .unwrap_or_else(|| panic!("the fixture has no turn asking {question:?}"))
    }
}

/// Make the fixture's conversations on a scratch database, set its two
/// runs apart in the export, and import it into `cli`'s database: each
/// turn's answer node by its question.
fn fixture(cli: &Cli) -> BTreeMap<String, String> {
    let maker = Cli::temp(crate::BIN);
    let mut answers = BTreeMap::new();
    let mut said = |args: &[&str], question: &str| -> Value {
        let done = maker.json(args);
        answers.insert(
            question.to_string(),
            done["node"].as_str().unwrap().to_string(),
        );
        done
    };
    let first = said(&["prompt", "--name", "alpha", "apple one"], "apple one");
    said(&["prompt", "--cid", "alpha", "apple two"], "apple two");
    let first_answer = first["node"].as_str().unwrap().to_string();
    said(
        &["fork", &first_answer, "--name", "beta", "banana three"],
        "banana three",
    );
    let gamma = said(&["prompt", "--name", "gamma", "cherry four"], "cherry four");
    let old = said(&["prompt", "--name", "old", "damson five"], "damson five");
    let (gamma, old) = (&gamma["conversation"], &old["conversation"]);
    let mut lines = Vec::new();
    for line in maker.ok(&["export"]).lines() {
        let mut record: Value = serde_json::from_str(line).unwrap();
        if record["kind"] == "run" && record["conversation"] == *gamma {
            record["client"] = json!("checkout");
        }
        if record["kind"] == "run" && record["conversation"] == *old {
            record["started_ms"] = json!(OLD_MS);
            record["finished_ms"] = json!(OLD_MS + 5);
        }
        lines.push(record.to_string());
    }
    let file = cli.dir().join("fixture.jsonl");
    std::fs::write(&file, lines.join("\n") + "\n").unwrap();
    cli.ok(&["import", file.to_str().unwrap()]);
    answers
}

/// A UTC day, `YYYY-MM-DD`, as Unix milliseconds.
fn day_ms(day: &str) -> i64 {
    let parts: Vec<i64> = day.split('-').map(|n| n.parse().unwrap()).collect();
    skein::core::calendar::days_from_civil(parts[0], parts[1], parts[2]) * 86_400_000
}

fn strings(value: &Value) -> Vec<&str> {
    value
        .as_array()
        .map(|items| items.iter().map(|item| item.as_str().unwrap()).collect())
        .unwrap_or_default()
}

/// The turns of a report (`skein replay --json`'s or the web API's).
fn turns_of(report: &Value) -> Vec<(String, String)> {
    report["turns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|turn| {
            (
                turn["question"].as_str().unwrap().to_string(),
                turn["turn_node"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// `skein replay ... -m echo --json`.
struct CommandLine;

impl Surface for CommandLine {
    fn name(&self) -> &'static str {
        "skein replay"
    }

    fn replay(&self, place: &Place, select: &Value) -> Selected {
        let mut args: Vec<String> = vec!["--json".into(), "replay".into()];
        for question in strings(&select["turns"]) {
            args.push(place.answer(question).to_string());
        }
        for (key, flag) in [
            ("conversations", "--cid"),
            ("families", "--family"),
            ("labels", "--label"),
            ("clients", "--client"),
        ] {
            for value in strings(&select[key]) {
                args.extend([flag.to_string(), value.to_string()]);
            }
        }
        if let Some(label) = select["cases"].as_str() {
            args.extend(["--cases".into(), place.cases[label].display().to_string()]);
        }
        for key in ["search", "since", "until"] {
            if let Some(value) = select[key].as_str() {
                args.extend([format!("--{key}"), value.to_string()]);
            }
        }
        args.extend(["-m", "echo", "--compare", "exact"].map(String::from));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let done = place.cli.run(&args);
        let said = String::from_utf8_lossy(&done.stdout);
        match done.status.code() {
            Some(0 | 7) => Selected::Turns(turns_of(&serde_json::from_str(&said).unwrap())),
            Some(2) => Selected::Refused,
            code => panic!(
                "skein replay exited {code:?}: {said}{}",
                skein_testkit::cli::stderr(&done)
            ),
        }
    }
}

/// `POST /api/replays` (with the session's CSRF token; a cases file's
/// lines as `cases`), then the replay's report once every turn is
/// finished.
struct WebApi;

impl Surface for WebApi {
    fn name(&self) -> &'static str {
        "POST /api/replays"
    }

    fn replay(&self, place: &Place, select: &Value) -> Selected {
        let mut body = json!({ "model": "echo", "compare": ["exact"] });
        // The cases file's lines themselves: a path on the server's disk is
        // not a web client's to name.
        if let Some(label) = select["cases"].as_str() {
            body["cases"] = json!(std::fs::read_to_string(&place.cases[label]).unwrap());
        }
        body["turns"] = json!(
            strings(&select["turns"])
                .into_iter()
                .map(|question| place.answer(question))
                .collect::<Vec<_>>()
        );
        for key in ["conversations", "families", "labels", "clients", "search"] {
            if let Some(value) = select.get(key) {
                body[key] = value.clone();
            }
        }
        for key in ["since", "until"] {
            if let Some(day) = select[key].as_str() {
                body[format!("{key}_ms")] = json!(day_ms(day));
            }
        }
        let base = place.server.base();
        place.runtime.block_on(web_replay(base, body))
    }
}

async fn web_replay(base: String, body: Value) -> Selected {
    let client = client();
    let session: Value = client
        .get(format!("{base}/api/session"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let response = client
        .post(format!("{base}/api/replays"))
        .header("x-skein-csrf", session["csrf"].as_str().unwrap())
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    match status {
        202 => {}
        400 => return Selected::Refused,
        status => panic!("POST /api/replays answered {status}: {text}"),
    }
    let started: Value = serde_json::from_str(&text).unwrap();
    let id = started["id"].as_str().unwrap();
    // Polled until the server's worker is done (not timed: a slow machine
    // only polls longer).
    loop {
        let progress: Value = get(&client, &format!("{base}/api/replays/{id}/progress")).await;
        if progress["state"] == "finished" && progress["working"] == false {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let report = get(&client, &format!("{base}/api/replays/{id}")).await;
    Selected::Turns(turns_of(&report))
}

/// An HTTP client for the local server.
fn client() -> reqwest::Client {
    skein::providers::http::install_crypto_provider();
    reqwest::Client::builder().no_proxy().build().unwrap()
}

async fn get(client: &reqwest::Client, url: &str) -> Value {
    let response = client.get(url).send().await.unwrap();
    assert_eq!(response.status().as_u16(), 200, "GET {url}");
    response.json().await.unwrap()
}

/// Run every row on every surface on `place`. A cell that does not select
/// the row's turns does not stop the others: the test fails naming each.
fn run_table(place: &Place) {
    let surfaces: [&dyn Surface; 2] = [&CommandLine, &WebApi];
    let mut failures = Vec::new();
    for row in rows() {
        let name = row["name"].as_str().unwrap();
        let expect: Option<Vec<String>> = row["expect"].as_array().map(|questions| {
            let mut questions: Vec<String> = questions
                .iter()
                .map(|q| q.as_str().unwrap().to_string())
                .collect();
            questions.sort();
            questions
        });
        // The answers the first surface selected, which every other must
        // select too.
        let mut agreed: Option<(&str, BTreeSet<String>)> = None;
        for surface in surfaces {
            let cell = format!("{name} on {}", surface.name());
            let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                surface.replay(place, &row["select"])
            }));
            let selected = match ran {
                Ok(selected) => selected,
                Err(panic) => {
                    failures.push(format!("{cell}: {}", panic_message(&panic)));
                    continue;
                }
            };
            let turns = match (selected, &expect) {
                (Selected::Refused, None) => continue,
                (Selected::Refused, Some(expect)) => {
                    failures.push(format!("{cell}: refused, but selects {expect:?}"));
                    continue;
                }
                (Selected::Turns(turns), None) => {
                    failures.push(format!("{cell}: selected {turns:?}, but must be refused"));
                    continue;
                }
                (Selected::Turns(turns), Some(_)) => turns,
            };
            let mut questions: Vec<String> = turns.iter().map(|(q, _)| q.clone()).collect();
            questions.sort();
            if Some(&questions) != expect.as_ref() {
                failures.push(format!(
                    "{cell}: selected {questions:?}, not {:?}",
                    expect.as_ref().unwrap()
                ));
                continue;
            }
            let nodes: BTreeSet<String> = turns.into_iter().map(|(_, node)| node).collect();
            match &agreed {
                None => agreed = Some((surface.name(), nodes)),
                Some((first, theirs)) if *theirs != nodes => failures.push(format!(
                    "{cell}: selected the answers {nodes:?}, {first} {theirs:?}"
                )),
                Some(_) => {}
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} cells do not select their row's turns:\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|text| text.to_string()))
        .unwrap_or_else(|| "a panic without a message".into())
}

#[test]
fn every_selection_selects_the_same_turns_on_every_surface_on_sqlite() {
    let cli = Cli::temp(crate::BIN);
    let db = cli.db().display().to_string();
    run_table(&Place::open(&db, cli));
}

#[cfg(feature = "postgres")]
#[test]
fn every_selection_selects_the_same_turns_on_every_surface_on_postgres() {
    let Some(schema) = crate::postgres::scratch(
        "every_selection_selects_the_same_turns_on_every_surface_on_postgres",
    ) else {
        return;
    };
    let cli = Cli::temp(crate::BIN).on(schema.url());
    run_table(&Place::open(schema.url(), cli));
}
