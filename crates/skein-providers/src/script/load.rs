/*!
Loading a rule file: TOML text to checked, compiled rules.

The text is read twice: first as an outline (each rule as a plain table with
its position) so that every later problem can name its rule, then fully
typed with unknown keys rejected. Each rule is then checked: exactly one
action, no empty lists, a known role and error kind, options that fit the
error kind, and regexes that compile.
*/

use super::action::{Action, ErrorKind, ErrorSpec};
use super::condition::{Condition, Place};
use super::error::{RuleLabel, ScriptError};
use super::raw::{Outline, RawCall, RawError, RawRule, RawScript, Texts};
use super::template::Template;
use super::{Rule, Script};
use crate::reply::PlannedCall;
use regex::Regex;
use skein_core::Role;
use std::ops::Range;

const ONE_ACTION: &str = "give exactly one of `reply`, `tool_calls` (optionally with `reply`), \
`error` or `truncate`";

/// Parse and check a script. `origin` names it in messages (a path, or
/// `<inline script>`).
pub(crate) fn load(text: &str, origin: &str) -> Result<Script, ScriptError> {
    let outline: Outline =
        toml::from_str(text).map_err(|error| syntax_error(text, origin, &error))?;
    if outline.rules.is_empty() {
        return Err(ScriptError::File {
            origin: origin.to_owned(),
            problem: "the script has no rules".to_owned(),
            fix: "add at least one `[[rules]]` table; a rule without conditions always matches"
                .to_owned(),
        });
    }
    let places: Vec<(RuleLabel, Range<usize>)> = outline
        .rules
        .iter()
        .enumerate()
        .map(|(index, table)| {
            let name = table
                .get_ref()
                .get("name")
                .and_then(toml::Value::as_str)
                .map(str::to_owned);
            (RuleLabel { index, name }, table.span())
        })
        .collect();
    let raw: RawScript =
        toml::from_str(text).map_err(|error| typed_error(text, origin, &places, error))?;
    let rules = raw
        .rules
        .into_iter()
        .zip(places)
        .map(|(rule, (label, span))| {
            let at = RuleAt {
                origin,
                label,
                line: line_of(text, span.start),
            };
            at.compile(rule.into_inner())
        })
        .collect::<Result<Vec<Rule>, ScriptError>>()?;
    Ok(Script {
        origin: origin.to_owned(),
        rules,
    })
}

/// The 1-based line of a byte offset.
fn line_of(text: &str, offset: usize) -> usize {
    let end = offset.min(text.len());
    text.as_bytes()[..end]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

/// The trimmed source line holding a byte offset, when it is short enough
/// to quote.
fn source_line(text: &str, offset: usize) -> Option<&str> {
    let line = text.lines().nth(line_of(text, offset) - 1)?.trim();
    (!line.is_empty() && line.len() <= 100).then_some(line)
}

/// A file that is not a rule file: where, and the parser's complaint.
fn syntax_error(text: &str, origin: &str, error: &toml::de::Error) -> ScriptError {
    ScriptError::Syntax {
        origin: origin.to_owned(),
        line: error.span().map(|span| line_of(text, span.start)),
        problem: error.message().trim_end().to_owned(),
    }
}

/// A typing error (unknown key, wrong value type) attributed to its rule.
fn typed_error(
    text: &str,
    origin: &str,
    places: &[(RuleLabel, Range<usize>)],
    error: toml::de::Error,
) -> ScriptError {
    let at = error.span().map(|span| span.start);
    let rule = at.and_then(|at| {
        places
            .iter()
            .rev()
            .find(|(_, span)| span.start <= at)
            .map(|(label, _)| label.clone())
    });
    let Some(rule) = rule else {
        return syntax_error(text, origin, &error);
    };
    let mut problem = error.message().trim_end().to_owned();
    if let Some(source) = at.and_then(|at| source_line(text, at)) {
        problem.push_str(&format!(" (at `{source}`)"));
    }
    let fix = if problem.starts_with("unknown field") {
        "remove the key or correct its spelling (the accepted keys are listed above)".to_owned()
    } else if problem.starts_with("missing field") {
        "add the missing key".to_owned()
    } else {
        "give the value the expected type (conditions take a string or an array of strings)"
            .to_owned()
    };
    ScriptError::Rule {
        origin: origin.to_owned(),
        rule,
        line: at.map(|at| line_of(text, at)),
        problem,
        fix,
    }
}

/// A rule being compiled, with what its errors must name.
struct RuleAt<'a> {
    origin: &'a str,
    label: RuleLabel,
    line: usize,
}

impl RuleAt<'_> {
    fn error(&self, problem: impl Into<String>, fix: impl Into<String>) -> ScriptError {
        ScriptError::Rule {
            origin: self.origin.to_owned(),
            rule: self.label.clone(),
            line: Some(self.line),
            problem: problem.into(),
            fix: fix.into(),
        }
    }

    fn compile(self, raw: RawRule) -> Result<Rule, ScriptError> {
        let conditions = self.conditions(&raw)?;
        let action = self.action(raw)?;
        Ok(Rule {
            label: self.label,
            conditions,
            action,
        })
    }

    fn conditions(&self, raw: &RawRule) -> Result<Vec<Condition>, ScriptError> {
        let mut conditions = Vec::new();
        let contains = [
            (
                "system_contains",
                &raw.system_contains,
                Place::System,
                false,
            ),
            (
                "not_system_contains",
                &raw.not_system_contains,
                Place::System,
                true,
            ),
            ("any_contains", &raw.any_contains, Place::Any, false),
            ("not_any_contains", &raw.not_any_contains, Place::Any, true),
            (
                "last_user_contains",
                &raw.last_user_contains,
                Place::LastUser,
                false,
            ),
            (
                "not_last_user_contains",
                &raw.not_last_user_contains,
                Place::LastUser,
                true,
            ),
            (
                "previous_assistant_contains",
                &raw.previous_assistant_contains,
                Place::PreviousAssistant,
                false,
            ),
            (
                "not_previous_assistant_contains",
                &raw.not_previous_assistant_contains,
                Place::PreviousAssistant,
                true,
            ),
        ];
        for (key, texts, place, negated) in contains {
            if let Some(texts) = texts {
                conditions.push(Condition::Contains {
                    place,
                    needles: self.non_empty(key, texts)?,
                    negated,
                });
            }
        }
        if let Some(patterns) = &raw.last_user_matches {
            let patterns = self.non_empty("last_user_matches", patterns)?;
            let regexes = patterns
                .into_iter()
                .map(|pattern| {
                    Regex::new(&pattern).map_err(|source| ScriptError::Regex {
                        origin: self.origin.to_owned(),
                        rule: self.label.clone(),
                        line: Some(self.line),
                        pattern,
                        error: source,
                    })
                })
                .collect::<Result<_, _>>()?;
            conditions.push(Condition::LastUserMatches(regexes));
        }
        if let Some(names) = &raw.tool_offered {
            conditions.push(Condition::ToolOffered(
                self.non_empty("tool_offered", names)?,
            ));
        }
        if let Some(role) = &raw.last_role {
            let role = role.parse::<Role>().map_err(|_| {
                self.error(
                    format!("`last_role` `{role}` is not a role"),
                    "use one of \"system\", \"user\", \"assistant\", \"tool\"",
                )
            })?;
            conditions.push(Condition::LastRole(role));
        }
        Ok(conditions)
    }

    fn non_empty(&self, key: &str, texts: &Texts) -> Result<Vec<String>, ScriptError> {
        if texts.0.is_empty() {
            return Err(self.error(
                format!("`{key}` is an empty list"),
                "give at least one string, or remove the key",
            ));
        }
        Ok(texts.0.clone())
    }

    fn action(&self, raw: RawRule) -> Result<Action, ScriptError> {
        let given: Vec<&str> = [
            ("reply", raw.reply.is_some()),
            ("tool_calls", raw.tool_calls.is_some()),
            ("error", raw.error.is_some()),
            ("truncate", raw.truncate.is_some()),
        ]
        .into_iter()
        .filter_map(|(key, present)| present.then_some(key))
        .collect();
        // `reply` next to `tool_calls` is the calls' text, not an action.
        let actions = given.len() - usize::from(raw.reply.is_some() && raw.tool_calls.is_some());
        if actions == 0 {
            return Err(self.error("the rule has no action", ONE_ACTION));
        }
        if actions > 1 {
            return Err(self.error(
                format!("the rule has more than one action ({})", given.join(", ")),
                format!("{ONE_ACTION}; split it into several rules"),
            ));
        }
        let reply = raw.reply.as_deref().map(Template::parse);
        if let Some(calls) = raw.tool_calls {
            return Ok(Action::ToolCalls {
                reply,
                calls: self.calls(calls)?,
            });
        }
        if let Some(reply) = reply {
            return Ok(Action::Reply(reply));
        }
        if let Some(error) = raw.error {
            return Ok(Action::Error(self.error_spec(error)?));
        }
        let text = raw.truncate.unwrap_or_default();
        Ok(Action::Truncate(Template::parse(&text)))
    }

    fn calls(&self, calls: Vec<RawCall>) -> Result<Vec<PlannedCall>, ScriptError> {
        if calls.is_empty() {
            return Err(self.error(
                "`tool_calls` is an empty list",
                "give at least one `{ name = \"...\", arguments = '...' }`, or use `reply` alone",
            ));
        }
        calls
            .into_iter()
            .enumerate()
            .map(|(i, call)| {
                if call.name.is_empty() {
                    return Err(self.error(
                        format!("tool call {i} has an empty `name`"),
                        "name the tool to call",
                    ));
                }
                Ok(PlannedCall {
                    name: call.name,
                    arguments: call.arguments,
                })
            })
            .collect()
    }

    fn error_spec(&self, raw: RawError) -> Result<ErrorSpec, ScriptError> {
        let kind = ErrorKind::parse(&raw.kind).ok_or_else(|| {
            self.error(
                format!("`error.kind` `{}` is not an error kind", raw.kind),
                format!("use one of: {}", ErrorKind::names()),
            )
        })?;
        if raw.retry_after_ms.is_some() && kind != ErrorKind::RateLimited {
            return Err(self.error(
                format!(
                    "`retry_after_ms` does not apply to kind `{}`",
                    kind.as_str()
                ),
                "remove `retry_after_ms`, or use kind = \"rate_limited\"",
            ));
        }
        if raw.status.is_some() && kind != ErrorKind::Server {
            return Err(self.error(
                format!("`status` does not apply to kind `{}`", kind.as_str()),
                "remove `status`, or use kind = \"server\"",
            ));
        }
        Ok(ErrorSpec {
            kind,
            message: raw
                .message
                .unwrap_or_else(|| format!("scripted {} error", kind.as_str())),
            retry_after_ms: raw.retry_after_ms,
            status: raw.status,
        })
    }
}
