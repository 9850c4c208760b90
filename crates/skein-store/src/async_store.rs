/*!
[`AsyncStore`], the store's async API, reached through
[`Store::nonblocking`]: the same operations as [`Store`]'s, awaited.

On PostgreSQL each operation is one async function awaiting tokio-postgres
on the caller's task: no thread blocks, no blocking pool is involved, and
an idle pooled connection is taken there too. The store's own runtime is
used only to make a new connection (its I/O task must outlive the caller's
runtime), to wait for a free one when all are in use, to time a write's
retry, and to read a thread's rows (so the caller is woken once, not per
batch of rows).
The blocking API drives the same function with the bridge
(postgres/bridge.rs). On SQLite, whose work happens on the calling thread,
each operation runs where [`Store::run_blocking`] runs work.

The operations offered are those the turn layer and recorded chats make
(load a thread or a node, whether a node is stored and its children,
commit a turn or a rerun, list conversations, read a conversation or
the conversations headed at a node, a run, a rerun, a conversation's runs
or reruns or the runs behind a node, resolve a prefix, the embedding
cache); code that makes many other calls in a row can run them with the
blocking API inside [`Store::run_blocking`]. Those
that belong to one concern are written beside [`Store`]'s, in that
concern's module (resolve.rs, reruns.rs, embeddings.rs).
*/

use crate::error::Result;
use crate::graph::StoredNode;
use crate::records::{
    Committed, ConversationId, ConversationRecord, ListPosition, RunId, RunRecord, TurnCommit,
};
use crate::store::Store;
use skein_core::{NodeId, Thread};

/// The async API of a [`Store`], borrowed from it by
/// [`Store::nonblocking`]. Dropping one of its futures before it ends
/// rolls back whatever transaction it had open.
#[derive(Clone, Copy, Debug)]
pub struct AsyncStore<'s> {
    pub(crate) store: &'s Store,
}

impl AsyncStore<'_> {
    /// [`Store::load_thread`].
    pub async fn load_thread(&self, head: NodeId) -> Result<Thread> {
        self.store.backend().load_thread_async(head).await
    }

    /// [`Store::commit_turn`]. On SQLite, from a current-thread runtime, the
    /// turn is committed on the blocking pool from a copy (its thread's
    /// nodes are shared, so they are marked as stored all the same).
    pub async fn commit_turn(&self, turn: &TurnCommit<'_>) -> Result<Committed> {
        self.store.backend().commit_turn_async(turn).await
    }

    /// [`Store::conversation`].
    pub async fn conversation(&self, id: &ConversationId) -> Result<ConversationRecord> {
        self.store.backend().conversation_async(id).await
    }

    /// [`Store::contains`].
    pub async fn contains(&self, id: NodeId) -> Result<bool> {
        self.store.backend().contains_async(id).await
    }

    /// [`Store::children`].
    pub async fn children(&self, id: NodeId) -> Result<Vec<NodeId>> {
        self.store.backend().children_async(id).await
    }

    /// [`Store::list_conversations`].
    pub async fn list_conversations(&self, limit: usize) -> Result<Vec<ConversationRecord>> {
        self.store.backend().list_conversations_async(limit).await
    }

    /// [`Store::list_conversations_after`].
    pub async fn list_conversations_after(
        &self,
        after: &ListPosition,
        limit: usize,
    ) -> Result<Vec<ConversationRecord>> {
        self.store
            .backend()
            .list_conversations_after_async(after, limit)
            .await
    }

    /// [`Store::conversations_at`].
    pub async fn conversations_at(&self, node: NodeId) -> Result<Vec<ConversationRecord>> {
        self.store.backend().conversations_at_async(node).await
    }

    /// [`Store::run_record`].
    pub async fn run_record(&self, id: &RunId) -> Result<RunRecord> {
        self.store.backend().run_record_async(id).await
    }

    /// [`Store::node`].
    pub async fn node(&self, id: NodeId) -> Result<StoredNode> {
        self.store.backend().node_async(id).await
    }

    /// [`Store::runs_of_conversation`].
    pub async fn runs_of_conversation(&self, id: &ConversationId) -> Result<Vec<RunRecord>> {
        self.store.backend().runs_of_conversation_async(id).await
    }

    /// [`Store::runs_producing`].
    pub async fn runs_producing(&self, node: NodeId) -> Result<Vec<RunRecord>> {
        self.store.backend().runs_producing_async(node).await
    }
}
