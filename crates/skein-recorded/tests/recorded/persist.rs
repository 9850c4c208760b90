//! Persistence: turns, reruns and forks stored, and everything loaded back
//! after the database is reopened.

use crate::common::{Recording, advisor, decision_changed, record_three};
use schemars::JsonSchema;
use serde::Deserialize;
use skein_engine::tool_fn;
use skein_recorded::{
    RecordedChat, RecordedError, RerunId, RerunOptions, Source, SourceInfo, SourceKind, TurnAt,
    Verdict, conversation_of_node,
};
use skein_store::Store;
use std::sync::Arc;

#[tokio::test]
async fn turns_reruns_and_forks_survive_reopening_the_database() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("skein.sqlite");
    let (cid, rerun_id, fork_cid, evidence) = {
        let store = Store::open(&path).unwrap();
        let mut chat = advisor::builder(advisor::model())
            .store(store.clone())
            .name("desk")
            .build()
            .await
            .unwrap();
        record_three(&mut chat).await;
        let rerun = chat
            .rerun_turn(
                1,
                RerunOptions::ignore(["social-sentiment"])
                    .comparator(decision_changed)
                    .check_baseline(),
            )
            .await
            .unwrap();
        let mut fork = chat.fork(1, Some(&rerun)).await.unwrap();
        fork.send("How much should we allocate?").await.unwrap();
        let evidence: Vec<_> = chat
            .turns()
            .iter()
            .map(|t| {
                (
                    t.request().head_id(),
                    t.annotations().clone(),
                    t.tools().to_vec(),
                    t.node(),
                    t.runs().to_vec(),
                    t.events().to_vec(),
                )
            })
            .collect();
        (
            chat.conversation().unwrap().clone(),
            rerun.id.clone(),
            fork.conversation().unwrap().clone(),
            evidence,
        )
    };

    let store = Store::open(&path).unwrap();
    // The rerun record links the turn, its ablation, runs and verdict.
    let record = store.rerun(&rerun_id).unwrap();
    assert_eq!(record.conversation, cid);
    assert_eq!(record.turn, 1);
    assert_eq!(record.turn_node, evidence[1].3);
    assert_eq!(record.ablation, ["social-sentiment"]);
    assert_eq!(
        (
            record.samples,
            record.sample_runs.len(),
            record.baseline_runs.len()
        ),
        (3, 3, 3)
    );
    assert_eq!(record.verdict.as_deref(), Some("confirmed"));
    let answer = store.load_thread(record.answer_head.unwrap()).unwrap();
    assert!(
        answer
            .head()
            .unwrap()
            .message()
            .joined_text()
            .starts_with("HOLD")
    );
    let run = store.run_record(&record.sample_runs[0]).unwrap();
    assert_eq!(run.input_head, record.request_head);
    assert!(
        store
            .reruns_of_node(record.turn_node)
            .unwrap()
            .iter()
            .any(|r| r.id == rerun_id)
    );
    assert_eq!(store.resolve_rerun(&rerun_id.0[..8]).unwrap(), rerun_id);
    // The fork is a conversation with its origin.
    let fork = store.conversation(&fork_cid).unwrap();
    let origin = fork.origin.clone().unwrap();
    assert_eq!(
        origin.rerun.as_ref().map(|id| id.as_str()),
        Some(rerun_id.as_str())
    );
    assert_eq!(origin.conversation.as_ref(), Some(&cid));
    assert_eq!(origin.node, record.answer_head);

    // The chat loads back with its turns' evidence.
    let model = Recording::new(advisor::model());
    let mut chat = advisor::builder(model.clone())
        .store(store.clone())
        .load(&cid)
        .await
        .unwrap();
    assert_eq!(chat.turns().len(), 3);
    for (turn, (request, annotations, tools, node, runs, events)) in
        chat.turns().iter().zip(&evidence)
    {
        assert_eq!(&turn.request().head_id(), request);
        assert_eq!(turn.annotations(), annotations);
        assert_eq!(turn.tools(), tools.as_slice());
        assert_eq!(&turn.node(), node);
        assert_eq!(turn.runs(), runs.as_slice());
        assert!(!events.is_empty());
        assert_eq!(turn.events(), events.as_slice(), "observation events");
    }
    assert_eq!(
        conversation_of_node(&store, evidence[1].3).await.unwrap(),
        cid
    );
    assert_eq!(chat.turn_of_node(evidence[1].3).unwrap(), 1);

    // Provenance survives the restart: the stored rerun forks, a made-up
    // one does not, and another chat's is refused.
    let refork = chat.fork_from_rerun(&rerun_id).await.unwrap();
    assert_eq!(refork.history().head_id(), record.answer_head);
    assert!(refork.removed().contains("social-sentiment"));
    let error = chat.fork_from_rerun(&RerunId::random()).await.unwrap_err();
    assert!(matches!(error, RecordedError::Provenance { .. }), "{error}");

    // A loaded turn re-runs like a live one.
    model.take();
    let again = chat
        .rerun_turn(
            1,
            RerunOptions::ignore(["social-sentiment"])
                .comparator(decision_changed)
                .check_baseline(),
        )
        .await
        .unwrap();
    assert_eq!(again.verdict, Some(Verdict::Confirmed));
    assert_eq!(
        &model.take()[3].thread,
        chat.turn(1).unwrap().request(),
        "baseline = stored request"
    );

    // The fork loads back with its removals and continues without them.
    let mut fork = advisor::builder(model.clone())
        .store(store.clone())
        .load(&fork_cid)
        .await
        .unwrap();
    assert!(fork.removed().contains("social-sentiment"));
    assert_eq!(fork.turns().len(), 1);
    assert!(fork.turn(0).unwrap().text().starts_with("KEEP"));
    let turn = fork
        .send("Should we BUY or HOLD this position?")
        .await
        .unwrap();
    assert!(turn.text().starts_with("HOLD"));
    assert!(
        !turn.request().messages()[0]
            .joined_text()
            .contains("social-sentiment")
    );
    // Other chats' reruns are refused on the reloaded chat too.
    let mut stranger = advisor::builder(advisor::model())
        .store(store.clone())
        .build()
        .await
        .unwrap();
    record_three(&mut stranger).await;
    let theirs = stranger
        .rerun_turn(
            1,
            RerunOptions::ignore(["social-sentiment"]).comparator(decision_changed),
        )
        .await
        .unwrap();
    let error = chat.fork_from_rerun(&theirs.id).await.unwrap_err();
    assert!(
        error.to_string().contains("belongs to conversation"),
        "{error}"
    );
    let error = chat.fork(1, Some(&theirs)).await.unwrap_err();
    assert!(error.to_string().contains("another chat"), "{error}");
}

#[tokio::test]
async fn loading_needs_a_store_and_an_existing_conversation() {
    let error = advisor::builder(advisor::model())
        .load(&skein_store::ConversationId::random())
        .await
        .unwrap_err();
    assert!(matches!(error, RecordedError::NoStore(_)));
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("db")).unwrap();
    let error = advisor::builder(advisor::model())
        .store(store)
        .load(&skein_store::ConversationId("nope".into()))
        .await
        .unwrap_err();
    assert!(
        error.to_string().contains("no conversation nope"),
        "{error}"
    );
}

#[tokio::test]
async fn a_conversation_recorded_without_a_recorded_chat_loads_one_turn_per_run() {
    // What plain `skein prompt` turns leave: a run per turn, no relations,
    // a source tag on the system message's second part.
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("db")).unwrap();
    let conversation = store.create_conversation(Default::default()).unwrap();
    let system = skein_core::Message::new(
        skein_core::Role::System,
        vec![
            skein_core::Part::text("Advise."),
            skein_core::Part::text("social-sentiment: bullish"),
        ],
    );
    let mut head = None;
    let mut thread = skein_core::Thread::new().push(system);
    // Both runs start in the same millisecond and their ids sort against
    // the turn order: only the histories can order them.
    let turns = [
        ("status?", "Up.", "b".repeat(32)),
        ("Should we BUY or HOLD?", "BUY: bullish.", "a".repeat(32)),
    ];
    for (question, answer, id) in turns {
        let request = thread.push(skein_core::Message::user(question));
        let reply = request.push(skein_core::Message::assistant(answer));
        let mut run = skein_store::RunRecord::new("scripted", "scripted");
        run.id = skein_store::RunId(id);
        run.started_ms = 1_000;
        run.conversation = Some(conversation.id.clone());
        run.input_head = request.head_id();
        run.output_head = reply.head_id();
        run.annotations.add(
            request.nodes()[0].id(),
            1,
            skein_core::Annotation::Source("social-sentiment".into()),
        );
        store
            .commit_turn(&skein_store::TurnCommit::continuing(
                &conversation.id,
                head,
                &reply,
                std::slice::from_ref(&run),
            ))
            .unwrap();
        head = reply.head_id();
        thread = reply;
    }
    let node = thread.head_id().unwrap();
    assert_eq!(
        conversation_of_node(&store, node).await.unwrap(),
        conversation.id
    );
    let mut chat = advisor::builder(advisor::model())
        .store(store.clone())
        .load(&conversation.id)
        .await
        .unwrap();
    assert_eq!(chat.turns().len(), 2);
    assert_eq!(chat.turn_of_node(node).unwrap(), 1);
    let turn = chat.turn(1).unwrap().clone();
    assert_eq!(turn.user_text(), "Should we BUY or HOLD?");
    assert!(turn.sources().iter().any(|s| s.id == "social-sentiment"));
    let rerun = chat
        .rerun_turn(
            1,
            RerunOptions::ignore(["social-sentiment"])
                .comparator(decision_changed)
                .check_baseline(),
        )
        .await
        .unwrap();
    assert!(rerun.answer().starts_with("HOLD"));
    assert_eq!(rerun.verdict, Some(Verdict::Confirmed));
    let error = conversation_of_node(&store, turn.request().head_id().unwrap())
        .await
        .unwrap_err();
    assert!(matches!(error, RecordedError::NotATurn(_)));
}

#[derive(Deserialize, JsonSchema)]
struct Query {
    q: String,
}

const TOOLS: &str = r#"
[[rules]]
tool_offered = "quote"
last_role = "user"
last_user_contains = "price"
reply = "Checking."
tool_calls = [{ name = "quote", arguments = '{"q": "ACME"}' }]

[[rules]]
last_role = "tool"
reply = "ACME trades at {last_tool_result}"

[[rules]]
tool_offered = "quote"
last_user_contains = "buy"
reply = "BUY: the quote supports it."

[[rules]]
reply = "HOLD: no quote to go on."
"#;

#[tokio::test]
async fn a_rerun_shares_every_node_its_ablation_leaves_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("db")).unwrap();
    let quote = tool_fn("quote", "A stock quote", |q: Query| async move {
        Ok::<_, std::convert::Infallible>(format!("{} 42.0", q.q.len()))
    });
    let mut chat =
        RecordedChat::builder(crate::common::engine(Recording::scripted(TOOLS)), "advisor")
            .system("Advise.")
            .tool(quote)
            .embedder(Arc::new(skein_recorded::LexicalEmbedder::default()))
            .store(store.clone())
            .build()
            .await
            .unwrap();
    chat.send("What is the price?").await.unwrap();
    chat.send("So, buy?").await.unwrap();
    assert!(chat.turn(1).unwrap().text().starts_with("BUY"));
    let rerun = chat
        .rerun_turn(
            1,
            RerunOptions::ignore(["quote"])
                .comparator(decision_changed)
                .check_baseline(),
        )
        .await
        .unwrap();
    assert_eq!(rerun.verdict, Some(Verdict::Confirmed));
    let recorded = chat.turn(1).unwrap().request().nodes();
    let probe = rerun.samples[0].request.nodes();
    // system, user: untouched and shared; the call and its result are gone
    // from the history, the text of the assistant message that made the
    // call stays; the tool is no longer offered.
    assert_eq!(probe[0].id(), recorded[0].id());
    assert_eq!(probe[1].id(), recorded[1].id());
    assert_eq!(probe[2].message().joined_text(), "Checking.");
    assert!(probe[2].message().tool_calls().next().is_none());
    assert_ne!(probe[2].id(), recorded[2].id());
    assert!(rerun.samples[0].tools.is_empty());
    assert_eq!(recorded.len(), 6);
    assert_eq!(probe.len(), 5);
    for node in &probe {
        assert!(
            store.contains(node.id()).unwrap(),
            "the rerun's request is stored"
        );
    }
}

/// A resumed chat that no longer offers a tool its history called names the
/// tool's calls as the loaded turn does, and its declared sources by the
/// kind they were declared with.
#[tokio::test]
async fn a_source_has_the_same_kind_in_a_live_turn_and_the_turn_loaded_back() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("db")).unwrap();
    let quote = tool_fn("quote", "A stock quote", |q: Query| async move {
        Ok::<_, std::convert::Infallible>(format!("{} 42.0", q.q.len()))
    });
    let builder = || {
        RecordedChat::builder(crate::common::engine(Recording::scripted(TOOLS)), "advisor")
            .store(store.clone())
    };
    let mut chat = builder()
        .system("Advise.")
        .source(Source::memory("desk", "desk: prefers bonds"))
        .tool(quote)
        .build()
        .await
        .unwrap();
    chat.send("What is the price?").await.unwrap();
    let cid = chat.conversation().unwrap().clone();
    // Resumed from its stored layout, without the tool.
    let mut resumed = builder().resume(&cid).await.unwrap();
    let live = resumed.send("So, buy?").await.unwrap().clone();
    assert!(live.text().starts_with("HOLD"), "{}", live.text());
    let kinds = |sources: &[SourceInfo]| -> Vec<(String, SourceKind)> {
        sources.iter().map(|s| (s.id.clone(), s.kind)).collect()
    };
    assert_eq!(
        kinds(live.sources()),
        [
            ("desk".to_string(), SourceKind::Memory),
            ("quote".to_string(), SourceKind::ToolResult)
        ]
    );
    let loaded = builder()
        .load_turn(TurnAt::Reply(live.node()))
        .await
        .unwrap();
    assert_eq!(kinds(loaded.turn().sources()), kinds(live.sources()));
    let whole = builder().load(&cid).await.unwrap();
    assert_eq!(
        kinds(whole.turn(0).unwrap().sources()),
        [
            ("desk".to_string(), SourceKind::Memory),
            ("quote".to_string(), SourceKind::Tool)
        ]
    );
    assert_eq!(
        kinds(whole.turn(1).unwrap().sources()),
        kinds(live.sources())
    );
}

/// Everything a turn's evidence holds, to compare two loads of it.
fn evidence_of(turn: &skein_recorded::Turn) -> String {
    format!(
        "{} {:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?}",
        turn.index(),
        turn.user_text(),
        turn.request(),
        turn.annotations(),
        turn.tools(),
        turn.sources(),
        turn.removed(),
        turn.thread(),
        turn.runs(),
        turn.events(),
        turn.usage(),
    )
}

#[tokio::test]
async fn a_turn_loaded_alone_is_the_whole_chats_turn_and_reruns_and_forks_alike() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("db")).unwrap();
    let mut chat = advisor::builder(advisor::model())
        .store(store.clone())
        .build()
        .await
        .unwrap();
    record_three(&mut chat).await;
    let cid = chat.conversation().unwrap().clone();
    let mut whole = advisor::builder(advisor::model())
        .store(store.clone())
        .load(&cid)
        .await
        .unwrap();
    for k in 0..3 {
        let node = whole.turn(k).unwrap().node();
        for at in [TurnAt::Reply(node), TurnAt::Number(cid.clone(), k)] {
            let alone = advisor::builder(advisor::model())
                .store(store.clone())
                .load_turn(at)
                .await
                .unwrap();
            assert_eq!((alone.index(), alone.turns()), (k, 3));
            assert_eq!(alone.conversation(), &cid);
            assert_eq!(alone.id(), whole.id());
            assert_eq!(
                evidence_of(alone.turn()),
                evidence_of(whole.turn(k).unwrap())
            );
        }
    }

    // Explained and re-run alone, turn 1 gives what the whole chat gives.
    let mut alone = advisor::builder(advisor::model())
        .store(store.clone())
        .load_turn(TurnAt::Number(cid.clone(), 1))
        .await
        .unwrap();
    let options = || {
        RerunOptions::ignore(["social-sentiment"])
            .comparator(decision_changed)
            .check_baseline()
    };
    let report = alone.reason(Default::default()).await.unwrap();
    assert_eq!(
        report.render(),
        whole.reason(1, Default::default()).await.unwrap().render()
    );
    assert!(alone.report().is_some());
    let ours = alone.rerun(options()).await.unwrap();
    let theirs = whole.rerun_turn(1, options()).await.unwrap();
    let outcome = |r: &skein_recorded::RerunResult| {
        (
            r.chat.clone(),
            r.turn,
            r.turn_node,
            r.removed.clone(),
            r.original.clone(),
            r.answers()
                .iter()
                .map(|a| a.to_string())
                .collect::<Vec<_>>(),
            r.what_changed.clone(),
            r.verdict,
            r.samples[0].request.head_id(),
        )
    };
    assert_eq!(outcome(&ours), outcome(&theirs));
    assert_eq!(ours.verdict, Some(Verdict::Confirmed));
    // The stored records agree but for their ids, runs and times.
    let (a, b) = (
        store.rerun(&ours.id).unwrap(),
        store.rerun(&theirs.id).unwrap(),
    );
    assert_eq!(
        (
            &a.conversation,
            a.turn,
            a.turn_node,
            a.request_head,
            a.answer_head
        ),
        (
            &b.conversation,
            b.turn,
            b.turn_node,
            b.request_head,
            b.answer_head
        )
    );
    assert_eq!(
        (&a.ablation, a.samples, &a.verdict, &a.summary, &a.detail),
        (&b.ablation, b.samples, &b.verdict, &b.summary, &b.detail)
    );

    // Forks: from the rerun in memory, from the stored one, from the reply.
    let fork = alone.fork(Some(&ours)).await.unwrap();
    assert_eq!(fork.history().head_id(), a.answer_head);
    assert!(fork.removed().contains("social-sentiment"));
    let refork = alone.fork_from_rerun(&theirs.id).await.unwrap();
    assert_eq!(refork.history().head_id(), b.answer_head);
    let plain = alone.fork(None).await.unwrap();
    assert_eq!(
        plain.history().head_id(),
        Some(whole.turn(1).unwrap().node())
    );

    // A rerun of another turn of the chat needs that turn loaded.
    let other = advisor::builder(advisor::model())
        .store(store.clone())
        .load_turn(TurnAt::Number(cid.clone(), 2))
        .await
        .unwrap();
    let error = other.fork_from_rerun(&ours.id).await.unwrap_err();
    assert!(
        matches!(error, RecordedError::TurnNotLoaded { turn: 1, loaded: 2 }),
        "{error}"
    );
}

#[tokio::test]
async fn a_turn_loads_alone_without_building_the_others() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("db")).unwrap();
    let mut chat = advisor::builder(advisor::model())
        .store(store.clone())
        .build()
        .await
        .unwrap();
    record_three(&mut chat).await;
    let cid = chat.conversation().unwrap().clone();
    let last = chat.turn(2).unwrap().node();
    // Damage turn 0's evidence: its run loses its request.
    let run = chat.turn(0).unwrap().runs()[0].clone();
    let changed = store
        .debug_execute(&format!(
            "UPDATE runs SET input_head = NULL WHERE id = '{}'",
            run.as_str()
        ))
        .unwrap();
    assert_eq!(changed, 1);
    let builder = || advisor::builder(advisor::model()).store(store.clone());

    // Loading the whole chat builds turn 0 and fails on it ...
    let error = builder().load(&cid).await.unwrap_err();
    assert!(
        matches!(&error, RecordedError::NotRecorded { problem, .. }
            if problem.contains("has no request")),
        "{error}"
    );
    let error = builder()
        .load_turn(TurnAt::Number(cid.clone(), 0))
        .await
        .unwrap_err();
    assert!(
        matches!(error, RecordedError::NotRecorded { .. }),
        "{error}"
    );
    // ... the last turn, loaded alone, never builds it, and re-runs.
    let mut alone = builder().load_turn(TurnAt::Reply(last)).await.unwrap();
    assert_eq!(alone.index(), 2);
    let rerun = alone
        .rerun(RerunOptions::ignore(["social-sentiment"]).comparator(decision_changed))
        .await
        .unwrap();
    assert_eq!(rerun.turn_node, last);
    assert_eq!(store.rerun(&rerun.id).unwrap().turn, 2);
}

/// A sent turn's evidence but its runs and events (each run has its own
/// id), to compare turns sent on two chats.
fn sent_evidence(turn: &skein_recorded::Turn) -> String {
    format!(
        "{} {:?} {:?} {:?} {:?} {:?} {:?} {:?}",
        turn.index(),
        turn.user_text(),
        turn.request(),
        turn.annotations(),
        turn.tools(),
        turn.sources(),
        turn.removed(),
        turn.thread(),
    )
}

#[tokio::test]
async fn a_resumed_chat_goes_on_as_the_whole_chat_would_without_building_its_turns() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("db")).unwrap();
    let builder = || advisor::builder(advisor::model()).store(store.clone());
    let mut damaged = builder().build().await.unwrap();
    record_three(&mut damaged).await;
    let mut intact = builder().build().await.unwrap();
    record_three(&mut intact).await;
    let cid = damaged.conversation().unwrap().clone();
    // Damage turn 0's evidence: its run loses its request.
    let run = damaged.turn(0).unwrap().runs()[0].clone();
    let changed = store
        .debug_execute(&format!(
            "UPDATE runs SET input_head = NULL WHERE id = '{}'",
            run.as_str()
        ))
        .unwrap();
    assert_eq!(changed, 1);
    let error = builder().load(&cid).await.unwrap_err();
    assert!(
        matches!(error, RecordedError::NotRecorded { .. }),
        "{error}"
    );

    // Resuming never builds turn 0: the chat goes on with turn 3.
    let mut resumed = builder().resume(&cid).await.unwrap();
    assert_eq!(resumed.history().head_id(), damaged.history().head_id());
    assert!(resumed.turns().is_empty());
    let question = "Should we BUY or HOLD this position?";
    let turn = resumed.send(question).await.unwrap().clone();
    assert_eq!(turn.index(), 3);
    assert_eq!(resumed.turns().len(), 1);
    assert_eq!(resumed.turn(3).unwrap().node(), turn.node());
    assert_eq!(resumed.turn_of_node(turn.node()).unwrap(), 3);
    assert_eq!(
        store.conversation(&cid).unwrap().head,
        Some(turn.node()),
        "the turn moved the conversation"
    );
    // It is the turn the whole loaded chat sends.
    let mut whole = builder()
        .load(intact.conversation().unwrap())
        .await
        .unwrap();
    let expected = whole.send(question).await.unwrap().clone();
    assert_eq!(sent_evidence(&turn), sent_evidence(&expected));

    // The stored turns are not held; turn 0, loaded, reports its damage.
    let error = resumed.turn(0).unwrap_err();
    assert!(
        matches!(
            error,
            RecordedError::TurnBeforeResume { turn: 0, stored: 3 }
        ),
        "{error}"
    );
    let error = resumed.turn(4).unwrap_err();
    assert!(
        matches!(error, RecordedError::TurnOutOfRange { turn: 4, turns: 4 }),
        "{error}"
    );
    let error = resumed
        .rerun_turn(1, RerunOptions::ignore(["social-sentiment"]))
        .await
        .unwrap_err();
    assert!(
        matches!(error, RecordedError::TurnBeforeResume { turn: 1, .. }),
        "{error}"
    );
    let error = builder()
        .load_turn(TurnAt::Number(cid.clone(), 0))
        .await
        .unwrap_err();
    assert!(
        matches!(&error, RecordedError::NotRecorded { problem, .. }
            if problem.contains("has no request")),
        "{error}"
    );

    // The new turn re-runs on the resumed chat, and loads back as turn 3;
    // resumed again, the chat goes on with turn 4.
    let rerun = resumed
        .rerun_turn(
            3,
            RerunOptions::ignore(["social-sentiment"]).comparator(decision_changed),
        )
        .await
        .unwrap();
    assert_eq!(rerun.turn_node, turn.node());
    let loaded = builder()
        .load_turn(TurnAt::Reply(turn.node()))
        .await
        .unwrap();
    assert_eq!((loaded.index(), loaded.turns()), (3, 4));
    let mut again = builder().resume(&cid).await.unwrap();
    let next = again.send("How much should we allocate?").await.unwrap();
    assert_eq!(next.index(), 4);
    let error = builder()
        .resume(&skein_store::ConversationId("nope".into()))
        .await
        .unwrap_err();
    assert!(
        error.to_string().contains("no conversation nope"),
        "{error}"
    );
    let error = advisor::builder(advisor::model())
        .resume(&cid)
        .await
        .unwrap_err();
    assert!(matches!(error, RecordedError::NoStore(_)), "{error}");
}

#[tokio::test]
async fn loading_a_turn_says_which_turn_is_missing() {
    let error = advisor::builder(advisor::model())
        .load_turn(TurnAt::Number(skein_store::ConversationId::random(), 0))
        .await
        .unwrap_err();
    assert!(matches!(error, RecordedError::NoStore(_)), "{error}");
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("db")).unwrap();
    let mut chat = advisor::builder(advisor::model())
        .store(store.clone())
        .build()
        .await
        .unwrap();
    record_three(&mut chat).await;
    let cid = chat.conversation().unwrap().clone();
    let builder = || advisor::builder(advisor::model()).store(store.clone());
    let error = builder()
        .load_turn(TurnAt::Number(cid.clone(), 3))
        .await
        .unwrap_err();
    assert!(
        matches!(error, RecordedError::TurnOutOfRange { turn: 3, turns: 3 }),
        "{error}"
    );
    let request = chat.turn(1).unwrap().request().head_id().unwrap();
    let error = builder()
        .load_turn(TurnAt::Reply(request))
        .await
        .unwrap_err();
    assert!(matches!(error, RecordedError::NotATurn(node) if node == request));
    let error = builder()
        .load_turn(TurnAt::Number(
            skein_store::ConversationId("nope".into()),
            0,
        ))
        .await
        .unwrap_err();
    assert!(
        error.to_string().contains("no conversation nope"),
        "{error}"
    );
}

/// Two processes resume one recorded conversation and each sends a turn:
/// the first extends it, the second (whose start the head left) lands in a
/// branch there by the landing rule, its origin the conversation and the
/// node it started from, and the chat goes on in that branch. Nothing is
/// lost, and the database verifies.
#[tokio::test]
async fn a_recorded_turn_that_loses_a_race_lands_in_a_branch_and_goes_on_there() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("db")).unwrap();
    let builder = || advisor::builder(advisor::model()).store(store.clone());
    let mut first = builder().build().await.unwrap();
    record_three(&mut first).await;
    let cid = first.conversation().unwrap().clone();
    let start = first.history().head_id();
    let mut one = builder().resume(&cid).await.unwrap();
    let mut two = builder().resume(&cid).await.unwrap();

    let won = one.send("Should we BUY?").await.unwrap().clone();
    let lost = two.send("Should we HOLD?").await.unwrap().clone();
    assert_eq!(store.conversation(&cid).unwrap().head, Some(won.node()));
    assert_eq!(one.conversation(), Some(&cid));
    let branch = two.conversation().unwrap().clone();
    assert_ne!(branch, cid, "the loser is a conversation of its own");
    let stored = store.conversation(&branch).unwrap();
    assert_eq!(stored.head, Some(lost.node()));
    let origin = stored.origin.expect("the branch names where it started");
    assert_eq!(origin.conversation.as_ref(), Some(&cid));
    assert_eq!(origin.node, start);
    assert_eq!(two.origin(), Some(&origin));

    // The chat goes on in its branch, and the branch loads as a chat.
    let next = two.send("How much?").await.unwrap().clone();
    assert_eq!(store.conversation(&branch).unwrap().head, Some(next.node()));
    assert_eq!(store.conversation(&cid).unwrap().head, Some(won.node()));
    let loaded = builder().resume(&branch).await.unwrap();
    assert_eq!(loaded.history().head_id(), Some(next.node()));
    let report = store.verify().unwrap();
    assert!(report.is_ok(), "{:?}", report.problems);
}
