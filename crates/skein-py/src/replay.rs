/*!
Replays and labels from Python (`Store.replay`, `Store.label`,
`Store.unlabel`, `Store.labels`): the same `skein_recorded::replay` and
store labels the command line uses, so a replay started here is resumed by
`skein replay --resume` and reported alike. A replay's result is its
`ReplayReport` as a plain dict, as `skein replay --json` prints it (turns
in selection order rather than worst first), costs priced as
`Store.usage` prices.
*/

use crate::errors::check;
use crate::runtime;
use pyo3::prelude::*;
use serde_json::{Value, json};
use skein::NodeId;
use skein::core::price::PriceTable;
use skein::recorded::cases;
use skein::recorded::replay::{
    CaseTurn, PromptVersion, ReplayPlan, ReplayReport, Replayer, Selection, turns_of_replay,
};

/// What to replay and how, as `Store.replay`'s keyword arguments give it.
pub struct ReplayArgs {
    /// The model, or the candidates a replay compares.
    pub models: Vec<String>,
    pub conversations: Vec<String>,
    pub families: Vec<String>,
    pub turns: Vec<String>,
    pub labels: Vec<String>,
    pub search: Option<String>,
    pub since_ms: Option<i64>,
    pub until_ms: Option<i64>,
    pub clients: Vec<String>,
    /// A cases file (`skein label export`), stored first, its cases
    /// selected (each judged by its own comparators unless `compare` names
    /// others).
    pub cases: Option<std::path::PathBuf>,
    pub system: Option<String>,
    pub temperature: Option<f64>,
    pub seed: Option<u64>,
    pub max_tokens: Option<u32>,
    pub remove_tools: Vec<String>,
    pub ignore: Vec<String>,
    pub replace_sources: std::collections::BTreeMap<String, String>,
    pub prompt_version: Option<String>,
    pub compare: Vec<String>,
    /// `lexical` or `minilm`; with none, the default every surface takes.
    pub embedder: Option<String>,
    pub concurrency: Option<usize>,
}

/// Run a replay to its end and report it.
pub fn replay(
    py: Python<'_>,
    store: &skein::Store,
    args: ReplayArgs,
    prices: &PriceTable,
) -> PyResult<Value> {
    // The plan is checked before a cases file is stored.
    let plan = check(py, plan(&args))?;
    check(py, plan.comparators())?;
    let mut selection = check(py, py.detach(|| selection(store, &args)))?;
    if let Some(file) = &args.cases {
        for case in import_cases(py, store, file)? {
            selection = selection.case(case);
        }
    }
    let model = crate::model::open(py, &plan.model, Vec::new())?;
    let embedder = crate::recorded::embedder(py, args.embedder.as_deref(), Some(store))?;
    let mut replayer = Replayer::new(store, model).embedder(embedder);
    for name in plan
        .candidates()
        .into_iter()
        .filter(|name| *name != plan.model)
    {
        let candidate = crate::model::open(py, &name, Vec::new())?;
        replayer = replayer.candidate(name, candidate);
    }
    if let Some(n) = args.concurrency {
        replayer = replayer.concurrency(n);
    }
    if let Some(judge) = check(py, plan.judge_model())? {
        replayer = replayer.judge(crate::model::open(py, &judge, Vec::new())?);
    }
    let reader = store.clone();
    let done = runtime::block_on_made(py, move || async move {
        let id = replayer.start(&selection, &plan).await?;
        replayer.run(&id, |_| {}).await?;
        Ok::<_, skein::recorded::RecordedError>(id)
    })?;
    let id = check(py, done)?;
    let report = py.detach(|| ReplayReport::read(&reader, &id, prices));
    let report = check(py, report)?;
    serde_json::to_value(&report)
        .map_err(|error| pyo3::exceptions::PyRuntimeError::new_err(error.to_string()))
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

/// Store the cases of `file` (as `skein replay --cases` does, within
/// the import's line limit) and give them as a selection holds them.
fn import_cases(
    py: Python<'_>,
    store: &skein::Store,
    file: &std::path::Path,
) -> PyResult<Vec<CaseTurn>> {
    let opened = std::fs::File::open(file).map_err(|error| {
        pyo3::exceptions::PyOSError::new_err(format!(
            "cannot read the cases file {}: {error}",
            file.display()
        ))
    })?;
    let store = store.clone();
    let imported = runtime::block_on(py, async move {
        let input = std::io::BufReader::new(opened);
        cases::import(&store, input, skein::store::DEFAULT_IMPORT_LINE_LIMIT).await
    })?;
    check(py, imported)
}

fn plan(args: &ReplayArgs) -> skein::recorded::Result<ReplayPlan> {
    let mut plan = ReplayPlan::comparing(args.models.clone())?;
    plan.change.system = args.system.clone();
    plan.change.options.temperature = args.temperature;
    plan.change.options.seed = args.seed;
    plan.change.options.max_tokens = args.max_tokens;
    plan.change.remove_tools = args.remove_tools.clone();
    plan.change.remove_sources = args.ignore.clone();
    plan.change.replace_sources = args.replace_sources.clone();
    plan.change.prompt_version = args
        .prompt_version
        .as_deref()
        .map(PromptVersion::parse)
        .transpose()?;
    plan.compare = args.compare.clone();
    Ok(plan)
}

/// Turns as `Store.label` names them: nodes, and a replay's turns (those
/// of some results).
pub struct Turns {
    pub nodes: Vec<String>,
    pub replay: Option<String>,
    pub results: Vec<String>,
}

/// The results a replayed turn may have.
const RESULTS: [&str; 6] = [
    "changed", "held", "diverged", "failed", "pending", "running",
];

impl Turns {
    /// Every node named, resolved, each once.
    fn resolve(&self, py: Python<'_>, store: &skein::Store) -> PyResult<Vec<NodeId>> {
        if let Some(bad) = self.results.iter().find(|r| !RESULTS.contains(&r.as_str())) {
            return Err(pyo3::exceptions::PyValueError::new_err(format!(
                "`{bad}` is no result: use one of {}",
                RESULTS.join(", ")
            )));
        }
        if self.replay.is_none() && !self.results.is_empty() {
            return Err(pyo3::exceptions::PyTypeError::new_err(
                "results= chooses among a replay's turns: give replay= too",
            ));
        }
        let found = py.detach(|| -> Result<Vec<NodeId>, skein::recorded::RecordedError> {
            let mut nodes = self
                .nodes
                .iter()
                .map(|node| store.resolve_node(node))
                .collect::<Result<Vec<_>, _>>()?;
            if let Some(given) = &self.replay {
                let id = store.resolve_replay(given)?;
                nodes.extend(turns_of_replay(store, &id, &self.results)?);
            }
            let mut seen = std::collections::HashSet::new();
            nodes.retain(|node| seen.insert(*node));
            Ok(nodes)
        });
        check(py, found)
    }
}

/// Put the label `name` on turns (each by its final answer's node);
/// how many did not carry it yet.
pub fn label(py: Python<'_>, store: &skein::Store, name: &str, turns: &Turns) -> PyResult<u64> {
    let nodes = turns.resolve(py, store)?;
    let (store, name) = (store.clone(), name.to_string());
    let added = runtime::block_on(py, async move { cases::label(&store, &name, &nodes).await })?;
    check(py, added)
}

/// Take the label `name` off turns; how many carried it.
pub fn unlabel(py: Python<'_>, store: &skein::Store, name: &str, turns: &Turns) -> PyResult<u64> {
    let nodes = turns.resolve(py, store)?;
    let (store, name) = (store.clone(), name.to_string());
    let removed = runtime::block_on(
        py,
        async move { cases::unlabel(&store, &name, &nodes).await },
    )?;
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
