//! Replays and labels beyond their own tables, on both backends: an export
//! carries replays (with every turn's row), labels and the reruns, and an
//! import reproduces them exactly (twice adds nothing; a turn naming a
//! replay the file lacks is refused, naming its line); `verify` reports a
//! replayed turn's missing run or node and a label's missing node; deleting
//! a conversation deletes the replayed turns of its turns with their runs
//! (a judge's too) and the replays left empty, while a replay of turns no
//! conversation owns keeps its nodes; deleting a replay deletes its turns'
//! rows and runs and the answers only it reached, and nothing of the
//! conversations it replayed.

use crate::common::{Backend, TempStore};
use skein_core::{Message, Thread};
use skein_store::{
    ConversationId, NewReplayTurn, Problem, Relation, ReplayId, ReplayRecord, ReplayStatus,
    ReplayTurnFinish, RunRecord, Selection, Store, StoreError, Target, TurnCommit,
};

for_each_backend!(
    an_export_carries_replays_and_labels_and_an_import_reproduces_them,
    verify_reports_what_a_replayed_turn_or_a_label_lost,
    deleting_a_conversation_deletes_the_replayed_turns_of_its_turns,
    deleting_a_replay_deletes_its_turns_runs_and_what_only_it_reached,
);

/// A conversation of one turn; its id and thread.
fn conversation(store: &Store, question: &str) -> (ConversationId, Thread) {
    let thread = Thread::from_messages([
        Message::user(question),
        Message::assistant(format!("answer to {question}")),
    ]);
    let mut run = RunRecord::new("m", "scripted");
    run.input_head = thread.parent().head_id();
    run.output_head = thread.head_id();
    let id = store
        .commit_turn(&TurnCommit {
            target: Target::New(Box::default()),
            thread: Some(&thread),
            runs: std::slice::from_ref(&run),
        })
        .unwrap()
        .conversation
        .unwrap();
    (id, thread)
}

/// A replay of `originals` (each owned by its conversation, or none), each
/// turn finished with a replayed answer, a run and a judge's run; the
/// record and the runs.
fn finished_replay(
    store: &Store,
    originals: &[(Option<ConversationId>, Thread)],
) -> (ReplayRecord, Vec<RunRecord>) {
    let record = ReplayRecord {
        id: ReplayId::random(),
        selection: serde_json::json!({"turns": []}),
        change: serde_json::json!({}),
        model: "other".into(),
        settings: serde_json::json!({}),
        turns: originals.len() as u64,
        created_ms: 5,
    };
    let turns: Vec<NewReplayTurn> = originals
        .iter()
        .map(|(owner, thread)| NewReplayTurn {
            conversation: owner.clone(),
            turn_node: thread.head_id().unwrap(),
            request_node: thread.parent().head_id().unwrap(),
            compare: vec!["exact".into()],
            // Keyed by model too, as in a replay comparing models (an
            // export carries it).
            model: Some("other".into()),
        })
        .collect();
    store.create_replay(&record, &turns).unwrap();
    let claimed = store
        .claim_replay_turns(&record.id, "w", originals.len(), 60_000)
        .unwrap();
    let mut runs = Vec::new();
    for (turn, (_, thread)) in claimed.iter().zip(originals) {
        let answer = thread.parent().push(Message::assistant("replayed"));
        let mut run = RunRecord::new("other", "scripted");
        run.input_head = answer.parent().head_id();
        run.output_head = answer.head_id();
        run.relations.push(Relation::Replay(record.id.clone()));
        let mut judge = RunRecord::new("judge", "scripted");
        judge.input_head = answer.parent().head_id();
        let detail = serde_json::json!({"why": "w", "judge_run": judge.id});
        store
            .finish_replay_turn(&ReplayTurnFinish {
                replay: &record.id,
                seq: turn.seq,
                worker: "w",
                status: ReplayStatus::Done,
                answer_head: answer.head_id(),
                decision: Some("changed"),
                comparator: Some("exact"),
                detail: &detail,
                threads: std::slice::from_ref(&answer),
                runs: std::slice::from_ref(&run),
                other_runs: std::slice::from_ref(&judge),
            })
            .unwrap();
        runs.push(run);
        runs.push(judge);
    }
    (record, runs)
}

fn exported(store: &Store) -> String {
    let mut out = Vec::new();
    store.export(&mut out).unwrap();
    String::from_utf8(out).unwrap()
}

fn an_export_carries_replays_and_labels_and_an_import_reproduces_them(backend: Backend) {
    let source = TempStore::new(backend);
    let (a, thread) = conversation(&source.store, "first");
    let (record, _) = finished_replay(&source.store, &[(Some(a), thread.clone())]);
    source
        .store
        .add_label("keep", &[thread.head_id().unwrap()])
        .unwrap();
    let file = exported(&source.store);
    assert!(file.starts_with(r#"{"kind":"header","format":"skein-export","version":5"#));

    let target = TempStore::new(backend);
    let report = target.store.import(&mut file.as_bytes()).unwrap();
    assert_eq!(
        (report.replays, report.replay_turns, report.labels),
        (1, 1, 1)
    );
    assert_eq!(target.store.replay(&record.id).unwrap(), record);
    assert_eq!(
        target.store.replay_turns(&record.id, None, 10).unwrap(),
        source.store.replay_turns(&record.id, None, 10).unwrap()
    );
    assert_eq!(
        target.store.labelled("keep", None, 10).unwrap(),
        source.store.labelled("keep", None, 10).unwrap()
    );
    assert!(target.store.verify().unwrap().is_ok());
    // The same file again adds nothing; the export is the same file.
    let again = target.store.import(&mut file.as_bytes()).unwrap();
    assert_eq!((again.replays, again.replay_turns, again.labels), (0, 0, 0));
    assert_eq!(exported(&target.store), file);

    // A turn whose replay the file lacks is refused, and nothing is written.
    let orphan: String = file
        .lines()
        .filter(|line| !line.starts_with(r#"{"kind":"replay","#))
        .map(|line| format!("{line}\n"))
        .collect();
    let turn_line = orphan
        .lines()
        .position(|line| line.starts_with(r#"{"kind":"replay_turn""#))
        .unwrap()
        + 1;
    let fresh = TempStore::new(backend);
    match fresh.store.import(&mut orphan.as_bytes()) {
        Err(StoreError::Import { line, problem }) => {
            assert_eq!(line, turn_line);
            assert!(problem.contains("belongs to replay"), "{problem}");
        }
        other => panic!("expected an import error, got {other:?}"),
    }
    assert!(fresh.store.label_counts().unwrap().is_empty());
}

fn verify_reports_what_a_replayed_turn_or_a_label_lost(backend: Backend) {
    let db = TempStore::new(backend);
    let store = &db.store;
    let (a, thread) = conversation(store, "first");
    let (record, runs) = finished_replay(store, &[(Some(a), thread.clone())]);
    store
        .add_label("keep", &[thread.head_id().unwrap()])
        .unwrap();
    assert!(store.verify().unwrap().is_ok());
    store
        .debug_execute(&format!("DELETE FROM runs WHERE id = '{}'", runs[0].id))
        .unwrap();
    let stray = Thread::from_messages([Message::user("never stored")]);
    let hex: String = stray
        .head_id()
        .unwrap()
        .as_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let blob = match backend {
        Backend::Sqlite => format!("X'{hex}'"),
        Backend::Postgres => format!("'\\x{hex}'::bytea"),
    };
    store
        .debug_execute(&format!(
            "INSERT INTO labels(name, node, created) VALUES ('lost', {blob}, 1)"
        ))
        .unwrap();
    let problems = store.verify().unwrap().problems;
    assert_eq!(
        problems,
        vec![
            Problem::ReplayTurnWithoutRun {
                replay: record.id.to_string(),
                seq: 0,
                run: runs[0].id.to_string(),
            },
            Problem::LabelWithoutNode {
                label: "lost".into(),
                node: hex,
            },
        ]
    );
}

fn deleting_a_conversation_deletes_the_replayed_turns_of_its_turns(backend: Backend) {
    let db = TempStore::new(backend);
    let store = &db.store;
    let (a, a_thread) = conversation(store, "first");
    let (b, b_thread) = conversation(store, "second");
    // One replay of a's turn alone, one of a's and b's.
    let (only_a, only_a_runs) = finished_replay(store, &[(Some(a.clone()), a_thread.clone())]);
    let (both, _) = finished_replay(
        store,
        &[
            (Some(a.clone()), a_thread.clone()),
            (Some(b), b_thread.clone()),
        ],
    );
    // A replay of a turn no conversation owns (a's turn, selected by node).
    let (unowned, _) = finished_replay(store, &[(None, a_thread.clone())]);

    let plan = store
        .forget(&Selection::Conversations(vec![a.clone()]), true)
        .unwrap();
    let done = store
        .forget(&Selection::Conversations(vec![a]), false)
        .unwrap();
    assert_eq!((plan.replay_turns, plan.replays), (2, 1), "{plan:?}");
    assert_eq!((done.replay_turns, done.replays), (2, 1));
    assert!(
        done.to_string().contains("deleted 2 replayed turn(s)"),
        "{done}"
    );
    // Its own run, the two replayed turns' runs and their judges' runs.
    assert_eq!(done.runs, 1 + 4);
    assert!(matches!(
        store.replay(&only_a.id),
        Err(StoreError::ReplayNotFound(_))
    ));
    for run in &only_a_runs {
        assert!(matches!(
            store.run_record(&run.id),
            Err(StoreError::RunNotFound(_))
        ));
    }
    let rest = store.replay_turns(&both.id, None, 10).unwrap();
    assert_eq!(rest.len(), 1);
    assert_eq!(rest[0].turn_node, b_thread.head_id().unwrap());
    assert_eq!(store.replay(&both.id).unwrap().turns, 1);
    // The unowned replay still reaches a's turn and its replayed answer.
    let kept = &store.replay_turns(&unowned.id, None, 1).unwrap()[0];
    assert!(store.contains(kept.turn_node).unwrap());
    assert!(store.contains(kept.answer_head.unwrap()).unwrap());
    assert!(store.verify().unwrap().is_ok());
}

fn deleting_a_replay_deletes_its_turns_runs_and_what_only_it_reached(backend: Backend) {
    let db = TempStore::new(backend);
    let store = &db.store;
    let (a, a_thread) = conversation(store, "first");
    let (b, b_thread) = conversation(store, "second");
    // Both replays answer a's turn with the same message (content
    // addressing: one node); only the first replays b's.
    let (first, first_runs) = finished_replay(
        store,
        &[
            (Some(a.clone()), a_thread.clone()),
            (Some(b.clone()), b_thread.clone()),
        ],
    );
    let (second, second_runs) = finished_replay(store, &[(Some(a.clone()), a_thread.clone())]);
    let shared = store.replay_turns(&second.id, None, 1).unwrap()[0]
        .answer_head
        .unwrap();
    let only_first = store.replay_turns(&first.id, None, 10).unwrap()[1]
        .answer_head
        .unwrap();
    let conversations = store.list_conversations(10).unwrap();

    let selection = Selection::Replays(vec![first.id.clone()]);
    let plan = store.forget(&selection, true).unwrap();
    let done = store.forget(&selection, false).unwrap();
    for report in [&plan, &done] {
        assert_eq!(report.deleted_replays, vec![first.id.clone()]);
        assert!(report.conversations.is_empty());
        assert_eq!((report.replay_turns, report.replays), (2, 1), "{report:?}");
        // The two replayed turns' runs and their judges' runs.
        assert_eq!(report.runs, 4);
        // b's replayed answer went; a's stays, the second replay reaches it.
        assert_eq!(report.messages, 1);
        assert!(report.kept_messages >= 1);
    }
    assert!(
        done.to_string().starts_with(&format!(
            "deleted replay {}: 2 replayed turn(s), 4 run(s), 1 message(s)",
            first.id.short()
        )),
        "{done}"
    );
    assert!(matches!(
        store.replay(&first.id),
        Err(StoreError::ReplayNotFound(_))
    ));
    assert!(store.replay_turns(&first.id, None, 10).unwrap().is_empty());
    for run in &first_runs {
        assert!(matches!(
            store.run_record(&run.id),
            Err(StoreError::RunNotFound(_))
        ));
    }
    assert!(!store.contains(only_first).unwrap());
    assert!(store.contains(shared).unwrap());
    // The conversations it replayed are as they were, and so is the other
    // replay.
    assert_eq!(store.list_conversations(10).unwrap(), conversations);
    for thread in [&a_thread, &b_thread] {
        assert!(store.contains(thread.head_id().unwrap()).unwrap());
    }
    assert_eq!(store.replay_turns(&second.id, None, 10).unwrap().len(), 1);
    assert!(store.run_record(&second_runs[0].id).is_ok());
    assert!(store.verify().unwrap().is_ok());

    // The second one's answer goes with it; the original turns stay.
    let done = store
        .forget(&Selection::Replays(vec![second.id.clone()]), false)
        .unwrap();
    assert_eq!((done.replay_turns, done.runs, done.messages), (1, 2, 1));
    assert!(!store.contains(shared).unwrap());
    assert!(store.contains(a_thread.head_id().unwrap()).unwrap());
    assert!(store.all_replays().unwrap().is_empty());
    assert!(store.verify().unwrap().is_ok());
}
