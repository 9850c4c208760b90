/*!
The example scripts in `tests/data/`, run as conversations: the advisor
whose answers depend on a system fact and its own earlier reply, a tool loop,
and structured-output repair.
*/

use super::common::{complete, data, request, with_tools};
use skein_core::{FinishReason, Message, ModelRequest, Provider, Thread, ToolResult};
use skein_providers::Scripted;

/// Ask `question` after `thread`, returning the reply text and the thread
/// with the question and the reply appended.
async fn turn(provider: &dyn Provider, thread: Thread, question: &str) -> (String, Thread) {
    let thread = thread.push(Message::user(question));
    let response = complete(provider, ModelRequest::new("advisor", thread.clone())).await;
    let text = response.message.joined_text();
    (text, thread.push(response.message))
}

#[tokio::test]
async fn the_advisor_buys_only_on_the_fact_and_adds_only_after_buying() {
    let advisor = Scripted::from_file(data("advisor.toml")).unwrap();
    let with_fact = Thread::from_messages([Message::system(
        "You are an advisor.\nFacts:\n- social-sentiment: bullish\n- ticker: ACME",
    )]);
    let (first, thread) = turn(&advisor, with_fact, "Should I buy ACME?").await;
    assert!(first.starts_with("BUY"), "{first}");
    let (second, _) = turn(&advisor, thread, "Should I add to my position?").await;
    assert!(second.starts_with("ADD"), "{second}");

    let without_fact = Thread::from_messages([Message::system(
        "You are an advisor.\nFacts:\n- ticker: ACME",
    )]);
    let (first, thread) = turn(&advisor, without_fact, "Should I buy ACME?").await;
    assert!(first.starts_with("HOLD"), "{first}");
    let (second, _) = turn(&advisor, thread, "Should I add to my position?").await;
    assert!(second.starts_with("KEEP"), "{second}");
}

#[tokio::test]
async fn the_tool_loop_calls_search_then_quotes_its_result() {
    let model = Scripted::from_file(data("tool_loop.toml")).unwrap();
    let thread = Thread::from_messages([Message::user("What is the weather in Oslo?")]);
    let first = complete(
        &model,
        with_tools(ModelRequest::new("m", thread.clone()), &["search"]),
    )
    .await;
    assert_eq!(first.finish_reason, FinishReason::ToolCalls);
    assert_eq!(first.message.joined_text(), "Let me look that up.");
    let call = first.message.tool_calls().next().unwrap().clone();
    assert_eq!(call.name, "search");
    assert_eq!(call.arguments, r#"{"q": "weather in Oslo"}"#);

    let thread = thread
        .push(first.message.clone())
        .push(Message::tool_results([ToolResult {
            call_id: call.id.clone(),
            content: "Rain, 7 C".into(),
            is_error: false,
        }]));
    let second = complete(
        &model,
        with_tools(ModelRequest::new("m", thread), &["search"]),
    )
    .await;
    assert_eq!(second.finish_reason, FinishReason::Stop);
    assert_eq!(
        second.message.joined_text(),
        "According to the search: Rain, 7 C"
    );

    let no_tools = complete(&model, request([Message::user("Oslo?")])).await;
    assert_eq!(
        no_tools.message.joined_text(),
        "I cannot search, so about \"Oslo?\" I know nothing."
    );
}

#[tokio::test]
async fn the_repair_script_answers_valid_json_after_the_correction() {
    let model = Scripted::from_file(data("repair.toml")).unwrap();
    let thread = Thread::from_messages([
        Message::system("Answer with JSON: {\"verdict\": string, \"score\": integer}"),
        Message::user("Review this change."),
    ]);
    let first = complete(&model, ModelRequest::new("m", thread.clone())).await;
    let bad = first.message.joined_text();
    assert!(
        serde_json::from_str::<serde_json::Value>(&bad).is_err(),
        "{bad}"
    );

    let corrected = thread.push(first.message).push(Message::user(
        "Your reply did not match the schema: expected a JSON object. Try again.",
    ));
    let second = complete(&model, ModelRequest::new("m", corrected)).await;
    let value: serde_json::Value =
        serde_json::from_str(&second.message.joined_text()).expect("valid JSON");
    assert_eq!(value["verdict"], "approve");
    assert_eq!(value["score"], 4);
}
