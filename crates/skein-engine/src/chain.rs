/*!
Chains: the tool loop. A chain is a sequence of runs (one per model call)
sharing a chain id; between them skein executes the calls of the last reply
and appends their results, until a reply calls no tool, the chain limit is
reached, or `before_call` stops it.

No admission permit is held while tools or hooks run: each model call is an
ordinary engine run, which releases its permit before returning (DESIGN.md
invariant 9). `before_call` may let a call run (possibly with changed
arguments), skip it, or stop the chain; a skipped or stopped call still gets
a tool result, marked as an error saying the application cancelled it, so
the history is valid for every provider and nothing is half-done.

Schema drift: a [`DriftTracker`] remembers, per tool name, the hash of the
input schema last offered; offering the same name under another schema
yields a [`DriftWarning`] (and a `tracing` warning). A changed description
is not drift. The check is O(1) per offered tool.
*/

use crate::engine::{Engine, Prepared};
use crate::error::EngineError;
use crate::exchange::Exchange;
use crate::execute::RunOutput;
use crate::observe::RunId;
use crate::request::Request;
use crate::tools::{self, Tool};
use serde::Serialize;
use skein_core::{BoxFuture, Digest, Message, Relation, Thread, ToolCall, ToolResult, ToolSpec};
use std::collections::HashMap;
use std::sync::Arc;

/// Model calls a chain makes when nothing else says: enough for a few
/// rounds of tool use, small enough to stop a model that loops.
pub const DEFAULT_CHAIN_LIMIT: u32 = 10;

/// What `before_call` decides for one tool call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CallDecision {
    /// Run the call (as given, or with changed arguments).
    Run(ToolCall),
    /// Do not run it; the model gets an error result with this reason.
    Skip(String),
    /// Do not run it or anything after it, and end the chain.
    Stop,
}

/// Inspects, changes or cancels each call before it runs.
pub type BeforeCall = Box<dyn for<'a> FnMut(&'a ToolCall) -> BoxFuture<'a, CallDecision> + Send>;
/// Sees each call and its result.
pub type AfterCall =
    Box<dyn for<'a> FnMut(&'a ToolCall, &'a ToolResult) -> BoxFuture<'a, ()> + Send>;

/// How a chain ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ChainStatus {
    /// The last reply called no tool.
    Completed,
    /// The chain limit was reached with tool calls still pending.
    LimitReached,
    /// `before_call` stopped the chain.
    Stopped,
}

/// A tool offered under a different input schema than before.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct DriftWarning {
    pub tool: String,
    pub previous_schema: Digest,
    pub current_schema: Digest,
}

/// Remembers each tool name's schema hash across the calls of a chain or
/// conversation.
#[derive(Clone, Debug, Default)]
pub struct DriftTracker {
    schemas: HashMap<String, Digest>,
}

impl DriftTracker {
    /// Remember the tools offered on an earlier call without checking them:
    /// how a conversation loaded from a store learns the schemas its
    /// recorded calls offered (feed its runs oldest first).
    pub fn remember(&mut self, tools: &[ToolSpec]) {
        for tool in tools {
            self.schemas.insert(tool.name.clone(), tool.schema_hash());
        }
    }

    /// Remember that tool `name` was last offered under the input schema
    /// whose hash is `schema` ([`ToolSpec::schema_hash`]): how a loaded
    /// conversation learns from the store's record of what it offered.
    pub fn remember_schema(&mut self, name: String, schema: Digest) {
        self.schemas.insert(name, schema);
    }

    /// Warnings for the tools offered on one call, then remember them.
    pub fn check(&mut self, tools: &[ToolSpec]) -> Vec<DriftWarning> {
        let mut warnings = Vec::new();
        for tool in tools {
            let schema = tool.schema_hash();
            if let Some(previous) = self.schemas.insert(tool.name.clone(), schema)
                && previous != schema
            {
                tracing::warn!(tool = %tool.name, "tool `{}` is offered with a different input schema than before", tool.name);
                warnings.push(DriftWarning {
                    tool: tool.name.clone(),
                    previous_schema: previous,
                    current_schema: schema,
                });
            }
        }
        warnings
    }
}

/// A tool loop's settings and hooks.
pub struct Chain {
    tools: Vec<Arc<dyn Tool>>,
    limit: u32,
    before: Option<BeforeCall>,
    after: Option<AfterCall>,
    drift: DriftTracker,
}

/// What a chain did.
#[derive(Clone, Debug)]
pub struct ChainOutput {
    pub id: String,
    /// Every model call's output, in order.
    pub responses: Vec<RunOutput>,
    pub status: ChainStatus,
    /// The history at the end: the last reply, and when the chain was
    /// stopped, the results given for its calls.
    pub thread: Thread,
    pub warnings: Vec<DriftWarning>,
}

/// A chain whose model call failed, with what it completed before.
#[derive(Debug, thiserror::Error)]
#[error("{error} (after {} completed model call(s) of the chain)", .completed.len())]
pub struct ChainFailure {
    pub error: EngineError,
    /// The calls that succeeded before the failure, in order.
    pub completed: Vec<RunOutput>,
    /// The history after the last completed round (its reply and the
    /// results of its calls); `None` when the first call failed.
    pub thread: Option<Thread>,
    pub warnings: Vec<DriftWarning>,
    /// The failed call as it was resolved (`None` when it failed before
    /// that): what [`Prepared::failed_record`] records.
    pub failed_call: Option<Box<Prepared>>,
}

impl ChainOutput {
    /// The last model call's output.
    pub fn last(&self) -> &RunOutput {
        self.responses
            .last()
            .expect("a chain makes at least one call")
    }
}

impl Chain {
    pub fn new(tools: Vec<Arc<dyn Tool>>) -> Chain {
        Chain {
            tools,
            limit: DEFAULT_CHAIN_LIMIT,
            before: None,
            after: None,
            drift: DriftTracker::default(),
        }
    }

    /// At most `limit` model calls (at least one).
    pub fn limit(mut self, limit: u32) -> Chain {
        self.limit = limit.max(1);
        self
    }

    pub fn before_call(mut self, hook: BeforeCall) -> Chain {
        self.before = Some(hook);
        self
    }

    pub fn after_call(mut self, hook: AfterCall) -> Chain {
        self.after = Some(hook);
        self
    }

    /// Continue drift detection from an earlier chain or conversation.
    pub fn drift(mut self, tracker: DriftTracker) -> Chain {
        self.drift = tracker;
        self
    }

    /// The drift tracker after the chain, to carry into the next one.
    pub fn tracker(&self) -> &DriftTracker {
        &self.drift
    }

    /// Run the loop: `first` (after its history, when it has one: see
    /// [`Request::history`] and [`Request::continuing`]), then one
    /// continuation per round of tool results, on the same profile and model.
    ///
    /// A model call that fails ends the chain with a [`ChainFailure`] that
    /// keeps what the calls before it completed, so nothing is lost.
    pub async fn run(
        &mut self,
        engine: &Engine,
        first: Request,
    ) -> Result<ChainOutput, ChainFailure> {
        let id = RunId::random().0;
        let specs: Vec<ToolSpec> = self.tools.iter().map(|tool| tool.spec().clone()).collect();
        let mut request = first
            .tools(specs.clone())
            .capture()
            .relation(Relation::Chain(id.clone()));
        // Later calls keep the first call's settings, not its content.
        let template = request.clone();
        let mut current: Option<Exchange> = None;
        // The history after the last completed round: its reply and the
        // results of its calls.
        let mut reached: Option<Thread> = None;
        let mut responses = Vec::new();
        let mut warnings = Vec::new();
        loop {
            warnings.extend(self.drift.check(&specs));
            let execution = match &current {
                Some(exchange) => engine.prepare_continuation(exchange, request),
                None => engine.prepare_execution(request),
            };
            let failed_call = execution
                .as_ref()
                .ok()
                .map(|execution| Box::new(execution.prepared().clone()));
            let outcome = match execution {
                Ok(execution) => execution.run().await,
                Err(error) => Err(error),
            };
            let output = match outcome {
                Ok(output) => output,
                Err(error) => {
                    return Err(ChainFailure {
                        error,
                        completed: responses,
                        thread: reached,
                        warnings,
                        failed_call,
                    });
                }
            };
            let exchange = output.exchange.clone().expect("chain runs capture");
            let calls: Vec<ToolCall> = output.message.tool_calls().cloned().collect();
            let (profile, model) = (
                output.prepared.profile.clone(),
                output.prepared.model.clone(),
            );
            responses.push(output);
            if calls.is_empty() {
                return Ok(self.finish(
                    id,
                    responses,
                    ChainStatus::Completed,
                    exchange.thread().clone(),
                    warnings,
                ));
            }
            if responses.len() as u32 >= self.limit {
                return Ok(self.finish(
                    id,
                    responses,
                    ChainStatus::LimitReached,
                    exchange.thread().clone(),
                    warnings,
                ));
            }
            let (results, stopped) = self.execute_calls(engine, &calls).await;
            let tool_message = Message::tool_results(results);
            let thread = exchange.thread().push(tool_message.clone());
            if stopped {
                return Ok(self.finish(id, responses, ChainStatus::Stopped, thread, warnings));
            }
            reached = Some(thread);
            request = template.follow_up(vec![tool_message], &profile, &model);
            current = Some(exchange);
        }
    }

    /// Run the calls of one reply through the hooks and tools.
    async fn execute_calls(
        &mut self,
        engine: &Engine,
        calls: &[ToolCall],
    ) -> (Vec<ToolResult>, bool) {
        let mut results = Vec::with_capacity(calls.len());
        let mut stopped = false;
        for call in calls {
            let cancelled = |reason: &str| ToolResult {
                call_id: call.id.clone(),
                content: format!("the application cancelled this call: {reason}"),
                is_error: true,
            };
            let decision = if stopped {
                CallDecision::Stop
            } else {
                match &mut self.before {
                    Some(before) => before(call).await,
                    None => CallDecision::Run(call.clone()),
                }
            };
            let result = match decision {
                CallDecision::Run(changed) => {
                    let mut result =
                        tools::execute(&self.tools, engine.contracts(), &changed).await;
                    result.call_id = call.id.clone();
                    result
                }
                CallDecision::Skip(reason) => cancelled(&reason),
                CallDecision::Stop => {
                    stopped = true;
                    cancelled("the chain was stopped")
                }
            };
            if let Some(after) = &mut self.after {
                after(call, &result).await;
            }
            results.push(result);
        }
        (results, stopped)
    }

    fn finish(
        &self,
        id: String,
        responses: Vec<RunOutput>,
        status: ChainStatus,
        thread: Thread,
        warnings: Vec<DriftWarning>,
    ) -> ChainOutput {
        ChainOutput {
            id,
            responses,
            status,
            thread,
            warnings,
        }
    }
}
