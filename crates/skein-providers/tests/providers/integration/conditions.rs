/*!
Every rule condition, its negated form where there is one, the array form,
conjunction, rules without conditions, first-match-wins and the no-match
failure.
*/

use super::common::{failure, reply, request, script, tool_result, with_tools};
use skein_core::{Message, ModelRequest, ProviderError};

/// Whether a rule with exactly `conditions` matches `request`.
async fn hits(conditions: &str, request: ModelRequest) -> bool {
    let scripted = script(&format!(
        "[[rules]]\n{conditions}\nreply = \"hit\"\n\n[[rules]]\nreply = \"miss\"\n"
    ));
    match reply(&scripted, request).await.as_str() {
        "hit" => true,
        "miss" => false,
        other => panic!("unexpected reply {other:?}"),
    }
}

fn advisor_chat() -> ModelRequest {
    request([
        Message::system("You are an advisor."),
        Message::system("fact: social-sentiment: bullish"),
        Message::user("Should I buy ACME?"),
        Message::assistant("BUY, sentiment is strong."),
        Message::user("And add more later?"),
    ])
}

#[tokio::test]
async fn system_contains_looks_only_at_system_messages() {
    assert!(
        hits(
            r#"system_contains = "social-sentiment: bullish""#,
            advisor_chat()
        )
        .await
    );
    assert!(!hits(r#"system_contains = "ACME""#, advisor_chat()).await);
    // Each text may be in a different system message; all must be found.
    assert!(
        hits(
            r#"system_contains = ["advisor", "bullish"]"#,
            advisor_chat()
        )
        .await
    );
    assert!(
        !hits(
            r#"system_contains = ["advisor", "bearish"]"#,
            advisor_chat()
        )
        .await
    );
    assert!(!hits(r#"system_contains = "x""#, request([Message::user("x")])).await);
}

#[tokio::test]
async fn not_system_contains_holds_when_no_text_is_found() {
    assert!(hits(r#"not_system_contains = "bearish""#, advisor_chat()).await);
    assert!(!hits(r#"not_system_contains = "bullish""#, advisor_chat()).await);
    assert!(
        !hits(
            r#"not_system_contains = ["bearish", "bullish"]"#,
            advisor_chat()
        )
        .await
    );
    assert!(
        hits(
            r#"not_system_contains = "x""#,
            request([Message::user("x")])
        )
        .await
    );
}

#[tokio::test]
async fn any_contains_searches_every_message_and_tool_results() {
    assert!(hits(r#"any_contains = "strong""#, advisor_chat()).await);
    assert!(
        hits(
            r#"any_contains = ["advisor", "ACME", "add more"]"#,
            advisor_chat()
        )
        .await
    );
    assert!(!hits(r#"any_contains = ["ACME", "nowhere"]"#, advisor_chat()).await);
    let with_result = request([
        Message::user("q"),
        Message::tool_results([tool_result("c1", "the secret is 42")]),
    ]);
    assert!(hits(r#"any_contains = "secret is 42""#, with_result).await);
}

#[tokio::test]
async fn not_any_contains_holds_only_when_no_text_appears_anywhere() {
    assert!(hits(r#"not_any_contains = ["SELL", "nowhere"]"#, advisor_chat()).await);
    assert!(!hits(r#"not_any_contains = ["SELL", "ACME"]"#, advisor_chat()).await);
    let with_result = request([
        Message::user("q"),
        Message::tool_results([tool_result("c1", "error: quota")]),
    ]);
    assert!(!hits(r#"not_any_contains = "quota""#, with_result).await);
}

#[tokio::test]
async fn last_user_contains_reads_only_the_last_user_message() {
    assert!(hits(r#"last_user_contains = "add more""#, advisor_chat()).await);
    assert!(!hits(r#"last_user_contains = "buy ACME""#, advisor_chat()).await);
    assert!(hits(r#"last_user_contains = ["And", "later"]"#, advisor_chat()).await);
    // After tool results, the last user message is the one before them.
    let after_tools = request([
        Message::user("look up Oslo"),
        Message::assistant("calling"),
        Message::tool_results([tool_result("c1", "rain")]),
    ]);
    assert!(hits(r#"last_user_contains = "Oslo""#, after_tools).await);
}

#[tokio::test]
async fn not_last_user_contains_is_the_negation() {
    assert!(hits(r#"not_last_user_contains = "buy""#, advisor_chat()).await);
    assert!(!hits(r#"not_last_user_contains = ["buy", "add"]"#, advisor_chat()).await);
}

#[tokio::test]
async fn last_user_matches_applies_a_regex() {
    assert!(hits(r"last_user_matches = '^And \w+ more'", advisor_chat()).await);
    assert!(!hits(r"last_user_matches = '^Should'", advisor_chat()).await);
    assert!(hits(r"last_user_matches = ['add', 'later\?$']", advisor_chat()).await);
    assert!(!hits(r"last_user_matches = ['add', '^later']", advisor_chat()).await);
    assert!(!hits(r"last_user_matches = '.*'", request([Message::system("s")])).await);
}

#[tokio::test]
async fn previous_assistant_is_the_reply_before_the_last_user_message() {
    assert!(hits(r#"previous_assistant_contains = "BUY""#, advisor_chat()).await);
    assert!(!hits(r#"previous_assistant_contains = "HOLD""#, advisor_chat()).await);
    // An assistant message after the last user message does not count.
    let late = request([
        Message::assistant("BUY"),
        Message::user("q"),
        Message::assistant("HOLD"),
    ]);
    assert!(hits(r#"previous_assistant_contains = "BUY""#, late.clone()).await);
    assert!(!hits(r#"previous_assistant_contains = "HOLD""#, late).await);
    assert!(
        !hits(
            r#"previous_assistant_contains = "BUY""#,
            request([Message::user("q")])
        )
        .await
    );
}

#[tokio::test]
async fn not_previous_assistant_contains_holds_without_a_previous_reply() {
    assert!(!hits(r#"not_previous_assistant_contains = "BUY""#, advisor_chat()).await);
    assert!(
        hits(
            r#"not_previous_assistant_contains = "HOLD""#,
            advisor_chat()
        )
        .await
    );
    assert!(
        hits(
            r#"not_previous_assistant_contains = "BUY""#,
            request([Message::user("q")])
        )
        .await
    );
}

#[tokio::test]
async fn tool_offered_checks_the_tools_of_this_call() {
    let offered = || with_tools(request([Message::user("q")]), &["search", "calc"]);
    assert!(hits(r#"tool_offered = "search""#, offered()).await);
    assert!(hits(r#"tool_offered = ["search", "calc"]"#, offered()).await);
    assert!(!hits(r#"tool_offered = ["search", "weather"]"#, offered()).await);
    assert!(!hits(r#"tool_offered = "search""#, request([Message::user("q")])).await);
}

#[tokio::test]
async fn last_role_checks_the_role_of_the_last_message() {
    let after_tools = || {
        request([
            Message::user("q"),
            Message::tool_results([tool_result("c1", "r")]),
        ])
    };
    assert!(hits(r#"last_role = "tool""#, after_tools()).await);
    assert!(!hits(r#"last_role = "user""#, after_tools()).await);
    assert!(hits(r#"last_role = "user""#, advisor_chat()).await);
    let prefill = request([Message::user("q"), Message::assistant("partial")]);
    assert!(hits(r#"last_role = "assistant""#, prefill).await);
    assert!(!hits(r#"last_role = "user""#, request([])).await);
}

#[tokio::test]
async fn every_condition_of_a_rule_must_hold() {
    let both = "system_contains = \"bullish\"\nlast_user_contains = \"add\"";
    assert!(hits(both, advisor_chat()).await);
    let one_fails = "system_contains = \"bearish\"\nlast_user_contains = \"add\"";
    assert!(!hits(one_fails, advisor_chat()).await);
}

#[tokio::test]
async fn a_rule_without_conditions_always_matches() {
    let scripted = script("[[rules]]\nreply = \"always\"\n");
    assert_eq!(reply(&scripted, request([])).await, "always");
    assert_eq!(reply(&scripted, advisor_chat()).await, "always");
}

#[tokio::test]
async fn the_first_matching_rule_wins() {
    let scripted = script(
        r#"
[[rules]]
name = "never"
last_user_contains = "absent"
reply = "zero"

[[rules]]
name = "first"
last_user_contains = "add"
reply = "one"

[[rules]]
name = "second"
last_user_contains = "add"
reply = "two"

[[rules]]
reply = "fallback"
"#,
    );
    assert_eq!(reply(&scripted, advisor_chat()).await, "one");
    let label = scripted.matching_rule(&advisor_chat()).unwrap();
    assert_eq!((label.index, label.name.as_deref()), (1, Some("first")));
    let other = request([Message::user("anything")]);
    assert_eq!(scripted.matching_rule(&other).unwrap().index, 3);
    assert_eq!(reply(&scripted, other).await, "fallback");
}

#[tokio::test]
async fn no_matching_rule_fails_with_the_file_and_last_user_text() {
    let scripted = skein_providers::Scripted::from_toml_str_named(
        "[[rules]]\nlast_user_contains = \"hello\"\nreply = \"hi\"\n",
        "greetings.toml",
    )
    .unwrap();
    let error = failure(&scripted, request([Message::user("goodbye now")])).await;
    let ProviderError::Scripted { message } = error else {
        panic!("expected a scripted error, got {error:?}");
    };
    assert!(message.contains("greetings.toml"), "{message}");
    assert!(message.contains("no rule matched"), "{message}");
    assert!(message.contains("\"goodbye now\""), "{message}");
}
