/*!
Opening stored conversations, once for every surface: [`Home`] is what a
surface supplies (how it opens a model by name, its default model, the
model a stored conversation's own is looked up from, and how it starts
what serves tools: MCP servers), and the operations here are the one way
the command line, the web view and the Python package get a stored
conversation ready to go on with:

- [`offered_tools`]: the tools a stored conversation's turns may call (its
  settings' tools and every tool its runs offered), which a recorded turn
  loaded again may call, and [`start_offered_tools`] starting them;
- [`ready`]: a stored conversation to go on with, its tools started, on the
  model the caller chose (opened after the tools, so it knows them) or
  else the one it is looked up from ([`Home::home_of`]);
- [`ready_at`]: the same for a turn at a stored node, for the conversation
  the node belongs to ([`owner_of_node`]), or on the default model for a
  node no conversation holds; [`ready_to_ask_again`] for a message asked
  again, for the conversation that asked it first ([`asker_of_node`]).

The surface then opens what it wants with the model these give
([`Conversation::load`](crate::Conversation::load), `reply_at`, `fork_at`,
`again_at`); recorded turns open through `skein_recorded::open_turn`.
*/

use crate::error::{Error, Result};
use crate::landing::{asker_of_node, owner_of_node};
use crate::model::Model;
use skein_core::{BoxFuture, ConversationId, NodeId};
use skein_store::{ConversationRecord, Store};

/// A surface's own error, kept whole (with its causes) through the turn
/// layer's [`Error::Surface`], so the surface can take it back
/// ([`SurfaceError::into_inner`]) and report it as it always does.
#[derive(Debug)]
pub struct SurfaceError(Box<dyn std::error::Error + Send + Sync>);

impl SurfaceError {
    /// `error`, as a surface reports it.
    pub fn new(error: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> SurfaceError {
        SurfaceError(error.into())
    }

    /// The surface's error.
    pub fn into_inner(self) -> Box<dyn std::error::Error + Send + Sync> {
        self.0
    }

    /// The surface's error, borrowed (to downcast it).
    pub fn get_ref(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
        &*self.0
    }
}

// Transparent: the surface's message (in its alternate form too) and its
// causes, each once.
impl std::fmt::Display for SurfaceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(&self.0, f)
    }
}

impl std::error::Error for SurfaceError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

/// What a surface supplies to open stored things: where its models and
/// tools come from.
pub trait Home: Send + Sync {
    /// The model `name` names (a model name or a configured profile), or
    /// the default one for `None`.
    fn open(&self, name: Option<&str>) -> Result<Model, SurfaceError>;

    /// The name of the model a new conversation runs on.
    fn default_name(&self) -> String;

    /// The model to look stored conversation `stored`'s own model up from
    /// (the `home` of [`Model::of_conversation`] and of the turn layer's
    /// loads), so that going on with a conversation opens its own model,
    /// never the default first (which may not even be there: a model file
    /// not downloaded). By default the name [`Model::home_name_of`] gives,
    /// opened by [`Home::open`].
    fn home_of(&self, stored: &ConversationRecord) -> Result<Model, SurfaceError> {
        self.open(Model::home_name_of(stored, &self.default_name()))
    }

    /// Start whatever serves the tools `names` (MCP servers), so that
    /// models opened afterwards know them; by default nothing (plain
    /// built-in tools need nothing). The future owns what it needs, so a
    /// server can hand it on.
    fn start_tools(&self, names: Vec<String>) -> BoxFuture<'static, Result<(), SurfaceError>> {
        let _ = names;
        Box::pin(async { Ok(()) })
    }
}

/// The tools stored conversation `stored`'s turns may call: its settings'
/// tools and every tool any of its runs offered, sorted, each once.
pub async fn offered_tools(
    store: &Store,
    stored: &ConversationRecord,
) -> skein_store::Result<Vec<String>> {
    let runs = store.nonblocking().runs_of_conversation(&stored.id).await?;
    let mut names: Vec<String> = runs
        .iter()
        .flat_map(|run| run.tools.iter().map(|tool| tool.name.clone()))
        .chain(stored.settings.tools.iter().cloned())
        .collect();
    names.sort();
    names.dedup();
    Ok(names)
}

/// Start, through `home`, what serves the tools stored conversation
/// `stored`'s turns may call ([`offered_tools`]): what a recorded turn
/// loaded again (explained, re-run, forked from a rerun) needs.
pub async fn start_offered_tools<H: Home + ?Sized>(
    store: &Store,
    stored: &ConversationRecord,
    home: &H,
) -> Result<()> {
    start(home, offered_tools(store, stored).await?).await
}

/// The models a turn on a stored conversation opens with ([`ready`],
/// [`ready_at`]).
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Ready {
    /// What the stored conversation's own model is looked up from (the
    /// `home` of [`Conversation::load`](crate::Conversation::load),
    /// `reply_at`, `fork_at`, `again_at`): the chosen model when there is
    /// one, else [`Home::home_of`] (the default for a node no conversation
    /// holds).
    pub home: Model,
    /// The model the caller chose by name, opened once the tools were
    /// started: it answers instead of the stored one (pass it to the
    /// opening's `model`).
    pub chosen: Option<Model>,
}

/// Stored conversation `stored`, ready to go on with: what serves its
/// tools started, then the model named `chosen` opened (a surface checks a
/// name before; one that does not open is [`Error::ChosenModel`]), else the
/// one the conversation's own is looked up from ([`Home::home_of`]).
pub async fn ready<H: Home + ?Sized>(
    home: &H,
    stored: &ConversationRecord,
    chosen: Option<&str>,
) -> Result<Ready> {
    start(home, stored.settings.tools.clone()).await?;
    match open_chosen(home, chosen)? {
        Some(chosen) => Ok(Ready {
            home: chosen.clone(),
            chosen: Some(chosen),
        }),
        None => Ok(Ready {
            home: home.home_of(stored).map_err(Error::Surface)?,
            chosen: None,
        }),
    }
}

/// A turn at stored node `node`, ready: the conversation the node belongs
/// to ([`owner_of_node`], whose settings a branch there takes) made
/// [`ready`]; for a node no conversation holds, the model `chosen` names,
/// else the default.
pub async fn ready_at<H: Home + ?Sized>(
    store: &Store,
    node: NodeId,
    home: &H,
    chosen: Option<&str>,
) -> Result<Ready> {
    let owner = match owner_of_node(store, node).await? {
        Some(owner) => Some(store.nonblocking().conversation(&owner).await?),
        None => None,
    };
    ready_or_default(home, owner.as_ref(), chosen).await
}

/// Stored message `node` asked again, ready: the conversation that asked
/// it first ([`asker_of_node`], which
/// [`Conversation::again_at`](crate::Conversation::again_at) branches)
/// made [`ready`], or, for a message no conversation holds, the model
/// `chosen` names, else the default. Returns that conversation too (for
/// `again_at(..).of(..)`, so it is not looked up again).
pub async fn ready_to_ask_again<H: Home + ?Sized>(
    store: &Store,
    node: NodeId,
    home: &H,
    chosen: Option<&str>,
) -> Result<(Option<ConversationId>, Ready)> {
    let asker = match asker_of_node(store, node).await? {
        Some(asker) => Some(store.nonblocking().conversation(&asker).await?),
        None => None,
    };
    let ready = ready_or_default(home, asker.as_ref(), chosen).await?;
    Ok((asker.map(|asker| asker.id), ready))
}

/// `stored` made [`ready`], or with no stored conversation the model
/// `chosen` names, else the default.
async fn ready_or_default<H: Home + ?Sized>(
    home: &H,
    stored: Option<&ConversationRecord>,
    chosen: Option<&str>,
) -> Result<Ready> {
    if let Some(stored) = stored {
        return ready(home, stored, chosen).await;
    }
    Ok(match open_chosen(home, chosen)? {
        Some(chosen) => Ready {
            home: chosen.clone(),
            chosen: Some(chosen),
        },
        None => Ready {
            home: home.open(None).map_err(Error::Surface)?,
            chosen: None,
        },
    })
}

/// The model `chosen` names, opened (after the tools it may need started).
pub fn open_chosen<H: Home + ?Sized>(home: &H, chosen: Option<&str>) -> Result<Option<Model>> {
    chosen
        .map(|name| home.open(Some(name)).map_err(Error::ChosenModel))
        .transpose()
}

/// Start what serves `names` (nothing to do for none).
async fn start<H: Home + ?Sized>(home: &H, names: Vec<String>) -> Result<()> {
    if names.is_empty() {
        return Ok(());
    }
    home.start_tools(names).await.map_err(Error::Surface)
}
