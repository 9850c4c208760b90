/*!
Model names to providers: [`resolve`] and its table of backends.

A model name is `BACKEND` or `BACKEND:ARGUMENT`. Each backend is one row of
`BACKENDS`: its name, the syntax shown to users, whether it takes an
argument, and a constructor. Adding a backend is adding a row.

| name | provider |
|---|---|
| `echo` | [`crate::Echo`] |
| `scripted:PATH` | [`crate::Scripted`] loaded from the rule file at `PATH` |
*/

use crate::{Echo, ScriptError, Scripted};
use skein_core::Provider;
use std::sync::Arc;

/// Why a model name does not resolve to a provider.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ResolveError {
    #[error("unknown model `{model}`; available: {}", .available.join(", "))]
    UnknownModel {
        model: String,
        /// The syntax of every available backend.
        available: Vec<&'static str>,
    },
    #[error("model `{model}` needs an argument: write `{syntax}`")]
    MissingArgument { model: String, syntax: &'static str },
    /// The scripted backend's rule file did not load (boxed: it is large).
    #[error(transparent)]
    Script(Box<ScriptError>),
}

impl From<ScriptError> for ResolveError {
    fn from(error: ScriptError) -> ResolveError {
        ResolveError::Script(Box::new(error))
    }
}

/// One backend a model name can select.
struct Backend {
    name: &'static str,
    syntax: &'static str,
    takes_argument: bool,
    build: fn(argument: &str) -> Result<Arc<dyn Provider>, ResolveError>,
}

const BACKENDS: &[Backend] = &[
    Backend {
        name: "echo",
        syntax: "echo",
        takes_argument: false,
        build: |_| Ok(Arc::new(Echo)),
    },
    Backend {
        name: "scripted",
        syntax: "scripted:PATH",
        takes_argument: true,
        build: |path| Ok(Arc::new(Scripted::from_file(path)?)),
    },
];

/// The syntax of every model name [`resolve`] accepts.
pub fn available() -> Vec<&'static str> {
    BACKENDS.iter().map(|backend| backend.syntax).collect()
}

/// The provider for a model name (`echo`, `scripted:PATH`).
pub fn resolve(model: &str) -> Result<Arc<dyn Provider>, ResolveError> {
    let (name, argument) = match model.split_once(':') {
        Some((name, argument)) => (name, Some(argument)),
        None => (model, None),
    };
    let unknown = || ResolveError::UnknownModel {
        model: model.to_owned(),
        available: available(),
    };
    let backend = BACKENDS
        .iter()
        .find(|backend| backend.name == name)
        .ok_or_else(unknown)?;
    match (backend.takes_argument, argument) {
        (true, Some(argument)) if !argument.is_empty() => (backend.build)(argument),
        (true, _) => Err(ResolveError::MissingArgument {
            model: model.to_owned(),
            syntax: backend.syntax,
        }),
        (false, None) => (backend.build)(""),
        (false, Some(_)) => Err(unknown()),
    }
}
