/*!
OpenTelemetry spans of the turns the service ran, through the
`opentelemetry` API: nothing leaves the process unless a surface installed
an exporter (`skein::telemetry`) and said so here ([`enable`]). Spans are
made once a turn is over, from its run records (which hold every timing
and figure), so export adds no work inside a turn and cannot fail one.

Each turn is a trace: a `turn` span, a child `chat MODEL` span per model
call (run) and an `execute_tool NAME` span per tool call the loop ran
between two calls; a rerun is a `rerun` span over its sample and baseline
runs ([`rerun`]), a replayed turn a `replay` span over its model and tool
calls ([`replay_turn`]); a coordinator sequence (`skein_engine::coordinator`) is a
`sequence` span over its continuations, linked to the run it started from,
emitted when it ends (the engine tells this module, once [`enable`]d). Ids are derived from skein's ids (a turn's trace from its
chain id, or its single run's id; a run's span from its run id), so spans
can point at earlier ones without a lookup table: a fork's first turn, and
a turn that branched because its head moved, link to the span of the run
that produced the node they start from; a rerun links to the turn it
re-runs, a replayed turn to its original.

Attributes follow the GenAI semantic conventions on the model-call spans:
`gen_ai.operation.name`, `gen_ai.provider.name`, `gen_ai.request.model`,
`gen_ai.response.model` (the model the provider says answered, from its
reply's `model`; the model skein called when it said none),
`gen_ai.usage.input_tokens` (every prompt token, cached or
not, as skein normalises usage), `gen_ai.usage.cache_read.input_tokens` and
`gen_ai.usage.cache_creation.input_tokens` (the parts of it read from and
written to a cache, so `input - read - creation` is the uncached input and
nothing is counted twice), `gen_ai.usage.output_tokens`,
`gen_ai.response.finish_reasons`; plus `skein.run.id`, `skein.node.id`,
`skein.conversation.id` (and the chain, sequence and rerun ids a run
belongs to) so a trace leads back to the graph. A figure the provider did
not report is left out, never sent as zero. Turn spans carry their totals
as `skein.usage.*`, not `gen_ai.usage.*`, so a backend summing the GenAI
attributes counts each call once. Message content (`gen_ai.input.messages`,
`gen_ai.output.messages`, tool arguments and results) is sent only when
enabled with content.
*/

use crate::service::{Landed, Landing};
use opentelemetry::trace::{
    Link, Span as _, SpanBuilder, SpanContext, SpanId, SpanKind, Status, TraceContextExt as _,
    TraceFlags, TraceId, TraceState, Tracer as _,
};
use opentelemetry::{Context, KeyValue, global};
use skein_core::{
    Message, NodeId, Part, Relation, ReplayId, RerunId, RunId, RunRecord, RunStatus, Thread,
};
use skein_store::Store;
use std::cell::Cell;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const OFF: u8 = 0;
const METADATA: u8 = 1;
const CONTENT: u8 = 2;

static EXPORT: AtomicU8 = AtomicU8::new(OFF);

/// Emit spans of every turn from now on to the global tracer provider
/// (which the caller installed), with message content when `content`.
pub fn enable(content: bool) {
    EXPORT.store(if content { CONTENT } else { METADATA }, Ordering::Relaxed);
    skein_engine::coordinator::set_sequence_sink(Some(sequence));
}

/// Stop emitting spans.
pub fn disable() {
    EXPORT.store(OFF, Ordering::Relaxed);
    skein_engine::coordinator::set_sequence_sink(None);
}

pub(crate) fn enabled() -> bool {
    EXPORT.load(Ordering::Relaxed) != OFF
}

fn with_content() -> bool {
    EXPORT.load(Ordering::Relaxed) == CONTENT
}

/// A turn the service ran, kept for its spans while export is on.
pub(crate) struct Traced {
    thread: Option<Thread>,
    runs: Vec<RunRecord>,
}

impl Traced {
    /// The turn's history and runs, or `None` when export is off (then
    /// nothing is copied).
    pub(crate) fn of(thread: &Option<Thread>, runs: &[RunRecord]) -> Option<Traced> {
        enabled().then(|| Traced {
            thread: thread.clone(),
            runs: runs.to_vec(),
        })
    }

    /// Emit the turn's spans, now that it `landed` where `landing` said.
    pub(crate) async fn emit(self, landing: &Landing, landed: &Landed, store: Option<&Store>) {
        if self.runs.is_empty() {
            return;
        }
        let branched_at = match (landing, landed) {
            (Landing::In { from, .. }, Landed::Branched { .. }) => *from,
            (Landing::In { conversation, .. }, _) if !conversation.stored => {
                conversation.origin.as_ref().and_then(|origin| origin.node)
            }
            _ => None,
        };
        let mut links = Vec::new();
        if let (Some(node), Some(store)) = (branched_at, store) {
            links.extend(origin_link(store, node, "branched_from").await);
        }
        let key = turn_key(&self.runs[0]);
        let mut attributes = vec![KeyValue::new("skein.turn.runs", self.runs.len() as i64)];
        let conversation = landed
            .conversation()
            .or_else(|| self.runs.iter().find_map(|run| run.conversation.as_ref()));
        if let Some(conversation) = conversation {
            attributes.push(KeyValue::new(
                "skein.conversation.id",
                conversation.to_string(),
            ));
        }
        if let Some(head) = self.thread.as_ref().and_then(Thread::head_id) {
            attributes.push(KeyValue::new("skein.node.id", head.to_hex()));
        }
        if let Landed::Branched { from, .. } = landed {
            attributes.push(KeyValue::new("skein.branched_from", from.to_string()));
        }
        emit(Group {
            name: "turn",
            key: &key,
            runs: &self.runs,
            thread: self.thread.as_ref(),
            attributes,
            links,
        });
    }
}

/// Emit the spans of a rerun: its sample and baseline runs under one
/// `rerun` span linked to the turn it re-runs (the run that produced
/// `turn_node`).
pub async fn rerun(
    store: &Store,
    id: &RerunId,
    turn_node: NodeId,
    runs: &[RunRecord],
    answer: Option<&Thread>,
) {
    if !enabled() || runs.is_empty() {
        return;
    }
    let links = origin_link(store, turn_node, "reruns")
        .await
        .into_iter()
        .collect();
    emit(Group {
        name: "rerun",
        key: &format!("rerun {id}"),
        runs,
        thread: answer,
        attributes: vec![
            KeyValue::new("skein.rerun.id", id.to_string()),
            KeyValue::new("skein.rerun.turn_node", turn_node.to_hex()),
        ],
        links,
    });
}

/// Emit the spans of one replayed turn: its model calls (and the tool
/// calls between them) under a `replay` span linked to the original turn
/// (the run that produced `turn_node`), as a rerun's are.
pub async fn replay_turn(store: &Store, turn: ReplayedTurn<'_>) {
    if !enabled() || turn.runs.is_empty() {
        return;
    }
    let links = origin_link(store, turn.turn_node, "replays")
        .await
        .into_iter()
        .collect();
    emit(Group {
        name: "replay",
        key: &format!("replay {} turn {}", turn.replay, turn.seq),
        runs: turn.runs,
        thread: turn.answer,
        attributes: vec![
            KeyValue::new("skein.replay.id", turn.replay.to_string()),
            KeyValue::new("skein.replay.seq", turn.seq as i64),
            KeyValue::new("skein.replay.turn_node", turn.turn_node.to_hex()),
            KeyValue::new("skein.replay.result", turn.result.to_string()),
        ],
        links,
    });
}

/// A replayed turn, as [`replay_turn`] exports it.
pub struct ReplayedTurn<'a> {
    pub replay: &'a ReplayId,
    pub seq: u64,
    /// The original turn's final answer.
    pub turn_node: NodeId,
    /// `changed`, `held`, `diverged` or `failed`.
    pub result: &'a str,
    pub runs: &'a [RunRecord],
    /// The thread up to the replayed answer, when there is one.
    pub answer: Option<&'a Thread>,
}

/// Emit the spans of a coordinator sequence that ended: a `sequence` span
/// over its continuations (each a child model-call span, the one whose call
/// failed included), linked to the span of the run of the exchange it
/// started from.
fn sequence(done: &skein_engine::coordinator::SequenceDone<'_>) {
    if !enabled() || (done.runs.is_empty() && done.failed_call.is_none()) {
        return;
    }
    let mut runs: Vec<RunRecord> = done.runs.iter().map(|output| output.record(None)).collect();
    // The continuation whose call failed is a child too, its span marked
    // as an error as any failed run's is.
    runs.extend(done.failed_call.cloned());
    let thread = done
        .runs
        .last()
        .map(|last| last.prepared.thread.push(last.message.clone()));
    let start = SpanContext::new(
        trace_id(&format!("run {}", done.start)),
        run_span_id(done.start),
        TraceFlags::SAMPLED,
        true,
        TraceState::default(),
    );
    let mut attributes = vec![
        KeyValue::new("skein.sequence.id", done.sequence.to_string()),
        KeyValue::new("skein.sequence.start_run", done.start.to_string()),
    ];
    if done.failed {
        attributes.push(KeyValue::new("skein.sequence.failed", true));
    }
    emit(Group {
        name: "sequence",
        key: &format!("sequence {}", done.sequence),
        runs: &runs,
        thread: thread.as_ref(),
        attributes,
        links: vec![Link::new(
            start,
            vec![
                KeyValue::new("skein.link", "sequence_start"),
                KeyValue::new("skein.run.id", done.start.to_string()),
            ],
            0,
        )],
    });
}

/// A link to the span of the (first) run that produced `node`.
async fn origin_link(store: &Store, node: NodeId, why: &'static str) -> Option<Link> {
    let runs = match store.nonblocking().runs_producing(node).await {
        Ok(runs) => runs,
        Err(error) => {
            tracing::debug!("no span link to the origin of {node}: {error}");
            return None;
        }
    };
    let origin = runs.first()?;
    let context = SpanContext::new(
        trace_id(&turn_key(origin)),
        run_span_id(&origin.id),
        TraceFlags::SAMPLED,
        true,
        TraceState::default(),
    );
    Some(Link::new(
        context,
        vec![
            KeyValue::new("skein.link", why),
            KeyValue::new("skein.node.id", node.to_hex()),
            KeyValue::new("skein.run.id", origin.id.to_string()),
        ],
        0,
    ))
}

/// Spans over some runs: the group's span and one child per run and per
/// tool call between them.
struct Group<'a> {
    name: &'static str,
    key: &'a str,
    runs: &'a [RunRecord],
    thread: Option<&'a Thread>,
    attributes: Vec<KeyValue>,
    links: Vec<Link>,
}

fn emit(group: Group<'_>) {
    let tracer = &global::tracer("skein");
    let start = group.runs.iter().map(|run| run.started_ms).min();
    let end = group
        .runs
        .iter()
        .map(|run| run.finished_ms.unwrap_or(run.started_ms))
        .max();
    let mut attributes = group.attributes;
    attributes.extend(totals(group.runs));
    let mut builder = SpanBuilder::from_name(group.name)
        .with_kind(SpanKind::Internal)
        .with_attributes(attributes)
        .with_links(group.links);
    builder.start_time = start.map(time);
    let mut span = build(
        tracer,
        builder,
        &Context::new(),
        Some(trace_id(group.key)),
        span_id("group", group.key),
    );
    if group
        .runs
        .iter()
        .any(|run| run.status != RunStatus::Succeeded)
    {
        span.set_status(Status::error("a model call failed"));
    }
    let parent = Context::new().with_span(span);
    let nodes = group.thread.map(Thread::nodes).unwrap_or_default();
    for (index, run) in group.runs.iter().enumerate() {
        model_call(tracer, &parent, run, &nodes);
        if let Some(next) = group.runs.get(index + 1) {
            tool_calls(tracer, &parent, run, next, &nodes);
        }
    }
    parent
        .span()
        .end_with_timestamp(end.map_or_else(SystemTime::now, time));
}

/// Token totals of a group, as skein's own attributes.
fn totals(runs: &[RunRecord]) -> Vec<KeyValue> {
    let sum = |figure: fn(&RunRecord) -> Option<u64>| -> Option<i64> {
        let figures: Vec<u64> = runs.iter().filter_map(figure).collect();
        (!figures.is_empty()).then(|| figures.iter().sum::<u64>() as i64)
    };
    [
        ("skein.usage.input_tokens", sum(|r| r.usage.input_tokens)),
        ("skein.usage.output_tokens", sum(|r| r.usage.output_tokens)),
        (
            "skein.usage.cache_read_tokens",
            sum(|r| r.usage.cache_read_tokens),
        ),
        (
            "skein.usage.cache_write_tokens",
            sum(|r| r.usage.cache_write_tokens),
        ),
    ]
    .into_iter()
    .filter_map(|(name, value)| value.map(|value| KeyValue::new(name, value)))
    .collect()
}

fn model_call(
    tracer: &global::BoxedTracer,
    parent: &Context,
    run: &RunRecord,
    nodes: &[&skein_core::Node],
) {
    let mut attributes = vec![
        KeyValue::new("gen_ai.operation.name", "chat"),
        KeyValue::new("gen_ai.provider.name", run.provider.clone()),
        KeyValue::new("gen_ai.request.model", run.model.clone()),
        KeyValue::new(
            "gen_ai.response.model",
            run.response_model
                .clone()
                .unwrap_or_else(|| run.model.clone()),
        ),
        KeyValue::new("skein.run.id", run.id.to_string()),
        KeyValue::new("skein.run.status", run.status.as_str()),
    ];
    let usage = &run.usage;
    for (name, figure) in [
        ("gen_ai.usage.input_tokens", usage.input_tokens),
        ("gen_ai.usage.output_tokens", usage.output_tokens),
        (
            "gen_ai.usage.cache_read.input_tokens",
            usage.cache_read_tokens,
        ),
        (
            "gen_ai.usage.cache_creation.input_tokens",
            usage.cache_write_tokens,
        ),
    ] {
        if let Some(value) = figure {
            attributes.push(KeyValue::new(name, value as i64));
        }
    }
    if let Some(reason) = &run.finish_reason {
        attributes.push(KeyValue::new(
            "gen_ai.response.finish_reasons",
            opentelemetry::Value::Array(
                vec![opentelemetry::StringValue::from(reason.name().to_string())].into(),
            ),
        ));
    }
    if let Some(conversation) = &run.conversation {
        attributes.push(KeyValue::new(
            "skein.conversation.id",
            conversation.to_string(),
        ));
    }
    if let Some(node) = run.output_head {
        attributes.push(KeyValue::new("skein.node.id", node.to_hex()));
    }
    if let Some(node) = run.input_head {
        attributes.push(KeyValue::new("skein.input_node.id", node.to_hex()));
    }
    for relation in &run.relations {
        let (name, value) = match relation {
            Relation::Chain(id) => ("skein.chain.id", id.clone()),
            Relation::Sequence(id) => ("skein.sequence.id", id.clone()),
            Relation::Rerun(id) => ("skein.rerun.id", id.to_string()),
            Relation::Replay(id) => ("skein.replay.id", id.to_string()),
            Relation::ContinuationOf(id) => ("skein.continuation_of", id.to_string()),
            Relation::AssociatedWith(id) => ("skein.associated_with", id.to_string()),
            _ => continue,
        };
        attributes.push(KeyValue::new(name, value));
    }
    if with_content() {
        let message = |id: Option<NodeId>| {
            id.and_then(|id| nodes.iter().find(|node| node.id() == id))
                .map(|node| json(&[node.message()]))
        };
        if let Some(input) = message(run.input_head) {
            attributes.push(KeyValue::new("gen_ai.input.messages", input));
        }
        if let Some(output) = message(run.output_head) {
            attributes.push(KeyValue::new("gen_ai.output.messages", output));
        }
    }
    let mut builder = SpanBuilder::from_name(format!("chat {}", run.model))
        .with_kind(SpanKind::Client)
        .with_attributes(attributes);
    builder.start_time = Some(time(run.started_ms));
    let mut span = build(tracer, builder, parent, None, run_span_id(&run.id));
    if run.status != RunStatus::Succeeded {
        span.set_status(Status::error(run.error.clone().unwrap_or_default()));
    }
    span.end_with_timestamp(time(run.finished_ms.unwrap_or(run.started_ms)));
}

/// The tool calls `run` asked for, run by the loop before `next`: each
/// spans the round (the loop's tools run together, between the calls).
fn tool_calls(
    tracer: &global::BoxedTracer,
    parent: &Context,
    run: &RunRecord,
    next: &RunRecord,
    nodes: &[&skein_core::Node],
) {
    let Some(at) = run
        .output_head
        .and_then(|id| nodes.iter().position(|node| node.id() == id))
    else {
        return;
    };
    let results: Vec<&skein_core::ToolResult> = nodes[at + 1..]
        .iter()
        .map_while(|node| {
            let parts = &node.message().parts;
            let results: Vec<_> = parts
                .iter()
                .filter_map(|part| match part {
                    Part::ToolResult(result) => Some(result),
                    _ => None,
                })
                .collect();
            (!results.is_empty()).then_some(results)
        })
        .flatten()
        .collect();
    let start = time(run.finished_ms.unwrap_or(run.started_ms));
    let end = time(next.started_ms);
    for (index, part) in nodes[at].message().parts.iter().enumerate() {
        let Part::ToolCall(call) = part else { continue };
        let result = results.iter().find(|result| result.call_id == call.id);
        let mut attributes = vec![
            KeyValue::new("gen_ai.operation.name", "execute_tool"),
            KeyValue::new("gen_ai.tool.name", call.name.clone()),
            KeyValue::new("gen_ai.tool.call.id", call.id.clone()),
            KeyValue::new("skein.run.id", run.id.to_string()),
        ];
        if with_content() {
            attributes.push(KeyValue::new(
                "gen_ai.tool.call.arguments",
                call.arguments.clone(),
            ));
            if let Some(result) = result {
                attributes.push(KeyValue::new(
                    "gen_ai.tool.call.result",
                    result.content.clone(),
                ));
            }
        }
        let mut builder = SpanBuilder::from_name(format!("execute_tool {}", call.name))
            .with_kind(SpanKind::Internal)
            .with_attributes(attributes);
        builder.start_time = Some(start);
        let id = span_id("tool", &format!("{} {index}", run.id));
        let mut span = build(tracer, builder, parent, None, id);
        if result.is_some_and(|result| result.is_error) {
            span.set_status(Status::error("the tool call failed"));
        }
        span.end_with_timestamp(end);
    }
}

thread_local! {
    /// The ids the next span built on this thread takes ([`take_ids`]).
    static NEXT_IDS: Cell<(Option<TraceId>, Option<SpanId>)> = const { Cell::new((None, None)) };
}

/// The trace id (for a span without a parent) and span id skein chose
/// for the span being built on this thread, if any: what the id
/// generator `skein::telemetry` installs hands the SDK. Each is taken
/// once.
pub fn take_trace_id() -> Option<TraceId> {
    NEXT_IDS.with(|next| {
        let (trace, span) = next.get();
        next.set((None, span));
        trace
    })
}

/// See [`take_trace_id`].
pub fn take_span_id() -> Option<SpanId> {
    NEXT_IDS.with(|next| {
        let (trace, span) = next.get();
        next.set((trace, None));
        span
    })
}

/// Build a span with ids derived from skein's (the SDK asks the id
/// generator while building, on this thread).
fn build(
    tracer: &global::BoxedTracer,
    builder: SpanBuilder,
    parent: &Context,
    trace: Option<TraceId>,
    span: SpanId,
) -> global::BoxedSpan {
    NEXT_IDS.with(|next| next.set((trace, Some(span))));
    let built = tracer.build_with_context(builder, parent);
    NEXT_IDS.with(|next| next.set((None, None)));
    built
}

fn json(messages: &[&Message]) -> String {
    serde_json::to_string(messages).unwrap_or_default()
}

/// What a turn's trace is named by: its chain, or its one run.
fn turn_key(run: &RunRecord) -> String {
    run.relations
        .iter()
        .find_map(|relation| match relation {
            Relation::Chain(id) => Some(format!("chain {id}")),
            _ => None,
        })
        .unwrap_or_else(|| format!("run {}", run.id))
}

fn digest(kind: &str, key: &str) -> [u8; 32] {
    let mut hasher = blake3::Hasher::new();
    hasher.update(b"skein otel ");
    hasher.update(kind.as_bytes());
    hasher.update(b"\0");
    hasher.update(key.as_bytes());
    *hasher.finalize().as_bytes()
}

/// The trace id of the turn (or rerun) named `key`.
pub fn trace_id(key: &str) -> TraceId {
    let digest = digest("trace", key);
    TraceId::from_bytes(digest[..16].try_into().expect("16 bytes"))
}

fn span_id(kind: &str, key: &str) -> SpanId {
    let digest = digest(kind, key);
    SpanId::from_bytes(digest[..8].try_into().expect("8 bytes"))
}

/// The span id of a run's model-call span.
pub fn run_span_id(run: &RunId) -> SpanId {
    span_id("run", run.as_str())
}

fn time(ms: i64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms.max(0) as u64)
}
