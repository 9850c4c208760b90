/*!
Every rule action: replies with substitutions, tool calls with raw
arguments and deterministic ids, each error kind, and truncated streams.
*/

use super::common::{complete, drain, failure, reply, request, script, text_chunks, tool_result};
use skein_core::{FinishReason, Message, Part, ProviderError, StreamEvent, Thread};
use skein_providers::deterministic_call_id;
use std::time::Duration;

#[tokio::test]
async fn reply_substitutes_last_user_history_and_last_tool_result() {
    let scripted = script(
        r#"[[rules]]
reply = 'You said "{last_user}"; {history} messages; tool: {last_tool_result}; {"json": {kept}}'
"#,
    );
    let req = request([
        Message::system("s"),
        Message::user("look it up"),
        Message::tool_results([tool_result("a", "old"), tool_result("b", "42 results")]),
    ]);
    assert_eq!(
        reply(&scripted, req).await,
        r#"You said "look it up"; 3 messages; tool: 42 results; {"json": {kept}}"#
    );
}

#[tokio::test]
async fn a_placeholder_without_a_value_fails_naming_the_rule() {
    let scripted = script("[[rules]]\nname = \"quote\"\nreply = \"{last_tool_result}\"\n");
    let error = failure(&scripted, request([Message::user("q")])).await;
    let ProviderError::Scripted { message } = error else {
        panic!("{error:?}");
    };
    assert!(message.contains("rule 0 (`quote`)"), "{message}");
    assert!(message.contains("{last_tool_result}"), "{message}");
    assert!(message.contains("no tool result"), "{message}");
}

const TWO_CALLS: &str = r#"
[[rules]]
reply = "Checking {last_user}."
tool_calls = [
  { name = "search", arguments = '{ "q" :  "x",   "n": 1 }' },
  { name = "broken", arguments = '{"unterminated": ' },
  { name = "noargs" },
]
"#;

#[tokio::test]
async fn tool_calls_keep_arguments_byte_for_byte() {
    let scripted = script(TWO_CALLS);
    let response = complete(&scripted, request([Message::user("both")])).await;
    assert_eq!(response.finish_reason, FinishReason::ToolCalls);
    assert!(matches!(&response.message.parts[0], Part::Text { text } if text == "Checking both."));
    let calls: Vec<_> = response.message.tool_calls().collect();
    let got: Vec<(&str, &str)> = calls
        .iter()
        .map(|c| (c.name.as_str(), c.arguments.as_str()))
        .collect();
    assert_eq!(
        got,
        [
            ("search", r#"{ "q" :  "x",   "n": 1 }"#),
            ("broken", r#"{"unterminated": "#),
            ("noargs", "{}"),
        ]
    );
}

#[tokio::test]
async fn call_ids_are_derived_from_the_parent_node_and_position() {
    let scripted = script(TWO_CALLS);
    let thread = Thread::from_messages([Message::user("same")]);
    let ids = |response: skein_core::ModelResponse| -> Vec<String> {
        response
            .message
            .tool_calls()
            .map(|c| c.id.clone())
            .collect()
    };
    let first = ids(complete(&scripted, request([Message::user("same")])).await);
    let again = ids(complete(&scripted, request([Message::user("same")])).await);
    assert_eq!(first, again, "the same request must mint the same ids");
    let expected: Vec<String> = (0..3)
        .map(|i| deterministic_call_id(thread.head_id(), i))
        .collect();
    assert_eq!(first, expected);
    assert!(first[0].starts_with("call_") && first[0].len() == 29);
    assert_ne!(first[0], first[1]);

    let other = ids(complete(&scripted, request([Message::user("different")])).await);
    assert!(
        other.iter().all(|id| !first.contains(id)),
        "{other:?} vs {first:?}"
    );
}

#[tokio::test]
async fn a_tool_call_without_reply_text_has_only_call_parts() {
    let scripted = script("[[rules]]\ntool_calls = [{ name = \"t\", arguments = '{}' }]\n");
    let response = complete(&scripted, request([])).await;
    assert_eq!(response.message.parts.len(), 1);
    assert_eq!(
        response.message.tool_calls().next().unwrap().id,
        deterministic_call_id(None, 0),
        "an empty thread hashes 32 zero bytes"
    );
}

#[tokio::test]
async fn every_error_kind_maps_onto_its_provider_error() {
    let scripted = script(
        r#"
[[rules]]
last_user_contains = "rate2"
error = { kind = "rate_limited", message = "slow" }
[[rules]]
last_user_contains = "rate"
error = { kind = "rate_limited", message = "slow down", retry_after_ms = 1500 }
[[rules]]
last_user_contains = "auth"
error = { kind = "authentication", message = "bad key" }
[[rules]]
last_user_contains = "bad"
error = { kind = "bad_request", message = "nope" }
[[rules]]
last_user_contains = "long"
error = { kind = "context_too_long", message = "too long" }
[[rules]]
last_user_contains = "server"
error = { kind = "server", message = "down", status = 503 }
[[rules]]
last_user_contains = "fivehundred"
error = { kind = "server", message = "oops" }
[[rules]]
last_user_contains = "timeout"
error = { kind = "timeout", message = "first byte" }
[[rules]]
last_user_contains = "connection"
error = { kind = "connection", message = "refused" }
[[rules]]
last_user_contains = "malformed"
error = { kind = "malformed", message = "garbage" }
[[rules]]
last_user_contains = "scripted"
error = { kind = "scripted" }
"#,
    );
    let cases = [
        (
            "rate2",
            ProviderError::RateLimited {
                message: "slow".into(),
                retry_after: None,
            },
        ),
        (
            "rate",
            ProviderError::RateLimited {
                message: "slow down".into(),
                retry_after: Some(Duration::from_millis(1500)),
            },
        ),
        (
            "auth",
            ProviderError::Authentication {
                message: "bad key".into(),
            },
        ),
        (
            "bad",
            ProviderError::BadRequest {
                message: "nope".into(),
                context_too_long: false,
            },
        ),
        (
            "long",
            ProviderError::BadRequest {
                message: "too long".into(),
                context_too_long: true,
            },
        ),
        (
            "server",
            ProviderError::Server {
                status: 503,
                message: "down".into(),
            },
        ),
        (
            "fivehundred",
            ProviderError::Server {
                status: 500,
                message: "oops".into(),
            },
        ),
        (
            "timeout",
            ProviderError::Timeout {
                phase: "first byte".into(),
            },
        ),
        (
            "connection",
            ProviderError::Connection {
                message: "refused".into(),
            },
        ),
        (
            "malformed",
            ProviderError::MalformedResponse {
                message: "garbage".into(),
            },
        ),
        (
            "scripted",
            ProviderError::Scripted {
                message: "scripted scripted error".into(),
            },
        ),
    ];
    for (word, expected) in cases {
        let got = failure(&scripted, request([Message::user(word)])).await;
        assert_eq!(got, expected, "for {word}");
    }
}

#[tokio::test]
async fn an_error_is_the_only_item_of_the_stream() {
    let scripted = script("[[rules]]\nerror = { kind = \"connection\", message = \"reset\" }\n");
    let items = drain(&scripted, request([Message::user("q")])).await;
    assert_eq!(
        items,
        [Err(ProviderError::Connection {
            message: "reset".into()
        })]
    );
}

#[tokio::test]
async fn truncate_streams_text_then_stops_without_done() {
    let scripted = script("[[rules]]\ntruncate = \"The answer is  {history} and\"\n");
    let items = drain(&scripted, request([Message::user("q")])).await;
    let events: Vec<StreamEvent> = items.into_iter().map(Result::unwrap).collect();
    assert!(
        events.iter().all(|e| matches!(e, StreamEvent::Text(_))),
        "{events:?}"
    );
    assert_eq!(text_chunks(&events).concat(), "The answer is  1 and");
    assert!(events.len() > 1);

    let error = failure(&scripted, request([Message::user("q")])).await;
    assert_eq!(error, ProviderError::TruncatedStream);
}
