/*!
Rule conditions and how they are evaluated over a request.

A `*_contains` condition with several texts holds when every text is found;
its `not_*` form holds when none is found. Texts are found in a message's
text (its text parts joined); `any_contains` also looks in tool-result
contents. When there is nothing to look in (no system message, no user
message, no previous assistant message) a positive condition fails and a
negated one holds.
*/

use crate::facts::RequestFacts;
use regex::Regex;
use skein_core::Role;

/// Where a `*_contains` condition looks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Place {
    /// Every system message.
    System,
    /// Every message's text and every tool result's content.
    Any,
    /// The last user message.
    LastUser,
    /// The most recent assistant message before the last user message.
    PreviousAssistant,
}

impl Place {
    fn texts<'f>(self, facts: &'f RequestFacts<'_>) -> Vec<&'f str> {
        match self {
            Place::System => facts.system_texts().collect(),
            Place::Any => facts.searchable_texts().collect(),
            Place::LastUser => facts.last_user_text().into_iter().collect(),
            Place::PreviousAssistant => facts.previous_assistant_text().into_iter().collect(),
        }
    }
}

/// One condition of a rule.
#[derive(Clone, Debug)]
pub(crate) enum Condition {
    Contains {
        place: Place,
        needles: Vec<String>,
        negated: bool,
    },
    /// Every pattern matches the last user message's text.
    LastUserMatches(Vec<Regex>),
    /// Every named tool is offered.
    ToolOffered(Vec<String>),
    /// The last message has this role.
    LastRole(Role),
}

impl Condition {
    pub(crate) fn holds(&self, facts: &RequestFacts<'_>) -> bool {
        match self {
            Condition::Contains {
                place,
                needles,
                negated,
            } => {
                let texts = place.texts(facts);
                let found =
                    |needle: &String| texts.iter().any(|text| text.contains(needle.as_str()));
                if *negated {
                    !needles.iter().any(found)
                } else {
                    needles.iter().all(found)
                }
            }
            Condition::LastUserMatches(patterns) => facts
                .last_user_text()
                .is_some_and(|text| patterns.iter().all(|p| p.is_match(text))),
            Condition::ToolOffered(names) => names.iter().all(|name| facts.tool_offered(name)),
            Condition::LastRole(role) => facts.last_role() == Some(*role),
        }
    }
}
