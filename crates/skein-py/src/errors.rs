/*!
Rust errors as Python exceptions: each variant of skein's error enums maps
to one class of `skein._errors` (where the hierarchy and its documentation
live), with the Rust error's whole message (the provider's own message
included) and the variant's fields as attributes.
*/

use crate::response::Response;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use skein::core::ProviderError;
use skein::engine::EngineError;
use skein::providers::ResolveError;
use skein::recorded::RecordedError;
use skein::store::StoreError;

/// An exception of class `class` with `message` and `attributes`.
fn raise(py: Python<'_>, class: &str, message: String, attributes: Bound<'_, PyDict>) -> PyErr {
    let made = py
        .import("skein._errors")
        .and_then(|module| module.getattr("_raise"))
        .and_then(|make| make.call1((class, message.clone(), attributes)));
    match made {
        Ok(error) => PyErr::from_value(error),
        // The package is damaged: still say what failed.
        Err(_) => pyo3::exceptions::PyRuntimeError::new_err(message),
    }
}

/// The exception for a configuration file that cannot be read (a
/// `SkeinError` with the file named in its message).
pub fn config_error(py: Python<'_>, error: &skein::config::ConfigError) -> PyErr {
    raise(py, "SkeinError", error.to_string(), PyDict::new(py))
}

/// The exception for a turn-layer error.
pub fn conversation_error(py: Python<'_>, error: &skein::Error) -> PyErr {
    let message = error.to_string();
    match error {
        skein::Error::Model(error) => resolve_error(py, error),
        skein::Error::Engine(error) => engine_error(py, error, message, None),
        skein::Error::ChainFailed { error, completed } => {
            engine_error(py, error, message, Some(*completed))
        }
        skein::Error::Store(error) => store_error(py, error, message),
        // The package's own failure to open a model, raised as it always is.
        skein::Error::Surface(failed) | skein::Error::ChosenModel(failed) => {
            match failed
                .get_ref()
                .downcast_ref::<skein::home::OpenModelError>()
            {
                Some(error) => error.to_py(py),
                None => raise(py, "SkeinError", message, PyDict::new(py)),
            }
        }
        skein::Error::HeadMoved {
            conversation,
            current,
            response,
        } => {
            let attributes = PyDict::new(py);
            let _ = attributes.set_item("conversation_id", conversation.as_str());
            let _ = attributes.set_item("current", current.map(|node| node.to_hex()));
            if let Ok(response) = Py::new(py, Response::done((**response).clone())) {
                let _ = attributes.set_item("response", response);
            }
            raise(py, "HeadMoved", message, attributes)
        }
        skein::Error::UnknownTool {
            tool, registered, ..
        } => {
            let attributes = PyDict::new(py);
            let _ = attributes.set_item("tool", tool);
            let _ = attributes.set_item("registered", registered.clone());
            raise(py, "UnknownTool", message, attributes)
        }
        skein::Error::StoredModelNamesAFile { .. } => {
            raise(py, "StoredModelNamesAFile", message, PyDict::new(py))
        }
        _ => raise(py, "SkeinError", message, PyDict::new(py)),
    }
}

/// The exception for a model name that does not open.
pub fn resolve_error(py: Python<'_>, error: &ResolveError) -> PyErr {
    let class = match error {
        ResolveError::UnknownModel { .. } | ResolveError::MissingArgument { .. } => "UnknownModel",
        _ => "ModelUnavailable",
    };
    raise(py, class, error.to_string(), PyDict::new(py))
}

/// The exception for an engine error; `completed` when it ended a chain.
fn engine_error(
    py: Python<'_>,
    error: &EngineError,
    message: String,
    completed: Option<usize>,
) -> PyErr {
    let attributes = PyDict::new(py);
    if let Some(completed) = completed {
        let _ = attributes.set_item("completed", completed);
    }
    let class = match error {
        EngineError::Generation { run, error } => {
            let _ = attributes.set_item("run_id", run.to_string());
            provider_fields(&attributes, error);
            "ModelError"
        }
        EngineError::Validation {
            run,
            attempts,
            candidate,
            errors,
            ..
        } => {
            let _ = attributes.set_item("run_id", run.to_string());
            let _ = attributes.set_item("attempts", attempts);
            let _ = attributes.set_item("candidate", candidate);
            let _ = attributes.set_item("errors", errors.clone());
            "SchemaError"
        }
        EngineError::Capacity { .. } => "CapacityError",
        EngineError::Cancelled { .. } => "Cancelled",
        EngineError::BackendUnavailable { .. } => "ModelUnavailable",
        _ => "EngineError",
    };
    raise(py, class, message, attributes)
}

/// `kind`, `status` and `provider_message` of a provider's error.
fn provider_fields(attributes: &Bound<'_, PyDict>, error: &ProviderError) {
    let (kind, status, message): (&str, Option<u16>, Option<&str>) = match error {
        ProviderError::RateLimited { message, .. } => ("rate_limited", Some(429), Some(message)),
        ProviderError::Authentication { message } => ("authentication", None, Some(message)),
        ProviderError::BadRequest { message, .. } => ("bad_request", None, Some(message)),
        ProviderError::Server { status, message } => ("server", Some(*status), Some(message)),
        ProviderError::Timeout { .. } => ("timeout", None, None),
        ProviderError::Connection { message } => ("connection", None, Some(message)),
        ProviderError::MalformedResponse { message } => ("malformed_response", None, Some(message)),
        ProviderError::TruncatedStream => ("truncated_stream", None, None),
        ProviderError::Cancelled => ("cancelled", None, None),
        ProviderError::ModelUnavailable { hint, .. } => ("model_unavailable", None, Some(hint)),
        ProviderError::Backend { message } => ("backend", None, Some(message)),
        ProviderError::Scripted { message } => ("scripted", None, Some(message)),
        ProviderError::ReplyTooLong { .. } => ("reply_too_long", None, None),
        ProviderError::ReplyTooSlow { .. } => ("reply_too_slow", None, None),
        _ => ("unknown", None, None),
    };
    let _ = attributes.set_item("kind", kind);
    let _ = attributes.set_item("status", status);
    let _ = attributes.set_item("provider_message", message);
}

/// The exception for a store error.
pub fn store_error(py: Python<'_>, error: &StoreError, message: String) -> PyErr {
    let class = match error {
        StoreError::HeadMoved(moved) => {
            let attributes = PyDict::new(py);
            let _ = attributes.set_item("conversation_id", &moved.conversation);
            let _ = attributes.set_item("current", moved.actual.map(|node| node.to_hex()));
            return raise(py, "HeadMoved", message, attributes);
        }
        StoreError::NodeNotFound(_)
        | StoreError::ConversationNotFound(_)
        | StoreError::RunNotFound(_)
        | StoreError::RerunNotFound(_)
        | StoreError::ReplayNotFound(_)
        | StoreError::UnknownPrefix { .. }
        | StoreError::NotAnId(_) => "NotFound",
        StoreError::AmbiguousPrefix { .. } | StoreError::AmbiguousName { .. } => "AmbiguousId",
        StoreError::NameLooksLikeId(_) => "NameLooksLikeId",
        StoreError::NameTaken { name, by } => {
            let attributes = PyDict::new(py);
            let _ = attributes.set_item("name", name);
            let _ = attributes.set_item("conversation_id", by);
            return raise(py, "NameTaken", message, attributes);
        }
        _ => "StoreError",
    };
    raise(py, class, message, PyDict::new(py))
}

/// The exception for a recorded-chat error.
pub fn recorded_error(py: Python<'_>, error: &RecordedError) -> PyErr {
    let message = error.to_string();
    let class = match error {
        RecordedError::Engine(engine) => return engine_error(py, engine, message, None),
        RecordedError::Store(store) => return store_error(py, store, message),
        RecordedError::Conversation(error) => return conversation_error(py, error),
        RecordedError::TurnOutOfRange { .. } => "TurnOutOfRange",
        RecordedError::NotATurn(_) => "NotATurn",
        RecordedError::Paused { .. } => "TurnPaused",
        RecordedError::ChainLimit { .. } => "ChainLimitReached",
        RecordedError::Hook { .. } => "SourceHookError",
        RecordedError::Embed(_) => "EmbedError",
        RecordedError::NoEmbedder(_) => "NoEmbedder",
        RecordedError::NothingToIgnore { .. } => "NothingToIgnore",
        RecordedError::UnknownSource { .. } => "UnknownSource",
        RecordedError::BeyondCap { .. } => "BeyondCap",
        RecordedError::TooFewSamples(_) => "TooFewSamples",
        RecordedError::Provenance { .. } => "ProvenanceError",
        RecordedError::NoStore(_) => "NoStore",
        RecordedError::NotRecorded { .. } => "NotRecorded",
        _ => "RecordedChatError",
    };
    raise(py, class, message, PyDict::new(py))
}

/// Turns a Rust error into the Python exception for it.
pub trait ToPyErr {
    fn to_py(&self, py: Python<'_>) -> PyErr;
}

impl ToPyErr for skein::Error {
    fn to_py(&self, py: Python<'_>) -> PyErr {
        conversation_error(py, self)
    }
}

impl ToPyErr for skein::home::OpenModelError {
    fn to_py(&self, py: Python<'_>) -> PyErr {
        match self {
            skein::home::OpenModelError::Model(error) => conversation_error(py, error),
            skein::home::OpenModelError::Config(error) => config_error(py, error),
            other => raise(py, "SkeinError", other.to_string(), PyDict::new(py)),
        }
    }
}

impl ToPyErr for RecordedError {
    fn to_py(&self, py: Python<'_>) -> PyErr {
        recorded_error(py, self)
    }
}

impl ToPyErr for StoreError {
    fn to_py(&self, py: Python<'_>) -> PyErr {
        store_error(py, self, self.to_string())
    }
}

impl ToPyErr for ResolveError {
    fn to_py(&self, py: Python<'_>) -> PyErr {
        resolve_error(py, self)
    }
}

/// `result` with its error raised as the Python exception for it.
pub fn check<T, E: ToPyErr>(py: Python<'_>, result: Result<T, E>) -> PyResult<T> {
    result.map_err(|error| error.to_py(py))
}
