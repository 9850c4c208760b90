//! One claimed turn: its original read, its changed request run through
//! the turn service with tools answered from the recording, and its answer
//! judged against the original's.

use super::original::{Original, original_turn};
use super::outcome::{Outcome, comparison_failed, failed_loop, reclaimed, usage_of};
use super::plan::ReplayPlan;
use super::tools::{Answerable, ReplayTool};
use super::worker::Replayer;
use crate::compare::{Comparison, Decision};
use crate::error::Result;
use serde_json::{Value, json};
use skein_conversation::Model;
use skein_conversation::service::TurnRequest;
use skein_core::{Relation, ReplayId, RunRecord, ToolCall, now_ms};
use skein_engine::{CallDecision, Chain, ChainStatus, Tool};
use skein_store::{ReplayStatus, ReplayTurn, ReplayTurnFinish, StoreError};
use std::sync::{Arc, Mutex};
use std::time::Instant;

impl Replayer {
    /// Replay one claimed turn and finish it (or leave it to the worker
    /// that holds it now, when this one's lease passed unrenewed).
    pub(super) async fn replay_turn(
        &self,
        id: &ReplayId,
        turn: ReplayTurn,
        plan: &ReplayPlan,
        comparison: &Comparison,
    ) -> Result<ReplayTurn> {
        let own = self.own_comparison(&turn_compare(&turn.detail), plan)?;
        let comparison = own.as_ref().unwrap_or(comparison);
        let taken_over = reclaimed(&turn.detail);
        if let Some(from) = turn.detail["reclaimed_from"].as_str() {
            tracing::warn!(
                "turn {} of replay {id} was taken over from worker {from}, whose lease passed \
                 (it stopped renewing: dead or stalled); replaying it again",
                turn.seq
            );
        }
        let model = self.model_named(turn.model.as_deref().unwrap_or(&plan.model), plan)?;
        let mut outcome = match self.original(&turn).await? {
            Some(original) => {
                let outcome = self.replay_original(id, &original, plan, model).await;
                self.judged(outcome, &original, comparison, id).await
            }
            None => Outcome::failed(
                "the original turn has no run record (an imported turn?): its tools and \
                 options are unknown",
            ),
        };
        for (key, value) in taken_over {
            outcome.detail[key] = value;
        }
        let finish = ReplayTurnFinish {
            replay: id,
            seq: turn.seq,
            worker: &self.worker,
            status: outcome.status,
            answer_head: outcome.answer_head,
            decision: outcome.decision.as_deref(),
            comparator: outcome.comparator.as_deref(),
            detail: &outcome.detail,
            threads: &outcome.threads,
            runs: &outcome.runs,
            other_runs: outcome.judge.as_slice(),
        };
        match self.store.nonblocking().finish_replay_turn(&finish).await {
            Ok(()) => {
                let result = match (outcome.status, outcome.decision.as_deref()) {
                    (ReplayStatus::Done, Some(decision)) => decision,
                    (status, _) => status.as_str(),
                };
                skein_conversation::telemetry::replay_turn(
                    &self.store,
                    skein_conversation::telemetry::ReplayedTurn {
                        replay: id,
                        seq: turn.seq,
                        turn_node: turn.turn_node,
                        result,
                        runs: &outcome.runs,
                        answer: outcome.threads.first(),
                    },
                )
                .await;
            }
            Err(StoreError::ReplayTurnLost { .. }) => {
                tracing::warn!(
                    "turn {} of replay {id} was taken over by another worker after this one's \
                     lease passed; its result here is dropped",
                    turn.seq
                );
            }
            Err(error) => return Err(error.into()),
        }
        Ok(ReplayTurn {
            status: outcome.status,
            answer_head: outcome.answer_head,
            runs: outcome.runs.iter().map(|run| run.id.clone()).collect(),
            decision: outcome.decision,
            comparator: outcome.comparator,
            detail: outcome.detail,
            finished_ms: Some(now_ms()),
            ..turn
        })
    }

    /// The original turn of a row (see [`original_turn`]).
    async fn original(&self, turn: &ReplayTurn) -> Result<Option<Original>> {
        original_turn(&self.store, turn.turn_node, turn.request_node).await
    }

    /// Run the changed request through the turn service, tools answered
    /// from the recording.
    async fn replay_original(
        &self,
        id: &ReplayId,
        original: &Original,
        plan: &ReplayPlan,
        model: &Model,
    ) -> Outcome {
        let first = &original.runs[0];
        let swap = match self.prompt_swap(original, plan, model) {
            Ok(swap) => swap,
            Err(why) => return Outcome::failed(&why),
        };
        let (layout, tools, options) = plan.change.apply(&original.request, first, swap);
        let asked = Arc::new(Mutex::new(None::<String>));
        let offered: Vec<Arc<dyn Tool>> = tools
            .into_iter()
            .map(|spec| {
                let live = plan
                    .live_tools
                    .contains(&spec.name)
                    .then(|| {
                        self.live
                            .iter()
                            .find(|t| t.spec().name == spec.name)
                            .cloned()
                    })
                    .flatten();
                Arc::new(ReplayTool::new(spec, &original.calls, live)) as Arc<dyn Tool>
            })
            .collect();
        let answerable = Arc::new(Answerable {
            calls: original.calls.clone(),
            live: plan.live_tools.iter().cloned().collect(),
        });
        let stop = asked.clone();
        let mut chain = Chain::new(offered)
            .limit(plan.chain_limit)
            .before_call(Box::new(move |call: &ToolCall| {
                let decision = if answerable.answers(call) {
                    CallDecision::Run(call.clone())
                } else {
                    let mut asked = stop.lock().unwrap_or_else(|p| p.into_inner());
                    asked.get_or_insert_with(|| {
                        format!("asked for {}({})", call.name, call.arguments)
                    });
                    CallDecision::Stop
                };
                Box::pin(async move { decision })
            }));
        let request = model
            .bind(layout.request())
            .options(options)
            .relation(Relation::Replay(id.clone()));
        let started = Instant::now();
        let done = TurnRequest::new(model.engine(), request)
            .whole()
            .tool_loop(&mut chain)
            .await;
        let elapsed = started.elapsed();
        let diverged = asked.lock().unwrap_or_else(|p| p.into_inner()).take();
        match done {
            Ok(done) => {
                let output = done.output;
                let records: Vec<RunRecord> =
                    output.responses.iter().map(|r| r.record(None)).collect();
                let answer = output.last().text();
                let (status, why) = match output.status {
                    ChainStatus::Completed => (ReplayStatus::Done, None),
                    ChainStatus::Stopped => (
                        ReplayStatus::Diverged,
                        Some(format!(
                            "diverged: {}",
                            diverged.unwrap_or_else(|| "the tool loop stopped".into())
                        )),
                    ),
                    ChainStatus::LimitReached => (
                        ReplayStatus::Failed,
                        Some(format!(
                            "the tool loop reached its limit of {} model calls",
                            plan.chain_limit
                        )),
                    ),
                };
                Outcome {
                    status,
                    answer_head: output.thread.head_id(),
                    decision: None,
                    comparator: None,
                    // The answer's text is its node's: the row keeps the
                    // node (answer_head), never the text (DESIGN
                    // invariant 13).
                    answer: Some(answer),
                    detail: json!({
                        "why": why,
                        "elapsed_ms": elapsed.as_millis() as u64,
                    }),
                    threads: vec![output.thread],
                    runs: records,
                    judge: None,
                }
            }
            Err(error) => failed_loop(error, elapsed),
        }
    }

    /// Judge a done turn against the original, and add what both cost. A
    /// comparison that fails (a judge's call, an embedder) fails the turn,
    /// its answer and runs kept.
    async fn judged(
        &self,
        mut outcome: Outcome,
        original: &Original,
        comparison: &Comparison,
        id: &ReplayId,
    ) -> Outcome {
        outcome.detail["original_usage"] = usage_of(&original.runs);
        // What both cost is priced when the report is read (prices change).
        outcome.detail["original_runs"] =
            json!(original.runs.iter().map(|run| &run.id).collect::<Vec<_>>());
        outcome.detail["usage"] = usage_of(&outcome.runs);
        if outcome.status != ReplayStatus::Done {
            return outcome;
        }
        let answer = outcome.answer.clone().unwrap_or_default();
        let decision: Decision = match comparison.decide(&original.text, &answer).await {
            Ok(decision) => decision,
            Err(error) => {
                outcome.status = ReplayStatus::Failed;
                outcome.detail["why"] = json!(comparison_failed(&error));
                return outcome;
            }
        };
        outcome.decision = Some(decision.word().to_string());
        outcome.comparator = Some(decision.comparator.clone());
        outcome.detail["why"] = json!(decision.why);
        if let Some(similarity) = decision.similarity {
            outcome.detail["similarity"] = json!(similarity);
        }
        if let Some((thread, mut run)) = decision.judge {
            // The judge's call is a run of its own, outside the turn's runs.
            run.relations.push(Relation::Other {
                kind: "replay.judge".into(),
                target: id.to_string(),
            });
            outcome.detail["judge_run"] = json!(run.id);
            outcome.threads.push(thread);
            outcome.judge = Some(run);
        }
        outcome
    }
}

/// A turn's own comparators, as its row's detail keeps them.
fn turn_compare(detail: &Value) -> Vec<String> {
    detail["compare"]
        .as_array()
        .map(|specs| {
            specs
                .iter()
                .filter_map(|spec| spec.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}
