/*!
Opening what a store holds: [`Load`] (a stored conversation, to go on
with), [`BranchAt`] (a branch at any stored node) and [`ReplyAt`] (going on
from any stored node: the conversation it heads, else a branch there), one
request type per operation. Each takes typed ids, parsed once at the surface from what a
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
let going_on = Conversation::reply_at(&store, node, &home).await?;
# Ok(()) }
```
*/

use crate::conversation::Conversation;
use crate::error::{Error, Result};
use crate::landing::owner_of;
use crate::model::Model;
use crate::response::Fork;
use crate::turn::TurnStart;
use skein_core::{BoxFuture, ConversationId, NodeId, RunRecord, Thread};
use skein_engine::{DEFAULT_CHAIN_LIMIT, DriftTracker};
use skein_store::StoreError;
use skein_store::{ConversationRecord, Store};
use std::collections::HashSet;
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
        let conversation = self.store.nonblocking().conversation(self.id).await?;
        at_head(self.store, conversation, self.home, self.model).await
    }
}

/// The stored `conversation` at its head, on `model` when given (else on
/// its own, looked up from `home`).
async fn at_head(
    store: &Store,
    conversation: ConversationRecord,
    home: &Model,
    model: Option<&Model>,
) -> Result<Conversation> {
    let api = store.nonblocking();
    let (thread, last_run) = match conversation.head {
        Some(head) => (
            api.load_thread(head).await?,
            api.runs_producing(head).await?.into_iter().last(),
        ),
        None => (Thread::new(), None),
    };
    let point = TurnStart::stored(thread, last_run);
    let (on, on_model) = match model {
        Some(model) => (model, true),
        None => (home, false),
    };
    Conversation::stored(store, conversation, point, None, on, on_model).await
}

impl<'a> IntoFuture for Load<'a> {
    type Output = Result<Conversation>;
    type IntoFuture = BoxFuture<'a, Result<Conversation>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(self.open())
    }
}

/// A branch at a stored node. It takes the settings (model, tools, chain
/// limit) of the conversation the node belongs to, on the model that gave
/// the node when that conversation's turn sent it elsewhere (a fork's model
/// is the response's), and names that conversation as its
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

    /// The branch runs on `model`, which becomes its own (the source's tools
    /// and chain limit are kept, looked up among `model`'s).
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
                owner_of(api, node, Some(&runs), None).await?,
            ),
        };
        let answering = match (self.model, &owner) {
            (None, Some(owner)) => answered_by(owner, &runs, self.home),
            _ => None,
        };
        let at = TurnStart::stored(thread, runs.into_iter().last());
        let (on, on_model) = match (self.model, &answering) {
            (Some(model), _) => (model, true),
            (None, Some(answering)) => (answering, true),
            (None, None) => (self.home, false),
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
            TurnStart::default(),
            Some(&at.thread),
            on,
            on_model,
        )
        .await?;
        Ok(Fork::new(source, at))
    }
}

/// The model that gave the node, when the owner's turn that produced it
/// (among `runs`, those producing it) ran on another model than the owner
/// names: a branch at a reply goes on with the model that gave it (seed 000:
/// a fork's model is `model or self.model`), as [`Response::fork`] does. It
/// is opened by the name the run was opened as (a profile of `home`'s
/// engine, or a model name), with `home`'s tools. `None`, and the owner's
/// model, when the owner's own model gave it, when no run of the owner's
/// did (a message, a node the owner only stands at), when an imported
/// conversation's run names a file of another machine (as
/// [`Model::home_name_of`] keeps those), or when `home` cannot open the
/// name (a profile this machine's configuration no longer has).
///
/// [`Response::fork`]: crate::Response::fork
fn answered_by(owner: &ConversationRecord, runs: &[RunRecord], home: &Model) -> Option<Model> {
    let run = runs
        .iter()
        .rev()
        .find(|run| run.conversation.as_ref() == Some(&owner.id))?;
    let name = run.profile.as_deref()?;
    let own = owner
        .settings
        .profile
        .as_deref()
        .or(owner.settings.model.as_deref());
    if own == Some(name) || (owner.imported && skein_providers::names_a_file(name)) {
        return None;
    }
    let engine = home.engine();
    Model::open_in(engine.catalog(), name, engine.tools().iter().cloned()).ok()
}

impl<'a> IntoFuture for BranchAt<'a> {
    type Output = Result<Fork>;
    type IntoFuture = BoxFuture<'a, Result<Fork>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(self.open())
    }
}

/// Going on from a stored node, as `skein reply NODE` and the web view's
/// reply do: the conversation whose head the node is (its settings, on
/// [`model`](ReplyAt::model) when given), else a new branch at the node
/// ([`BranchAt`]: the settings and origin of the conversation the node
/// belongs to), stored only once its first turn succeeds. Either way the
/// turn then lands by the landing rule: should the conversation move on
/// before the turn ends, it branches at the node.
/// [`Conversation::is_stored`] tells which it is before the turn.
#[must_use = "a reply does nothing until it is awaited"]
pub struct ReplyAt<'a> {
    store: &'a Store,
    node: NodeId,
    home: &'a Model,
    model: Option<&'a Model>,
    branch_name: Option<String>,
}

impl<'a> ReplyAt<'a> {
    /// The turn runs on `model` (the conversation's stored settings stay as
    /// they are; a branch takes `model` as its own).
    pub fn model(mut self, model: &'a Model) -> ReplyAt<'a> {
        self.model = Some(model);
        self
    }

    /// The name the new conversation takes when the node heads none (a
    /// branch made because the conversation moves on while the turn runs
    /// has no name).
    pub fn branch_name(mut self, name: impl Into<String>) -> ReplyAt<'a> {
        self.branch_name = Some(name.into());
        self
    }

    /// Run to completion, for callers without an async runtime.
    pub fn blocking(self) -> Result<Conversation> {
        crate::blocking::wait(self.into_future())
    }

    async fn open(self) -> Result<Conversation> {
        let api = self.store.nonblocking();
        if let Some(headed) = api.conversations_at(self.node).await?.into_iter().next() {
            let conversation = at_head(self.store, headed, self.home, self.model).await?;
            // Another writer may have moved it on since it was looked up.
            if conversation.head() == Some(self.node) {
                return Ok(conversation);
            }
        }
        let mut branch = Conversation::fork_at(self.store, self.node, self.home);
        if let Some(model) = self.model {
            branch = branch.model(model);
        }
        let mut fork = branch.await?;
        if let Some(name) = self.branch_name {
            fork = fork.name(name);
        }
        Ok(fork.conversation())
    }
}

impl<'a> IntoFuture for ReplyAt<'a> {
    type Output = Result<Conversation>;
    type IntoFuture = BoxFuture<'a, Result<Conversation>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(self.open())
    }
}

impl Conversation {
    /// Go on from the stored `node` (see [`ReplyAt`]).
    pub fn reply_at<'a>(store: &'a Store, node: NodeId, home: &'a Model) -> ReplyAt<'a> {
        ReplyAt {
            store,
            node,
            home,
            model: None,
            branch_name: None,
        }
    }

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

impl Conversation {
    /// The stored `conversation` standing at `point` (its head, or, for a
    /// fork's source, nowhere: `up_to` then bounds what its calls offered
    /// to the fork's node's depth). Reads only its tool offers (and its
    /// origins'), never its runs.
    pub(crate) async fn stored(
        store: &Store,
        conversation: ConversationRecord,
        point: TurnStart,
        up_to: Option<&Thread>,
        home: &Model,
        on_home: bool,
    ) -> Result<Conversation> {
        let drift = recorded_drift(store, &conversation, up_to.unwrap_or(&point.thread)).await?;
        let settings = &conversation.settings;
        let model = match on_home {
            true => home.clone(),
            false => crate::settings::model(&conversation, home)?,
        };
        let tools = crate::settings::tools(settings, &model, &conversation.id)?;
        let mut builder = Conversation::builder(model)
            .tools(tools)
            .chain_limit(
                conversation
                    .settings
                    .chain_limit
                    .unwrap_or(DEFAULT_CHAIN_LIMIT),
            )
            .store(store);
        builder.name = conversation.name.clone();
        builder.origin = conversation.origin.clone();
        builder.start = point;
        builder.stored = true;
        builder.drift = drift;
        builder.id = Some(conversation.id);
        Ok(builder.build())
    }
}

/// What a stored conversation's calls offered, for drift detection, as
/// `thread` (its history, or the part of it a fork starts from) holds them:
/// its tool offers up to the thread's head and those of the conversations it
/// was forked from, each up to its fork, applied oldest first. Reads one
/// row per change of a tool's schema, never the runs.
async fn recorded_drift(
    store: &Store,
    conversation: &ConversationRecord,
    thread: &Thread,
) -> skein_store::Result<DriftTracker> {
    let api = store.nonblocking();
    let depth_of = |node: Option<NodeId>| {
        node.and_then(|node| thread.ancestors().find(|held| held.id() == node))
            .map(|held| held.depth())
    };
    let mut bound = thread.head().map(|head| head.depth());
    let mut levels = Vec::new();
    let mut visited = HashSet::new();
    let mut next = Some((conversation.id.clone(), conversation.origin.clone()));
    while let Some((id, origin)) = next.take() {
        if !visited.insert(id.clone()) {
            break;
        }
        levels.push(api.tool_offers(&id, bound).await?);
        let Some(origin) = origin else { break };
        bound = match (bound, depth_of(origin.node)) {
            (Some(bound), Some(fork)) => Some(bound.min(fork)),
            (bound, fork) => bound.or(fork),
        };
        next = match origin.conversation {
            Some(parent) => match api.conversation(&parent).await {
                Ok(parent) => Some((parent.id, parent.origin)),
                // An origin the store does not hold (a partial import)
                // ends the walk; it has nothing to learn from.
                Err(StoreError::ConversationNotFound(_)) => None,
                Err(error) => return Err(error),
            },
            None => None,
        };
    }
    let mut drift = DriftTracker::default();
    for offer in levels.into_iter().rev().flatten() {
        drift.remember_schema(offer.name, offer.schema);
    }
    Ok(drift)
}
