//! A comparator added once, in its file under
//! `skein-recorded/src/compare/` and one line of its registry, is there
//! wherever comparators are: `skein replay --compare` and `skein rerun
//! --compare` take it, their help and their refusals list it. `length`
//! stands for any (the web form's list: `skein-serve/tests/web.rs`).

use crate::commands::Rows;
use skein_testkit::Cli;
use skein_testkit::cli::stderr;

#[test]
fn a_comparator_of_the_registry_judges_replays_and_reruns_and_is_listed_in_help() {
    let skein = Cli::temp(crate::BIN);
    let turn = skein.json(&[
        "prompt",
        "--source",
        "notes=release notes: nothing yet",
        "what is new?",
    ]);
    let cid = turn["conversation"].as_str().unwrap().to_string();
    let node = turn["node"].as_str().unwrap()[..12].to_string();

    // A replay on the same (deterministic) model: the same length, held.
    let replay = skein.json(&[
        "replay",
        "--cid",
        &cid,
        "-m",
        "echo",
        "--compare",
        "length:0.5",
        "--format",
        "json",
    ]);
    let judged = &replay["turns"][0];
    assert_eq!(judged["result"], "held", "{replay}");
    assert_eq!(judged["comparator"], "length", "{replay}");
    assert!(
        judged["why"]
            .as_str()
            .unwrap()
            .contains("words against the original's"),
        "{replay}"
    );

    // A rerun judges its samples with it too, and records which decided.
    let rerun = skein.json(&[
        "rerun",
        &node,
        "--ignore",
        "notes",
        "--compare",
        "length",
        "--embedder",
        "lexical",
    ]);
    let id = rerun["rerun"].as_str().unwrap().to_string();
    let store = skein::Store::open(skein.db()).unwrap();
    let record = store.rerun(&skein::store::RerunId(id)).unwrap();
    let decided: Vec<&str> = record.detail["decided_by"]
        .as_array()
        .unwrap()
        .iter()
        .map(|by| by.as_str().unwrap())
        .collect();
    assert_eq!(decided, ["length"; 3], "{}", record.detail);
    drop(store);

    // A bad spec is refused before anything runs, naming every comparator.
    for command in [
        vec![
            "replay",
            "--cid",
            &cid,
            "-m",
            "echo",
            "--compare",
            "length:-1",
        ],
        vec!["rerun", &node, "--ignore", "notes", "--compare", "lenght"],
    ] {
        let refused = skein.run(&command);
        assert_eq!(refused.status.code(), Some(2), "{}", stderr(&refused));
        let said = stderr(&refused);
        assert!(said.contains("length"), "{said}");
    }
    // A judge has no model in a rerun: refused before any model call.
    let runs = skein.count("runs");
    let judged = skein.run(&["rerun", &node, "--ignore", "notes", "--compare", "judge"]);
    assert_eq!(judged.status.code(), Some(2), "{}", stderr(&judged));
    assert!(
        stderr(&judged).contains("no judging model"),
        "{}",
        stderr(&judged)
    );
    assert_eq!(skein.count("runs"), runs);
    let unknown = stderr(&skein.run(&["replay", "--cid", &cid, "-m", "echo", "--compare", "nope"]));
    assert!(unknown.contains("length[:RATIO]"), "{unknown}");
    for command in ["replay", "rerun"] {
        let help = skein.ok(&[command, "--help"]);
        assert!(help.contains("length[:RATIO]"), "{command}: {help}");
    }
}
