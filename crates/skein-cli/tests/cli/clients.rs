//! The client matrix: real client libraries nobody here wrote
//! (langchain-openai, pydantic-ai, instructor, openai-agents; installed by
//! `scripts/python-clients`) drive `skein serve --proxy` through one
//! realistic session each (`tests/data/clients_*.py`) on a scripted model
//! that calls a tool and then answers (`tests/data/clients.toml`), and the
//! recorded shape is asserted: how many conversations and how they link,
//! the tool calls and results in order, each run's request, `verify`
//! clean. A library that changes its wire habits fails here, not a user.
//! Each test runs on SQLite and, when `SKEIN_TEST_POSTGRES` names a server,
//! on PostgreSQL.

use crate::proxy::{client, data};
use crate::python::{instructor_python, python_with};
use crate::serve::Server;
use serde_json::json;
use skein::store::ConversationRecord;
use skein::{Part, Store};
use std::path::Path;

/// The scripted model of these tests (`tests/data/clients.toml`).
fn scripted() -> String {
    format!("scripted:{}", data("clients.toml").display())
}

/// A proxy on `db` serving the scripted model.
fn proxy(db: &Path) -> Server {
    Server::start(db, &["--proxy", "-m", &scripted()])
}

/// The conversations of `db`, oldest first.
fn conversations(db: &Path) -> Vec<ConversationRecord> {
    let mut all = Store::open(db).unwrap().list_conversations(100).unwrap();
    all.sort_by_key(|conversation| conversation.created_ms);
    all
}

/// A conversation's messages, one line each: `role: text`, `role →
/// name(arguments)` for a tool call (the arguments as stored, byte for
/// byte), `role ← content` for a tool result. Asserts that every tool
/// result answers a call of the message just before it.
fn transcript(db: &Path, conversation: &ConversationRecord) -> Vec<String> {
    let store = Store::open(db).unwrap();
    let thread = store.load_thread(conversation.head.unwrap()).unwrap();
    let messages = thread.messages();
    let mut calls_before: Vec<&str> = Vec::new();
    let mut lines = Vec::new();
    for message in messages {
        let mut calls = Vec::new();
        for part in &message.parts {
            let role = message.role;
            lines.push(match part {
                Part::Text { text } => format!("{role}: {text}"),
                Part::ToolCall(call) => {
                    calls.push(call.id.as_str());
                    format!("{role} → {}({})", call.name, call.arguments)
                }
                Part::ToolResult(result) => {
                    assert!(
                        calls_before.contains(&result.call_id.as_str()),
                        "the result for {} follows its call (calls just before: {calls_before:?})",
                        result.call_id
                    );
                    format!("{role} ← {}", result.content)
                }
                other => format!("{role}: [{}]", other.kind_name()),
            });
        }
        calls_before = calls;
    }
    lines
}

/// Run `test` on a SQLite database and, when `SKEIN_TEST_POSTGRES` names a
/// server, on a PostgreSQL schema of its own.
fn on_each_backend(test: impl Fn(&Path)) {
    let dir = tempfile::tempdir().unwrap();
    test(&dir.path().join("skein.db"));
    #[cfg(feature = "postgres")]
    if let Some(base) = std::env::var("SKEIN_TEST_POSTGRES")
        .ok()
        .filter(|url| !url.is_empty())
    {
        let schema = skein::store::scratch::ScratchSchema::create(&base).unwrap();
        test(Path::new(schema.url()));
    }
}

/// `db` verifies clean and holds `[conversations, nodes, runs]`.
fn assert_recorded(db: &Path, counts: [u64; 3]) {
    let report = Store::open(db).unwrap().verify().unwrap();
    assert!(report.is_ok(), "{report:?}");
    assert_eq!(
        [report.conversations, report.nodes, report.runs],
        counts,
        "conversations, nodes, runs"
    );
}

/// How many of `db`'s runs have a request body containing `text`.
fn requests_with(db: &Path, text: &str) -> usize {
    let store = Store::open(db).unwrap();
    let runs = store.recent_runs(1000).unwrap();
    runs.iter()
        .filter(|run| {
            store
                .request_body(&run.id)
                .unwrap()
                .is_some_and(|body| body.whole().expect("a whole body").contains(text))
        })
        .count()
}

/// LangChain re-sends the model's compact arguments `{"city":"Paris"}`
/// through `json.dumps` as `{"city": "Paris"}`: the follow-up continues the
/// one conversation (the call matched by JSON value), whose stored call
/// keeps the model's bytes; LangChain's bytes are on the runs' requests.
#[test]
fn langchain_re_encoded_tool_arguments_continue_one_conversation() {
    let Some(python) = python_with("langchain_openai") else {
        return;
    };
    on_each_backend(|db| {
        let server = proxy(db);
        let results = client(
            &python,
            "clients_langchain.py",
            &format!("{}/v1", server.base()),
        );
        drop(server);
        assert_eq!(
            results,
            json!({"call": ["get_weather", {"city": "Paris"}], "answer": "It is sunny in Paris.",
                   "streamed": "you said: thanks"})
        );

        // system, question, call, result, answer, thanks, streamed reply; three
        // requests.
        assert_recorded(db, [1, 7, 3]);
        let conversation = conversations(db).remove(0);
        assert_eq!(
            transcript(db, &conversation),
            [
                "system: Be brief.",
                "user: what is the weather in Paris?",
                r#"assistant → get_weather({"city":"Paris"})"#,
                "tool ← sunny",
                "assistant: It is sunny in Paris.",
                "user: thanks",
                "assistant: you said: thanks",
            ]
        );
        assert_eq!(
            requests_with(db, r#""arguments":"{\"city\": \"Paris\"}""#),
            2,
            "the follow-ups' runs keep LangChain's re-encoded arguments"
        );
        assert_eq!(
            requests_with(db, r#""stream":true"#),
            1,
            "the last turn was streamed"
        );
    });
}

/// The same LangChain app run twice: with a session marker
/// (`x-skein-session` through the client's default headers) each run is a
/// named conversation of its own, the two sharing their messages; without
/// one the second run only adds runs to the first's conversation (the
/// same messages, decision 14).
#[test]
fn one_app_run_twice_is_two_conversations_with_a_session_marker() {
    let Some(python) = python_with("langchain_openai") else {
        return;
    };
    on_each_backend(|db| {
        let server = proxy(db);
        let base = format!("{}/v1", server.base());
        for session in ["monday run", "tuesday run"] {
            let output = std::process::Command::new(&python)
                .arg(data("clients_langchain.py"))
                .args([&base, session])
                .output()
                .unwrap();
            assert!(
                output.status.success(),
                "{}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
        drop(server);
        assert_recorded(db, [2, 7, 6]);
        let [monday, tuesday] = <[ConversationRecord; 2]>::try_from(conversations(db)).unwrap();
        assert_eq!(monday.name.as_deref(), Some("monday run"));
        assert_eq!(tuesday.name.as_deref(), Some("tuesday run"));
        assert_eq!(monday.head, tuesday.head, "the same messages, shared");
        assert_eq!((monday.len, tuesday.len), (7, 7));
        assert_eq!(tuesday.origin, None, "a new session branches from nothing");
        assert_eq!(transcript(db, &monday), transcript(db, &tuesday));
    });
    on_each_backend(|db| {
        let server = proxy(db);
        for _ in 0..2 {
            client(
                &python,
                "clients_langchain.py",
                &format!("{}/v1", server.base()),
            );
        }
        drop(server);
        assert_recorded(db, [1, 7, 6]);
    });
}

/// A pydantic-ai agent with a tool and structured output (its
/// `final_result` output tool), asked twice on one message history (the
/// second time streamed): one conversation, each tool call followed by its
/// result.
#[test]
fn a_pydantic_ai_agent_with_a_tool_and_structured_output_is_one_conversation() {
    let Some(python) = python_with("pydantic_ai") else {
        return;
    };
    on_each_backend(|db| {
        let server = proxy(db);
        let results = client(
            &python,
            "clients_pydantic_ai.py",
            &format!("{}/v1", server.base()),
        );
        drop(server);
        let forecast = json!({"city": "Paris", "weather": "sunny"});
        assert_eq!(results, json!({"first": forecast, "streamed": forecast}));

        // Two model calls per question: the tool, then the output tool.
        assert_recorded(db, [1, 10, 4]);
        let conversation = conversations(db).remove(0);
        let weather = r#"assistant → get_weather({"city":"Paris"})"#;
        let output = r#"assistant → final_result({"city":"Paris","weather":"sunny"})"#;
        assert_eq!(
            transcript(db, &conversation),
            [
                "system: Be brief.",
                "user: what is the weather in Paris?",
                weather,
                "tool ← sunny",
                output,
                "tool ← Final result processed.",
                "user: and now?",
                weather,
                "tool ← sunny",
                output,
            ]
        );
        assert_eq!(
            requests_with(db, r#""stream":true"#),
            2,
            "the second question was streamed"
        );
    });
}

/// instructor (Responses tools mode) retries a reply that fails validation
/// by re-sending the question and the validation error, the bad reply
/// dropped: the retry is a branch of the first attempt's conversation at
/// the question, not an unlinked conversation. The streamed follow-up
/// (`create_partial`), whose history holds the extraction as assistant
/// text, is another branch there.
#[test]
fn an_instructor_validation_retry_branches_the_first_attempt() {
    let Some(python) = instructor_python() else {
        return;
    };
    on_each_backend(|db| {
        let server = proxy(db);
        let results = client(
            &python,
            "clients_instructor.py",
            &format!("{}/v1", server.base()),
        );
        drop(server);
        assert_eq!(
            results,
            json!({"first": {"city": "Paris", "temperature_c": 21},
                   "streamed": {"city": "Lyon", "temperature_c": 15}})
        );

        // The question, the bad call; the validation error, the good call; the
        // extraction as text, the next question, its call.
        assert_recorded(db, [3, 7, 3]);
        let [attempt, retry, follow_up] =
            <[ConversationRecord; 3]>::try_from(conversations(db)).unwrap();
        let question = "user: Paris: sunny, 21 degrees. Extract the weather.";
        assert_eq!(
            transcript(db, &attempt),
            [
                question,
                r#"assistant → Weather({"city":"Paris","temperature_c":"warm"})"#
            ]
        );
        let retried = transcript(db, &retry);
        assert_eq!(retried.len(), 3, "{retried:?}");
        assert_eq!(retried[0], question);
        assert!(
            retried[1].starts_with("user: Validation Error found:"),
            "{retried:?}"
        );
        assert_eq!(
            retried[2],
            r#"assistant → Weather({"city":"Paris","temperature_c":21})"#
        );
        assert_eq!(
            transcript(db, &follow_up),
            [
                question,
                r#"assistant: {"city":"Paris","temperature_c":21}"#,
                "user: Lyon: cloudy, 15 degrees. Extract the weather.",
                r#"assistant → PartialWeather({"city":"Lyon","temperature_c":15})"#,
            ]
        );
        let store = Store::open(db).unwrap();
        let at_question = store
            .load_thread(attempt.head.unwrap())
            .unwrap()
            .parent()
            .head_id();
        for branch in [&retry, &follow_up] {
            let origin = branch.origin.as_ref().expect("linked to the first attempt");
            assert_eq!(origin.conversation.as_ref(), Some(&attempt.id));
            assert_eq!(origin.node, at_question, "at the question");
        }
        assert_eq!(
            requests_with(db, r#""stream":true"#),
            1,
            "the follow-up was streamed"
        );
    });
}

/// openai-agents (Responses API) hands a question off from a triage agent
/// to a weather specialist, streamed, then asks the specialist a
/// follow-up: the triage conversation ends in the handoff call, and the
/// specialist's conversation (its own instructions, the question and the
/// handoff call again, its tool round trip, the follow-up) has the triage
/// conversation's handoff call as its origin, linked by the call's id.
#[test]
fn an_openai_agents_handoff_links_the_specialist_to_the_triage_conversation() {
    let Some(python) = python_with("agents") else {
        return;
    };
    on_each_backend(|db| {
        let server = proxy(db);
        let results = client(
            &python,
            "clients_agents.py",
            &format!("{}/v1", server.base()),
        );
        drop(server);
        assert_eq!(
            results,
            json!({"streamed": "It is sunny in Paris.", "answer": "It is sunny in Paris.",
                   "agent": "Weather specialist", "follow_up": "You are welcome."})
        );

        // Triage: one request; the specialist: the tool call, the answer, the
        // follow-up.
        assert_recorded(db, [2, 12, 4]);
        let [triage, specialist] = <[ConversationRecord; 2]>::try_from(conversations(db)).unwrap();
        let question = "user: what is the weather in Paris?";
        let handoff = "assistant → transfer_to_weather_specialist({})";
        assert_eq!(
            transcript(db, &triage),
            [
                "system: You are the triage agent: hand weather questions off.",
                question,
                handoff,
            ]
        );
        assert_eq!(
            transcript(db, &specialist),
            [
                "system: You are the weather specialist: look the weather up.",
                question,
                handoff,
                r#"tool ← {"assistant": "Weather specialist"}"#,
                r#"assistant → get_weather({"city":"Paris"})"#,
                "tool ← sunny",
                "assistant: It is sunny in Paris.",
                "user: thanks",
                "assistant: You are welcome.",
            ]
        );
        assert_eq!(
            requests_with(db, r#""stream":true"#),
            3,
            "the handed-off run was streamed, the follow-up not"
        );
        assert_eq!(
            handoff_call_ids(db, &triage),
            handoff_call_ids(db, &specialist),
            "the specialist carries the triage's handoff call"
        );
        let origin = specialist
            .origin
            .as_ref()
            .expect("the specialist's conversation links to the triage's");
        assert_eq!(origin.conversation.as_ref(), Some(&triage.id));
        assert_eq!(
            origin.node, triage.head,
            "at the message that made the call"
        );
    });
}

/// The ids of the handoff calls in a conversation.
fn handoff_call_ids(db: &Path, conversation: &ConversationRecord) -> Vec<String> {
    let store = Store::open(db).unwrap();
    let thread = store.load_thread(conversation.head.unwrap()).unwrap();
    thread
        .messages()
        .into_iter()
        .flat_map(|message| &message.parts)
        .filter_map(|part| match part {
            Part::ToolCall(call) if call.name.starts_with("transfer_to_") => Some(call.id.clone()),
            _ => None,
        })
        .collect()
}

/// The anthropic SDK's default tool runner keeps the conversation on the
/// server as a message thread: a `create`, then `continue`s from the last
/// reply's id that carry only the tool results. Through the proxy a loop
/// of two tool calls and the answer is ONE conversation of the whole loop
/// (the stored system prompt and tools carried over from the reply each
/// `continue` names), every `continue` recorded as sent.
#[test]
fn the_anthropic_tool_runner_on_a_message_thread_is_one_conversation() {
    let Some(python) = python_with("anthropic") else {
        return;
    };
    on_each_backend(|db| {
        let server = proxy(db);
        let results = client(&python, "clients_anthropic.py", &server.base());
        drop(server);
        assert_eq!(
            results,
            json!({"steps": [
                ["find_city", {"query": "the capital of France"}],
                ["get_forecast", {"city": "Paris"}],
                "Tomorrow: FORECAST Paris: sunny.",
            ]})
        );

        // system, question, two calls with their results, the answer; three
        // requests.
        assert_recorded(db, [1, 7, 3]);
        let conversation = conversations(db).remove(0);
        assert_eq!(
            transcript(db, &conversation),
            [
                "system: Be brief.",
                "user: what is tomorrow's weather in the capital of France?",
                r#"assistant → find_city({"query":"the capital of France"})"#,
                "tool ← Paris",
                r#"assistant → get_forecast({"city":"Paris"})"#,
                "tool ← FORECAST Paris: sunny",
                "assistant: Tomorrow: FORECAST Paris: sunny.",
            ]
        );
        assert_eq!(requests_with(db, r#""thread":{"type":"create"}"#), 1);
        assert_eq!(
            requests_with(db, r#""previous_message_id":"msg_"#),
            2,
            "the runner stayed on its thread: each follow-up sent only its results"
        );
        let runs = Store::open(db).unwrap().recent_runs(10).unwrap();
        assert!(
            runs.iter().all(|run| run.tools.len() == 2),
            "every call was offered the thread's two tools"
        );
    });
}

/// Run a client script with its run's name after the base; what it
/// printed, as JSON.
fn client_run(python: &Path, script: &str, base: &str, run: &str) -> serde_json::Value {
    let output = std::process::Command::new(python)
        .arg(data(script))
        .args([base, run])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{script} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

/// The conversation of `db` named `name`.
fn named(db: &Path, name: &str) -> ConversationRecord {
    let store = Store::open(db).unwrap();
    let id = store.conversation_named(name).unwrap();
    store
        .conversation(&id.unwrap_or_else(|| panic!("no conversation named {name}")))
        .unwrap()
}

/// The anthropic SDK on what the proxy's models cannot honour in full:
/// `count_tokens` raises `NotFoundError` carrying Anthropic's error body;
/// extended thinking is answered without it, whole and streamed, the
/// `x-skein-unhonoured` header saying so and the run keeping the
/// `thinking` asked for. `metadata.user_id` names a session its follow-up
/// continues: the app run twice under two ids is two conversations.
#[test]
fn the_anthropic_client_hears_what_was_not_honoured_and_names_its_sessions() {
    let Some(python) = python_with("anthropic") else {
        return;
    };
    on_each_backend(|db| {
        let server = proxy(db);
        let script = "clients_anthropic_options.py";
        let monday = client_run(&python, script, &server.base(), "monday");
        let tuesday = client_run(&python, script, &server.base(), "tuesday");
        drop(server);
        assert_eq!(monday, tuesday, "a deterministic model answers alike");
        assert_eq!(monday["count_tokens"][0], 404);
        assert_eq!(monday["count_tokens"][1], "not_found_error");
        assert!(
            monday["count_tokens"][2]
                .as_str()
                .unwrap()
                .contains("does not count tokens"),
            "{monday}"
        );
        assert_eq!(
            monday["thinking"],
            json!(["thinking", ["text"], "you said: think hard"])
        );
        assert_eq!(
            monday["thinking_streamed"],
            json!(["thinking", "you said: think again"])
        );
        assert_eq!(monday["session"], "you said: more");

        // The two thinking requests (each run's the same: decision 14), and
        // the two sessions sharing their four messages; eight runs.
        assert_recorded(db, [4, 8, 8]);
        let (monday, tuesday) = (named(db, "monday"), named(db, "tuesday"));
        assert_eq!(
            (monday.len, tuesday.len),
            (4, 4),
            "each follow-up continued"
        );
        assert_eq!(monday.head, tuesday.head, "the same messages, shared");
        assert_eq!(tuesday.origin, None, "a new session branches from nothing");
        assert_eq!(
            requests_with(db, r#""thinking":{"type":"enabled","budget_tokens":1024}"#),
            4,
            "the runs keep the thinking asked for"
        );
    });
}

/// The official openai client names sessions with the APIs' own fields
/// (chat completions' `user` and `metadata`, the Responses API's
/// `metadata`), no session header: each is a conversation of that name,
/// continued by its follow-up, and the app run twice is six conversations
/// sharing their four messages. Each run keeps its client (the
/// `x-skein-client` header, else `user`), shown by `skein show`, and
/// `[retention.clients.NAME]` makes `skein gc` delete exactly the
/// conversations holding that client's runs.
#[test]
fn the_openai_client_names_sessions_with_user_and_metadata() {
    let Some(python) = python_with("openai") else {
        return;
    };
    on_each_backend(|db| {
        let server = proxy(db);
        let base = format!("{}/v1", server.base());
        for run in ["monday", "tuesday"] {
            let answers = client_run(&python, "clients_openai_sessions.py", &base, run);
            assert_eq!(
                answers,
                json!({"chat": "you said: more", "meta": "you said: more",
                       "responses": "you said: more"})
            );
        }
        drop(server);
        assert_recorded(db, [6, 4, 12]);
        let first = named(db, "monday-chat");
        for run in ["monday", "tuesday"] {
            for (api, client) in [("chat", "chat"), ("meta", "app"), ("responses", "app")] {
                let session = named(db, &format!("{run}-{api}"));
                assert_eq!(session.len, 4, "{run}-{api}: its follow-up continued it");
                assert_eq!(session.head, first.head, "{run}-{api}");
                assert_eq!(session.origin, None, "{run}-{api}");
                let runs = Store::open(db)
                    .unwrap()
                    .runs_of_conversation(&session.id)
                    .unwrap();
                let clients: Vec<Option<&str>> =
                    runs.iter().map(|run| run.client.as_deref()).collect();
                let expected = format!("{run}-{client}");
                assert_eq!(clients, [Some(expected.as_str()); 2], "{run}-{api}");
            }
        }
        let scratch = tempfile::tempdir().unwrap();
        let cli = skein_testkit::Cli::new(crate::BIN, scratch.path().join("unused.db")).on(db);
        let shown = cli.ok(&["show", &first.head.unwrap().to_string()]);
        assert!(shown.contains("client monday-chat"), "{shown}");
        let logged = cli.ok(&["log", "-n", "20"]);
        assert!(logged.contains(" · client monday-chat"), "{logged}");

        // `skein delete --client` plans the deletion of that client's.
        let plan = cli.json(&["delete", "--client", "tuesday-chat", "--dry-run"]);
        assert_eq!(
            plan["conversations"],
            json!([named(db, "tuesday-chat").id.0]),
            "{plan}"
        );
        let mut expected = vec![
            named(db, "monday-meta").id.0,
            named(db, "monday-responses").id.0,
        ];
        expected.sort();
        let config = scratch.path().join("config.toml");
        std::fs::write(
            &config,
            "[retention.clients.monday-app]\nolder_than = \"0min\"\n",
        )
        .unwrap();
        let collected = cli.config(&config).json(&["gc"]);
        let mut deleted: Vec<String> = collected["retention"][0][1]["conversations"]
            .as_array()
            .unwrap()
            .iter()
            .map(|id| id.as_str().unwrap().to_string())
            .collect();
        deleted.sort();
        assert_eq!(deleted, expected, "{collected}");
        assert_eq!(
            collected["retention"][0][0],
            "clients.monday-app.older_than = \"0min\""
        );
        assert_recorded(db, [4, 4, 8]);
    });
}
