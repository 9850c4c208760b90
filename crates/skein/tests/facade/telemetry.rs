//! OpenTelemetry export to the test kit's in-process OTLP receiver: a
//! tool-loop turn is a `turn` span with a child per model call and per tool
//! call; a fork's first turn links to the span of the run it starts from;
//! a rerun and a replayed turn are spans over their calls, linked to the
//! turn they re-run; the GenAI token attributes add up to the recorded usage, cached tokens
//! inside the input and never on top of it; message content is sent only
//! when asked for; a collector that refuses every export fails no turn.

use crate::support::*;
#[path = "../../../skein-recorded/examples/advisor.rs"]
#[allow(dead_code, reason = "the example's own main is not run here")]
mod advisor;
use skein::Store;
use skein::config::OtelProtocol;
use skein::telemetry::{Settings, install};
use skein_testkit::otlp::{OtlpReceiver, Span, any_value, attribute, int, string};
use std::collections::HashMap;
use std::time::Duration;

fn settings(url: &str, content: bool) -> Settings {
    Settings {
        endpoint: Some(url.to_string()),
        protocol: OtelProtocol::HttpProtobuf,
        headers: HashMap::new(),
        content,
        service_name: "skein-test".to_string(),
    }
}

/// The spans of the traces that hold a span of `conversation`: other
/// tests of this binary run turns meanwhile, and their spans arrive too.
fn of_conversation(spans: &[Span], conversation: &str) -> Vec<Span> {
    let traces: Vec<&Vec<u8>> = spans
        .iter()
        .filter(|span| string(span, "skein.conversation.id").as_deref() == Some(conversation))
        .map(|span| &span.trace_id)
        .collect();
    spans
        .iter()
        .filter(|span| traces.contains(&&span.trace_id))
        .cloned()
        .collect()
}

fn named<'s>(spans: &'s [Span], prefix: &str) -> Vec<&'s Span> {
    spans
        .iter()
        .filter(|span| span.name.starts_with(prefix))
        .collect()
}

/// Export is process-wide, so the whole story runs in one test: metadata
/// first, then content, then a collector that refuses everything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn turns_and_forks_export_linked_spans_that_add_up_to_the_recorded_usage() {
    let receiver = OtlpReceiver::start().await;
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("skein.db")).unwrap();
    let fixture = Fixture::new();
    let telemetry = install(&settings(&receiver.url, false)).unwrap();

    let conversation = fixture.model().conversation().store(&store).build();
    let chain = conversation
        .chain("please add")
        .tools([fixture.tool("add")])
        .send()
        .await
        .unwrap();
    assert_eq!(chain.responses().len(), 2);
    let id = conversation.id().to_string();
    let spans = receiver.wait_for(4, Duration::from_secs(10)).await;
    let mut turn = of_conversation(&spans, &id);
    for _ in 0..100 {
        if turn.len() >= 4 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        turn = of_conversation(&receiver.spans(), &id);
    }
    assert_eq!(turn.len(), 4, "turn, two calls, one tool: {turn:#?}");
    let root = named(&turn, "turn")[0];
    assert!(root.parent_span_id.is_empty());
    let calls = named(&turn, "chat ");
    let tools = named(&turn, "execute_tool ");
    assert_eq!((calls.len(), tools.len()), (2, 1));
    for child in calls.iter().chain(&tools) {
        assert_eq!(child.parent_span_id, root.span_id);
    }
    assert_eq!(string(tools[0], "gen_ai.tool.name").as_deref(), Some("add"));
    assert_eq!(
        string(tools[0], "gen_ai.operation.name").as_deref(),
        Some("execute_tool")
    );

    // Each call's attributes are its run record's, and add up to it.
    let runs = store.runs_of_conversation(&conversation.id()).unwrap();
    assert_eq!(runs.len(), 2);
    let mut input = 0;
    for run in &runs {
        let span = calls
            .iter()
            .find(|span| string(span, "skein.run.id").as_deref() == Some(run.id.as_str()))
            .expect("a span per run");
        assert_eq!(
            string(span, "gen_ai.operation.name").as_deref(),
            Some("chat")
        );
        assert_eq!(
            string(span, "gen_ai.request.model").as_deref(),
            Some(run.model.as_str())
        );
        assert_eq!(
            string(span, "skein.node.id"),
            run.output_head.map(|node| node.to_hex())
        );
        assert_eq!(
            int(span, "gen_ai.usage.input_tokens").map(|n| n as u64),
            run.usage.input_tokens
        );
        assert_eq!(
            int(span, "gen_ai.usage.output_tokens").map(|n| n as u64),
            run.usage.output_tokens
        );
        input += int(span, "gen_ai.usage.input_tokens").unwrap_or(0);
        assert!(
            string(span, "gen_ai.output.messages").is_none(),
            "no content by default"
        );
    }
    assert_eq!(int(root, "skein.usage.input_tokens"), Some(input));
    assert!(
        int(root, "gen_ai.usage.input_tokens").is_none(),
        "totals are not GenAI usage"
    );
    let reasons = format!("{:?}", calls[0].attributes);
    assert!(
        reasons.contains("gen_ai.response.finish_reasons"),
        "{reasons}"
    );

    // A fork's first turn links to the span of the run it starts from.
    let first = chain.last().clone();
    let fork = first.fork().prompt("branch").send().await.unwrap();
    let fork_id = fork.conversation().id().to_string();
    let mut forked = Vec::new();
    for _ in 0..200 {
        forked = of_conversation(&receiver.spans(), &fork_id);
        if forked.len() >= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let fork_turn = named(&forked, "turn")[0];
    assert_ne!(fork_turn.trace_id, root.trace_id, "a turn is a trace");
    assert_eq!(fork_turn.links.len(), 1, "{fork_turn:#?}");
    let link = &fork_turn.links[0];
    let origin = calls
        .iter()
        .find(|span| string(span, "skein.node.id") == Some(first.head().to_hex()))
        .unwrap();
    assert_eq!(
        (&link.trace_id, &link.span_id),
        (&origin.trace_id, &origin.span_id)
    );

    // A rerun is a span over its sample and baseline runs, linked to the
    // span of the run that produced the turn it re-runs.
    let advised = advisor::run(advisor::model(), Some(store.clone()))
        .await
        .unwrap();
    let rerun = &advised.rerun;
    let is_rerun = |span: &Span| {
        span.name == "rerun" && string(span, "skein.rerun.id") == Some(rerun.id.to_string())
    };
    let mut spans = Vec::new();
    for _ in 0..200 {
        spans = receiver.spans();
        if spans.iter().any(is_rerun) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let rerun_span = spans
        .iter()
        .find(|span| is_rerun(span))
        .expect("the rerun's span")
        .clone();
    let mut children = Vec::new();
    for _ in 0..100 {
        children = receiver
            .spans()
            .into_iter()
            .filter(|span| span.parent_span_id == rerun_span.span_id)
            .collect();
        if children.len() >= 6 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(children.len(), 6, "three samples and three baselines");
    let turn_run = &store.runs_producing(rerun.turn_node).unwrap()[0];
    assert_eq!(rerun_span.links.len(), 1);
    assert_eq!(
        rerun_span.links[0].span_id,
        skein::conversation::telemetry::run_span_id(&turn_run.id).to_bytes()
    );
    let reran = receiver
        .spans()
        .into_iter()
        .find(|span| string(span, "skein.run.id") == Some(turn_run.id.to_string()))
        .expect("the re-run turn's call was exported too");
    assert_eq!(rerun_span.links[0].trace_id, reran.trace_id);

    // A replayed turn is a `replay` span over its model and tool calls,
    // linked to the span of the run that produced the original turn.
    use skein::recorded::replay::{ReplayPlan, Replayer, Selection};
    let replayer = Replayer::new(&store, fixture.model());
    let mut plan = ReplayPlan::new("fixture");
    plan.change.system = Some("Be brief.".into());
    let replay = replayer
        .start(
            &Selection::new().conversation(conversation.id().clone()),
            &plan,
        )
        .await
        .unwrap();
    replayer.run(&replay, |_| {}).await.unwrap();
    let replayed = &store.replay_turns(&replay, None, 10).unwrap()[0];
    let is_replay = |span: &Span| {
        span.name == "replay" && string(span, "skein.replay.id") == Some(replay.to_string())
    };
    let mut spans = Vec::new();
    for _ in 0..200 {
        spans = receiver.spans();
        if spans.iter().any(is_replay) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let replay_span = spans
        .iter()
        .find(|span| is_replay(span))
        .expect("the replayed turn's span")
        .clone();
    assert_eq!(int(&replay_span, "skein.replay.seq"), Some(0));
    assert_eq!(
        string(&replay_span, "skein.replay.turn_node"),
        Some(replayed.turn_node.to_hex())
    );
    assert_eq!(
        string(&replay_span, "skein.replay.result").as_deref(),
        Some(match replayed.decision.as_deref() {
            Some(decision) => decision,
            None => replayed.status.as_str(),
        })
    );
    let mut calls = Vec::new();
    for _ in 0..100 {
        calls = receiver
            .spans()
            .into_iter()
            .filter(|span| span.parent_span_id == replay_span.span_id)
            .filter(|span| span.name.starts_with("chat "))
            .collect();
        if calls.len() >= replayed.runs.len() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut call_runs: Vec<String> = calls
        .iter()
        .map(|span| string(span, "skein.run.id").unwrap())
        .collect();
    call_runs.sort();
    let mut replay_runs: Vec<String> = replayed.runs.iter().map(|r| r.to_string()).collect();
    replay_runs.sort();
    assert_eq!(call_runs, replay_runs, "a child per replayed model call");
    assert!(
        calls
            .iter()
            .all(|span| string(span, "skein.replay.id") == Some(replay.to_string()))
    );
    let original = &store.runs_producing(replayed.turn_node).unwrap()[0];
    assert_eq!(replay_span.links.len(), 1);
    assert_eq!(
        replay_span.links[0].span_id,
        skein::conversation::telemetry::run_span_id(&original.id).to_bytes()
    );
    drop(telemetry);

    // With content asked for, the messages travel too.
    let telemetry = install(&settings(&receiver.url, true)).unwrap();
    let said = conversation.prompt("tell me").send().await.unwrap();
    let mut content = Vec::new();
    for _ in 0..200 {
        content = of_conversation(&receiver.spans(), &id)
            .into_iter()
            .filter(|span| string(span, "skein.node.id") == Some(said.head().to_hex()))
            .filter(|span| span.name.starts_with("chat "))
            .collect();
        if !content.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let output = string(&content[0], "gen_ai.output.messages").expect("content when asked");
    assert!(output.contains("you said: tell me"), "{output}");
    assert!(
        string(&content[0], "gen_ai.input.messages")
            .unwrap()
            .contains("tell me")
    );
    drop(telemetry);

    // A collector that refuses everything fails no turn, and the turn is stored.
    let down = OtlpReceiver::failing().await;
    let telemetry = install(&settings(&down.url, false)).unwrap();
    for n in 0..20 {
        conversation
            .prompt(format!("still here {n}"))
            .send()
            .await
            .unwrap();
    }
    skein::telemetry::flush(&telemetry);
    assert!(down.requests() > 0, "the exporter tried");
    assert_eq!(
        store
            .runs_of_conversation(&conversation.id())
            .unwrap()
            .len(),
        23
    );
    drop(telemetry);

    // Over gRPC (tonic) to a gRPC receiver, the same spans arrive.
    let grpc = OtlpReceiver::start_grpc().await;
    let telemetry = install(&Settings {
        protocol: OtelProtocol::Grpc,
        ..settings(&grpc.url, false)
    })
    .unwrap();
    let over_grpc = conversation.prompt("over grpc").send().await.unwrap();
    let mut sent = Vec::new();
    for _ in 0..200 {
        sent = of_conversation(&grpc.spans(), &id)
            .into_iter()
            .filter(|span| string(span, "skein.node.id") == Some(over_grpc.head().to_hex()))
            .collect();
        if !sent.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        sent.iter().any(|span| span.name.starts_with("chat ")),
        "{sent:#?}"
    );

    // A coordinator sequence is a `sequence` span over its continuations,
    // linked to the span of the run it started from.
    let model = fixture.model();
    let engine = model.engine().clone();
    let start = engine
        .run(
            model
                .bind(skein::engine::Request::messages([skein::Message::user(
                    "begin",
                )]))
                .capture(),
        )
        .await
        .unwrap();
    let coordinator = engine.coordinator(start.exchange.as_ref().unwrap(), 2);
    let sequence = coordinator.sequence().to_string();
    let again = model.clone();
    let outcome = coordinator
        .run(move |turn, _cancel| {
            let next = if turn.turns_remaining() > 0 {
                skein::engine::Next::Continue(again.bind(skein::engine::Request::messages([
                    skein::Message::user("again"),
                ])))
            } else {
                skein::engine::Next::Stop
            };
            Box::pin(async move { Ok(next) })
        })
        .await
        .unwrap();
    assert_eq!(outcome, skein::engine::Outcome::Stopped);
    let is_sequence = |span: &Span| {
        span.name == "sequence" && string(span, "skein.sequence.id") == Some(sequence.clone())
    };
    let mut spans = Vec::new();
    for _ in 0..200 {
        spans = grpc.spans();
        if spans.iter().any(is_sequence) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let sequence_span = spans
        .iter()
        .find(|span| is_sequence(span))
        .expect("the sequence's span")
        .clone();
    assert!(sequence_span.parent_span_id.is_empty());
    let calls: Vec<Span> = grpc
        .wait_for(spans.len(), Duration::from_secs(1))
        .await
        .into_iter()
        .filter(|span| span.parent_span_id == sequence_span.span_id)
        .collect();
    assert_eq!(calls.len(), 2, "two continuations: {calls:#?}");
    for call in &calls {
        assert!(call.name.starts_with("chat "), "{}", call.name);
        assert_eq!(string(call, "skein.sequence.id"), Some(sequence.clone()));
        assert_eq!(call.trace_id, sequence_span.trace_id);
    }
    assert_eq!(sequence_span.links.len(), 1);
    assert_eq!(
        sequence_span.links[0].span_id,
        skein::conversation::telemetry::run_span_id(&start.run).to_bytes()
    );
    assert_eq!(
        int(&sequence_span, "skein.usage.output_tokens"),
        calls
            .iter()
            .map(|call| int(call, "gen_ai.usage.output_tokens"))
            .sum::<Option<i64>>()
    );

    // A sequence whose continuation's call fails has that call as a child
    // span too, marked as an error.
    let coordinator = engine.coordinator(start.exchange.as_ref().unwrap(), 1);
    let failing = coordinator.sequence().to_string();
    let again = model.clone();
    let outcome = coordinator
        .run(move |_turn, _cancel| {
            let next =
                skein::engine::Next::Continue(again.bind(skein::engine::Request::messages([
                    skein::Message::user("fail now"),
                ])));
            Box::pin(async move { Ok(next) })
        })
        .await;
    assert!(outcome.is_err(), "{outcome:?}");
    let is_failing = |span: &Span| {
        span.name == "sequence" && string(span, "skein.sequence.id") == Some(failing.clone())
    };
    for _ in 0..200 {
        spans = grpc.spans();
        if spans.iter().any(is_failing) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let failed_span = spans
        .iter()
        .find(|span| is_failing(span))
        .expect("the failed sequence's span")
        .clone();
    assert_eq!(
        attribute(&failed_span, "skein.sequence.failed"),
        Some(&any_value::Value::BoolValue(true))
    );
    let failed_calls: Vec<Span> = grpc
        .wait_for(spans.len(), Duration::from_secs(1))
        .await
        .into_iter()
        .filter(|span| span.parent_span_id == failed_span.span_id)
        .collect();
    assert_eq!(failed_calls.len(), 1, "the failed call: {failed_calls:#?}");
    assert!(failed_calls[0].name.starts_with("chat "));
    assert_eq!(
        failed_calls[0].status.as_ref().map(|status| status.code),
        Some(2),
        "an error status: {:?}",
        failed_calls[0].status
    );
    drop(telemetry);
}
