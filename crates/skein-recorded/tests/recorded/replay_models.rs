//! A replay that compares candidate models: a hundred recorded turns
//! replayed on three scripted models in one replay, each turn once per
//! model (a row per turn and model), one report with each model's totals,
//! and a worker killed part way (its future dropped while calls of one
//! model hang, as a killed process leaves its rows) resumed by another to
//! the end, nothing recorded twice.

use futures_util::StreamExt as _;
use schemars::JsonSchema;
use serde::Deserialize;
use skein_conversation::{Conversation, Model};
use skein_core::price::PriceTable;
use skein_core::{BoxStream, ModelRequest, NodeId, Provider, ProviderError, Relation, StreamEvent};
use skein_engine::{BackendDef, BackendKind, Catalog, Engine, Profile, tool_fn};
use skein_providers::Scripted;
use skein_recorded::RecordedError;
use skein_recorded::replay::{ReplayPlan, ReplayReport, Replayer, Selection};
use skein_store::Store;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;
use tokio::sync::Notify;

const TURNS: usize = 100;

/// Every original turn says the same.
const ORIGINAL: &str = r#"
[[rules]]
reply = "Paris is lovely"
"#;

/// Says what the original said: every turn holds.
const SAME: &str = ORIGINAL;

/// Says otherwise of the weather: those turns change.
const OTHER: &str = r#"
[[rules]]
last_user_contains = "weather"
reply = "Rome is grey"

[[rules]]
reply = "Paris is lovely"
"#;

/// Asks a tool the recording never called for flights: those turns
/// diverge.
const TOOLY: &str = r#"
[[rules]]
last_user_contains = "flight"
last_role = "user"
tool_calls = [{ name = "lookup", arguments = '{"q": "flights"}' }]

[[rules]]
reply = "Paris is lovely"
"#;

#[derive(Deserialize, JsonSchema)]
struct Query {
    q: String,
}

/// `SAME`, whose calls after its first few never answer while it is shut
/// (the calls a killed worker had in flight); the first such call wakes
/// `hung`.
struct Gate {
    inner: Scripted,
    calls: AtomicUsize,
    shut: AtomicBool,
    hung: Notify,
}

/// Calls the gate answers before it hangs.
const GATE_OPEN_FOR: usize = 10;

impl Provider for Gate {
    fn name(&self) -> &str {
        "gate"
    }

    fn stream(
        &self,
        request: ModelRequest,
    ) -> BoxStream<'static, Result<StreamEvent, ProviderError>> {
        let call = self.calls.fetch_add(1, Ordering::SeqCst);
        if call < GATE_OPEN_FOR || !self.shut.load(Ordering::SeqCst) {
            return self.inner.stream(request);
        }
        self.hung.notify_one();
        futures_util::stream::pending().boxed()
    }
}

/// The original model and the three candidates (`same` behind a gate),
/// each on a backend of capacity 2.
struct Bench {
    engine: Engine,
    gate: Arc<Gate>,
    store: Store,
    _dir: tempfile::TempDir,
}

const CANDIDATES: [&str; 3] = ["same", "other", "tooly"];

impl Bench {
    fn new() -> Bench {
        let gate = Arc::new(Gate {
            inner: Scripted::from_toml_str(SAME).unwrap(),
            calls: AtomicUsize::new(0),
            shut: AtomicBool::new(true),
            hung: Notify::new(),
        });
        let mut catalog = Catalog::new();
        let providers: Vec<(&str, Arc<dyn Provider>)> = vec![
            ("orig", scripted(ORIGINAL)),
            ("same", gate.clone()),
            ("other", scripted(OTHER)),
            ("tooly", scripted(TOOLY)),
        ];
        for (name, _) in &providers {
            catalog = catalog
                .backend(BackendDef::new(*name, BackendKind::Echo).capacity(2))
                .profile(Profile::new(*name, *name, format!("{name}-model")));
        }
        let engine = providers
            .into_iter()
            .fold(Engine::builder(catalog), |builder, (name, provider)| {
                builder.provider(name, provider)
            })
            .build()
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path().join("db.sqlite")).unwrap();
        Bench {
            engine,
            gate,
            store,
            _dir: dir,
        }
    }

    fn model(&self, profile: &str) -> Model {
        Model::from_profile(&self.engine, profile).unwrap()
    }

    /// A hundred turns on `orig`, the `lookup` tool offered (never
    /// called): a quarter ask about the weather, a quarter about flights.
    async fn record(&self) -> skein_core::ConversationId {
        let lookup = tool_fn("lookup", "Look something up", |query: Query| async move {
            Ok::<_, std::convert::Infallible>(format!("found: {}", query.q))
        });
        let conversation = Conversation::builder(self.model("orig"))
            .store(&self.store)
            .tool(lookup)
            .build();
        for i in 0..TURNS {
            let text = match i % 4 {
                0 => format!("How is the weather, {i}?"),
                1 => format!("Any flight, {i}?"),
                _ => format!("Hello {i}"),
            };
            conversation.chain(text).send().await.unwrap();
        }
        conversation.id().clone()
    }

    /// A worker with every candidate.
    fn replayer(&self) -> Replayer {
        Replayer::new(&self.store, self.model("same"))
            .candidate("other", self.model("other"))
            .candidate("tooly", self.model("tooly"))
            .lease(Duration::from_secs(1))
    }
}

fn scripted(rules: &str) -> Arc<dyn Provider> {
    Arc::new(Scripted::from_toml_str(rules).unwrap())
}

fn plan() -> ReplayPlan {
    let mut plan = ReplayPlan::comparing(CANDIDATES.map(String::from).to_vec()).unwrap();
    plan.compare = vec!["exact".into()];
    plan
}

#[tokio::test(flavor = "multi_thread")]
async fn three_models_replay_each_turn_once_in_one_report_resumed_after_a_kill() {
    let bench = Bench::new();
    let conversation = bench.record().await;
    let selection = Selection::new().conversation(conversation);
    let id = bench.replayer().start(&selection, &plan()).await.unwrap();
    assert_eq!(bench.store.replay(&id).unwrap().turns, 3 * TURNS as u64);

    // A worker killed part way: its future dropped once a call of `same`
    // hangs, its claimed turns left running under a lease it no longer
    // renews, the hung one among them.
    let first = bench.replayer();
    let killed_worker = first.worker().to_string();
    tokio::select! {
        done = first.run(&id, |_| {}) => {
            panic!("the first worker finished before it was killed: {done:?}")
        }
        () = bench.gate.hung.notified() => {}
    }
    drop(first);
    let totals = bench.store.replay_totals(&id).unwrap();
    assert!(!totals.finished(), "the kill left turns to do: {totals:?}");
    assert!(
        totals.running > 0,
        "the killed worker held turns: {totals:?}"
    );

    // Another worker goes on (taking over the killed worker's turns once
    // their leases pass) to the end.
    bench.gate.shut.store(false, Ordering::SeqCst);
    let totals = bench.replayer().run(&id, |_| {}).await.unwrap();
    assert!(totals.finished());

    // A row per turn and model, each finished once.
    let rows = bench.store.replay_turns(&id, None, 1000).unwrap();
    assert_eq!(rows.len(), 3 * TURNS);
    let taken_over = rows
        .iter()
        .filter(|row| row.detail["reclaimed_from"] == killed_worker.as_str())
        .count();
    assert!(taken_over > 0, "the killed worker's turns were taken over");
    let mut per_turn: BTreeMap<NodeId, Vec<String>> = BTreeMap::new();
    for row in &rows {
        assert!(row.status.is_final(), "{row:?}");
        per_turn
            .entry(row.turn_node)
            .or_default()
            .push(row.model.clone().unwrap());
    }
    assert_eq!(per_turn.len(), TURNS);
    for models in per_turn.values() {
        assert_eq!(models, &CANDIDATES.map(String::from).to_vec());
    }
    // The runs recorded with the replay are exactly its rows' runs: no
    // turn was recorded twice, the killed worker's in-flight turns not at
    // all.
    let recorded = bench
        .store
        .recent_runs(10_000)
        .unwrap()
        .into_iter()
        .filter(|run| run.relations.contains(&Relation::Replay(id.clone())))
        .count();
    assert_eq!(
        recorded,
        rows.iter().map(|row| row.runs.len()).sum::<usize>()
    );
    assert_eq!(recorded, 3 * TURNS, "one model call per turn and model");

    // One report: each model's totals.
    let report = ReplayReport::read(&bench.store, &id, &PriceTable::default()).unwrap();
    assert_eq!(report.models, CANDIDATES.map(String::from).to_vec());
    assert_eq!(report.turns.len(), 3 * TURNS);
    assert_eq!(report.turns_selected(), TURNS as u64);
    let by_model: HashMap<&str, _> = report
        .model_totals
        .iter()
        .map(|model| (model.model.as_str(), model))
        .collect();
    let counts = |name: &str| {
        let totals = &by_model[name].totals;
        (totals.held, totals.changed, totals.diverged, totals.failed)
    };
    assert_eq!(counts("same"), (100, 0, 0, 0));
    assert_eq!(counts("other"), (75, 25, 0, 0));
    assert_eq!(counts("tooly"), (75, 0, 25, 0));
    for name in CANDIDATES {
        let model = by_model[name];
        assert_eq!(model.usage.calls, TURNS as u64, "{name}");
        assert_eq!(model.original_usage.calls, TURNS as u64, "{name}");
    }
    assert_eq!(
        (
            report.totals.held,
            report.totals.changed,
            report.totals.diverged
        ),
        (250, 25, 25)
    );
    // Worst first, each turn's rows together: the diverged turns (a
    // flight) first, then the changed ones (the weather), then held.
    let worst = report.worst_first();
    assert_eq!(
        worst.turns[0].result, "held",
        "same's row of a diverged turn"
    );
    assert_eq!(worst.turns[2].result, "diverged");
    assert_eq!(worst.turns[2].model.as_deref(), Some("tooly"));
    for rows in worst.turns.chunks(3) {
        assert!(rows.iter().all(|row| row.turn_node == rows[0].turn_node));
    }
    let results: Vec<&str> = worst
        .turns
        .chunks(3)
        .map(|rows| {
            rows.iter()
                .map(|row| row.result.as_str())
                .min_by_key(|result| {
                    ["failed", "diverged", "changed"]
                        .iter()
                        .position(|r| r == result)
                        .unwrap_or(9)
                })
                .unwrap()
        })
        .collect();
    let mut sorted = results.clone();
    sorted.sort_by_key(|result| {
        ["failed", "diverged", "changed"]
            .iter()
            .position(|r| r == result)
            .unwrap_or(9)
    });
    assert_eq!(results, sorted, "turns ranked by their worst model");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_comparison_names_each_model_once_and_a_worker_needs_every_candidate() {
    assert!(matches!(
        ReplayPlan::comparing(vec!["a".into(), "b".into(), "a".into()]),
        Err(RecordedError::DuplicateModel(model)) if model == "a"
    ));
    assert!(matches!(
        ReplayPlan::comparing(Vec::new()),
        Err(RecordedError::NoModel)
    ));
    let bench = Bench::new();
    let conversation = bench.record().await;
    let selection = Selection::new().conversation(conversation);
    // A worker without `tooly` refuses before anything is stored.
    let partial =
        Replayer::new(&bench.store, bench.model("same")).candidate("other", bench.model("other"));
    assert!(matches!(
        partial.start(&selection, &plan()).await,
        Err(RecordedError::UnknownCandidate { model, .. }) if model == "tooly"
    ));
    assert!(bench.store.all_replays().unwrap().is_empty());
}
