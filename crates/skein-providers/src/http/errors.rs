/*!
Failures to [`ProviderError`]s: error responses (by status), error events
inside a stream (by the provider's error type), and transport errors.

The provider's own message is kept: from OpenAI's
`{"error": {"message", "type", "code"}}`, Anthropic's
`{"type": "error", "error": {"type", "message"}}`, the looser shapes of
compatible servers (`{"error": "text"}`, `{"message": ...}`,
`{"detail": ...}`) or, failing those, the body text itself (at most 2,000
characters). The provider's error code or type, when it sends one, is put in
front (`overloaded_error: Overloaded`). The key is redacted from every
message, in case a server echoes it.

| status | error |
|---|---|
| 429 | `RateLimited` (with the server's `Retry-After`) |
| 401, 403 | `Authentication` |
| 500-599, 529 | `Server` |
| any other | `BadRequest` (`context_too_long` when the provider says so) |

Context too long is recognised by OpenAI's code `context_length_exceeded`
and by the wording of OpenAI, Anthropic ("prompt is too long"), vLLM and
llama.cpp messages.

Transport errors never include the URL (a base URL may carry credentials).
*/

use super::secret::Secret;
use serde::Deserialize;
use skein_core::ProviderError;
use std::time::Duration;

const MAX_MESSAGE: usize = 2000;

/// What an error body says.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct ErrorDetails {
    pub message: String,
    /// The provider's error type (`invalid_request_error`, ...).
    pub kind: Option<String>,
    /// The provider's error code (`context_length_exceeded`, ...).
    pub code: Option<String>,
}

impl ErrorDetails {
    /// The message with the code or type in front.
    fn labelled(&self) -> String {
        match self.code.as_deref().or(self.kind.as_deref()) {
            Some(label) if !label.is_empty() && !self.message.starts_with(label) => {
                format!("{label}: {}", self.message)
            }
            _ => self.message.clone(),
        }
    }

    fn context_too_long(&self) -> bool {
        if self.code.as_deref() == Some("context_length_exceeded")
            || self.kind.as_deref() == Some("exceed_context_size_error")
        {
            return true;
        }
        let message = self.message.to_ascii_lowercase();
        [
            "prompt is too long",
            "maximum context length",
            "context length exceeded",
            "context_length_exceeded",
            "exceeds the available context size",
            "context window",
        ]
        .iter()
        .any(|phrase| message.contains(phrase))
    }
}

#[derive(Deserialize)]
struct Body {
    error: Option<serde_json::Value>,
    message: Option<serde_json::Value>,
    detail: Option<serde_json::Value>,
}

/// Read an error body in any of the shapes providers use.
pub(crate) fn details_from_body(body: &[u8]) -> ErrorDetails {
    if let Ok(parsed) = serde_json::from_slice::<Body>(body)
        && let Some(details) = details_from_parts(parsed.error, parsed.message, parsed.detail)
    {
        return details;
    }
    let text = String::from_utf8_lossy(body);
    ErrorDetails {
        message: text.trim().to_owned(),
        ..ErrorDetails::default()
    }
}

/// Read an error object (`{"message", "type", "code"}`) or a bare string.
pub(crate) fn details_from_value(value: &serde_json::Value) -> ErrorDetails {
    match value {
        serde_json::Value::String(message) => ErrorDetails {
            message: message.clone(),
            ..ErrorDetails::default()
        },
        serde_json::Value::Object(map) => {
            let text = |key: &str| match map.get(key) {
                Some(serde_json::Value::String(text)) => Some(text.clone()),
                Some(serde_json::Value::Number(number)) => Some(number.to_string()),
                _ => None,
            };
            ErrorDetails {
                message: text("message").unwrap_or_else(|| value.to_string()),
                kind: text("type"),
                code: text("code"),
            }
        }
        other => ErrorDetails {
            message: other.to_string(),
            ..ErrorDetails::default()
        },
    }
}

fn details_from_parts(
    error: Option<serde_json::Value>,
    message: Option<serde_json::Value>,
    detail: Option<serde_json::Value>,
) -> Option<ErrorDetails> {
    if let Some(error) = error.filter(|value| !value.is_null()) {
        return Some(details_from_value(&error));
    }
    message
        .or(detail)
        .filter(|value| !value.is_null())
        .map(|value| details_from_value(&value))
}

/// The error for a non-success response.
pub(crate) fn error_for_status(
    status: u16,
    reason: &str,
    body: &[u8],
    retry_after: Option<Duration>,
    secret: Option<&Secret>,
) -> ProviderError {
    let mut details = details_from_body(body);
    if details.message.is_empty() {
        details.message = format!("HTTP {status} {reason}").trim_end().to_owned();
    }
    let message = clean(&details.labelled(), secret);
    match status {
        429 => ProviderError::RateLimited {
            message,
            retry_after,
        },
        401 | 403 => ProviderError::Authentication { message },
        500..=599 => ProviderError::Server { status, message },
        _ => ProviderError::BadRequest {
            context_too_long: details.context_too_long(),
            message,
        },
    }
}

/// The error for an error reported inside a stream or a 200 body, by the
/// provider's error type or code.
pub(crate) fn error_for_details(details: &ErrorDetails, secret: Option<&Secret>) -> ProviderError {
    let message = clean(&details.labelled(), secret);
    let label = |wanted: &[&str]| {
        [details.kind.as_deref(), details.code.as_deref()]
            .into_iter()
            .flatten()
            .any(|label| wanted.contains(&label))
    };
    if label(&["overloaded_error"]) {
        ProviderError::Server {
            status: 529,
            message,
        }
    } else if label(&[
        "rate_limit_error",
        "rate_limit_exceeded",
        "insufficient_quota",
        "429",
    ]) {
        ProviderError::RateLimited {
            message,
            retry_after: None,
        }
    } else if label(&[
        "authentication_error",
        "permission_error",
        "invalid_api_key",
        "401",
        "403",
    ]) {
        ProviderError::Authentication { message }
    } else if label(&[
        "invalid_request_error",
        "not_found_error",
        "request_too_large",
        "context_length_exceeded",
        "exceed_context_size_error",
        "400",
        "404",
        "422",
    ]) {
        ProviderError::BadRequest {
            context_too_long: details.context_too_long(),
            message,
        }
    } else {
        ProviderError::Server {
            status: 500,
            message,
        }
    }
}

/// A transport failure as a connection error, with the cause chain and
/// without the URL.
pub(crate) fn connection_error(error: reqwest::Error, secret: Option<&Secret>) -> ProviderError {
    ProviderError::Connection {
        message: clean(&error_chain(error), secret),
    }
}

/// An error and its sources, joined with `: `, without the URL.
pub(crate) fn error_chain(error: reqwest::Error) -> String {
    let error = error.without_url();
    let mut message = error.to_string();
    let mut source = std::error::Error::source(&error);
    while let Some(cause) = source {
        let text = cause.to_string();
        if !message.contains(&text) {
            message.push_str(": ");
            message.push_str(&text);
        }
        source = cause.source();
    }
    message
}

/// Redact the key and bound the length.
fn clean(message: &str, secret: Option<&Secret>) -> String {
    let message = match secret {
        Some(secret) => secret.redact(message),
        None => message.to_owned(),
    };
    if message.len() <= MAX_MESSAGE {
        return message;
    }
    let mut end = MAX_MESSAGE;
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &message[..end])
}

/// `error` with the key redacted from whatever message it carries: the
/// last guard, applied to every error the transport yields.
pub(crate) fn redact_error(error: ProviderError, secret: Option<&Secret>) -> ProviderError {
    let Some(secret) = secret else {
        return error;
    };
    let redact = |message: String| secret.redact(&message);
    match error {
        ProviderError::RateLimited {
            message,
            retry_after,
        } => ProviderError::RateLimited {
            message: redact(message),
            retry_after,
        },
        ProviderError::Authentication { message } => ProviderError::Authentication {
            message: redact(message),
        },
        ProviderError::BadRequest {
            message,
            context_too_long,
        } => ProviderError::BadRequest {
            message: redact(message),
            context_too_long,
        },
        ProviderError::Server { status, message } => ProviderError::Server {
            status,
            message: redact(message),
        },
        ProviderError::Connection { message } => ProviderError::Connection {
            message: redact(message),
        },
        ProviderError::MalformedResponse { message } => ProviderError::MalformedResponse {
            message: redact(message),
        },
        other => other,
    }
}

/// The start of a payload, for error messages.
pub(crate) fn excerpt(text: &str) -> String {
    const MAX: usize = 200;
    if text.len() <= MAX {
        return text.to_owned();
    }
    let mut end = MAX;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &text[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openai_errors_keep_message_and_code() {
        let body = br#"{"error": {"message": "This model's maximum context length is 128000 tokens. However, your messages resulted in 130000 tokens.", "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}}"#;
        let error = error_for_status(400, "Bad Request", body, None, None);
        let ProviderError::BadRequest {
            message,
            context_too_long,
        } = error
        else {
            panic!("{error:?}")
        };
        assert!(context_too_long);
        assert!(message.starts_with(
            "context_length_exceeded: This model's maximum context length is 128000 tokens."
        ));
    }

    #[test]
    fn anthropic_errors_keep_message_and_type() {
        let body = br#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 208310 tokens > 200000 maximum"}}"#;
        assert_eq!(
            error_for_status(400, "Bad Request", body, None, None),
            ProviderError::BadRequest {
                message:
                    "invalid_request_error: prompt is too long: 208310 tokens > 200000 maximum"
                        .into(),
                context_too_long: true,
            }
        );
        let body =
            br#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;
        assert_eq!(
            error_for_status(529, "", body, None, None),
            ProviderError::Server {
                status: 529,
                message: "overloaded_error: Overloaded".into()
            }
        );
    }

    #[test]
    fn statuses_map_to_their_kinds() {
        let body = br#"{"error": {"message": "nope"}}"#;
        assert!(matches!(
            error_for_status(401, "", body, None, None),
            ProviderError::Authentication { .. }
        ));
        assert!(matches!(
            error_for_status(403, "", body, None, None),
            ProviderError::Authentication { .. }
        ));
        assert!(matches!(
            error_for_status(404, "", body, None, None),
            ProviderError::BadRequest {
                context_too_long: false,
                ..
            }
        ));
        assert_eq!(
            error_for_status(429, "", body, Some(Duration::from_secs(3)), None),
            ProviderError::RateLimited {
                message: "nope".into(),
                retry_after: Some(Duration::from_secs(3))
            }
        );
        assert!(matches!(
            error_for_status(502, "", body, None, None),
            ProviderError::Server { status: 502, .. }
        ));
    }

    #[test]
    fn loose_and_empty_bodies_still_give_a_message() {
        assert_eq!(
            details_from_body(br#"{"error": "model 'x' not found"}"#).message,
            "model 'x' not found"
        );
        assert_eq!(
            details_from_body(b"upstream timed out\n").message,
            "upstream timed out"
        );
        assert_eq!(
            error_for_status(503, "Service Unavailable", b"", None, None),
            ProviderError::Server {
                status: 503,
                message: "HTTP 503 Service Unavailable".into()
            }
        );
    }

    #[test]
    fn a_key_echoed_by_the_server_is_redacted() {
        let secret = Secret::new("sk-echoed-key-1");
        let body = br#"{"error": {"message": "Incorrect API key provided: sk-echoed-key-1."}}"#;
        let error = error_for_status(401, "", body, None, Some(&secret));
        assert!(!error.to_string().contains("sk-echoed-key-1"), "{error}");
        assert!(
            error
                .to_string()
                .contains("Incorrect API key provided: ****.")
        );
    }

    #[test]
    fn stream_error_types_map_to_kinds() {
        let details = |kind: &str| ErrorDetails {
            message: "m".into(),
            kind: Some(kind.into()),
            code: None,
        };
        assert!(matches!(
            error_for_details(&details("overloaded_error"), None),
            ProviderError::Server { status: 529, .. }
        ));
        assert!(matches!(
            error_for_details(&details("rate_limit_error"), None),
            ProviderError::RateLimited { .. }
        ));
        assert!(matches!(
            error_for_details(&details("invalid_request_error"), None),
            ProviderError::BadRequest { .. }
        ));
        assert!(matches!(
            error_for_details(&details("api_error"), None),
            ProviderError::Server { status: 500, .. }
        ));
    }

    #[test]
    fn long_messages_are_bounded() {
        let body = "é".repeat(5000);
        let error = error_for_status(500, "", body.as_bytes(), None, None);
        assert!(error.to_string().len() < 2100);
    }
}
