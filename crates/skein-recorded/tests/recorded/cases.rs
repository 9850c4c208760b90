//! Cases files are data from elsewhere, and choose nothing here: a case
//! names no judge model (`judge` is the replay's own judge), its runs
//! attach only to messages it brings and no conversation holds, keep no
//! link to runs or groupings outside the case, are marked imported and
//! counted by usage only where named; and its lines are read within a
//! limit, so an endless input fails early naming it.

use crate::replay::Desk;
use skein_core::{ConversationId, NodeId, Relation, RunId};
use skein_recorded::RecordedError;
use skein_recorded::cases::{self, Case};
use skein_recorded::replay::{ReplayPlan, Selection};
use skein_store::{Store, UsageScope};
use std::io::BufReader;

/// A line limit far above any case here.
const LIMIT: usize = 1 << 20;

/// The desk's three turns recorded, the weather ("Paris is lovely")
/// labelled `keep` and exported as a case judged `exact`.
async fn recorded_case(desk: &Desk) -> (ConversationId, NodeId, Case) {
    let conversation = desk.record().await;
    let head = desk
        .store
        .conversation(&conversation)
        .unwrap()
        .head
        .unwrap();
    let thread = desk.store.load_thread(head).unwrap();
    let answer = thread
        .nodes()
        .iter()
        .find(|node| node.message().joined_text() == "Paris is lovely")
        .unwrap()
        .id();
    cases::label(&desk.store, "keep", &[answer]).await.unwrap();
    let mut out = Vec::new();
    cases::export(&desk.store, "keep", &["exact".into()], &mut out)
        .await
        .unwrap();
    let case = serde_json::from_slice(&out).unwrap();
    (conversation, answer, case)
}

fn line(case: &Case) -> Vec<u8> {
    let mut line = serde_json::to_vec(case).unwrap();
    line.push(b'\n');
    line
}

fn empty_store(dir: &tempfile::TempDir) -> Store {
    Store::open(dir.path().join("elsewhere.sqlite")).unwrap()
}

async fn import(store: &Store, case: &Case) -> Result<Vec<NodeId>, RecordedError> {
    let turns = cases::import(store, &line(case)[..], LIMIT).await?;
    Ok(turns.into_iter().map(|turn| turn.turn).collect())
}

fn refusal(result: Result<Vec<NodeId>, RecordedError>) -> String {
    match result {
        Err(error @ RecordedError::BadCase { line: 1, .. }) => error.to_string(),
        other => panic!("line 1 should have been refused: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn cases_name_no_judge_model_and_are_judged_by_the_replays_judge() {
    let desk = Desk::new();
    let (_, _, mut case) = recorded_case(&desk).await;
    let dir = tempfile::tempdir().unwrap();
    let elsewhere = empty_store(&dir);

    // A model, a file or a key named by the case: refused at its line,
    // before anything is stored or opened.
    for spec in ["judge:scripted:/etc/hostname", "judge:openai:gpt-4o"] {
        case.compare = vec!["exact".into(), spec.into()];
        let refused = refusal(import(&elsewhere, &case).await);
        assert!(refused.contains("may not choose a model"), "{refused}");
        assert!(refused.contains(spec), "{refused}");
    }
    assert!(elsewhere.label_counts().unwrap().is_empty());
    // Nor is such a file written.
    assert!(matches!(
        cases::export(&desk.store, "keep", &["judge:x".into()], &mut Vec::new()).await,
        Err(RecordedError::BadComparator { .. })
    ));

    // `judge` alone is the replay's judge: refused without one, decided by
    // it with one.
    case.compare = vec!["judge".into()];
    let turns = cases::import(&desk.store, &line(&case)[..], LIMIT)
        .await
        .unwrap();
    let selection = Selection::new().case(turns[0].clone());
    let plan = ReplayPlan::new("new");
    assert!(matches!(
        desk.replayer().start(&selection, &plan).await,
        Err(RecordedError::BadComparator { .. })
    ));
    let replayer = desk.replayer().judge(desk.model("judge"));
    let id = replayer.start(&selection, &plan).await.unwrap();
    replayer.run(&id, |_| {}).await.unwrap();
    let turn = &desk.turns(&id)[0];
    assert_eq!(turn.comparator.as_deref(), Some("judge"), "{turn:?}");
    let why = turn.detail["why"].as_str().unwrap();
    assert!(why.contains("the judge (judge): The same answer"), "{why}");
}

#[tokio::test(flavor = "multi_thread")]
async fn cases_runs_attach_only_to_messages_they_bring_and_no_conversation_holds() {
    let desk = Desk::new();
    let (conversation, answer, case) = recorded_case(&desk).await;
    let scope = UsageScope::Conversation(conversation.clone());
    let before = (
        desk.store.usage(&scope).unwrap(),
        desk.store.usage(&UsageScope::Node(answer)).unwrap(),
    );

    // Into the database it came from, unchanged: it adds nothing.
    assert_eq!(import(&desk.store, &case).await.unwrap(), [answer]);

    // A forged run (a new id, a fortune in tokens) on the messages a
    // conversation here holds: refused, nothing counted.
    let mut forged = case.clone();
    forged.runs[0].id = RunId::random();
    forged.runs[0].usage.input_tokens = Some(1_000_000_000_000);
    let refused = refusal(import(&desk.store, &forged).await);
    assert!(refused.contains(conversation.short()), "{refused}");
    assert!(desk.store.run_record(&forged.runs[0].id).is_err());

    // A run naming a message the case does not bring (any id will do):
    // refused, here and in an empty database alike.
    let dir = tempfile::tempdir().unwrap();
    let elsewhere = empty_store(&dir);
    let mut stray = case.clone();
    let mut victim = stray.runs[0].clone();
    victim.id = RunId::random();
    victim.output_head = Some(NodeId::from_slice(&[9; 32]).unwrap());
    stray.runs.push(victim);
    let refused = refusal(import(&elsewhere, &stray).await);
    assert!(
        refused.contains("which the case does not bring"),
        "{refused}"
    );
    assert_eq!(
        (
            desk.store.usage(&scope).unwrap(),
            desk.store.usage(&UsageScope::Node(answer)).unwrap()
        ),
        before
    );

    // Elsewhere its runs are stored, in no conversation, linked to no run
    // outside the case nor to any grouping, marked imported: usage counts
    // them only where named.
    let mut linked = case.clone();
    let target = RunId::random();
    linked.runs[0].relations.extend([
        Relation::AssociatedWith(target.clone()),
        Relation::Sequence("a-sequence".into()),
    ]);
    linked.runs[0].usage.input_tokens = Some(1_000_000_000_000);
    assert_eq!(import(&elsewhere, &linked).await.unwrap(), [answer]);
    let run = elsewhere.run_record(&linked.runs[0].id).unwrap();
    assert_eq!(run.conversation, None);
    assert!(run.is_imported());
    assert!(
        !run.relations.iter().any(|relation| matches!(
            relation,
            Relation::AssociatedWith(_) | Relation::Sequence(_)
        )),
        "{:?}",
        run.relations
    );
    let by_node = elsewhere.usage(&UsageScope::Node(answer)).unwrap();
    assert!(by_node.runs.is_empty(), "{by_node:?}");
    let by_run = elsewhere.usage(&UsageScope::Run(run.id.clone())).unwrap();
    assert_eq!(by_run.input_tokens.value, 1_000_000_000_000);
    assert!(
        elsewhere
            .usage(&UsageScope::Sequence("a-sequence".into()))
            .unwrap()
            .runs
            .is_empty()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn cases_lines_are_read_within_a_limit() {
    let dir = tempfile::tempdir().unwrap();
    let store = empty_store(&dir);
    // A reader that never ends a line (nor ends).
    let endless = BufReader::new(std::io::repeat(b'x'));
    match cases::import(&store, endless, 4096).await {
        Err(error @ RecordedError::BadCase { line: 1, .. }) => {
            let text = error.to_string();
            assert!(
                text.contains("longer than the limit of 4096 bytes"),
                "{text}"
            );
        }
        other => panic!("{other:?}"),
    }
    // A line within it is read (and here is no case).
    let short = b"\n{\"label\": 1}\n";
    assert!(matches!(
        cases::import(&store, &short[..], 4096).await,
        Err(RecordedError::BadCase { line: 2, .. })
    ));
}
