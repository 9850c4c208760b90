/*!
Recording what passed through the proxy, through the turn layer's one write
([`commit`]). A client that re-sends its whole history each turn is stored
as one growing thread: the request's nodes that the store already holds are
shared, and the conversation whose head the stored part ends at moves
forward to the new reply. When several clients continue the same head at
once, the first wins and each other becomes a branch there (a conversation
of its own, with its reply), in the same transaction as its turn. A history
that ends anywhere else (the client edited or truncated it) becomes a new
conversation starting where the stored part ends, titled by its first
prompt.
*/

use skein::conversation::commit::{self, Bookmark, OnMoved};
use skein::core::{ConversationId, ConversationSettings, NodeId, Origin};
use skein::engine::RunOutput;
use skein::store::{Store, StoreError};

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
    let (start, owner) = store
        .run(move |store| {
            // The newest node of the request the store already holds, and
            // the conversation whose head it is.
            let mut stored = request;
            while let Some(head) = stored.head_id() {
                if store.contains(head)? {
                    break;
                }
                stored = stored.parent();
            }
            let start = stored.head_id();
            let owner = match start {
                None => None,
                Some(node) => store.conversations_at(node)?.into_iter().next(),
            };
            Ok((start, owner))
        })
        .await?;
    let bookmark = match owner {
        Some(owner) => Bookmark {
            id: owner.id,
            stored: true,
            name: owner.name,
            origin: owner.origin,
            settings: owner.settings,
        },
        None => Bookmark {
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
