/*!
The engine's error type: one variant per way a run can fail, each carrying
what the caller needs to act (the variable to set, the file and key that did
not load, the last candidate and its validation errors).
*/

use crate::exchange::Exchange;
use crate::observe::RunId;
use skein_core::ProviderError;
use std::path::PathBuf;

pub type Result<T, E = EngineError> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EngineError {
    /// The request itself is inconsistent (no prompt and no messages, an
    /// unknown variable, an unknown prompt...).
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    /// Neither the request nor its prompt names a profile.
    #[error(
        "no profile for this run: pass one with the request, or give the prompt a default_profile \
         (known profiles: {})", .known.join(", ")
    )]
    ProfileRequired { known: Vec<String> },
    /// The profile's credential variable is not set, and the key file
    /// holds no key for it.
    #[error(
        "the environment variable {variable} is not set: export {variable}=<your key>, or save the key \
         with `skein keys set {}` (profile `{profile}`)",
        skein_providers::http::keys::stored_name(.variable)
    )]
    CredentialVariableUnset { variable: String, profile: String },
    /// The profile needs an explicit credential and the request has none.
    #[error("profile `{profile}` needs a credential passed with the request")]
    CredentialRequired { profile: String },
    /// A prompt file, or the named prompt, could not be loaded.
    #[error("cannot load prompt {}: {problem}", location(.file, .key))]
    PromptLoad {
        file: Option<PathBuf>,
        key: Option<String>,
        problem: String,
    },
    /// A profile or backend could not be loaded or found.
    #[error("cannot load profile {}: {problem}", location(.file, .key))]
    ProfileLoad {
        file: Option<PathBuf>,
        key: Option<String>,
        problem: String,
    },
    /// A named artifact's file could not be read.
    #[error("cannot read artifact `{name}` of prompt `{prompt}` from {}: {error}", .path.display())]
    ArtifactLoad {
        prompt: String,
        name: String,
        path: PathBuf,
        error: std::io::Error,
    },
    /// A template failed to render (for example it uses an undeclared variable).
    #[error("cannot render {what}: {message}")]
    Render { what: String, message: String },
    /// The output contract itself is not a valid JSON Schema.
    #[error("the output contract is not a valid JSON Schema: {0}")]
    InvalidContract(String),
    /// The model call failed.
    #[error("generation failed (run {run}): {error}")]
    Generation { run: RunId, error: ProviderError },
    /// The reply never satisfied the output contract. Carries the last
    /// candidate, its errors, and (when capture was asked for) an exchange
    /// ending with that candidate, marked as not validated.
    #[error("the reply did not satisfy the output contract after {attempts} attempts (run {run}): {}", .errors.join("; "))]
    Validation {
        run: RunId,
        attempts: u32,
        candidate: String,
        errors: Vec<String>,
        exchange: Option<Box<Exchange>>,
    },
    /// The backend is at capacity and the request asked not to wait.
    #[error(
        "backend `{backend}` is at capacity ({capacity} runs); retry later or let the run wait"
    )]
    Capacity { backend: String, capacity: usize },
    /// The run was cancelled. When its model call had started, `run` is
    /// its id (its record is kept, marked cancelled: see
    /// [`Prepared::failed_record`](crate::Prepared::failed_record)) and
    /// `partial` the reply text the model had produced by then (empty when
    /// none, or when the call had not started).
    #[error("the run was cancelled")]
    Cancelled { run: Option<RunId>, partial: String },
    /// The request would send a message whose content was erased
    /// (`skein redact`): only its digest is left, and no model is sent a
    /// stand-in unasked ([`crate::erased`]). (A library caller chooses a
    /// placeholder for one request with
    /// [`Request::erased_placeholder`](crate::Request::erased_placeholder);
    /// the message, which every surface shows, names no Rust API.)
    #[error(
        "message {} was erased ({reason}): its content cannot be sent to a model; continue from a \
         message before it instead (e.g. `skein fork` at its parent), or choose a placeholder to \
         send in its place: `erased_placeholder = \"[erased]\"` under `[privacy]` in the \
         configuration file", .node.short()
    )]
    ErasedContent {
        node: skein_core::NodeId,
        reason: String,
    },
    /// The request holds an attachment the model cannot take (checked
    /// before any call, so no run is recorded).
    #[error(
        "`{model}` cannot take the `{media_type}` attachment in message {position} (it takes {accepts}): \
         use a model that takes it, or leave it out"
    )]
    AttachmentRefused {
        model: String,
        media_type: String,
        /// The message's position in the request thread, from 0.
        position: usize,
        accepts: skein_core::AttachmentSupport,
    },
    /// The backend could not be built (a missing model file, a script that
    /// does not load...).
    #[error("backend `{backend}` is unavailable: {message}")]
    BackendUnavailable { backend: String, message: String },
}

fn location(file: &Option<PathBuf>, key: &Option<String>) -> String {
    match (file, key) {
        (Some(file), Some(key)) => format!("{} (key `{key}`)", file.display()),
        (Some(file), None) => file.display().to_string(),
        (None, Some(key)) => format!("`{key}`"),
        (None, None) => "(in code)".to_string(),
    }
}
