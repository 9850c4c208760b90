//! Reasoning about turns and re-running them without sources.

use crate::common::{Counting, Recording, advisor, advisor_chat, decision_changed};
use skein_core::{Annotation, BoxFuture, Message, Part, Relation, Role, Thread};
use skein_recorded::{
    HookContext, HookError, Purpose, ReasonOptions, RecordedChat, RecordedError, RerunOptions,
    Source, SourceHook, Verdict,
};
use std::sync::{Arc, Mutex};

#[tokio::test]
async fn reason_ranks_the_source_the_reply_echoes_first_and_is_memoised() {
    let counting = Counting::new();
    let mut chat = advisor::builder(advisor::model())
        .embedder(counting.clone())
        .build()
        .await
        .unwrap();
    crate::common::record_three(&mut chat).await;
    let report = chat.reason(1, ReasonOptions::new()).await.unwrap();
    assert!(report.is_correlational());
    assert_eq!(report.turn, 1);
    assert_eq!(report.node, chat.turn(1).unwrap().node());
    assert_eq!(report.removable()[0], "social-sentiment");
    assert_eq!(report.suspects.len(), 3);
    let top = &report.suspects[0];
    // No tool loop: score = 0.8·FA + 0.2·DEPTH, DEPTH = 1.
    assert_eq!(top.signals.avg, None);
    assert_eq!(top.signals.depth, 1.0);
    assert!((top.score - (0.8 * top.signals.fa + 0.2)).abs() < 1e-6);
    assert!(report.render().contains("correlational"));
    assert_eq!(counting.calls(), 1);

    let again = chat.reason(1, ReasonOptions::new()).await.unwrap();
    assert!(Arc::ptr_eq(&report, &again), "memoised");
    assert_eq!(counting.calls(), 1, "no embedding for a memoised report");
    let fresh = chat.reason(1, ReasonOptions::new().fresh()).await.unwrap();
    assert!(!Arc::ptr_eq(&report, &fresh));
    assert_eq!(counting.calls(), 2);
    assert_eq!(fresh.removable(), report.removable());
    assert!(matches!(
        chat.reason(3, ReasonOptions::new()).await,
        Err(RecordedError::TurnOutOfRange { turn: 3, turns: 3 })
    ));
}

#[tokio::test]
async fn reason_without_an_embedder_says_how_to_give_one() {
    let mut chat = RecordedChat::builder(crate::common::engine(advisor::model()), "advisor")
        .build()
        .await
        .unwrap();
    chat.send("How is the position looking?").await.unwrap();
    let error = chat.reason(0, ReasonOptions::new()).await.unwrap_err();
    assert!(matches!(error, RecordedError::NoEmbedder(_)));
    assert!(
        error.to_string().contains("RecordedChatBuilder::embedder"),
        "{error}"
    );
}

/// The recorded messages with the parts tagged `id` removed.
fn without(thread: &Thread, annotations: &skein_core::Annotations, id: &str) -> Vec<Message> {
    thread
        .nodes()
        .iter()
        .map(|node| {
            let parts: Vec<Part> = node
                .message()
                .parts
                .iter()
                .enumerate()
                .filter(|(i, _)| annotations.source_of(node.id(), *i as u32) != Some(id))
                .map(|(_, p)| p.clone())
                .collect();
            Message::new(node.message().role, parts)
        })
        .collect()
}

#[tokio::test]
async fn probes_replay_the_recorded_request_minus_the_removed_parts_byte_for_byte() {
    let model = Recording::new(advisor::model());
    let mut chat = advisor_chat(model.clone()).await;
    model.take();
    let rerun = chat
        .rerun_turn(
            1,
            RerunOptions::ignore(["social-sentiment"])
                .samples(2)
                .check_baseline(),
        )
        .await
        .unwrap();
    let received = model.take();
    assert_eq!(received.len(), 4, "2 probes then 2 baselines");
    let turn = chat.turn(1).unwrap();
    let expected = Thread::from_messages(without(
        turn.request(),
        turn.annotations(),
        "social-sentiment",
    ));
    for (i, probe) in received[..2].iter().enumerate() {
        assert_eq!(
            probe.thread, expected,
            "probe {i} is the recorded request minus the part"
        );
        assert_eq!(
            probe.options.seed,
            Some(i as u64),
            "samples use distinct seeds"
        );
        // Every other tag survives, re-keyed onto the new system node.
        let system = probe.thread.nodes()[0].id();
        assert_eq!(probe.annotations.source_of(system, 1), Some("fundamentals"));
        assert_eq!(probe.annotations.source_of(system, 2), Some("analyst-note"));
        assert!(
            !probe
                .annotations
                .iter()
                .any(|(_, tags)| tags.contains(&Annotation::Source("social-sentiment".into())))
        );
        assert_eq!(probe.thread, rerun.samples[i].request);
    }
    for baseline in &received[2..] {
        assert_eq!(
            &baseline.thread,
            turn.request(),
            "the baseline is the recorded request"
        );
        assert_eq!(&baseline.annotations, turn.annotations());
    }
    // Only the system text changed, so no node of the probe equals the
    // recorded one past the root; the user messages are byte-identical.
    let (recorded, probe) = (turn.request().messages(), received[0].thread.messages());
    assert_eq!(recorded[1..], probe[1..]);
}

#[tokio::test]
async fn a_verdict_only_with_a_baseline() {
    let mut chat = advisor_chat(advisor::model()).await;
    let rerun = chat
        .rerun_turn(1, RerunOptions::ignore(["social-sentiment"]))
        .await
        .unwrap();
    assert_eq!(rerun.samples.len(), 3, "three samples by default");
    assert!(rerun.what_changed.answer_flipped);
    assert_eq!(rerun.what_changed.flips, 3);
    assert!(rerun.baseline.is_none());
    assert_eq!(rerun.verdict, None);
    assert!(rerun.render().contains("no verdict"));
    let similarity = rerun.what_changed.similarity.unwrap();
    assert!(
        similarity.max < 0.8,
        "the default comparator: cosine below 0.8"
    );
    assert!(
        rerun
            .what_changed
            .summary
            .contains("3 of 3 samples changed")
    );

    // A source that does not matter: not confirmed.
    let rerun = chat
        .rerun_turn(1, RerunOptions::ignore(["analyst-note"]).check_baseline())
        .await
        .unwrap();
    assert!(rerun.samples.iter().all(|s| s.answer.starts_with("BUY")));
    assert_eq!(rerun.what_changed.flips, 0);
    assert_eq!(rerun.verdict, Some(Verdict::NotConfirmed));
}

#[tokio::test]
async fn ignore_is_resolved_against_the_report() {
    let mut chat = advisor_chat(advisor::model()).await;
    let error = chat
        .rerun_turn(1, RerunOptions::ignore(["weather"]))
        .await
        .unwrap_err();
    match &error {
        RecordedError::UnknownSource { id, removable, .. } => {
            assert_eq!(id, "weather");
            assert_eq!(removable[0], "social-sentiment");
        }
        other => panic!("expected an unknown source, got {other}"),
    }
    assert!(
        error
            .to_string()
            .contains("removable sources: social-sentiment"),
        "{error}"
    );

    let error = chat
        .rerun_turn(1, RerunOptions::ignore(Vec::<String>::new()))
        .await
        .unwrap_err();
    assert!(
        matches!(error, RecordedError::NothingToIgnore { turn: 1, .. }),
        "{error}"
    );

    let error = chat
        .rerun_turn(1, RerunOptions::ignore(["social-sentiment"]).samples(1))
        .await
        .unwrap_err();
    assert!(matches!(error, RecordedError::TooFewSamples(1)));

    // A cap of one makes the second-ranked source unremovable until the
    // turn is reasoned about again with a wider cap.
    chat.reason(1, ReasonOptions::new().max_suspects(1).fresh())
        .await
        .unwrap();
    let second = chat.report(1).unwrap().beyond_cap[0].id.clone();
    let error = chat
        .rerun_turn(1, RerunOptions::ignore([second.clone()]))
        .await
        .unwrap_err();
    match &error {
        RecordedError::BeyondCap { rank, cap, .. } => assert_eq!((*rank, *cap), (2, 1)),
        other => panic!("expected a cap error, got {other}"),
    }
    assert!(error.to_string().contains("max_suspects(2)"), "{error}");
    chat.reason(1, ReasonOptions::new().max_suspects(2).fresh())
        .await
        .unwrap();
    chat.rerun_turn(1, RerunOptions::ignore([second]))
        .await
        .unwrap();
}

#[tokio::test]
async fn a_custom_comparator_decides_what_changed() {
    let mut chat = advisor_chat(advisor::model()).await;
    let never = chat
        .rerun_turn(
            1,
            RerunOptions::ignore(["social-sentiment"])
                .comparator(|_, _| false)
                .check_baseline(),
        )
        .await
        .unwrap();
    assert_eq!(never.what_changed.flips, 0);
    assert_eq!(never.verdict, Some(Verdict::NotConfirmed));
    let decided = chat
        .rerun_turn(
            1,
            RerunOptions::ignore(["social-sentiment"])
                .comparator(decision_changed)
                .check_baseline(),
        )
        .await
        .unwrap();
    assert_eq!(decided.verdict, Some(Verdict::Confirmed));
}

/// A memory store the application writes after each turn: the hook
/// recalls what is in it now, so a replay can see more than the turn saw.
struct Memory {
    notes: Mutex<Vec<String>>,
    calls: Mutex<Vec<(Purpose, Vec<String>)>>,
}

impl SourceHook for Memory {
    fn sources<'a>(
        &'a self,
        context: HookContext<'a>,
    ) -> BoxFuture<'a, Result<Vec<Source>, HookError>> {
        self.calls
            .lock()
            .unwrap()
            .push((context.purpose, context.ablation.iter().cloned().collect()));
        let notes = self.notes.lock().unwrap().clone();
        Box::pin(async move {
            Ok(vec![Source::memory(
                "memory",
                format!(
                    "memory: {}",
                    if notes.is_empty() {
                        "nothing yet".into()
                    } else {
                        notes.join("; ")
                    }
                ),
            )])
        })
    }
}

const MEMORY: &str = r#"
[[rules]]
system_contains = "prefers bonds"
reply = "BONDS: the client prefers bonds."

[[rules]]
reply = "CASH: nothing is known about the client."
"#;

#[tokio::test]
async fn a_hook_source_that_changed_since_the_turn_makes_the_baseline_unstable() {
    let memory = Arc::new(Memory {
        notes: Mutex::new(Vec::new()),
        calls: Mutex::new(Vec::new()),
    });
    let model = Recording::scripted(MEMORY);
    let mut chat = RecordedChat::builder(crate::common::engine(model.clone()), "advisor")
        .system("Advise.")
        .source(Source::fact("fundamentals", "fundamentals: flat"))
        .hook(memory.clone())
        .embedder(Arc::new(skein_recorded::LexicalEmbedder::default()))
        .build()
        .await
        .unwrap();
    let turn = chat.send("What should I hold?").await.unwrap().clone();
    assert!(turn.text().starts_with("CASH"));
    assert!(turn.sources().iter().any(|s| s.id == "memory" && s.hook));
    // A later turn writes to the memory store.
    memory
        .notes
        .lock()
        .unwrap()
        .push("client prefers bonds".into());

    let rerun = chat
        .rerun_turn(0, RerunOptions::ignore(["fundamentals"]).check_baseline())
        .await
        .unwrap();
    let baseline = rerun.baseline.as_ref().unwrap();
    assert!(
        !baseline.stable,
        "the baseline recalled a memory the turn never saw"
    );
    assert_eq!(baseline.changed, 3);
    assert_eq!(rerun.verdict, Some(Verdict::Inconclusive));
    // The hook ran for the live turn, each probe and each baseline, and
    // was told what was removed.
    let calls = memory.calls.lock().unwrap().clone();
    assert_eq!(calls.len(), 7);
    assert_eq!(calls[0], (Purpose::Live, vec![]));
    assert_eq!(calls[1], (Purpose::Probe, vec!["fundamentals".to_string()]));
    assert_eq!(calls[6], (Purpose::Baseline, vec![]));
    // The hook's part sits where live turns put it: last in the system message.
    let probe = &rerun.samples[0].request;
    let system = probe.nodes()[0];
    assert_eq!(system.message().role, Role::System);
    assert_eq!(
        system.message().parts.last().unwrap().as_text(),
        Some("memory: client prefers bonds")
    );

    // Removing the memory itself, with the memory unchanged: stable.
    memory.notes.lock().unwrap().clear();
    let rerun = chat
        .rerun_turn(0, RerunOptions::ignore(["memory"]).check_baseline())
        .await
        .unwrap();
    assert!(rerun.baseline.as_ref().unwrap().stable);
    assert_eq!(rerun.verdict, Some(Verdict::NotConfirmed));
    assert!(
        rerun.samples[0].request.messages()[0]
            .parts
            .iter()
            .all(|p| !p.as_text().unwrap_or("").starts_with("memory"))
    );
}

#[tokio::test]
async fn an_unknown_turn_cannot_be_rerun() {
    let mut chat = advisor_chat(advisor::model()).await;
    assert!(matches!(
        chat.rerun_turn(7, RerunOptions::ignore(["social-sentiment"]))
            .await,
        Err(RecordedError::TurnOutOfRange { turn: 7, .. })
    ));
}

/// An embedder whose vectors the test chooses, text by text; a text it was
/// not given is an error naming it.
struct Table {
    vectors: Vec<(&'static str, Vec<f32>)>,
    seen: Mutex<Vec<String>>,
}

impl skein_recorded::Embedder for Table {
    fn id(&self) -> &str {
        "table"
    }

    fn embed<'a>(
        &'a self,
        texts: &'a [String],
    ) -> BoxFuture<'a, Result<Vec<Vec<f32>>, skein_recorded::EmbedError>> {
        self.seen.lock().unwrap().extend(texts.iter().cloned());
        let vectors = texts
            .iter()
            .map(|text| {
                self.vectors
                    .iter()
                    .find(|(known, _)| known == text)
                    .map(|(_, vector)| vector.clone())
                    .ok_or_else(|| {
                        skein_recorded::EmbedError::Failed(format!("no vector for {text:?}").into())
                    })
            })
            .collect();
        Box::pin(async move { vectors })
    }
}

/// A turn with a tool step: the four-signal branch, checked against scores
/// computed by hand from vectors chosen for round cosines.
#[tokio::test]
async fn reason_scores_a_turn_with_tool_steps_on_all_four_signals() {
    #[derive(serde::Deserialize, schemars::JsonSchema)]
    struct Nothing {}
    const SCRIPT: &str = r#"
[[rules]]
last_role = "tool"
reply = "HOLD"

[[rules]]
tool_offered = "quote"
last_role = "user"
tool_calls = [{ name = "quote", arguments = '{}' }]
"#;
    let quote = skein_engine::tool_fn("quote", "Latest quote", |_: Nothing| async {
        Ok::<_, std::convert::Infallible>("price 10".to_string())
    });
    let table = Arc::new(Table {
        vectors: vec![
            // The reply, and the two intermediate outputs (the call, its
            // result): three orthogonal axes.
            ("HOLD", vec![1.0, 0.0, 0.0]),
            ("quote({})", vec![0.0, 1.0, 0.0]),
            ("price 10", vec![0.0, 0.0, 1.0]),
            // The tool as a source: its name and description, its call and
            // its result. It looks like `beta` on FA, AVG and PERSIST.
            (
                "quote: Latest quote\nquote({})\nprice 10",
                vec![0.6, 0.0, 0.8],
            ),
            ("alpha", vec![1.0, 0.0, 0.0]),
            ("beta", vec![0.6, 0.8, 0.0]),
        ],
        seen: Mutex::new(Vec::new()),
    });
    let mut chat = RecordedChat::builder(
        crate::common::engine(Arc::new(
            skein_providers::Scripted::from_toml_str(SCRIPT).unwrap(),
        )),
        "advisor",
    )
    .source(Source::fact("alpha", "alpha"))
    .source(Source::fact("beta", "beta"))
    .tool(quote)
    .embedder(table.clone())
    .build()
    .await
    .unwrap();
    let turn = chat.send("Should we hold?").await.unwrap();
    assert_eq!(turn.text(), "HOLD");
    assert_eq!(turn.intermediate_texts(), ["quote({})", "price 10"]);

    let report = chat.reason(0, ReasonOptions::new()).await.unwrap();
    assert_eq!(
        *table.seen.lock().unwrap(),
        [
            "HOLD",
            "quote({})",
            "price 10",
            "quote: Latest quote\nquote({})\nprice 10",
            "alpha",
            "beta"
        ]
    );
    assert_eq!(report.intermediate_outputs, 2);
    // DEPTH: alpha and beta reached the model with the request, one model
    // call before the final reply: 1 / (1 + 1). The tool's result reached
    // it just before the final call: 1 / (1 + 0).
    //
    // quote: FA 0.6; cosines to the steps 0 and 0.8 → AVG 0.4, PERSIST 1/2;
    //        0.4·0.6 + 0.3·0.4 + 0.2·0.5 + 0.1·1 = 0.56
    // beta:  FA 0.6; cosines 0.8 and 0 → AVG 0.4, PERSIST 1/2;
    //        0.24 + 0.12 + 0.1 + 0.1·0.5 = 0.51
    // alpha: FA 1; cosines 0 and 0 → AVG 0, PERSIST 0;
    //        0.4 + 0 + 0 + 0.05 = 0.45
    // quote and beta differ only in DEPTH, which ranks the tool first.
    let expected = [
        ("quote", 0.56, 0.6, 0.4, 0.5, 1.0),
        ("beta", 0.51, 0.6, 0.4, 0.5, 0.5),
        ("alpha", 0.45, 1.0, 0.0, 0.0, 0.5),
    ];
    assert_eq!(report.removable(), ["quote", "beta", "alpha"]);
    for (suspect, (id, score, fa, avg, persist, depth)) in report.suspects.iter().zip(expected) {
        let close = |a: f32, b: f32| (a - b).abs() < 1e-6;
        assert_eq!(suspect.id, id);
        assert!(close(suspect.score, score), "{id}: {suspect:?}");
        assert!(close(suspect.signals.fa, fa), "{id}: {suspect:?}");
        assert!(
            close(suspect.signals.avg.unwrap(), avg),
            "{id}: {suspect:?}"
        );
        assert!(
            close(suspect.signals.persist.unwrap(), persist),
            "{id}: {suspect:?}"
        );
        assert!(close(suspect.signals.depth, depth), "{id}: {suspect:?}");
    }
}

/// A provider that counts how many of its calls are in flight at once
/// (each call waits a moment before answering, so calls that run together
/// overlap).
struct Gauge {
    inner: Arc<dyn skein_core::Provider>,
    in_flight: Arc<std::sync::atomic::AtomicUsize>,
    most: Arc<std::sync::atomic::AtomicUsize>,
}

impl skein_core::Provider for Gauge {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn stream(
        &self,
        request: skein_core::ModelRequest,
    ) -> skein_core::BoxStream<'static, Result<skein_core::StreamEvent, skein_core::ProviderError>>
    {
        use futures_util::StreamExt;
        use std::sync::atomic::Ordering;
        let (in_flight, most) = (self.in_flight.clone(), self.most.clone());
        let now = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        most.fetch_max(now, Ordering::SeqCst);
        let inner = self.inner.stream(request);
        let leave = in_flight.clone();
        Box::pin(
            futures_util::stream::once(async {
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            })
            .filter_map(|()| async { None })
            .chain(inner)
            .chain(
                futures_util::stream::once(async move {
                    leave.fetch_sub(1, Ordering::SeqCst);
                })
                .filter_map(|()| async { None }),
            ),
        )
    }
}

/// Samples run as many at once as the backend admits, and give the same
/// results, in the same order, as one at a time.
#[tokio::test]
async fn samples_run_together_up_to_the_backends_capacity_with_the_same_results() {
    use skein_engine::{BackendDef, BackendKind, Catalog, Engine, Profile};
    let mut outcomes = Vec::new();
    for capacity in [1, 3] {
        let gauge = Arc::new(Gauge {
            inner: advisor::model(),
            in_flight: Default::default(),
            most: Default::default(),
        });
        let engine = Engine::builder(
            Catalog::new()
                .backend(BackendDef::new("script", BackendKind::Echo).capacity(capacity))
                .profile(Profile::new("advisor", "script", "advisor-1")),
        )
        .provider("script", gauge.clone())
        .build()
        .unwrap();
        let mut chat = RecordedChat::builder(engine, "advisor")
            .system("You are an investment advisor. Answer BUY or HOLD when asked.")
            .source(Source::fact(
                "social-sentiment",
                "social-sentiment: bullish, retail chatter at a three-month high",
            ))
            .embedder(Arc::new(skein_recorded::LexicalEmbedder::default()))
            .build()
            .await
            .unwrap();
        chat.send("Should we BUY or HOLD this position?")
            .await
            .unwrap();
        gauge.most.store(0, std::sync::atomic::Ordering::SeqCst);
        let result = chat
            .rerun_turn(
                0,
                RerunOptions::ignore(["social-sentiment"])
                    .samples(3)
                    .comparator(decision_changed)
                    .check_baseline(),
            )
            .await
            .unwrap();
        assert_eq!(
            gauge.most.load(std::sync::atomic::Ordering::SeqCst),
            capacity,
            "at most the backend's capacity, and that many when there is work"
        );
        let answers: Vec<String> = result
            .samples
            .iter()
            .chain(&result.baseline.as_ref().unwrap().samples)
            .map(|sample| sample.answer.clone())
            .collect();
        outcomes.push((answers, result.verdict));
    }
    assert_eq!(outcomes[0], outcomes[1]);
}

/// A rerun whose samples fail records no rerun, yet keeps every model call
/// its samples made (the failed probes and the completed baselines) in the
/// conversation's usage, in no turn.
#[tokio::test]
async fn a_failed_rerun_records_nothing_but_keeps_its_samples_runs() {
    const FAILS_WITHOUT_SENTIMENT: &str = r#"
[[rules]]
not_system_contains = "social-sentiment"
error = { kind = "server", message = "overloaded" }

[[rules]]
reply = "BUY: sentiment is bullish."
"#;
    let dir = tempfile::tempdir().unwrap();
    let store = skein_store::Store::open(dir.path().join("db.sqlite")).unwrap();
    let model = Recording::scripted(FAILS_WITHOUT_SENTIMENT);
    let builder = || advisor::builder(model.clone()).store(store.clone());
    let mut chat = builder().build().await.unwrap();
    chat.send("Should we BUY or HOLD?").await.unwrap();
    let id = chat.conversation().unwrap().clone();
    let error = chat
        .rerun_turn(
            0,
            RerunOptions::ignore(["social-sentiment"])
                .samples(2)
                .check_baseline(),
        )
        .await
        .unwrap_err();
    assert!(error.to_string().contains("overloaded"), "{error}");
    assert_eq!(model.count(), 5, "one turn, two probes, two baselines");
    assert!(store.reruns_of_conversation(&id).unwrap().is_empty());
    let runs = store.runs_of_conversation(&id).unwrap();
    assert_eq!(runs.len(), 5, "every sample's call keeps its run");
    let status = |s| runs.iter().filter(|run| run.status == s).count();
    assert_eq!(status(skein_store::RunStatus::Failed), 2);
    let kept = runs
        .iter()
        .filter(|run| {
            run.relations
                .contains(&Relation::Unrecorded("rerun_failed".into()))
        })
        .count();
    assert_eq!(kept, 4, "the probes and the baselines, marked unrecorded");
    let usage = store
        .usage(&skein_store::UsageScope::Conversation(id.clone()))
        .unwrap();
    assert_eq!(usage.runs.len(), 5);
    assert!(store.verify().unwrap().is_ok());
    let loaded = builder().load(&id).await.unwrap();
    assert_eq!(loaded.turns().len(), 1, "the kept samples are no turn");
}

/// A rerun tells the source hook everything removed from a probe: the
/// chat's persistent removals together with the probe's own; baselines
/// see the persistent removals alone. The same after loading the turn
/// back from the store.
#[tokio::test]
async fn a_rerun_gives_the_hook_the_persistent_removals_with_the_probes() {
    let memory = Arc::new(Memory {
        notes: Mutex::new(Vec::new()),
        calls: Mutex::new(Vec::new()),
    });
    let dir = tempfile::tempdir().unwrap();
    let store = skein_store::Store::open(dir.path().join("db.sqlite")).unwrap();
    let model = Recording::scripted(MEMORY);
    let builder = || {
        RecordedChat::builder(crate::common::engine(model.clone()), "advisor")
            .system("Advise.")
            .source(Source::fact("fundamentals", "fundamentals: flat"))
            .source(Source::document("analyst-note", "analyst-note: hold"))
            .hook(memory.clone())
            .embedder(Arc::new(skein_recorded::LexicalEmbedder::default()))
            .store(store.clone())
    };
    let mut chat = builder().removed(["analyst-note"]).build().await.unwrap();
    chat.send("What should I hold?").await.unwrap();
    let persistent = vec!["analyst-note".to_string()];
    let both = vec!["analyst-note".to_string(), "fundamentals".to_string()];
    let seen = |purpose: Purpose| -> Vec<Vec<String>> {
        memory
            .calls
            .lock()
            .unwrap()
            .iter()
            .filter(|(p, _)| *p == purpose)
            .map(|(_, removed)| removed.clone())
            .collect()
    };
    assert_eq!(seen(Purpose::Live), std::slice::from_ref(&persistent));
    let options = || {
        RerunOptions::ignore(["fundamentals"])
            .samples(2)
            .check_baseline()
    };
    let rerun = chat.rerun_turn(0, options()).await.unwrap();
    assert_eq!(rerun.removed, ["fundamentals"]);
    assert_eq!(seen(Purpose::Probe), [both.clone(), both.clone()]);
    assert_eq!(
        seen(Purpose::Baseline),
        [persistent.clone(), persistent.clone()]
    );
    let probe_system = rerun.samples[0].request.messages()[0].joined_text();
    assert!(!probe_system.contains("analyst-note"), "{probe_system}");
    assert!(!probe_system.contains("fundamentals"), "{probe_system}");

    // Loaded back from the store, the turn's removals come with it.
    memory.calls.lock().unwrap().clear();
    let at = skein_recorded::TurnAt::Number(chat.conversation().unwrap().clone(), 0);
    let mut loaded = builder().load_turn(at).await.unwrap();
    assert_eq!(
        loaded.turn().removed().iter().collect::<Vec<_>>(),
        ["analyst-note"]
    );
    loaded.rerun(options()).await.unwrap();
    assert_eq!(seen(Purpose::Probe), [both.clone(), both]);
    assert_eq!(seen(Purpose::Baseline), [persistent.clone(), persistent]);
}

/// The demo's hotel: without the hotel source the answer names another
/// hotel in nearly the same words. The default comparator calls it
/// changed (changed specifics decide), so the verdict is confirmed.
#[tokio::test]
async fn a_rerun_that_changes_a_name_is_changed_by_the_default_comparator() {
    // Below where this lexical embedder puts the two answers (0.75), as
    // MiniLM's 0.82 was below the default 0.8: cosine alone would hold.
    const THRESHOLD: f32 = 0.7;
    const SCRIPT: &str = r#"
[[rules]]
system_contains = "Lutetia"
reply = "Your hotel is called Hotel Lutetia."

[[rules]]
reply = "Your hotel is called the Hotel de la Lumière."
"#;
    let model = Arc::new(skein_providers::Scripted::from_toml_str(SCRIPT).unwrap());
    let mut chat = RecordedChat::builder(crate::common::engine(model), "advisor")
        .system("You are a travel assistant.")
        .source(Source::fact("hotel", "hotel: Hotel Lutetia, Paris"))
        .source(Source::fact("weather", "weather: sunny"))
        .embedder(Arc::new(skein_recorded::LexicalEmbedder::default()))
        .build()
        .await
        .unwrap();
    chat.send("What is the name of my hotel?").await.unwrap();
    let rerun = chat
        .rerun_turn(
            0,
            RerunOptions::ignore(["hotel"])
                .samples(2)
                .threshold(THRESHOLD)
                .check_baseline(),
        )
        .await
        .unwrap();
    assert_eq!(
        rerun.verdict,
        Some(Verdict::Confirmed),
        "{}",
        rerun.render()
    );
    for sample in &rerun.samples {
        assert!(sample.changed);
        assert_eq!(sample.decided_by.as_deref(), Some("specifics"));
        let why = sample.why.as_deref().unwrap();
        assert!(why.contains("lutetia") && why.contains("lumière"), "{why}");
    }
    // By cosine similarity alone it would have held.
    let similarity = rerun.samples[0].similarity.unwrap();
    assert!(similarity >= THRESHOLD, "{similarity}");
    let baseline = rerun.baseline.as_ref().unwrap();
    assert!(baseline.stable);
    assert_eq!(
        baseline.samples[0].decided_by.as_deref(),
        Some("specifics+embedding")
    );
    assert!(
        rerun
            .render()
            .contains("(changed: only in the original: lutetia")
    );
}
