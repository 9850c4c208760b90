/*!
Asking a stored message again ([`AgainAt`]): a retry, an edit or a
regenerated reply, one operation for every surface (`skein again`, the
chat's `!retry` and `!edit`, the web view's edit and regenerate, Python's
`Conversation.again_at`), so where such a turn lands is decided once.

- A user message asked again as it was (a retry): a branch at the message,
  with nothing new, so the model answers that turn again.
- A user message with new content (an edit): a branch where the message
  stood, at its parent; for a thread's first message, a branch from the
  start of its conversation (its origin names the conversation and no
  node), or a new conversation when no conversation holds the message.
- An assistant reply asked again (regenerated): a branch at the request it
  answered, with nothing new.

Each branch takes the settings of the conversation that asked the message
first ([`asker_of_node`](crate::asker_of_node)), unless the caller names
the conversation it is in ([`AgainAt::of`]): a message's parent may be
shared by many conversations (a system prompt), so it cannot say whose edit
this is. The branch is stored with its first turn, like every fork, and
never moves the conversation it comes from.
*/

use crate::conversation::Conversation;
use crate::error::{Error, Result};
use crate::input::TurnInput;
use crate::landing::asker_of;
use crate::model::Model;
use crate::prompt::Prompt;
use crate::response::Fork;
use crate::turn::TurnStart;
use skein_core::{BoxFuture, ConversationId, NodeId, Role};
use skein_store::{ConversationRecord, Store};
use std::future::IntoFuture;

/// A stored message asked again (see the module docs), awaited into the
/// [`Prompt`] that runs it.
#[must_use = "asking again does nothing until it is awaited and sent"]
pub struct AgainAt<'a> {
    store: &'a Store,
    node: NodeId,
    home: &'a Model,
    model: Option<&'a Model>,
    name: Option<String>,
    edited: Option<TurnInput>,
    of: Option<&'a ConversationId>,
}

impl<'a> AgainAt<'a> {
    /// Ask it again in `conversation`, whose history must hold where the
    /// branch starts (the message, or the one before it for an edit;
    /// [`Error::NotInConversation`] otherwise): for a caller that knows
    /// which of the conversations sharing the message it is in (a chat,
    /// whose retry answers as its head's reply did).
    pub fn of(mut self, conversation: &'a ConversationId) -> AgainAt<'a> {
        self.of = Some(conversation);
        self
    }

    /// Ask the user message with this content instead of its own (an
    /// edit). A reply cannot be edited: [`Error::CannotAskAgain`].
    pub fn edited(mut self, input: impl Into<TurnInput>) -> AgainAt<'a> {
        self.edited = Some(input.into());
        self
    }

    /// The branch runs on `model` (the asking conversation's tools and
    /// chain limit are kept, looked up among `model`'s), and takes it as
    /// its own.
    pub fn model(mut self, model: &'a Model) -> AgainAt<'a> {
        self.model = Some(model);
        self
    }

    /// The new conversation's name.
    pub fn name(mut self, name: impl Into<String>) -> AgainAt<'a> {
        self.name = Some(name.into());
        self
    }

    /// Run to completion, for callers without an async runtime.
    pub fn blocking(self) -> Result<Prompt> {
        crate::blocking::wait(self.into_future())
    }

    async fn open(self) -> Result<Prompt> {
        let api = self.store.nonblocking();
        let asked = api.node(self.node).await?;
        let role = asked.message.role;
        let refuse = |why: &'static str| Error::CannotAskAgain {
            node: self.node,
            role: role.as_str(),
            why,
        };
        // Where the branch starts: `None` before a thread's first message.
        let at = match (role, &self.edited, asked.parent) {
            (Role::User, None, _) => Some(self.node),
            (Role::User, Some(_), parent) => parent,
            (Role::Assistant, None, Some(request)) => Some(request),
            (Role::Assistant, None, None) => {
                return Err(refuse(
                    "it answers nothing: there is no request to ask again",
                ));
            }
            (Role::Assistant, Some(_), _) => {
                return Err(refuse(
                    "a reply is regenerated, not edited: ask it again as it is",
                ));
            }
            _ => {
                return Err(refuse(
                    "only a user message (retried or edited) or a reply (regenerated) is asked again",
                ));
            }
        };
        let asker = self.asker(at.is_none()).await?;
        let fork = match at {
            Some(at) => self.branch_at(at, asker.as_ref()).await?,
            None => self.before_first(asker).await?,
        };
        let fork = match self.name {
            Some(name) => fork.name(name),
            None => fork,
        };
        Ok(fork.prompt(self.edited.unwrap_or_default()))
    }

    /// The conversation asking: the one [`of`](AgainAt::of) names, else
    /// [`asker_of_node`](crate::asker_of_node)'s. A branch at a node checks
    /// that the named conversation holds it ([`BranchAt::of`](crate::BranchAt::of));
    /// one `before_first` it starts from nothing, so it is checked here.
    async fn asker(&self, before_first: bool) -> Result<Option<ConversationRecord>> {
        let api = self.store.nonblocking();
        let Some(of) = self.of else {
            return Ok(asker_of(api, self.node).await?);
        };
        let of = api.conversation(of).await?;
        if !before_first {
            return Ok(Some(of));
        }
        let holds = match of.head {
            Some(head) => api.load_thread(head).await?.at(self.node).is_some(),
            None => false,
        };
        if !holds {
            return Err(Error::NotInConversation {
                node: self.node,
                conversation: of.id,
            });
        }
        Ok(Some(of))
    }

    /// A branch at the stored `at`, of `owner` when one asked the message.
    async fn branch_at(&self, at: NodeId, owner: Option<&ConversationRecord>) -> Result<Fork> {
        let mut branch = Conversation::fork_at(self.store, at, self.home);
        if let Some(owner) = owner {
            branch = branch.of(&owner.id);
        }
        if let Some(model) = self.model {
            branch = branch.model(model);
        }
        branch.await
    }

    /// A branch before a thread's first message: from the start of
    /// `owner`, else a new conversation on the chosen or home model.
    async fn before_first(&self, owner: Option<ConversationRecord>) -> Result<Fork> {
        let (on, on_model) = match self.model {
            Some(model) => (model, true),
            None => (self.home, false),
        };
        let source = match owner {
            Some(owner) => {
                Conversation::stored(
                    self.store,
                    owner,
                    TurnStart::default(),
                    Some(&skein_core::Thread::new()),
                    on,
                    on_model,
                )
                .await?
            }
            None => {
                let stand_in = Conversation::builder(on.clone()).store(self.store).build();
                return Ok(Fork::new(stand_in, TurnStart::default()).coming_from(None));
            }
        };
        Ok(source.fork_from_start())
    }
}

impl<'a> IntoFuture for AgainAt<'a> {
    type Output = Result<Prompt>;
    type IntoFuture = BoxFuture<'a, Result<Prompt>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(self.open())
    }
}

impl Conversation {
    /// Ask the stored message `node` again: a retry, an edit
    /// ([`AgainAt::edited`]) or a regenerated reply (see [`AgainAt`]).
    /// `home` says where the asking conversation's model and tools are
    /// looked up, as for [`Conversation::fork_at`].
    pub fn again_at<'a>(store: &'a Store, node: NodeId, home: &'a Model) -> AgainAt<'a> {
        AgainAt {
            store,
            node,
            home,
            model: None,
            name: None,
            edited: None,
            of: None,
        }
    }
}
