/*!
How a local model is run: which file, how large a context, how many threads,
the evaluation chunk size, whether prefix reuse is on, the reply length when
a request sets none, and the repetition control every reply is decoded with.
*/

use std::path::PathBuf;

/// Settings for one local model.
#[derive(Clone, Debug, PartialEq)]
pub struct LocalConfig {
    /// The GGUF file.
    pub path: PathBuf,
    /// Context size in tokens (prompt plus reply).
    pub context_tokens: u32,
    /// CPU threads for evaluation. On a busy 2-core machine 1 is fastest.
    pub threads: u32,
    /// Prompts are evaluated in chunks of this many tokens, aligned to
    /// absolute positions. It is also the granularity of prefix reuse.
    /// Changing it can change greedy output; keep it pinned.
    pub chunk_tokens: u32,
    /// Keep the KV cache of the previous prompt and evaluate only what
    /// differs. Never changes output.
    pub prefix_reuse: bool,
    /// The reply length when a request sets no `max_tokens`. 256 tokens is
    /// about 190 English words: a long answer for a terminal, and at most a
    /// few seconds of decoding on one core, so a reply that runs on is cut
    /// (and said to be, with a `Length` finish) before it wastes a minute.
    pub default_max_tokens: u32,
    /// Repetition control for every reply, greedy or sampled.
    pub repetition: Repetition,
}

impl LocalConfig {
    /// Defaults for the model at `path`: 4096-token context, half the
    /// available cores (at least one; `SKEIN_THREADS` overrides), 64-token
    /// chunks, prefix reuse on, replies up to 256 tokens, and
    /// [`Repetition::default`].
    pub fn new(path: impl Into<PathBuf>) -> LocalConfig {
        LocalConfig {
            path: path.into(),
            context_tokens: 4096,
            threads: default_threads(),
            chunk_tokens: 64,
            prefix_reuse: true,
            default_max_tokens: 256,
            repetition: Repetition::default(),
        }
    }
}

/// How a reply is kept from repeating itself: llama.cpp's penalties and DRY
/// ("don't repeat yourself") samplers, applied to the logits before the token
/// is chosen. Both look only at the reply's own tokens (not the prompt), and
/// neither draws a random number, so greedy decoding stays deterministic.
///
/// A small model decoded greedily falls into loops: once a sentence has
/// appeared, repeating it is the likeliest continuation, for ever. The
/// repeat penalty divides the logit of every token seen among the reply's
/// last `penalty_last_n` tokens (multiplies it when negative): a mild 1.1
/// over 64 tokens is enough to steer SmolLM2-135M off its loops without
/// costing it its grammar (1.2 already shortens a five-item list to four).
/// DRY is the backstop for longer loops: a token that would extend a
/// sequence already seen in the last `dry_last_n` tokens loses
/// `dry_multiplier * dry_base^(n - dry_allowed_length)` of its logit, where
/// `n` is the length of the repeated sequence, so short echoes ("of the")
/// cost nothing and whole repeated sentences become impossible.
///
/// The defaults were tuned on a fixed prompt set (docs/performance.md,
/// `cargo run -p skein-local --example prompt_set`).
#[derive(Clone, Debug, PartialEq)]
pub struct Repetition {
    /// How many of the reply's latest tokens the repeat penalty looks at
    /// (0 turns it off).
    pub penalty_last_n: u32,
    /// Divisor of a seen token's logit (1.0 = off).
    pub penalty_repeat: f32,
    /// Subtracted from a seen token's logit per occurrence (0.0 = off).
    pub penalty_freq: f32,
    /// Subtracted once from a seen token's logit (0.0 = off).
    pub penalty_present: f32,
    /// Scale of the DRY penalty (0.0 turns DRY off).
    pub dry_multiplier: f32,
    /// Growth of the DRY penalty per extra repeated token (at least 1.0).
    pub dry_base: f32,
    /// Repeated sequences up to this many tokens are not penalised.
    pub dry_allowed_length: u32,
    /// How many of the reply's latest tokens DRY scans for repeats (0 turns
    /// DRY off).
    pub dry_last_n: u32,
    /// Texts a repeated sequence may not run across (llama.cpp's defaults:
    /// a newline, `:`, `"` and `*`), so lists, dialogue and JSON keys are
    /// not penalised for their shared structure.
    pub dry_sequence_breakers: Vec<String>,
}

impl Default for Repetition {
    fn default() -> Repetition {
        Repetition {
            penalty_last_n: 64,
            penalty_repeat: 1.1,
            penalty_freq: 0.0,
            penalty_present: 0.0,
            dry_multiplier: 0.8,
            dry_base: 1.75,
            dry_allowed_length: 2,
            dry_last_n: 256,
            dry_sequence_breakers: ["\n", ":", "\"", "*"].map(String::from).to_vec(),
        }
    }
}

impl Repetition {
    /// No repetition control: plain greedy (or plain sampled) decoding.
    pub fn off() -> Repetition {
        Repetition {
            penalty_last_n: 0,
            penalty_repeat: 1.0,
            penalty_freq: 0.0,
            penalty_present: 0.0,
            dry_multiplier: 0.0,
            dry_base: 1.75,
            dry_allowed_length: 2,
            dry_last_n: 0,
            dry_sequence_breakers: Vec::new(),
        }
    }
}

fn default_threads() -> u32 {
    if let Some(threads) = std::env::var("SKEIN_THREADS")
        .ok()
        .and_then(|v| v.parse::<u32>().ok())
    {
        return threads.max(1);
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get() as u32);
    (cores / 2).clamp(1, 8)
}
