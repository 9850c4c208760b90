/*!
Context sources: named pieces of context an application declares (facts,
retrieved documents, memory entries, tools, tool results), and the hook for
sources only the application can produce.

A static [`Source`] is rendered by skein as one text part of the request's
system message, tagged with the source's id by an annotation. A tool is a
source named by the tool's name: removing it stops offering the tool and
removes its calls and results from the history. A [`SourceHook`] renders
sources that must be produced again on every call (memory retrieval, for
example); it receives the ablation in force and serves live turns, probes,
baselines and fork turns alike.
*/

use serde::{Deserialize, Serialize};
use skein_core::{BoxFuture, Part, Thread};
use std::collections::{BTreeSet, HashMap};
use std::fmt;

/// What kind of context a source is (for reports; removal treats every
/// kind alike).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum SourceKind {
    Fact,
    Document,
    Memory,
    Tool,
    ToolResult,
    Other,
}

impl SourceKind {
    pub fn as_str(self) -> &'static str {
        match self {
            SourceKind::Fact => "fact",
            SourceKind::Document => "document",
            SourceKind::Memory => "memory",
            SourceKind::Tool => "tool",
            SourceKind::ToolResult => "tool result",
            SourceKind::Other => "other",
        }
    }
}

impl SourceKind {
    /// The kind [`SourceKind::as_str`] names (`other` for anything else).
    pub fn parse(text: &str) -> SourceKind {
        match text {
            "fact" => SourceKind::Fact,
            "document" => SourceKind::Document,
            "memory" => SourceKind::Memory,
            "tool" => SourceKind::Tool,
            "tool result" => SourceKind::ToolResult,
            _ => SourceKind::Other,
        }
    }
}

impl fmt::Display for SourceKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A named piece of context rendered as one tagged text part.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Source {
    pub id: String,
    pub kind: SourceKind,
    /// The exact text of the part.
    pub text: String,
}

impl Source {
    pub fn new(id: impl Into<String>, kind: SourceKind, text: impl Into<String>) -> Source {
        Source {
            id: id.into(),
            kind,
            text: text.into(),
        }
    }

    pub fn fact(id: impl Into<String>, text: impl Into<String>) -> Source {
        Source::new(id, SourceKind::Fact, text)
    }

    pub fn document(id: impl Into<String>, text: impl Into<String>) -> Source {
        Source::new(id, SourceKind::Document, text)
    }

    pub fn memory(id: impl Into<String>, text: impl Into<String>) -> Source {
        Source::new(id, SourceKind::Memory, text)
    }
}

/// A set of source ids removed from a request.
pub type Ablation = BTreeSet<String>;

/// Why a hook was called.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Purpose {
    /// A live turn (`send`), on a chat or a fork.
    Live,
    /// A probe of a rerun: the recorded request minus the ablation.
    Probe,
    /// A baseline of a rerun: the recorded request unchanged.
    Baseline,
}

/// What a hook is told about the call it renders sources for.
#[derive(Clone, Debug)]
pub struct HookContext<'a> {
    /// Every source id removed from this call: the chat's persistent
    /// removals plus, for a probe, the rerun's ablation. Sources with these
    /// ids must not be returned (skein drops them if they are).
    pub ablation: &'a Ablation,
    /// The user text of the turn.
    pub user_text: &'a str,
    /// The turn's number, from 0.
    pub turn: usize,
    pub purpose: Purpose,
}

/// A hook's failure, reported with the turn it happened in.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct HookError(pub String);

/// Renders sources that need the application, for every call.
pub trait SourceHook: Send + Sync {
    fn sources<'a>(
        &'a self,
        context: HookContext<'a>,
    ) -> BoxFuture<'a, Result<Vec<Source>, HookError>>;
}

/// A source present in a recorded request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceInfo {
    pub id: String,
    pub kind: SourceKind,
    /// Rendered by the hook (produced again on every probe).
    pub hook: bool,
}

/// The kind of a source a turn's request tags only by annotation, with no
/// layout entry or tool offered under its id: the kind the chat's
/// conversation knows it by (`known`: declared in its layout or recorded by
/// another turn), else a tool result when the request holds calls of a
/// tool by that name, else other. Live turns and loaded turns both name
/// such sources by this rule, so a source keeps one kind across the turns
/// of a chat and across loading.
pub(crate) fn tagged_kind(
    id: &str,
    known: &HashMap<String, SourceKind>,
    request: &Thread,
) -> SourceKind {
    if let Some(kind) = known.get(id) {
        return *kind;
    }
    let calls_tool = request.messages().iter().any(|message| {
        message
            .parts
            .iter()
            .any(|part| matches!(part, Part::ToolCall(call) if call.name == id))
    });
    if calls_tool {
        SourceKind::ToolResult
    } else {
        SourceKind::Other
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use skein_core::{Message, Role, ToolCall};

    #[test]
    fn a_tagged_source_is_named_by_its_known_kind_then_by_the_calls_in_the_request() {
        let call = ToolCall {
            id: "c1".into(),
            name: "quote".into(),
            arguments: "{}".into(),
        };
        let request = Thread::new()
            .push(Message::user("price?"))
            .push(Message::new(Role::Assistant, vec![Part::ToolCall(call)]));
        let known = HashMap::from([("hotel".to_string(), SourceKind::Memory)]);
        assert_eq!(tagged_kind("hotel", &known, &request), SourceKind::Memory);
        assert_eq!(
            tagged_kind("quote", &known, &request),
            SourceKind::ToolResult
        );
        assert_eq!(tagged_kind("weather", &known, &request), SourceKind::Other);
        let declared_too = HashMap::from([("quote".to_string(), SourceKind::Fact)]);
        assert_eq!(
            tagged_kind("quote", &declared_too, &request),
            SourceKind::Fact,
            "what the conversation declared wins"
        );
    }
}
