//! The engine's acceptance tests: capture and continuation, fresh settings
//! per execution, structural repair, admission, typed errors, observation
//! and the ledger. All on scripted and in-test providers.

use serde_json::json;
use skein_core::{
    BoxStream, FinishReason, Message, ModelRequest, Provider, ProviderError, Role, StreamEvent,
    Thread, Usage,
};
use skein_engine::{
    BackendDef, BackendKind, Catalog, CredentialSource, Engine, EngineError, Event, EventKind,
    MessageTemplate, Profile, PromptDef, Request, Validation,
};
use skein_providers::{Echo, Scripted};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// An advisor that answers JSON when asked, with one malformed first try
/// when the request says "flaky".
const SCRIPT: &str = r#"
[[rules]]
name = "always-wrong"
any_contains = "hopeless"
reply = "no json here"

[[rules]]
name = "repaired"
any_contains = "did not match the schema"
reply = '{"answer": 42}'

[[rules]]
name = "flaky"
last_user_contains = "flaky"
reply = "forty-two"

[[rules]]
name = "json"
last_user_contains = "json"
reply = '{"answer": 7}'

[[rules]]
name = "summary"
last_user_contains = "summarise"
reply = '{"summary": "short"}'

[[rules]]
name = "echo"
reply = "scripted saw {history} messages; last: {last_user}"
"#;

fn scripted() -> Arc<dyn Provider> {
    Arc::new(Scripted::from_toml_str(SCRIPT).unwrap())
}

fn answer_schema() -> serde_json::Value {
    json!({"type": "object", "required": ["answer"], "properties": {"answer": {"type": "integer"}}})
}

fn catalog() -> Catalog {
    Catalog::new()
        .backend(BackendDef::new("script", BackendKind::Echo))
        .backend(BackendDef::new("other", BackendKind::Echo))
        .backend(BackendDef::new("echo", BackendKind::Echo).capacity(1))
        .backend(BackendDef::new(
            "cloud",
            BackendKind::Openai {
                base_url: Some("http://127.0.0.1:9".into()),
            },
        ))
        .profile(Profile::new("main", "script", "script-model"))
        .profile(Profile::new("alt", "other", "other-model"))
        .profile(Profile::new("echo", "echo", "echo"))
        .profile(
            Profile::new("cloud", "cloud", "gpt")
                .credential(CredentialSource::Env("SKEIN_TEST_UNSET_KEY".into())),
        )
        .prompt(
            PromptDef::new(
                "ask",
                vec![
                    MessageTemplate::new(Role::System, "You answer questions."),
                    MessageTemplate::new(Role::User, "{{ question }}"),
                ],
            )
            .variable("question")
            .default_profile("main")
            .session_id("session-{{ question | length }}"),
        )
        .prompt(
            PromptDef::new(
                "follow-up",
                vec![MessageTemplate::new(Role::User, "Now {{ task }}")],
            )
            .variable("task")
            .default_profile("alt"),
        )
        .prompt(
            PromptDef::new(
                "bad",
                vec![MessageTemplate::new(Role::User, "{{ undeclared }}")],
            )
            .default_profile("main"),
        )
}

fn engine() -> Engine {
    Engine::builder(catalog())
        .provider("script", scripted())
        .provider("other", scripted())
        .build()
        .unwrap()
}

fn texts(thread: &Thread) -> Vec<String> {
    thread
        .messages()
        .iter()
        .map(|m| format!("{}: {}", m.role, m.joined_text()))
        .collect()
}

#[tokio::test]
async fn a_follow_up_with_another_model_and_schema_leaves_the_exchange_byte_identical() {
    let engine = engine();
    let first = engine
        .run(
            Request::prompt("ask")
                .var("question", "give json")
                .output_contract(answer_schema())
                .capture(),
        )
        .await
        .unwrap();
    let exchange = first.exchange.clone().unwrap();
    let before = (
        exchange.thread().head_id(),
        texts(exchange.thread()),
        exchange.annotations().clone(),
    );
    assert_eq!(first.value.as_ref().unwrap()["answer"], 7);

    let summary_schema = json!({"type": "object", "required": ["summary"]});
    let second = engine
        .continue_from(
            &exchange,
            Request::prompt("follow-up")
                .var("task", "summarise")
                .output_contract(summary_schema),
        )
        .await
        .unwrap();
    assert_eq!(second.prepared.profile, "alt");
    assert_eq!(second.prepared.model, "other-model");
    assert_eq!(second.value.unwrap()["summary"], "short");
    assert_eq!(
        (
            exchange.thread().head_id(),
            texts(exchange.thread()),
            exchange.annotations().clone()
        ),
        before
    );
    // The follow-up's request is the exchange, then the follow-up prompt's message.
    let request = second.prepared.thread;
    assert_eq!(request.parent().head_id(), exchange.thread().head_id());
    assert_eq!(
        request.head().unwrap().message().joined_text(),
        "Now summarise"
    );
    assert!(
        second
            .relations
            .iter()
            .any(|r| *r == skein_core::Relation::ContinuationOf(first.run.clone()))
    );
}

#[tokio::test]
async fn a_repaired_run_captures_only_the_corrected_content_and_counts_both_attempts() {
    let engine = engine();
    let output = engine
        .run(
            Request::prompt("ask")
                .var("question", "flaky")
                .output_contract(answer_schema())
                .capture(),
        )
        .await
        .unwrap();
    assert_eq!(output.attempts, 2);
    let exchange = output.exchange.unwrap();
    assert_eq!(exchange.validation(), &Validation::Validated);
    assert_eq!(
        texts(exchange.thread()),
        [
            "system: You answer questions.",
            "user: flaky",
            "assistant: {\"answer\": 42}"
        ]
    );
    // Usage covers both attempts: the second request was longer than the first.
    let single = engine
        .run(Request::prompt("ask").var("question", "flaky"))
        .await
        .unwrap();
    assert!(output.usage.input_tokens.unwrap() > 2 * single.usage.input_tokens.unwrap() - 1);
    assert!(output.usage.output_tokens.unwrap() >= 2);
    let kinds: Vec<&str> = output
        .events
        .iter()
        .map(|e| match e.kind {
            EventKind::Admitted { .. } => "admitted",
            EventKind::AttemptStarted { .. } => "attempt",
            EventKind::Repair { .. } => "repair",
            EventKind::Completed { .. } => "completed",
            _ => "other",
        })
        .collect();
    assert_eq!(
        kinds,
        ["admitted", "attempt", "repair", "attempt", "completed"]
    );
}

#[tokio::test]
async fn continuing_after_the_prompt_and_artifacts_changed_or_vanished_keeps_the_history() {
    let dir = tempfile::tempdir().unwrap();
    let artifact = dir.path().join("policy.txt");
    std::fs::write(&artifact, "Policy v1: be kind.").unwrap();
    let prompt = |template: &str| {
        PromptDef::new(
            "with-file",
            vec![MessageTemplate::new(Role::System, template)],
        )
        .artifact("policy", &artifact)
        .default_profile("main")
    };
    let original = Engine::builder(catalog().prompt(prompt("{{ artifacts.policy }}")))
        .provider("script", scripted())
        .provider("other", scripted())
        .build()
        .unwrap();
    let first = original
        .run(
            Request::prompt("with-file")
                .message(Message::user("hello"))
                .capture(),
        )
        .await
        .unwrap();
    let exchange = first.exchange.unwrap();
    let history = texts(exchange.thread());
    assert_eq!(history[0], "system: Policy v1: be kind.");

    // The artifact changes, and an engine with an edited prompt appears.
    std::fs::write(&artifact, "Policy v2: be brief.").unwrap();
    let edited = Engine::builder(catalog().prompt(prompt("EDITED {{ artifacts.policy }}")))
        .provider("script", scripted())
        .provider("other", scripted())
        .build()
        .unwrap();
    let changed = edited
        .continue_from(&exchange, Request::prompt("follow-up").var("task", "go on"))
        .await
        .unwrap();
    // Then the artifact disappears altogether.
    std::fs::remove_file(&artifact).unwrap();
    let vanished = original
        .continue_from(&exchange, Request::prompt("follow-up").var("task", "go on"))
        .await
        .unwrap();
    for output in [&changed, &vanished] {
        let request = texts(&output.prepared.thread);
        assert_eq!(&request[..history.len()], &history[..]);
        assert_eq!(request[history.len()], "user: Now go on");
    }
    assert_eq!(changed.message, vanished.message);
    // Rendering the prompt itself again does fail now: the file is gone.
    let error = original
        .run(Request::prompt("with-file").message(Message::user("x")))
        .await
        .unwrap_err();
    assert!(
        matches!(error, EngineError::ArtifactLoad { ref name, .. } if name == "policy"),
        "{error}"
    );
}

#[tokio::test]
async fn a_follow_up_inherits_neither_session_id_nor_profile() {
    let engine = engine();
    let first = engine
        .run(Request::prompt("ask").var("question", "hello").capture())
        .await
        .unwrap();
    assert_eq!(first.prepared.session_id.as_deref(), Some("session-5"));
    let exchange = first.exchange.unwrap();
    let follow = engine
        .prepare_continuation_plan(&exchange, &Request::prompt("follow-up").var("task", "x"))
        .unwrap();
    assert_eq!(follow.session_id, None, "the session id is not inherited");
    assert_eq!(
        follow.profile, "alt",
        "the follow-up prompt's default profile applies"
    );
    let explicit = engine
        .prepare_continuation_plan(
            &exchange,
            &Request::prompt("follow-up")
                .var("task", "x")
                .session_id("s-1")
                .profile("main"),
        )
        .unwrap();
    assert_eq!(explicit.session_id.as_deref(), Some("s-1"));
    assert_eq!(explicit.profile, "main");
    // Inline messages with no prompt and no profile: the ordinary error.
    let error = engine
        .prepare_continuation_plan(&exchange, &Request::messages([Message::user("x")]))
        .unwrap_err();
    assert!(
        matches!(error, EngineError::ProfileRequired { .. }),
        "{error}"
    );
    assert!(
        error.to_string().contains("main"),
        "lists the known profiles: {error}"
    );
}

#[tokio::test]
async fn a_validation_exhausted_run_yields_an_exchange_that_can_be_continued() {
    let engine = engine();
    let error = engine
        .run(
            Request::prompt("ask")
                .var("question", "hopeless")
                .output_contract(answer_schema())
                .capture(),
        )
        .await
        .unwrap_err();
    let EngineError::Validation {
        attempts,
        candidate,
        errors,
        exchange,
        ..
    } = error
    else {
        panic!("expected a validation error, got {error}");
    };
    assert_eq!(attempts, 3, "one try and two repairs by default");
    assert_eq!(candidate, "no json here");
    assert!(errors[0].contains("not JSON"), "{errors:?}");
    let exchange = exchange.expect("capture was requested");
    assert!(matches!(
        exchange.validation(),
        Validation::NotValidated { .. }
    ));
    assert_eq!(exchange.text(), "no json here");
    let next = engine
        .continue_from(
            &exchange,
            Request::messages([Message::user("try again please")]).profile("main"),
        )
        .await
        .unwrap();
    assert_eq!(
        next.prepared.thread.head().unwrap().message().joined_text(),
        "try again please"
    );
    assert_eq!(
        next.prepared.thread.parent().head_id(),
        Some(exchange.head())
    );
    assert_eq!(next.prepared.thread.len(), exchange.thread().len() + 1);
}

#[tokio::test]
async fn two_branches_keep_their_own_histories_and_share_the_prefix_in_the_store() {
    let engine = engine();
    let first = engine
        .run(Request::prompt("ask").var("question", "start").capture())
        .await
        .unwrap();
    let exchange = first.exchange.unwrap();
    let a = engine
        .continue_from(
            &exchange,
            Request::messages([Message::user("branch a")])
                .profile("main")
                .capture(),
        )
        .await
        .unwrap();
    let b = engine
        .continue_from(
            &exchange,
            Request::messages([Message::user("branch b")])
                .profile("main")
                .capture(),
        )
        .await
        .unwrap();
    let (a, b) = (a.exchange.unwrap(), b.exchange.unwrap());
    assert!(a.text().contains("branch a") && b.text().contains("branch b"));
    assert_ne!(a.head(), b.head());
    assert_eq!(a.request().parent().head_id(), Some(exchange.head()));
    assert_eq!(b.request().parent().head_id(), Some(exchange.head()));
    assert_eq!(engine.ledger().branches_of(&first.run).len(), 2);

    // The branches share their prefix node for node: a store holds 5 + 2.
    let a_nodes: std::collections::HashSet<_> = a
        .thread()
        .nodes()
        .into_iter()
        .map(|node| node.id())
        .collect();
    assert_eq!(a_nodes.len(), 5);
    let b_only = b
        .thread()
        .nodes()
        .into_iter()
        .filter(|node| !a_nodes.contains(&node.id()))
        .count();
    assert_eq!(b_only, 2, "the shared prefix is stored once");
}

/// Holds its reply until told to finish, to keep a permit busy.
#[derive(Default)]
struct Gate {
    release: tokio::sync::Notify,
    started: AtomicUsize,
}

struct GateProvider(Arc<Gate>);

impl Provider for GateProvider {
    fn name(&self) -> &str {
        "gate"
    }

    fn stream(&self, _: ModelRequest) -> BoxStream<'static, Result<StreamEvent, ProviderError>> {
        self.0.started.fetch_add(1, Ordering::SeqCst);
        let gate = self.0.clone();
        Box::pin(futures_stream(async move {
            gate.release.notified().await;
            vec![
                Ok(StreamEvent::Text("done".into())),
                Ok(StreamEvent::Done(FinishReason::Stop)),
            ]
        }))
    }
}

/// A stream that awaits `future` for its events, then yields them.
fn futures_stream(
    future: impl std::future::Future<Output = Vec<Result<StreamEvent, ProviderError>>> + Send + 'static,
) -> impl futures_core::Stream<Item = Result<StreamEvent, ProviderError>> + Send {
    struct Pending<F> {
        future: Option<std::pin::Pin<Box<F>>>,
        ready: std::collections::VecDeque<Result<StreamEvent, ProviderError>>,
    }
    impl<F: std::future::Future<Output = Vec<Result<StreamEvent, ProviderError>>>>
        futures_core::Stream for Pending<F>
    {
        type Item = Result<StreamEvent, ProviderError>;
        fn poll_next(
            mut self: std::pin::Pin<&mut Self>,
            cx: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Option<Self::Item>> {
            if let Some(future) = self.future.as_mut() {
                match future.as_mut().poll(cx) {
                    std::task::Poll::Pending => return std::task::Poll::Pending,
                    std::task::Poll::Ready(events) => {
                        self.future = None;
                        self.ready.extend(events);
                    }
                }
            }
            std::task::Poll::Ready(self.ready.pop_front())
        }
    }
    Pending {
        future: Some(Box::pin(future)),
        ready: Default::default(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_capacity_one_a_caller_can_run_again_right_after_a_run_returns() {
    let engine = Engine::builder(catalog())
        .provider("echo", Arc::new(Echo))
        .build()
        .unwrap();
    let request = || Request::messages([Message::user("hi")]).profile("echo");
    for _ in 0..3 {
        let first = engine.run(request()).await.unwrap();
        // Application work between runs, using the same backend at capacity one.
        let second = tokio::time::timeout(
            Duration::from_secs(5),
            engine.run(request().associated_with(&first.run)),
        )
        .await
        .expect("no deadlock")
        .unwrap();
        assert_ne!(first.run, second.run);
    }
    assert_eq!(engine.inspect_backend("echo").unwrap().available_permits, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_backend_makes_callers_wait_fail_fast_or_cancel() {
    let gate = Arc::new(Gate::default());
    let engine = Engine::builder(catalog())
        .provider("echo", Arc::new(GateProvider(gate.clone())))
        .build()
        .unwrap();
    let request = || Request::messages([Message::user("hi")]).profile("echo");
    let holder = tokio::spawn({
        let engine = engine.clone();
        async move { engine.run(request()).await }
    });
    while gate.started.load(Ordering::SeqCst) == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let busy = engine.run(request().fail_when_busy()).await.unwrap_err();
    assert!(
        matches!(busy, EngineError::Capacity { capacity: 1, .. }),
        "{busy}"
    );
    assert!(busy.to_string().contains("at capacity"));

    let token = skein_engine::CancellationToken::new();
    let waiting = tokio::spawn({
        let engine = engine.clone();
        let token = token.clone();
        async move { engine.run(request().cancel_with(token)).await }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    token.cancel();
    let cancelled = waiting.await.unwrap().unwrap_err();
    assert!(matches!(cancelled, EngineError::Cancelled), "{cancelled}");

    gate.release.notify_one();
    holder.await.unwrap().unwrap();
    assert_eq!(engine.inspect_backend("echo").unwrap().available_permits, 1);
}

#[tokio::test]
async fn setup_failures_are_typed_and_say_what_to_do() {
    let engine = engine();
    let unset = engine
        .run(Request::messages([Message::user("x")]).profile("cloud"))
        .await
        .unwrap_err();
    assert!(
        matches!(unset, EngineError::CredentialVariableUnset { ref variable, .. } if variable == "SKEIN_TEST_UNSET_KEY")
    );
    assert!(
        unset.to_string().contains("export SKEIN_TEST_UNSET_KEY="),
        "{unset}"
    );

    let unknown = engine
        .run(Request::messages([Message::user("x")]).profile("nope"))
        .await
        .unwrap_err();
    assert!(
        matches!(unknown, EngineError::ProfileLoad { .. }),
        "{unknown}"
    );
    assert!(
        unknown
            .to_string()
            .contains("known: alt, cloud, echo, main"),
        "{unknown}"
    );

    let undeclared = engine.run(Request::prompt("bad")).await.unwrap_err();
    assert!(
        matches!(undeclared, EngineError::Render { .. }),
        "{undeclared}"
    );
    assert!(
        undeclared.to_string().contains("does not declare"),
        "{undeclared}"
    );

    let schema = engine
        .run(
            Request::prompt("ask")
                .var("question", "x")
                .output_contract(json!({"type": 12})),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(schema, EngineError::InvalidContract(_)),
        "{schema}"
    );

    let unknown_var = engine
        .prepare(
            &Request::prompt("ask")
                .var("question", "x")
                .var("colour", "red"),
        )
        .unwrap_err();
    assert!(
        unknown_var
            .to_string()
            .contains("declares no variable `colour`"),
        "{unknown_var}"
    );
    let missing_var = engine.prepare(&Request::prompt("ask")).unwrap_err();
    assert!(
        missing_var
            .to_string()
            .contains("needs the variable `question`"),
        "{missing_var}"
    );
    let unknown_prompt = engine.prepare(&Request::prompt("nope")).unwrap_err();
    assert!(
        matches!(unknown_prompt, EngineError::PromptLoad { .. }),
        "{unknown_prompt}"
    );
    let empty = engine.prepare(&Request::default()).unwrap_err();
    assert!(matches!(empty, EngineError::InvalidRequest(_)), "{empty}");
    let required =
        Engine::new(catalog().profile(
            Profile::new("needs-key", "cloud", "gpt").credential(CredentialSource::Explicit),
        ))
        .unwrap()
        .run(Request::messages([Message::user("x")]).profile("needs-key"))
        .await
        .unwrap_err();
    assert!(
        matches!(required, EngineError::CredentialRequired { .. }),
        "{required}"
    );
}

#[tokio::test]
async fn prepare_is_deterministic_and_generates_nothing() {
    let engine = engine();
    let request = Request::prompt("ask").var("question", "what?");
    let a = engine.prepare(&request).unwrap();
    let b = engine.prepare(&request).unwrap();
    assert_eq!(
        serde_json::to_value(&a).unwrap(),
        serde_json::to_value(&b).unwrap()
    );
    assert_eq!(a.thread, b.thread);
    assert_eq!(
        (a.profile.as_str(), a.backend.as_str(), a.model.as_str()),
        ("main", "script", "script-model")
    );
    assert!(engine.ledger().entries().is_empty(), "nothing ran");
    let execution = engine.prepare_execution(request).unwrap();
    assert_eq!(execution.prepared().thread, a.thread);
    let output = execution.run().await.unwrap();
    // `execution` is consumed: running it twice does not compile.
    assert_eq!(output.prepared.thread, a.thread);
}

/// Reports no token counts.
struct Uncounted;

impl Provider for Uncounted {
    fn name(&self) -> &str {
        "uncounted"
    }
    fn stream(&self, _: ModelRequest) -> BoxStream<'static, Result<StreamEvent, ProviderError>> {
        Box::pin(futures_stream(async {
            vec![
                Ok(StreamEvent::Text("no counts".into())),
                Ok(StreamEvent::Done(FinishReason::Stop)),
            ]
        }))
    }
}

/// Always fails.
struct Broken;

impl Provider for Broken {
    fn name(&self) -> &str {
        "broken"
    }
    fn stream(&self, _: ModelRequest) -> BoxStream<'static, Result<StreamEvent, ProviderError>> {
        Box::pin(futures_stream(async {
            vec![Err(ProviderError::Server {
                status: 503,
                message: "down".into(),
            })]
        }))
    }
}

#[tokio::test]
async fn the_ledger_counts_shared_work_once_and_marks_what_is_incomplete() {
    let catalog = catalog()
        .backend(BackendDef::new("uncounted", BackendKind::Echo))
        .backend(BackendDef::new("broken", BackendKind::Echo))
        .profile(Profile::new("uncounted", "uncounted", "u"))
        .profile(Profile::new("broken", "broken", "b"));
    let engine = Engine::builder(catalog)
        .provider("script", scripted())
        .provider("other", scripted())
        .provider("uncounted", Arc::new(Uncounted))
        .provider("broken", Arc::new(Broken))
        .build()
        .unwrap();
    let first = engine
        .run(Request::prompt("ask").var("question", "start").capture())
        .await
        .unwrap();
    let exchange = first.exchange.unwrap();
    let ok = engine
        .continue_from(
            &exchange,
            Request::messages([Message::user("one")]).profile("main"),
        )
        .await
        .unwrap();
    let uncounted = engine
        .continue_from(
            &exchange,
            Request::messages([Message::user("two")]).profile("uncounted"),
        )
        .await
        .unwrap();
    let failed = engine
        .continue_from(
            &exchange,
            Request::messages([Message::user("three")]).profile("broken"),
        )
        .await
        .unwrap_err();
    let failed_run = match failed {
        EngineError::Generation { run, .. } => run,
        other => panic!("expected a generation failure, got {other}"),
    };

    let family = engine.ledger().family(&first.run);
    assert_eq!(
        family.runs.len(),
        4,
        "the initial run once, plus three branches"
    );
    assert_eq!(family.failed, vec![failed_run.clone()]);
    let expected_input = first.usage.input_tokens.unwrap() + ok.usage.input_tokens.unwrap();
    assert_eq!(family.input_tokens.value, expected_input);
    assert!(!family.is_complete());
    assert!(family.input_tokens.missing_from.contains(&uncounted.run));
    assert!(family.input_tokens.missing_from.contains(&failed_run));
    assert!(!family.input_tokens.missing_from.contains(&first.run));

    // Naming the shared run twice still counts it once.
    let explicit = engine.ledger().total([&first.run, &ok.run, &first.run]);
    assert_eq!(explicit.runs.len(), 2);
    assert_eq!(explicit.input_tokens.value, expected_input);
    assert!(explicit.is_complete());
    assert_eq!(uncounted.usage, Usage::default());
}

#[tokio::test]
async fn observers_compose_and_each_sees_every_event_once_in_order() {
    let seen_a: Arc<Mutex<Vec<Event>>> = Arc::default();
    let seen_b: Arc<Mutex<Vec<Event>>> = Arc::default();
    let a = seen_a.clone();
    let engine = Engine::builder(catalog())
        .provider("script", scripted())
        .provider("other", scripted())
        .observe(Arc::new(move |event: &Event| {
            a.lock().unwrap().push(event.clone())
        }))
        .build()
        .unwrap();
    let b = seen_b.clone();
    let (live, mut feed) = tokio::sync::mpsc::unbounded_channel();
    let output = engine
        .run(
            Request::prompt("ask")
                .var("question", "flaky")
                .output_contract(answer_schema())
                .observe(Arc::new(move |event: &Event| {
                    b.lock().unwrap().push(event.clone())
                }))
                .event_channel(live),
        )
        .await
        .unwrap();
    let mut live_events = Vec::new();
    while let Ok(event) = feed.try_recv() {
        live_events.push(event);
    }
    for seen in [
        seen_a.lock().unwrap().clone(),
        seen_b.lock().unwrap().clone(),
        live_events,
    ] {
        assert_eq!(seen, output.events);
    }
    let seqs: Vec<u32> = output.events.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (0..output.events.len() as u32).collect::<Vec<_>>());
    assert!(output.events.iter().all(|e| e.run == output.run));
    // Metadata only: no event carries the reply text (the run id is random
    // hex and may contain "42" itself, so it is left out of the search).
    let json = serde_json::to_string(&output.events)
        .unwrap()
        .replace(output.run.as_str(), "");
    assert!(!json.contains("42"), "{json}");
}
