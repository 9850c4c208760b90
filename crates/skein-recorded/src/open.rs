/*!
Opening a recorded turn for a surface, once: what `skein explain`, `skein
rerun`, `skein fork --from-rerun` and the web view's report, rerun and
fork from a rerun all do before they act on a stored turn. The turn's
conversation is resolved once (the turn layer's `producer_of_node` for a
reply node), the tools its turns may call are started through the
surface's [`Home`] (a rerun's tool loop calls them again), the model is
the one the caller chose or else the conversation's own, and the turn is
loaded alone ([`RecordedChatBuilder::load_turn`](crate::RecordedChatBuilder::load_turn)).
*/

use crate::chat::RecordedChat;
use crate::embed::Embedder;
use crate::error::Result;
use crate::persist::{LoadedTurn, TurnAt, conversation_of_node};
use skein_conversation::home::{Home, open_chosen, start_offered_tools};
use skein_conversation::{Error, Model};
use skein_store::Store;
use std::sync::Arc;

/// Recorded turn `at` of `store`, loaded alone on the model `chosen`
/// names when given (opened once the tools are started), else on its
/// conversation's own model (looked up from
/// [`Home::home_of`]), comparing and scoring with `embedder` when given
/// (a fork from a rerun needs none), with what serves the tools its
/// conversation's turns offered started first.
pub async fn open_turn<H: Home + ?Sized>(
    store: &Store,
    at: TurnAt,
    home: &H,
    embedder: Option<Arc<dyn Embedder>>,
    chosen: Option<&str>,
) -> Result<LoadedTurn> {
    let id = match &at {
        TurnAt::Reply(node) => conversation_of_node(store, *node).await?,
        TurnAt::Number(id, _) => id.clone(),
    };
    let stored = store.nonblocking().conversation(&id).await?;
    start_offered_tools(store, &stored, home).await?;
    let model = match open_chosen(home, chosen)? {
        Some(model) => model,
        None => {
            let home = home.home_of(&stored).map_err(Error::Surface)?;
            Model::of_conversation(&stored, &home)?
        }
    };
    let mut chat = RecordedChat::on_model(&model).store(store.clone());
    if let Some(embedder) = embedder {
        chat = chat.embedder(embedder);
    }
    chat.load_turn_in(id, at).await
}
