/*!
Which lane a new node is filed in: the one decision both backends make, in
one place (graph.rs explains lanes).

A node continues its parent's lane when the parent is that lane's deepest
node (and sits one level above it); otherwise (a first message, or a branch
off the middle of a lane) it starts a lane of its own, named after itself:
SQLite names a lane by its first node's `seq`, PostgreSQL by its first
node's id. [`Lanes`] files a sequence of nodes, each after its parent,
remembering only the lanes' deepest nodes, so filing a whole database (a
migration) costs memory in proportion to its lanes, not its nodes.
*/

use std::collections::HashMap;
use std::hash::Hash;

/// Lanes being filed: the deepest node of every lane seen so far, with its
/// lane and depth. `K` names a node, and a lane by its first node.
pub(crate) struct Lanes<K> {
    tips: HashMap<K, (K, i64)>,
}

impl<K: Clone + Eq + Hash> Lanes<K> {
    pub(crate) fn new() -> Lanes<K> {
        Lanes {
            tips: HashMap::new(),
        }
    }

    /// A stored node, filed in `lane` at `depth`, that is its lane's deepest.
    pub(crate) fn stored_tip(&mut self, node: K, lane: K, depth: i64) {
        self.tips.insert(node, (lane, depth));
    }

    /// File `node` (at `depth`, under `parent`), which must come after its
    /// parent: its lane.
    pub(crate) fn file(&mut self, node: K, parent: Option<&K>, depth: i64) -> K {
        let continued = parent.and_then(|parent| match self.tips.get(parent) {
            Some((lane, above)) if *above + 1 == depth => {
                let lane = lane.clone();
                self.tips.remove(parent);
                Some(lane)
            }
            // No parent, a parent whose lane went on without it, or (in a
            // damaged database) a depth that does not follow the parent's:
            // a lane of its own is always consistent.
            _ => None,
        });
        let lane = continued.unwrap_or_else(|| node.clone());
        self.tips.insert(node, (lane.clone(), depth));
        lane
    }
}

#[cfg(test)]
mod tests {
    use super::Lanes;

    #[test]
    fn a_chain_is_one_lane_and_a_second_child_starts_its_own() {
        let mut lanes = Lanes::new();
        assert_eq!(lanes.file(1, None, 0), 1);
        assert_eq!(lanes.file(2, Some(&1), 1), 1);
        assert_eq!(lanes.file(3, Some(&2), 2), 1);
        // A branch off the middle, then its continuation.
        assert_eq!(lanes.file(4, Some(&2), 2), 4);
        assert_eq!(lanes.file(5, Some(&4), 3), 4);
        // The first lane goes on from its tip.
        assert_eq!(lanes.file(6, Some(&3), 3), 1);
        // A second child of the tip that was just continued.
        assert_eq!(lanes.file(7, Some(&3), 3), 7);
    }

    #[test]
    fn stored_tips_are_continued_and_bad_depths_start_a_lane() {
        let mut lanes = Lanes::new();
        lanes.stored_tip(10, 3, 5);
        assert_eq!(lanes.file(11, Some(&10), 6), 3);
        // A parent not known to be a tip (stored, not deepest) is not
        // continued, nor is one whose depth does not fit.
        assert_eq!(lanes.file(12, Some(&9), 5), 12);
        assert_eq!(lanes.file(13, Some(&11), 9), 13);
    }
}
