/*!
Loading rule files: every kind of invalid script is rejected with a typed
error naming the file, the rule (index and name) and the problem, and
saying how to fix it.
*/

use super::common::data;
use skein_providers::{RuleLabel, ScriptError, Scripted};

fn load_error(text: &str) -> ScriptError {
    match Scripted::from_toml_str(text) {
        Ok(_) => panic!("expected a loading error for:\n{text}"),
        Err(error) => error,
    }
}

fn assert_rule_error(error: &ScriptError, index: usize, name: Option<&str>, words: &[&str]) {
    let expected = RuleLabel {
        index,
        name: name.map(str::to_owned),
    };
    assert_eq!(error.rule(), Some(&expected), "{error}");
    let message = error.to_string();
    for word in words {
        assert!(message.contains(word), "`{word}` missing from: {message}");
    }
    assert!(message.contains("fix:"), "{message}");
}

#[test]
fn an_unknown_key_names_the_file_rule_and_key() {
    let path = data("invalid/unknown_key.toml");
    let error = Scripted::from_file(&path).unwrap_err();
    assert!(matches!(error, ScriptError::Rule { .. }), "{error:?}");
    assert_rule_error(
        &error,
        1,
        Some("typo"),
        &[
            "unknown_key.toml",
            "rule 1 (`typo`)",
            "line 7",
            "unknown field `last_user_contians`",
            "last_user_contains",
        ],
    );
}

#[test]
fn an_unknown_key_inside_a_tool_call_or_error_is_rejected() {
    let error = load_error("[[rules]]\ntool_calls = [{ name = \"t\", args = \"{}\" }]\n");
    assert_rule_error(&error, 0, None, &["unknown field `args`"]);
    let error = load_error("[[rules]]\nerror = { kind = \"server\", code = 1 }\n");
    assert_rule_error(&error, 0, None, &["unknown field `code`"]);
}

#[test]
fn two_actions_are_rejected() {
    let error = Scripted::from_file(data("invalid/two_actions.toml")).unwrap_err();
    assert_rule_error(
        &error,
        1,
        Some("greedy"),
        &[
            "two_actions.toml",
            "more than one action",
            "reply",
            "truncate",
        ],
    );
    let error =
        load_error("[[rules]]\ntool_calls = [{ name = \"t\" }]\nerror = { kind = \"timeout\" }\n");
    assert_rule_error(&error, 0, None, &["tool_calls", "error"]);
}

#[test]
fn a_rule_without_an_action_is_rejected() {
    let error = load_error(
        "[[rules]]\nreply = \"ok\"\n\n[[rules]]\nname = \"idle\"\nlast_role = \"user\"\n",
    );
    assert_rule_error(&error, 1, Some("idle"), &["no action", "reply"]);
}

#[test]
fn reply_next_to_tool_calls_is_their_text_not_a_second_action() {
    let scripted =
        Scripted::from_toml_str("[[rules]]\nreply = \"x\"\ntool_calls = [{ name = \"t\" }]\n");
    assert!(scripted.is_ok());
}

#[test]
fn a_bad_regex_names_the_rule_and_pattern() {
    let error = Scripted::from_file(data("invalid/bad_regex.toml")).unwrap_err();
    assert!(matches!(error, ScriptError::Regex { .. }), "{error:?}");
    assert_rule_error(
        &error,
        0,
        Some("pattern"),
        &["bad_regex.toml", "`(unclosed`", "regular expression"],
    );
    let ScriptError::Regex { error: parser, .. } = &error else {
        unreachable!()
    };
    assert!(
        error.to_string().ends_with(&parser.to_string()),
        "the regex error is kept in the message"
    );
    assert!(
        std::error::Error::source(&error).is_none(),
        "and not also as the source, so a chain printer says it once"
    );
}

#[test]
fn a_missing_file_names_the_path() {
    let path = data("does-not-exist.toml");
    let error = Scripted::from_file(&path).unwrap_err();
    let ScriptError::Read {
        path: got,
        error: source,
    } = &error
    else {
        panic!("{error:?}");
    };
    assert_eq!(got, &path);
    assert_eq!(source.kind(), std::io::ErrorKind::NotFound);
    assert!(error.to_string().contains("does-not-exist.toml"), "{error}");
}

#[test]
fn values_of_the_wrong_kind_are_rejected() {
    let error =
        load_error("[[rules]]\nreply = \"a\"\n\n[[rules]]\nany_contains = 3\nreply = \"b\"\n");
    assert_rule_error(
        &error,
        1,
        None,
        &["line 5", "any_contains = 3", "string or an array"],
    );
    let error = load_error("[[rules]]\nname = \"r\"\nlast_role = \"robot\"\nreply = \"x\"\n");
    assert_rule_error(&error, 0, Some("r"), &["`robot`", "\"tool\""]);
    let error = load_error("[[rules]]\nerror = { kind = \"teapot\" }\n");
    assert_rule_error(
        &error,
        0,
        None,
        &["`teapot`", "rate_limited", "context_too_long"],
    );
}

#[test]
fn options_that_do_not_fit_the_error_kind_are_rejected() {
    let error = load_error("[[rules]]\nerror = { kind = \"server\", retry_after_ms = 5 }\n");
    assert_rule_error(&error, 0, None, &["retry_after_ms", "rate_limited"]);
    let error = load_error("[[rules]]\nerror = { kind = \"timeout\", status = 504 }\n");
    assert_rule_error(&error, 0, None, &["status", "server"]);
}

#[test]
fn empty_lists_are_rejected() {
    let error = load_error("[[rules]]\nany_contains = []\nreply = \"x\"\n");
    assert_rule_error(&error, 0, None, &["`any_contains` is an empty list"]);
    let error = load_error("[[rules]]\ntool_calls = []\n");
    assert_rule_error(&error, 0, None, &["`tool_calls` is an empty list"]);
    let error = load_error("[[rules]]\ntool_calls = [{ name = \"\" }]\n");
    assert_rule_error(&error, 0, None, &["empty `name`"]);
}

#[test]
fn file_level_problems_are_reported() {
    let error = load_error("");
    assert!(matches!(error, ScriptError::File { .. }), "{error:?}");
    assert!(error.to_string().contains("no rules"), "{error}");

    let error = load_error("[[rule]]\nreply = \"x\"\n");
    assert!(matches!(error, ScriptError::Syntax { .. }), "{error:?}");
    assert!(
        error.to_string().contains("unknown field `rule`"),
        "{error}"
    );

    let error = load_error("[[rules]\nreply = \"x\"\n");
    assert!(matches!(error, ScriptError::Syntax { .. }), "{error:?}");
    assert!(error.to_string().contains("<inline script>"), "{error}");
    assert!(error.rule().is_none());
}

#[test]
fn valid_scripts_list_their_rules() {
    let scripted = Scripted::from_file(data("advisor.toml")).unwrap();
    let names: Vec<_> = scripted.rules().map(|r| r.name.clone().unwrap()).collect();
    assert_eq!(names, ["add", "keep", "buy", "hold"]);
    assert!(scripted.origin().ends_with("advisor.toml"));
}
