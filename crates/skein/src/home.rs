/*!
Opening a model the way every surface that opens skein for a user does
(the command line, the web view and chat REPL it runs, and the Python
package): the name a flag or argument gives, else the default model
([`config::default_model`]: `SKEIN_MODEL`, the configuration file, the
built-in one); a profile of the configured engine directory when one has
that name, else a model name on an engine that also holds the directory's
profiles and prompts (a stored conversation may name a profile, `-t` a
prompt), or on an engine of its own when no directory is configured.
*/

use crate::config::{self, ConfigError};
use skein_conversation::Model;
use skein_engine::{Engine, EngineError, Tool};
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

/// Why a model could not be opened.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenModelError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(
        "the engine directory {} named in the configuration file does not exist: create it \
         (prompts/, profiles.toml, backends.toml) or remove the `engine` key",
        .dir.display()
    )]
    NoEngineDir { dir: PathBuf },
    #[error("the engine directory {}: {source}", .dir.display())]
    EngineDir { dir: PathBuf, source: EngineError },
    #[error(transparent)]
    Model(#[from] skein_conversation::Error),
    /// A name that is no model, close to a profile (or alias) of the
    /// engine directory.
    #[error("unknown model `{name}`; did you mean `{nearest}`, a profile of the engine directory?")]
    NearProfile { name: String, nearest: String },
}

/// The model `name` names, else the default one, with `tools` registered
/// (the surface's whole set: skein's built-in tools and its own).
pub fn open_model(name: Option<&str>, tools: Vec<Arc<dyn Tool>>) -> Result<Model, OpenModelError> {
    let name = match name {
        Some(name) => name.to_string(),
        None => config::default_model()?.0,
    };
    Ok(match configured_engine(tools.clone())? {
        Some(engine) if engine.catalog().find_profile(&name).is_some() => {
            Model::from_profile(engine, &name)?
        }
        Some(engine) => Model::open_in(engine.catalog(), &name, tools)
            .map_err(|error| near_profile(engine, &name, error))?,
        None => Model::open_with_tools(&name, tools)?,
    })
}

/// An unknown model name for which the providers know no better name but
/// which is a likely typo of one of the directory's profiles says so.
fn near_profile(engine: &Engine, name: &str, error: skein_conversation::Error) -> OpenModelError {
    use skein_providers::ResolveError;
    let unknown = matches!(
        &error,
        skein_conversation::Error::Model(ResolveError::UnknownModel { .. })
    );
    if unknown
        && skein_providers::suggest(name).is_none()
        && let Some(nearest) = skein_providers::nearest(name, engine.catalog().profile_names())
    {
        return OpenModelError::NearProfile {
            name: name.to_string(),
            nearest: nearest.to_string(),
        };
    }
    OpenModelError::Model(error)
}

/// The engine over the configured engine directory (its prompts, profiles
/// and backends), `None` when none is configured. Built once per process,
/// with the tools of the first call, so that every model of a profile
/// shares its admission limits.
pub fn configured_engine(
    tools: Vec<Arc<dyn Tool>>,
) -> Result<Option<&'static Engine>, OpenModelError> {
    static ENGINE: OnceLock<Option<Engine>> = OnceLock::new();
    if let Some(engine) = ENGINE.get() {
        return Ok(engine.as_ref());
    }
    let engine = match &config::get()?.engine_dir() {
        None => None,
        Some(dir) if !dir.is_dir() => {
            return Err(OpenModelError::NoEngineDir { dir: dir.clone() });
        }
        Some(dir) => {
            let failed = |source| OpenModelError::EngineDir {
                dir: dir.clone(),
                source,
            };
            let mut builder = Engine::builder(skein_engine::load_dir(dir).map_err(failed)?);
            for tool in tools {
                builder = builder.tool(tool);
            }
            Some(builder.build().map_err(failed)?)
        }
    };
    Ok(ENGINE.get_or_init(|| engine).as_ref())
}
