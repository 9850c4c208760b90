//! `skein replay -m A -m B -m C`: one replay comparing candidate models,
//! each turn replayed once on each; its one report as text (per turn a row
//! per model, worst first; per model its totals), JSON (`models`,
//! `model_totals`, a row per turn and model) and JUnit (a suite per
//! model); `skein usage --replay` splits it per model; `skein replays` lists it as `× 3 models` and shows it again;
//! `--resume` opens every candidate and finishes the turns a killed worker
//! left, each turn once per model. The report's test runs on SQLite, then
//! PostgreSQL when `SKEIN_TEST_POSTGRES` names a server.

use serde_json::Value;
use skein_testkit::Cli;
use skein_testkit::cli::stderr;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Stdio;

pub(crate) fn scripted(file: &str) -> String {
    format!(
        "scripted:{}",
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data")
            .join(file)
            .display()
    )
}

/// The version, the time and the price asked on `tools.toml` (its
/// `skein_version` tool offered): the turns `replay.toml` and echo are
/// compared on with the original model.
pub(crate) fn desk(skein: &Cli) -> String {
    let first = skein.json(&[
        "prompt",
        "--name",
        "desk",
        "-m",
        &scripted("tools.toml"),
        "-T",
        "skein_version",
        "which version?",
    ]);
    skein.json(&["prompt", "-c", "what time is it?"]);
    skein.json(&["prompt", "-c", "the price?"]);
    first["conversation"].as_str().unwrap().to_string()
}

#[test]
fn a_replay_compares_three_models_in_one_report_on_sqlite() {
    three_models_in_one_report(&Cli::temp(crate::BIN));
}

#[cfg(feature = "postgres")]
#[test]
fn a_replay_compares_three_models_in_one_report_on_postgres() {
    let Some(schema) =
        crate::postgres::scratch("a_replay_compares_three_models_in_one_report_on_postgres")
    else {
        return;
    };
    three_models_in_one_report(&Cli::temp(crate::BIN).on(schema.url()));
}

fn three_models_in_one_report(skein: &Cli) {
    desk(skein);
    let (tools, replay) = (scripted("tools.toml"), scripted("replay.toml"));
    let models = [tools.as_str(), replay.as_str(), "echo"];
    let mut args = vec!["replay", "--cid", "desk", "--compare", "exact"];
    for model in models {
        args.extend(["-m", model]);
    }
    let json_args = [args.as_slice(), &["--format", "json"]].concat();
    let output = skein.run(&json_args);
    assert_eq!(output.status.code(), Some(7), "{}", stderr(&output));
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["models"], serde_json::json!(models));
    assert_eq!(report["selected"], 9);
    let turns = report["turns"].as_array().unwrap();
    assert_eq!(turns.len(), 9, "a row per turn and model");
    // Each turn once per model.
    let mut per_turn: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for turn in turns {
        per_turn
            .entry(turn["turn_node"].as_str().unwrap())
            .or_default()
            .push(turn["model"].as_str().unwrap());
    }
    assert_eq!(per_turn.len(), 3);
    for (node, mut seen) in per_turn {
        seen.sort_unstable();
        let mut want = models.to_vec();
        want.sort_unstable();
        assert_eq!(seen, want, "turn {node}");
    }
    // Per model totals: the original model holds every turn, replay.toml
    // asks a tool the recording lacks for the time.
    let totals: BTreeMap<&str, &Value> = report["model_totals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|model| (model["model"].as_str().unwrap(), &model["totals"]))
        .collect();
    assert_eq!(totals.len(), 3);
    let count = |model: &str, key: &str| totals[model][key].as_u64().unwrap();
    assert_eq!(count(&tools, "held"), 3, "{report}");
    assert_eq!(count(&replay, "diverged"), 1, "{report}");
    for model in models {
        let finished: u64 = ["held", "changed", "diverged", "failed"]
            .iter()
            .map(|key| count(model, key))
            .sum();
        assert_eq!(finished, 3, "{model}: {report}");
    }
    let held: u64 = models.iter().map(|model| count(model, "held")).sum();
    assert_eq!(report["totals"]["held"].as_u64().unwrap(), held);

    // Text: each turn once, with a row per model, then each model's totals.
    let id = report["replay"].as_str().unwrap();
    let text = String::from_utf8(skein.run(&["replays", "show", id]).stdout).unwrap();
    assert!(
        text.contains("3 turn(s) selected × 3 models: conversation desk"),
        "{text}"
    );
    assert!(text.contains("→ 3 models: "), "{text}");
    for question in ["which version?", "what time is it?", "the price?"] {
        assert_eq!(
            text.matches(&format!("question: {question}")).count(),
            1,
            "{text}"
        );
    }
    for model in models {
        assert_eq!(
            text.lines()
                .filter(
                    |line| line.starts_with(&format!("replay {} on {model}: 3 turns", &id[..12]))
                )
                .count(),
            1,
            "{text}"
        );
    }
    assert_eq!(
        text.lines()
            .filter(|line| line.trim_start().starts_with("DIVERGED"))
            .count(),
        1,
        "{text}"
    );

    // JUnit: a suite per model, in one document.
    let junit = skein.run(&["replays", "show", id, "--format", "junit"]);
    assert_eq!(junit.status.code(), Some(7));
    let junit = String::from_utf8(junit.stdout).unwrap();
    assert!(junit.contains("<testsuites name=\"skein replay"), "{junit}");
    assert_eq!(junit.matches("<testsuite name=").count(), 3, "{junit}");
    assert_eq!(junit.matches("<testcase ").count(), 9, "{junit}");
    assert!(
        junit.contains("<property name=\"model\" value=\"echo\"/>"),
        "{junit}"
    );

    // `usage --replay` splits per model: each candidate's own replayed
    // runs and the same original turns, the whole their union.
    let usage = skein.json(&["usage", "--replay", id]);
    let runs = |side: &Value| -> Vec<String> {
        side["runs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|run| run.as_str().unwrap().to_string())
            .collect()
    };
    let per_model = usage["models"].as_array().unwrap();
    let named: Vec<&str> = per_model
        .iter()
        .map(|model| model["model"].as_str().unwrap())
        .collect();
    let mut want = models.to_vec();
    let mut seen = named.clone();
    want.sort_unstable();
    seen.sort_unstable();
    assert_eq!(seen, want, "{usage}");
    let mut replayed = Vec::new();
    for model in per_model {
        assert_eq!(
            (model["turns"].as_u64(), model["selected"].as_u64()),
            (Some(3), Some(3)),
            "{model}"
        );
        assert_eq!(
            runs(&model["original"]),
            runs(&usage["original"]),
            "{model}"
        );
        let own = runs(&model["replay"]);
        assert!(!own.is_empty(), "{model}");
        assert!(model["delta"]["tokens"].is_i64(), "{model}");
        replayed.extend(own);
    }
    replayed.sort_unstable();
    assert_eq!(
        replayed,
        runs(&usage["replay"]),
        "each replayed run under one model"
    );
    let text = String::from_utf8(skein.run(&["usage", "--replay", id]).stdout).unwrap();
    assert!(
        text.contains("(3 models), the original turns (9 of 9 turns replayed)"),
        "{text}"
    );
    for model in models {
        assert!(
            text.contains(&format!(
                "on {model}, the original turns (3 of 3 turns replayed)"
            )),
            "{text}"
        );
    }
    assert_eq!(text.matches("difference: tokens").count(), 4, "{text}");

    // Listed as one replay of 3 turns × 3 models.
    let listed = skein.json(&["replays"]);
    let row = &listed["replays"][0];
    assert_eq!(row["models"], serde_json::json!(models));
    let text = String::from_utf8(skein.run(&["replays"]).stdout).unwrap();
    assert!(
        text.contains("3 turn(s) × 3 models: conversation desk"),
        "{text}"
    );

    // A model named twice is refused before anything is stored.
    let twice = skein.run(&["replay", "--cid", "desk", "-m", "echo", "-m", "echo"]);
    assert_eq!(twice.status.code(), Some(2), "{}", stderr(&twice));
    assert!(
        stderr(&twice).contains("`echo` is named twice"),
        "{}",
        stderr(&twice)
    );
    assert_eq!(
        skein.json(&["replays"])["replays"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
}

/// A hundred turns on three models: a worker that died holding turns and
/// one killed mid-replay leave the rest to `skein replay --resume`, which
/// opens every candidate and replays each turn once per model.
#[test]
fn a_killed_replay_of_three_models_resumes_and_replays_each_turn_once_per_model() {
    let skein = Cli::temp(crate::BIN);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let store = skein::Store::open(skein.db()).unwrap();
    let models = [
        "echo".to_string(),
        scripted("replay.toml"),
        scripted("tools.toml"),
    ];
    let id = runtime.block_on(async {
        use skein::recorded::replay::{ReplayPlan, Replayer, Selection};
        let echo = skein::Model::open("echo").unwrap();
        let mut selection = Selection::new();
        for c in 0..5 {
            let conversation = skein::Conversation::builder(echo.clone())
                .store(&store)
                .build();
            for t in 0..20 {
                conversation
                    .prompt(format!("conversation {c}, question {t}"))
                    .send()
                    .await
                    .unwrap();
            }
            selection = selection.conversation(conversation.id().clone());
        }
        let mut replayer = Replayer::new(&store, echo);
        for model in &models[1..] {
            replayer = replayer.candidate(model.clone(), skein::Model::open(model).unwrap());
        }
        replayer
            .start(&selection, &ReplayPlan::comparing(models.to_vec()).unwrap())
            .await
            .unwrap()
    });
    // A worker died holding thirty turns (its lease passed).
    let dead = store.claim_replay_turns(&id, "dead", 30, -1).unwrap();
    assert_eq!(dead.len(), 30);
    // Another is killed once it has replayed a turn.
    let mut worker = skein
        .command(&["replay", "--resume", id.as_str(), "--lease", "1"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    while store.replay_totals(&id).unwrap().done == 0 {
        // A worker that exits first (it failed, or finished at once) ends
        // the wait: the resume below must finish the replay either way.
        if worker.try_wait().unwrap().is_some() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let _ = worker.kill();
    worker.wait().unwrap();
    let last = skein.run(&["replay", "--resume", id.as_str(), "--format", "json"]);
    assert!(
        matches!(last.status.code(), Some(0 | 7)),
        "{}",
        stderr(&last)
    );
    let report: Value = serde_json::from_slice(&last.stdout).unwrap();
    assert_eq!(report["models"], serde_json::json!(models));
    let rows = store.replay_turns(&id, None, 1000).unwrap();
    assert_eq!(rows.len(), 300);
    let mut per_turn: BTreeMap<skein::NodeId, Vec<String>> = BTreeMap::new();
    for row in &rows {
        assert!(row.status.is_final(), "{row:?}");
        per_turn
            .entry(row.turn_node)
            .or_default()
            .push(row.model.clone().unwrap());
    }
    assert_eq!(per_turn.len(), 100);
    assert!(per_turn.values().all(|seen| *seen == models));
    assert!(
        rows.iter()
            .any(|row| row.detail["reclaimed_from"] == "dead"),
        "the dead worker's turns were taken over"
    );
    let listed: usize = rows.iter().map(|row| row.runs.len()).sum();
    let replayed = store
        .recent_runs(100_000)
        .unwrap()
        .into_iter()
        .filter(|run| {
            run.relations
                .contains(&skein::store::Relation::Replay(id.clone()))
        })
        .count();
    assert_eq!(replayed, listed, "no turn recorded twice, none half");
    assert!(store.verify().unwrap().is_ok());
}
