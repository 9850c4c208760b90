//! How a replayed turn ended, before it is written: its [`Outcome`], a
//! failed model call's, usage and the notes its detail keeps.

use crate::error::RecordedError;
use serde_json::{Value, json};
use skein_conversation::service::TurnError;
use skein_core::{NodeId, RunRecord, Thread};
use skein_store::ReplayStatus;
use std::time::Duration;

/// How a replayed turn ended, before it is written.
pub(super) struct Outcome {
    pub(super) status: ReplayStatus,
    pub(super) answer_head: Option<NodeId>,
    /// The replayed answer's text, for the comparison (not stored: the
    /// row keeps its node).
    pub(super) answer: Option<String>,
    pub(super) decision: Option<String>,
    pub(super) comparator: Option<String>,
    pub(super) detail: Value,
    pub(super) threads: Vec<Thread>,
    pub(super) runs: Vec<RunRecord>,
    /// The judge's run, written with the turn but not among its runs.
    pub(super) judge: Option<RunRecord>,
}

impl Outcome {
    pub(super) fn failed(why: &str) -> Outcome {
        Outcome {
            status: ReplayStatus::Failed,
            answer_head: None,
            answer: None,
            decision: None,
            comparator: None,
            detail: json!({ "why": why }),
            threads: Vec::new(),
            runs: Vec::new(),
            judge: None,
        }
    }
}

/// A failed model call: the calls completed before it and the failed run
/// are kept (failed status, for usage), nothing is an answer.
pub(super) fn failed_loop(error: TurnError, elapsed: Duration) -> Outcome {
    let why = error.to_string();
    let mut outcome = Outcome::failed(&why);
    outcome.detail["elapsed_ms"] = json!(elapsed.as_millis() as u64);
    match error {
        TurnError::Loop(failed) => {
            outcome.runs = failed.completed.iter().map(|r| r.record(None)).collect();
            if let Some(thread) = failed.thread {
                outcome.threads.push(thread);
            }
            if let Some(call) = failed.failed {
                let mut record = call.record;
                record.input_head = call.input.head_id();
                outcome.runs.push(record);
                outcome.threads.push(call.input);
            }
        }
        TurnError::Call(_) | TurnError::Store(_) => {}
    }
    outcome
}

/// Tokens and time of `runs`.
pub(super) fn usage_of(runs: &[RunRecord]) -> Value {
    let mut input = 0u64;
    let mut output = 0u64;
    let mut elapsed = 0i64;
    for run in runs {
        input += run.usage.input_tokens.unwrap_or(0);
        output += run.usage.output_tokens.unwrap_or(0);
        elapsed += run
            .finished_ms
            .map_or(0, |finished| finished - run.started_ms);
    }
    json!({ "input_tokens": input, "output_tokens": output, "latency_ms": elapsed, "calls": runs.len() })
}

/// Why a turn whose answer could not be compared failed.
pub(super) fn comparison_failed(error: &RecordedError) -> String {
    match error {
        // A judge's call: the engine's error alone (the replayed turn itself
        // is recorded, whatever the error's own words say of turns).
        RecordedError::Engine(engine) => format!("the judge's model call failed: {engine}"),
        other => format!("the answer could not be compared: {other}"),
    }
}

/// The note a claim left in a turn's detail when it took the turn over from
/// another worker (`reclaimed_from`, `reclaims`), to keep in its outcome.
pub(super) fn reclaimed(detail: &Value) -> Vec<(&'static str, Value)> {
    ["reclaimed_from", "reclaims"]
        .into_iter()
        .filter_map(|key| detail.get(key).map(|value| (key, value.clone())))
        .collect()
}
