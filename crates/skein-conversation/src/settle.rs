/*!
Where a finished turn leaves its [`Conversation`] handle, as the turn
service landed it: moved forward to the turn; in a branch (the head having
moved under the turn), which the handle follows when none of its own turns
moved it meanwhile; or nowhere, the turn having asked to be told
([`OnMoved::Fail`]). Without a store the same rule is applied in memory.
*/

use crate::commit::OnMoved;
use crate::conversation::{Conversation, Identity, State};
use crate::service;
use crate::turn::TurnStart;
use skein_core::{ConversationId, NodeId, Origin, RunRecord};

/// Where a finished turn left its handle.
pub(crate) enum Settled {
    /// The conversation it ran in moved forward to it.
    Here,
    /// A new branch, the conversation having moved on while it ran.
    Branched(Conversation),
    /// Nowhere: the conversation had moved on (its head is now this).
    Lost(Option<NodeId>),
}

impl Settled {
    /// Where the turn of conversation `from` landed, for its response:
    /// the branch it settled in (in memory too), else what the turn
    /// service (`landed`) says.
    pub(crate) fn landed(&self, from: ConversationId, landed: service::Landed) -> service::Landed {
        match self {
            Settled::Branched(branch) => service::Landed::Branched {
                conversation: branch.id(),
                from,
            },
            Settled::Lost(current) => service::Landed::Lost { current: *current },
            Settled::Here => landed,
        }
    }
}

/// A turn of a handle, from its start until it has settled: a turn that
/// lost its race follows into its branch only when no other turn of the
/// same handle moved it or may still (that one would be the winner, and
/// the handle stays with it).
pub(crate) struct TurnUnderWay<'a> {
    conversation: &'a Conversation,
    moves_at_start: u64,
}

impl<'a> TurnUnderWay<'a> {
    pub(crate) fn begin(conversation: &'a Conversation) -> TurnUnderWay<'a> {
        let mut state = conversation.state();
        state.running += 1;
        TurnUnderWay {
            conversation,
            moves_at_start: state.moves,
        }
    }

    /// Whether the handle may follow this turn elsewhere, `state` being
    /// the handle's.
    fn alone(&self, state: &State) -> bool {
        state.moves == self.moves_at_start && state.running == 1
    }
}

impl Drop for TurnUnderWay<'_> {
    fn drop(&mut self) {
        self.conversation.state().running -= 1;
    }
}

impl Conversation {
    /// Move the bookmark from `from` to `to` as the turn service `landed`
    /// it. Without a store the move is made here, in memory, by the same
    /// rule: when the head had moved, `on_moved` says whether the turn is
    /// lost or lands in a new branch at `from`.
    pub(crate) fn settle(
        &self,
        under_way: &TurnUnderWay<'_>,
        from: &TurnStart,
        to: &TurnStart,
        records: Vec<RunRecord>,
        landed: service::Landed,
        on_moved: OnMoved,
    ) -> Settled {
        let branch_of_this = |id| Identity {
            id,
            name: None,
            origin: Some(Origin {
                node: from.head(),
                conversation: Some(self.id()),
                rerun: None,
            }),
        };
        match landed {
            service::Landed::In(_) => {
                let mut state = self.state();
                state.stored = true;
                state.point = to.clone();
                state.runs.extend(records);
                state.moves += 1;
                Settled::Here
            }
            service::Landed::Branched { conversation, .. } => {
                self.land_elsewhere(under_way, branch_of_this(conversation), from, to, records)
            }
            service::Landed::Lost { current } => Settled::Lost(current),
            service::Landed::Unrecorded | service::Landed::Kept => {
                let mut state = self.state();
                if state.point.head() == from.head() {
                    state.point = to.clone();
                    state.runs.extend(records);
                    state.moves += 1;
                    return Settled::Here;
                }
                let current = state.point.head();
                drop(state);
                match on_moved {
                    OnMoved::Fail => Settled::Lost(current),
                    OnMoved::Branch => self.land_elsewhere(
                        under_way,
                        branch_of_this(ConversationId::random()),
                        from,
                        to,
                        records,
                    ),
                }
            }
        }
    }

    /// A turn from `from` to `to` that landed in another conversation
    /// (`identity`: a branch at `from`). When this handle still stands at `from` and no other
    /// turn of it ran meanwhile, it follows its turn there (its head moved
    /// under it in the store: another writer's turn, which this handle never
    /// saw, so staying would branch again at every turn). Otherwise it stays
    /// with its own turns, and the turn's response belongs to a new handle
    /// on that conversation with this one's settings and hooks.
    fn land_elsewhere(
        &self,
        under_way: &TurnUnderWay<'_>,
        identity: Identity,
        from: &TurnStart,
        to: &TurnStart,
        mut records: Vec<RunRecord>,
    ) -> Settled {
        for record in &mut records {
            record.conversation = Some(identity.id.clone());
        }
        let stored = self.shared.store.is_some();
        let mut state = self.state();
        if state.point.head() == from.head() && under_way.alone(&state) {
            state.identity = identity;
            state.stored = stored;
            state.point = to.clone();
            state.runs.extend(records);
            state.moves += 1;
            return Settled::Here;
        }
        drop(state);
        let mut builder = self.copy_settings(self.shared.model.clone());
        builder.id = Some(identity.id);
        builder.name = identity.name;
        builder.origin = identity.origin;
        builder.store = self.shared.store.clone();
        builder.stored = stored;
        builder.hooks = self.hooks().clone();
        builder.start = to.clone();
        let elsewhere = builder.build();
        elsewhere.state().runs.extend(records);
        Settled::Branched(elsewhere)
    }
}
