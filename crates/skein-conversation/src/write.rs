/*!
Writing a [`Conversation`] made in memory to a store after the fact
([`Conversation::log`], what `Response::log` and Python's
`conversation.log` do), and a fork's conversation before its first turn.
*/

use crate::commit;
use crate::conversation::Conversation;
use crate::error::Result;
use crate::turn::TurnStart;
use skein_core::{ConversationId, NodeId, RunRecord};
use skein_store::Store;
use std::collections::HashSet;

impl Conversation {
    /// Write the conversation to its store now, at its current head.
    pub(crate) async fn persist_now(&self) -> Result<()> {
        let Some(store) = self.shared.store.clone() else {
            return Ok(());
        };
        let (stored, thread) = {
            let state = self.state();
            (state.stored, state.point.thread.clone())
        };
        if stored {
            return Ok(());
        }
        commit::create(&store, &self.bookmark(), thread).await?;
        self.state().stored = true;
        Ok(())
    }

    /// Store the conversation up to its head in `store` (its bookmark
    /// created, or moved forward), with the runs made in memory that
    /// produced its messages; nodes already there are shared. What
    /// [`Response::log`](crate::Response::log) does for the head's response, for a conversation
    /// whose responses are gone (the Python package's `conversation.log`).
    /// Returns the conversation's id.
    pub async fn log(&self, store: &Store) -> Result<ConversationId> {
        let head = self.state().point.clone();
        self.log_at(store, &head).await
    }

    /// [`Conversation::log`], blocking.
    pub fn log_blocking(&self, store: &Store) -> Result<ConversationId> {
        crate::blocking::wait(self.log(store))
    }

    /// Store the thread ending at `at` in `store` as this conversation (its
    /// bookmark created, or moved forward), with the runs made in memory
    /// that produced its nodes. Nodes already there are shared.
    pub(crate) async fn log_at(&self, store: &Store, at: &TurnStart) -> Result<ConversationId> {
        let nodes: HashSet<NodeId> = at
            .thread
            .nodes()
            .into_iter()
            .map(|node| node.id())
            .collect();
        let runs: Vec<RunRecord> = self
            .state()
            .runs
            .iter()
            .filter(|run| run.output_head.is_some_and(|head| nodes.contains(&head)))
            .cloned()
            .collect();
        commit::log(store, self.bookmark(), at.thread.clone(), runs).await?;
        Ok(self.id())
    }
}
