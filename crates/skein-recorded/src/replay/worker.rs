//! The lease worker: [`Replayer`] stores a replay and runs its turns under
//! leases a [`Heartbeat`] renews, reporting [`Progress`].

use super::original::Original;
use super::overview::Originals;
use super::plan::{PromptSwap, ReplayPlan, plan_of, store_json};
use super::select::{Selection, select};
use crate::compare::{Comparator, Comparison};
use crate::embed::Embedder;
use crate::error::{RecordedError, Result};
use crate::layout::Layout;
use futures_util::StreamExt;
use serde_json::json;
use skein_conversation::Model;
use skein_core::{NodeId, ReplayId, now_ms};
use skein_engine::{RenderedPrompt, Request, Tool};
use skein_store::{NewReplayTurn, ReplayRecord, ReplayTotals, ReplayTurn, Store};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// Turns a worker claims at once (at least; its capacity when larger).
const CLAIM_BATCH: usize = 8;

/// How long a worker's claim on a turn lasts unless told otherwise.
pub const DEFAULT_LEASE_MS: i64 = 120_000;

/// What a worker needs besides the plan: the model, the comparison's
/// embedder and judge, the live tools, and how it works.
#[derive(Clone)]
pub struct Replayer {
    pub(super) store: Store,
    pub(super) model: Model,
    /// The other candidates of a replay that compares models, by name.
    pub(super) candidates: HashMap<String, Model>,
    pub(super) embedder: Option<Arc<dyn Embedder>>,
    pub(super) judge: Option<Model>,
    pub(super) live: Vec<Arc<dyn Tool>>,
    pub(super) worker: String,
    pub(super) lease_ms: i64,
    pub(super) concurrency: Option<usize>,
}

/// One turn finished, as [`Replayer::run`] reports it.
#[derive(Clone, Debug)]
pub struct Progress {
    pub turn: ReplayTurn,
    /// Turns finished so far by every worker, and selected.
    pub finished: u64,
    pub total: u64,
}

impl Replayer {
    /// A worker replaying on `model` (the plan's model, opened by the
    /// caller) in `store`.
    pub fn new(store: &Store, model: Model) -> Replayer {
        Replayer {
            store: store.clone(),
            model,
            candidates: HashMap::new(),
            embedder: None,
            judge: None,
            live: Vec::new(),
            worker: format!("{}-{}", std::process::id(), ReplayId::random().short()),
            lease_ms: DEFAULT_LEASE_MS,
            concurrency: None,
        }
    }

    /// Another candidate of a replay that compares models ([`ReplayPlan::models`]),
    /// opened by the caller: the rows of `name` are replayed on `model`.
    pub fn candidate(mut self, name: impl Into<String>, model: Model) -> Replayer {
        self.candidates.insert(name.into(), model);
        self
    }

    /// The embedder of the `embedding` comparator (and of the default).
    pub fn embedder(mut self, embedder: Arc<dyn Embedder>) -> Replayer {
        self.embedder = Some(embedder);
        self
    }

    /// The model of the `judge` comparator.
    pub fn judge(mut self, model: Model) -> Replayer {
        self.judge = Some(model);
        self
    }

    /// A tool that may run live when the plan names it.
    pub fn live_tool(mut self, tool: Arc<dyn Tool>) -> Replayer {
        self.live.push(tool);
        self
    }

    /// How long a claim on a turn lasts unless renewed: the worker renews
    /// it every third of this while it holds the turn, and a dead worker's
    /// turns go to others once it passes.
    pub fn lease(mut self, lease: Duration) -> Replayer {
        self.lease_ms = lease.as_millis().min(i64::MAX as u128) as i64;
        self
    }

    /// Turns replayed at once (default: the model's backend capacity).
    pub fn concurrency(mut self, n: usize) -> Replayer {
        self.concurrency = Some(n.max(1));
        self
    }

    /// This worker's name, as claims record it.
    pub fn worker(&self) -> &str {
        &self.worker
    }

    /// Store a replay of `selection` by `plan`, every turn pending. The
    /// plan is checked first (its comparators, its live tools), so a
    /// replay that cannot run is refused before anything is stored.
    pub async fn start(&self, selection: &Selection, plan: &ReplayPlan) -> Result<ReplayId> {
        self.comparison(plan)?.check()?;
        self.check_live(plan)?;
        self.check_prompt_version(plan)?;
        self.check_candidates(plan)?;
        if selection.is_empty() {
            return Err(RecordedError::EmptySelection);
        }
        if plan.compare.is_empty() {
            for case in &selection.cases {
                self.own_comparison(&case.compare, plan)?;
            }
        }
        let turns = select(&self.store, selection).await?;
        if turns.is_empty() {
            return Err(RecordedError::EmptySelection);
        }
        // What the first turns ran on, kept with the record so a listing
        // says `A → B` without reading any turn.
        let originals = Originals::sampled(&self.store, &turns).await?;
        // Comparing models: each turn once per candidate, its rows side by
        // side (a claim takes a turn's rows together, so the candidates
        // run concurrently).
        let turns = match plan.models.as_slice() {
            [] => turns,
            models => turns
                .into_iter()
                .flat_map(|turn| {
                    models.iter().map(move |model| NewReplayTurn {
                        model: Some(model.clone()),
                        ..turn.clone()
                    })
                })
                .collect(),
        };
        let record = ReplayRecord {
            id: ReplayId::random(),
            selection: serde_json::to_value(selection).map_err(store_json)?,
            change: serde_json::to_value(&plan.change).map_err(store_json)?,
            model: plan.model.clone(),
            settings: json!({
                "compare": plan.compare,
                "judge": plan.judge,
                "live_tools": plan.live_tools,
                "chain_limit": plan.chain_limit,
                "models": plan.models,
                "original_models": originals.models,
                "original_tools": originals.tools,
            }),
            turns: turns.len() as u64,
            created_ms: now_ms(),
        };
        self.store
            .nonblocking()
            .create_replay(&record, &turns)
            .await?;
        Ok(record.id)
    }

    /// Replay the turns of `id` no worker holds until every turn is
    /// finished (waiting out the leases of turns other workers hold),
    /// calling `progress` after each turn this worker finishes; the leases
    /// of the turns it holds are renewed meanwhile (on a task of the tokio
    /// runtime, ended when this returns). A worker's name is one run's at a
    /// time, since no claim hands a worker back a turn held under its name:
    /// after a run that failed, resume with a new `Replayer` (the failed
    /// run's turns go to other workers once their leases pass).
    pub async fn run(
        &self,
        id: &ReplayId,
        mut progress: impl FnMut(&Progress) + Send,
    ) -> Result<ReplayTotals> {
        let record = self.store.nonblocking().replay(id).await?;
        let plan = plan_of(&record)?;
        let comparison = self.comparison(&plan)?;
        comparison.check()?;
        self.check_live(&plan)?;
        self.check_prompt_version(&plan)?;
        self.check_candidates(&plan)?;
        let capacity = self.concurrency.unwrap_or_else(|| self.capacity(&plan));
        let mut totals = self.store.nonblocking().replay_totals(id).await?;
        // Until this returns: the turns this worker holds keep their leases
        // however long their calls take.
        let _heartbeat = Heartbeat::start(&self.store, id, &self.worker, self.lease_ms);
        loop {
            // Claimed a few at a time (one write per batch, not per turn),
            // in selection order.
            let batch = capacity.max(CLAIM_BATCH);
            let turns = futures_util::stream::unfold(
                std::collections::VecDeque::new(),
                move |mut claimed| async move {
                    if claimed.is_empty() {
                        match self
                            .store
                            .nonblocking()
                            .claim_replay_turns(id, &self.worker, batch, self.lease_ms)
                            .await
                        {
                            Ok(more) => claimed.extend(more),
                            Err(error) => return Some((Err(error), claimed)),
                        }
                    }
                    claimed.pop_front().map(|turn| (Ok(turn), claimed))
                },
            );
            let replayed = turns
                .map(|claimed| {
                    let (plan, comparison) = (&plan, &comparison);
                    async move {
                        let turn = claimed?;
                        self.replay_turn(id, turn, plan, comparison).await
                    }
                })
                .buffer_unordered(capacity);
            let mut replayed = std::pin::pin!(replayed);
            // Counted here rather than read back after every turn (a count
            // over the replay's rows); other workers' turns show when this
            // one runs out of turns to claim.
            let mut finished = finished_of(record.turns, &totals);
            while let Some(done) = replayed.next().await {
                let turn = done?;
                finished = (finished + 1).min(record.turns);
                progress(&Progress {
                    turn,
                    finished,
                    total: record.turns,
                });
            }
            totals = self.store.nonblocking().replay_totals(id).await?;
            if totals.finished() {
                return Ok(totals);
            }
            // Other workers hold the rest: wait for them to finish, or
            // for their leases to pass.
            sleep(Duration::from_millis(200)).await;
        }
    }

    /// The comparison a plan asks for.
    pub(super) fn comparison(&self, plan: &ReplayPlan) -> Result<Comparison> {
        let mut comparison = if plan.compare.is_empty() {
            Comparison::default_for(self.embedder.clone())
        } else {
            Comparison::new(plan.comparators()?).embedder(self.embedder.clone())
        };
        if let Some(judge) = &self.judge {
            comparison = comparison.judge(judge.clone());
        }
        Ok(comparison)
    }

    /// A turn's own comparison (a case's comparators, which name no model:
    /// a judge is this worker's), when the plan names none.
    pub(super) fn own_comparison(
        &self,
        own: &[String],
        plan: &ReplayPlan,
    ) -> Result<Option<Comparison>> {
        if !plan.compare.is_empty() || own.is_empty() {
            return Ok(None);
        }
        let mut comparison = Comparison::new(
            own.iter()
                .map(|spec| Comparator::parse_for_case(spec))
                .collect::<Result<_>>()?,
        )
        .embedder(self.embedder.clone());
        if let Some(judge) = &self.judge {
            comparison = comparison.judge(judge.clone());
        }
        comparison.check()?;
        Ok(Some(comparison))
    }

    /// Whether this worker's engine has the plan's prompt version.
    fn check_prompt_version(&self, plan: &ReplayPlan) -> Result<()> {
        let Some(wanted) = &plan.change.prompt_version else {
            return Ok(());
        };
        let engine = self.model.engine();
        if engine
            .inspect_prompt(&wanted.id, Some(wanted.version))
            .is_ok()
        {
            return Ok(());
        }
        Err(RecordedError::UnknownPromptVersion {
            id: wanted.id.clone(),
            version: wanted.version,
            known: engine
                .inspect_prompt(&wanted.id, None)
                .map(|prompt| prompt.versions)
                .unwrap_or_default(),
        })
    }

    /// The plan's prompt version rendered for `original`, with the
    /// variables its first run rendered the prompt with, and where its
    /// messages go; `None` when the plan changes no prompt. Why not, when
    /// the turn rendered no such prompt or the version does not render.
    pub(super) fn prompt_swap(
        &self,
        original: &Original,
        plan: &ReplayPlan,
        model: &Model,
    ) -> std::result::Result<Option<PromptSwap>, String> {
        let Some(wanted) = &plan.change.prompt_version else {
            return Ok(None);
        };
        let recorded = RenderedPrompt::of(&original.runs[0].relations)
            .filter(|rendered| rendered.id == wanted.id)
            .ok_or_else(|| {
                format!(
                    "the turn rendered no configured prompt `{}`, so there is no version to \
                     change (replay the turns that rendered it)",
                    wanted.id
                )
            })?;
        let nodes: Vec<NodeId> = original.request.nodes().iter().map(|n| n.id()).collect();
        let start = recorded
            .messages
            .first()
            .and_then(|first| nodes.iter().position(|node| node == first));
        let at = match start {
            Some(start) if nodes[start..].starts_with(&recorded.messages) => {
                start..start + recorded.messages.len()
            }
            _ => {
                return Err(format!(
                    "the messages configured prompt `{}` rendered are not in the turn's request",
                    wanted.id
                ));
            }
        };
        let request = recorded.variables.iter().fold(
            Request::prompt_version(wanted.id.clone(), wanted.version),
            |request, (name, value)| request.var(name.clone(), value.clone()),
        );
        let rendered = model
            .engine()
            .prepare(&model.bind(request))
            .map_err(|error| {
                format!(
                    "configured prompt {wanted} does not render with the turn's variables: {error}"
                )
            })?;
        Ok(Some(PromptSwap {
            at,
            messages: Layout::of(&rendered.thread, &rendered.annotations),
        }))
    }

    /// Whether this worker has every candidate model of the plan.
    fn check_candidates(&self, plan: &ReplayPlan) -> Result<()> {
        let candidates = plan.candidates();
        for name in &candidates {
            self.model_named(name, plan)?;
        }
        Ok(())
    }

    /// The model a row is replayed on: its candidate's, else the plan's.
    pub(super) fn model_named(&self, name: &str, plan: &ReplayPlan) -> Result<&Model> {
        if name == plan.model {
            return Ok(&self.model);
        }
        self.candidates
            .get(name)
            .ok_or_else(|| RecordedError::UnknownCandidate {
                model: name.to_string(),
                candidates: plan.candidates(),
            })
    }

    fn check_live(&self, plan: &ReplayPlan) -> Result<()> {
        for name in &plan.live_tools {
            if !self.live.iter().any(|tool| &tool.spec().name == name) {
                return Err(RecordedError::UnknownLiveTool { name: name.clone() });
            }
        }
        Ok(())
    }

    /// Turns replayed at once: the capacity of each candidate's backend
    /// (one when it cannot be told), added up, so the candidates run side
    /// by side, each within its own admission.
    fn capacity(&self, plan: &ReplayPlan) -> usize {
        plan.candidates()
            .iter()
            .filter_map(|name| self.model_named(name, plan).ok())
            .map(capacity_of)
            .sum::<usize>()
            .max(1)
    }
}

/// Renews a worker's leases on a replay's turns, every third of a lease,
/// until dropped: one statement for all the turns it holds, on a task of
/// its own so that no turn's work delays it.
struct Heartbeat(tokio::task::JoinHandle<()>);

impl Heartbeat {
    fn start(store: &Store, id: &ReplayId, worker: &str, lease_ms: i64) -> Heartbeat {
        let (store, id, worker) = (store.clone(), id.clone(), worker.to_string());
        let every = Duration::from_millis((lease_ms / 3).max(1) as u64);
        Heartbeat(tokio::spawn(async move {
            loop {
                sleep(every).await;
                let renewed = store
                    .nonblocking()
                    .renew_replay_leases(&id, &worker, lease_ms)
                    .await;
                if let Err(error) = renewed {
                    tracing::warn!(
                        %error,
                        "replay {id}: worker {worker} could not renew its leases; its turns may \
                         be taken over when they pass"
                    );
                }
            }
        }))
    }
}

impl Drop for Heartbeat {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The capacity of a model's backend (one when it cannot be told).
fn capacity_of(model: &Model) -> usize {
    let engine = model.engine();
    engine
        .inspect_profile(model.profile())
        .and_then(|profile| engine.inspect_backend(&profile.backend))
        .map_or(1, |backend| backend.backend.capacity.max(1))
}

/// How many of a replay's `turns` are finished, by `totals`.
fn finished_of(turns: u64, totals: &ReplayTotals) -> u64 {
    turns.saturating_sub(totals.pending + totals.running)
}

async fn sleep(pause: Duration) {
    tokio::time::sleep(pause).await;
}
