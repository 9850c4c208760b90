/*!
A conversation's family, read by origin links rather than by scanning: the
conversations joined to it through `forked_from_conversation` (walked up
to the first one by primary key, then down by `conversations_by_origin`),
the reruns of their turns (by `reruns_by_conversation`), and the
conversations that merely share messages with them by content (two threads
that share any node share their first node, so these are found by
`conversations_by_root`, newest first). Every read is an
index lookup or range, so the cost follows the family's size, not the
database's.

Which rows come back is shared by both backends ([`FamilyRows::assemble`]);
the SQL is in sqlite/family.rs and postgres/family.rs.

This module declares `Families`, the backend trait sqlite/family.rs and
postgres/family.rs implement, and holds the public operations that call it:
the async ones on `AsyncStore` and their blocking forms on `Store`.
*/

use crate::async_store::AsyncStore;
use crate::backend::BoxFuture;
use crate::error::{Result, StoreError};
use crate::records::{ConversationId, ConversationRecord};
use crate::reruns::RerunRecord;
use crate::store::Store;
use skein_core::NodeId;
use std::collections::{HashMap, HashSet, VecDeque};

/// The rows a conversation's family is assembled from: the SQL is in
/// sqlite/family.rs and postgres/family.rs.
pub(crate) trait Families {
    fn family<'a>(
        &'a self,
        id: &'a ConversationId,
        limits: FamilyLimits,
    ) -> BoxFuture<'a, Result<FamilyRows>>;
}

/// How much of a family [`Store::family`] reads at most.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FamilyLimits {
    /// Members besides the conversation asked about and the ones it
    /// descends from by origin, which are always read.
    pub members: usize,
    /// Conversations sharing messages by content.
    pub shares: usize,
}

impl FamilyLimits {
    /// Every member, no sharers: what a deletion or a replay of a whole
    /// family reads. (Any family fits; the bound stays a valid SQL integer
    /// after the additions the queries make to it, which `usize::MAX / 2`
    /// did not: SQLite refused it as a "datatype mismatch".)
    pub const WHOLE: FamilyLimits = FamilyLimits {
        members: 1 << 40,
        shares: 0,
    };
}

/// A conversation with the first node of its thread (`None` while it has
/// no head).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rooted {
    pub conversation: ConversationRecord,
    pub root: Option<NodeId>,
}

/// A conversation's family as the store holds it (see the module docs).
#[derive(Clone, Debug, PartialEq)]
pub struct FamilyRows {
    /// The conversations joined to the one asked about by origin links,
    /// itself included: the one the links lead back to first, then each
    /// after the conversation it came from, oldest first.
    pub members: Vec<Rooted>,
    /// The family has members beyond these.
    pub more_members: bool,
    /// The reruns of the members' turns, oldest first.
    pub reruns: Vec<RerunRecord>,
    /// Conversations that are no members but share a member's first node
    /// (and so every message up to where they part), newest first.
    pub shares: Vec<Rooted>,
    /// More conversations share messages than these.
    pub more_shares: bool,
}

impl Store {
    /// The family of conversation `id` (see [`FamilyRows`]), at most
    /// `limits` of it. [`StoreError::ConversationNotFound`] when `id` is not
    /// stored.
    pub fn family(&self, id: &ConversationId, limits: FamilyLimits) -> Result<FamilyRows> {
        self.wait(self.nonblocking().family(id, limits))
    }
}

impl AsyncStore<'_> {
    /// [`Store::family`].
    pub async fn family(&self, id: &ConversationId, limits: FamilyLimits) -> Result<FamilyRows> {
        self.store.backend().family(id, limits).await
    }
}

/// For each distinct root among `members`, how many conversations to read
/// that start there: enough to find `limits.shares` that are no members,
/// and one more to tell whether there are more.
pub(crate) fn share_queries(members: &[Rooted], limits: FamilyLimits) -> Vec<(NodeId, usize)> {
    let mut per_root: Vec<(NodeId, usize)> = Vec::new();
    for member in members {
        let Some(root) = member.root else { continue };
        match per_root.iter_mut().find(|(seen, _)| *seen == root) {
            Some((_, members_there)) => *members_there += 1,
            None => per_root.push((root, 1)),
        }
    }
    per_root
        .into_iter()
        .map(|(root, members_there)| {
            (
                root,
                limits
                    .shares
                    .saturating_add(members_there)
                    .saturating_add(1),
            )
        })
        .collect()
}

impl FamilyRows {
    /// Put what a backend read in order: members from the one the origin
    /// links lead back to (parents before children, oldest first), at most
    /// `limits.members` off the asked one's line; reruns as read
    /// (oldest first per member, then overall); sharers that are no
    /// members, newest first, at most `limits.shares`.
    pub(crate) fn assemble(
        focus: &ConversationId,
        members: Vec<Rooted>,
        limits: FamilyLimits,
        mut reruns: Vec<RerunRecord>,
        sharing: Vec<Rooted>,
    ) -> Result<FamilyRows> {
        if !members.iter().any(|m| &m.conversation.id == focus) {
            return Err(StoreError::ConversationNotFound(focus.to_string()));
        }
        let (mut members, line) = order_members(focus, members);
        let most = line.len().saturating_add(limits.members);
        let more_members = members.len() > most;
        while members.len() > most {
            // Drop the newest member off the asked one's line.
            let at = members
                .iter()
                .rposition(|m| !line.contains(&m.conversation.id))
                .expect("more members than the line holds");
            members.remove(at);
        }
        let kept: HashSet<&ConversationId> = members.iter().map(|m| &m.conversation.id).collect();
        reruns.retain(|rerun| kept.contains(&rerun.conversation));
        reruns.sort_by(|a, b| a.created_ms.cmp(&b.created_ms).then(a.id.cmp(&b.id)));

        let mut seen: HashSet<ConversationId> = kept.iter().map(|id| (*id).clone()).collect();
        let mut shares: Vec<Rooted> = sharing
            .into_iter()
            .filter(|row| seen.insert(row.conversation.id.clone()))
            .collect();
        shares.sort_by(|a, b| {
            b.conversation
                .created_ms
                .cmp(&a.conversation.created_ms)
                .then(a.conversation.id.cmp(&b.conversation.id))
        });
        let more_shares = shares.len() > limits.shares;
        shares.truncate(limits.shares);
        Ok(FamilyRows {
            members,
            more_members,
            reruns,
            shares,
            more_shares,
        })
    }
}

/// Members in family order (from the first conversation of the origin
/// links, each after the one it came from, siblings oldest first; members
/// the walk cannot reach, as in a damaged cycle, after them, oldest first),
/// and the ids on the way from `focus` up to that first one.
fn order_members(
    focus: &ConversationId,
    members: Vec<Rooted>,
) -> (Vec<Rooted>, Vec<ConversationId>) {
    let by_id: HashMap<ConversationId, &Rooted> = members
        .iter()
        .map(|m| (m.conversation.id.clone(), m))
        .collect();
    let origin_of = |m: &Rooted| {
        m.conversation
            .origin
            .as_ref()
            .and_then(|origin| origin.conversation.clone())
            .filter(|origin| by_id.contains_key(origin))
    };
    let mut line = vec![focus.clone()];
    while let Some(up) = origin_of(by_id[line.last().expect("never empty")]) {
        if line.contains(&up) {
            break;
        }
        line.push(up);
    }
    let mut children: HashMap<ConversationId, Vec<&Rooted>> = HashMap::new();
    for member in &members {
        if let Some(origin) = origin_of(member) {
            children.entry(origin).or_default().push(member);
        }
    }
    let age = |m: &&Rooted| (m.conversation.created_ms, m.conversation.id.clone());
    for siblings in children.values_mut() {
        siblings.sort_by_key(age);
    }
    let mut order: Vec<ConversationId> = Vec::with_capacity(members.len());
    let mut placed: HashSet<ConversationId> = HashSet::new();
    let first = line.last().expect("never empty").clone();
    let mut queue = VecDeque::from([first]);
    while let Some(id) = queue.pop_front() {
        if !placed.insert(id.clone()) {
            continue;
        }
        order.push(id.clone());
        for child in children.get(&id).into_iter().flatten() {
            queue.push_back(child.conversation.id.clone());
        }
    }
    let mut rest: Vec<&Rooted> = members
        .iter()
        .filter(|m| !placed.contains(&m.conversation.id))
        .collect();
    rest.sort_by_key(age);
    order.extend(rest.into_iter().map(|m| m.conversation.id.clone()));
    let mut by_id: HashMap<ConversationId, Rooted> = members
        .into_iter()
        .map(|m| (m.conversation.id.clone(), m))
        .collect();
    let ordered = order.iter().filter_map(|id| by_id.remove(id)).collect();
    (ordered, line)
}
