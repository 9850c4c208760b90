/*!
Reruns: counterfactual re-runs of a recorded turn. A rerun's request is its
own thread (removing a part from an early message changes that node and
every node after it), stored like any other and sharing every node the
ablation left untouched; its runs are ordinary run records. The `reruns` row
links them to the turn they re-ran (conversation, turn number and the
turn's assistant node) with the ablation, the sample and baseline runs and
the verdict, so provenance can be checked after a restart.

One transaction stores a rerun's threads, runs and row together. The
record, the store's methods and the row parsing are shared; the SQL is in
sqlite/reruns.rs and postgres/reruns.rs.

This module declares `Reruns`, the backend trait sqlite/reruns.rs and
postgres/reruns.rs implement, and holds the public operations that call it:
the async ones on `AsyncStore` and their blocking forms on `Store`.
*/

use crate::async_store::AsyncStore;
use crate::backend::BoxFuture;
use crate::error::{Result, StoreError};
use crate::records::{ConversationId, RerunId, RunId, RunRecord};
use crate::store::Store;
use serde::{Deserialize, Serialize};
use skein_core::{NodeId, Thread};

/// Reruns of recorded turns: the SQL is in sqlite/reruns.rs and
/// postgres/reruns.rs.
pub(crate) trait Reruns {
    fn commit_rerun<'a>(&'a self, commit: &'a RerunCommit<'a>) -> BoxFuture<'a, Result<()>>;
    fn rerun<'a>(&'a self, id: &'a RerunId) -> BoxFuture<'a, Result<RerunRecord>>;
    fn reruns_of_conversation<'a>(
        &'a self,
        id: &'a ConversationId,
    ) -> BoxFuture<'a, Result<Vec<RerunRecord>>>;
    fn reruns_of_node(&self, node: NodeId) -> BoxFuture<'_, Result<Vec<RerunRecord>>>;
    fn reruns_answering(&self, node: NodeId) -> BoxFuture<'_, Result<Vec<RerunRecord>>>;
    fn all_reruns(&self) -> BoxFuture<'_, Result<Vec<RerunRecord>>>;
}

/// One rerun, as recorded.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RerunRecord {
    pub id: RerunId,
    /// The conversation whose turn was re-run.
    pub conversation: ConversationId,
    /// The turn's number in that conversation, from 0.
    pub turn: u32,
    /// The turn's assistant node (its final reply).
    pub turn_node: NodeId,
    /// The first sample's request thread head.
    pub request_head: Option<NodeId>,
    /// The first sample's final node: where a fork from this rerun starts.
    pub answer_head: Option<NodeId>,
    /// The source ids removed.
    pub ablation: Vec<String>,
    pub samples: u32,
    pub sample_runs: Vec<RunId>,
    pub baseline_runs: Vec<RunId>,
    /// `confirmed`, `not-confirmed` or `inconclusive`; `None` when the
    /// baseline was not checked.
    pub verdict: Option<String>,
    /// The one-line summary of what changed.
    pub summary: String,
    /// Everything else the layer above keeps (answers, similarities).
    pub detail: serde_json::Value,
    pub created_ms: i64,
}

/// A rerun's write: the threads its runs produced, the runs, and its row.
#[derive(Clone, Debug)]
pub struct RerunCommit<'a> {
    pub record: &'a RerunRecord,
    /// Every thread the rerun produced (request plus answer, per run).
    pub threads: &'a [Thread],
    pub runs: &'a [RunRecord],
}

pub(crate) const SELECT_RERUN: &str =
    "SELECT id, conversation, turn, turn_node, request_head, answer_head,
        ablation, samples, sample_runs, baseline_runs, verdict, summary, detail, created
     FROM reruns";

impl Store {
    /// Store a rerun: its threads, its runs and its record, in one
    /// transaction.
    pub fn commit_rerun(&self, commit: &RerunCommit<'_>) -> Result<()> {
        self.wait(self.nonblocking().commit_rerun(commit))
    }

    pub fn rerun(&self, id: &RerunId) -> Result<RerunRecord> {
        self.wait(self.nonblocking().rerun(id))
    }

    /// The reruns of a conversation's turns, oldest first.
    pub fn reruns_of_conversation(&self, id: &ConversationId) -> Result<Vec<RerunRecord>> {
        self.wait(self.nonblocking().reruns_of_conversation(id))
    }

    /// The reruns of the turn whose assistant node is `node`.
    pub fn reruns_of_node(&self, node: NodeId) -> Result<Vec<RerunRecord>> {
        self.wait(self.nonblocking().reruns_of_node(node))
    }

    /// The reruns whose (first sample's) answer is `node`.
    pub fn reruns_answering(&self, node: NodeId) -> Result<Vec<RerunRecord>> {
        self.wait(self.nonblocking().reruns_answering(node))
    }

    /// Every rerun, oldest first.
    pub fn all_reruns(&self) -> Result<Vec<RerunRecord>> {
        self.wait(self.nonblocking().all_reruns())
    }
}

/// A row before its JSON columns are parsed (both backends).
pub(crate) struct RawRerun {
    pub(crate) id: String,
    pub(crate) conversation: String,
    pub(crate) turn: u32,
    pub(crate) turn_node: Vec<u8>,
    pub(crate) request_head: Option<Vec<u8>>,
    pub(crate) answer_head: Option<Vec<u8>>,
    pub(crate) ablation: String,
    pub(crate) samples: u32,
    pub(crate) sample_runs: String,
    pub(crate) baseline_runs: String,
    pub(crate) verdict: Option<String>,
    pub(crate) summary: String,
    pub(crate) detail: String,
    pub(crate) created_ms: i64,
}

impl RawRerun {
    pub(crate) fn finish(self) -> Result<RerunRecord> {
        let node = |bytes: &[u8]| {
            NodeId::from_slice(bytes).ok_or_else(|| {
                StoreError::MalformedRow(format!("rerun {} has a malformed node id", self.id))
            })
        };
        Ok(RerunRecord {
            turn_node: node(&self.turn_node)?,
            request_head: self.request_head.as_deref().map(node).transpose()?,
            answer_head: self.answer_head.as_deref().map(node).transpose()?,
            ablation: serde_json::from_str(&self.ablation)?,
            sample_runs: serde_json::from_str(&self.sample_runs)?,
            baseline_runs: serde_json::from_str(&self.baseline_runs)?,
            detail: serde_json::from_str(&self.detail)?,
            conversation: ConversationId(self.conversation),
            turn: self.turn,
            samples: self.samples,
            verdict: self.verdict,
            summary: self.summary,
            created_ms: self.created_ms,
            id: RerunId(self.id),
        })
    }
}

impl AsyncStore<'_> {
    /// [`Store::commit_rerun`].
    pub async fn commit_rerun(&self, commit: &RerunCommit<'_>) -> Result<()> {
        self.store.backend().commit_rerun(commit).await
    }

    /// [`Store::rerun`].
    pub async fn rerun(&self, id: &RerunId) -> Result<RerunRecord> {
        self.store.backend().rerun(id).await
    }

    /// [`Store::reruns_of_conversation`].
    pub async fn reruns_of_conversation(&self, id: &ConversationId) -> Result<Vec<RerunRecord>> {
        self.store.backend().reruns_of_conversation(id).await
    }

    /// [`Store::reruns_of_node`].
    pub async fn reruns_of_node(&self, node: NodeId) -> Result<Vec<RerunRecord>> {
        self.store.backend().reruns_of_node(node).await
    }

    /// [`Store::reruns_answering`].
    pub async fn reruns_answering(&self, node: NodeId) -> Result<Vec<RerunRecord>> {
        self.store.backend().reruns_answering(node).await
    }

    /// [`Store::all_reruns`].
    pub async fn all_reruns(&self) -> Result<Vec<RerunRecord>> {
        self.store.backend().all_reruns().await
    }
}
