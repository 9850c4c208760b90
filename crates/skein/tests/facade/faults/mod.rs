/*!
The provider fault matrix: one table of every failure an HTTP provider can
meet, each driven through the facade (`Conversation` with a store attached)
against a local server speaking the provider's wire format.

For every row the table states how many transport retries happen, how many
requests reach the server, and how the turn ends (a reply, a tool error
result the model saw, or a typed error). Every failed turn must leave the
store as it was apart from what the failure rule keeps: the turn's user
message and a run record marked failed whose input it is; no partial
assistant message, no bookmark move.

Retry delays are 5 ms and the idle timeout 300 ms, so the whole table runs
in about three seconds.
*/

mod cases;
mod servers;

use cases::{Case, Outcome, Server, Turn, Wire, cases};
use schemars::JsonSchema;
use serde::Deserialize;
use skein::core::{Part, Role};
use skein::engine::config::{BackendDef, BackendKind, Catalog, CredentialSource, Profile};
use skein::engine::observe::{Event, EventKind};
use skein::engine::{EngineError, Request};
use skein::providers::http::{
    Anthropic, Credential, HttpConfig, OpenAiCompatible, RetryPolicy, Timeouts,
};
use skein::store::RunStatus;
use skein::{Conversation, Engine, Error, Message, Model, Store, Tool, ToolError, tool_fn};
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Deserialize, JsonSchema)]
#[allow(dead_code, reason = "read only through its JSON schema")]
struct City {
    city: String,
}

fn weather() -> Arc<dyn Tool> {
    tool_fn(
        "get_weather",
        "Weather in a city",
        |args: City| async move { Ok::<_, ToolError>(format!("sunny in {}", args.city)) },
    )
}

/// An engine with an `echo` profile (for the turn before the fault) and an
/// `http` profile on a provider with short timeouts and retry delays,
/// recording the delay of every retry its runs announce.
fn engine(wire: Wire, base_url: &str, retries: Arc<Mutex<Vec<Duration>>>) -> Engine {
    let config = HttpConfig::new(base_url, Credential::None)
        .with_timeouts(Timeouts {
            connect: Duration::from_secs(1),
            first_byte: Duration::from_secs(2),
            idle: Duration::from_millis(300),
        })
        .with_retry(RetryPolicy {
            max_retries: 2,
            base_delay: Duration::from_millis(5),
            max_delay: Duration::from_secs(2),
            jitter: false,
        });
    let (kind, provider): (_, Arc<dyn skein::core::Provider>) = match wire {
        Wire::OpenAi => (
            BackendKind::Openai { base_url: None },
            Arc::new(OpenAiCompatible::new(config).unwrap()),
        ),
        Wire::Anthropic => (
            BackendKind::Anthropic { base_url: None },
            Arc::new(Anthropic::new(config).unwrap()),
        ),
    };
    let catalog = Catalog::new()
        .backend(BackendDef::new("echo", BackendKind::Echo))
        .backend(BackendDef::new("http", kind))
        .profile(Profile::new("echo", "echo", "echo"))
        .profile(Profile::new("http", "http", "test-model").credential(CredentialSource::None));
    Engine::builder(catalog)
        .provider("http", provider)
        .tool(weather())
        .observe(Arc::new(move |event: &Event| {
            if let EventKind::Retry { delay, .. } = event.kind {
                retries.lock().unwrap().push(delay);
            }
        }))
        .build()
        .unwrap()
}

/// What the store holds, to compare before and after a turn.
#[derive(Debug, PartialEq)]
struct Snapshot {
    nodes: i64,
    head: Option<skein::NodeId>,
    runs: Vec<(String, RunStatus)>,
}

fn snapshot(store: &Store, conversation: &Conversation) -> Snapshot {
    let nodes = store
        .raw_connection()
        .unwrap()
        .query_row("SELECT count(*) FROM nodes", [], |row| row.get(0))
        .unwrap();
    let runs = store
        .runs_of_conversation(&conversation.id())
        .unwrap()
        .into_iter()
        .map(|run| (run.id.to_string(), run.status))
        .collect();
    Snapshot {
        nodes,
        head: store.conversation(&conversation.id()).unwrap().head,
        runs,
    }
}

#[tokio::test]
async fn every_provider_failure_has_its_retries_its_typed_outcome_and_leaves_no_partial_turn() {
    for case in cases() {
        run_case(case).await;
    }
}

async fn run_case(case: Case) {
    let name = case.name;
    let mut mock = None;
    let mut raw = None;
    let address = match case.server {
        Server::Mock(responses) => {
            let server = servers::sequence(responses).await;
            let uri = server.uri();
            mock = Some(server);
            uri
        }
        Server::Raw(fault) => {
            let server = servers::FaultServer::start(fault).await;
            let url = server.url();
            raw = Some(server);
            url
        }
        Server::Refused => format!("http://{}", servers::refused()),
    };
    let base_url = match case.wire {
        Wire::OpenAi => format!("{address}/v1"),
        Wire::Anthropic => address,
    };
    let retries = Arc::new(Mutex::new(Vec::new()));
    let engine = engine(case.wire, &base_url, retries.clone());
    let http = Model::from_profile(&engine, "http").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("skein.db")).unwrap();
    let conversation = Conversation::builder(Model::from_profile(&engine, "echo").unwrap())
        .store(&store)
        .tool(weather())
        .build();
    conversation.prompt("warm up").send().await.unwrap();
    let before = snapshot(&store, &conversation);

    match (case.turn, case.outcome) {
        (Turn::Prompt, Outcome::Reply(text)) => {
            let response = conversation.prompt("hi").model(&http).send().await;
            let response = response.unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(response.text(), text, "{name}");
            let after = snapshot(&store, &conversation);
            assert_eq!(after.nodes, before.nodes + 2, "{name}: user + whole reply");
            assert_eq!(after.head, Some(response.head()), "{name}");
            let stored = store.load_thread(response.head()).unwrap();
            assert_eq!(stored.messages().last().unwrap().joined_text(), text);
        }
        (Turn::Prompt, Outcome::Fails(expected)) => {
            let error = conversation.prompt("hi").model(&http).send().await;
            let error = error.err().unwrap_or_else(|| panic!("{name}: succeeded"));
            let Error::Engine(EngineError::Generation { error: source, run }) = &error else {
                panic!("{name}: not a generation error: {error:?}")
            };
            assert!(expected(source), "{name}: {source:?}");
            let after = snapshot(&store, &conversation);
            assert_eq!(
                after.nodes,
                before.nodes + 1,
                "{name}: the user's message, and no reply"
            );
            assert_eq!(after.head, before.head, "{name}: the bookmark stays");
            let record = store.run_record(run).unwrap();
            let input = store.node(record.input_head.unwrap()).unwrap();
            assert_eq!(input.message.joined_text(), "hi", "{name}");
            assert_eq!(input.parent, before.head, "{name}");
            let mut runs = before.runs.clone();
            runs.push((run.to_string(), RunStatus::Failed));
            runs.sort_by(|a, b| a.0.cmp(&b.0));
            let mut stored = after.runs;
            stored.sort_by(|a, b| a.0.cmp(&b.0));
            assert_eq!(stored, runs, "{name}: only a failed run record is added");
        }
        (Turn::Chain, Outcome::ToolErrorResult(problem, text)) => {
            let chain = conversation.chain("weather?").model(&http).send().await;
            let chain = chain.unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(chain.text(), text, "{name}");
            let results: Vec<_> = chain
                .thread()
                .messages()
                .iter()
                .filter(|m| m.role == Role::Tool)
                .flat_map(|m| m.parts.iter())
                .filter_map(|part| match part {
                    Part::ToolResult(result) => Some(result.clone()),
                    _ => None,
                })
                .collect();
            assert_eq!(results.len(), 1, "{name}");
            assert!(results[0].is_error, "{name}");
            assert!(results[0].content.contains(problem), "{name}: {results:?}");
            let after = snapshot(&store, &conversation);
            // user, assistant (call), tool result, assistant (text)
            assert_eq!(after.nodes, before.nodes + 4, "{name}");
            assert_eq!(after.head, Some(chain.last().head()), "{name}");
        }
        (Turn::Structured, Outcome::Invalid { attempts }) => {
            let request = Request::messages([Message::user("give me JSON")])
                .profile("http")
                .output_contract(serde_json::json!({
                    "type": "object", "required": ["answer"]
                }))
                .capture();
            let error = engine.run(request).await.unwrap_err();
            let EngineError::Validation {
                attempts: made,
                candidate,
                exchange,
                ..
            } = &error
            else {
                panic!("{name}: {error:?}")
            };
            assert_eq!(*made, attempts, "{name}");
            assert_eq!(candidate, "not json", "{name}");
            // Repairs are not history: the exchange is the request and the
            // last candidate, marked as not validated.
            let exchange = exchange.as_ref().expect("captured");
            assert_eq!(exchange.thread().len(), 2, "{name}");
            assert!(!exchange.is_validated(), "{name}");
            assert_eq!(snapshot(&store, &conversation), before, "{name}");
        }
        _ => unreachable!("{name}: no such combination in the table"),
    }

    let seen = retries.lock().unwrap().clone();
    assert_eq!(seen.len(), case.retries, "{name}: retries {seen:?}");
    if let Some(delay) = case.first_delay {
        assert_eq!(seen[0], delay, "{name}: the server's Retry-After is obeyed");
    }
    let requests = match (mock, raw) {
        (Some(server), _) => Some(server.received_requests().await.unwrap().len()),
        (_, Some(server)) => Some(server.accepted()),
        _ => None,
    };
    assert_eq!(requests, case.requests, "{name}: requests");
    assert!(store.verify().unwrap().is_ok(), "{name}");
}
