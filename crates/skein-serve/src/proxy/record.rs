/*!
Recording what passed through the proxy. A client that re-sends its whole
history each turn is stored as one growing thread: the request's nodes that
the store already holds are shared, and the conversation whose head the
stored part ends at moves forward to the new reply. A history that ends
anywhere else (the client edited or truncated it) becomes a new
conversation branching where the stored part ends.
*/

use serde_json::json;
use skein::core::NodeId;
use skein::engine::RunOutput;
use skein::store::{
    Conversation, ConversationId, NewConversation, Origin, Store, StoreError, TurnCommit,
};

/// Where a proxied exchange was recorded.
#[derive(Clone, Debug)]
pub struct Recorded {
    pub conversation: ConversationId,
    pub node: NodeId,
}

/// Store the exchange of `output` (its request and reply), the run with
/// the exact request body, and move (or create) its conversation.
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
    let mut run = output.record(None);
    run.request = Some(body);
    store
        .run(move |store| {
            // The newest node of the request the store already holds.
            let mut stored = thread.parent();
            while let Some(head) = stored.head_id() {
                if store.contains(head)? {
                    break;
                }
                stored = stored.parent();
            }
            let start = stored.head_id();
            for attempt in 0..2 {
                let conversation = match (attempt, owner(store, start)?) {
                    (0, Some(owner)) => owner,
                    _ => store.create_conversation(NewConversation {
                        name: Some("proxy".into()),
                        head: start,
                        origin: start.map(|node| Origin {
                            node: Some(node),
                            ..Origin::default()
                        }),
                        meta: Some(json!({ "model": model, "proxy": true })),
                        ..NewConversation::default()
                    })?,
                };
                run.conversation = Some(conversation.id.clone());
                match store.commit_turn(&TurnCommit {
                    conversation: &conversation.id,
                    expected_head: start,
                    thread: &thread,
                    runs: std::slice::from_ref(&run),
                }) {
                    Ok(_) => {
                        return Ok(Recorded {
                            conversation: conversation.id,
                            node: thread.head_id().expect("an exchange ends with its reply"),
                        });
                    }
                    // Another request continued the same head first: this
                    // one becomes a branch there.
                    Err(StoreError::HeadMoved(_)) if attempt == 0 => continue,
                    Err(error) => return Err(error),
                }
            }
            unreachable!("the second attempt creates its own conversation")
        })
        .await
}

/// The conversation whose head is `node`, if any.
fn owner(store: &Store, node: Option<NodeId>) -> Result<Option<Conversation>, StoreError> {
    match node {
        None => Ok(None),
        Some(node) => Ok(store
            .conversations_at(node)?
            .into_iter()
            .find(|conversation| conversation.head == Some(node))),
    }
}
