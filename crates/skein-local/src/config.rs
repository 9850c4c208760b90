/*!
How a local model is run: which file, how large a context, how many threads,
the evaluation chunk size, and whether prefix reuse is on.
*/

use std::path::PathBuf;

/// Settings for one local model.
#[derive(Clone, Debug, PartialEq, Eq)]
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
    /// The reply length when a request sets no `max_tokens`.
    pub default_max_tokens: u32,
}

impl LocalConfig {
    /// Defaults for the model at `path`: 4096-token context, half the
    /// available cores (at least one; `SKEIN_THREADS` overrides), 64-token
    /// chunks, prefix reuse on, replies up to 512 tokens.
    pub fn new(path: impl Into<PathBuf>) -> LocalConfig {
        LocalConfig {
            path: path.into(),
            context_tokens: 4096,
            threads: default_threads(),
            chunk_tokens: 64,
            prefix_reuse: true,
            default_max_tokens: 512,
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
