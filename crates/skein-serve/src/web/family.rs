/*!
A conversation family: the node graph around a conversation, and the
conversations (and, with issue 7, reruns) that mark lines in it, cut into
branches.

Which conversations belong together is read from the graph, not only from
fork records: `skein fork NODE` at a node that is no conversation's head
records the node but no origin conversation, and two conversations started
with the same first messages share nodes without either being forked from
the other. So the family of a conversation is the subtree of its thread's
root node (what `skein tree` draws), the conversations whose heads lie in it,
and any conversation forked from one of those whose own history starts
elsewhere (loaded and shown as another root).

Cutting into branches ([`layout`]) is pure: every line is owned by an
*anchor* (a conversation head; a rerun's answer once reruns are stored),
the oldest anchor at or below a node owns the line through it, and where a
node has several children, the child leading to the current owner
continues the branch while each other child starts a branch of its own,
whose kind comes from its owner (fork, continuation or rerun).
*/

use super::api::FAMILY_MAX;
use super::views::{Branch, BranchKind, ConversationView, Family, FamilyNode, RerunView};
use skein::core::Role;
use skein::store::{Conversation, ConversationId, Result, TreeEntry};
use skein::{NodeId, Store};
use std::collections::{HashMap, HashSet, VecDeque};

/// How many conversations are read when looking for a family's members.
const MEMBER_SCAN: usize = 1_000_000;
/// How many extra histories (members whose nodes lie outside the root's
/// subtree) are loaded at most.
const EXTRA_ROOTS: usize = 64;

/// A node of the graph, as the layout needs it.
#[derive(Clone, Debug)]
pub(crate) struct GraphNode {
    pub id: NodeId,
    pub parent: Option<NodeId>,
    pub depth: u64,
    pub role: Role,
    pub preview: String,
}

/// What marks the end of a line and names it.
#[derive(Clone, Debug)]
pub(crate) struct Anchor {
    pub node: NodeId,
    pub created_ms: i64,
    /// The kind of a branch this anchor owns (unless it is a root branch).
    pub kind: BranchKind,
    pub label: String,
    pub conversation: Option<ConversationId>,
    pub rerun: Option<RerunView>,
}

impl Anchor {
    fn of_conversation(conversation: &Conversation, head: NodeId) -> Anchor {
        let kind = match &conversation.origin {
            Some(origin) if origin.rerun.is_some() => BranchKind::Rerun,
            Some(origin) if origin.node.is_some() || origin.conversation.is_some() => {
                BranchKind::Fork
            }
            _ => BranchKind::Continuation,
        };
        Anchor {
            node: head,
            created_ms: conversation.created_ms,
            kind,
            label: conversation
                .label()
                .map_or_else(|| conversation.id.short().to_string(), str::to_string),
            conversation: Some(conversation.id.clone()),
            rerun: conversation.origin.as_ref().and_then(|origin| {
                origin.rerun.as_ref().map(|id| RerunView {
                    id: id.to_string(),
                    ablation: Vec::new(),
                    verdict: None,
                })
            }),
        }
    }
}

/// The reruns of the family's shown turns, as anchors at their answer
/// nodes (`kind: Rerun`, with the ablation and verdict). [`load`] loads the
/// history of an answer that is not shown yet (a rerun that removed part of
/// the first message starts a root of its own), and [`layout`] gives the
/// line to it.
fn rerun_anchors(
    store: &Store,
    members: &[&Conversation],
    shown: &HashSet<NodeId>,
) -> Result<Vec<Anchor>> {
    let mut anchors = Vec::new();
    let mut seen = HashSet::new();
    for member in members {
        for rerun in store.reruns_of_conversation(&member.id)? {
            let Some(answer) = rerun.answer_head else {
                continue;
            };
            if !shown.contains(&rerun.turn_node) || !seen.insert(rerun.id.clone()) {
                continue;
            }
            anchors.push(Anchor {
                node: answer,
                created_ms: rerun.created_ms,
                kind: BranchKind::Rerun,
                label: format!("rerun without {}", rerun.ablation.join(", ")),
                conversation: None,
                rerun: Some(RerunView {
                    id: rerun.id.to_string(),
                    ablation: rerun.ablation.clone(),
                    verdict: rerun.verdict.clone(),
                }),
            });
        }
    }
    Ok(anchors)
}

/// The family of `focus`, at most `limit` nodes: the focused
/// conversation's latest `limit` messages first (its whole history when it
/// is no longer), then as much of its root's subtree as fits, oldest first,
/// then the histories of members that start elsewhere. Nothing is read
/// beyond what is shown, however large the family.
pub(crate) fn load(store: &Store, focus: &ConversationId, limit: usize) -> Result<Family> {
    let focus = store.conversation(focus)?;
    let Some(head) = focus.head else {
        return Ok(Family {
            focus: focus.id.clone(),
            roots: Vec::new(),
            nodes: Vec::new(),
            conversations: vec![ConversationView::from(&focus)],
            branches: Vec::new(),
            limit,
            max_limit: FAMILY_MAX,
            truncated: false,
        });
    };
    let mut graph = Graph::default();
    // Set when a part of the family could not be shown for lack of room;
    // a shown node whose parent is not shown says so too (checked below).
    let mut cut = false;
    let line = store.ancestry(head, limit)?;
    let root = line
        .first()
        .filter(|entry| entry.parent.is_none())
        .map(|entry| entry.id);
    graph.add_entries(line);
    if let Some(root) = root {
        for entry in store.subtree(root, limit.saturating_add(1))? {
            if graph.contains(entry.id) {
                continue;
            }
            if graph.len() >= limit {
                cut = true;
                break;
            }
            graph.add_entries([entry]);
        }
    }

    let everyone = store.list_conversations(MEMBER_SCAN)?;
    let mut members: Vec<&Conversation> = Vec::new();
    let mut extra_loads = 0;
    // Members are those whose head is shown, then (repeatedly) those forked
    // from a member, whose history is loaded when it is not shown yet.
    loop {
        let ids: HashSet<&ConversationId> = members.iter().map(|member| &member.id).collect();
        let mut joined = Vec::new();
        for conversation in &everyone {
            if ids.contains(&conversation.id) {
                continue;
            }
            let Some(head) = conversation.head else {
                continue;
            };
            let forked_from_member = conversation
                .origin
                .as_ref()
                .and_then(|origin| origin.conversation.as_ref())
                .is_some_and(|from| ids.contains(from));
            if graph.contains(head) {
                joined.push(conversation);
            } else if forked_from_member {
                if graph.load_line(store, head, limit, &mut extra_loads)? {
                    joined.push(conversation);
                } else {
                    cut = true;
                }
            }
        }
        if joined.is_empty() {
            break;
        }
        members.extend(joined);
    }
    members.sort_by(|a, b| a.created_ms.cmp(&b.created_ms).then(a.id.cmp(&b.id)));

    let mut anchors: Vec<Anchor> = members
        .iter()
        .filter_map(|member| {
            member
                .head
                .map(|head| Anchor::of_conversation(member, head))
        })
        .collect();
    let shown: HashSet<NodeId> = graph.nodes.iter().map(|node| node.id).collect();
    for anchor in rerun_anchors(store, &members, &shown)? {
        if !graph.contains(anchor.node)
            && !graph.load_line(store, anchor.node, limit, &mut extra_loads)?
        {
            cut = true;
        }
        anchors.push(anchor);
    }
    let truncated = cut
        || graph
            .nodes
            .iter()
            .any(|node| node.parent.is_some_and(|parent| !graph.contains(parent)));

    let laid = layout(&graph.nodes, &anchors);
    let mut heads: HashMap<NodeId, Vec<ConversationId>> = HashMap::new();
    for member in &members {
        if let Some(head) = member.head {
            heads.entry(head).or_default().push(member.id.clone());
        }
    }
    let nodes = graph
        .nodes
        .into_iter()
        .map(|node| FamilyNode {
            branch: laid.branch_of.get(&node.id).cloned().unwrap_or_default(),
            heads: heads.remove(&node.id).unwrap_or_default(),
            id: node.id,
            parent: node.parent,
            depth: node.depth,
            role: node.role,
            preview: node.preview,
        })
        .collect();
    Ok(Family {
        focus: focus.id.clone(),
        roots: laid.roots,
        nodes,
        conversations: members.into_iter().map(ConversationView::from).collect(),
        branches: laid.branches,
        limit,
        max_limit: FAMILY_MAX,
        truncated,
    })
}

/// The shown nodes, without duplicates, in insertion order.
#[derive(Default)]
struct Graph {
    nodes: Vec<GraphNode>,
    ids: HashSet<NodeId>,
}

impl Graph {
    fn contains(&self, id: NodeId) -> bool {
        self.ids.contains(&id)
    }

    fn len(&self) -> usize {
        self.nodes.len()
    }

    fn add_entries(&mut self, entries: impl IntoIterator<Item = TreeEntry>) {
        for entry in entries {
            if self.ids.insert(entry.id) {
                self.nodes.push(GraphNode {
                    id: entry.id,
                    parent: entry.parent,
                    depth: entry.depth,
                    role: entry.role,
                    preview: entry.preview,
                });
            }
        }
    }

    /// Add the history ending at `head` (its latest nodes, as many as there
    /// is room for under `limit`), counting the loads against
    /// [`EXTRA_ROOTS`]. Whether its head could be shown.
    fn load_line(
        &mut self,
        store: &Store,
        head: NodeId,
        limit: usize,
        loads: &mut usize,
    ) -> Result<bool> {
        let room = limit.saturating_sub(self.len());
        if room == 0 || *loads >= EXTRA_ROOTS {
            return Ok(false);
        }
        *loads += 1;
        self.add_entries(store.ancestry(head, room)?);
        Ok(true)
    }
}

/// Branches, and which branch each node lies on.
pub(crate) struct Layout {
    pub roots: Vec<NodeId>,
    pub branches: Vec<Branch>,
    pub branch_of: HashMap<NodeId, String>,
}

/// Cut the graph into branches (see the module docs). `nodes` may come in
/// any order; children are taken in the order given (oldest first). Anchors
/// on nodes not given are ignored.
pub(crate) fn layout(nodes: &[GraphNode], anchors: &[Anchor]) -> Layout {
    let index: HashMap<NodeId, usize> = nodes
        .iter()
        .enumerate()
        .map(|(i, node)| (node.id, i))
        .collect();
    let mut children: Vec<Vec<usize>> = vec![Vec::new(); nodes.len()];
    let mut roots = Vec::new();
    for (i, node) in nodes.iter().enumerate() {
        match node.parent.and_then(|parent| index.get(&parent)) {
            Some(&parent) => children[parent].push(i),
            None => roots.push(i),
        }
    }

    // The oldest anchor wins; ties go to the one listed first.
    let rank = |a: usize| (anchors[a].created_ms, a);
    let better = |current: Option<usize>, candidate: usize| match current {
        Some(c) if rank(c) <= rank(candidate) => Some(c),
        _ => Some(candidate),
    };
    let mut owner: Vec<Option<usize>> = vec![None; nodes.len()];
    for (a, anchor) in anchors.iter().enumerate() {
        if let Some(&i) = index.get(&anchor.node) {
            owner[i] = better(owner[i], a);
        }
    }
    // Parents before children, then children's owners flow up.
    let mut order = Vec::with_capacity(nodes.len());
    let mut queue: VecDeque<usize> = roots.iter().copied().collect();
    while let Some(i) = queue.pop_front() {
        order.push(i);
        queue.extend(children[i].iter().copied());
    }
    for &i in order.iter().rev() {
        for &child in &children[i] {
            if let Some(a) = owner[child] {
                owner[i] = better(owner[i], a);
            }
        }
    }

    struct Start {
        node: usize,
        parent: Option<String>,
        from: Option<NodeId>,
        kind: BranchKind,
    }
    let mut pending: VecDeque<Start> = roots
        .iter()
        .map(|&node| Start {
            node,
            parent: None,
            from: None,
            kind: BranchKind::Root,
        })
        .collect();
    let mut branches = Vec::new();
    let mut branch_of = HashMap::new();
    while let Some(start) = pending.pop_front() {
        let id = nodes[start.node].id.to_hex();
        let line_owner = owner[start.node];
        let anchor = line_owner.map(|a| &anchors[a]);
        let mut members = Vec::new();
        let mut current = start.node;
        loop {
            members.push(nodes[current].id);
            branch_of.insert(nodes[current].id, id.clone());
            let kids = &children[current];
            let next = match line_owner {
                Some(a) if anchors[a].node == nodes[current].id => None,
                Some(a) => kids.iter().copied().find(|&kid| owner[kid] == Some(a)),
                None => kids.first().copied(),
            };
            for &kid in kids.iter().filter(|&&kid| Some(kid) != next) {
                pending.push_back(Start {
                    node: kid,
                    parent: Some(id.clone()),
                    from: Some(nodes[current].id),
                    kind: owner[kid].map_or(BranchKind::Continuation, |a| anchors[a].kind),
                });
            }
            match next {
                Some(kid) => current = kid,
                None => break,
            }
        }
        branches.push(Branch {
            id,
            kind: start.kind,
            label: anchor.map_or_else(|| "no conversation".to_string(), |a| a.label.clone()),
            parent: start.parent,
            from: start.from,
            nodes: members,
            conversation: anchor.and_then(|a| a.conversation.clone()),
            rerun: anchor.and_then(|a| a.rerun.clone()),
        });
    }
    Layout {
        roots: roots.iter().map(|&i| nodes[i].id).collect(),
        branches,
        branch_of,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use skein::{Message, Thread};

    /// A graph from (name, parent name) pairs; ids are derived from names.
    fn graph(edges: &[(&str, Option<&str>)]) -> (Vec<GraphNode>, HashMap<String, NodeId>) {
        let mut ids = HashMap::new();
        let mut nodes = Vec::new();
        for (name, parent) in edges {
            let parent_id = parent.map(|p| ids[p]);
            let thread = Thread::new().push(Message::user(*name));
            let id = thread.head_id().unwrap();
            ids.insert(name.to_string(), id);
            nodes.push(GraphNode {
                id,
                parent: parent_id,
                depth: 0,
                role: Role::User,
                preview: name.to_string(),
            });
        }
        (nodes, ids)
    }

    fn anchor(node: NodeId, created_ms: i64, kind: BranchKind, label: &str) -> Anchor {
        Anchor {
            node,
            created_ms,
            kind,
            label: label.into(),
            conversation: None,
            rerun: None,
        }
    }

    fn names(branch: &Branch, ids: &HashMap<String, NodeId>) -> Vec<String> {
        let by_id: HashMap<NodeId, &String> = ids.iter().map(|(k, v)| (*v, k)).collect();
        branch
            .nodes
            .iter()
            .map(|id| by_id[id].to_string())
            .collect()
    }

    #[test]
    fn a_fork_leaves_the_line_of_the_older_conversation() {
        // n1 - n2 - n3 - n4 (main), n2 - f3 - f4 (fork)
        let (nodes, ids) = graph(&[
            ("n1", None),
            ("n2", Some("n1")),
            ("n3", Some("n2")),
            ("f3", Some("n2")),
            ("n4", Some("n3")),
            ("f4", Some("f3")),
        ]);
        let anchors = [
            anchor(ids["f4"], 20, BranchKind::Fork, "what-if"),
            anchor(ids["n4"], 10, BranchKind::Continuation, "main"),
        ];
        let laid = layout(&nodes, &anchors);
        assert_eq!(laid.branches.len(), 2);
        let (main, fork) = (&laid.branches[0], &laid.branches[1]);
        assert_eq!(main.kind, BranchKind::Root);
        assert_eq!(main.label, "main");
        assert_eq!(names(main, &ids), ["n1", "n2", "n3", "n4"]);
        assert_eq!(fork.kind, BranchKind::Fork);
        assert_eq!(fork.label, "what-if");
        assert_eq!(fork.from, Some(ids["n2"]));
        assert_eq!(fork.parent.as_deref(), Some(main.id.as_str()));
        assert_eq!(names(fork, &ids), ["f3", "f4"]);
        assert_eq!(laid.branch_of[&ids["f4"]], fork.id);
        assert_eq!(laid.roots, vec![ids["n1"]]);
    }

    #[test]
    fn a_line_ends_at_its_owners_head_and_every_child_branches() {
        // main's head is n2; two forks go on from it.
        let (nodes, ids) = graph(&[
            ("n1", None),
            ("n2", Some("n1")),
            ("a3", Some("n2")),
            ("b3", Some("n2")),
        ]);
        let anchors = [
            anchor(ids["n2"], 1, BranchKind::Continuation, "main"),
            anchor(ids["a3"], 2, BranchKind::Fork, "a"),
            anchor(ids["b3"], 3, BranchKind::Rerun, "b"),
        ];
        let laid = layout(&nodes, &anchors);
        let kinds: Vec<_> = laid
            .branches
            .iter()
            .map(|b| (b.kind, b.label.as_str()))
            .collect();
        assert_eq!(
            kinds,
            [
                (BranchKind::Root, "main"),
                (BranchKind::Fork, "a"),
                (BranchKind::Rerun, "b")
            ]
        );
        assert_eq!(names(&laid.branches[0], &ids), ["n1", "n2"]);
    }

    #[test]
    fn lines_nobody_points_at_are_continuations_without_a_conversation() {
        let (nodes, ids) = graph(&[("n1", None), ("n2", Some("n1")), ("x2", Some("n1"))]);
        let anchors = [anchor(ids["n2"], 1, BranchKind::Fork, "main")];
        let laid = layout(&nodes, &anchors);
        assert_eq!(laid.branches.len(), 2);
        assert_eq!(laid.branches[1].kind, BranchKind::Continuation);
        assert_eq!(laid.branches[1].label, "no conversation");
        assert_eq!(names(&laid.branches[1], &ids), ["x2"]);
    }

    #[test]
    fn separate_roots_are_separate_root_branches_and_nested_forks_nest() {
        let (nodes, ids) = graph(&[
            ("n1", None),
            ("n2", Some("n1")),
            ("f2", Some("n1")),
            ("f3", Some("f2")),
            ("g3", Some("f2")),
            ("r1", None),
        ]);
        let anchors = [
            anchor(ids["n2"], 1, BranchKind::Continuation, "main"),
            anchor(ids["f3"], 2, BranchKind::Fork, "f"),
            anchor(ids["g3"], 3, BranchKind::Fork, "g"),
            anchor(ids["r1"], 4, BranchKind::Rerun, "r"),
        ];
        let laid = layout(&nodes, &anchors);
        let by_label: HashMap<&str, &Branch> = laid
            .branches
            .iter()
            .map(|b| (b.label.as_str(), b))
            .collect();
        assert_eq!(laid.roots, vec![ids["n1"], ids["r1"]]);
        assert_eq!(by_label["r"].kind, BranchKind::Root);
        assert_eq!(names(by_label["f"], &ids), ["f2", "f3"]);
        assert_eq!(names(by_label["g"], &ids), ["g3"]);
        assert_eq!(
            by_label["g"].parent.as_deref(),
            Some(by_label["f"].id.as_str())
        );
        assert_eq!(by_label["g"].from, Some(ids["f2"]));
        // Every node lies on exactly one branch.
        let total: usize = laid.branches.iter().map(|b| b.nodes.len()).sum();
        assert_eq!(total, nodes.len());
    }
}
