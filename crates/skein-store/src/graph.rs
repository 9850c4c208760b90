/*!
The node graph's types, shared by both backends: what an append reports,
a stored node read on its own, an entry of a subtree or ancestry listing
with its one-line preview, and the marking of nodes as stored in a
database once their transaction committed.

Nodes are filed in lanes (the rule is in lanes.rs); sqlite/graph.rs and
postgres/graph.rs append, load and walk them.
*/

use skein_core::{Message, Node, NodeId, Part, Role, StoreKey};

/// What an append wrote.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AppendReport {
    /// Nodes newly inserted (0 when the database already held the head).
    pub written: usize,
    pub head: Option<NodeId>,
}

/// One stored node, without its ancestry.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct StoredNode {
    pub id: NodeId,
    pub parent: Option<NodeId>,
    pub depth: u64,
    pub message: Message,
}

/// One node of a subtree, with a one-line preview of its content.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct TreeEntry {
    pub id: NodeId,
    pub parent: Option<NodeId>,
    pub depth: u64,
    pub role: Role,
    pub preview: String,
}

pub(crate) fn mark_all(nodes: &[&Node], key: StoreKey) {
    for node in nodes {
        node.mark_persisted_in(key);
    }
}

/// A one-line summary of a message, at most `width` characters.
pub fn preview(message: &Message, width: usize) -> String {
    let mut text = String::new();
    for part in &message.parts {
        if !text.is_empty() {
            text.push(' ');
        }
        match part {
            Part::Text { text: t } => text.push_str(t),
            Part::ToolCall(call) => text.push_str(&format!("→ {}({})", call.name, call.arguments)),
            Part::ToolResult(result) => {
                let mark = if result.is_error { "✗" } else { "←" };
                text.push_str(&format!("{mark} {}", result.content));
            }
            Part::Attachment(a) => {
                text.push_str(&format!("[{} {} bytes]", a.media_type, a.data.len()));
            }
            Part::Erased(erased) => text.push_str(&format!("[erased: {}]", erased.reason)),
            _ => text.push_str("[part]"),
        }
    }
    let flat: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() <= width {
        flat
    } else {
        let cut: String = flat.chars().take(width.saturating_sub(1)).collect();
        format!("{cut}…")
    }
}
