/*!
[`AsyncStore`], the store's async API, reached through
[`Store::nonblocking`]: the same operations as [`Store`]'s, awaited. Every
blocking method of [`Store`] waits for one of these.

On PostgreSQL each operation is one async function awaiting tokio-postgres
on the caller's task: no thread blocks, no blocking pool is involved, and
an idle pooled connection is taken there too. The store's own runtime is
used only to make a new connection (its I/O task must outlive the caller's
runtime), to wait for a free one when all are in use, to time a write's
retry, and to read a thread's rows (so the caller is woken once, not per
batch of rows). On SQLite, whose work happens on the calling thread, each
operation runs where [`Store::run_blocking`] runs work.

Export, import and verify (bulk work of the command line) have no async
form: run them with [`Store::run_blocking`]. Operations that belong to one
concern with logic of its own are written in that concern's module
(resolve.rs, reruns.rs, embeddings.rs, usage.rs, search.rs, family.rs).
*/

use crate::bodies::RequestBody;
use crate::conversations::{check_conversation_name, check_turn_names};
use crate::error::Result;
use crate::graph::{StoredNode, TreeEntry};
use crate::offers::ToolOffer;
use crate::records::{
    Committed, ConversationId, ConversationRecord, ListPosition, RunId, RunRecord, TurnCommit,
};
use crate::store::Store;
use skein_core::{NodeId, Thread};
#[cfg(any(test, feature = "testkit"))]
use {
    crate::graph::AppendReport,
    crate::records::{NewConversation, Origin},
    skein_core::ConversationSettings,
};

/// The async API of a [`Store`], borrowed from it by
/// [`Store::nonblocking`]. Dropping one of its futures before it ends
/// rolls back whatever transaction it had open.
#[derive(Clone, Copy, Debug)]
pub struct AsyncStore<'s> {
    pub(crate) store: &'s Store,
}

impl AsyncStore<'_> {
    #[cfg(any(test, feature = "testkit"))]
    /// [`Store::append`].
    pub async fn append(&self, thread: &Thread) -> Result<AppendReport> {
        self.store.backend().append(thread).await
    }

    /// [`Store::load_thread`].
    pub async fn load_thread(&self, head: NodeId) -> Result<Thread> {
        self.store.backend().load_thread(head).await
    }

    /// [`Store::node`].
    pub async fn node(&self, id: NodeId) -> Result<StoredNode> {
        self.store.backend().node(id).await
    }

    /// [`Store::contains`].
    pub async fn contains(&self, id: NodeId) -> Result<bool> {
        self.store.backend().contains(id).await
    }

    /// [`Store::children`].
    pub async fn children(&self, id: NodeId) -> Result<Vec<NodeId>> {
        self.store.backend().children(id).await
    }

    /// [`Store::nodes_calling`].
    pub async fn nodes_calling(&self, call_id: &str, limit: usize) -> Result<Vec<NodeId>> {
        self.store.backend().nodes_calling(call_id, limit).await
    }

    /// Up to `cap` conversations whose thread holds `node` (found by its
    /// lane first, as search finds them).
    pub async fn conversations_containing(
        &self,
        node: NodeId,
        cap: usize,
    ) -> Result<Vec<crate::search::ConversationRef>> {
        self.store.backend().containing(node, cap, &[]).await
    }

    /// [`Store::subtree`].
    pub async fn subtree(&self, root: NodeId, limit: usize) -> Result<Vec<TreeEntry>> {
        self.store.backend().subtree(root, limit).await
    }

    /// [`Store::ancestry`].
    pub async fn ancestry(&self, head: NodeId, limit: usize) -> Result<Vec<TreeEntry>> {
        self.store.backend().ancestry(head, limit).await
    }

    #[cfg(any(test, feature = "testkit"))]
    /// [`Store::create_conversation`].
    pub async fn create_conversation(&self, new: NewConversation) -> Result<ConversationRecord> {
        if let Some(name) = &new.name {
            check_conversation_name(name)?;
        }
        self.store.backend().create_conversation(new).await
    }

    #[cfg(any(test, feature = "testkit"))]
    /// [`Store::fork`].
    pub async fn fork(
        &self,
        node: NodeId,
        name: Option<String>,
        from: Option<ConversationId>,
    ) -> Result<ConversationRecord> {
        self.create_conversation(NewConversation {
            id: None,
            name,
            head: Some(node),
            origin: Some(Origin {
                node: Some(node),
                conversation: from,
                rerun: None,
            }),
            settings: Default::default(),
        })
        .await
    }

    /// [`Store::conversation`].
    pub async fn conversation(&self, id: &ConversationId) -> Result<ConversationRecord> {
        self.store.backend().conversation(id).await
    }

    /// [`Store::list_conversations`].
    pub async fn list_conversations(&self, limit: usize) -> Result<Vec<ConversationRecord>> {
        self.store.backend().list_conversations(limit).await
    }

    /// [`Store::list_conversations_after`].
    pub async fn list_conversations_after(
        &self,
        after: &ListPosition,
        limit: usize,
    ) -> Result<Vec<ConversationRecord>> {
        self.store
            .backend()
            .list_conversations_after(after, limit)
            .await
    }

    /// [`Store::conversations_at`].
    pub async fn conversations_at(&self, node: NodeId) -> Result<Vec<ConversationRecord>> {
        self.store.backend().conversations_at(node).await
    }

    /// [`Store::conversations_by_ids`].
    pub async fn conversations_by_ids(
        &self,
        ids: &[ConversationId],
    ) -> Result<Vec<ConversationRecord>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        self.store.backend().conversations_by_ids(ids).await
    }

    /// [`Store::rename_conversation`].
    pub async fn rename_conversation(&self, id: &ConversationId, name: Option<&str>) -> Result<()> {
        if let Some(name) = name {
            check_conversation_name(name)?;
        }
        self.store.backend().rename_conversation(id, name).await
    }

    #[cfg(any(test, feature = "testkit"))]
    /// [`Store::set_conversation_settings`].
    pub async fn set_conversation_settings(
        &self,
        id: &ConversationId,
        settings: &ConversationSettings,
    ) -> Result<()> {
        self.store
            .backend()
            .set_conversation_settings(id, settings)
            .await
    }

    #[cfg(any(test, feature = "testkit"))]
    /// [`Store::move_head`].
    pub async fn move_head(
        &self,
        id: &ConversationId,
        expected: Option<NodeId>,
        new: NodeId,
    ) -> Result<()> {
        self.store.backend().move_head(id, expected, new).await
    }

    /// [`Store::commit_turn`]. On SQLite, from a current-thread runtime, a
    /// turn that would wait for another writer is committed on the
    /// blocking pool from a copy (its thread's nodes are shared, so they
    /// are marked as stored all the same).
    pub async fn commit_turn(&self, turn: &TurnCommit<'_>) -> Result<Committed> {
        check_turn_names(turn)?;
        let mut no_probe = |_| {};
        self.store.backend().commit_turn(turn, &mut no_probe).await
    }

    #[cfg(any(test, feature = "testkit"))]
    /// [`Store::record_run`].
    pub async fn record_run(&self, run: &RunRecord) -> Result<()> {
        self.store.backend().record_run(run).await
    }

    /// [`Store::run_record`].
    pub async fn run_record(&self, id: &RunId) -> Result<RunRecord> {
        self.store.backend().run_record(id).await
    }

    /// [`Store::erasures`].
    pub async fn erasures(&self) -> Result<u64> {
        self.store.backend().erasures().await
    }

    /// [`Store::request_body`].
    pub async fn request_body(&self, id: &RunId) -> Result<Option<RequestBody>> {
        self.store.backend().request_body(id).await
    }

    /// [`Store::runs_of_conversation`].
    pub async fn runs_of_conversation(&self, id: &ConversationId) -> Result<Vec<RunRecord>> {
        self.store.backend().runs_of_conversation(id).await
    }

    /// [`Store::runs_producing`].
    pub async fn runs_producing(&self, node: NodeId) -> Result<Vec<RunRecord>> {
        self.store.backend().runs_producing(node).await
    }

    /// [`Store::recent_runs`].
    pub async fn recent_runs(&self, limit: usize) -> Result<Vec<RunRecord>> {
        self.store.backend().recent_runs(limit, false).await
    }

    /// What `conversation`'s own calls offered, one row per change of a
    /// tool's schema, oldest first, up to `up_to_depth` of its thread (all
    /// without it): what schema-drift warnings start from, read without its
    /// runs. A fork's rows start after its origin's (read those up to the
    /// fork's node).
    pub async fn tool_offers(
        &self,
        conversation: &ConversationId,
        up_to_depth: Option<u64>,
    ) -> Result<Vec<ToolOffer>> {
        self.store
            .backend()
            .tool_offers(conversation, up_to_depth)
            .await
    }
}
