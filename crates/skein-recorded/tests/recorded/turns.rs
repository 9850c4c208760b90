//! Recording turns: frozen evidence, numbering, failed and paused turns.

use crate::common::{Recording, advisor, advisor_chat};
use schemars::JsonSchema;
use serde::Deserialize;
use skein_core::{Annotation, Relation, Role};
use skein_engine::{CallDecision, tool_fn};
use skein_recorded::{RecordedChat, RecordedError, Source, SourceKind};
use std::sync::Arc;

#[tokio::test]
async fn each_turn_freezes_the_exact_request_the_provider_received() {
    let model = Recording::new(advisor::model());
    let chat = advisor_chat(model.clone()).await;
    let received = model.take();
    assert_eq!(received.len(), 3);
    for (k, request) in received.iter().enumerate() {
        let turn = chat.turn(k).unwrap();
        assert_eq!(turn.index(), k);
        assert_eq!(turn.request(), &request.thread, "turn {k}'s request");
        assert_eq!(turn.annotations(), &request.annotations);
        assert_eq!(turn.tools(), request.tools.as_slice());
        assert_eq!(turn.runs().len(), 1);
        assert!(!turn.events().is_empty(), "events are kept");
        assert!(turn.usage().input_tokens.is_some());
        assert_eq!(turn.thread().parent(), *turn.request());
    }
    // The sources are tagged parts of the system message, in order.
    let turn = chat.turn(1).unwrap();
    let system = turn.request().nodes()[0];
    assert_eq!(system.message().role, System);
    let tags: Vec<_> = (0..4)
        .map(|part| turn.annotations().source_of(system.id(), part))
        .collect();
    assert_eq!(
        tags,
        [
            None,
            Some("fundamentals"),
            Some("social-sentiment"),
            Some("analyst-note")
        ]
    );
    let kinds: Vec<_> = turn
        .sources()
        .iter()
        .map(|s| (s.id.as_str(), s.kind))
        .collect();
    assert_eq!(
        kinds,
        [
            ("fundamentals", SourceKind::Fact),
            ("social-sentiment", SourceKind::Fact),
            ("analyst-note", SourceKind::Document)
        ]
    );
    // History is native messages: turn 2's request holds the earlier turns.
    let roles: Vec<Role> = chat
        .turn(2)
        .unwrap()
        .request()
        .messages()
        .iter()
        .map(|m| m.role)
        .collect();
    use Role::*;
    assert_eq!(roles, [System, User, Assistant, User, Assistant, User]);
}

#[tokio::test]
async fn evidence_of_a_turn_survives_later_turns() {
    let model = Recording::new(advisor::model());
    let mut chat = advisor::builder(model.clone()).build().await.unwrap();
    chat.send("How is the position looking?").await.unwrap();
    let first = chat.turn(0).unwrap().clone();
    let (request, reply) = (first.request().head_id(), first.text());
    chat.send("Should we BUY or HOLD this position?")
        .await
        .unwrap();
    chat.send("How much should we allocate?").await.unwrap();
    let again = chat.turn(0).unwrap();
    assert_eq!(again.request().head_id(), request);
    assert_eq!(again.text(), reply);
    assert_eq!(again.runs(), first.runs());
    assert_ne!(chat.turn(2).unwrap().runs(), first.runs());
    assert_eq!(chat.turn_of_node(chat.turn(1).unwrap().node()).unwrap(), 1);
}

#[tokio::test]
async fn turns_are_numbered_from_zero_and_out_of_range_is_an_error() {
    let mut chat = advisor::builder(advisor::model()).build().await.unwrap();
    let error = chat.turn(0).unwrap_err();
    assert!(error.to_string().contains("no turns yet"), "{error}");
    chat.send("How is the position looking?").await.unwrap();
    assert!(chat.turn(0).is_ok());
    let error = chat.turn(1).unwrap_err();
    assert!(matches!(
        error,
        RecordedError::TurnOutOfRange { turn: 1, turns: 1 }
    ));
    assert!(error.to_string().contains("numbered 0 to 0"), "{error}");
    let node = chat.turn(0).unwrap().request().head_id().unwrap();
    assert!(matches!(
        chat.turn_of_node(node),
        Err(RecordedError::NotATurn(_))
    ));
}

const FAILING: &str = r#"
[[rules]]
last_user_contains = "fail"
error = { kind = "server", message = "overloaded" }

[[rules]]
reply = "fine"
"#;

#[tokio::test]
async fn a_failed_turn_records_no_turn_but_keeps_its_message_and_its_failed_run() {
    let dir = tempfile::tempdir().unwrap();
    let store = skein_store::Store::open(dir.path().join("db.sqlite")).unwrap();
    let mut chat = RecordedChat::builder(
        crate::common::engine(Arc::new(
            skein_providers::Scripted::from_toml_str(FAILING).unwrap(),
        )),
        "advisor",
    )
    .store(store.clone())
    .build()
    .await
    .unwrap();
    chat.send("hello").await.unwrap();
    let head = chat.history().head_id();
    let error = chat.send("please fail").await.unwrap_err();
    assert!(matches!(error, RecordedError::Engine(_)), "{error}");
    assert!(error.to_string().contains("overloaded"));
    assert_eq!(chat.turns().len(), 1);
    assert_eq!(chat.history().head_id(), head);
    let conversation = store.conversation(chat.conversation().unwrap()).unwrap();
    assert_eq!(conversation.head, head);
    // The turn left no reply and no succeeded run; the call it failed in
    // keeps its record and its input, as every failed call does.
    // (Runs started in one millisecond have no order: found by status.)
    let runs = store.runs_of_conversation(&conversation.id).unwrap();
    assert_eq!(runs.len(), 2);
    let count = |status| runs.iter().filter(|run| run.status == status).count();
    assert_eq!(count(skein_store::RunStatus::Succeeded), 1);
    let failed = runs
        .iter()
        .find(|run| run.status == skein_store::RunStatus::Failed)
        .expect("the failed call keeps its run");
    assert_eq!(failed.output_head, None);
    assert!(failed.error.as_deref().unwrap().contains("overloaded"));
    let input = store.node(failed.input_head.unwrap()).unwrap();
    assert_eq!(input.message.joined_text(), "please fail");
    assert_eq!(
        input.parent, head,
        "the message follows the head it was sent at"
    );
    assert_consistent(&store);
    // The chat goes on, and the next turn is number 1.
    assert_eq!(chat.send("again").await.unwrap().index(), 1);
}

/// `verify` finds nothing wrong, and an export imports into a new store.
fn assert_consistent(store: &skein_store::Store) {
    let report = store.verify().unwrap();
    assert!(report.is_ok(), "{:?}", report.problems);
    let mut export = Vec::new();
    store.export(&mut export).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let fresh = skein_store::Store::open(dir.path().join("fresh.sqlite")).unwrap();
    fresh.import(&mut export.as_slice()).unwrap();
    assert!(fresh.verify().unwrap().is_ok());
}

const TOOLS: &str = r#"
[[rules]]
name = "call"
tool_offered = "lookup"
last_role = "user"
reply = "Checking."
tool_calls = [{ name = "lookup", arguments = '{"q": "price"}' }]

[[rules]]
name = "answer"
last_role = "tool"
reply = "The tool says {last_tool_result}"

[[rules]]
reply = "No tool, no answer."
"#;

#[derive(Deserialize, JsonSchema)]
struct Query {
    q: String,
}

fn lookup() -> Arc<dyn skein_engine::Tool> {
    tool_fn("lookup", "Looks a price up", |query: Query| async move {
        Ok::<_, std::convert::Infallible>(format!("{} is 42", query.q))
    })
}

/// A tool loop whose second call fails: no turn, and the failed call keeps
/// its request, the first call's reply and the tool's results included.
#[tokio::test]
async fn a_tool_loop_failing_in_its_second_call_keeps_that_calls_request() {
    const FAILS_AFTER_THE_TOOL: &str = r#"
[[rules]]
tool_offered = "lookup"
last_role = "user"
tool_calls = [{ name = "lookup", arguments = '{"q": "price"}' }]

[[rules]]
last_role = "tool"
error = { kind = "server", message = "overloaded" }
"#;
    let dir = tempfile::tempdir().unwrap();
    let store = skein_store::Store::open(dir.path().join("db.sqlite")).unwrap();
    let model = Recording::scripted(FAILS_AFTER_THE_TOOL);
    let mut chat = RecordedChat::builder(crate::common::engine(model.clone()), "advisor")
        .tool(lookup())
        .store(store.clone())
        .build()
        .await
        .unwrap();
    let error = chat.send("what is the price?").await.unwrap_err();
    assert!(error.to_string().contains("overloaded"), "{error}");
    assert_eq!(model.count(), 2);
    assert!(chat.turns().is_empty());
    assert!(store.list_conversations(10).unwrap().is_empty());
    // No turn, but both calls keep their runs: the completed first one
    // (marked unrecorded) and the failed second one.
    let runs = store.recent_runs(10).unwrap();
    assert_eq!(runs.len(), 2, "{runs:?}");
    let failed = runs
        .iter()
        .find(|run| run.status == skein_store::RunStatus::Failed)
        .expect("the failed call keeps its run");
    let completed = runs
        .iter()
        .find(|run| run.status == skein_store::RunStatus::Succeeded)
        .expect("the completed call keeps its run");
    assert_eq!(unrecorded_why(completed), Some("failed"));
    assert_eq!(completed.turn, None, "kept runs are in no turn");
    let input = store.load_thread(failed.input_head.unwrap()).unwrap();
    let roles: Vec<Role> = input.messages().iter().map(|m| m.role).collect();
    assert_eq!(roles, [Role::User, Role::Assistant, Role::Tool]);
    assert_eq!(input.messages()[0].joined_text(), "what is the price?");
    assert_eq!(
        completed.output_head,
        Some(input.nodes()[1].id()),
        "the completed call's reply is the failed call's assistant message"
    );
    assert_consistent(&store);
}

/// Why a kept run's turn recorded nothing, when it is marked so.
fn unrecorded_why(run: &skein_store::RunRecord) -> Option<&str> {
    run.relations.iter().find_map(|relation| match relation {
        Relation::Unrecorded(why) => Some(why.as_str()),
        _ => None,
    })
}

#[tokio::test]
async fn a_paused_turn_records_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = skein_store::Store::open(dir.path().join("db.sqlite")).unwrap();
    let model = Recording::scripted(TOOLS);
    let mut chat = RecordedChat::builder(crate::common::engine(model.clone()), "advisor")
        .tool(lookup())
        .before_call(Arc::new(|_call| Box::pin(async { CallDecision::Stop })))
        .store(store.clone())
        .build()
        .await
        .unwrap();
    let error = chat.send("what is the price?").await.unwrap_err();
    assert!(
        matches!(error, RecordedError::Paused { turn: 0 }),
        "{error}"
    );
    assert!(error.to_string().contains("no turn was recorded"));
    assert!(chat.turns().is_empty());
    assert!(chat.history().is_empty());
    assert_eq!(
        model.count(),
        1,
        "the model was called once, then the loop paused"
    );
    // Its first turn never completed, so the conversation was never
    // created; the call it made keeps its run, in no conversation and no
    // turn, for usage.
    assert!(matches!(
        store.conversation(chat.conversation().unwrap()),
        Err(skein_store::StoreError::ConversationNotFound(_))
    ));
    let runs = store.recent_runs(10).unwrap();
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].status, skein_store::RunStatus::Succeeded);
    assert_eq!(runs[0].conversation, None);
    assert_eq!(unrecorded_why(&runs[0]), Some("paused"));
    assert_consistent(&store);
}

/// Turns of a stored chat that fail, pause or reach the chain limit record
/// no turn, yet every model call they made is in the conversation's usage;
/// loading and resuming the chat see only its recorded turns.
#[tokio::test]
async fn unrecorded_turns_keep_their_runs_in_the_conversations_usage() {
    const SCRIPT: &str = r#"
[[rules]]
last_user_contains = "pause"
tool_calls = [{ name = "lookup", arguments = '{"q": "pause"}' }]

[[rules]]
last_user_contains = "loop"
reply = "again"
tool_calls = [{ name = "lookup", arguments = '{"q": "x"}' }]

[[rules]]
last_user_contains = "fail"
last_role = "tool"
error = { kind = "server", message = "overloaded" }

[[rules]]
last_user_contains = "fail"
tool_calls = [{ name = "lookup", arguments = '{"q": "price"}' }]

[[rules]]
reply = "fine"
"#;
    let dir = tempfile::tempdir().unwrap();
    let store = skein_store::Store::open(dir.path().join("db.sqlite")).unwrap();
    let model = Recording::scripted(SCRIPT);
    let builder = || {
        RecordedChat::builder(crate::common::engine(model.clone()), "advisor")
            .tool(lookup())
            .chain_limit(2)
            .before_call(Arc::new(|call| {
                let decision = if call.arguments.contains("pause") {
                    CallDecision::Stop
                } else {
                    CallDecision::Run(call.clone())
                };
                Box::pin(async move { decision })
            }))
            .store(store.clone())
    };
    let mut chat = builder().build().await.unwrap();
    chat.send("hello").await.unwrap();
    let head = chat.history().head_id();
    let id = chat.conversation().unwrap().clone();
    let paused = chat.send("pause please").await.unwrap_err();
    assert!(
        matches!(paused, RecordedError::Paused { turn: 1 }),
        "{paused}"
    );
    let limited = chat.send("loop forever").await.unwrap_err();
    assert!(
        matches!(limited, RecordedError::ChainLimit { turn: 1, limit: 2 }),
        "{limited}"
    );
    let failed = chat.send("fail after the tool").await.unwrap_err();
    assert!(failed.to_string().contains("overloaded"), "{failed}");
    // 1 recorded call, 1 paused, 2 chain-limited, 1 completed + 1 failed.
    assert_eq!(model.count(), 6);
    assert_eq!(store.conversation(&id).unwrap().head, head);
    let runs = store.runs_of_conversation(&id).unwrap();
    assert_eq!(runs.len(), 6, "every model call keeps its run");
    let mut whys: Vec<&str> = runs.iter().filter_map(unrecorded_why).collect();
    whys.sort();
    assert_eq!(
        whys,
        ["chain_limit", "chain_limit", "failed", "failed", "paused"]
    );
    let usage = store
        .usage(&skein_store::UsageScope::Conversation(id.clone()))
        .unwrap();
    assert_eq!(usage.runs.len(), 6, "usage counts every model call");
    assert_eq!(usage.failed.len(), 1);
    assert_consistent(&store);
    // Recorded turns are all or nothing: the chat holds one turn, loaded
    // or resumed, and the next turn is number 1.
    assert_eq!(chat.turns().len(), 1);
    let loaded = builder().load(&id).await.unwrap();
    assert_eq!(loaded.turns().len(), 1);
    assert_eq!(loaded.turn(0).unwrap().text(), "fine");
    let mut resumed = builder().resume(&id).await.unwrap();
    assert_eq!(resumed.send("again").await.unwrap().index(), 1);
    assert_eq!(builder().load(&id).await.unwrap().turns().len(), 2);
}

#[tokio::test]
async fn a_failed_first_turn_leaves_no_conversation_and_one_failed_run() {
    let dir = tempfile::tempdir().unwrap();
    let store = skein_store::Store::open(dir.path().join("db.sqlite")).unwrap();
    let mut chat = RecordedChat::builder(
        crate::common::engine(Arc::new(
            skein_providers::Scripted::from_toml_str(FAILING).unwrap(),
        )),
        "advisor",
    )
    .store(store.clone())
    .build()
    .await
    .unwrap();
    assert!(chat.send("please fail").await.is_err());
    assert!(store.list_conversations(10).unwrap().is_empty());
    let runs = store.recent_runs(10).unwrap();
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].status, skein_store::RunStatus::Failed);
    assert_eq!(runs[0].conversation, None);
    // Only the user's message is stored, as the failed run's input.
    assert_eq!(
        store.debug_query_i64("SELECT count(*) FROM nodes").unwrap(),
        1
    );
    let input = store.node(runs[0].input_head.unwrap()).unwrap();
    assert_eq!(input.message.joined_text(), "please fail");
    assert_consistent(&store);
    // The next turn succeeds and creates the conversation.
    chat.send("hello").await.unwrap();
    assert_eq!(store.list_conversations(10).unwrap().len(), 1);
}

#[tokio::test]
async fn a_tool_loop_turn_records_its_intermediate_steps_and_tags_tool_parts() {
    let model = Recording::scripted(TOOLS);
    let mut chat = RecordedChat::builder(crate::common::engine(model.clone()), "advisor")
        .system("Use tools.")
        .source(Source::fact(
            "house-rule",
            "house-rule: quote tools verbatim",
        ))
        .tool(lookup())
        .build()
        .await
        .unwrap();
    let turn = chat.send("what is the price?").await.unwrap().clone();
    assert_eq!(turn.text(), "The tool says price is 42");
    assert_eq!(turn.runs().len(), 2);
    assert_eq!(
        turn.intermediate_texts(),
        [
            "Checking.\nlookup({\"q\": \"price\"})".to_string(),
            "price is 42".to_string()
        ]
    );
    assert_eq!(turn.tools()[0].name, "lookup");
    // The next turn's request carries the tool call and result tagged
    // with the tool's name.
    chat.send("and now?").await.unwrap();
    let next = chat.turn(1).unwrap();
    let tagged: Vec<(Role, &str)> = next
        .request()
        .nodes()
        .iter()
        .flat_map(|node| {
            next.annotations()
                .iter()
                .filter(|(key, _)| key.node == node.id())
                .flat_map(|(_, tags)| tags.iter())
                .filter_map(|tag| match tag {
                    Annotation::Source(id) => Some((node.message().role, id.as_str())),
                    _ => None,
                })
                .collect::<Vec<_>>()
        })
        .collect();
    assert_eq!(
        tagged,
        [
            (Role::System, "house-rule"),
            (Role::Assistant, "lookup"),
            (Role::Tool, "lookup")
        ]
    );
}

#[tokio::test]
async fn a_turn_that_reaches_the_chain_limit_records_nothing() {
    let looping = r#"
[[rules]]
tool_offered = "lookup"
reply = "again"
tool_calls = [{ name = "lookup", arguments = '{"q": "x"}' }]
"#;
    let mut chat = RecordedChat::builder(
        crate::common::engine(Recording::scripted(looping)),
        "advisor",
    )
    .tool(lookup())
    .chain_limit(2)
    .build()
    .await
    .unwrap();
    let error = chat.send("loop").await.unwrap_err();
    assert!(
        matches!(error, RecordedError::ChainLimit { turn: 0, limit: 2 }),
        "{error}"
    );
    assert!(chat.turns().is_empty());
}

#[tokio::test]
async fn chats_and_their_futures_are_send_so_they_run_on_spawned_tasks() {
    fn send_future<F: Future + Send>(future: F) -> F {
        future
    }
    let mut chat = advisor::builder(advisor::model()).build().await.unwrap();
    let handle = tokio::spawn(async move {
        send_future(chat.send("How is the position looking?"))
            .await
            .unwrap();
        send_future(chat.reason(0, skein_recorded::ReasonOptions::new()))
            .await
            .unwrap();
        let rerun =
            send_future(chat.rerun_turn(0, skein_recorded::RerunOptions::ignore(["fundamentals"])))
                .await
                .unwrap();
        send_future(chat.fork(0, Some(&rerun))).await.unwrap();
        chat
    });
    assert_eq!(handle.await.unwrap().turns().len(), 1);
}

#[test]
fn blocking_forms_work_without_a_runtime_and_refuse_inside_one() {
    let mut chat = advisor::builder(advisor::model()).build_blocking().unwrap();
    chat.send_blocking("How is the position looking?").unwrap();
    chat.send_blocking("Should we BUY or HOLD this position?")
        .unwrap();
    let rerun = chat
        .rerun_turn_blocking(
            1,
            skein_recorded::RerunOptions::ignore(["social-sentiment"]),
        )
        .unwrap();
    assert!(rerun.answer().starts_with("HOLD"));
    let fork = chat.fork_blocking(1, Some(&rerun)).unwrap();
    assert!(fork.removed().contains("social-sentiment"));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let error = runtime.block_on(async { chat.send_blocking("inside").unwrap_err() });
    assert!(matches!(error, RecordedError::InsideRuntime), "{error}");
    assert_eq!(chat.turns().len(), 2);
}
