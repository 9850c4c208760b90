/*!
[`ConversationSettings`]: what a store keeps of a conversation besides its
bookmark, in one typed schema every layer shares: the model it runs on, the
tools it offers by name, its chain limit, its title, and what recorded chats
and the proxy add. Never hooks, never credentials.

The stored form is JSON; keys this build does not know are kept in `extra`
and written back unchanged, so an older skein never drops what a newer one
stored.
*/

use serde::{Deserialize, Serialize};

/// A conversation's stored settings.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConversationSettings {
    /// The model by name (`smollm2`, `openai:gpt-4o-mini`...), or the
    /// profile's model when `profile` is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The configured engine profile, when the conversation runs on one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    /// The tools every turn offers, by name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<String>,
    /// At most this many model calls per tool loop.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chain_limit: Option<u32>,
    /// A title for listings when the conversation has no name: its first
    /// prompt, shortened.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Present when the conversation is a recorded chat.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recorded: Option<RecordedSettings>,
    /// The conversation was recorded by the proxy.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub proxy: bool,
    /// The recording proxy's keyed client whose request made the
    /// conversation (a name from the proxy's client keys): only that
    /// client's requests may continue, branch or join it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<String>,
    /// Where an imported conversation came from (`llm`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub imported_from: Option<String>,
    /// The `llm` thread an imported conversation was made from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub llm_thread: Option<String>,
    /// Keys this build does not know, kept as they were.
    #[serde(flatten)]
    pub extra: serde_json::Map<String, serde_json::Value>,
}

/// What a recorded chat keeps: its source layout (the system text and the
/// sources rendered into every turn) and what is removed from it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordedSettings {
    /// Sources removed from every turn (a fork from a rerun carries its
    /// removals forward).
    #[serde(default)]
    pub removed: Vec<String>,
    /// The system text, the first part of every turn's system message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system: Option<String>,
    /// The declared sources, in order, each a tagged part of the system
    /// message after the system text.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sources: Vec<StoredSource>,
}

/// A declared source as a recorded chat stores it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredSource {
    pub id: String,
    /// `fact`, `document`, `memory`...
    pub kind: String,
    pub text: String,
}

/// The longest title kept, in characters.
pub const TITLE_CHARS: usize = 60;

impl ConversationSettings {
    /// Read stored settings. An empty or `null` value is the defaults.
    pub fn from_json(text: &str) -> Result<ConversationSettings, serde_json::Error> {
        match text.trim() {
            "" | "null" => Ok(ConversationSettings::default()),
            text => serde_json::from_str(text),
        }
    }

    /// The stored form.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("settings are plain data")
    }

    /// A title made from a conversation's first prompt: its first line,
    /// whitespace collapsed, at most [`TITLE_CHARS`] characters (with `…`
    /// when cut). `None` for a prompt with no visible text.
    pub fn title_from(prompt: &str) -> Option<String> {
        let line = prompt
            .lines()
            .map(str::trim)
            .find(|line| !line.is_empty())?;
        let words: Vec<&str> = line.split_whitespace().collect();
        let collapsed = words.join(" ");
        let mut chars = collapsed.chars();
        let title: String = chars.by_ref().take(TITLE_CHARS).collect();
        Some(if chars.next().is_some() {
            format!("{}…", title.trim_end())
        } else {
            title
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_shape_stored_before_typed_settings_reads_and_unknown_keys_survive() {
        let facade: ConversationSettings =
            serde_json::from_str(r#"{"model":"echo","tools":["skein_time"],"chain_limit":5}"#)
                .unwrap();
        assert_eq!(facade.model.as_deref(), Some("echo"));
        assert_eq!(facade.tools, ["skein_time"]);
        assert_eq!(facade.chain_limit, Some(5));

        let recorded = ConversationSettings::from_json(
            r#"{"recorded":{"version":1,"removed":["weather"]},"model":"smollm2"}"#,
        )
        .unwrap();
        assert_eq!(recorded.recorded.unwrap().removed, ["weather"]);

        let proxy = ConversationSettings::from_json(r#"{"model":"echo","proxy":true}"#).unwrap();
        assert!(proxy.proxy);

        let future =
            ConversationSettings::from_json(r#"{"model":"echo","shiny":{"a":1}}"#).unwrap();
        assert_eq!(future.to_json(), r#"{"model":"echo","shiny":{"a":1}}"#);

        assert_eq!(
            ConversationSettings::from_json("null").unwrap(),
            ConversationSettings::default()
        );
        assert_eq!(ConversationSettings::default().to_json(), "{}");
    }

    #[test]
    fn titles_take_the_first_visible_line_and_cut_long_ones() {
        assert_eq!(
            ConversationSettings::title_from("\n  What is   the capital\nof France?").as_deref(),
            Some("What is the capital")
        );
        assert_eq!(ConversationSettings::title_from(" \n\t"), None);
        let long = "word ".repeat(40);
        let title = ConversationSettings::title_from(&long).unwrap();
        assert!(title.ends_with('…'));
        assert!(title.chars().count() <= TITLE_CHARS + 1);
    }
}
