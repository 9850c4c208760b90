//! The recording proxy, driven by the official `openai` and `anthropic`
//! Python clients (installed by `scripts/python-clients`, found through
//! `SKEIN_TEST_VENV`) on each of its APIs (chat completions, Responses,
//! Anthropic Messages): multi-turn conversations, streamed replies, tool
//! round trips and images end up as one thread in the graph, written once,
//! with each request's exact body on its run, and the same history sent
//! through several APIs is one set of nodes. Raw HTTP covers the rest: bad
//! requests, tokens, the model table, regenerates, models that cannot take
//! images, and clients' keys passed through.

use crate::python::python;
use crate::serve::Server;
use serde_json::{Value, json};
use skein_testkit::Cli;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A minimal HTTP/1.1 POST (the test needs no client library): the status
/// and the body.
pub(crate) fn post(address: &str, path: &str, body: &str, token: Option<&str>) -> (u16, String) {
    let authorization = token.map(|token| format!("Bearer {token}"));
    let headers: Vec<(&str, &str)> = authorization
        .iter()
        .map(|value| ("Authorization", value.as_str()))
        .collect();
    post_with(address, path, body, &headers)
}

/// [`post`] with headers of the caller's.
pub(crate) fn post_with(
    address: &str,
    path: &str,
    body: &str,
    headers: &[(&str, &str)],
) -> (u16, String) {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(address).unwrap();
    let extra: String = headers
        .iter()
        .map(|(name, value)| format!("{name}: {value}\r\n"))
        .collect();
    write!(
        stream,
        "POST {path} HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\n{extra}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
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

/// A minimal HTTP/1.1 GET: the status and the body.
pub(crate) fn get(address: &str, path: &str) -> (u16, String) {
    get_with(address, path, &[])
}

/// [`get`] with headers of the caller's.
pub(crate) fn get_with(address: &str, path: &str, headers: &[(&str, &str)]) -> (u16, String) {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(address).unwrap();
    let extra: String = headers
        .iter()
        .map(|(name, value)| format!("{name}: {value}\r\n"))
        .collect();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {address}\r\n{extra}Connection: close\r\n\r\n"
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

/// Run a client script against `base`; what it printed, as JSON.
pub(crate) fn client(python: &Path, script: &str, base: &str) -> Value {
    let output = Command::new(python)
        .arg(data(script))
        .arg(base)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{script} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

pub(crate) fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

/// The scripted model of these tests (`tests/data/proxy.toml`).
fn scripted() -> String {
    format!("scripted:{}", data("proxy.toml").display())
}

/// The one conversation's thread has the client's image as an attachment
/// part of a user message.
fn assert_image_recorded(db: &Path) {
    let store = skein::Store::open(db).unwrap();
    let conversation = store.list_conversations(1).unwrap().remove(0);
    let thread = store.load_thread(conversation.head.unwrap()).unwrap();
    let images: Vec<_> = thread
        .messages()
        .into_iter()
        .filter(|message| message.role == skein::Role::User)
        .flat_map(|message| &message.parts)
        .filter_map(|part| match part {
            skein::Part::Attachment(attachment) => Some(attachment.media_type.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(images, ["image/png"]);
}

/// How many runs kept a request body (read back whole from its pieces)
/// for which `select` holds.
fn bodies(db: &Path, select: impl Fn(&skein::store::RunRecord, &str) -> bool) -> usize {
    let store = skein::Store::open(db).unwrap();
    let runs = store.recent_runs(10_000).unwrap();
    runs.iter()
        .filter(|run| {
            store
                .request_body(&run.id)
                .unwrap()
                .is_some_and(|body| select(run, body.whole().expect("a whole body")))
        })
        .count()
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
    let server = Server::start(&db, &["--proxy", "-m", &scripted()]);

    let results = client(&python, "proxy_client.py", &format!("{}/v1", server.base()));
    assert_eq!(results["first"], "you said: hello");
    assert_eq!(results["streamed"], "you said: tell me more");
    assert_eq!(results["call"][0], "get_weather");
    assert_eq!(results["call"][1]["city"], "Paris");
    assert_eq!(results["finish"], "tool_calls");
    assert_eq!(results["final"], "It is sunny in Paris.");
    assert_eq!(results["image"], "you said: what is in this image?");
    drop(server);

    // system, hello, reply, more, streamed reply, weather?, call, result,
    // answer, image, reply
    assert_eq!(count(&db, "SELECT count(*) FROM nodes"), 11);
    assert_eq!(count(&db, "SELECT count(*) FROM conversations"), 1);
    assert_eq!(count(&db, "SELECT count(*) FROM runs"), 5);
    assert_eq!(
        bodies(&db, |_, body| body.starts_with('{')
            && body.contains("\"messages\"")),
        5,
        "each run keeps its exact request body"
    );
    assert_eq!(
        count(
            &db,
            "SELECT count(*) FROM runs WHERE requested_model = 'any'"
        ),
        5,
        "each run names the model the client asked for"
    );
    assert_image_recorded(&db);
    assert_eq!(bodies(&db, |_, body| body.contains("sk-client-key")), 0);
    let store = skein::Store::open(&db).unwrap();
    let conversation = store.list_conversations(1).unwrap().remove(0);
    assert_eq!(conversation.len, 11, "one thread holds the whole exchange");
    assert!(store.verify().unwrap().is_ok());
}

/// The official openai client's conversation (five requests: a stream, a
/// tool round trip, an image), recorded once, runs again against
/// `--from-recording` with the model unreachable and gets the same
/// answers, writing nothing; a changed request is refused with a clear
/// error naming its first difference.
#[test]
fn the_openai_client_runs_again_from_the_recording_with_the_model_unreachable() {
    let Some(python) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("skein.db");
    let server = Server::start(&db, &["--proxy", "-m", &scripted()]);
    let recorded = client(&python, "proxy_client.py", &format!("{}/v1", server.base()));
    drop(server);
    let runs = count(&db, "SELECT count(*) FROM runs");
    assert_eq!(runs, 5);

    let unreachable = [
        ("OPENAI_BASE_URL", "http://127.0.0.1:9/v1"),
        ("OPENAI_API_KEY", "sk-unused"),
    ];
    let server = Server::start_with_env(
        &db,
        &[
            "--proxy",
            "--from-recording",
            "-m",
            "openai:gpt-unreachable",
        ],
        &unreachable,
    );
    let again = client(&python, "proxy_client.py", &format!("{}/v1", server.base()));
    assert_eq!(again, recorded, "the recorded answers, again");

    let changed = json!({"model": "any", "messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "hello there"},
    ]});
    let (status, body) = post(
        &server.address,
        "/v1/chat/completions",
        &changed.to_string(),
        None,
    );
    assert_eq!(status, 404, "{body}");
    let error: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(error["error"]["code"], "not_recorded");
    let message = error["error"]["message"].as_str().unwrap();
    assert!(
        message.contains(
            "message 2 of 2 (user) differs from the recorded one at character 6: recorded \"hello\", this request \"hello there\""
        ),
        "{message}"
    );
    drop(server);
    assert_eq!(
        count(&db, "SELECT count(*) FROM runs"),
        runs,
        "nothing written"
    );
    assert!(skein::Store::open(&db).unwrap().verify().unwrap().is_ok());
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
    let (status, text) = post(r#"{"messages": [{"role": "user", "content": 5}]}"#.into());
    assert_eq!(status, 400, "{text}");
    assert!(
        text.contains("expected a string or an array of content parts"),
        "{text}"
    );
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
    let output = Cli::new(crate::BIN, dir.path().join("skein.db"))
        .command(&["serve", "--proxy", "-m", "echo", "--bind", "0.0.0.0:0"])
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
    let body = |messages: Vec<Value>| {
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
        let first: Value = serde_json::from_str(&first).unwrap();
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

/// The official anthropic client: three streamed turns (`messages.stream`,
/// the replies passed back as the SDK returns them), a tool round trip, an
/// image with a cache hint; one thread, one run per request, the hint on
/// its run and not in any node; a block skein has no part for is refused
/// in Anthropic's error format.
#[test]
fn the_anthropic_client_through_the_proxy_builds_one_thread() {
    let Some(python) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("skein.db");
    let server = Server::start(&db, &["--proxy", "-m", &scripted()]);
    let results = client(&python, "proxy_anthropic.py", &server.base());
    assert_eq!(
        results["streamed"],
        json!([
            "you said: hello",
            "you said: tell me more",
            "you said: and then?"
        ])
    );
    assert_eq!(results["call"], json!(["get_weather", {"city": "Paris"}]));
    assert_eq!(results["stop"], "tool_use");
    assert_eq!(results["final"], "It is sunny in Paris.");
    assert_eq!(results["image"], "you said: what is in this image?");
    assert_eq!(results["model"], "claude-test", "the model asked for");
    assert_eq!(results["models"], json!([scripted()]), "GET /v1/models");
    assert_eq!(results["refused"][0], 400);
    assert_eq!(results["refused"][1], "invalid_request_error");
    assert!(
        results["refused"][2]
            .as_str()
            .unwrap()
            .contains("`thinking`"),
        "{results}"
    );
    drop(server);

    // system, 3 x (prompt, reply), weather?, call, result, answer, image, reply
    assert_eq!(count(&db, "SELECT count(*) FROM nodes"), 13);
    assert_eq!(count(&db, "SELECT count(*) FROM conversations"), 1);
    assert_eq!(count(&db, "SELECT count(*) FROM runs"), 6);
    assert_eq!(
        bodies(&db, |run, body| {
            run.requested_model.as_deref() == Some("claude-test") && body.contains("\"max_tokens\"")
        }),
        6
    );
    assert_eq!(
        count(
            &db,
            "SELECT count(*) FROM runs WHERE annotations LIKE '%cache_hint%'"
        ),
        1,
        "the image's cache_control is a hint on its run"
    );
    assert_image_recorded(&db);
    let store = skein::Store::open(&db).unwrap();
    assert_eq!(store.list_conversations(1).unwrap()[0].len, 13);
    assert!(store.verify().unwrap().is_ok());
}

/// The official openai client's Responses API: three streamed turns
/// chained by `previous_response_id` (once through the `responses.stream`
/// helper), a tool round trip, an image; one thread, one run per stored
/// response; `store: false` records nothing and cannot be continued.
#[test]
fn the_responses_client_through_the_proxy_builds_one_thread() {
    let Some(python) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("skein.db");
    let server = Server::start(&db, &["--proxy", "-m", &scripted()]);
    let results = client(
        &python,
        "proxy_responses.py",
        &format!("{}/v1", server.base()),
    );
    assert_eq!(
        results["streamed"],
        json!([
            "you said: hello",
            "you said: tell me more",
            "you said: and then?"
        ])
    );
    assert_eq!(results["call"], json!(["get_weather", {"city": "Paris"}]));
    assert_eq!(results["final"], "It is sunny in Paris.");
    assert_eq!(results["image"], "you said: what is in this image?");
    assert_eq!(results["model"], "gpt-test");
    assert_eq!(results["models"], json!([scripted()]), "GET /v1/models");
    assert_eq!(results["unstored"], "you said: forget this");
    assert_eq!(results["refused"][0], 400);
    assert_eq!(results["refused"][1], "previous_response_id");
    drop(server);

    // instructions, 3 x (prompt, reply), weather?, call, result, answer,
    // image, reply; nothing of the unstored response
    assert_eq!(count(&db, "SELECT count(*) FROM nodes"), 13);
    assert_eq!(count(&db, "SELECT count(*) FROM conversations"), 1);
    assert_eq!(count(&db, "SELECT count(*) FROM runs"), 6);
    assert_eq!(bodies(&db, |_, body| body.contains("forget this")), 0);
    assert_image_recorded(&db);
    let store = skein::Store::open(&db).unwrap();
    assert_eq!(store.list_conversations(1).unwrap()[0].len, 13);
    assert!(store.verify().unwrap().is_ok());
}

/// One history through the three APIs with the official clients: chat
/// completions (an image larger than the blob threshold, a tool round
/// trip), then the same history and a turn through Anthropic Messages (the
/// SDK re-serialises the call's input), then through Responses. Each API
/// adds only its own turn's two nodes to the one conversation, the image
/// is one blob, and the web view on the same server lists the
/// conversation.
#[test]
fn one_history_through_three_apis_shares_its_nodes() {
    let Some(python) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("skein.db");
    let server = Server::start(&db, &["--proxy", "-m", &scripted()]);
    let results = client(&python, "proxy_across.py", &server.base());
    assert_eq!(
        results["chat"],
        json!([
            "you said: look at this",
            "{\"city\": \"Paris\"}",
            "It is sunny in Paris."
        ])
    );
    assert_eq!(results["anthropic"], "you said: thanks");
    assert_eq!(results["responses"], "you said: bye");
    let (status, listed) = get(&server.address, "/api/conversations");
    assert_eq!(status, 200, "{listed}");
    assert!(
        listed.contains("look at this"),
        "titled by its first prompt: {listed}"
    );
    drop(server);

    // chat: system, image prompt, reply, weather?, call, result, answer;
    // then two nodes per API
    assert_eq!(count(&db, "SELECT count(*) FROM nodes"), 11);
    assert_eq!(count(&db, "SELECT count(*) FROM conversations"), 1);
    assert_eq!(count(&db, "SELECT count(*) FROM runs"), 5);
    assert_eq!(
        count(&db, "SELECT count(*) FROM blobs"),
        1,
        "one image, one blob"
    );
    let store = skein::Store::open(&db).unwrap();
    let conversation = store.list_conversations(1).unwrap().remove(0);
    assert_eq!(conversation.len, 11, "one thread");
    // The call keeps the exact argument text the model wrote, though the
    // Anthropic client sent it back re-serialised.
    let thread = store.load_thread(conversation.head.unwrap()).unwrap();
    let arguments: Vec<&str> = thread
        .messages()
        .into_iter()
        .flat_map(|message| message.tool_calls())
        .map(|call| call.arguments.as_str())
        .collect();
    assert_eq!(arguments, ["{\"city\": \"Paris\"}"]);
    assert!(store.verify().unwrap().is_ok());
}

/// A client re-sending a long history stores each message once, in the
/// graph: its bodies refer to the messages' nodes, whether it escapes
/// JSON minimally (serde_json, JavaScript) or as ASCII (Python's default),
/// and each body reads back byte for byte.
#[test]
fn a_resent_history_lives_once_in_the_graph() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("skein.db");
    let server = Server::start(&db, &["--proxy", "-m", "echo"]);
    let question = |i: usize, style: &str| {
        format!(
            "Question {i} ({style}): \"Grüße\" to the 🦀, a tab\there, a new line\nand \
             some prose long enough to be worth a reference rather than a copy."
        )
    };
    let mut questions = Vec::new();
    for style in ["minimal", "ascii"] {
        let mut messages = vec![json!({"role": "system", "content": "You are terse."})];
        for i in 0..4 {
            let asked = question(i, style);
            questions.push(asked.clone());
            messages.push(json!({"role": "user", "content": asked}));
            let body = json!({"model": "echo", "messages": messages}).to_string();
            let body = if style == "ascii" {
                ascii_json(&body)
            } else {
                body
            };
            let (status, text) = post(&server.address, "/v1/chat/completions", &body, None);
            assert_eq!(status, 200, "{text}");
            let reply: Value = serde_json::from_str(&text).unwrap();
            messages.push(reply["choices"][0]["message"].clone());
        }
    }
    drop(server);
    assert_eq!(bodies(&db, |_, body| body.contains("\"messages\"")), 8);
    let store = skein::Store::open(&db).unwrap();
    for asked in &questions {
        let holding = store.places_holding(asked).unwrap();
        assert!(
            holding.iter().any(|place| place.table == "nodes"),
            "{holding:?}"
        );
        assert!(
            holding.iter().all(|place| place.table != "request_pieces"),
            "a body holds its own copy of {asked:?}: {holding:?}"
        );
    }
    assert!(store.verify().unwrap().is_ok());
}

/// `json` as Python's `json.dumps` escapes it by default: every character
/// outside printable ASCII as `\uxxxx`.
fn ascii_json(json: &str) -> String {
    let mut out = String::with_capacity(json.len());
    for ch in json.chars() {
        if ch.is_ascii() && ch != '\u{7f}' {
            out.push(ch);
        } else {
            for unit in ch.encode_utf16(&mut [0; 2]) {
                out.push_str(&format!("\\u{unit:04x}"));
            }
        }
    }
    out
}

/// A regenerate (the same request again) stays in its conversation's
/// family: with the same reply it is the same node and only its run is
/// added, to the conversation, even after the conversation moved on; with
/// another reply it is a sibling, a branch at the request's last message.
#[test]
fn a_regenerate_stays_in_its_conversation_family() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("skein.db");
    let server = Server::start(&db, &["--proxy", "-m", &scripted()]);
    let chat = |messages: Value, tools: bool| {
        let mut body = json!({"model": "m", "messages": messages});
        if tools {
            body["tools"] = json!([{"type": "function", "function": {"name": "get_weather"}}]);
        }
        let (status, text) = post(
            &server.address,
            "/v1/chat/completions",
            &body.to_string(),
            None,
        );
        assert_eq!(status, 200, "{text}");
        serde_json::from_str::<Value>(&text).unwrap()["choices"][0]["message"].clone()
    };
    let hi = json!([{"role": "user", "content": "hi"}]);
    let reply = chat(hi.clone(), false);
    assert_eq!(chat(hi.clone(), false), reply, "the same reply");
    let store = skein::Store::open(&db).unwrap();
    let conversations = store.list_conversations(10).unwrap();
    assert_eq!(conversations.len(), 1);
    let original = conversations[0].clone();
    chat(
        json!([
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": reply["content"]},
            {"role": "user", "content": "more"}
        ]),
        false,
    );
    chat(hi.clone(), false);
    assert_eq!(
        store.list_conversations(10).unwrap().len(),
        1,
        "no new conversation"
    );
    assert_eq!(
        store.conversation(&original.id).unwrap().len,
        4,
        "it stayed where it was"
    );
    // Offered a tool, the model answers otherwise: a sibling reply.
    let other = chat(hi, true);
    assert_ne!(other, reply);
    let all = store.list_conversations(10).unwrap();
    assert_eq!(all.len(), 2);
    let sibling = all.iter().find(|c| c.id != original.id).unwrap();
    let origin = sibling.origin.as_ref().unwrap();
    assert_eq!(origin.conversation.as_ref(), Some(&original.id));
    let prompt = store.load_thread(original.head.unwrap()).unwrap().parent();
    assert_eq!(origin.node, prompt.head_id(), "a branch at the prompt");
    assert_eq!(sibling.len, 2);
    drop(server);
    // hi, reply, more, its reply, the sibling reply
    assert_eq!(count(&db, "SELECT count(*) FROM nodes"), 5);
    assert_eq!(
        count(
            &db,
            &format!(
                "SELECT count(*) FROM runs WHERE conversation = '{}'",
                original.id
            )
        ),
        4,
        "each regenerate's run joined the conversation"
    );
    assert_eq!(count(&db, "SELECT count(*) FROM runs"), 5);
}

/// `[proxy.models]` maps the model a client asks for to the model that
/// answers it, on every API; without a fallback an unknown name is a 404
/// naming what is served. The requested model is on each run, the
/// `x-skein-conversation-name` header names a new conversation, a
/// continuation with that name stays in it, and the same first message
/// under another name is a conversation of its own.
#[test]
fn the_model_table_routes_requested_models_and_records_them() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("skein.db");
    std::fs::write(
        db.with_extension("toml"),
        format!(
            "[proxy.models]\n\"gpt-4o-mini\" = \"echo\"\n\"claude-haiku\" = \"{}\"\n",
            scripted().replace('\\', "\\\\")
        ),
    )
    .unwrap();
    let server = Server::start(&db, &["--proxy"]);
    let named = [("x-skein-conversation-name", "my chat")];
    let body = json!({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "first"}]});
    let (status, text) = post_with(
        &server.address,
        "/v1/chat/completions",
        &body.to_string(),
        &named,
    );
    assert_eq!(status, 200, "{text}");
    let reply: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(reply["model"], "gpt-4o-mini");
    let answer = reply["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(answer.starts_with("echo: "), "{answer}");
    let body = json!({"model": "gpt-4o-mini", "messages": [
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": answer},
        {"role": "user", "content": "second"}
    ]});
    let (status, text) = post_with(
        &server.address,
        "/v1/chat/completions",
        &body.to_string(),
        &named,
    );
    assert_eq!(status, 200, "{text}");
    let body = json!({"model": "claude-haiku", "max_tokens": 50, "messages": [{"role": "user", "content": "hello"}]});
    let (status, text) = post(&server.address, "/v1/messages", &body.to_string(), None);
    assert_eq!(status, 200, "{text}");
    let reply: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(reply["content"][0]["text"], "you said: hello");
    assert_eq!(reply["model"], "claude-haiku");

    for (path, body) in [
        (
            "/v1/chat/completions",
            json!({"model": "gpt-5", "messages": [{"role": "user", "content": "x"}]}),
        ),
        ("/v1/responses", json!({"model": "gpt-5", "input": "x"})),
        (
            "/v1/messages",
            json!({"model": "gpt-5", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}]}),
        ),
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": "x"}]}),
        ),
    ] {
        let (status, text) = post(&server.address, path, &body.to_string(), None);
        assert_eq!(status, 404, "{path}: {text}");
        assert!(
            text.contains("`claude-haiku`") && text.contains("`gpt-4o-mini`"),
            "{text}"
        );
    }
    // The same first message under two names: a conversation each, the
    // second a branch of the first on the same nodes; each goes on alone.
    let twin = json!({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "twin"}]});
    let mut twin_answer = String::new();
    for name in ["alpha", "beta"] {
        let (status, text) = post_with(
            &server.address,
            "/v1/chat/completions",
            &twin.to_string(),
            &[("x-skein-conversation-name", name)],
        );
        assert_eq!(status, 200, "{text}");
        twin_answer =
            serde_json::from_str::<Value>(&text).unwrap()["choices"][0]["message"]["content"]
                .as_str()
                .unwrap()
                .to_string();
    }
    let next = json!({"model": "gpt-4o-mini", "messages": [
        {"role": "user", "content": "twin"},
        {"role": "assistant", "content": twin_answer},
        {"role": "user", "content": "beta goes on"}
    ]});
    let (status, text) = post_with(
        &server.address,
        "/v1/chat/completions",
        &next.to_string(),
        &[("x-skein-conversation-name", "beta")],
    );
    assert_eq!(status, 200, "{text}");
    let (status, models) = get(&server.address, "/v1/models");
    assert_eq!(status, 200);
    let ids: Vec<Value> = serde_json::from_str::<Value>(&models).unwrap()["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|model| model["id"].clone())
        .collect();
    assert_eq!(ids, [json!("claude-haiku"), json!("gpt-4o-mini")]);
    drop(server);

    assert_eq!(
        count(
            &db,
            "SELECT count(*) FROM runs WHERE requested_model = 'gpt-4o-mini' AND model = 'echo'"
        ),
        5
    );
    assert_eq!(
        count(
            &db,
            "SELECT count(*) FROM runs WHERE requested_model = 'claude-haiku' AND model = 'scripted'"
        ),
        1
    );
    assert_eq!(
        count(&db, "SELECT count(*) FROM runs"),
        6,
        "refused requests run nothing"
    );
    let store = skein::Store::open(&db).unwrap();
    let conversations = store.list_conversations(10).unwrap();
    assert_eq!(conversations.len(), 4);
    let named = |name: &str| {
        conversations
            .iter()
            .find(|c| c.name.as_deref() == Some(name))
            .unwrap_or_else(|| panic!("no conversation named {name}: {conversations:#?}"))
    };
    let mine = named("my chat");
    assert_eq!(mine.len, 4, "the named conversation went on");
    let other = conversations.iter().find(|c| c.name.is_none()).unwrap();
    assert_eq!(other.settings.title.as_deref(), Some("hello"));
    let (alpha, beta) = (named("alpha"), named("beta"));
    assert_eq!(alpha.len, 2, "alpha stayed");
    assert_eq!(beta.len, 4, "beta went on alone");
    let origin = beta.origin.as_ref().unwrap();
    assert_eq!(origin.conversation.as_ref(), Some(&alpha.id));
    assert_eq!(origin.node, alpha.head, "a branch on alpha's nodes");
    let shown = Cli::new(crate::BIN, &db).run(&["show", &mine.head.unwrap().to_string()]);
    let shown = String::from_utf8_lossy(&shown.stdout);
    assert!(shown.contains("echo (asked for gpt-4o-mini)"), "{shown}");
}

/// A model that cannot take images (the embedded one) refuses them before
/// anything is generated: a 400 on every API, streamed or not, in the
/// API's error format; its failed runs are kept, no node is.
#[test]
fn a_model_that_cannot_take_images_refuses_them_with_a_400() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("skein.db");
    let server = Server::start_with_env(
        &db,
        &["--proxy", "-m", "smollm2"],
        &[("SKEIN_THREADS", "1")],
    );
    let url = "data:image/png;base64,iVBORw0KGgo=";
    let requests = [
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": [
                {"type": "text", "text": "what is this?"}, {"type": "image_url", "image_url": {"url": url}}
            ]}]}),
        ),
        (
            "/v1/messages",
            json!({"max_tokens": 5, "messages": [{"role": "user", "content": [
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}
            ]}]}),
        ),
        (
            "/v1/responses",
            json!({"input": [{"role": "user", "content": [
                {"type": "input_image", "image_url": url}
            ]}]}),
        ),
    ];
    for stream in [false, true] {
        for (path, body) in &requests {
            let mut body = body.clone();
            body["stream"] = json!(stream);
            let (status, text) = post(&server.address, path, &body.to_string(), None);
            assert_eq!(status, 400, "{path} (stream: {stream}): {text}");
            assert!(text.contains("takes text only"), "{path}: {text}");
            assert!(text.contains("invalid_request_error"), "{path}: {text}");
        }
    }
    drop(server);
    // The engine refuses before any model call: nothing ran, so nothing
    // is recorded.
    assert_eq!(count(&db, "SELECT count(*) FROM nodes"), 0);
    assert_eq!(count(&db, "SELECT count(*) FROM runs"), 0);
}

/// With `--pass-client-key`, each request's own key (`Authorization:
/// Bearer` for OpenAI clients, `x-api-key` for Anthropic's) calls the
/// model, and this machine needs none; a request without one is told how to
/// send it. The key, accepted or rejected by the model's server (which
/// echoes it back), is in no answer, no line the server printed, no byte of
/// the database and no export.
#[test]
fn a_client_key_passed_through_is_never_stored_logged_or_shown() {
    use wiremock::matchers::{header, method, path};
    use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};
    const KEY: &str = "sk-client-SECRET-7373";
    const REVOKED: &str = "sk-client-REVOKED-1919";

    /// A server that rejects a key, quoting it.
    struct Rejecting;
    impl Respond for Rejecting {
        fn respond(&self, request: &Request) -> ResponseTemplate {
            let key = ["x-api-key", "authorization"]
                .iter()
                .find_map(|name| request.headers.get(*name))
                .map(|value| value.to_str().unwrap().to_string())
                .unwrap_or_default();
            ResponseTemplate::new(401).set_body_json(json!({
                "type": "error",
                "error": {"type": "authentication_error", "message": format!("Incorrect API key provided: {key}")}
            }))
        }
    }

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let upstream = runtime.block_on(async {
        let server = MockServer::start().await;
        Mock::given(method("POST"))
            .and(path("/v1/chat/completions"))
            .and(header("authorization", format!("Bearer {KEY}").as_str()))
            .respond_with(ResponseTemplate::new(200).set_body_json(json!({
                "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "gpt-test",
                "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "Hello from OpenAI."}}],
                "usage": {"prompt_tokens": 5, "completion_tokens": 4, "total_tokens": 9}
            })))
            .with_priority(1)
            .mount(&server)
            .await;
        Mock::given(method("POST"))
            .and(path("/v1/messages"))
            .and(header("x-api-key", KEY))
            .respond_with(ResponseTemplate::new(200).set_body_json(json!({
                "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-test",
                "content": [{"type": "text", "text": "Hello from Anthropic."}],
                "stop_reason": "end_turn", "stop_sequence": null,
                "usage": {"input_tokens": 5, "output_tokens": 4}
            })))
            .with_priority(1)
            .mount(&server)
            .await;
        Mock::given(method("POST"))
            .respond_with(Rejecting)
            .mount(&server)
            .await;
        server
    });
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("skein.db");
    std::fs::write(
        db.with_extension("toml"),
        "[proxy.models]\n\"gpt-test\" = \"openai:gpt-test\"\n\"claude-test\" = \"anthropic:claude-test\"\n\"*\" = \"echo\"\n",
    )
    .unwrap();
    let base = upstream.uri();
    let openai_base = format!("{base}/v1");
    let server = Server::start_with_env(
        &db,
        &["--proxy", "--pass-client-key"],
        &[
            ("OPENAI_BASE_URL", openai_base.as_str()),
            ("ANTHROPIC_BASE_URL", base.as_str()),
            ("OPENAI_API_KEY", ""),
            ("ANTHROPIC_API_KEY", ""),
        ],
    );
    let chat = |model: &str| {
        json!({"model": model, "messages": [{"role": "user", "content": "hi"}]}).to_string()
    };
    let messages = json!({"model": "claude-test", "max_tokens": 20, "messages": [{"role": "user", "content": "hi"}]}).to_string();
    let bearer = format!("Bearer {KEY}");
    let revoked = format!("Bearer {REVOKED}");
    let mut answers = Vec::new();
    let mut ask = |path: &str, body: &str, headers: &[(&str, &str)], status: u16, says: &str| {
        let (got, text) = post_with(&server.address, path, body, headers);
        assert_eq!(got, status, "{path} {headers:?}: {text}");
        assert!(text.contains(says), "{path}: {text}");
        answers.push(text);
    };
    ask(
        "/v1/chat/completions",
        &chat("gpt-test"),
        &[("Authorization", &bearer)],
        200,
        "Hello from OpenAI.",
    );
    ask(
        "/v1/messages",
        &messages,
        &[("x-api-key", KEY)],
        200,
        "Hello from Anthropic.",
    );
    let streamed = json!({"model": "gpt-test", "stream": true, "messages": [{"role": "user", "content": "again"}]}).to_string();
    ask(
        "/v1/chat/completions",
        &streamed,
        &[("x-api-key", KEY)],
        200,
        "Hello from OpenAI.",
    );
    ask(
        "/v1/chat/completions",
        &chat("gpt-test"),
        &[("Authorization", &revoked)],
        401,
        "authentication_error",
    );
    ask(
        "/v1/messages",
        &messages,
        &[("x-api-key", REVOKED)],
        401,
        "authentication_error",
    );
    ask(
        "/v1/chat/completions",
        &chat("gpt-test"),
        &[],
        401,
        "x-api-key",
    );
    ask(
        "/v1/chat/completions",
        &chat("anything"),
        &[("Authorization", &bearer)],
        200,
        "echo:",
    );
    // The keys really reached the model's server.
    let received = runtime.block_on(upstream.received_requests()).unwrap();
    let sent = |key: &str| {
        received.iter().any(|request| {
            request
                .headers
                .values()
                .any(|value| value.to_str().unwrap().contains(key))
        })
    };
    assert!(sent(KEY) && sent(REVOKED));
    let stderr = server.stop();
    assert!(stderr.contains("passed through"), "{stderr}");

    let export = Cli::new(crate::BIN, &db).run(&["export"]);
    assert!(export.status.success());
    assert!(String::from_utf8_lossy(&export.stdout).contains("Hello from Anthropic."));
    let mut haystacks: Vec<Vec<u8>> = answers.into_iter().map(String::into_bytes).collect();
    haystacks.extend([stderr.into_bytes(), export.stdout, export.stderr]);
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        haystacks.push(std::fs::read(entry.unwrap().path()).unwrap());
    }
    assert!(
        haystacks.len() >= 11,
        "the database files were searched too"
    );
    for haystack in &haystacks {
        let text = String::from_utf8_lossy(haystack);
        assert!(
            !text.contains(KEY) && !text.contains(REVOKED),
            "a key leaked: {text}"
        );
    }
    assert_eq!(
        count(&db, "SELECT count(*) FROM runs WHERE status = 'failed'"),
        2
    );
    assert_eq!(
        count(&db, "SELECT count(*) FROM runs WHERE status = 'succeeded'"),
        4
    );
}

/// Client keys keep the proxy's clients apart (issue 46): a keys file only
/// its owner may read (another is refused, naming `chmod 600`), given with
/// `--client-keys` or `[proxy] client_keys`. A request without a known key
/// is a 401; Bob cannot continue Alice's message thread (404, word for word
/// what an unknown id gets) nor append to her session, and can use his
/// own; each run is its key's client's; no key is in any answer, line
/// printed, database file or export. Without keys the server says every
/// client reaches every conversation; keys and `--pass-client-key` do not
/// go together. On SQLite and, when `SKEIN_TEST_POSTGRES` names a server,
/// on PostgreSQL.
#[test]
fn client_keys_keep_the_proxys_clients_apart() {
    const ALICE: &str = "sk-alice-SECRET-0123456789";
    const BOB: &str = "sk-bob-SECRET-9876543210";
    const MALLORY: &str = "sk-mallory-SECRET-55555555";
    const OPERATOR: &str = "operator-SECRET-token-0123";
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("skein.db");
    let keys = dir.path().join("clients");
    std::fs::write(
        &keys,
        format!("# the proxy's clients\nalice {ALICE}\nbob   {BOB}\n"),
    )
    .unwrap();
    let keys_arg = keys.display().to_string();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&keys, std::fs::Permissions::from_mode(0o644)).unwrap();
        let refused = Cli::new(crate::BIN, &db).run(&[
            "serve",
            "--proxy",
            "-m",
            "echo",
            "--client-keys",
            &keys_arg,
        ]);
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert!(!refused.status.success());
        assert!(stderr.contains("chmod 600"), "{stderr}");
        assert!(!stderr.contains("SECRET"), "{stderr}");
        std::fs::set_permissions(&keys, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    let together = Cli::new(crate::BIN, &db).run(&[
        "serve",
        "--proxy",
        "-m",
        "echo",
        "--client-keys",
        &keys_arg,
        "--pass-client-key",
    ]);
    assert!(!together.status.success());
    assert!(String::from_utf8_lossy(&together.stderr).contains("--pass-client-key"));
    // Without the operator's token, clients could use the web view.
    let untokened = Cli::new(crate::BIN, &db)
        .command(&[
            "serve",
            "--bind",
            "127.0.0.1:0",
            "--proxy",
            "-m",
            "echo",
            "--client-keys",
            &keys_arg,
        ])
        .env_remove("SKEIN_SERVE_TOKEN")
        .output()
        .unwrap();
    assert!(!untokened.status.success());
    let said = String::from_utf8_lossy(&untokened.stderr);
    assert!(said.contains("give the server a token"), "{said}");

    let mut printed = String::new();
    let mut answers = Vec::new();
    kept_apart(db.to_str().unwrap(), &keys_arg, &mut printed, &mut answers);
    let export = Cli::new(crate::BIN, &db).run(&["export"]);
    assert!(export.status.success());
    let mut haystacks: Vec<Vec<u8>> = answers.into_iter().map(String::into_bytes).collect();
    haystacks.extend([printed.into_bytes(), export.stdout, export.stderr]);
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let path = entry.unwrap().path();
        if path != keys {
            haystacks.push(std::fs::read(path).unwrap());
        }
    }
    for haystack in &haystacks {
        let text = String::from_utf8_lossy(haystack);
        assert!(!text.contains("SECRET"), "a key leaked: {text}");
    }
    // The configuration file names the keys file as well.
    std::fs::write(
        db.with_extension("toml"),
        format!("[proxy]\nclient_keys = {keys_arg:?}\n"),
    )
    .unwrap();
    let server = Server::start(&db, &["--proxy", "-m", "echo", "--token", OPERATOR]);
    let body = json!({"messages": [{"role": "user", "content": "hi"}]}).to_string();
    let (status, _) = post(&server.address, "/v1/chat/completions", &body, None);
    assert_eq!(status, 401);
    let (status, _) = post(&server.address, "/v1/chat/completions", &body, Some(BOB));
    assert_eq!(status, 200);
    drop(server);
    // Without keys, the server says every client reaches every conversation.
    std::fs::remove_file(db.with_extension("toml")).unwrap();
    let server = Server::start(&db, &["--proxy", "-m", "echo"]);
    let (status, _) = post(&server.address, "/v1/chat/completions", &body, None);
    assert_eq!(status, 200);
    let stderr = server.stop();
    assert!(
        stderr.contains("every client can reach every conversation"),
        "{stderr}"
    );

    #[cfg(feature = "postgres")]
    if let Some(base) = std::env::var("SKEIN_TEST_POSTGRES")
        .ok()
        .filter(|url| !url.is_empty())
    {
        let schema = skein::store::scratch::ScratchSchema::create(&base).unwrap();
        kept_apart(schema.url(), &keys_arg, &mut String::new(), &mut Vec::new());
    }

    /// Alice and Bob through a proxy on `db` with the keys file `keys`;
    /// what the server printed and every answer are added to `printed` and
    /// `answers`.
    fn kept_apart(db: &str, keys: &str, printed: &mut String, answers: &mut Vec<String>) {
        let server = Server::start(
            Path::new(db),
            &[
                "--proxy",
                "-m",
                "echo",
                "--client-keys",
                keys,
                "--token",
                OPERATOR,
            ],
        );
        let mut ask = |path: &str, body: &Value, headers: &[(&str, &str)]| {
            let (status, text) = post_with(&server.address, path, &body.to_string(), headers);
            answers.push(text.clone());
            (status, serde_json::from_str::<Value>(&text).unwrap())
        };
        let chat = |messages: &[(&str, &str)]| {
            let messages: Vec<Value> = messages
                .iter()
                .map(|(role, content)| json!({"role": role, "content": content}))
                .collect();
            json!({"model": "echo", "messages": messages})
        };
        // No key, or one no client has: 401.
        let bearer_mallory = format!("Bearer {MALLORY}");
        for headers in [
            &[][..],
            &[("x-api-key", MALLORY)],
            &[("Authorization", bearer_mallory.as_str())],
        ] {
            let (status, answer) = ask("/v1/chat/completions", &chat(&[("user", "hi")]), headers);
            assert_eq!(status, 401, "{answer}");
        }
        // A client's key opens the proxy, not the web view (the operator's).
        let bearer_alice = format!("Bearer {ALICE}");
        let bearer_operator = format!("Bearer {OPERATOR}");
        let (status, _) = get_with(
            &server.address,
            "/api/conversations",
            &[("Authorization", &bearer_alice)],
        );
        assert_eq!(status, 401, "a client key opened the web view");
        let (status, _) = get_with(
            &server.address,
            "/api/conversations",
            &[("Authorization", &bearer_operator)],
        );
        assert_eq!(status, 200);
        // Alice's session, continued with her key as an OpenAI client sends it.
        let alice = [("x-api-key", ALICE), ("x-skein-session", "nightly")];
        let (status, answer) = ask("/v1/chat/completions", &chat(&[("user", "hi")]), &alice);
        assert_eq!(status, 200, "{answer}");
        let reply = answer["choices"][0]["message"]["content"]
            .as_str()
            .unwrap()
            .to_string();
        let history = [
            ("user", "hi"),
            ("assistant", reply.as_str()),
            ("user", "more"),
        ];
        let (status, _) = ask(
            "/v1/chat/completions",
            &chat(&history),
            &[
                ("Authorization", &bearer_alice),
                ("x-skein-session", "nightly"),
            ],
        );
        assert_eq!(status, 200);
        let store = skein::Store::open(db).unwrap();
        let named = |name: &str| {
            store
                .conversation_named(name)
                .unwrap()
                .map(|id| store.conversation(&id).unwrap())
        };
        let hers = named("alice/nightly").expect("Alice's session, under her name");
        assert_eq!(hers.len, 4);
        // Bob's session of that name is his own; her history re-sent by
        // him moves nothing of hers.
        let bob = [("x-api-key", BOB), ("x-skein-session", "nightly")];
        let (status, _) = ask("/v1/chat/completions", &chat(&[("user", "hi")]), &bob);
        assert_eq!(status, 200);
        let (status, _) = ask(
            "/v1/chat/completions",
            &chat(&history),
            &[("x-api-key", BOB)],
        );
        assert_eq!(status, 200);
        let after = named("alice/nightly").unwrap();
        assert_eq!(
            (after.head, after.len),
            (hers.head, hers.len),
            "Alice's session never moved"
        );
        assert!(named("bob/nightly").is_some(), "Bob's own session");
        // A message thread: Bob's continuation of Alice's is a 404, as an
        // unknown one; hers goes on.
        let created = json!({"model": "echo", "max_tokens": 50, "thread": {"type": "create"},
            "messages": [{"role": "user", "content": "t1"}]});
        let (status, answer) = ask("/v1/messages", &created, &[("x-api-key", ALICE)]);
        assert_eq!(status, 200, "{answer}");
        let id = answer["id"].as_str().unwrap().to_string();
        let unknown = format!("msg_{}", "0".repeat(32));
        let continuing = |id: &str| {
            json!({"model": "echo", "max_tokens": 50,
                "thread": {"type": "continue", "previous_message_id": id},
                "messages": [{"role": "user", "content": "t2"}]})
        };
        let (status, refused) = ask("/v1/messages", &continuing(&id), &[("x-api-key", BOB)]);
        assert_eq!(status, 404, "{refused}");
        let (status, lacking) = ask("/v1/messages", &continuing(&unknown), &[("x-api-key", BOB)]);
        assert_eq!(status, 404);
        assert_eq!(
            refused.to_string().replace(&id, "ID"),
            lacking.to_string().replace(&unknown, "ID")
        );
        let (status, answer) = ask("/v1/messages", &continuing(&id), &[("x-api-key", ALICE)]);
        assert_eq!(status, 200, "{answer}");
        // Each run is its key's client's.
        let clients: std::collections::BTreeSet<Option<String>> = store
            .recent_runs(100)
            .unwrap()
            .into_iter()
            .map(|run| run.client)
            .collect();
        assert_eq!(
            clients,
            [Some("alice".to_string()), Some("bob".to_string())].into()
        );
        printed.push_str(&server.stop());
        assert!(
            printed.contains("clients kept apart by their keys: alice, bob"),
            "{printed}"
        );
    }
}

/// A model call that fails through the proxy, on each API, streamed or not
/// (issue 27: the failed run named the request's new user message, which
/// was never stored, so `skein verify` exited 6 and the export could not be
/// imported). The request's messages are stored, the failed run names its
/// last one as its input, no conversation is made, `skein verify` is clean
/// and the export imports. On SQLite and, when `SKEIN_TEST_POSTGRES` names
/// a server, on PostgreSQL.
#[test]
fn a_failed_model_call_keeps_its_request_and_the_database_verifies() {
    let dir = tempfile::tempdir().unwrap();
    failed_calls(
        &dir.path().join("skein.db").display().to_string(),
        dir.path(),
    );
    #[cfg(feature = "postgres")]
    if let Some(base) = std::env::var("SKEIN_TEST_POSTGRES")
        .ok()
        .filter(|url| !url.is_empty())
    {
        let schema = skein::store::scratch::ScratchSchema::create(&base).unwrap();
        failed_calls(schema.url(), dir.path());
    }
}

fn failed_calls(db: &str, scratch: &Path) {
    let server = Server::start(Path::new(db), &["--proxy", "-m", &scripted()]);
    let earlier = [
        json!({"role": "user", "content": "hello there"}),
        json!({"role": "assistant", "content": "you said: hello there"}),
    ];
    let mut sent = Vec::new();
    for stream in [false, true] {
        let mode = if stream { "streamed" } else { "whole" };
        let chat = format!("please fail chat {mode}");
        let messages = format!("please fail messages {mode}");
        let responses = format!("please fail responses {mode}");
        let mut history = earlier.to_vec();
        history.push(json!({"role": "user", "content": chat}));
        let requests = [
            ("/v1/chat/completions", json!({"messages": history})),
            (
                "/v1/messages",
                json!({"max_tokens": 50, "messages": [{"role": "user", "content": messages}]}),
            ),
            ("/v1/responses", json!({"input": responses})),
        ];
        for (path, mut body) in requests {
            body["stream"] = json!(stream);
            let (status, text) = post(&server.address, path, &body.to_string(), None);
            assert_eq!(status, 502, "{path} ({mode}): {text}");
            assert!(text.contains("upstream overloaded"), "{path}: {text}");
        }
        sent.extend([chat, messages, responses]);
    }
    drop(server);

    let store = skein::Store::open(db).unwrap();
    let report = store.verify().unwrap();
    assert!(report.is_ok(), "{:?}", report.problems);
    assert!(store.list_conversations(10).unwrap().is_empty());
    let failed = store.recent_runs(100).unwrap();
    assert_eq!(failed.len(), 6);
    let mut inputs = Vec::new();
    for run in &failed {
        assert_eq!(run.status, skein::store::RunStatus::Failed);
        assert_eq!(run.conversation, None);
        assert!(
            store.request_body(&run.id).unwrap().is_some(),
            "the request body is kept"
        );
        let input = store.node(run.input_head.expect("an input")).unwrap();
        assert_eq!(input.message.role, skein::Role::User);
        inputs.push(input.message.joined_text());
        // The chat completions request's history is stored before it.
        if input.message.joined_text().contains("chat") {
            let thread = store.load_thread(input.id).unwrap();
            assert_eq!(thread.len(), 3);
            assert_eq!(thread.messages()[0].joined_text(), "hello there");
        }
    }
    inputs.sort();
    sent.sort();
    assert_eq!(inputs, sent);
    let found = store
        .search(&skein::store::SearchQuery::new("responses streamed"))
        .unwrap();
    assert_eq!(found.matches.len(), 1, "what the client sent can be found");

    let cli = Cli::new(crate::BIN, scratch.join("unused.db")).on(db);
    cli.ok(&["verify"]);
    let export = scratch.join(format!("export-{}.jsonl", failed[0].id));
    std::fs::write(&export, cli.ok(&["export"])).unwrap();
    let fresh = Cli::new(
        crate::BIN,
        scratch.join(format!("fresh-{}.db", failed[0].id)),
    );
    let imported = fresh.json(&["import", export.to_str().unwrap()]);
    assert_eq!(imported["runs"], 6, "{imported}");
    fresh.ok(&["verify"]);
}

/// A model that fails after its reply began: each API's stream ends with
/// its own error event after the text it had, a request that does not
/// stream gets the API's error, and every failed call keeps its run and the
/// request's message, and no part of the cut reply.
#[test]
fn a_model_failing_mid_reply_ends_each_api_its_own_way() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("skein.db");
    let server = Server::start(&db, &["--proxy", "-m", &scripted()]);
    let user = json!([{"role": "user", "content": "please cut me off"}]);
    let requests = [
        (
            "/v1/chat/completions",
            json!({"messages": user}),
            "data: {\"error\":",
        ),
        (
            "/v1/messages",
            json!({"max_tokens": 50, "messages": user}),
            "event: error\ndata: {\"error\":",
        ),
        (
            "/v1/responses",
            json!({"input": "please cut me off"}),
            "event: error\ndata: {\"code\":",
        ),
    ];
    for (path, body, error_event) in &requests {
        let mut streamed = body.clone();
        streamed["stream"] = json!(true);
        let (status, text) = post(&server.address, path, &streamed.to_string(), None);
        assert_eq!(status, 200, "{path}: the stream had begun: {text}");
        // The raw body is chunked: the text's pieces, then the error.
        let text_at = text
            .find("half ")
            .unwrap_or_else(|| panic!("{path}: {text}"));
        let error_at = text
            .rfind(error_event)
            .unwrap_or_else(|| panic!("{path}: {text}"));
        assert!(
            text_at < error_at,
            "{path}: the error event ends the stream: {text}"
        );
        let (status, text) = post(&server.address, path, &body.to_string(), None);
        assert_eq!(status, 502, "{path}: {text}");
        assert!(text.contains("the model failed"), "{path}: {text}");
    }
    drop(server);
    // One message, the same on every API: sent six times, stored once.
    assert_eq!(count(&db, "SELECT count(*) FROM nodes"), 1);
    assert_eq!(
        count(
            &db,
            "SELECT count(*) FROM runs WHERE status = 'failed' AND request_digest IS NOT NULL \
             AND input_head = (SELECT id FROM nodes)"
        ),
        6
    );
    Cli::new(crate::BIN, &db).ok(&["verify"]);
}

/// Many servers, one graph: two `skein serve --proxy` processes on one
/// PostgreSQL database, 16 `openai` clients at once continuing shared
/// conversations (the same turn sent four times at once, through both
/// servers) and branching them, each request through either server. No
/// turn is lost (every client's whole transcript is a conversation's
/// thread), no node is written twice or left over (the graph holds exactly
/// the transcripts' distinct prefixes), every request has its one run, and
/// each server's web API lists what arrived through the other. Needs
/// `SKEIN_TEST_POSTGRES` (skipped without it, except under CI).
#[cfg(feature = "postgres")]
#[test]
fn two_proxies_on_one_postgres_database_share_one_graph() {
    const CLIENTS: usize = 16;
    const ROUNDS: usize = 4;
    let Some(base) = std::env::var("SKEIN_TEST_POSTGRES")
        .ok()
        .filter(|url| !url.is_empty())
    else {
        assert!(
            std::env::var_os("CI").is_none(),
            "SKEIN_TEST_POSTGRES is not set: CI must run scripts/test"
        );
        eprintln!(
            "SKIPPED two_proxies_on_one_postgres_database_share_one_graph: set \
             SKEIN_TEST_POSTGRES=postgres://... to run it"
        );
        return;
    };
    let Some(python) = python() else { return };
    let schema = skein::store::scratch::ScratchSchema::create(&base).unwrap();
    let db = Path::new(schema.url());
    let servers = [
        Server::start(db, &["--proxy", "-m", "echo"]),
        Server::start(db, &["--proxy", "-m", "echo"]),
    ];
    assert_ne!(servers[0].address, servers[1].address);
    let store = skein::Store::open(schema.url()).unwrap();

    // A conversation that only the second server ever saw.
    let (status, answer) = post(
        &servers[1].address,
        "/v1/chat/completions",
        r#"{"model": "echo", "messages": [{"role": "user", "content": "only through the second"}]}"#,
        None,
    );
    assert_eq!(status, 200, "{answer}");
    let lone = store.list_conversations(1).unwrap().remove(0).id;

    let output = Command::new(&python)
        .arg(data("proxy_many.py"))
        .arg(servers[0].base())
        .arg(servers[1].base())
        .arg(CLIENTS.to_string())
        .arg(ROUNDS.to_string())
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "proxy_many.py failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let transcripts: Vec<Vec<(String, String)>> =
        serde_json::from_slice::<Vec<Vec<Value>>>(&output.stdout)
            .unwrap()
            .iter()
            .map(|messages| {
                messages
                    .iter()
                    .map(|m| {
                        (
                            m["role"].as_str().unwrap().to_string(),
                            m["content"].as_str().unwrap().to_string(),
                        )
                    })
                    .collect()
            })
            .collect();
    assert_eq!(transcripts.len(), CLIENTS);
    for transcript in &transcripts {
        assert_eq!(transcript.len(), 2 * ROUNDS);
        for pair in transcript.chunks(2) {
            assert!(
                pair[1].1.contains(&format!("\"{}\"", pair[0].1)),
                "every reply answers its own request: {pair:?}"
            );
        }
    }

    let threads: Vec<(skein::store::ConversationId, Vec<(String, String)>)> = store
        .list_conversations(1000)
        .unwrap()
        .into_iter()
        .filter(|conversation| conversation.id != lone)
        .map(|conversation| {
            let thread = store.load_thread(conversation.head.unwrap()).unwrap();
            let messages = thread
                .messages()
                .iter()
                .map(|m| {
                    let text: String = m.parts.iter().filter_map(|p| p.as_text()).collect();
                    (m.role.to_string(), text)
                })
                .collect();
            (conversation.id, messages)
        })
        .collect();
    for (client, transcript) in transcripts.iter().enumerate() {
        assert!(
            threads.iter().any(|(_, thread)| thread == transcript),
            "client {client}'s last turn is no conversation's head: {transcript:?}"
        );
    }
    for (id, thread) in &threads {
        assert!(
            transcripts.iter().any(|t| t.starts_with(thread)),
            "conversation {id} holds a thread no client sent: {thread:?}"
        );
    }
    let prefixes: std::collections::HashSet<&[(String, String)]> = transcripts
        .iter()
        .flat_map(|t| (1..=t.len()).map(move |end| &t[..end]))
        .collect();
    let count = |sql: &str| store.debug_query_i64(sql).unwrap();
    assert_eq!(
        count("SELECT count(*) FROM nodes") as usize,
        prefixes.len() + 2,
        "each distinct history is one node (plus the lone conversation's two)"
    );
    assert_eq!(
        count("SELECT count(*) FROM runs") as usize,
        CLIENTS * ROUNDS + 1,
        "every request has its one run"
    );
    assert!(store.verify().unwrap().is_ok());

    // Each server's web view lists every conversation, whichever server
    // it came through.
    let mut stored: Vec<String> = store
        .list_conversations(1000)
        .unwrap()
        .iter()
        .map(|c| c.id.to_string())
        .collect();
    stored.sort();
    for server in &servers {
        let (status, body) = get(&server.address, "/api/conversations?limit=1000");
        assert_eq!(status, 200, "{body}");
        let listed: Value = serde_json::from_str(&body).unwrap();
        let mut ids: Vec<String> = listed["conversations"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["id"].as_str().unwrap().to_string())
            .collect();
        ids.sort();
        assert_eq!(ids, stored, "{} lists them all", server.address);
        assert!(ids.contains(&lone.to_string()));
    }
}
