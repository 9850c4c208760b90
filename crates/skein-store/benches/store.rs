//! Store benchmarks: a hand-written timing loop (no criterion) that prints
//! one JSON object to stdout. Every figure states its workload and target.
//!
//! Run with `cargo bench -p skein-store --bench store` (release profile).
//! `--quick` or `SKEIN_BENCH_QUICK=1` cuts repetitions so CI finishes in a
//! few seconds; `SKEIN_BIN=path/to/skein` adds the `skein --version` timing
//! (a relative path is also tried from the workspace root, since cargo runs
//! benches from the package directory). For profiling one operation:
//! `--only append|stateless|load|fork|cli|family` (repeatable) and `--reps N`
//! (load and fork repetitions), e.g. under `perf record`. The family group
//! runs only when asked for by name.
//!
//! Workloads share one file database in a temporary directory (WAL,
//! `synchronous=NORMAL`, as the store opens it), so thread depth is the only
//! thing that differs between the `append_turn_depth_*` figures. The depths
//! are measured interleaved, round by round, so drift on a noisy machine
//! hits them alike.
//!
//! With the `postgres` feature and `SKEIN_BENCH_POSTGRES=postgres://...`
//! (a server and database to use; each run works in a fresh schema, dropped
//! afterwards), every store workload runs again on PostgreSQL and its
//! figures appear under `postgres` in the report. `concurrent_writers_8`
//! times 8 writer threads sharing one store handle, on both backends.
//!
//! `--only family` builds a database of its own holding 100,000 unrelated
//! conversations (10,000 with `--quick`) and one family of about 20 (forks,
//! forks of forks, reply branches, a rerun and a fork from it, and two
//! lookalikes that only share its first messages), then times the store's
//! family query, the scan the old `skein tree` made, and, with `SKEIN_BIN`,
//! `skein tree` on the family and the web view's family API
//! (`skein serve`, queried over loopback). Target: under 50 ms each.
//!
//! `--only search` builds a database of its own holding 100,000 messages
//! (100 conversations of 1,000; 10,000 messages with `--quick`), each user
//! message carrying a word shared by about 20 messages and one of its own,
//! then times `Store::search` (20 matches, conversations named) for a rare
//! word, a word in 20 messages, a word in every assistant message, a phrase
//! and a prefix, on SQLite and, with `SKEIN_BENCH_POSTGRES`, PostgreSQL.
//! Target: under 50 ms each.
//!
//! `--only growth` (with `SKEIN_BENCH_POSTGRES`) grows a fresh PostgreSQL
//! schema from empty to 100,000 turns (`SKEIN_BENCH_GROWTH_TURNS`; 2,000
//! with `--quick`) in one process, in conversations of 25 turns, and prints
//! at 20 intervals the median and p90 cost of a turn's commit over the
//! interval and of loading two threads: the latest conversation (50
//! messages) and one of 1,000 messages written first. Flat figures mean no
//! plan went stale as the tables grew (the store relies on statistics, not
//! on ruling plans out).

#[path = "../../../bench-support/report.rs"]
mod report;

use serde_json::{Value, json};
use skein_core::{Message, NodeId, Thread};
use skein_store::{
    ConversationId, FamilyLimits, NewConversation, OnConflict, Origin, RerunCommit, RerunId,
    RerunRecord, RunRecord, SearchQuery, Store, Target, TurnCommit,
};
use std::io::{Read, Write};
use std::process::Command;
use std::time::{Duration, Instant};

/// Target: depth 10,000 within 1.2x of depth 10.
const FLATNESS_TARGET: f64 = 1.2;
const LOAD_TARGET_US: f64 = 1000.0;
/// PostgreSQL's load target: a round trip to another process, and the rows'
/// bytes through its socket, on top of SQLite's work.
const PG_LOAD_TARGET_US: f64 = 1500.0;
const FORK_TARGET_US: f64 = 50.0;
const CLI_VERSION_TARGET_MS: f64 = 10.0;
const FAMILY_TARGET_MS: f64 = 50.0;
const SEARCH_TARGET_MS: f64 = 50.0;

const DEPTHS: [usize; 3] = [10, 1000, 10_000];
/// Writer threads in the concurrent workload.
const WRITERS: usize = 8;

struct Plan {
    quick: bool,
    /// `--only NAME` (repeatable): run just these groups (append, stateless,
    /// load, fork, concurrent, cli); for profiling one operation.
    only: Vec<String>,
    /// Untimed warm-up turns per depth, on separate conversations.
    warmup_turns: usize,
    /// Rounds the depths are interleaved over.
    rounds: usize,
    /// Timed turns per depth per round.
    turns_per_round: usize,
    /// Warm-up and timed repetitions of load and fork.
    warmup_reps: usize,
    reps: usize,
    cli_runs: usize,
    /// Timed turns per writer in the concurrent workload.
    concurrent_turns: usize,
}

impl Plan {
    fn from_env() -> Plan {
        let quick = std::env::args().any(|arg| arg == "--quick")
            || std::env::var("SKEIN_BENCH_QUICK").is_ok_and(|v| !v.is_empty() && v != "0");
        let args: Vec<String> = std::env::args().collect();
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
                warmup_turns: 3,
                rounds: 2,
                turns_per_round: 10,
                warmup_reps: 3,
                reps: 20,
                cli_runs: 5,
                concurrent_turns: 10,
            }
        } else {
            Plan {
                quick,
                only,
                warmup_turns: 20,
                rounds: 5,
                turns_per_round: 40,
                warmup_reps: 50,
                reps: 1000,
                cli_runs: 20,
                concurrent_turns: 100,
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

    fn turns(&self) -> usize {
        self.rounds * self.turns_per_round
    }
}

/// Median and p90 (nearest rank) of durations, in the given unit.
struct Stats {
    median: f64,
    p90: f64,
    min: f64,
    samples: usize,
}

fn stats(samples: &[Duration], unit: f64) -> Stats {
    let mut values: Vec<f64> = samples.iter().map(|d| d.as_secs_f64() * unit).collect();
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

const US: f64 = 1e6;
const MS: f64 = 1e3;

fn stats_json(s: &Stats, unit: &str) -> Value {
    json!({
        format!("median_{unit}"): report::round3(s.median),
        format!("p90_{unit}"): report::round3(s.p90),
        format!("min_{unit}"): report::round3(s.min),
        "samples": s.samples,
    })
}

fn merge(mut base: Value, extra: Value) -> Value {
    if let (Some(base), Value::Object(extra)) = (base.as_object_mut(), extra) {
        base.extend(extra);
    }
    base
}

/// Realistic sizes: a ~200-byte question and a ~1.2 KB answer (below the
/// 4 KiB blob threshold, so stored inline).
fn user_message(i: usize) -> Message {
    Message::user(format!(
        "Question {i}: could you explain how the previous answer changes if the \
         input grows by an order of magnitude, and what the trade-offs are between \
         the approaches we discussed? Please keep it short. (turn {i})"
    ))
}

fn assistant_message(i: usize) -> Message {
    let sentence = "The cost is dominated by the part of the work that scales with the \
                    input, so the constant factors matter less than the shape of the loop. ";
    Message::assistant(format!("Answer {i}. {}", sentence.repeat(8)))
}

/// `len` messages after a system prompt, alternating user/assistant.
fn history(len: usize) -> Vec<Message> {
    let mut messages = vec![Message::system("You are a helpful assistant.")];
    let mut i = 0;
    while messages.len() < len {
        messages.push(if i % 2 == 0 {
            user_message(i)
        } else {
            assistant_message(i)
        });
        i += 1;
    }
    messages
}

fn run_record(conversation: &ConversationId, input: Option<NodeId>, output: NodeId) -> RunRecord {
    let mut run = RunRecord::new("bench-model", "bench");
    run.conversation = Some(conversation.clone());
    run.input_head = input;
    run.output_head = Some(output);
    run.usage.input_tokens = Some(1200);
    run.usage.output_tokens = Some(300);
    run.finished_ms = Some(run.started_ms + 900);
    run
}

/// Commit `thread` as one turn of `conversation`, whose head is `expected`.
fn commit(
    store: &Store,
    conversation: &ConversationId,
    expected: Option<NodeId>,
    thread: &Thread,
) -> Duration {
    let run = run_record(
        conversation,
        thread.parent().head_id(),
        thread.head_id().unwrap(),
    );
    let started = Instant::now();
    store
        .commit_turn(&TurnCommit::continuing(
            conversation,
            expected,
            thread,
            std::slice::from_ref(&run),
        ))
        .expect("commit turn");
    started.elapsed()
}

/// A conversation whose thread holds `len` messages, committed in one turn.
fn seeded_conversation(store: &Store, len: usize) -> (ConversationId, Thread) {
    let conversation = store
        .create_conversation(Default::default())
        .expect("create conversation")
        .id;
    let thread = Thread::from_messages(history(len));
    commit(store, &conversation, None, &thread);
    (conversation, thread)
}

/// One conversation being extended turn by turn, the way a client does it.
struct Chat {
    conversation: ConversationId,
    thread: Thread,
    turn: usize,
    commit: Vec<Duration>,
    push: Vec<Duration>,
}

impl Chat {
    fn new(store: &Store, len: usize) -> Chat {
        let (conversation, thread) = seeded_conversation(store, len);
        Chat {
            conversation,
            thread,
            turn: len,
            commit: Vec::new(),
            push: Vec::new(),
        }
    }

    /// Push a user and an assistant message onto the in-memory thread kept
    /// from the previous turn (its nodes carry persistence marks) and commit.
    fn turn(&mut self, store: &Store, record: bool) {
        let expected = self.thread.head_id();
        let started = Instant::now();
        let next = self
            .thread
            .push(user_message(self.turn))
            .push(assistant_message(self.turn + 1));
        let push = started.elapsed();
        let commit = commit(store, &self.conversation, expected, &next);
        self.thread = next;
        self.turn += 2;
        if record {
            self.commit.push(commit);
            self.push.push(push);
        }
    }
}

fn bench_append(store: &Store, plan: &Plan, db: &str) -> (Value, f64) {
    let mut chats: Vec<(usize, Chat)> = DEPTHS
        .iter()
        .map(|&depth| (depth, Chat::new(store, depth)))
        .collect();
    // Warm up (statement caches, page cache, allocator) on separate
    // conversations of the same depths, so the measured threads start at
    // exactly their nominal depth.
    for &depth in &DEPTHS {
        let mut warmup = Chat::new(store, depth);
        for _ in 0..plan.warmup_turns {
            warmup.turn(store, false);
        }
    }
    for round in 0..plan.rounds {
        // Rotate the order each round so no depth always goes first.
        for k in 0..chats.len() {
            let index = (round + k) % chats.len();
            let chat = &mut chats[index].1;
            for _ in 0..plan.turns_per_round {
                chat.turn(store, true);
            }
        }
    }
    let mut out = serde_json::Map::new();
    let mut medians = Vec::new();
    for (depth, chat) in &chats {
        let commit = stats(&chat.commit, US);
        let push = stats(&chat.push, US);
        medians.push(commit.median);
        let workload = format!(
            "Store::commit_turn of one turn (a ~200 B user + a ~1.2 KB assistant message, one \
             RunRecord, bookmark compare-and-set) onto a conversation whose thread holds {depth} \
             messages; {} untimed warm-up turns on a separate conversation of the same depth, \
             then {} timed turns in {} rounds interleaved with the other depths, so the depth \
             grows by 2 per turn (from {depth} to {}). The client keeps the Thread returned by the previous turn, so persistence \
             marks are used. {db}. Only commit_turn is timed; the in-memory push (hashing two \
             messages) is reported as client_push.",
            plan.warmup_turns,
            plan.turns(),
            plan.rounds,
            depth + plan.turns() * 2,
        );
        out.insert(
            format!("append_turn_depth_{depth}"),
            merge(
                stats_json(&commit, "us"),
                json!({
                    "workload": workload,
                    "client_push_median_us": report::round3(push.median),
                    "client_push_p90_us": report::round3(push.p90),
                }),
            ),
        );
    }
    let ratio = medians[2] / medians[0];
    out.insert(
        "flatness_ratio".into(),
        json!({
            "value": report::round3(ratio),
            "workload": "median(append_turn_depth_10000) / median(append_turn_depth_10)",
            "target": format!("<= {FLATNESS_TARGET}"),
            "met": ratio <= FLATNESS_TARGET,
        }),
    );
    (Value::Object(out), medians[1])
}

/// Each turn rebuilds the Thread from the client's message list, so no node
/// carries a mark: the store must find the stored prefix by lookup.
fn bench_stateless(store: &Store, plan: &Plan, marked_baseline_us: f64) -> Value {
    let depth = 1000;
    stateless_turns(store, depth, plan.warmup_turns);
    let (build, store_time) = stateless_turns(store, depth, plan.turns());
    let store_stats = stats(&store_time, US);
    let build_stats = stats(&build, US);
    json!({
        "workload": format!(
            "As append_turn_depth_1000, but each turn rebuilds the Thread from the client's \
             message list (Thread::from_messages over clones of every message: no persistence \
             marks), so the store finds the stored prefix by id lookup. {} untimed warm-up turns \
             on a separate conversation, then {} timed turns, depth growing from {depth} to {}. \
             store_* times Store::commit_turn only; build_thread_* times the client rebuilding \
             and hashing the whole thread (O(depth), the client's own cost).",
            plan.warmup_turns,
            plan.turns(),
            depth + plan.turns() * 2,
        ),
        "store_median_us": report::round3(store_stats.median),
        "store_p90_us": report::round3(store_stats.p90),
        "build_thread_median_us": report::round3(build_stats.median),
        "build_thread_p90_us": report::round3(build_stats.p90),
        "samples": store_stats.samples,
        "baseline_marked_depth_1000_median_us": report::round3(marked_baseline_us),
        "store_vs_marked_ratio": report::round3(store_stats.median / marked_baseline_us),
    })
}

/// `turns` turns on a fresh conversation seeded with `depth` messages, each
/// rebuilding its Thread from the message list. Returns (build, commit) times.
fn stateless_turns(store: &Store, depth: usize, turns: usize) -> (Vec<Duration>, Vec<Duration>) {
    let mut messages = history(depth);
    let (conversation, seeded) = seeded_conversation(store, depth);
    let mut head = seeded.head_id();
    drop(seeded);
    let mut build = Vec::new();
    let mut store_time = Vec::new();
    for turn in (depth..).step_by(2).take(turns) {
        messages.push(user_message(turn));
        messages.push(assistant_message(turn + 1));
        let started = Instant::now();
        let thread = Thread::from_messages(messages.iter().cloned());
        build.push(started.elapsed());
        store_time.push(commit(store, &conversation, head, &thread));
        head = thread.head_id();
    }
    (build, store_time)
}

fn repeat(plan: &Plan, mut op: impl FnMut() -> Duration) -> Vec<Duration> {
    for _ in 0..plan.warmup_reps {
        op();
    }
    (0..plan.reps).map(|_| op()).collect()
}

fn bench_load(store: &Store, plan: &Plan) -> Value {
    let (_, thread) = seeded_conversation(store, 1000);
    let head = thread.head_id().unwrap();
    let samples = repeat(plan, || {
        let started = Instant::now();
        let loaded = store.load_thread(head).expect("load thread");
        let elapsed = started.elapsed();
        assert_eq!(loaded.len(), 1000);
        drop(loaded);
        elapsed
    });
    let s = stats(&samples, US);
    let target = if store.backend_name() == "postgres" {
        PG_LOAD_TARGET_US
    } else {
        LOAD_TARGET_US
    };
    merge(
        stats_json(&s, "us"),
        json!({
            "workload": format!(
                "Store::load_thread of a 1,000-message thread (system prompt then alternating \
                 ~200 B user / ~1.2 KB assistant messages, stored inline) from its head, in the \
                 shared database; {} warm-up then {} timed loads; dropping the result is not \
                 timed.",
                plan.warmup_reps, plan.reps
            ),
            "target": format!("< {target} us"),
            "met": s.median < target,
        }),
    )
}

fn bench_fork(store: &Store, plan: &Plan) -> Value {
    let (conversation, thread) = seeded_conversation(store, 1001);
    let node = thread.head().unwrap();
    assert_eq!(node.depth(), 1000);
    let node = node.id();
    let samples = repeat(plan, || {
        let started = Instant::now();
        let fork = store
            .fork(node, Some("bench fork".into()), Some(conversation.clone()))
            .expect("fork");
        let elapsed = started.elapsed();
        assert_eq!(fork.head, Some(node));
        elapsed
    });
    let s = stats(&samples, US);
    merge(
        stats_json(&s, "us"),
        json!({
            "workload": format!(
                "Store::fork(node at depth 1000, name, origin conversation): one write \
                 transaction inserting the bookmark, then reading the new conversation back; \
                 {} warm-up then {} timed forks, each adding a conversation to the shared \
                 database.",
                plan.warmup_reps, plan.reps
            ),
            "target": format!("< {FORK_TARGET_US} us"),
            "met": s.median < FORK_TARGET_US,
        }),
    )
}

/// Throughput with `WRITERS` threads sharing one store handle, each
/// committing turns to a conversation of its own (no bookmark conflicts:
/// this measures how writes share the database, not retries).
fn bench_concurrent(store: &Store, plan: &Plan, db: &str) -> Value {
    let mut chats: Vec<Chat> = (0..WRITERS).map(|_| Chat::new(store, 10)).collect();
    for chat in &mut chats {
        for _ in 0..plan.warmup_turns.min(5) {
            chat.turn(store, false);
        }
    }
    let started = Instant::now();
    std::thread::scope(|scope| {
        for chat in &mut chats {
            scope.spawn(|| {
                for _ in 0..plan.concurrent_turns {
                    chat.turn(store, true);
                }
            });
        }
    });
    let wall = started.elapsed();
    let commits: Vec<Duration> = chats.iter().flat_map(|c| c.commit.clone()).collect();
    let turns = commits.len();
    let s = stats(&commits, US);
    json!({
        "workload": format!(
            "{WRITERS} threads share one Store handle, each committing {} turns (as \
             append_turn_depth_10: ~200 B + ~1.2 KB messages, one RunRecord, bookmark \
             compare-and-set) to a conversation of its own that starts at depth 10; turns per \
             second = all turns / wall time from the first thread's start to the last one's end. \
             {db}.",
            plan.concurrent_turns
        ),
        "turns_per_second": report::round3(turns as f64 / wall.as_secs_f64()),
        "turns": turns,
        "wall_ms": report::round3(wall.as_secs_f64() * MS),
        "commit_median_us": report::round3(s.median),
        "commit_p90_us": report::round3(s.p90),
    })
}

/// Fill `store` with `unrelated` two-message conversations (one import, one
/// transaction) and one family; returns the family's deepest fork (the
/// conversation the timings ask about) and its size.
fn family_database(store: &Store, unrelated: usize) -> (ConversationId, usize) {
    let mut lines = String::from(
        "{\"kind\":\"header\",\"format\":\"skein-export\",\"version\":2,\"encoding\":1}\n",
    );
    let mut conversations = String::new();
    for i in 0..unrelated {
        let thread = Thread::new()
            .push(Message::user(format!("unrelated question {i}")))
            .push(Message::assistant(format!("unrelated answer {i}")));
        for node in thread.nodes() {
            let line = json!({
                "kind": "node",
                "id": node.id(),
                "parent": node.parent_id(),
                "role": node.message().role,
                "parts": node.message().parts,
            });
            lines.push_str(&line.to_string());
            lines.push('\n');
        }
        let line = json!({
            "kind": "conversation",
            "id": ConversationId::random(),
            "name": format!("unrelated {i}"),
            "head": thread.head_id(),
            "len": 2,
            "origin": null,
            "created_ms": 1_700_000_000_000_i64 + i as i64,
            "updated_ms": 1_700_000_000_000_i64 + i as i64,
            "meta": {},
        });
        conversations.push_str(&line.to_string());
        conversations.push('\n');
    }
    lines.push_str(&conversations);
    store
        .import(&mut lines.as_bytes())
        .expect("import the unrelated conversations");

    let new = |name: &str, thread: &Thread, origin: Option<Origin>| -> ConversationId {
        store.append(thread).expect("append");
        store
            .create_conversation(NewConversation {
                name: Some(name.into()),
                head: thread.head_id(),
                origin,
                ..NewConversation::default()
            })
            .expect("create")
            .id
    };
    let from = |node: &Thread, conversation: &ConversationId| Origin {
        node: node.head_id(),
        conversation: Some(conversation.clone()),
        rerun: None,
    };
    let mut main_thread = Thread::new().push(Message::system("You are terse."));
    let mut points = Vec::new();
    for turn in 0..6 {
        main_thread = main_thread
            .push(Message::user(format!("family question {turn}")))
            .push(Message::assistant(format!("family answer {turn}")));
        points.push(main_thread.clone());
    }
    let main = new("main", &main_thread, None);
    let mut family = 1;
    let mut deepest = main.clone();
    for (i, at) in points.iter().take(5).enumerate() {
        let fork = at
            .push(Message::user(format!("fork {i}?")))
            .push(Message::assistant(format!("fork {i}.")));
        let fork_id = new(&format!("fork {i}"), &fork, Some(from(at, &main)));
        family += 1;
        {
            let deeper = fork
                .push(Message::user(format!("deeper {i}?")))
                .push(Message::assistant(format!("deeper {i}.")));
            deepest = new(
                &format!("fork of fork {i}"),
                &deeper,
                Some(from(&fork, &fork_id)),
            );
            family += 1;
        }
    }
    for (i, at) in points.iter().take(5).enumerate() {
        // A turn that started at an earlier message of main branches.
        let reply = at
            .push(Message::user(format!("reply {i}?")))
            .push(Message::assistant(format!("reply {i}.")));
        store
            .commit_turn(&TurnCommit {
                target: Target::Existing {
                    id: main.clone(),
                    expected_head: at.head_id(),
                    on_conflict: OnConflict::Branch(Box::default()),
                },
                thread: Some(&reply),
                runs: &[],
            })
            .expect("reply branch");
        family += 1;
    }
    let turn = &points[2];
    let answer = turn
        .parent()
        .push(Message::assistant("a counterfactual answer"));
    let run = RunRecord::new("bench-model", "bench");
    let rerun = RerunRecord {
        id: RerunId::random(),
        conversation: main.clone(),
        turn: 2,
        turn_node: turn.head_id().expect("a turn"),
        request_head: turn.parent().head_id(),
        answer_head: answer.head_id(),
        ablation: vec!["facts".into()],
        samples: 1,
        sample_runs: vec![run.id.clone()],
        baseline_runs: vec![],
        verdict: Some("confirmed".into()),
        summary: "changed".into(),
        detail: json!({}),
        created_ms: 1,
    };
    store
        .commit_rerun(&RerunCommit {
            record: &rerun,
            threads: std::slice::from_ref(&answer),
            runs: std::slice::from_ref(&run),
        })
        .expect("rerun");
    let mut origin = from(&answer, &main);
    origin.rerun = Some(rerun.id.clone());
    new("from rerun", &answer, Some(origin));
    family += 1;
    // Lookalikes: the same first messages, no origin link.
    for i in 0..3 {
        let lookalike = points[0].push(Message::user(format!("lookalike {i}?")));
        new(&format!("lookalike {i}"), &lookalike, None);
        family += 1;
    }
    (deepest, family)
}

/// Time `op` `reps` times after `warmup` untimed runs, in milliseconds.
fn time_ms(warmup: usize, reps: usize, mut op: impl FnMut()) -> Stats {
    for _ in 0..warmup {
        op();
    }
    let samples: Vec<Duration> = (0..reps)
        .map(|_| {
            let started = Instant::now();
            op();
            started.elapsed()
        })
        .collect();
    stats(&samples, MS)
}

/// One HTTP/1.1 GET on a fresh connection: the status and the body.
fn http_get(address: &str, path: &str) -> std::io::Result<(u16, String)> {
    let mut stream = std::net::TcpStream::connect(address)?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n"
    )?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    let status = response
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or(0);
    let body = response
        .split_once("\r\n\r\n")
        .map_or(String::new(), |(_, body)| body.to_string());
    Ok((status, body))
}

/// The family workload on `store` (found at `location` by the CLI).
fn bench_family(store: &Store, location: &str, plan: &Plan) -> Value {
    let unrelated = if plan.quick { 10_000 } else { 100_000 };
    let built = Instant::now();
    let (focus, size) = family_database(store, unrelated);
    let build_seconds = built.elapsed().as_secs_f64();
    let limits = FamilyLimits {
        members: 10_000,
        shares: 100,
    };
    let rows = store.family(&focus, limits).expect("family");
    assert_eq!(rows.members.len() + rows.shares.len(), size);
    let target = format!("< {FAMILY_TARGET_MS} ms");
    let figure = |s: &Stats, workload: String| {
        merge(
            stats_json(s, "ms"),
            json!({"workload": workload, "target": target, "met": s.median < FAMILY_TARGET_MS}),
        )
    };
    let mut results = serde_json::Map::new();
    results.insert(
        "database".into(),
        json!(format!(
            "{unrelated} unrelated two-message conversations and one family of {size} ({} members, \
             {} sharing its first messages, {} rerun); built in {:.1} s",
            rows.members.len(),
            rows.shares.len(),
            rows.reruns.len(),
            build_seconds
        )),
    );
    let (warmup, reps) = (plan.warmup_reps.min(20), plan.reps.min(200));
    let query = time_ms(warmup, reps, || {
        store.family(&focus, limits).expect("family");
    });
    results.insert(
        "store_family_ms".into(),
        figure(
            &query,
            "Store::family: members by origin links, their reruns and the conversations sharing their first node".into(),
        ),
    );
    let scan = time_ms(1, 5, || {
        store.list_conversations(100_000).expect("list");
    });
    results.insert(
        "old_tree_scan_ms".into(),
        json!({
            "median": report::round3(scan.median),
            "workload": "list_conversations(100_000): the scan `skein tree` made before (the web view read up to 1,000,000) to find a family's members, for comparison",
        }),
    );
    let Some(bin) = std::env::var_os("SKEIN_BIN")
        .filter(|b| !b.is_empty())
        .map(resolve_bin)
    else {
        results.insert(
            "cli_note".into(),
            json!("SKEIN_BIN is not set: set it to a built skein to time `skein tree` and the web family API"),
        );
        return Value::Object(results);
    };
    let tree = |json: bool| {
        let mut command = Command::new(&bin);
        command.args(["--db", location]);
        if json {
            command.arg("--json");
        }
        let output = command
            .args(["tree", focus.as_str()])
            .output()
            .expect("run skein tree");
        assert!(
            output.status.success(),
            "skein tree failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        output.stdout
    };
    // What any command on this database costs: start, open, one query.
    let baseline = time_ms(2, plan.cli_runs, || {
        let output = Command::new(&bin)
            .args(["--db", location, "conversations", "-n", "1"])
            .output()
            .expect("run skein conversations");
        assert!(output.status.success());
    });
    results.insert(
        "cli_baseline_ms".into(),
        json!({
            "median": report::round3(baseline.median),
            "p90": report::round3(baseline.p90),
            "workload": "wall time of `skein conversations -n 1` on the same database: process start, opening the database and one query, for reference",
        }),
    );
    let drawn = String::from_utf8_lossy(&tree(false)).to_string();
    assert!(drawn.contains("shares messages"), "{drawn}");
    let text = time_ms(2, plan.cli_runs, || {
        tree(false);
    });
    results.insert(
        "cli_tree_ms".into(),
        figure(
            &text,
            format!(
                "wall time of `{} tree ID` (process start included) on the family's deepest fork",
                bin.display()
            ),
        ),
    );
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free port")
        .port();
    let address = format!("127.0.0.1:{port}");
    let mut server = Command::new(&bin)
        .args(["--db", location, "serve", "--bind", &address])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start skein serve");
    let path = format!("/api/conversations/{}/family", focus.as_str());
    let ready = Instant::now();
    let first = loop {
        match http_get(&address, &path) {
            Ok(answer) => break answer,
            Err(_) if ready.elapsed() < Duration::from_secs(20) => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(error) => panic!("skein serve did not answer: {error}"),
        }
    };
    assert_eq!(first.0, 200, "{}", first.1);
    assert!(first.1.contains("\"kind\":\"shares\""), "{}", first.1);
    let api = time_ms(warmup, reps, || {
        let (status, _) = http_get(&address, &path).expect("GET family");
        assert_eq!(status, 200);
    });
    let _ = server.kill();
    let _ = server.wait();
    results.insert(
        "web_family_api_ms".into(),
        figure(
            &api,
            format!("GET {path} from `skein serve`, a new loopback connection per request"),
        ),
    );
    Value::Object(results)
}

#[cfg(feature = "postgres")]
fn bench_family_postgres(plan: &Plan) -> Value {
    let Some(base) = std::env::var("SKEIN_BENCH_POSTGRES")
        .ok()
        .filter(|url| !url.is_empty())
    else {
        return json!({"skipped": "SKEIN_BENCH_POSTGRES is not set"});
    };
    let schema = skein_store::scratch::ScratchSchema::create(&base)
        .unwrap_or_else(|error| panic!("SKEIN_BENCH_POSTGRES is set but unusable: {error}"));
    let store = Store::open(schema.url()).expect("open PostgreSQL store");
    bench_family(&store, schema.url(), plan)
}

#[cfg(not(feature = "postgres"))]
fn bench_family_postgres(_plan: &Plan) -> Value {
    json!({"skipped": "built without the postgres feature"})
}

/// 100,000 messages (10,000 quick) in conversations of 1,000, then
/// `Store::search` timed for queries of a few shapes.
fn bench_search(store: &Store, plan: &Plan) -> Value {
    let conversations = if plan.quick { 10 } else { 100 };
    let started = Instant::now();
    for c in 0..conversations {
        let mut messages = vec![Message::system("You are a helpful assistant.")];
        for i in 0..999 {
            let n = c * 1000 + i;
            messages.push(if i % 2 == 0 {
                // User messages are every other one: topics of 20 each.
                Message::user(format!(
                    "{} Also mention topic{} and token{n}.",
                    user_message(i).joined_text(),
                    (n / 2) % (conversations * 500 / 20)
                ))
            } else {
                assistant_message(i)
            });
        }
        let conversation = store
            .create_conversation(Default::default())
            .expect("create conversation")
            .id;
        commit(store, &conversation, None, &Thread::from_messages(messages));
    }
    let build_s = started.elapsed().as_secs_f64();
    let messages = conversations * 1000;
    let (warmup, reps) = if plan.quick { (2, 10) } else { (5, 50) };
    let queries = [
        ("rare_word", format!("token{}", messages / 2 + 2)),
        ("word_in_20_messages", "topic7".to_string()),
        ("word_in_every_reply", "dominated".to_string()),
        ("phrase", "\"shape of the loop\"".to_string()),
        ("prefix", "topic12*".to_string()),
    ];
    let mut results = serde_json::Map::new();
    for (name, text) in queries {
        let query = SearchQuery::new(text.clone()).limit(20);
        let found = store.search(&query).expect("search");
        let s = time_ms(warmup, reps, || {
            store.search(&query).expect("search");
        });
        results.insert(
            name.into(),
            merge(
                stats_json(&s, "ms"),
                json!({
                    "query": text,
                    "matches": found.matches.len(),
                    "truncated": found.truncated,
                    "target": format!("< {SEARCH_TARGET_MS} ms"),
                    "met": s.median < SEARCH_TARGET_MS,
                }),
            ),
        );
    }
    json!({
        "workload": format!(
            "Store::search, limit 20, snippets and conversations included, over {messages} \
             messages ({conversations} conversations of 1,000: ~200 B user messages with a \
             word shared by 20 messages and one of their own, ~1.2 KB assistant messages); \
             {warmup} warm-up then {reps} timed searches per query"
        ),
        "build_seconds": report::round3(build_s),
        "queries": Value::Object(results),
    })
}

#[cfg(feature = "postgres")]
fn bench_search_postgres(plan: &Plan) -> Value {
    let Some(base) = std::env::var("SKEIN_BENCH_POSTGRES")
        .ok()
        .filter(|url| !url.is_empty())
    else {
        return json!({"skipped": "SKEIN_BENCH_POSTGRES is not set"});
    };
    let schema = skein_store::scratch::ScratchSchema::create(&base)
        .unwrap_or_else(|error| panic!("SKEIN_BENCH_POSTGRES is set but unusable: {error}"));
    let store = Store::open(schema.url()).expect("open PostgreSQL store");
    bench_search(&store, plan)
}

#[cfg(not(feature = "postgres"))]
fn bench_search_postgres(_plan: &Plan) -> Value {
    json!({"skipped": "built without the postgres feature"})
}

/// Every store workload the plan asks for, on one database.
fn bench_store(store: &Store, plan: &Plan, db: &str) -> serde_json::Map<String, Value> {
    let mut results = serde_json::Map::new();
    if plan.runs("append") || plan.runs("stateless") {
        let (append, marked_1000) = bench_append(store, plan, db);
        if plan.runs("append") {
            results.extend(append.as_object().cloned().unwrap_or_default());
        }
        if plan.runs("stateless") {
            let stateless = bench_stateless(store, plan, marked_1000);
            results.insert("append_turn_stateless_depth_1000".into(), stateless);
        }
    }
    if plan.runs("load") {
        results.insert("load_thread_1000".into(), bench_load(store, plan));
    }
    if plan.runs("fork") {
        results.insert("fork_depth_1000".into(), bench_fork(store, plan));
    }
    if plan.runs("concurrent") {
        results.insert(
            format!("concurrent_writers_{WRITERS}"),
            bench_concurrent(store, plan, db),
        );
    }
    results
}

/// The store workloads on PostgreSQL, when `SKEIN_BENCH_POSTGRES` names a
/// server; otherwise a note saying how to run them.
#[cfg(feature = "postgres")]
fn bench_postgres(plan: &Plan) -> Value {
    let Some(base) = std::env::var("SKEIN_BENCH_POSTGRES")
        .ok()
        .filter(|url| !url.is_empty())
    else {
        return json!({"skipped": "SKEIN_BENCH_POSTGRES is not set: set it to a postgres:// URL to run the store workloads on PostgreSQL"});
    };
    let schema = skein_store::scratch::ScratchSchema::create(&base)
        .unwrap_or_else(|error| panic!("SKEIN_BENCH_POSTGRES is set but unusable: {error}"));
    let store = Store::open(schema.url()).expect("open PostgreSQL store");
    let version = store
        .debug_query_i64("SELECT current_setting('server_version_num')::bigint")
        .unwrap_or_default();
    let db = format!(
        "PostgreSQL (server_version_num {version}) at {}, a fresh schema shared by all \
         workloads, over TCP without TLS, pool of 16 connections",
        skein_store::location::redact(&base)
    );
    Value::Object(bench_store(&store, plan, &db))
}

#[cfg(not(feature = "postgres"))]
fn bench_postgres(_plan: &Plan) -> Value {
    json!({"skipped": "built without the postgres feature: cargo bench -p skein-store --features postgres --bench store, with SKEIN_BENCH_POSTGRES=postgres://..."})
}

#[cfg(feature = "postgres")]
/// Turns per conversation in the growth workload.
const GROWTH_CONVERSATION_TURNS: usize = 25;
#[cfg(feature = "postgres")]
/// Intervals the growth workload reports.
const GROWTH_INTERVALS: usize = 20;

#[cfg(feature = "postgres")]
/// Grow an empty database to `SKEIN_BENCH_GROWTH_TURNS` turns, reporting
/// turn and load costs per interval.
fn bench_growth(store: &Store, plan: &Plan) -> Value {
    let total: usize = std::env::var("SKEIN_BENCH_GROWTH_TURNS")
        .ok()
        .and_then(|turns| turns.parse().ok())
        .unwrap_or(if plan.quick { 2_000 } else { 100_000 });
    let interval = (total / GROWTH_INTERVALS).max(1);
    let (_, long) = seeded_conversation(store, 1000);
    let long_head = long.head_id().unwrap();
    // Each conversation opens with a message of its own, so its nodes are
    // new ones (equal histories would share their nodes).
    let fresh = |number: usize| {
        let conversation = store
            .create_conversation(Default::default())
            .expect("create conversation")
            .id;
        let thread = Thread::from_messages([
            Message::user(format!("conversation {number}: shall we begin?")),
            Message::assistant(format!("conversation {number}, at your service")),
        ]);
        commit(store, &conversation, None, &thread);
        Chat {
            conversation,
            thread,
            turn: 2,
            commit: Vec::new(),
            push: Vec::new(),
        }
    };
    let mut conversations = 0;
    let mut chat = fresh(conversations);
    let mut window = Vec::new();
    let mut rows = Vec::new();
    let mut first: Option<(f64, f64, f64)> = None;
    let mut worst_ratio: f64 = 0.0;
    let started = Instant::now();
    for turn in 1..=total {
        if chat.turn >= 2 * GROWTH_CONVERSATION_TURNS {
            conversations += 1;
            chat = fresh(conversations);
        }
        chat.turn(store, true);
        window.append(&mut chat.commit);
        chat.push.clear();
        if turn % interval != 0 {
            continue;
        }
        let commit = stats(&std::mem::take(&mut window), US);
        let latest = chat.thread.head_id().unwrap();
        let load = |head: NodeId| {
            let samples: Vec<Duration> = (0..25)
                .map(|_| {
                    let started = Instant::now();
                    store.load_thread(head).expect("load");
                    started.elapsed()
                })
                .collect();
            stats(&samples[5..], US)
        };
        let short = load(latest);
        let long = load(long_head);
        let now = (commit.median, short.median, long.median);
        let base = *first.get_or_insert(now);
        worst_ratio = worst_ratio
            .max(now.0 / base.0)
            .max(now.1 / base.1)
            .max(now.2 / base.2);
        eprintln!(
            "growth: {turn:>7} turns  commit {:>7.0} us (p90 {:>7.0})  load 50 {:>6.0} us  \
             load 1000 {:>7.0} us  [{:.0} s]",
            commit.median,
            commit.p90,
            short.median,
            long.median,
            started.elapsed().as_secs_f64()
        );
        rows.push(json!({
            "turns": turn,
            "commit_us": {"median": report::round3(commit.median), "p90": report::round3(commit.p90)},
            "load_50_us": report::round3(short.median),
            "load_1000_us": report::round3(long.median),
        }));
    }
    json!({
        "workload": format!(
            "from an empty schema to {total} turns (a user and an assistant message and a run \
             each) in conversations of {GROWTH_CONVERSATION_TURNS} turns, one writer; per interval \
             of {interval} turns: median and p90 commit of the interval's turns, median of 20 \
             loads of the latest conversation's thread (50 messages) and of a 1,000-message \
             thread written first"
        ),
        "intervals": rows,
        "worst_ratio_to_first_interval": report::round3(worst_ratio),
        "seconds": report::round3(started.elapsed().as_secs_f64()),
    })
}

#[cfg(feature = "postgres")]
fn bench_growth_postgres(plan: &Plan) -> Value {
    let Some(base) = std::env::var("SKEIN_BENCH_POSTGRES")
        .ok()
        .filter(|url| !url.is_empty())
    else {
        return json!({"skipped": "SKEIN_BENCH_POSTGRES is not set: the growth workload runs on PostgreSQL"});
    };
    let schema = skein_store::scratch::ScratchSchema::create(&base)
        .unwrap_or_else(|error| panic!("SKEIN_BENCH_POSTGRES is set but unusable: {error}"));
    let store = Store::open(schema.url()).expect("open PostgreSQL store");
    bench_growth(&store, plan)
}

#[cfg(not(feature = "postgres"))]
fn bench_growth_postgres(_plan: &Plan) -> Value {
    json!({"skipped": "built without the postgres feature"})
}

fn bench_cli(plan: &Plan) -> (Value, Value) {
    let Some(bin) = std::env::var_os("SKEIN_BIN")
        .filter(|b| !b.is_empty())
        .map(resolve_bin)
    else {
        return (
            Value::Null,
            json!(
                "SKEIN_BIN is not set: build the CLI (cargo build --release -p skein-cli) and \
                   set SKEIN_BIN=target/release/skein to time `skein --version`"
            ),
        );
    };
    let run = || {
        let started = Instant::now();
        let output = Command::new(&bin).arg("--version").output();
        let elapsed = started.elapsed();
        match output {
            Ok(output) if output.status.success() => Ok(elapsed),
            Ok(output) => Err(format!(
                "`{} --version` exited with {}",
                bin.display(),
                output.status
            )),
            Err(error) => Err(format!("cannot run {}: {error}", bin.display())),
        }
    };
    let mut samples = Vec::new();
    for i in 0..2 + plan.cli_runs {
        match run() {
            Ok(elapsed) if i >= 2 => samples.push(elapsed),
            Ok(_) => {}
            Err(error) => return (Value::Null, json!(error)),
        }
    }
    let s = stats(&samples, MS);
    let value = merge(
        stats_json(&s, "ms"),
        json!({
            "workload": format!(
                "wall time of spawning `{} --version` and waiting for it to exit; 2 warm-up then \
                 {} timed runs",
                bin.display(),
                plan.cli_runs
            ),
            "target": format!("< {CLI_VERSION_TARGET_MS} ms"),
            "met": s.median < CLI_VERSION_TARGET_MS,
        }),
    );
    (value, Value::Null)
}

/// `cargo bench` runs this binary from the package directory, so a relative
/// `SKEIN_BIN` (e.g. `target/release/skein`) that does not exist there is
/// taken relative to the workspace root.
fn resolve_bin(bin: std::ffi::OsString) -> std::path::PathBuf {
    let path = std::path::PathBuf::from(bin);
    if path.is_relative() && !path.exists() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let candidate = root.join(&path);
        if candidate.exists() {
            return candidate.canonicalize().unwrap_or(candidate);
        }
    }
    path
}

fn main() {
    let plan = Plan::from_env();
    let started = Instant::now();
    let load_at_start = report::loadavg();
    let dir = tempfile::tempdir().expect("temp dir");
    let store = Store::open(dir.path().join("bench.db")).expect("open store");

    let mut results = bench_store(
        &store,
        &plan,
        "File database (WAL, synchronous=NORMAL) in a temp dir, shared by all workloads",
    );
    drop(store);
    let family = plan.only.iter().any(|group| group == "family").then(|| {
        let store = Store::open(dir.path().join("family.db")).expect("open store");
        let location = dir.path().join("family.db").display().to_string();
        json!({
            "sqlite": bench_family(&store, &location, &plan),
            "postgres": bench_family_postgres(&plan),
        })
    });
    if let Some(family) = family {
        results.insert("family".into(), family);
    }
    if plan.only.iter().any(|group| group == "search") {
        let store = Store::open(dir.path().join("search.db")).expect("open store");
        let search = json!({
            "sqlite": bench_search(&store, &plan),
            "postgres": bench_search_postgres(&plan),
        });
        results.insert("search".into(), search);
    }
    if plan.only.iter().any(|group| group == "growth") {
        results.insert("growth".into(), bench_growth_postgres(&plan));
    }
    let postgres = bench_postgres(&plan);
    if plan.runs("cli") {
        let (cli, cli_note) = bench_cli(&plan);
        results.insert("cli_version_ms".into(), cli);
        if !cli_note.is_null() {
            results.insert("cli_version_note".into(), cli_note);
        }
    }

    let report = json!({
        "benchmark": "skein-store",
        "quick": plan.quick,
        "machine": report::machine(json!({})),
        "targets": {
            "flatness_ratio": format!("median append at depth 10,000 <= {FLATNESS_TARGET}x depth 10"),
            "load_thread_1000": format!("< {LOAD_TARGET_US} us (PostgreSQL: < {PG_LOAD_TARGET_US} us)"),
            "fork_depth_1000": format!("< {FORK_TARGET_US} us"),
            "cli_version_ms": format!("< {CLI_VERSION_TARGET_MS} ms"),
            "family": format!("< {FAMILY_TARGET_MS} ms: the store query, `skein tree` and the web family API on a family of ~20 among 100,000 unrelated conversations"),
            "search": format!("< {SEARCH_TARGET_MS} ms: Store::search, 20 matches, over 100,000 messages"),
        },
        "results": Value::Object(results),
        "postgres": postgres,
        "load_average": {"start": load_at_start, "end": report::loadavg()},
        "total_seconds": report::round3(started.elapsed().as_secs_f64()),
    });
    println!(
        "{}",
        serde_json::to_string_pretty(&report).expect("serialize report")
    );
}
