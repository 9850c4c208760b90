//! Local model benchmarks: SmolLM2-135M (Q4_1) through llama.cpp on one
//! thread, timed with a hand-written loop (no criterion). Prints one JSON
//! object to stdout; every figure states its workload and target.
//!
//! Run with `cargo bench -p skein-local --bench local` (release profile).
//! `--quick` or `SKEIN_BENCH_QUICK=1` shrinks it to about 30 s on a busy
//! 2-core machine (one prompt-evaluation sample without warm-up, a 32-token
//! reply, 2 branches of 8 tokens).
//! `--only throughput|fork` (repeatable) runs one group; `--chunk N`
//! overrides `LocalConfig::chunk_tokens` (default 64) for both models, to
//! see what the chunk size costs (it also changes greedy output, and is the
//! granularity of prefix reuse). `--repetition off` decodes without the
//! repetition control of `Repetition::default()` (plain greedy), to see what
//! it costs per token.
//!
//! The model file comes from `skein_local::model_path(&SMOLLM2)`
//! (`SKEIN_MODEL_PATH` overrides). When it is missing, the binary prints a
//! JSON object with an `error` field saying how to fetch it and exits 0, so
//! a quick bench run on a machine without the model does not fail.
//!
//! Figures:
//! - `prompt_eval_tokens_per_s`: a ~500-token prompt, `max_tokens` 1, prefix
//!   reuse off (every request is cold): prompt tokens / wall time of the
//!   request. Compared with raw llama.cpp on this machine (250 tokens/s).
//! - `generation_tokens_per_s`: a 128-token reply; (output tokens - 1) /
//!   (time between the first and the last streamed text event), i.e. the
//!   per-token decode loop only. Compared with raw llama.cpp (147 tokens/s).
//! - Both carry `cpu_share`: the process's CPU time over wall time during
//!   the timed requests (about 1.0 when the llama.cpp thread kept its core on
//!   a busy machine); the report also gives the load average and the
//!   machine's steal time over the run.
//! - `fork_8_branches`: 8 different user follow-ups (16 tokens each) to the
//!   end of a ~1,000-token conversation, on a model with prefix reuse and
//!   on one without. The replies must be byte-identical; if they are not,
//!   the report carries a `failure` field and the binary exits 1.

#[path = "../../../bench-support/report.rs"]
mod report;

use serde_json::{Value, json};
use skein_core::provider::GenerationOptions;
use skein_core::{FinishReason, Message, ModelRequest, Provider, StreamEvent, Thread, Usage};
use skein_local::{LocalConfig, LocalModel, LocalStats, Repetition, SMOLLM2, model_path};
use std::time::{Duration, Instant};

/// Raw llama.cpp on this machine, 1 thread (llama-bench pp512 / tg128).
const RAW_PROMPT_EVAL_TPS: f64 = 250.0;
const RAW_GENERATION_TPS: f64 = 147.0;
/// Target: the 8 branches with prefix reuse take at most this fraction of
/// the time without.
const FORK_RATIO_TARGET: f64 = 0.35;
const THREADS: u32 = 1;
const CONTEXT_TOKENS: u32 = 2048;

struct Plan {
    quick: bool,
    only: Vec<String>,
    /// `--chunk N`: evaluation chunk size instead of the default.
    chunk: Option<u32>,
    /// `--repetition off`: no repetition control.
    repetition_off: bool,
    /// Timed cold evaluations of the ~500-token prompt.
    prompt_reps: usize,
    /// Untimed evaluations of it first.
    prompt_warmup: usize,
    /// Timed generations (after one untimed short one).
    generation_reps: usize,
    generation_tokens: u32,
    branches: usize,
    branch_tokens: u32,
    /// Give the model without reuse the same untimed warm-up request.
    warm_cold_model: bool,
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
        let chunk = args
            .windows(2)
            .find(|pair| pair[0] == "--chunk")
            .and_then(|pair| pair[1].parse().ok());
        let repetition_off = args
            .windows(2)
            .any(|pair| pair[0] == "--repetition" && pair[1] == "off");
        if quick {
            Plan {
                quick,
                only,
                chunk,
                repetition_off,
                prompt_reps: 1,
                prompt_warmup: 0,
                generation_reps: 1,
                generation_tokens: 32,
                branches: 2,
                branch_tokens: 8,
                warm_cold_model: false,
            }
        } else {
            Plan {
                quick,
                only,
                chunk,
                repetition_off,
                prompt_reps: 5,
                prompt_warmup: 1,
                generation_reps: 3,
                generation_tokens: 128,
                branches: 8,
                branch_tokens: 16,
                warm_cold_model: true,
            }
        }
    }

    fn runs(&self, group: &str) -> bool {
        self.only.is_empty() || self.only.iter().any(|g| g == group)
    }
}

/// CPU seconds (user + system) this process has used, from /proc/self/stat
/// (clock ticks of 1/100 s, Linux's USER_HZ). `None` elsewhere.
fn cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the parenthesised command name; utime and stime are the
    // 14th and 15th fields of the line, so the 12th and 13th after it.
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) / 100.0)
}

/// Steal time of the whole machine (all CPUs), in seconds, from /proc/stat.
fn steal_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let cpu = stat.lines().next()?;
    let steal: f64 = cpu.split_whitespace().nth(8)?.parse().ok()?;
    Some(steal / 100.0)
}

/// Process CPU time over wall time while `f` runs: about 1.0 when the
/// llama.cpp thread kept its core, lower when it was descheduled.
fn cpu_share<T>(f: impl FnOnce() -> T) -> (T, Option<f64>) {
    let cpu = cpu_seconds();
    let started = Instant::now();
    let value = f();
    let wall = started.elapsed().as_secs_f64();
    let share = cpu
        .zip(cpu_seconds())
        .map(|(a, b)| report::round3((b - a) / wall));
    (value, share)
}

fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    if n % 2 == 1 {
        sorted[n / 2]
    } else {
        (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
    }
}

fn config(path: &std::path::Path, prefix_reuse: bool, plan: &Plan) -> LocalConfig {
    let mut config = LocalConfig::new(path);
    if let Some(chunk) = plan.chunk {
        config.chunk_tokens = chunk;
    }
    config.threads = THREADS;
    config.context_tokens = CONTEXT_TOKENS;
    config.prefix_reuse = prefix_reuse;
    if plan.repetition_off {
        config.repetition = Repetition::off();
    }
    config
}

fn request(thread: &Thread, max_tokens: u32) -> ModelRequest {
    let mut request = ModelRequest::new("smollm2", thread.clone());
    request.options = GenerationOptions {
        max_tokens: Some(max_tokens),
        ..GenerationOptions::default()
    };
    request
}

/// One streamed request, with the times of its events.
struct Timed {
    text: String,
    usage: Usage,
    finish: Option<FinishReason>,
    /// From sending the request to the end of the stream.
    total: Duration,
    first_text: Option<Duration>,
    last_text: Option<Duration>,
    text_events: usize,
}

impl Timed {
    fn input_tokens(&self) -> u64 {
        self.usage.input_tokens.unwrap_or(0)
    }

    fn output_tokens(&self) -> u64 {
        self.usage.output_tokens.unwrap_or(0)
    }

    fn finish(&self) -> String {
        match &self.finish {
            Some(reason) => format!("{reason:?}").to_lowercase(),
            None => "none".into(),
        }
    }
}

struct Runner {
    runtime: tokio::runtime::Runtime,
}

impl Runner {
    fn run(&self, model: &LocalModel, thread: &Thread, max_tokens: u32) -> Result<Timed, String> {
        self.runtime.block_on(async {
            let started = Instant::now();
            let mut stream = model.stream(request(thread, max_tokens));
            let mut timed = Timed {
                text: String::new(),
                usage: Usage::default(),
                finish: None,
                total: Duration::ZERO,
                first_text: None,
                last_text: None,
                text_events: 0,
            };
            while let Some(event) = std::future::poll_fn(|cx| stream.as_mut().poll_next(cx)).await {
                let at = started.elapsed();
                match event.map_err(|error| error.to_string())? {
                    StreamEvent::Text(text) => {
                        timed.first_text.get_or_insert(at);
                        timed.last_text = Some(at);
                        timed.text_events += 1;
                        timed.text.push_str(&text);
                    }
                    StreamEvent::Usage(usage) => timed.usage = usage,
                    StreamEvent::Done(reason) => timed.finish = Some(reason),
                    _ => {}
                }
            }
            timed.total = started.elapsed();
            if timed.finish.is_none() {
                return Err("the stream ended without Done".into());
            }
            Ok(timed)
        })
    }
}

// ---------------------------------------------------------------------------
// Prompts.

const BRIEFING: &str = "You are the assistant of a small software team that maintains skein, \
a command-line tool for talking to language models. The team keeps every conversation as a \
graph of messages: each message is a node that points to its parent, so a conversation can \
fork at any point and every branch shares the history before the fork. Conversations are \
stored in a SQLite database in the user's data directory. The database uses write-ahead \
logging, and each turn is committed in a single transaction together with a record of the \
model call that produced it: which model answered, how many tokens it read and wrote, how \
long it took, and whether it finished normally or was cut off by the token limit.\n\n\
skein can talk to remote providers over HTTP, but it also ships an embedded local model so \
that it works offline. The local model is SmolLM2 with 135 million parameters, quantised to \
four bits, and it runs inside the process through llama.cpp on the CPU. Because the machine \
it runs on is often a small laptop or a shared build server, the team cares about how fast a \
prompt is evaluated and how fast tokens are generated on a single thread. When a user forks \
a conversation, the new branch shares a long prefix with the old one, so the local model keeps \
the key and value cache of the previous prompt and evaluates only the part that differs. The \
team insists that this reuse must never change a single byte of the output: greedy decoding \
with and without the cache must give the same reply.\n\n\
When you answer, be brief and concrete. Prefer short sentences. If a question is about the \
design, explain the trade-off in one or two sentences and name the part of the code involved. \
If you do not know something, say so instead of guessing. Do not repeat the question back to \
the user, and do not add greetings or sign-offs.\n\n\
Some facts you may need. The model file is about ninety-eight megabytes and lives in the user's \
cache directory; it is fetched once with `skein models pull smollm2` and checked against a \
known size and hash before it is used. The context holds a few thousand tokens, and a prompt \
that does not fit is rejected with a typed error rather than silently cut. Replies are decoded \
one token at a time, and a reply that reaches its token limit is recorded as cut off by length. \
Exports write a conversation and all of its branches as JSON lines that can be imported into \
another database without losing the shape of the graph.";

const TURNS: [(&str, &str); 6] = [
    (
        "Why does skein store messages as a graph instead of a list per conversation?",
        "Because forks are cheap that way. A branch is just a new head that points into the \
         existing graph, so the shared history is stored once, and loading a branch walks from \
         its head back to the root. A list per conversation would copy the whole history on \
         every fork.",
    ),
    (
        "What does a turn commit write to the database?",
        "One transaction writes the new user and assistant nodes, the run record of the model \
         call with its token counts and timing, and moves the conversation's bookmark to the \
         new head with a compare-and-set, so two writers cannot both extend the same head.",
    ),
    (
        "How does the local model avoid evaluating the whole prompt again after a fork?",
        "It keeps the tokens whose keys and values are in the cache, finds the longest common \
         prefix with the new prompt, rounds it down to a chunk boundary and evaluates only the \
         rest. Prompts are always evaluated in chunks aligned to absolute positions, so the \
         reused and the cold evaluation compute exactly the same numbers.",
    ),
    (
        "And why round down to a chunk boundary at all?",
        "Because llama.cpp can give slightly different results depending on how a prompt is \
         split into batches. If every evaluation uses the same aligned chunks, each chunk sees \
         the same inputs and the same cache contents, so the logits are identical bit for bit \
         and greedy decoding picks the same tokens.",
    ),
    (
        "Does the cache survive a restart of skein?",
        "No. The cache lives in the memory of the llama.cpp context, which belongs to one \
         worker thread in one process. A new process starts cold and pays for the first prompt \
         in full; after that, every request that shares a prefix with the previous one is cheap.",
    ),
    (
        "What does the worker do when the caller stops reading the stream?",
        "The next attempt to send a token fails, so it stops generating at once. The tokens it \
         has already decoded stay in the cache, which remains consistent, so the next request \
         can still reuse them.",
    ),
];

const FOLLOWUPS: [&str; 8] = [
    "How large is the embedded model on disk?",
    "What happens when the prompt is longer than the context?",
    "Can two terminals write to the same conversation at once?",
    "How is a conversation exported?",
    "Why is one thread faster than two on a busy machine?",
    "What does the run record say when a reply is cut off?",
    "How would you test that reuse never changes the output?",
    "Summarise the design in one sentence.",
];

/// The ~1,000-token conversation the branches fork from: the briefing and
/// six user/assistant turns, ending with an assistant message.
fn base_conversation() -> Thread {
    let mut thread = Thread::new().push(Message::system(BRIEFING));
    for (question, answer) in TURNS {
        thread = thread
            .push(Message::user(question))
            .push(Message::assistant(answer));
    }
    thread
}

/// A ~500-token single-turn prompt for prompt evaluation: the briefing
/// without its third paragraph.
fn prompt_eval_thread() -> Thread {
    let paragraphs: Vec<&str> = BRIEFING.split("\n\n").collect();
    let text = format!(
        "Read the following description and then say in one word whether it mentions SQLite.\n\n{}\n\n{}\n\n{}",
        paragraphs[0], paragraphs[1], paragraphs[3]
    );
    Thread::from_messages([
        Message::system("You are a helpful assistant."),
        Message::user(text),
    ])
}

fn generation_thread() -> Thread {
    Thread::from_messages([
        Message::system("You are a helpful assistant."),
        Message::user("Write a long story about a dragon who learns to bake bread."),
    ])
}

// ---------------------------------------------------------------------------
// Throughput.

fn bench_throughput(runner: &Runner, model: &LocalModel, plan: &Plan) -> Result<Value, String> {
    let prompt = prompt_eval_thread();
    for _ in 0..plan.prompt_warmup {
        runner.run(model, &prompt, 1)?;
    }
    let mut prompt_samples = Vec::new();
    let mut prompt_tokens = 0;
    let (result, prompt_cpu) = cpu_share(|| {
        for _ in 0..plan.prompt_reps {
            let timed = runner.run(model, &prompt, 1)?;
            if timed.usage.cache_read_tokens.unwrap_or(0) != 0 {
                return Err("prompt evaluation reused cached tokens".to_string());
            }
            prompt_tokens = timed.input_tokens();
            prompt_samples.push(timed.input_tokens() as f64 / timed.total.as_secs_f64());
        }
        Ok(())
    });
    result?;
    let prompt_tps = median(&prompt_samples);

    let story = generation_thread();
    runner.run(model, &story, 8)?; // untimed
    let mut generation_samples = Vec::new();
    let mut generation_alt = Vec::new();
    let mut replies = Vec::new();
    let cpu_before = cpu_seconds();
    let generation_started = Instant::now();
    for _ in 0..plan.generation_reps {
        let timed = runner.run(model, &story, plan.generation_tokens)?;
        let (Some(first), Some(last)) = (timed.first_text, timed.last_text) else {
            return Err("the generation produced no text".into());
        };
        let steps = timed.output_tokens().saturating_sub(1) as f64;
        generation_samples.push(steps / (last - first).as_secs_f64());
        generation_alt
            .push(timed.output_tokens() as f64 / (timed.total - first).as_secs_f64().max(1e-9));
        replies.push(json!({
            "input_tokens": timed.input_tokens(),
            "output_tokens": timed.output_tokens(),
            "text_events": timed.text_events,
            "finish": timed.finish(),
            "time_to_first_text_ms": report::round3(first.as_secs_f64() * 1e3),
            "first_to_last_text_ms": report::round3((last - first).as_secs_f64() * 1e3),
        }));
    }
    let generation_cpu = cpu_before
        .zip(cpu_seconds())
        .map(|(a, b)| report::round3((b - a) / generation_started.elapsed().as_secs_f64()));
    let generation_tps = median(&generation_samples);
    Ok(json!({
        "prompt_eval_tokens_per_s": {
            "value": report::round3(prompt_tps),
            "samples": prompt_samples.iter().map(|v| report::round3(*v)).collect::<Vec<_>>(),
            "prompt_tokens": prompt_tokens,
            "cpu_share": prompt_cpu,
            "ratio_to_raw_llama_cpp": report::round3(prompt_tps / RAW_PROMPT_EVAL_TPS),
            "raw_llama_cpp_tokens_per_s": RAW_PROMPT_EVAL_TPS,
            "workload": format!(
                "a single-turn prompt of {prompt_tokens} tokens (usage.input_tokens), max_tokens 1, \
                 prefix reuse off so every request is cold; {} untimed request(s), then {} timed; \
                 tokens/s = prompt tokens / wall time from sending the request to the end of the \
                 stream (template rendering, tokenising, evaluation in {}-token chunks, one greedy \
                 sample). Median of the samples.",
                plan.prompt_warmup, plan.prompt_reps, model.config().chunk_tokens
            ),
        },
        "generation_tokens_per_s": {
            "value": report::round3(generation_tps),
            "samples": generation_samples.iter().map(|v| report::round3(*v)).collect::<Vec<_>>(),
            "alt_output_over_total_minus_first_text": generation_alt.iter().map(|v| report::round3(*v)).collect::<Vec<_>>(),
            "replies": replies,
            "cpu_share": generation_cpu,
            "ratio_to_raw_llama_cpp": report::round3(generation_tps / RAW_GENERATION_TPS),
            "raw_llama_cpp_tokens_per_s": RAW_GENERATION_TPS,
            "workload": format!(
                "greedy reply of max_tokens {} to a short story request; 1 untimed 8-token \
                 request, then {} timed; tokens/s = (output tokens - 1) / (time between the first \
                 and the last streamed text event), i.e. one decode plus one sample per token. \
                 Median of the samples.",
                plan.generation_tokens, plan.generation_reps
            ),
        },
    }))
}

// ---------------------------------------------------------------------------
// Forks.

fn stats_delta(after: LocalStats, before: LocalStats) -> Value {
    json!({
        "requests": after.requests - before.requests,
        "prompt_tokens": after.prompt_tokens - before.prompt_tokens,
        "reused_tokens": after.reused_tokens - before.reused_tokens,
        "evaluated_tokens": after.evaluated_tokens - before.evaluated_tokens,
        "generated_tokens": after.generated_tokens - before.generated_tokens,
    })
}

fn bench_fork(
    runner: &Runner,
    cold: &LocalModel,
    warm: &LocalModel,
    plan: &Plan,
) -> Result<(Value, Option<Value>), String> {
    let base = base_conversation();
    // Untimed warm-up with the base conversation: fills the reusing model's
    // cache with it (and, in a full run, warms the other model alike).
    let warmup = runner.run(warm, &base, 1)?;
    let base_tokens = warmup.input_tokens();
    if plan.warm_cold_model {
        runner.run(cold, &base, 1)?;
    }
    let cold_before = cold.stats();
    let warm_before = warm.stats();
    let mut cold_total = Duration::ZERO;
    let mut warm_total = Duration::ZERO;
    // With reuse: time to the first text event (prompt) and the rest.
    let mut warm_prompt = Duration::ZERO;
    let mut warm_decode_steps = 0u64;
    let mut warm_decode_time = Duration::ZERO;
    let mut branches = Vec::new();
    let mut mismatches = Vec::new();
    for (i, followup) in FOLLOWUPS.iter().take(plan.branches).enumerate() {
        let thread = base.push(Message::user(*followup));
        // Alternate which model goes first so drift hits both alike.
        let (without, with) = if i % 2 == 0 {
            let without = runner.run(cold, &thread, plan.branch_tokens)?;
            let with = runner.run(warm, &thread, plan.branch_tokens)?;
            (without, with)
        } else {
            let with = runner.run(warm, &thread, plan.branch_tokens)?;
            let without = runner.run(cold, &thread, plan.branch_tokens)?;
            (without, with)
        };
        cold_total += without.total;
        warm_total += with.total;
        let first = with.first_text.unwrap_or(with.total);
        warm_prompt += first;
        if let Some(last) = with.last_text {
            warm_decode_steps += with.output_tokens().saturating_sub(1);
            warm_decode_time += last - first;
        }
        let identical = without.text.as_bytes() == with.text.as_bytes()
            && without.finish == with.finish
            && without.output_tokens() == with.output_tokens();
        if !identical {
            mismatches.push(json!({
                "branch": i,
                "followup": followup,
                "without_reuse": {"text": without.text, "finish": without.finish(), "output_tokens": without.output_tokens()},
                "with_reuse": {"text": with.text, "finish": with.finish(), "output_tokens": with.output_tokens()},
            }));
        }
        branches.push(json!({
            "followup": followup,
            "prompt_tokens": with.input_tokens(),
            "reused_tokens": with.usage.cache_read_tokens.unwrap_or(0),
            "output_tokens": with.output_tokens(),
            "without_reuse_s": report::round3(without.total.as_secs_f64()),
            "with_reuse_s": report::round3(with.total.as_secs_f64()),
            "with_reuse_first_text_s": report::round3(first.as_secs_f64()),
            "without_reuse_first_text_s": report::round3(without.first_text.unwrap_or(without.total).as_secs_f64()),
            "identical": identical,
            "reply": with.text,
        }));
    }
    let ratio = warm_total.as_secs_f64() / cold_total.as_secs_f64();
    let failure = (!mismatches.is_empty()).then(|| {
        json!({
            "what": "prefix reuse changed the output of some branches",
            "mismatches": mismatches,
        })
    });
    let value = json!({
        "workload": format!(
            "a conversation of {base_tokens} prompt tokens (a long system message and 6 \
             user/assistant turns, ending with an assistant message; usage.input_tokens of the \
             warm-up), then {} branches from its end: {} different user follow-ups, each with \
             max_tokens {}, greedy. Two LocalModel instances (1 thread, {CONTEXT_TOKENS}-token \
             context, {}-token chunks), prefix_reuse true and false. Untimed warm-up: the \
             reusing model is sent the base conversation (max_tokens 1) so its cache holds it{}. \
             Branches run one at a time, alternating which model goes first; each time is the \
             wall time of one request, and the totals are their sums.",
            plan.branches,
            plan.branches,
            plan.branch_tokens,
            cold.config().chunk_tokens,
            if plan.warm_cold_model {
                "; the model without reuse gets the same request"
            } else {
                "; the model without reuse was already warmed by the throughput runs"
            },
        ),
        "base_prompt_tokens": base_tokens,
        "branches": plan.branches,
        "max_tokens": plan.branch_tokens,
        "without_reuse_s": report::round3(cold_total.as_secs_f64()),
        "with_reuse_s": report::round3(warm_total.as_secs_f64()),
        "ratio": report::round3(ratio),
        "speedup": report::round3(1.0 / ratio),
        "with_reuse_breakdown": {
            "to_first_text_s": report::round3(warm_prompt.as_secs_f64()),
            "after_first_text_s": report::round3((warm_total - warm_prompt).as_secs_f64()),
            "generation_tokens_per_s": report::round3(
                warm_decode_steps as f64 / warm_decode_time.as_secs_f64().max(1e-9)
            ),
            "note": "to_first_text: rendering, tokenising, evaluating the unreused tail \
                     (stats_with_reuse.evaluated_tokens in all), first sample; after: decoding \
                     the rest of the reply at a depth of ~1,000 tokens",
        },
        "target": format!("with reuse <= {FORK_RATIO_TARGET}x without"),
        "met": ratio <= FORK_RATIO_TARGET,
        "replies_identical": mismatches.is_empty(),
        "stats_without_reuse": stats_delta(cold.stats(), cold_before),
        "stats_with_reuse": stats_delta(warm.stats(), warm_before),
        "per_branch": branches,
    });
    Ok((value, failure))
}

// ---------------------------------------------------------------------------

fn main() {
    let plan = Plan::from_env();
    let started = Instant::now();
    let path = model_path(&SMOLLM2).filter(|path| path.is_file());
    let Some(path) = path else {
        let report = json!({
            "benchmark": "skein-local",
            "quick": plan.quick,
            "error": format!(
                "the local model is missing ({}): run `cargo run -p skein-cli -- models pull \
                 smollm2` or set SKEIN_MODEL_PATH",
                model_path(&SMOLLM2).map_or("no models directory".into(), |p| p.display().to_string())
            ),
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&report).expect("serialize")
        );
        return;
    };
    let load_before = report::loadavg();
    let steal_before = steal_seconds();
    let result = (|| {
        let runner = Runner {
            runtime: tokio::runtime::Builder::new_current_thread()
                .build()
                .map_err(|error| error.to_string())?,
        };
        let load = |reuse| LocalModel::load(config(&path, reuse, &plan)).map_err(|e| e.to_string());
        let cold = load(false)?;
        let mut results = serde_json::Map::new();
        let mut failure = None;
        if plan.runs("throughput") {
            let throughput = bench_throughput(&runner, &cold, &plan)?;
            results.extend(throughput.as_object().cloned().unwrap_or_default());
        }
        if plan.runs("fork") {
            let warm = load(true)?;
            let (fork, fork_failure) = bench_fork(&runner, &cold, &warm, &plan)?;
            results.insert("fork_8_branches".into(), fork);
            failure = fork_failure;
        }
        Ok::<_, String>((results, failure))
    })();
    let mut report = json!({
        "benchmark": "skein-local",
        "quick": plan.quick,
        "model": path.display().to_string(),
        "machine": report::machine(json!({ "llama_threads": THREADS })),
        "repetition": if plan.repetition_off { "off" } else { "Repetition::default()" },
        "loadavg_before": load_before,
        "loadavg_after": report::loadavg(),
        "machine_steal_seconds": steal_before
            .zip(steal_seconds())
            .map(|(a, b)| report::round3(b - a)),
        "targets": {
            "prompt_eval_tokens_per_s": format!("reported against raw llama.cpp's {RAW_PROMPT_EVAL_TPS} tokens/s (1 thread)"),
            "generation_tokens_per_s": format!("reported against raw llama.cpp's {RAW_GENERATION_TPS} tokens/s (1 thread)"),
            "fork_8_branches": format!("with prefix reuse <= {FORK_RATIO_TARGET}x the time without; replies byte-identical"),
        },
    });
    let object = report.as_object_mut().expect("object");
    let mut failed = false;
    match result {
        Ok((results, failure)) => {
            object.insert("results".into(), Value::Object(results));
            if let Some(failure) = failure {
                object.insert("failure".into(), failure);
                failed = true;
            }
        }
        Err(error) => {
            object.insert("error".into(), json!(error));
            failed = true;
        }
    }
    object.insert(
        "total_seconds".into(),
        json!(report::round3(started.elapsed().as_secs_f64())),
    );
    println!(
        "{}",
        serde_json::to_string_pretty(&report).expect("serialize report")
    );
    if failed {
        std::process::exit(1);
    }
}
