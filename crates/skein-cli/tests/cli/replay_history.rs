//! A replay stays out of the user's history: `log`, `logs -r`, `log --cid`
//! and `search` show the user's own turns, never the answers a replay
//! reached nor the calls its `judge` comparator made (the runs a replay
//! makes, `Relation::is_replays`, and the answers only they produced);
//! `--replays` shows them. On SQLite, then PostgreSQL when
//! `SKEIN_TEST_POSTGRES` names a server.

use serde_json::Value;
use skein_testkit::Cli;
use skein_testkit::cli::stderr;

#[test]
fn a_replay_and_its_judge_stay_out_of_log_and_search_unless_asked_on_sqlite() {
    stays_out_of_history(&Cli::temp(crate::BIN));
}

#[cfg(feature = "postgres")]
#[test]
fn a_replay_and_its_judge_stay_out_of_log_and_search_unless_asked_on_postgres() {
    let Some(schema) = crate::postgres::scratch(
        "a_replay_and_its_judge_stay_out_of_log_and_search_unless_asked_on_postgres",
    ) else {
        return;
    };
    stays_out_of_history(&Cli::temp(crate::BIN).on(schema.url()));
}

/// A scripted model answering every call with `reply`, in a file of the
/// test's directory.
fn answering(skein: &Cli, file: &str, reply: &str) -> String {
    let path = skein.dir().join(file);
    std::fs::write(&path, format!("[[rules]]\nreply = {reply:?}\n")).unwrap();
    format!("scripted:{}", path.display())
}

fn stays_out_of_history(skein: &Cli) {
    let first = skein.json(&["prompt", "name a river"]);
    let cid = first["conversation"].as_str().unwrap().to_string();
    skein.json(&["prompt", "--cid", &cid, "and a sea"]);
    let other = answering(skein, "other.toml", "a replayed answer about Zanzibar");
    let judge = answering(skein, "judge.toml", "HELD\nThe verdict of a judge.");
    let replayed = skein.run(&[
        "replay",
        "--cid",
        &cid,
        "-m",
        &other,
        "--compare",
        "judge",
        "--judge",
        &judge,
    ]);
    assert_eq!(replayed.status.code(), Some(0), "{}", stderr(&replayed));
    let usage = skein.json(&["usage", "--replay", &replayed_id(skein)]);
    assert_eq!(
        usage["judge"]["runs"].as_array().unwrap().len(),
        2,
        "the judge ran once a turn: {usage}"
    );

    let log = skein.ok(&["log", "-n", "5"]);
    assert!(!log.contains("Zanzibar"), "{log}");
    assert!(!log.contains("verdict of a judge"), "{log}");
    assert!(log.contains("and a sea"), "{log}");
    let last = skein.ok(&["logs", "-r"]);
    assert!(last.contains("and a sea"), "the user's last reply: {last}");
    let of_conversation = skein.ok(&["log", "--cid", &cid, "-n", "10"]);
    assert!(!of_conversation.contains("Zanzibar"), "{of_conversation}");
    let with = skein.ok(&["log", "-n", "10", "--replays"]);
    assert!(with.contains("Zanzibar"), "{with}");
    assert!(with.contains("verdict of a judge"), "{with}");
    let queried = skein.ok(&["log", "-q", "Zanzibar"]);
    assert!(!queried.contains("Zanzibar"), "{queried}");
    let queried = skein.ok(&["log", "-q", "Zanzibar", "--replays"]);
    assert!(queried.contains("Zanzibar"), "{queried}");

    // Search: not the replay's answers, its judge's verdicts nor the
    // judge's prompts (which quote both answers), unless asked.
    let matches = |args: &[&str]| -> Vec<Value> {
        let found = skein.json(&[&["search"], args].concat());
        found["matches"].as_array().unwrap().clone()
    };
    assert!(matches(&["Zanzibar", "--role", "assistant"]).is_empty());
    assert!(matches(&["verdict", "--role", "assistant"]).is_empty());
    let replayed = matches(&["Zanzibar", "--role", "assistant", "--replays"]);
    assert_eq!(replayed.len(), 2, "one answer a turn: {replayed:?}");
    let verdicts = matches(&["verdict", "--role", "assistant", "--replays"]);
    assert_eq!(verdicts.len(), 2, "one verdict a turn: {verdicts:?}");
    assert!(matches(&["Zanzibar", "--role", "user"]).is_empty());
    let prompts = matches(&["Zanzibar", "--role", "user", "--replays"]);
    assert_eq!(prompts.len(), 2, "one judge's prompt a turn: {prompts:?}");
    // The user's own question, re-sent as it was, stays theirs.
    let river = matches(&["river", "--role", "user"]);
    assert!(
        river
            .iter()
            .any(|found| found["conversations"][0]["id"] == cid.as_str()),
        "{river:?}"
    );
    let text = skein.ok(&["search", "Zanzibar", "--role", "assistant"]);
    assert!(text.contains("no messages match"), "{text}");
}

/// The newest replay's id, as `skein replays` lists it.
fn replayed_id(skein: &Cli) -> String {
    skein.json(&["replays"])["replays"][0]["replay"]
        .as_str()
        .unwrap()
        .to_string()
}
