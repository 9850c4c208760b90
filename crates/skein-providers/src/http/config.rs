/*!
Configuration of an HTTP backend: [`HttpConfig`] (base URL, credential,
[`Timeouts`], [`RetryPolicy`]) and [`SetupError`], the error of building a
provider from it.

Defaults: connect 10 s, first byte 120 s, idle between stream events 60 s;
at most 3 retries with full-jitter exponential backoff from 500 ms, capped
at 30 s. `openai_from_env` and `anthropic_from_env` name the default base
URL and key variable of each service and check the variable at once, so a
missing key is reported when the provider is built rather than on its first
call (the key is still read again on every call).
*/

use super::secret::{Credential, CredentialError};
use std::time::Duration;

/// The OpenAI API's base URL.
pub const OPENAI_BASE_URL: &str = "https://api.openai.com/v1";
/// The variable the OpenAI key is read from by default.
pub const OPENAI_API_KEY_VAR: &str = "OPENAI_API_KEY";
/// The Anthropic API's base URL.
pub const ANTHROPIC_BASE_URL: &str = "https://api.anthropic.com";
/// The variable the Anthropic key is read from by default.
pub const ANTHROPIC_API_KEY_VAR: &str = "ANTHROPIC_API_KEY";

/// How long each phase of a call may take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timeouts {
    /// Establishing the connection (TCP and TLS).
    pub connect: Duration,
    /// From sending the request to the response headers.
    pub first_byte: Duration,
    /// Between two pieces of the response body (stream events).
    pub idle: Duration,
}

impl Default for Timeouts {
    fn default() -> Timeouts {
        Timeouts {
            connect: Duration::from_secs(10),
            first_byte: Duration::from_secs(120),
            idle: Duration::from_secs(60),
        }
    }
}

/// When and how long to wait before retrying a failed attempt.
///
/// The n-th retry (1-based) waits a uniformly random time in
/// `[0, min(max_delay, base_delay * 2^(n-1))]` ("full jitter"), or exactly
/// `base_delay * 2^(n-1)` capped at `max_delay` when `jitter` is off. A
/// `Retry-After` (or `retry-after-ms`) header replaces that delay when it is
/// at most `max_delay`; a longer one ends the call with the typed error,
/// which carries the server's delay for the caller to act on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    pub max_retries: u32,
    pub base_delay: Duration,
    pub max_delay: Duration,
    pub jitter: bool,
}

impl Default for RetryPolicy {
    fn default() -> RetryPolicy {
        RetryPolicy {
            max_retries: 3,
            base_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(30),
            jitter: true,
        }
    }
}

impl RetryPolicy {
    /// Never retry.
    pub fn none() -> RetryPolicy {
        RetryPolicy {
            max_retries: 0,
            ..RetryPolicy::default()
        }
    }
}

/// Everything an HTTP backend needs besides the request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpConfig {
    /// The API's base URL, e.g. `https://api.openai.com/v1` or
    /// `http://localhost:11434/v1` (a trailing `/` is ignored).
    pub base_url: String,
    pub credential: Credential,
    pub timeouts: Timeouts,
    pub retry: RetryPolicy,
}

impl HttpConfig {
    /// A configuration with default timeouts and retries.
    pub fn new(base_url: impl Into<String>, credential: Credential) -> HttpConfig {
        HttpConfig {
            base_url: base_url.into(),
            credential,
            timeouts: Timeouts::default(),
            retry: RetryPolicy::default(),
        }
    }

    /// OpenAI at its default base URL, with the key from `OPENAI_API_KEY`.
    pub fn openai_from_env() -> Result<HttpConfig, CredentialError> {
        HttpConfig::from_env(OPENAI_BASE_URL, OPENAI_API_KEY_VAR)
    }

    /// Anthropic at its default base URL, with the key from
    /// `ANTHROPIC_API_KEY`.
    pub fn anthropic_from_env() -> Result<HttpConfig, CredentialError> {
        HttpConfig::from_env(ANTHROPIC_BASE_URL, ANTHROPIC_API_KEY_VAR)
    }

    /// A configuration whose key is read from `variable` on every call;
    /// fails now when the variable is not set.
    pub fn from_env(
        base_url: impl Into<String>,
        variable: impl Into<String>,
    ) -> Result<HttpConfig, CredentialError> {
        let credential = Credential::env(variable);
        credential.resolve()?;
        Ok(HttpConfig::new(base_url, credential))
    }

    pub fn with_timeouts(mut self, timeouts: Timeouts) -> HttpConfig {
        self.timeouts = timeouts;
        self
    }

    pub fn with_retry(mut self, retry: RetryPolicy) -> HttpConfig {
        self.retry = retry;
        self
    }

    /// `base_url` joined with `path` (which starts with `/`).
    pub(crate) fn endpoint(&self, path: &str) -> String {
        format!("{}{path}", self.base_url.trim_end_matches('/'))
    }
}

/// Why an HTTP provider could not be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SetupError {
    #[error("invalid base URL `{url}`: {reason}")]
    InvalidBaseUrl { url: String, reason: String },
    #[error("could not build the HTTP client")]
    Client(#[source] reqwest::Error),
    #[error(transparent)]
    Credential(#[from] CredentialError),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_match_the_documented_figures() {
        let config = HttpConfig::new(OPENAI_BASE_URL, Credential::None);
        assert_eq!(config.timeouts.connect, Duration::from_secs(10));
        assert_eq!(config.timeouts.first_byte, Duration::from_secs(120));
        assert_eq!(config.timeouts.idle, Duration::from_secs(60));
        assert_eq!(config.retry.max_retries, 3);
        assert_eq!(config.retry.base_delay, Duration::from_millis(500));
        assert_eq!(config.retry.max_delay, Duration::from_secs(30));
        assert!(config.retry.jitter);
    }

    #[test]
    fn endpoints_ignore_a_trailing_slash() {
        let config = HttpConfig::new("http://localhost:8080/v1/", Credential::None);
        assert_eq!(
            config.endpoint("/chat/completions"),
            "http://localhost:8080/v1/chat/completions"
        );
    }

    #[test]
    fn from_env_fails_early_naming_the_variable() {
        let error =
            HttpConfig::from_env("http://x", "SKEIN_TEST_UNSET_KEY_VARIABLE_91c2").unwrap_err();
        assert!(
            error
                .to_string()
                .contains("SKEIN_TEST_UNSET_KEY_VARIABLE_91c2")
        );
    }
}
