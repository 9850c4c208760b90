//! Sentence-embedder benchmark: all-MiniLM-L6-v2 through llama.cpp's
//! embedding mode, on 1 and 2 threads, timed with a hand-written loop.
//! Prints one JSON object to stdout.
//!
//! Run with `cargo bench -p skein-local --bench sentence` (release
//! profile). Workload: 64 distinct English sentences of 8 to 20 words
//! (advisor replies and questions), embedded one request per sentence after
//! 8 untimed warm-up sentences; the figure is wall time per sentence
//! (median and mean over 3 rounds), then in requests of 16 sentences
//! (`in_requests_of_16_*`: one channel round trip per 16), and the process's CPU time per sentence
//! over the same rounds (which a busy machine does not inflate the way it
//! does wall time). The target on this machine is about 3 to 8 ms
//! per sentence.
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

/// The process's user plus system CPU time in milliseconds (Linux).
fn cpu_ms() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks: f64 = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    Some(ticks * 10.0)
}

fn main() {
    let Some(dir) = default_models_dir() else {
        println!(
            "{}",
            json!({"error": "no models directory: set SKEIN_MODELS_DIR"})
        );
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
        let started = Instant::now();
        let cpu_start = cpu_ms();
        for _ in 0..3 {
            for chunk in texts.chunks(16) {
                embedder.embed_blocking(chunk.to_vec()).expect("embeds");
            }
        }
        let batched_ms = started.elapsed().as_secs_f64() * 1e3 / (3 * texts.len()) as f64;
        let batched_cpu = cpu_start
            .zip(cpu_ms())
            .map(|(a, b)| report::round3((b - a) / (3 * texts.len()) as f64));
        let mut per_sentence = Vec::new();
        let cpu_before = cpu_ms();
        for _ in 0..3 {
            let started = Instant::now();
            for text in &texts {
                embedder.embed_blocking(vec![text.clone()]).expect("embeds");
            }
            per_sentence.push(started.elapsed().as_secs_f64() * 1e3 / texts.len() as f64);
        }
        let cpu = cpu_before
            .zip(cpu_ms())
            .map(|(a, b)| report::round3((b - a) / (3 * texts.len()) as f64));
        per_sentence.sort_by(f64::total_cmp);
        let mean = per_sentence.iter().sum::<f64>() / per_sentence.len() as f64;
        figures.push(json!({
            "threads": threads,
            "ms_per_sentence_median": report::round3(per_sentence[1]),
            "ms_per_sentence_mean": report::round3(mean),
            "cpu_ms_per_sentence": cpu,
            "in_requests_of_16_ms_per_sentence": report::round3(batched_ms),
            "in_requests_of_16_cpu_ms_per_sentence": batched_cpu,
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
