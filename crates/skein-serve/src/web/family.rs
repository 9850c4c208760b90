/*!
A conversation family for the page: the library's family
([`skein::family`], one meaning for every surface: members joined by
origin, reruns on the turns they re-ran, replayed answers on the turns
they re-sent, and conversations that merely
share messages by content), its nodes ([`skein::Family::graph`]), cut into
branches.

Cutting into branches ([`layout`]) is pure: every line is owned by an
*anchor* (a member's head, a rerun's or replayed turn's answer, a
sharer's head), the first anchor at or below a node owns the line through
it (members, reruns and replays
before sharers, then the oldest), and where a node has several children,
the child leading to the current owner continues the branch while each
other child starts a branch of its own, whose kind comes from its owner
(fork, rerun, replay, shares; continuation when no anchor owns it).
*/

use super::api::FAMILY_MAX;
use super::views::{
    Branch, BranchKind, ConversationView, Family, FamilyNode, ReplayView, RerunView, TotalsView,
};
use skein::conversation::family::{Joined, Member};
use skein::core::price::PriceTable;
use skein::core::usage::Totals;
use skein::store::{ConversationId, Result, StoreError, TreeEntry, UsageScope};
use skein::{NodeId, Store};
use std::collections::{HashMap, HashSet, VecDeque};

/// A node of the graph, as the layout needs it.
pub(crate) type GraphNode = TreeEntry;

/// What marks the end of a line and names it.
#[derive(Clone, Debug)]
pub(crate) struct Anchor {
    pub node: NodeId,
    /// Members, reruns and replays (0) own a line before sharers (1).
    pub tier: u8,
    pub created_ms: i64,
    /// The kind of a branch this anchor owns (unless it is a root branch).
    pub kind: BranchKind,
    pub label: String,
    pub conversation: Option<ConversationId>,
    pub rerun: Option<RerunView>,
    pub replay: Option<ReplayView>,
}

impl Anchor {
    fn of_conversation(
        conversation: &skein::store::ConversationRecord,
        head: NodeId,
        kind: BranchKind,
    ) -> Anchor {
        Anchor {
            node: head,
            tier: u8::from(kind == BranchKind::Shares),
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
                    turn_node: None,
                })
            }),
            replay: None,
        }
    }

    fn of_member(member: &Member, head: NodeId) -> Anchor {
        let kind = match member.joined {
            Joined::Rerun { .. } => BranchKind::Rerun,
            Joined::Branch { .. } => BranchKind::Fork,
            _ => BranchKind::Continuation,
        };
        Anchor::of_conversation(&member.conversation, head, kind)
    }
}

/// The family of `focus`, at most `limit` nodes (see
/// [`skein::Family::graph`]): nothing is read beyond what is shown.
pub(crate) async fn load(
    store: &Store,
    focus: &ConversationId,
    limit: usize,
    prices: &PriceTable,
) -> Result<Family> {
    let family = skein::family(store, focus).await?;
    let graph = family.graph(store, limit).await?;
    let shown: HashSet<NodeId> = graph.nodes.iter().map(|node| node.id).collect();

    let mut anchors: Vec<Anchor> = family
        .members
        .iter()
        .filter_map(|member| {
            member
                .conversation
                .head
                .map(|head| Anchor::of_member(member, head))
        })
        .collect();
    for rerun in family
        .reruns
        .iter()
        .filter(|rerun| shown.contains(&rerun.turn_node))
    {
        let Some(answer) = rerun.answer_head else {
            continue;
        };
        anchors.push(Anchor {
            node: answer,
            tier: 0,
            created_ms: rerun.created_ms,
            kind: BranchKind::Rerun,
            label: format!("rerun without {}", rerun.ablation.join(", ")),
            conversation: None,
            rerun: Some(RerunView {
                id: rerun.id.to_string(),
                ablation: rerun.ablation.clone(),
                verdict: rerun.verdict.clone(),
                turn_node: Some(rerun.turn_node),
            }),
            replay: None,
        });
    }
    for turn in family
        .replayed
        .iter()
        .filter(|turn| shown.contains(&turn.turn_node))
    {
        let Some(answer) = turn.answer_head else {
            continue;
        };
        let result = skein::recorded::replay::result_of(turn).to_string();
        anchors.push(Anchor {
            node: answer,
            tier: 0,
            created_ms: turn.finished_ms.unwrap_or(i64::MAX),
            kind: BranchKind::Replay,
            label: format!("replay {} · {result}", turn.replay.short()),
            conversation: None,
            rerun: None,
            replay: Some(ReplayView {
                id: turn.replay.to_string(),
                result,
                turn_node: turn.turn_node,
            }),
        });
    }
    anchors.extend(family.shares.iter().filter_map(|sharer| {
        sharer
            .conversation
            .head
            .map(|head| Anchor::of_conversation(&sharer.conversation, head, BranchKind::Shares))
    }));

    let laid = layout(&graph.nodes, &anchors);
    let mut heads: HashMap<NodeId, Vec<ConversationId>> = HashMap::new();
    let conversations = family
        .members
        .iter()
        .map(|member| &member.conversation)
        .chain(family.shares.iter().map(|sharer| &sharer.conversation));
    for conversation in conversations {
        if let Some(head) = conversation.head {
            heads.entry(head).or_default().push(conversation.id.clone());
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
        focus: family.focus.clone(),
        roots: laid.roots,
        nodes,
        conversations: family
            .members
            .iter()
            .map(|member| ConversationView::from(&member.conversation))
            .collect(),
        more_conversations: family.more_members,
        shares: family
            .shares
            .iter()
            .map(|sharer| ConversationView::from(&sharer.conversation))
            .collect(),
        more_shares: family.more_shares,
        branches: laid.branches,
        limit,
        max_limit: FAMILY_MAX,
        truncated: graph.truncated,
        usage: TotalsView::priced(&family_usage(store, focus).await?, prices),
    })
}

/// The usage of the whole family, from the store's one definition of it
/// (which runs, each once), read off the async runtime's threads.
async fn family_usage(store: &Store, focus: &ConversationId) -> Result<Totals> {
    let (store, scope) = (store.clone(), UsageScope::Family(focus.clone()));
    tokio::task::spawn_blocking(move || store.usage(&scope))
        .await
        .map_err(|join| StoreError::Task(format!("the usage read stopped: {join}")))?
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

    // Members and reruns before sharers, then the oldest; ties go to the
    // one listed first.
    let rank = |a: usize| (anchors[a].tier, anchors[a].created_ms, a);
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
            replay: anchor.and_then(|a| a.replay.clone()),
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
                role: skein::Role::User,
                preview: name.to_string(),
            });
        }
        (nodes, ids)
    }

    fn anchor(node: NodeId, created_ms: i64, kind: BranchKind, label: &str) -> Anchor {
        Anchor {
            node,
            tier: u8::from(kind == BranchKind::Shares),
            created_ms,
            kind,
            label: label.into(),
            conversation: None,
            rerun: None,
            replay: None,
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
    fn a_sharer_never_owns_a_members_line_however_old() {
        // n1 - n2 - n3 (the member), n2 - s3 (an older lookalike).
        let (nodes, ids) = graph(&[
            ("n1", None),
            ("n2", Some("n1")),
            ("n3", Some("n2")),
            ("s3", Some("n2")),
        ]);
        let anchors = [
            anchor(ids["s3"], 1, BranchKind::Shares, "lookalike"),
            anchor(ids["n3"], 9, BranchKind::Continuation, "member"),
        ];
        let laid = layout(&nodes, &anchors);
        assert_eq!(laid.branches.len(), 2);
        assert_eq!(laid.branches[0].label, "member");
        assert_eq!(names(&laid.branches[0], &ids), ["n1", "n2", "n3"]);
        assert_eq!(laid.branches[1].kind, BranchKind::Shares);
        assert_eq!(laid.branches[1].label, "lookalike");
        assert_eq!(laid.branches[1].from, Some(ids["n2"]));
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
