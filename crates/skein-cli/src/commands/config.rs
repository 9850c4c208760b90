/*!
`skein config path|show`: where the configuration file is, and every
setting in force with where it comes from.
*/

use super::common::context::{Globals, default_db_path};
use super::common::model::configured_engine;
use crate::config::{self, Source};
use crate::ui::outln;
use anyhow::Result;
use clap::Subcommand;
use serde_json::json;
use std::path::Path;
use std::process::ExitCode;

#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Print the configuration file's path
    Path,
    /// Print every setting in force and where it comes from
    Show,
}

pub fn run(globals: &Globals, command: ConfigCommand) -> Result<ExitCode> {
    let (db, json) = (globals.db.as_deref(), globals.json);
    let path = config::path()?;
    match command {
        ConfigCommand::Path => {
            if json {
                crate::ui::json(&json!({ "path": path, "exists": path.is_file() }))?;
            } else {
                outln!("{}", path.display())?;
            }
        }
        ConfigCommand::Show => {
            let (model, model_source) = config::default_model()?;
            let (db, db_source) = match db {
                Some(db)
                    if std::env::var_os("SKEIN_DB").is_some_and(|env| Path::new(&env) == db) =>
                {
                    (db.to_path_buf(), Source::Environment)
                }
                Some(db) => (db.to_path_buf(), Source::Flag),
                None => default_db_path()?,
            };
            // A PostgreSQL URL's password is never printed.
            let db = db.display().to_string();
            let db = match skein::store::location::is_postgres_url(&db) {
                true => skein::store::location::redact(&db),
                false => db,
            };
            let engine_dir = config::engine_dir()?;
            let catalog = configured_engine()?.map(|engine| engine.catalog().clone());
            let names = |list: Option<Vec<String>>| list.unwrap_or_default();
            let profiles = names(
                catalog
                    .as_ref()
                    .map(|c| c.profile_names().map(str::to_string).collect()),
            );
            let backends = names(
                catalog
                    .as_ref()
                    .map(|c| c.backend_names().map(str::to_string).collect()),
            );
            let prompts = names(
                catalog
                    .as_ref()
                    .map(|c| c.prompt_ids().map(str::to_string).collect()),
            );
            // The saved keys' names, never the keys.
            let key_file = skein::providers::http::keys::KeyFile::at(skein::config::keys_path()?);
            let saved: std::result::Result<Vec<String>, String> = key_file
                .load()
                .map(|keys| keys.into_keys().collect())
                .map_err(|error| error.to_string());
            if json {
                crate::ui::json(&json!({
                    "config_file": { "path": path, "exists": path.is_file() },
                    "keys": {
                        "path": key_file.path(),
                        "saved": saved.as_ref().ok(),
                        "error": saved.as_ref().err(),
                    },
                    "default_model": { "value": model, "source": model_source },
                    "db": { "value": db, "source": db_source },
                    "engine": engine_dir,
                    "profiles": profiles,
                    "backends": backends,
                    "prompts": prompts,
                }))?;
            } else {
                let from = |source: Source| match source {
                    Source::Flag => "from --db",
                    Source::Environment => "from the environment",
                    Source::ConfigFile => "from the configuration file",
                    Source::BuiltIn => "built in",
                };
                outln!(
                    "config file    {}{}",
                    path.display(),
                    if path.is_file() {
                        ""
                    } else {
                        " (not created yet)"
                    }
                )?;
                outln!("default model  {model} ({})", from(model_source))?;
                match &saved {
                    Ok(names) if names.is_empty() => outln!(
                        "keys file      {} (no keys saved)",
                        key_file.path().display()
                    )?,
                    Ok(names) => outln!(
                        "keys file      {} (saved: {})",
                        key_file.path().display(),
                        names.join(", ")
                    )?,
                    Err(error) => outln!("keys file      {error}")?,
                }
                outln!("database       {db} ({})", from(db_source))?;
                match engine_dir {
                    None => outln!(
                        "engine dir     none yet ({} once `skein prompt --save` or `skein aliases set` \
                         makes it; or set `engine` in the config file)",
                        skein::config::default_engine_dir()?.display()
                    )?,
                    Some(dir) => {
                        outln!("engine dir     {}", dir.display())?;
                        outln!("  profiles     {}", profiles.join(", "))?;
                        outln!("  backends     {}", backends.join(", "))?;
                        outln!("  prompts      {}", prompts.join(", "))?;
                    }
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
