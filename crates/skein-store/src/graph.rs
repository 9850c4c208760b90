/*!
The node graph's types, shared by both backends: what an append reports,
a stored node read on its own, an entry of a subtree or ancestry listing
with its one-line preview, and the marking of nodes as stored in a
database once their transaction committed.

Nodes are filed in lanes (the rule is in lanes.rs); sqlite/graph.rs and
postgres/graph.rs append, load and walk them.

This module declares `Graph`, the backend trait sqlite/graph.rs and
postgres/graph.rs implement, and holds the public operations that call it:
the async ones on `AsyncStore` and their blocking forms on `Store`.
*/

use crate::async_store::AsyncStore;
use crate::backend::BoxFuture;
use crate::error::Result;
use crate::store::Store;
use skein_core::{Message, Node, NodeId, Part, Role, StoreKey, Thread};

/// Nodes and threads: the SQL is in sqlite/graph.rs and postgres/graph.rs.
pub(crate) trait Graph {
    #[cfg(any(test, feature = "testkit"))]
    fn append<'a>(&'a self, thread: &'a Thread) -> BoxFuture<'a, Result<AppendReport>>;
    fn load_thread(&self, head: NodeId) -> BoxFuture<'_, Result<Thread>>;
    fn node(&self, id: NodeId) -> BoxFuture<'_, Result<StoredNode>>;
    fn contains(&self, id: NodeId) -> BoxFuture<'_, Result<bool>>;
    fn children(&self, id: NodeId) -> BoxFuture<'_, Result<Vec<NodeId>>>;
    fn nodes_calling<'a>(
        &'a self,
        call_id: &'a str,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<NodeId>>>;
    fn subtree(&self, root: NodeId, limit: usize) -> BoxFuture<'_, Result<Vec<TreeEntry>>>;
    fn ancestry(&self, head: NodeId, limit: usize) -> BoxFuture<'_, Result<Vec<TreeEntry>>>;
}

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

impl AsyncStore<'_> {
    #[cfg(any(test, feature = "testkit"))]
    /// [`Store::append`].
    pub async fn append(&self, thread: &Thread) -> Result<AppendReport> {
        self.store.backend().append(thread).await
    }

    /// [`Store::load_thread`].
    pub async fn load_thread(&self, head: NodeId) -> Result<Thread> {
        self.store.backend().load_thread(head).await
    }

    /// [`Store::node`].
    pub async fn node(&self, id: NodeId) -> Result<StoredNode> {
        self.store.backend().node(id).await
    }

    /// [`Store::contains`].
    pub async fn contains(&self, id: NodeId) -> Result<bool> {
        self.store.backend().contains(id).await
    }

    /// [`Store::children`].
    pub async fn children(&self, id: NodeId) -> Result<Vec<NodeId>> {
        self.store.backend().children(id).await
    }

    /// [`Store::nodes_calling`].
    pub async fn nodes_calling(&self, call_id: &str, limit: usize) -> Result<Vec<NodeId>> {
        self.store.backend().nodes_calling(call_id, limit).await
    }

    /// [`Store::subtree`].
    pub async fn subtree(&self, root: NodeId, limit: usize) -> Result<Vec<TreeEntry>> {
        self.store.backend().subtree(root, limit).await
    }

    /// [`Store::ancestry`].
    pub async fn ancestry(&self, head: NodeId, limit: usize) -> Result<Vec<TreeEntry>> {
        self.store.backend().ancestry(head, limit).await
    }
}

impl Store {
    #[cfg(any(test, feature = "testkit"))]
    /// Store every node of `thread` this database does not hold yet, in one
    /// transaction. Marks the nodes as persisted here once committed.
    pub fn append(&self, thread: &Thread) -> Result<AppendReport> {
        self.wait(self.nonblocking().append(thread))
    }

    /// Load the thread whose head is `head`: one range scan per lane the
    /// thread runs through (PostgreSQL: all in one query).
    pub fn load_thread(&self, head: NodeId) -> Result<Thread> {
        self.wait(self.nonblocking().load_thread(head))
    }

    /// One node by id, without loading its thread.
    pub fn node(&self, id: NodeId) -> Result<StoredNode> {
        self.wait(self.nonblocking().node(id))
    }

    /// Whether the database holds the node.
    pub fn contains(&self, id: NodeId) -> Result<bool> {
        self.wait(self.nonblocking().contains(id))
    }

    /// The nodes whose parent is `id`, oldest first.
    pub fn children(&self, id: NodeId) -> Result<Vec<NodeId>> {
        self.wait(self.nonblocking().children(id))
    }

    /// The stored messages that make a tool call of id `call_id` (at most
    /// `limit`, oldest first): where a call a request carries was made.
    pub fn nodes_calling(&self, call_id: &str, limit: usize) -> Result<Vec<NodeId>> {
        self.wait(self.nonblocking().nodes_calling(call_id, limit))
    }

    /// The subtree under `root` (inclusive): its `limit` nodes nearest the
    /// root (breadth first), in topological order. Reads no further, however
    /// large the subtree.
    pub fn subtree(&self, root: NodeId, limit: usize) -> Result<Vec<TreeEntry>> {
        self.wait(self.nonblocking().subtree(root, limit))
    }

    /// The last `limit` nodes of the thread ending at `head` (the head
    /// included), oldest first, with one-line previews: the whole thread when
    /// it is no longer, so the first entry is the root exactly when its
    /// `parent` is `None`. Reads at most `limit` nodes, however deep the
    /// thread.
    pub fn ancestry(&self, head: NodeId, limit: usize) -> Result<Vec<TreeEntry>> {
        self.wait(self.nonblocking().ancestry(head, limit))
    }
}
