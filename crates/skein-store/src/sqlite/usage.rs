/*!
The rows usage accounts are added up from, on SQLite: runs by id, the runs
of a conversation, the runs that produced a node, a thread's node ids, and
the `run_links` index read in both directions (crate::usage adds them up).
*/

use super::SqliteStore;
use crate::backend::BoxFuture;
use crate::error::Result;
use crate::records::{ConversationId, RunId};
use crate::usage::{RunOutputs, RunRow, UsageRows};
use rusqlite::{OptionalExtension, params};
use skein_core::NodeId;
use std::collections::HashSet;

impl UsageRows for SqliteStore {
    fn run_rows<'a>(&'a self, ids: &'a [RunId]) -> BoxFuture<'a, Result<Vec<RunRow>>> {
        let ids = ids.to_vec();
        self.deferred(move |store| store.run_rows(&ids))
    }

    fn conversation_run_rows<'a>(
        &'a self,
        id: &'a ConversationId,
    ) -> BoxFuture<'a, Result<RunOutputs>> {
        let id = id.clone();
        self.deferred(move |store| store.conversation_run_rows(&id))
    }

    fn ancestor_ids(&self, head: NodeId) -> BoxFuture<'_, Result<HashSet<NodeId>>> {
        self.deferred(move |store| store.ancestor_ids(head))
    }

    fn link_sources<'a>(
        &'a self,
        kind: &'a str,
        targets: &'a [&'a str],
    ) -> BoxFuture<'a, Result<Vec<RunId>>> {
        let kind = kind.to_string();
        let targets: Vec<String> = targets.iter().map(|target| target.to_string()).collect();
        self.deferred(move |store| {
            let targets: Vec<&str> = targets.iter().map(String::as_str).collect();
            store.link_sources(&kind, &targets)
        })
    }

    fn link_targets<'a>(
        &'a self,
        kind: &'a str,
        runs: &'a [RunId],
    ) -> BoxFuture<'a, Result<Vec<String>>> {
        let (kind, runs) = (kind.to_string(), runs.to_vec());
        self.deferred(move |store| store.link_targets(&kind, &runs))
    }
}

impl SqliteStore {
    pub(crate) fn run_rows(&self, ids: &[RunId]) -> Result<Vec<RunRow>> {
        self.read(|conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT id, output_head, status, input_tokens, output_tokens, cache_read_tokens,
                        cache_write_tokens, usage_complete, model, provider
                 FROM runs WHERE id = ?1",
            )?;
            let mut rows = Vec::with_capacity(ids.len());
            for id in ids {
                let row = stmt
                    .query_row([id.as_str()], |row| {
                        Ok((
                            row.get::<_, String>(0)?,
                            row.get::<_, Option<Vec<u8>>>(1)?,
                            row.get::<_, String>(2)?,
                            [row.get(3)?, row.get(4)?, row.get(5)?, row.get(6)?],
                            row.get::<_, bool>(7)?,
                            row.get::<_, String>(8)?,
                            row.get::<_, String>(9)?,
                        ))
                    })
                    .optional()?;
                if let Some((id, output, status, tokens, complete, model, provider)) = row {
                    rows.push(RunRow::new(
                        id,
                        model,
                        provider,
                        output.as_deref(),
                        &status,
                        tokens,
                        complete,
                    )?);
                }
            }
            Ok(rows)
        })
    }

    /// A conversation's runs with the node each produced.
    pub(crate) fn conversation_run_rows(&self, id: &ConversationId) -> Result<RunOutputs> {
        self.read(|conn| {
            let mut stmt =
                conn.prepare_cached("SELECT id, output_head FROM runs WHERE conversation = ?1")?;
            let rows = stmt.query_map([id.as_str()], |row| {
                Ok((
                    RunId(row.get(0)?),
                    row.get::<_, Option<Vec<u8>>>(1)?
                        .as_deref()
                        .and_then(NodeId::from_slice),
                ))
            })?;
            Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
        })
    }

    /// The ids of `head` and every node before it.
    pub(crate) fn ancestor_ids(&self, head: NodeId) -> Result<HashSet<NodeId>> {
        self.read(|conn| {
            let mut stmt = conn.prepare_cached(
                "WITH RECURSIVE up(seq) AS (
                     SELECT seq FROM nodes WHERE id = ?1
                     UNION ALL
                     SELECT n.parent FROM up JOIN nodes n ON n.seq = up.seq
                     WHERE n.parent IS NOT NULL
                 )
                 SELECT n.id FROM up JOIN nodes n ON n.seq = up.seq",
            )?;
            let rows = stmt.query_map([head.as_bytes()], |row| row.get::<_, Vec<u8>>(0))?;
            let mut ids = HashSet::new();
            for row in rows {
                ids.insert(crate::codec::node_id(&row?)?);
            }
            Ok(ids)
        })
    }

    pub(crate) fn link_sources(&self, kind: &str, targets: &[&str]) -> Result<Vec<RunId>> {
        self.read(|conn| {
            let mut stmt = conn
                .prepare_cached("SELECT run_id FROM run_links WHERE kind = ?1 AND target = ?2")?;
            let mut runs = Vec::new();
            for target in targets {
                for run in stmt.query_map(params![kind, target], |row| Ok(RunId(row.get(0)?)))? {
                    runs.push(run?);
                }
            }
            Ok(runs)
        })
    }

    pub(crate) fn link_targets(&self, kind: &str, runs: &[RunId]) -> Result<Vec<String>> {
        self.read(|conn| {
            let mut stmt = conn
                .prepare_cached("SELECT target FROM run_links WHERE run_id = ?1 AND kind = ?2")?;
            let mut targets = Vec::new();
            for run in runs {
                for target in stmt.query_map(params![run.as_str(), kind], |row| row.get(0))? {
                    targets.push(target?);
                }
            }
            Ok(targets)
        })
    }
}
