/*!
Replays: a selection of recorded turns re-sent with one change, each
replayed turn a counterfactual branch of the original, judged by the
comparators of [`crate::compare`].

A turn is a request (the message a model answered, with the history
before it) and everything the model and the tools said until the next
user message: one run, or a tool loop, whether skein's own loop ran it or
a client of the recording proxy sent each step. Its **recorded request**
is the first run's: the thread up to that message, the run's annotations,
the tools it offered and its options (what the engine sent; for a proxied
turn, the body the client sent was mapped to exactly these). A replay
re-sends it with only its [`Change`] applied (another model or options, a
system prompt, tools removed, added or swapped, sources removed or
replaced by tag),
through the turn service like every other surface.

Tool calls are answered from the recording: a call of the same tool with
value-equal arguments ([`skein_providers::http::arguments_value`], the
proxy's matching) made in the original turn gets the result recorded for
it, call by call through a multi-call loop. A call the recording lacks
stops the turn as *diverged* ("asked for X(args)") unless that tool was
named live ([`ReplayPlan::live_tools`]); no tool runs otherwise.

Where it lands: a replayed turn's request shares every node the change
left alone (a model change alone shares all of them, so its answer is a
sibling of the original answer), its answer and runs are stored with its
row of the replay record ([`skein_store::ReplayTurn`]) in one transaction,
and no conversation is created: a replay of a week of traffic does not
flood `skein list`. It is found from the original turn
([`skein_store::Store::replay_turns_of_node`]) and from the replay. The
same turn replayed twice on a deterministic model reaches the same node
(content addressing): no second branch.

Running: [`Replayer::start`] reads the selection one conversation at a
time (threads are dropped as soon as their turns are listed) and stores
the replay with one pending row per turn; [`Replayer::run`] claims rows
a few at a time (the model's capacity, at least 8) under a lease and
replays up to the model's capacity at once. While it runs, a heartbeat
task renews the lease of every turn the worker holds (running or waiting
its turn in the batch) every third of a lease, in one store write
([`skein_store::Store::renew_replay_leases`]), so a turn is sent once
however long its calls take; and a worker is never handed back a turn it
holds. A turn whose worker stopped renewing (killed, or stalled past its
lease) is taken over by another, which notes it in the turn's detail
(`reclaimed_from`, `reclaims`) and says so in a warning; the first
worker's result, should it come, is dropped. So several workers
(processes, machines, on PostgreSQL) share one replay and a killed one is
resumed by running it again: finished turns are never redone, and a turn
is recorded whole or not at all. A turn that cannot be judged (a judge's
call fails, an embedder errs) is failed with the reason, its replayed
answer and runs kept, and the replay goes on.

Reporting: [`ReplayReport`] is what every surface shows of a replay (its
turns with the questions re-sent and their conversations' names,
comparators and costs, and what changed in words), [`ReplayOverview`] a
listing's row, and [`ReplayUsage`] what it used.
*/

mod overview;
mod report;

use overview::Originals;
pub use overview::ReplayOverview;
pub use report::{
    CostDelta, ModelTotals, ModelUsage, ReplayReport, ReplayUsage, TurnReport, TurnUsage,
    result_of, turns_of_replay,
};

use crate::compare::{Comparator, Comparison, Decision};
use crate::embed::Embedder;
use crate::error::{RecordedError, Result};
use crate::layout::Layout;
use futures_util::StreamExt;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use skein_conversation::Model;
use skein_conversation::service::{TurnError, TurnRequest};
use skein_core::BoxFuture;
use skein_core::provider::GenerationOptions;
use skein_core::{
    ConversationId, NodeId, Relation, ReplayId, Role, RunRecord, RunStatus, Thread, ToolCall,
    ToolSpec, now_ms,
};
use skein_engine::{CallDecision, Chain, ChainStatus, RenderedPrompt, Request, Tool, ToolError};
use skein_providers::http::arguments_value;
use skein_store::{
    ConversationRecord, FamilyLimits, NewReplayTurn, ReplayRecord, ReplayStatus, ReplayTotals,
    ReplayTurn, ReplayTurnFinish, SearchQuery, Store, StoreError,
};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Turns a worker claims at once (at least; its capacity when larger).
const CLAIM_BATCH: usize = 8;

/// How long a worker's claim on a turn lasts unless told otherwise.
pub const DEFAULT_LEASE_MS: i64 = 120_000;

/// Which recorded turns a replay re-sends: the turns of every source named
/// (conversations, families, turns, labels, cases), each once, kept when
/// they pass every filter (search, time range, proxy client); filters
/// alone select among every conversation's turns. More ways to select add
/// fields here.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Selection {
    /// Every turn of these conversations.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conversations: Vec<ConversationId>,
    /// Every turn of these conversations' families.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub families: Vec<ConversationId>,
    /// These turns, by their final answer's node.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub turns: Vec<NodeId>,
    /// The turns carrying these labels (`skein label add`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub labels: Vec<String>,
    /// Imported cases ([`crate::cases`]): turns, each with its own
    /// comparators.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cases: Vec<CaseTurn>,
    /// Filter: only turns whose request or answers have these words (the
    /// store's search language, within each turn's conversation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub search: Option<String>,
    /// Filter: only turns recorded at or after this time (Unix ms: when the
    /// run that gave the first answer started).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since_ms: Option<i64>,
    /// Filter: only turns recorded before this time (Unix ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until_ms: Option<i64>,
    /// Filter: only turns the recording proxy recorded for one of these
    /// clients (a run that produced the turn's answer names it:
    /// `x-skein-client`, else OpenAI's `user` or Anthropic's
    /// `metadata.user_id`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub clients: Vec<String>,
}

/// A case's turn as a selection holds it: its final answer and the
/// comparators the case names (empty: the replay's).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CaseTurn {
    pub turn: NodeId,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub compare: Vec<String>,
}

impl Selection {
    pub fn new() -> Selection {
        Selection::default()
    }

    pub fn conversation(mut self, id: ConversationId) -> Selection {
        self.conversations.push(id);
        self
    }

    pub fn family(mut self, id: ConversationId) -> Selection {
        self.families.push(id);
        self
    }

    pub fn turn(mut self, answer: NodeId) -> Selection {
        self.turns.push(answer);
        self
    }

    pub fn label(mut self, name: impl Into<String>) -> Selection {
        self.labels.push(name.into());
        self
    }

    pub fn case(mut self, case: CaseTurn) -> Selection {
        self.cases.push(case);
        self
    }

    /// Only turns whose messages have these words.
    pub fn search(mut self, text: impl Into<String>) -> Selection {
        self.search = Some(text.into());
        self
    }

    /// Only turns recorded in `[since, until)` (Unix ms; either open).
    pub fn between(mut self, since_ms: Option<i64>, until_ms: Option<i64>) -> Selection {
        self.since_ms = since_ms;
        self.until_ms = until_ms;
        self
    }

    /// Only turns the recording proxy recorded for this client.
    pub fn client(mut self, name: impl Into<String>) -> Selection {
        self.clients.push(name.into());
        self
    }

    /// Whether a source (conversations, families, turns, labels, cases) is
    /// named; without one, the filters apply to every conversation.
    pub fn has_source(&self) -> bool {
        !(self.conversations.is_empty()
            && self.families.is_empty()
            && self.turns.is_empty()
            && self.labels.is_empty()
            && self.cases.is_empty())
    }

    /// Whether any filter is set.
    pub fn has_filter(&self) -> bool {
        self.search.is_some()
            || self.since_ms.is_some()
            || self.until_ms.is_some()
            || !self.clients.is_empty()
    }

    /// Nothing is selected: no source and no filter.
    pub fn is_empty(&self) -> bool {
        !self.has_source() && !self.has_filter()
    }
}

/// What a replay changes in each recorded request; everything else is
/// re-sent byte for byte.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Change {
    /// Options set here replace the recorded ones (the rest stay).
    #[serde(default)]
    pub options: GenerationOptions,
    /// The system prompt, in place of the recorded system messages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system: Option<String>,
    /// Tools no longer offered.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub remove_tools: Vec<String>,
    /// Tools offered besides, or in place of the recorded tool of the same
    /// name (a swapped schema).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub add_tools: Vec<ToolSpec>,
    /// Sources whose tagged parts are removed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub remove_sources: Vec<String>,
    /// Sources replaced: by id, the text their first tagged text part
    /// holds instead (their other tagged parts are removed). A request
    /// without the source is re-sent as it was.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub replace_sources: BTreeMap<String, String>,
    /// A configured prompt rendered at another version: in a request that
    /// rendered this prompt, its messages are the version's, rendered with
    /// the recorded variables. A turn whose first run rendered no such
    /// prompt fails, and says so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_version: Option<PromptVersion>,
}

/// A configured prompt of the engine at one version, written `ID@VERSION`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PromptVersion {
    pub id: String,
    pub version: u32,
}

impl PromptVersion {
    pub fn new(id: impl Into<String>, version: u32) -> PromptVersion {
        PromptVersion {
            id: id.into(),
            version,
        }
    }

    /// `ID@VERSION` read ([`RecordedError::BadPromptVersion`] otherwise).
    pub fn parse(text: &str) -> Result<PromptVersion> {
        let bad = || RecordedError::BadPromptVersion(text.to_string());
        let (id, version) = text.rsplit_once('@').ok_or_else(bad)?;
        if id.is_empty() {
            return Err(bad());
        }
        let version = version.parse().map_err(|_| bad())?;
        Ok(PromptVersion::new(id, version))
    }
}

impl std::fmt::Display for PromptVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}@{}", self.id, self.version)
    }
}

/// A configured prompt's messages in a recorded request, and the messages
/// of another version to put in their place.
struct PromptSwap {
    /// The recorded messages' positions in the request.
    at: std::ops::Range<usize>,
    messages: Layout,
}

impl Change {
    /// The recorded request of a turn with this change applied: its
    /// layout, tools and options.
    fn apply(
        &self,
        request: &Thread,
        run: &RunRecord,
        prompt: Option<PromptSwap>,
    ) -> (Layout, Vec<ToolSpec>, GenerationOptions) {
        let mut layout = Layout::of(request, &run.annotations);
        if let Some(swap) = prompt {
            layout.entries.splice(swap.at, swap.messages.entries);
        }
        if !self.remove_sources.is_empty() {
            layout.remove(&self.remove_sources.iter().cloned().collect());
        }
        for (id, text) in &self.replace_sources {
            layout.replace(id, text);
        }
        if let Some(system) = &self.system {
            layout.replace_system(system);
        }
        let mut tools: Vec<ToolSpec> = run
            .tools
            .iter()
            .filter(|tool| {
                !self.remove_tools.contains(&tool.name)
                    && !self.add_tools.iter().any(|added| added.name == tool.name)
            })
            .cloned()
            .collect();
        tools.extend(self.add_tools.iter().cloned());
        let given = &self.options;
        let recorded = &run.options;
        let options = GenerationOptions {
            temperature: given.temperature.or(recorded.temperature),
            top_p: given.top_p.or(recorded.top_p),
            seed: given.seed.or(recorded.seed),
            max_tokens: given.max_tokens.or(recorded.max_tokens),
        };
        (layout, tools, options)
    }
}

/// A replay's plan: what it changes, on which model, judged how. Stored
/// with the replay, so any worker can run it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReplayPlan {
    /// The model turns are replayed on, as the worker opens it (the first
    /// candidate, when the replay compares several).
    pub model: String,
    /// Every candidate model, in order, when the replay compares several
    /// (`model` first): each turn is replayed once on each, one report
    /// for all. Empty: `model` alone.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub models: Vec<String>,
    pub change: Change,
    /// The comparators, as [`Comparator::parse`] reads them; empty for the
    /// default ([`Comparison::default_for`]).
    #[serde(default)]
    pub compare: Vec<String>,
    /// The model that judges for a `judge` comparator without one of its
    /// own (a case's: a cases file never names a model). The caller's
    /// choice, like `model`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub judge: Option<String>,
    /// Tools that may run for calls the recording lacks, by name.
    #[serde(default)]
    pub live_tools: Vec<String>,
    /// Model calls a replayed turn may make.
    #[serde(default = "default_chain_limit")]
    pub chain_limit: u32,
}

fn default_chain_limit() -> u32 {
    skein_engine::DEFAULT_CHAIN_LIMIT
}

impl ReplayPlan {
    pub fn new(model: impl Into<String>) -> ReplayPlan {
        ReplayPlan {
            model: model.into(),
            models: Vec::new(),
            change: Change::default(),
            compare: Vec::new(),
            judge: None,
            live_tools: Vec::new(),
            chain_limit: default_chain_limit(),
        }
    }

    /// A plan comparing `models` (at least one; each named once): every
    /// turn is replayed on each of them, in this order.
    pub fn comparing(models: Vec<String>) -> Result<ReplayPlan> {
        let mut seen = HashSet::new();
        if let Some(twice) = models.iter().find(|model| !seen.insert(model.as_str())) {
            return Err(RecordedError::DuplicateModel(twice.clone()));
        }
        let Some(first) = models.first() else {
            return Err(RecordedError::NoModel);
        };
        let mut plan = ReplayPlan::new(first.clone());
        if models.len() > 1 {
            plan.models = models;
        }
        Ok(plan)
    }

    /// The models turns are replayed on: every candidate, or `model`
    /// alone.
    pub fn candidates(&self) -> Vec<String> {
        if self.models.is_empty() {
            vec![self.model.clone()]
        } else {
            self.models.clone()
        }
    }

    /// The model the worker opens as its judge: [`judge`], else the one
    /// a `judge:MODEL` of [`compare`] names (never a case's comparators,
    /// which name none). Two different ones are refused: one replay has
    /// one judge.
    ///
    /// [`judge`]: ReplayPlan::judge
    /// [`compare`]: ReplayPlan::compare
    pub fn judge_model(&self) -> Result<Option<String>> {
        let mut chosen = self.judge.clone();
        for comparator in self.comparators()? {
            if let Comparator::Judge {
                model: Some(model), ..
            } = comparator
            {
                match &chosen {
                    Some(other) if *other != model => {
                        return Err(RecordedError::BadComparator {
                            spec: format!("judge:{model}"),
                            why: format!("the replay's judge is already {other}: name one"),
                        });
                    }
                    _ => chosen = Some(model),
                }
            }
        }
        Ok(chosen)
    }

    /// The comparators, read.
    pub fn comparators(&self) -> Result<Vec<Comparator>> {
        self.compare
            .iter()
            .map(|spec| Comparator::parse(spec))
            .collect()
    }
}

/// What a worker needs besides the plan: the model, the comparison's
/// embedder and judge, the live tools, and how it works.
#[derive(Clone)]
pub struct Replayer {
    store: Store,
    model: Model,
    /// The other candidates of a replay that compares models, by name.
    candidates: HashMap<String, Model>,
    embedder: Option<Arc<dyn Embedder>>,
    judge: Option<Model>,
    live: Vec<Arc<dyn Tool>>,
    worker: String,
    lease_ms: i64,
    concurrency: Option<usize>,
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
    fn comparison(&self, plan: &ReplayPlan) -> Result<Comparison> {
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
    fn own_comparison(&self, own: &[String], plan: &ReplayPlan) -> Result<Option<Comparison>> {
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
    fn prompt_swap(
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
    fn model_named(&self, name: &str, plan: &ReplayPlan) -> Result<&Model> {
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

    /// Replay one claimed turn and finish it (or leave it to the worker
    /// that holds it now, when this one's lease passed unrenewed).
    async fn replay_turn(
        &self,
        id: &ReplayId,
        turn: ReplayTurn,
        plan: &ReplayPlan,
        comparison: &Comparison,
    ) -> Result<ReplayTurn> {
        let own = self.own_comparison(&turn_compare(&turn.detail), plan)?;
        let comparison = own.as_ref().unwrap_or(comparison);
        let taken_over = reclaimed(&turn.detail);
        if let Some(from) = turn.detail["reclaimed_from"].as_str() {
            tracing::warn!(
                "turn {} of replay {id} was taken over from worker {from}, whose lease passed \
                 (it stopped renewing: dead or stalled); replaying it again",
                turn.seq
            );
        }
        let model = self.model_named(turn.model.as_deref().unwrap_or(&plan.model), plan)?;
        let mut outcome = match self.original(&turn).await? {
            Some(original) => {
                let outcome = self.replay_original(id, &original, plan, model).await;
                self.judged(outcome, &original, comparison, id).await
            }
            None => Outcome::failed(
                "the original turn has no run record (an imported turn?): its tools and \
                 options are unknown",
            ),
        };
        for (key, value) in taken_over {
            outcome.detail[key] = value;
        }
        let finish = ReplayTurnFinish {
            replay: id,
            seq: turn.seq,
            worker: &self.worker,
            status: outcome.status,
            answer_head: outcome.answer_head,
            decision: outcome.decision.as_deref(),
            comparator: outcome.comparator.as_deref(),
            detail: &outcome.detail,
            threads: &outcome.threads,
            runs: &outcome.runs,
            other_runs: outcome.judge.as_slice(),
        };
        match self.store.nonblocking().finish_replay_turn(&finish).await {
            Ok(()) => {
                let result = match (outcome.status, outcome.decision.as_deref()) {
                    (ReplayStatus::Done, Some(decision)) => decision,
                    (status, _) => status.as_str(),
                };
                skein_conversation::telemetry::replay_turn(
                    &self.store,
                    skein_conversation::telemetry::ReplayedTurn {
                        replay: id,
                        seq: turn.seq,
                        turn_node: turn.turn_node,
                        result,
                        runs: &outcome.runs,
                        answer: outcome.threads.first(),
                    },
                )
                .await;
            }
            Err(StoreError::ReplayTurnLost { .. }) => {
                tracing::warn!(
                    "turn {} of replay {id} was taken over by another worker after this one's \
                     lease passed; its result here is dropped",
                    turn.seq
                );
            }
            Err(error) => return Err(error.into()),
        }
        Ok(ReplayTurn {
            status: outcome.status,
            answer_head: outcome.answer_head,
            runs: outcome.runs.iter().map(|run| run.id.clone()).collect(),
            decision: outcome.decision,
            comparator: outcome.comparator,
            detail: outcome.detail,
            finished_ms: Some(now_ms()),
            ..turn
        })
    }

    /// The original turn of a row (see [`original_turn`]).
    async fn original(&self, turn: &ReplayTurn) -> Result<Option<Original>> {
        original_turn(&self.store, turn.turn_node, turn.request_node).await
    }

    /// Run the changed request through the turn service, tools answered
    /// from the recording.
    async fn replay_original(
        &self,
        id: &ReplayId,
        original: &Original,
        plan: &ReplayPlan,
        model: &Model,
    ) -> Outcome {
        let first = &original.runs[0];
        let swap = match self.prompt_swap(original, plan, model) {
            Ok(swap) => swap,
            Err(why) => return Outcome::failed(&why),
        };
        let (layout, tools, options) = plan.change.apply(&original.request, first, swap);
        let asked = Arc::new(Mutex::new(None::<String>));
        let offered: Vec<Arc<dyn Tool>> = tools
            .into_iter()
            .map(|spec| {
                let live = plan
                    .live_tools
                    .contains(&spec.name)
                    .then(|| {
                        self.live
                            .iter()
                            .find(|t| t.spec().name == spec.name)
                            .cloned()
                    })
                    .flatten();
                Arc::new(ReplayTool::new(spec, &original.calls, live)) as Arc<dyn Tool>
            })
            .collect();
        let answerable = Arc::new(Answerable {
            calls: original.calls.clone(),
            live: plan.live_tools.iter().cloned().collect(),
        });
        let stop = asked.clone();
        let mut chain = Chain::new(offered)
            .limit(plan.chain_limit)
            .before_call(Box::new(move |call: &ToolCall| {
                let decision = if answerable.answers(call) {
                    CallDecision::Run(call.clone())
                } else {
                    let mut asked = stop.lock().unwrap_or_else(|p| p.into_inner());
                    asked.get_or_insert_with(|| {
                        format!("asked for {}({})", call.name, call.arguments)
                    });
                    CallDecision::Stop
                };
                Box::pin(async move { decision })
            }));
        let request = model
            .bind(layout.request())
            .options(options)
            .relation(Relation::Replay(id.clone()));
        let started = Instant::now();
        let done = TurnRequest::new(model.engine(), request)
            .whole()
            .tool_loop(&mut chain)
            .await;
        let elapsed = started.elapsed();
        let diverged = asked.lock().unwrap_or_else(|p| p.into_inner()).take();
        match done {
            Ok(done) => {
                let output = done.output;
                let records: Vec<RunRecord> =
                    output.responses.iter().map(|r| r.record(None)).collect();
                let answer = output.last().text();
                let (status, why) = match output.status {
                    ChainStatus::Completed => (ReplayStatus::Done, None),
                    ChainStatus::Stopped => (
                        ReplayStatus::Diverged,
                        Some(format!(
                            "diverged: {}",
                            diverged.unwrap_or_else(|| "the tool loop stopped".into())
                        )),
                    ),
                    ChainStatus::LimitReached => (
                        ReplayStatus::Failed,
                        Some(format!(
                            "the tool loop reached its limit of {} model calls",
                            plan.chain_limit
                        )),
                    ),
                };
                Outcome {
                    status,
                    answer_head: output.thread.head_id(),
                    decision: None,
                    comparator: None,
                    // The answer's text is its node's: the row keeps the
                    // node (answer_head), never the text (DESIGN
                    // invariant 13).
                    answer: Some(answer),
                    detail: json!({
                        "why": why,
                        "elapsed_ms": elapsed.as_millis() as u64,
                    }),
                    threads: vec![output.thread],
                    runs: records,
                    judge: None,
                }
            }
            Err(error) => failed_loop(error, elapsed),
        }
    }

    /// Judge a done turn against the original, and add what both cost. A
    /// comparison that fails (a judge's call, an embedder) fails the turn,
    /// its answer and runs kept.
    async fn judged(
        &self,
        mut outcome: Outcome,
        original: &Original,
        comparison: &Comparison,
        id: &ReplayId,
    ) -> Outcome {
        outcome.detail["original_usage"] = usage_of(&original.runs);
        // What both cost is priced when the report is read (prices change).
        outcome.detail["original_runs"] =
            json!(original.runs.iter().map(|run| &run.id).collect::<Vec<_>>());
        outcome.detail["usage"] = usage_of(&outcome.runs);
        if outcome.status != ReplayStatus::Done {
            return outcome;
        }
        let answer = outcome.answer.clone().unwrap_or_default();
        let decision: Decision = match comparison.decide(&original.text, &answer).await {
            Ok(decision) => decision,
            Err(error) => {
                outcome.status = ReplayStatus::Failed;
                outcome.detail["why"] = json!(comparison_failed(&error));
                return outcome;
            }
        };
        outcome.decision = Some(decision.word().to_string());
        outcome.comparator = Some(decision.comparator.clone());
        outcome.detail["why"] = json!(decision.why);
        if let Some(similarity) = decision.similarity {
            outcome.detail["similarity"] = json!(similarity);
        }
        if let Some((thread, mut run)) = decision.judge {
            // The judge's call is a run of its own, outside the turn's runs.
            run.relations.push(Relation::Other {
                kind: "replay.judge".into(),
                target: id.to_string(),
            });
            outcome.detail["judge_run"] = json!(run.id);
            outcome.threads.push(thread);
            outcome.judge = Some(run);
        }
        outcome
    }
}

/// Why a turn whose answer could not be compared failed.
fn comparison_failed(error: &RecordedError) -> String {
    match error {
        // A judge's call: the engine's error alone (the replayed turn itself
        // is recorded, whatever the error's own words say of turns).
        RecordedError::Engine(engine) => format!("the judge's model call failed: {engine}"),
        other => format!("the answer could not be compared: {other}"),
    }
}

/// The note a claim left in a turn's detail when it took the turn over from
/// another worker (`reclaimed_from`, `reclaims`), to keep in its outcome.
fn reclaimed(detail: &Value) -> Vec<(&'static str, Value)> {
    ["reclaimed_from", "reclaims"]
        .into_iter()
        .filter_map(|key| detail.get(key).map(|value| (key, value.clone())))
        .collect()
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

/// The original turn ending at `answer` that answered `request`: its
/// request, what it said, the runs that produced its answers; `None` when
/// no run record produced its first answer (its tools and options are
/// unknown).
pub(crate) async fn original_turn(
    store: &Store,
    answer: NodeId,
    request_node: NodeId,
) -> Result<Option<Original>> {
    let api = store.nonblocking();
    let thread = api.load_thread(answer).await?;
    let Some(request) = thread.at(request_node) else {
        return Err(RecordedError::Store(StoreError::MalformedRow(format!(
            "turn {}: its request {} is not on its answer's thread",
            answer.short(),
            request_node.short()
        ))));
    };
    let said: Vec<Thread> = answer_steps(&thread, request_node);
    let Some(first) = said.first().and_then(Thread::head_id) else {
        return Ok(None);
    };
    let mut runs = Vec::new();
    for step in &said {
        let node = step.head_id().expect("a step");
        let producing = api.runs_producing(node).await?;
        if let Some(run) = producing.into_iter().find(|run| {
            run.status == RunStatus::Succeeded && run.input_head == step.parent().head_id()
        }) {
            runs.push(run);
        } else if node == first {
            return Ok(None);
        }
    }
    let calls = recorded_calls(&thread, request_node);
    Ok(Some(Original {
        request,
        text: thread
            .head()
            .map(|node| node.message().joined_text())
            .unwrap_or_default(),
        runs,
        calls,
        thread,
    }))
}

/// An original turn, as its replay needs it.
pub(crate) struct Original {
    /// The thread up to the message the turn answered.
    pub(crate) request: Thread,
    /// The thread up to the turn's final answer.
    pub(crate) thread: Thread,
    /// The turn's final answer.
    pub(crate) text: String,
    /// The runs that produced each of its answers, in order.
    pub(crate) runs: Vec<RunRecord>,
    /// The tool calls it made, with their recorded results.
    calls: Vec<RecordedCall>,
}

/// A recorded tool call and the result the recording gave it.
#[derive(Clone, Debug)]
struct RecordedCall {
    name: String,
    arguments: Value,
    content: String,
    is_error: bool,
}

/// How a replayed turn ended, before it is written.
struct Outcome {
    status: ReplayStatus,
    answer_head: Option<NodeId>,
    /// The replayed answer's text, for the comparison (not stored: the
    /// row keeps its node).
    answer: Option<String>,
    decision: Option<String>,
    comparator: Option<String>,
    detail: Value,
    threads: Vec<Thread>,
    runs: Vec<RunRecord>,
    /// The judge's run, written with the turn but not among its runs.
    judge: Option<RunRecord>,
}

impl Outcome {
    fn failed(why: &str) -> Outcome {
        Outcome {
            status: ReplayStatus::Failed,
            answer_head: None,
            answer: None,
            decision: None,
            comparator: None,
            detail: json!({ "why": why }),
            threads: Vec::new(),
            runs: Vec::new(),
            judge: None,
        }
    }
}

/// A failed model call: the calls completed before it and the failed run
/// are kept (failed status, for usage), nothing is an answer.
fn failed_loop(error: TurnError, elapsed: Duration) -> Outcome {
    let why = error.to_string();
    let mut outcome = Outcome::failed(&why);
    outcome.detail["elapsed_ms"] = json!(elapsed.as_millis() as u64);
    match error {
        TurnError::Loop(failed) => {
            outcome.runs = failed.completed.iter().map(|r| r.record(None)).collect();
            if let Some(thread) = failed.thread {
                outcome.threads.push(thread);
            }
            if let Some(call) = failed.failed {
                let mut record = call.record;
                record.input_head = call.input.head_id();
                outcome.runs.push(record);
                outcome.threads.push(call.input);
            }
        }
        TurnError::Call(_) | TurnError::Store(_) => {}
    }
    outcome
}

/// Tokens and time of `runs`.
fn usage_of(runs: &[RunRecord]) -> Value {
    let mut input = 0u64;
    let mut output = 0u64;
    let mut elapsed = 0i64;
    for run in runs {
        input += run.usage.input_tokens.unwrap_or(0);
        output += run.usage.output_tokens.unwrap_or(0);
        elapsed += run
            .finished_ms
            .map_or(0, |finished| finished - run.started_ms);
    }
    json!({ "input_tokens": input, "output_tokens": output, "latency_ms": elapsed, "calls": runs.len() })
}

/// The answers of a turn that answered `request`: the thread at each
/// assistant message after it, up to the thread's head.
fn answer_steps(thread: &Thread, request: NodeId) -> Vec<Thread> {
    let mut steps = Vec::new();
    let mut at = thread.clone();
    while let Some(head) = at.head() {
        if head.id() == request {
            break;
        }
        if head.message().role == Role::Assistant {
            steps.push(at.clone());
        }
        at = at.parent();
    }
    steps.reverse();
    steps
}

/// The calls a turn made after `request`, with their recorded results.
fn recorded_calls(thread: &Thread, request: NodeId) -> Vec<RecordedCall> {
    let nodes = thread.nodes();
    let start = nodes
        .iter()
        .position(|node| node.id() == request)
        .map_or(nodes.len(), |at| at + 1);
    let span = &nodes[start..];
    let mut calls = Vec::new();
    for (index, node) in span.iter().enumerate() {
        for call in node.message().tool_calls() {
            let result = span[index + 1..]
                .iter()
                .flat_map(|later| later.message().tool_results_iter())
                .find(|result| result.call_id == call.id);
            if let Some(result) = result {
                calls.push(RecordedCall {
                    name: call.name.clone(),
                    arguments: arguments_value(&call.arguments),
                    content: result.content.clone(),
                    is_error: result.is_error,
                });
            }
        }
    }
    calls
}

/// Which calls a replayed turn may make: those the recording answers, and
/// any call of a live tool.
struct Answerable {
    calls: Vec<RecordedCall>,
    live: HashSet<String>,
}

impl Answerable {
    fn answers(&self, call: &ToolCall) -> bool {
        if self.live.contains(&call.name) {
            return true;
        }
        let value = arguments_value(&call.arguments);
        self.calls
            .iter()
            .any(|recorded| recorded.name == call.name && recorded.arguments == value)
    }
}

/// A tool as a replay offers it: its (recorded or changed) spec, answered
/// from the recording, else by the live tool when one was named.
struct ReplayTool {
    spec: ToolSpec,
    recorded: Vec<RecordedCall>,
    live: Option<Arc<dyn Tool>>,
}

impl ReplayTool {
    fn new(spec: ToolSpec, calls: &[RecordedCall], live: Option<Arc<dyn Tool>>) -> ReplayTool {
        ReplayTool {
            recorded: calls
                .iter()
                .filter(|call| call.name == spec.name)
                .cloned()
                .collect(),
            spec,
            live,
        }
    }
}

impl Tool for ReplayTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn call(&self, arguments: Value) -> BoxFuture<'_, std::result::Result<String, ToolError>> {
        // The engine parsed the argument text as JSON; an object's value is
        // its `arguments_value`.
        let recorded = self
            .recorded
            .iter()
            .find(|call| call.arguments == arguments)
            .cloned();
        match (recorded, &self.live) {
            (Some(call), _) => Box::pin(async move {
                if call.is_error {
                    Err(ToolError(call.content))
                } else {
                    Ok(call.content)
                }
            }),
            (None, Some(live)) => live.call(arguments),
            (None, None) => Box::pin(async {
                Err(ToolError(
                    "the recording has no result for this call and the tool is not live".into(),
                ))
            }),
        }
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

/// The turns of `selection`, each once, conversation by conversation: the
/// sources' turns (every conversation's when only filters are given), kept
/// when they pass the filters.
async fn select(store: &Store, selection: &Selection) -> Result<Vec<NewReplayTurn>> {
    let api = store.nonblocking();
    let mut picker = Picker {
        store,
        selection,
        seen: HashSet::new(),
        turns: Vec::new(),
        matches: HashMap::new(),
    };
    let mut conversations: Vec<ConversationId> = selection.conversations.clone();
    for id in &selection.families {
        let family = api.family(id, FamilyLimits::WHOLE).await?;
        conversations.extend(family.members.into_iter().map(|m| m.conversation.id));
    }
    for id in &conversations {
        let conversation = api.conversation(id).await?;
        picker.add_conversation(&conversation).await?;
    }
    if !selection.has_source() {
        // Page by page, so the listing is never held whole.
        let mut page = api.list_conversations(CONVERSATION_PAGE).await?;
        while let Some(last) = page.last().map(|c| c.position()) {
            for conversation in &page {
                picker.add_conversation(conversation).await?;
            }
            page = api
                .list_conversations_after(&last, CONVERSATION_PAGE)
                .await?;
        }
    }
    for answer in &selection.turns {
        picker.add_turn(*answer, Vec::new()).await?;
    }
    for name in &selection.labels {
        let mut after = None;
        loop {
            let page = api.labelled(name, after, LABEL_PAGE).await?;
            after = page.last().map(|label| label.node);
            for label in page {
                picker.add_turn(label.node, Vec::new()).await?;
            }
            if after.is_none() {
                break;
            }
        }
    }
    for case in &selection.cases {
        picker.add_turn(case.turn, case.compare.clone()).await?;
    }
    Ok(picker.turns)
}

/// Labelled nodes, and conversations, read at a time.
const LABEL_PAGE: usize = 500;
const CONVERSATION_PAGE: usize = 200;

/// The selection as it is read: the turns kept so far, and what the
/// filters found out per conversation.
struct Picker<'a> {
    store: &'a Store,
    selection: &'a Selection,
    seen: HashSet<NodeId>,
    turns: Vec<NewReplayTurn>,
    /// Per conversation, the nodes of its thread the search matches.
    matches: HashMap<ConversationId, HashSet<NodeId>>,
}

impl Picker<'_> {
    /// Every turn of `conversation` the filters keep.
    async fn add_conversation(&mut self, conversation: &ConversationRecord) -> Result<()> {
        let Some(head) = conversation.head else {
            return Ok(());
        };
        let thread = self.store.nonblocking().load_thread(head).await?;
        for (request, answer) in turns_of(&thread) {
            if self.seen.contains(&answer) {
                continue;
            }
            let turn = NewReplayTurn {
                conversation: Some(conversation.id.clone()),
                turn_node: answer,
                request_node: request,
                compare: Vec::new(),
                model: None,
            };
            if self.client_keeps(answer).await? && self.keeps(&turn, &thread).await? {
                self.seen.insert(answer);
                self.turns.push(turn);
            }
        }
        Ok(())
    }

    /// The turn whose final answer is `answer`, when the filters keep it.
    async fn add_turn(&mut self, answer: NodeId, compare: Vec<String>) -> Result<()> {
        if self.seen.contains(&answer) {
            return Ok(());
        }
        let api = self.store.nonblocking();
        let thread = api.load_thread(answer).await?;
        let request = request_in(&thread, answer)?;
        let owner = skein_conversation::owner_of_node(self.store, answer).await?;
        let turn = NewReplayTurn {
            conversation: owner,
            turn_node: answer,
            request_node: request,
            compare,
            model: None,
        };
        if self.client_keeps(answer).await? && self.keeps(&turn, &thread).await? {
            self.seen.insert(answer);
            self.turns.push(turn);
        }
        Ok(())
    }

    /// Whether the client filter keeps the turn answered by `answer`: a
    /// run that produced it was made by one of the selection's clients of
    /// the recording proxy (as its run records: `x-skein-client`, OpenAI's
    /// `user`, Anthropic's `metadata.user_id`).
    async fn client_keeps(&self, answer: NodeId) -> Result<bool> {
        let clients = &self.selection.clients;
        if clients.is_empty() {
            return Ok(true);
        }
        let runs = self.store.nonblocking().runs_producing(answer).await?;
        Ok(runs.iter().any(|run| {
            run.client
                .as_ref()
                .is_some_and(|client| clients.contains(client))
        }))
    }

    /// Whether the time and search filters keep `turn` of `thread`.
    async fn keeps(&mut self, turn: &NewReplayTurn, thread: &Thread) -> Result<bool> {
        let selection = self.selection;
        if selection.since_ms.is_some() || selection.until_ms.is_some() {
            let Some(at) = self.turn_time(turn, thread).await? else {
                return Ok(false);
            };
            if selection.since_ms.is_some_and(|since| at < since)
                || selection.until_ms.is_some_and(|until| at >= until)
            {
                return Ok(false);
            }
        }
        let Some(text) = &selection.search else {
            return Ok(true);
        };
        let Some(owner) = &turn.conversation else {
            return Ok(false);
        };
        if !self.matches.contains_key(owner) {
            let query = SearchQuery::new(text.clone())
                .limit(skein_store::search::MAX_LIMIT)
                .conversation(Some(owner.clone()));
            let found = self.store.nonblocking().search(&query).await?;
            if found.truncated {
                return Err(RecordedError::SearchTooWide {
                    conversation: owner.to_string(),
                    limit: skein_store::search::MAX_LIMIT,
                });
            }
            let nodes = found.matches.into_iter().map(|m| m.node).collect();
            self.matches.insert(owner.clone(), nodes);
        }
        let matched = &self.matches[owner];
        Ok(turn_nodes(thread, turn).any(|node| matched.contains(&node)))
    }

    /// When the turn was recorded: when the run that gave its first answer
    /// started (`None` when no run did).
    async fn turn_time(&self, turn: &NewReplayTurn, thread: &Thread) -> Result<Option<i64>> {
        let Some(first) = turn_nodes(thread, turn).nth(1) else {
            return Ok(None);
        };
        let runs = self.store.nonblocking().runs_producing(first).await?;
        Ok(runs
            .iter()
            .filter(|run| run.input_head == Some(turn.request_node))
            .map(|run| run.started_ms)
            .min())
    }
}

/// The nodes of `turn` on `thread`: its request, then every message up to
/// its final answer.
fn turn_nodes<'t>(thread: &'t Thread, turn: &NewReplayTurn) -> impl Iterator<Item = NodeId> + 't {
    let nodes: Vec<NodeId> = thread.nodes().iter().map(|node| node.id()).collect();
    let start = nodes.iter().position(|id| *id == turn.request_node);
    let end = nodes.iter().position(|id| *id == turn.turn_node);
    let span = match (start, end) {
        (Some(start), Some(end)) if start <= end => nodes[start..=end].to_vec(),
        _ => Vec::new(),
    };
    span.into_iter()
}

/// The message the turn ending at `answer` on `thread` answered.
fn request_in(thread: &Thread, answer: NodeId) -> Result<NodeId> {
    turns_of(thread)
        .into_iter()
        .rev()
        .find(|(_, last)| *last == answer)
        .map(|(request, _)| request)
        .ok_or(RecordedError::NotATurn(answer))
}

/// The message the turn ending at `answer` answered;
/// [`RecordedError::NotATurn`] when `answer` ends no turn.
pub async fn request_of_turn(store: &Store, answer: NodeId) -> Result<NodeId> {
    let thread = store.nonblocking().load_thread(answer).await?;
    request_in(&thread, answer)
}

/// The turns of a thread: (the message a turn answered, its final
/// answer), oldest first. A turn starts at a user message an assistant
/// message follows, and ends at the last assistant message before the
/// next user message.
pub(crate) fn turns_of(thread: &Thread) -> Vec<(NodeId, NodeId)> {
    let nodes = thread.nodes();
    let mut turns = Vec::new();
    let mut open: Option<(NodeId, NodeId)> = None;
    for (index, node) in nodes.iter().enumerate() {
        match node.message().role {
            Role::User => {
                turns.extend(open.take());
                if nodes
                    .get(index + 1)
                    .is_some_and(|next| next.message().role == Role::Assistant)
                {
                    open = Some((node.id(), node.id()));
                }
            }
            Role::Assistant => {
                if let Some((_, last)) = &mut open {
                    *last = node.id();
                }
            }
            Role::System | Role::Tool => {}
        }
    }
    turns.extend(open);
    turns
}

/// A turn's own comparators, as its row's detail keeps them.
fn turn_compare(detail: &Value) -> Vec<String> {
    detail["compare"]
        .as_array()
        .map(|specs| {
            specs
                .iter()
                .filter_map(|spec| spec.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// How many of a replay's `turns` are finished, by `totals`.
fn finished_of(turns: u64, totals: &ReplayTotals) -> u64 {
    turns.saturating_sub(totals.pending + totals.running)
}

/// A stored replay's plan.
pub fn plan_of(record: &ReplayRecord) -> Result<ReplayPlan> {
    let settings = &record.settings;
    let strings = |key: &str| -> Vec<String> {
        settings[key]
            .as_array()
            .map(|items| {
                items
                    .iter()
                    .filter_map(|item| item.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    Ok(ReplayPlan {
        model: record.model.clone(),
        models: strings("models"),
        change: serde_json::from_value(record.change.clone()).map_err(store_json)?,
        compare: strings("compare"),
        judge: settings["judge"].as_str().map(str::to_string),
        live_tools: strings("live_tools"),
        chain_limit: settings["chain_limit"]
            .as_u64()
            .map_or_else(default_chain_limit, |limit| limit as u32),
    })
}

fn store_json(error: serde_json::Error) -> RecordedError {
    RecordedError::Store(StoreError::Json(error))
}

async fn sleep(pause: Duration) {
    tokio::time::sleep(pause).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use skein_core::{Message, Part, ToolResult};

    #[test]
    fn a_thread_splits_into_turns_at_user_messages_and_tool_loops_stay_whole() {
        let call = ToolCall {
            id: "c1".into(),
            name: "weather".into(),
            arguments: "{\"city\": \"Paris\"}".into(),
        };
        let thread = Thread::from_messages([
            Message::system("s"),
            Message::user("q1"),
            Message::new(Role::Assistant, vec![Part::ToolCall(call.clone())]),
            Message::tool_results([ToolResult {
                call_id: "c1".into(),
                content: "sunny".into(),
                is_error: false,
            }]),
            Message::assistant("a1"),
            Message::user("q2"),
            Message::assistant("a2"),
            Message::user("unanswered"),
        ]);
        let nodes = thread.nodes();
        let turns = turns_of(&thread);
        assert_eq!(
            turns,
            vec![
                (nodes[1].id(), nodes[4].id()),
                (nodes[5].id(), nodes[6].id())
            ]
        );
        let upto = thread.at(nodes[4].id()).unwrap();
        assert_eq!(answer_steps(&upto, nodes[1].id()).len(), 2);
        let calls = recorded_calls(&upto, nodes[1].id());
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].content, "sunny");
        let answerable = Answerable {
            calls,
            live: HashSet::new(),
        };
        let respaced = ToolCall {
            arguments: "{ \"city\":\"Paris\" }".into(),
            ..call.clone()
        };
        assert!(answerable.answers(&respaced));
        let elsewhere = ToolCall {
            arguments: "{\"city\": \"Rome\"}".into(),
            ..call
        };
        assert!(!answerable.answers(&elsewhere));
    }

    #[test]
    fn a_change_replaces_only_what_it_names() {
        let thread = Thread::from_messages([Message::system("old"), Message::user("q")]);
        let mut run = RunRecord::new("m", "p");
        run.tools = vec![
            ToolSpec::new("a", "A", json!({"type": "object"})),
            ToolSpec::new("b", "B", json!({"type": "object"})),
        ];
        run.options.temperature = Some(0.5);
        run.options.seed = Some(3);
        let change = Change {
            system: Some("new".into()),
            remove_tools: vec!["a".into()],
            add_tools: vec![ToolSpec::new("b", "B2", json!({"type": "object"}))],
            options: GenerationOptions {
                temperature: Some(0.0),
                ..GenerationOptions::default()
            },
            ..Change::default()
        };
        let (layout, tools, options) = change.apply(&thread, &run, None);
        assert_eq!(layout.entries[0].message, Message::system("new"));
        assert_eq!(layout.entries[1].message, Message::user("q"));
        assert_eq!(tools.len(), 1);
        assert_eq!(tools[0].description, "B2");
        assert_eq!((options.temperature, options.seed), (Some(0.0), Some(3)));
        let kept = Change::default().apply(&thread, &run, None);
        assert_eq!(kept.0, Layout::of(&thread, &run.annotations));
        assert_eq!(kept.1, run.tools);
    }
}
