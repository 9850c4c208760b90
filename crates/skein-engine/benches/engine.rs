//! Engine benchmarks: the engine's own cost per run, timed with a
//! hand-written loop (no criterion). Prints one JSON object to stdout; every
//! figure states its workload and target.
//!
//! Run with `cargo bench -p skein-engine --bench engine` (release profile).
//! `--quick` or `SKEIN_BENCH_QUICK=1` cuts repetitions so CI finishes in a
//! few seconds. For profiling one case:
//! `--only fixed|scripted|cold|breakdown|variants`
//! (repeatable) and `--reps N` (timed runs per case per round), e.g. under
//! `perf record`.
//!
//! The workload is the realistic one: `engine.continue_from(&exchange,
//! request)` where the exchange holds N messages (N = 10 and 1,000) and was
//! itself built by a first run and N/2 - 1 captured continuations, so its
//! nodes are the engine's own. The request renders a one-message prompt,
//! asks for capture and carries an output contract that the reply meets on
//! the first try (no repair). Every run continues the same exchange (a
//! branch), so the depth is exactly N for every sample. A timed run includes
//! dropping its output; building the request (the caller's work) is not
//! timed.
//!
//! Providers (cases):
//! - `fixed`: the test kit's `Fixed` provider, returning a fixed reply, usage and
//!   finish reason without reading the request. The engine's time with it is
//!   the cleanest measure of the engine's overhead; the provider alone costs
//!   about 0.3 µs.
//! - `scripted`: `skein_providers::Scripted` with one unconditional rule
//!   replying `{"answer": 7}`. Like `Echo`, it reads the whole request
//!   (request facts, usage counts every word of the history), so its own cost
//!   grows with depth (about 1 ms at depth 1,000).
//! - `cold`: `fixed`, but each call first writes over 2 MiB of memory, so the
//!   engine's work after the call (and before the next one) runs with cold
//!   caches, as it does after the scripted provider's pass over a long
//!   history, but the same at both depths.
//!
//! Figures per case and depth: the provider alone (`Provider::complete` on
//! the model request the engine sends), the engine run, and their
//! difference. For `scripted` and `cold` the provider is wrapped in a timer,
//! so each run also yields the time spent inside the provider during that
//! very run; run time minus that is the engine overhead measured within the
//! run (`overhead_*_in_run_*`), split into before and after the call. At
//! depth 1,000 this is the figure to trust for `scripted`: the difference of
//! separately timed medians is swamped by the provider's 1 ms and by glibc
//! heap trimming (back-to-back scripted calls page-fault their heap back in;
//! `page_faults_per_call` shows it).
//!
//! Cases are measured round by round with the order rotated each round, so
//! drift on a noisy machine hits them alike; within a round each case times
//! a block of provider calls, then a block of engine runs (so each run
//! follows another run, one provider call per run, as in real use).

#[path = "../../../bench-support/report.rs"]
mod report;

use serde_json::{Value, json};
use skein_core::{
    BoxStream, Message, ModelRequest, Provider, ProviderError, Role, StreamEvent, Usage,
};
use skein_engine::{
    BackendDef, BackendKind, Catalog, Engine, Exchange, MessageTemplate, Profile, PromptDef,
    Request,
};
use skein_providers::Scripted;
use skein_testkit::Fixed;
use std::alloc::{GlobalAlloc, Layout, System};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// Target: engine overhead per run under 20 µs at depth 10.
const OVERHEAD_TARGET_US: f64 = 20.0;
/// "Flat in depth": our reading is overhead at depth 1,000 within 1.2x of
/// depth 10 (the tolerance the store's flatness target uses).
const FLATNESS_TARGET: f64 = 1.2;

const DEPTHS: [usize; 2] = [10, 1000];

const REPLY: &str = r#"{"answer": 7}"#;

const SCRIPT: &str = r#"
[[rules]]
name = "answer"
reply = '{"answer": 7}'
"#;

struct Plan {
    quick: bool,
    /// `--only NAME` (repeatable): fixed, scripted, cold, breakdown, variants.
    only: Vec<String>,
    /// Untimed runs per case before the first round.
    warmup: usize,
    rounds: usize,
    /// Timed runs per case per round.
    reps: usize,
}

impl Plan {
    fn from_env() -> Plan {
        let args: Vec<String> = std::env::args().collect();
        let quick = args.iter().any(|arg| arg == "--quick")
            || std::env::var("SKEIN_BENCH_QUICK").is_ok_and(|v| !v.is_empty() && v != "0");
        let only = args
            .windows(2)
            .filter(|pair| pair[0] == "--only")
            .map(|pair| pair[1].clone())
            .collect();
        let reps_override = args
            .windows(2)
            .find(|pair| pair[0] == "--reps")
            .and_then(|pair| pair[1].parse().ok());
        let mut plan = if quick {
            Plan {
                quick,
                only,
                warmup: 50,
                rounds: 2,
                reps: 150,
            }
        } else {
            Plan {
                quick,
                only,
                warmup: 500,
                rounds: 5,
                reps: 1000,
            }
        };
        if let Some(reps) = reps_override {
            plan.reps = reps;
        }
        plan
    }

    fn runs(&self, group: &str) -> bool {
        self.only.is_empty() || self.only.iter().any(|g| g == group)
    }

    fn samples(&self) -> usize {
        self.rounds * self.reps
    }
}

/// The test kit's fixed reply with usage figures, unread: the cleanest way
/// to see the engine's own cost.
fn fixed(reply: impl Into<String>) -> Fixed {
    Fixed::reply(reply).with_usage(Usage {
        input_tokens: Some(1000),
        output_tokens: Some(2),
        cache_read_tokens: None,
        cache_write_tokens: None,
    })
}

/// [`fixed`], but every call first writes one byte per cache line of a
/// buffer, evicting the engine's working set from the CPU caches the way a
/// provider that reads a long history does (the `cold` case).
struct Polluting {
    inner: Fixed,
    buffer: Mutex<Vec<u8>>,
}

/// About what the scripted provider touches at depth 1,000 (the history's
/// ~700 KB of text, read, copied and freed).
const POLLUTE_BYTES: usize = 2 << 20;

impl Polluting {
    fn new(reply: impl Into<String>) -> Polluting {
        Polluting {
            inner: fixed(reply),
            buffer: Mutex::new(vec![0; POLLUTE_BYTES]),
        }
    }
}

impl Provider for Polluting {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn stream(
        &self,
        request: ModelRequest,
    ) -> BoxStream<'static, Result<StreamEvent, ProviderError>> {
        let mut buffer = self.buffer.lock().unwrap_or_else(|e| e.into_inner());
        for line in buffer.chunks_mut(64) {
            line[0] = line[0].wrapping_add(1);
        }
        std::hint::black_box(&mut *buffer);
        drop(buffer);
        self.inner.stream(request)
    }
}

/// Wraps a provider and adds up the wall time spent inside it: in
/// `stream` (where the deterministic providers do all their work, dropping
/// the request included), in every `poll_next`, and in dropping the stream.
/// That is the provider's own share of an engine run, measured in the run.
struct Timed {
    inner: Arc<dyn Provider>,
    nanos: Arc<AtomicU64>,
    /// When the last call entered `stream` and when its stream was dropped.
    span: Arc<Mutex<(Option<Instant>, Option<Instant>)>>,
}

impl Timed {
    fn new(inner: Arc<dyn Provider>) -> Timed {
        Timed {
            inner,
            nanos: Arc::new(AtomicU64::new(0)),
            span: Arc::default(),
        }
    }

    /// Time spent inside the provider so far.
    fn spent(&self) -> Duration {
        Duration::from_nanos(self.nanos.load(Ordering::Relaxed))
    }

    /// When the last call started and when its stream was dropped.
    fn last_span(&self) -> (Option<Instant>, Option<Instant>) {
        *self.span.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn add_elapsed(nanos: &AtomicU64, started: Instant) {
    nanos.fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
}

impl Provider for Timed {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn stream(
        &self,
        request: ModelRequest,
    ) -> BoxStream<'static, Result<StreamEvent, ProviderError>> {
        let started = Instant::now();
        *self.span.lock().unwrap_or_else(|e| e.into_inner()) = (Some(started), None);
        let inner = self.inner.stream(request);
        add_elapsed(&self.nanos, started);
        Box::pin(TimedStream {
            inner: Some(inner),
            nanos: self.nanos.clone(),
            span: self.span.clone(),
        })
    }
}

struct TimedStream {
    inner: Option<BoxStream<'static, Result<StreamEvent, ProviderError>>>,
    nanos: Arc<AtomicU64>,
    span: Arc<Mutex<(Option<Instant>, Option<Instant>)>>,
}

impl futures_core::Stream for TimedStream {
    type Item = Result<StreamEvent, ProviderError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        let started = Instant::now();
        let next = match this.inner.as_mut() {
            Some(inner) => inner.as_mut().poll_next(cx),
            None => Poll::Ready(None),
        };
        add_elapsed(&this.nanos, started);
        next
    }
}

impl Drop for TimedStream {
    fn drop(&mut self) {
        let started = Instant::now();
        drop(self.inner.take());
        add_elapsed(&self.nanos, started);
        self.span.lock().unwrap_or_else(|e| e.into_inner()).1 = Some(Instant::now());
    }
}

/// The system allocator, counting allocations (and reallocations) while
/// `COUNTING` is set: only in the untimed allocation pass.
struct Counting;

static COUNTING: AtomicBool = AtomicBool::new(false);
static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);
static ALLOCATED_BYTES: AtomicU64 = AtomicU64::new(0);

fn count(size: usize) {
    if COUNTING.load(Ordering::Relaxed) {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        ALLOCATED_BYTES.fetch_add(size as u64, Ordering::Relaxed);
    }
}

// SAFETY: every call is forwarded unchanged to `System`.
#[allow(unsafe_code, reason = "a counting allocator wraps the system's")]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(layout.size());
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count(layout.size());
        // SAFETY: as for `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count(new_size);
        // SAFETY: the caller upholds `GlobalAlloc::realloc`'s contract.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller upholds `GlobalAlloc::dealloc`'s contract.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Allocations and bytes allocated per call of `op`, over `calls` calls.
async fn allocations<F: Future<Output = ()>>(
    calls: usize,
    mut op: impl FnMut(usize) -> F,
) -> (f64, f64) {
    ALLOCATIONS.store(0, Ordering::Relaxed);
    ALLOCATED_BYTES.store(0, Ordering::Relaxed);
    COUNTING.store(true, Ordering::Relaxed);
    for i in 0..calls {
        op(i).await;
    }
    COUNTING.store(false, Ordering::Relaxed);
    let per_call = |total: u64| total as f64 / calls as f64;
    (
        per_call(ALLOCATIONS.load(Ordering::Relaxed)),
        per_call(ALLOCATED_BYTES.load(Ordering::Relaxed)),
    )
}

/// Realistic sizes, as in the store benchmark: a ~200-byte question and a
/// ~1.2 KB answer.
fn question(i: usize) -> String {
    format!(
        "Question {i}: could you explain how the previous answer changes if the \
         input grows by an order of magnitude, and what the trade-offs are between \
         the approaches we discussed? Please keep it short. (turn {i})"
    )
}

fn long_answer() -> String {
    let sentence = "The cost is dominated by the part of the work that scales with the \
                    input, so the constant factors matter less than the shape of the loop. ";
    format!("Answer. {}", sentence.repeat(8))
}

fn answer_schema() -> Value {
    json!({
        "type": "object",
        "required": ["answer"],
        "properties": {"answer": {"type": "integer"}}
    })
}

fn catalog() -> Catalog {
    Catalog::new()
        .backend(BackendDef::new("scripted", BackendKind::Echo))
        .backend(BackendDef::new("fixed", BackendKind::Echo))
        .backend(BackendDef::new("cold", BackendKind::Echo))
        .backend(BackendDef::new("build", BackendKind::Echo))
        .profile(Profile::new("scripted", "scripted", "bench-model"))
        .profile(Profile::new("fixed", "fixed", "bench-model"))
        .profile(Profile::new("cold", "cold", "bench-model"))
        .profile(Profile::new("build", "build", "bench-model"))
        .prompt(
            PromptDef::new(
                "turn",
                vec![MessageTemplate::new(Role::User, "{{ question }}")],
            )
            .variable("question"),
        )
}

struct Providers {
    /// Scripted, instrumented: its time inside each run is known.
    scripted: Arc<Timed>,
    /// Not instrumented: the cleanest engine figure.
    fixed: Arc<dyn Provider>,
    /// Fixed, but evicting the caches first; instrumented.
    cold: Arc<Timed>,
}

fn engine() -> (Engine, Providers) {
    let providers = Providers {
        scripted: Arc::new(Timed::new(Arc::new(
            Scripted::from_toml_str(SCRIPT).expect("bench script"),
        ))),
        fixed: Arc::new(fixed(REPLY)),
        cold: Arc::new(Timed::new(Arc::new(Polluting::new(REPLY)))),
    };
    let engine = Engine::builder(catalog())
        .provider("scripted", providers.scripted.clone())
        .provider("fixed", providers.fixed.clone())
        .provider("cold", providers.cold.clone())
        .provider("build", Arc::new(fixed(long_answer())))
        .build()
        .expect("build engine");
    (engine, providers)
}

/// An exchange of `depth` messages (user question / ~1.2 KB answer pairs),
/// built the way an application builds one: a first captured run, then
/// captured continuations.
async fn exchange_of_depth(engine: &Engine, depth: usize) -> Exchange {
    assert!(depth >= 2 && depth.is_multiple_of(2), "depth must be even");
    let turn = |i: usize| {
        Request::prompt("turn")
            .var("question", question(i))
            .profile("build")
            .capture()
    };
    let mut exchange = engine
        .run(turn(0))
        .await
        .expect("first run")
        .exchange
        .expect("captured");
    let mut i = 1;
    while exchange.thread().len() < depth {
        exchange = engine
            .continue_from(&exchange, turn(i))
            .await
            .expect("continuation")
            .exchange
            .expect("captured");
        i += 1;
    }
    assert_eq!(exchange.thread().len(), depth);
    exchange
}

/// The timed request: a one-message prompt, an output contract, capture.
fn follow_up(profile: &str, i: usize) -> Request {
    Request::prompt("turn")
        .var("question", question(i))
        .profile(profile)
        .output_contract(answer_schema())
        .capture()
}

/// The model request the engine sends for `follow_up(profile, 0)` on
/// `exchange`, for timing the provider alone.
fn model_request(engine: &Engine, exchange: &Exchange, profile: &str) -> ModelRequest {
    let prepared = engine
        .prepare_continuation_plan(exchange, &follow_up(profile, 0))
        .expect("prepare");
    ModelRequest {
        model: prepared.model,
        thread: prepared.thread,
        annotations: prepared.annotations,
        tools: prepared.tools,
        options: prepared.options,
        output_schema: prepared.output_contract,
    }
}

/// One (provider, depth) case: the provider alone and the engine run,
/// timed in separate blocks so that each engine run follows another engine
/// run (one provider call per run, as in real use).
struct Case {
    provider_name: &'static str,
    depth: usize,
    provider: Arc<dyn Provider>,
    /// The instrumented provider, when it is one.
    timed: Option<Arc<Timed>>,
    exchange: Exchange,
    request: ModelRequest,
    alone: Vec<Duration>,
    run: Vec<Duration>,
    /// Instrumented providers only, per run: time inside the provider, and
    /// the engine's time before the call and after it (output drop included).
    inside: Vec<Duration>,
    before_call: Vec<Duration>,
    after_call: Vec<Duration>,
    /// Minor page faults over the timed blocks: provider alone, engine runs.
    faults_alone: u64,
    faults_run: u64,
}

/// The process's minor page faults so far (Linux), 0 elsewhere.
fn minor_faults() -> u64 {
    std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|stat| {
            // Fields after the parenthesised command name: state is the
            // first, minflt the eighth.
            let rest = &stat[stat.rfind(')')? + 1..];
            rest.split_whitespace().nth(7)?.parse().ok()
        })
        .unwrap_or(0)
}

impl Case {
    /// `reps` calls of the provider alone, then `reps` engine runs.
    async fn measure(&mut self, engine: &Engine, reps: usize, record: bool) {
        let faults = minor_faults();
        for _ in 0..reps {
            let request = self.request.clone();
            let started = Instant::now();
            let response = self.provider.complete(request).await.expect("provider");
            drop(response);
            let alone = started.elapsed();
            if record {
                self.alone.push(alone);
            }
        }
        let faults_alone = minor_faults() - faults;
        let faults = minor_faults();
        for i in 0..reps {
            let request = follow_up(self.provider_name, i);
            let before = self.timed.as_ref().map(|timed| timed.spent());
            let started = Instant::now();
            let output = engine
                .continue_from(&self.exchange, request)
                .await
                .expect("engine run");
            drop(output);
            let ended = Instant::now();
            if !record {
                continue;
            }
            self.run.push(ended - started);
            if let (Some(timed), Some(before)) = (&self.timed, before) {
                self.inside.push(timed.spent() - before);
                let (entered, left) = timed.last_span();
                let (entered, left) = (entered.expect("called"), left.expect("dropped"));
                self.before_call.push(entered - started);
                self.after_call.push(ended - left);
            }
        }
        if record {
            self.faults_alone += faults_alone;
            self.faults_run += minor_faults() - faults;
        }
    }
}

/// Time `prepare_continuation` (resolve, render, contract lookup, provider
/// lookup) and running the prepared handle (admission, call, validation,
/// capture, ledger, events) separately, with the fixed provider.
struct Breakdown {
    depth: usize,
    exchange: Exchange,
    prepare: Vec<Duration>,
    execute: Vec<Duration>,
}

impl Breakdown {
    async fn measure(&mut self, engine: &Engine, reps: usize, record: bool) {
        for i in 0..reps {
            let request = follow_up("fixed", i);
            let started = Instant::now();
            let handle = engine
                .prepare_continuation(&self.exchange, request)
                .expect("prepare");
            let prepare = started.elapsed();
            let started = Instant::now();
            let output = handle.run().await.expect("run");
            drop(output);
            let execute = started.elapsed();
            if record {
                self.prepare.push(prepare);
                self.execute.push(execute);
            }
        }
    }
}

/// Median, p90 (nearest rank) and minimum.
struct Stats {
    median: f64,
    p90: f64,
    min: f64,
    samples: usize,
}

fn stats_of(mut values: Vec<f64>) -> Stats {
    values.sort_by(f64::total_cmp);
    let rank = |p: f64| {
        let index = ((p * values.len() as f64).ceil() as usize).clamp(1, values.len()) - 1;
        values[index]
    };
    Stats {
        median: rank(0.5),
        p90: rank(0.9),
        min: values[0],
        samples: values.len(),
    }
}

fn stats(samples: &[Duration]) -> Stats {
    stats_of(samples.iter().map(|d| d.as_secs_f64() * US).collect())
}

const US: f64 = 1e6;

fn stats_json(s: &Stats) -> Value {
    json!({
        "median_us": report::round3(s.median),
        "p90_us": report::round3(s.p90),
        "min_us": report::round3(s.min),
        "samples": s.samples,
    })
}

fn merge(mut base: Value, extra: Value) -> Value {
    if let (Some(base), Value::Object(extra)) = (base.as_object_mut(), extra) {
        base.extend(extra);
    }
    base
}

fn workload(plan: &Plan, depth: usize) -> String {
    format!(
        "engine.continue_from(exchange of {depth} messages, Request::prompt(\"turn\") rendering \
         one ~200 B user message, with an output contract met on the first try, and capture); \
         the exchange was built by a first run and {} captured continuations (~200 B questions, \
         ~1.2 KB answers); every sample continues that same exchange. {} untimed warm-up runs, \
         then {} timed runs in {} rounds interleaved with the other cases; each timed run \
         includes dropping its RunOutput, not building the Request.",
        depth / 2 - 1,
        plan.warmup,
        plan.samples(),
        plan.rounds,
    )
}

/// Adds the case's figures to `out`; returns the median overheads (engine
/// minus provider alone, and measured within the run when the provider is
/// instrumented).
fn report_case(
    plan: &Plan,
    case: &Case,
    out: &mut serde_json::Map<String, Value>,
) -> (f64, Option<f64>) {
    let name = case.provider_name;
    let depth = case.depth;
    let alone = stats(&case.alone);
    let run = stats(&case.run);
    let provider_workload = match name {
        "scripted" => format!(
            "Scripted::complete (one unconditional rule replying {REPLY}) on the exact model \
             request the engine sends at depth {depth} ({} messages): it builds request facts \
             over every message and counts every word for usage, so it grows with depth. \
             Includes dropping the response; cloning the request is not timed.",
            depth + 1
        ),
        "cold" => format!(
            "the test kit's Fixed provider, polluting: each call first writes one byte in every \
             64-byte line of a {} KiB buffer (evicting the engine's working set from L1/L2, as \
             the scripted provider's pass over a long history does), then returns the fixed \
             reply without reading the request (depth {depth}).",
            POLLUTE_BYTES >> 10
        ),
        _ => format!(
            "the test kit's Fixed provider's complete() on the model request of depth {depth}: \
             three precomputed events (text {REPLY}, usage, done); the request is not read."
        ),
    };
    let alone_workload = format!(
        "{provider_workload} {} timed calls in blocks before each round's engine runs.",
        plan.samples()
    );
    let per_call = |faults: u64| report::round3(faults as f64 / plan.samples() as f64);
    out.insert(
        format!("provider_{name}_depth_{depth}"),
        merge(
            stats_json(&alone),
            json!({
                "workload": alone_workload,
                "page_faults_per_call": per_call(case.faults_alone),
            }),
        ),
    );
    out.insert(
        format!("engine_{name}_depth_{depth}"),
        merge(
            stats_json(&run),
            json!({
                "workload": format!("{} Provider: {name}.", workload(plan, depth)),
                "page_faults_per_call": per_call(case.faults_run),
            }),
        ),
    );
    let overhead = run.median - alone.median;
    let mut overhead_json = json!({
        "median_us": report::round3(overhead),
        "p90_us": report::round3(run.p90 - alone.p90),
        "workload": format!(
            "engine overhead per run: engine_{name}_depth_{depth} - provider_{name}_depth_{depth} \
             (median minus median, p90 minus p90)"
        ),
    });
    if case.timed.is_some() {
        overhead_json = merge(
            overhead_json,
            json!({
                "note": format!(
                    "indicative only: the provider alone and the provider inside a run do not \
                     cost the same (caches, allocator state, heap trimming), which matters when \
                     the provider dominates; overhead_{name}_in_run_depth_{depth} measures the \
                     engine's share within each run"
                ),
            }),
        );
    } else if depth == DEPTHS[0] {
        overhead_json = merge(
            overhead_json,
            json!({
                "target": format!("< {OVERHEAD_TARGET_US} us"),
                "met": overhead < OVERHEAD_TARGET_US,
            }),
        );
    }
    out.insert(format!("overhead_{name}_depth_{depth}"), overhead_json);
    if case.inside.is_empty() {
        return (overhead, None);
    }
    let in_run_values = case
        .run
        .iter()
        .zip(&case.inside)
        .map(|(run, inside)| (run.as_secs_f64() - inside.as_secs_f64()) * US)
        .collect();
    let in_run = stats_of(in_run_values);
    let inside = stats(&case.inside);
    let before_call = stats(&case.before_call);
    let after_call = stats(&case.after_call);
    let mut in_run_json = merge(
        stats_json(&in_run),
        json!({
            "workload": format!(
                "engine overhead per run, measured within each run: engine_{name}_depth_{depth} \
                 minus the time spent inside the provider during that run (stream(), every \
                 poll_next, dropping the stream, timed by a wrapper around the provider), so \
                 the provider's own variation cancels. before_call: from calling continue_from \
                 to entering the provider (continuation, resolve, render, contract lookup, \
                 admission, building the model request); after_call: from dropping the \
                 provider's stream to having dropped the RunOutput (validation, capture, \
                 ledger, events, output)."
            ),
            "provider_in_run_median_us": report::round3(inside.median),
            "provider_in_run_p90_us": report::round3(inside.p90),
            "before_call_median_us": report::round3(before_call.median),
            "after_call_median_us": report::round3(after_call.median),
        }),
    );
    if depth == DEPTHS[0] {
        in_run_json = merge(
            in_run_json,
            json!({
                "target": format!("< {OVERHEAD_TARGET_US} us"),
                "met": in_run.median < OVERHEAD_TARGET_US,
            }),
        );
    }
    out.insert(format!("overhead_{name}_in_run_depth_{depth}"), in_run_json);
    (overhead, Some(in_run.median))
}

/// The ratio of a figure's medians at depth 1,000 and depth 10.
fn flatness(figure: &str, medians: &[f64], out: &mut serde_json::Map<String, Value>) {
    let ratio = medians[1] / medians[0];
    out.insert(
        format!("{figure}_ratio_1000_over_10"),
        json!({
            "value": report::round3(ratio),
            "workload": format!("median({figure}_depth_1000) / median({figure}_depth_10)"),
            "target": format!("<= {FLATNESS_TARGET} (our reading of \"flat in depth\")"),
            "met": medians[0] > 0.0 && ratio <= FLATNESS_TARGET,
        }),
    );
}

async fn bench(plan: &Plan) -> Value {
    let (engine, providers) = engine();
    let mut exchanges = Vec::new();
    for &depth in &DEPTHS {
        exchanges.push(exchange_of_depth(&engine, depth).await);
    }

    let mut cases = Vec::new();
    let scripted: Arc<dyn Provider> = providers.scripted.clone();
    let cold: Arc<dyn Provider> = providers.cold.clone();
    for (name, provider, timed) in [
        ("scripted", &scripted, Some(&providers.scripted)),
        ("fixed", &providers.fixed, None),
        ("cold", &cold, Some(&providers.cold)),
    ] {
        if !plan.runs(name) {
            continue;
        }
        for (&depth, exchange) in DEPTHS.iter().zip(&exchanges) {
            cases.push(Case {
                provider_name: name,
                depth,
                provider: provider.clone(),
                timed: timed.cloned(),
                exchange: exchange.clone(),
                request: model_request(&engine, exchange, name),
                alone: Vec::new(),
                run: Vec::new(),
                inside: Vec::new(),
                before_call: Vec::new(),
                after_call: Vec::new(),
                faults_alone: 0,
                faults_run: 0,
            });
        }
    }
    let mut breakdowns: Vec<Breakdown> = if plan.runs("breakdown") {
        DEPTHS
            .iter()
            .zip(&exchanges)
            .map(|(&depth, exchange)| Breakdown {
                depth,
                exchange: exchange.clone(),
                prepare: Vec::new(),
                execute: Vec::new(),
            })
            .collect()
    } else {
        Vec::new()
    };

    for case in &mut cases {
        case.measure(&engine, plan.warmup, false).await;
    }
    for breakdown in &mut breakdowns {
        breakdown.measure(&engine, plan.warmup, false).await;
    }
    let slots = cases.len() + breakdowns.len();
    for round in 0..plan.rounds {
        // Rotate the order each round so no case always goes first.
        for k in 0..slots {
            let index = (round + k) % slots;
            if index < cases.len() {
                cases[index].measure(&engine, plan.reps, true).await;
            } else {
                breakdowns[index - cases.len()]
                    .measure(&engine, plan.reps, true)
                    .await;
            }
        }
    }

    let mut out = serde_json::Map::new();
    for name in ["fixed", "scripted", "cold"] {
        let medians: Vec<(f64, Option<f64>)> = cases
            .iter()
            .filter(|case| case.provider_name == name)
            .map(|case| report_case(plan, case, &mut out))
            .collect();
        if medians.len() == DEPTHS.len() {
            // Instrumented providers are judged on the overhead measured
            // within the run; the fixed one on engine - provider.
            let in_run: Option<Vec<f64>> = medians.iter().map(|m| m.1).collect();
            match in_run {
                Some(in_run) => flatness(&format!("overhead_{name}_in_run"), &in_run, &mut out),
                None => {
                    let overhead: Vec<f64> = medians.iter().map(|m| m.0).collect();
                    flatness(&format!("overhead_{name}"), &overhead, &mut out);
                }
            }
        }
    }
    for breakdown in &breakdowns {
        let prepare = stats(&breakdown.prepare);
        let execute = stats(&breakdown.execute);
        out.insert(
            format!("breakdown_fixed_depth_{}", breakdown.depth),
            json!({
                "workload": format!(
                    "engine_fixed_depth_{} split in two: engine.prepare_continuation(&exchange, \
                     request) (continuation request, resolve, render the prompt, contract \
                     lookup, credential and provider lookup) and PreparedExecution::run \
                     (admission, the call, validation, capture, ledger, events) plus dropping \
                     the output; {} timed runs",
                    breakdown.depth,
                    plan.samples()
                ),
                "prepare_median_us": report::round3(prepare.median),
                "prepare_p90_us": report::round3(prepare.p90),
                "execute_median_us": report::round3(execute.median),
                "execute_p90_us": report::round3(execute.p90),
                "samples": prepare.samples,
            }),
        );
    }
    // Untimed: allocations per run (requests are built outside the count).
    for (&depth, exchange) in DEPTHS.iter().zip(&exchanges) {
        let calls = 200;
        let requests: Vec<Request> = (0..calls).map(|i| follow_up("fixed", i)).collect();
        let mut requests = requests.into_iter();
        let (run_allocs, run_bytes) = allocations(calls, |_| {
            let request = requests.next().expect("one request per call");
            let engine = &engine;
            async move {
                drop(engine.continue_from(exchange, request).await.expect("run"));
            }
        })
        .await;
        let mut provider_allocs = Vec::new();
        for (name, provider) in [
            ("fixed", &providers.fixed),
            (
                "scripted",
                &(providers.scripted.clone() as Arc<dyn Provider>),
            ),
        ] {
            let requests: Vec<ModelRequest> = (0..calls)
                .map(|_| model_request(&engine, exchange, name))
                .collect();
            let mut requests = requests.into_iter();
            let (allocs, bytes) = allocations(calls, |_| {
                let request = requests.next().expect("one request per call");
                async move {
                    drop(provider.complete(request).await.expect("provider"));
                }
            })
            .await;
            provider_allocs.push((allocs, bytes));
        }
        out.insert(
            format!("allocations_depth_{depth}"),
            json!({
                "workload": format!(
                    "heap allocations (and reallocations) counted by a wrapper around the system \
                     allocator, untimed, over {calls} calls each: engine_fixed_depth_{depth} runs \
                     (the fixed provider's own share included), and each provider's complete() \
                     alone on the same model request"
                ),
                "engine_fixed_allocations_per_run": report::round3(run_allocs),
                "engine_fixed_bytes_per_run": report::round3(run_bytes),
                "provider_fixed_allocations_per_call": report::round3(provider_allocs[0].0),
                "provider_scripted_allocations_per_call": report::round3(provider_allocs[1].0),
                "provider_scripted_bytes_per_call": report::round3(provider_allocs[1].1),
            }),
        );
    }
    if plan.runs("variants") {
        out.insert(
            "variants_fixed_depth_10".into(),
            variants(&engine, &exchanges[0], plan).await,
        );
    }
    out.insert(
        "ledger_entries_at_end".into(),
        json!(engine.ledger().entries().len()),
    );
    Value::Object(out)
}

/// What each part of the request costs: the full follow-up without its
/// output contract, without capture, without both, and with an inline
/// message instead of a rendered prompt. Fixed provider, depth 10.
async fn variants(engine: &Engine, exchange: &Exchange, plan: &Plan) -> Value {
    type Make = fn(usize) -> Request;
    let variants: [(&str, Make); 5] = [
        ("full", |i| follow_up("fixed", i)),
        ("no_contract", |i| {
            Request::prompt("turn")
                .var("question", question(i))
                .profile("fixed")
                .capture()
        }),
        ("no_capture", |i| {
            Request::prompt("turn")
                .var("question", question(i))
                .profile("fixed")
                .output_contract(answer_schema())
        }),
        ("no_contract_no_capture", |i| {
            Request::prompt("turn")
                .var("question", question(i))
                .profile("fixed")
        }),
        ("inline_message_no_contract_no_capture", |i| {
            Request::default()
                .message(Message::user(question(i)))
                .profile("fixed")
        }),
    ];
    let reps = plan.samples() / 5;
    let mut times: Vec<Vec<Duration>> = vec![Vec::new(); variants.len()];
    for round in 0..plan.rounds + 1 {
        for (k, (_, make)) in variants.iter().enumerate() {
            for i in 0..reps / plan.rounds {
                let request = make(i);
                let started = Instant::now();
                drop(engine.continue_from(exchange, request).await.expect("run"));
                // Round 0 is the warm-up.
                if round > 0 {
                    times[k].push(started.elapsed());
                }
            }
        }
    }
    let mut out = serde_json::Map::new();
    out.insert(
        "workload".into(),
        json!(format!(
            "engine_fixed_depth_10 with parts of the request left out, to see what each \
             costs: full = the prompt follow-up with output contract and capture; inline \
             message = Request::default().message(..) instead of rendering the prompt. \
             {} timed runs each after a warm-up round, variants interleaved by round; \
             allocations counted over 200 further untimed runs.",
            times[0].len()
        )),
    );
    for ((name, make), times) in variants.iter().zip(&times) {
        let requests: Vec<Request> = (0..200).map(make).collect();
        let mut requests = requests.into_iter();
        let (allocs, bytes) = allocations(200, |_| {
            let request = requests.next().expect("one request per call");
            async move {
                drop(engine.continue_from(exchange, request).await.expect("run"));
            }
        })
        .await;
        let s = stats(times);
        out.insert(
            (*name).into(),
            json!({
                "median_us": report::round3(s.median),
                "p90_us": report::round3(s.p90),
                "allocations_per_run": report::round3(allocs),
                "bytes_per_run": report::round3(bytes),
            }),
        );
    }
    Value::Object(out)
}

fn main() {
    let plan = Plan::from_env();
    let started = Instant::now();
    let load_before = report::loadavg();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("tokio runtime");
    let results = runtime.block_on(bench(&plan));
    let report = json!({
        "benchmark": "skein-engine",
        "quick": plan.quick,
        "machine": report::machine(json!({ "runtime": "tokio current_thread" })),
        "loadavg_before": load_before,
        "loadavg_after": report::loadavg(),
        "targets": {
            "overhead_depth_10": format!(
                "engine overhead per run (render, admission, validation, capture, ledger) \
                 < {OVERHEAD_TARGET_US} us at depth 10: overhead_fixed_depth_10 (a provider \
                 that does nothing) and overhead_scripted_in_run_depth_10 (the scripted model, \
                 measured within the run)"
            ),
            "flatness": format!(
                "flat in depth apart from rendering new messages; read here as overhead at \
                 depth 1,000 <= {FLATNESS_TARGET}x depth 10: overhead_fixed_ratio_1000_over_10, \
                 overhead_scripted_in_run_ratio_1000_over_10, overhead_cold_in_run_ratio_1000_over_10"
            ),
        },
        "results": results,
        "total_seconds": report::round3(started.elapsed().as_secs_f64()),
    });
    println!(
        "{}",
        serde_json::to_string_pretty(&report).expect("serialize report")
    );
}
