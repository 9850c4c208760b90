/*!
Replays: a selection of recorded turns re-sent with one change, each
replayed turn a counterfactual branch of the original. A `replays` row says
what was selected, what changed and on which model; one `replay_turns` row
per selected turn carries its state (pending, running, done, diverged,
failed), the answer it landed at and its runs, and the comparator's
decision.

A replayed turn's threads and runs are stored like a rerun's: no
conversation stands on them (a replay of a thousand turns adds no thousand
conversations to `skein list`); the turn's row links its answer to the
original turn (`turn_node`), so a replay is found from the original turn
([`Store::replay_turns_of_node`]) and from its record
([`Store::replay_turns`]).

Workers claim pending rows under a lease ([`Store::claim_replay_turns`]:
PostgreSQL's `FOR UPDATE SKIP LOCKED`, SQLite's one writer) and renew the
leases of all the turns they hold in one statement while those turns run
([`Store::renew_replay_leases`]): a worker that dies stops renewing and
leaves its rows to others once the lease has passed, and a worker is never
handed back a turn it holds itself. A turn finishes
in one transaction with its threads and runs
([`Store::finish_replay_turn`]), and only while its worker still holds it,
so a turn is recorded once or not at all. The record, the store's methods
and the row parsing are shared; the SQL is in sqlite/replays.rs and
postgres/replays.rs.

This module declares `Replays`, the backend trait sqlite/replays.rs and
postgres/replays.rs implement, and holds the public operations that call it:
the async ones on `AsyncStore` and their blocking forms on `Store`.
*/

use crate::async_store::AsyncStore;
use crate::backend::BoxFuture;
use crate::error::{Result, StoreError};
use crate::records::{ConversationId, ReplayId, RunId, RunRecord};
use crate::store::Store;
use serde::{Deserialize, Serialize};
use skein_core::{NodeId, Thread};

/// Replays of recorded turns and their workers' claims: the SQL is in
/// sqlite/replays.rs and postgres/replays.rs.
pub(crate) trait Replays {
    fn create_replay<'a>(
        &'a self,
        record: &'a ReplayRecord,
        turns: &'a [NewReplayTurn],
    ) -> BoxFuture<'a, Result<()>>;
    fn replay<'a>(&'a self, id: &'a ReplayId) -> BoxFuture<'a, Result<ReplayRecord>>;
    fn all_replays(&self) -> BoxFuture<'_, Result<Vec<ReplayRecord>>>;
    fn list_replays<'a>(
        &'a self,
        after: Option<&'a ReplayPosition>,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<ListedReplay>>>;
    fn claim_replay_turns<'a>(
        &'a self,
        id: &'a ReplayId,
        worker: &'a str,
        limit: usize,
        lease_ms: i64,
    ) -> BoxFuture<'a, Result<Vec<ReplayTurn>>>;
    fn renew_replay_leases<'a>(
        &'a self,
        id: &'a ReplayId,
        worker: &'a str,
        lease_ms: i64,
    ) -> BoxFuture<'a, Result<u64>>;
    fn finish_replay_turn<'a>(
        &'a self,
        finish: &'a ReplayTurnFinish<'a>,
    ) -> BoxFuture<'a, Result<()>>;
    fn replay_turns<'a>(
        &'a self,
        id: &'a ReplayId,
        after: Option<u64>,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<ReplayTurn>>>;
    fn replay_turns_of_node(&self, node: NodeId) -> BoxFuture<'_, Result<Vec<ReplayTurn>>>;
    fn replayed_in<'a>(
        &'a self,
        conversations: &'a [ConversationId],
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<ReplayTurn>>>;
    fn replay_totals<'a>(&'a self, id: &'a ReplayId) -> BoxFuture<'a, Result<ReplayTotals>>;
}

/// One replay, as recorded.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReplayRecord {
    pub id: ReplayId,
    /// What was selected, as the layer above describes it.
    pub selection: serde_json::Value,
    /// What changed (model, options, system prompt, tools, sources).
    pub change: serde_json::Value,
    /// The model the turns were replayed on (the first candidate, when a
    /// replay compares several: its settings list them all).
    pub model: String,
    /// How turns are replayed and judged (comparators, live tools).
    pub settings: serde_json::Value,
    /// How many turn rows it has: the turns selected, once per candidate
    /// model.
    pub turns: u64,
    pub created_ms: i64,
}

/// Where a replayed turn stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReplayStatus {
    /// Not replayed yet.
    Pending,
    /// Claimed by a worker, until its lease (renewed while the worker
    /// lives) passes.
    Running,
    /// Replayed: its answer is stored and judged.
    Done,
    /// Stopped where the model asked for a tool call the recording lacks.
    Diverged,
    /// The model call failed, or the answer could not be judged (its runs
    /// are kept for usage).
    Failed,
}

impl ReplayStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            ReplayStatus::Pending => "pending",
            ReplayStatus::Running => "running",
            ReplayStatus::Done => "done",
            ReplayStatus::Diverged => "diverged",
            ReplayStatus::Failed => "failed",
        }
    }

    pub fn parse(text: &str) -> Option<ReplayStatus> {
        Some(match text {
            "pending" => ReplayStatus::Pending,
            "running" => ReplayStatus::Running,
            "done" => ReplayStatus::Done,
            "diverged" => ReplayStatus::Diverged,
            "failed" => ReplayStatus::Failed,
            _ => return None,
        })
    }

    /// The turn is finished: it will not be replayed again.
    pub fn is_final(self) -> bool {
        matches!(
            self,
            ReplayStatus::Done | ReplayStatus::Diverged | ReplayStatus::Failed
        )
    }
}

/// A selected turn, before it is replayed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewReplayTurn {
    /// The conversation the original turn belongs to, when one does.
    pub conversation: Option<ConversationId>,
    /// The original turn's final answer.
    pub turn_node: NodeId,
    /// The message the original turn answered (its request's head).
    pub request_node: NodeId,
    /// Comparators for this turn alone (a case's), in place of the
    /// replay's default; kept in the row's detail as `compare`.
    pub compare: Vec<String>,
    /// The candidate model this row replays the turn on, in a replay that
    /// compares several (one row per turn and model); `None`: the replay's
    /// one model.
    pub model: Option<String>,
}

impl NewReplayTurn {
    /// The row's detail before the turn is replayed: its own comparators,
    /// if any.
    pub(crate) fn initial_detail(&self) -> Result<String> {
        let detail = match self.compare.is_empty() {
            true => serde_json::json!({}),
            false => serde_json::json!({ "compare": self.compare }),
        };
        Ok(serde_json::to_string(&detail)?)
    }
}

/// One replayed turn's row.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReplayTurn {
    pub replay: ReplayId,
    /// Its place in the selection, from 0.
    pub seq: u64,
    pub conversation: Option<ConversationId>,
    pub turn_node: NodeId,
    pub request_node: NodeId,
    pub status: ReplayStatus,
    /// The worker that claimed it last.
    pub worker: Option<String>,
    /// Until when that worker's claim holds (Unix milliseconds).
    pub lease_until_ms: Option<i64>,
    /// The replayed answer (or, diverged, where the turn stopped).
    pub answer_head: Option<NodeId>,
    pub runs: Vec<RunId>,
    /// The comparator's decision (`changed`, `held`).
    pub decision: Option<String>,
    /// The comparator that decided.
    pub comparator: Option<String>,
    /// Everything else the layer above keeps (answers, why, usage).
    pub detail: serde_json::Value,
    pub finished_ms: Option<i64>,
    /// The candidate model it is replayed on, in a replay that compares
    /// several; `None`: the replay's one model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
}

/// How a claimed turn finished, with what it stored: written in one
/// transaction, only while `worker` still holds the turn.
#[derive(Clone, Debug)]
pub struct ReplayTurnFinish<'a> {
    pub replay: &'a ReplayId,
    pub seq: u64,
    pub worker: &'a str,
    /// [`ReplayStatus::Done`], [`Diverged`](ReplayStatus::Diverged) or
    /// [`Failed`](ReplayStatus::Failed).
    pub status: ReplayStatus,
    pub answer_head: Option<NodeId>,
    pub decision: Option<&'a str>,
    pub comparator: Option<&'a str>,
    pub detail: &'a serde_json::Value,
    /// Every thread the turn's runs produced or read.
    pub threads: &'a [Thread],
    /// The turn's model calls (the row lists them).
    pub runs: &'a [RunRecord],
    /// Runs stored with the turn that are not its own (a judge's call).
    pub other_runs: &'a [RunRecord],
}

/// How many of a replay's turns stand where.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ReplayTotals {
    pub pending: u64,
    pub running: u64,
    pub done: u64,
    pub diverged: u64,
    pub failed: u64,
    /// Of the done turns, those the comparator called changed.
    pub changed: u64,
    /// Of the done turns, those it called held.
    pub held: u64,
    /// The latest lease of a running turn (Unix milliseconds): while it
    /// is to come, a worker is on the replay; once passed, its workers
    /// stopped (died or were killed) and it waits to be resumed.
    pub lease_until_ms: Option<i64>,
}

/// Where a replay stands as a whole, as listings show it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ReplayState {
    /// A worker holds some turn under a lease still running.
    Running,
    /// Turns are left and no worker holds one: `skein replay --resume`
    /// goes on.
    Stopped,
    /// Every turn is finished.
    Finished,
}

impl ReplayState {
    pub fn as_str(self) -> &'static str {
        match self {
            ReplayState::Running => "running",
            ReplayState::Stopped => "stopped",
            ReplayState::Finished => "finished",
        }
    }
}

impl std::fmt::Display for ReplayState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl ReplayTotals {
    /// Count `n` turns of `status` whose decision is `decision`; `lease`
    /// is the latest lease among them (running turns keep theirs). The
    /// layer above counts a part of a replay's rows with it (one candidate
    /// model's).
    pub fn add(
        &mut self,
        status: ReplayStatus,
        decision: Option<&str>,
        n: u64,
        lease: Option<i64>,
    ) {
        if status == ReplayStatus::Running {
            self.lease_until_ms = self.lease_until_ms.max(lease);
        }
        match status {
            ReplayStatus::Pending => self.pending += n,
            ReplayStatus::Running => self.running += n,
            ReplayStatus::Done => self.done += n,
            ReplayStatus::Diverged => self.diverged += n,
            ReplayStatus::Failed => self.failed += n,
        }
        if status == ReplayStatus::Done {
            match decision {
                Some("changed") => self.changed += n,
                Some("held") => self.held += n,
                _ => {}
            }
        }
    }

    /// Every turn is finished.
    pub fn finished(&self) -> bool {
        self.pending == 0 && self.running == 0
    }

    /// Where the replay stands at `now_ms`: finished, running (a worker's
    /// lease on a turn is still to pass) or stopped.
    pub fn state(&self, now_ms: i64) -> ReplayState {
        if self.finished() {
            ReplayState::Finished
        } else if self.running > 0 && self.lease_until_ms.is_some_and(|until| until > now_ms) {
            ReplayState::Running
        } else {
            ReplayState::Stopped
        }
    }
}

/// A replay's place in the listing, newest first: where a page ends and
/// the next starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplayPosition {
    pub created_ms: i64,
    pub id: ReplayId,
}

/// A replay as a listing shows it: its record and where its turns stand.
#[derive(Clone, Debug, PartialEq)]
pub struct ListedReplay {
    pub record: ReplayRecord,
    pub totals: ReplayTotals,
}

impl ListedReplay {
    pub fn position(&self) -> ReplayPosition {
        ReplayPosition {
            created_ms: self.record.created_ms,
            id: self.record.id.clone(),
        }
    }
}

/// Add one `(replay, status, decision, count, latest lease)` row of a
/// grouped count to the totals of its replay in `listed`.
pub(crate) fn add_counted(
    listed: &mut [ListedReplay],
    replay: &str,
    status: &str,
    decision: Option<&str>,
    count: u64,
    lease: Option<i64>,
) -> Result<()> {
    let status = ReplayStatus::parse(status).ok_or_else(|| {
        StoreError::MalformedRow(format!("replay {replay} has a turn of status {status}"))
    })?;
    if let Some(entry) = listed
        .iter_mut()
        .find(|entry| entry.record.id.as_str() == replay)
    {
        entry.totals.add(status, decision, count, lease);
    }
    Ok(())
}

pub(crate) const SELECT_REPLAY: &str =
    "SELECT id, selection, change, model, settings, turns, created FROM replays";

pub(crate) const SELECT_REPLAY_TURN: &str = "SELECT replay, seq, conversation, turn_node, \
     request_node, status, worker, lease_until, answer_head, runs, decision, comparator, detail, \
     finished, model FROM replay_turns";

impl Store {
    /// Store a replay's record and its selected turns (all pending), in
    /// one transaction.
    pub fn create_replay(&self, record: &ReplayRecord, turns: &[NewReplayTurn]) -> Result<()> {
        self.wait(self.nonblocking().create_replay(record, turns))
    }

    pub fn replay(&self, id: &ReplayId) -> Result<ReplayRecord> {
        self.wait(self.nonblocking().replay(id))
    }

    /// Every replay, oldest first.
    pub fn all_replays(&self) -> Result<Vec<ReplayRecord>> {
        self.wait(self.nonblocking().all_replays())
    }

    /// Up to `limit` replays, newest first, after `after` (a place in
    /// this order), each with its totals: two statements whatever the
    /// page's size (the records, then every one's totals).
    pub fn list_replays(
        &self,
        after: Option<&ReplayPosition>,
        limit: usize,
    ) -> Result<Vec<ListedReplay>> {
        self.wait(self.nonblocking().list_replays(after, limit))
    }

    /// Claim up to `limit` of a replay's turns for `worker` for `lease_ms`:
    /// pending ones, and running ones whose lease has passed that another
    /// worker holds, in selection order. A worker is never handed back a
    /// turn it holds itself: a live worker renews its leases
    /// ([`Store::renew_replay_leases`]), so its own turn whose lease passed
    /// is one it is still working on. A turn taken from another worker
    /// says so in its detail: `reclaimed_from` (that worker) and
    /// `reclaims` (how many times it was taken over).
    pub fn claim_replay_turns(
        &self,
        id: &ReplayId,
        worker: &str,
        limit: usize,
        lease_ms: i64,
    ) -> Result<Vec<ReplayTurn>> {
        self.wait(
            self.nonblocking()
                .claim_replay_turns(id, worker, limit, lease_ms),
        )
    }

    /// Extend to `lease_ms` from now the lease of every turn of the replay
    /// that `worker` holds (running, claimed by it and not taken over
    /// since), in one statement; how many turns it renewed. A worker calls
    /// it while its turns run, well within the lease.
    pub fn renew_replay_leases(&self, id: &ReplayId, worker: &str, lease_ms: i64) -> Result<u64> {
        self.wait(self.nonblocking().renew_replay_leases(id, worker, lease_ms))
    }

    /// Finish a claimed turn with its threads and runs, in one transaction;
    /// [`StoreError::ReplayTurnLost`] (and nothing written) when its worker
    /// no longer holds it.
    pub fn finish_replay_turn(&self, finish: &ReplayTurnFinish<'_>) -> Result<()> {
        self.wait(self.nonblocking().finish_replay_turn(finish))
    }

    /// Up to `limit` of a replay's turns after `after` (a seq), in order.
    pub fn replay_turns(
        &self,
        id: &ReplayId,
        after: Option<u64>,
        limit: usize,
    ) -> Result<Vec<ReplayTurn>> {
        self.wait(self.nonblocking().replay_turns(id, after, limit))
    }

    /// The replayed turns of the original turn whose answer is `node`.
    pub fn replay_turns_of_node(&self, node: NodeId) -> Result<Vec<ReplayTurn>> {
        self.wait(self.nonblocking().replay_turns_of_node(node))
    }

    /// The replayed turns of these conversations' turns that have an
    /// answer, newest first, at most `limit`: what a family's tree draws
    /// beside the turns they re-sent. One statement.
    pub fn replayed_in(
        &self,
        conversations: &[ConversationId],
        limit: usize,
    ) -> Result<Vec<ReplayTurn>> {
        self.wait(self.nonblocking().replayed_in(conversations, limit))
    }

    pub fn replay_totals(&self, id: &ReplayId) -> Result<ReplayTotals> {
        self.wait(self.nonblocking().replay_totals(id))
    }
}

impl AsyncStore<'_> {
    /// [`Store::create_replay`].
    pub async fn create_replay(
        &self,
        record: &ReplayRecord,
        turns: &[NewReplayTurn],
    ) -> Result<()> {
        self.store.backend().create_replay(record, turns).await
    }

    /// [`Store::replay`].
    pub async fn replay(&self, id: &ReplayId) -> Result<ReplayRecord> {
        self.store.backend().replay(id).await
    }

    /// [`Store::all_replays`].
    pub async fn all_replays(&self) -> Result<Vec<ReplayRecord>> {
        self.store.backend().all_replays().await
    }

    /// [`Store::list_replays`].
    pub async fn list_replays(
        &self,
        after: Option<&ReplayPosition>,
        limit: usize,
    ) -> Result<Vec<ListedReplay>> {
        self.store.backend().list_replays(after, limit).await
    }

    /// [`Store::claim_replay_turns`].
    pub async fn claim_replay_turns(
        &self,
        id: &ReplayId,
        worker: &str,
        limit: usize,
        lease_ms: i64,
    ) -> Result<Vec<ReplayTurn>> {
        self.store
            .backend()
            .claim_replay_turns(id, worker, limit, lease_ms)
            .await
    }

    /// [`Store::renew_replay_leases`].
    pub async fn renew_replay_leases(
        &self,
        id: &ReplayId,
        worker: &str,
        lease_ms: i64,
    ) -> Result<u64> {
        self.store
            .backend()
            .renew_replay_leases(id, worker, lease_ms)
            .await
    }

    /// [`Store::finish_replay_turn`].
    pub async fn finish_replay_turn(&self, finish: &ReplayTurnFinish<'_>) -> Result<()> {
        if !finish.status.is_final() {
            return Err(StoreError::ReplayTurnNotFinal(finish.status.as_str()));
        }
        self.store.backend().finish_replay_turn(finish).await
    }

    /// [`Store::replay_turns`].
    pub async fn replay_turns(
        &self,
        id: &ReplayId,
        after: Option<u64>,
        limit: usize,
    ) -> Result<Vec<ReplayTurn>> {
        self.store.backend().replay_turns(id, after, limit).await
    }

    /// [`Store::replay_turns_of_node`].
    pub async fn replay_turns_of_node(&self, node: NodeId) -> Result<Vec<ReplayTurn>> {
        self.store.backend().replay_turns_of_node(node).await
    }

    /// [`Store::replayed_in`].
    pub async fn replayed_in(
        &self,
        conversations: &[ConversationId],
        limit: usize,
    ) -> Result<Vec<ReplayTurn>> {
        if conversations.is_empty() || limit == 0 {
            return Ok(Vec::new());
        }
        self.store.backend().replayed_in(conversations, limit).await
    }

    /// [`Store::replay_totals`].
    pub async fn replay_totals(&self, id: &ReplayId) -> Result<ReplayTotals> {
        self.store.backend().replay_totals(id).await
    }
}

/// A replay row before its JSON columns are parsed (both backends).
pub(crate) struct RawReplay {
    pub(crate) id: String,
    pub(crate) selection: String,
    pub(crate) change: String,
    pub(crate) model: String,
    pub(crate) settings: String,
    pub(crate) turns: i64,
    pub(crate) created_ms: i64,
}

impl RawReplay {
    pub(crate) fn finish(self) -> Result<ReplayRecord> {
        Ok(ReplayRecord {
            selection: serde_json::from_str(&self.selection)?,
            change: serde_json::from_str(&self.change)?,
            settings: serde_json::from_str(&self.settings)?,
            model: self.model,
            turns: self.turns as u64,
            created_ms: self.created_ms,
            id: ReplayId(self.id),
        })
    }
}

/// A replayed turn's row before its columns are parsed (both backends).
pub(crate) struct RawReplayTurn {
    pub(crate) replay: String,
    pub(crate) seq: i64,
    pub(crate) conversation: Option<String>,
    pub(crate) turn_node: Vec<u8>,
    pub(crate) request_node: Vec<u8>,
    pub(crate) status: String,
    pub(crate) worker: Option<String>,
    pub(crate) lease_until_ms: Option<i64>,
    pub(crate) answer_head: Option<Vec<u8>>,
    pub(crate) runs: String,
    pub(crate) decision: Option<String>,
    pub(crate) comparator: Option<String>,
    pub(crate) detail: String,
    pub(crate) finished_ms: Option<i64>,
    pub(crate) model: Option<String>,
}

impl RawReplayTurn {
    pub(crate) fn finish(self) -> Result<ReplayTurn> {
        let malformed = |what: &str| {
            StoreError::MalformedRow(format!(
                "turn {} of replay {} has a malformed {what}",
                self.seq, self.replay
            ))
        };
        let node = |bytes: &[u8]| NodeId::from_slice(bytes).ok_or_else(|| malformed("node id"));
        Ok(ReplayTurn {
            turn_node: node(&self.turn_node)?,
            request_node: node(&self.request_node)?,
            answer_head: self.answer_head.as_deref().map(node).transpose()?,
            status: ReplayStatus::parse(&self.status).ok_or_else(|| malformed("status"))?,
            runs: serde_json::from_str(&self.runs)?,
            detail: serde_json::from_str(&self.detail)?,
            seq: self.seq as u64,
            conversation: self.conversation.map(ConversationId),
            worker: self.worker,
            lease_until_ms: self.lease_until_ms,
            decision: self.decision,
            comparator: self.comparator,
            finished_ms: self.finished_ms,
            model: self.model,
            replay: ReplayId(self.replay),
        })
    }
}

/// The runs a replayed turn's row lists, and its judge's run (in its
/// detail), as a deletion removes them with the row.
pub(crate) fn replay_turn_runs(runs: &str, detail: &str) -> Result<Vec<String>> {
    let mut all: Vec<String> = serde_json::from_str(runs)?;
    let detail: serde_json::Value = serde_json::from_str(detail)?;
    if let Some(judge) = detail["judge_run"].as_str() {
        all.push(judge.to_string());
    }
    Ok(all)
}
