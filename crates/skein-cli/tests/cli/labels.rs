//! `skein label` and cases end to end: turns labelled and listed (a
//! message that ends no turn is refused), replayed by label, a replay's
//! turns of a result labelled in one go; a label
//! exported as JSONL cases with a comparator and replayed with `--cases`
//! on another, empty database (each case judged by its own comparator
//! unless `--compare` overrides it); a labelled turn outlives the deletion
//! of its conversation, and the plan says so.

use serde_json::Value;
use skein_testkit::Cli;
use skein_testkit::cli::stderr;
use std::path::Path;

fn script(name: &str) -> String {
    format!(
        "scripted:{}",
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data")
            .join(name)
            .display()
    )
}

/// `skein replay … --format json` that exits 7 or 0; its report.
fn replay(skein: &Cli, args: &[&str]) -> Value {
    // The lexical embedder, whose verdicts these tests pin (MiniLM, the
    // default where downloaded, scores the short reordered answer lower).
    let mut all = vec![
        "replay",
        "-m",
        "PLACEHOLDER",
        "--format",
        "json",
        "--embedder",
        "lexical",
    ];
    let model = script("replay.toml");
    all[2] = &model;
    all.extend_from_slice(args);
    let output = skein.run(&all);
    assert!(
        matches!(output.status.code(), Some(0 | 7)),
        "{args:?}: {}",
        stderr(&output)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

/// (result, comparator) of each turn of a report, sorted (a label's turns
/// are selected in node-id order).
fn results(report: &Value) -> Vec<(String, String)> {
    let mut results: Vec<(String, String)> = report["turns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|turn| {
            (
                turn["result"].as_str().unwrap().to_string(),
                turn["comparator"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    results.sort();
    results
}

#[test]
fn labelled_turns_replay_by_label_and_as_cases_on_another_database() {
    let skein = Cli::temp(crate::BIN);
    let model = script("tools.toml");
    let first = skein.json(&[
        "prompt",
        "-m",
        &model,
        "-T",
        "skein_version",
        "which version?",
    ]);
    let cid = first["conversation"].as_str().unwrap().to_string();
    skein.json(&["prompt", "-c", "what time is it?"]);
    let third = skein.json(&["prompt", "-c", "the price?"]);
    let (version, price) = (
        first["node"].as_str().unwrap().to_string(),
        third["node"].as_str().unwrap().to_string(),
    );

    let added = skein.json(&["label", "add", "keep", &version[..12], &price]);
    assert_eq!(added["labelled"], 2, "{added}");
    let again = skein.ok(&["label", "add", "keep", &price]);
    assert!(
        again.contains("labelled 0 turn(s) `keep` (1 already were)"),
        "{again}"
    );
    // The tool result before an answer ends no turn.
    let shown = skein.json(&["show", &price]);
    let question = shown["node"]["parent"].as_str().unwrap().to_string();
    let refused = skein.run(&["label", "add", "keep", &question]);
    assert!(!refused.status.success());
    assert!(
        stderr(&refused).contains("is not the reply of a recorded turn"),
        "{}",
        stderr(&refused)
    );
    let counts = skein.json(&["label", "list"]);
    assert_eq!(counts, serde_json::json!([{"name": "keep", "nodes": 2}]));
    let listed = skein.ok(&["label", "list", "keep"]);
    assert_eq!(listed.lines().count(), 2, "{listed}");
    assert!(
        listed.contains(&version) && listed.contains(&price),
        "{listed}"
    );

    // By label: the version turn holds (its call answered from the
    // recording), the price changes.
    let by_label = replay(&skein, &["--label", "keep"]);
    assert_eq!(by_label["selection"]["labels"], serde_json::json!(["keep"]));
    assert_eq!(
        results(&by_label),
        [
            ("changed".to_string(), "specifics".to_string()),
            ("held".to_string(), "specifics+embedding".to_string())
        ]
    );

    // A replay's regressions kept as cases: its changed turn (the
    // original, by its answer), then every turn it re-sent.
    let id = by_label["replay"].as_str().unwrap();
    let kept = skein.json(&[
        "label",
        "add",
        "price-regressed",
        "--replay",
        &id[..8],
        "--result",
        "changed",
    ]);
    assert_eq!(kept["labelled"], 1, "{kept}");
    assert_eq!(
        skein.json(&["label", "list", "price-regressed"])[0]["node"],
        price.as_str()
    );
    let all = skein.json(&["label", "add", "price-regressed", "--replay", id, &price]);
    assert_eq!(
        (all["labelled"].as_u64(), all["given"].as_u64()),
        (Some(1), Some(2)),
        "{all}"
    );
    let off = skein.json(&["label", "rm", "price-regressed", "--replay", id]);
    assert_eq!(off["unlabelled"], 2, "{off}");
    let held = skein.json(&["label", "add", "steady", "--replay", id, "--result", "held"]);
    assert_eq!(held["labelled"], 1, "{held}");
    assert_eq!(
        skein.json(&["label", "list", "steady"])[0]["node"],
        version.as_str()
    );
    skein.json(&["label", "rm", "steady", &version]);
    // --result needs --replay; an unknown result or replay is refused.
    for (args, code) in [
        (vec!["label", "add", "x", &price, "--result", "changed"], 2),
        (
            vec!["label", "add", "x", "--replay", id, "--result", "better"],
            2,
        ),
        (vec!["label", "add", "x", "--replay", "fffffffff"], 3),
    ] {
        assert_eq!(skein.run(&args).status.code(), Some(code), "{args:?}");
    }

    // Exported with `exact`, then replayed on an empty database.
    let file = skein.dir().join("cases.jsonl");
    let file = file.to_str().unwrap();
    skein.ok(&["label", "export", "keep", "--compare", "exact", "-o", file]);
    let lines: Vec<Value> = std::fs::read_to_string(file)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    for case in &lines {
        assert_eq!(case["label"], "keep");
        assert_eq!(case["compare"], serde_json::json!(["exact"]));
        assert_eq!(
            case["request"].as_array().unwrap().last().unwrap()["role"],
            "user"
        );
        assert!(
            !case["runs"][0]["tools"].as_array().unwrap().is_empty(),
            "{case}"
        );
    }
    let version_case = lines
        .iter()
        .find(|c| c["answer"].as_str().unwrap().starts_with("version is"))
        .unwrap();
    // The tool loop travels with the case: call, result, answer.
    assert_eq!(
        version_case["turn"].as_array().unwrap().len(),
        3,
        "{version_case}"
    );

    let elsewhere = Cli::temp(crate::BIN);
    let cases = replay(&elsewhere, &["--cases", file]);
    assert_eq!(
        results(&cases),
        [
            ("changed".to_string(), "exact".to_string()),
            ("changed".to_string(), "exact".to_string())
        ],
        "{cases}"
    );
    assert_eq!(
        elsewhere.json(&["label", "list"]),
        serde_json::json!([{"name": "keep", "nodes": 2}])
    );
    // --compare overrides the cases' own; importing again adds no node.
    let nodes = elsewhere.json(&["verify"])["nodes"].clone();
    let overridden = replay(&elsewhere, &["--cases", file, "--compare", "specifics"]);
    assert_eq!(
        results(&overridden),
        [
            ("changed".to_string(), "specifics".to_string()),
            ("held".to_string(), "specifics".to_string())
        ]
    );
    let after = elsewhere.json(&["verify"]);
    assert_eq!(after["problems"], serde_json::json!([]), "{after}");
    // The replayed answers are the same nodes as the first time.
    assert_eq!(after["nodes"], nodes, "{after}");

    // A malformed case names its line; nothing is replayed.
    let bad = skein.dir().join("bad.jsonl");
    std::fs::write(
        &bad,
        format!(
            "{}\n{{\"label\": 1}}\n",
            serde_json::to_string(&lines[0]).unwrap()
        ),
    )
    .unwrap();
    let refused = elsewhere.run(&[
        "replay",
        "-m",
        &script("replay.toml"),
        "--cases",
        bad.to_str().unwrap(),
    ]);
    assert!(!refused.status.success());
    assert!(
        stderr(&refused).contains("line 2 of the cases file"),
        "{}",
        stderr(&refused)
    );

    // Deleting the conversation keeps the labelled turns, and says so.
    let plan = skein.json(&["delete", &cid, "--dry-run"]);
    assert_eq!(plan["labelled_messages"], 2, "{plan}");
    let text = skein.ok(&["delete", &cid]);
    assert!(text.contains("2 of them labelled"), "{text}");
    assert_eq!(
        skein.json(&["show", &version])["node"]["id"],
        version.as_str()
    );
    assert_eq!(skein.json(&["verify"])["problems"], serde_json::json!([]));
}
