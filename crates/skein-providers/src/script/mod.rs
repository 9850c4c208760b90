/*!
Scripts: ordered rules that decide a scripted model's answer.

- [`raw`]: the file as written (serde shapes, unknown keys rejected).
- [`load`]: parsing and checking a file into [`Script`].
- [`condition`]: conditions and their evaluation over a request.
- [`action`]: what a matching rule does, including error kinds.
- [`template`]: `{last_user}`, `{last_tool_result}`, `{history}`.
- [`error`]: [`ScriptError`] and [`RuleLabel`].

The file format is documented on [`crate::Scripted`].
*/

mod action;
mod condition;
mod error;
mod load;
mod raw;
mod template;

pub use error::{RuleLabel, ScriptError};

use crate::facts::RequestFacts;
use crate::reply::Outcome;
use action::Action;
use condition::Condition;
use skein_core::{ModelRequest, ProviderError};

/// One checked rule: all conditions must hold for its action to run.
#[derive(Clone, Debug)]
pub(crate) struct Rule {
    pub(crate) label: RuleLabel,
    conditions: Vec<Condition>,
    action: Action,
}

impl Rule {
    fn matches(&self, facts: &RequestFacts<'_>) -> bool {
        self.conditions.iter().all(|c| c.holds(facts))
    }
}

/// A loaded script.
#[derive(Clone, Debug)]
pub(crate) struct Script {
    origin: String,
    rules: Vec<Rule>,
}

impl Script {
    pub(crate) fn load(text: &str, origin: &str) -> Result<Script, ScriptError> {
        load::load(text, origin)
    }

    pub(crate) fn origin(&self) -> &str {
        &self.origin
    }

    pub(crate) fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// The first rule whose conditions all hold for `request`.
    pub(crate) fn first_match(&self, request: &ModelRequest) -> Option<&Rule> {
        self.find(&RequestFacts::new(request))
    }

    fn find(&self, facts: &RequestFacts<'_>) -> Option<&Rule> {
        self.rules.iter().find(|rule| rule.matches(facts))
    }

    /// What the scripted model does with `request`.
    pub(crate) fn respond(&self, request: &ModelRequest) -> Outcome {
        let facts = RequestFacts::new(request);
        let Some(rule) = self.find(&facts) else {
            return Outcome::Fail(ProviderError::Scripted {
                message: self.no_match(&facts),
            });
        };
        rule.action.outcome(&facts).unwrap_or_else(|slot| {
            Outcome::Fail(ProviderError::Scripted {
                message: format!(
                    "script `{}`, {}: the reply uses {} but {}",
                    self.origin,
                    rule.label,
                    slot.token(),
                    slot.missing()
                ),
            })
        })
    }

    fn no_match(&self, facts: &RequestFacts<'_>) -> String {
        let last_user = facts
            .last_user_text()
            .map_or_else(|| "none".to_owned(), |text| format!("\"{text}\""));
        let last_role = facts
            .last_role()
            .map_or("none (empty thread)", |r| r.as_str());
        format!(
            "script `{}`: no rule matched the request ({} rules tried; last user message: {last_user}; last message role: {last_role}); fix: add a rule for this case, or end the script with a rule without conditions as a fallback",
            self.origin,
            self.rules.len()
        )
    }
}
