/*!
Where a turn lands in the graph, for the turn service ([`crate::service`]):
whose node a node is, asked three ways that every surface shares:
[`owner_of_node`] (where a turn from the node goes on: the conversation it
heads, else the newest whose turn produced it), [`producer_of_node`] (which
turn made it, for explaining and re-running it) and [`asker_of_node`] (who
asked the message first, whose branch asking it again makes); and where a request that carries its whole history and
names no conversation lands ([`Landing::Found`](crate::service::Landing::Found):
the recording proxy's requests), by the landing rule.

A client that re-sends its whole history each turn is stored as one growing
thread: the request's nodes that the store already holds are shared, and
the conversation whose head the stored part ends at moves forward to the
new reply. When several clients continue the same head at once, the first
wins and each other becomes a branch there (a conversation of its own, with
its reply), in the same transaction as its turn.

A request whose reply the store already holds (the same request to a
deterministic model: a regenerate) adds only its run, to the conversation
that reply belongs to. A regenerate whose reply is new (a sampling model)
is a sibling: a branch, at the request's last message, of the conversation
of the reply given before; so is a retry that drops the reply it was given
and says more (a branch where that reply was given). A history whose stored part ends at a node no
conversation heads (the client edited or truncated it, or lost a race
before it began) becomes a branch of the conversation that node belongs
to; one that shares only messages no conversation produced becomes a
conversation of its own. New conversations take the finding's name, else
are titled by their first prompt. A named request continues (or joins) only
a conversation of that name: where the conversations at the node it would
continue have other names, it starts a conversation of its own name there,
a branch of theirs.

A request whose stored part belongs to no conversation but that carries a
tool call made in one (an agent handing off to another repeats the user's
message and the handoff call under its own instructions, so its thread
shares nothing with the first agent's) starts a conversation linked to
that one, its origin the message that made the call. A call id is evidence only when it is
distinctive (not a client's counter such as `call_1`) and leads to one
conversation. One found in several links nothing, but is not dropped
silently either: the request starts a conversation of its own whose runs
name each candidate as a relation of kind [`PROBABLY_CONTINUES`], and the
turn service reports them ([`TurnDone::probably_continues`](crate::service::TurnDone)).

A finding of a keyed client of the proxy ([`Finding::client`]) sees only
the conversations that client made: every other is as if it were not
there, so its history, replies, calls and session names never lead the
request into one (its stored messages are shared all the same, as
content always is).
*/

use crate::commit::{self, Bookmark, OnMoved};
use crate::service::{Finding, Landed};
use skein_core::{
    ConversationId, ConversationSettings, NodeId, Origin, Relation, RunRecord, Thread,
};
use skein_store::{AsyncStore, ConversationRecord, Store, StoreError};

/// How far back a request's stored nodes are searched for the conversation
/// they belong to.
const ANCESTORS_SEARCHED: usize = 64;

/// How many stored replies to the same request are looked at to find a
/// regenerate's conversation.
const SIBLINGS_SEARCHED: usize = 16;

/// How many of a request's last messages are searched for calls made in
/// another conversation.
const CALLS_SEARCHED: usize = 16;

/// How many stored messages making one call id are looked at: more than
/// one conversation among them makes the id no evidence.
const CALLERS_SEARCHED: usize = 8;

/// The relation kind a run carries for each conversation its request
/// probably continues: a call it carries was made there, and in other
/// conversations too, so which one cannot be told (the target is the
/// conversation's id).
pub const PROBABLY_CONTINUES: &str = "proxy.probably_continues";

/// Where a reply lands.
enum Destination {
    /// Moves (or stands at) this conversation's head, from `from`.
    Continue {
        owner: ConversationRecord,
        from: Option<NodeId>,
    },
    /// The reply is stored already: the run joins its conversation.
    Join(ConversationId),
    /// A new conversation at `start`, a branch of `source` when known.
    New {
        start: Option<NodeId>,
        source: Option<ConversationRecord>,
    },
    /// A new session: a conversation of its own, branching from nothing,
    /// though its messages may be stored already; under the session's name
    /// unless a conversation the client cannot reach holds it (`named`).
    Fresh { named: bool },
    /// A new conversation at `start`, linked to `source`, where the call
    /// the request carries was made (at `call`): a handoff.
    HandedOff {
        start: Option<NodeId>,
        source: ConversationRecord,
        call: NodeId,
    },
    /// A new conversation at `start`, linked to none, though calls the
    /// request carries were made in each of `candidates`.
    Ambiguous {
        start: Option<NodeId>,
        candidates: Vec<ConversationId>,
    },
}

/// Where a turn found in the graph landed, and the conversations it
/// probably continues where the evidence could not tell which.
pub(crate) struct Found {
    pub landed: Landed,
    pub probably_continues: Vec<ConversationId>,
}

impl From<Landed> for Found {
    fn from(landed: Landed) -> Found {
        Found {
            landed,
            probably_continues: Vec::new(),
        }
    }
}

/// Land `thread` (a request and its reply) and `runs` where the request
/// leads (see the module docs). A session's first request that lost the
/// race to create it (names are unique) is placed again: it then continues
/// the session.
pub(crate) async fn found(
    store: &Store,
    thread: Thread,
    runs: Vec<RunRecord>,
    finding: &Finding,
) -> Result<Found, StoreError> {
    // Only a session can be placed twice: nothing else pays for copies of
    // the thread and the runs (which hold the exact request body).
    if finding.session.is_none() {
        return found_once(store, thread, runs, finding).await;
    }
    match found_once(store, thread.clone(), runs.clone(), finding).await {
        Err(StoreError::NameTaken { .. }) => found_once(store, thread, runs, finding).await,
        landed => landed,
    }
}

/// [`found`], placed once.
async fn found_once(
    store: &Store,
    thread: Thread,
    mut runs: Vec<RunRecord>,
    finding: &Finding,
) -> Result<Found, StoreError> {
    let node = thread.head_id().expect("an exchange ends with its reply");
    let request = thread.parent();
    let name = finding.name.as_deref();
    let client = finding.client.as_deref();
    let placed = match &finding.session {
        Some(session) => {
            session_place(store.nonblocking(), session, node, &request, client).await?
        }
        None => place(store, node, &request, name, client).await?,
    };
    // A branch or new conversation takes the request's name only while no
    // other conversation holds it (names are unique): a named client's
    // regenerate or edited history is an unnamed branch of its conversation.
    let free_name = match (&finding.name, &placed) {
        (
            Some(name),
            Destination::New { .. } | Destination::HandedOff { .. } | Destination::Ambiguous { .. },
        ) => match store.nonblocking().check_name_free(name).await {
            Ok(()) => Some(name.clone()),
            Err(StoreError::NameTaken { .. }) => None,
            Err(error) => return Err(error),
        },
        _ => None,
    };
    let mut probably_continues = Vec::new();
    let (bookmark, start) = match placed {
        Destination::Fresh { named } => (
            Bookmark::unstored(
                finding.session.clone().filter(|_| named),
                None,
                finding.settings.clone(),
            ),
            None,
        ),
        Destination::Join(conversation) => {
            commit::keep_in(store, &conversation, runs).await?;
            return Ok(Landed::In(conversation).into());
        }
        Destination::Continue { owner, from } => {
            let bookmark = Bookmark::of(owner);
            let committed =
                commit::commit(store, &bookmark, from, Some(thread), runs, OnMoved::Branch).await?;
            return Ok(match (committed.branched_from, committed.conversation) {
                (Some(_), Some(into)) => Landed::Branched {
                    conversation: into,
                    from: bookmark.id,
                },
                _ => Landed::In(bookmark.id),
            }
            .into());
        }
        Destination::New {
            start,
            source: Some(source),
        } => (branch_of(source, start, free_name.clone()), start),
        Destination::HandedOff {
            start,
            source,
            call,
        } => (branch_of(source, Some(call), free_name.clone()), start),
        Destination::New {
            start,
            source: None,
        } => (unlinked(free_name, start, finding), start),
        Destination::Ambiguous { start, candidates } => {
            for run in &mut runs {
                run.relations
                    .extend(candidates.iter().map(|candidate| Relation::Other {
                        kind: PROBABLY_CONTINUES.into(),
                        target: candidate.to_string(),
                    }));
            }
            probably_continues = candidates;
            (unlinked(free_name, start, finding), start)
        }
    };
    let committed =
        commit::commit(store, &bookmark, start, Some(thread), runs, OnMoved::Branch).await?;
    let id = committed.conversation.unwrap_or(bookmark.id);
    let landed = match bookmark.origin.and_then(|origin| origin.conversation) {
        Some(from) => Landed::Branched {
            conversation: id,
            from,
        },
        None => Landed::In(id),
    };
    Ok(Found {
        landed,
        probably_continues,
    })
}

/// A new conversation at `start` that branches from no conversation.
fn unlinked(name: Option<String>, start: Option<NodeId>, finding: &Finding) -> Bookmark {
    Bookmark::unstored(
        name,
        start.map(|node| Origin {
            node: Some(node),
            ..Origin::default()
        }),
        finding.settings.clone(),
    )
}

/// The conversation a message that made a call belongs to: the one whose
/// turn produced it, else (a call the client put in its history) one whose
/// thread holds it.
async fn caller_owner(
    store: AsyncStore<'_>,
    caller: NodeId,
    client: Option<&str>,
) -> Result<Option<ConversationRecord>, StoreError> {
    if let Some(owner) = owner_of(store, caller, None, client).await? {
        return Ok(Some(owner));
    }
    let Some(client) = client else {
        return match store.conversations_containing(caller, 1).await?.first() {
            Some(found) => store.conversation(&found.id).await.map(Some),
            None => Ok(None),
        };
    };
    for found in store
        .conversations_containing(caller, CALLERS_SEARCHED)
        .await?
    {
        let conversation = store.conversation(&found.id).await?;
        if reachable(Some(client), &conversation) {
            return Ok(Some(conversation));
        }
    }
    Ok(None)
}

/// Whether a request of `client` (a keyed client of the proxy; `None`:
/// any request) may reach `conversation`: only one its own requests made
/// (see [`Finding::client`]).
fn reachable(client: Option<&str>, conversation: &ConversationRecord) -> bool {
    client.is_none_or(|client| {
        !conversation.imported && conversation.settings.client.as_deref() == Some(client)
    })
}

/// Whether a call id can tell one call from others: providers mint random
/// ids (`call_…`, `toolu_…`, Mistral's nine characters), while some clients
/// number their calls (`call_1`). Distinctive: at least 8 letters or
/// digits after a leading word ending in `_` or `-` (so a UUID after
/// `call-` counts whole).
fn distinctive(call_id: &str) -> bool {
    let body = match call_id.split_once(['_', '-']) {
        Some((prefix, rest)) if prefix.chars().all(|c| c.is_ascii_alphabetic()) => rest,
        _ => call_id,
    };
    body.chars().filter(char::is_ascii_alphanumeric).count() >= 8
}

/// A new conversation that branches from `source` at `node`, on its
/// settings (less its title).
fn branch_of(source: ConversationRecord, node: Option<NodeId>, name: Option<String>) -> Bookmark {
    Bookmark::unstored(
        name,
        Some(Origin {
            node,
            conversation: Some(source.id),
            rerun: None,
        }),
        ConversationSettings {
            title: None,
            ..source.settings
        },
    )
}

/// The conversation a failed request that names none went on with (the
/// failure rule keeps its run there): its session's, else the one its
/// stored part ends at the head of (of its name, when it has one); `None`
/// for a request that continues no conversation.
pub(crate) async fn failed_in(
    store: &Store,
    input: &Thread,
    finding: &Finding,
) -> Result<Option<Bookmark>, StoreError> {
    let api = store.nonblocking();
    let client = finding.client.as_deref();
    if let Some(session) = &finding.session {
        return Ok(match api.conversation_named(session).await? {
            Some(id) => Some(api.conversation(&id).await?)
                .filter(|conversation| reachable(client, conversation))
                .map(Bookmark::of),
            None => None,
        });
    }
    let Some(start) = stored_part(api, input).await?.head_id() else {
        return Ok(None);
    };
    let mut at = api
        .conversations_at(start)
        .await?
        .into_iter()
        .filter(|conversation| reachable(client, conversation));
    let owner = match finding.name.as_deref() {
        None => at.next(),
        Some(name) => at.find(|conversation| conversation.name.as_deref() == Some(name)),
    };
    Ok(owner.map(Bookmark::of))
}

/// The stored conversation `node` belongs to: the one it heads, else the
/// newest one (that still exists) whose turn produced it; `None` for a
/// node no conversation's turn produced (a prompt, an imported node). A
/// branch at the node takes this conversation's settings.
pub async fn owner_of_node(
    store: &Store,
    node: NodeId,
) -> skein_store::Result<Option<ConversationId>> {
    Ok(owner_of(store.nonblocking(), node, None, None)
        .await?
        .map(|conversation| conversation.id))
}

/// [`owner_of_node`], given the runs that produced `node` when the caller
/// has them (read here only when no conversation heads it), among the
/// conversations `client` may reach ([`reachable`]).
pub(crate) async fn owner_of(
    api: AsyncStore<'_>,
    node: NodeId,
    runs: Option<&[RunRecord]>,
    client: Option<&str>,
) -> skein_store::Result<Option<ConversationRecord>> {
    if let Some(owner) = api
        .conversations_at(node)
        .await?
        .into_iter()
        .find(|conversation| reachable(client, conversation))
    {
        return Ok(Some(owner));
    }
    producer_of(api, node, runs, client).await
}

/// The stored conversation whose turn produced `node`: the newest one that
/// still exists (a deletion leaves runs of no conversation behind); `None`
/// when no conversation's turn produced it. What a recorded turn is
/// explained, re-run or replayed in (`skein explain NODE`), where
/// [`owner_of_node`] answers where a turn from the node goes on: a fork
/// standing at a recorded reply holds the node, not the turn.
pub async fn producer_of_node(
    store: &Store,
    node: NodeId,
) -> skein_store::Result<Option<ConversationId>> {
    Ok(producer_of(store.nonblocking(), node, None, None)
        .await?
        .map(|conversation| conversation.id))
}

async fn producer_of(
    api: AsyncStore<'_>,
    node: NodeId,
    runs: Option<&[RunRecord]>,
    client: Option<&str>,
) -> skein_store::Result<Option<ConversationRecord>> {
    let read;
    let runs = match runs {
        Some(runs) => runs,
        None => {
            read = api.runs_producing(node).await?;
            &read[..]
        }
    };
    for id in runs
        .iter()
        .rev()
        .filter_map(|run| run.conversation.as_ref())
    {
        match api.conversation(id).await {
            Ok(found) if reachable(client, &found) => return Ok(Some(found)),
            Ok(_) | Err(StoreError::ConversationNotFound(_)) => {}
            Err(error) => return Err(error),
        }
    }
    Ok(None)
}

/// The stored conversation that asked or answered a message first: for a
/// reply, the conversation of the first turn that produced it; for a prompt
/// (which no turn produces), of the first turn that answered it; else the
/// conversation it heads (a fork waiting at it); `None` for a message no
/// conversation holds. Conversations that share the message by asking it
/// again (a retry answered alike) came later, so the first asker is the one
/// [`Conversation::again_at`](crate::Conversation::again_at) branches, and whose settings (and MCP tools)
/// a surface prepares for it. A deleted conversation is passed over.
pub async fn asker_of_node(
    store: &Store,
    node: NodeId,
) -> skein_store::Result<Option<ConversationId>> {
    Ok(asker_of(store.nonblocking(), node)
        .await?
        .map(|conversation| conversation.id))
}

pub(crate) async fn asker_of(
    api: AsyncStore<'_>,
    node: NodeId,
) -> skein_store::Result<Option<ConversationRecord>> {
    if let Some(found) = first_producer(api, &[node]).await? {
        return Ok(Some(found));
    }
    let replies = api.children(node).await?;
    if let Some(found) = first_producer(api, &replies).await? {
        return Ok(Some(found));
    }
    Ok(api.conversations_at(node).await?.into_iter().next())
}

/// The conversation of the earliest run that produced one of `nodes` and
/// whose conversation still exists.
async fn first_producer(
    api: AsyncStore<'_>,
    nodes: &[NodeId],
) -> skein_store::Result<Option<ConversationRecord>> {
    let mut runs = Vec::new();
    for node in nodes {
        runs.extend(api.runs_producing(*node).await?);
    }
    runs.sort_by_key(|run| run.started_ms);
    for id in runs.iter().filter_map(|run| run.conversation.as_ref()) {
        match api.conversation(id).await {
            Ok(found) => return Ok(Some(found)),
            Err(StoreError::ConversationNotFound(_)) => {}
            Err(error) => return Err(error),
        }
    }
    Ok(None)
}

/// Where the reply `node` to `request` lands (see the module docs).
///
/// The reads below are not one snapshot, so a client racing this one with
/// the very same turn may commit between them, leaving some reads before
/// its turn and some after (the request's nodes stored, but no
/// conversation standing on them yet). A turn commits atomically and nodes
/// are never deleted, so that race shows as `node` being stored by the end
/// when it was not at the start; then the place is read again, all after
/// the other client's turn.
async fn place(
    store: &Store,
    node: NodeId,
    request: &Thread,
    name: Option<&str>,
    client: Option<&str>,
) -> Result<Destination, StoreError> {
    let store = store.nonblocking();
    let stored = store.contains(node).await?;
    let place = place_as_read(store, node, stored, request, name, client).await?;
    if stored || !store.contains(node).await? {
        return Ok(place);
    }
    place_as_read(store, node, true, request, name, client).await
}

/// Where the reply `node` to `request` of a named session lands: in the
/// session's conversation (extending its head, or joining it when the
/// reply is its head already), a branch of it where the request's history
/// left its head, or, for a session not seen before, a fresh conversation.
/// A session whose conversation `client` cannot reach is one not seen
/// before, but its conversation cannot take the name.
async fn session_place(
    store: AsyncStore<'_>,
    session: &str,
    node: NodeId,
    request: &Thread,
    client: Option<&str>,
) -> Result<Destination, StoreError> {
    let Some(id) = store.conversation_named(session).await? else {
        return Ok(Destination::Fresh { named: true });
    };
    let conversation = store.conversation(&id).await?;
    if !reachable(client, &conversation) {
        return Ok(Destination::Fresh { named: false });
    }
    if conversation.head == Some(node) {
        return Ok(Destination::Join(id));
    }
    // The request goes on from the session's head (the messages after it
    // may be stored already: another session said the same).
    let continues = match conversation.head {
        Some(head) => request.at(head).is_some(),
        None => true,
    };
    if continues {
        return Ok(Destination::Continue {
            from: conversation.head,
            owner: conversation,
        });
    }
    let start = stored_part(store, request).await?.head_id();
    Ok(Destination::New {
        start,
        source: Some(conversation),
    })
}

/// The part of `request` the store already holds: up to its newest stored
/// node.
async fn stored_part(store: AsyncStore<'_>, request: &Thread) -> Result<Thread, StoreError> {
    let mut stored = request.clone();
    while let Some(head) = stored.head_id() {
        if store.contains(head).await? {
            break;
        }
        stored = stored.parent();
    }
    Ok(stored)
}

/// [`place`] given whether `node` is stored.
async fn place_as_read(
    store: AsyncStore<'_>,
    node: NodeId,
    node_stored: bool,
    request: &Thread,
    name: Option<&str>,
    client: Option<&str>,
) -> Result<Destination, StoreError> {
    if node_stored {
        if let Some(place) = headed_at(store, node, name, client).await? {
            return Ok(place);
        }
        if let Some(conversation) = producing(store, node, None, client).await? {
            if name.is_none_or(|name| conversation.name.as_deref() == Some(name)) {
                return Ok(Destination::Join(conversation.id));
            }
            return Ok(Destination::New {
                start: Some(node),
                source: Some(conversation),
            });
        }
    }
    let stored = stored_part(store, request).await?;
    let start = stored.head_id();
    if let Some(start) = start
        && let Some(place) = headed_at(store, start, name, client).await?
    {
        return Ok(place);
    }
    // A reply to the stored part is stored: a regenerate (the same request
    // again), or a retry that dropped that reply and said more (instructor
    // re-sends `[user, user "Validation Error found: …"]`) branches the
    // conversation that reply belongs to.
    if let Some(start) = start {
        for child in store
            .children(start)
            .await?
            .into_iter()
            .take(SIBLINGS_SEARCHED)
        {
            if let Some(source) = producing(store, child, Some(start), client).await? {
                return Ok(Destination::New {
                    start: Some(start),
                    source: Some(source),
                });
            }
        }
    }
    // Otherwise the conversation the nearest stored node belongs to (by a
    // conversation standing there or a run that produced it).
    for (steps, ancestor) in stored.ancestors().enumerate() {
        if steps == ANCESTORS_SEARCHED {
            break;
        }
        let source = owner_of(store, ancestor.id(), None, client).await?;
        if source.is_some() {
            return Ok(Destination::New { start, source });
        }
    }
    Ok(match handed_off(store, request, client).await? {
        Calls::MadeIn(source, call) => Destination::HandedOff {
            start,
            source: *source,
            call,
        },
        Calls::MadeInSeveral(candidates) => Destination::Ambiguous { start, candidates },
        Calls::NoEvidence => Destination::New {
            start,
            source: None,
        },
    })
}

/// What the calls a request carries say about the conversation it came
/// from.
enum Calls {
    /// A call made in this conversation (and no other), by this message.
    MadeIn(Box<ConversationRecord>, NodeId),
    /// Calls made in several conversations each, so which one the request
    /// continues cannot be told: these, in the order found.
    MadeInSeveral(Vec<ConversationId>),
    NoEvidence,
}

/// The conversation where a call `request` carries (made or answered in
/// its last messages, newest first) was made, outside `request`, and the
/// message that made it; when no call leads to exactly one conversation,
/// the conversations those that lead to several were made in.
async fn handed_off(
    store: AsyncStore<'_>,
    request: &Thread,
    client: Option<&str>,
) -> Result<Calls, StoreError> {
    let own: std::collections::HashSet<NodeId> =
        request.ancestors().map(|node| node.id()).collect();
    let mut candidates: Vec<ConversationId> = Vec::new();
    for node in request.ancestors().take(CALLS_SEARCHED) {
        let message = node.message();
        let made = message.tool_calls().map(|call| call.id.as_str());
        let answered = message
            .tool_results_iter()
            .map(|result| result.call_id.as_str());
        for call_id in made.chain(answered).filter(|id| distinctive(id)) {
            let mut found: Vec<(ConversationRecord, NodeId)> = Vec::new();
            for caller in store.nodes_calling(call_id, CALLERS_SEARCHED).await? {
                if own.contains(&caller) {
                    continue;
                }
                let Some(owner) = caller_owner(store, caller, client).await? else {
                    continue;
                };
                if found.iter().all(|(known, _)| known.id != owner.id) {
                    found.push((owner, caller));
                }
            }
            if found.len() == 1 {
                let (owner, caller) = found.remove(0);
                return Ok(Calls::MadeIn(Box::new(owner), caller));
            }
            for (owner, _) in found {
                if !candidates.contains(&owner.id) {
                    candidates.push(owner.id);
                }
            }
        }
    }
    Ok(match candidates.is_empty() {
        true => Calls::NoEvidence,
        false => Calls::MadeInSeveral(candidates),
    })
}

/// Where a turn at `node` lands when conversations `client` may reach head
/// there: on the one named `name` (without a name, the first), else in a
/// new conversation sourced from the first.
async fn headed_at(
    store: AsyncStore<'_>,
    node: NodeId,
    name: Option<&str>,
    client: Option<&str>,
) -> Result<Option<Destination>, StoreError> {
    let mut conversations = store.conversations_at(node).await?;
    conversations.retain(|conversation| reachable(client, conversation));
    let named = match name {
        None => Some(0),
        Some(name) => conversations
            .iter()
            .position(|conversation| conversation.name.as_deref() == Some(name)),
    };
    let mut conversations = conversations.into_iter();
    Ok(match named {
        Some(index) => conversations.nth(index).map(|owner| Destination::Continue {
            owner,
            from: Some(node),
        }),
        None => conversations.next().map(|source| Destination::New {
            start: Some(node),
            source: Some(source),
        }),
    })
}

/// The conversation of the newest run that produced `node` (from `input`,
/// when given), among those `client` may reach.
async fn producing(
    store: AsyncStore<'_>,
    node: NodeId,
    input: Option<NodeId>,
    client: Option<&str>,
) -> Result<Option<ConversationRecord>, StoreError> {
    let runs = store.runs_producing(node).await?;
    let conversations = runs
        .into_iter()
        .rev()
        .filter(|run| input.is_none() || run.input_head == input)
        .filter_map(|run| run.conversation);
    for id in conversations {
        match store.conversation(&id).await {
            Ok(conversation) if reachable(client, &conversation) => return Ok(Some(conversation)),
            Ok(_) => {}
            Err(StoreError::ConversationNotFound(_)) if client.is_some() => {}
            Err(error) => return Err(error),
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::distinctive;

    #[test]
    fn a_call_id_is_evidence_only_when_it_is_not_a_counter() {
        for counter in ["call_1", "call_12", "tool-3", "1", "fc_0001"] {
            assert!(!distinctive(counter), "{counter}");
        }
        for minted in [
            "call_Zq9Xw7Lp2Rk4Tn8Vb",
            "toolu_01A09q90qw90lq917835lq9",
            "D681PevKs",
            "call-550e8400-e29b-41d4-a716-446655440000",
        ] {
            assert!(distinctive(minted), "{minted}");
        }
    }
}
