//! `skein delete` end to end: a dry run changes nothing and says what would
//! go and what stays; deleting a conversation keeps the messages a fork
//! shares and says so; the database verifies afterwards; selections that
//! name nothing, or a malformed age, are refused before anything changes.

use serde_json::Value;
use skein_testkit::Cli;
use skein_testkit::cli::stderr;

fn count(skein: &Cli, table: &str) -> i64 {
    skein::Store::open(skein.db())
        .unwrap()
        .debug_query_i64(&format!("SELECT count(*) FROM {table}"))
        .unwrap()
}

#[test]
fn delete_keeps_what_a_fork_shares_and_a_dry_run_changes_nothing() {
    let skein = Cli::temp(crate::BIN);
    let first = skein.json(&["prompt", "one"]);
    let doomed = skein.json(&["prompt", "-c", "two"]);
    let doomed = doomed["conversation"].as_str().unwrap().to_string();
    let node = first["node"].as_str().unwrap();
    skein.json(&["fork", node, "--name", "kept-fork", "another question"]);
    let nodes = count(&skein, "nodes");
    assert_eq!(nodes, 6);

    let plan: Value = skein.json(&["delete", &doomed[..8], "--dry-run"]);
    assert_eq!(plan["dry_run"], true);
    assert_eq!(plan["messages"], 2, "{plan}");
    assert_eq!(plan["kept_messages"], 2, "{plan}");
    assert_eq!(count(&skein, "nodes"), nodes);
    let text = skein.ok(&["delete", &doomed, "--dry-run"]);
    assert!(text.contains("would delete 1 conversation(s)"), "{text}");
    assert!(text.contains("nothing was changed"), "{text}");

    let text = skein.ok(&["delete", &doomed]);
    assert!(
        text.contains("2 message(s) kept: shared with 1 conversation(s)"),
        "{text}"
    );
    assert!(text.contains("kept-fork"), "{text}");
    assert_eq!(count(&skein, "nodes"), 4);
    assert_eq!(skein.run(&["log", "--cid", &doomed]).status.code(), Some(3));
    let fork = skein.json(&["log", "--cid", "kept-fork"]);
    assert_eq!(fork["messages"].as_array().unwrap().len(), 4);
    // The fork's origin names the deleted conversation: on purpose, so
    // verify counts it and stays clean.
    let verified = skein.ok(&["verify"]);
    assert!(
        verified.contains("(1 forked from deleted ones)") && verified.contains("all consistent"),
        "{verified}"
    );
}

#[test]
fn a_selection_that_names_nothing_or_a_bad_age_is_refused_and_deletes_nothing() {
    let skein = Cli::temp(crate::BIN);
    skein.json(&["prompt", "one"]);
    let nodes = count(&skein, "nodes");
    let output = skein.run(&["delete"]);
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    let output = skein.run(&["delete", "--older-than", "30x"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("neither an age"),
        "{}",
        stderr(&output)
    );
    let output = skein.run(&["delete", "no-such-conversation"]);
    assert_eq!(output.status.code(), Some(3), "{}", stderr(&output));
    // Nothing was updated a day ago; everything was before a minute from now.
    let none = skein.json(&["delete", "--older-than", "1d"]);
    assert_eq!(none["conversations"].as_array().unwrap().len(), 0);
    assert_eq!(count(&skein, "nodes"), nodes);
    let all = skein.json(&["delete", "--older-than", "2099-01-01", "--dry-run"]);
    assert_eq!(all["conversations"].as_array().unwrap().len(), 1);
    let proxy = skein.json(&["delete", "--proxy"]);
    assert_eq!(proxy["conversations"].as_array().unwrap().len(), 0);
    assert_eq!(count(&skein, "nodes"), nodes);
}

#[test]
fn redact_erases_a_message_everywhere_and_a_turn_resending_it_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.toml");
    let skein = Cli::temp(crate::BIN).config(&config);
    let first = skein.json(&["prompt", "my password is hunter2"]);
    let second = skein.json(&["prompt", "-c", "thanks"]);
    let cid = second["conversation"].as_str().unwrap().to_string();
    let log = skein.json(&["log", "--cid", &cid]);
    let secret = log["messages"][0]["node"].as_str().unwrap().to_string();
    let before: Vec<Value> = log["messages"].as_array().unwrap().clone();

    let text = skein.ok(&[
        "redact",
        &secret[..10],
        "--reason",
        "pasted a secret",
        "--by",
        "ana",
    ]);
    assert!(text.contains("erased 1 part(s)"), "{text}");
    let shown = skein.ok(&["show", &secret]);
    assert!(shown.contains("part 0: erased"), "{shown}");
    assert!(shown.contains("erased by ana"), "{shown}");
    assert!(!shown.contains("hunter2"), "{shown}");
    let log = skein.json(&["log", "--cid", &cid]);
    let ids = |messages: &[Value]| -> Vec<String> {
        messages
            .iter()
            .map(|m| m["node"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(ids(log["messages"].as_array().unwrap()), ids(&before));
    let verified = skein.ok(&["verify"]);
    assert!(verified.contains("(1 erased)"), "{verified}");
    assert!(verified.contains("all consistent"), "{verified}");
    // The conversation's title was its first prompt: it went with it.
    let conversations = skein.ok(&["conversations"]);
    assert!(!conversations.contains("hunter2"), "{conversations}");
    // The echo model's reply quoted the secret: erase it too, then the
    // database file holds it nowhere once `gc` rewrote it.
    skein.ok(&[
        "redact",
        first["node"].as_str().unwrap(),
        "--reason",
        "quoted it",
    ]);
    skein.ok(&["gc"]);
    let export = skein.ok(&["export"]);
    assert!(!export.contains("hunter2"), "{export}");
    for suffix in ["", "-wal"] {
        let mut path = skein.db().into_os_string();
        path.push(suffix);
        let bytes = std::fs::read(&path).unwrap_or_default();
        assert!(
            !bytes.windows(7).any(|w| w == b"hunter2"),
            "{path:?} holds the secret"
        );
    }

    // Continuing would resend the erased messages: refused, naming the
    // latest and why it was erased.
    let output = skein.run(&["prompt", "-c", "go on"]);
    assert!(!output.status.success());
    assert!(
        stderr(&output).contains("was erased (quoted it)")
            && stderr(&output).contains("continue from a message before it")
            && stderr(&output).contains("erased_placeholder = \"[erased]\"` under `[privacy]`"),
        "{}",
        stderr(&output)
    );
    assert_eq!(count(&skein, "runs"), 2, "a refused turn records no run");

    // With a placeholder chosen in the configuration file the turn runs,
    // its run saying which messages the placeholder stood for.
    std::fs::write(&config, "[privacy]\nerased_placeholder = \"[erased]\"\n").unwrap();
    let went_on = skein.json(&["prompt", "-c", "go on"]);
    assert_eq!(went_on["conversation"].as_str(), Some(cid.as_str()));
    assert_eq!(count(&skein, "runs"), 3);
    assert_eq!(
        count(
            &skein,
            &format!("runs WHERE events LIKE '%erased_replaced%{secret}%'")
        ),
        1
    );
    skein.ok(&["verify"]);
}

#[test]
fn gc_applies_the_retention_of_the_configuration_file() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.toml");
    let skein = Cli::temp(crate::BIN).config(&config);
    skein.json(&["prompt", "one"]);
    skein.json(&["prompt", "two"]);
    // No retention: gc keeps every conversation.
    let kept = skein.json(&["gc"]);
    assert_eq!(kept["retention"].as_array().unwrap().len(), 0);
    assert!(kept["compacted"].is_null(), "{kept}");
    let refused = skein.run(&["gc", "--compact", "--dry-run"]);
    assert_eq!(refused.status.code(), Some(2), "{}", stderr(&refused));
    assert_eq!(count(&skein, "conversations"), 2);

    std::fs::write(&config, "[retention]\nolder_than = \"5x\"\n").unwrap();
    let output = skein.run(&["gc"]);
    assert!(!output.status.success());
    assert!(
        stderr(&output).contains("retention.older_than"),
        "{}",
        stderr(&output)
    );
    // Only the proxy's, and there are none.
    std::fs::write(&config, "[retention]\nproxy_older_than = \"0min\"\n").unwrap();
    let none = skein.json(&["gc"]);
    assert_eq!(
        none["retention"][0][1]["conversations"]
            .as_array()
            .unwrap()
            .len(),
        0
    );
    // Everything updated before now: planned, then done.
    std::fs::write(&config, "[retention]\nolder_than = \"0min\"\n").unwrap();
    let plan = skein.json(&["gc", "--dry-run"]);
    assert_eq!(
        plan["retention"][0][1]["conversations"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
    assert_eq!(count(&skein, "conversations"), 2);
    let text = skein.ok(&["gc"]);
    assert!(
        text.contains("[retention] older_than = \"0min\":"),
        "{text}"
    );
    assert!(text.contains("deleted 2 conversation(s)"), "{text}");
    assert_eq!(count(&skein, "conversations"), 0);
    assert_eq!(count(&skein, "nodes"), 0);
    skein.ok(&["verify"]);
}

/// `skein serve` applies `[retention]` when it starts and then every
/// `every`, noting what each pass deleted; a malformed interval is refused
/// before serving.
#[test]
fn serve_applies_the_retention_at_start_and_on_its_schedule() {
    use std::io::BufRead;
    use std::time::{Duration, Instant};
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.toml");
    let skein = Cli::temp(crate::BIN).config(&config);
    skein.json(&["prompt", "an old one"]);

    std::fs::write(
        &config,
        "[retention]\nolder_than = \"0min\"\nevery = \"soon\"\n",
    )
    .unwrap();
    let refused = skein.run(&["serve", "--bind", "127.0.0.1:0"]);
    assert!(!refused.status.success());
    assert!(
        stderr(&refused).contains("retention.every")
            && stderr(&refused).contains("not an interval"),
        "{}",
        stderr(&refused)
    );
    assert_eq!(count(&skein, "conversations"), 1);

    std::fs::write(
        &config,
        "[retention]\nolder_than = \"0min\"\nevery = \"1s\"\n",
    )
    .unwrap();
    let mut server = skein
        .command(&["serve", "--bind", "127.0.0.1:0"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let (lines, said) = std::sync::mpsc::channel();
    let stderr_pipe = server.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr_pipe).lines() {
            let Ok(line) = line else { break };
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    let wait_for = |what: &str| -> String {
        let deadline = Instant::now() + Duration::from_secs(30);
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            match said.recv_timeout(left) {
                Ok(line) if line.contains(what) => return line,
                Ok(_) => {}
                Err(_) => break,
            }
        }
        panic!("serve never said {what:?}");
    };
    // The pass at start-up.
    let first = wait_for("[retention] older_than = \"0min\": deleted 1 conversation(s)");
    assert!(first.contains("2 message(s)"), "{first}");
    assert_eq!(count(&skein, "conversations"), 0);
    // A later pass takes what was recorded since.
    skein.json(&["prompt", "a newer one"]);
    wait_for("[retention] older_than = \"0min\": deleted 1 conversation(s)");
    assert_eq!(count(&skein, "conversations"), 0);
    server.kill().unwrap();
    server.wait().unwrap();
    skein.ok(&["verify"]);
}

/// After erasing a message, `redact` names the other messages still
/// holding its text (an echoed reply kept it, so `search` finds it there),
/// up to ten, with a hint to redact them too; `--json` lists them in
/// `still_in` (`still_in_truncated` when there are more). Once they are
/// erased too, it names none.
#[test]
fn redact_names_the_other_messages_still_holding_the_erased_text() {
    let skein = Cli::temp(crate::BIN);
    let turn = skein.json(&["prompt", "my password is hunter2"]);
    let reply = turn["node"].as_str().unwrap().to_string();
    let cid = turn["conversation"].as_str().unwrap().to_string();
    let log = skein.json(&["log", "--cid", &cid]);
    let prompt = log["messages"][0]["node"].as_str().unwrap().to_string();

    let redacted = skein.json(&["redact", &prompt, "--reason", "a secret"]);
    assert_eq!(
        redacted["still_in"],
        serde_json::json!([reply]),
        "{redacted}"
    );
    assert_eq!(redacted["still_in_truncated"], false, "{redacted}");
    // Redacting the echo too: nothing holds it any more.
    let text = skein.ok(&["redact", &reply, "--reason", "quoted it"]);
    assert!(!text.contains("still in"), "{text}");
    let redacted = skein.json(&["redact", &reply, "--reason", "again"]);
    assert_eq!(redacted["still_in"], serde_json::json!([]), "{redacted}");

    // The same text in many messages: ten are named, and there are more.
    for n in 0..6 {
        skein.json(&["prompt", &format!("note {n}: the vault code is swordfish")]);
    }
    let turn = skein.json(&["prompt", "the vault code is swordfish"]);
    let log = skein.json(&["log", "--cid", turn["conversation"].as_str().unwrap()]);
    let prompt = log["messages"][0]["node"].as_str().unwrap().to_string();
    let text = skein.ok(&["redact", &prompt, "--reason", "a code"]);
    assert!(
        text.contains("the erased text is still in more than 10 other message(s): "),
        "{text}"
    );
    assert!(
        text.contains(&turn["node"].as_str().unwrap()[..8]),
        "{text}"
    );
    assert!(text.contains("redact them too"), "{text}");
    let found = skein.json(&["search", "\"the vault code is swordfish\"", "-n", "50"]);
    assert_eq!(found["matches"].as_array().unwrap().len(), 13, "{found}");
}
