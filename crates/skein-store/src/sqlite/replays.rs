/*!
Replays on SQLite: the record and its turns in one transaction; claims in
one `BEGIN IMMEDIATE` transaction (SQLite has one writer, so two workers
never claim the same row); a worker's leases renewed by one `UPDATE`; a
turn's threads, runs and row in one
transaction that writes only while the worker still holds the turn
(crate::replays holds the record and its row parsing).
*/

use super::SqliteStore;
use super::graph::append_nodes;
use super::runs::insert_run;
use crate::backend::{Backend, BoxFuture};
use crate::blocking;
use crate::bodies::RunToStore;
use crate::error::{Result, StoreError};
use crate::graph::mark_all;
use crate::records::{ConversationId, ReplayId};
use crate::replays::{
    ListedReplay, NewReplayTurn, RawReplay, RawReplayTurn, ReplayPosition, ReplayRecord,
    ReplayStatus, ReplayTotals, ReplayTurn, ReplayTurnFinish, Replays, SELECT_REPLAY,
    SELECT_REPLAY_TURN, add_counted,
};
use rusqlite::{OptionalExtension, Row, params};
use skein_core::{NodeId, now_ms};

impl Replays for SqliteStore {
    fn create_replay<'a>(
        &'a self,
        record: &'a ReplayRecord,
        turns: &'a [NewReplayTurn],
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(blocking::run_borrowing(
            self,
            |store| store.create_replay(record, turns),
            || {
                let record = record.clone();
                let turns = turns.to_vec();
                move |store: &SqliteStore| store.create_replay(&record, &turns)
            },
        ))
    }

    fn replay<'a>(&'a self, id: &'a ReplayId) -> BoxFuture<'a, Result<ReplayRecord>> {
        let id = id.clone();
        self.deferred(move |store| store.replay(&id))
    }

    fn all_replays(&self) -> BoxFuture<'_, Result<Vec<ReplayRecord>>> {
        self.deferred(|store| store.all_replays())
    }

    fn list_replays<'a>(
        &'a self,
        after: Option<&'a ReplayPosition>,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<ListedReplay>>> {
        let after = after.cloned();
        self.deferred(move |store| store.list_replays(after.as_ref(), limit))
    }

    fn claim_replay_turns<'a>(
        &'a self,
        id: &'a ReplayId,
        worker: &'a str,
        limit: usize,
        lease_ms: i64,
    ) -> BoxFuture<'a, Result<Vec<ReplayTurn>>> {
        let (id, worker) = (id.clone(), worker.to_string());
        self.deferred(move |store| store.claim_replay_turns(&id, &worker, limit, lease_ms))
    }

    fn renew_replay_leases<'a>(
        &'a self,
        id: &'a ReplayId,
        worker: &'a str,
        lease_ms: i64,
    ) -> BoxFuture<'a, Result<u64>> {
        let (id, worker) = (id.clone(), worker.to_string());
        self.deferred(move |store| store.renew_replay_leases(&id, &worker, lease_ms))
    }

    fn finish_replay_turn<'a>(
        &'a self,
        finish: &'a ReplayTurnFinish<'a>,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(blocking::run_borrowing(
            self,
            |store| store.finish_replay_turn(finish),
            || {
                let replay = finish.replay.clone();
                let worker = finish.worker.to_string();
                let decision = finish.decision.map(str::to_string);
                let comparator = finish.comparator.map(str::to_string);
                let detail = finish.detail.clone();
                let threads = finish.threads.to_vec();
                let runs = finish.runs.to_vec();
                let other_runs = finish.other_runs.to_vec();
                let (seq, status, answer_head) = (finish.seq, finish.status, finish.answer_head);
                move |store: &SqliteStore| {
                    store.finish_replay_turn(&ReplayTurnFinish {
                        replay: &replay,
                        seq,
                        worker: &worker,
                        status,
                        answer_head,
                        decision: decision.as_deref(),
                        comparator: comparator.as_deref(),
                        detail: &detail,
                        threads: &threads,
                        runs: &runs,
                        other_runs: &other_runs,
                    })
                }
            },
        ))
    }

    fn replay_turns<'a>(
        &'a self,
        id: &'a ReplayId,
        after: Option<u64>,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<ReplayTurn>>> {
        let id = id.clone();
        self.deferred(move |store| store.replay_turns(&id, after, limit))
    }

    fn replay_turns_of_node(&self, node: NodeId) -> BoxFuture<'_, Result<Vec<ReplayTurn>>> {
        self.deferred(move |store| store.replay_turns_of_node(node))
    }

    fn replayed_in<'a>(
        &'a self,
        conversations: &'a [ConversationId],
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<ReplayTurn>>> {
        let ids: Vec<&str> = conversations.iter().map(ConversationId::as_str).collect();
        let json = match serde_json::to_string(&ids) {
            Ok(json) => json,
            Err(error) => return Box::pin(std::future::ready(Err(error.into()))),
        };
        self.deferred(move |store| {
            store.query_replay_turns(
                &format!(
                    "{SELECT_REPLAY_TURN} WHERE conversation IN (SELECT value FROM json_each(?1))
                     AND answer_head IS NOT NULL
                     ORDER BY finished DESC, replay, seq LIMIT ?2"
                ),
                params![json, limit.min(i64::MAX as usize) as i64],
            )
        })
    }

    fn replay_totals<'a>(&'a self, id: &'a ReplayId) -> BoxFuture<'a, Result<ReplayTotals>> {
        let id = id.clone();
        self.deferred(move |store| store.replay_totals(&id))
    }
}

impl SqliteStore {
    fn create_replay(&self, record: &ReplayRecord, turns: &[NewReplayTurn]) -> Result<()> {
        self.write(|tx| {
            insert_replay(tx, record)?;
            let mut insert = tx.prepare_cached(
                "INSERT INTO replay_turns(replay, seq, conversation, turn_node, request_node,
                     detail, model)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            )?;
            for (seq, turn) in turns.iter().enumerate() {
                insert.execute(params![
                    record.id.as_str(),
                    seq as i64,
                    turn.conversation.as_ref().map(|id| id.as_str()),
                    turn.turn_node.as_bytes(),
                    turn.request_node.as_bytes(),
                    turn.initial_detail()?,
                    turn.model,
                ])?;
            }
            Ok(())
        })
    }

    fn replay(&self, id: &ReplayId) -> Result<ReplayRecord> {
        self.read(|conn| {
            conn.prepare_cached(&format!("{SELECT_REPLAY} WHERE id = ?1"))?
                .query_row([id.as_str()], raw_replay)
                .optional()?
                .ok_or_else(|| StoreError::ReplayNotFound(id.to_string()))?
                .finish()
        })
    }

    fn all_replays(&self) -> Result<Vec<ReplayRecord>> {
        self.read(|conn| {
            let mut stmt = conn.prepare_cached(&format!("{SELECT_REPLAY} ORDER BY created, id"))?;
            let raw = stmt
                .query_map([], raw_replay)?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            raw.into_iter().map(RawReplay::finish).collect()
        })
    }

    fn list_replays(
        &self,
        after: Option<&ReplayPosition>,
        limit: usize,
    ) -> Result<Vec<ListedReplay>> {
        self.read(|conn| {
            let limit = limit.min(i64::MAX as usize) as i64;
            let raw = match after {
                None => conn
                    .prepare_cached(&format!(
                        "{SELECT_REPLAY} ORDER BY created DESC, id DESC LIMIT ?1"
                    ))?
                    .query_map([limit], raw_replay)?
                    .collect::<rusqlite::Result<Vec<_>>>()?,
                Some(after) => conn
                    .prepare_cached(&format!(
                        "{SELECT_REPLAY} WHERE (created, id) < (?1, ?2)
                         ORDER BY created DESC, id DESC LIMIT ?3"
                    ))?
                    .query_map(
                        params![after.created_ms, after.id.as_str(), limit],
                        raw_replay,
                    )?
                    .collect::<rusqlite::Result<Vec<_>>>()?,
            };
            let mut listed = raw
                .into_iter()
                .map(|raw| {
                    Ok(ListedReplay {
                        record: raw.finish()?,
                        totals: ReplayTotals::default(),
                    })
                })
                .collect::<Result<Vec<_>>>()?;
            if listed.is_empty() {
                return Ok(listed);
            }
            // Every listed replay's totals in one statement.
            let ids: Vec<&str> = listed.iter().map(|l| l.record.id.as_str()).collect();
            let json = serde_json::to_string(&ids)?;
            let mut stmt = conn.prepare_cached(
                "SELECT replay, status, decision, count(*), max(lease_until) FROM replay_turns
                 WHERE replay IN (SELECT value FROM json_each(?1))
                 GROUP BY replay, status, decision",
            )?;
            let counted = stmt
                .query_map([json], |row| {
                    Ok((
                        row.get::<_, String>(0)?,
                        row.get::<_, String>(1)?,
                        row.get::<_, Option<String>>(2)?,
                        row.get::<_, i64>(3)?,
                        row.get::<_, Option<i64>>(4)?,
                    ))
                })?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            for (replay, status, decision, count, lease) in counted {
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

    fn claim_replay_turns(
        &self,
        id: &ReplayId,
        worker: &str,
        limit: usize,
        lease_ms: i64,
    ) -> Result<Vec<ReplayTurn>> {
        let now = now_ms();
        self.write(|tx| {
            // A running row here is another worker's whose lease passed:
            // its detail notes whose it was and how often it was taken.
            let raw = tx
                .prepare_cached(&format!(
                    "UPDATE replay_turns SET status = 'running', worker = ?2, lease_until = ?3,
                         detail = CASE WHEN status = 'running' THEN json_set(detail,
                             '$.reclaimed_from', worker,
                             '$.reclaims', coalesce(json_extract(detail, '$.reclaims'), 0) + 1)
                             ELSE detail END
                     WHERE replay = ?1 AND seq IN (
                         SELECT seq FROM replay_turns
                         WHERE replay = ?1 AND (status = 'pending'
                             OR (status = 'running' AND lease_until < ?4
                                 AND worker IS NOT ?2))
                         ORDER BY seq LIMIT ?5)
                     RETURNING {}",
                    SELECT_REPLAY_TURN
                        .trim_start_matches("SELECT ")
                        .trim_end_matches(" FROM replay_turns")
                ))?
                .query_map(
                    params![
                        id.as_str(),
                        worker,
                        now.saturating_add(lease_ms),
                        now,
                        limit as i64
                    ],
                    raw_replay_turn,
                )?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            let mut claimed = raw
                .into_iter()
                .map(RawReplayTurn::finish)
                .collect::<Result<Vec<_>>>()?;
            claimed.sort_by_key(|turn| turn.seq);
            Ok(claimed)
        })
    }

    fn renew_replay_leases(&self, id: &ReplayId, worker: &str, lease_ms: i64) -> Result<u64> {
        let until = now_ms().saturating_add(lease_ms);
        self.write(|tx| {
            let renewed = tx
                .prepare_cached(
                    "UPDATE replay_turns SET lease_until = ?3
                     WHERE replay = ?1 AND status = 'running' AND worker = ?2",
                )?
                .execute(params![id.as_str(), worker, until])?;
            Ok(renewed as u64)
        })
    }

    fn finish_replay_turn(&self, finish: &ReplayTurnFinish<'_>) -> Result<()> {
        let mut marks = Vec::new();
        self.write(|tx| {
            marks.clear();
            let updated = tx
                .prepare_cached(
                    "UPDATE replay_turns SET status = ?4, answer_head = ?5, runs = ?6,
                         decision = ?7, comparator = ?8, detail = ?9, finished = ?10,
                         lease_until = NULL
                     WHERE replay = ?1 AND seq = ?2 AND worker = ?3 AND status = 'running'",
                )?
                .execute(params![
                    finish.replay.as_str(),
                    finish.seq as i64,
                    finish.worker,
                    finish.status.as_str(),
                    finish.answer_head.as_ref().map(NodeId::as_bytes),
                    serde_json::to_string(
                        &finish.runs.iter().map(|run| &run.id).collect::<Vec<_>>()
                    )?,
                    finish.decision,
                    finish.comparator,
                    serde_json::to_string(finish.detail)?,
                    now_ms(),
                ])?;
            if updated == 0 {
                return Err(StoreError::ReplayTurnLost {
                    replay: finish.replay.to_string(),
                    seq: finish.seq,
                });
            }
            for thread in finish.threads {
                append_nodes(tx, self.key(), thread, &mut marks)?;
            }
            for run in finish.runs.iter().chain(finish.other_runs) {
                insert_run(
                    tx,
                    &RunToStore::cut(run, None, None),
                    run.conversation.as_ref(),
                )?;
            }
            Ok(())
        })?;
        mark_all(&marks, self.key());
        Ok(())
    }

    fn replay_turns(
        &self,
        id: &ReplayId,
        after: Option<u64>,
        limit: usize,
    ) -> Result<Vec<ReplayTurn>> {
        let after = after.map_or(-1, |seq| seq as i64);
        self.query_replay_turns(
            &format!("{SELECT_REPLAY_TURN} WHERE replay = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3"),
            params![id.as_str(), after, limit as i64],
        )
    }

    fn replay_turns_of_node(&self, node: NodeId) -> Result<Vec<ReplayTurn>> {
        self.query_replay_turns(
            &format!("{SELECT_REPLAY_TURN} WHERE turn_node = ?1 ORDER BY finished, replay, seq"),
            [node.as_bytes()],
        )
    }

    fn replay_totals(&self, id: &ReplayId) -> Result<ReplayTotals> {
        self.read(|conn| {
            let mut totals = ReplayTotals::default();
            let mut stmt = conn.prepare_cached(
                "SELECT status, decision, count(*), max(lease_until) FROM replay_turns
                 WHERE replay = ?1 GROUP BY status, decision",
            )?;
            let mut rows = stmt.query([id.as_str()])?;
            while let Some(row) = rows.next()? {
                let status: String = row.get(0)?;
                let decision: Option<String> = row.get(1)?;
                let count: i64 = row.get(2)?;
                let lease: Option<i64> = row.get(3)?;
                let status = ReplayStatus::parse(&status).ok_or_else(|| {
                    StoreError::MalformedRow(format!("replay {id} has a turn of status {status}"))
                })?;
                totals.add(status, decision.as_deref(), count as u64, lease);
            }
            Ok(totals)
        })
    }

    fn query_replay_turns(
        &self,
        sql: &str,
        params: impl rusqlite::Params,
    ) -> Result<Vec<ReplayTurn>> {
        self.read(|conn| {
            let mut stmt = conn.prepare_cached(sql)?;
            let raw = stmt
                .query_map(params, raw_replay_turn)?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            raw.into_iter().map(RawReplayTurn::finish).collect()
        })
    }
}

/// Insert a replay's row (its turns are inserted apart).
pub(crate) fn insert_replay(conn: &rusqlite::Connection, record: &ReplayRecord) -> Result<()> {
    conn.prepare_cached(
        "INSERT INTO replays(id, selection, change, model, settings, turns, created)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    )?
    .execute(params![
        record.id.as_str(),
        serde_json::to_string(&record.selection)?,
        serde_json::to_string(&record.change)?,
        record.model,
        serde_json::to_string(&record.settings)?,
        record.turns as i64,
        record.created_ms,
    ])?;
    Ok(())
}

/// Insert a replayed turn's row as it stands (an import).
pub(crate) fn insert_replay_turn(conn: &rusqlite::Connection, turn: &ReplayTurn) -> Result<()> {
    conn.prepare_cached(
        "INSERT INTO replay_turns(replay, seq, conversation, turn_node, request_node, status,
             worker, lease_until, answer_head, runs, decision, comparator, detail, finished,
             model)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)",
    )?
    .execute(params![
        turn.replay.as_str(),
        turn.seq as i64,
        turn.conversation.as_ref().map(|id| id.as_str()),
        turn.turn_node.as_bytes(),
        turn.request_node.as_bytes(),
        turn.status.as_str(),
        turn.worker,
        turn.lease_until_ms,
        turn.answer_head.as_ref().map(NodeId::as_bytes),
        serde_json::to_string(&turn.runs)?,
        turn.decision,
        turn.comparator,
        serde_json::to_string(&turn.detail)?,
        turn.finished_ms,
        turn.model,
    ])?;
    Ok(())
}

fn raw_replay(row: &Row<'_>) -> rusqlite::Result<RawReplay> {
    Ok(RawReplay {
        id: row.get(0)?,
        selection: row.get(1)?,
        change: row.get(2)?,
        model: row.get(3)?,
        settings: row.get(4)?,
        turns: row.get(5)?,
        created_ms: row.get(6)?,
    })
}

fn raw_replay_turn(row: &Row<'_>) -> rusqlite::Result<RawReplayTurn> {
    Ok(RawReplayTurn {
        replay: row.get(0)?,
        seq: row.get(1)?,
        conversation: row.get(2)?,
        turn_node: row.get(3)?,
        request_node: row.get(4)?,
        status: row.get(5)?,
        worker: row.get(6)?,
        lease_until_ms: row.get(7)?,
        answer_head: row.get(8)?,
        runs: row.get(9)?,
        decision: row.get(10)?,
        comparator: row.get(11)?,
        detail: row.get(12)?,
        finished_ms: row.get(13)?,
        model: row.get(14)?,
    })
}
