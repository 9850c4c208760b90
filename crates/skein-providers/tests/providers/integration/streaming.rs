/*!
The shape of the streams: word chunks that concatenate to the exact text,
tool-call arguments split across events, usage figures, `max_tokens`, and a
stream that outlives its provider.
*/

use super::common::{complete, events, request, script, text_chunks, tool_result};
use skein_core::{FinishReason, Message, Part, Provider, StreamEvent, ToolCall, Usage};
use skein_providers::{Echo, Scripted};

const SPACED: &str = "  Hello,\tworld!  Two  spaces\nand a new line, ünïcode ✓ ";

fn spaced_script() -> Scripted {
    script(&format!(
        "[[rules]]\nreply = '''{SPACED}'''\ntool_calls = [{{ name = \"search\", arguments = '{{\"query\": \"rust streams\"}}' }}]\n"
    ))
}

#[tokio::test]
async fn text_chunks_concatenate_to_the_exact_reply() {
    let events = events(&spaced_script(), request([Message::user("go")])).await;
    let chunks = text_chunks(&events);
    assert_eq!(chunks.concat(), SPACED);
    assert_eq!(chunks.len(), SPACED.split_whitespace().count());
    let response = complete(&spaced_script(), request([Message::user("go")])).await;
    assert_eq!(response.message.joined_text(), SPACED);
}

#[tokio::test]
async fn events_come_in_order_with_split_arguments() {
    let events = events(&spaced_script(), request([Message::user("go")])).await;
    let first_call = events
        .iter()
        .position(|e| matches!(e, StreamEvent::ToolCall { .. }))
        .unwrap();
    assert!(
        events[..first_call]
            .iter()
            .all(|e| matches!(e, StreamEvent::Text(_)))
    );
    let calls: Vec<&StreamEvent> = events[first_call..]
        .iter()
        .take_while(|e| matches!(e, StreamEvent::ToolCall { .. }))
        .collect();
    assert!(calls.len() >= 2, "arguments must be split: {calls:?}");
    let mut arguments = String::new();
    for (i, event) in calls.iter().enumerate() {
        let StreamEvent::ToolCall {
            index,
            id,
            name,
            arguments: piece,
        } = event
        else {
            unreachable!()
        };
        assert_eq!(*index, 0);
        assert_eq!(id.is_some(), i == 0, "only the first piece carries the id");
        assert_eq!(name.as_deref(), (i == 0).then_some("search"));
        arguments.push_str(piece);
    }
    assert_eq!(arguments, r#"{"query": "rust streams"}"#);
    let tail = &events[first_call + calls.len()..];
    assert!(matches!(tail[0], StreamEvent::Usage(_)), "{tail:?}");
    assert_eq!(tail[1], StreamEvent::Done(FinishReason::ToolCalls));
    assert_eq!(tail.len(), 2);
}

#[tokio::test]
async fn usage_counts_words_in_and_out() {
    let scripted = script(
        "[[rules]]\nreply = \"three word reply\"\ntool_calls = [{ name = \"t\", arguments = '{\"a\": 1}' }]\n",
    );
    let req = request([
        Message::system("system has four words"),
        Message::user("two words"),
        Message::new(
            skein_core::Role::Assistant,
            vec![Part::ToolCall(ToolCall {
                id: "c".into(),
                name: "t".into(),
                arguments: r#"{"x": "y z"}"#.into(),
            })],
        ),
        Message::tool_results([tool_result("c", "result of five whole words")]),
    ]);
    let usage = complete(&scripted, req).await.usage;
    assert_eq!(
        usage,
        Usage {
            input_tokens: Some(4 + 2 + 3 + 5),
            output_tokens: Some(3 + 2),
            cache_read_tokens: None,
            cache_write_tokens: None,
        }
    );
}

#[tokio::test]
async fn max_tokens_cuts_the_reply_with_finish_reason_length() {
    let mut req = request([Message::user("go")]);
    req.options.max_tokens = Some(3);
    let response = complete(&spaced_script(), req).await;
    assert_eq!(response.message.joined_text(), "  Hello,\tworld!  Two");
    assert_eq!(response.message.tool_calls().count(), 0);
    assert_eq!(response.finish_reason, FinishReason::Length);
    assert_eq!(response.usage.output_tokens, Some(3));

    let mut roomy = request([Message::user("go")]);
    roomy.options.max_tokens = Some(100);
    let response = complete(&spaced_script(), roomy).await;
    assert_eq!(response.finish_reason, FinishReason::ToolCalls);
    assert_eq!(response.message.joined_text(), SPACED);

    let mut echo_req = request([Message::user("a b c d e")]);
    echo_req.options.max_tokens = Some(2);
    let echoed = complete(&Echo, echo_req).await;
    assert_eq!(echoed.message.joined_text(), "echo: \"a");
    assert_eq!(echoed.finish_reason, FinishReason::Length);
}

#[tokio::test]
async fn a_stream_outlives_its_provider() {
    let provider: Box<dyn Provider> = Box::new(spaced_script());
    let mut stream = provider.stream(request([Message::user("go")]));
    drop(provider);
    let mut count = 0;
    while let Some(item) = std::future::poll_fn(|cx| stream.as_mut().poll_next(cx)).await {
        item.unwrap();
        count += 1;
    }
    assert!(count > 3);
}
