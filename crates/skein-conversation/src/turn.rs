/*!
How a turn of a [`Conversation`] runs: from a [`TurnStart`] (where it starts),
its request is rendered through the engine with the conversation's
defaults as explicit inputs (the history, a configured prompt's messages,
a system message, the turn's own messages, its model, options and tools),
sent through the turn service ([`crate::service`]) as a model call or a
tool loop with the chain's or the conversation's hooks, and settled
([`crate::settle`]). A turn from an earlier point than the head runs on a
new branch there, so replying to an earlier response never moves a
bookmark backwards.
*/

use crate::commit::OnMoved;
use crate::conversation::{AfterCallHook, BeforeCallHook, Conversation};
use crate::error::{Error, Result};
use crate::model::Model;
use crate::prompt::{ChainHooks, TextSink, TurnSpec};
use crate::response::{ChainResponse, Response};
use crate::service::{FailedLoop, Landing, TurnError, TurnRequest};
use crate::settle::{Settled, TurnUnderWay};
use futures_util::future::join;
use skein_core::{Annotations, Message, NodeId, Relation, RunRecord, Thread};
use skein_engine::{
    AfterCall, BeforeCall, Chain, Exchange, Prepared, Request, RunId, RunOutput, Tool,
};
use std::future::Future;
use std::sync::Arc;

/// Where a turn starts: a thread with its annotations, and the run that
/// produced its head (when known), which the turn continues.
#[derive(Clone, Debug, Default)]
pub(crate) struct TurnStart {
    pub(crate) thread: Thread,
    pub(crate) annotations: Annotations,
    pub(crate) run: Option<RunId>,
}

impl TurnStart {
    pub(crate) fn head(&self) -> Option<NodeId> {
        self.thread.head_id()
    }

    /// Where `run`'s reply left `thread` (the call's own history, or a
    /// chain's with its tool results): with the annotations `run` sent,
    /// continuing `run`.
    pub(crate) fn after(thread: Thread, run: &RunOutput) -> TurnStart {
        TurnStart {
            thread,
            annotations: captured(run).annotations().clone(),
            run: Some(run.run.clone()),
        }
    }

    /// A stored `thread`, continuing `last_run` (the newest run that
    /// produced its head).
    pub(crate) fn stored(thread: Thread, last_run: Option<RunRecord>) -> TurnStart {
        TurnStart {
            thread,
            annotations: last_run
                .as_ref()
                .map(|run| run.annotations.clone())
                .unwrap_or_default(),
            run: last_run.map(|run| run.id),
        }
    }
}

/// The exchange a run captured (every turn-layer run captures one).
pub(crate) fn captured(run: &RunOutput) -> &Exchange {
    run.exchange
        .as_ref()
        .expect("the turn layer always captures")
}

impl Conversation {
    /// Where a turn from `from` runs: here when `from` is the head (or not
    /// given), otherwise on a new branch at `from` that keeps this
    /// conversation's settings and hooks (replying to an earlier response
    /// never moves a bookmark backwards).
    fn where_turn_runs(&self, from: Option<TurnStart>) -> (Conversation, TurnStart) {
        let current = self.state().point.clone();
        match from {
            Some(point) if point.head() != current.head() => (
                self.branch(point.clone(), None, None, true, Some(self.id())),
                point,
            ),
            _ => (self.clone(), current),
        }
    }

    pub(crate) async fn send(&self, from: Option<TurnStart>, input: TurnSpec) -> Result<Response> {
        let (conversation, from) = self.where_turn_runs(from);
        conversation.run_prompt(from, input).await
    }

    pub(crate) async fn send_chain(
        &self,
        from: Option<TurnStart>,
        input: TurnSpec,
        hooks: ChainHooks,
    ) -> Result<ChainResponse> {
        let (conversation, from) = self.where_turn_runs(from);
        conversation.run_chain(from, input, hooks).await
    }

    /// The request a turn from `from` would send first, resolved and
    /// rendered by the engine, with nothing run or recorded.
    pub(crate) fn prepare_turn(
        &self,
        from: Option<TurnStart>,
        input: &TurnSpec,
    ) -> Result<Prepared> {
        let (conversation, from) = self.where_turn_runs(from);
        let (model, tools) = conversation.model_and_tools(input);
        let specs: Vec<_> = tools.iter().map(|tool| tool.spec().clone()).collect();
        let request = conversation.request(&from, &model, input).tools(specs);
        Ok(model.engine().prepare(&request)?)
    }

    /// The request of a turn: the history, then the configured prompt's
    /// messages when the input names one, then an optional system message
    /// and the turn's own messages, with this turn's model and options.
    fn request(&self, from: &TurnStart, model: &Model, input: &TurnSpec) -> Request {
        let mut request = match input.input.configured_prompt() {
            Some(prompt) => match prompt.version {
                Some(version) => Request::prompt_version(prompt.id.clone(), version),
                None => Request::prompt(prompt.id.clone()),
            },
            None => Request::default(),
        };
        for (name, value) in input.input.variables() {
            request = request.var(name.clone(), value.clone());
        }
        request = request.with_messages(
            input
                .system
                .iter()
                .map(|system| Message::system(system.clone())),
        );
        for appended in input.input.messages() {
            request =
                request.annotated_message(appended.message.clone(), appended.annotations.clone());
        }
        let mut request = request
            .history(from.thread.clone(), from.annotations.clone())
            .options(input.options.clone())
            .capture();
        if let Some(run) = &from.run {
            request = request.relation(Relation::ContinuationOf(run.clone()));
        }
        if let Some(token) = &input.cancel {
            request = request.cancel_with(token.clone());
        }
        if let Some(schema) = &input.schema {
            request = request.output_contract(schema.clone());
        }
        model.bind(request)
    }

    /// The turn's own model and tools, else the conversation's.
    fn model_and_tools(&self, input: &TurnSpec) -> (Model, Vec<Arc<dyn Tool>>) {
        (
            input
                .model
                .clone()
                .unwrap_or_else(|| self.shared.model.clone()),
            input
                .tools
                .clone()
                .unwrap_or_else(|| self.shared.tools.clone()),
        )
    }

    async fn run_prompt(&self, from: TurnStart, mut input: TurnSpec) -> Result<Response> {
        let under_way = TurnUnderWay::begin(self);
        let (model, tools) = self.model_and_tools(&input);
        let specs: Vec<_> = tools.iter().map(|tool| tool.spec().clone()).collect();
        let warnings = self.state().drift.check(&specs);
        let request = self.request(&from, &model, &input).tools(specs);
        let (request, sink) = streaming(request, input.on_text.take());
        let turn = self.turn_request(&model, request, &from, input.on_moved);
        let done = streamed(turn.call(), sink).await?;
        let output = done.output;
        let to = TurnStart::after(captured(&output).thread().clone(), &output);
        let records = vec![output.record(Some(&self.id()))];
        let service_landed = done.landed.clone();
        let settled = self.settle(&under_way, &from, &to, records, done.landed, input.on_moved);
        let landed = settled.landed(self.id(), service_landed);
        let response = |conversation| Response::new(output, conversation, warnings, model, landed);
        match settled {
            Settled::Here => Ok(response(self.clone())),
            Settled::Branched(branch) => Ok(response(branch)),
            Settled::Lost(current) => Err(Error::HeadMoved {
                conversation: self.id(),
                current,
                response: Box::new(response(self.clone())),
            }),
        }
    }

    async fn run_chain(
        &self,
        from: TurnStart,
        mut input: TurnSpec,
        own: ChainHooks,
    ) -> Result<ChainResponse> {
        let under_way = TurnUnderWay::begin(self);
        let (model, tools) = self.model_and_tools(&input);
        let hooks = self.hooks().clone();
        let mut chain = Chain::new(tools)
            .limit(input.chain_limit.unwrap_or(self.shared.chain_limit))
            .drift(self.state().drift.clone());
        // The chain's own hook, else the conversation's, each on its own.
        let before = own.before.or_else(|| hooks.before.map(shared_before));
        let after = own.after.or_else(|| hooks.after.map(shared_after));
        if let Some(before) = before {
            chain = chain.before_call(before);
        }
        if let Some(after) = after {
            chain = chain.after_call(after);
        }
        let request = self.request(&from, &model, &input);
        let (request, sink) = streaming(request, input.on_text.take());
        let turn = self.turn_request(&model, request, &from, input.on_moved);
        let outcome = streamed(turn.tool_loop(&mut chain), sink).await;
        self.state().drift = chain.tracker().clone();
        let done = match outcome {
            Ok(done) => done,
            Err(TurnError::Loop(failed)) => {
                let FailedLoop {
                    error,
                    completed,
                    thread,
                    landed,
                    ..
                } = *failed;
                // The completed calls landed (the failed one's run with
                // them); the conversation stands where they end.
                if let (Some(thread), Some(last)) = (thread, completed.last()) {
                    let to = TurnStart::after(thread, last);
                    let records = self.records(&completed);
                    self.settle(&under_way, &from, &to, records, landed, input.on_moved);
                }
                return Err(Error::ChainFailed {
                    error,
                    completed: completed.len(),
                });
            }
            Err(other) => return Err(other.into()),
        };
        let output = done.output;
        let to = TurnStart::after(output.thread.clone(), output.last());
        let records = self.records(&output.responses);
        let service_landed = done.landed.clone();
        let settled = self.settle(&under_way, &from, &to, records, done.landed, input.on_moved);
        let landed = settled.landed(self.id(), service_landed);
        let response = |conversation| ChainResponse::new(output, conversation, &model, landed);
        match settled {
            Settled::Here => Ok(response(self.clone())),
            Settled::Branched(branch) => Ok(response(branch)),
            Settled::Lost(current) => Err(Error::HeadMoved {
                conversation: self.id(),
                current,
                response: Box::new(response(self.clone()).last().clone()),
            }),
        }
    }

    /// The turn service's request for a turn of this conversation from
    /// `from`: recorded in its store (created there by its first turn),
    /// when it has one.
    fn turn_request(
        &self,
        model: &Model,
        request: Request,
        from: &TurnStart,
        on_moved: OnMoved,
    ) -> TurnRequest {
        let turn = TurnRequest::new(model.engine(), request);
        match &self.shared.store {
            Some(store) => turn.recorded(
                store,
                Landing::In {
                    conversation: self.bookmark(),
                    from: from.head(),
                    on_moved,
                },
            ),
            None => turn,
        }
    }

    /// The records of `outputs`, this conversation's.
    fn records(&self, outputs: &[RunOutput]) -> Vec<RunRecord> {
        outputs
            .iter()
            .map(|output| output.record(Some(&self.id())))
            .collect()
    }
}

/// A conversation's `before_call` as one chain's hook.
fn shared_before(hook: BeforeCallHook) -> BeforeCall {
    Box::new(move |call| hook(call))
}

/// A conversation's `after_call` as one chain's hook.
fn shared_after(hook: AfterCallHook) -> AfterCall {
    Box::new(move |call, result| hook(call, result))
}

/// The request with a text channel when a sink wants the stream.
fn streaming(
    request: Request,
    sink: Option<TextSink>,
) -> (
    Request,
    Option<(TextSink, tokio::sync::mpsc::UnboundedReceiver<String>)>,
) {
    match sink {
        None => (request, None),
        Some(sink) => {
            let (sender, receiver) = tokio::sync::mpsc::unbounded_channel();
            (request.text_channel(sender), Some((sink, receiver)))
        }
    }
}

/// Drive `work`, handing streamed text to the sink as it arrives. The
/// channel closes when `work` drops its request.
async fn streamed<T>(
    work: impl Future<Output = T>,
    sink: Option<(TextSink, tokio::sync::mpsc::UnboundedReceiver<String>)>,
) -> T {
    let Some((mut sink, mut receiver)) = sink else {
        return work.await;
    };
    let drain = async move {
        while let Some(text) = receiver.recv().await {
            sink(&text);
        }
    };
    join(work, drain).await.0
}
