/*!
Replays on PostgreSQL: the port of `crate::replays` (its SQL only; the row
parsing is shared). Workers on any number of machines claim a replay's
pending turns with `FOR UPDATE SKIP LOCKED`, so no two claim the same row
and none waits for another's; a worker's leases are renewed by one
`UPDATE`; a turn's threads, runs and row are written in
one transaction that changes nothing unless the worker still holds it.
*/

use super::PgStore;
use super::graph::{find_missing, queue_nodes};
use super::pipeline::{Param, Pipeline};
use super::runs::queue_run;
use crate::backend::{Backend, BoxFuture};
use crate::bodies::RunToStore;
use crate::error::{Result, StoreError};
use crate::graph::mark_all;
use crate::records::{ConversationId, ReplayId};
use crate::replays::{
    ListedReplay, NewReplayTurn, RawReplay, RawReplayTurn, ReplayPosition, ReplayRecord,
    ReplayStatus, ReplayTotals, ReplayTurn, ReplayTurnFinish, Replays, SELECT_REPLAY,
    SELECT_REPLAY_TURN, add_counted,
};
use deadpool_postgres::{Client, GenericClient};
use skein_core::{Node, NodeId, StoreKey, now_ms};
use tokio_postgres::Row;
use tokio_postgres::types::ToSql;

/// The columns of a replayed turn's row, in [`raw_replay_turn`]'s order.
const TURN_COLUMNS: &str = "t.replay, t.seq, t.conversation, t.turn_node, t.request_node, \
     t.status, t.worker, t.lease_until, t.answer_head, t.runs, t.decision, t.comparator, \
     t.detail, t.finished, t.model";

impl Replays for PgStore {
    fn create_replay<'a>(
        &'a self,
        record: &'a ReplayRecord,
        turns: &'a [NewReplayTurn],
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(
            async move { write_retrying!(self, |tx| { create_attempt(tx, record, turns).await }) },
        )
    }

    fn replay<'a>(&'a self, id: &'a ReplayId) -> BoxFuture<'a, Result<ReplayRecord>> {
        Box::pin(async move {
            let rows = self
                .rows(&format!("{SELECT_REPLAY} WHERE id = $1"), &[&id.as_str()])
                .await?;
            rows.first()
                .map(|row| raw_replay(row).finish())
                .unwrap_or_else(|| Err(StoreError::ReplayNotFound(id.to_string())))
        })
    }

    fn all_replays(&self) -> BoxFuture<'_, Result<Vec<ReplayRecord>>> {
        Box::pin(async move {
            let rows = self
                .rows(&format!("{SELECT_REPLAY} ORDER BY created, id"), &[])
                .await?;
            rows.iter().map(|row| raw_replay(row).finish()).collect()
        })
    }

    fn list_replays<'a>(
        &'a self,
        after: Option<&'a ReplayPosition>,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<ListedReplay>>> {
        Box::pin(async move {
            let limit = limit.min(i64::MAX as usize) as i64;
            let rows = match after {
                None => {
                    self.rows(
                        &format!("{SELECT_REPLAY} ORDER BY created DESC, id DESC LIMIT $1"),
                        &[&limit],
                    )
                    .await?
                }
                Some(after) => {
                    self.rows(
                        &format!(
                            "{SELECT_REPLAY} WHERE (created, id) < ($1, $2)
                             ORDER BY created DESC, id DESC LIMIT $3"
                        ),
                        &[&after.created_ms, &after.id.as_str(), &limit],
                    )
                    .await?
                }
            };
            let mut listed = rows
                .iter()
                .map(|row| {
                    Ok(ListedReplay {
                        record: raw_replay(row).finish()?,
                        totals: ReplayTotals::default(),
                    })
                })
                .collect::<Result<Vec<_>>>()?;
            if listed.is_empty() {
                return Ok(listed);
            }
            // Every listed replay's totals in one statement.
            let ids: Vec<&str> = listed.iter().map(|l| l.record.id.as_str()).collect();
            let counted = self
                .rows(
                    "SELECT replay, status, decision, count(*), max(lease_until) FROM replay_turns
                     WHERE replay = ANY($1) GROUP BY replay, status, decision",
                    &[&ids],
                )
                .await?;
            for row in counted {
                let (replay, status): (String, String) = (row.get(0), row.get(1));
                let decision: Option<String> = row.get(2);
                let count: i64 = row.get(3);
                let lease: Option<i64> = row.get(4);
                add_counted(
                    &mut listed,
                    &replay,
                    &status,
                    decision.as_deref(),
                    count as u64,
                    lease,
                )?;
            }
            Ok(listed)
        })
    }

    fn claim_replay_turns<'a>(
        &'a self,
        id: &'a ReplayId,
        worker: &'a str,
        limit: usize,
        lease_ms: i64,
    ) -> BoxFuture<'a, Result<Vec<ReplayTurn>>> {
        Box::pin(async move {
            let rows = write_retrying!(self, |tx| {
                claim_attempt(tx, id, worker, limit, lease_ms).await
            })?;
            let mut claimed = rows
                .iter()
                .map(|row| raw_replay_turn(row).finish())
                .collect::<Result<Vec<_>>>()?;
            claimed.sort_by_key(|turn| turn.seq);
            Ok(claimed)
        })
    }

    fn renew_replay_leases<'a>(
        &'a self,
        id: &'a ReplayId,
        worker: &'a str,
        lease_ms: i64,
    ) -> BoxFuture<'a, Result<u64>> {
        Box::pin(async move {
            write_retrying!(self, |tx| {
                let renew = tx
                    .prepare_cached(
                        "UPDATE replay_turns SET lease_until = $3
                         WHERE replay = $1 AND status = 'running' AND worker = $2",
                    )
                    .await?;
                let until = now_ms().saturating_add(lease_ms);
                Ok(tx.execute(&renew, &[&id.as_str(), &worker, &until]).await?)
            })
        })
    }

    fn finish_replay_turn<'a>(
        &'a self,
        finish: &'a ReplayTurnFinish<'a>,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let key = self.key();
            let marks = write_retrying!(self, |tx| { finish_attempt(tx, key, finish).await })?;
            mark_all(&marks, key);
            Ok(())
        })
    }

    fn replay_turns<'a>(
        &'a self,
        id: &'a ReplayId,
        after: Option<u64>,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<ReplayTurn>>> {
        Box::pin(async move {
            let after = after.map_or(-1, |seq| seq as i64);
            self.query_replay_turns(
                &format!(
                    "{SELECT_REPLAY_TURN} WHERE replay = $1 AND seq > $2 ORDER BY seq LIMIT $3"
                ),
                &[&id.as_str(), &after, &(limit as i64)],
            )
            .await
        })
    }

    fn replay_turns_of_node(&self, node: NodeId) -> BoxFuture<'_, Result<Vec<ReplayTurn>>> {
        Box::pin(async move {
            self.query_replay_turns(
                &format!(
                    "{SELECT_REPLAY_TURN} WHERE turn_node = $1 ORDER BY finished, replay, seq"
                ),
                &[&node.0.as_slice()],
            )
            .await
        })
    }

    fn replayed_in<'a>(
        &'a self,
        conversations: &'a [ConversationId],
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<ReplayTurn>>> {
        Box::pin(async move {
            let ids: Vec<&str> = conversations.iter().map(ConversationId::as_str).collect();
            let limit = limit.min(i64::MAX as usize) as i64;
            self.query_replay_turns(
                &format!(
                    "{SELECT_REPLAY_TURN} WHERE conversation = ANY($1) AND answer_head IS NOT NULL
                     ORDER BY finished DESC, replay, seq LIMIT $2"
                ),
                &[&ids, &limit],
            )
            .await
        })
    }

    fn replay_totals<'a>(&'a self, id: &'a ReplayId) -> BoxFuture<'a, Result<ReplayTotals>> {
        Box::pin(async move {
            let rows = self
                .rows(
                    "SELECT status, decision, count(*), max(lease_until) FROM replay_turns
                     WHERE replay = $1 GROUP BY status, decision",
                    &[&id.as_str()],
                )
                .await?;
            let mut totals = ReplayTotals::default();
            for row in rows {
                let status: String = row.get(0);
                let decision: Option<String> = row.get(1);
                let count: i64 = row.get(2);
                let lease: Option<i64> = row.get(3);
                let status = ReplayStatus::parse(&status).ok_or_else(|| {
                    StoreError::MalformedRow(format!("replay {id} has a turn of status {status}"))
                })?;
                totals.add(status, decision.as_deref(), count as u64, lease);
            }
            Ok(totals)
        })
    }
}

impl PgStore {
    async fn query_replay_turns(
        &self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<ReplayTurn>> {
        let rows = self.rows(sql, params).await?;
        rows.iter()
            .map(|row| raw_replay_turn(row).finish())
            .collect()
    }
}

/// One attempt at storing a replay's record and turns.
async fn create_attempt(tx: &Client, record: &ReplayRecord, turns: &[NewReplayTurn]) -> Result<()> {
    let insert = tx
        .prepare_cached(
            "INSERT INTO replays(id, selection, change, model, settings, turns, created)
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
        )
        .await?;
    let mut pipeline = Pipeline::new();
    let params: Vec<Param> = vec![
        Box::new(record.id.0.clone()),
        Box::new(serde_json::to_string(&record.selection)?),
        Box::new(serde_json::to_string(&record.change)?),
        Box::new(record.model.clone()),
        Box::new(serde_json::to_string(&record.settings)?),
        Box::new(record.turns as i64),
        Box::new(record.created_ms),
    ];
    pipeline.push(tx, insert, params);
    let insert_turn = tx
        .prepare_cached(
            "INSERT INTO replay_turns(replay, seq, conversation, turn_node, request_node, detail,
                 model)
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
        )
        .await?;
    for (seq, turn) in turns.iter().enumerate() {
        let params: Vec<Param> = vec![
            Box::new(record.id.0.clone()),
            Box::new(seq as i64),
            Box::new(turn.conversation.as_ref().map(|id| id.0.clone())),
            Box::new(turn.turn_node.0.to_vec()),
            Box::new(turn.request_node.0.to_vec()),
            Box::new(turn.initial_detail()?),
            Box::new(turn.model.clone()),
        ];
        pipeline.push(tx, insert_turn.clone(), params);
    }
    pipeline.run().await?;
    Ok(())
}

/// One attempt at claiming turns: rows another worker is claiming are
/// skipped, not waited for. A running row taken here is another worker's
/// whose lease passed: its detail notes whose it was and how often it was
/// taken.
async fn claim_attempt(
    tx: &Client,
    id: &ReplayId,
    worker: &str,
    limit: usize,
    lease_ms: i64,
) -> Result<Vec<Row>> {
    let now = now_ms();
    let claim = tx
        .prepare_cached(&format!(
            "UPDATE replay_turns t SET status = 'running', worker = $2, lease_until = $3,
                 detail = CASE WHEN t.status = 'running' THEN (t.detail::jsonb
                     || jsonb_build_object('reclaimed_from', t.worker, 'reclaims',
                         coalesce((t.detail::jsonb ->> 'reclaims')::bigint, 0) + 1))::text
                     ELSE t.detail END
             FROM (SELECT replay, seq FROM replay_turns
                   WHERE replay = $1 AND (status = 'pending'
                       OR (status = 'running' AND lease_until < $4
                           AND worker IS DISTINCT FROM $2))
                   ORDER BY seq LIMIT $5
                   FOR UPDATE SKIP LOCKED) c
             WHERE t.replay = c.replay AND t.seq = c.seq
             RETURNING {TURN_COLUMNS}"
        ))
        .await?;
    Ok(tx
        .query(
            &claim,
            &[
                &id.as_str(),
                &worker,
                &(now.saturating_add(lease_ms)),
                &now,
                &(limit as i64),
            ],
        )
        .await?)
}

/// One attempt at finishing a turn: its row first (nothing else is
/// written when the worker no longer holds it), then its threads and runs.
async fn finish_attempt<'t>(
    tx: &Client,
    key: StoreKey,
    finish: &ReplayTurnFinish<'t>,
) -> Result<Vec<&'t Node>> {
    let update = tx
        .prepare_cached(
            "UPDATE replay_turns SET status = $4, answer_head = $5, runs = $6, decision = $7,
                 comparator = $8, detail = $9, finished = $10, lease_until = NULL
             WHERE replay = $1 AND seq = $2 AND worker = $3 AND status = 'running'",
        )
        .await?;
    let runs: Vec<_> = finish.runs.iter().map(|run| &run.id).collect();
    let updated = tx
        .execute(
            &update,
            &[
                &finish.replay.as_str(),
                &(finish.seq as i64),
                &finish.worker,
                &finish.status.as_str(),
                &finish.answer_head.map(|node| node.0.to_vec()),
                &serde_json::to_string(&runs)?,
                &finish.decision,
                &finish.comparator,
                &serde_json::to_string(finish.detail)?,
                &now_ms(),
            ],
        )
        .await?;
    if updated == 0 {
        return Err(StoreError::ReplayTurnLost {
            replay: finish.replay.to_string(),
            seq: finish.seq,
        });
    }
    let mut marks = Vec::new();
    for thread in finish.threads {
        let missing = find_missing(tx, key, thread).await?;
        let mut pipeline = Pipeline::new();
        let nodes = queue_nodes(&mut pipeline, tx, missing.rows()).await?;
        let changed = pipeline.run().await?;
        if let Some(nodes) = nodes {
            nodes.written(tx, &changed).await?;
        }
        marks.extend(missing.into_marks());
    }
    let mut pipeline = Pipeline::new();
    for run in finish.runs.iter().chain(finish.other_runs) {
        let to_store = RunToStore::cut(run, None, None);
        queue_run(&mut pipeline, tx, &to_store, run.conversation.as_ref()).await?;
    }
    pipeline.run().await?;
    Ok(marks)
}

fn raw_replay(row: &Row) -> RawReplay {
    RawReplay {
        id: row.get(0),
        selection: row.get(1),
        change: row.get(2),
        model: row.get(3),
        settings: row.get(4),
        turns: row.get(5),
        created_ms: row.get(6),
    }
}

fn raw_replay_turn(row: &Row) -> RawReplayTurn {
    RawReplayTurn {
        replay: row.get(0),
        seq: row.get(1),
        conversation: row.get(2),
        turn_node: row.get(3),
        request_node: row.get(4),
        status: row.get(5),
        worker: row.get(6),
        lease_until_ms: row.get(7),
        answer_head: row.get(8),
        runs: row.get(9),
        decision: row.get(10),
        comparator: row.get(11),
        detail: row.get(12),
        finished_ms: row.get(13),
        model: row.get(14),
    }
}

/// Insert a replay's row unless it is stored (an import); whether it was.
pub(crate) async fn insert_replay(tx: &Client, record: &ReplayRecord) -> Result<bool> {
    let statement = tx
        .prepare_cached(
            "INSERT INTO replays(id, selection, change, model, settings, turns, created)
             VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (id) DO NOTHING",
        )
        .await?;
    let inserted = tx
        .execute(
            &statement,
            &[
                &record.id.as_str(),
                &serde_json::to_string(&record.selection)?,
                &serde_json::to_string(&record.change)?,
                &record.model,
                &serde_json::to_string(&record.settings)?,
                &(record.turns as i64),
                &record.created_ms,
            ],
        )
        .await?;
    Ok(inserted == 1)
}

/// Insert a replayed turn's row as it stands (an import).
pub(crate) async fn insert_replay_turn(tx: &Client, turn: &ReplayTurn) -> Result<()> {
    let statement = tx
        .prepare_cached(
            "INSERT INTO replay_turns(replay, seq, conversation, turn_node, request_node, status,
                 worker, lease_until, answer_head, runs, decision, comparator, detail, finished,
                 model)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)",
        )
        .await?;
    tx.execute(
        &statement,
        &[
            &turn.replay.as_str(),
            &(turn.seq as i64),
            &turn.conversation.as_ref().map(|id| id.as_str()),
            &turn.turn_node.0.as_slice(),
            &turn.request_node.0.as_slice(),
            &turn.status.as_str(),
            &turn.worker,
            &turn.lease_until_ms,
            &turn.answer_head.as_ref().map(|id| id.0.as_slice()),
            &serde_json::to_string(&turn.runs)?,
            &turn.decision,
            &turn.comparator,
            &serde_json::to_string(&turn.detail)?,
            &turn.finished_ms,
            &turn.model,
        ],
    )
    .await?;
    Ok(())
}
