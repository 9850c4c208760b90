/*!
Reruns of recorded turns on SQLite: one transaction stores a rerun's
threads, runs and row together; the rows are read back by id, conversation
and node (crate::reruns holds the record and its row parsing).
*/

use super::SqliteStore;
use super::graph::append_nodes;
use super::runs::insert_run;
use crate::backend::{Backend, BoxFuture};
use crate::blocking;
use crate::bodies::RunToStore;
use crate::error::{Result, StoreError};
use crate::graph::mark_all;
use crate::records::{ConversationId, RerunId};
use crate::reruns::{RawRerun, RerunCommit, RerunRecord, Reruns, SELECT_RERUN};
use rusqlite::{OptionalExtension, Row, params};
use skein_core::NodeId;

impl Reruns for SqliteStore {
    fn commit_rerun<'a>(&'a self, commit: &'a RerunCommit<'a>) -> BoxFuture<'a, Result<()>> {
        Box::pin(blocking::run_borrowing(
            self,
            |store| store.commit_rerun(commit),
            || {
                let record = commit.record.clone();
                let threads = commit.threads.to_vec();
                let runs = commit.runs.to_vec();
                move |store: &SqliteStore| {
                    store.commit_rerun(&RerunCommit {
                        record: &record,
                        threads: &threads,
                        runs: &runs,
                    })
                }
            },
        ))
    }

    fn rerun<'a>(&'a self, id: &'a RerunId) -> BoxFuture<'a, Result<RerunRecord>> {
        let id = id.clone();
        self.deferred(move |store| store.rerun(&id))
    }

    fn reruns_of_conversation<'a>(
        &'a self,
        id: &'a ConversationId,
    ) -> BoxFuture<'a, Result<Vec<RerunRecord>>> {
        let id = id.clone();
        self.deferred(move |store| store.reruns_of_conversation(&id))
    }

    fn reruns_of_node(&self, node: NodeId) -> BoxFuture<'_, Result<Vec<RerunRecord>>> {
        self.deferred(move |store| store.reruns_of_node(node))
    }

    fn reruns_answering(&self, node: NodeId) -> BoxFuture<'_, Result<Vec<RerunRecord>>> {
        self.deferred(move |store| store.reruns_answering(node))
    }

    fn all_reruns(&self) -> BoxFuture<'_, Result<Vec<RerunRecord>>> {
        self.deferred(|store| store.all_reruns())
    }
}

impl SqliteStore {
    pub(crate) fn commit_rerun(&self, commit: &RerunCommit<'_>) -> Result<()> {
        let mut marks = Vec::new();
        self.write(|tx| {
            marks.clear();
            for thread in commit.threads {
                append_nodes(tx, self.key(), thread, &mut marks)?;
            }
            for run in commit.runs {
                insert_run(
                    tx,
                    &RunToStore::cut(run, None, None),
                    run.conversation.as_ref(),
                )?;
            }
            insert_rerun(tx, commit.record)
        })?;
        mark_all(&marks, self.key());
        Ok(())
    }

    pub(crate) fn rerun(&self, id: &RerunId) -> Result<RerunRecord> {
        self.read(|conn| {
            let raw = conn
                .prepare_cached(&format!("{SELECT_RERUN} WHERE id = ?1"))?
                .query_row([id.as_str()], raw_rerun)
                .optional()?
                .ok_or_else(|| StoreError::RerunNotFound(id.to_string()))?;
            raw.finish()
        })
    }

    pub(crate) fn reruns_of_conversation(&self, id: &ConversationId) -> Result<Vec<RerunRecord>> {
        self.query_reruns(
            &format!("{SELECT_RERUN} WHERE conversation = ?1 ORDER BY created, id"),
            [id.as_str()],
        )
    }

    pub(crate) fn reruns_of_node(&self, node: NodeId) -> Result<Vec<RerunRecord>> {
        self.query_reruns(
            &format!("{SELECT_RERUN} WHERE turn_node = ?1 ORDER BY created, id"),
            [node.as_bytes()],
        )
    }

    pub(crate) fn reruns_answering(&self, node: NodeId) -> Result<Vec<RerunRecord>> {
        self.query_reruns(
            &format!("{SELECT_RERUN} WHERE answer_head = ?1 ORDER BY created, id"),
            [node.as_bytes()],
        )
    }

    pub(crate) fn all_reruns(&self) -> Result<Vec<RerunRecord>> {
        self.query_reruns(&format!("{SELECT_RERUN} ORDER BY created, id"), [])
    }
}

impl SqliteStore {
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
