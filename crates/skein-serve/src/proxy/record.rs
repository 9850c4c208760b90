/*!
Recording what passed through the proxy, through the turn layer's one write
([`commit`]). A client that re-sends its whole history each turn is stored
as one growing thread: the request's nodes that the store already holds are
shared, and the conversation whose head the stored part ends at moves
forward to the new reply. When several clients continue the same head at
once, the first wins and each other becomes a branch there (a conversation
of its own, with its reply), in the same transaction as its turn.

A request whose reply the store already holds (the same request to a
deterministic model: a regenerate) adds only its run, to the conversation
that reply belongs to. A regenerate whose reply is new (a sampling model)
is a sibling: a branch, at the request's last message, of the conversation
of the reply given before. A history whose stored part ends at a node no
conversation heads (the client edited or truncated it, or lost a race
before it began) becomes a branch of the conversation that node belongs
to; one that shares only messages no conversation produced becomes a
conversation of its own. New conversations are named by the request's
`x-skein-conversation-name` header, else titled by their first prompt. A
request with that header continues (or joins) only a conversation of that
name: where the conversations at the node it would continue have other
names, it starts a conversation of its own name there, a branch of theirs.

A failed model call keeps the request's messages and its failed run, which
names them as its input and belongs to no conversation; nothing moves.
Nothing is written for a request that asked not to be stored.
*/

use skein::conversation::commit::{self, Bookmark, OnMoved};
use skein::core::{ConversationId, ConversationSettings, NodeId, Origin, RunRecord};
use skein::engine::RunOutput;
use skein::store::{AsyncStore, ConversationRecord, Store, StoreError};

/// How far back a request's stored nodes are searched for the conversation
/// they belong to.
const ANCESTORS_SEARCHED: usize = 64;

/// How many stored replies to the same request are looked at to find a
/// regenerate's conversation.
const SIBLINGS_SEARCHED: usize = 16;

/// Where a proxied exchange was recorded.
#[derive(Clone, Debug)]
pub struct Recorded {
    pub conversation: ConversationId,
    pub node: NodeId,
}

/// What the client sent besides its messages.
#[derive(Clone, Debug)]
pub struct Meta {
    /// The exact request body.
    pub body: String,
    /// The model the client asked for.
    pub requested: Option<String>,
    /// The `x-skein-conversation-name` header.
    pub name: Option<String>,
    /// The skein model that answered (a new conversation's model).
    pub model: String,
}

impl Meta {
    fn mark(&self, run: &mut RunRecord) {
        run.request = Some(self.body.clone());
        run.requested_model = self.requested.clone();
    }
}

/// Where a reply lands.
enum Place {
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
}

/// Store the exchange of `output` (its request and reply), the run with
/// the exact request body, and move (or create, or branch) its
/// conversation.
pub async fn record(
    store: &Store,
    output: &RunOutput,
    meta: &Meta,
) -> Result<Recorded, StoreError> {
    let thread = output
        .exchange
        .as_ref()
        .expect("the proxy captures every run")
        .thread()
        .clone();
    let node = thread.head_id().expect("an exchange ends with its reply");
    let mut run = output.record(None);
    meta.mark(&mut run);
    let request = thread.parent();
    let name = meta.name.clone();
    let place = place(store, node, &request, name.as_deref()).await?;
    let bookmark = match place {
        Place::Join(conversation) => {
            run.conversation = Some(conversation.clone());
            let joined = Bookmark::new(conversation.clone());
            commit::commit(store, &joined, None, None, vec![run], OnMoved::Fail).await?;
            return Ok(Recorded { conversation, node });
        }
        Place::Continue { owner, from } => {
            let bookmark = Bookmark {
                id: owner.id,
                stored: true,
                name: owner.name,
                origin: owner.origin,
                settings: owner.settings,
            };
            let committed = commit::commit(
                store,
                &bookmark,
                from,
                Some(thread),
                vec![run],
                OnMoved::Branch,
            )
            .await?;
            return Ok(Recorded {
                conversation: committed.conversation.unwrap_or(bookmark.id),
                node,
            });
        }
        Place::New {
            start,
            source: Some(source),
        } => Bookmark {
            name: meta.name.clone(),
            origin: Some(Origin {
                node: start,
                conversation: Some(source.id),
                rerun: None,
            }),
            settings: ConversationSettings {
                title: None,
                ..source.settings
            },
            ..Bookmark::new(ConversationId::random())
        },
        Place::New {
            start,
            source: None,
        } => Bookmark {
            name: meta.name.clone(),
            origin: start.map(|node| Origin {
                node: Some(node),
                ..Origin::default()
            }),
            settings: ConversationSettings {
                model: Some(meta.model.clone()),
                proxy: true,
                ..ConversationSettings::default()
            },
            ..Bookmark::new(ConversationId::random())
        },
    };
    let start = bookmark.origin.as_ref().and_then(|origin| origin.node);
    let committed = commit::commit(
        store,
        &bookmark,
        start,
        Some(thread),
        vec![run],
        OnMoved::Branch,
    )
    .await?;
    Ok(Recorded {
        conversation: committed.conversation.unwrap_or(bookmark.id),
        node,
    })
}

/// Keep a model call that failed by the failure rule
/// ([`commit::failed`]): the request's messages stored, its failed run (with
/// the exact request body) pointing at them, in no conversation and with
/// nothing moved.
pub async fn record_failed(
    store: &Store,
    mut call: commit::FailedCall,
    meta: &Meta,
) -> Result<(), StoreError> {
    meta.mark(&mut call.record);
    commit::failed(store, None, &call).await.map(drop)
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
    request: &skein::Thread,
    name: Option<&str>,
) -> Result<Place, StoreError> {
    let store = store.nonblocking();
    let stored = store.contains(node).await?;
    let place = place_as_read(store, node, stored, request, name).await?;
    if stored || !store.contains(node).await? {
        return Ok(place);
    }
    place_as_read(store, node, true, request, name).await
}

/// [`place`] given whether `node` is stored.
async fn place_as_read(
    store: AsyncStore<'_>,
    node: NodeId,
    node_stored: bool,
    request: &skein::Thread,
    name: Option<&str>,
) -> Result<Place, StoreError> {
    if node_stored {
        if let Some(place) = headed_at(store, node, name).await? {
            return Ok(place);
        }
        if let Some(id) = producing(store, node, None).await? {
            let conversation = store.conversation(&id).await?;
            if name.is_none_or(|name| conversation.name.as_deref() == Some(name)) {
                return Ok(Place::Join(id));
            }
            return Ok(Place::New {
                start: Some(node),
                source: Some(conversation),
            });
        }
    }
    // The newest node of the request the store already holds.
    let mut stored = request.clone();
    while let Some(head) = stored.head_id() {
        if store.contains(head).await? {
            break;
        }
        stored = stored.parent();
    }
    let start = stored.head_id();
    if let Some(start) = start
        && let Some(place) = headed_at(store, start, name).await?
    {
        return Ok(place);
    }
    // A regenerate: another reply to this very request is stored.
    if let Some(start) = start.filter(|start| Some(*start) == request.head_id()) {
        for child in store
            .children(start)
            .await?
            .into_iter()
            .take(SIBLINGS_SEARCHED)
        {
            if let Some(id) = producing(store, child, Some(start)).await? {
                return Ok(Place::New {
                    start: Some(start),
                    source: Some(store.conversation(&id).await?),
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
        let source = match store
            .conversations_at(ancestor.id())
            .await?
            .into_iter()
            .next()
        {
            Some(source) => Some(source),
            None => match producing(store, ancestor.id(), None).await? {
                Some(id) => Some(store.conversation(&id).await?),
                None => None,
            },
        };
        if source.is_some() {
            return Ok(Place::New { start, source });
        }
    }
    Ok(Place::New {
        start,
        source: None,
    })
}

/// Where a turn at `node` lands when conversations head there: on the one
/// named `name` (without a name, the first), else in a new conversation
/// sourced from the first.
async fn headed_at(
    store: AsyncStore<'_>,
    node: NodeId,
    name: Option<&str>,
) -> Result<Option<Place>, StoreError> {
    let conversations = store.conversations_at(node).await?;
    let named = match name {
        None => Some(0),
        Some(name) => conversations
            .iter()
            .position(|conversation| conversation.name.as_deref() == Some(name)),
    };
    let mut conversations = conversations.into_iter();
    Ok(match named {
        Some(index) => conversations.nth(index).map(|owner| Place::Continue {
            owner,
            from: Some(node),
        }),
        None => conversations.next().map(|source| Place::New {
            start: Some(node),
            source: Some(source),
        }),
    })
}

/// The conversation of the newest run that produced `node` (from `input`,
/// when given).
async fn producing(
    store: AsyncStore<'_>,
    node: NodeId,
    input: Option<NodeId>,
) -> Result<Option<ConversationId>, StoreError> {
    Ok(store
        .runs_producing(node)
        .await?
        .into_iter()
        .rev()
        .filter(|run| input.is_none() || run.input_head == input)
        .find_map(|run| run.conversation))
}
