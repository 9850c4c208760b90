//! Chains: the tool loop over engine runs, per-call tool sets, hooks that
//! change, skip or stop calls, failures that become error results, the
//! chain limit, and schema-drift warnings.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use skein_core::{Message, Part, Role, ToolResult, ToolSpec};
use skein_engine::{
    BackendDef, BackendKind, CallDecision, Catalog, Chain, ChainStatus, DriftTracker, Engine,
    Profile, Request, Tool, ToolError, tool_fn,
};
use skein_providers::Scripted;
use std::sync::{Arc, Mutex};

const SCRIPT: &str = r#"
[[rules]]
name = "after-results"
last_role = "tool"
reply = "done: {last_tool_result}"

[[rules]]
name = "bad-args"
last_user_contains = "bad args"
tool_calls = [{ name = "add", arguments = '{"a": "one", "b": 2}' }]

[[rules]]
name = "not-json"
last_user_contains = "garbled"
tool_calls = [{ name = "add", arguments = '{"a": 1, "b":' }]

[[rules]]
name = "unknown"
last_user_contains = "imaginary"
tool_calls = [{ name = "teleport", arguments = '{}' }]

[[rules]]
name = "boom"
last_user_contains = "explode"
tool_calls = [{ name = "explode", arguments = '{}' }]

[[rules]]
name = "two-calls"
last_user_contains = "twice"
tool_calls = [{ name = "add", arguments = '{"a": 1, "b": 2}' }, { name = "add", arguments = '{"a": 3, "b": 4}' }]

[[rules]]
name = "use-add"
tool_offered = "add"
last_role = "user"
tool_calls = [{ name = "add", arguments = '{"a": 2, "b": 3}' }]

[[rules]]
name = "plain"
reply = "no tools needed for {last_user}"
"#;

/// Keeps calling `add` forever, for the limit test.
const LOOPING: &str = r#"
[[rules]]
tool_offered = "add"
tool_calls = [{ name = "add", arguments = '{"a": 1, "b": 1}' }]
"#;

#[derive(Deserialize, JsonSchema)]
struct Add {
    a: i64,
    b: i64,
}

fn add() -> Arc<dyn Tool> {
    tool_fn("add", "Add two integers", |args: Add| async move {
        Ok::<_, std::convert::Infallible>((args.a + args.b).to_string())
    })
}

fn explode() -> Arc<dyn Tool> {
    #[derive(Deserialize, JsonSchema)]
    struct Nothing {}
    tool_fn("explode", "Panics", |_: Nothing| async move {
        if true {
            panic!("kaboom");
        }
        Ok::<_, ToolError>(String::new())
    })
}

fn engine_with(script: &str, capacity: usize) -> Engine {
    let catalog = Catalog::new()
        .backend(BackendDef::new("script", BackendKind::Echo).capacity(capacity))
        .profile(Profile::new("main", "script", "m"));
    Engine::builder(catalog)
        .provider("script", Arc::new(Scripted::from_toml_str(script).unwrap()))
        .build()
        .unwrap()
}

fn ask(text: &str) -> Request {
    Request::messages([Message::user(text)]).profile("main")
}

fn results(thread: &skein_core::Thread) -> Vec<ToolResult> {
    thread
        .messages()
        .iter()
        .flat_map(|m| m.tool_results_iter().cloned().collect::<Vec<_>>())
        .collect()
}

#[tokio::test]
async fn a_chain_resolves_tools_and_returns_every_response() {
    let engine = engine_with(SCRIPT, 1);
    let output = Chain::new(vec![add()])
        .run(&engine, ask("what is 2 + 3?"))
        .await
        .unwrap();
    assert_eq!(output.status, ChainStatus::Completed);
    assert_eq!(output.responses.len(), 2);
    assert_eq!(output.last().text(), "done: 5");
    let messages = output.thread.messages();
    assert_eq!(
        messages.iter().map(|m| m.role).collect::<Vec<_>>(),
        [Role::User, Role::Assistant, Role::Tool, Role::Assistant]
    );
    // Every model call is a run of the same chain, with the tools it was offered.
    for response in &output.responses {
        assert_eq!(
            response
                .tools
                .iter()
                .map(|t| t.name.as_str())
                .collect::<Vec<_>>(),
            ["add"]
        );
        assert!(
            response
                .relations
                .iter()
                .any(|r| *r == skein_core::Relation::Chain(output.id.clone()))
        );
    }
}

#[tokio::test]
async fn a_chain_without_tools_is_a_single_call() {
    let engine = engine_with(SCRIPT, 1);
    let output = Chain::new(vec![]).run(&engine, ask("hello")).await.unwrap();
    assert_eq!(output.status, ChainStatus::Completed);
    assert_eq!(output.responses.len(), 1);
    assert_eq!(output.last().text(), "no tools needed for hello");
    assert!(output.last().tools.is_empty());
}

#[tokio::test]
async fn failures_become_error_results_the_model_sees_and_the_chain_goes_on() {
    let engine = engine_with(SCRIPT, 1);
    for (prompt, expected) in [
        ("bad args", "do not match the tool's schema"),
        ("garbled", "not valid JSON"),
        (
            "imaginary",
            "unknown tool `teleport`; available tools: add, explode",
        ),
        ("explode", "the tool panicked: kaboom"),
    ] {
        let output = Chain::new(vec![add(), explode()])
            .run(&engine, ask(prompt))
            .await
            .unwrap();
        assert_eq!(output.status, ChainStatus::Completed, "{prompt}");
        let result = &results(&output.thread)[0];
        assert!(result.is_error, "{prompt}");
        assert!(
            result.content.contains(expected),
            "{prompt}: {}",
            result.content
        );
        assert!(
            output.last().text().starts_with("done: "),
            "{prompt}: the model saw the error"
        );
    }
}

#[tokio::test]
async fn before_call_can_change_skip_or_stop_calls_and_after_call_sees_results() {
    let engine = engine_with(SCRIPT, 1);
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let log = seen.clone();
    let mut chain = Chain::new(vec![add()])
        .before_call(Box::new(|call| {
            Box::pin(async move {
                let mut changed = call.clone();
                changed.arguments = r#"{"a": 10, "b": 20}"#.into();
                CallDecision::Run(changed)
            })
        }))
        .after_call(Box::new(move |call, result| {
            let log = log.clone();
            let line = format!("{}={}", call.name, result.content);
            Box::pin(async move { log.lock().unwrap().push(line) })
        }));
    let output = chain.run(&engine, ask("what is 2 + 3?")).await.unwrap();
    assert_eq!(output.last().text(), "done: 30");
    assert_eq!(*seen.lock().unwrap(), ["add=30"]);
    // The stored call keeps the model's own arguments; only execution changed.
    let call = output.responses[0]
        .message
        .tool_calls()
        .next()
        .unwrap()
        .clone();
    assert_eq!(call.arguments, r#"{"a": 2, "b": 3}"#);

    let mut skipping = Chain::new(vec![add()]).before_call(Box::new(|_| {
        Box::pin(async { CallDecision::Skip("not now".into()) })
    }));
    let output = skipping.run(&engine, ask("what is 2 + 3?")).await.unwrap();
    let result = &results(&output.thread)[0];
    assert!(result.is_error && result.content.contains("cancelled this call: not now"));
    assert_eq!(output.status, ChainStatus::Completed);

    let mut stopping =
        Chain::new(vec![add()]).before_call(Box::new(|_| Box::pin(async { CallDecision::Stop })));
    let output = stopping.run(&engine, ask("twice")).await.unwrap();
    assert_eq!(output.status, ChainStatus::Stopped);
    assert_eq!(output.responses.len(), 1, "the completed turn is kept");
    let stopped = results(&output.thread);
    assert_eq!(
        stopped.len(),
        2,
        "every call of the last reply has a result: nothing half-done"
    );
    assert!(
        stopped
            .iter()
            .all(|r| r.is_error && r.content.contains("stopped"))
    );
}

#[tokio::test]
async fn the_chain_limit_ends_a_looping_model_with_a_clear_status() {
    let engine = engine_with(LOOPING, 1);
    let output = Chain::new(vec![add()])
        .limit(3)
        .run(&engine, ask("loop"))
        .await
        .unwrap();
    assert_eq!(output.status, ChainStatus::LimitReached);
    assert_eq!(output.responses.len(), 3);
}

#[tokio::test]
async fn tool_sets_may_change_call_by_call_and_history_keeps_earlier_pairs() {
    let engine = engine_with(SCRIPT, 1);
    let b = || {
        tool_fn("b", "tool b", |_: serde_json::Value| async move {
            Ok::<_, ToolError>("b".to_string())
        })
    };
    let c = || {
        tool_fn("c", "tool c", |_: serde_json::Value| async move {
            Ok::<_, ToolError>("c".to_string())
        })
    };
    let first = Chain::new(vec![add(), b()])
        .run(&engine, ask("what is 2 + 3?"))
        .await
        .unwrap();
    assert_eq!(
        first
            .last()
            .tools
            .iter()
            .map(|t| t.name.as_str())
            .collect::<Vec<_>>(),
        ["add", "b"]
    );
    let exchange = first.last().exchange.clone().unwrap();
    let second = Chain::new(vec![b(), c()])
        .run(&engine, ask("and now?").continuing(&exchange))
        .await
        .unwrap();
    assert_eq!(
        second
            .last()
            .tools
            .iter()
            .map(|t| t.name.as_str())
            .collect::<Vec<_>>(),
        ["b", "c"]
    );
    // `add` is no longer offered, but its call and result stay in the history.
    let history = second.thread.messages();
    let calls: Vec<&str> = history
        .iter()
        .flat_map(|m| m.tool_calls().map(|c| c.name.as_str()).collect::<Vec<_>>())
        .collect();
    assert_eq!(calls, ["add"]);
    assert_eq!(results(&second.thread)[0].content, "5");
    assert!(
        history
            .iter()
            .any(|m| m.parts.iter().any(|p| matches!(p, Part::ToolCall(_))))
    );
}

#[test]
fn schema_drift_warns_on_a_changed_schema_but_not_on_a_changed_description() {
    let mut tracker = DriftTracker::default();
    let v1 = ToolSpec::new(
        "search",
        "Search",
        json!({"properties": {"q": {"type": "string"}}}),
    );
    let v1_redescribed = ToolSpec::new(
        "search",
        "Search the web",
        json!({"properties": {"q": {"type": "string"}}}),
    );
    let v2 = ToolSpec::new(
        "search",
        "Search",
        json!({"properties": {"query": {"type": "string"}}}),
    );
    assert!(tracker.check(std::slice::from_ref(&v1)).is_empty());
    assert!(tracker.check(&[v1_redescribed]).is_empty());
    let warnings = tracker.check(std::slice::from_ref(&v2));
    assert_eq!(warnings.len(), 1);
    assert_eq!(warnings[0].tool, "search");
    assert_eq!(warnings[0].previous_schema, v1.schema_hash());
    assert_eq!(warnings[0].current_schema, v2.schema_hash());
}

#[tokio::test]
async fn drift_is_reported_on_the_chain_that_offers_the_changed_tool() {
    let engine = engine_with(SCRIPT, 1);
    #[derive(Deserialize, JsonSchema)]
    struct AddRenamed {
        left: i64,
        right: i64,
    }
    let renamed = tool_fn("add", "Add two integers", |args: AddRenamed| async move {
        Ok::<_, ToolError>((args.left + args.right).to_string())
    });
    let mut first = Chain::new(vec![add()]);
    first.run(&engine, ask("hello")).await.unwrap();
    let mut second = Chain::new(vec![renamed]).drift(first.tracker().clone());
    let output = second.run(&engine, ask("hello")).await.unwrap();
    assert_eq!(output.warnings.len(), 1);
    assert_eq!(output.warnings[0].tool, "add");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_can_call_the_model_on_the_same_backend_at_capacity_one() {
    let engine = engine_with(SCRIPT, 1);
    let inner = engine.clone();
    #[derive(Deserialize, JsonSchema)]
    struct Add2 {
        a: i64,
        b: i64,
    }
    let consulting = tool_fn("add", "Add, after asking the model", move |args: Add2| {
        let engine = inner.clone();
        async move {
            let opinion = engine
                .run(Request::messages([Message::user("opinion?")]).profile("main"))
                .await;
            opinion
                .map(|_| (args.a + args.b).to_string())
                .map_err(|error| ToolError(error.to_string()))
        }
    });
    let output = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        Chain::new(vec![consulting]).run(&engine, ask("what is 2 + 3?")),
    )
    .await
    .expect("no deadlock at capacity one")
    .unwrap();
    assert_eq!(output.last().text(), "done: 5");
}
