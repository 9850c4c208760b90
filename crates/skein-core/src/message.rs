/*!
Roles, parts and messages: the content that nodes of the graph carry.

Every byte a model produced is kept exactly: text is never trimmed, tool-call
arguments are the raw JSON text as received (they may even be invalid JSON:
the model said it, and the history must show it), tool results are kept as
produced.
*/

use serde::{Deserialize, Serialize};

/// Who speaks a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    System,
    User,
    Assistant,
    Tool,
}

impl Role {
    /// The role's stable one-byte code in the canonical encoding.
    pub const fn code(self) -> u8 {
        match self {
            Role::System => 0,
            Role::User => 1,
            Role::Assistant => 2,
            Role::Tool => 3,
        }
    }

    /// The role for a canonical-encoding code.
    pub const fn from_code(code: u8) -> Option<Role> {
        match code {
            0 => Some(Role::System),
            1 => Some(Role::User),
            2 => Some(Role::Assistant),
            3 => Some(Role::Tool),
            _ => None,
        }
    }

    /// The lowercase name used in storage, exports and on the command line.
    pub const fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        }
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Role {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "system" => Ok(Role::System),
            "user" => Ok(Role::User),
            "assistant" => Ok(Role::Assistant),
            "tool" => Ok(Role::Tool),
            other => Err(format!(
                "unknown role `{other}` (expected system, user, assistant or tool)"
            )),
        }
    }
}

/// A tool call as the model produced it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ToolCall {
    /// The call id: the provider's, or for providers skein controls, one
    /// derived from the parent node id and the call's position.
    pub id: String,
    pub name: String,
    /// The arguments exactly as the model wrote them (raw JSON text).
    pub arguments: String,
}

/// The result of executing a tool call.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ToolResult {
    pub call_id: String,
    pub content: String,
    /// The call failed: unknown tool, invalid arguments, a tool error, or a
    /// call the application cancelled. The model sees the content either way.
    #[serde(default)]
    pub is_error: bool,
}

/// Binary content: an image, a document, audio.
#[derive(Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Attachment {
    pub media_type: String,
    #[serde(with = "base64_bytes")]
    pub data: Vec<u8>,
}

impl std::fmt::Debug for Attachment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Attachment")
            .field("media_type", &self.media_type)
            .field("len", &self.data.len())
            .finish()
    }
}

/// One ordered piece of a message.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Part {
    Text {
        text: String,
    },
    ToolCall(ToolCall),
    ToolResult(ToolResult),
    Attachment(Attachment),
    /// A part whose content was erased in place (`skein redact`): the node
    /// keeps its id, because the id never held the payload, only its digest.
    Erased(Erased),
}

/// What stands in an erased part's place: the original part's kind and
/// small fields and the digest of its payload (exactly what its node's id
/// was computed from, so the id still checks), and who erased it, when and
/// why (which the id does not cover).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Erased {
    /// The part that was erased, without its payload.
    pub was: ErasedPart,
    /// The BLAKE3 digest of the erased payload.
    pub digest: crate::id::Digest,
    /// Who erased it, as they said (free text).
    pub erased_by: String,
    /// When, in Unix milliseconds.
    pub erased_at_ms: i64,
    /// Why, as they said (free text).
    pub reason: String,
}

/// The kind and small fields of an erased part: what the node id keeps of
/// it besides its payload's digest.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ErasedPart {
    Text,
    ToolCall { id: String, name: String },
    ToolResult { call_id: String, is_error: bool },
    Attachment { media_type: String },
}

impl Erased {
    /// `part` erased by `erased_by` at `erased_at_ms` for `reason`. An
    /// already erased part stays as it was.
    pub fn part(part: &Part, erased_by: &str, erased_at_ms: i64, reason: &str) -> Part {
        let was = match part {
            Part::Text { .. } => ErasedPart::Text,
            Part::ToolCall(call) => ErasedPart::ToolCall {
                id: call.id.clone(),
                name: call.name.clone(),
            },
            Part::ToolResult(result) => ErasedPart::ToolResult {
                call_id: result.call_id.clone(),
                is_error: result.is_error,
            },
            Part::Attachment(attachment) => ErasedPart::Attachment {
                media_type: attachment.media_type.clone(),
            },
            Part::Erased(_) => return part.clone(),
        };
        Part::Erased(Erased {
            was,
            digest: crate::id::Digest::of(part.payload()),
            erased_by: erased_by.to_string(),
            erased_at_ms,
            reason: reason.to_string(),
        })
    }
}

impl Part {
    pub fn text(text: impl Into<String>) -> Part {
        Part::Text { text: text.into() }
    }

    /// The part's payload: the bytes that enter the encoding through their
    /// digest (text, arguments, result content, attachment data).
    pub fn payload(&self) -> &[u8] {
        match self {
            Part::Text { text } => text.as_bytes(),
            Part::ToolCall(call) => call.arguments.as_bytes(),
            Part::ToolResult(result) => result.content.as_bytes(),
            Part::Attachment(attachment) => &attachment.data,
            Part::Erased(_) => &[],
        }
    }

    /// The digest of the payload, as the node id holds it: an erased part's
    /// is the erased payload's.
    pub fn payload_digest(&self) -> crate::id::Digest {
        match self {
            Part::Erased(erased) => erased.digest,
            other => crate::id::Digest::of(other.payload()),
        }
    }

    /// The part's kind name, as used in docs and exports.
    pub fn kind_name(&self) -> &'static str {
        match self {
            Part::Text { .. } => "text",
            Part::ToolCall(_) => "tool_call",
            Part::ToolResult(_) => "tool_result",
            Part::Attachment(_) => "attachment",
            Part::Erased(_) => "erased",
        }
    }

    pub fn as_text(&self) -> Option<&str> {
        match self {
            Part::Text { text } => Some(text),
            _ => None,
        }
    }
}

impl Message {
    /// Whether any part of the message was erased.
    pub fn is_erased(&self) -> bool {
        self.parts
            .iter()
            .any(|part| matches!(part, Part::Erased(_)))
    }
}

/// A role and its ordered parts.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Message {
    pub role: Role,
    pub parts: Vec<Part>,
}

impl Message {
    pub fn new(role: Role, parts: Vec<Part>) -> Message {
        Message { role, parts }
    }

    /// A message made of one text part.
    pub fn text(role: Role, text: impl Into<String>) -> Message {
        Message::new(role, vec![Part::text(text)])
    }

    pub fn system(text: impl Into<String>) -> Message {
        Message::text(Role::System, text)
    }

    pub fn user(text: impl Into<String>) -> Message {
        Message::text(Role::User, text)
    }

    pub fn assistant(text: impl Into<String>) -> Message {
        Message::text(Role::Assistant, text)
    }

    /// A tool message carrying results.
    pub fn tool_results(results: impl IntoIterator<Item = ToolResult>) -> Message {
        Message::new(
            Role::Tool,
            results.into_iter().map(Part::ToolResult).collect(),
        )
    }

    /// Why the message's first erased part was erased (`None` when no part
    /// was: see [`Erased`]).
    pub fn erased_reason(&self) -> Option<&str> {
        self.parts.iter().find_map(|part| match part {
            Part::Erased(erased) => Some(erased.reason.as_str()),
            _ => None,
        })
    }

    /// The concatenation of the message's text parts, in order.
    pub fn joined_text(&self) -> String {
        let mut out = String::new();
        for text in self.parts.iter().filter_map(Part::as_text) {
            out.push_str(text);
        }
        out
    }

    /// The tool calls in the message, in order.
    pub fn tool_calls(&self) -> impl Iterator<Item = &ToolCall> {
        self.parts.iter().filter_map(|part| match part {
            Part::ToolCall(call) => Some(call),
            _ => None,
        })
    }

    /// The tool results in the message, in order.
    pub fn tool_results_iter(&self) -> impl Iterator<Item = &ToolResult> {
        self.parts.iter().filter_map(|part| match part {
            Part::ToolResult(result) => Some(result),
            _ => None,
        })
    }
}

mod base64_bytes {
    use base64::Engine as _;
    use base64::engine::general_purpose::STANDARD;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(bytes: &[u8], serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&STANDARD.encode(bytes))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<u8>, D::Error> {
        let text = String::deserialize(deserializer)?;
        STANDARD
            .decode(text.as_bytes())
            .map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_serialise_with_a_type_tag_and_keep_raw_arguments() {
        let part = Part::ToolCall(ToolCall {
            id: "c1".into(),
            name: "search".into(),
            arguments: "{ \"q\" :  1 }".into(),
        });
        let json = serde_json::to_string(&part).unwrap();
        assert_eq!(
            json,
            r#"{"type":"tool_call","id":"c1","name":"search","arguments":"{ \"q\" :  1 }"}"#
        );
        let back: Part = serde_json::from_str(&json).unwrap();
        assert_eq!(back, part);
    }

    #[test]
    fn attachments_round_trip_through_base64() {
        let part = Part::Attachment(Attachment {
            media_type: "image/png".into(),
            data: vec![0, 255, 10, 13],
        });
        let json = serde_json::to_string(&part).unwrap();
        assert!(json.contains("\"data\":\"AP8KDQ==\""), "{json}");
        assert_eq!(serde_json::from_str::<Part>(&json).unwrap(), part);
    }

    #[test]
    fn role_names_parse_and_reject_unknown_roles() {
        for role in [Role::System, Role::User, Role::Assistant, Role::Tool] {
            assert_eq!(role.as_str().parse::<Role>().unwrap(), role);
            assert_eq!(Role::from_code(role.code()), Some(role));
        }
        assert!("robot".parse::<Role>().unwrap_err().contains("robot"));
        assert_eq!(Role::from_code(9), None);
    }
}
