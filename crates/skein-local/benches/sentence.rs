//! Sentence-embedder benchmark: all-MiniLM-L6-v2 through llama.cpp's
//! embedding mode, on 1 and 2 threads, timed with a hand-written loop.
//! Prints one JSON object to stdout.
//!
//! Run with `cargo bench -p skein-local --bench sentence` (release
//! profile). Workload: 64 distinct English sentences of 8 to 20 words
//! (advisor replies and questions), embedded one request per sentence after
//! 8 untimed warm-up sentences; the figure is wall time per sentence
//! (median and mean over 3 rounds). The target on this machine is
//! about 3 to 8 ms per sentence.
//!
//! When the model files are missing, the binary prints a JSON object with an
//! `error` field saying how to fetch them and exits 0.

#[path = "../../../bench-support/report.rs"]
mod report;

use serde_json::json;
use skein_local::{SentenceEmbedder, default_models_dir};
use std::time::Instant;

const SUBJECTS: [&str; 8] = [
    "the position",
    "retail sentiment",
    "the quarterly revenue",
    "the analyst note",
    "our allocation",
    "the bond ladder",
    "market momentum",
    "the client's risk appetite",
];
const CLAIMS: [&str; 8] = [
    "looks stronger than it did a week ago",
    "does not justify buying more right now",
    "suggests we hold and wait for the next report",
    "is bullish enough to add five percent",
    "changed after the earnings call on Tuesday",
    "should be reviewed before the end of the month",
    "stays flat while margins remain stable",
    "points to keeping the allocation where it is",
];

fn sentences() -> Vec<String> {
    let mut out = Vec::new();
    for subject in SUBJECTS {
        for claim in CLAIMS {
            out.push(format!("In my view {subject} {claim}."));
        }
    }
    out
}

fn main() {
    let Some(dir) = default_models_dir() else {
        println!("{}", json!({"error": "no models directory: set SKEIN_MODELS_DIR"}));
        return;
    };
    let texts = sentences();
    let mut figures = Vec::new();
    for threads in [1u32, 2] {
        let embedder = match SentenceEmbedder::minilm_in(&dir, threads) {
            Ok(embedder) => embedder,
            Err(error) => {
                println!(
                    "{}",
                    json!({"error": format!("{error}: run `skein models pull minilm`")})
                );
                return;
            }
        };
        for text in texts.iter().take(8) {
            embedder.embed_blocking(vec![text.clone()]).expect("embeds");
        }
        let mut per_sentence = Vec::new();
        for _ in 0..3 {
            let started = Instant::now();
            for text in &texts {
                embedder.embed_blocking(vec![text.clone()]).expect("embeds");
            }
            per_sentence.push(started.elapsed().as_secs_f64() * 1e3 / texts.len() as f64);
        }
        per_sentence.sort_by(f64::total_cmp);
        let mean = per_sentence.iter().sum::<f64>() / per_sentence.len() as f64;
        figures.push(json!({
            "threads": threads,
            "ms_per_sentence_median": report::round3(per_sentence[1]),
            "ms_per_sentence_mean": report::round3(mean),
            "sentences": texts.len(),
            "rounds": per_sentence.len(),
        }));
    }
    println!(
        "{}",
        serde_json::to_string_pretty(&json!({
            "bench": "sentence",
            "model": "all-MiniLM-L6-v2 (f32 GGUF, mean pooling)",
            "target_ms_per_sentence": "3 to 8",
            "figures": figures,
            "load_average": report::loadavg(),
            "machine": report::machine(json!({})),
        }))
        .expect("json")
    );
}
