/*!
Recording what passed through the proxy, through the turn layer's one write
([`commit`]). A client that re-sends its whole history each turn is stored
as one growing thread: the request's nodes that the store already holds are
shared, and the conversation whose head the stored part ends at moves
forward to the new reply. When several clients continue the same head at
once, the first wins and each other becomes a branch there (a conversation
of its own, with its reply), in the same transaction as its turn. A history
whose stored part ends at a node no conversation heads (the client edited,
truncated or regenerated it, or lost such a race before it began) becomes
a branch of the conversation that node belongs to; one that shares only
messages no conversation produced becomes a conversation of its own. Either
is titled by its first prompt.
*/

use skein::conversation::commit::{self, Bookmark, OnMoved};
use skein::core::{ConversationId, ConversationSettings, NodeId, Origin};
use skein::engine::RunOutput;
use skein::store::{Store, StoreError};

/// How far back a request's stored nodes are searched for the conversation
/// they belong to.
const ANCESTORS_SEARCHED: usize = 64;

/// Where a proxied exchange was recorded.
#[derive(Clone, Debug)]
pub struct Recorded {
    pub conversation: ConversationId,
    pub node: NodeId,
}

/// Store the exchange of `output` (its request and reply), the run with
/// the exact request body, and move (or create, or branch) its
/// conversation.
pub async fn record(
    store: &Store,
    output: &RunOutput,
    body: String,
    model: String,
) -> Result<Recorded, StoreError> {
    let thread = output
        .exchange
        .as_ref()
        .expect("the proxy captures every run")
        .thread()
        .clone();
    let node = thread.head_id().expect("an exchange ends with its reply");
    let mut run = output.record(None);
    run.request = Some(body);
    let request = thread.parent();
    let (start, owner, source) = store
        .run(move |store| {
            // The same exchange recorded already (the same request to a
            // deterministic model): its run joins the conversation there.
            if let Some(owner) = store.conversations_at(node)?.into_iter().next() {
                return Ok((Some(node), Some(owner), None));
            }
            // The newest node of the request the store already holds.
            let mut stored = request;
            while let Some(head) = stored.head_id() {
                if store.contains(head)? {
                    break;
                }
                stored = stored.parent();
            }
            let start = stored.head_id();
            // The conversation whose head that is continues; otherwise the
            // request branches from the conversation the nearest of its
            // stored nodes belongs to (by a conversation standing there or
            // a run that produced it).
            let mut source = None;
            for (steps, node) in stored.ancestors().enumerate() {
                if steps == ANCESTORS_SEARCHED {
                    break;
                }
                if let Some(at) = store.conversations_at(node.id())?.into_iter().next() {
                    if Some(node.id()) == start {
                        return Ok((start, Some(at), None));
                    }
                    source = Some(at);
                    break;
                }
                if let Some(id) = store
                    .runs_producing(node.id())?
                    .into_iter()
                    .rev()
                    .find_map(|run| run.conversation)
                {
                    source = Some(store.conversation(&id)?);
                    break;
                }
            }
            Ok((start, None, source))
        })
        .await?;
    let bookmark = match (owner, source) {
        (Some(owner), _) => Bookmark {
            id: owner.id,
            stored: true,
            name: owner.name,
            origin: owner.origin,
            settings: owner.settings,
        },
        (None, Some(source)) => Bookmark {
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
        (None, None) => Bookmark {
            origin: start.map(|node| Origin {
                node: Some(node),
                ..Origin::default()
            }),
            settings: ConversationSettings {
                model: Some(model),
                proxy: true,
                ..ConversationSettings::default()
            },
            ..Bookmark::new(ConversationId::random())
        },
    };
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
