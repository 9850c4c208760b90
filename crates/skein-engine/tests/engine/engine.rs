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
use skein_testkit::Fixed;
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
                "answer-follow-up",
                vec![MessageTemplate::new(Role::User, "Now {{ task }}")],
            )
            .variable("task")
            .default_profile("main")
            .output_contract(answer_schema()),
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

/// Seed 002, decision 2: an explicit output contract replaces the follow-up
/// prompt's own contract entirely (it is not merged with it), and without
/// one the follow-up prompt's contract applies, not the first run's.
#[tokio::test]
async fn an_explicit_contract_replaces_the_follow_up_prompts_own() {
    let engine = engine();
    let first = engine
        .run(Request::prompt("ask").var("question", "hello").capture())
        .await
        .unwrap();
    let exchange = first.exchange.unwrap();
    // The prompt's own contract (an integer `answer`) holds: the summary
    // reply fails it and is repaired into an answer.
    let own = engine
        .continue_from(
            &exchange,
            Request::prompt("answer-follow-up").var("task", "summarise"),
        )
        .await
        .unwrap();
    assert_eq!(own.attempts, 2, "the prompt's contract forced a repair");
    assert_eq!(own.value.unwrap(), json!({"answer": 42}));
    // An explicit contract replaces it: the same reply is valid at once,
    // though it has no `answer`.
    let summary_schema = json!({"type": "object", "required": ["summary"]});
    let replaced = engine
        .continue_from(
            &exchange,
            Request::prompt("answer-follow-up")
                .var("task", "summarise")
                .output_contract(summary_schema),
        )
        .await
        .unwrap();
    assert_eq!(replaced.attempts, 1);
    assert_eq!(replaced.value.unwrap(), json!({"summary": "short"}));
}

/// Seed 002, decision 2: a continuation resolves its credential by the
/// ordinary rules; the direct credential the first run was given is not
/// kept with the exchange.
#[tokio::test]
async fn a_continuation_does_not_reuse_the_first_runs_direct_credential() {
    let catalog = catalog()
        .backend(BackendDef::new("keyed", BackendKind::Echo))
        .profile(
            Profile::new("keyed", "keyed", "keyed-model").credential(CredentialSource::Explicit),
        );
    let engine = Engine::builder(catalog)
        .provider("script", scripted())
        .provider("keyed", scripted())
        .build()
        .unwrap();
    let first = engine
        .run(
            Request::messages([Message::user("hello")])
                .profile("keyed")
                .credential(skein_providers::Secret::new("sk-first"))
                .capture(),
        )
        .await
        .unwrap();
    let exchange = first.exchange.unwrap();
    let without = engine
        .continue_from(
            &exchange,
            Request::messages([Message::user("again")]).profile("keyed"),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(without, EngineError::CredentialRequired { .. }),
        "{without}"
    );
    let with_its_own = engine
        .continue_from(
            &exchange,
            Request::messages([Message::user("again")])
                .profile("keyed")
                .credential(skein_providers::Secret::new("sk-second")),
        )
        .await
        .unwrap();
    assert_eq!(
        with_its_own.prepared.thread.parent().head_id(),
        exchange.thread().head_id()
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
    future: impl Future<Output = Vec<Result<StreamEvent, ProviderError>>> + Send + 'static,
) -> impl futures_core::Stream<Item = Result<StreamEvent, ProviderError>> + Send {
    struct Pending<F> {
        future: Option<std::pin::Pin<Box<F>>>,
        ready: std::collections::VecDeque<Result<StreamEvent, ProviderError>>,
    }
    impl<F: Future<Output = Vec<Result<StreamEvent, ProviderError>>>> futures_core::Stream
        for Pending<F>
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
    assert!(
        matches!(cancelled, EngineError::Cancelled { run: None, .. }),
        "{cancelled}"
    );

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
        // Reports no token counts.
        .provider("uncounted", Arc::new(Fixed::reply("no counts")))
        .provider(
            "broken",
            Arc::new(Fixed::failing(ProviderError::Server {
                status: 503,
                message: "down".into(),
            })),
        )
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
async fn the_ledger_keeps_its_capacity_and_names_forgotten_runs_as_missing() {
    let engine = Engine::builder(catalog())
        .provider("script", scripted())
        .provider("other", scripted())
        .ledger_capacity(2)
        .build()
        .unwrap();
    assert_eq!(engine.ledger().capacity(), 2);
    let mut runs = Vec::new();
    for question in ["one", "two", "three", "four"] {
        let output = engine
            .run(Request::prompt("ask").var("question", question))
            .await
            .unwrap();
        runs.push(output.run);
    }
    // Only the two most recent runs are held, however many ran.
    let held: Vec<_> = engine
        .ledger()
        .entries()
        .into_iter()
        .map(|entry| entry.run)
        .collect();
    let mut newest = runs[2..].to_vec();
    newest.sort();
    assert_eq!(held, newest);
    assert!(engine.ledger().entry(&runs[0]).is_none());
    assert!(
        !engine
            .ledger()
            .relate(&runs[0], skein_core::Relation::Session("late".into()))
    );
    // A total naming a forgotten run is incomplete by that run, never a
    // silent zero for it.
    let total = engine.ledger().total([&runs[0], &runs[3]]);
    assert_eq!(total.runs.len(), 2);
    assert!(!total.is_complete());
    assert_eq!(total.incomplete_runs(), vec![runs[0].clone()]);
    assert_eq!(
        total.input_tokens.value,
        engine
            .ledger()
            .entry(&runs[3])
            .unwrap()
            .usage
            .input_tokens
            .unwrap()
    );
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
            a.lock().unwrap().push(event.clone());
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
                    b.lock().unwrap().push(event.clone());
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
    // Metadata only: no event carries either reply's text. (Searching for a
    // bare "42" is not enough: run ids and wait times are random digits.)
    let json = serde_json::to_string(&output.events).unwrap();
    for reply in ["forty-two", r#"{"answer": 42}"#] {
        let escaped = serde_json::to_string(reply).unwrap();
        let escaped = escaped.trim_matches('"');
        assert!(!json.contains(reply) && !json.contains(escaped), "{json}");
    }
}

#[tokio::test]
async fn capture_is_opt_in() {
    let engine = engine();
    let request = || Request::prompt("ask").var("question", "what?");
    let plain = engine.run(request()).await.unwrap();
    assert!(plain.exchange.is_none(), "no exchange unless asked for");
    // The run happened all the same: its reply and its ledger entry.
    assert!(!plain.text().is_empty());
    assert!(engine.ledger().entry(&plain.run).is_some());
    let captured = engine.run(request().capture()).await.unwrap();
    let exchange = captured.exchange.expect("asked for");
    assert_eq!(exchange.reply(), &captured.message);
    assert_eq!(exchange.request(), captured.prepared.thread);
}

#[tokio::test]
async fn exchange_details_are_its_metadata_without_content() {
    let engine = engine();
    let first = engine
        .run(
            Request::prompt("ask")
                .var("question", "json please")
                .output_contract(answer_schema())
                .capture(),
        )
        .await
        .unwrap();
    let exchange = first.exchange.clone().unwrap();
    let details = exchange.details();
    assert_eq!(details.run, first.run);
    assert_eq!(details.head, exchange.head());
    assert_eq!(details.messages, 3, "system, user, reply");
    assert_eq!(
        details.prompt,
        Some(skein_engine::PromptRef {
            id: "ask".into(),
            version: 1
        })
    );
    assert_eq!(details.continuation_of, None);
    assert_eq!(details.validation, Validation::Validated);
    let json = serde_json::to_string(&details).unwrap();
    assert!(
        !json.contains("json please") && !json.contains("answer"),
        "{json}"
    );
    // The run's record keeps what the prompt rendered, variables
    // included (a replay renders another version from it); a request that
    // renders no prompt records none.
    let rendered = skein_engine::RenderedPrompt::of(&first.record(None).relations)
        .expect("the prompt's record");
    let request: Vec<_> = exchange.request().nodes().iter().map(|n| n.id()).collect();
    assert_eq!((rendered.id.as_str(), rendered.version), ("ask", 1));
    assert_eq!(rendered.variables["question"], "json please");
    assert_eq!(rendered.messages, request, "system and user, both rendered");

    let next = engine
        .continue_from(
            &exchange,
            Request::messages([Message::user("and then?")])
                .profile("main")
                .capture(),
        )
        .await
        .unwrap();
    assert_eq!(
        skein_engine::RenderedPrompt::of(&next.record(None).relations),
        None
    );
    let details = next.exchange.unwrap().details();
    assert_eq!(details.continuation_of, Some(first.run));
    assert_eq!(details.prompt, None);
    assert_eq!(details.messages, 5);
    assert_eq!(details.validation, Validation::NotApplicable);
}

#[tokio::test]
async fn inspect_profile_returns_the_profile_or_names_the_known_ones() {
    let catalog = catalog().profile(
        Profile::new("tuned", "script", "script-model")
            .options(skein_core::provider::GenerationOptions {
                temperature: Some(0.5),
                ..Default::default()
            })
            .repair_attempts(0),
    );
    let engine = Engine::builder(catalog)
        .provider("script", scripted())
        .build()
        .unwrap();
    let profile = engine.inspect_profile("tuned").unwrap();
    assert_eq!(
        (profile.backend.as_str(), profile.model.as_str()),
        ("script", "script-model")
    );
    assert_eq!(profile.options.temperature, Some(0.5));
    assert_eq!(profile.repair_attempts, 0);
    assert_eq!(engine.inspect_profile("main").unwrap().repair_attempts, 2);
    let error = engine.inspect_profile("nope").unwrap_err();
    assert!(matches!(error, EngineError::ProfileLoad { .. }), "{error}");
    let message = error.to_string();
    assert!(
        message.contains("nope") && message.contains("tuned") && message.contains("main"),
        "{message}"
    );
}

#[tokio::test]
async fn a_request_may_add_nothing_to_a_history_but_needs_something_to_send() {
    let engine = engine();
    let first = engine
        .run(Request::prompt("ask").var("question", "start").capture())
        .await
        .unwrap();
    let exchange = first.exchange.unwrap();
    // Nothing new: the model goes on from the history as it stands.
    let on = engine
        .run(
            Request::default()
                .history(exchange.thread().clone(), Default::default())
                .profile("main")
                .capture(),
        )
        .await
        .unwrap();
    assert_eq!(on.prepared.thread.head_id(), Some(exchange.head()));
    // Nothing at all is refused, before any run.
    let error = engine
        .run(Request::default().profile("main"))
        .await
        .unwrap_err();
    assert!(matches!(error, EngineError::InvalidRequest(_)), "{error}");
    let error = engine
        .run(
            Request::default()
                .history(Thread::new(), Default::default())
                .profile("main"),
        )
        .await
        .unwrap_err();
    assert!(error.to_string().contains("history to continue"), "{error}");
    // An annotation on a part the message does not have is refused.
    let error = engine
        .run(
            Request::default()
                .annotated_message(
                    Message::user("one part"),
                    vec![(1, skein_core::Annotation::Source("s".into()))],
                )
                .profile("main"),
        )
        .await
        .unwrap_err();
    assert!(matches!(error, EngineError::InvalidRequest(_)), "{error}");
    assert!(error.to_string().contains("part 1"), "{error}");
    assert_eq!(
        engine.ledger().entries().len(),
        2,
        "the refused ones never ran"
    );
}

/// Answers "A" with a malformed first try held until released, and
/// anything else at once; a repair request gets valid JSON. Keeps the order
/// in which calls reached it.
#[derive(Default)]
struct HeldRepairs {
    release: tokio::sync::Notify,
    calls: Mutex<Vec<String>>,
}

struct HeldRepairsProvider(Arc<HeldRepairs>);

impl Provider for HeldRepairsProvider {
    fn name(&self) -> &str {
        "held-repairs"
    }

    fn stream(
        &self,
        request: ModelRequest,
    ) -> BoxStream<'static, Result<StreamEvent, ProviderError>> {
        let messages = request.thread.messages();
        let first_user = messages
            .iter()
            .find(|m| m.role == Role::User)
            .map(|m| m.joined_text())
            .unwrap_or_default();
        let repair = messages.len() > 1;
        self.0.calls.lock().unwrap().push(format!(
            "{first_user}:{}",
            if repair { "repair" } else { "initial" }
        ));
        let this = self.0.clone();
        Box::pin(futures_stream(async move {
            let text = if repair {
                r#"{"answer": 1}"#
            } else if first_user == "A" {
                this.release.notified().await;
                "not json"
            } else {
                r#"{"answer": 2}"#
            };
            vec![
                Ok(StreamEvent::Text(text.into())),
                Ok(StreamEvent::Done(FinishReason::Stop)),
            ]
        }))
    }
}

/// A run holds its permit through validation and repair: at capacity one,
/// a run queued behind it reaches the provider only after the repair.
/// (Were the permit dropped between attempts, the queued run, first in
/// line on the fair semaphore, would be answered before the repair.)
#[tokio::test(flavor = "current_thread")]
async fn admission_is_held_through_validation_and_repair() {
    let held = Arc::new(HeldRepairs::default());
    let engine = Engine::builder(catalog())
        .provider("echo", Arc::new(HeldRepairsProvider(held.clone())))
        .build()
        .unwrap();
    let request = |text: &str| {
        Request::messages([Message::user(text)])
            .profile("echo")
            .output_contract(answer_schema())
    };
    let a = tokio::spawn({
        let engine = engine.clone();
        let request = request("A");
        async move { engine.run(request).await }
    });
    while held.calls.lock().unwrap().is_empty() {
        tokio::task::yield_now().await;
    }
    let b = tokio::spawn({
        let engine = engine.clone();
        let request = request("B");
        async move { engine.run(request).await }
    });
    // Let B run until it waits for the permit A holds (on this one
    // thread, a yield runs every other ready task first).
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    assert_eq!(engine.inspect_backend("echo").unwrap().available_permits, 0);
    assert_eq!(held.calls.lock().unwrap().len(), 1, "B waits");
    held.release.notify_one();
    let a = a.await.unwrap().unwrap();
    let b = b.await.unwrap().unwrap();
    assert_eq!(a.attempts, 2);
    assert_eq!(a.value, Some(json!({"answer": 1})));
    assert_eq!(b.value, Some(json!({"answer": 2})));
    assert_eq!(
        *held.calls.lock().unwrap(),
        ["A:initial", "A:repair", "B:initial"]
    );
    assert_eq!(engine.inspect_backend("echo").unwrap().available_permits, 1);
}

#[tokio::test]
async fn a_family_takes_in_associated_runs_and_what_continues_them() {
    let engine = Engine::builder(catalog())
        .provider("echo", Arc::new(Echo))
        .build()
        .unwrap();
    let ask = |text: &str| {
        Request::messages([Message::user(text)])
            .profile("echo")
            .capture()
    };
    let root = engine.run(ask("root")).await.unwrap();
    let branch = engine
        .continue_from(root.exchange.as_ref().unwrap(), ask("branch"))
        .await
        .unwrap();
    // Work done on behalf of the branch, in a history of its own, and a
    // continuation of that work.
    let helper = engine
        .run(ask("helper").associated_with(&branch.run))
        .await
        .unwrap();
    let helper_next = engine
        .continue_from(helper.exchange.as_ref().unwrap(), ask("helper next"))
        .await
        .unwrap();
    // Associated after the fact.
    let late = engine.run(ask("late")).await.unwrap();
    assert!(engine.ledger().relate(
        &late.run,
        skein_core::Relation::AssociatedWith(root.run.clone())
    ));
    // Unrelated: its own root, and work associated with it.
    let other = engine.run(ask("other")).await.unwrap();
    let other_helper = engine
        .run(ask("other helper").associated_with(&other.run))
        .await
        .unwrap();

    let family = engine.ledger().family(&root.run);
    let mut expected = vec![
        root.run.clone(),
        branch.run.clone(),
        helper.run.clone(),
        helper_next.run.clone(),
        late.run.clone(),
    ];
    expected.sort();
    assert_eq!(family.runs, expected);
    assert!(family.failed.is_empty());
    let sum: u64 = [&root, &branch, &helper, &helper_next, &late]
        .iter()
        .map(|run| run.usage.input_tokens.unwrap())
        .sum();
    assert_eq!(family.input_tokens.value, sum);
    assert!(family.is_complete());
    // From the branch: itself and its associated work, not its root.
    let from_branch = engine.ledger().family(&branch.run);
    assert!(!from_branch.runs.contains(&root.run));
    assert_eq!(from_branch.runs.len(), 3);
    let others = engine.ledger().family(&other.run);
    assert_eq!(others.runs.len(), 2);
    assert!(others.runs.contains(&other_helper.run));
}

/// An attachment the model cannot take is refused before any call and
/// leaves no run, whether it is new or earlier in the history; a model
/// that takes any attachment gets it.
#[tokio::test]
async fn an_attachment_the_model_cannot_take_is_refused_before_any_call() {
    // Reads text only, and counts the calls that reach it.
    let text_only =
        Arc::new(Fixed::reply("read").with_attachments(skein_core::AttachmentSupport::None));
    let engine = Engine::builder(catalog())
        .provider("script", text_only.clone())
        .build()
        .unwrap();
    let picture = Message::new(
        Role::User,
        vec![
            skein_core::Part::text("what is this?"),
            skein_core::Part::Attachment(skein_core::Attachment {
                media_type: "image/png".into(),
                data: vec![0x89, b'P', b'N', b'G'],
            }),
        ],
    );
    let error = engine
        .run(Request::default().message(picture.clone()).profile("main"))
        .await
        .unwrap_err();
    match &error {
        EngineError::AttachmentRefused {
            model,
            media_type,
            position,
            ..
        } => assert_eq!(
            (model.as_str(), media_type.as_str(), *position),
            ("main", "image/png", 0)
        ),
        other => panic!("{other}"),
    }
    assert!(error.to_string().contains("it takes text only"), "{error}");
    let history = Thread::from_messages([picture, Message::assistant("a picture")]);
    let error = engine
        .run(
            Request::default()
                .history(history.clone(), Default::default())
                .message(Message::user("and now?"))
                .profile("main"),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(error, EngineError::AttachmentRefused { position: 0, .. }),
        "{error}"
    );
    assert_eq!(text_only.calls(), 0, "no call reached the model");
    assert!(engine.ledger().entries().is_empty(), "no run was made");
    // Text alone goes through.
    engine
        .run(
            Request::default()
                .message(Message::user("hi"))
                .profile("main"),
        )
        .await
        .unwrap();
    assert_eq!(text_only.calls(), 1);
    // Echo takes any attachment.
    let echo = engine
        .run(
            Request::default()
                .history(history, Default::default())
                .message(Message::user("and now?"))
                .profile("echo"),
        )
        .await
        .unwrap();
    assert_eq!(
        echo.text(),
        "echo: \"and now?\" (history: 3 messages, system: no, tools: 0)"
    );
}

/// Streams its pieces one event each, then stops.
struct Pieces(Vec<&'static str>);

impl Provider for Pieces {
    fn name(&self) -> &str {
        "pieces"
    }

    fn stream(&self, _: ModelRequest) -> BoxStream<'static, Result<StreamEvent, ProviderError>> {
        let mut events: Vec<_> = self
            .0
            .iter()
            .map(|piece| Ok(StreamEvent::Text((*piece).to_string())))
            .collect();
        events.push(Ok(StreamEvent::Done(FinishReason::Stop)));
        Box::pin(futures_stream(async move { events }))
    }
}

/// A call whose reply passes the bound set around it is stopped there: an
/// ordinary failed call (its run recorded as failed) whose error says what
/// to do, the text channel having had the whole pieces up to the bound. At
/// the bound, or without one, the reply is whole.
#[tokio::test]
async fn a_reply_past_the_reply_limit_is_a_failed_call() {
    let engine = Engine::builder(catalog())
        .provider("echo", Arc::new(Pieces(vec!["aaaa"; 5])))
        .build()
        .unwrap();
    let (sender, mut receiver) = tokio::sync::mpsc::unbounded_channel();
    let request = Request::messages([Message::user("go on")])
        .profile("echo")
        .text_channel(sender);
    let prepared = engine.prepare(&request).unwrap();
    let error = skein_engine::with_reply_limit(10, engine.run(request))
        .await
        .unwrap_err();
    let EngineError::Generation {
        run,
        error: ProviderError::ReplyTooLong { limit: 10 },
    } = &error
    else {
        panic!("not a reply past the bound: {error:?}");
    };
    assert!(
        error.to_string().contains(
            "passed the bound of 10 bytes of text and was stopped: ask for a shorter reply"
        ),
        "{error}"
    );
    let mut streamed = Vec::new();
    while let Ok(piece) = receiver.try_recv() {
        streamed.push(piece);
    }
    assert_eq!(streamed, ["aaaa", "aaaa"]);
    let entry = engine.ledger().entry(run).unwrap();
    assert_eq!(entry.status, skein_core::RunStatus::Failed);
    let record = prepared.failed_record(&error).unwrap();
    assert_eq!(record.status, skein_core::RunStatus::Failed);
    assert!(record.error.unwrap().contains("bound of 10 bytes"));

    let request = || Request::messages([Message::user("go on")]).profile("echo");
    let at_bound = skein_engine::with_reply_limit(20, engine.run(request()))
        .await
        .unwrap();
    assert_eq!(at_bound.text().len(), 20);
    let unbounded = engine.run(request()).await.unwrap();
    assert_eq!(unbounded.text().len(), 20);
}

/// Streams its piece, then never another event: a model that stalls.
struct Stalls(&'static str);

impl Provider for Stalls {
    fn name(&self) -> &str {
        "stalls"
    }

    fn stream(&self, _: ModelRequest) -> BoxStream<'static, Result<StreamEvent, ProviderError>> {
        struct Stalling(Option<Result<StreamEvent, ProviderError>>);
        impl futures_core::Stream for Stalling {
            type Item = Result<StreamEvent, ProviderError>;
            fn poll_next(
                mut self: std::pin::Pin<&mut Self>,
                _: &mut std::task::Context<'_>,
            ) -> std::task::Poll<Option<Self::Item>> {
                match self.0.take() {
                    Some(event) => std::task::Poll::Ready(Some(event)),
                    None => std::task::Poll::Pending,
                }
            }
        }
        Box::pin(Stalling(Some(Ok(StreamEvent::Text(self.0.to_string())))))
    }
}

/// A call cancelled while the model replies ends as `Cancelled`, naming
/// its run and the text it had by then; its record is kept as cancelled.
/// A call still running at the deadline set around it is stopped then: an
/// ordinary failed call that says so.
#[tokio::test]
async fn a_call_cancelled_or_past_its_deadline_mid_reply_keeps_its_run() {
    let engine = Engine::builder(catalog())
        .provider("echo", Arc::new(Stalls("Once upon")))
        .build()
        .unwrap();
    let token = skein_engine::CancellationToken::new();
    let (sender, mut receiver) = tokio::sync::mpsc::unbounded_channel();
    let request = Request::messages([Message::user("a story")])
        .profile("echo")
        .text_channel(sender)
        .cancel_with(token.clone());
    let prepared = engine.prepare(&request).unwrap();
    let running = tokio::spawn({
        let engine = engine.clone();
        async move { engine.run(request).await }
    });
    assert_eq!(receiver.recv().await.as_deref(), Some("Once upon"));
    token.cancel();
    let error = running.await.unwrap().unwrap_err();
    let EngineError::Cancelled {
        run: Some(run),
        partial,
    } = &error
    else {
        panic!("not a call cancelled mid-reply: {error:?}");
    };
    assert_eq!(partial, "Once upon");
    let entry = engine.ledger().entry(run).unwrap();
    assert_eq!(entry.status, skein_core::RunStatus::Cancelled);
    let record = prepared.failed_record(&error).unwrap();
    assert_eq!(record.status, skein_core::RunStatus::Cancelled);
    assert_eq!(record.output_head, None, "the caller keeps the partial");

    let request = Request::messages([Message::user("a story")]).profile("echo");
    let error = skein_engine::with_reply_deadline(Duration::from_millis(50), engine.run(request))
        .await
        .unwrap_err();
    assert!(
        matches!(
            &error,
            EngineError::Generation {
                error: ProviderError::ReplyTooSlow { .. },
                ..
            }
        ),
        "{error:?}"
    );
    assert!(
        error.to_string().contains("not finished within 0.05 s"),
        "{error}"
    );
}

/// A history holding an erased message (`skein redact`) is refused before
/// any model call, naming the node and the reason; the same history before
/// the erased message runs as usual.
#[tokio::test]
async fn a_history_with_an_erased_message_is_refused_before_any_call() {
    let engine = engine();
    let secret = Message::user("my password is hunter2");
    let erased = Message::new(
        Role::User,
        vec![skein_core::Erased::part(
            &secret.parts[0],
            "alice",
            1,
            "pasted a secret",
        )],
    );
    let before = Thread::from_messages([Message::system("be brief")]);
    let with_secret = before.push(secret);
    // Same id: the erased message stands in the secret's place.
    let history = before.push_with_id(with_secret.head_id().unwrap(), erased);
    let error = engine
        .run(
            Request::default()
                .history(history.clone(), Default::default())
                .message(Message::user("go on"))
                .profile("main"),
        )
        .await
        .unwrap_err();
    match &error {
        EngineError::ErasedContent { node, reason } => {
            assert_eq!(Some(*node), history.head_id());
            assert_eq!(reason, "pasted a secret");
        }
        other => panic!("{other}"),
    }
    assert!(
        error
            .to_string()
            .contains("continue from a message before it")
    );
    assert!(
        error
            .to_string()
            .contains("`erased_placeholder = \"[erased]\"` under `[privacy]`"),
        "{error}"
    );
    engine
        .run(
            Request::default()
                .history(before, Default::default())
                .message(Message::user("go on"))
                .profile("main"),
        )
        .await
        .unwrap();
}

/// With a placeholder chosen for the request, the model is sent the
/// placeholder where the erased content was (never the content, never a
/// refusal), the captured exchange keeps the stored thread with its
/// tombstone, and the run's events name the message it stood for.
#[tokio::test]
async fn a_chosen_placeholder_is_sent_in_the_erased_contents_place() {
    let seen = skein_testkit::Recording::echo();
    let engine = Engine::builder(
        Catalog::new()
            .backend(BackendDef::new("echo", BackendKind::Echo))
            .profile(Profile::new("main", "echo", "echo").credential(CredentialSource::None)),
    )
    .provider("echo", seen.clone())
    .build()
    .unwrap();
    let secret = Message::user("my password is hunter2");
    let erased = Message::new(
        Role::User,
        vec![skein_core::Erased::part(
            &secret.parts[0],
            "alice",
            1,
            "pasted a secret",
        )],
    );
    let before = Thread::from_messages([Message::system("be brief")]);
    let secret_id = before.push(secret).head_id().unwrap();
    let history = before
        .push_with_id(secret_id, erased.clone())
        .push(Message::assistant("noted"));
    let output = engine
        .run(
            Request::default()
                .history(history.clone(), Default::default())
                .message(Message::user("go on"))
                .profile("main")
                .erased_placeholder("[removed]")
                .capture(),
        )
        .await
        .unwrap();
    let sent = seen.last();
    assert_eq!(
        texts(&sent.thread),
        [
            "system: be brief",
            "user: [removed]",
            "assistant: noted",
            "user: go on"
        ]
    );
    assert!(
        !format!("{:?}", sent.thread.messages()).contains("hunter2"),
        "the content was sent"
    );
    // The request keeps the stored ids, so annotations keyed by them apply.
    assert_eq!(sent.thread.parent().parent().head_id(), Some(secret_id));
    let exchange = output.exchange.unwrap();
    let stored = exchange.thread().at(secret_id).unwrap();
    assert_eq!(stored.head().unwrap().message(), &erased);
    assert!(output.events.iter().any(|event| event.kind
        == EventKind::ErasedReplaced {
            nodes: vec![secret_id]
        }));
}
