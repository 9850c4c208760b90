/*!
The one place a turn is written: [`commit`], and [`failed`] for a model call
that failed. Every surface (a live [`Conversation`](crate::Conversation), a
recorded chat, the recording proxy, the command line) records its turns
through them, so a turn is always one store transaction: its nodes, its
runs, and where it lands.

Where a turn lands depends on its [`Bookmark`]: a conversation the store
already holds moves forward by compare-and-set from the head the turn
started at; one it does not hold yet is created in the same transaction.
When another writer moved the head first, the turn's nodes and runs are
stored either way, and the caller's [`OnMoved`] says whether the turn fails
with the head-moved error or becomes a branch: a new conversation at the
turn's head whose origin is the conversation and node it started from.

A model call that fails is written by the failure rule, [`failed`], and
nothing else: the request it sent (the history and the turn's new messages:
the user's text, tool results) is stored and its failed run points at it,
in one transaction, and no bookmark moves or is created. So a failed turn's
input can be found and shown like any message, and `verify` and an export
see every node a run names. [`keep`] writes the same way the calls of a
turn that records nothing (a recorded chat's failed, paused or unfinished
tool loop), so that usage counts every model call.
*/

use skein_core::{
    ConversationId, ConversationSettings, Message, NodeId, Origin, Role, RunRecord, Thread,
};
use skein_engine::{Engine, EngineError, Prepared};
use skein_store::{
    Committed, ConversationRecord, NewConversation, OnConflict, Store, StoreError, Target,
    TurnCommit,
};

/// A conversation as the turns written to it see it: its id, whether the
/// store holds it yet, and what creates it there when not.
#[derive(Clone, Debug)]
pub struct Bookmark {
    pub(crate) id: ConversationId,
    /// Whether the store holds the conversation.
    pub(crate) stored: bool,
    pub(crate) name: Option<String>,
    pub(crate) origin: Option<Origin>,
    pub(crate) settings: ConversationSettings,
}

impl Bookmark {
    pub fn id(&self) -> &ConversationId {
        &self.id
    }

    pub fn origin(&self) -> Option<&Origin> {
        self.origin.as_ref()
    }

    /// Follow a turn written to this conversation that `landed` there,
    /// ending at `head`: stored once the turn landed in it, the branch once
    /// it branched (the landing rule); where it stood otherwise.
    pub fn follow(&mut self, landed: &crate::service::Landed, head: Option<NodeId>) {
        match landed {
            crate::service::Landed::In(_) => self.stored = true,
            crate::service::Landed::Branched { conversation, .. } => {
                *self = self.branched(conversation.clone(), head);
            }
            crate::service::Landed::Unrecorded
            | crate::service::Landed::Lost { .. }
            | crate::service::Landed::Kept => {}
        }
    }

    /// A conversation the store does not hold yet: its first turn creates
    /// it.
    pub(crate) fn new(id: ConversationId) -> Bookmark {
        Bookmark {
            id,
            stored: false,
            name: None,
            origin: None,
            settings: ConversationSettings::default(),
        }
    }

    /// The row that creates the conversation, titled `title` when it has
    /// neither a name nor a title (see [`Bookmark::title`]).
    fn row(&self, title: Option<String>) -> NewConversation {
        let mut settings = self.settings.clone();
        if self.name.is_none() && settings.title.is_none() {
            settings.title = title;
        }
        NewConversation {
            id: Some(self.id.clone()),
            name: self.name.clone(),
            head: None,
            origin: self.origin.clone(),
            settings,
        }
    }
}

impl Bookmark {
    /// What a new conversation created from `thread` is titled by when it
    /// has neither a name nor a title: its own first prompt (the first user
    /// message after where it starts). A branch with no prompt of its own
    /// takes the prompt it answers again (the nearest one at or before its
    /// start), numbered among the answers at its start ("Q (2)", "Q (3)")
    /// or marked "Q (fork)" while it has no message of its own, so that
    /// alternatives are told apart in lists. Reads the store only for a
    /// numbered branch (the start's children).
    async fn title(
        &self,
        store: &Store,
        thread: Option<&Thread>,
    ) -> Result<Option<String>, StoreError> {
        let Some(thread) = thread else {
            return Ok(None);
        };
        if self.name.is_some() || self.settings.title.is_some() {
            return Ok(None);
        }
        let start = self.origin.as_ref().and_then(|origin| origin.node);
        let (own, answered) = prompts(thread, start);
        if let Some(own) = own {
            return Ok(ConversationSettings::title_from(&own.joined_text()));
        }
        let Some(first) =
            answered.and_then(|message| ConversationSettings::title_from(&message.joined_text()))
        else {
            return Ok(None);
        };
        let Some(start) = start else {
            return Ok(Some(first));
        };
        let next = thread
            .ancestors()
            .find(|node| node.parent_id() == Some(start))
            .map(|node| node.id());
        Ok(Some(match next {
            None => format!("{first} (fork)"),
            Some(next) => {
                let others = store
                    .nonblocking()
                    .children(start)
                    .await?
                    .into_iter()
                    .filter(|child| *child != next)
                    .count();
                format!("{first} ({})", others + 1)
            }
        }))
    }

    /// A conversation the store holds, as its record says.
    pub fn of(record: ConversationRecord) -> Bookmark {
        Bookmark {
            id: record.id,
            stored: true,
            name: record.name,
            origin: record.origin,
            settings: record.settings,
        }
    }

    /// The branch a turn of this conversation became, in `into`, when the
    /// conversation moved on while it ran: started at `at`, this one's
    /// settings.
    pub fn branched(&self, into: ConversationId, at: Option<NodeId>) -> Bookmark {
        Bookmark {
            id: into,
            stored: true,
            name: None,
            origin: Some(Origin {
                node: at,
                conversation: Some(self.id.clone()),
                rerun: None,
            }),
            settings: self.settings.clone(),
        }
    }

    /// A conversation the store does not hold yet, created by its first
    /// turn with this name, origin and settings.
    pub(crate) fn unstored(
        name: Option<String>,
        origin: Option<Origin>,
        settings: ConversationSettings,
    ) -> Bookmark {
        Bookmark {
            name,
            origin,
            settings,
            ..Bookmark::new(ConversationId::random())
        }
    }
}

/// What a turn does when the conversation moved on while it ran.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OnMoved {
    /// Fail with [`StoreError::HeadMoved`]: the caller decides.
    Fail,
    /// Land in a new conversation branching where the turn started (the
    /// landing rule, on every surface).
    #[default]
    Branch,
}

/// Write one turn in one transaction: `thread` (the history after the
/// turn; `None` for runs whose nodes are stored already, which move
/// nothing) and `runs`, landing in `bookmark`'s conversation from `from`
/// (the head the turn started at). Runs without a thread for a conversation
/// the store does not hold are recorded alone, under the conversation
/// their records name. A failed model call is written by [`failed`].
///
/// When the connection is lost while the store commits (PostgreSQL's
/// [`StoreError::CommitUnknown`]), the same turn is committed once more:
/// that converges whether or not the first commit landed (see
/// [`commit_converging`]). If the second attempt fails too, the first
/// error is returned: the turn's outcome is still unknown.
pub async fn commit(
    store: &Store,
    bookmark: &Bookmark,
    from: Option<NodeId>,
    thread: Option<Thread>,
    runs: Vec<RunRecord>,
    on_moved: OnMoved,
) -> Result<Committed, StoreError> {
    let target = match (bookmark.stored, &thread) {
        (true, _) => Target::Existing {
            id: bookmark.id.clone(),
            expected_head: from,
            on_conflict: match on_moved {
                OnMoved::Fail => OnConflict::Fail,
                OnMoved::Branch => {
                    OnConflict::Branch(Box::new(branch_row(bookmark, from, thread.as_ref())))
                }
            },
        },
        (false, Some(thread)) => Target::New(Box::new(
            bookmark.row(bookmark.title(store, Some(thread)).await?),
        )),
        (false, None) => Target::Detached,
    };
    let creates = matches!(target, Target::New(_));
    let turn = TurnCommit {
        target,
        thread: thread.as_ref(),
        runs: &runs,
    };
    match commit_converging(store, &turn).await {
        // Another writer took the name while the turn ran: the turn's
        // messages and runs are kept all the same (detached, as a failed
        // first turn's are), so the answer is not lost, and the caller
        // hears why no conversation holds it.
        Err(taken @ StoreError::NameTaken { .. }) if creates => {
            let runs: Vec<RunRecord> = runs
                .into_iter()
                .map(|mut run| {
                    if run.conversation.as_ref() == Some(&bookmark.id) {
                        run.conversation = None;
                    }
                    run
                })
                .collect();
            let kept = TurnCommit {
                target: Target::Detached,
                thread: thread.as_ref(),
                runs: &runs,
            };
            commit_converging(store, &kept).await?;
            Err(taken)
        }
        other => other,
    }
}

/// Commit `turn`, and once more if the first commit's outcome is unknown.
/// A turn is safe to commit twice: its nodes are content (equal rows), its
/// runs and a new conversation's row (or a branch's, whose id is chosen
/// before the first attempt) are written once and left as they are after,
/// and the head's compare-and-set accepts the head already at the turn's.
async fn commit_converging(store: &Store, turn: &TurnCommit<'_>) -> Result<Committed, StoreError> {
    let api = store.nonblocking();
    match api.commit_turn(turn).await {
        Err(unknown @ StoreError::CommitUnknown { .. }) => {
            api.commit_turn(turn).await.map_err(|_| unknown)
        }
        other => other,
    }
}

/// Add `runs` (whose nodes the store holds) to `conversation`, moving
/// nothing: a regenerate whose reply was stored already.
pub(crate) async fn keep_in(
    store: &Store,
    conversation: &ConversationId,
    mut runs: Vec<RunRecord>,
) -> Result<Committed, StoreError> {
    for run in &mut runs {
        run.conversation = Some(conversation.clone());
    }
    commit_converging(
        store,
        &TurnCommit {
            target: Target::Detached,
            thread: None,
            runs: &runs,
        },
    )
    .await
}

/// Store a conversation with no turn of its own yet (a fork created before
/// its first prompt): the nodes of `thread` it starts at and its row, in
/// one transaction.
pub async fn create(
    store: &Store,
    bookmark: &Bookmark,
    thread: Thread,
) -> Result<Committed, StoreError> {
    let row = bookmark.row(bookmark.title(store, Some(&thread)).await?);
    commit_converging(
        store,
        &TurnCommit {
            target: Target::New(Box::new(row)),
            thread: (!thread.is_empty()).then_some(&thread),
            runs: &[],
        },
    )
    .await
}

/// The conversation a turn that lost its race lands in: the same settings,
/// titled by the turn (the store sets its origin to where it started).
fn branch_row(
    bookmark: &Bookmark,
    from: Option<NodeId>,
    thread: Option<&Thread>,
) -> NewConversation {
    let mut settings = bookmark.settings.clone();
    settings.title = thread.and_then(|thread| first_prompt(thread, from));
    NewConversation {
        // Chosen once, so a commit made again lands in the same branch.
        id: Some(ConversationId::random()),
        settings,
        ..NewConversation::default()
    }
}

/// A title from the first user message after `start` in `thread` (the
/// conversation's own first prompt), else the prompt it answers again.
fn first_prompt(thread: &Thread, start: Option<NodeId>) -> Option<String> {
    let (own, answered) = prompts(thread, start);
    own.or(answered)
        .and_then(|message| ConversationSettings::title_from(&message.joined_text()))
}

/// The first user message after `start` in `thread` (its own), else the
/// prompt at or before `start` that the thread answers (the nearest user
/// message there). Walks back from the head only as far as it must.
fn prompts(thread: &Thread, start: Option<NodeId>) -> (Option<&Message>, Option<&Message>) {
    let mut after_start = true;
    let mut own: Option<&Message> = None;
    for node in thread.ancestors() {
        if Some(node.id()) == start {
            if own.is_some() {
                return (own, None);
            }
            after_start = false;
        }
        if node.message().role == Role::User {
            if !after_start {
                return (None, Some(node.message()));
            }
            own = Some(node.message());
        }
    }
    (own, None)
}

/// A model call that failed after it started (the call failed, its reply
/// never met the output contract, or it was cancelled): the record of its
/// run, the request it sent, and what a cancelled call had said.
#[derive(Clone, Debug)]
pub struct FailedCall {
    /// The failed run, with the usage the engine's ledger counted for it.
    /// It names no conversation; [`failed`] decides that.
    pub record: RunRecord,
    /// The request as rendered: the history, then the call's new messages
    /// (its input head is the record's `input_head`).
    pub input: Thread,
    /// The text a cancelled call had produced, as an assistant message:
    /// the cancelled run's output, never a turn of any conversation.
    pub partial: Option<Message>,
}

/// The failed call `prepared` made, when it failed after its model call
/// started (see [`Prepared::failed_record`]); `None` for failures before
/// any call, which leave nothing to record.
pub fn failed_call(
    engine: &Engine,
    prepared: &Prepared,
    error: &EngineError,
) -> Option<FailedCall> {
    let mut record = prepared.failed_record(error)?;
    if let Some(entry) = engine.ledger().entry(&record.id) {
        record.usage = entry.usage;
        record.usage_complete = entry.usage_complete;
    }
    let partial = match error {
        EngineError::Cancelled { partial, .. } if !partial.is_empty() => {
            Some(Message::assistant(partial.clone()))
        }
        _ => None,
    };
    Some(FailedCall {
        record,
        input: prepared.thread.clone(),
        partial,
    })
}

/// The failure rule: store `call`'s input messages (those the store lacks)
/// and its failed run, whose input head is the request's last message, in
/// one transaction. No bookmark moves and no conversation is created: the
/// run belongs to `conversation` when the store holds it, else to none (a
/// failed first turn, or a call no conversation owns yet). A cancelled
/// call's partial text is stored too, as the node its run (marked
/// `cancelled`) output: content like any other, which no conversation
/// holds.
pub async fn failed(
    store: &Store,
    conversation: Option<&Bookmark>,
    call: &FailedCall,
) -> Result<Committed, StoreError> {
    let mut record = call.record.clone();
    record.input_head = call.input.head_id();
    let thread = match &call.partial {
        Some(partial) => call.input.push(partial.clone()),
        None => call.input.clone(),
    };
    if call.partial.is_some() {
        record.output_head = thread.head_id();
    }
    keep(store, conversation, &thread, vec![record]).await
}

/// Keep model calls that no turn records (a failed call, and the calls a
/// recorded turn made before it failed, paused or hit its chain limit) so
/// that usage counts them: the nodes of `thread` their records name (those
/// the store lacks) and `runs`, in one transaction, moving nothing and
/// creating nothing, as [`failed`] does. The runs belong to `conversation`
/// when the store holds it, else to none.
pub async fn keep(
    store: &Store,
    conversation: Option<&Bookmark>,
    thread: &Thread,
    mut runs: Vec<RunRecord>,
) -> Result<Committed, StoreError> {
    let owner = conversation
        .filter(|bookmark| bookmark.stored)
        .map(|bookmark| bookmark.id.clone());
    for record in &mut runs {
        record.conversation = owner.clone();
    }
    commit_converging(
        store,
        &TurnCommit {
            target: Target::Detached,
            thread: (!thread.is_empty()).then_some(thread),
            runs: &runs,
        },
    )
    .await
}

/// Store `thread` as `bookmark`'s conversation after the fact (a response
/// logged later): created when the store lacks it, moved forward when
/// `thread` extends its head, and otherwise only the nodes and the runs
/// kept. Runs the store already holds are not written again. One
/// transaction.
pub(crate) async fn log(
    store: &Store,
    mut bookmark: Bookmark,
    thread: Thread,
    runs: Vec<RunRecord>,
) -> Result<Committed, StoreError> {
    let api = store.nonblocking();
    let mut new_runs = Vec::with_capacity(runs.len());
    for run in runs {
        if matches!(
            api.run_record(&run.id).await,
            Err(StoreError::RunNotFound(_))
        ) {
            new_runs.push(run);
        }
    }
    let target = match api.conversation(&bookmark.id).await {
        Err(StoreError::ConversationNotFound(_)) => {
            bookmark.stored = false;
            Target::New(Box::new(
                bookmark.row(bookmark.title(store, Some(&thread)).await?),
            ))
        }
        Err(error) => return Err(error),
        Ok(existing) => {
            let forward = existing.head.is_none_or(|head| thread.at(head).is_some());
            if forward && existing.head != thread.head_id() {
                Target::Existing {
                    id: bookmark.id.clone(),
                    expected_head: existing.head,
                    on_conflict: OnConflict::Fail,
                }
            } else {
                Target::Detached
            }
        }
    };
    commit_converging(
        store,
        &TurnCommit {
            target,
            thread: Some(&thread),
            runs: &new_runs,
        },
    )
    .await
}
