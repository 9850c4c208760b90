/*!
The rule file as written: serde shapes that mirror the TOML exactly, with
unknown keys rejected. [`super::load`] checks and compiles them into rules.
*/

use serde::Deserialize;
use serde::de::{self, Deserializer, SeqAccess, Visitor};
use std::fmt;
use toml::Spanned;

/// The whole file, with each rule kept as a plain table: enough to know
/// where every rule starts and what it is called before checking its keys.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Outline {
    #[serde(default)]
    pub(crate) rules: Vec<Spanned<toml::Table>>,
}

/// The whole file, fully typed.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawScript {
    #[serde(default)]
    pub(crate) rules: Vec<Spanned<RawRule>>,
}

/// One `[[rules]]` table.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRule {
    #[expect(
        dead_code,
        reason = "names are read from the outline; declared so the key is accepted and checked to be a string"
    )]
    pub(crate) name: Option<String>,
    // Conditions.
    pub(crate) system_contains: Option<Texts>,
    pub(crate) not_system_contains: Option<Texts>,
    pub(crate) any_contains: Option<Texts>,
    pub(crate) not_any_contains: Option<Texts>,
    pub(crate) last_user_contains: Option<Texts>,
    pub(crate) not_last_user_contains: Option<Texts>,
    pub(crate) last_user_matches: Option<Texts>,
    pub(crate) previous_assistant_contains: Option<Texts>,
    pub(crate) not_previous_assistant_contains: Option<Texts>,
    pub(crate) tool_offered: Option<Texts>,
    pub(crate) last_role: Option<String>,
    // Actions.
    pub(crate) reply: Option<String>,
    pub(crate) tool_calls: Option<Vec<RawCall>>,
    pub(crate) error: Option<RawError>,
    pub(crate) truncate: Option<String>,
}

/// One entry of `tool_calls`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawCall {
    pub(crate) name: String,
    /// Raw argument text, kept byte for byte; `{}` when omitted.
    #[serde(default = "empty_object")]
    pub(crate) arguments: String,
}

fn empty_object() -> String {
    "{}".to_owned()
}

/// The `error` action's table.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawError {
    pub(crate) kind: String,
    pub(crate) message: Option<String>,
    pub(crate) retry_after_ms: Option<u64>,
    pub(crate) status: Option<u16>,
}

/// A condition value: one string, or an array of strings that must all hold.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Texts(pub(crate) Vec<String>);

impl<'de> Deserialize<'de> for Texts {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Texts, D::Error> {
        struct TextsVisitor;

        impl<'de> Visitor<'de> for TextsVisitor {
            type Value = Texts;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string or an array of strings")
            }

            fn visit_str<E: de::Error>(self, value: &str) -> Result<Texts, E> {
                Ok(Texts(vec![value.to_owned()]))
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Texts, A::Error> {
                let mut texts = Vec::new();
                while let Some(text) = seq.next_element::<String>()? {
                    texts.push(text);
                }
                Ok(Texts(texts))
            }
        }

        deserializer.deserialize_any(TextsVisitor)
    }
}
