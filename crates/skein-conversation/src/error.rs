/*!
The facade's error: one type for the async and the blocking forms of every
operation, so both behave (and fail) identically.
*/

use crate::response::Response;
use skein_core::ConversationId;
use skein_core::NodeId;
use skein_engine::EngineError;
use skein_providers::ResolveError;
use skein_store::StoreError;

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why a facade operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The model name did not resolve to a provider.
    #[error(transparent)]
    Model(#[from] ResolveError),
    /// The engine refused or failed the run.
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// A model call of a tool loop failed. The calls completed before it
    /// are part of the conversation (and recorded, when it has a store).
    #[error("{error} (the chain's {completed} completed model call(s) were kept)")]
    ChainFailed {
        error: EngineError,
        completed: usize,
    },
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The conversation's head moved while the turn ran (another task or
    /// process added a turn). The turn's response is kept here: fork from
    /// it to keep it as a branch.
    #[error(
        "conversation {conversation} moved on while this turn ran (its head is now {}); \
         the response is kept in this error: call `.fork()` on it to keep it as a branch",
        .current.map_or_else(|| "empty".to_string(), |node| node.short())
    )]
    HeadMoved {
        conversation: ConversationId,
        current: Option<NodeId>,
        response: Box<Response>,
    },
    /// A stored conversation names a tool the engine does not know.
    #[error(
        "conversation {conversation} uses tool `{tool}`, which is not registered with the engine \
         (registered: {}); register it with `EngineBuilder::tool` or `Model::open_with_tools`",
        if .registered.is_empty() { "none".to_string() } else { .registered.join(", ") }
    )]
    UnknownTool {
        conversation: ConversationId,
        tool: String,
        registered: Vec<String>,
    },
    /// An imported conversation names a model file: data from elsewhere
    /// never chooses which local file is loaded.
    #[error(
        "conversation {conversation} was imported with model `{model}`, which names a file on \
         this machine; skein opens such a file only when you name it: pass `-m {model}` if you \
         mean it, or choose another model with -m"
    )]
    StoredModelNamesAFile {
        conversation: ConversationId,
        model: String,
    },
    /// A stored conversation's model names a file by a relative path (as
    /// an older skein stored what was typed) that names no file from the
    /// working directory: it meant a file relative to the directory the
    /// conversation was recorded from, which is not known.
    #[error(
        "conversation {conversation} runs on `{model}`, whose path is relative to the directory \
         it was recorded from (skein now stores such paths absolute); from here it names {}, \
         which does not exist: continue it from that directory, or name the file with -m \
         {}:ABSOLUTE_PATH",
        .path.display(),
        .model.split_once(':').map_or("scripted", |(backend, _)| backend)
    )]
    StoredModelFileMissing {
        conversation: ConversationId,
        model: String,
        /// Where the relative path leads from the working directory.
        path: std::path::PathBuf,
    },
    /// A model name opened beside a configuration names one of its
    /// backends, of another kind, and no profile.
    #[error(
        "`{name}` names a configured backend of another kind, and no profile: it cannot also be \
         opened as a model name; add a profile named `{name}` to the engine directory, or rename \
         the backend"
    )]
    ModelNameTaken { name: String },
    /// A branch of a conversation was asked for at a node its thread does
    /// not hold.
    #[error(
        "node {node} is not in the history of conversation {conversation}: branch a \
         conversation only at one of its own messages"
    )]
    NotInConversation {
        node: NodeId,
        conversation: ConversationId,
    },
    /// A stored message was asked again in a way its role does not allow
    /// ([`Conversation::again_at`](crate::Conversation::again_at)).
    #[error("node {node} is a {role} message and cannot be asked again so: {why}")]
    CannotAskAgain {
        node: NodeId,
        role: &'static str,
        why: &'static str,
    },
    /// A blocking form was called inside an async runtime.
    #[error(
        "a blocking skein call was made inside an async runtime, where it would block the runtime; \
         use the async form (`.await`) there"
    )]
    InsideRuntime,
    #[error("cannot start a runtime for a blocking call: {0}")]
    Runtime(std::io::Error),
    /// What the surface supplies to open stored things
    /// ([`Home`](crate::Home)) failed: opening a model or starting what
    /// serves tools. Its own error, whole.
    #[error(transparent)]
    Surface(crate::home::SurfaceError),
    /// The model a caller chose by name could not be opened by its surface
    /// ([`Home::open`](crate::Home::open)). Its own error, whole.
    #[error(transparent)]
    ChosenModel(crate::home::SurfaceError),
}

impl From<crate::service::TurnError> for Error {
    fn from(error: crate::service::TurnError) -> Error {
        use crate::service::TurnError;
        match error {
            TurnError::Call(error) => Error::Engine(error),
            TurnError::Loop(failed) => Error::ChainFailed {
                completed: failed.completed.len(),
                error: failed.error,
            },
            TurnError::Store(error) => Error::Store(error),
        }
    }
}
