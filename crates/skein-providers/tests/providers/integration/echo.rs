/*!
The echo model: its summary format, tool-result summaries, streaming and
usage.
*/

use super::common::{complete, events, request, text_chunks, tool_result, with_tools};
use skein_core::{FinishReason, Message, Provider, StreamEvent, ToolResult};
use skein_providers::Echo;

#[tokio::test]
async fn summarises_the_last_user_message_history_system_and_tools() {
    let req = with_tools(
        request([
            Message::system("be brief"),
            Message::user("first"),
            Message::assistant("ok"),
            Message::user("what is  2+2?"),
        ]),
        &["calc", "search"],
    );
    let response = complete(&Echo, req).await;
    assert_eq!(
        response.message.joined_text(),
        "echo: \"what is  2+2?\" (history: 4 messages, system: yes, tools: 2)"
    );
    assert_eq!(response.finish_reason, FinishReason::Stop);
    assert_eq!(Echo.name(), "echo");
}

#[tokio::test]
async fn says_when_there_is_no_system_message() {
    let text = complete(&Echo, request([Message::user("hi")]))
        .await
        .message
        .joined_text();
    assert_eq!(
        text,
        "echo: \"hi\" (history: 1 messages, system: no, tools: 0)"
    );
}

#[tokio::test]
async fn summarises_tool_results_after_a_tool_message() {
    let failed = ToolResult {
        is_error: true,
        ..tool_result("c2", "no such city")
    };
    let req = request([
        Message::user("weather?"),
        Message::assistant("calling"),
        Message::tool_results([tool_result("c1", "sunny, 21 C"), failed]),
    ]);
    let text = complete(&Echo, req).await.message.joined_text();
    assert_eq!(
        text,
        "echo: tool results [c1: \"sunny, 21 C\", c2 (error): \"no such city\"] (history: 3 messages, system: no, tools: 0)"
    );
}

#[tokio::test]
async fn streams_word_chunks_then_usage_then_done() {
    let req = request([Message::system("sys words here"), Message::user("a b")]);
    let expected = Echo::reply_text(&req);
    let events = events(&Echo, req).await;
    let chunks = text_chunks(&events);
    assert!(chunks.len() > 5, "{chunks:?}");
    assert_eq!(chunks.concat(), expected);
    let n = events.len();
    let StreamEvent::Usage(usage) = &events[n - 2] else {
        panic!("usage must precede done: {events:?}");
    };
    assert_eq!(usage.input_tokens, Some(5));
    assert_eq!(
        usage.output_tokens,
        Some(expected.split_whitespace().count() as u64)
    );
    assert_eq!(events[n - 1], StreamEvent::Done(FinishReason::Stop));
}
