/*!
Labels: a name put on nodes, usually turns' answers (`skein label add
NAME TURN…`), to keep a set of interesting turns, select them for a
replay and export them as test cases.

A label is a `labels(name, node, created)` row. It counts as reaching its
node (design invariant 12): deletion and garbage collection keep a
labelled node and everything above it, and their plan counts the kept
messages that are labelled ([`crate::Forgotten::labelled_messages`]);
removing the label lets `skein gc` collect them.

A label's nodes are read a page at a time ([`Store::labelled`]), so a
label on ten thousand turns is never held whole. The SQL is in
sqlite/labels.rs and postgres/labels.rs.

This module declares `Labels`, the backend trait sqlite/labels.rs and
postgres/labels.rs implement, and holds the public operations that call it:
the async ones on `AsyncStore` and their blocking forms on `Store`.
*/

use crate::async_store::AsyncStore;
use crate::backend::BoxFuture;
use crate::error::{Result, StoreError};
use crate::store::Store;
use serde::{Deserialize, Serialize};
use skein_core::NodeId;

/// Labels on nodes: the SQL is in sqlite/labels.rs and postgres/labels.rs.
pub(crate) trait Labels {
    fn add_label<'a>(&'a self, name: &'a str, nodes: &'a [NodeId]) -> BoxFuture<'a, Result<u64>>;
    fn remove_label<'a>(&'a self, name: &'a str, nodes: &'a [NodeId])
    -> BoxFuture<'a, Result<u64>>;
    fn labelled<'a>(
        &'a self,
        name: &'a str,
        after: Option<NodeId>,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<Label>>>;
    fn labels_of(&self, node: NodeId) -> BoxFuture<'_, Result<Vec<String>>>;
    fn label_counts(&self) -> BoxFuture<'_, Result<Vec<LabelCount>>>;
}

/// One labelled node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Label {
    pub name: String,
    pub node: NodeId,
    pub created_ms: i64,
}

/// A label's name and how many nodes carry it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LabelCount {
    pub name: String,
    pub nodes: u64,
}

/// A label name is refused when it is empty or has surrounding spaces or
/// control characters (it is typed on command lines and stored as given).
pub fn check_label_name(name: &str) -> Result<()> {
    let fine = !name.is_empty()
        && name.trim() == name
        && !name.chars().any(char::is_control)
        && name.len() <= 200;
    match fine {
        true => Ok(()),
        false => Err(StoreError::LabelName(name.to_string())),
    }
}

impl Store {
    /// Put the label `name` on `nodes` (each must be stored); returns how
    /// many did not carry it yet. All or nothing.
    pub fn add_label(&self, name: &str, nodes: &[NodeId]) -> Result<u64> {
        self.wait(self.nonblocking().add_label(name, nodes))
    }

    /// Take the label `name` off `nodes`; returns how many carried it.
    pub fn remove_label(&self, name: &str, nodes: &[NodeId]) -> Result<u64> {
        self.wait(self.nonblocking().remove_label(name, nodes))
    }

    /// Up to `limit` nodes labelled `name` after `after` (a node id), in
    /// id order: page through a label with the last node of each page.
    pub fn labelled(&self, name: &str, after: Option<NodeId>, limit: usize) -> Result<Vec<Label>> {
        self.wait(self.nonblocking().labelled(name, after, limit))
    }

    /// The labels of `node`, by name.
    pub fn labels_of(&self, node: NodeId) -> Result<Vec<String>> {
        self.wait(self.nonblocking().labels_of(node))
    }

    /// Every label with its number of nodes, by name.
    pub fn label_counts(&self) -> Result<Vec<LabelCount>> {
        self.wait(self.nonblocking().label_counts())
    }
}

impl AsyncStore<'_> {
    /// [`Store::add_label`].
    pub async fn add_label(&self, name: &str, nodes: &[NodeId]) -> Result<u64> {
        check_label_name(name)?;
        self.store.backend().add_label(name, nodes).await
    }

    /// [`Store::remove_label`].
    pub async fn remove_label(&self, name: &str, nodes: &[NodeId]) -> Result<u64> {
        self.store.backend().remove_label(name, nodes).await
    }

    /// [`Store::labelled`].
    pub async fn labelled(
        &self,
        name: &str,
        after: Option<NodeId>,
        limit: usize,
    ) -> Result<Vec<Label>> {
        self.store.backend().labelled(name, after, limit).await
    }

    /// [`Store::labels_of`].
    pub async fn labels_of(&self, node: NodeId) -> Result<Vec<String>> {
        self.store.backend().labels_of(node).await
    }

    /// [`Store::label_counts`].
    pub async fn label_counts(&self) -> Result<Vec<LabelCount>> {
        self.store.backend().label_counts().await
    }
}

#[cfg(test)]
mod tests {
    use super::check_label_name;

    #[test]
    fn a_label_name_is_refused_empty_padded_or_with_control_characters() {
        assert!(check_label_name("hotel cases").is_ok());
        for bad in ["", " padded", "tab\there", "new\nline"] {
            assert!(check_label_name(bad).is_err(), "{bad:?}");
        }
    }
}
