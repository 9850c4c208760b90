/*!
Executing a prepared run: admission, the model call (with the transport's
retries surfacing as events), structural validation and repair, capture,
the ledger entry, and observer delivery once the permit is released.

Repairs extend a private working thread (candidate, corrective message,
next candidate...); only the final content enters the captured exchange
(DESIGN.md invariant 8). A run that fails operationally yields no exchange;
a run whose repairs ran out yields its last candidate in the validation
error, with an exchange marked not validated when capture was asked for.
*/

use crate::config::BackendDef;
use crate::contract::{Contract, corrective_message};
use crate::engine::{Inner, Prepared};
use crate::error::{EngineError, Result};
use crate::exchange::{Exchange, RenderedPrompt, Validation};
use crate::ledger::LedgerEntry;
use crate::observe::{AttemptKind, Emitter, Event, EventKind, RunId};
use crate::request::Request;
use skein_core::{ConversationId, Relation, RunRecord, RunStatus, now_ms};
use skein_core::{
    FinishReason, Message, ModelRequest, ModelResponse, Provider, ProviderError, ResponseAssembler,
    StreamEvent, ToolSpec, Usage,
};
use std::sync::Arc;
use std::time::Instant;
use tokio_util::sync::CancellationToken;

/// What a prepared execution carries besides its [`Prepared`] metadata.
pub(crate) struct Plan {
    request: Request,
    provider: Arc<dyn Provider>,
    backend: BackendDef,
    /// The compiled output contract, looked up once when resolving.
    contract: Option<Arc<Contract>>,
}

impl Plan {
    pub(crate) fn new(
        request: Request,
        provider: Arc<dyn Provider>,
        backend: BackendDef,
        contract: Option<Arc<Contract>>,
    ) -> Plan {
        Plan {
            request,
            provider,
            backend,
            contract,
        }
    }
}

/// A completed run.
#[derive(Clone, Debug)]
pub struct RunOutput {
    pub run: RunId,
    /// The final assistant content.
    pub message: Message,
    /// The reply parsed as JSON, when the run had an output contract.
    pub value: Option<serde_json::Value>,
    /// All attempts of the run together.
    pub usage: Usage,
    pub usage_complete: bool,
    /// Model calls made: 1 plus the repairs.
    pub attempts: u32,
    pub finish_reason: FinishReason,
    /// The model the provider says answered, when it said.
    pub response_model: Option<String>,
    /// The captured exchange, when the request asked for it.
    pub exchange: Option<Exchange>,
    pub prepared: Prepared,
    /// The tools offered on the call.
    pub tools: Vec<ToolSpec>,
    pub relations: Vec<Relation>,
    /// The run's events, in order.
    pub events: Vec<Event>,
    /// The provider that answered (its [`Provider::name`]).
    pub provider: String,
    /// Unix time in milliseconds when the run started and finished.
    pub started_ms: i64,
    pub finished_ms: i64,
}

impl RunOutput {
    pub fn text(&self) -> String {
        self.message.joined_text()
    }

    /// The run as the store records it, for a conversation's turn or on its
    /// own. The reply node is the request thread's head plus the final
    /// message, so the record names the nodes a commit of
    /// `prepared.thread.push(message)` writes.
    pub fn record(&self, conversation: Option<&ConversationId>) -> RunRecord {
        let output = self.prepared.thread.push(self.message.clone());
        RunRecord {
            id: self.run.clone(),
            conversation: conversation.cloned(),
            input_head: self.prepared.thread.head_id(),
            output_head: output.head_id(),
            model: self.prepared.model.clone(),
            provider: self.provider.clone(),
            profile: Some(self.prepared.profile.clone()),
            backend: Some(self.prepared.backend.clone()),
            status: RunStatus::Succeeded,
            usage: self.usage,
            usage_complete: self.usage_complete,
            started_ms: self.started_ms,
            finished_ms: Some(self.finished_ms),
            error: None,
            annotations: self.prepared.annotations.clone(),
            tools: self.tools.clone(),
            options: self.prepared.options.clone(),
            relations: self.prepared.recorded_relations(&self.relations),
            finish_reason: Some(self.finish_reason.clone()),
            turn: None,
            request: None,
            request_ref: None,
            requested_model: None,
            response_model: self.response_model.clone(),
            client: None,
            events: self.events.iter().map(stored_event).collect(),
        }
    }
}

impl Prepared {
    /// The record of this run when it failed after its model call started
    /// (the call failed, the reply never met the output contract, or it was
    /// cancelled: then its status is `cancelled`); `None` for failures
    /// before any call (a bad request, refused admission, cancellation
    /// while waiting), which leave no run. It names no conversation and no
    /// output (a cancelled call's partial text is the caller's to keep),
    /// and its usage is unknown (`usage_complete` false) unless the caller
    /// fills it in from the ledger.
    pub fn failed_record(&self, error: &EngineError) -> Option<RunRecord> {
        let (EngineError::Generation { run, .. }
        | EngineError::Validation { run, .. }
        | EngineError::Cancelled { run: Some(run), .. }) = error
        else {
            return None;
        };
        let mut record = RunRecord::new(self.model.clone(), self.provider.clone());
        record.id = run.clone();
        record.input_head = self.thread.head_id();
        record.profile = Some(self.profile.clone());
        record.backend = Some(self.backend.clone());
        record.status = match error {
            EngineError::Cancelled { .. } => RunStatus::Cancelled,
            _ => RunStatus::Failed,
        };
        record.error = Some(match error {
            EngineError::Generation { error, .. } => error.to_string(),
            other => other.to_string(),
        });
        record.usage_complete = false;
        record.annotations = self.annotations.clone();
        record.tools = self.tools.clone();
        record.options = self.options.clone();
        record.relations = self.recorded_relations(&record.relations);
        record.finished_ms = Some(now_ms());
        Some(record)
    }

    /// A run's relations as its record keeps them: `relations`, and what
    /// its configured prompt rendered, if it rendered one.
    fn recorded_relations(&self, relations: &[Relation]) -> Vec<Relation> {
        let mut kept = relations.to_vec();
        kept.extend(self.rendered.as_ref().map(RenderedPrompt::relation));
        kept
    }
}

/// An event as a run record keeps it: its JSON form without the run id,
/// which is the record's own.
fn stored_event(event: &Event) -> serde_json::Value {
    let mut value = serde_json::to_value(event).expect("events serialise");
    if let Some(fields) = value.as_object_mut() {
        fields.remove("run");
    }
    value
}

pub(crate) async fn execute(inner: &Inner, prepared: Prepared, plan: Plan) -> Result<RunOutput> {
    let placeholder = plan
        .request
        .erased_placeholder
        .clone()
        .or_else(crate::erased::default_placeholder);
    let sendable = crate::erased::sendable(&prepared.thread, placeholder.as_deref())?;
    let run = RunId::random();
    let started_ms = now_ms();
    let mut watchers = inner.watchers.clone();
    watchers.extend(&plan.request.watchers);
    let mut emitter = Emitter::new(run.clone(), watchers);
    if !sendable.replaced.is_empty() {
        emitter.emit(EventKind::ErasedReplaced {
            nodes: sendable.replaced.clone(),
        });
    }
    let cancel = plan.request.cancel.clone().unwrap_or_default();
    let mut relations = plan.request.relations.clone();
    if let Some(session) = &prepared.session_id {
        relations.push(Relation::Session(session.clone()));
    }
    let contract = plan.contract.clone();

    let mut state = Attempts {
        usage: Usage::default(),
        usage_complete: true,
        attempts: 0,
        sent: Some(sendable.thread),
    };
    let waited = Instant::now();
    let outcome = match inner
        .admission
        .admit(&plan.backend, plan.request.when_busy, &cancel)
        .await
    {
        Err(error) => Err(error),
        Ok(permit) => {
            emitter.emit(EventKind::Admitted {
                backend: plan.backend.name.clone(),
                waited: waited.elapsed(),
            });
            let outcome = attempt_until_valid(
                &prepared,
                &plan,
                contract.as_deref(),
                &cancel,
                &mut emitter,
                &mut state,
                &run,
            )
            .await;
            drop(permit);
            outcome
        }
    };

    let status = match &outcome {
        Ok(_) => RunStatus::Succeeded,
        Err(EngineError::Cancelled { .. }) => RunStatus::Cancelled,
        Err(_) => RunStatus::Failed,
    };
    match &outcome {
        Ok(_) => emitter.emit(EventKind::Completed {
            usage: state.usage,
            attempts: state.attempts,
        }),
        Err(error) => emitter.emit(EventKind::Failed {
            error: error.to_string(),
        }),
    }
    inner.ledger.record(LedgerEntry {
        run: run.clone(),
        status,
        backend: prepared.backend.clone(),
        provider: plan.provider.name().to_string(),
        model: prepared.model.clone(),
        usage: state.usage,
        usage_complete: state.usage_complete && state.attempts > 0,
        attempts: state.attempts,
        relations: relations.clone(),
    });
    // The permit is released: observers may run now.
    emitter.deliver();

    let capture = plan.request.capture;
    let exchange_for = |message: &Message, validation: Validation| Exchange {
        thread: prepared.thread.push(message.clone()),
        annotations: prepared.annotations.clone(),
        run: run.clone(),
        validation,
        prompt: prepared.prompt.clone(),
        continuation_of: prepared.continuation_of.clone(),
    };
    match outcome {
        Ok(Success { response, value }) => {
            let validation = if contract.is_some() {
                Validation::Validated
            } else {
                Validation::NotApplicable
            };
            let exchange = capture.then(|| exchange_for(&response.message, validation));
            Ok(RunOutput {
                run,
                message: response.message,
                value,
                usage: state.usage,
                usage_complete: state.usage_complete,
                attempts: state.attempts,
                finish_reason: response.finish_reason,
                response_model: response.model,
                exchange,
                tools: prepared.tools.clone(),
                prepared,
                relations,
                events: emitter.events().to_vec(),
                provider: plan.provider.name().to_string(),
                started_ms,
                finished_ms: now_ms(),
            })
        }
        Err(EngineError::Validation {
            run: failed_run,
            attempts,
            candidate,
            errors,
            exchange: _,
        }) => {
            let exchange = capture.then(|| {
                Box::new(exchange_for(
                    &Message::assistant(candidate.clone()),
                    Validation::NotValidated {
                        errors: errors.clone(),
                    },
                ))
            });
            Err(EngineError::Validation {
                run: failed_run,
                attempts,
                candidate,
                errors,
                exchange,
            })
        }
        Err(other) => Err(other),
    }
}

struct Attempts {
    usage: Usage,
    usage_complete: bool,
    attempts: u32,
    /// The thread the first attempt sends (the request's, with any erased
    /// content replaced): taken by the attempts.
    sent: Option<skein_core::Thread>,
}

struct Success {
    response: ModelResponse,
    value: Option<serde_json::Value>,
}

async fn attempt_until_valid(
    prepared: &Prepared,
    plan: &Plan,
    contract: Option<&Contract>,
    cancel: &CancellationToken,
    emitter: &mut Emitter,
    state: &mut Attempts,
    run: &RunId,
) -> Result<Success> {
    let mut working = state.sent.take().unwrap_or_else(|| prepared.thread.clone());
    loop {
        state.attempts += 1;
        let kind = if state.attempts == 1 {
            AttemptKind::Initial
        } else {
            AttemptKind::Repair
        };
        emitter.emit(EventKind::AttemptStarted {
            attempt: state.attempts,
            kind,
        });
        let request = ModelRequest {
            model: prepared.model.clone(),
            thread: working.clone(),
            annotations: prepared.annotations.clone(),
            tools: prepared.tools.clone(),
            options: prepared.options.clone(),
            output_schema: contract.map(|c| c.schema.clone()),
        };
        let mut partial = String::new();
        let response = call(plan, request, cancel, emitter, state.attempts, &mut partial)
            .await
            .map_err(|error| match error {
                ProviderError::Cancelled => EngineError::Cancelled {
                    run: Some(run.clone()),
                    partial,
                },
                error => EngineError::Generation {
                    run: run.clone(),
                    error,
                },
            })?;
        state.usage = state.usage.add(&response.usage);
        if response.usage.input_tokens.is_none() || response.usage.output_tokens.is_none() {
            state.usage_complete = false;
        }
        let Some(contract) = contract else {
            return Ok(Success {
                response,
                value: None,
            });
        };
        let text = response.message.joined_text();
        match contract.check(&text) {
            Ok(value) => {
                return Ok(Success {
                    response,
                    value: Some(value),
                });
            }
            Err(errors) => {
                emitter.emit(EventKind::Repair {
                    attempt: state.attempts,
                    errors: errors.clone(),
                });
                if state.attempts > prepared.repair_attempts {
                    return Err(EngineError::Validation {
                        run: run.clone(),
                        attempts: state.attempts,
                        candidate: text,
                        errors,
                        exchange: None,
                    });
                }
                working = working
                    .push(response.message)
                    .push(corrective_message(&errors));
            }
        }
    }
}

/// One model call: stream it, forwarding text to the request's text channel
/// and retries to the events, until done, cancelled, or past the reply
/// bounds ([`crate::with_reply_limit`], [`crate::with_reply_deadline`]).
/// `partial` gathers the reply's text as it comes (what a cancelled call
/// had said).
async fn call(
    plan: &Plan,
    request: ModelRequest,
    cancel: &CancellationToken,
    emitter: &mut Emitter,
    attempt: u32,
    partial: &mut String,
) -> Result<ModelResponse, ProviderError> {
    let mut stream = plan.provider.stream(request);
    let mut assembler = ResponseAssembler::new();
    let limit = crate::reply_limit::current();
    // One future each for cancellation and the deadline for the whole
    // call: a new one per event would register again for every text piece.
    let cancelled = cancel.cancelled();
    tokio::pin!(cancelled);
    let deadline = crate::reply_limit::deadline();
    let past_deadline = async {
        match deadline {
            Some((at, _)) => tokio::time::sleep_until(at).await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(past_deadline);
    loop {
        let next = tokio::select! {
            biased;
            () = &mut cancelled => return Err(ProviderError::Cancelled),
            () = &mut past_deadline => {
                let within = deadline.map(|(_, within)| within).unwrap_or_default();
                return Err(ProviderError::ReplyTooSlow { within });
            }
            next = std::future::poll_fn(|cx| stream.as_mut().poll_next(cx)) => next,
        };
        let Some(event) = next else {
            return assembler.finish();
        };
        let event = event?;
        match &event {
            StreamEvent::Text(text) => {
                partial.push_str(text);
                if let Some(limit) = limit.filter(|limit| partial.len() > *limit) {
                    return Err(ProviderError::ReplyTooLong { limit });
                }
                if let Some(sink) = &plan.request.text_sink {
                    let _ = sink.send(text.clone());
                }
            }
            StreamEvent::Retrying {
                attempt: retry,
                reason,
                delay,
            } => emitter.emit(EventKind::Retry {
                attempt: *retry,
                reason: format!("attempt {attempt}: {reason}"),
                delay: *delay,
            }),
            _ => {}
        }
        assembler.push(event)?;
    }
}
