/*!
Replays and labels from Python (`Store.replay`, `Store.label`,
`Store.unlabel`, `Store.labels`): the same `skein_recorded::replay` and
store labels the command line uses, so a replay started here is resumed by
`skein replay --resume` and reported alike. A replay's result is a plain
dict, as `skein replay --json` prints it (without the cost, which
`Store.usage` prices).
*/

use crate::errors::check;
use crate::runtime;
use pyo3::prelude::*;
use serde_json::{Value, json};
use skein::recorded::compare::Comparator;
use skein::recorded::embed::{Embedder, LexicalEmbedder, MiniLmEmbedder};
use skein::recorded::replay::{ReplayPlan, Replayer, Selection, request_of_turn};
use skein::store::{ReplayStatus, ReplayTurn};
use std::sync::Arc;

/// What to replay and how, as `Store.replay`'s keyword arguments give it.
pub struct ReplayArgs {
    pub model: String,
    pub conversations: Vec<String>,
    pub families: Vec<String>,
    pub turns: Vec<String>,
    pub labels: Vec<String>,
    pub search: Option<String>,
    pub since_ms: Option<i64>,
    pub until_ms: Option<i64>,
    pub clients: Vec<String>,
    pub system: Option<String>,
    pub temperature: Option<f64>,
    pub seed: Option<u64>,
    pub max_tokens: Option<u32>,
    pub remove_tools: Vec<String>,
    pub ignore: Vec<String>,
    pub compare: Vec<String>,
    pub embedder: String,
    pub concurrency: Option<usize>,
}

/// Run a replay to its end and report it.
pub fn replay(py: Python<'_>, store: &skein::Store, args: ReplayArgs) -> PyResult<Value> {
    let selection = check(py, py.detach(|| selection(store, &args)))?;
    let plan = plan(&args);
    check(py, plan.comparators())?;
    let model = crate::model::open(py, &args.model, Vec::new())?;
    let mut replayer = Replayer::new(store, model).embedder(embedder(&args.embedder)?);
    if let Some(n) = args.concurrency {
        replayer = replayer.concurrency(n);
    }
    for spec in &plan.compare {
        if let Ok(Comparator::Judge { model, .. }) = Comparator::parse(spec) {
            replayer = replayer.judge(crate::model::open(py, &model, Vec::new())?);
            break;
        }
    }
    let store = store.clone();
    let done = runtime::block_on_made(py, move || async move {
        let id = replayer.start(&selection, &plan).await?;
        let totals = replayer.run(&id, |_| {}).await?;
        let mut turns: Vec<ReplayTurn> = Vec::new();
        loop {
            let page = store
                .nonblocking()
                .replay_turns(&id, turns.last().map(|turn| turn.seq), 500)
                .await?;
            let more = page.len() == 500;
            turns.extend(page);
            if !more {
                break;
            }
        }
        Ok::<_, skein::recorded::RecordedError>((id, totals, turns))
    })?;
    let (id, totals, turns) = check(py, done)?;
    Ok(json!({
        "replay": id,
        "model": args.model,
        "totals": totals,
        "turns": turns.iter().map(turn_json).collect::<Vec<_>>(),
    }))
}

/// The turns the arguments select, ids resolved as the command line does.
fn selection(
    store: &skein::Store,
    args: &ReplayArgs,
) -> Result<Selection, skein::store::StoreError> {
    let mut selection = Selection::new();
    for id in &args.conversations {
        selection = selection.conversation(store.resolve_conversation(id)?);
    }
    for id in &args.families {
        selection = selection.family(store.resolve_conversation(id)?);
    }
    for node in &args.turns {
        selection = selection.turn(store.resolve_node(node)?);
    }
    for name in &args.labels {
        selection = selection.label(name.clone());
    }
    if let Some(text) = &args.search {
        selection = selection.search(text.clone());
    }
    selection = selection.between(args.since_ms, args.until_ms);
    for client in &args.clients {
        selection = selection.client(client.clone());
    }
    Ok(selection)
}

fn plan(args: &ReplayArgs) -> ReplayPlan {
    let mut plan = ReplayPlan::new(args.model.clone());
    plan.change.system = args.system.clone();
    plan.change.options.temperature = args.temperature;
    plan.change.options.seed = args.seed;
    plan.change.options.max_tokens = args.max_tokens;
    plan.change.remove_tools = args.remove_tools.clone();
    plan.change.remove_sources = args.ignore.clone();
    plan.compare = args.compare.clone();
    plan
}

fn embedder(name: &str) -> PyResult<Arc<dyn Embedder>> {
    match name {
        "lexical" => Ok(Arc::new(LexicalEmbedder::new(256))),
        "minilm" => Ok(Arc::new(MiniLmEmbedder::load(1).map_err(|error| {
            pyo3::exceptions::PyRuntimeError::new_err(format!(
                "{error}; fetch it with `skein models pull minilm`, or pass embedder=\"lexical\""
            ))
        })?)),
        other => Err(pyo3::exceptions::PyValueError::new_err(format!(
            "unknown embedder `{other}`: use \"lexical\" or \"minilm\""
        ))),
    }
}

/// One turn of the report: where it stands, the comparator that decided
/// and why, both answers, tokens and latency.
fn turn_json(turn: &ReplayTurn) -> Value {
    let result = match (turn.status, turn.decision.as_deref()) {
        (ReplayStatus::Done, Some(decision)) => decision,
        (status, _) => status.as_str(),
    };
    json!({
        "seq": turn.seq,
        "result": result,
        "conversation": turn.conversation,
        "turn_node": turn.turn_node,
        "answer_node": turn.answer_head,
        "comparator": turn.comparator,
        "why": turn.detail["why"],
        "original": turn.detail["original"],
        "answer": turn.detail["answer"],
        "original_usage": turn.detail["original_usage"],
        "usage": turn.detail["usage"],
        "runs": turn.runs,
    })
}

/// Put the label `name` on turns (each by its final answer's node);
/// how many did not carry it yet.
pub fn label(py: Python<'_>, store: &skein::Store, name: &str, turns: &[String]) -> PyResult<u64> {
    let nodes = check(
        py,
        py.detach(|| {
            turns
                .iter()
                .map(|node| store.resolve_node(node))
                .collect::<Result<Vec<_>, _>>()
        }),
    )?;
    let (store, name) = (store.clone(), name.to_string());
    let added = runtime::block_on(py, async move {
        for node in &nodes {
            request_of_turn(&store, *node).await?;
        }
        Ok::<_, skein::recorded::RecordedError>(store.nonblocking().add_label(&name, &nodes).await?)
    })?;
    check(py, added)
}

/// Take the label `name` off turns; how many carried it.
pub fn unlabel(
    py: Python<'_>,
    store: &skein::Store,
    name: &str,
    turns: &[String],
) -> PyResult<u64> {
    let removed = py.detach(|| {
        let nodes = turns
            .iter()
            .map(|node| store.resolve_node(node))
            .collect::<Result<Vec<_>, _>>()?;
        store.remove_label(name, &nodes)
    });
    check(py, removed)
}

/// Every label and how many turns carry it, or with `name`, that label's
/// turns (their final answers' node ids).
pub fn labels(py: Python<'_>, store: &skein::Store, name: Option<String>) -> PyResult<Value> {
    let listed = py.detach(|| -> Result<Value, skein::store::StoreError> {
        let Some(name) = name else {
            return Ok(json!(store.label_counts()?));
        };
        let mut nodes = Vec::new();
        let mut after = None;
        loop {
            let page = store.labelled(&name, after, 500)?;
            after = page.last().map(|label| label.node);
            nodes.extend(page.into_iter().map(|label| label.node.to_hex()));
            if after.is_none() {
                return Ok(json!(nodes));
            }
        }
    });
    check(py, listed)
}
