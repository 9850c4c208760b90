/*!
A replay's report, one type for every surface that shows one (`skein
replay`, Python's `Store.replay`, the web workbench's replay page) and its
usage for `skein usage --replay`: the record, where its turns stand, and
per turn both answers, the comparator that decided and why, tokens,
latency and what the original and the replay cost.

Costs are priced when the report is read, at the prices the caller gives
(a price change re-prices history), from the same usage accounting as
`skein usage` ([`Store::usage`] over the turns' runs, each run counted
once however many turns reach it). A side whose runs did not report their
usage, or whose model has no price, is a lower bound and says so
(`complete: false`), never a silent zero. A judge's calls are never
counted in a turn's cost: they are not among its runs, and the usage of a
replay names them apart.
*/

use super::overview::{Names, Originals, describe_change, question, selection_text};
use crate::error::Result;
use serde::{Deserialize, Serialize};
use skein_core::price::{CostSummary, PriceTable};
use skein_core::usage::Totals;
use skein_core::{ConversationId, NodeId, ReplayId, RunId, now_ms};
use skein_store::{ReplayState, ReplayStatus, ReplayTotals, ReplayTurn, Store, UsageScope};
use std::collections::BTreeSet;

/// Rows read from the store at a time.
const PAGE: usize = 500;

/// A replay as people read it: totals, the cost on each side, and its
/// turns (in selection order as read; [`ReplayReport::worst_first`] sorts
/// them as the command line prints them).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ReplayReport {
    pub replay: ReplayId,
    /// The model replayed on (the first candidate, when it compares
    /// several).
    pub model: String,
    /// Every candidate model, in order (`model` alone, or the models a
    /// replay compares: each turn replayed once on each).
    pub models: Vec<String>,
    pub created_ms: i64,
    /// Running, stopped or finished.
    pub state: ReplayState,
    /// The models the original turns ran on (their runs' profiles, else
    /// models).
    pub original_models: Vec<String>,
    /// What changed, in words, the model change first
    /// (`smollm2 → openai:gpt-4o-mini`, `system prompt replaced`, `tool
    /// weather removed`).
    pub changes: Vec<String>,
    /// Which turns, in words, conversations by name.
    pub selection_text: String,
    /// What was selected, what changed and how turns are judged, as the
    /// replay's record keeps them.
    pub selection: serde_json::Value,
    pub change: serde_json::Value,
    pub settings: serde_json::Value,
    /// How many turn rows it has: the turns selected, once per
    /// candidate model.
    pub selected: u64,
    pub totals: ReplayTotals,
    pub cost: CostDelta,
    /// Per candidate model, when the replay compares several (empty
    /// otherwise): its rows' totals, tokens, latency and cost.
    pub model_totals: Vec<ModelTotals>,
    /// A row per turn and candidate model.
    pub turns: Vec<TurnReport>,
}

/// One candidate model's part of a replay that compares several.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ModelTotals {
    pub model: String,
    /// Its rows: held, changed, diverged, failed (and not yet replayed).
    pub totals: ReplayTotals,
    /// Tokens, latency and calls of the original turns its rows re-sent,
    /// and of its replayed turns, added up over its replayed rows.
    pub original_usage: TurnUsage,
    pub usage: TurnUsage,
    pub cost: CostDelta,
}

/// One turn of a report.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TurnReport {
    /// Its row's place in the replay, from 0 (a turn's rows side by side
    /// when it compares models).
    pub seq: u64,
    /// The candidate model it was replayed on, when the replay compares
    /// several.
    pub model: Option<String>,
    /// `changed`, `held`, `diverged`, `failed`, or where it stands
    /// (`pending`, `running`).
    pub result: String,
    pub conversation: Option<ConversationId>,
    /// The conversation's name, else its title.
    pub conversation_name: Option<String>,
    /// The question re-sent: the last user message of the turn's request,
    /// whole (`[erased]` once erased).
    pub question: Option<String>,
    /// The original turn's final answer.
    pub turn_node: NodeId,
    /// The replayed answer (diverged: where the turn stopped).
    pub answer_node: Option<NodeId>,
    /// The comparator that decided.
    pub comparator: Option<String>,
    pub why: Option<String>,
    /// The original answer's text, read from its node (`[erased]` once
    /// erased: the row keeps only the node).
    pub original: Option<String>,
    /// The replayed answer's text, read from its node likewise.
    pub answer: Option<String>,
    pub original_usage: Option<TurnUsage>,
    pub usage: Option<TurnUsage>,
    /// What the original turn's runs cost; `None` before the turn is
    /// replayed (its original's runs are found then).
    pub original_cost: Option<CostSummary>,
    /// What the replayed turn's runs cost.
    pub cost: Option<CostSummary>,
    /// The replayed turn's runs.
    pub runs: Vec<RunId>,
}

/// Tokens and time of one side of a turn, as its row records them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TurnUsage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub latency_ms: i64,
    /// Model calls.
    pub calls: u64,
}

impl TurnUsage {
    pub fn tokens(&self) -> u64 {
        self.input_tokens + self.output_tokens
    }

    fn add(&mut self, other: &TurnUsage) {
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
        self.latency_ms += other.latency_ms;
        self.calls += other.calls;
    }
}

/// The original's and the replay's cost, and the difference.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CostDelta {
    pub original: CostSummary,
    pub replay: CostSummary,
    /// Replay minus original, in US dollars.
    pub delta: f64,
    /// Both sides are whole, not lower bounds.
    pub complete: bool,
}

impl CostDelta {
    fn of(original: CostSummary, replay: CostSummary) -> CostDelta {
        CostDelta {
            delta: replay.dollars - original.dollars,
            complete: original.complete && replay.complete,
            original,
            replay,
        }
    }
}

/// What a replay's turns used, each side counted as `skein usage` counts
/// (every run once): the original turns' runs, the replayed turns' runs
/// (failed calls included), and the judge's calls, which belong to
/// neither. Only turns already replayed count on either side, so the two
/// compare like for like.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ReplayUsage {
    pub original: Totals,
    pub replay: Totals,
    pub judge: Totals,
    /// Turns replayed so far (counted), of the turns selected.
    pub turns: u64,
    pub selected: u64,
    /// A replay comparing models: each candidate's own (its rows alone, in
    /// the order the rows name them); empty for a replay on one model.
    pub models: Vec<ModelUsage>,
}

/// One candidate model's part of a replay's usage.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ModelUsage {
    pub model: String,
    pub usage: ReplayUsage,
}

impl ReplayUsage {
    /// The usage of replay `id` (a blocking read: one query per side, and
    /// per side of each candidate model).
    pub fn read(store: &Store, id: &ReplayId) -> Result<ReplayUsage> {
        let record = store.replay(id)?;
        let rows = all_turns(store, id)?;
        let mut runs = SideRuns::default();
        let mut turns = 0;
        // Per candidate: its runs, turns replayed and rows.
        let mut per_model: Vec<(String, SideRuns, u64, u64)> = Vec::new();
        for row in &rows {
            let replayed = runs.add(row);
            turns += u64::from(replayed);
            let Some(model) = &row.model else { continue };
            let at = match per_model.iter().position(|(known, ..)| known == model) {
                Some(at) => at,
                None => {
                    per_model.push((model.clone(), SideRuns::default(), 0, 0));
                    per_model.len() - 1
                }
            };
            let (_, model_runs, model_turns, selected) = &mut per_model[at];
            *model_turns += u64::from(model_runs.add(row));
            *selected += 1;
        }
        let sides = |runs: SideRuns, turns, selected| -> Result<ReplayUsage> {
            Ok(ReplayUsage {
                original: usage(store, runs.original)?,
                replay: usage(store, runs.replay)?,
                judge: usage(store, runs.judge)?,
                turns,
                selected,
                models: Vec::new(),
            })
        };
        let models = match per_model.len() {
            0 | 1 => Vec::new(),
            _ => per_model
                .into_iter()
                .map(|(model, runs, turns, selected)| {
                    Ok(ModelUsage {
                        model,
                        usage: sides(runs, turns, selected)?,
                    })
                })
                .collect::<Result<_>>()?,
        };
        Ok(ReplayUsage {
            models,
            ..sides(runs, turns, record.turns)?
        })
    }
}

/// The runs of each side, gathered over turns.
#[derive(Default)]
struct SideRuns {
    original: BTreeSet<RunId>,
    replay: BTreeSet<RunId>,
    judge: BTreeSet<RunId>,
}

impl SideRuns {
    /// Add a turn's runs; whether it was replayed (its original's runs are
    /// known).
    fn add(&mut self, row: &ReplayTurn) -> bool {
        let Some(original) = original_runs(row) else {
            return false;
        };
        self.original.extend(original);
        self.replay.extend(row.runs.iter().cloned());
        if let Some(judge) = judge_run(row) {
            self.judge.insert(judge);
        }
        true
    }
}

impl ReplayReport {
    /// The report of replay `id`, priced at `prices` (a blocking read: a
    /// page of rows at a time, and the usage of each turn).
    pub fn read(store: &Store, id: &ReplayId, prices: &PriceTable) -> Result<ReplayReport> {
        let record = store.replay(id)?;
        let rows = all_turns(store, id)?;
        let originals = Originals::of_record(store, &record)?;
        let mut names = Names::default();
        let mut runs = SideRuns::default();
        let mut turns = Vec::with_capacity(rows.len());
        for row in &rows {
            let costs = match original_runs(row) {
                Some(original) => Some((
                    price(store, prices, original)?,
                    price(store, prices, row.runs.to_vec())?,
                )),
                None => None,
            };
            runs.add(row);
            let texts = (
                node_text(store, Some(row.turn_node))?,
                node_text(store, row.answer_head)?,
            );
            let mut turn = TurnReport::of(row, costs, texts);
            turn.question = question(store, row.request_node)?;
            if let Some(conversation) = &row.conversation {
                turn.conversation_name = names.of(store, conversation)?;
            }
            turns.push(turn);
        }
        // Counted from the rows shown, never read apart: a turn finishing
        // between two reads would make the totals say finished while a
        // row still says running.
        let totals = totals_of(&rows);
        let original = CostSummary::from(&prices.cost(&usage(store, runs.original)?));
        let replay = CostSummary::from(&prices.cost(&usage(store, runs.replay)?));
        let models = super::overview::candidates(&record);
        let model_totals = match models.len() {
            1 => Vec::new(),
            _ => models
                .iter()
                .map(|model| ModelTotals::read(store, prices, model, &rows, &turns))
                .collect::<Result<_>>()?,
        };
        Ok(ReplayReport {
            models,
            model_totals,
            state: totals.state(now_ms()),
            changes: describe_change(&record, &originals),
            selection_text: selection_text(store, &record.selection, &mut names)?,
            original_models: originals.models,
            replay: record.id,
            model: record.model,
            created_ms: record.created_ms,
            selection: record.selection,
            change: record.change,
            settings: record.settings,
            selected: record.turns,
            totals,
            cost: CostDelta::of(original, replay),
            turns,
        })
    }

    /// The turns worst first: failed, diverged, changed, not yet replayed,
    /// held; in selection order within each. A replay that compares models
    /// keeps each turn's rows together, the turn ranked by its worst row.
    pub fn worst_first(mut self) -> ReplayReport {
        let mut worst: std::collections::HashMap<NodeId, (u8, u64)> =
            std::collections::HashMap::new();
        for turn in &self.turns {
            let entry = worst.entry(turn.turn_node).or_insert((u8::MAX, u64::MAX));
            *entry = (entry.0.min(turn.rank()), entry.1.min(turn.seq));
        }
        self.turns
            .sort_by_key(|turn| (worst[&turn.turn_node], turn.seq));
        self
    }

    /// The turns selected (each once, however many models it compares).
    pub fn turns_selected(&self) -> u64 {
        self.selected / self.models.len().max(1) as u64
    }

    /// `A → B · system prompt replaced`: every change, joined.
    pub fn change_line(&self) -> String {
        self.changes.join(" · ")
    }

    /// Some turn did not hold (a CI job fails on it).
    pub fn regressed(&self) -> bool {
        self.totals.changed + self.totals.diverged + self.totals.failed > 0
    }
}

impl TurnReport {
    fn of(
        row: &ReplayTurn,
        costs: Option<(CostSummary, CostSummary)>,
        (original, answer): (Option<String>, Option<String>),
    ) -> TurnReport {
        let text = |key: &str| row.detail[key].as_str().map(str::to_string);
        let usage = |key: &str| serde_json::from_value(row.detail[key].clone()).ok();
        let (original_cost, cost) = costs.unzip();
        TurnReport {
            seq: row.seq,
            model: row.model.clone(),
            result: result_of(row).to_string(),
            conversation: row.conversation.clone(),
            conversation_name: None,
            question: None,
            turn_node: row.turn_node,
            answer_node: row.answer_head,
            comparator: row.comparator.clone(),
            why: text("why"),
            original,
            answer,
            original_usage: usage("original_usage"),
            usage: usage("usage"),
            original_cost,
            cost,
            runs: row.runs.clone(),
        }
    }

    /// How bad the turn is: failed, diverged, changed, unfinished, held.
    pub fn rank(&self) -> u8 {
        match self.result.as_str() {
            "failed" => 0,
            "diverged" => 1,
            "changed" => 2,
            "pending" | "running" => 3,
            _ => 4,
        }
    }
}

impl ModelTotals {
    /// `model`'s part of `rows` (with their `reports`, in the same order),
    /// priced at `prices`.
    fn read(
        store: &Store,
        prices: &PriceTable,
        model: &str,
        rows: &[ReplayTurn],
        reports: &[TurnReport],
    ) -> Result<ModelTotals> {
        let (mut original_usage, mut usage) = (TurnUsage::default(), TurnUsage::default());
        let mut runs = SideRuns::default();
        let mine = |row: &ReplayTurn| row.model.as_deref() == Some(model);
        for (row, report) in rows.iter().zip(reports) {
            if mine(row) && runs.add(row) {
                original_usage.add(&report.original_usage.unwrap_or_default());
                usage.add(&report.usage.unwrap_or_default());
            }
        }
        let original = CostSummary::from(&prices.cost(&self::usage(store, runs.original)?));
        let replay = CostSummary::from(&prices.cost(&self::usage(store, runs.replay)?));
        Ok(ModelTotals {
            model: model.to_string(),
            totals: totals_of(rows.iter().filter(|row| mine(row))),
            original_usage,
            usage,
            cost: CostDelta::of(original, replay),
        })
    }
}

/// The original turns of replay `id` (their final answers' nodes, as
/// labels name turns) whose result is one of `results` (every turn when
/// empty), in selection order: a replay's regressions kept as cases.
pub fn turns_of_replay(store: &Store, id: &ReplayId, results: &[String]) -> Result<Vec<NodeId>> {
    // A replay that compares models has a row per turn and model: each
    // turn once.
    let mut seen = std::collections::HashSet::new();
    Ok(all_turns(store, id)?
        .iter()
        .filter(|row| results.is_empty() || results.iter().any(|r| r == result_of(row)))
        .map(|row| row.turn_node)
        .filter(|node| seen.insert(*node))
        .collect())
}

/// Where `rows` stand, counted.
fn totals_of<'a>(rows: impl IntoIterator<Item = &'a ReplayTurn>) -> ReplayTotals {
    let mut totals = ReplayTotals::default();
    for row in rows {
        totals.add(row.status, row.decision.as_deref(), 1, row.lease_until_ms);
    }
    totals
}

/// `changed`, `held`, `diverged`, `failed` (or where the turn stands).
pub fn result_of(turn: &ReplayTurn) -> &str {
    match (turn.status, turn.decision.as_deref()) {
        (ReplayStatus::Done, Some(decision)) => decision,
        (status, _) => status.as_str(),
    }
}

/// The text of the message at `node` (replay rows keep nodes, not texts,
/// so an erased message shows as erased here too); `None` without a node
/// or once the node is gone.
fn node_text(store: &Store, node: Option<NodeId>) -> Result<Option<String>> {
    let Some(node) = node else { return Ok(None) };
    match store.node(node) {
        Ok(stored) => {
            let erased = stored
                .message
                .parts
                .iter()
                .any(|part| matches!(part, skein_core::Part::Erased(_)));
            let text = stored.message.joined_text();
            Ok(Some(if erased && text.is_empty() {
                "[erased]".to_string()
            } else {
                text
            }))
        }
        Err(skein_store::StoreError::NodeNotFound(_)) => Ok(None),
        Err(error) => Err(error.into()),
    }
}

/// Every row of replay `id`, in selection order.
fn all_turns(store: &Store, id: &ReplayId) -> Result<Vec<ReplayTurn>> {
    let mut turns: Vec<ReplayTurn> = Vec::new();
    loop {
        let page = store.replay_turns(id, turns.last().map(|turn| turn.seq), PAGE)?;
        let done = page.len() < PAGE;
        turns.extend(page);
        if done {
            return Ok(turns);
        }
    }
}

/// The runs of the original turn, recorded with the row when it was
/// replayed (`None` before, or for a turn replayed before rows kept them).
fn original_runs(row: &ReplayTurn) -> Option<Vec<RunId>> {
    serde_json::from_value(row.detail.get("original_runs")?.clone()).ok()
}

fn judge_run(row: &ReplayTurn) -> Option<RunId> {
    serde_json::from_value(row.detail.get("judge_run")?.clone()).ok()
}

fn usage(store: &Store, runs: impl IntoIterator<Item = RunId>) -> Result<Totals> {
    Ok(store.usage(&UsageScope::Runs(runs.into_iter().collect()))?)
}

fn price(store: &Store, prices: &PriceTable, runs: Vec<RunId>) -> Result<CostSummary> {
    Ok(CostSummary::from(&prices.cost(&usage(store, runs)?)))
}
