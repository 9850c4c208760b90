/*!
A conversation's family: the one meaning `skein tree`, the web view and
anything else that draws a conversation's relatives share.

- **Members** are joined by origin. A fork, a reply to an earlier message
  (a branch), a turn that lost its race and branched, and a fork from a
  rerun's counterfactual answer each name the conversation they came from
  ([`Origin::conversation`](skein_core::Origin)); the family follows those
  links up to the first conversation and back down to every conversation
  that descends from it.
- **Reruns** of the members' turns, each attached to the turn it re-ran
  (its assistant node, [`RerunRecord::turn_node`]).
- **Replayed answers** of the members' turns (`skein replay`), each
  attached to the turn it re-sent ([`ReplayTurn::turn_node`]), the newest
  [`REPLAYED_MAX`].
- **Sharers** are conversations that are no members but share messages
  with one *by content*. The graph stores an equal history once, so two
  conversations that both began "hello" on a deterministic model pass
  through the same nodes, and so does a proxy client that re-sent an edited
  history (recorded as starting at the stored node, naming no
  conversation). Neither continues the other: they are listed as sharing,
  never as a member's continuation.

Reading a family costs what the family holds: [`Store::family`] follows
indexed origin links and finds sharers by their thread's first node, and
[`Family::graph`] reads the members' own lines, never the database.
*/

use skein_core::{ConversationId, NodeId, RerunId};
use skein_store::{
    AsyncStore, ConversationRecord, FamilyLimits, ReplayTurn, RerunRecord, Rooted, Store,
    StoreError, TreeEntry,
};
use std::collections::{HashMap, HashSet};

/// The most members a family reads besides the asked conversation's own
/// line of origins ([`Family::more_members`] says when there are more).
pub const MEMBERS_MAX: usize = 10_000;
/// The most sharers a family lists, newest first
/// ([`Family::more_shares`] says when there are more).
pub const SHARES_MAX: usize = 100;
/// The most replayed answers of its turns a family holds, newest first.
pub const REPLAYED_MAX: usize = 500;
/// The most member lines, rerun answers and further trees
/// [`Family::graph`] reads one by one.
const LINE_LOADS_MAX: usize = 256;

/// A conversation's family (see the module docs).
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Family {
    /// The conversation asked about.
    pub focus: ConversationId,
    /// The members: the first conversation of the origin links first, then
    /// each after the one it came from, oldest first. The focus is one.
    pub members: Vec<Member>,
    /// The family has more than [`MEMBERS_MAX`] other members.
    pub more_members: bool,
    /// The reruns of the members' turns, oldest first.
    pub reruns: Vec<RerunRecord>,
    /// The replayed turns of the members' turns that have an answer,
    /// newest first, at most [`REPLAYED_MAX`].
    pub replayed: Vec<ReplayTurn>,
    /// Conversations that share messages with a member by content, newest
    /// first.
    pub shares: Vec<Sharer>,
    /// More conversations share messages than [`SHARES_MAX`].
    pub more_shares: bool,
}

/// A conversation joined to the family by origin.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Member {
    pub conversation: ConversationRecord,
    pub joined: Joined,
    /// The first node of its thread (`None` while it has no messages).
    pub root: Option<NodeId>,
}

/// How a member joined its family.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Joined {
    /// The first conversation of the origin links: it names no stored
    /// conversation it came from.
    First,
    /// Branched from conversation `from` at node `at`: a fork, a reply to
    /// an earlier message, or a turn that lost a race.
    Branch {
        from: ConversationId,
        at: Option<NodeId>,
    },
    /// Forked from the counterfactual answer of `rerun`, a rerun of a turn
    /// of `from`.
    Rerun {
        from: ConversationId,
        at: Option<NodeId>,
        rerun: RerunId,
    },
}

/// A conversation that is no member but shares messages with one by
/// content.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Sharer {
    pub conversation: ConversationRecord,
    /// The first node it shares with the family (its thread's first node,
    /// which is a member's first node too).
    pub root: NodeId,
}

/// The nodes [`Family::graph`] shows.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct FamilyGraph {
    /// Each node once: the focus's latest messages first, then the other
    /// members' lines and the reruns' answers, then the rest of the trees
    /// they start, nearest the first message first.
    pub nodes: Vec<TreeEntry>,
    /// Part of the family is not shown for lack of room. A node whose
    /// `parent` is set but not shown starts where earlier messages are cut.
    pub truncated: bool,
}

/// The family of conversation `id` (see the module docs), read through the
/// store's async API. [`StoreError::ConversationNotFound`] when `id` is not
/// stored.
pub async fn family(store: &Store, id: &ConversationId) -> Result<Family, StoreError> {
    let limits = FamilyLimits {
        members: MEMBERS_MAX,
        shares: SHARES_MAX,
    };
    let rows = store.nonblocking().family(id, limits).await?;
    let stored: HashSet<ConversationId> = rows
        .members
        .iter()
        .map(|row| row.conversation.id.clone())
        .collect();
    let ids: Vec<ConversationId> = stored.iter().cloned().collect();
    let replayed = store.nonblocking().replayed_in(&ids, REPLAYED_MAX).await?;
    let members = rows
        .members
        .into_iter()
        .map(|Rooted { conversation, root }| Member {
            joined: joined(&conversation, &stored),
            conversation,
            root,
        })
        .collect();
    let shares = rows
        .shares
        .into_iter()
        .filter_map(|Rooted { conversation, root }| root.map(|root| Sharer { conversation, root }))
        .collect();
    Ok(Family {
        focus: id.clone(),
        members,
        more_members: rows.more_members,
        reruns: rows.reruns,
        replayed,
        shares,
        more_shares: rows.more_shares,
    })
}

/// How `conversation` joined a family whose members are `stored`.
fn joined(conversation: &ConversationRecord, stored: &HashSet<ConversationId>) -> Joined {
    let Some(origin) = &conversation.origin else {
        return Joined::First;
    };
    match (&origin.conversation, &origin.rerun) {
        (Some(from), _) if !stored.contains(from) => Joined::First,
        (Some(from), Some(rerun)) => Joined::Rerun {
            from: from.clone(),
            at: origin.node,
            rerun: rerun.clone(),
        },
        (Some(from), None) => Joined::Branch {
            from: from.clone(),
            at: origin.node,
        },
        (None, _) => Joined::First,
    }
}

impl Family {
    /// The focused conversation's row.
    pub fn focus(&self) -> &ConversationRecord {
        &self
            .member(&self.focus)
            .expect("a family holds its focus")
            .conversation
    }

    /// The member with this id.
    pub fn member(&self, id: &ConversationId) -> Option<&Member> {
        self.members.iter().find(|m| &m.conversation.id == id)
    }

    /// The nodes to draw, at most `limit`: the focus's latest messages
    /// first (its whole history when it is no longer), then each other
    /// member's line from where it left the shown nodes, each rerun's and
    /// replayed turn's answer, and as much of the rest of the trees they start (messages no
    /// member points at, and those of sharers) as fits, nearest the first
    /// message first. When the focus's whole tree fits, it is read in one
    /// query and no line needs reading. Reads only what it shows, and at
    /// most one line per member.
    pub async fn graph(&self, store: &Store, limit: usize) -> Result<FamilyGraph, StoreError> {
        let store = store.nonblocking();
        let mut graph = Graph::default();
        let mut cut = false;
        let mut trees: Vec<(NodeId, Vec<TreeEntry>)> = Vec::new();
        if let Some(head) = self.focus().head {
            graph.add(store.ancestry(head, limit).await?);
            let root = graph.nodes.first().filter(|n| n.parent.is_none());
            if let Some(root) = root.map(|root| root.id) {
                let tree = store.subtree(root, limit.saturating_add(1)).await?;
                if tree.len() <= limit {
                    // The whole tree fits: every member and sharer in it is
                    // shown without reading their lines.
                    graph.add(tree);
                } else {
                    trees.push((root, tree));
                }
            }
        }
        let mut loads = 0;
        for member in &self.members {
            let Some(head) = member.conversation.head else {
                continue;
            };
            if graph.contains(head) {
                continue;
            }
            // Its own messages: from the node it left its origin at, when
            // that is shown, down to its head.
            let own = member
                .conversation
                .origin
                .as_ref()
                .and_then(|origin| origin.node)
                .and_then(|at| graph.depth(at))
                .map(|depth| member.conversation.len.saturating_sub(depth + 1) as usize);
            cut |= !graph.load_line(store, head, own, limit, &mut loads).await?;
        }
        let shown: HashSet<NodeId> = graph.depths.keys().copied().collect();
        let answers = self
            .reruns
            .iter()
            .map(|rerun| (rerun.turn_node, rerun.answer_head))
            .chain(
                self.replayed
                    .iter()
                    .map(|turn| (turn.turn_node, turn.answer_head)),
            );
        for (turn_node, answer) in answers {
            if let Some(answer) = answer
                && shown.contains(&turn_node)
                && !graph.contains(answer)
            {
                cut |= !graph
                    .load_line(store, answer, None, limit, &mut loads)
                    .await?;
            }
        }
        // The rest of every tree shown, as room allows: the focus's as read
        // above, the others' read now.
        let roots: Vec<NodeId> = graph
            .nodes
            .iter()
            .filter(|node| node.parent.is_none())
            .map(|node| node.id)
            .collect();
        for root in roots {
            let tree = match trees.iter().position(|(read, _)| *read == root) {
                Some(at) => trees.swap_remove(at).1,
                None if loads >= LINE_LOADS_MAX => {
                    cut = true;
                    break;
                }
                None => {
                    loads += 1;
                    store.subtree(root, limit.saturating_add(1)).await?
                }
            };
            for entry in tree {
                if graph.contains(entry.id) {
                    continue;
                }
                if graph.nodes.len() >= limit {
                    cut = true;
                    break;
                }
                graph.add([entry]);
            }
        }
        let truncated = cut
            || graph
                .nodes
                .iter()
                .any(|node| node.parent.is_some_and(|parent| !graph.contains(parent)));
        Ok(FamilyGraph {
            nodes: graph.nodes,
            truncated,
        })
    }
}

/// The shown nodes, without duplicates, in insertion order, and their
/// depths.
#[derive(Default)]
struct Graph {
    nodes: Vec<TreeEntry>,
    depths: HashMap<NodeId, u64>,
}

impl Graph {
    fn contains(&self, id: NodeId) -> bool {
        self.depths.contains_key(&id)
    }

    fn depth(&self, id: NodeId) -> Option<u64> {
        self.depths.get(&id).copied()
    }

    fn add(&mut self, entries: impl IntoIterator<Item = TreeEntry>) {
        for entry in entries {
            if self.depths.insert(entry.id, entry.depth).is_none() {
                self.nodes.push(entry);
            }
        }
    }

    /// Add the line ending at `head`: its last `own` nodes when that
    /// reaches a shown node, else as many of its latest nodes as there is
    /// room for under `limit`. Whether its head could be shown.
    async fn load_line(
        &mut self,
        store: AsyncStore<'_>,
        head: NodeId,
        own: Option<usize>,
        limit: usize,
        loads: &mut usize,
    ) -> Result<bool, StoreError> {
        let room = limit.saturating_sub(self.nodes.len());
        if room == 0 || *loads >= LINE_LOADS_MAX {
            return Ok(false);
        }
        *loads += 1;
        if let Some(own) = own.filter(|own| *own > 0 && *own <= room) {
            let line = store.ancestry(head, own).await?;
            let joins = line
                .first()
                .is_some_and(|first| first.parent.is_none_or(|parent| self.contains(parent)));
            if joins {
                self.add(line);
                return Ok(true);
            }
        }
        self.add(store.ancestry(head, room).await?);
        Ok(true)
    }
}
