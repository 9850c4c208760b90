/*!
Reruns: counterfactual re-runs of a recorded turn. A rerun's request is its
own thread (removing a part from an early message changes that node and
every node after it), stored like any other and sharing every node the
ablation left untouched; its runs are ordinary run records. The `reruns` row
links them to the turn they re-ran (conversation, turn number and the
turn's assistant node) with the ablation, the sample and baseline runs and
the verdict, so provenance can be checked after a restart.

One transaction stores a rerun's threads, runs and row together. The
dispatching methods and the row parsing are shared; the SQL is SQLite's
here and PostgreSQL's in postgres/reruns.rs.
*/

use crate::error::{Result, StoreError};
use crate::graph::{append_nodes, mark_all};
use crate::records::{ConversationId, RerunId, RunId, RunRecord};
use crate::runs::insert_run;
use crate::sqlite::SqliteStore;
use crate::store::{Store, dispatch};
use rusqlite::{OptionalExtension, Row, params};
use serde::{Deserialize, Serialize};
use skein_core::{NodeId, Thread};

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
        dispatch!(self, s => s.commit_rerun(commit))
    }

    pub fn rerun(&self, id: &RerunId) -> Result<RerunRecord> {
        dispatch!(self, s => s.rerun(id))
    }

    /// The reruns of a conversation's turns, oldest first.
    pub fn reruns_of_conversation(&self, id: &ConversationId) -> Result<Vec<RerunRecord>> {
        dispatch!(self, s => s.reruns_of_conversation(id))
    }

    /// The reruns of the turn whose assistant node is `node`.
    pub fn reruns_of_node(&self, node: NodeId) -> Result<Vec<RerunRecord>> {
        dispatch!(self, s => s.reruns_of_node(node))
    }

    /// The reruns whose (first sample's) answer is `node`.
    pub fn reruns_answering(&self, node: NodeId) -> Result<Vec<RerunRecord>> {
        dispatch!(self, s => s.reruns_answering(node))
    }

    /// Every rerun, oldest first.
    pub fn all_reruns(&self) -> Result<Vec<RerunRecord>> {
        dispatch!(self, s => s.all_reruns())
    }
}

impl SqliteStore {
    pub fn commit_rerun(&self, commit: &RerunCommit<'_>) -> Result<()> {
        let mut marks = Vec::new();
        self.write(|tx| {
            marks.clear();
            for thread in commit.threads {
                append_nodes(tx, self.key(), thread, &mut marks)?;
            }
            for run in commit.runs {
                insert_run(tx, run, run.conversation.as_ref())?;
            }
            insert_rerun(tx, commit.record)
        })?;
        mark_all(&marks, self.key());
        Ok(())
    }

    pub fn rerun(&self, id: &RerunId) -> Result<RerunRecord> {
        self.read(|conn| {
            let raw = conn
                .prepare_cached(&format!("{SELECT_RERUN} WHERE id = ?1"))?
                .query_row([id.as_str()], raw_rerun)
                .optional()?
                .ok_or_else(|| StoreError::RerunNotFound(id.to_string()))?;
            raw.finish()
        })
    }

    pub fn reruns_of_conversation(&self, id: &ConversationId) -> Result<Vec<RerunRecord>> {
        self.query_reruns(
            &format!("{SELECT_RERUN} WHERE conversation = ?1 ORDER BY created, id"),
            [id.as_str()],
        )
    }

    pub fn reruns_of_node(&self, node: NodeId) -> Result<Vec<RerunRecord>> {
        self.query_reruns(
            &format!("{SELECT_RERUN} WHERE turn_node = ?1 ORDER BY created, id"),
            [node.as_bytes()],
        )
    }

    pub fn reruns_answering(&self, node: NodeId) -> Result<Vec<RerunRecord>> {
        self.query_reruns(
            &format!("{SELECT_RERUN} WHERE answer_head = ?1 ORDER BY created, id"),
            [node.as_bytes()],
        )
    }

    pub fn all_reruns(&self) -> Result<Vec<RerunRecord>> {
        self.query_reruns(&format!("{SELECT_RERUN} ORDER BY created, id"), [])
    }

    fn query_reruns(&self, sql: &str, params: impl rusqlite::Params) -> Result<Vec<RerunRecord>> {
        self.read(|conn| {
            let mut stmt = conn.prepare_cached(sql)?;
            let raw = stmt
                .query_map(params, raw_rerun)?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            raw.into_iter().map(RawRerun::finish).collect()
        })
    }
}

/// Insert a rerun's row (its threads and runs are already stored).
pub(crate) fn insert_rerun(conn: &rusqlite::Connection, record: &RerunRecord) -> Result<()> {
    let id_bytes = |id: &Option<NodeId>| id.as_ref().map(|id| id.as_bytes().to_vec());
    conn.prepare_cached(
        "INSERT INTO reruns(id, conversation, turn, turn_node, request_head, answer_head,
             ablation, samples, sample_runs, baseline_runs, verdict, summary, detail, created)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)",
    )?
    .execute(params![
        record.id.as_str(),
        record.conversation.as_str(),
        record.turn,
        record.turn_node.as_bytes(),
        id_bytes(&record.request_head),
        id_bytes(&record.answer_head),
        serde_json::to_string(&record.ablation)?,
        record.samples,
        serde_json::to_string(&record.sample_runs)?,
        serde_json::to_string(&record.baseline_runs)?,
        record.verdict,
        record.summary,
        serde_json::to_string(&record.detail)?,
        record.created_ms,
    ])?;
    Ok(())
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

pub(crate) fn raw_rerun(row: &Row<'_>) -> rusqlite::Result<RawRerun> {
    Ok(RawRerun {
        id: row.get(0)?,
        conversation: row.get(1)?,
        turn: row.get(2)?,
        turn_node: row.get(3)?,
        request_head: row.get(4)?,
        answer_head: row.get(5)?,
        ablation: row.get(6)?,
        samples: row.get(7)?,
        sample_runs: row.get(8)?,
        baseline_runs: row.get(9)?,
        verdict: row.get(10)?,
        summary: row.get(11)?,
        detail: row.get(12)?,
        created_ms: row.get(13)?,
    })
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
