/*!
The model a command runs on and the key it calls it with: `-m`
([`ModelArgs`]) and `--key` ([`KeyArgs`]), shared by the commands that run
turns and by `serve`, and how every command opens a model (the default
model, a conversation's own, the configured engine directory's profiles).
*/

use anyhow::Result;
use clap::Args;
use skein::Model;
use skein::providers::http::Secret;
use skein::providers::http::keys::{self, KeyFile};

/// How a turn is run: shared by every command that runs one.
#[derive(Debug, Args)]
pub struct ModelArgs {
    /// The model: `smollm2` (the embedded default; `SKEIN_MODEL` changes the default), `local:PATH`,
    /// `openai:MODEL`, `anthropic:MODEL`, `echo`, `scripted:PATH` (`skein models list` shows them all)
    #[arg(short, long, value_name = "MODEL")]
    pub model: Option<String>,
}

/// The key of a command that calls models: shared by the turn commands and
/// `serve`.
#[derive(Debug, Args)]
pub struct KeyArgs {
    /// The API key for this command's model calls, or the name of a saved key (`skein keys`);
    /// instead of the environment and the key file
    #[arg(long, value_name = "KEY|NAME")]
    pub key: Option<String>,
}

impl KeyArgs {
    /// Use the key `--key` gives (a saved key's name, else the key itself)
    /// for this command's model calls, before any model is opened.
    pub fn use_for_this_command(&self) -> Result<()> {
        let (Some(given), Ok(path)) = (&self.key, skein::config::keys_path()) else {
            // No configuration directory: no key file either, and `--key`
            // is not looked up.
            return Ok(());
        };
        let key = match KeyFile::at(path).get(given)? {
            Some(saved) => saved,
            None => Secret::new(given),
        };
        keys::use_key_for_command(key);
        Ok(())
    }
}

/// Tell the providers where saved keys are (`keys.json` beside the
/// configuration file), before any model is opened.
pub fn use_key_file() {
    if let Ok(path) = skein::config::keys_path() {
        keys::use_key_file(KeyFile::at(path));
    }
}

/// The model used when neither `-m` nor the conversation names one:
/// `SKEIN_MODEL`, else the configuration file's, else the embedded SmolLM2.
pub fn default_model() -> Result<String> {
    Ok(crate::config::default_model()?.0)
}

/// The model a turn runs on: the one `-m` names, else the one `stored`
/// was recorded with, else the default.
pub fn turn_model(
    model: Option<&str>,
    stored: Option<&skein::store::ConversationRecord>,
) -> Result<Model> {
    match (model, stored) {
        (Some(name), _) => home_model(Some(name.to_string())),
        (None, Some(stored)) => Ok(Model::of_conversation(stored, &stored_home(stored)?)?),
        (None, None) => home_model(None),
    }
}

/// The model to look a stored conversation's own model up from (the
/// `home` of [`Model::of_conversation`] and the library's loads), opening
/// the default model only when the conversation needs it: a conversation
/// that names its model (one that is not the default) is looked up from
/// that model opened as the library would open it, and one that names a
/// profile from that profile of the configured engine. So going on with a
/// conversation recorded on `echo` never opens (or needs) the embedded
/// default. An imported conversation naming a local file gets the default,
/// so the library's refusal of it stands.
pub fn stored_home(stored: &skein::store::ConversationRecord) -> Result<Model> {
    Model::check_stored_file(stored)?;
    let Some(name) = Model::home_name_of(stored, &default_model()?) else {
        return home_model(None);
    };
    if stored.settings.profile.as_deref() == Some(name) {
        if let Some(engine) = configured_engine()?
            && engine.catalog().find_profile(name).is_some()
        {
            return Ok(Model::from_profile(&engine, name)?);
        }
        return home_model(None);
    }
    Model::open_with_tools(name, super::tools::registered()?).map_err(|error| {
        let unknown = matches!(
            error,
            skein::Error::Model(
                skein::providers::ResolveError::UnknownModel { .. }
                    | skein::providers::ResolveError::MissingArgument { .. }
            )
        );
        let error = anyhow::Error::new(error);
        match unknown {
            true => error.context(format!(
                "conversation {} runs on `{name}`{}, which skein cannot open: continue \
                 it on another model with -m MODEL",
                stored.id.short(),
                if stored.imported {
                    " (as imported)"
                } else {
                    ""
                }
            )),
            false => error,
        }
    })
}

/// The model named on the command line, else the default, as every
/// surface opens one ([`skein::home::open_model`]), with the command's
/// tools registered.
pub fn home_model(name: Option<String>) -> Result<Model> {
    Ok(skein::home::open_model(
        name.as_deref(),
        super::tools::registered()?,
    )?)
}

/// The engine over the configured engine directory (prompts, profiles,
/// backends), built once.
pub fn configured_engine() -> Result<Option<skein::Engine>> {
    Ok(skein::home::configured_engine(super::tools::registered()?)?.cloned())
}
