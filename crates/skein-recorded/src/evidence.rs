/*!
A recorded turn's frozen evidence: the exact rendered request (a thread and
its annotations) and the tools offered, the sources it held, the final
reply and the whole tool loop that led to it, the runs with their events
and usage. It is captured when `send` returns and never changes: later
turns, reruns and forks only read it.
*/

use crate::source::{Ablation, SourceInfo};
use skein_core::{Annotations, Message, NodeId, Part, Thread, ToolSpec, Usage};
use skein_engine::Event;
use skein_store::RunId;

/// One recorded turn.
#[derive(Clone, Debug)]
pub struct Turn {
    pub(crate) index: usize,
    pub(crate) user_text: String,
    pub(crate) request: Thread,
    pub(crate) annotations: Annotations,
    pub(crate) tools: Vec<ToolSpec>,
    pub(crate) sources: Vec<SourceInfo>,
    pub(crate) removed: Ablation,
    pub(crate) thread: Thread,
    pub(crate) runs: Vec<RunId>,
    pub(crate) events: Vec<Event>,
    pub(crate) usage: Usage,
}

impl Turn {
    /// The turn's number, from 0.
    pub fn index(&self) -> usize {
        self.index
    }

    /// What the user said.
    pub fn user_text(&self) -> &str {
        &self.user_text
    }

    /// The exact request of the turn's first model call: what every probe
    /// and baseline replays.
    pub fn request(&self) -> &Thread {
        &self.request
    }

    /// The request's annotations (source tags, cache hints).
    pub fn annotations(&self) -> &Annotations {
        &self.annotations
    }

    /// The tools offered on the turn, exactly.
    pub fn tools(&self) -> &[ToolSpec] {
        &self.tools
    }

    /// The sources present in the request.
    pub fn sources(&self) -> &[SourceInfo] {
        &self.sources
    }

    /// The chat's persistent removals in force when the turn ran.
    pub fn removed(&self) -> &Ablation {
        &self.removed
    }

    /// The request, the tool loop and the final reply.
    pub fn thread(&self) -> &Thread {
        &self.thread
    }

    /// The final assistant message.
    pub fn reply(&self) -> &Message {
        self.thread
            .head()
            .expect("a turn ends with its reply")
            .message()
    }

    /// The final reply's text.
    pub fn text(&self) -> String {
        self.reply().joined_text()
    }

    /// The final reply's node: how the CLI names a turn.
    pub fn node(&self) -> NodeId {
        self.thread.head_id().expect("a turn ends with its reply")
    }

    /// The runs of the turn (one per model call of its tool loop), in order.
    pub fn runs(&self) -> &[RunId] {
        &self.runs
    }

    /// The runs' observation events, in order (loaded back with the turn
    /// from the runs that stored them; an event this build cannot read is
    /// left out).
    pub fn events(&self) -> &[Event] {
        &self.events
    }

    /// The usage of all the turn's runs together.
    pub fn usage(&self) -> Usage {
        self.usage
    }

    /// The tool loop's intermediate outputs, one text per message between
    /// the request and the final reply: each non-final assistant message
    /// (its text and calls) and each tool message (its results).
    pub fn intermediate_texts(&self) -> Vec<String> {
        let nodes = self.thread.nodes();
        let from = self.request.len();
        let to = nodes.len().saturating_sub(1);
        nodes[from.min(to)..to]
            .iter()
            .map(|node| message_text(node.message()))
            .filter(|text| !text.is_empty())
            .collect()
    }
}

/// A message's text for embedding: text parts, calls as `name(arguments)`
/// and results' content, one per line.
pub(crate) fn message_text(message: &Message) -> String {
    let mut lines = Vec::new();
    for part in &message.parts {
        match part {
            Part::Text { text } => lines.push(text.clone()),
            Part::ToolCall(call) => lines.push(format!("{}({})", call.name, call.arguments)),
            Part::ToolResult(result) => lines.push(result.content.clone()),
            _ => {}
        }
    }
    lines.join("\n")
}
