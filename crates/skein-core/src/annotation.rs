/*!
Annotations: metadata about parts of a request that is not content.

A cache hint (provider prompt caching) or a source tag (which named context
source a part belongs to) is keyed by (node id, part index). Annotations
travel beside a request and are recorded on the run; they never enter node
identity, so they can move turn to turn without rewriting history.
*/

use crate::id::NodeId;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One part of one node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct PartRef {
    pub node: NodeId,
    pub part: u32,
}

/// Ask the provider to cache the request prefix ending at this part.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum CacheHint {
    /// A short-lived cache entry (Anthropic's `ephemeral`).
    Ephemeral,
}

/// One annotation on a part.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Annotation {
    CacheHint(CacheHint),
    /// The part belongs to the named context source.
    Source(String),
}

/// The annotations of one request, ordered by part. Serialised as a list of
/// `{"node", "part", "annotations"}` entries.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "Vec<Entry>", into = "Vec<Entry>")]
pub struct Annotations {
    entries: BTreeMap<PartRef, Vec<Annotation>>,
}

#[derive(Serialize, Deserialize)]
struct Entry {
    node: NodeId,
    part: u32,
    annotations: Vec<Annotation>,
}

impl From<Vec<Entry>> for Annotations {
    fn from(entries: Vec<Entry>) -> Annotations {
        let mut out = Annotations::new();
        for entry in entries {
            for annotation in entry.annotations {
                out.add(entry.node, entry.part, annotation);
            }
        }
        out
    }
}

impl From<Annotations> for Vec<Entry> {
    fn from(annotations: Annotations) -> Vec<Entry> {
        annotations
            .entries
            .into_iter()
            .map(|(key, annotations)| Entry {
                node: key.node,
                part: key.part,
                annotations,
            })
            .collect()
    }
}

impl Annotations {
    pub fn new() -> Annotations {
        Annotations::default()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Add an annotation to a part (once: adding it again changes nothing).
    pub fn add(&mut self, node: NodeId, part: u32, annotation: Annotation) {
        let list = self.entries.entry(PartRef { node, part }).or_default();
        if !list.contains(&annotation) {
            list.push(annotation);
        }
    }

    /// The annotations of one part.
    pub fn get(&self, node: NodeId, part: u32) -> &[Annotation] {
        self.entries
            .get(&PartRef { node, part })
            .map_or(&[], Vec::as_slice)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&PartRef, &[Annotation])> {
        self.entries
            .iter()
            .map(|(key, list)| (key, list.as_slice()))
    }

    /// The source a part is tagged with, if any.
    pub fn source_of(&self, node: NodeId, part: u32) -> Option<&str> {
        self.get(node, part)
            .iter()
            .find_map(|annotation| match annotation {
                Annotation::Source(source) => Some(source.as_str()),
                _ => None,
            })
    }

    /// Whether the part carries a cache hint.
    pub fn cache_hint(&self, node: NodeId, part: u32) -> Option<CacheHint> {
        self.get(node, part)
            .iter()
            .find_map(|annotation| match annotation {
                Annotation::CacheHint(hint) => Some(*hint),
                _ => None,
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn annotations_are_keyed_by_node_and_part_and_deduplicated() {
        let node = NodeId([1; 32]);
        let mut annotations = Annotations::new();
        annotations.add(node, 0, Annotation::Source("facts".into()));
        annotations.add(node, 0, Annotation::Source("facts".into()));
        annotations.add(node, 1, Annotation::CacheHint(CacheHint::Ephemeral));
        assert_eq!(annotations.get(node, 0).len(), 1);
        assert_eq!(annotations.source_of(node, 0), Some("facts"));
        assert_eq!(annotations.source_of(node, 1), None);
        assert_eq!(annotations.cache_hint(node, 1), Some(CacheHint::Ephemeral));
        let json = serde_json::to_string(&annotations).unwrap();
        assert_eq!(
            serde_json::from_str::<Annotations>(&json).unwrap(),
            annotations
        );
    }
}
