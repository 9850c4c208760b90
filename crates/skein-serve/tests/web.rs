//! The web view's JSON API and embedded page, served for real on a free
//! loopback port, against temporary databases filled through the library
//! (the echo model, conversations with a store, forks of responses) and,
//! for parts the echo model never writes, through the store directly; and
//! traffic recorded through the proxy, replayed on another model.

use reqwest::StatusCode;
use serde_json::Value;
use skein::core::{Annotation, Attachment, Part, ToolCall, ToolResult, ToolSpec};
use skein::store::{ConversationId, NewConversation, Origin, Relation, RunRecord, RunStatus};
use skein::{Message, Model, Store, Thread};
use skein_serve::{ConnectionLimits, DEFAULT_BODY_LIMIT, ModelNames, ProxyConfig, ServeConfig};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// A running server over a temporary database.
struct Server {
    /// `127.0.0.1:PORT`.
    address: SocketAddr,
    base: String,
    store: Store,
    client: reqwest::Client,
    _dir: tempfile::TempDir,
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl Server {
    async fn start() -> Server {
        Server::start_configured(|_| {}).await
    }

    async fn start_with(token: Option<&str>) -> Server {
        Server::start_configured(|config| config.token = token.map(str::to_string)).await
    }

    /// With the recording proxy forwarding to the echo model.
    async fn proxying(token: Option<&str>) -> Server {
        Server::start_configured(|config| {
            config.token = token.map(str::to_string);
            config.proxy = Some(ProxyConfig::new(Model::open("echo").unwrap()));
        })
        .await
    }

    async fn start_configured(configure: impl FnOnce(&mut ServeConfig)) -> Server {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path().join("skein.db")).unwrap();
        let mut config = ServeConfig {
            bind: "127.0.0.1:0".parse().unwrap(),
            token: None,
            store: store.clone(),
            proxy: None,
            body_limit: DEFAULT_BODY_LIMIT,
            limits: ConnectionLimits::default(),
            read_only: false,
            models: Arc::new(ModelNames::new("echo", Vec::new())),
            prices: Arc::new(echo_prices()),
        };
        configure(&mut config);
        let (bound_tx, bound_rx) = tokio::sync::oneshot::channel::<SocketAddr>();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(async move {
            skein_serve::serve(
                config,
                move |bound| {
                    let _ = bound_tx.send(bound);
                },
                async move {
                    let _ = stop_rx.await;
                },
            )
            .await
            .unwrap();
        });
        let bound = bound_rx.await.unwrap();
        skein::providers::http::install_crypto_provider();
        Server {
            address: bound,
            base: format!("http://{bound}"),
            store,
            client: reqwest::Client::builder().no_proxy().build().unwrap(),
            _dir: dir,
            _stop: stop_tx,
        }
    }

    async fn get(&self, path: &str) -> reqwest::Response {
        self.client
            .get(format!("{}{path}", self.base))
            .send()
            .await
            .unwrap()
    }

    /// GET a JSON route that must succeed.
    async fn json(&self, path: &str) -> Value {
        let response = self.get(path).await;
        let status = response.status();
        let body = response.text().await.unwrap();
        assert_eq!(status, StatusCode::OK, "GET {path}: {body}");
        serde_json::from_str(&body).unwrap()
    }

    /// GET a JSON route that must fail with `status`; returns its message.
    async fn error(&self, path: &str, status: StatusCode) -> String {
        let response = self.get(path).await;
        assert_eq!(response.status(), status, "GET {path}");
        let body: Value = response.json().await.unwrap();
        body["error"].as_str().unwrap().to_string()
    }
}

/// main: q1 → a1 → q2 → a2; what-if forked at a1: q3 → a3.
struct Story {
    main: String,
    fork: String,
    a1: String,
    a2: String,
    a3: String,
}

async fn story(store: &Store) -> Story {
    let model = Model::open("echo").unwrap();
    let main = model.conversation().name("main").store(store).build();
    let first = main.prompt("Name a river.").send().await.unwrap();
    let second = main.prompt("Name another.").send().await.unwrap();
    let branch = first
        .fork()
        .name("what-if")
        .prompt("Name a lake.")
        .send()
        .await
        .unwrap();
    Story {
        main: main.id().to_string(),
        fork: branch.conversation().id().to_string(),
        a1: first.head().to_hex(),
        a2: second.head().to_hex(),
        a3: branch.head().to_hex(),
    }
}

/// No built-in prices; `echo` at $1 per million input tokens and $2 per
/// million output.
fn echo_prices() -> skein::core::price::PriceTable {
    skein::core::price::PriceTable::empty().with(
        "echo",
        skein::core::price::Price {
            input: 1.0,
            output: 2.0,
            cache_read: None,
            cache_write: None,
        },
    )
}

/// What `run`'s usage (as the API shows it) costs at [`echo_prices`].
fn echo_cost(run: &Value) -> f64 {
    let usage = &run["usage"];
    (usage["input_tokens"].as_f64().unwrap() + 2.0 * usage["output_tokens"].as_f64().unwrap()) / 1e6
}

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .unwrap()
        .iter()
        .map(|item| item.as_str().unwrap().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conversations_are_listed_newest_first_with_heads_lengths_and_origins() {
    let server = Server::start().await;
    let empty = server.json("/api/conversations").await;
    assert_eq!(empty["conversations"], Value::Array(vec![]));
    let story = story(&server.store).await;

    let list = server.json("/api/conversations").await;
    let conversations = list["conversations"].as_array().unwrap();
    assert_eq!(conversations.len(), 2);
    assert_eq!(list["truncated"], false);
    let fork = &conversations[0];
    assert_eq!(fork["id"], story.fork.as_str());
    assert_eq!(fork["name"], "what-if");
    assert_eq!(fork["short"], &story.fork[..12]);
    assert_eq!(fork["head"], story.a3.as_str());
    assert_eq!(fork["len"], 4);
    assert_eq!(fork["origin"]["node"], story.a1.as_str());
    assert_eq!(fork["origin"]["conversation"], story.main.as_str());
    assert_eq!(fork["model"], "echo");
    assert!(fork["preview"].as_str().unwrap().contains("Name a lake."));
    let main = &conversations[1];
    assert_eq!(main["id"], story.main.as_str());
    assert_eq!(main["len"], 4);
    assert_eq!(main["origin"], Value::Null);
    assert!(main["updated_ms"].as_i64().unwrap() >= main["created_ms"].as_i64().unwrap());

    let one = server.json("/api/conversations?limit=1").await;
    assert_eq!(one["conversations"].as_array().unwrap().len(), 1);
    assert_eq!(one["truncated"], true);

    let by_prefix = server
        .json(&format!("/api/conversations/{}", &story.fork[..6]))
        .await;
    assert_eq!(by_prefix["id"], story.fork.as_str());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_family_is_the_main_line_with_its_forks_as_branches_and_every_head_marked() {
    let server = Server::start().await;
    let story = story(&server.store).await;

    let family = server
        .json(&format!("/api/conversations/{}/family", story.main))
        .await;
    assert_eq!(family["focus"], story.main.as_str());
    assert_eq!(family["truncated"], false);
    assert_eq!(family["nodes"].as_array().unwrap().len(), 6);
    assert_eq!(family["roots"].as_array().unwrap().len(), 1);
    let members: Vec<&str> = family["conversations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap())
        .collect();
    assert_eq!(members, [story.main.as_str(), story.fork.as_str()]);

    let branches = family["branches"].as_array().unwrap();
    assert_eq!(branches.len(), 2, "{branches:#?}");
    let (trunk, fork) = (&branches[0], &branches[1]);
    assert_eq!(trunk["kind"], "root");
    assert_eq!(trunk["label"], "main");
    assert_eq!(trunk["conversation"], story.main.as_str());
    assert_eq!(trunk["nodes"].as_array().unwrap().len(), 4);
    assert_eq!(strings(&trunk["nodes"])[3], story.a2);
    assert_eq!(fork["kind"], "fork");
    assert_eq!(fork["label"], "what-if");
    assert_eq!(fork["from"], story.a1.as_str());
    assert_eq!(fork["parent"], trunk["id"]);
    assert_eq!(fork["conversation"], story.fork.as_str());
    assert_eq!(strings(&fork["nodes"]).last().unwrap(), &story.a3);
    assert_eq!(fork["rerun"], Value::Null);

    // The family's usage: its three runs, the one both lines share once,
    // priced at the server's prices.
    let mut expected = 0.0;
    for answer in [&story.a1, &story.a2, &story.a3] {
        let runs = server.json(&format!("/api/nodes/{answer}")).await["runs"].clone();
        assert_eq!(runs.as_array().unwrap().len(), 1);
        assert!((runs[0]["usage"]["cost"].as_f64().unwrap() - echo_cost(&runs[0])).abs() < 1e-12);
        expected += echo_cost(&runs[0]);
    }
    let usage = &family["usage"];
    assert_eq!(usage["runs"], 3);
    assert!((usage["cost"]["dollars"].as_f64().unwrap() - expected).abs() < 1e-12);
    assert_eq!(usage["cost"]["unpriced"], Value::Array(vec![]));
    assert_eq!(usage["cache_hit_rate"], 0.0);

    let node = |id: &str| {
        family["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|n| n["id"] == id)
            .cloned()
            .unwrap()
    };
    assert_eq!(strings(&node(&story.a2)["heads"]), vec![story.main.clone()]);
    assert_eq!(strings(&node(&story.a3)["heads"]), vec![story.fork.clone()]);
    assert_eq!(node(&story.a1)["heads"], Value::Array(vec![]));
    assert_eq!(node(&story.a3)["branch"], fork["id"]);
    assert_eq!(node(&story.a1)["role"], "assistant");
    assert!(
        node(&story.a3)["preview"]
            .as_str()
            .unwrap()
            .contains("Name a lake.")
    );

    // The fork's family is the same graph, cut the same way.
    let from_fork = server
        .json(&format!("/api/conversations/{}/family", &story.fork[..8]))
        .await;
    assert_eq!(from_fork["focus"], story.fork.as_str());
    assert_eq!(from_fork["branches"], family["branches"]);

    // A limit cuts the subtree but never the focus's own history.
    let cut = server
        .json(&format!("/api/conversations/{}/family?limit=2", story.fork))
        .await;
    assert_eq!(cut["truncated"], true);
    let ids: Vec<&str> = cut["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["id"].as_str().unwrap())
        .collect();
    assert!(ids.contains(&story.a3.as_str()), "{ids:?}");
}

/// The family is joined by origin: a fork at a node no conversation heads
/// comes from the conversation whose turn produced the node, and a fork from
/// a rerun's answer names its conversation. Conversations that merely share
/// messages by content (the same first question asked again on the
/// deterministic echo model, one that starts at a stored node naming no
/// conversation, as the proxy records an edited history) are listed and
/// drawn as sharing, never as members or continuations.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_at_a_node_no_conversation_heads_joins_the_family_and_lookalikes_only_share() {
    let server = Server::start().await;
    let story = story(&server.store).await;
    // `skein fork NODE` at a mid-thread node: the branch keeps the settings
    // of the conversation whose turn produced the node, and names it.
    let model = Model::open("echo").unwrap();
    let a1 = server
        .store
        .nonblocking()
        .resolve_node(&story.a1)
        .await
        .unwrap();
    let fork = skein::Conversation::fork_at(&server.store, a1, &model)
        .await
        .unwrap()
        .name("bare")
        .prompt("Name a sea.")
        .send()
        .await
        .unwrap();
    assert_eq!(
        fork.conversation().origin().unwrap().conversation,
        Some(ConversationId(story.main.clone()))
    );
    // The same first question asked afresh: shared nodes, no fork record.
    let again = model
        .conversation()
        .name("again")
        .store(&server.store)
        .build();
    again.prompt("Name a river.").send().await.unwrap();
    again.prompt("Name a mountain.").send().await.unwrap();
    // Starting at a stored node, naming no conversation.
    let edited = server
        .store
        .create_conversation(NewConversation {
            name: Some("edited".into()),
            head: Some(story.a1.parse().unwrap()),
            origin: Some(Origin {
                node: Some(story.a1.parse().unwrap()),
                ..Origin::default()
            }),
            ..NewConversation::default()
        })
        .unwrap();
    skein::Conversation::load(&server.store, &edited.id, &model)
        .await
        .unwrap()
        .prompt("Name a desert.")
        .send()
        .await
        .unwrap();

    // A conversation forked from a rerun's answer (issue 7 records these).
    let rerun_fork = server
        .store
        .create_conversation(NewConversation {
            name: Some("counterfactual".into()),
            head: Some(story.a2.parse().unwrap()),
            origin: Some(Origin {
                node: Some(story.a2.parse().unwrap()),
                conversation: Some(ConversationId(story.main.clone())),
                rerun: Some(skein::core::RerunId("0123abcd".into())),
            }),
            ..NewConversation::default()
        })
        .unwrap();
    skein::Conversation::load(&server.store, &rerun_fork.id, &model)
        .await
        .unwrap()
        .prompt("And without the source?")
        .send()
        .await
        .unwrap();

    let family = server
        .json(&format!("/api/conversations/{}/family", story.main))
        .await;
    let kinds: Vec<(String, String)> = family["branches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| {
            (
                b["label"].as_str().unwrap().to_string(),
                b["kind"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let expect = |label: &str, kind: &str| {
        assert!(
            kinds.contains(&(label.to_string(), kind.to_string())),
            "{label} as {kind} in {kinds:?}"
        );
    };
    expect("main", "root");
    expect("what-if", "fork");
    expect("bare", "fork");
    expect("again", "shares");
    expect("edited", "shares");
    expect("counterfactual", "rerun");
    let rerun = family["branches"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["kind"] == "rerun")
        .unwrap();
    assert_eq!(rerun["rerun"]["id"], "0123abcd");
    assert_eq!(rerun["from"], story.a2.as_str());
    let names = |list: &Value| -> Vec<String> {
        let mut names: Vec<String> = list
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap().to_string())
            .collect();
        names.sort();
        names
    };
    assert_eq!(
        names(&family["conversations"]),
        ["bare", "counterfactual", "main", "what-if"]
    );
    assert_eq!(names(&family["shares"]), ["again", "edited"]);
    assert_eq!(family["more_shares"], false);
    assert_eq!(family["more_conversations"], false);

    // From a lookalike, the story is what shares.
    let from_again = server
        .json(&format!("/api/conversations/{}/family", again.id()))
        .await;
    assert_eq!(names(&from_again["conversations"]), ["again"]);
    assert_eq!(
        names(&from_again["shares"]),
        ["bare", "counterfactual", "edited", "main", "what-if"]
    );
    let trunk = &from_again["branches"][0];
    assert_eq!(
        trunk["label"], "again",
        "a member owns the trunk, not a sharer"
    );
}

/// Deleting a conversation and erasing a message from the page: both need
/// the CSRF token, a read-only server refuses them, a dry run changes
/// nothing, the fork keeps the messages it shares, and an erased message is
/// shown as erased with its id and place unchanged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conversation_is_deleted_and_a_message_erased_from_the_page() {
    let server = Server::start().await;
    let story = story(&server.store).await;
    // Without the token: refused, nothing deleted.
    let (status, _) = server
        .write(
            &format!("/api/conversations/{}/delete", story.main),
            "{}",
            &[],
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let plan: Value = serde_json::from_str(
        &server
            .act(
                &format!("/api/conversations/{}/delete", story.main),
                serde_json::json!({"dry_run": true}),
            )
            .await,
    )
    .unwrap();
    assert_eq!(plan["dry_run"], true);
    assert_eq!(plan["messages"], 2, "{plan}");
    server
        .json(&format!("/api/conversations/{}", story.main))
        .await;

    // Erase the first answer, which the fork shares.
    let redacted: Value = serde_json::from_str(
        &server
            .act(
                &format!("/api/nodes/{}/redact", &story.a1[..12]),
                serde_json::json!({"reason": "named the wrong river", "by": "ana"}),
            )
            .await,
    )
    .unwrap();
    assert_eq!(redacted["node"], story.a1.as_str());
    let node = server.json(&format!("/api/nodes/{}", story.a1)).await;
    assert_eq!(node["id"], story.a1.as_str());
    assert_eq!(node["parts"][0]["type"], "erased");
    assert_eq!(node["parts"][0]["was"], "text");
    assert_eq!(node["parts"][0]["reason"], "named the wrong river");
    assert_eq!(node["parts"][0]["erased_by"], "ana");
    let message = server
        .refused(
            &format!("/api/nodes/{}/redact", story.a1),
            serde_json::json!({"reason": " "}),
            StatusCode::BAD_REQUEST,
        )
        .await;
    assert!(message.contains("reason"), "{message}");

    let done: Value = serde_json::from_str(
        &server
            .act(
                &format!("/api/conversations/{}/delete", story.main),
                serde_json::json!({}),
            )
            .await,
    )
    .unwrap();
    assert_eq!(done["messages"], 2, "{done}");
    assert_eq!(done["kept_messages"], 2, "{done}");
    server
        .error(
            &format!("/api/conversations/{}", story.main),
            StatusCode::NOT_FOUND,
        )
        .await;
    let fork = server
        .json(&format!("/api/conversations/{}", story.fork))
        .await;
    assert_eq!(fork["head"], story.a3.as_str());
    let report = server.store.verify().unwrap();
    assert!(report.is_ok(), "{:?}", report.problems);
    assert_eq!(report.erased, 1);

    let read_only = Server::start_configured(|config| config.read_only = true).await;
    let other = crate::story(&read_only.store).await;
    for path in [
        format!("/api/conversations/{}/delete", other.main),
        format!("/api/nodes/{}/redact", other.a1),
    ] {
        let message = read_only
            .refused(
                &path,
                serde_json::json!({"reason": "x"}),
                StatusCode::FORBIDDEN,
            )
            .await;
        assert!(message.contains("read-only"), "{message}");
    }
    read_only
        .json(&format!("/api/conversations/{}", other.main))
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_shows_its_parts_and_the_runs_that_produced_it() {
    let server = Server::start().await;
    let story = story(&server.store).await;

    let answer = server
        .json(&format!("/api/nodes/{}", &story.a1[..10]))
        .await;
    assert_eq!(answer["id"], story.a1.as_str());
    assert_eq!(answer["role"], "assistant");
    assert_eq!(answer["depth"], 1);
    assert_eq!(answer["parts"][0]["type"], "text");
    assert!(
        answer["parts"][0]["text"]
            .as_str()
            .unwrap()
            .contains("Name a river.")
    );
    assert_eq!(answer["children"].as_array().unwrap().len(), 2);
    assert_eq!(answer["heads"], Value::Array(vec![]));
    let run = &answer["runs"][0];
    assert_eq!(answer["runs"].as_array().unwrap().len(), 1);
    assert_eq!(run["model"], "echo");
    assert_eq!(run["status"], "succeeded");
    assert_eq!(run["conversation"], story.main.as_str());
    assert_eq!(run["output_head"], story.a1.as_str());
    assert!(run["usage"]["input_tokens"].as_u64().is_some());
    assert_eq!(run["usage"]["complete"], true);
    assert!(run["duration_ms"].as_i64().unwrap() >= 0);
    assert_eq!(run["tools"], Value::Array(vec![]));
    let by_id = server
        .json(&format!("/api/runs/{}", run["id"].as_str().unwrap()))
        .await;
    assert_eq!(by_id["output_head"], story.a1.as_str());

    let head = server.json(&format!("/api/nodes/{}", story.a3)).await;
    assert_eq!(head["heads"][0]["id"], story.fork.as_str());
    let question = server
        .json(&format!(
            "/api/nodes/{}",
            answer["parent"].as_str().unwrap()
        ))
        .await;
    assert_eq!(question["role"], "user");
    assert_eq!(question["runs"], Value::Array(vec![]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_part_kind_and_run_detail_is_shown_as_stored() {
    let server = Server::start().await;
    let store = &server.store;
    let arguments = "{ \"city\" :\"Lisbon\" }"; // raw, not re-serialised
    let thread = Thread::new()
        .push(Message::new(
            skein::Role::User,
            vec![
                Part::text("<b>bold</b> & what's the weather?"),
                Part::Attachment(Attachment {
                    media_type: "image/png".into(),
                    data: vec![0x89, b'P', b'N', b'G', 0, 1, 2, 3],
                }),
            ],
        ))
        .push(Message::new(
            skein::Role::Assistant,
            vec![Part::ToolCall(ToolCall {
                id: "call-1".into(),
                name: "weather".into(),
                arguments: arguments.into(),
            })],
        ));
    let call = thread.head_id().unwrap();
    let thread = thread.push(Message::tool_results([ToolResult {
        call_id: "call-1".into(),
        content: "no such city".into(),
        is_error: true,
    }]));
    store.append(&thread).unwrap();
    let user = thread.nodes()[0].id();
    let result = thread.head_id().unwrap();
    store
        .create_conversation(NewConversation {
            name: Some("tools".into()),
            head: Some(result),
            ..NewConversation::default()
        })
        .unwrap();
    // A paid model the price table lacks (a model of this machine would
    // cost exactly nothing).
    let mut run = RunRecord::new("gpt-weather", "openai");
    run.input_head = Some(user);
    run.output_head = Some(call);
    run.finished_ms = Some(run.started_ms + 1234);
    run.usage.input_tokens = Some(40);
    run.usage.output_tokens = Some(7);
    run.usage_complete = false;
    run.tools = vec![ToolSpec::new(
        "weather",
        "The weather in a city",
        serde_json::json!({"type": "object", "properties": {"city": {"type": "string"}}}),
    )];
    run.annotations
        .add(user, 0, Annotation::Source("question".into()));
    run.relations = vec![Relation::Chain("chain-7".into())];
    store.record_run(&run).unwrap();
    let mut failed = RunRecord::new("scripted:weather", "scripted");
    failed.input_head = Some(user);
    failed.output_head = Some(call);
    failed.status = RunStatus::Failed;
    failed.error = Some("the model said no".into());
    store.record_run(&failed).unwrap();

    let node = server.json(&format!("/api/nodes/{}", user.to_hex())).await;
    assert_eq!(
        node["parts"][0]["text"],
        "<b>bold</b> & what's the weather?"
    );
    assert_eq!(
        node["parts"][1],
        serde_json::json!({"type": "attachment", "media_type": "image/png", "size": 8})
    );
    let node = server.json(&format!("/api/nodes/{}", call.to_hex())).await;
    assert_eq!(
        node["parts"][0],
        serde_json::json!({"type": "tool_call", "id": "call-1", "name": "weather", "arguments": arguments})
    );
    let runs = node["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2);
    let run = runs.iter().find(|r| r["status"] == "succeeded").unwrap();
    assert_eq!(run["duration_ms"], 1234);
    assert_eq!(run["usage"]["input_tokens"], 40);
    assert_eq!(run["usage"]["cache_read_tokens"], Value::Null);
    assert_eq!(run["usage"]["complete"], false);
    // A model without a price has no cost, never a zero one.
    assert_eq!(run["usage"]["cost"], Value::Null);
    assert_eq!(run["tools"][0]["name"], "weather");
    assert_eq!(run["tools"][0]["input_schema"]["type"], "object");
    assert_eq!(run["annotations"][0]["node"], user.to_hex());
    assert_eq!(run["annotations"][0]["part"], 0);
    assert_eq!(run["annotations"][0]["annotations"][0], "source: question");
    assert_eq!(run["relations"][0]["kind"], "chain");
    let failed = runs.iter().find(|r| r["status"] == "failed").unwrap();
    assert_eq!(failed["error"], "the model said no");
    let node = server
        .json(&format!("/api/nodes/{}", result.to_hex()))
        .await;
    assert_eq!(
        node["parts"][0],
        serde_json::json!({"type": "tool_result", "call_id": "call-1", "content": "no such city", "is_error": true})
    );

    // The attachment downloads as bytes, never rendered in this origin.
    let response = server
        .get(&format!("/api/nodes/{}/parts/1", user.to_hex()))
        .await;
    assert_eq!(response.status(), StatusCode::OK);
    let headers = response.headers().clone();
    assert_eq!(headers["content-type"], "application/octet-stream");
    assert_eq!(headers["content-security-policy"], "sandbox");
    assert!(
        headers["content-disposition"]
            .to_str()
            .unwrap()
            .starts_with("attachment;")
    );
    assert_eq!(
        response.bytes().await.unwrap().as_ref(),
        &[0x89, b'P', b'N', b'G', 0, 1, 2, 3]
    );
    let message = server
        .error(
            &format!("/api/nodes/{}/parts/0", user.to_hex()),
            StatusCode::NOT_FOUND,
        )
        .await;
    assert!(message.contains("no attachment at part 0"), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_branches_compare_from_their_common_ancestor() {
    let server = Server::start().await;
    let story = story(&server.store).await;

    let cmp = server
        .json(&format!(
            "/api/compare?a={}&b={}",
            story.a2,
            &story.a3[..12]
        ))
        .await;
    assert_eq!(cmp["ancestor"], story.a1.as_str());
    assert_eq!(cmp["shared"].as_array().unwrap().len(), 2);
    assert_eq!(cmp["shared"][1]["id"], story.a1.as_str());
    let a = cmp["a"]["nodes"].as_array().unwrap();
    let b = cmp["b"]["nodes"].as_array().unwrap();
    assert_eq!((a.len(), b.len()), (2, 2));
    assert_eq!(a[0]["parts"][0]["text"], "Name another.");
    assert_eq!(b[0]["parts"][0]["text"], "Name a lake.");
    assert_eq!(a[1]["id"], story.a2.as_str());
    assert_eq!(a[1]["runs"][0]["model"], "echo");
    assert_eq!(cmp["a"]["heads"][0]["id"], story.main.as_str());
    assert_eq!(cmp["b"]["heads"][0]["name"], "what-if");
    assert_eq!(cmp["a"]["omitted"], 0);

    // One thread containing the other: nothing after the ancestor on one side.
    let nested = server
        .json(&format!("/api/compare?a={}&b={}", story.a1, story.a2))
        .await;
    assert_eq!(nested["ancestor"], story.a1.as_str());
    assert_eq!(nested["a"]["nodes"], Value::Array(vec![]));
    assert_eq!(nested["b"]["nodes"].as_array().unwrap().len(), 2);

    let limited = server
        .json(&format!(
            "/api/compare?a={}&b={}&limit=1",
            story.a2, story.a3
        ))
        .await;
    assert_eq!(limited["a"]["nodes"].as_array().unwrap().len(), 1);
    assert_eq!(limited["a"]["omitted"], 1);

    let message = server
        .error(
            &format!("/api/compare?a={}", story.a2),
            StatusCode::BAD_REQUEST,
        )
        .await;
    assert!(message.contains("a=NODE&b=NODE"), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn search_finds_messages_with_a_conversation_to_open_them_in() {
    let server = Server::start().await;
    let story = story(&server.store).await;

    let lake = server.json("/api/search?q=LAKE").await;
    let results = lake["results"].as_array().unwrap();
    let asked: Vec<_> = results.iter().filter(|r| r["role"] == "user").collect();
    assert_eq!(asked.len(), 1, "{lake}");
    assert_eq!(asked[0]["conversation"], story.fork.as_str());
    assert_eq!(asked[0]["conversation_name"], "what-if");
    assert_eq!(asked[0]["snippet"], "Name a lake.");
    assert_eq!(asked[0]["highlights"], serde_json::json!([[7, 11]]));
    assert_eq!(lake["truncated"], false);
    // The first question is in both threads; each match names one of them.
    let river = server.json("/api/search?q=river").await;
    let first = river["results"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["role"] == "user")
        .unwrap();
    let holder = first["conversation"].as_str().unwrap();
    assert!(holder == story.main || holder == story.fork, "{river}");

    let limited = server.json("/api/search?q=name&limit=2").await;
    assert_eq!(limited["results"].as_array().unwrap().len(), 2);
    assert_eq!(limited["truncated"], true);
    let none = server.json("/api/search?q=volcano").await;
    assert_eq!(none["results"], serde_json::json!([]));

    for (path, says) in [
        ("/api/search", "needs words"),
        ("/api/search?q=", "needs words"),
        ("/api/search?q=%20%20", "needs words"),
        ("/api/search?q=%22open", "unclosed quote"),
        ("/api/search?q=*", "no words"),
        ("/api/search?q=lake&limit=0", "at least 1"),
        ("/api/search?q=lake&limit=x", "limit"),
    ] {
        let message = server.error(path, StatusCode::BAD_REQUEST).await;
        assert!(message.contains(says), "{path}: {message}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_ids_and_routes_are_clear_json_errors_and_only_get_is_served() {
    let server = Server::start().await;
    story(&server.store).await;

    let message = server
        .error("/api/nodes/abcdef0123", StatusCode::NOT_FOUND)
        .await;
    assert_eq!(message, "no node starts with `abcdef0123`");
    let message = server
        .error("/api/conversations/0000ffff/family", StatusCode::NOT_FOUND)
        .await;
    assert_eq!(message, "no conversation starts with `0000ffff`");
    let message = server.error("/api/runs/beef", StatusCode::NOT_FOUND).await;
    assert!(message.contains("no run starts with"), "{message}");
    let message = server
        .error("/api/nodes/not-hex", StatusCode::BAD_REQUEST)
        .await;
    assert!(message.contains("ids are hexadecimal"), "{message}");
    let message = server.error("/api/nope", StatusCode::NOT_FOUND).await;
    assert!(message.contains("/api/conversations"), "{message}");
    let message = server
        .error("/api/conversations?limit=many", StatusCode::BAD_REQUEST)
        .await;
    assert!(message.contains("limit"), "{message}");

    let csrf = server.csrf().await;
    for path in ["/", "/api/conversations"] {
        let response = server
            .client
            .post(format!("{}{path}", server.base))
            .header("content-type", "application/json")
            .header("x-skein-csrf", &csrf)
            .body("{}")
            .send()
            .await
            .unwrap();
        assert_eq!(
            response.status(),
            StatusCode::METHOD_NOT_ALLOWED,
            "POST {path}"
        );
    }
    // Another method than GET or POST is 405 with the methods the path
    // takes, whatever its content type, and runs nothing.
    for (path, allowed) in [
        ("/api/nodes/abcdef0123/reply", "POST"),
        ("/api/reruns/abcdef0123/fork", "POST"),
        ("/api/conversations", "GET,HEAD"),
    ] {
        for method in [reqwest::Method::DELETE, reqwest::Method::PUT] {
            let response = server
                .client
                .request(method.clone(), format!("{}{path}", server.base))
                .header("x-skein-csrf", &csrf)
                .send()
                .await
                .unwrap();
            assert_eq!(
                response.status(),
                StatusCode::METHOD_NOT_ALLOWED,
                "{method} {path}"
            );
            let allow = response.headers()["allow"]
                .to_str()
                .unwrap()
                .replace(' ', "");
            assert_eq!(allow, allowed, "{method} {path}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_and_its_assets_are_embedded_behind_a_strict_content_policy() {
    let server = Server::start().await;

    let page = server.get("/").await;
    assert_eq!(page.status(), StatusCode::OK);
    let headers = page.headers().clone();
    assert_eq!(headers["content-type"], "text/html; charset=utf-8");
    let policy = headers["content-security-policy"].to_str().unwrap();
    assert!(policy.contains("default-src 'none'"), "{policy}");
    assert!(policy.contains("script-src 'self'"), "{policy}");
    assert_eq!(headers["x-content-type-options"], "nosniff");
    let html = page.text().await.unwrap();
    assert!(html.contains("/assets/app.js"));
    assert!(
        !html.contains("http://") && !html.contains("https://"),
        "no remote resources"
    );

    for (path, kind) in [
        ("/assets/app.js", "text/javascript"),
        ("/assets/replays.js", "text/javascript"),
        ("/assets/keys.js", "text/javascript"),
        ("/assets/style.css", "text/css"),
        ("/assets/icon.svg", "image/svg+xml"),
    ] {
        let response = server.get(path).await;
        assert_eq!(response.status(), StatusCode::OK, "{path}");
        assert!(
            response.headers()["content-type"]
                .to_str()
                .unwrap()
                .starts_with(kind)
        );
        let etag = response.headers()["etag"].clone();
        let again = server
            .client
            .get(format!("{}{path}", server.base))
            .header("if-none-match", etag)
            .send()
            .await
            .unwrap();
        assert_eq!(again.status(), StatusCode::NOT_MODIFIED, "{path}");
    }
    for script in ["/assets/app.js", "/assets/replays.js", "/assets/keys.js"] {
        let script = server.get(script).await.text().await.unwrap();
        assert!(
            !script.contains("innerHTML"),
            "the page never parses data as markup"
        );
    }
    assert_eq!(
        server.get("/assets/nope.js").await.status(),
        StatusCode::NOT_FOUND
    );

    let info = server.json("/api/info").await;
    assert!(info["database"].as_str().unwrap().ends_with("skein.db"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_token_only_requests_addressed_to_this_machine_are_answered() {
    let server = Server::start().await;
    let forged = server
        .client
        .get(format!("{}/api/conversations", server.base))
        .header("host", "rebound.example:8765")
        .send()
        .await
        .unwrap();
    assert_eq!(forged.status(), StatusCode::FORBIDDEN);
    let message = forged.text().await.unwrap();
    assert!(message.contains("rebound.example"), "{message}");
    let by_name = server
        .client
        .get(format!("{}/api/conversations", server.base))
        .header("host", "localhost:8765")
        .send()
        .await
        .unwrap();
    assert_eq!(by_name.status(), StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_token_the_page_opened_with_it_can_call_the_api() {
    let server = Server::start_with(Some("s3cret")).await;
    assert_eq!(server.get("/").await.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(
        server.get("/api/conversations").await.status(),
        StatusCode::UNAUTHORIZED
    );
    // The page's address carries the token once; the cookie carries it on.
    let page = server.get("/?token=s3cret").await;
    assert_eq!(page.status(), StatusCode::OK);
    let cookie = page.headers()["set-cookie"].to_str().unwrap().to_string();
    assert!(cookie.contains("HttpOnly"), "{cookie}");
    let pair = cookie.split(';').next().unwrap();
    let api = server
        .client
        .get(format!("{}/api/conversations", server.base))
        .header("cookie", pair)
        .send()
        .await
        .unwrap();
    assert_eq!(api.status(), StatusCode::OK);
    let bearer = server
        .client
        .get(format!("{}/api/info", server.base))
        .bearer_auth("s3cret")
        .send()
        .await
        .unwrap();
    assert_eq!(bearer.status(), StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recorded_rerun_is_a_branch_with_its_ablation_and_verdict() {
    let server = Server::start().await;
    let story = story(&server.store).await;
    let stored = server
        .store
        .conversation(&ConversationId(story.main.clone()))
        .unwrap();
    let thread = server.store.load_thread(stored.head.unwrap()).unwrap();
    // A rerun of the second turn: same history up to its question, another
    // answer.
    let question = thread.parent();
    let answer = question.push(Message::assistant("a counterfactual lake"));
    let mut run = RunRecord::new("echo", "echo");
    run.output_head = answer.head_id();
    let record = skein::store::RerunRecord {
        id: skein::store::RerunId::random(),
        conversation: stored.id.clone(),
        turn: 1,
        turn_node: thread.head_id().unwrap(),
        request_head: question.head_id(),
        answer_head: answer.head_id(),
        ablation: vec!["social-sentiment".into()],
        samples: 2,
        sample_runs: vec![run.id.clone()],
        baseline_runs: Vec::new(),
        verdict: Some("confirmed".into()),
        summary: "changed".into(),
        detail: serde_json::json!({}),
        created_ms: skein::store::records::now_ms(),
    };
    server
        .store
        .commit_rerun(&skein::store::RerunCommit {
            record: &record,
            threads: std::slice::from_ref(&answer),
            runs: &[run],
        })
        .unwrap();

    let family = server
        .json(&format!("/api/conversations/{}/family", story.main))
        .await;
    let rerun = family["branches"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["kind"] == "rerun")
        .expect("the rerun is a branch");
    assert_eq!(rerun["rerun"]["id"], record.id.to_string());
    assert_eq!(rerun["rerun"]["ablation"][0], "social-sentiment");
    assert_eq!(rerun["rerun"]["verdict"], "confirmed");
    assert_eq!(
        rerun["rerun"]["turn_node"],
        thread.head_id().unwrap().to_string(),
        "the reply of the turn it re-ran"
    );
    let answer_hex = answer.head_id().unwrap().to_hex();
    assert!(
        family["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|node| node["id"] == answer_hex.as_str()),
        "the rerun's answer is drawn"
    );
}

// ---------------------------------------------------------------- writes

const CHAT: &str = r#"{"messages": [{"role": "user", "content": "hi"}]}"#;

/// Request headers, as name and value.
type Headers<'h> = &'h [(&'h str, &'h str)];

impl Server {
    /// POST a chat completion with the given extra headers: the status and
    /// the body.
    async fn chat(&self, body: &str, headers: Headers<'_>) -> (StatusCode, String) {
        let mut request = self
            .client
            .post(format!("{}/v1/chat/completions", self.base))
            .body(body.to_string());
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let response = request.send().await.unwrap();
        (response.status(), response.text().await.unwrap())
    }

    /// POST a JSON body to a proxy route: the status and the parsed body.
    async fn proxy(&self, path: &str, body: Value) -> (StatusCode, Value) {
        let response = self
            .client
            .post(format!("{}{path}", self.base))
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await
            .unwrap();
        let status = response.status();
        (status, response.json().await.unwrap())
    }

    /// How many runs the server has recorded.
    fn runs(&self) -> usize {
        self.store.recent_runs(1000).unwrap().len()
    }
}

/// A page of another origin can make a browser send a request it cannot
/// read the answer of (`fetch(..., {mode: "no-cors"})` with a `text/plain`
/// body, a form). Such writes must never reach the model: refused for
/// their origin, or for not being JSON. Programs (no `Origin`) and the
/// server's own pages go through; with a token, presenting it in the
/// `Authorization` header is enough, the cookie is not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_from_pages_of_other_origins_never_reach_the_model() {
    let server = Server::proxying(None).await;
    let own = format!("http://{}", server.address);
    let refused: [(Headers<'_>, StatusCode, &str); 8] = [
        // The browser attack itself: no-cors, text/plain, another origin.
        (
            &[
                ("content-type", "text/plain;charset=UTF-8"),
                ("origin", "http://127.0.0.2:9999"),
            ],
            StatusCode::FORBIDDEN,
            "http://127.0.0.2:9999",
        ),
        (
            &[
                ("content-type", "application/json"),
                ("origin", "http://127.0.0.2:9999"),
            ],
            StatusCode::FORBIDDEN,
            "may not write",
        ),
        (
            &[
                ("content-type", "application/json"),
                ("origin", "http://localhost:9999"),
            ],
            StatusCode::FORBIDDEN,
            "may not write",
        ),
        (
            &[("content-type", "application/json"), ("origin", "null")],
            StatusCode::FORBIDDEN,
            "null",
        ),
        (
            &[
                ("content-type", "application/json"),
                ("sec-fetch-site", "same-site"),
            ],
            StatusCode::FORBIDDEN,
            "same-site",
        ),
        (
            &[("content-type", "text/plain")],
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "application/json",
        ),
        (
            &[("content-type", "application/x-www-form-urlencoded")],
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "application/json",
        ),
        (&[], StatusCode::UNSUPPORTED_MEDIA_TYPE, "application/json"),
    ];
    for (headers, status, says) in refused {
        let (got, text) = server.chat(CHAT, headers).await;
        assert_eq!(got, status, "{headers:?}: {text}");
        assert!(text.contains(says), "{headers:?}: {text}");
    }
    assert_eq!(server.runs(), 0, "no refused write reached the model");
    assert!(server.store.list_conversations(10).unwrap().is_empty());

    let allowed: [Headers<'_>; 3] = [
        &[("content-type", "application/json")],
        &[
            ("content-type", "application/json; charset=utf-8"),
            ("origin", own.as_str()),
            ("sec-fetch-site", "same-origin"),
        ],
        &[
            ("content-type", "Application/JSON"),
            ("origin", own.as_str()),
        ],
    ];
    for headers in allowed {
        let (got, text) = server.chat(CHAT, headers).await;
        assert_eq!(got, StatusCode::OK, "{headers:?}: {text}");
    }
    assert_eq!(server.runs(), 3);

    let guarded = Server::proxying(Some("s3cret")).await;
    let foreign = ("origin", "http://127.0.0.2:9999");
    let json = ("content-type", "application/json");
    let (got, text) = guarded
        .chat(CHAT, &[json, foreign, ("authorization", "Bearer s3cret")])
        .await;
    assert_eq!(got, StatusCode::OK, "the token in Authorization: {text}");
    let (got, _) = guarded
        .chat(CHAT, &[json, foreign, ("cookie", "skein_token=s3cret")])
        .await;
    assert_eq!(
        got,
        StatusCode::FORBIDDEN,
        "the cookie rides along cross-site"
    );
    let (got, _) = guarded
        .chat(
            CHAT,
            &[
                ("content-type", "text/plain"),
                ("authorization", "Bearer s3cret"),
            ],
        )
        .await;
    assert_eq!(
        got,
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "every write is JSON"
    );
    assert_eq!(guarded.runs(), 1);
}

/// Upstream APIs refuse a tool result that answers no call of the message
/// before it; the proxy does too, in their error format, and records
/// nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_result_answering_no_call_is_refused_in_openais_format() {
    let server = Server::proxying(None).await;
    let body = serde_json::json!({"messages": [
        {"role": "user", "content": "weather in Paris?"},
        {"role": "assistant", "content": null, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}
        ]},
        {"role": "tool", "tool_call_id": "call_2", "content": "sunny"}
    ]});
    let (status, text) = server
        .chat(&body.to_string(), &[("content-type", "application/json")])
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{text}");
    let error: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(error["error"]["type"], "invalid_request_error");
    assert_eq!(error["error"]["param"], "messages.[2].tool_call_id");
    assert_eq!(error["error"]["code"], Value::Null);
    let message = error["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("`call_2` matches no tool call"),
        "{message}"
    );
    assert!(message.contains("`call_1`"), "{message}");
    assert_eq!(server.runs(), 0);
    assert!(server.store.list_conversations(10).unwrap().is_empty());
}

/// The same rule on the Messages and Responses APIs, in their error
/// formats, naming the request's own field, whether the calls came in the
/// request or from a previous response.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_results_answering_no_call_are_refused_on_every_api() {
    let server = Server::proxying(None).await;
    let call = serde_json::json!({"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {"city": "Paris"}});
    let (status, error) = server
        .proxy(
            "/v1/messages",
            serde_json::json!({"max_tokens": 5, "messages": [
                {"role": "user", "content": "weather?"},
                {"role": "assistant", "content": [call]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_2", "content": "sunny"}]}
            ]}),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{error}");
    assert_eq!(error["type"], "error");
    assert_eq!(error["error"]["type"], "invalid_request_error");
    let message = error["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("`messages.[2].content.[0].tool_use_id`: `call_2` matches no tool call"),
        "{message}"
    );

    let (status, error) = server
        .proxy(
            "/v1/responses",
            serde_json::json!({"input": [
                {"role": "user", "content": "weather?"},
                {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "call_2", "output": "sunny"}
            ]}),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{error}");
    assert_eq!(error["error"]["param"], "input.[2].call_id");

    let (status, first) = server
        .proxy("/v1/responses", serde_json::json!({"input": "hello"}))
        .await;
    assert_eq!(status, StatusCode::OK, "{first}");
    let (status, error) = server
        .proxy(
            "/v1/responses",
            serde_json::json!({
                "previous_response_id": first["id"],
                "input": [{"type": "function_call_output", "call_id": "call_1", "output": "sunny"}]
            }),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{error}");
    assert_eq!(error["error"]["param"], "input.[0].call_id");
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap()
            .contains("no such call"),
        "{error}"
    );
    assert_eq!(server.runs(), 1, "only the valid request ran");
    assert_eq!(server.store.list_conversations(10).unwrap().len(), 1);
}

/// `previous_response_id` continues the stored thread of the response it
/// names; instructions are not carried over (as OpenAI documents): the
/// request's own take the place of the stored ones, the same ones keep the
/// same thread, none leave the model without. `store: false` writes
/// nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_previous_response_continues_its_thread_with_this_requests_instructions() {
    let server = Server::proxying(None).await;
    let ask = |body: Value| async {
        let (status, reply) = server.proxy("/v1/responses", body).await;
        assert_eq!(status, StatusCode::OK, "{reply}");
        let text = reply["output"][0]["content"][0]["text"]
            .as_str()
            .unwrap()
            .to_string();
        (reply["id"].as_str().unwrap().to_string(), text)
    };
    let (first, text) = ask(serde_json::json!({"instructions": "Be brief.", "input": "hi"})).await;
    assert!(text.contains("history: 2 messages, system: yes"), "{text}");
    let (same, text) = ask(serde_json::json!({
        "instructions": "Be brief.", "input": "more", "previous_response_id": first
    }))
    .await;
    assert!(text.contains("history: 4 messages, system: yes"), "{text}");
    let conversations = server.store.list_conversations(10).unwrap();
    assert_eq!(
        conversations.len(),
        1,
        "the same instructions: the same thread"
    );
    assert_eq!(conversations[0].len, 5);
    let (_, text) =
        ask(serde_json::json!({"input": "and now?", "previous_response_id": same})).await;
    assert!(
        text.contains("history: 5 messages, system: no"),
        "without instructions the model has none: {text}"
    );
    let (_, text) = ask(serde_json::json!({
        "instructions": "Be verbose.", "input": "again", "previous_response_id": same,
        "store": false
    }))
    .await;
    assert!(text.contains("history: 6 messages, system: yes"), "{text}");
    assert_eq!(server.runs(), 3, "the unstored response has no run");
    let nodes = server
        .store
        .debug_query_i64("SELECT count(*) FROM nodes")
        .unwrap();
    // system, hi, reply, more, reply; then hi, reply, more, reply, and now?,
    // reply without the system message
    assert_eq!(nodes, 11);
}

// ---------------------------------------------------------------- connections

/// Read from `stream` until the server closes it (or resets it), at most
/// `bound` (a generous limit: only a server that never closes reaches it).
/// What it sent, or `None` if it was still open at the bound.
async fn read_until_closed(stream: &mut tokio::net::TcpStream, bound: Duration) -> Option<String> {
    use tokio::io::AsyncReadExt;
    let mut received = Vec::new();
    let read = tokio::time::timeout(bound, async {
        let mut buffer = [0u8; 4096];
        loop {
            match stream.read(&mut buffer).await {
                Ok(0) | Err(_) => break,
                Ok(n) => received.extend_from_slice(&buffer[..n]),
            }
        }
    })
    .await;
    read.ok()
        .map(|()| String::from_utf8_lossy(&received).into_owned())
}

/// Send one request on `stream` and read exactly its response (the server
/// answers with a length).
async fn exchange(stream: &mut tokio::net::TcpStream, host: SocketAddr, path: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    stream
        .write_all(format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut received = Vec::new();
    let mut buffer = [0u8; 4096];
    loop {
        let n = stream.read(&mut buffer).await.unwrap();
        assert!(n > 0, "the server closed before answering");
        received.extend_from_slice(&buffer[..n]);
        let text = String::from_utf8_lossy(&received).into_owned();
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let length: usize = head
                .lines()
                .find_map(|line| {
                    let (name, value) = line.split_once(':')?;
                    name.eq_ignore_ascii_case("content-length")
                        .then(|| value.trim().parse().unwrap())
                })
                .expect("a length");
            if body.len() >= length {
                return text;
            }
        }
    }
}

const GENEROUS: Duration = Duration::from_secs(60);

fn limits(read: u64, idle: u64, connections: usize) -> ConnectionLimits {
    ConnectionLimits {
        read_timeout: Duration::from_secs(read),
        idle_timeout: Duration::from_secs(idle),
        max_connections: connections,
    }
}

/// Slowloris: a client that sends its request head one byte a second (it
/// would take minutes) is disconnected once the read timeout passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_trickling_its_headers_is_disconnected() {
    use tokio::io::AsyncWriteExt;
    let server = Server::start_configured(|config| config.limits = limits(2, 600, 16)).await;
    let request = format!(
        "GET /api/info HTTP/1.1\r\nHost: {}\r\nX-Padding: {}\r\n\r\n",
        server.address,
        "p".repeat(200)
    );
    let stream = tokio::net::TcpStream::connect(server.address)
        .await
        .unwrap();
    let (mut reading, mut writing) = stream.into_split();
    let sent = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = sent.clone();
    let trickle = tokio::spawn(async move {
        for byte in request.bytes() {
            if writing.write_all(&[byte]).await.is_err() {
                return;
            }
            counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    });
    let closed = tokio::time::timeout(GENEROUS, async {
        use tokio::io::AsyncReadExt;
        let mut received = Vec::new();
        let _ = reading.read_to_end(&mut received).await;
        String::from_utf8_lossy(&received).into_owned()
    })
    .await;
    trickle.abort();
    let received = closed.expect("the trickling client was still connected after a minute");
    assert!(!received.contains("200 OK"), "{received}");
    let sent = sent.load(std::sync::atomic::Ordering::Relaxed);
    assert!(sent < 200, "cut off after {sent} bytes of a request of 250");
}

/// A connection that sits idle, fresh or after a request, is closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_are_closed() {
    let server = Server::start_configured(|config| config.limits = limits(600, 1, 16)).await;
    let mut kept_alive = tokio::net::TcpStream::connect(server.address)
        .await
        .unwrap();
    let answer = exchange(&mut kept_alive, server.address, "/api/info").await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let after = read_until_closed(&mut kept_alive, GENEROUS)
        .await
        .expect("the idle keep-alive connection stayed open");
    assert_eq!(after, "", "nothing more was sent");

    let mut silent = tokio::net::TcpStream::connect(server.address)
        .await
        .unwrap();
    let said = read_until_closed(&mut silent, GENEROUS)
        .await
        .expect("a connection that never sent anything stayed open");
    assert!(!said.contains("200 OK"), "{said}");
}

/// At the connection limit, a new connection waits (unanswered) until one
/// of those served ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_beyond_the_limit_wait_for_a_free_slot() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let server = Server::start_configured(|config| config.limits = limits(600, 600, 1)).await;
    let mut first = tokio::net::TcpStream::connect(server.address)
        .await
        .unwrap();
    assert!(
        exchange(&mut first, server.address, "/api/info")
            .await
            .starts_with("HTTP/1.1 200")
    );

    let mut second = tokio::net::TcpStream::connect(server.address)
        .await
        .unwrap();
    second
        .write_all(format!("GET /api/info HTTP/1.1\r\nHost: {}\r\n\r\n", server.address).as_bytes())
        .await
        .unwrap();
    let mut buffer = [0u8; 1];
    // Only a server that wrongly answers could make this read return.
    let early = tokio::time::timeout(Duration::from_millis(500), second.read(&mut buffer)).await;
    assert!(early.is_err(), "answered beyond the limit: {early:?}");
    // The first still works while it holds the only slot.
    assert!(
        exchange(&mut first, server.address, "/api/info")
            .await
            .starts_with("HTTP/1.1 200")
    );

    drop(first);
    let answered = read_until_closed_or_answered(&mut second).await;
    assert!(answered.starts_with("HTTP/1.1 200"), "{answered}");
}

/// The first bytes of a response on `stream`, waiting generously.
async fn read_until_closed_or_answered(stream: &mut tokio::net::TcpStream) -> String {
    use tokio::io::AsyncReadExt;
    let mut buffer = [0u8; 64];
    let n = tokio::time::timeout(GENEROUS, stream.read(&mut buffer))
        .await
        .expect("the waiting connection was never served")
        .unwrap();
    String::from_utf8_lossy(&buffer[..n]).into_owned()
}

// ---------------------------------------------------------------- bounded responses

/// The list comes a page at a time; following `next` lists every
/// conversation exactly once, in the order of the whole listing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn following_next_lists_every_conversation_exactly_once() {
    let server = Server::start().await;
    story(&server.store).await;
    for n in 0..23 {
        server
            .store
            .create_conversation(NewConversation {
                name: Some(format!("c{n}")),
                ..NewConversation::default()
            })
            .unwrap();
    }
    let whole: Vec<String> = server
        .store
        .list_conversations(100)
        .unwrap()
        .iter()
        .map(|c| c.id.to_string())
        .collect();
    assert_eq!(whole.len(), 25);

    let mut listed = Vec::new();
    let mut address = Some("/api/conversations?limit=7".to_string());
    let mut pages = 0;
    while let Some(path) = address {
        let page = server.json(&path).await;
        pages += 1;
        assert_eq!(page["limit"], 7);
        listed.extend(
            page["conversations"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| c["id"].as_str().unwrap().to_string()),
        );
        assert_eq!(page["truncated"], page["next"].is_string());
        address = page["next"].as_str().map(str::to_string);
    }
    assert_eq!(pages, 4, "7 + 7 + 7 + 4");
    assert_eq!(listed, whole);

    // No page is larger than the server allows.
    let big = server.json("/api/conversations?limit=5000").await;
    assert_eq!(big["limit"], 1000);
    let message = server
        .error("/api/conversations?after=nonsense", StatusCode::BAD_REQUEST)
        .await;
    assert!(message.contains("`next`"), "{message}");
}

/// A family deeper than the limit is not loaded whole: the response holds
/// at most `limit` nodes, the focused conversation's latest first, and
/// says it is cut. Comparisons cut their shared history the same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deep_family_is_capped_and_says_so() {
    let server = Server::start().await;
    let mut thread = Thread::new();
    for n in 0..300 {
        thread = thread.push(if n % 2 == 0 {
            Message::user(format!("question {n}"))
        } else {
            Message::assistant(format!("answer {n}"))
        });
    }
    let fork = thread.parent().push(Message::assistant("another answer"));
    server.store.append(&thread).unwrap();
    server.store.append(&fork).unwrap();
    let deep = server
        .store
        .create_conversation(NewConversation {
            name: Some("deep".into()),
            head: thread.head_id(),
            ..NewConversation::default()
        })
        .unwrap();

    let family = server
        .json(&format!("/api/conversations/{}/family?limit=50", deep.id))
        .await;
    assert_eq!(family["truncated"], true);
    assert_eq!(family["limit"], 50);
    assert_eq!(family["max_limit"], 10_000);
    let nodes = family["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 50);
    let expected: Vec<String> = thread.nodes()[250..]
        .iter()
        .map(|node| node.id().to_hex())
        .collect();
    let shown: Vec<&str> = nodes.iter().map(|n| n["id"].as_str().unwrap()).collect();
    assert_eq!(
        shown, expected,
        "the latest 50 messages of the conversation"
    );
    assert_eq!(nodes[0]["depth"], 250);
    assert_eq!(
        nodes[0]["parent"],
        thread.nodes()[249].id().to_hex().as_str()
    );
    assert_eq!(
        family["roots"][0], nodes[0]["id"],
        "the cut line is drawn as a root"
    );
    assert_eq!(family["conversations"][0]["id"], deep.id.as_str());

    // Room for the whole line and a little more: the rest of the tree (the
    // fork's answer) fills it.
    let roomy = server
        .json(&format!("/api/conversations/{}/family?limit=301", deep.id))
        .await;
    assert_eq!(roomy["truncated"], false);
    assert_eq!(roomy["nodes"].as_array().unwrap().len(), 301);
    let tight = server
        .json(&format!("/api/conversations/{}/family?limit=300", deep.id))
        .await;
    assert_eq!(tight["truncated"], true, "the fork's answer did not fit");
    let asked_too_much = server
        .json(&format!(
            "/api/conversations/{}/family?limit=1000000",
            deep.id
        ))
        .await;
    assert_eq!(asked_too_much["limit"], 10_000);

    let comparison = server
        .json(&format!(
            "/api/compare?a={}&b={}&limit=10",
            thread.head_id().unwrap().to_hex(),
            fork.head_id().unwrap().to_hex()
        ))
        .await;
    assert_eq!(comparison["shared"].as_array().unwrap().len(), 10);
    assert_eq!(comparison["shared_omitted"], 289);
    assert_eq!(comparison["shared"][9]["id"], comparison["ancestor"]);
    assert_eq!(comparison["shared"][0]["depth"], 289);
}

// ------------------------------------------------------------ workbench

/// One server-sent event: its name and parsed data.
#[derive(Debug)]
struct Sse {
    event: String,
    data: Value,
}

/// The events of a complete `text/event-stream` body.
fn events_of(body: &str) -> Vec<Sse> {
    body.split("\n\n")
        .filter_map(|block| {
            let mut event = None;
            let mut data = String::new();
            for line in block.lines() {
                if let Some(name) = line.strip_prefix("event: ") {
                    event = Some(name.to_string());
                } else if let Some(text) = line.strip_prefix("data: ") {
                    data.push_str(text);
                }
            }
            Some(Sse {
                event: event?,
                data: serde_json::from_str(&data).unwrap(),
            })
        })
        .collect()
}

/// What the database holds: nodes, conversations and runs.
fn counts(store: &Store) -> (u64, u64, u64) {
    let report = store.verify().unwrap();
    (report.nodes, report.conversations, report.runs)
}

impl Server {
    /// The CSRF token of `/api/session`.
    async fn csrf(&self) -> String {
        self.json("/api/session").await["csrf"]
            .as_str()
            .unwrap()
            .to_string()
    }

    /// POST `body` to a web view route with `headers` (and the JSON
    /// content type): the status and the body as text.
    async fn write(&self, path: &str, body: &str, headers: Headers<'_>) -> (StatusCode, String) {
        let mut request = self
            .client
            .post(format!("{}{path}", self.base))
            .header("content-type", "application/json")
            .body(body.to_string());
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let response = request.send().await.unwrap();
        (response.status(), response.text().await.unwrap())
    }

    /// POST with the session's CSRF token; must succeed.
    async fn act(&self, path: &str, body: Value) -> String {
        let csrf = self.csrf().await;
        let (status, text) = self
            .write(path, &body.to_string(), &[("x-skein-csrf", &csrf)])
            .await;
        assert!(status.is_success(), "POST {path}: {status} {text}");
        text
    }

    /// A streamed action: its events, which must end in `done`.
    async fn turn(&self, path: &str, body: Value) -> Vec<Sse> {
        let events = events_of(&self.act(path, body).await);
        let names: Vec<&str> = events.iter().map(|e| e.event.as_str()).collect();
        assert_eq!(names.first(), Some(&"start"), "{events:?}");
        assert_eq!(names.last(), Some(&"done"), "{events:?}");
        assert!(
            names[1..names.len() - 1]
                .iter()
                .all(|name| *name == "delta")
        );
        events
    }

    /// POST with the session's CSRF token; must fail with `status`.
    async fn refused(&self, path: &str, body: Value, status: StatusCode) -> String {
        let csrf = self.csrf().await;
        let (got, text) = self
            .write(path, &body.to_string(), &[("x-skein-csrf", &csrf)])
            .await;
        assert_eq!(got, status, "POST {path}: {text}");
        serde_json::from_str::<Value>(&text).unwrap()["error"]
            .as_str()
            .unwrap()
            .to_string()
    }
}

/// Whether a `done` event's text is the echo model's answer to `text`.
fn echoes(done: &Value, text: &str) -> bool {
    done["text"]
        .as_str()
        .is_some_and(|answer| answer.starts_with(&format!("echo: \"{text}\"")))
}

fn start_and_done(events: &[Sse]) -> (&Value, &Value) {
    (&events[0].data, &events.last().unwrap().data)
}

/// The deltas of a streamed turn, joined.
fn streamed(events: &[Sse]) -> String {
    events
        .iter()
        .filter(|e| e.event == "delta")
        .map(|e| e.data["text"].as_str().unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_session_gives_the_csrf_token_the_models_and_whether_writes_are_allowed() {
    let server = Server::start().await;
    let session = server.json("/api/session").await;
    assert_eq!(session["csrf"].as_str().unwrap().len(), 64);
    assert_eq!(session["read_only"], false);
    assert_eq!(session["default_model"], "echo");
    assert_eq!(session["models"][0]["name"], "echo");
    assert_eq!(session["models"][0]["label"], "echo");
    let other = Server::start().await;
    assert_ne!(
        other.csrf().await,
        server.csrf().await,
        "one token per server"
    );
}

/// The replay form lists the comparators of the registry the parser reads,
/// so one added there (`length`) is offered here with nothing else changed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_session_lists_every_comparator_of_the_registry_for_the_replay_form() {
    let server = Server::start().await;
    let session = server.json("/api/session").await;
    let listed: Vec<&str> = session["comparators"]
        .as_array()
        .unwrap()
        .iter()
        .map(|comparator| comparator["usage"].as_str().unwrap())
        .collect();
    let registry: Vec<&str> = skein::recorded::compare::REGISTRY
        .iter()
        .map(|kind| kind.usage)
        .collect();
    assert_eq!(listed, registry);
    let length = session["comparators"]
        .as_array()
        .unwrap()
        .iter()
        .find(|comparator| comparator["name"] == "length")
        .unwrap_or_else(|| panic!("no length comparator in {session}"));
    assert_eq!(length["usage"], "length[:RATIO]");
    assert!(
        length["about"].as_str().unwrap().contains("words"),
        "{length}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_at_a_head_continues_and_anywhere_else_branches() {
    let server = Server::start().await;
    let story = story(&server.store).await;

    let events = server
        .turn(
            &format!("/api/nodes/{}/reply", &story.a2[..12]),
            serde_json::json!({ "text": "Name a third." }),
        )
        .await;
    let (start, done) = start_and_done(&events);
    assert_eq!(start["conversation"], story.main.as_str());
    assert_eq!(start["branched"], false);
    assert_eq!(start["from"], story.a2.as_str());
    assert_eq!(done["conversation"], story.main.as_str());
    assert!(echoes(done, "Name a third."), "{done}");
    assert_eq!(streamed(&events), done["text"].as_str().unwrap());
    assert_eq!(done["finish_reason"], "stop");
    let main = server
        .store
        .conversation(&ConversationId(story.main.clone()))
        .unwrap();
    assert_eq!(main.head.unwrap().to_hex(), done["node"].as_str().unwrap());
    let run = server
        .json(&format!("/api/runs/{}", done["run"].as_str().unwrap()))
        .await;
    assert_eq!(run["model"], "echo");

    // a1 heads nothing: the reply branches there, main stays put.
    let events = server
        .turn(
            &format!("/api/nodes/{}/reply", story.a1),
            serde_json::json!({ "text": "Name a sea.", "name": "seas", "options": {"temperature": 0.5} }),
        )
        .await;
    let (start, done) = start_and_done(&events);
    assert_eq!(start["branched"], true);
    assert_ne!(start["conversation"], story.main.as_str());
    assert_eq!(done["conversation"], start["conversation"]);
    let branch = server
        .json(&format!(
            "/api/conversations/{}",
            done["conversation"].as_str().unwrap()
        ))
        .await;
    assert_eq!(branch["name"], "seas");
    let node = server
        .json(&format!("/api/nodes/{}", done["node"].as_str().unwrap()))
        .await;
    let question = server
        .json(&format!("/api/nodes/{}", node["parent"].as_str().unwrap()))
        .await;
    assert_eq!(question["parent"], story.a1.as_str());
    let still = server
        .store
        .conversation(&ConversationId(story.main.clone()))
        .unwrap();
    assert_eq!(still.head, main.head, "main did not move");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edit_branches_from_the_parent_and_regenerate_makes_a_sibling() {
    let server = Server::start().await;
    let story = story(&server.store).await;
    let a2 = server.json(&format!("/api/nodes/{}", story.a2)).await;
    let q2 = a2["parent"].as_str().unwrap().to_string();

    let events = server
        .turn(
            &format!("/api/nodes/{q2}/edit"),
            serde_json::json!({ "text": "Name a mountain." }),
        )
        .await;
    let (start, done) = start_and_done(&events);
    assert_eq!(start["branched"], true);
    assert_eq!(
        start["from"],
        story.a1.as_str(),
        "from the edited message's parent"
    );
    assert!(echoes(done, "Name a mountain."), "{done}");
    let reply = server
        .json(&format!("/api/nodes/{}", done["node"].as_str().unwrap()))
        .await;
    let edited = server
        .json(&format!("/api/nodes/{}", reply["parent"].as_str().unwrap()))
        .await;
    assert_eq!(edited["parent"], story.a1.as_str());
    assert_eq!(edited["parts"][0]["text"], "Name a mountain.");
    let family = server
        .json(&format!("/api/conversations/{}/family", story.main))
        .await;
    assert!(
        family["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|node| node["id"] == done["node"]),
        "the edit's branch is in the family"
    );

    // The first message of a thread: a new conversation of its own.
    let q1 = server.json(&format!("/api/nodes/{}", story.a1)).await["parent"]
        .as_str()
        .unwrap()
        .to_string();
    let events = server
        .turn(
            &format!("/api/nodes/{q1}/edit"),
            serde_json::json!({ "text": "Name a glacier.", "name": "glaciers" }),
        )
        .await;
    let (start, done) = start_and_done(&events);
    assert_eq!(start["from"], Value::Null);
    assert_eq!(start["branched"], true);
    assert!(echoes(done, "Name a glacier."), "{done}");
    let glaciers = server
        .json(&format!(
            "/api/conversations/{}",
            done["conversation"].as_str().unwrap()
        ))
        .await;
    assert_eq!(glaciers["name"], "glaciers");
    assert_eq!(glaciers["len"], 2);

    // Only user messages are edited; only replies regenerated.
    let message = server
        .refused(
            &format!("/api/nodes/{}/edit", story.a2),
            serde_json::json!({ "text": "x" }),
            StatusCode::BAD_REQUEST,
        )
        .await;
    assert!(message.contains("only a user message"), "{message}");
    let message = server
        .refused(
            &format!("/api/nodes/{q2}/regenerate"),
            serde_json::json!({}),
            StatusCode::BAD_REQUEST,
        )
        .await;
    assert!(message.contains("only an assistant reply"), "{message}");

    // Another model's answer to the same request: a sibling of a2.
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("other.toml");
    std::fs::write(
        &rules,
        "[[rules]]\nreply = \"Another river: {last_user}\"\n",
    )
    .unwrap();
    let other = format!("scripted:{}", rules.display());
    let message = server
        .refused(
            &format!("/api/nodes/{}/regenerate", story.a2),
            serde_json::json!({ "model": other }),
            StatusCode::BAD_REQUEST,
        )
        .await;
    assert!(
        message.contains("opens a file"),
        "a file the server does not offer: {message}"
    );
    let server = Server::start_configured(|config| {
        config.models = Arc::new(ModelNames::new("echo", [other.clone()]));
    })
    .await;
    let story = self::story(&server.store).await;
    let q2 = server.json(&format!("/api/nodes/{}", story.a2)).await["parent"]
        .as_str()
        .unwrap()
        .to_string();
    let session = server.json("/api/session").await;
    assert_eq!(session["models"][1]["name"], other.as_str());
    let before = counts(&server.store);
    let events = server
        .turn(
            &format!("/api/nodes/{}/regenerate", story.a2),
            serde_json::json!({ "model": other, "options": {"seed": 7} }),
        )
        .await;
    let (start, done) = start_and_done(&events);
    assert_eq!(start["from"], q2.as_str());
    assert_eq!(start["branched"], true);
    assert_eq!(
        done["text"], "Another river: Name another.",
        "the same request answered again"
    );
    let sibling = server
        .json(&format!("/api/nodes/{}", done["node"].as_str().unwrap()))
        .await;
    assert_eq!(sibling["parent"], q2.as_str(), "a sibling of a2");
    let q2_node = server.json(&format!("/api/nodes/{q2}")).await;
    assert_eq!(q2_node["children"].as_array().unwrap().len(), 2);
    let run = server
        .json(&format!("/api/runs/{}", done["run"].as_str().unwrap()))
        .await;
    assert_eq!(run["model"], "scripted");
    let after = counts(&server.store);
    assert_eq!(
        after,
        (before.0 + 1, before.1 + 1, before.2 + 1),
        "one node, a branch, a run"
    );

    // The echo answers the same request with the same text: the same node,
    // which main already ends with. A branch all the same (sharing the
    // node), and main does not move.
    let events = server
        .turn(
            &format!("/api/nodes/{}/regenerate", story.a2),
            serde_json::json!({}),
        )
        .await;
    let done_again = &events.last().unwrap().data;
    assert_eq!(done_again["node"], story.a2.as_str());
    assert_eq!(done_again["branched"], true, "{done_again}");
    assert_ne!(done_again["conversation"], story.main.as_str());
    assert_eq!(counts(&server.store), (after.0, after.1 + 1, after.2 + 1));
    let run = server
        .json(&format!(
            "/api/runs/{}",
            done_again["run"].as_str().unwrap()
        ))
        .await;
    assert_eq!(run["conversation"], done_again["conversation"], "{run}");
    // The regenerate that gave another answer is a branch of the
    // conversation whose reply it regenerated, a member of its family.
    let branch = done["conversation"].as_str().unwrap();
    let stored = server.json(&format!("/api/conversations/{branch}")).await;
    assert_eq!(
        stored["origin"]["conversation"],
        story.main.as_str(),
        "{stored}"
    );
    assert_eq!(
        stored["title"], "Name another. (2)",
        "titled by the prompt it answers again, numbered among its answers: {stored}"
    );
    let family = server
        .json(&format!("/api/conversations/{}/family", story.main))
        .await;
    let members: Vec<&str> = family["conversations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap())
        .collect();
    assert!(members.contains(&branch), "{members:?}");
    assert!(family["shares"].as_array().unwrap().is_empty(), "{family}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_is_made_with_or_without_a_first_turn_and_bad_bodies_are_refused() {
    let server = Server::start().await;
    let story = story(&server.store).await;

    let text = server
        .act(
            &format!("/api/nodes/{}/fork", story.a1),
            serde_json::json!({ "name": "empty fork" }),
        )
        .await;
    let created: Value = serde_json::from_str(&text).unwrap();
    let fork = server
        .json(&format!(
            "/api/conversations/{}",
            created["conversation"].as_str().unwrap()
        ))
        .await;
    assert_eq!(fork["name"], "empty fork");
    assert_eq!(fork["head"], story.a1.as_str());
    let text = server
        .act(
            &format!("/api/nodes/{}/fork", story.a1),
            serde_json::json!({}),
        )
        .await;
    let unnamed: Value = serde_json::from_str(&text).unwrap();
    let unnamed = server
        .json(&format!(
            "/api/conversations/{}",
            unnamed["conversation"].as_str().unwrap()
        ))
        .await;
    assert_eq!(
        unnamed["title"], "Name a river. (fork)",
        "an unnamed fork with no message of its own is told apart from its origin: {unnamed}"
    );

    let events = server
        .turn(
            &format!("/api/nodes/{}/fork", story.a3),
            // `null` is as good as absent.
            serde_json::json!({ "text": "Name a pond.", "name": "ponds", "model": null, "options": null }),
        )
        .await;
    let (start, done) = start_and_done(&events);
    assert_eq!(start["branched"], true);
    assert!(echoes(done, "Name a pond."), "{done}");
    let fork = server
        .json(&format!(
            "/api/conversations/{}",
            done["conversation"].as_str().unwrap()
        ))
        .await;
    assert_eq!(fork["name"], "ponds");
    assert_eq!(fork["head"], done["node"]);

    let before = counts(&server.store);
    let reply = format!("/api/nodes/{}/reply", story.a2);
    for (body, status, says) in [
        (
            serde_json::json!({}),
            StatusCode::BAD_REQUEST,
            "needs `text`",
        ),
        (
            serde_json::json!({"text": " "}),
            StatusCode::BAD_REQUEST,
            "empty",
        ),
        (
            serde_json::json!({"text": "x", "model": "nonsense-model"}),
            StatusCode::BAD_REQUEST,
            "nonsense-model",
        ),
        (
            serde_json::json!({"text": "x", "options": {"temperature": 9}}),
            StatusCode::BAD_REQUEST,
            "temperature",
        ),
        (
            serde_json::json!({"text": "x", "options": {"max_tokens": 10_000_000}}),
            StatusCode::BAD_REQUEST,
            "max_tokens",
        ),
        (
            serde_json::json!({"text": "x", "options": {"colour": 1}}),
            StatusCode::BAD_REQUEST,
            "the request body is not what this route takes: options.colour: unknown field `colour`",
        ),
        (
            serde_json::json!({"text": "x", "colour": 1}),
            StatusCode::BAD_REQUEST,
            "unknown field `colour`",
        ),
        (
            serde_json::json!({"text": 7}),
            StatusCode::BAD_REQUEST,
            "text: invalid type",
        ),
        (
            serde_json::json!({"text": "x".repeat(200_001)}),
            StatusCode::PAYLOAD_TOO_LARGE,
            "longer than",
        ),
    ] {
        let message = server.refused(&reply, body.clone(), status).await;
        assert!(message.contains(says), "{body}: {message}");
    }
    let message = server
        .refused(
            "/api/nodes/abcdef0123/reply",
            serde_json::json!({"text": "x"}),
            StatusCode::NOT_FOUND,
        )
        .await;
    assert!(message.contains("no node starts with"), "{message}");
    // Over the body limit: 413 before anything is parsed.
    let csrf = server.csrf().await;
    let huge = serde_json::json!({ "text": "x".repeat(2 * 1024 * 1024) }).to_string();
    let (status, _) = server
        .write(&reply, &huge, &[("x-skein-csrf", &csrf)])
        .await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(counts(&server.store), before, "nothing was written");
}

/// A name another conversation has is refused wherever the page sets one
/// (409, before any model runs, nothing written); a free name is taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_taken_name_is_refused_on_every_action_that_names_a_conversation() {
    let server = Server::proxying(None).await;
    let story = story(&server.store).await;
    let before = counts(&server.store);
    let refusals = [
        (
            format!("/api/nodes/{}/fork", story.a1),
            serde_json::json!({ "name": "what-if" }),
        ),
        (
            format!("/api/nodes/{}/fork", story.a1),
            serde_json::json!({ "text": "x", "name": "main" }),
        ),
        (
            format!("/api/nodes/{}/reply", story.a1),
            serde_json::json!({ "text": "x", "name": "main" }),
        ),
        (
            format!("/api/nodes/{}/regenerate", story.a2),
            serde_json::json!({ "name": "what-if" }),
        ),
        (
            "/api/reruns/abcdef/fork".to_string(),
            serde_json::json!({ "name": "main" }),
        ),
    ];
    for (path, body) in refusals {
        let message = server
            .refused(&path, body.clone(), StatusCode::CONFLICT)
            .await;
        assert!(message.contains("is already named"), "{body}: {message}");
        assert!(message.contains("choose another name"), "{body}: {message}");
    }
    assert_eq!(counts(&server.store), before, "nothing was written");
    let csrf = server.csrf().await;
    let (status, text) = server
        .write(
            &format!("/api/nodes/{}/fork", story.a1),
            &serde_json::json!({ "name": "free" }).to_string(),
            &[("x-skein-csrf", &csrf)],
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{text}");
}

/// A name that reads as an id is refused by every action that names a new
/// conversation, and by the proxy's `x-skein-conversation-name` header
/// (400, nothing written); a conversation an older skein stored under
/// another's id cannot stand in for it: the id wins.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_that_reads_as_an_id_is_refused_and_an_id_wins_over_a_name() {
    let server = Server::proxying(None).await;
    let story = story(&server.store).await;
    let short = story.main[..12].to_string();
    let before = counts(&server.store);
    let refusals = [
        (
            format!("/api/nodes/{}/fork", story.a1),
            serde_json::json!({ "name": story.main }),
        ),
        (
            format!("/api/nodes/{}/fork", story.a1),
            serde_json::json!({ "text": "x", "name": short }),
        ),
        (
            format!("/api/nodes/{}/reply", story.a1),
            serde_json::json!({ "text": "x", "name": short.to_uppercase() }),
        ),
        (
            format!("/api/nodes/{}/regenerate", story.a2),
            serde_json::json!({ "name": "0123abcd" }),
        ),
        (
            "/api/reruns/abcdef/fork".to_string(),
            serde_json::json!({ "name": "cafe" }),
        ),
    ];
    for (path, body) in refusals {
        let message = server
            .refused(&path, body.clone(), StatusCode::BAD_REQUEST)
            .await;
        assert!(
            message.contains("cannot look like an id"),
            "{body}: {message}"
        );
    }
    let (status, text) = server
        .chat(
            CHAT,
            &[
                ("content-type", "application/json"),
                ("x-skein-conversation-name", &short),
            ],
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{text}");
    let error: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(error["error"]["type"], "invalid_request_error", "{text}");
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap()
            .contains("cannot look like an id"),
        "{text}"
    );
    assert_eq!(counts(&server.store), before, "nothing was written");

    // An older skein let the fork take the main conversation's id as its
    // name; the id still finds the main conversation.
    for name in [story.main.clone(), short.clone()] {
        server
            .store
            .debug_execute(&format!(
                "UPDATE conversations SET name = '{name}' WHERE id = '{}'",
                story.fork
            ))
            .unwrap();
        let found = server.json(&format!("/api/conversations/{name}")).await;
        assert_eq!(found["id"], story.main, "{found}");
        let family = server
            .json(&format!("/api/conversations/{name}/family"))
            .await;
        assert!(family.to_string().contains(&story.main), "{family}");
    }
    let fork = server
        .json(&format!("/api/conversations/{}", story.fork))
        .await;
    assert_eq!(fork["name"], short.as_str(), "the stored name still reads");
}

impl Server {
    /// A server offering, besides echo, a scripted model whose every call
    /// fails with "the model is down": the server, that model's name, and
    /// the directory holding its rules (kept alive by the caller).
    async fn with_failing_model() -> (Server, String, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let rules = dir.path().join("fails.toml");
        std::fs::write(
            &rules,
            "[[rules]]\nerror = { kind = \"bad_request\", message = \"the model is down\" }\n",
        )
        .unwrap();
        let model = format!("scripted:{}", rules.display());
        let server = Server::start_configured(|config| {
            config.models = Arc::new(ModelNames::new("echo", [model.clone()]));
        })
        .await;
        (server, model, dir)
    }
}

/// A failed model call streams an `error` event, and its message and its
/// failed run are recorded, nothing moved, as on every surface.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_turn_streams_its_error_and_its_run_is_recorded() {
    let (server, model, _rules) = Server::with_failing_model().await;
    let story = story(&server.store).await;
    let before = counts(&server.store);
    let csrf = server.csrf().await;
    let (status, body) = server
        .write(
            &format!("/api/nodes/{}/reply", story.a2),
            &serde_json::json!({ "text": "Again?", "model": model }).to_string(),
            &[("x-skein-csrf", &csrf)],
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let events = events_of(&body);
    let last = events.last().unwrap();
    assert_eq!(last.event, "error", "{events:?}");
    let message = last.data["message"].as_str().unwrap();
    assert!(message.contains("the model is down"), "{message}");
    let after = counts(&server.store);
    assert_eq!(after.0, before.0 + 1, "the user's message, no reply");
    assert_eq!(after.2, before.2 + 1, "the failed run is recorded");
    let failed = server.store.recent_runs(1).unwrap().remove(0);
    assert_eq!(failed.status, RunStatus::Failed);
    let input = server.store.node(failed.input_head.unwrap()).unwrap();
    assert_eq!(input.message.joined_text(), "Again?");
    assert_eq!(input.parent.map(|node| node.to_hex()), Some(story.a2));
    assert!(server.store.verify().unwrap().is_ok());
}

/// A recorded turn with sources: its report, a rerun without one of them
/// (with a verdict), and forks from the rerun with and without a turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recorded_turn_is_reported_rerun_without_a_source_and_forked_from() {
    use skein::recorded::{RecordedChat, Source};
    let server = Server::start().await;
    let model = Model::open("echo").unwrap();
    let mut chat = RecordedChat::on_model(&model)
        .store(server.store.clone())
        .sources([
            Source::fact("weather", "heavy rain all week"),
            Source::fact("budget", "200 euros"),
        ])
        .build()
        .await
        .unwrap();
    let turn = chat.send("Where to?").await.unwrap().clone();
    let node = turn.node().to_hex();

    // A report is a GET: it caches no vector in the store (a page
    // elsewhere could make a browser GET it), even from another site.
    let embeddings = || {
        server
            .store
            .debug_query_i64("SELECT count(*) FROM embeddings")
            .unwrap()
    };
    let cached = embeddings();
    let cross_site = server
        .client
        .get(format!("{}/api/nodes/{node}/report", server.base))
        .header("sec-fetch-site", "cross-site")
        .send()
        .await
        .unwrap();
    assert_eq!(cross_site.status(), StatusCode::OK);
    let report = server.json(&format!("/api/nodes/{node}/report")).await;
    assert_eq!(embeddings(), cached, "a GET wrote to the embedding cache");
    assert_eq!(report["turn"]["index"], 0);
    let sources = report["sources"].as_array().unwrap();
    let weather = sources
        .iter()
        .find(|source| source["id"] == "weather")
        .expect("the weather source is listed");
    assert_eq!(weather["removable"], true);
    assert_eq!(weather["kind"], "fact");
    assert!(
        weather["preview"].as_str().unwrap().contains("heavy rain"),
        "{report}"
    );
    // A user message is no recorded turn.
    let question = server.json(&format!("/api/nodes/{node}")).await;
    let message = server
        .error(
            &format!("/api/nodes/{}/report", question["parent"].as_str().unwrap()),
            StatusCode::NOT_FOUND,
        )
        .await;
    assert!(
        message.contains("not the reply of a recorded turn"),
        "{message}"
    );

    let rerun_path = format!("/api/nodes/{node}/rerun");
    let message = server
        .refused(
            &rerun_path,
            serde_json::json!({ "ignore": ["moon"] }),
            StatusCode::BAD_REQUEST,
        )
        .await;
    assert!(
        message.contains("weather") && message.contains("budget"),
        "lists the removable: {message}"
    );
    let message = server
        .refused(
            &rerun_path,
            serde_json::json!({ "ignore": ["weather"], "samples": 11, "baseline": null }),
            StatusCode::BAD_REQUEST,
        )
        .await;
    assert!(message.contains("samples"), "{message}");

    let text = server
        .act(
            &rerun_path,
            serde_json::json!({ "ignore": ["weather"], "samples": 2, "baseline": true }),
        )
        .await;
    let rerun: Value = serde_json::from_str(&text).unwrap();
    assert!(rerun["verdict"].is_string(), "{rerun}");
    assert!(embeddings() > cached, "a rerun (a POST) caches its vectors");
    assert_eq!(rerun["samples"].as_array().unwrap().len(), 2);
    assert_eq!(rerun["changed"], false, "the echo ignores its sources");
    assert_eq!(rerun["removed"][0], "weather");
    let answer_head = rerun["answer_head"].as_str().unwrap().to_string();
    let rerun_id = rerun["rerun"].as_str().unwrap().to_string();

    let text = server
        .act(
            &format!("/api/reruns/{}/fork", &rerun_id[..12]),
            serde_json::json!({ "name": "without weather" }),
        )
        .await;
    let fork: Value = serde_json::from_str(&text).unwrap();
    let stored = server
        .json(&format!(
            "/api/conversations/{}",
            fork["conversation"].as_str().unwrap()
        ))
        .await;
    assert_eq!(stored["name"], "without weather");
    assert_eq!(stored["head"], answer_head.as_str());

    let events = server
        .turn(
            &format!("/api/reruns/{rerun_id}/fork"),
            serde_json::json!({ "text": "And then?" }),
        )
        .await;
    let (start, done) = start_and_done(&events);
    assert_eq!(start["branched"], true);
    assert_eq!(start["from"], answer_head.as_str());
    assert!(echoes(done, "And then?"), "{done}");
    assert_eq!(streamed(&events), done["text"].as_str().unwrap());
}

/// Every way a write can be refused changes nothing in the database.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_without_the_csrf_token_from_elsewhere_or_read_only_change_nothing() {
    let server = Server::start().await;
    let story = story(&server.store).await;
    let csrf = server.csrf().await;
    let path = format!("/api/nodes/{}/reply", story.a2);
    let body = serde_json::json!({ "text": "sneaky" }).to_string();
    let before = counts(&server.store);
    let foreign_origin = format!("http://{}", "evil.example");
    // What is wrong, the headers, the status and what the refusal says.
    type Case<'a> = (&'a str, Vec<(&'a str, &'a str)>, StatusCode, &'a str);
    let cases: Vec<Case<'_>> = vec![
        (
            "no token",
            vec![],
            StatusCode::FORBIDDEN,
            "has no CSRF token",
        ),
        (
            "a wrong token",
            vec![("x-skein-csrf", "0123")],
            StatusCode::FORBIDDEN,
            "has the wrong CSRF token",
        ),
        (
            "a foreign Host",
            vec![("x-skein-csrf", &csrf), ("host", "evil.example")],
            StatusCode::FORBIDDEN,
            "only answers requests addressed to localhost",
        ),
        (
            "a foreign Origin",
            vec![("x-skein-csrf", &csrf), ("origin", &foreign_origin)],
            StatusCode::FORBIDDEN,
            "may not write",
        ),
        (
            "a cross-site fetch",
            vec![("x-skein-csrf", &csrf), ("sec-fetch-site", "cross-site")],
            StatusCode::FORBIDDEN,
            "cross-site",
        ),
    ];
    for (what, headers, status, says) in cases {
        let (got, text) = server.write(&path, &body, &headers).await;
        assert_eq!(got, status, "{what}: {text}");
        assert!(text.contains(says), "{what}: {text}");
    }
    // Every write route asks for the token.
    for route in ["reply", "edit", "regenerate", "fork", "rerun"] {
        let (got, _) = server
            .write(&format!("/api/nodes/{}/{route}", story.a2), "{}", &[])
            .await;
        assert_eq!(got, StatusCode::FORBIDDEN, "{route}");
    }
    let (got, _) = server.write("/api/reruns/abcd/fork", "{}", &[]).await;
    assert_eq!(got, StatusCode::FORBIDDEN);
    assert_eq!(counts(&server.store), before, "nothing was written");

    // The page's own origin with the token goes through.
    let own = server.base.clone();
    let (got, text) = server
        .write(&path, &body, &[("x-skein-csrf", &csrf), ("origin", &own)])
        .await;
    assert_eq!(got, StatusCode::OK, "{text}");
    assert_ne!(counts(&server.store), before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_server_refuses_every_write_and_says_so() {
    let server = Server::start_configured(|config| config.read_only = true).await;
    let story = story(&server.store).await;
    let session = server.json("/api/session").await;
    assert_eq!(session["read_only"], true);
    let csrf = session["csrf"].as_str().unwrap().to_string();
    let before = counts(&server.store);
    for (route, body) in [
        (
            format!("/api/nodes/{}/reply", story.a2),
            serde_json::json!({"text": "x"}),
        ),
        (
            format!("/api/nodes/{}/fork", story.a1),
            serde_json::json!({}),
        ),
        (
            format!("/api/nodes/{}/regenerate", story.a2),
            serde_json::json!({}),
        ),
    ] {
        let (status, text) = server
            .write(&route, &body.to_string(), &[("x-skein-csrf", &csrf)])
            .await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{route}");
        let error: Value = serde_json::from_str(&text).unwrap();
        assert!(
            error["error"].as_str().unwrap().contains("read-only"),
            "{text}"
        );
    }
    assert_eq!(counts(&server.store), before);
    // Reads still work.
    server.json("/api/conversations").await;
}

/// Reads an event stream until `wanted` is seen in a `turn` event (or
/// the generous deadline passes).
async fn wait_for_turn(response: &mut reqwest::Response, wanted: &str) -> Value {
    let mut buffer = String::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let chunk = tokio::time::timeout_at(deadline, response.chunk())
            .await
            .expect("the turn is reported")
            .unwrap()
            .expect("the stream stays open");
        buffer.push_str(std::str::from_utf8(&chunk).unwrap());
        while let Some(end) = buffer.find("\n\n") {
            let block: String = buffer.drain(..end + 2).collect();
            for event in events_of(&block) {
                if event.event == "turn" && event.data["conversation"] == wanted {
                    return event.data;
                }
            }
        }
    }
}

/// A turn another process writes (another store handle on the same
/// database) reaches an open event stream, as does a new conversation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn turns_written_by_another_process_reach_the_event_stream() {
    let server = Server::start().await;
    let story = story(&server.store).await;
    let mut response = server.get("/api/events").await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        response.headers()["content-type"].to_str().unwrap(),
        "text/event-stream"
    );
    let first = response.chunk().await.unwrap().unwrap();
    assert!(
        std::str::from_utf8(&first)
            .unwrap()
            .contains("event: ready")
    );

    let other = Store::open(server.store.path()).unwrap();
    let model = Model::open("echo").unwrap();
    let main = other
        .nonblocking()
        .resolve_conversation(&story.main)
        .await
        .unwrap();
    let main = skein::Conversation::load(&other, &main, &model)
        .await
        .unwrap();
    let reply = main.prompt("From elsewhere.").send().await.unwrap();
    let event = wait_for_turn(&mut response, &story.main).await;
    assert_eq!(event["head"], reply.head().to_hex());
    assert!(event["updated_ms"].as_i64().unwrap() > 0);

    let created = model.conversation().store(&other).build();
    created.prompt("A new one.").send().await.unwrap();
    wait_for_turn(&mut response, created.id().as_str()).await;

    // A page of another origin may not hold a stream open.
    let refused = server
        .client
        .get(format!("{}/api/events", server.base))
        .header("origin", "http://evil.example")
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), StatusCode::FORBIDDEN);

    // The streams open at once are bounded (this one among them).
    let mut open = vec![response];
    loop {
        let response = server.get("/api/events").await;
        if response.status() == StatusCode::SERVICE_UNAVAILABLE {
            let body: Value = response.json().await.unwrap();
            assert!(
                body["error"].as_str().unwrap().contains("event streams"),
                "{body}"
            );
            break;
        }
        assert_eq!(response.status(), StatusCode::OK);
        open.push(response);
        assert!(open.len() <= 32, "more than 32 event streams at once");
    }
    assert_eq!(open.len(), 32);
}

// ------------------------------------------------------------ limits on turns

/// The web view's models: one OpenAI-compatible server at `url`, offered
/// as `remote` (and the default).
struct Endpoint {
    model: Model,
}

impl Endpoint {
    fn at(url: &str) -> Endpoint {
        use skein::engine::config::{BackendDef, BackendKind, Catalog, CredentialSource, Profile};
        let catalog = Catalog::new()
            .backend(BackendDef::new(
                "remote",
                BackendKind::Openai {
                    base_url: Some(format!("{url}/v1")),
                },
            ))
            .profile(
                Profile::new("remote", "remote", "remote-model").credential(CredentialSource::None),
            );
        let engine = skein::Engine::builder(catalog).build().unwrap();
        Endpoint {
            model: Model::from_profile(&engine, "remote").unwrap(),
        }
    }
}

impl skein::Home for Endpoint {
    fn open(&self, name: Option<&str>) -> Result<Model, skein::SurfaceError> {
        match name {
            None | Some("remote") => Ok(self.model.clone()),
            Some(other) => Err(skein::SurfaceError::new(format!("no model `{other}` here"))),
        }
    }

    fn default_name(&self) -> String {
        "remote".into()
    }
}

impl skein_serve::Models for Endpoint {
    fn choices(&self) -> Vec<skein_serve::ModelChoice> {
        vec![skein_serve::ModelChoice {
            name: "remote".into(),
            label: "remote".into(),
        }]
    }
}

/// A server whose model is the OpenAI-compatible server at `url`.
async fn serving_endpoint(url: &str) -> Server {
    let endpoint = Arc::new(Endpoint::at(url));
    Server::start_configured(|config| config.models = endpoint).await
}

/// One chunk of an OpenAI chat-completions stream carrying `text`.
fn content(text: &str) -> String {
    let chunk = serde_json::json!({
        "choices": [{ "index": 0, "delta": { "content": text }, "finish_reason": null }]
    });
    format!("data: {chunk}\n\n")
}

/// The chunks that end an OpenAI chat-completions stream.
fn finish() -> Vec<String> {
    let chunk = serde_json::json!({
        "choices": [{ "index": 0, "delta": {}, "finish_reason": "stop" }]
    });
    vec![format!("data: {chunk}\n\n"), "data: [DONE]\n\n".to_string()]
}

/// What a stored conversation's bookmark points at.
fn head_of(store: &Store, conversation: &str) -> Option<skein::NodeId> {
    store
        .conversation(&ConversationId(conversation.to_string()))
        .unwrap()
        .head
}

/// Four replies at `node` on the `remote` model, each running (held by
/// the model after its first chunk) before this returns: their streams.
async fn four_held_replies(
    server: &Server,
    model: &mut skein_testkit::FaultServer,
    node: &str,
    csrf: &str,
) -> Vec<reqwest::Response> {
    let mut held = Vec::new();
    for turn in 0..4 {
        let response = server
            .client
            .post(format!("{}/api/nodes/{node}/reply", server.base))
            .header("content-type", "application/json")
            .header("x-skein-csrf", csrf)
            .body(
                serde_json::json!({ "text": format!("Turn {turn}."), "model": "remote" })
                    .to_string(),
            )
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        held.push(response);
    }
    for _ in 0..4 {
        model.held().await;
    }
    held
}

/// Four turns held open at the model fill the server: a fifth (a reply or
/// a fork with a first turn) is refused with 429 before anything is read,
/// recorded or called; once the four end, a turn is taken again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fifth_turn_at_once_is_refused_and_taken_once_the_others_end() {
    use skein_testkit::{Fault, FaultServer};
    let mut model = FaultServer::start(Fault::Hold(
        vec![content("Hold")],
        [vec![content(" on.")], finish()].concat(),
    ))
    .await;
    let server = serving_endpoint(&model.url()).await;
    let story = story(&server.store).await;
    let csrf = server.csrf().await;
    let before = counts(&server.store);
    let main_head = head_of(&server.store, &story.main);

    // Four replies branching at a1, each held by the model after its
    // first chunk.
    let held = four_held_replies(&server, &mut model, &story.a1, &csrf).await;

    let reply = format!("/api/nodes/{}/reply", story.a2);
    let message = server
        .refused(
            &reply,
            serde_json::json!({ "text": "A fifth.", "model": "remote" }),
            StatusCode::TOO_MANY_REQUESTS,
        )
        .await;
    assert!(
        message.contains("as many turns as it runs at once") && message.contains("try again"),
        "{message}"
    );
    let message = server
        .refused(
            &format!("/api/nodes/{}/fork", story.a2),
            serde_json::json!({ "text": "A fifth.", "name": "late", "model": "remote" }),
            StatusCode::TOO_MANY_REQUESTS,
        )
        .await;
    assert!(message.contains("try again"), "{message}");
    assert_eq!(counts(&server.store), before, "nothing was recorded");
    assert_eq!(head_of(&server.store, &story.main), main_head);
    assert_eq!(model.accepted(), 4, "the model was not called again");

    model.release();
    for (turn, response) in held.into_iter().enumerate() {
        let events = events_of(&response.text().await.unwrap());
        let names: Vec<&str> = events.iter().map(|e| e.event.as_str()).collect();
        assert_eq!(names.first(), Some(&"start"), "{events:?}");
        assert_eq!(names.last(), Some(&"done"), "turn {turn}: {events:?}");
        assert_eq!(streamed(&events), "Hold on.");
        assert_eq!(events.last().unwrap().data["text"], "Hold on.");
    }
    let (nodes, conversations, runs) = before;
    assert_eq!(
        counts(&server.store),
        (nodes + 8, conversations + 4, runs + 4),
        "four branches, each a question, an answer and a run"
    );

    // The four are over: their permits were free before their `done`.
    let events = server
        .turn(
            &reply,
            serde_json::json!({ "text": "A fifth.", "model": "remote" }),
        )
        .await;
    let (_, done) = start_and_done(&events);
    assert_eq!(done["text"], "Hold on.");
    assert_eq!(
        head_of(&server.store, &story.main).map(|head| head.to_hex()),
        done["node"].as_str().map(str::to_string)
    );
}

/// The landing rule in the web view: four replies at a conversation's head
/// at once, held at the model until all four are running, all succeed.
/// One extends the conversation; each other lands in a new branch whose
/// origin is the conversation and the head they started from, and its
/// `done` says so (`branched`, the branch's id). No reply is left
/// unreachable, and the database verifies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_replies_at_one_head_at_once_extend_it_once_and_branch_three_times() {
    use skein_testkit::{Fault, FaultServer};
    let mut model = FaultServer::start(Fault::Hold(
        vec![content("Hold")],
        [vec![content(" on.")], finish()].concat(),
    ))
    .await;
    let server = serving_endpoint(&model.url()).await;
    let story = story(&server.store).await;
    let csrf = server.csrf().await;
    let before = counts(&server.store);
    let held = four_held_replies(&server, &mut model, &story.a2, &csrf).await;
    model.release();
    let mut extended = Vec::new();
    let mut branches = Vec::new();
    for response in held {
        let events = events_of(&response.text().await.unwrap());
        let names: Vec<&str> = events.iter().map(|e| e.event.as_str()).collect();
        assert_eq!(names.last(), Some(&"done"), "{events:?}");
        let (start, done) = start_and_done(&events);
        assert_eq!(start["conversation"], story.main.as_str());
        assert_eq!(start["branched"], false);
        assert_eq!(done["text"], "Hold on.");
        if done["conversation"] == story.main.as_str() {
            assert_eq!(done["branched"], false, "{done}");
            extended.push(done.clone());
        } else {
            assert_eq!(done["branched"], true, "{done}");
            branches.push(done.clone());
        }
    }
    assert_eq!((extended.len(), branches.len()), (1, 3));
    assert_eq!(
        head_of(&server.store, &story.main).map(|head| head.to_hex()),
        extended[0]["node"].as_str().map(str::to_string)
    );
    let mut ids = Vec::new();
    for done in &branches {
        let id = done["conversation"].as_str().unwrap();
        let branch = server.json(&format!("/api/conversations/{id}")).await;
        assert_eq!(
            branch["origin"]["conversation"],
            story.main.as_str(),
            "{branch}"
        );
        assert_eq!(branch["origin"]["node"], story.a2.as_str(), "{branch}");
        assert_eq!(
            branch["head"], done["node"],
            "the reply is the branch's head"
        );
        let run = server
            .json(&format!("/api/runs/{}", done["run"].as_str().unwrap()))
            .await;
        assert_eq!(run["conversation"], id, "{run}");
        ids.push(id.to_string());
    }
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 3, "three branches");
    let family = server
        .json(&format!("/api/conversations/{}/family", story.main))
        .await;
    let members: Vec<&str> = family["conversations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap())
        .collect();
    for id in &ids {
        assert!(members.contains(&id.as_str()), "{members:?}");
    }
    let (nodes, conversations, runs) = before;
    assert_eq!(
        counts(&server.store),
        (nodes + 8, conversations + 3, runs + 4),
        "four questions and answers, three branches, four runs"
    );
    let report = server.store.verify().unwrap();
    assert!(report.is_ok(), "{:?}", report.problems);
}

/// Editing a thread's first message branches from the start of the
/// conversation it belongs to: the branch names it as its origin (with no
/// node), runs on its model rather than the server's default, and is a
/// member of its family, not a conversation sharing messages by content.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edit_of_a_first_message_branches_from_its_conversation_on_its_model() {
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("default.toml");
    std::fs::write(&rules, "[[rules]]\nreply = \"the default model\"\n").unwrap();
    let default = format!("scripted:{}", rules.display());
    let server = Server::start_configured(|config| {
        config.models = Arc::new(ModelNames::new(default.clone(), ["echo".to_string()]));
    })
    .await;
    let story = story(&server.store).await;
    let q1 = server.json(&format!("/api/nodes/{}", story.a1)).await["parent"]
        .as_str()
        .unwrap()
        .to_string();
    let events = server
        .turn(
            &format!("/api/nodes/{q1}/edit"),
            serde_json::json!({ "text": "Name a glacier.", "name": "glaciers" }),
        )
        .await;
    let (start, done) = start_and_done(&events);
    assert_eq!(start["from"], Value::Null);
    assert!(echoes(done, "Name a glacier."), "on the echo: {done}");
    let id = done["conversation"].as_str().unwrap();
    let branch = server.json(&format!("/api/conversations/{id}")).await;
    assert_eq!(branch["name"], "glaciers");
    assert_eq!(branch["len"], 2);
    assert_eq!(
        branch["origin"]["conversation"],
        story.main.as_str(),
        "{branch}"
    );
    assert_eq!(branch["origin"]["node"], Value::Null, "{branch}");
    let run = server
        .json(&format!("/api/runs/{}", done["run"].as_str().unwrap()))
        .await;
    assert_eq!(run["model"], "echo");
    let family = server
        .json(&format!("/api/conversations/{}/family", story.main))
        .await;
    let members: Vec<&str> = family["conversations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap())
        .collect();
    assert!(members.contains(&id), "{members:?}");
    assert!(family["shares"].as_array().unwrap().is_empty(), "{family}");
    // A chosen model still answers the turn.
    let events = server
        .turn(
            &format!("/api/nodes/{q1}/edit"),
            serde_json::json!({ "text": "Name a fjord.", "model": default }),
        )
        .await;
    let (_, done) = start_and_done(&events);
    assert_eq!(done["text"], "the default model");
    let id = done["conversation"].as_str().unwrap();
    let branch = server.json(&format!("/api/conversations/{id}")).await;
    assert_eq!(
        branch["origin"]["conversation"],
        story.main.as_str(),
        "{branch}"
    );
}

/// A fork with a first turn is stored with that turn: when the model call
/// fails, the page hears `error` and no conversation is left behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_whose_first_turn_fails_leaves_no_conversation_behind() {
    let (server, model, _rules) = Server::with_failing_model().await;
    let story = story(&server.store).await;
    let conversations = server.store.list_conversations(100).unwrap();
    let csrf = server.csrf().await;
    for node in [&story.a1, &story.a2] {
        let (status, body) = server
            .write(
                &format!("/api/nodes/{node}/fork"),
                &serde_json::json!({ "text": "Again?", "name": "doomed", "model": model })
                    .to_string(),
                &[("x-skein-csrf", &csrf)],
            )
            .await;
        assert_eq!(status, StatusCode::OK);
        let events = events_of(&body);
        let last = events.last().unwrap();
        assert_eq!(last.event, "error", "{events:?}");
        assert!(
            last.data["message"]
                .as_str()
                .unwrap()
                .contains("the model is down"),
            "{last:?}"
        );
    }
    assert_eq!(
        server.store.list_conversations(100).unwrap(),
        conversations,
        "no conversation was created"
    );
    let report = server.store.verify().unwrap();
    assert!(report.is_ok(), "{:?}", report.problems);
}

/// The 4 MiB bound on a streamed reply (the web view's `STREAM_MAX_BYTES`).
const STREAM_MAX_BYTES: usize = 4 * 1024 * 1024;

/// A reply past 4 MiB of text is cut there by the engine's reply bound:
/// the page gets whole deltas up to the bound and an `error` saying why
/// and what to do; the call is a failed call as any other (the user's
/// message and the failed run are recorded, the conversation does not
/// move). Each piece here is `PIECE` bytes.
async fn assert_cut_at_the_stream_bound(server: &Server, model: &str, piece: usize) {
    let story = story(&server.store).await;
    let before = counts(&server.store);
    let main_head = head_of(&server.store, &story.main);
    let runs_before = server
        .store
        .runs_of_conversation(&ConversationId(story.main.clone()))
        .unwrap()
        .len();

    let csrf = server.csrf().await;
    let (status, body) = server
        .write(
            &format!("/api/nodes/{}/reply", story.a2),
            &serde_json::json!({ "text": "Go on and on.", "model": model }).to_string(),
            &[("x-skein-csrf", &csrf)],
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let events = events_of(&body);
    assert_eq!(events[0].event, "start");
    let last = events.last().unwrap();
    assert_eq!(
        last.event,
        "error",
        "{} events, {} bytes streamed, {} in the last",
        events.len(),
        streamed(&events).len(),
        last.data.to_string().len()
    );
    let message = last.data["message"].as_str().unwrap();
    assert!(
        message.contains("bound of 4194304 bytes") && message.contains("ask for a shorter reply"),
        "{message}"
    );
    // Whole deltas, up to the bound and no further.
    let text = streamed(&events);
    assert_eq!(text.len(), STREAM_MAX_BYTES / piece * piece);

    let after = counts(&server.store);
    assert_eq!(after.0, before.0 + 1, "the user's message, no reply");
    assert_eq!(after.1, before.1, "no conversation was created");
    assert_eq!(after.2, before.2 + 1, "the failed run is recorded");
    assert_eq!(head_of(&server.store, &story.main), main_head);
    let runs = server
        .store
        .runs_of_conversation(&ConversationId(story.main.clone()))
        .unwrap();
    assert_eq!(runs.len(), runs_before + 1);
    let failed = server.store.recent_runs(1).unwrap().remove(0);
    assert_eq!(failed.status, RunStatus::Failed);
    assert!(
        failed
            .error
            .as_deref()
            .unwrap()
            .contains("bound of 4194304 bytes"),
        "{failed:?}"
    );
}

/// Over HTTP: the model server's stream is cut at the bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_past_the_stream_bound_over_http_is_a_failed_call() {
    use skein_testkit::{Fault, FaultServer};
    const PIECE: usize = 60_000;
    let piece = "x".repeat(PIECE);
    let pieces = STREAM_MAX_BYTES / PIECE + 10;
    // A complete reply: without the bound it would be `done`.
    let chunks = [vec![content(&piece); pieces], finish()].concat();
    let mut model = FaultServer::start(Fault::Cut(chunks)).await;
    let server = serving_endpoint(&model.url()).await;
    assert_cut_at_the_stream_bound(&server, "remote", PIECE).await;
    assert!(model.seen().await.request_read);
}

/// In process: a model whose whole reply is ready at once (no network to
/// wait on) is cut at the bound too, not recorded whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_past_the_stream_bound_in_process_is_a_failed_call() {
    const PIECE: usize = 60_000;
    let word = format!("{} ", "x".repeat(PIECE - 1));
    // 5.6 MB: past the bound.
    let reply = word.repeat(94);
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("long.toml");
    std::fs::write(&rules, format!("[[rules]]\nreply = \"{reply}\"\n")).unwrap();
    let model = format!("scripted:{}", rules.display());
    let server = Server::start_configured(|config| {
        config.models = Arc::new(ModelNames::new("echo", [model.clone()]));
    })
    .await;
    assert_cut_at_the_stream_bound(&server, &model, PIECE).await;
}

// ------------------------------------------ proxied calls end with their client

/// A proxy whose one model is the OpenAI-compatible server at `url`,
/// configured further by `configure` (its reply bounds).
async fn proxying_endpoint(url: &str, configure: impl FnOnce(&mut ProxyConfig)) -> Server {
    let mut proxy = ProxyConfig::new(Endpoint::at(url).model);
    configure(&mut proxy);
    Server::start_configured(|config| config.proxy = Some(proxy)).await
}

/// Wait for `event`, for at most a minute (it should come at once).
async fn within_a_minute<T>(what: &str, event: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(60), event)
        .await
        .unwrap_or_else(|_| panic!("{what}: not within a minute"))
}

/// The run the server recorded with `status`, once it is recorded (on a
/// task of its own, after the call ended).
async fn the_run(server: &Server, status: RunStatus) -> RunRecord {
    within_a_minute("the run recorded", async {
        loop {
            let runs = server.store.recent_runs(10).unwrap();
            if let Some(run) = runs.into_iter().find(|run| run.status == status) {
                return run;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
}

/// A client on a raw connection: sends a chat completion asking for
/// `text` (streamed or not) and hands back the connection to read from or
/// hang up.
async fn raw_chat(server: &Server, text: &str, stream: bool) -> tokio::net::TcpStream {
    use tokio::io::AsyncWriteExt;
    let body = serde_json::json!({
        "model": "gpt-4o", "stream": stream,
        "messages": [{"role": "user", "content": text}],
    })
    .to_string();
    let mut connection = tokio::net::TcpStream::connect(server.address)
        .await
        .unwrap();
    let request = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: {}\r\ncontent-type: application/json\r\n\
         content-length: {}\r\n\r\n{body}",
        server.address,
        body.len()
    );
    connection.write_all(request.as_bytes()).await.unwrap();
    connection
}

/// The run cancelled with its client, checked: recorded as `cancelled`,
/// never as a whole answer, belonging to no conversation (none was
/// created), with its request; the database verifies. Its output's text:
/// what the model had said by then, which no conversation holds.
async fn cancelled_run_output(server: &Server) -> Option<String> {
    let run = the_run(server, RunStatus::Cancelled).await;
    assert_eq!(run.finish_reason, None, "never a whole `stop`: {run:?}");
    assert_eq!(run.conversation, None, "no conversation: {run:?}");
    assert!(
        server.store.request_body(&run.id).unwrap().is_some(),
        "the request body is kept"
    );
    assert!(server.store.list_conversations(10).unwrap().is_empty());
    assert!(server.store.verify().unwrap().is_ok());
    run.output_head
        .map(|node| server.store.node(node).unwrap().message.joined_text())
}

/// A client that hangs up after the first piece of a streamed answer
/// cancels the call: the model's connection is closed (the model is never
/// read to its end), and the run is recorded as cancelled with the text
/// the client was sent, not as a whole answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streaming_client_that_hangs_up_cancels_the_call_and_keeps_its_partial() {
    use skein_testkit::{Fault, FaultServer};
    use tokio::io::AsyncReadExt;
    let mut model = FaultServer::start(Fault::Stall(vec![content("Once upon")])).await;
    let server = proxying_endpoint(&model.url(), |_| {}).await;
    let mut connection = raw_chat(&server, "Tell me a long story.", true).await;
    let mut seen = Vec::new();
    within_a_minute("the first piece streamed", async {
        let mut buffer = [0u8; 4096];
        while !String::from_utf8_lossy(&seen).contains("Once upon") {
            let read = connection.read(&mut buffer).await.unwrap();
            assert!(read > 0, "the stream ended early");
            seen.extend_from_slice(&buffer[..read]);
        }
    })
    .await;
    drop(connection);
    within_a_minute("the model's connection closed", model.closed()).await;
    let output = cancelled_run_output(&server).await;
    assert_eq!(output.as_deref(), Some("Once upon"), "the partial answer");
    assert_eq!(model.accepted(), 1, "the call was not made again");

    // The partial answer is no response to continue.
    let run = the_run(&server, RunStatus::Cancelled).await;
    let (status, body) = server
        .proxy(
            "/v1/responses",
            serde_json::json!({"model": "gpt-4o", "input": "Go on.",
                "previous_response_id": format!("resp_{}", run.id)}),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["error"]["param"], "previous_response_id", "{body}");
    assert_eq!(model.accepted(), 1, "the model was not called");
}

/// A client that hangs up before a whole (unstreamed) answer is ready
/// cancels the call too: the model's connection is closed and the run is
/// recorded as cancelled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_hangs_up_before_its_answer_cancels_the_call() {
    use skein_testkit::{Fault, FaultServer};
    let mut model = FaultServer::start(Fault::Stall(vec![content("Once upon")])).await;
    let server = proxying_endpoint(&model.url(), |_| {}).await;
    let connection = raw_chat(&server, "Tell me a long story.", false).await;
    within_a_minute("the model called", model.held()).await;
    drop(connection);
    within_a_minute("the model's connection closed", model.closed()).await;
    // The model had sent its first piece; whether the proxy read it before
    // the client hung up is a race, so there may be no output.
    let output = cancelled_run_output(&server).await;
    assert!(
        matches!(output.as_deref(), None | Some("Once upon")),
        "{output:?}"
    );
}

/// A call still running at the proxy's reply deadline is stopped there:
/// the client is told (504, in its API's error shape), the model's
/// connection is closed, and the run is recorded as failed with the
/// reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_past_the_reply_deadline_is_stopped_and_recorded_as_failed() {
    use skein_testkit::{Fault, FaultServer};
    let mut model = FaultServer::start(Fault::Stall(vec![content("Once upon")])).await;
    let server = proxying_endpoint(&model.url(), |proxy| {
        proxy.reply_deadline = Duration::from_secs(1);
    })
    .await;
    let (status, body) = server
        .proxy(
            "/v1/chat/completions",
            serde_json::json!({"model": "gpt-4o",
                "messages": [{"role": "user", "content": "Tell me a long story."}]}),
        )
        .await;
    assert_eq!(status, StatusCode::GATEWAY_TIMEOUT, "{body}");
    assert_eq!(body["error"]["code"], "reply_too_slow", "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("not finished within 1 s"), "{message}");
    within_a_minute("the model's connection closed", model.closed()).await;
    let run = the_run(&server, RunStatus::Failed).await;
    assert_eq!(run.output_head, None);
    let error = run.error.as_deref().unwrap();
    assert!(error.contains("not finished within 1 s"), "{error}");
    assert!(server.store.verify().unwrap().is_ok());
}

/// A reply past the proxy's text bound is stopped there: the client is
/// told (in its API's error shape; a stream that had begun ends with an
/// error event) and the run is recorded as failed with the reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_past_the_proxy_text_bound_is_stopped_and_recorded_as_failed() {
    let server = Server::start_configured(|config| {
        let mut proxy = ProxyConfig::new(Model::open("echo").unwrap());
        proxy.reply_limit = 64;
        config.proxy = Some(proxy);
    })
    .await;
    let ask = |text: &str| {
        serde_json::json!({"model": "echo", "max_tokens": 100,
            "messages": [{"role": "user", "content": text}]})
    };
    let (status, body) = server.proxy("/v1/chat/completions", ask("short")).await;
    assert_eq!(status, StatusCode::OK, "within the bound: {body}");
    let long = "echo this back. ".repeat(8);
    let (status, body) = server.proxy("/v1/messages", ask(&long)).await;
    assert_eq!(status, StatusCode::BAD_GATEWAY, "{body}");
    assert_eq!(body["type"], "error", "Anthropic's error shape: {body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("bound of 64 bytes"), "{message}");
    let run = the_run(&server, RunStatus::Failed).await;
    assert_eq!(run.output_head, None);
    assert!(
        run.error.as_deref().unwrap().contains("bound of 64 bytes"),
        "{run:?}"
    );
    assert!(server.store.verify().unwrap().is_ok());
}

// ---------------------------------------------------------------- costs

/// Turns of the shallow conversations in the cost tests; the deep ones
/// have `COST_DEEP`.
const COST_SHALLOW: usize = 5;
const COST_DEEP: usize = 25;

/// A conversation of `turns` echo turns made through the proxy as a client
/// makes them (each request the whole history): the messages to send with
/// the next turn.
async fn proxied_history(server: &Server, label: &str, turns: usize) -> Vec<Value> {
    let mut messages = Vec::new();
    for turn in 0..turns {
        messages.push(serde_json::json!({"role": "user", "content": question(label, turn)}));
        let (status, body) = server
            .proxy(
                "/v1/chat/completions",
                serde_json::json!({ "model": "echo", "messages": messages }),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        messages.push(body["choices"][0]["message"].clone());
    }
    messages
}

/// A question long enough that its request body refers to its node rather
/// than holding it (skein-store's bodies/skeleton.rs).
fn question(label: &str, turn: usize) -> String {
    format!("{label} {turn}: what does the river carry past the mill at {turn} o'clock today?")
}

/// What one more proxied turn costs after `history`: statements and rows,
/// and the bytes of request-body pieces it adds.
async fn proxied_turn_costs(server: &Server, mut history: Vec<Value>) -> (skein::Costs, i64) {
    history.push(serde_json::json!({"role": "user", "content": question("one more", 0)}));
    let pieces = || {
        server
            .store
            .debug_query_i64("SELECT COALESCE(sum(len), 0) FROM request_pieces")
            .unwrap()
    };
    let meter = server.store.meter().unwrap();
    let (before, stored) = (meter.read(), pieces());
    let (status, body) = server
        .proxy(
            "/v1/chat/completions",
            serde_json::json!({ "model": "echo", "messages": history }),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    (meter.read() - before, pieces() - stored)
}

/// Statements, rows and the body bytes written are the same at any depth:
/// the request re-sends its history, but its messages are stored once, as
/// nodes, and its body keeps references to them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proxied_turn_costs_the_same_at_any_depth() {
    let server = Server::proxying(None).await;
    let shallow = proxied_history(&server, "shallow", COST_SHALLOW).await;
    let deep = proxied_history(&server, "deep", COST_DEEP).await;
    let (shallow, shallow_bytes) = proxied_turn_costs(&server, shallow).await;
    let (deep, deep_bytes) = proxied_turn_costs(&server, deep).await;
    assert_eq!(
        deep,
        shallow,
        "a proxied turn {} messages deeper cost more",
        2 * (COST_DEEP - COST_SHALLOW)
    );
    // The new exchange's two references and envelope, and the piece it
    // re-cuts: under a kilobyte at either depth (the deep body is 5 KB).
    assert!(
        shallow_bytes < 1024 && deep_bytes < 1024,
        "{shallow_bytes} and {deep_bytes} bytes of pieces"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_web_reply_costs_its_thread_and_a_constant() {
    let server = Server::start().await;
    let model = Model::open("echo").unwrap();
    let mut heads = Vec::new();
    for (label, turns) in [("shallow", COST_SHALLOW), ("deep", COST_DEEP)] {
        let conversation = model.conversation().store(&server.store).build();
        for turn in 0..turns {
            conversation
                .prompt(format!("{label} {turn}"))
                .send()
                .await
                .unwrap();
        }
        heads.push(conversation.head().unwrap().to_hex());
    }
    let meter = server.store.meter().unwrap();
    let mut costs = Vec::new();
    for head in &heads {
        let before = meter.read();
        server
            .turn(
                &format!("/api/nodes/{head}/reply"),
                serde_json::json!({ "text": "one more" }),
            )
            .await;
        costs.push(meter.read() - before);
    }
    let (shallow, deep) = (costs[0], costs[1]);
    assert_eq!(
        deep.statements, shallow.statements,
        "a deeper reply took more statements ({shallow} -> {deep})"
    );
    assert_eq!(
        deep.rows - shallow.rows,
        2 * (COST_DEEP - COST_SHALLOW) as u64,
        "a web reply reads its thread once ({shallow} -> {deep})"
    );
}

/// A client that re-serialises a call's arguments (LangChain sends chat
/// completions' `arguments` back through `json.dumps`: `{"city": "Paris"}`
/// for the model's `{"city":"Paris"}`) continues the stored thread: the
/// arguments match by JSON value, the stored node keeps the first bytes,
/// and the session is one conversation, not a dead end and a stranger.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn re_encoded_call_arguments_continue_the_stored_thread_on_chat_completions() {
    let server = Server::proxying(None).await;
    let history = |arguments: &str| {
        serde_json::json!([
            {"role": "user", "content": "weather in Paris?"},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": arguments}}
            ]},
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}
        ])
    };
    let (status, first) = server
        .proxy(
            "/v1/chat/completions",
            serde_json::json!({"messages": history("{\"city\":\"Paris\"}")}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{first}");
    let answer = first["choices"][0]["message"]["content"].clone();
    let mut messages = history("{\"city\": \"Paris\"}");
    let messages = messages.as_array_mut().unwrap();
    messages.push(serde_json::json!({"role": "assistant", "content": answer}));
    messages.push(serde_json::json!({"role": "user", "content": "thanks"}));
    let (status, second) = server
        .proxy(
            "/v1/chat/completions",
            serde_json::json!({"messages": messages}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{second}");
    let conversations = server.store.list_conversations(10).unwrap();
    assert_eq!(conversations.len(), 1, "one session, one conversation");
    let thread = server
        .store
        .load_thread(conversations[0].head.unwrap())
        .unwrap();
    assert_eq!(thread.len(), 6);
    let arguments: Vec<String> = thread
        .messages()
        .into_iter()
        .flat_map(|message| message.tool_calls())
        .map(|call| call.arguments.clone())
        .collect();
    assert_eq!(arguments, ["{\"city\":\"Paris\"}"], "the first bytes kept");
    assert!(server.store.verify().unwrap().is_ok());
}

/// One app run twice against a deterministic model: without a session
/// marker the second run only adds runs to the first's conversation (the
/// same messages, decision 14); with one (the `x-skein-session` header, or
/// the API's own `user` / `metadata` fields) each run is a session of its
/// own, continued by its later requests, sharing the stored messages by
/// content and branching from nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_marker_keeps_two_runs_of_one_app_apart() {
    let server = Server::proxying(None).await;
    let json = ("content-type", "application/json");
    // One "run" of the app: a first request, then its follow-up.
    let run = |session: &'static str| {
        let server = &server;
        async move {
            let first = serde_json::json!({"messages": [{"role": "user", "content": "hello"}]});
            let headers = [json, ("x-skein-session", session)];
            let (status, text) = server.chat(&first.to_string(), &headers).await;
            assert_eq!(status, StatusCode::OK, "{text}");
            let reply: Value = serde_json::from_str(&text).unwrap();
            let answer = reply["choices"][0]["message"]["content"].clone();
            let second = serde_json::json!({"messages": [
                {"role": "user", "content": "hello"},
                {"role": "assistant", "content": answer},
                {"role": "user", "content": "more"}
            ]});
            let (status, text) = server.chat(&second.to_string(), &headers).await;
            assert_eq!(status, StatusCode::OK, "{text}");
        }
    };
    run("monday").await;
    run("tuesday").await;
    let sessions = |name: &str| {
        server
            .store
            .conversation(&server.store.conversation_named(name).unwrap().unwrap())
            .unwrap()
    };
    let (monday, tuesday) = (sessions("monday"), sessions("tuesday"));
    assert_ne!(monday.id, tuesday.id, "two sessions, two conversations");
    assert_eq!(monday.head, tuesday.head, "the same messages, shared");
    assert_eq!(monday.len, 4);
    assert_eq!(tuesday.origin, None, "a new session branches from nothing");
    assert_eq!(server.store.list_conversations(10).unwrap().len(), 2);
    // Monday goes on in its own conversation.
    let third = serde_json::json!({"messages": [
        {"role": "user", "content": "hello"},
        {"role": "assistant", "content": "you said: hello"},
        {"role": "user", "content": "again"}
    ]});
    let (status, text) = server
        .chat(&third.to_string(), &[json, ("x-skein-session", "monday")])
        .await;
    assert_eq!(status, StatusCode::OK, "{text}");
    assert_eq!(sessions("monday").len, 4, "a branch of it, not a move");
    assert_eq!(server.store.list_conversations(10).unwrap().len(), 3);

    // The APIs' own fields name sessions too: OpenAI's `user`, Anthropic's
    // `metadata.user_id`; a value that reads as an id gets a prefix.
    let (status, reply) = server
        .proxy(
            "/v1/chat/completions",
            serde_json::json!({"user": "alice", "messages": [{"role": "user", "content": "hello"}]}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{reply}");
    assert!(server.store.conversation_named("alice").unwrap().is_some());
    let (status, reply) = server
        .proxy(
            "/v1/messages",
            serde_json::json!({"max_tokens": 5, "metadata": {"user_id": "0123abcd"},
                "messages": [{"role": "user", "content": "hello"}]}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{reply}");
    assert!(
        server
            .store
            .conversation_named("session 0123abcd")
            .unwrap()
            .is_some()
    );
    // A header that reads as an id is refused, as a name header is.
    let (status, _) = server
        .chat(
            &serde_json::json!({"messages": [{"role": "user", "content": "hi"}]}).to_string(),
            &[json, ("x-skein-session", "cafe1234")],
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(server.store.verify().unwrap().is_ok());
}

/// Each run keeps the client that made its request: the `x-skein-client`
/// header, else OpenAI's `user`, else Anthropic's `metadata.user_id`, else
/// none; a header that is empty or too long is refused, nothing recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_run_keeps_the_client_that_made_its_request() {
    let server = Server::proxying(None).await;
    let json = ("content-type", "application/json");
    let hello = |extra: Value| {
        let mut body = serde_json::json!({"max_tokens": 5,
            "messages": [{"role": "user", "content": "hello"}]});
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        body.to_string()
    };
    // The client on the run of a reply (its id ends in its run's).
    let client_of = |reply: &Value| {
        let id = reply["id"].as_str().unwrap();
        let run = id.rsplit(['-', '_']).next().unwrap();
        server
            .store
            .run_record(&skein::store::RunId(run.to_string()))
            .unwrap()
            .client
    };
    let chat = |extra: Value, headers: Vec<(&'static str, &'static str)>| {
        let server = &server;
        async move {
            let (status, text) = server.chat(&hello(extra), &headers).await;
            assert_eq!(status, StatusCode::OK, "{text}");
            serde_json::from_str::<Value>(&text).unwrap()
        }
    };
    let reply = chat(
        serde_json::json!({"user": "alice"}),
        vec![json, ("x-skein-client", " checkout-bot ")],
    )
    .await;
    assert_eq!(
        client_of(&reply).as_deref(),
        Some("checkout-bot"),
        "the header wins"
    );
    let reply = chat(serde_json::json!({"user": "alice"}), vec![json]).await;
    assert_eq!(client_of(&reply).as_deref(), Some("alice"));
    let (status, reply) = server
        .proxy(
            "/v1/messages",
            serde_json::json!({"max_tokens": 5, "metadata": {"user_id": "bob"},
                "messages": [{"role": "user", "content": "hello"}]}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{reply}");
    assert_eq!(client_of(&reply).as_deref(), Some("bob"));
    let reply = chat(serde_json::json!({}), vec![json]).await;
    assert_eq!(client_of(&reply), None);

    let runs = server.runs();
    let long = "x".repeat(300);
    for refused in [" ", long.as_str()] {
        let (status, text) = server
            .chat(
                &hello(serde_json::json!({})),
                &[json, ("x-skein-client", refused)],
            )
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{text}");
        assert!(text.contains("x-skein-client"), "{text}");
    }
    assert_eq!(server.runs(), runs, "nothing refused is recorded");
    assert!(server.store.verify().unwrap().is_ok());
}

/// What the Messages API carries that the proxy's models cannot honour:
/// a forced tool call is refused, `tool_choice: none` offers no tools,
/// extended thinking is answered without and said so in a header, and
/// `count_tokens` is refused in Anthropic's error format. Nothing refused
/// is recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_fields_the_proxy_cannot_honour_are_refused_or_reported() {
    let server = Server::proxying(None).await;
    let hello = serde_json::json!([{"role": "user", "content": "hello"}]);
    let tool = serde_json::json!([{"name": "get_weather", "input_schema": {"type": "object"}}]);
    let (status, error) = server
        .proxy(
            "/v1/messages",
            serde_json::json!({"max_tokens": 5, "messages": hello, "tools": tool,
                "tool_choice": {"type": "tool", "name": "get_weather"}}),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{error}");
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap()
            .contains("forces a tool call"),
        "{error}"
    );
    assert_eq!(server.runs(), 0, "nothing refused is recorded");

    let response = server
        .client
        .post(format!("{}/v1/messages", server.base))
        .header("content-type", "application/json")
        .body(
            serde_json::json!({"max_tokens": 5, "messages": hello, "tools": tool,
                "tool_choice": {"type": "none"},
                "thinking": {"type": "enabled", "budget_tokens": 1024}})
            .to_string(),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.headers()["x-skein-unhonoured"], "thinking");
    let run = server.store.recent_runs(1).unwrap().remove(0);
    assert!(
        run.tools.is_empty(),
        "`tool_choice: none` offers no tools: {:?}",
        run.tools
    );

    let (status, error) = server
        .proxy(
            "/v1/messages/count_tokens",
            serde_json::json!({"messages": hello}),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{error}");
    assert_eq!(error["error"]["type"], "not_found_error");
    assert!(server.store.verify().unwrap().is_ok());
}

/// Anthropic message threads: a `create` is an ordinary request whose
/// reply id is the thread's handle; a `continue` sends only its new
/// messages and lands where the whole history would (one conversation);
/// a `continue` from an id the graph lacks is refused with the code on
/// which the SDK sends the whole history again, and one that re-sends the
/// thread's `system` or names no reply is refused. Nothing refused is
/// recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_thread_continues_its_conversation_from_the_reply_it_names() {
    let server = Server::proxying(None).await;
    let (status, created) = server
        .proxy(
            "/v1/messages",
            serde_json::json!({"max_tokens": 50, "system": "Be brief.",
                "tools": [{"name": "get_weather", "input_schema": {"type": "object"}}],
                "messages": [{"role": "user", "content": "hello"}], "thread": {"type": "create"}}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{created}");
    let id = created["id"].as_str().unwrap().to_string();
    let continued = |previous: &str| {
        serde_json::json!({"max_tokens": 50, "messages": [{"role": "user", "content": "more"}],
            "thread": {"type": "continue", "previous_message_id": previous}})
    };

    let unknown = format!("msg_{}", "0".repeat(32));
    for lacking in [unknown.as_str(), "msg_from_another_server"] {
        let (status, error) = server.proxy("/v1/messages", continued(lacking)).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{error}");
        assert_eq!(error["error"]["type"], "not_found_error");
        assert_eq!(error["error"]["details"]["error_code"], "thread_not_found");
    }
    let mut with_system = continued(&id);
    with_system["system"] = "Be verbose.".into();
    let (status, error) = server.proxy("/v1/messages", with_system).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{error}");
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap()
            .contains("cannot send `system` or `tools`"),
        "{error}"
    );
    for thread in [
        serde_json::json!({"type": "continue"}),
        serde_json::json!({"type": "fork"}),
    ] {
        let mut body = continued(&id);
        body["thread"] = thread;
        let (status, error) = server.proxy("/v1/messages", body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{error}");
    }
    assert_eq!(server.runs(), 1, "nothing refused is recorded");

    let (status, reply) = server.proxy("/v1/messages", continued(&id)).await;
    assert_eq!(status, StatusCode::OK, "{reply}");
    assert_eq!(
        reply["content"][0]["text"], "echo: \"more\" (history: 4 messages, system: yes, tools: 1)",
        "the model got the thread's system prompt and tools"
    );
    let conversations = server.store.list_conversations(10).unwrap();
    assert_eq!(
        conversations.len(),
        1,
        "one conversation: {conversations:?}"
    );
    let thread = server
        .store
        .load_thread(conversations[0].head.unwrap())
        .unwrap();
    let texts: Vec<String> = thread
        .messages()
        .iter()
        .map(|message| message.joined_text())
        .collect();
    let said = |reply: &Value| reply["content"][0]["text"].as_str().unwrap().to_string();
    assert_eq!(
        texts,
        [
            "Be brief.".to_string(),
            "hello".into(),
            said(&created),
            "more".into(),
            said(&reply)
        ]
    );
    let runs = server.store.recent_runs(2).unwrap();
    assert_eq!(runs[0].tools, runs[1].tools, "the thread's tools offered");
    assert_eq!(runs[0].tools[0].name, "get_weather");
    assert!(server.store.verify().unwrap().is_ok());
}

/// A retry that drops the reply it was given and says more (instructor
/// re-sends `[user, user "Validation Error found: …"]`) is a branch of the
/// first attempt's conversation where that reply was given, not an
/// unlinked conversation titled by the validation error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_that_drops_its_reply_branches_the_first_attempt() {
    let server = Server::proxying(None).await;
    let ask = serde_json::json!({"role": "user", "content": "extract: Jason is 25"});
    let (status, first) = server
        .proxy(
            "/v1/chat/completions",
            serde_json::json!({"messages": [ask]}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{first}");
    let attempt = server.store.list_conversations(1).unwrap().remove(0);
    let (status, retry) = server
        .proxy(
            "/v1/chat/completions",
            serde_json::json!({"messages": [ask, {"role": "user", "content": "Validation Error found: age"}]}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{retry}");
    let conversations = server.store.list_conversations(10).unwrap();
    assert_eq!(conversations.len(), 2);
    let branch = conversations
        .iter()
        .find(|conversation| conversation.id != attempt.id)
        .unwrap();
    let origin = branch.origin.as_ref().expect("linked to the first attempt");
    assert_eq!(origin.conversation.as_ref(), Some(&attempt.id));
    let question = server.store.load_thread(attempt.head.unwrap()).unwrap();
    assert_eq!(origin.node, question.parent().head_id());
    assert!(server.store.verify().unwrap().is_ok());
}

// ------------------------------------------------------- from the recording

/// A server answering from `recorder`'s database, its model unreachable
/// (any call to it would fail): `misses` forwards what the recording
/// lacks to `model` instead.
async fn from_recording(
    recorder: &Server,
    mode: skein_serve::FromRecording,
    model: Model,
) -> Server {
    let store = recorder.store.clone();
    let mut server = Server::start_configured(move |config| {
        config.store = store;
        config.proxy = Some(ProxyConfig {
            from_recording: Some(mode),
            ..ProxyConfig::new(model)
        });
    })
    .await;
    server.store = recorder.store.clone();
    server
}

/// An OpenAI chat: `user` turns, each request carrying the replies before.
fn chat_request(history: &[Value], text: &str) -> Value {
    let mut messages = history.to_vec();
    messages.push(serde_json::json!({"role": "user", "content": text}));
    serde_json::json!({"model": "gpt-4o-mini", "messages": messages, "temperature": 0.2})
}

/// A conversation recorded once through the proxy is answered again, byte
/// for byte, by a server whose model cannot be reached, on every API and
/// streamed; nothing is written. A request that changed is refused with a
/// clear error naming its first difference; with `--record-misses` it goes
/// to the model and is recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recorded_requests_are_answered_from_the_recording_and_changed_ones_say_what_changed() {
    use skein_serve::FromRecording;
    let recorder = Server::proxying(None).await;
    let mut history = Vec::new();
    let mut recorded = Vec::new();
    for text in [
        "Hello there",
        "What is the capital of France?",
        "And of Spain?",
    ] {
        let request = chat_request(&history, text);
        let (status, answer) = recorder
            .proxy("/v1/chat/completions", request.clone())
            .await;
        assert_eq!(status, StatusCode::OK, "{answer}");
        history = request["messages"].as_array().unwrap().clone();
        history.push(answer["choices"][0]["message"].clone());
        recorded.push((request, answer));
    }
    let anthropic = serde_json::json!({"model": "claude-x", "max_tokens": 50,
        "messages": [{"role": "user", "content": "Bonjour"}]});
    let (status, anthropic_answer) = recorder.proxy("/v1/messages", anthropic.clone()).await;
    assert_eq!(status, StatusCode::OK, "{anthropic_answer}");
    let runs = recorder.runs();
    assert_eq!(runs, 4);

    let unreachable = Endpoint::at("http://127.0.0.1:9").model;
    let replayer = from_recording(&recorder, FromRecording::Only, unreachable.clone()).await;
    for (request, answer) in &recorded {
        let response = replayer
            .client
            .post(format!("{}/v1/chat/completions", replayer.base))
            .json(request)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(response.headers()["x-skein-from-recording"], "true");
        assert_eq!(
            response.headers()["x-skein-run"].to_str().unwrap(),
            answer["id"]
                .as_str()
                .unwrap()
                .trim_start_matches("chatcmpl-"),
            "the recorded run answers"
        );
        let again: Value = response.json().await.unwrap();
        assert_eq!(&again, answer, "the recorded answer, byte for byte");
    }
    let (status, again) = replayer.proxy("/v1/messages", anthropic.clone()).await;
    assert_eq!((status, &again), (StatusCode::OK, &anthropic_answer));

    // Streamed when asked, though recorded without a stream.
    let mut streamed = recorded[1].0.clone();
    streamed["stream"] = Value::Bool(true);
    let (status, body) = replayer
        .chat(
            &streamed.to_string(),
            &[("content-type", "application/json")],
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let text: String = body
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line.strip_prefix("data: ")?).ok())
        .filter_map(|chunk| {
            chunk["choices"][0]["delta"]["content"]
                .as_str()
                .map(str::to_string)
        })
        .collect();
    assert_eq!(
        text, recorded[1].1["choices"][0]["message"]["content"],
        "{body}"
    );
    assert!(body.ends_with("data: [DONE]\n\n"), "{body}");
    assert_eq!(
        recorder.runs(),
        runs,
        "answers from the recording write nothing"
    );

    // Changed requests: each refused, naming its first difference.
    let last = &recorded[2].0;
    let mut changed_text = last.clone();
    changed_text["messages"][4]["content"] = "And of Italy?".into();
    let mut changed_options = last.clone();
    changed_options["temperature"] = 0.7.into();
    let mut changed_model = last.clone();
    changed_model["model"] = "gpt-4o".into();
    let mut changed_history = last.clone();
    changed_history["messages"][1]["content"] = "an answer never given".into();
    let mut unanswered = last.clone();
    unanswered["messages"] = last["messages"].as_array().unwrap()[..4].into();
    for (request, expected) in [
        (
            &changed_text,
            "message 5 of 5 (user) differs from the recorded one at character 8: recorded \"And of Spain?\", this request \"And of Italy?\"",
        ),
        (
            &changed_options,
            "the generation options differ: recorded {\"temperature\":0.2}, this request {\"temperature\":0.7}",
        ),
        (
            &changed_model,
            "the model differs: recorded `gpt-4o-mini`, this request `gpt-4o`",
        ),
        (&changed_history, "message 2 of 5 (assistant) differs"),
        (
            &unanswered,
            "never sent as a request whose last message is the assistant message (message 4)",
        ),
    ] {
        let (status, error) = replayer
            .proxy("/v1/chat/completions", request.clone())
            .await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{error}");
        assert_eq!(error["error"]["code"], "not_recorded");
        let message = error["error"]["message"].as_str().unwrap();
        assert!(message.contains(expected), "{message}\nwanted: {expected}");
        assert!(message.contains("--record-misses"), "{message}");
    }
    assert_eq!(recorder.runs(), runs, "refusals write nothing");

    // With --record-misses, what the recording lacks is answered by the
    // model and recorded; what it has is still answered from it.
    let forwarding = from_recording(
        &recorder,
        FromRecording::RecordMisses,
        Model::open("echo").unwrap(),
    )
    .await;
    let (status, answer) = forwarding.proxy("/v1/chat/completions", changed_text).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    let reply = answer["choices"][0]["message"]["content"].as_str().unwrap();
    assert!(
        reply.contains("\"And of Italy?\""),
        "the model answered: {reply}"
    );
    assert_eq!(recorder.runs(), runs + 1);
    let (status, again) = forwarding.proxy("/v1/chat/completions", last.clone()).await;
    assert_eq!((status, &again), (StatusCode::OK, &recorded[2].1));
    assert_eq!(recorder.runs(), runs + 1);
}

// ---------------------------------------------------------------- handoffs

/// An agent handing off to another (openai-agents' handoffs): the
/// specialist's request repeats the user's message and the handoff call
/// under its own instructions, so it shares no message with the triage
/// agent's thread; the call id it carries links its conversation to the
/// triage conversation, at the message that made the call. A call id found
/// in two conversations is no evidence and links nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handoff_is_linked_to_the_conversation_that_made_its_call() {
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("agents.toml");
    std::fs::write(
        &rules,
        r#"
[[rules]]
name = "billing"
system_contains = "billing agent"
reply = "Billing here: your refund for {last_user} is on its way."

[[rules]]
name = "triage"
tool_offered = "transfer_to_billing"
last_role = "user"
tool_calls = [{ name = "transfer_to_billing", arguments = '{}' }]

[[rules]]
name = "plain"
reply = "you said: {last_user}"
"#,
    )
    .unwrap();
    let model = Model::open(&format!("scripted:{}", rules.display())).unwrap();
    let server = Server::start_configured(|config| {
        config.proxy = Some(ProxyConfig::new(model));
    })
    .await;
    let transfer = serde_json::json!([{"type": "function", "function": {
        "name": "transfer_to_billing", "description": "Hand off to the billing agent",
        "parameters": {"type": "object", "properties": {}}}}]);
    let user = serde_json::json!({"role": "user", "content": "I was charged twice"});
    let triage = serde_json::json!({"model": "gpt-4o", "tools": transfer, "messages": [
        {"role": "system", "content": "You are the triage agent."}, user]});
    let response = server
        .client
        .post(format!("{}/v1/chat/completions", server.base))
        .json(&triage)
        .send()
        .await
        .unwrap();
    let triage_conversation = response.headers()["x-skein-conversation"]
        .to_str()
        .unwrap()
        .to_string();
    let call_node = response.headers()["x-skein-node"]
        .to_str()
        .unwrap()
        .to_string();
    let answer: Value = response.json().await.unwrap();
    let call = answer["choices"][0]["message"].clone();
    let call_id = call["tool_calls"][0]["id"].as_str().unwrap().to_string();

    let specialist = serde_json::json!({"model": "gpt-4o", "messages": [
        {"role": "system", "content": "You are the billing agent."}, user, call,
        {"role": "tool", "tool_call_id": call_id, "content": "{\"assistant\": \"Billing\"}"}]});
    let response = server
        .client
        .post(format!("{}/v1/chat/completions", server.base))
        .json(&specialist)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let billing = ConversationId(
        response.headers()["x-skein-conversation"]
            .to_str()
            .unwrap()
            .to_string(),
    );
    assert_ne!(
        billing.0, triage_conversation,
        "the specialist's own conversation"
    );
    let record = server.store.conversation(&billing).unwrap();
    let origin = record.origin.expect("linked to the triage conversation");
    assert_eq!(origin.conversation.unwrap().0, triage_conversation);
    assert_eq!(
        origin.node.unwrap().to_string(),
        call_node,
        "at the handoff call"
    );
    let family = server
        .json(&format!("/api/conversations/{}/family", billing.0))
        .await;
    assert!(
        family.to_string().contains(&triage_conversation),
        "one family: {family}"
    );

    // A call id a client numbers (`call_1`) is no evidence; a distinctive
    // one made in two conversations links neither, but the request is said
    // to probably continue both: in a response header and on its run.
    let calling = |system: &str, id: &str| {
        serde_json::json!({"model": "gpt-4o", "messages": [
            {"role": "system", "content": system},
            {"role": "user", "content": "weather?"},
            {"role": "assistant", "content": null, "tool_calls": [{"id": id, "type": "function",
                "function": {"name": "get_weather", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": id, "content": "sunny"}]})
    };
    let origin_of = |answer: &reqwest::Response| {
        let id = answer.headers()["x-skein-conversation"].to_str().unwrap();
        let record = server
            .store
            .conversation(&ConversationId(id.to_string()))
            .unwrap();
        (
            id.to_string(),
            record.origin.and_then(|origin| origin.conversation),
        )
    };
    let send = |body: Value| {
        server
            .client
            .post(format!("{}/v1/chat/completions", server.base))
            .json(&body)
            .send()
    };
    for system in ["app one", "app two"] {
        let (_, origin) = origin_of(&send(calling(system, "call_1")).await.unwrap());
        assert_eq!(origin, None, "{system}: `call_1` is no evidence");
    }
    let distinctive = "call_Zq9Xw7Lp2Rk4Tn8Vb";
    let probably = |answer: &reqwest::Response| {
        answer
            .headers()
            .get("x-skein-probably-continues")
            .map(|value| value.to_str().unwrap().to_string())
    };
    let answer = send(calling("app three", distinctive)).await.unwrap();
    let (first, origin) = origin_of(&answer);
    assert_eq!((origin, probably(&answer)), (None, None));
    let answer = send(calling("app four", distinctive)).await.unwrap();
    let (second, origin) = origin_of(&answer);
    assert_eq!(
        origin.map(|id| id.0),
        Some(first.clone()),
        "one conversation made it"
    );
    assert_eq!(probably(&answer), None, "linked, not guessed");
    let answer = send(calling("app five", distinctive)).await.unwrap();
    let (fifth, origin) = origin_of(&answer);
    assert_eq!(origin, None, "two conversations made it: linked to neither");
    let mut candidates: Vec<String> = probably(&answer)
        .expect("the candidates are reported")
        .split(", ")
        .map(str::to_string)
        .collect();
    candidates.sort();
    let mut expected = vec![first, second];
    expected.sort();
    assert_eq!(candidates, expected);
    let run = server.store.recent_runs(1).unwrap().remove(0);
    assert_eq!(run.conversation.map(|id| id.0), Some(fifth));
    let mut related: Vec<String> = run
        .relations
        .iter()
        .filter_map(|relation| match relation {
            Relation::Other { kind, target } if kind == skein::conversation::PROBABLY_CONTINUES => {
                Some(target.clone())
            }
            _ => None,
        })
        .collect();
    related.sort();
    assert_eq!(related, expected, "the run names the candidates");
    assert!(server.store.verify().unwrap().is_ok());
}

/// The model a replayed proxy client talked to: it asks `lookup` for the
/// question's number, then answers with the result.
const PROXIED: &str = r#"
[[rules]]
last_role = "user"
last_user_matches = "question (\\d+)"
tool_calls = [{ name = "lookup", arguments = '{"q": "{last_user}"}' }]

[[rules]]
last_role = "tool"
reply = "The answer is {last_tool_result}."
"#;

/// The model the traffic is replayed on: the same call (spaced otherwise)
/// and answer for `(keep)` questions, another answer for `(change)`, a
/// call the recording lacks for `(diverge)`.
const REPLAYED_ON: &str = r#"
[[rules]]
last_role = "user"
last_user_contains = "(diverge)"
tool_calls = [{ name = "lookup", arguments = '{"q": "somewhere else"}' }]

[[rules]]
last_role = "user"
tool_calls = [{ name = "lookup", arguments = '{ "q" : "{last_user}" }' }]

[[rules]]
last_role = "tool"
last_user_contains = "(change)"
reply = "The answer is {last_tool_result} plus 1."

[[rules]]
last_role = "tool"
reply = "The answer is {last_tool_result}."
"#;

/// 50 turns recorded through the proxy by a client in OpenAI's format (a
/// tool call, the client's result, the answer), replayed on another
/// scripted model with tools answered from the recording: the report
/// names exactly the turns that changed and the ones that diverged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxied_traffic_replays_with_tools_from_the_recording() {
    use skein::engine::{BackendDef, BackendKind, Catalog, Engine, Profile};
    use skein::recorded::replay::{ReplayPlan, Replayer, Selection};
    use skein::store::ReplayStatus;
    const TURNS: usize = 50;
    let scripted = |text: &str| Arc::new(skein::providers::Scripted::from_toml_str(text).unwrap());
    let mut catalog = Catalog::new();
    for name in ["orig", "new"] {
        catalog = catalog
            .backend(BackendDef::new(name, BackendKind::Echo))
            .profile(Profile::new(name, name, format!("{name}-model")));
    }
    let engine = Engine::builder(catalog)
        .provider("orig", scripted(PROXIED))
        .provider("new", scripted(REPLAYED_ON))
        .build()
        .unwrap();
    let original = Model::from_profile(&engine, "orig").unwrap();
    let server = Server::start_configured(|config| {
        config.proxy = Some(ProxyConfig::new(original));
    })
    .await;
    let kind = |i: usize| match i % 5 {
        0 => "(change)",
        1 => "(diverge)",
        _ => "(keep)",
    };
    let tools = serde_json::json!([{"type": "function", "function": {
        "name": "lookup", "description": "Look up a question",
        "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}}]);
    for i in 0..TURNS {
        let question =
            serde_json::json!({"role": "user", "content": format!("question {i} {}", kind(i))});
        let (status, first) = server
            .proxy(
                "/v1/chat/completions",
                serde_json::json!({"model": "gpt-4o-mini", "messages": [question], "tools": tools}),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{first}");
        let call = first["choices"][0]["message"].clone();
        let id = call["tool_calls"][0]["id"].as_str().unwrap().to_string();
        let result = serde_json::json!({"role": "tool", "tool_call_id": id, "content": format!("value-{i}")});
        let (status, answer) = server
            .proxy(
                "/v1/chat/completions",
                serde_json::json!({"model": "gpt-4o-mini", "messages": [question, call, result], "tools": tools}),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{answer}");
        assert_eq!(
            answer["choices"][0]["message"]["content"],
            format!("The answer is value-{i}.")
        );
    }
    let store = &server.store;
    let conversations = store.list_conversations(1000).unwrap();
    assert_eq!(conversations.len(), TURNS);
    let selection = conversations
        .iter()
        .fold(Selection::new(), |s, c| s.conversation(c.id.clone()));
    let replayer = Replayer::new(store, Model::from_profile(&engine, "new").unwrap());
    let id = replayer
        .start(&selection, &ReplayPlan::new("new"))
        .await
        .unwrap();
    let totals = replayer.run(&id, |_| {}).await.unwrap();
    assert_eq!(totals.done + totals.diverged, TURNS as u64);
    let turns = store.replay_turns(&id, None, 1000).unwrap();
    let question_of = |turn: &skein::store::ReplayTurn| {
        let thread = store.load_thread(turn.request_node).unwrap();
        let text = thread.head().unwrap().message().joined_text();
        text.split(' ').nth(1).unwrap().parse::<usize>().unwrap()
    };
    let mut changed = Vec::new();
    let mut diverged = Vec::new();
    for turn in &turns {
        let i = question_of(turn);
        match (turn.status, turn.decision.as_deref()) {
            (ReplayStatus::Diverged, _) => {
                diverged.push(i);
                assert_eq!(
                    turn.detail["why"],
                    r#"diverged: asked for lookup({"q": "somewhere else"})"#
                );
            }
            (ReplayStatus::Done, Some("changed")) => changed.push(i),
            (ReplayStatus::Done, Some("held")) => {
                // The recorded result answered the call: no tool ran.
                let answer = server.store.node(turn.answer_head.unwrap()).unwrap();
                assert_eq!(
                    answer.message.joined_text(),
                    format!("The answer is value-{i}.")
                );
            }
            other => panic!("turn {i}: {other:?}"),
        }
    }
    changed.sort_unstable();
    diverged.sort_unstable();
    assert_eq!(
        changed,
        (0..TURNS).filter(|i| i % 5 == 0).collect::<Vec<_>>()
    );
    assert_eq!(
        diverged,
        (0..TURNS).filter(|i| i % 5 == 1).collect::<Vec<_>>()
    );
    assert_eq!(store.list_conversations(1000).unwrap().len(), TURNS);
    assert!(store.verify().unwrap().is_ok());
}

impl Server {
    /// Poll a replay's progress until every turn is finished and no worker
    /// of the server is on it; its last progress.
    async fn replay_finished(&self, id: &str) -> Value {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let progress = self.json(&format!("/api/replays/{id}/progress")).await;
            let totals = &progress["totals"];
            let finished = ["done", "diverged", "failed"]
                .iter()
                .map(|key| totals[key].as_u64().unwrap())
                .sum::<u64>();
            if finished == progress["selected"].as_u64().unwrap() && progress["working"] == false {
                return progress;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the replay never finished: {progress}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// `POST /api/replays` with `cases`: a line that is no case is refused
/// (400, naming its line) before any replay is stored. (Cases that are
/// cases are selected as `skein replay --cases` selects them: the CLI's
/// replay selection table runs them through this route.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_from_the_page_refuses_a_line_that_is_no_case() {
    let server = Server::start().await;
    let said = server
        .refused(
            "/api/replays",
            serde_json::json!({ "cases": "\n{\"label\": \"x\"}\n" }),
            StatusCode::BAD_REQUEST,
        )
        .await;
    assert!(said.contains("line 2 of the cases file"), "{said}");
    assert!(server.store.all_replays().unwrap().is_empty());
}

/// `POST /api/replays` with `models`: one replay comparing the candidates,
/// each turn once per model, reported with each model's totals; its rows
/// listed once; `model` beside `models`, a model named twice or one the
/// server does not offer refused (400) before anything is stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_started_from_the_page_compares_models_in_one_report() {
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("terse.toml");
    std::fs::write(&rules, "[[rules]]\nreply = \"A river.\"\n").unwrap();
    let terse = format!("scripted:{}", rules.display());
    let server = Server::start_configured(|config| {
        config.models = Arc::new(ModelNames::new("echo", [terse.clone()]));
    })
    .await;
    story(&server.store).await;
    for (body, why) in [
        (
            serde_json::json!({ "conversations": ["main"], "model": "echo", "models": ["echo", terse] }),
            "not both",
        ),
        (
            serde_json::json!({ "conversations": ["main"], "models": ["echo", "echo"] }),
            "named twice",
        ),
        (
            serde_json::json!({ "conversations": ["main"], "models": ["echo", "scripted:/etc/passwd"] }),
            "does not offer",
        ),
    ] {
        let said = server
            .refused("/api/replays", body, StatusCode::BAD_REQUEST)
            .await;
        assert!(said.contains(why), "{said}");
    }
    assert!(server.store.all_replays().unwrap().is_empty());

    let started = server
        .act(
            "/api/replays",
            serde_json::json!({
                "conversations": ["main"],
                "models": ["echo", terse],
                "compare": ["exact"],
            }),
        )
        .await;
    let started: Value = serde_json::from_str(&started).unwrap();
    let id = started["id"].as_str().unwrap().to_string();
    assert_eq!(started["selected"], 4, "two turns, once per model");
    assert_eq!(started["models"], serde_json::json!(["echo", terse]));
    server.replay_finished(&id[..12]).await;

    let report = server.json(&format!("/api/replays/{}", &id[..12])).await;
    assert_eq!(report["models"], serde_json::json!(["echo", terse]));
    let turns = report["turns"].as_array().unwrap();
    assert_eq!(turns.len(), 4);
    let mut pairs: Vec<(String, String)> = turns
        .iter()
        .map(|turn| {
            (
                turn["turn_node"].as_str().unwrap().to_string(),
                turn["model"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    pairs.sort();
    pairs.dedup();
    assert_eq!(pairs.len(), 4, "each turn once per model");
    // Echo answers as it did: held; the terse model says otherwise:
    // changed. Worst first: each turn's rows together, the changed one
    // deciding.
    let totals: Vec<(&str, u64, u64)> = report["model_totals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|model| {
            (
                model["model"].as_str().unwrap(),
                model["totals"]["held"].as_u64().unwrap(),
                model["totals"]["changed"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(totals, [("echo", 2, 0), (terse.as_str(), 0, 2)]);
    assert_eq!(turns[0]["turn_node"], turns[1]["turn_node"]);
    assert_eq!(turns[2]["turn_node"], turns[3]["turn_node"]);

    let listed = server.json("/api/replays").await;
    assert_eq!(listed["replays"].as_array().unwrap().len(), 1);
    assert_eq!(
        listed["replays"][0]["models"],
        serde_json::json!(["echo", terse])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_is_started_from_the_page_watched_and_reported_turn_by_turn() {
    let server = Server::start().await;
    let story = story(&server.store).await;
    assert_eq!(
        server.json("/api/replays").await,
        serde_json::json!({ "replays": [], "limit": 100, "truncated": false, "next": null })
    );

    // Another system prompt on echo, judged exactly: echo says whether it
    // had a system message, so both turns of `main` change.
    let started = server
        .act(
            "/api/replays",
            serde_json::json!({
                "conversations": ["main"],
                "system": "Be brief.",
                "compare": ["exact"],
            }),
        )
        .await;
    let started: Value = serde_json::from_str(&started).unwrap();
    let id = started["id"].as_str().unwrap().to_string();
    assert_eq!(started["selected"], 2);
    assert_eq!(started["model"], "echo", "the server's default model");
    let progress = server.replay_finished(&id[..12]).await;
    assert_eq!(progress["totals"]["changed"], 2);

    let report = server.json(&format!("/api/replays/{}", &id[..12])).await;
    assert_eq!(report["replay"], id.as_str());
    assert_eq!(report["working"], false);
    assert_eq!(report["change"]["system"], "Be brief.");
    let turns = report["turns"].as_array().unwrap();
    assert_eq!(
        turns
            .iter()
            .map(|t| t["turn_node"].as_str().unwrap())
            .collect::<Vec<_>>(),
        [story.a1.as_str(), story.a2.as_str()]
    );
    let mut replayed = 0.0;
    for turn in turns {
        assert_eq!(turn["result"], "changed", "{turn}");
        assert_eq!(turn["comparator"], "exact");
        assert!(turn["why"].as_str().is_some_and(|why| !why.is_empty()));
        assert_eq!(turn["conversation"], story.main.as_str());
        let (original, answer) = (
            turn["original"].as_str().unwrap(),
            turn["answer"].as_str().unwrap(),
        );
        assert!(original.contains("system: no"), "{original}");
        assert!(answer.contains("system: yes"), "{answer}");
        // The replayed answer is a stored node; the original's answer stays.
        let answer_node = turn["answer_node"].as_str().unwrap();
        let node = server.json(&format!("/api/nodes/{answer_node}")).await;
        assert_eq!(node["role"], "assistant");
        // Priced at the server's prices, per turn and in total.
        let usage = &turn["usage"];
        let cost = (usage["input_tokens"].as_f64().unwrap()
            + 2.0 * usage["output_tokens"].as_f64().unwrap())
            / 1e6;
        assert!(cost > 0.0);
        assert!((turn["cost"]["dollars"].as_f64().unwrap() - cost).abs() < 1e-12);
        assert_eq!(turn["cost"]["complete"], true);
        assert_eq!(turn["original_cost"]["complete"], true);
        replayed += cost;
    }
    assert!((report["cost"]["replay"]["dollars"].as_f64().unwrap() - replayed).abs() < 1e-12);
    // The original answer names the replay that re-sent its turn.
    let replayed_at = server.json(&format!("/api/nodes/{}", story.a1)).await["replays"].clone();
    assert_eq!(replayed_at[0]["replay"], id.as_str());
    assert_eq!(replayed_at[0]["result"], "changed");
    assert_eq!(replayed_at[0]["answer_node"], turns[0]["answer_node"]);
    assert_eq!(
        server.json(&format!("/api/nodes/{}", story.a3)).await["replays"],
        serde_json::json!([])
    );
    // The family tree draws each replayed answer as a branch on its turn,
    // as it draws reruns: another system prompt starts a tree of its own,
    // whose first line is the first turn's replay and the second's a
    // `replay` branch off it.
    let family = server
        .json(&format!("/api/conversations/{}/family", story.main))
        .await;
    let replayed: Vec<&Value> = family["branches"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|branch| branch["replay"].is_object())
        .collect();
    assert_eq!(replayed.len(), 2, "{family}");
    assert_eq!(
        (replayed[0]["kind"].as_str(), replayed[1]["kind"].as_str()),
        (Some("root"), Some("replay"))
    );
    for (branch, turn) in replayed.iter().zip(turns) {
        assert_eq!(branch["replay"]["id"], id.as_str());
        assert_eq!(branch["replay"]["result"], "changed");
        assert!(
            branch["label"].as_str().unwrap().contains(&id[..12]),
            "{branch}"
        );
        assert_eq!(
            branch["nodes"].as_array().unwrap().last().unwrap(),
            &turn["answer_node"]
        );
    }
    let mut on_turns: Vec<&str> = replayed
        .iter()
        .map(|b| b["replay"]["turn_node"].as_str().unwrap())
        .collect();
    on_turns.sort();
    let mut expected = vec![story.a1.as_str(), story.a2.as_str()];
    expected.sort();
    assert_eq!(on_turns, expected);
    assert_eq!(report["cost"]["complete"], true);

    // The model alone, default comparators: both hold (a source the
    // request lacks is re-sent as recorded). Listed newest first.
    let held: Value = serde_json::from_str(
        &server
            .act(
                "/api/replays",
                serde_json::json!({
                    "turns": [&story.a2[..12]], "model": "echo",
                    "replace_sources": { "hotel": "The Ritz." },
                }),
            )
            .await,
    )
    .unwrap();
    assert_eq!(held["change"]["replace_sources"]["hotel"], "The Ritz.");
    let held_id = held["id"].as_str().unwrap();
    server.replay_finished(held_id).await;
    let report = server.json(&format!("/api/replays/{held_id}")).await;
    assert_eq!(report["totals"]["held"], 1);
    assert_eq!(report["turns"][0]["result"], "held");
    let listed = server.json("/api/replays").await["replays"].clone();
    assert_eq!(
        listed
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["id"].as_str().unwrap())
            .collect::<Vec<_>>(),
        [held_id, id.as_str()]
    );
    assert_eq!(listed[1]["totals"]["changed"], 2);
    assert_eq!(
        listed[1]["selection"]["conversations"][0],
        story.main.as_str()
    );
    // A page at a time, newest first, each page with its totals.
    let first = server.json("/api/replays?limit=1").await;
    assert_eq!(first["replays"][0]["id"], held_id);
    assert_eq!(first["replays"][0]["totals"]["held"], 1);
    assert_eq!(first["truncated"], true);
    let second = server.json(first["next"].as_str().unwrap()).await;
    assert_eq!(second["replays"][0]["id"], id.as_str());
    assert_eq!(second["replays"][0]["totals"]["changed"], 2);
    assert_eq!(
        (second["truncated"].clone(), second["next"].clone()),
        (false.into(), Value::Null)
    );
    for bad in [
        "/api/replays?after=nowhere",
        "/api/replays?limit=0",
        "/api/replays?after=1.a-b",
    ] {
        server.error(bad, StatusCode::BAD_REQUEST).await;
    }

    // Refused before anything is stored.
    let before = server.store.all_replays().unwrap().len();
    let refusals = [
        (
            serde_json::json!({}),
            StatusCode::BAD_REQUEST,
            "say which turns",
        ),
        (
            serde_json::json!({ "conversations": ["nobody"] }),
            StatusCode::NOT_FOUND,
            "nobody",
        ),
        (
            serde_json::json!({ "conversations": ["main"], "compare": ["sideways"] }),
            StatusCode::BAD_REQUEST,
            "sideways",
        ),
        (
            serde_json::json!({ "conversations": ["main"], "model": "scripted:/etc/hostname" }),
            StatusCode::BAD_REQUEST,
            "does not offer it",
        ),
        (
            serde_json::json!({ "conversations": ["main"], "options": { "temperature": -1 } }),
            StatusCode::BAD_REQUEST,
            "bad option",
        ),
        (
            serde_json::json!({ "conversations": ["main"], "colour": "red" }),
            StatusCode::BAD_REQUEST,
            "colour",
        ),
        (
            serde_json::json!({ "conversations": ["main"], "prompt_version": "brief" }),
            StatusCode::BAD_REQUEST,
            "ID@VERSION",
        ),
        (
            serde_json::json!({ "conversations": ["main"], "prompt_version": "brief@2" }),
            StatusCode::BAD_REQUEST,
            "no such prompt",
        ),
        (
            serde_json::json!({ "conversations": ["main"], "replace_sources": { "": "x" } }),
            StatusCode::BAD_REQUEST,
            "empty id",
        ),
    ];
    for (body, status, says) in refusals {
        let message = server.refused("/api/replays", body.clone(), status).await;
        assert!(message.contains(says), "{body}: {message}");
    }
    assert_eq!(server.store.all_replays().unwrap().len(), before);

    // A finished replay has nothing to resume; an unknown one is not found.
    let message = server
        .refused(
            &format!("/api/replays/{held_id}/resume"),
            serde_json::json!({}),
            StatusCode::CONFLICT,
        )
        .await;
    assert!(message.contains("nothing to resume"), "{message}");
    let unknown = "0123456789ab";
    server
        .error(&format!("/api/replays/{unknown}"), StatusCode::NOT_FOUND)
        .await;
    server
        .error(
            &format!("/api/replays/{unknown}/progress"),
            StatusCode::NOT_FOUND,
        )
        .await;
    assert!(server.store.verify().unwrap().is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_whose_worker_stopped_is_resumed_from_the_page() {
    use skein::recorded::replay::{ReplayPlan, Replayer, Selection};
    let server = Server::start().await;
    let story = story(&server.store).await;
    // Stored as a worker that died before replaying anything leaves it.
    let replayer = Replayer::new(&server.store, Model::open("echo").unwrap())
        .embedder(Arc::new(skein::recorded::LexicalEmbedder::new(256)));
    let conversation = server.store.resolve_conversation(&story.main).unwrap();
    let id = replayer
        .start(
            &Selection::new().conversation(conversation),
            &ReplayPlan::new("echo"),
        )
        .await
        .unwrap();
    let progress = server.json(&format!("/api/replays/{id}/progress")).await;
    assert_eq!(progress["totals"]["pending"], 2);
    assert_eq!(progress["working"], false);
    let report = server.json(&format!("/api/replays/{id}")).await;
    assert!(
        report["turns"]
            .as_array()
            .unwrap()
            .iter()
            .all(|turn| turn["result"] == "pending" && turn["cost"].is_null())
    );

    server
        .act(&format!("/api/replays/{id}/resume"), serde_json::json!({}))
        .await;
    let progress = server.replay_finished(id.as_str()).await;
    assert_eq!(progress["totals"]["held"], 2);
    let report = server.json(&format!("/api/replays/{id}")).await;
    assert!(
        report["turns"]
            .as_array()
            .unwrap()
            .iter()
            .all(|turn| turn["result"] == "held" && turn["cost"]["complete"] == true)
    );
}

/// Labels from the page go through the same labelling as `skein label`:
/// put on turns by node and on a replay's turns by result, listed, taken
/// off; bad input is refused with a message and labels nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn turns_are_labelled_and_unlabelled_from_the_page() {
    let server = Server::start().await;
    let story = story(&server.store).await;
    assert_eq!(server.json("/api/labels").await, serde_json::json!([]));

    let added: Value = serde_json::from_str(
        &server
            .act(
                "/api/labels/hotel",
                serde_json::json!({ "turns": [&story.a1[..12], story.a1.as_str()] }),
            )
            .await,
    )
    .unwrap();
    assert_eq!(
        added,
        serde_json::json!({ "label": "hotel", "changed": 1, "given": 1 })
    );
    assert_eq!(
        server.json("/api/labels").await,
        serde_json::json!([{ "name": "hotel", "nodes": 1 }])
    );
    let listed = server.json("/api/labels/hotel").await;
    assert_eq!(listed["turns"], serde_json::json!([story.a1.as_str()]));
    assert_eq!(listed["truncated"], false);
    assert_eq!(
        server.store.labels_of(story.a1.parse().unwrap()).unwrap(),
        ["hotel"]
    );

    // A replay's changed turns: both turns of `main` change with a system
    // prompt judged exactly; a1 already carries the label.
    let started: Value = serde_json::from_str(
        &server
            .act(
                "/api/replays",
                serde_json::json!({
                    "conversations": ["main"], "system": "Be brief.", "compare": ["exact"],
                }),
            )
            .await,
    )
    .unwrap();
    let replay = started["id"].as_str().unwrap().to_string();
    server.replay_finished(&replay).await;
    let added: Value = serde_json::from_str(
        &server
            .act(
                "/api/labels/hotel",
                serde_json::json!({ "replay": &replay[..12], "results": ["changed"] }),
            )
            .await,
    )
    .unwrap();
    assert_eq!(
        (added["changed"].clone(), added["given"].clone()),
        (1.into(), 2.into())
    );
    let page = server.json("/api/labels/hotel?limit=1").await;
    assert_eq!(page["turns"].as_array().unwrap().len(), 1);
    assert_eq!(page["truncated"], true);
    let rest = server.json(page["next"].as_str().unwrap()).await;
    assert_eq!(rest["turns"].as_array().unwrap().len(), 1);
    assert_eq!(rest["truncated"], false);
    let mut both = vec![page["turns"][0].clone(), rest["turns"][0].clone()];
    both.sort_by_key(|node| node.as_str().unwrap().to_string());
    let mut expected = vec![story.a1.clone(), story.a2.clone()];
    expected.sort();
    assert_eq!(both, expected);

    // Refused, nothing labelled.
    let q1 = server
        .store
        .load_thread(story.a1.parse().unwrap())
        .unwrap()
        .parent()
        .head_id()
        .unwrap()
        .to_hex();
    let refusals = [
        (
            "/api/labels/hotel",
            serde_json::json!({}),
            StatusCode::BAD_REQUEST,
            "say which turns",
        ),
        (
            "/api/labels/hotel",
            serde_json::json!({ "turns": [q1] }),
            StatusCode::BAD_REQUEST,
            "not the reply of a recorded turn",
        ),
        (
            "/api/labels/%20spaced",
            serde_json::json!({ "turns": [story.a3.as_str()] }),
            StatusCode::BAD_REQUEST,
            "spaced",
        ),
        (
            "/api/labels/hotel",
            serde_json::json!({ "turns": [story.a3.as_str()], "results": ["changed"] }),
            StatusCode::BAD_REQUEST,
            "give the `replay` too",
        ),
        (
            "/api/labels/hotel",
            serde_json::json!({ "replay": &replay[..12], "results": ["sideways"] }),
            StatusCode::BAD_REQUEST,
            "sideways",
        ),
        (
            "/api/labels/hotel",
            serde_json::json!({ "turns": ["0123456789ab"] }),
            StatusCode::NOT_FOUND,
            "0123456789ab",
        ),
    ];
    for (path, body, status, says) in refusals {
        let message = server.refused(path, body.clone(), status).await;
        assert!(message.contains(says), "{body}: {message}");
    }
    assert_eq!(
        server.json("/api/labels").await,
        serde_json::json!([{ "name": "hotel", "nodes": 2 }])
    );
    server
        .error("/api/labels/hotel?after=nothex", StatusCode::BAD_REQUEST)
        .await;

    let removed: Value = serde_json::from_str(
        &server
            .act(
                "/api/labels/hotel/remove",
                serde_json::json!({ "turns": [story.a1.as_str(), story.a3.as_str()] }),
            )
            .await,
    )
    .unwrap();
    assert_eq!(
        removed,
        serde_json::json!({ "label": "hotel", "changed": 1, "given": 2 })
    );
    assert_eq!(
        server.json("/api/labels/hotel").await["turns"],
        serde_json::json!([story.a2.as_str()])
    );
    assert!(
        server
            .store
            .labels_of(story.a1.parse().unwrap())
            .unwrap()
            .is_empty()
    );
}

/// The replay list costs three statements a page however many replays it
/// shows (their records, all their totals, then the conversations their
/// selections name, for their names), not one per replay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_replay_list_costs_the_same_for_one_replay_as_for_five() {
    use skein::recorded::replay::{ReplayPlan, Replayer, Selection};
    let server = Server::start().await;
    let story = story(&server.store).await;
    let conversation = server.store.resolve_conversation(&story.main).unwrap();
    let replayer = Replayer::new(&server.store, Model::open("echo").unwrap());
    let meter = server.store.meter().unwrap();
    let mut costs = Vec::new();
    for count in [1, 5] {
        while server.store.all_replays().unwrap().len() < count {
            let id = replayer
                .start(
                    &Selection::new().conversation(conversation.clone()),
                    &ReplayPlan::new("echo"),
                )
                .await
                .unwrap();
            replayer.run(&id, |_| {}).await.unwrap();
        }
        let before = meter.read();
        let listed = server.json("/api/replays").await;
        costs.push(meter.read() - before);
        let replays = listed["replays"].as_array().unwrap();
        assert_eq!(replays.len(), count);
        assert!(replays.iter().all(|r| r["totals"]["held"] == 2), "{listed}");
    }
    assert_eq!(
        costs[0].statements, costs[1].statements,
        "five replays took more statements than one ({} -> {})",
        costs[0], costs[1]
    );
    assert_eq!(costs[0].statements, 3, "{}", costs[0]);
}

// ------------------------------------------------------------ erased content

/// The node the only conversation of `server` ends at.
fn only_head(server: &Server) -> skein::NodeId {
    let conversations = server.store.list_conversations(10).unwrap();
    assert_eq!(conversations.len(), 1);
    conversations[0].head.unwrap()
}

/// A request that continues a reply erased since (`skein redact`) is the
/// client's to fix: a 409 with the code `erased_content` in the API's own
/// shape, streamed or not, naming the erased message; nothing is sent to a
/// model or recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_resending_erased_content_is_a_client_error_not_a_server_one() {
    let server = Server::proxying(None).await;
    let (status, first) = server
        .proxy(
            "/v1/responses",
            serde_json::json!({"model": "gpt-4o", "input": "my password is hunter2"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{first}");
    let reply = only_head(&server);
    server
        .store
        .redact(reply, "ana", "quoted a password")
        .unwrap();
    let runs = server.runs();
    let nodes = counts(&server.store).0;
    for stream in [false, true] {
        let (status, error) = server
            .proxy(
                "/v1/responses",
                serde_json::json!({"model": "gpt-4o", "input": "go on",
                    "previous_response_id": first["id"], "stream": stream}),
            )
            .await;
        assert_eq!(status, StatusCode::CONFLICT, "stream {stream}: {error}");
        assert_eq!(error["error"]["code"], "erased_content", "{error}");
        assert_eq!(error["error"]["type"], "invalid_request_error", "{error}");
        let message = error["error"]["message"].as_str().unwrap();
        assert!(
            message.contains(&format!("message {} was erased", reply.short())),
            "{message}"
        );
        assert!(message.contains("quoted a password"), "{message}");
    }
    assert_eq!(server.runs(), runs, "nothing was run");
    assert_eq!(counts(&server.store).0, nodes, "nothing was recorded");
}

/// A recorded reply erased since is never answered from the recording
/// (it would be empty): refused with a 410 saying so, streamed or not, on
/// every API; with `--record-misses` the model answers it anew.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_erased_recorded_reply_is_refused_not_answered_empty() {
    use skein_serve::FromRecording;
    let recorder = Server::proxying(None).await;
    let request = chat_request(&[], "my password is hunter2");
    let (status, answer) = recorder
        .proxy("/v1/chat/completions", request.clone())
        .await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    let reply = only_head(&recorder);
    recorder
        .store
        .redact(reply, "ana", "quoted a password")
        .unwrap();
    let runs = recorder.runs();

    let unreachable = Endpoint::at("http://127.0.0.1:9").model;
    let replayer = from_recording(&recorder, FromRecording::Only, unreachable).await;
    for stream in [false, true] {
        let mut asked = request.clone();
        asked["stream"] = Value::Bool(stream);
        let (status, error) = replayer.proxy("/v1/chat/completions", asked).await;
        assert_eq!(status, StatusCode::GONE, "stream {stream}: {error}");
        assert_eq!(error["error"]["code"], "recording_erased", "{error}");
        let message = error["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("the recording's reply to this request was erased"),
            "{message}"
        );
        assert!(message.contains(&reply.short()), "{message}");
        assert!(message.contains("quoted a password"), "{message}");
        assert!(message.contains("--record-misses"), "{message}");
    }
    assert_eq!(recorder.runs(), runs, "refusals write nothing");

    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("fresh.toml");
    std::fs::write(&rules, "[[rules]]\nreply = \"A fresh answer.\"\n").unwrap();
    let model = Model::open(&format!("scripted:{}", rules.display())).unwrap();
    let forwarding = from_recording(&recorder, FromRecording::RecordMisses, model).await;
    let (status, answer) = forwarding.proxy("/v1/chat/completions", request).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(
        answer["choices"][0]["message"]["content"], "A fresh answer.",
        "the model answered: {answer}"
    );
    assert_eq!(recorder.runs(), runs + 1, "and was recorded");
}

/// Models that open any name (as the CLI's open any provider's model with
/// the operator's keys) but offer `echo` only; `opened` counts the models
/// opened by name.
#[derive(Default)]
struct OpensAnyName {
    opened: std::sync::atomic::AtomicUsize,
}

impl skein::Home for OpensAnyName {
    fn open(&self, name: Option<&str>) -> Result<Model, skein::SurfaceError> {
        if name.is_some() {
            self.opened
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
        Model::open("echo").map_err(skein::SurfaceError::new)
    }

    fn default_name(&self) -> String {
        "echo".into()
    }
}

impl skein_serve::Models for OpensAnyName {
    fn choices(&self) -> Vec<skein_serve::ModelChoice> {
        vec![skein_serve::ModelChoice {
            name: "echo".into(),
            label: "echo".into(),
        }]
    }
}

/// The page's actions take only the models `/api/session` offers: any
/// other (a provider's model the operator never offered, which would be
/// called with the operator's key) is a 400 naming the offered ones, and
/// no model is opened or called.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn actions_take_only_the_models_the_session_offers() {
    let models = Arc::new(OpensAnyName::default());
    let server = {
        let models = models.clone();
        Server::start_configured(move |config| config.models = models).await
    };
    let story = story(&server.store).await;
    let session = server.json("/api/session").await;
    let offered: Vec<&str> = session["models"]
        .as_array()
        .unwrap()
        .iter()
        .map(|model| model["name"].as_str().unwrap())
        .collect();
    assert_eq!(offered, ["echo"]);
    let q2 = server.json(&format!("/api/nodes/{}", story.a2)).await["parent"]
        .as_str()
        .unwrap()
        .to_string();
    let before = counts(&server.store);
    let unoffered = "openai:gpt-4o";
    for (path, body) in [
        (
            format!("/api/nodes/{}/reply", story.a2),
            serde_json::json!({"text": "Go on.", "model": unoffered}),
        ),
        (
            format!("/api/nodes/{q2}/edit"),
            serde_json::json!({"text": "Name a sea.", "model": unoffered}),
        ),
        (
            format!("/api/nodes/{}/regenerate", story.a2),
            serde_json::json!({"model": unoffered}),
        ),
        (
            format!("/api/nodes/{}/fork", story.a1),
            serde_json::json!({"text": "Name a sea.", "model": unoffered}),
        ),
        (
            "/api/replays".to_string(),
            serde_json::json!({"conversations": ["main"], "model": unoffered}),
        ),
    ] {
        let message = server.refused(&path, body, StatusCode::BAD_REQUEST).await;
        assert!(
            message.contains(&format!(
                "model `{unoffered}` is not one this server offers"
            )),
            "{path}: {message}"
        );
        assert!(message.contains("`echo`"), "{path}: {message}");
    }
    assert_eq!(counts(&server.store), before, "nothing ran or was written");
    assert_eq!(
        models.opened.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "no model was opened"
    );
    assert!(
        server.json("/api/replays").await["replays"]
            .as_array()
            .unwrap()
            .is_empty(),
        "no replay was started"
    );
    // An offered one is taken.
    server
        .turn(
            &format!("/api/nodes/{}/reply", story.a2),
            serde_json::json!({"text": "Go on.", "model": "echo"}),
        )
        .await;
}

// ------------------------------------------------------------ clients kept apart

const ALICE: &str = "sk-alice-0123456789abcdef";
const BOB: &str = "sk-bob-fedcba9876543210";
/// The operator's token of a keyed proxy.
const OPERATOR: &str = "operator-token-0123456789";

impl Server {
    /// The proxy on the echo model, with the client keys of `alice` and
    /// `bob`, and the operator's token.
    async fn keyed() -> Server {
        Server::start_configured(|config| {
            config.token = Some(OPERATOR.into());
            let keys = format!("alice {ALICE}\nbob {BOB}\n");
            config.proxy = Some(ProxyConfig {
                clients: Some(Arc::new(skein_serve::ClientKeys::parse(&keys).unwrap())),
                ..ProxyConfig::new(Model::open("echo").unwrap())
            });
        })
        .await
    }

    /// POST `body` to a proxy route with `key` as `x-api-key` (when given)
    /// and `headers`: the status, the conversation it was recorded in, and
    /// the body.
    async fn as_client(
        &self,
        key: Option<&str>,
        path: &str,
        body: &Value,
        headers: Headers<'_>,
    ) -> (StatusCode, Option<String>, Value) {
        let mut request = self
            .client
            .post(format!("{}{path}", self.base))
            .header("content-type", "application/json")
            .body(body.to_string());
        if let Some(key) = key {
            request = request.header("x-api-key", key);
        }
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let response = request.send().await.unwrap();
        let status = response.status();
        let conversation = response
            .headers()
            .get("x-skein-conversation")
            .map(|value| value.to_str().unwrap().to_string());
        (status, conversation, response.json().await.unwrap())
    }

    fn record(&self, id: &str) -> skein::store::ConversationRecord {
        self.store
            .conversation(&ConversationId(id.to_string()))
            .unwrap()
    }
}

fn chat_of(messages: &[(&str, &str)]) -> Value {
    let messages: Vec<Value> = messages
        .iter()
        .map(|(role, content)| serde_json::json!({"role": role, "content": content}))
        .collect();
    serde_json::json!({"model": "gpt-4o-mini", "messages": messages})
}

fn chat_text(reply: &Value) -> String {
    reply["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .to_string()
}

/// With client keys, a request without one, or with a key no client has,
/// is a 401 on every proxy route, and the answer never shows the key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_client_keys_a_request_without_a_known_key_is_refused() {
    let server = Server::keyed().await;
    let chat = chat_of(&[("user", "hi")]);
    let messages = serde_json::json!({"model": "m", "max_tokens": 20,
        "messages": [{"role": "user", "content": "hi"}]});
    let responses = serde_json::json!({"input": "hi"});
    const WRONG: &str = "sk-mallory-0123456789abcdef";
    for (path, body) in [
        ("/v1/chat/completions", &chat),
        ("/v1/messages", &messages),
        ("/v1/responses", &responses),
    ] {
        for key in [None, Some(WRONG), Some("")] {
            let (status, _, answer) = server.as_client(key, path, body, &[]).await;
            assert_eq!(status, StatusCode::UNAUTHORIZED, "{path} {key:?}: {answer}");
            assert!(!answer.to_string().contains("mallory"), "{answer}");
        }
        // A bearer is a key too (the proxy's routes take no token).
        let bearer = format!("Bearer {WRONG}");
        let (status, _, _) = server
            .as_client(None, path, body, &[("authorization", &bearer)])
            .await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{path}");
    }
    let (_, _, answer) = server.as_client(None, "/v1/messages", &messages, &[]).await;
    assert_eq!(answer["error"]["type"], "authentication_error", "{answer}");
    let (_, _, answer) = server
        .as_client(Some(WRONG), "/v1/chat/completions", &chat, &[])
        .await;
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("not one this proxy was given"),
        "{answer}"
    );
    let models = server.get("/v1/models").await;
    assert_eq!(models.status(), StatusCode::UNAUTHORIZED);
    let models = server
        .client
        .get(format!("{}/v1/models", server.base))
        .header("authorization", format!("Bearer {BOB}"))
        .send()
        .await
        .unwrap();
    assert_eq!(models.status(), StatusCode::OK);
    assert_eq!(server.runs(), 0, "nothing refused was recorded");
    assert!(
        server.store.list_conversations(10).unwrap().is_empty(),
        "nothing refused was recorded"
    );
}

/// Client keys need the operator's token, which the web view (showing and
/// acting on every conversation) then asks for: a client's key opens the
/// proxy's routes and nothing else, and the token is not a client key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_keys_open_the_proxy_only_and_need_the_operators_token() {
    let keyed = |token: Option<&str>, keys: &str| {
        let dir = tempfile::tempdir().unwrap();
        let config = ServeConfig {
            bind: "127.0.0.1:0".parse().unwrap(),
            token: token.map(str::to_string),
            store: Store::open(dir.path().join("skein.db")).unwrap(),
            proxy: Some(ProxyConfig {
                clients: Some(Arc::new(skein_serve::ClientKeys::parse(keys).unwrap())),
                ..ProxyConfig::new(Model::open("echo").unwrap())
            }),
            body_limit: DEFAULT_BODY_LIMIT,
            limits: ConnectionLimits::default(),
            read_only: false,
            models: Arc::new(ModelNames::new("echo", Vec::new())),
            prices: Arc::new(echo_prices()),
        };
        skein_serve::router(&config).map(|_| ())
    };
    let keys = format!("alice {ALICE}\n");
    let error = keyed(None, &keys).unwrap_err();
    assert!(
        error.to_string().contains("give the server a token"),
        "{error}"
    );
    let error = keyed(Some(ALICE), &keys).unwrap_err();
    assert!(error.to_string().contains("also a client key"), "{error}");
    assert!(!error.to_string().contains(ALICE), "{error}");
    keyed(Some(OPERATOR), &keys).unwrap();

    let server = Server::keyed().await;
    let with = |bearer: &str, path: &str| {
        server
            .client
            .get(format!("{}{path}", server.base))
            .header("authorization", format!("Bearer {bearer}"))
            .send()
    };
    for path in ["/api/conversations", "/api/session", "/"] {
        let refused = with(ALICE, path).await.unwrap();
        assert_eq!(refused.status(), StatusCode::UNAUTHORIZED, "{path}");
        assert_eq!(with(OPERATOR, path).await.unwrap().status(), StatusCode::OK);
    }
    assert_eq!(
        with(ALICE, "/v1/models").await.unwrap().status(),
        StatusCode::OK
    );
    let refused = with(OPERATOR, "/v1/models").await.unwrap();
    assert_eq!(
        refused.status(),
        StatusCode::UNAUTHORIZED,
        "the token is no client key"
    );
    // An OpenAI client's key is its bearer.
    let bearer = format!("Bearer {ALICE}");
    let (status, _, reply) = server
        .as_client(
            None,
            "/v1/chat/completions",
            &chat_of(&[("user", "hi")]),
            &[("authorization", &bearer)],
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{reply}");
}

/// With client keys each key is a client: its runs are its own, its names
/// are its own, and it reaches only the conversations its requests made.
/// Bob cannot continue Alice's response id or message thread (answered
/// exactly as an unknown id is), append to her session by its name, join
/// her conversation by re-sending her history or regenerating her request,
/// or be linked to it by a tool call she made; he can do all of this with
/// his own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_client_reaches_only_the_conversations_its_own_requests_made() {
    let server = Server::keyed().await;
    let session = [("x-skein-session", "nightly")];

    // Alice's session: two turns, one conversation named as hers.
    let (status, first, reply) = server
        .as_client(
            Some(ALICE),
            "/v1/chat/completions",
            &chat_of(&[("user", "hi")]),
            &session,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{reply}");
    let answer = chat_text(&reply);
    let alices = first.unwrap();
    let asked = [("user", "hi"), ("assistant", &answer), ("user", "more")];
    let (_, second, reply) = server
        .as_client(
            Some(ALICE),
            "/v1/chat/completions",
            &chat_of(&asked),
            &session,
        )
        .await;
    assert_eq!(second.as_deref(), Some(alices.as_str()));
    let more = chat_text(&reply);
    let record = server.record(&alices);
    assert_eq!(record.name.as_deref(), Some("alice/nightly"));
    assert_eq!(record.settings.client.as_deref(), Some("alice"));
    assert_eq!(record.len, 4);
    let (head, alices_runs) = (
        record.head,
        server.store.runs_of_conversation(&record.id).unwrap().len(),
    );

    // Bob's session of the same name, or of her stored name, is his own.
    for name in ["nightly", "alice/nightly"] {
        let (status, conversation, reply) = server
            .as_client(
                Some(BOB),
                "/v1/chat/completions",
                &chat_of(&[("user", "hi")]),
                &[("x-skein-session", name)],
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{reply}");
        let conversation = conversation.unwrap();
        assert_ne!(conversation, alices, "session {name}");
        let record = server.record(&conversation);
        assert_eq!(record.name, Some(format!("bob/{name}")));
        assert_eq!(record.settings.client.as_deref(), Some("bob"));
        assert_eq!(record.origin, None, "not a branch of Alice's");
    }
    // Her whole history re-sent, her request again (its reply is stored),
    // and a history that left her head: conversations of his own, which
    // branch from none of hers.
    let regenerate: Vec<(&str, &str)> = asked.to_vec();
    let resent = [
        ("user", "hi"),
        ("assistant", answer.as_str()),
        ("user", "more"),
        ("assistant", more.as_str()),
        ("user", "bob asks"),
    ];
    let edited = [
        ("user", "hi"),
        ("assistant", answer.as_str()),
        ("user", "else"),
    ];
    for messages in [&resent[..], &regenerate[..], &edited[..]] {
        let (status, conversation, reply) = server
            .as_client(
                Some(BOB),
                "/v1/chat/completions",
                &chat_of(messages),
                // Bob saying he is Alice changes nothing.
                &[("x-skein-client", "alice")],
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{reply}");
        let conversation = conversation.unwrap();
        assert_ne!(conversation, alices, "{messages:?}");
        let record = server.record(&conversation);
        assert_eq!(record.settings.client.as_deref(), Some("bob"));
        // It may branch from a conversation of Bob's (his session at "hi").
        if let Some(source) = record.origin.and_then(|origin| origin.conversation) {
            assert_eq!(
                server.record(&source.0).settings.client.as_deref(),
                Some("bob"),
                "{messages:?} branches from none of Alice's"
            );
        }
    }
    let record = server.record(&alices);
    assert_eq!(record.head, head, "Alice's head never moved");
    assert_eq!(
        server.store.runs_of_conversation(&record.id).unwrap().len(),
        alices_runs,
        "no run of Bob's joined Alice's conversation"
    );
    // Each run is its key's client's.
    for run in server.store.recent_runs(100).unwrap() {
        let conversation = run.conversation.unwrap();
        let owner = server.record(&conversation.0).settings.client;
        assert_eq!(run.client, owner, "run {}", run.id);
    }
    // Alice goes on with her session still.
    let mut going_on = resent.to_vec();
    going_on[4] = ("user", "alice again");
    let (_, conversation, _) = server
        .as_client(
            Some(ALICE),
            "/v1/chat/completions",
            &chat_of(&going_on),
            &session,
        )
        .await;
    assert_eq!(conversation.as_deref(), Some(alices.as_str()));

    // A Responses id: Bob's continuation of Alice's is answered as one the
    // graph lacks, word for word; each continues their own.
    let (status, _, reply) = server
        .as_client(
            Some(ALICE),
            "/v1/responses",
            &serde_json::json!({"input": "r1"}),
            &[],
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{reply}");
    let hers = reply["id"].as_str().unwrap().to_string();
    let unknown = format!("resp_{}", "0".repeat(32));
    let continuing = |id: &str| serde_json::json!({"input": "r2", "previous_response_id": id});
    let (status, _, refused) = server
        .as_client(Some(BOB), "/v1/responses", &continuing(&hers), &[])
        .await;
    let (unknown_status, _, lacking) = server
        .as_client(Some(BOB), "/v1/responses", &continuing(&unknown), &[])
        .await;
    assert_eq!(status, unknown_status, "{refused}");
    assert_eq!(
        refused.to_string().replace(&hers, "ID"),
        lacking.to_string().replace(&unknown, "ID")
    );
    let (status, _, reply) = server
        .as_client(Some(ALICE), "/v1/responses", &continuing(&hers), &[])
        .await;
    assert_eq!(status, StatusCode::OK, "{reply}");

    // An Anthropic message thread: likewise, a 404 `thread_not_found`.
    let created = serde_json::json!({"model": "m", "max_tokens": 50, "thread": {"type": "create"},
        "messages": [{"role": "user", "content": "t1"}]});
    let (status, _, reply) = server
        .as_client(Some(ALICE), "/v1/messages", &created, &[])
        .await;
    assert_eq!(status, StatusCode::OK, "{reply}");
    let hers = reply["id"].as_str().unwrap().to_string();
    let unknown = format!("msg_{}", "0".repeat(32));
    let continuing = |id: &str| {
        serde_json::json!({"model": "m", "max_tokens": 50,
            "thread": {"type": "continue", "previous_message_id": id},
            "messages": [{"role": "user", "content": "t2"}]})
    };
    let (status, _, refused) = server
        .as_client(Some(BOB), "/v1/messages", &continuing(&hers), &[])
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{refused}");
    let (_, _, lacking) = server
        .as_client(Some(BOB), "/v1/messages", &continuing(&unknown), &[])
        .await;
    assert_eq!(
        refused.to_string().replace(&hers, "ID"),
        lacking.to_string().replace(&unknown, "ID")
    );
    let (status, _, reply) = server
        .as_client(Some(ALICE), "/v1/messages", &continuing(&hers), &[])
        .await;
    assert_eq!(status, StatusCode::OK, "{reply}");

    // A tool call Alice's history made links Bob's handoff to nothing.
    let call = serde_json::json!({"role": "assistant", "content": null, "tool_calls": [{
        "id": "call_Zq9Xw7Lp2Rk4Tn8Vb", "type": "function",
        "function": {"name": "get_weather", "arguments": "{}"}}]});
    let handoff = |system: &str| {
        serde_json::json!({"model": "m", "messages": [
            {"role": "system", "content": system},
            {"role": "user", "content": "weather?"}, call,
            {"role": "tool", "tool_call_id": "call_Zq9Xw7Lp2Rk4Tn8Vb", "content": "sunny"}]})
    };
    let (_, hers, _) = server
        .as_client(Some(ALICE), "/v1/chat/completions", &handoff("triage"), &[])
        .await;
    let (_, his, _) = server
        .as_client(Some(BOB), "/v1/chat/completions", &handoff("billing"), &[])
        .await;
    assert_eq!(server.record(&his.unwrap()).origin, None);
    let (_, linked, _) = server
        .as_client(
            Some(ALICE),
            "/v1/chat/completions",
            &handoff("billing too"),
            &[],
        )
        .await;
    let origin = server.record(&linked.unwrap()).origin.unwrap();
    assert_eq!(
        origin.conversation.map(|id| id.0),
        hers,
        "her own handoff is linked"
    );
}

/// Answers from the recording: each client is answered from its own
/// recordings, and a miss quotes none of another client's messages.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_is_answered_only_from_its_own_recordings() {
    let recorder = Server::keyed().await;
    let asked = chat_of(&[("user", "the secret plan")]);
    let (status, _, recorded) = recorder
        .as_client(Some(ALICE), "/v1/chat/completions", &asked, &[])
        .await;
    assert_eq!(status, StatusCode::OK, "{recorded}");
    let store = recorder.store.clone();
    let mut server = Server::start_configured(move |config| {
        config.store = store;
        config.token = Some(OPERATOR.into());
        let keys = format!("alice {ALICE}\nbob {BOB}\n");
        config.proxy = Some(ProxyConfig {
            from_recording: Some(skein_serve::FromRecording::Only),
            clients: Some(Arc::new(skein_serve::ClientKeys::parse(&keys).unwrap())),
            ..ProxyConfig::new(Model::open("echo").unwrap())
        });
    })
    .await;
    server.store = recorder.store.clone();
    let (status, _, answer) = server
        .as_client(Some(ALICE), "/v1/chat/completions", &asked, &[])
        .await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(answer, recorded);
    let (status, _, answer) = server
        .as_client(Some(BOB), "/v1/chat/completions", &asked, &[])
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{answer}");
    let (_, _, other) = server
        .as_client(
            Some(BOB),
            "/v1/chat/completions",
            &chat_of(&[
                ("user", "the secret plan"),
                ("assistant", "x"),
                ("user", "y"),
            ]),
            &[],
        )
        .await;
    let (_, _, never) = server
        .as_client(
            Some(BOB),
            "/v1/chat/completions",
            &chat_of(&[("user", "never sent"), ("assistant", "x"), ("user", "y")]),
            &[],
        )
        .await;
    assert_eq!(other, never, "a miss says nothing of what Alice sent");
    assert!(!other.to_string().contains("secret"), "{other}");
}

// ------------------------------------------------- the conversation's own model

/// Models whose default cannot be opened (a model file never downloaded),
/// offering `echo`; `defaults` counts the attempts to open the default.
#[derive(Default)]
struct DefaultMissing {
    defaults: std::sync::atomic::AtomicUsize,
}

impl skein::Home for DefaultMissing {
    fn open(&self, name: Option<&str>) -> Result<Model, skein::SurfaceError> {
        match name {
            Some("echo") => Model::open("echo").map_err(skein::SurfaceError::new),
            Some(other) => Err(skein::SurfaceError::new(format!("no model {other} here"))),
            None => {
                self.defaults
                    .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                Err(skein::SurfaceError::new(
                    "the default model is not downloaded",
                ))
            }
        }
    }

    fn default_name(&self) -> String {
        "smollm2".into()
    }
}

impl skein_serve::Models for DefaultMissing {
    fn choices(&self) -> Vec<skein_serve::ModelChoice> {
        vec![skein_serve::ModelChoice {
            name: "echo".into(),
            label: "echo".into(),
        }]
    }
}

/// Going on with a stored conversation from the page (a reply at its head
/// or elsewhere, an edit, of its first message too, a regenerate, a fork
/// with a first turn) runs on the conversation's own model and never opens
/// the server's default, which here cannot be opened (issue 46: each
/// action opened it first, to look the stored model up from, and failed
/// where it was not downloaded).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn going_on_with_a_stored_conversation_never_opens_the_default_model() {
    let models = Arc::new(DefaultMissing::default());
    let server = {
        let models = models.clone();
        Server::start_configured(move |config| config.models = models).await
    };
    let story = story(&server.store).await;
    let parent = |node: &str| {
        let server = &server;
        let node = node.to_string();
        async move {
            server.json(&format!("/api/nodes/{node}")).await["parent"]
                .as_str()
                .unwrap()
                .to_string()
        }
    };
    let q2 = parent(&story.a2).await;
    let q1 = parent(&story.a1).await;
    for (path, body) in [
        (
            format!("/api/nodes/{}/reply", story.a2),
            serde_json::json!({"text": "Go on."}),
        ),
        (
            format!("/api/nodes/{}/reply", story.a1),
            serde_json::json!({"text": "Name a sea."}),
        ),
        (
            format!("/api/nodes/{q2}/edit"),
            serde_json::json!({"text": "Name a sea."}),
        ),
        (
            format!("/api/nodes/{q1}/edit"),
            serde_json::json!({"text": "Name a mountain."}),
        ),
        (
            format!("/api/nodes/{}/regenerate", story.a2),
            serde_json::json!({}),
        ),
        (
            format!("/api/nodes/{}/fork", story.a1),
            serde_json::json!({"text": "Name a bay."}),
        ),
    ] {
        let events = server.turn(&path, body).await;
        let (_, done) = start_and_done(&events);
        let run = server
            .json(&format!("/api/runs/{}", done["run"].as_str().unwrap()))
            .await;
        assert_eq!(run["model"], "echo", "{path}");
    }
    assert_eq!(
        models.defaults.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "the default model was never opened"
    );
}

/// Models on `echo` (with skein's built-in tools) that write down which
/// tools they were asked to start.
#[derive(Default)]
struct ToolsStarted {
    started: std::sync::Mutex<Vec<Vec<String>>>,
}

impl ToolsStarted {
    fn started(&self) -> Vec<Vec<String>> {
        std::mem::take(&mut *self.started.lock().unwrap())
    }
}

impl skein::Home for ToolsStarted {
    fn open(&self, name: Option<&str>) -> Result<Model, skein::SurfaceError> {
        Model::open_with_tools(name.unwrap_or("echo"), skein::builtin::all())
            .map_err(skein::SurfaceError::new)
    }

    fn default_name(&self) -> String {
        "echo".into()
    }

    fn start_tools(
        &self,
        names: Vec<String>,
    ) -> skein::core::BoxFuture<'static, Result<(), skein::SurfaceError>> {
        self.started.lock().unwrap().push(names);
        Box::pin(async { Ok(()) })
    }
}

impl skein_serve::Models for ToolsStarted {
    fn choices(&self) -> Vec<skein_serve::ModelChoice> {
        Vec::new()
    }
}

/// A recorded turn's report starts every tool the conversation's runs
/// offered, one its settings do not name included (a rerun's tool loop may
/// call it), as `skein explain` does (the turn layer's one opening of a
/// recorded turn); a reply there starts the tools of its settings.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turns_report_starts_every_tool_its_runs_offered_and_a_reply_its_settings_tools() {
    let models = Arc::new(ToolsStarted::default());
    let server = {
        let models = models.clone();
        Server::start_configured(move |config| config.models = models).await
    };
    let model = Model::open_with_tools("echo", skein::builtin::all()).unwrap();
    let conversation = model
        .conversation()
        .store(&server.store)
        .tools([skein::builtin::skein_version()])
        .build();
    let reply = conversation
        .prompt("What time is it?")
        .tools([skein::builtin::skein_time()])
        .send()
        .await
        .unwrap();
    let node = reply.head().to_hex();
    server.json(&format!("/api/nodes/{node}/report")).await;
    assert_eq!(
        models.started(),
        [["skein_time", "skein_version"]],
        "the runs' tool and the settings', sorted"
    );
    let events = server
        .turn(
            &format!("/api/nodes/{node}/reply"),
            serde_json::json!({"text": "And now?"}),
        )
        .await;
    start_and_done(&events);
    assert_eq!(models.started(), [["skein_version"]]);
}
