//! The embedded model end to end: real generation with SmolLM2 on one
//! thread, greedy decoding with repetition control (no loops on the fixed
//! prompt set, deterministic), seeded sampling, grammar-constrained JSON,
//! prefix reuse that never changes output, limits, cancellation and typed
//! failures.
//!
//! These tests need the model file: `skein models pull smollm2` (the test
//! scripts and CI fetch it), or `SKEIN_MODEL_PATH=/path/to/model.gguf`.

use serde_json::{Value, json};
use skein_core::provider::GenerationOptions;
use skein_core::{
    FinishReason, Message, ModelRequest, ModelResponse, Part, Provider, ProviderError, Role, Thread,
};
use skein_local::{LocalConfig, LocalError, LocalModel, SMOLLM2, model_path};
use std::collections::HashMap;
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

fn block_on<T>(future: impl Future<Output = T>) -> T {
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
    // A follow-up turn: its prompt extends the previous one with the reply
    // the warm model just decoded, whose positions its cache holds (this
    // case's second answer changed with them before reuse was limited to
    // full chunks).
    let case = prompt_set_case("demo-pack");
    assert_eq!(answer_case(&warm, &case), answer_case(&cold, &case));
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

/// The cases of the fixed prompt set (`tests/data/prompt_set.json`).
fn prompt_set() -> Vec<Value> {
    let set: Value =
        serde_json::from_str(include_str!("../data/prompt_set.json")).expect("the prompt set");
    set["cases"].as_array().expect("cases").clone()
}

fn prompt_set_case(id: &str) -> Value {
    prompt_set()
        .into_iter()
        .find(|case| case["id"] == id)
        .expect("a case of the prompt set")
}

/// A case's answers, turn by turn, each turn seeing the earlier replies,
/// with the default reply length.
fn answer_case(model: &LocalModel, case: &Value) -> Vec<String> {
    let parts = case["system"]
        .as_array()
        .unwrap()
        .iter()
        .map(|part| Part::text(part.as_str().unwrap()))
        .collect();
    let mut thread = Thread::new().push(Message::new(Role::System, parts));
    let mut answers = Vec::new();
    for turn in case["turns"].as_array().unwrap() {
        thread = thread.push(Message::user(turn.as_str().unwrap()));
        let request = ModelRequest::new("smollm2", thread.clone());
        let reply = block_on(model.complete(request)).expect("generation");
        answers.push(reply.message.joined_text());
        thread = thread.push(reply.message);
    }
    answers
}

/// Every case's id and answers.
fn answer_the_prompt_set(model: &LocalModel) -> Vec<(String, Vec<String>)> {
    prompt_set()
        .iter()
        .map(|case| {
            (
                case["id"].as_str().unwrap().to_string(),
                answer_case(model, case),
            )
        })
        .collect()
}

/// How often the most repeated sentence (or line) of `text` occurs, with it.
fn most_repeated_sentence(text: &str) -> (usize, String) {
    let mut counts: HashMap<String, usize> = HashMap::new();
    for sentence in text.split(['.', '!', '?', '\n']) {
        let sentence = sentence
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
            .to_lowercase();
        if sentence.chars().any(char::is_alphabetic) {
            *counts.entry(sentence).or_default() += 1;
        }
    }
    counts
        .into_iter()
        .map(|(sentence, count)| (count, sentence))
        .max()
        .unwrap_or_default()
}

#[test]
fn the_sentence_counter_sees_a_loop() {
    let looping = "Bonjour, je ne sais pas? Bonjour, je ne sais pas?\nA moment of stillness,\n\
                   A moment of stillness,\nA moment of stillness,\n";
    assert_eq!(
        most_repeated_sentence(looping),
        (3, "a moment of stillness,".to_string())
    );
    assert_eq!(most_repeated_sentence("1. Apple\n2. Pear\n").0, 1);
}

#[test]
fn the_prompt_set_answers_without_loops_and_the_same_twice() {
    let first = answer_the_prompt_set(model());
    for (case, answers) in &first {
        for answer in answers {
            assert!(!answer.trim().is_empty(), "{case}: an empty answer");
            let (count, sentence) = most_repeated_sentence(answer);
            assert!(
                count <= 2,
                "{case}: {sentence:?} occurs {count} times in {answer:?}"
            );
        }
    }
    assert_eq!(
        answer_the_prompt_set(model()),
        first,
        "greedy decoding gave different answers on a second run"
    );
}

#[test]
fn seeded_sampling_repeats_with_its_seed_and_differs_with_another() {
    let thread = Thread::from_messages([
        Message::system("You are a helpful assistant."),
        Message::user("Write a short story about a dragon."),
    ]);
    let sample = |seed: u64| {
        let mut request = request(&thread, 24);
        request.options.temperature = Some(1.0);
        request.options.top_p = Some(0.95);
        request.options.seed = Some(seed);
        block_on(model().complete(request))
            .expect("generation")
            .message
            .joined_text()
    };
    let greedy = complete(model(), &thread, 24).message.joined_text();
    let seven = sample(7);
    assert_eq!(sample(7), seven, "the same seed must give the same reply");
    assert_ne!(sample(8), seven, "another seed gave the same reply");
    assert_ne!(seven, greedy, "a temperature of 1 decoded greedily");
}

/// Three schemas of increasing complexity, each with a question it fits.
fn schemas() -> Vec<(Value, &'static str)> {
    vec![
        (
            json!({
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"]
            }),
            "What is the capital of France?",
        ),
        (
            json!({
                "type": "object",
                "properties": {
                    "name": {"type": "string"},
                    "population_millions": {"type": "number"},
                    "size": {"enum": ["small", "medium", "large"]}
                },
                "required": ["name", "population_millions", "size"]
            }),
            "Describe the city of Paris.",
        ),
        (
            json!({
                "type": "object",
                "properties": {
                    "trip": {
                        "type": "object",
                        "properties": {
                            "city": {"type": "string"},
                            "days": {"type": "integer", "minimum": 1},
                            "items": {
                                "type": "array",
                                "minItems": 1,
                                "maxItems": 5,
                                "items": {
                                    "type": "object",
                                    "properties": {
                                        "name": {"type": "string"},
                                        "count": {"type": "integer", "minimum": 1}
                                    },
                                    "required": ["name", "count"]
                                }
                            }
                        },
                        "required": ["city", "days", "items"]
                    }
                },
                "required": ["trip"]
            }),
            "Plan what to pack for a three-day trip to Rome.",
        ),
    ]
}

fn with_schema(thread: &Thread, schema: &Value) -> ModelRequest {
    let mut request = ModelRequest::new("smollm2", thread.clone());
    request.output_schema = Some(schema.clone());
    request
}

#[test]
fn an_output_schema_gives_a_valid_object_on_the_first_call() {
    for (schema, question) in schemas() {
        let thread = Thread::from_messages([
            Message::system("You are a helpful assistant. Answer in JSON."),
            Message::user(question),
        ]);
        let before = model().stats();
        let reply = block_on(model().complete(with_schema(&thread, &schema))).expect("generation");
        let text = reply.message.joined_text();
        assert_eq!(reply.finish_reason, FinishReason::Stop, "{text}");
        let value: Value = serde_json::from_str(text.trim())
            .unwrap_or_else(|error| panic!("not JSON ({error}): {text}"));
        let validator = jsonschema::validator_for(&schema).unwrap();
        let errors: Vec<String> = validator
            .iter_errors(&value)
            .map(|e| e.to_string())
            .collect();
        assert!(errors.is_empty(), "{text} fails {schema}: {errors:?}");
        assert_eq!(model().stats().constrained, before.constrained + 1);
        // Deterministic under the grammar too.
        let again = block_on(model().complete(with_schema(&thread, &schema))).unwrap();
        assert_eq!(again.message, reply.message);
    }
}

#[test]
fn a_schema_llama_cpp_cannot_convert_is_decoded_unconstrained() {
    // A model of its own: its counters see this test's requests only.
    let model = LocalModel::load(config(true)).unwrap();
    let thread = Thread::from_messages([system(), Message::user("Name a colour.")]);
    for schema in [
        json!({"$ref": "#/$defs/missing"}),
        json!({"type": "string", "pattern": "^(unbalanced$"}),
    ] {
        let before = model.stats();
        let mut request = with_schema(&thread, &schema);
        request.options.max_tokens = Some(16);
        let reply = block_on(model.complete(request)).expect("generation");
        assert!(!reply.message.joined_text().is_empty());
        let after = model.stats();
        assert_eq!(after.unconstrained, before.unconstrained + 1, "{schema}");
        assert_eq!(after.constrained, before.constrained, "{schema}");
    }
}

#[test]
fn the_default_reply_length_cuts_a_long_reply_with_a_length_finish() {
    let thread = Thread::from_messages([
        Message::system("You are a helpful assistant."),
        Message::user("Write a long story about a dragon who learns to bake bread."),
    ]);
    let reply = block_on(model().complete(ModelRequest::new("smollm2", thread))).unwrap();
    assert_eq!(reply.finish_reason, FinishReason::Length);
    assert_eq!(
        reply.usage.output_tokens,
        Some(u64::from(model().config().default_max_tokens))
    );
    assert_eq!(model().config().default_max_tokens, 256);
}
