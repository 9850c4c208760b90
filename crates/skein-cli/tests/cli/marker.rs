//! Content lives once (DESIGN invariant 13): a marker sent through every
//! surface that records content — the CLI, chat, each proxy API streamed
//! and not, the web workbench, a replay with a replaced system prompt and
//! its judge, a rerun, a cases file imported, failed calls quoting the
//! prompt — then erased from every message holding it (`search`, `redact`)
//! and collected (`gc`), is in no byte of the database, an export, or any
//! file skein wrote. On SQLite the file and its WAL are read byte for
//! byte; on PostgreSQL (when `SKEIN_TEST_POSTGRES` names a server) every
//! column of every table is searched.

use crate::proxy::{get, post, post_with};
use crate::serve::Server;
use serde_json::{Value, json};
use skein_testkit::Cli;
use skein_testkit::cli::stderr;
use std::path::Path;

/// One word (the full-text index keeps words whole, so a leftover index
/// entry holds it too), lower case as the index stores it.
const MARKER: &str = "zqmarker4417card";

fn holds(bytes: &[u8]) -> bool {
    bytes
        .windows(MARKER.len())
        .any(|window| window == MARKER.as_bytes())
}

/// The streamed or whole reply's text, whichever API answered.
fn reply_text(reply: &str, stream: bool) -> String {
    if !stream {
        let reply: Value = serde_json::from_str(reply).unwrap();
        return [
            &reply["choices"][0]["message"]["content"],
            &reply["content"][0]["text"],
            &reply["output"][0]["content"][0]["text"],
        ]
        .iter()
        .find_map(|text| text.as_str())
        .unwrap_or_default()
        .to_string();
    }
    reply
        .lines()
        .filter_map(|line| line.strip_prefix("data: "))
        .filter_map(|data| serde_json::from_str::<Value>(data).ok())
        .filter_map(|chunk| {
            [
                &chunk["choices"][0]["delta"]["content"],
                &chunk["delta"]["text"],
                &chunk["delta"],
            ]
            .iter()
            .find_map(|text| text.as_str().map(str::to_string))
        })
        .collect()
}

/// Every proxy API, streamed and not, each request re-sending the history
/// with the marker in it.
fn through_the_proxy(db: &Path) {
    let server = Server::start(db, &["--proxy", "-m", "echo"]);
    let mut chat = vec![json!({"role": "system", "content": "be brief"})];
    let mut anthropic: Vec<Value> = Vec::new();
    let mut responses: Vec<Value> = Vec::new();
    for (i, stream) in [(0, false), (1, true), (2, false), (3, true)] {
        let text = if i == 1 {
            format!("my card is {MARKER}, remember it")
        } else {
            format!("question {i}")
        };
        chat.push(json!({"role": "user", "content": text}));
        anthropic.push(json!({"role": "user", "content": text}));
        responses.push(json!({"role": "user", "content": text}));
        for (path, body) in [
            (
                "/v1/chat/completions",
                json!({"model": "any", "messages": chat, "stream": stream}),
            ),
            (
                "/v1/messages",
                json!({"model": "any", "max_tokens": 100, "messages": anthropic, "stream": stream}),
            ),
            (
                "/v1/responses",
                json!({"model": "any", "input": responses, "stream": stream}),
            ),
        ] {
            let (status, reply) = post(&server.address, path, &body.to_string(), None);
            assert_eq!(status, 200, "{path}: {reply}");
            let answer = reply_text(&reply, stream);
            assert!(!answer.is_empty(), "{path}: {reply}");
            match path {
                "/v1/chat/completions" => {
                    chat.push(json!({"role": "assistant", "content": answer}));
                }
                "/v1/messages" => anthropic.push(json!({"role": "assistant", "content": answer})),
                _ => responses.push(json!({"role": "assistant", "content": answer})),
            }
        }
    }
}

/// A reply through the web workbench's API.
fn through_the_web(db: &Path, head: &str) {
    let server = Server::start(db, &["-m", "echo"]);
    let (status, session) = get(&server.address, "/api/session");
    assert_eq!(status, 200, "{session}");
    let session: Value = serde_json::from_str(&session).unwrap();
    let csrf = session["csrf"].as_str().unwrap();
    let (status, streamed) = post_with(
        &server.address,
        &format!("/api/nodes/{head}/reply"),
        &json!({"text": format!("from the web: {MARKER}")}).to_string(),
        &[("x-skein-csrf", csrf)],
    );
    assert_eq!(status, 200, "{streamed}");
    assert!(streamed.contains("event: done"), "{streamed}");
}

/// A scripted model with no rule for the prompt: its error quotes the
/// prompt, as a provider's error may.
fn failing_model(skein: &Cli) -> String {
    let path = skein.dir().join("fails.toml");
    std::fs::write(
        &path,
        "[[rules]]\nlast_user_contains = \"never sent\"\nreply = \"no\"\n",
    )
    .unwrap();
    format!("scripted:{}", path.display())
}

/// Seed the marker through every surface of `skein`'s database.
fn seed(skein: &Cli) {
    let db = skein.db();
    // The CLI: a new conversation, a continuation, a recorded turn with a
    // source, a failed first turn and a failed continuation.
    let first = skein.json(&["prompt", &format!("my card is {MARKER}")]);
    let conversation = first["conversation"].as_str().unwrap().to_string();
    let again = skein.json(&["prompt", "--cid", &conversation, "and again?"]);
    let sourced = skein.json(&[
        "prompt",
        "--source",
        &format!("notes=the card on file is {MARKER}"),
        "which card is on file?",
    ]);
    let failing = failing_model(skein);
    for args in [
        vec![
            "prompt",
            "-m",
            &failing,
            "a failed first turn about the card",
        ],
        vec![
            "prompt",
            "--cid",
            &conversation,
            "-m",
            &failing,
            "a failed reply",
        ],
    ] {
        let output = skein.run(&args);
        assert!(!output.status.success(), "{args:?} succeeded");
    }
    let output = skein.run(&["prompt", "-m", &failing, &format!("fails with {MARKER}")]);
    assert!(!output.status.success());
    assert!(stderr(&output).contains(MARKER), "{}", stderr(&output));

    // Chat, typed lines piped in.
    // Chat, typed lines piped in, with its data directory (where a chat
    // history would be written) inside the one searched at the end.
    let mut chat = skein
        .command(&["chat"])
        .env("XDG_DATA_HOME", skein.dir().join("data"))
        .env("HOME", skein.dir())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(
        &mut chat.stdin.take().unwrap(),
        format!("chatting about {MARKER}\nanything else?\n").as_bytes(),
    )
    .unwrap();
    let chat = chat.wait_with_output().unwrap();
    assert!(chat.status.success(), "{}", stderr(&chat));

    through_the_proxy(&db);
    through_the_web(&db, &again["node"].as_str().unwrap()[..12]);

    // A replay with the marker as the new system prompt, judged; a rerun
    // of the sourced turn; a label's cases exported and replayed.
    let replayed = skein.run(&[
        "replay",
        "--cid",
        &conversation,
        "-m",
        "echo",
        "--system",
        &format!("system prompt {MARKER}"),
        "--compare",
        "judge",
        "--judge",
        "echo",
    ]);
    assert!(
        matches!(replayed.status.code(), Some(0 | 7)),
        "{}",
        stderr(&replayed)
    );
    // A replay whose answers differ: the specifics comparator's reason
    // quotes what only the original said.
    let other = skein.dir().join("other.toml");
    std::fs::write(&other, "[[rules]]\nreply = \"no card here\"\n").unwrap();
    let other = format!("scripted:{}", other.display());
    let replayed = skein.run(&[
        "replay",
        "--cid",
        &conversation,
        "-m",
        &other,
        "--compare",
        "specifics",
    ]);
    assert_eq!(replayed.status.code(), Some(7), "{}", stderr(&replayed));
    assert!(
        String::from_utf8_lossy(&replayed.stdout)
            .contains(&format!("only in the original: {MARKER}"))
            || String::from_utf8_lossy(&replayed.stdout).contains(MARKER),
        "{}",
        String::from_utf8_lossy(&replayed.stdout)
    );
    let node = sourced["node"].as_str().unwrap()[..12].to_string();
    skein.json(&[
        "rerun",
        &node,
        "--ignore",
        "notes",
        "--embedder",
        "lexical",
        "--samples",
        "2",
    ]);
    skein.ok(&["label", "add", "cards", first["node"].as_str().unwrap()]);
    let cases = skein.dir().join("cases.jsonl");
    let cases = cases.to_str().unwrap();
    skein.ok(&[
        "label",
        "export",
        "cards",
        "--compare",
        "exact",
        "-o",
        cases,
    ]);
    let from_cases = skein.run(&["replay", "-m", "echo", "--cases", cases]);
    assert!(
        matches!(from_cases.status.code(), Some(0 | 7)),
        "{}",
        stderr(&from_cases)
    );
    std::fs::remove_file(cases).unwrap();
}

/// Erase every message holding the marker, then collect.
fn erase(skein: &Cli) {
    // A replay's answers hold it too: `--replays` finds every copy.
    let found = skein.json(&["search", MARKER, "-n", "500", "--replays"]);
    let nodes: Vec<String> = found["matches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|hit| hit["node"].as_str().unwrap().to_string())
        .collect();
    assert!(nodes.len() >= 10, "{found}");
    for node in &nodes {
        skein.ok(&["redact", node, "--reason", "a card number"]);
    }
    let left = skein.json(&["search", MARKER, "-n", "50", "--replays"]);
    assert!(left["matches"].as_array().unwrap().is_empty(), "{left}");
    // Compacting cuts every body again; those that lost a span keep it.
    let gc = skein.json(&["gc", "--compact"]);
    assert!(gc["compacted"]["bodies"].as_u64().unwrap() > 0, "{gc}");
    assert!(gc["compacted"]["erased"].as_u64().unwrap() > 0, "{gc}");
    let export = skein.ok(&["export"]);
    let lines: Vec<&str> = export
        .lines()
        .filter(|line| holds(line.as_bytes()))
        .collect();
    assert!(lines.is_empty(), "the export holds it: {lines:#?}");
    let verified = skein.ok(&["verify"]);
    assert!(verified.contains("all consistent"), "{verified}");
}

/// Delete everything that reached it (the label on a turn, every replay,
/// every conversation and failed first turn), then collect: deleting
/// removes a copy with the row holding it, so no place on the store's
/// list keeps it.
fn delete_everything(skein: &Cli) {
    for label in skein.json(&["label", "list"]).as_array().unwrap() {
        let name = label["name"].as_str().unwrap();
        for turn in skein.json(&["label", "list", name]).as_array().unwrap() {
            skein.ok(&["label", "rm", name, turn["node"].as_str().unwrap()]);
        }
    }
    let listed = skein.json(&["replays", "-n", "100"]);
    let replays = listed["replays"].as_array().unwrap();
    assert!(replays.len() >= 3, "{listed}");
    for replay in replays {
        skein.ok(&["replays", "delete", replay["replay"].as_str().unwrap()]);
    }
    let deleted = skein.json(&["delete", "--older-than", "2999-01-01"]);
    assert!(deleted["unowned_runs"].as_u64().unwrap() > 0, "{deleted}");
    skein.ok(&["gc"]);
    assert!(
        skein
            .json(&["conversations"])
            .as_array()
            .unwrap()
            .is_empty()
    );
}

/// Every file under `dir` (the database's directory, which holds the
/// configuration and whatever skein wrote beside it) that holds the marker.
fn files_holding(dir: &Path) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            found.extend(files_holding(&path));
        } else if holds(&std::fs::read(&path).unwrap_or_default()) {
            found.push(path.display().to_string());
        }
    }
    found
}

/// The marker sent through every surface of a CLI on `db` (a fresh SQLite
/// file when `None`), found by `verify --find`, then forgotten by
/// `forget`: no file skein wrote holds it after, and (on PostgreSQL)
/// `verify --find` finds no row. What `verify --find` printed before.
fn forgotten_from_every_surface(db: Option<&str>, forget: fn(&Cli)) -> String {
    let skein = match db {
        Some(url) => Cli::temp(crate::BIN).on(url),
        None => Cli::temp(crate::BIN),
    };
    seed(&skein);
    let held = skein.run(&["verify", "--find", MARKER]);
    assert_eq!(held.status.code(), Some(6), "{}", stderr(&held));
    forget(&skein);
    let found = skein.run(&["verify", "--find", MARKER]);
    assert!(
        found.status.success(),
        "{}{}",
        String::from_utf8_lossy(&found.stdout),
        stderr(&found)
    );
    let left = files_holding(skein.dir());
    assert!(left.is_empty(), "the marker is still in {left:?}");
    String::from_utf8_lossy(&held.stdout).to_string()
}

#[test]
fn a_marker_through_every_surface_leaves_no_byte_after_redact_and_gc() {
    let places = forgotten_from_every_surface(None, erase);
    for place in [
        "nodes.body",
        "request_pieces.bytes",
        "runs.error",
        "conversations.meta",
        "replays.change",
        "replay_turns.detail",
        "node_search.words",
    ] {
        assert!(places.contains(place), "{place} not in {places}");
    }
}

#[test]
fn a_marker_through_every_surface_leaves_no_byte_after_everything_is_deleted() {
    forgotten_from_every_surface(None, delete_everything);
}

/// The same on PostgreSQL, where `verify --find` searches every place the
/// store lists (and the store's schema test keeps that list whole).
#[cfg(feature = "postgres")]
#[test]
fn a_marker_through_every_surface_leaves_no_row_after_redact_and_gc_on_postgres() {
    let test = "a_marker_through_every_surface_leaves_no_row_after_redact_and_gc_on_postgres";
    if let Some(schema) = crate::postgres::scratch(test) {
        forgotten_from_every_surface(Some(schema.url()), erase);
    }
}

#[cfg(feature = "postgres")]
#[test]
fn a_marker_through_every_surface_leaves_no_row_after_everything_is_deleted_on_postgres() {
    let test =
        "a_marker_through_every_surface_leaves_no_row_after_everything_is_deleted_on_postgres";
    if let Some(schema) = crate::postgres::scratch(test) {
        forgotten_from_every_surface(Some(schema.url()), delete_everything);
    }
}
