/*!
Rule actions: what a matching rule makes the model do, and the error kinds
an `error` action can produce.
*/

use super::template::{Slot, Template};
use crate::facts::RequestFacts;
use crate::reply::{Outcome, PlannedCall, Reply};
use skein_core::ProviderError;
use std::time::Duration;

/// What a rule does when it matches.
#[derive(Clone, Debug)]
pub(crate) enum Action {
    /// Answer with text.
    Reply(Template),
    /// Call tools, optionally with text first.
    ToolCalls {
        reply: Option<Template>,
        calls: Vec<PlannedCall>,
    },
    /// Fail the call.
    Error(ErrorSpec),
    /// Stream text, then stop without finishing the reply.
    Truncate(Template),
}

impl Action {
    /// The outcome for this request, or the slot a template could not fill.
    pub(crate) fn outcome(&self, facts: &RequestFacts<'_>) -> Result<Outcome, Slot> {
        Ok(match self {
            Action::Reply(template) => Outcome::Reply(Reply::text(template.render(facts)?)),
            Action::ToolCalls { reply, calls } => Outcome::Reply(Reply {
                text: match reply {
                    Some(template) => template.render(facts)?,
                    None => String::new(),
                },
                calls: calls.clone(),
            }),
            Action::Error(spec) => Outcome::Fail(spec.to_error()),
            Action::Truncate(template) => Outcome::Cut(template.render(facts)?),
        })
    }
}

/// The kinds an `error` action may name, each mapped onto a
/// [`ProviderError`] variant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ErrorKind {
    RateLimited,
    Authentication,
    BadRequest,
    ContextTooLong,
    Server,
    Timeout,
    Connection,
    Malformed,
    Scripted,
}

impl ErrorKind {
    pub(crate) const ALL: [ErrorKind; 9] = [
        ErrorKind::RateLimited,
        ErrorKind::Authentication,
        ErrorKind::BadRequest,
        ErrorKind::ContextTooLong,
        ErrorKind::Server,
        ErrorKind::Timeout,
        ErrorKind::Connection,
        ErrorKind::Malformed,
        ErrorKind::Scripted,
    ];

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            ErrorKind::RateLimited => "rate_limited",
            ErrorKind::Authentication => "authentication",
            ErrorKind::BadRequest => "bad_request",
            ErrorKind::ContextTooLong => "context_too_long",
            ErrorKind::Server => "server",
            ErrorKind::Timeout => "timeout",
            ErrorKind::Connection => "connection",
            ErrorKind::Malformed => "malformed",
            ErrorKind::Scripted => "scripted",
        }
    }

    pub(crate) fn parse(text: &str) -> Option<ErrorKind> {
        ErrorKind::ALL
            .into_iter()
            .find(|kind| kind.as_str() == text)
    }

    /// All kind names, for error messages.
    pub(crate) fn names() -> String {
        ErrorKind::ALL.map(ErrorKind::as_str).join(", ")
    }
}

/// A checked `error` action.
#[derive(Clone, Debug)]
pub(crate) struct ErrorSpec {
    pub(crate) kind: ErrorKind,
    pub(crate) message: String,
    pub(crate) retry_after_ms: Option<u64>,
    pub(crate) status: Option<u16>,
}

/// The status a `server` error has when the rule gives none.
pub(crate) const DEFAULT_SERVER_STATUS: u16 = 500;

impl ErrorSpec {
    pub(crate) fn to_error(&self) -> ProviderError {
        let message = self.message.clone();
        match self.kind {
            ErrorKind::RateLimited => ProviderError::RateLimited {
                message,
                retry_after: self.retry_after_ms.map(Duration::from_millis),
            },
            ErrorKind::Authentication => ProviderError::Authentication { message },
            ErrorKind::BadRequest => ProviderError::BadRequest {
                message,
                context_too_long: false,
            },
            ErrorKind::ContextTooLong => ProviderError::BadRequest {
                message,
                context_too_long: true,
            },
            ErrorKind::Server => ProviderError::Server {
                status: self.status.unwrap_or(DEFAULT_SERVER_STATUS),
                message,
            },
            ErrorKind::Timeout => ProviderError::Timeout { phase: message },
            ErrorKind::Connection => ProviderError::Connection { message },
            ErrorKind::Malformed => ProviderError::MalformedResponse { message },
            ErrorKind::Scripted => ProviderError::Scripted { message },
        }
    }
}
