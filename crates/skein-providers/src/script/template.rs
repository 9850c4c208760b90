/*!
Reply templates: text with the substitutions `{last_user}`,
`{last_tool_result}` and `{history}`.

Only those three exact placeholders are replaced, in one pass (a substituted
value is never expanded again); every other character, braces included, is
kept as written, so JSON replies need no escaping. A placeholder whose value
the request does not have (no user message, no tool result) fails the call.
*/

use crate::facts::RequestFacts;

/// A value a template can insert.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Slot {
    /// The last user message's text.
    LastUser,
    /// The content of the last tool result in the request.
    LastToolResult,
    /// The number of messages in the request thread.
    History,
}

impl Slot {
    const ALL: [Slot; 3] = [Slot::LastUser, Slot::LastToolResult, Slot::History];

    pub(crate) fn token(self) -> &'static str {
        match self {
            Slot::LastUser => "{last_user}",
            Slot::LastToolResult => "{last_tool_result}",
            Slot::History => "{history}",
        }
    }

    /// What the request lacks when this slot has no value.
    pub(crate) fn missing(self) -> &'static str {
        match self {
            Slot::LastUser => "the request has no user message",
            Slot::LastToolResult => "the request has no tool result",
            Slot::History => "the request has no history",
        }
    }

    fn value(self, facts: &RequestFacts<'_>) -> Option<String> {
        match self {
            Slot::LastUser => facts.last_user_text().map(str::to_owned),
            Slot::LastToolResult => facts.last_tool_result().map(|r| r.content.clone()),
            Slot::History => Some(facts.history().to_string()),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Piece {
    Literal(String),
    Slot(Slot),
}

/// A parsed template.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Template {
    pieces: Vec<Piece>,
}

impl Template {
    pub(crate) fn parse(text: &str) -> Template {
        let mut pieces = Vec::new();
        let mut literal = String::new();
        let mut rest = text;
        while let Some(brace) = rest.find('{') {
            literal.push_str(&rest[..brace]);
            rest = &rest[brace..];
            match Slot::ALL.into_iter().find(|s| rest.starts_with(s.token())) {
                Some(slot) => {
                    if !literal.is_empty() {
                        pieces.push(Piece::Literal(std::mem::take(&mut literal)));
                    }
                    pieces.push(Piece::Slot(slot));
                    rest = &rest[slot.token().len()..];
                }
                None => {
                    literal.push('{');
                    rest = &rest[1..];
                }
            }
        }
        literal.push_str(rest);
        if !literal.is_empty() {
            pieces.push(Piece::Literal(literal));
        }
        Template { pieces }
    }

    /// The text for this request, or the first slot it has no value for.
    pub(crate) fn render(&self, facts: &RequestFacts<'_>) -> Result<String, Slot> {
        let mut out = String::new();
        for piece in &self.pieces {
            match piece {
                Piece::Literal(text) => out.push_str(text),
                Piece::Slot(slot) => out.push_str(&slot.value(facts).ok_or(*slot)?),
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use skein_core::{Message, ModelRequest, Thread};

    fn render(template: &str, messages: Vec<Message>) -> Result<String, Slot> {
        let request = ModelRequest::new("m", Thread::from_messages(messages));
        Template::parse(template).render(&RequestFacts::new(&request))
    }

    #[test]
    fn placeholders_are_replaced_once_and_other_braces_kept() {
        let out = render(
            r#"{"said": "{last_user}", "n": {history}} {last_usr} {"#,
            vec![Message::user("{history}")],
        );
        assert_eq!(
            out.unwrap(),
            r#"{"said": "{history}", "n": 1} {last_usr} {"#
        );
    }

    #[test]
    fn a_missing_value_names_its_slot() {
        assert_eq!(
            render("x {last_tool_result}", vec![Message::user("q")]),
            Err(Slot::LastToolResult)
        );
        assert_eq!(render("{last_user}", vec![]), Err(Slot::LastUser));
        assert_eq!(render("plain", vec![]).unwrap(), "plain");
    }
}
