/*!
`skein inspect prompt|profile|backend NAME`: one of the engine directory's
prompts, profiles or backends (`engine = DIR` in the configuration file),
shown as configured.
*/

use super::common::configured::{cache_name, engine, find_prompt, prompt_id, unknown};
use super::common::context::{Globals, print_json};
use crate::ui::outln;
use anyhow::Result;
use clap::{Args, Subcommand};
use skein::engine::config::{CredentialSource, PromptDef};
use std::process::ExitCode;

#[derive(Debug, Subcommand)]
pub enum InspectCommand {
    /// A configured prompt: its messages (templates unrendered), variables, default profile,
    /// output contract and versions
    Prompt(InspectPromptArgs),
    /// A configured profile: its backend, model, options, credential source and repairs
    Profile(InspectNameArgs),
    /// A configured backend: its kind, where it is reached, its capacity
    Backend(InspectNameArgs),
}

#[derive(Debug, Args)]
pub struct InspectPromptArgs {
    /// The prompt's id (`ID@VERSION` for another version than the newest)
    pub id: String,
}

#[derive(Debug, Args)]
pub struct InspectNameArgs {
    /// Its name
    pub name: String,
}

/// `skein inspect prompt|profile|backend NAME`.
pub fn run(globals: &Globals, command: InspectCommand) -> Result<ExitCode> {
    let json = globals.json;
    let engine = engine()?;
    match command {
        InspectCommand::Prompt(args) => {
            let (id, version) = prompt_id(&args.id)?;
            find_prompt(&engine, id, version)?;
            let inspection = engine.inspect_prompt(id, version)?;
            if json {
                return print_json(&inspection);
            }
            show_prompt(&inspection.prompt, &inspection.versions)?;
        }
        InspectCommand::Profile(args) => {
            let profile = engine
                .inspect_profile(&args.name)
                .map_err(|_| unknown("profile", &args.name, engine.catalog().profile_names()))?;
            if json {
                return print_json(&profile);
            }
            outln!(
                "profile {} · backend {} · model {}",
                profile.name,
                profile.backend,
                profile.model
            )?;
            let options = serde_json::to_value(&profile.options)?;
            if options.as_object().is_some_and(|o| !o.is_empty()) {
                outln!("options: {options}")?;
            }
            let credential = match &profile.credential {
                CredentialSource::Default => engine
                    .catalog()
                    .find_backend(&profile.backend)
                    .and_then(|backend| backend.default_credential_variable())
                    .map_or_else(
                        || "default (none needed)".to_string(),
                        |variable| format!("default (${variable})"),
                    ),
                CredentialSource::None => "none".to_string(),
                CredentialSource::Env(variable) => format!("${variable}"),
                CredentialSource::Explicit => "explicit (given per request)".to_string(),
            };
            outln!("credential: {credential}")?;
            outln!("repair attempts: {}", profile.repair_attempts)?;
        }
        InspectCommand::Backend(args) => {
            let backend = engine
                .inspect_backend(&args.name)
                .map_err(|_| unknown("backend", &args.name, engine.catalog().backend_names()))?;
            if json {
                return print_json(&backend);
            }
            let mut kind = serde_json::to_value(&backend.backend.kind)?;
            let fields = kind.as_object_mut().map(std::mem::take).unwrap_or_default();
            let name = fields
                .get("kind")
                .and_then(|kind| kind.as_str())
                .unwrap_or("?")
                .to_string();
            outln!(
                "backend {} · kind {name} · capacity {} ({} free)",
                backend.backend.name,
                backend.backend.capacity,
                backend.available_permits
            )?;
            for (key, value) in fields.iter().filter(|(key, _)| *key != "kind") {
                match value {
                    serde_json::Value::Null => {}
                    serde_json::Value::String(text) => outln!("{key}: {text}")?,
                    other => outln!("{key}: {other}")?,
                }
            }
            if let Some(variable) = backend.backend.default_credential_variable() {
                outln!("key from: ${variable} (unless a profile says otherwise)")?;
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// A prompt as configured: its messages unrendered, with what fills them.
fn show_prompt(prompt: &PromptDef, versions: &[u32]) -> Result<()> {
    let versions: Vec<String> = versions.iter().map(u32::to_string).collect();
    outln!(
        "prompt {} · version {} (versions: {})",
        prompt.id,
        prompt.version,
        versions.join(", ")
    )?;
    if let Some(profile) = &prompt.default_profile {
        outln!("default profile: {profile}")?;
    }
    if let Some(session) = &prompt.session_id {
        outln!("session id: {session}")?;
    }
    for variable in &prompt.variables {
        let mut line = format!("variable {}", variable.name);
        match (&variable.default, variable.required) {
            (Some(default), _) => line.push_str(&format!(" (default {default})")),
            (None, true) => line.push_str(" (required)"),
            (None, false) => line.push_str(" (optional)"),
        }
        if let Some(description) = &variable.description {
            line.push_str(&format!(": {description}"));
        }
        outln!("{line}")?;
    }
    for (name, path) in &prompt.artifacts {
        outln!("artifact {name}: {}", path.display())?;
    }
    if let Some(contract) = &prompt.output_contract {
        outln!("output contract: {contract}")?;
    }
    for (index, message) in prompt.messages.iter().enumerate() {
        let cache = message
            .cache
            .map(|hint| format!(" · cache {}", cache_name(hint)))
            .unwrap_or_default();
        outln!("\n[{index}] {}{cache}", message.role)?;
        outln!("{}", message.template)?;
    }
    Ok(())
}
