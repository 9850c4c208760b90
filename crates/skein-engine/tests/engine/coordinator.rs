//! The sequential coordinator's acceptance tests (issue 6; seed 002,
//! decisions 3 and 4): one test per accepted behaviour, named after it, plus
//! the runnable examples. All on the scripted model, wrapped to record what
//! it was asked.

use serde_json::json;
use skein_core::{
    BoxStream, Message, ModelRequest, Provider, ProviderError, Role, StreamEvent, Thread,
};
use skein_core::{Relation, RunStatus};
use skein_engine::coordinator::{CallbackError, Next, Outcome, TurnView};
use skein_engine::{
    BackendDef, BackendKind, CancellationToken, Catalog, CoordinateError, Engine, EngineError,
    Event, EventKind, Exchange, Observer, Profile, Request, RunId,
};
use skein_providers::Scripted;
use skein_testkit::Recording;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

#[path = "../../examples/analysis_loop.rs"]
mod analysis_loop;
#[path = "../../examples/branches.rs"]
mod branches;
#[path = "../../examples/repair_branch.rs"]
mod repair_branch;

const RULES: &str = r#"
[[rules]]
name = "fail"
last_user_contains = "fail please"
error = { kind = "server", status = 503, message = "down" }

[[rules]]
name = "repaired"
last_user_contains = "did not match the schema"
reply = '{"n": 1}'

[[rules]]
name = "malformed"
last_user_contains = "json please"
reply = "not json"

[[rules]]
name = "reply"
reply = "reply to {last_user} after {history} messages"
"#;

/// The scripted model, preceding its reply with a transport retry when the
/// last user text says "retry". The fixture records its calls.
struct RetryWhenAsked(Scripted);

impl Provider for RetryWhenAsked {
    fn name(&self) -> &str {
        self.0.name()
    }

    fn stream(
        &self,
        request: ModelRequest,
    ) -> BoxStream<'static, Result<StreamEvent, ProviderError>> {
        let retry = last_user(&request.thread).contains("retry");
        let rest = self.0.stream(request);
        if !retry {
            return rest;
        }
        Box::pin(Prepend {
            first: Some(Ok(StreamEvent::Retrying {
                attempt: 1,
                reason: "rate limited".into(),
                delay: Duration::ZERO,
            })),
            rest,
        })
    }
}

struct Prepend {
    first: Option<Result<StreamEvent, ProviderError>>,
    rest: BoxStream<'static, Result<StreamEvent, ProviderError>>,
}

impl futures_core::Stream for Prepend {
    type Item = Result<StreamEvent, ProviderError>;
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if let Some(first) = self.first.take() {
            return Poll::Ready(Some(first));
        }
        self.rest.as_mut().poll_next(cx)
    }
}

/// Never answers: a call that runs until it is cancelled.
struct Pending(Arc<AtomicUsize>);

impl Provider for Pending {
    fn name(&self) -> &str {
        "pending"
    }
    fn stream(&self, _: ModelRequest) -> BoxStream<'static, Result<StreamEvent, ProviderError>> {
        self.0.fetch_add(1, Ordering::SeqCst);
        struct Never;
        impl futures_core::Stream for Never {
            type Item = Result<StreamEvent, ProviderError>;
            fn poll_next(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<Self::Item>> {
                Poll::Pending
            }
        }
        Box::pin(Never)
    }
}

fn last_user(thread: &Thread) -> String {
    thread
        .messages()
        .iter()
        .rev()
        .find(|m| m.role == Role::User)
        .map(|m| m.joined_text())
        .unwrap_or_default()
}

struct Fixture {
    engine: Engine,
    model: Arc<Recording>,
    pending_calls: Arc<AtomicUsize>,
}

impl Fixture {
    fn new() -> Fixture {
        let catalog = Catalog::new()
            .backend(BackendDef::new("main", BackendKind::Echo))
            .backend(BackendDef::new("solo", BackendKind::Echo).capacity(1))
            .backend(BackendDef::new("pending", BackendKind::Echo))
            .profile(Profile::new("main", "main", "scripted"))
            .profile(Profile::new("solo", "solo", "scripted"))
            .profile(Profile::new("pending", "pending", "never"));
        let model = Recording::new(Arc::new(RetryWhenAsked(
            Scripted::from_toml_str(RULES).unwrap(),
        )));
        let pending_calls = Arc::new(AtomicUsize::new(0));
        let engine = Engine::builder(catalog)
            .provider("main", model.clone())
            .provider("solo", model.clone())
            .provider("pending", Arc::new(Pending(pending_calls.clone())))
            .build()
            .unwrap();
        Fixture {
            engine,
            model,
            pending_calls,
        }
    }

    /// The captured exchange every test starts from.
    async fn start(&self) -> Exchange {
        self.engine
            .run(ask("start").capture())
            .await
            .unwrap()
            .exchange
            .unwrap()
    }

    /// The last user text of every model call so far.
    fn seen(&self) -> Vec<String> {
        self.model
            .requests()
            .iter()
            .map(|request| last_user(&request.thread))
            .collect()
    }

    fn asked(&self, text: &str) -> usize {
        self.seen().iter().filter(|seen| *seen == text).count()
    }
}

/// `future`'s result, or a failed test when it hangs (a cancellation that
/// did not reach the execution).
async fn within<T>(future: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(10), future)
        .await
        .expect("the execution ended")
}

fn ask(text: &str) -> Request {
    Request::messages([Message::user(text)]).profile("main")
}

/// What one callback invocation saw.
#[derive(Clone, Debug)]
struct Seen {
    response: Option<RunId>,
    response_text: Option<String>,
    exchange_run: RunId,
    exchange_len: usize,
    used: u32,
    remaining: u32,
}

fn seen(turn: &TurnView<'_>) -> Seen {
    Seen {
        response: turn.response().map(|r| r.run.clone()),
        response_text: turn.response().map(|r| r.text()),
        exchange_run: turn.exchange().run().clone(),
        exchange_len: turn.exchange().thread().len(),
        used: turn.turns_used(),
        remaining: turn.turns_remaining(),
    }
}

/// A callback's own model call and the run of the response it served.
type OwnCall = (RunId, Option<RunId>);

/// A delivered run's attempts, its retry/repair events, and its value.
type RunDetail = (u32, Vec<String>, serde_json::Value);

/// An application error type of the tests' own.
#[derive(Debug, PartialEq, thiserror::Error)]
#[error("rejected at turn {turn}")]
struct Rejected {
    turn: u32,
}

#[tokio::test]
async fn delivery_once_including_last() {
    let f = Fixture::new();
    let start = f.start().await;
    let coordinator = f.engine.coordinator(&start, 3);
    let sequence = coordinator.sequence().to_string();
    let mut log: Vec<Seen> = Vec::new();
    let outcome = coordinator
        .run_with(&mut log, |log, turn, _| {
            Box::pin(async move {
                log.push(seen(&turn));
                if turn.turns_remaining() == 0 {
                    return Ok(Next::Stop);
                }
                Ok(Next::Continue(ask(&format!(
                    "turn {}",
                    turn.turns_used() + 1
                ))))
            })
        })
        .await
        .unwrap();
    assert_eq!(outcome, Outcome::Stopped);
    assert_eq!(log.len(), 4, "the start, then one callback per response");
    assert_eq!(log[0].response, None);
    assert_eq!(&log[0].exchange_run, start.run());
    let delivered: Vec<RunId> = log[1..]
        .iter()
        .map(|s| s.response.clone().unwrap())
        .collect();
    for (i, s) in log[1..].iter().enumerate() {
        // The view's exchange is the delivered response's own.
        assert_eq!(s.response.as_ref(), Some(&s.exchange_run));
        // History grows by the follow-up and its reply, nothing else.
        assert_eq!(s.exchange_len, start.thread().len() + 2 * (i + 1));
        assert!(
            s.response_text
                .as_ref()
                .unwrap()
                .starts_with(&format!("reply to turn {}", i + 1))
        );
    }
    // Every coordinated run was delivered, once, the last one included.
    let report = f.engine.ledger().sequence(&sequence);
    let mut continuations: Vec<RunId> = report
        .runs
        .iter()
        .filter(|run| *run != start.run())
        .cloned()
        .collect();
    let mut sorted = delivered.clone();
    sorted.sort();
    continuations.sort();
    assert_eq!(sorted, continuations);
    sorted.dedup();
    assert_eq!(sorted.len(), 3);
    assert_eq!(f.seen().len(), 1 + 3);
}

#[tokio::test]
async fn stop() {
    let f = Fixture::new();
    let start = f.start().await;
    let mut log: Vec<Seen> = Vec::new();
    let outcome = f
        .engine
        .coordinator(&start, 5)
        .run_with(&mut log, |log, turn, _| {
            Box::pin(async move {
                log.push(seen(&turn));
                Ok(match turn.response() {
                    None => Next::Continue(ask("only once")),
                    Some(_) => Next::Stop,
                })
            })
        })
        .await
        .unwrap();
    assert_eq!(outcome, Outcome::Stopped);
    assert_eq!(log.len(), 2);
    assert_eq!((log[1].used, log[1].remaining), (1, 4));
    assert_eq!(f.seen(), ["start", "only once"]);
}

#[tokio::test]
async fn exhaustion_without_executing() {
    let f = Fixture::new();
    let start = f.start().await;
    let calls = AtomicUsize::new(0);
    let calls = &calls;
    let outcome = f
        .engine
        .coordinate(&CancellationToken::new(), &start, 1, move |turn, _| {
            let n = calls.fetch_add(1, Ordering::SeqCst) + 1;
            assert_eq!(turn.turns_used() as usize, n - 1);
            Box::pin(async move { Ok(Next::Continue(ask(&format!("request {n}")))) })
        })
        .await
        .unwrap();
    assert_eq!(outcome, Outcome::Exhausted);
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    assert_eq!(f.asked("request 1"), 1);
    assert_eq!(f.asked("request 2"), 0, "the refused request never ran");
    assert_eq!(
        f.engine.ledger().entries().len(),
        2,
        "no run was recorded for it"
    );
}

#[tokio::test]
async fn budget_fully_used_is_not_exhaustion() {
    let f = Fixture::new();
    let start = f.start().await;
    let mut log: Vec<Seen> = Vec::new();
    let outcome = f
        .engine
        .coordinator(&start, 2)
        .run_with(&mut log, |log, turn, _| {
            Box::pin(async move {
                log.push(seen(&turn));
                Ok(if turn.turns_remaining() > 0 {
                    Next::Continue(ask("more"))
                } else {
                    Next::Stop
                })
            })
        })
        .await
        .unwrap();
    assert_eq!(outcome, Outcome::Stopped, "every turn used, none refused");
    let budget: Vec<(u32, u32)> = log.iter().map(|s| (s.used, s.remaining)).collect();
    assert_eq!(budget, [(0, 2), (1, 1), (2, 0)]);
    assert!(log[2].response.is_some(), "the last permitted response");
}

#[tokio::test]
async fn zero_budget_stop() {
    let f = Fixture::new();
    let start = f.start().await;
    let mut log: Vec<Seen> = Vec::new();
    let outcome = f
        .engine
        .coordinator(&start, 0)
        .run_with(&mut log, |log, turn, _| {
            Box::pin(async move {
                log.push(seen(&turn));
                Ok(Next::Stop)
            })
        })
        .await
        .unwrap();
    assert_eq!(outcome, Outcome::Stopped);
    assert_eq!(log.len(), 1, "invoked once even with no turns");
    let s = &log[0];
    assert_eq!(s.response, None, "no newly generated response");
    assert_eq!(&s.exchange_run, start.run());
    assert_eq!(s.exchange_len, start.thread().len());
    assert_eq!((s.used, s.remaining), (0, 0));
    assert_eq!(f.seen(), ["start"]);
}

#[tokio::test]
async fn zero_budget_continue_is_exhausted() {
    let f = Fixture::new();
    let start = f.start().await;
    let mut calls = 0;
    let outcome = f
        .engine
        .coordinator(&start, 0)
        .run_with(&mut calls, |calls, _, _| {
            Box::pin(async move {
                *calls += 1;
                Ok(Next::Continue(ask("never")))
            })
        })
        .await
        .unwrap();
    assert_eq!(outcome, Outcome::Exhausted);
    assert_eq!(calls, 1);
    assert_eq!(f.asked("never"), 0);
    assert_eq!(f.engine.ledger().entries().len(), 1);
}

#[tokio::test]
async fn zero_budget_error() {
    let f = Fixture::new();
    let start = f.start().await;
    let mut calls = 0;
    let error = f
        .engine
        .coordinator(&start, 0)
        .run_with(&mut calls, |calls, turn, _| {
            Box::pin(async move {
                *calls += 1;
                Err(Rejected {
                    turn: turn.turns_used(),
                }
                .into())
            })
        })
        .await
        .unwrap_err();
    assert_eq!(calls, 1);
    assert_eq!(
        error.callback_error::<Rejected>(),
        Some(&Rejected { turn: 0 })
    );
    assert!(!error.is_cancelled());
    assert_eq!(f.seen(), ["start"]);
}

#[tokio::test]
async fn cancellation_before_the_first_callback() {
    let f = Fixture::new();
    let start = f.start().await;
    let token = CancellationToken::new();
    token.cancel();
    let calls = AtomicUsize::new(0);
    let calls = &calls;
    let error = f
        .engine
        .coordinate(&token, &start, 3, move |_, _| {
            calls.fetch_add(1, Ordering::SeqCst);
            Box::pin(async { Ok(Next::Stop) })
        })
        .await
        .unwrap_err();
    assert!(
        matches!(error, CoordinateError::Cancelled { undelivered: None }),
        "{error}"
    );
    assert_eq!(calls.load(Ordering::SeqCst), 0, "the callback never ran");
    assert_eq!(f.seen(), ["start"]);
}

#[tokio::test]
async fn cancellation_with_an_undelivered_response() {
    let f = Fixture::new();
    let start = f.start().await;
    let token = CancellationToken::new();
    // A concurrent canceller, woken when the execution completes and
    // acknowledging once it has cancelled, so the response is complete
    // and the token cancelled before the coordinator's next check.
    let (wake, woken) = std::sync::mpsc::channel::<()>();
    let (ack, acked) = std::sync::mpsc::channel::<()>();
    let canceller = std::thread::spawn({
        let token = token.clone();
        move || {
            woken.recv().unwrap();
            token.cancel();
            ack.send(()).unwrap();
        }
    });
    let (wake, acked) = (Mutex::new(wake), Mutex::new(acked));
    let on_completion: Arc<dyn Observer> = Arc::new(move |event: &Event| {
        if matches!(event.kind, EventKind::Completed { .. }) {
            wake.lock().unwrap().send(()).unwrap();
            acked.lock().unwrap().recv().unwrap();
        }
    });
    let mut log: Vec<Seen> = Vec::new();
    let error = f
        .engine
        .coordinator(&start, 3)
        .cancel_with(token.clone())
        .run_with(&mut log, |log, turn, _| {
            let on_completion = on_completion.clone();
            Box::pin(async move {
                log.push(seen(&turn));
                Ok(Next::Continue(ask("finish me").observe(on_completion)))
            })
        })
        .await
        .unwrap_err();
    canceller.join().unwrap();
    assert_eq!(log.len(), 1, "the completed response was not delivered");
    assert!(error.is_cancelled(), "{error}");
    assert!(error.to_string().contains("not delivered"), "{error}");
    let undelivered = error.into_undelivered().expect("the response is kept");
    assert!(undelivered.text().starts_with("reply to finish me"));
    assert_eq!(
        undelivered.exchange.as_ref().unwrap().text(),
        undelivered.text()
    );
    let entry = f.engine.ledger().entry(&undelivered.run).unwrap();
    assert_eq!(entry.status, RunStatus::Succeeded);
}

#[tokio::test]
async fn cancellation_observed_after_a_callback_returns() {
    let f = Fixture::new();
    let start = f.start().await;
    let token = CancellationToken::new();
    let mut calls = 0;
    let error = f
        .engine
        .coordinator(&start, 3)
        .cancel_with(token.clone())
        .run_with(&mut calls, |calls, _, cancel| {
            Box::pin(async move {
                *calls += 1;
                cancel.cancel();
                Ok(Next::Continue(ask("after cancel")))
            })
        })
        .await
        .unwrap_err();
    assert!(
        matches!(error, CoordinateError::Cancelled { undelivered: None }),
        "{error}"
    );
    assert_eq!(calls, 1);
    assert_eq!(f.asked("after cancel"), 0, "no execution started");
    assert_eq!(f.engine.ledger().entries().len(), 1);

    // A callback that stops starts no execution: its stop stands.
    let stopped = f
        .engine
        .coordinator(&start, 3)
        .run(|_, cancel| {
            cancel.cancel();
            Box::pin(async { Ok(Next::Stop) })
        })
        .await
        .unwrap();
    assert_eq!(stopped, Outcome::Stopped);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancellation_during_an_execution_ends_it() {
    let f = Fixture::new();
    let start = f.start().await;
    let token = CancellationToken::new();
    let canceller = tokio::spawn({
        let (token, calls) = (token.clone(), f.pending_calls.clone());
        async move {
            while calls.load(Ordering::SeqCst) == 0 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            token.cancel();
        }
    });
    let coordinator = f.engine.coordinator(&start, 3).cancel_with(token);
    let sequence = coordinator.sequence().to_string();
    let error = within(coordinator.run(|_, _| {
        Box::pin(async {
            Ok(Next::Continue(
                Request::messages([Message::user("hang")]).profile("pending"),
            ))
        })
    }))
    .await
    .unwrap_err();
    canceller.await.unwrap();
    assert!(
        matches!(error, CoordinateError::Cancelled { undelivered: None }),
        "{error}"
    );
    let report = f.engine.ledger().sequence(&sequence);
    assert_eq!(report.failed.len(), 1);
    let entry = f.engine.ledger().entry(&report.failed[0]).unwrap();
    assert_eq!(entry.status, RunStatus::Cancelled);

    // A token the callback puts on its request cancels the execution too;
    // the coordinator's own token is untouched, so it is the engine's error.
    let own = CancellationToken::new();
    let canceller = tokio::spawn({
        let (own, calls) = (own.clone(), f.pending_calls.clone());
        async move {
            while calls.load(Ordering::SeqCst) < 2 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            own.cancel();
        }
    });
    let coordinator_token = CancellationToken::new();
    let coordinator = f
        .engine
        .coordinator(&start, 3)
        .cancel_with(coordinator_token.clone());
    let error = within(coordinator.run(move |_, _| {
        let own = own.clone();
        Box::pin(async move {
            Ok(Next::Continue(
                Request::messages([Message::user("hang")])
                    .profile("pending")
                    .cancel_with(own),
            ))
        })
    }))
    .await
    .unwrap_err();
    canceller.await.unwrap();
    assert!(
        matches!(
            error,
            CoordinateError::Execution(EngineError::Cancelled { .. })
        ),
        "{error}"
    );
    assert!(!coordinator_token.is_cancelled());
}

#[tokio::test]
async fn execution_error_identity() {
    let f = Fixture::new();
    let start = f.start().await;
    let mut calls = 0;
    let error = f
        .engine
        .coordinator(&start, 3)
        .run_with(&mut calls, |calls, _, _| {
            Box::pin(async move {
                *calls += 1;
                Ok(Next::Continue(ask("fail please")))
            })
        })
        .await
        .unwrap_err();
    let CoordinateError::Execution(EngineError::Generation { run, error: source }) = &error else {
        panic!("expected the engine's generation error, got {error}");
    };
    assert!(
        matches!(source, ProviderError::Server { status: 503, .. }),
        "{source}"
    );
    // The message holds the engine's error, so it is not also the source: a
    // chain printer says it once.
    assert!(std::error::Error::source(&error).is_none());
    assert_eq!(error.to_string().matches(&source.to_string()).count(), 1);
    assert_eq!(calls, 1, "no callback after the failure");
    assert_eq!(f.asked("fail please"), 1, "nothing replayed");
    assert_eq!(
        f.engine.ledger().entry(run).unwrap().status,
        RunStatus::Failed
    );
}

#[tokio::test]
async fn callback_error_downcast() {
    let f = Fixture::new();
    let start = f.start().await;
    let mut log: Vec<Seen> = Vec::new();
    let error = f
        .engine
        .coordinator(&start, 3)
        .run_with(&mut log, |log, turn, _| {
            Box::pin(async move {
                log.push(seen(&turn));
                match turn.response() {
                    None => Ok(Next::Continue(ask("one"))),
                    Some(_) => Err(Rejected {
                        turn: turn.turns_used(),
                    }
                    .into()),
                }
            })
        })
        .await
        .unwrap_err();
    let CoordinateError::Callback(source) = &error else {
        panic!("expected the callback's error, got {error}");
    };
    assert_eq!(
        source.downcast_ref::<Rejected>(),
        Some(&Rejected { turn: 1 })
    );
    assert_eq!(
        error.callback_error::<Rejected>(),
        Some(&Rejected { turn: 1 })
    );
    // The failed callback had the response: delivered once, not kept as
    // undelivered, not delivered again.
    assert_eq!(log.len(), 2);
    assert!(log[1].response.is_some());
    assert!(error.undelivered().is_none());
    assert_eq!(f.seen(), ["start", "one"]);

    // A failed model call of the callback's own is the callback's error,
    // not a coordinated execution's.
    let engine = f.engine.clone();
    let error = f
        .engine
        .coordinator(&start, 3)
        .run(move |turn, _| {
            let engine = engine.clone();
            Box::pin(async move {
                engine
                    .run(turn.associate(ask("fail please")))
                    .await
                    .map_err(CallbackError::from)?;
                Ok(Next::Stop)
            })
        })
        .await
        .unwrap_err();
    assert!(
        matches!(
            error.callback_error::<EngineError>(),
            Some(EngineError::Generation { .. })
        ),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capacity_one_with_a_callback_that_calls_the_model() {
    let f = Fixture::new();
    let start = f
        .engine
        .run(
            Request::messages([Message::user("start")])
                .profile("solo")
                .capture(),
        )
        .await
        .unwrap()
        .exchange
        .unwrap();
    let solo = |text: &str| Request::messages([Message::user(text)]).profile("solo");
    let engine = f.engine.clone();
    // (the callback's own run, the run of the response it served)
    let own_calls: Arc<Mutex<Vec<OwnCall>>> = Arc::default();
    let calls = own_calls.clone();
    let coordinator = f.engine.coordinator(&start, 2);
    let sequence = coordinator.sequence().to_string();
    let outcome = tokio::time::timeout(
        Duration::from_secs(20),
        coordinator.run(move |turn, _| {
            let (engine, calls) = (engine.clone(), calls.clone());
            Box::pin(async move {
                // Nothing holds the backend's one permit while we run.
                assert_eq!(engine.inspect_backend("solo").unwrap().available_permits, 1);
                let own = tokio::time::timeout(
                    Duration::from_secs(5),
                    engine.run(turn.associate(solo("assess"))),
                )
                .await
                .expect("the callback's own call is not blocked")?;
                calls
                    .lock()
                    .unwrap()
                    .push((own.run, turn.response().map(|r| r.run.clone())));
                Ok(if turn.turns_remaining() > 0 {
                    Next::Continue(solo("next"))
                } else {
                    Next::Stop
                })
            })
        }),
    )
    .await
    .expect("no deadlock")
    .unwrap();
    assert_eq!(outcome, Outcome::Stopped);
    let own_calls = own_calls.lock().unwrap().clone();
    assert_eq!(own_calls.len(), 3, "one own call per callback");
    // Each own call is related to the turn it served.
    for (own, served) in &own_calls {
        let relations = f.engine.ledger().entry(own).unwrap().relations;
        assert!(
            relations
                .iter()
                .any(|r| *r == Relation::Sequence(sequence.to_string()))
        );
        match served {
            Some(served) => {
                assert!(
                    relations
                        .iter()
                        .any(|r| { *r == Relation::AssociatedWith(served.clone()) })
                );
            }
            None => assert!(
                !relations
                    .iter()
                    .any(|r| matches!(r, Relation::AssociatedWith(_))),
                "the shared start is not claimed by one branch"
            ),
        }
    }
    let report = f.engine.ledger().sequence(&sequence);
    assert_eq!(report.runs.len(), 1 + 2 + 3, "start, turns, own calls");
    assert_eq!(
        f.engine.inspect_backend("solo").unwrap().available_permits,
        1
    );
}

#[tokio::test]
async fn repairs_and_retries_do_not_consume_turns() {
    let f = Fixture::new();
    let start = f.start().await;
    let schema = json!({"type": "object", "required": ["n"]});
    let mut log: Vec<(Seen, Option<RunDetail>)> = Vec::new();
    let outcome = f
        .engine
        .coordinator(&start, 2)
        .run_with(&mut log, |log, turn, _| {
            let schema = schema.clone();
            Box::pin(async move {
                let detail = turn.response().map(|r| {
                    let kinds = r
                        .events
                        .iter()
                        .filter_map(|e| match e.kind {
                            EventKind::Retry { .. } => Some("retry".to_string()),
                            EventKind::Repair { .. } => Some("repair".to_string()),
                            _ => None,
                        })
                        .collect();
                    (r.attempts, kinds, r.value.clone().unwrap())
                });
                log.push((seen(&turn), detail));
                Ok(Next::Continue(
                    ask("json please, retry").output_contract(schema),
                ))
            })
        })
        .await
        .unwrap();
    assert_eq!(
        outcome,
        Outcome::Exhausted,
        "two turns, then a refused third"
    );
    assert_eq!(log.len(), 3, "one callback per execution, none per repair");
    let budget: Vec<(u32, u32)> = log.iter().map(|(s, _)| (s.used, s.remaining)).collect();
    assert_eq!(budget, [(0, 2), (1, 1), (2, 0)]);
    for (i, (s, detail)) in log.iter().enumerate().skip(1) {
        let (attempts, kinds, value) = detail.clone().unwrap();
        assert_eq!(attempts, 2, "the run needed a repair");
        assert_eq!(kinds, ["retry", "repair"]);
        assert_eq!(value, json!({"n": 1}));
        // Only the final content entered the history.
        assert_eq!(s.exchange_len, start.thread().len() + 2 * i);
    }
    // Model calls: the start, then two per turn (first try and repair).
    assert_eq!(f.seen().len(), 1 + 2 * 2);
}

#[tokio::test]
async fn failed_execution_budget_rule() {
    let f = Fixture::new();
    let start = f.start().await;
    let coordinator = f.engine.coordinator(&start, 3);
    let sequence = coordinator.sequence().to_string();
    let mut log: Vec<Seen> = Vec::new();
    let error = coordinator
        .run_with(&mut log, |log, turn, _| {
            Box::pin(async move {
                log.push(seen(&turn));
                Ok(Next::Continue(ask(if turn.turns_used() == 0 {
                    "one"
                } else {
                    "fail please"
                })))
            })
        })
        .await
        .unwrap_err();
    let CoordinateError::Execution(EngineError::Generation { run: failed, .. }) = &error else {
        panic!("expected the execution's error, got {error}");
    };
    assert_eq!(log.len(), 2, "the failed turn's callback never comes");
    assert_eq!((log[1].used, log[1].remaining), (1, 2));
    // The failed execution is a used turn of the sequence, marked failed.
    let report = f.engine.ledger().sequence(&sequence);
    assert_eq!(report.runs.len(), 1 + 2, "the start and two used turns");
    assert_eq!(report.failed, vec![failed.clone()]);
    assert!(
        f.engine
            .ledger()
            .entry(failed)
            .unwrap()
            .relations
            .iter()
            .any(|r| *r == Relation::Sequence(sequence.to_string()))
    );

    // A request rejected while preparing never becomes a run.
    let coordinator = f.engine.coordinator(&start, 3);
    let sequence = coordinator.sequence().to_string();
    let runs_before = f.engine.ledger().entries().len();
    let error = coordinator
        .run(|_, _| Box::pin(async { Ok(Next::Continue(Request::prompt("no-such-prompt"))) }))
        .await
        .unwrap_err();
    assert!(
        matches!(
            error,
            CoordinateError::Execution(EngineError::PromptLoad { .. })
        ),
        "{error}"
    );
    assert_eq!(f.engine.ledger().entries().len(), runs_before);
    assert_eq!(
        f.engine.ledger().sequence(&sequence).runs,
        vec![start.run().clone()]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn independent_branches() {
    let f = Fixture::new();
    let start = f.start().await;
    let before = (start.head(), start.thread().len());

    // Each branch: (name, budget, what it asks). Its callback also makes one
    // call of its own on the first callback, related to its sequence.
    let branch = |name: &'static str, budget: u32, asks: &'static str, stop_after: bool| {
        let engine = f.engine.clone();
        let start = start.clone();
        tokio::spawn(async move {
            let coordinator = engine.coordinator(&start, budget);
            let sequence = coordinator.sequence().to_string();
            let mut histories: Vec<String> = Vec::new();
            let engine_in = engine.clone();
            let outcome = coordinator
                .run_with(&mut histories, move |histories, turn, _| {
                    let engine = engine_in.clone();
                    Box::pin(async move {
                        histories.push(
                            turn.exchange()
                                .thread()
                                .messages()
                                .iter()
                                .map(|m| m.joined_text())
                                .collect::<Vec<_>>()
                                .join(" | "),
                        );
                        if turn.response().is_none() {
                            engine
                                .run(turn.associate(ask(&format!("note {name}"))))
                                .await?;
                        } else if stop_after {
                            return Ok(Next::Stop);
                        }
                        Ok(Next::Continue(ask(asks)))
                    })
                })
                .await;
            (outcome, sequence, histories)
        })
    };
    let a = branch("a", 3, "branch a", true);
    let b = branch("b", 1, "branch b", false);
    let c = branch("c", 2, "fail please", false);
    let (a, b, c) = (a.await.unwrap(), b.await.unwrap(), c.await.unwrap());

    assert_eq!(a.0.unwrap(), Outcome::Stopped);
    assert_eq!(b.0.unwrap(), Outcome::Exhausted);
    assert!(matches!(
        c.0.unwrap_err(),
        CoordinateError::Execution(EngineError::Generation { .. })
    ));
    // Each keeps its own history.
    let a_last = a.2.last().unwrap();
    let b_last = b.2.last().unwrap();
    assert!(a_last.contains("branch a") && !a_last.contains("branch b"));
    assert!(b_last.contains("branch b") && !b_last.contains("branch a"));
    assert_eq!(
        (start.head(), start.thread().len()),
        before,
        "the start is unchanged"
    );
    assert_eq!(f.engine.ledger().branches_of(start.run()).len(), 3);

    // Each sequence report: the start once, its own turns and calls only.
    let ledger = f.engine.ledger();
    let reports: Vec<_> = [&a.1, &b.1, &c.1]
        .iter()
        .map(|sequence| ledger.sequence(sequence))
        .collect();
    let sizes: Vec<usize> = reports.iter().map(|r| r.runs.len()).collect();
    assert_eq!(sizes, [3, 3, 3], "start + own note + one turn each");
    for report in &reports {
        assert_eq!(report.runs.iter().filter(|r| *r == start.run()).count(), 1);
    }
    assert_eq!(reports[2].failed.len(), 1);
    for (i, report) in reports.iter().enumerate() {
        for (j, other) in reports.iter().enumerate() {
            if i != j {
                let shared: Vec<_> = report
                    .runs
                    .iter()
                    .filter(|run| other.runs.contains(run))
                    .collect();
                assert_eq!(shared, vec![start.run()], "only the start is shared");
            }
        }
    }
    // Together: the shared start counted once.
    let all: Vec<RunId> = reports.iter().flat_map(|r| r.runs.clone()).collect();
    let combined = ledger.total(all.iter());
    assert_eq!(combined.runs.len(), 1 + 3 * 2);
    let start_input = ledger
        .entry(start.run())
        .unwrap()
        .usage
        .input_tokens
        .unwrap();
    let summed: u64 = reports.iter().map(|r| r.input_tokens.value).sum();
    assert_eq!(combined.input_tokens.value, summed - 2 * start_input);
    assert_eq!(
        ledger
            .entry(start.run())
            .unwrap()
            .relations
            .iter()
            .filter(|r| matches!(r, Relation::SequenceStart(_)))
            .count(),
        3
    );
}

#[tokio::test]
async fn analysis_loop_example() {
    let report = analysis_loop::demo().await.unwrap();
    assert_eq!(report.outcome.unwrap(), Outcome::Stopped);
    assert_eq!(report.analysis.asked.len(), 2);
    assert_eq!(report.analysis.findings.len(), 3);
    assert!(report.analysis.findings[2].contains("2021"));
    assert_eq!(report.usage.runs.len(), 3, "the start and two turns");
}

#[tokio::test]
async fn repair_branch_example() {
    let report = repair_branch::demo().await.unwrap();
    assert_eq!(report.outcome.unwrap(), Outcome::Stopped);
    assert!(report.accepted && !report.withdrawn);
    assert!(report.candidate.contains("a + b"));
    assert_eq!(report.initial_attempts, 2, "the first run was repaired");
    assert_eq!(
        report.assessments, 1,
        "the initial assessment is not redone"
    );
    // The start, its earlier assessment, one turn and its assessment.
    assert_eq!(report.usage.runs.len(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn branches_example() {
    let report = branches::demo().await.unwrap();
    let outcomes: Vec<_> = report
        .branches
        .iter()
        .map(|b| (b.name, b.outcome.as_ref().ok().copied(), b.replies.len()))
        .collect();
    assert_eq!(
        outcomes,
        [
            ("coast", Some(Outcome::Stopped), 1),
            ("mountains", Some(Outcome::Exhausted), 2),
            ("city", None, 0),
        ]
    );
    assert!(matches!(
        report.branches[2].outcome,
        Err(CoordinateError::Execution(EngineError::Generation { .. }))
    ));
    for branch in &report.branches {
        assert_eq!(
            branch
                .usage
                .runs
                .iter()
                .filter(|r| **r == report.start)
                .count(),
            1
        );
    }
    // 1 start + coast 1 + mountains 2 turns and 2 summaries + city 1 failed.
    assert_eq!(report.combined.runs.len(), 7);
}

#[test]
fn examples_run_as_programs() {
    analysis_loop::main().unwrap();
    repair_branch::main().unwrap();
    branches::main().unwrap();
}
