//! Cases files (`skein label import`, `skein replay --cases`) are data
//! from elsewhere and choose nothing: no judge model (a case's `judge` is
//! `--judge MODEL`'s), no run on another conversation's messages, no usage
//! counted as spent here; and every file or stdin a command reads (cases,
//! `--add-tool`, a key, piped chat lines) is read within a limit that an
//! endless input meets with an error naming it.

use serde_json::Value;
use skein_testkit::Cli;
use skein_testkit::cli::stderr;

/// `text` recorded on the echo model in `skein`'s database, labelled
/// `label` and exported as a case line judged `exact`: (its answer's
/// node, its run, the case).
fn recorded_case(skein: &Cli, label: &str, text: &str) -> (String, String, Value) {
    let turn = skein.json(&["prompt", text]);
    let node = turn["node"].as_str().unwrap().to_string();
    skein.ok(&["label", "add", label, &node]);
    let file = skein.dir().join("exported.jsonl");
    let file = file.to_str().unwrap();
    skein.ok(&["label", "export", label, "--compare", "exact", "-o", file]);
    let case = serde_json::from_str(&std::fs::read_to_string(file).unwrap()).unwrap();
    (node, turn["run"].as_str().unwrap().to_string(), case)
}

/// `cases` written as a cases file in `skein`'s directory; its path.
fn cases_file(skein: &Cli, name: &str, cases: &[&Value]) -> String {
    let path = skein.dir().join(name);
    let lines: Vec<String> = cases.iter().map(|case| case.to_string()).collect();
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    path.to_str().unwrap().to_string()
}

/// The error of a command that must fail.
fn refused(skein: &Cli, args: &[&str]) -> String {
    let output = skein.run(args);
    assert!(!output.status.success(), "{args:?} succeeded");
    stderr(&output)
}

#[test]
fn a_cases_file_names_no_judge_model() {
    let source = Cli::temp(crate::BIN);
    let (_, _, mut case) = recorded_case(&source, "keep", "is the sky blue?");
    let judge = source.dir().join("judge.toml");
    std::fs::write(&judge, "[[rules]]\nreply = \"HELD\\nThe same.\"\n").unwrap();
    let judge = format!("scripted:{}", judge.display());

    let elsewhere = Cli::temp(crate::BIN);
    for spec in [
        "judge:scripted:/etc/hostname".to_string(),
        "judge:openai:gpt-4o".to_string(),
        format!("judge:{judge}"),
    ] {
        case["compare"] = serde_json::json!(["exact", spec]);
        let file = cases_file(&source, "judged.jsonl", &[&case]);
        for args in [
            vec!["label", "import", &file],
            vec!["replay", "-m", "echo", "--cases", &file],
        ] {
            let error = refused(&elsewhere, &args);
            assert!(
                error.contains("line 1 of the cases file")
                    && error.contains("may not choose a model"),
                "{args:?}: {error}"
            );
        }
    }
    assert!(
        !elsewhere.db().exists(),
        "a refused import leaves no database behind"
    );
    // Nor does an export write one.
    let error = refused(
        &source,
        &["label", "export", "keep", "--compare", "judge:echo"],
    );
    assert!(error.contains("may not choose a model"), "{error}");

    // A case's `judge` is the replay's judge, chosen on the command line.
    case["compare"] = serde_json::json!(["judge"]);
    let file = cases_file(&source, "judge.jsonl", &[&case]);
    let error = refused(&elsewhere, &["replay", "-m", "echo", "--cases", &file]);
    assert!(error.contains("--judge MODEL"), "{error}");
    let report = elsewhere.json(&["replay", "-m", "echo", "--cases", &file, "--judge", &judge]);
    let turn = &report["turns"][0];
    assert_eq!(turn["comparator"], "judge", "{report}");
    assert!(
        turn["why"].as_str().unwrap().contains("The same."),
        "{report}"
    );
}

#[test]
fn a_case_attaches_no_run_to_another_conversation_and_counts_in_no_usage_here() {
    let victim = Cli::temp(crate::BIN);
    let turn = victim.json(&["prompt", "my secret plan"]);
    let (cid, node, run) = (
        turn["conversation"].as_str().unwrap().to_string(),
        turn["node"].as_str().unwrap().to_string(),
        turn["run"].as_str().unwrap().to_string(),
    );
    let usage = |skein: &Cli, args: &[&str]| {
        let mut all = vec!["usage"];
        all.extend_from_slice(args);
        skein.json(&all)
    };
    let before = (usage(&victim, &["--cid", &cid]), usage(&victim, &[&node]));

    // The same text recorded elsewhere has the same ids: a case of it,
    // with a forged run (a new id, a fortune in tokens), is refused.
    let attacker = Cli::temp(crate::BIN);
    let (same, _, mut forged) = recorded_case(&attacker, "secret", "my secret plan");
    assert_eq!(same, node);
    forged["runs"][0]["id"] = "f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0".into();
    forged["runs"][0]["usage"]["input_tokens"] = 5_000_000_000_000u64.into();
    let file = cases_file(&attacker, "forged.jsonl", &[&forged]);
    let error = refused(&victim, &["label", "import", &file]);
    assert!(
        error.contains("line 1 of the cases file") && error.contains(&cid[..8]),
        "{error}"
    );
    // A run naming the victim's message by id alone: refused too.
    let (_, _, mut stray) = recorded_case(&attacker, "another", "another question");
    let mut extra = stray["runs"][0].clone();
    extra["id"] = "e0e0e0e0e0e0e0e0e0e0e0e0e0e0e0e0".into();
    extra["output_head"] = node.clone().into();
    stray["runs"].as_array_mut().unwrap().push(extra);
    let file = cases_file(&attacker, "stray.jsonl", &[&stray]);
    let error = refused(&victim, &["label", "import", &file]);
    assert!(error.contains("which the case does not bring"), "{error}");
    assert_eq!(
        (usage(&victim, &["--cid", &cid]), usage(&victim, &[&node])),
        before
    );
    let shown = victim.ok(&["show", &node]);
    assert!(!shown.contains("f0f0f0f0"), "{shown}");

    // A case of its own text that claims to be made on behalf of the
    // victim's run is stored without that link, and marked imported: the
    // victim's usage is unchanged, the case's answer counts no run spent
    // here, and the run counts where it is named.
    let (answer, case_run, mut linked) = recorded_case(&attacker, "third", "a third question");
    linked["runs"][0]["relations"] = serde_json::json!([
        {"kind": "associated_with", "target": run},
        {"kind": "sequence", "target": "theirs"}
    ]);
    linked["runs"][0]["usage"]["input_tokens"] = 5_000_000_000_000u64.into();
    let file = cases_file(&attacker, "linked.jsonl", &[&linked]);
    victim.ok(&["label", "import", &file]);
    assert_eq!(usage(&victim, &["--cid", &cid]), before.0);
    assert_eq!(usage(&victim, &[&answer])["runs"], serde_json::json!([]));
    let named = usage(&victim, &["--run", &case_run]);
    assert_eq!(
        named["input_tokens"]["value"], 5_000_000_000_000u64,
        "{named}"
    );

    // Nothing keeps the victim's text once its conversation is gone.
    victim.ok(&["delete", &cid]);
    victim.ok(&["gc"]);
    let error = refused(&victim, &["show", &node]);
    assert!(!error.is_empty());
}

#[cfg(unix)]
#[test]
fn endless_inputs_fail_at_a_limit_they_name() {
    let skein = Cli::temp(crate::BIN);
    skein.ok(&["prompt", "hello"]);
    // /dev/zero never ends a line: refused at the line limit, not read on.
    for args in [
        vec!["label", "import", "/dev/zero"],
        vec!["replay", "-m", "echo", "--cases", "/dev/zero"],
    ] {
        let error = refused(&skein, &args);
        assert!(
            error.contains("line 1 of the cases file")
                && error.contains("longer than the limit of 64 MiB per line"),
            "{args:?}: {error}"
        );
    }
    let error = refused(
        &skein,
        &[
            "replay",
            "-m",
            "echo",
            "--label",
            "x",
            "--add-tool",
            "/dev/zero",
        ],
    );
    assert!(
        error.contains("the --add-tool file /dev/zero is larger than 16 MiB"),
        "{error}"
    );
    let key = skein.run_with_stdin(&["keys", "set", "openai"], &[b'k'; 20_000]);
    assert!(!key.status.success());
    assert!(
        stderr(&key).contains("longer than 16384 bytes"),
        "{}",
        stderr(&key)
    );
    let mut chat = vec![b'x'; 2_000];
    chat.push(b'\n');
    let piped = skein.run_with_stdin(&["--max-input", "1000", "chat"], &chat);
    assert!(!piped.status.success());
    assert!(
        stderr(&piped).contains("longer than 1000 bytes (the --max-input limit)"),
        "{}",
        stderr(&piped)
    );
}
