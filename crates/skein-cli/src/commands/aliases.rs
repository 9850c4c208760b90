/*!
`skein aliases set|list|remove`: short names for models and profiles, as
`llm`'s aliases are. Each alias is a profile of the engine directory
(`profiles/aliases.toml`, see `common::engine_dir`), so `-m ALIAS`, a
template's model and a conversation recorded on it all find it as they
find any profile. An alias of a model name runs that model on a backend
named by the name; an alias of a profile copies it (backend, model,
options, credential) under the short name.
*/

use super::common::context::{Globals, print_json};
use super::common::engine_dir::{EngineDir, describe, needs_key};
use crate::ui::outln;
use anyhow::Result;
use clap::{Args, Subcommand};
use serde_json::json;
use std::process::ExitCode;

#[derive(Debug, Subcommand)]
pub enum AliasesCommand {
    /// Make NAME stand for a model name or a profile (`skein aliases set 4o openai:gpt-4o-mini`)
    Set(AliasSetArgs),
    /// List the aliases with the model each stands for
    List,
    /// Remove an alias
    Remove(AliasNameArgs),
}

#[derive(Debug, Args)]
pub struct AliasSetArgs {
    /// The alias
    pub name: String,
    /// The model name or profile it stands for
    pub model: String,
}

#[derive(Debug, Args)]
pub struct AliasNameArgs {
    /// The alias
    pub name: String,
}

pub fn run(globals: &Globals, command: AliasesCommand) -> Result<ExitCode> {
    let dir = EngineDir::located()?;
    match command {
        AliasesCommand::Set(args) => {
            let alias = dir.set_alias(&args.name, &args.model)?;
            let catalog = dir.catalog()?;
            let stands_for = describe(&catalog, &alias.profile);
            if globals.json {
                return print_json(&json!({
                    "alias": alias.name,
                    "model": stands_for,
                    "profile": alias.profile,
                }));
            }
            outln!("{} → {stands_for}", alias.name)?;
            Ok(ExitCode::SUCCESS)
        }
        AliasesCommand::Remove(args) => {
            dir.remove_alias(&args.name)?;
            if globals.json {
                return print_json(&json!({ "removed": args.name }));
            }
            crate::ui::note(format!("alias {} removed", args.name));
            Ok(ExitCode::SUCCESS)
        }
        AliasesCommand::List => {
            let catalog = dir.catalog()?;
            let aliases = dir.aliases()?;
            if globals.json {
                let rows: Vec<_> = aliases
                    .iter()
                    .map(|alias| {
                        json!({
                            "alias": alias.name,
                            "model": describe(&catalog, &alias.profile),
                            "needs_key": needs_key(&catalog, &alias.profile),
                        })
                    })
                    .collect();
                return print_json(&json!({ "aliases": rows }));
            }
            if aliases.is_empty() {
                crate::ui::note("no aliases: set one with `skein aliases set NAME MODEL`");
            }
            for alias in &aliases {
                outln!("{:<16} {}", alias.name, describe(&catalog, &alias.profile))?;
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}
