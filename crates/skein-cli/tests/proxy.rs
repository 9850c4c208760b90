//! The recording proxy, driven by the official `openai` Python client
//! (installed by `scripts/python-clients`, found through
//! `SKEIN_TEST_VENV`): a multi-turn conversation re-sent whole each turn,
//! a streamed reply and a tool-call round trip end up as one thread in the
//! graph, written once, with each request's exact body on its run.

#[path = "support/python.rs"]
mod python;
#[path = "support/serve.rs"]
mod serve;

use python::python;
use serve::Server;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A minimal HTTP/1.1 POST (the test needs no client library): the status
/// and the body.
fn post(address: &str, path: &str, body: &str, token: Option<&str>) -> (u16, String) {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(address).unwrap();
    let authorization = token
        .map(|token| format!("Authorization: Bearer {token}\r\n"))
        .unwrap_or_default();
    write!(
        stream,
        "POST {path} HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\n{authorization}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let status = response[9..12].parse().unwrap();
    let body = response
        .split_once("\r\n\r\n")
        .map_or(String::new(), |(_, body)| body.to_string());
    (status, body)
}

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

fn count(db: &Path, sql: &str) -> i64 {
    skein::Store::open(db)
        .unwrap()
        .raw_connection()
        .unwrap()
        .query_row(sql, [], |row| row.get(0))
        .unwrap()
}

#[test]
fn the_openai_client_through_the_proxy_builds_one_thread() {
    let Some(python) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("skein.db");
    let model = format!("scripted:{}", data("proxy.toml").display());
    let server = Server::start(&db, &["--proxy", "-m", &model]);

    let output = Command::new(python)
        .arg(data("proxy_client.py"))
        .arg(format!("{}/v1", server.base()))
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "the client failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let results: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(results["first"], "you said: hello");
    assert_eq!(results["streamed"], "you said: tell me more");
    assert_eq!(results["call"][0], "get_weather");
    assert_eq!(results["call"][1]["city"], "Paris");
    assert_eq!(results["finish"], "tool_calls");
    assert_eq!(results["final"], "It is sunny in Paris.");
    drop(server);

    // system, hello, reply, more, streamed reply, weather?, call, result, answer
    assert_eq!(count(&db, "SELECT count(*) FROM nodes"), 9);
    assert_eq!(count(&db, "SELECT count(*) FROM conversations"), 1);
    assert_eq!(count(&db, "SELECT count(*) FROM runs"), 4);
    assert_eq!(
        count(
            &db,
            "SELECT count(*) FROM runs WHERE request LIKE '{%\"messages\"%'"
        ),
        4,
        "each run keeps its exact request body"
    );
    assert_eq!(
        count(
            &db,
            "SELECT count(*) FROM runs WHERE request LIKE '%sk-client-key%'"
        ),
        0
    );
    let store = skein::Store::open(&db).unwrap();
    let conversation = store.list_conversations(1).unwrap().remove(0);
    assert_eq!(conversation.len, 9, "one thread holds the whole exchange");
    assert!(store.verify().unwrap().is_ok());
}

#[test]
fn the_proxy_rejects_bad_requests_clearly_and_records_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("skein.db");
    let server = Server::start(&db, &["--proxy", "-m", "echo", "--body-limit", "2000"]);
    let post = |body: String| post(&server.address, "/v1/chat/completions", &body, None);
    let (status, text) = post("{not json".into());
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("not a chat-completions request"), "{text}");
    let (status, text) =
        post(r#"{"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}"#.into());
    assert_eq!(status, 400);
    assert!(text.contains("image_url"), "{text}");
    let (status, _) = post(format!(
        r#"{{"messages": [{{"role": "user", "content": "{}"}}]}}"#,
        "x".repeat(5000)
    ));
    assert_eq!(status, 413, "the body limit holds");
    let (status, text) = post(r#"{"messages": [{"role": "user", "content": "hi"}]}"#.into());
    assert_eq!(status, 200, "{text}");
    drop(server);
    assert_eq!(count(&db, "SELECT count(*) FROM nodes"), 2);
    assert_eq!(count(&db, "SELECT count(*) FROM runs"), 1);
}

#[test]
fn with_a_token_every_request_must_carry_it() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(
        &dir.path().join("skein.db"),
        &["--proxy", "-m", "echo", "--token", "s3cret-s3cret-s3cret"],
    );
    let body = r#"{"messages": [{"role": "user", "content": "hi"}]}"#;
    let (status, text) = post(&server.address, "/v1/chat/completions", body, None);
    assert_eq!(status, 401);
    assert!(text.contains("token"), "{text}");
    let (status, _) = post(&server.address, "/v1/chat/completions", body, Some("wrong"));
    assert_eq!(status, 401);
    let (status, text) = post(
        &server.address,
        "/v1/chat/completions",
        body,
        Some("s3cret-s3cret-s3cret"),
    );
    assert_eq!(status, 200, "{text}");
}

#[test]
fn off_loopback_the_proxy_needs_its_token() {
    let dir = tempfile::tempdir().unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_skein"))
        .arg("--db")
        .arg(dir.path().join("skein.db"))
        .args(["serve", "--proxy", "-m", "echo", "--bind", "0.0.0.0:0"])
        .env_remove("SKEIN_SERVE_TOKEN")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&output.stderr).contains("--token"));
}

/// Ten clients continue the same head at once (issue 16: 3 of 10 got HTTP
/// 500 and left junk conversations). Every client gets its reply; with
/// different continuations the first moves the conversation and each other
/// becomes a branch there, naming it as its origin; with the same one they
/// all land on the same node. On SQLite and, when `SKEIN_TEST_POSTGRES`
/// names a server, on PostgreSQL.
#[test]
fn clients_continuing_the_same_head_at_once_each_get_their_reply() {
    let dir = tempfile::tempdir().unwrap();
    race(&dir.path().join("skein.db").display().to_string());
    #[cfg(feature = "postgres")]
    if let Some(base) = std::env::var("SKEIN_TEST_POSTGRES")
        .ok()
        .filter(|url| !url.is_empty())
    {
        let schema = skein::store::scratch::ScratchSchema::create(&base).unwrap();
        race(schema.url());
    }
}

fn race(db: &str) {
    let server = Server::start(Path::new(db), &["--proxy", "-m", "echo"]);
    let message = |role: &str, text: &str| serde_json::json!({"role": role, "content": text});
    let body = |messages: Vec<serde_json::Value>| {
        serde_json::json!({"model": "echo", "messages": messages}).to_string()
    };
    let store = skein::Store::open(db).unwrap();
    for same in [false, true] {
        let start = if same { "start again" } else { "start" };
        let (status, first) = post(
            &server.address,
            "/v1/chat/completions",
            &body(vec![message("user", start)]),
            None,
        );
        assert_eq!(status, 200, "{first}");
        let first: serde_json::Value = serde_json::from_str(&first).unwrap();
        let reply = first["choices"][0]["message"]["content"]
            .as_str()
            .unwrap()
            .to_string();
        let original = store.list_conversations(1).unwrap().remove(0);
        let barrier = std::sync::Barrier::new(10);
        let answers: Vec<(u16, String, String)> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..10)
                .map(|i| {
                    let text = if same {
                        "the same next".to_string()
                    } else {
                        format!("next {i}")
                    };
                    let request = body(vec![
                        message("user", start),
                        message("assistant", &reply),
                        message("user", &text),
                    ]);
                    let (barrier, address) = (&barrier, &server.address);
                    scope.spawn(move || {
                        barrier.wait();
                        let (status, answer) =
                            post(address, "/v1/chat/completions", &request, None);
                        (status, answer, text)
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for (status, answer, text) in &answers {
            assert_eq!(*status, 200, "{answer}");
            assert!(answer.contains(text.as_str()), "{text}: {answer}");
        }
        let branches: Vec<_> = store
            .list_conversations(100)
            .unwrap()
            .into_iter()
            .filter(|c| {
                c.origin.as_ref().and_then(|o| o.conversation.as_ref()) == Some(&original.id)
            })
            .collect();
        let moved = store.conversation(&original.id).unwrap();
        assert_eq!(
            moved.len, 4,
            "the conversation moved on by one of the turns"
        );
        if same {
            // The same turn ten times is one node: each client's turn
            // stands where the conversation is; one whose request reached
            // the store after another's turn may branch there, always in
            // the family.
            for branch in &branches {
                assert_eq!(branch.head, moved.head);
            }
        } else {
            // The first moved the conversation; the nine others are
            // branches at its former head, each with its own reply.
            assert_eq!(branches.len(), 9, "{branches:#?}");
            for branch in &branches {
                assert_eq!(branch.origin.as_ref().unwrap().node, original.head);
                assert_eq!(branch.len, 4);
            }
        }
    }
    // Every conversation is one of the two the first requests began, or a
    // branch of one.
    let all = store.list_conversations(100).unwrap();
    let roots: Vec<_> = all.iter().filter(|c| c.origin.is_none()).collect();
    assert_eq!(roots.len(), 2, "{all:#?}");
    assert!(
        all.iter()
            .filter_map(|c| c.origin.as_ref())
            .all(|origin| roots
                .iter()
                .any(|root| origin.conversation.as_ref() == Some(&root.id))),
        "{all:#?}"
    );
    assert_eq!(store.recent_runs(100).unwrap().len(), 22);
    assert!(store.verify().unwrap().is_ok());
}
