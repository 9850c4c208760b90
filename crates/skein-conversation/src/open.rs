/*!
Opening what a store holds: [`Load`] (a stored conversation, to go on
with) and [`BranchAt`] (a branch at any stored node), one request type per
operation. Each takes typed ids, parsed once at the surface from what a
person typed (`Store::resolve_conversation`, `Store::resolve_node`), and
is awaited, or run to completion with `blocking()`:

```no_run
# async fn demo(store: skein_store::Store, id: skein_core::ConversationId,
#               node: skein_core::NodeId, home: skein_conversation::Model,
#               other: skein_conversation::Model) -> skein_conversation::Result<()> {
use skein_conversation::Conversation;
let conversation = Conversation::load(&store, &id, &home).await?;
let on_other = Conversation::load(&store, &id, &home).model(&other).await?;
let branch = Conversation::fork_at(&store, node, &home).of(&id).await?;
# Ok(()) }
```
*/

use crate::conversation::{Conversation, Point};
use crate::error::{Error, Result};
use crate::landing::owner_of;
use crate::model::Model;
use crate::response::Fork;
use skein_core::{BoxFuture, ConversationId, NodeId, Thread};
use skein_store::Store;
use std::future::IntoFuture;

/// Opening the stored conversation `id`: its history, its model, its tools
/// by name and its chain limit (hooks are not stored).
///
/// `home` says where names are looked up: a stored profile name on its
/// engine, and tools among those registered with it. A conversation that
/// stored a model name other than `home`'s opens that model, with `home`'s
/// tools, unless [`model`](Load::model) names the one to use.
#[must_use = "a load does nothing until it is awaited"]
pub struct Load<'a> {
    store: &'a Store,
    id: &'a ConversationId,
    home: &'a Model,
    model: Option<&'a Model>,
}

impl<'a> Load<'a> {
    /// Go on with `model` in this handle, whatever the store names (which
    /// stays as it is): what `skein prompt -m MODEL -c` does. The stored
    /// tools are looked up among `model`'s.
    pub fn model(mut self, model: &'a Model) -> Load<'a> {
        self.model = Some(model);
        self
    }

    /// Run to completion, for callers without an async runtime.
    pub fn blocking(self) -> Result<Conversation> {
        crate::blocking::wait(self.into_future())
    }

    async fn open(self) -> Result<Conversation> {
        let api = self.store.nonblocking();
        let conversation = api.conversation(self.id).await?;
        let (thread, last_run) = match conversation.head {
            Some(head) => (
                api.load_thread(head).await?,
                api.runs_producing(head).await?.into_iter().last(),
            ),
            None => (Thread::new(), None),
        };
        let point = Point::stored(thread, last_run);
        let (on, on_model) = match self.model {
            Some(model) => (model, true),
            None => (self.home, false),
        };
        Conversation::stored(self.store, conversation, point, None, on, on_model).await
    }
}

impl<'a> IntoFuture for Load<'a> {
    type Output = Result<Conversation>;
    type IntoFuture = BoxFuture<'a, Result<Conversation>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(self.open())
    }
}

/// A branch at a stored node. It takes the settings (model, tools, chain
/// limit) of the conversation the node belongs to, and names it as its
/// origin: the conversation whose head it is, else the one whose turn
/// produced it ([`owner_of_node`](crate::owner_of_node)), or the one
/// [`of`](BranchAt::of) names. A node of no conversation (an imported or
/// hand-made one) branches with `home`'s model and no tools. Either way the
/// branch has the store attached, and is stored with its first turn.
#[must_use = "a branch does nothing until it is awaited"]
pub struct BranchAt<'a> {
    store: &'a Store,
    node: NodeId,
    home: &'a Model,
    of: Option<&'a ConversationId>,
    model: Option<&'a Model>,
}

impl<'a> BranchAt<'a> {
    /// Branch as a branch of `conversation`, whose history must hold the
    /// node ([`Error::NotInConversation`] otherwise): for a node several
    /// conversations share, such as a prompt asked again, whose owner
    /// cannot be told (regenerating a reply branches at its prompt, of the
    /// conversation whose turn made the reply).
    pub fn of(mut self, conversation: &'a ConversationId) -> BranchAt<'a> {
        self.of = Some(conversation);
        self
    }

    /// The branch runs on `model` (the source's tools and chain limit are
    /// kept, looked up among `model`'s).
    pub fn model(mut self, model: &'a Model) -> BranchAt<'a> {
        self.model = Some(model);
        self
    }

    /// Run to completion, for callers without an async runtime.
    pub fn blocking(self) -> Result<Fork> {
        crate::blocking::wait(self.into_future())
    }

    async fn open(self) -> Result<Fork> {
        let (store, node) = (self.store, self.node);
        let api = store.nonblocking();
        let runs = api.runs_producing(node).await?;
        let (thread, owner) = match self.of {
            Some(of) => {
                let of = api.conversation(of).await?;
                let held = match of.head {
                    Some(head) => api.load_thread(head).await?.at(node),
                    None => None,
                };
                let Some(thread) = held else {
                    return Err(Error::NotInConversation {
                        node,
                        conversation: of.id,
                    });
                };
                (thread, Some(of))
            }
            None => (
                api.load_thread(node).await?,
                owner_of(api, node, Some(&runs)).await?,
            ),
        };
        let at = Point::stored(thread, runs.into_iter().last());
        let (on, on_model) = match self.model {
            Some(model) => (model, true),
            None => (self.home, false),
        };
        let Some(owner) = owner else {
            // The source is a stand-in lending the model's settings.
            let source = Conversation::builder(on.clone()).store(store).build();
            return Ok(Fork::new(source, at).coming_from(None));
        };
        // The source lends its settings and what its calls offered up to
        // the node; its own thread is not needed.
        let source = Conversation::stored(
            store,
            owner,
            Point::default(),
            Some(&at.thread),
            on,
            on_model,
        )
        .await?;
        Ok(Fork::new(source, at))
    }
}

impl<'a> IntoFuture for BranchAt<'a> {
    type Output = Result<Fork>;
    type IntoFuture = BoxFuture<'a, Result<Fork>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(self.open())
    }
}

impl Conversation {
    /// Open the stored conversation `id` (see [`Load`]).
    pub fn load<'a>(store: &'a Store, id: &'a ConversationId, home: &'a Model) -> Load<'a> {
        Load {
            store,
            id,
            home,
            model: None,
        }
    }

    /// Branch at the stored `node` (see [`BranchAt`]).
    pub fn fork_at<'a>(store: &'a Store, node: NodeId, home: &'a Model) -> BranchAt<'a> {
        BranchAt {
            store,
            node,
            home,
            of: None,
            model: None,
        }
    }
}
