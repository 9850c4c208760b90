/*!
`Thread`: a whole history, identified by its head node.

A thread is a persistent, `Arc`-linked list from the head back to the root.
Pushing a message and forking are O(1) and share every earlier node; walking
root-to-head is O(depth). Node ids are computed in memory when a message is
pushed, before anything is stored.

Each node also remembers which stores already hold it (by [`StoreKey`]), so
a store appending a thread can stop walking back at the first node it is
known to hold: the cost is proportional to the new nodes, never to the
depth. Marks are set by stores after their commit succeeds. A node also
knows, from the moment it is made, whether it or a node before it holds
an erased part ([`Thread::holds_erased`]), so the check before a thread is
sent does not walk it.
*/

use crate::encoding::node_id;
use crate::id::NodeId;
use crate::message::Message;
use std::sync::{Arc, Mutex};

/// Identifies one database (not one connection to it): a node marked with a
/// key is stored in that database. Nodes are never deleted, so a mark never
/// goes stale.
pub type StoreKey = u64;

/// One message in the graph, linked to its parent.
pub struct Node {
    id: NodeId,
    depth: u64,
    message: Message,
    parent: Option<Arc<Node>>,
    /// Whether this message or one before it holds an erased part, known
    /// when the node is made so that a thread answers it without a walk.
    erased_above: bool,
    persisted_in: Mutex<Marks>,
}

impl Node {
    pub fn id(&self) -> NodeId {
        self.id
    }

    /// Distance from the root (the root has depth 0).
    pub fn depth(&self) -> u64 {
        self.depth
    }

    pub fn message(&self) -> &Message {
        &self.message
    }

    pub fn parent(&self) -> Option<&Arc<Node>> {
        self.parent.as_ref()
    }

    pub fn parent_id(&self) -> Option<NodeId> {
        self.parent.as_ref().map(|parent| parent.id)
    }

    /// Whether the store with this key is known to hold this node (and so,
    /// because stores write parents first, its whole ancestry).
    pub fn is_persisted_in(&self, key: StoreKey) -> bool {
        self.marks().contains(key)
    }

    /// Record that the store with this key holds this node. Stores call this
    /// only after the transaction that wrote it committed.
    pub fn mark_persisted_in(&self, key: StoreKey) {
        self.marks().insert(key);
    }

    fn marks(&self) -> std::sync::MutexGuard<'_, Marks> {
        // A poisoned lock only means a panic elsewhere while pushing a u64.
        self.persisted_in
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// The stores known to hold a node. Nearly every node is in at most one
/// store, so the first mark lives inline: loading a thread marks each of its
/// nodes, and this keeps that from allocating.
#[derive(Default)]
struct Marks {
    first: Option<StoreKey>,
    more: Vec<StoreKey>,
}

impl Marks {
    fn contains(&self, key: StoreKey) -> bool {
        self.first == Some(key) || self.more.contains(&key)
    }

    fn insert(&mut self, key: StoreKey) {
        if self.contains(key) {
            return;
        }
        match self.first {
            None => self.first = Some(key),
            Some(_) => self.more.push(key),
        }
    }
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node")
            .field("id", &self.id)
            .field("depth", &self.depth)
            .field("role", &self.message.role)
            .finish_non_exhaustive()
    }
}

impl Drop for Node {
    // Unlink iteratively: a recursive drop of a 100,000-deep chain would
    // overflow a small task stack.
    fn drop(&mut self) {
        let mut next = self.parent.take();
        while let Some(node) = next {
            match Arc::try_unwrap(node) {
                Ok(mut owned) => next = owned.parent.take(),
                Err(_) => break,
            }
        }
    }
}

/// A history, identified by its head node; empty before the first push.
/// Cloning is O(1).
#[derive(Clone, Default)]
pub struct Thread {
    head: Option<Arc<Node>>,
}

impl Thread {
    /// The empty thread.
    pub fn new() -> Thread {
        Thread { head: None }
    }

    /// A thread whose head is an existing node.
    pub fn from_head(head: Arc<Node>) -> Thread {
        Thread { head: Some(head) }
    }

    /// A new thread with `message` appended. O(1) plus hashing the message;
    /// `self` is unchanged and shares every node with the result.
    pub fn push(&self, message: Message) -> Thread {
        let id = node_id(self.head_id().as_ref(), &message);
        self.push_with_id(id, message)
    }

    /// Append a message whose id is already known, as stores do when they
    /// load a thread they wrote (`verify` recomputes such ids). Passing an id
    /// that is not `node_id(parent, message)` corrupts the thread.
    pub fn push_with_id(&self, id: NodeId, message: Message) -> Thread {
        let depth = self.head.as_ref().map_or(0, |head| head.depth + 1);
        let erased_above = self.holds_erased() || message.is_erased();
        Thread {
            head: Some(Arc::new(Node {
                id,
                depth,
                message,
                parent: self.head.clone(),
                erased_above,
                persisted_in: Mutex::new(Marks::default()),
            })),
        }
    }

    /// Whether a message of the thread holds an erased part. O(1).
    pub fn holds_erased(&self) -> bool {
        self.head.as_ref().is_some_and(|head| head.erased_above)
    }

    /// Append several messages in order.
    pub fn extend(&self, messages: impl IntoIterator<Item = Message>) -> Thread {
        messages
            .into_iter()
            .fold(self.clone(), |thread, message| thread.push(message))
    }

    /// A thread from messages, root first.
    pub fn from_messages(messages: impl IntoIterator<Item = Message>) -> Thread {
        Thread::new().extend(messages)
    }

    pub fn head(&self) -> Option<&Arc<Node>> {
        self.head.as_ref()
    }

    pub fn head_id(&self) -> Option<NodeId> {
        self.head.as_ref().map(|head| head.id)
    }

    pub fn is_empty(&self) -> bool {
        self.head.is_none()
    }

    /// Number of messages: O(1).
    pub fn len(&self) -> usize {
        self.head.as_ref().map_or(0, |head| head.depth as usize + 1)
    }

    /// The thread without its head message. O(1).
    pub fn parent(&self) -> Thread {
        Thread {
            head: self.head.as_ref().and_then(|head| head.parent.clone()),
        }
    }

    /// Nodes from the head back to the root, lazily.
    pub fn ancestors(&self) -> Ancestors<'_> {
        Ancestors {
            next: self.head.as_deref(),
        }
    }

    /// Nodes from the root to the head. O(depth).
    pub fn nodes(&self) -> Vec<&Node> {
        let mut nodes: Vec<&Node> = self.ancestors().collect();
        nodes.reverse();
        nodes
    }

    /// Messages from the root to the head. O(depth).
    pub fn messages(&self) -> Vec<&Message> {
        self.nodes().into_iter().map(Node::message).collect()
    }

    /// The sub-thread whose head is `id`, if `id` is on this thread: fork
    /// from any earlier node without touching the store.
    pub fn at(&self, id: NodeId) -> Option<Thread> {
        let mut cursor = self.head.as_ref();
        while let Some(node) = cursor {
            if node.id == id {
                return Some(Thread::from_head(node.clone()));
            }
            cursor = node.parent.as_ref();
        }
        None
    }
}

impl std::fmt::Debug for Thread {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Thread")
            .field("head", &self.head_id())
            .field("len", &self.len())
            .finish()
    }
}

/// Equal threads have equal heads: the head id commits to the whole history.
impl PartialEq for Thread {
    fn eq(&self, other: &Thread) -> bool {
        self.head_id() == other.head_id()
    }
}

impl Eq for Thread {}

/// Iterator from a node back to the root.
pub struct Ancestors<'a> {
    next: Option<&'a Node>,
}

impl<'a> Iterator for Ancestors<'a> {
    type Item = &'a Node;
    fn next(&mut self) -> Option<&'a Node> {
        let node = self.next?;
        self.next = node.parent.as_deref();
        Some(node)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::Role;

    #[test]
    fn a_thread_knows_whether_a_message_of_it_is_erased_without_a_walk() {
        let clean = Thread::from_messages([Message::system("s"), Message::user("a")]);
        assert!(!clean.holds_erased());
        let secret = Message::user("the code is 4417");
        let erased = Message::new(
            Role::User,
            secret
                .parts
                .iter()
                .map(|part| crate::message::Erased::part(part, "ana", 1, "a secret"))
                .collect(),
        );
        let below = clean.push(erased).push(Message::assistant("noted"));
        assert!(below.holds_erased(), "an erased message above the head");
        assert!(!below.parent().parent().holds_erased());
        assert!(!Thread::new().holds_erased());
    }

    #[test]
    fn push_shares_the_prefix_and_leaves_the_original_alone() {
        let base = Thread::from_messages([Message::system("s"), Message::user("a")]);
        let left = base.push(Message::assistant("x"));
        let right = base.push(Message::assistant("y"));
        assert_eq!(base.len(), 2);
        assert_eq!(left.len(), 3);
        assert!(Arc::ptr_eq(
            left.head().unwrap().parent().unwrap(),
            right.head().unwrap().parent().unwrap()
        ));
        assert_ne!(left.head_id(), right.head_id());
        assert_eq!(left.parent(), base);
    }

    #[test]
    fn equal_histories_have_equal_heads() {
        let messages = [
            Message::system("s"),
            Message::user("a"),
            Message::assistant("b"),
        ];
        assert_eq!(
            Thread::from_messages(messages.clone()).head_id(),
            Thread::from_messages(messages).head_id()
        );
    }

    #[test]
    fn nodes_iterate_root_to_head() {
        let thread = Thread::from_messages((0..5).map(|i| Message::user(i.to_string())));
        let texts: Vec<String> = thread.messages().iter().map(|m| m.joined_text()).collect();
        assert_eq!(texts, ["0", "1", "2", "3", "4"]);
        assert_eq!(thread.nodes()[0].depth(), 0);
        assert_eq!(thread.head().unwrap().depth(), 4);
        assert!(
            thread
                .nodes()
                .iter()
                .all(|n| n.message().role == Role::User)
        );
    }

    #[test]
    fn at_finds_earlier_nodes_only() {
        let thread = Thread::from_messages((0..5).map(|i| Message::user(i.to_string())));
        let middle = thread.nodes()[2].id();
        assert_eq!(thread.at(middle).unwrap().len(), 3);
        let other = Thread::from_messages([Message::user("elsewhere")]);
        assert!(thread.at(other.head_id().unwrap()).is_none());
    }

    #[test]
    fn persistence_marks_are_per_store() {
        let thread = Thread::from_messages((0..3).map(|i| Message::user(i.to_string())));
        let node = thread.head().unwrap();
        assert!(!node.is_persisted_in(7));
        node.mark_persisted_in(7);
        node.mark_persisted_in(7);
        assert!(node.is_persisted_in(7));
        assert!(!node.is_persisted_in(8), "marks are per store");
        for key in [8, 9, 8, 7] {
            node.mark_persisted_in(key);
        }
        assert!([7, 8, 9].iter().all(|&key| node.is_persisted_in(key)));
        assert!(!node.is_persisted_in(10));
        assert!(
            !thread.nodes()[0].is_persisted_in(7),
            "marking a node marks only that node"
        );
    }

    #[test]
    fn dropping_a_very_deep_thread_does_not_overflow_the_stack() {
        let handle = std::thread::Builder::new()
            .stack_size(256 * 1024)
            .spawn(|| {
                let mut thread = Thread::new();
                let message = Message::user("x");
                for i in 0..200_000u32 {
                    let mut id = [0u8; 32];
                    id[..4].copy_from_slice(&i.to_le_bytes());
                    thread = thread.push_with_id(NodeId(id), message.clone());
                }
                drop(thread);
            })
            .unwrap();
        handle.join().unwrap();
    }
}
