//! Recorded-chat benchmarks: a hand-written timing loop (no criterion)
//! that prints one JSON object to stdout.
//!
//! Run with `cargo bench -p skein-recorded --bench recorded` (release
//! profile); `--quick` or `SKEIN_BENCH_QUICK=1` cuts repetitions.
//!
//! Workload: a recorded chat of 1, 50 and 200 turns on the scripted
//! advisor model (deterministic, no model file) in a SQLite store in a
//! temporary directory; its last turn is explained (loaded and its sources
//! ranked with the lexical embedder) and re-run without `social-sentiment`
//! (2 samples), as `skein explain NODE` and `skein rerun NODE` do, starting
//! from the reply node. Each figure is the median in milliseconds.
//! `load_whole` loads the whole chat first (every turn's evidence);
//! `load_turn` loads the one turn (`RecordedChatBuilder::load_turn`),
//! which is what the CLI and the web view do.
//!
//! `continue_ms` sends one more turn to a chat of that many turns, as
//! `skein prompt --source … -c` does: `load_whole` loads the whole chat
//! first, `resume` resumes it (`RecordedChatBuilder::resume`, what the CLI
//! does). Each variant continues a chat of its own, which grows by one turn
//! per repetition (by 32 over a full run).
//!
//! `replay`: 1,000 turns (10,000 without `--quick`), recorded on the echo
//! model as conversations of 10 turns, replayed on the echo model
//! (`skein_recorded::replay`, one worker, the model's capacity). It prints
//! the replay's time per turn, the time per turn of the same model calls
//! made alone (a prompt that records nothing), their difference (the
//! replay's overhead per turn beyond the model call: reading the original,
//! claiming, comparing, writing the turn), and the process's peak resident
//! memory before and after the replay (Linux `VmHWM`).

#[path = "../../../bench-support/report.rs"]
mod report;

#[path = "../examples/advisor.rs"]
#[allow(dead_code, reason = "the benchmark uses only the walkthrough's set-up")]
mod advisor;

use serde_json::{Value, json};
use skein_conversation::{Conversation, Model};
use skein_core::NodeId;
use skein_recorded::replay::{ReplayPlan, Replayer, Selection};
use skein_recorded::{
    LexicalEmbedder, ReasonOptions, RecordedChat, RecordedChatBuilder, RerunOptions, Source, TurnAt,
};
use skein_store::{ConversationId, Store};
use std::sync::Arc;
use std::time::{Duration, Instant};

const QUESTIONS: [&str; 3] = [
    "How is the position looking?",
    "Should we BUY or HOLD this position?",
    "How much should we allocate?",
];

fn builder(store: &Store) -> RecordedChatBuilder {
    RecordedChat::builder(advisor::engine(advisor::model()), "advisor")
        .system("You are an investment advisor. Answer BUY or HOLD when asked.")
        .source(Source::fact(
            "fundamentals",
            "fundamentals: revenue flat, margins stable",
        ))
        .source(Source::fact(
            "social-sentiment",
            "social-sentiment: bullish, retail chatter at a three-month high",
        ))
        .embedder(Arc::new(LexicalEmbedder::default()))
        .store(store.clone())
}

/// A chat of `turns` turns whose last asks BUY or HOLD; its conversation
/// and last reply node.
async fn record(store: &Store, turns: usize) -> (ConversationId, NodeId) {
    let mut chat = builder(store).build().await.unwrap();
    for i in 0..turns {
        let question = if i + 1 == turns {
            QUESTIONS[1]
        } else {
            QUESTIONS[i % 3]
        };
        chat.send(question).await.unwrap();
    }
    let node = chat.turns().last().unwrap().node();
    (chat.conversation().unwrap().clone(), node)
}

fn median(mut times: Vec<Duration>) -> f64 {
    times.sort();
    report::round3(times[times.len() / 2].as_secs_f64() * 1e3)
}

fn rerun_options() -> RerunOptions {
    RerunOptions::ignore(["social-sentiment"])
        .samples(2)
        .comparator(|a, b| a.split(':').next() != b.split(':').next())
}

/// Explain then re-run the turn whose reply is `node`, loading the whole
/// chat first.
async fn whole(store: &Store, cid: &ConversationId, node: NodeId, rerun: bool) {
    let mut chat = builder(store).load(cid).await.unwrap();
    let k = chat.turn_of_node(node).unwrap();
    chat.reason(k, ReasonOptions::new()).await.unwrap();
    if rerun {
        chat.rerun_turn(k, rerun_options()).await.unwrap();
    }
}

/// Explain then re-run the turn whose reply is `node`, loading that turn
/// alone.
async fn one(store: &Store, node: NodeId, rerun: bool) {
    let mut turn = builder(store).load_turn(TurnAt::Reply(node)).await.unwrap();
    turn.reason(ReasonOptions::new()).await.unwrap();
    if rerun {
        turn.rerun(rerun_options()).await.unwrap();
    }
}

/// Send one more turn to the chat stored as `cid`, loading it whole first
/// or resuming it.
async fn go_on(store: &Store, cid: &ConversationId, resume: bool) {
    let mut chat = if resume {
        builder(store).resume(cid).await.unwrap()
    } else {
        builder(store).load(cid).await.unwrap()
    };
    chat.send(QUESTIONS[0]).await.unwrap();
}

async fn time(reps: usize, mut work: impl AsyncFnMut()) -> f64 {
    work().await;
    let mut times = Vec::with_capacity(reps);
    for _ in 0..reps {
        let start = Instant::now();
        work().await;
        times.push(start.elapsed());
    }
    median(times)
}

/// Turns per recorded conversation in the replay workload.
const REPLAY_DEPTH: usize = 10;

/// The process's peak resident memory in KiB (Linux), if it can be read.
fn peak_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|line| line.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Record `turns` turns on echo, replay them on echo, and time both the
/// replay and the same calls made alone.
async fn replay_figures(turns: usize) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("replay.sqlite")).unwrap();
    let echo = Model::open("echo").unwrap();
    let mut selection = Selection::new();
    for c in 0..turns / REPLAY_DEPTH {
        let conversation = Conversation::builder(echo.clone()).store(&store).build();
        for t in 0..REPLAY_DEPTH {
            conversation
                .prompt(format!("conversation {c}, question {t}"))
                .send()
                .await
                .unwrap();
        }
        selection = selection.conversation(conversation.id().clone());
    }
    let alone = Instant::now();
    for t in 0..turns {
        echo.prompt(format!("question {t}")).send().await.unwrap();
    }
    let alone = alone.elapsed();
    let before = peak_kib();
    let replayer = Replayer::new(&store, echo.clone());
    let started = Instant::now();
    let id = replayer
        .start(&selection, &ReplayPlan::new("echo"))
        .await
        .unwrap();
    let totals = replayer.run(&id, |_| {}).await.unwrap();
    let replayed = started.elapsed();
    assert_eq!(totals.done, turns as u64);
    let per_turn = |total: Duration| report::round3(total.as_secs_f64() * 1e3 / turns as f64);
    json!({
        "turns": turns,
        "replay_ms_per_turn": per_turn(replayed),
        "model_call_alone_ms_per_turn": per_turn(alone),
        "overhead_ms_per_turn": report::round3(per_turn(replayed) - per_turn(alone)),
        "peak_kib_before": before,
        "peak_kib_after": peak_kib(),
    })
}

fn main() {
    let quick =
        std::env::args().any(|a| a == "--quick") || std::env::var_os("SKEIN_BENCH_QUICK").is_some();
    let reps = if quick { 5 } else { 31 };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("skein.sqlite")).unwrap();
    let mut figures = serde_json::Map::new();
    runtime.block_on(async {
        for turns in [1, 50, 200] {
            let (cid, node) = record(&store, turns).await;
            let explain = time(reps, async || whole(&store, &cid, node, false).await).await;
            let explain_one = time(reps, async || one(&store, node, false).await).await;
            let rerun = time(reps, async || whole(&store, &cid, node, true).await).await;
            let rerun_one = time(reps, async || one(&store, node, true).await).await;
            let (whole_cid, _) = record(&store, turns).await;
            let go_on_whole = time(reps, async || go_on(&store, &whole_cid, false).await).await;
            let (resumed_cid, _) = record(&store, turns).await;
            let go_on_resumed = time(reps, async || go_on(&store, &resumed_cid, true).await).await;
            figures.insert(
                format!("turns_{turns}"),
                json!({
                    "explain_last_ms": { "load_whole": explain, "load_turn": explain_one },
                    "rerun_last_ms": { "load_whole": rerun, "load_turn": rerun_one },
                    "continue_ms": { "load_whole": go_on_whole, "resume": go_on_resumed },
                }),
            );
        }
    });
    let replay = runtime.block_on(replay_figures(if quick { 1_000 } else { 10_000 }));
    let out: Value = json!({
        "machine": report::machine(json!({ "reps": reps, "loadavg": report::loadavg() })),
        "recorded": figures,
        "replay": replay,
    });
    println!("{}", serde_json::to_string_pretty(&out).unwrap());
}
