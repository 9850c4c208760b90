//! Replays of recorded turns on another scripted model: tool calls
//! answered from the recording (no tool runs unless named live), the
//! diverged turn named, changed and held turns told apart by the default
//! comparator and by a judge (a judge whose call fails failing its turn
//! alone), resuming after a dead worker, and the same turn replayed twice
//! landing on the same node.

use schemars::JsonSchema;
use serde::Deserialize;
use skein_conversation::{Conversation, Model};
use skein_core::{ConversationId, NodeId, Provider, Relation};
use skein_engine::{BackendDef, BackendKind, Catalog, Engine, Profile, Tool, tool_fn};
use skein_providers::Scripted;
use skein_recorded::RecordedError;
use skein_recorded::replay::{ReplayPlan, Replayer, Selection};
use skein_store::{ReplayStatus, ReplayTurn, Store};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

const ORIGINAL: &str = r#"
[[rules]]
last_user_contains = "hotel"
last_role = "user"
tool_calls = [{ name = "lookup", arguments = '{"q": "hotel"}' }]

[[rules]]
last_user_contains = "hotel"
last_role = "tool"
reply = "Your hotel is called Hotel Lutetia."

[[rules]]
last_user_contains = "weather"
reply = "Paris is lovely"

[[rules]]
reply = "No flights today."
"#;

/// The model replayed on: the same call for the hotel (spaced otherwise),
/// another hotel name, a paraphrase of the weather, and a call the
/// recording lacks for flights.
pub(crate) const REPLACEMENT: &str = r#"
[[rules]]
last_user_contains = "hotel"
last_role = "user"
tool_calls = [{ name = "lookup", arguments = '{ "q":"hotel" }' }]

[[rules]]
last_user_contains = "hotel"
last_role = "tool"
reply = "Your hotel is called the Hotel de la Lumière."

[[rules]]
last_user_contains = "weather"
reply = "Paris is beautiful"

[[rules]]
last_user_contains = "flight"
last_role = "user"
tool_calls = [{ name = "lookup", arguments = '{"q": "flights"}' }]

[[rules]]
reply = "ok"
"#;

pub(crate) const JUDGE: &str = r#"
[[rules]]
any_contains = "Lutetia"
reply = "CHANGED\nThe hotel's name differs."

[[rules]]
reply = "HELD\nThe same answer in other words."
"#;

#[derive(Deserialize, JsonSchema)]
struct Query {
    q: String,
}

/// Three profiles (`orig`, `new`, `judge`), and a `lookup` tool that
/// counts its calls (the cases tests record on it too).
pub(crate) struct Desk {
    engine: Engine,
    calls: Arc<AtomicUsize>,
    lookup: Arc<dyn Tool>,
    pub(crate) store: Store,
    _dir: tempfile::TempDir,
}

impl Desk {
    /// The scripted models: `ORIGINAL`, `REPLACEMENT` and `JUDGE`.
    pub(crate) fn new() -> Desk {
        Desk::with(scripted(REPLACEMENT), scripted(JUDGE))
    }

    /// `ORIGINAL` recorded, replayed on `replacement`, judged by `judge`.
    pub(crate) fn with(replacement: Arc<dyn Provider>, judge: Arc<dyn Provider>) -> Desk {
        let calls = Arc::new(AtomicUsize::new(0));
        let counter = calls.clone();
        let lookup = tool_fn("lookup", "Look something up", move |query: Query| {
            counter.fetch_add(1, Ordering::SeqCst);
            async move { Ok::<_, std::convert::Infallible>(format!("booking: {}", query.q)) }
        });
        let mut catalog = Catalog::new();
        for name in ["orig", "new", "judge"] {
            catalog = catalog
                .backend(BackendDef::new(name, BackendKind::Echo))
                .profile(Profile::new(name, name, format!("{name}-model")));
        }
        let engine = Engine::builder(catalog)
            .provider("orig", scripted(ORIGINAL))
            .provider("new", replacement)
            .provider("judge", judge)
            .build()
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path().join("db.sqlite")).unwrap();
        Desk {
            engine,
            calls,
            lookup,
            store,
            _dir: dir,
        }
    }

    pub(crate) fn model(&self, profile: &str) -> Model {
        Model::from_profile(&self.engine, profile).unwrap()
    }

    fn tool_calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    /// The hotel (a tool loop), the weather and a flight, recorded on
    /// `orig`.
    pub(crate) async fn record(&self) -> ConversationId {
        let conversation = Conversation::builder(self.model("orig"))
            .store(&self.store)
            .tool(self.lookup.clone())
            .build();
        for text in ["Which hotel is mine?", "How is the weather?", "Any flight?"] {
            conversation.chain(text).send().await.unwrap();
        }
        conversation.id().clone()
    }

    pub(crate) fn replayer(&self) -> Replayer {
        Replayer::new(&self.store, self.model("new"))
    }

    pub(crate) fn turns(&self, id: &skein_core::ReplayId) -> Vec<ReplayTurn> {
        self.store.replay_turns(id, None, 100).unwrap()
    }

    /// A replayed turn's answer, read from its node (rows keep no texts).
    pub(crate) fn answer(&self, turn: &ReplayTurn) -> String {
        let node = turn.answer_head.expect("an answer");
        self.store.node(node).unwrap().message.joined_text()
    }
}

/// The scripted model on `rules`.
pub(crate) fn scripted(rules: &str) -> Arc<dyn Provider> {
    Arc::new(Scripted::from_toml_str(rules).unwrap())
}

fn why(turn: &ReplayTurn) -> &str {
    turn.detail["why"].as_str().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_replay_answers_tools_from_the_recording_and_names_what_changed_and_what_diverged() {
    let desk = Desk::new();
    let conversation = desk.record().await;
    let recorded_calls = desk.tool_calls();
    assert_eq!(recorded_calls, 1, "the original hotel turn called the tool");
    let replayer = desk.replayer();
    let selection = Selection::new().conversation(conversation.clone());
    let id = replayer
        .start(&selection, &ReplayPlan::new("new"))
        .await
        .unwrap();
    let mut seen = Vec::new();
    let totals = replayer
        .run(&id, |progress| {
            seen.push((progress.finished, progress.total));
        })
        .await
        .unwrap();
    assert_eq!(
        desk.tool_calls(),
        recorded_calls,
        "no tool ran in the replay"
    );
    assert_eq!(seen.len(), 3);
    assert!(seen.iter().all(|(_, total)| *total == 3));
    assert_eq!(seen.last().unwrap().0, 3);
    assert_eq!(
        (
            totals.done,
            totals.changed,
            totals.held,
            totals.diverged,
            totals.failed
        ),
        (2, 1, 1, 1, 0)
    );
    let turns = desk.turns(&id);
    let [hotel, weather, flight] = &turns[..] else {
        panic!("three turns: {turns:?}")
    };
    assert_eq!(hotel.status, ReplayStatus::Done);
    assert_eq!(hotel.decision.as_deref(), Some("changed"));
    assert_eq!(hotel.comparator.as_deref(), Some("specifics"));
    assert!(
        why(hotel).contains("lutetia") && why(hotel).contains("lumière"),
        "{}",
        why(hotel)
    );
    // The row keeps the answers' nodes, not their texts; the report reads
    // the texts from the graph (so erasing a message reaches it).
    for key in ["answer", "original"] {
        assert_eq!(hotel.detail.get(key), None, "{}", hotel.detail);
    }
    let report = |store: &Store| {
        let prices = skein_core::price::PriceTable::default();
        skein_recorded::replay::ReplayReport::read(store, &id, &prices).unwrap()
    };
    let shown = &report(&desk.store).turns[0];
    assert_eq!(
        shown.answer.as_deref(),
        Some("Your hotel is called the Hotel de la Lumière.")
    );
    assert_eq!(
        shown.original.as_deref(),
        Some("Your hotel is called Hotel Lutetia.")
    );
    // Two model calls: the recorded call answered, then the answer.
    assert_eq!(hotel.runs.len(), 2);
    assert_eq!(weather.decision.as_deref(), Some("held"));
    assert_eq!(flight.status, ReplayStatus::Diverged);
    assert_eq!(
        why(flight),
        r#"diverged: asked for lookup({"q": "flights"})"#
    );
    // Each run is linked to the replay; no conversation was added.
    for run in &hotel.runs {
        let record = desk.store.run_record(run).unwrap();
        assert!(record.relations.contains(&Relation::Replay(id.clone())));
        assert_eq!(record.conversation, None);
    }
    assert_eq!(desk.store.list_conversations(10).unwrap().len(), 1);
    // The replayed answer is a sibling of the original (same request):
    // found from the original turn.
    let children = desk.store.children(hotel.request_node).unwrap();
    assert_eq!(
        children.len(),
        2,
        "the original's first answer and the replay's"
    );
    assert_eq!(
        desk.store.replay_turns_of_node(hotel.turn_node).unwrap(),
        vec![hotel.clone()]
    );
    assert!(desk.store.verify().unwrap().is_ok());

    // Run again: nothing is left to do, nothing is redone.
    let runs_before = desk.store.recent_runs(1000).unwrap().len();
    replayer
        .run(&id, |_| panic!("nothing to replay"))
        .await
        .unwrap();
    assert_eq!(desk.store.recent_runs(1000).unwrap().len(), runs_before);

    // A second replay of the same turns on the same deterministic model
    // lands on the same nodes: no second branch.
    let again = replayer
        .start(&selection, &ReplayPlan::new("new"))
        .await
        .unwrap();
    replayer.run(&again, |_| {}).await.unwrap();
    let second = desk.turns(&again);
    assert_eq!(second[0].answer_head, hotel.answer_head);
    assert_eq!(desk.store.children(hotel.request_node).unwrap().len(), 2);

    // Erasing the original answer erases it from every report of it.
    desk.store
        .redact(hotel.turn_node, "alice", "a test")
        .unwrap();
    let shown = &report(&desk.store).turns[0];
    assert_eq!(shown.original.as_deref(), Some("[erased]"));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_live_tool_named_one_by_one_answers_what_the_recording_lacks() {
    let desk = Desk::new();
    let conversation = desk.record().await;
    let before = desk.tool_calls();
    let mut plan = ReplayPlan::new("new");
    plan.live_tools = vec!["lookup".into()];
    // A worker without the tool refuses the plan before storing anything.
    assert!(matches!(
        desk.replayer()
            .start(&Selection::new().conversation(conversation.clone()), &plan)
            .await,
        Err(RecordedError::UnknownLiveTool { .. })
    ));
    assert!(desk.store.all_replays().unwrap().is_empty());
    let replayer = desk.replayer().live_tool(desk.lookup.clone());
    let id = replayer
        .start(&Selection::new().conversation(conversation), &plan)
        .await
        .unwrap();
    let totals = replayer.run(&id, |_| {}).await.unwrap();
    assert_eq!(totals.diverged, 0);
    assert_eq!(totals.done, 3);
    // Only the call the recording lacked ran live.
    assert_eq!(desk.tool_calls(), before + 1);
    assert_eq!(desk.answer(&desk.turns(&id)[2]), "ok");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_dead_workers_turn_is_replayed_once_its_lease_passes() {
    let desk = Desk::new();
    let conversation = desk.record().await;
    let replayer = desk.replayer();
    let id = replayer
        .start(
            &Selection::new().conversation(conversation),
            &ReplayPlan::new("new"),
        )
        .await
        .unwrap();
    // A worker claimed the first turn and died (its lease has passed).
    let dead = desk.store.claim_replay_turns(&id, "dead", 1, -1).unwrap();
    assert_eq!(dead[0].seq, 0);
    let totals = replayer.run(&id, |_| {}).await.unwrap();
    assert!(totals.finished());
    assert_eq!(totals.done + totals.diverged, 3);
    let turns = desk.turns(&id);
    assert!(
        turns
            .iter()
            .all(|t| t.worker.as_deref() == Some(replayer.worker()))
    );
    // Each turn's runs were recorded once.
    let replay_runs = desk
        .store
        .recent_runs(1000)
        .unwrap()
        .into_iter()
        .filter(|run| run.relations.contains(&Relation::Replay(id.clone())))
        .count();
    assert_eq!(
        replay_runs,
        turns.iter().map(|t| t.runs.len()).sum::<usize>()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_judge_decides_on_its_own_recorded_run_outside_the_turns_usage() {
    let desk = Desk::new();
    let conversation = desk.record().await;
    let replayer = desk.replayer().judge(desk.model("judge"));
    let mut plan = ReplayPlan::new("new");
    plan.compare = vec!["judge:judge".into()];
    let id = replayer
        .start(&Selection::new().conversation(conversation), &plan)
        .await
        .unwrap();
    replayer.run(&id, |_| {}).await.unwrap();
    let turns = desk.turns(&id);
    assert_eq!(turns[0].decision.as_deref(), Some("changed"));
    assert_eq!(turns[0].comparator.as_deref(), Some("judge"));
    assert!(why(&turns[0]).contains("The hotel's name differs."));
    assert_eq!(turns[1].decision.as_deref(), Some("held"));
    let judge_run = skein_core::RunId(turns[0].detail["judge_run"].as_str().unwrap().into());
    assert!(!turns[0].runs.contains(&judge_run));
    let record = desk.store.run_record(&judge_run).unwrap();
    assert_eq!(record.profile.as_deref(), Some("judge"));
    // A judge without its model is refused before anything is stored.
    assert!(matches!(
        desk.replayer()
            .start(&Selection::new().turn(turns[0].turn_node), &plan)
            .await,
        Err(RecordedError::BadComparator { .. })
    ));
}

/// A judge whose call fails on the hotel's answers and holds the rest.
const FAILING_JUDGE: &str = r#"
[[rules]]
any_contains = "Lutetia"
error = { kind = "bad_request", message = "the judge is down" }

[[rules]]
reply = "HELD\nThe same answer in other words."
"#;

#[tokio::test(flavor = "multi_thread")]
async fn a_failing_judge_fails_its_turn_and_the_replay_goes_on() {
    let desk = Desk::with(scripted(REPLACEMENT), scripted(FAILING_JUDGE));
    let conversation = desk.record().await;
    let replayer = desk.replayer().judge(desk.model("judge"));
    let mut plan = ReplayPlan::new("new");
    plan.compare = vec!["judge:judge".into()];
    let id = replayer
        .start(&Selection::new().conversation(conversation), &plan)
        .await
        .unwrap();
    let totals = replayer.run(&id, |_| {}).await.unwrap();
    assert!(totals.finished(), "nothing left running: {totals:?}");
    assert_eq!(
        (totals.failed, totals.held, totals.diverged),
        (1, 1, 1),
        "{totals:?}"
    );
    let turns = desk.turns(&id);
    let [hotel, weather, flight] = &turns[..] else {
        panic!("three turns: {turns:?}")
    };
    assert_eq!(hotel.status, ReplayStatus::Failed);
    assert!(
        why(hotel).contains("the judge's model call failed")
            && why(hotel).contains("the judge is down"),
        "{}",
        why(hotel)
    );
    // The replayed answer and its calls are kept, unjudged.
    assert_eq!(hotel.decision, None);
    assert_eq!(hotel.runs.len(), 2);
    assert_eq!(
        desk.answer(hotel),
        "Your hotel is called the Hotel de la Lumière."
    );
    assert_eq!(weather.decision.as_deref(), Some("held"));
    assert_eq!(flight.status, ReplayStatus::Diverged);
    assert!(desk.store.verify().unwrap().is_ok());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_selection_without_turns_is_refused() {
    let desk = Desk::new();
    assert!(matches!(
        desk.replayer()
            .start(&Selection::new(), &ReplayPlan::new("new"))
            .await,
        Err(RecordedError::EmptySelection)
    ));
    let unknown = NodeId::from_slice(&[7; 32]).unwrap();
    assert!(
        desk.replayer()
            .start(&Selection::new().turn(unknown), &ReplayPlan::new("new"))
            .await
            .is_err()
    );
}

/// The answers a replay of `selection` would replay (its pending rows), or
/// the error starting it gave.
async fn selected(desk: &Desk, selection: Selection) -> Result<Vec<NodeId>, RecordedError> {
    let id = desk
        .replayer()
        .start(&selection, &ReplayPlan::new("new"))
        .await?;
    Ok(desk.turns(&id).iter().map(|turn| turn.turn_node).collect())
}

/// A conversation the recording proxy recorded for the client `name` (on
/// its run; the conversation is named otherwise, so a selection by client
/// reads the run): one turn, asking about the weather.
fn proxied(desk: &Desk, name: &str) -> NodeId {
    let thread = skein_core::Thread::from_messages([
        skein_core::Message::user(format!("weather for {name}?")),
        skein_core::Message::assistant("Sunny."),
    ]);
    let mut run = skein_core::RunRecord::new("m", "scripted");
    run.input_head = thread.parent().head_id();
    run.output_head = thread.head_id();
    run.client = Some(name.into());
    let settings = skein_core::ConversationSettings {
        proxy: true,
        ..Default::default()
    };
    desk.store
        .commit_turn(&skein_store::TurnCommit {
            target: skein_store::Target::New(Box::new(skein_store::NewConversation {
                name: Some(format!("session of {name}")),
                settings,
                ..skein_store::NewConversation::default()
            })),
            thread: Some(&thread),
            runs: std::slice::from_ref(&run),
        })
        .unwrap();
    thread.head_id().unwrap()
}

/// Sources (a conversation, a label) and filters (search, time, client)
/// compose: each filter narrows the sources' turns, filters alone choose
/// among every conversation's, and a selection the filters empty is
/// refused.
#[tokio::test(flavor = "multi_thread")]
async fn sources_and_filters_compose_into_one_selection() {
    let desk = Desk::new();
    let before = skein_core::now_ms();
    let conversation = desk.record().await;
    let head = desk.store.conversation(&conversation).unwrap().head;
    let thread = desk.store.load_thread(head.unwrap()).unwrap();
    let answers: Vec<NodeId> = thread
        .nodes()
        .iter()
        .filter(|node| node.message().role == skein_core::Role::Assistant)
        .map(|node| node.id())
        .collect();
    // The hotel loop ends at its second answer; then weather, flight.
    let (hotel, weather, flight) = (answers[1], answers[2], answers[3]);
    let bot = proxied(&desk, "bot");
    let other = proxied(&desk, "other-bot");

    let hotel_only = Selection::new()
        .conversation(conversation.clone())
        .search("hotel");
    assert_eq!(selected(&desk, hotel_only).await.unwrap(), vec![hotel]);
    // A family: the conversation (it has no forks) and its turns. SQLite
    // once refused the family read's bound as a datatype mismatch.
    assert_eq!(
        selected(&desk, Selection::new().family(conversation.clone()))
            .await
            .unwrap(),
        vec![hotel, weather, flight]
    );
    // Search alone: every conversation's turns with the word.
    let mut everywhere = selected(&desk, Selection::new().search("weather"))
        .await
        .unwrap();
    everywhere.sort();
    let mut expected = vec![weather, bot, other];
    expected.sort();
    assert_eq!(everywhere, expected);
    assert_eq!(
        selected(&desk, Selection::new().client("bot"))
            .await
            .unwrap(),
        vec![bot]
    );
    assert_eq!(
        selected(
            &desk,
            Selection::new()
                .conversation(conversation.clone())
                .between(Some(before), None)
        )
        .await
        .unwrap(),
        vec![hotel, weather, flight]
    );
    let future = skein_core::now_ms() + 86_400_000;
    assert!(matches!(
        selected(&desk, Selection::new().between(Some(future), None)).await,
        Err(RecordedError::EmptySelection)
    ));
    assert!(matches!(
        selected(&desk, Selection::new().between(None, Some(before))).await,
        Err(RecordedError::EmptySelection)
    ));

    desk.store.add_label("keep", &[flight, bot]).unwrap();
    let mut labelled = selected(&desk, Selection::new().label("keep"))
        .await
        .unwrap();
    labelled.sort();
    let mut expected = vec![flight, bot];
    expected.sort();
    assert_eq!(labelled, expected);
    assert_eq!(
        selected(&desk, Selection::new().label("keep").client("bot"))
            .await
            .unwrap(),
        vec![bot]
    );
    assert!(matches!(
        selected(&desk, Selection::new().label("keep").search("hotel")).await,
        Err(RecordedError::EmptySelection)
    ));
    // A label on a message that ends no turn (a question) is refused when
    // selected.
    desk.store
        .add_label("bad", &[thread.nodes()[0].id()])
        .unwrap();
    assert!(matches!(
        selected(&desk, Selection::new().label("bad")).await,
        Err(RecordedError::NotATurn(_))
    ));
}
