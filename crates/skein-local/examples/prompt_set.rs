//! Runs the fixed prompt set (`tests/data/prompt_set.json`) on the embedded
//! model with its default settings and prints every answer with its token
//! count, finish reason and decode speed, as JSON.
//!
//! `cargo run -p skein-local --example prompt_set` (one thread; the model
//! from `SKEIN_MODEL_PATH` or the models directory). To try other
//! repetition settings than `Repetition::default()`:
//! - `--off`: no repetition control (plain greedy decoding);
//! - `--penalty LAST_N,REPEAT,FREQ,PRESENT`: the penalties sampler;
//! - `--dry MULTIPLIER,BASE,ALLOWED_LENGTH,LAST_N`: the DRY sampler;
//! - `--breakers none`: DRY without sequence breakers;
//! - `--max-tokens N`: the default reply length.

use serde_json::{Value, json};
use skein_core::{
    FinishReason, Message, ModelRequest, Part, Provider, Role, StreamEvent, Thread, Usage,
};
use skein_local::{LocalConfig, LocalModel, Repetition, SMOLLM2, model_path};
use std::time::Instant;

fn main() {
    let path = model_path(&SMOLLM2).expect("a models directory");
    let mut config = LocalConfig::new(path);
    config.threads = 1;
    configure(&mut config, &std::env::args().skip(1).collect::<Vec<_>>());
    let model = LocalModel::load(config).expect("load the model");
    let set: Value =
        serde_json::from_str(include_str!("../tests/data/prompt_set.json")).expect("prompt set");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let (mut tokens, mut seconds) = (0u64, 0f64);
    let mut cases = Vec::new();
    for case in set["cases"].as_array().expect("cases") {
        let parts = case["system"]
            .as_array()
            .expect("system parts")
            .iter()
            .map(|part| Part::text(part.as_str().expect("text")))
            .collect();
        let mut thread = Thread::new().push(Message::new(Role::System, parts));
        let mut answers = Vec::new();
        for turn in case["turns"].as_array().expect("turns") {
            thread = thread.push(Message::user(turn.as_str().expect("text")));
            let request = ModelRequest::new("smollm2", thread.clone());
            let (text, usage, finish, decode) = runtime.block_on(run(&model, request));
            let output = usage.output_tokens.unwrap_or(0);
            if let Some(decode) = decode {
                tokens += output.saturating_sub(1);
                seconds += decode;
            }
            answers.push(json!({
                "user": turn,
                "answer": text,
                "output_tokens": output,
                "finish": format!("{finish:?}"),
                "decode_tokens_per_s": decode.map(|s| (output.saturating_sub(1) as f64 / s).round()),
            }));
            thread = thread.push(Message::assistant(text));
        }
        cases.push(json!({ "id": case["id"], "answers": answers }));
    }
    let report = json!({
        "max_tokens": model.config().default_max_tokens,
        "repetition": format!("{:?}", model.config().repetition),
        "cases": cases,
        "decode_tokens_per_s": (tokens as f64 / seconds).round(),
        "decoded_tokens": tokens,
    });
    println!("{}", serde_json::to_string_pretty(&report).expect("json"));
}

/// Apply the command line's settings to `config`.
fn configure(config: &mut LocalConfig, args: &[String]) {
    let numbers = |value: Option<&String>| -> Vec<f32> {
        value
            .expect("a value after the flag")
            .split(',')
            .map(|n| n.parse().expect("a number"))
            .collect()
    };
    let mut args = args.iter();
    while let Some(flag) = args.next() {
        let repetition = &mut config.repetition;
        match flag.as_str() {
            "--no-reuse" => config.prefix_reuse = false,
            "--off" => *repetition = Repetition::off(),
            "--penalty" => {
                let n = numbers(args.next());
                repetition.penalty_last_n = n[0] as u32;
                repetition.penalty_repeat = n[1];
                repetition.penalty_freq = n[2];
                repetition.penalty_present = n[3];
            }
            "--dry" => {
                let n = numbers(args.next());
                repetition.dry_multiplier = n[0];
                repetition.dry_base = n[1];
                repetition.dry_allowed_length = n[2] as u32;
                repetition.dry_last_n = n[3] as u32;
            }
            "--breakers" => {
                assert_eq!(args.next().map(String::as_str), Some("none"));
                repetition.dry_sequence_breakers.clear();
            }
            "--max-tokens" => config.default_max_tokens = numbers(args.next())[0] as u32,
            other => panic!("unknown flag {other}"),
        }
    }
}

/// The reply, its usage and finish, and the seconds between the first and
/// the last text event (decoding only).
async fn run(
    model: &LocalModel,
    request: ModelRequest,
) -> (String, Usage, FinishReason, Option<f64>) {
    let mut stream = model.stream(request);
    let (mut text, mut usage, mut finish) = (String::new(), Usage::default(), None);
    let (mut first, mut last) = (None, None);
    while let Some(event) = std::future::poll_fn(|cx| stream.as_mut().poll_next(cx)).await {
        match event.expect("generation") {
            StreamEvent::Text(piece) => {
                let now = Instant::now();
                first.get_or_insert(now);
                last = Some(now);
                text.push_str(&piece);
            }
            StreamEvent::Usage(figures) => usage = figures,
            StreamEvent::Done(reason) => finish = Some(reason),
            _ => {}
        }
    }
    let decode = first.zip(last).map(|(a, b)| (b - a).as_secs_f64());
    (text, usage, finish.expect("a finished reply"), decode)
}
