/*!
HTTP model backends: [`OpenAiCompatible`] (OpenAI chat completions and the
servers that speak it) and [`Anthropic`] (the Messages API), over one shared
transport.

```no_run
use skein_providers::http::{Credential, HttpConfig, OpenAiCompatible};

// OpenAI, key from OPENAI_API_KEY (a missing variable is reported here).
let openai = OpenAiCompatible::from_env()?;
// A local Ollama server: no key.
let ollama = OpenAiCompatible::new(HttpConfig::new("http://localhost:11434/v1", Credential::None))?;
# Ok::<(), skein_providers::http::SetupError>(())
```

The providers must be polled inside a Tokio runtime.

# Modules

Each has one job:

- `secret`: [`Secret`] (never printed), [`Credential`] (none, a value, or an
  environment variable read on every call) and [`CredentialError`].
- [`keys`]: the key file of saved provider keys ([`keys::KeyFile`]), read
  after the environment.
- `config`: [`HttpConfig`], [`Timeouts`], [`RetryPolicy`], [`SetupError`].
- `client`: the `reqwest` client (rustls with `ring`;
  [`install_crypto_provider`]).
- `transport`: attempts, timeouts, retries, cancellation, body reading; the
  `Decoder` trait each wire format implements (the chat providers' and the
  embeddings endpoint's, `crate::embed`).
- `retry`: retryable statuses, backoff with jitter, `Retry-After`.
- `errors`: error bodies and events to `ProviderError`, key redaction.
- `sse`: the incremental server-sent-events parser.
- `ids`: tool-call ids mapped for a provider that would reject them.
- `openai`, `anthropic`: each provider, its request mapping (`request`) and
  its reply decoding (`decode`).

# Guarantees

- Tool-call arguments and tool-use inputs are kept exactly as the server
  sent them; stored nodes are never rewritten for a provider (ids and
  argument encodings are mapped on the wire only).
- A reply is complete only with its `Done` event; a stream cut before it
  fails with `ProviderError::TruncatedStream`, so no partial assistant
  message is ever assembled.
- Retries happen only before the first event of the reply, each announced
  by `StreamEvent::Retrying` before its wait.
- Keys appear in no `Debug` output, error message, retry reason or log.
*/

mod anthropic;
mod client;
mod config;
mod errors;
mod ids;
pub mod keys;
mod openai;
mod retry;
mod secret;
pub mod sse;
pub(crate) mod transport;

pub use anthropic::{
    ANTHROPIC_VERSION, Anthropic, DEFAULT_MAX_TOKENS, arguments_value, tool_use_input,
};
pub use client::install_crypto_provider;
pub use config::{
    ANTHROPIC_API_KEY_VAR, ANTHROPIC_BASE_URL, HttpConfig, OPENAI_API_KEY_VAR, OPENAI_BASE_URL,
    RetryPolicy, SetupError, Timeouts,
};
pub use openai::OpenAiCompatible;
pub use secret::{Credential, CredentialError, Secret};
