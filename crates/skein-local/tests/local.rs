//! The embedded model end to end: real generation with SmolLM2 on one
//! thread, greedy decoding, prefix reuse that never changes output, limits,
//! cancellation and typed failures.
//!
//! These tests need the model file: `skein models pull smollm2` (the test
//! scripts and CI fetch it), or `SKEIN_MODEL_PATH=/path/to/model.gguf`.

use skein_core::provider::GenerationOptions;
use skein_core::{
    FinishReason, Message, ModelRequest, ModelResponse, Provider, ProviderError, Thread,
};
use skein_local::{LocalConfig, LocalError, LocalModel, SMOLLM2, model_path};
use std::sync::OnceLock;

fn config(prefix_reuse: bool) -> LocalConfig {
    let path = model_path(&SMOLLM2).expect("a models directory");
    assert!(
        path.is_file(),
        "the local model is missing at {}: run `cargo run -p skein-cli -- models pull smollm2` \
         or set SKEIN_MODEL_PATH",
        path.display()
    );
    let mut config = LocalConfig::new(path);
    config.threads = 1;
    config.context_tokens = 2048;
    config.prefix_reuse = prefix_reuse;
    config
}

/// One model with prefix reuse, shared by the tests of this binary.
fn model() -> &'static LocalModel {
    static MODEL: OnceLock<LocalModel> = OnceLock::new();
    MODEL.get_or_init(|| LocalModel::load(config(true)).expect("load the local model"))
}

fn request(thread: &Thread, max_tokens: u32) -> ModelRequest {
    let mut request = ModelRequest::new("smollm2", thread.clone());
    request.options = GenerationOptions {
        max_tokens: Some(max_tokens),
        ..GenerationOptions::default()
    };
    request
}

fn block_on<T>(future: impl std::future::Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(future)
}

fn complete(model: &LocalModel, thread: &Thread, max_tokens: u32) -> ModelResponse {
    block_on(model.complete(request(thread, max_tokens))).expect("generation")
}

fn system() -> Message {
    Message::system("You are a helpful assistant. Answer in one short sentence.")
}

#[test]
fn it_knows_the_capital_of_france() {
    let thread = Thread::from_messages([system(), Message::user("What is the capital of France?")]);
    let reply = complete(model(), &thread, 24);
    assert!(
        reply.message.joined_text().contains("Paris"),
        "{:?}",
        reply.message.joined_text()
    );
    assert_eq!(reply.usage.output_tokens.map(|n| n > 0), Some(true));
    assert!(reply.usage.input_tokens.unwrap() > 10);
}

#[test]
fn the_second_turn_depends_on_the_first() {
    let first = Thread::from_messages([system(), Message::user("What is the capital of France?")]);
    let reply = complete(model(), &first, 24);
    let followup = Message::user("What is the population of that city?");
    let with_history = first.push(reply.message.clone()).push(followup.clone());
    let without_history = Thread::from_messages([system(), followup]);
    let a = complete(model(), &with_history, 24).message.joined_text();
    let b = complete(model(), &without_history, 24)
        .message
        .joined_text();
    assert_ne!(
        a, b,
        "the reply must change when the first turn is in the history"
    );
}

#[test]
fn greedy_output_is_identical_on_two_runs() {
    let thread = Thread::from_messages([system(), Message::user("Name three colours.")]);
    let a = complete(model(), &thread, 32);
    let b = complete(model(), &thread, 32);
    assert_eq!(a.message, b.message);
    assert_eq!(a.usage.output_tokens, b.usage.output_tokens);
}

#[test]
fn prefix_reuse_never_changes_output_and_skips_the_shared_prefix() {
    // A longer conversation, then three forks from its first turn and a
    // reply to its end, run on a cold model (no reuse) and a reusing one.
    let cold = LocalModel::load(config(false)).unwrap();
    let warm = LocalModel::load(config(true)).unwrap();
    let briefing = Message::system(
        "You are a helpful geography tutor. Answer in one short sentence. Background for this lesson: \
         Europe has many capital cities. France's capital is Paris, on the Seine. Italy's capital is Rome, \
         on the Tiber. Spain's capital is Madrid, in the centre of the country. Portugal's capital is \
         Lisbon, on the Atlantic coast. Greece's capital is Athens, near the Aegean Sea. Germany's \
         capital is Berlin, on the Spree. Keep answers factual and brief.",
    );
    let mut base = Thread::new().push(briefing);
    for question in [
        "What is the capital of France?",
        "And of Italy?",
        "Which of the two is further south?",
    ] {
        base = base.push(Message::user(question));
        let reply = complete(&cold, &base, 24);
        base = base.push(reply.message);
    }
    let turn_one = base.nodes()[2].id();
    let fork_point = base.at(turn_one).unwrap();
    let requests: Vec<Thread> = [
        fork_point.push(Message::user("And of Spain?")),
        fork_point.push(Message::user("And of Portugal?")),
        fork_point.push(Message::user("And of Greece?")),
        base.push(Message::user("Thank you. Summarise our conversation.")),
    ]
    .into_iter()
    .collect();
    for (i, thread) in requests.iter().enumerate() {
        let before = warm.stats();
        let expected = complete(&cold, thread, 32);
        let actual = complete(&warm, thread, 32);
        assert_eq!(
            actual.message, expected.message,
            "request {i}: reuse changed the output"
        );
        let after = warm.stats();
        let evaluated = after.evaluated_tokens - before.evaluated_tokens;
        let prompt = actual.usage.input_tokens.unwrap();
        assert_eq!(evaluated, prompt - actual.usage.cache_read_tokens.unwrap());
        if i > 0 {
            assert!(
                actual.usage.cache_read_tokens.unwrap() >= 64,
                "request {i} shares a long prefix with the previous one, so it must reuse it: {:?}",
                actual.usage
            );
            assert!(evaluated < prompt, "request {i} evaluated its whole prompt");
        }
    }
    assert_eq!(cold.stats().reused_tokens, 0);
    assert!(warm.stats().evaluated_tokens < cold.stats().evaluated_tokens / 2);
}

#[test]
fn max_tokens_cuts_the_reply_with_a_length_finish() {
    let thread = Thread::from_messages([
        system(),
        Message::user("Write a long story about a dragon."),
    ]);
    let reply = complete(model(), &thread, 5);
    assert_eq!(reply.finish_reason, FinishReason::Length);
    assert_eq!(reply.usage.output_tokens, Some(5));
    assert!(!reply.message.joined_text().is_empty());
}

#[test]
fn dropping_the_stream_cancels_and_the_model_stays_usable() {
    let thread = Thread::from_messages([system(), Message::user("Count from one to one hundred.")]);
    block_on(async {
        let mut stream = model().stream(request(&thread, 200));
        let first = std::future::poll_fn(|cx| stream.as_mut().poll_next(cx)).await;
        assert!(matches!(first, Some(Ok(_))), "{first:?}");
        drop(stream);
    });
    let reply = complete(model(), &thread, 8);
    assert_eq!(reply.usage.output_tokens, Some(8));
}

#[test]
fn a_prompt_longer_than_the_context_is_a_typed_error() {
    let long = "word ".repeat(3000);
    let thread = Thread::from_messages([Message::user(long)]);
    let error = block_on(model().complete(request(&thread, 8))).unwrap_err();
    assert!(
        matches!(
            error,
            ProviderError::BadRequest {
                context_too_long: true,
                ..
            }
        ),
        "{error}"
    );
}

#[test]
fn a_missing_model_file_says_how_to_fetch_it() {
    let error = LocalModel::load(LocalConfig::new("/nonexistent/model.gguf")).unwrap_err();
    assert!(matches!(error, LocalError::Missing { .. }));
    assert!(
        error.to_string().contains("skein models pull smollm2"),
        "{error}"
    );
}

#[test]
fn a_file_that_is_not_a_model_fails_to_load_with_its_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("broken.gguf");
    std::fs::write(&path, b"not a gguf file").unwrap();
    let error = LocalModel::load(LocalConfig::new(&path)).unwrap_err();
    assert!(matches!(error, LocalError::Load { .. }), "{error}");
    assert!(error.to_string().contains("broken.gguf"), "{error}");
}
