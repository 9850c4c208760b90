/*!
Exit codes, documented in docs/cli.md:

| code | meaning |
|---|---|
| 0 | success |
| 1 | any other failure |
| 2 | the command line is wrong (printed by clap) |
| 3 | an id or prefix matches nothing, or several things; or there is no database where one must exist |
| 4 | the conversation moved while the turn ran (the turn is stored) |
| 5 | the model call failed (its failed run is recorded) |
| 6 | the data failed a check (`verify` found problems, an import was rejected) |
*/

use skein::engine::EngineError;
use skein::store::StoreError;

pub const FAILURE: u8 = 1;
pub const NOT_FOUND: u8 = 3;
pub const HEAD_MOVED: u8 = 4;
pub const MODEL_FAILED: u8 = 5;
pub const INTEGRITY: u8 = 6;

/// The exit code for an error, from the first typed cause in its chain.
pub fn code_for(error: &anyhow::Error) -> u8 {
    for cause in error.chain() {
        if let Some(error) = cause.downcast_ref::<skein::Error>() {
            return match error {
                skein::Error::Store(store) => store_code(store),
                skein::Error::HeadMoved { .. } => HEAD_MOVED,
                skein::Error::Model(_) | skein::Error::ChainFailed { .. } => MODEL_FAILED,
                skein::Error::Engine(engine) => engine_code(engine),
                _ => FAILURE,
            };
        }
        if let Some(store) = cause.downcast_ref::<StoreError>() {
            return store_code(store);
        }
        if cause
            .downcast_ref::<skein::providers::ResolveError>()
            .is_some()
        {
            return MODEL_FAILED;
        }
        if let Some(code) = cause.downcast_ref::<ExitWith>() {
            return code.0;
        }
    }
    FAILURE
}

fn engine_code(error: &EngineError) -> u8 {
    match error {
        EngineError::Generation { .. }
        | EngineError::Validation { .. }
        | EngineError::BackendUnavailable { .. }
        | EngineError::CredentialVariableUnset { .. } => MODEL_FAILED,
        _ => FAILURE,
    }
}

fn store_code(store: &StoreError) -> u8 {
    {
        {
            match store {
                StoreError::NodeNotFound(_)
                | StoreError::ConversationNotFound(_)
                | StoreError::RunNotFound(_)
                | StoreError::UnknownPrefix { .. }
                | StoreError::AmbiguousPrefix { .. }
                | StoreError::NotAnId(_)
                | StoreError::NoDatabase { .. } => NOT_FOUND,
                StoreError::HeadMoved(_) => HEAD_MOVED,
                StoreError::Import { .. }
                | StoreError::LineTooLong { .. }
                | StoreError::Corrupt { .. }
                | StoreError::MalformedRow(_) => INTEGRITY,
                _ => FAILURE,
            }
        }
    }
}

/// An error that carries its own exit code.
#[derive(Debug)]
pub struct ExitWith(pub u8, pub String);

impl std::fmt::Display for ExitWith {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.1)
    }
}

impl std::error::Error for ExitWith {}
