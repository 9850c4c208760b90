/*!
`skein templates list|show|edit|path`: the templates `prompt --save`
writes, which are the engine directory's configured prompts (see
`common::engine_dir`), whoever wrote them. `edit` opens one in `$VISUAL` or
`$EDITOR` and checks the directory still loads afterwards.
*/

use super::common::configured::prompt_id;
use super::common::context::{Globals, print_json};
use super::common::engine_dir::EngineDir;
use crate::ui::outln;
use anyhow::{Result, anyhow, bail};
use clap::{Args, Subcommand};
use serde_json::json;
use std::process::ExitCode;

#[derive(Debug, Subcommand)]
pub enum TemplatesCommand {
    /// List the templates (the engine directory's prompts) with their versions and files
    List,
    /// Print a template's file (`NAME@VERSION` for another version than the newest)
    Show(TemplateNameArgs),
    /// Open a template's file in $VISUAL or $EDITOR, then check that it still loads
    Edit(TemplateNameArgs),
    /// Print the directory templates are saved in
    Path,
}

#[derive(Debug, Args)]
pub struct TemplateNameArgs {
    /// The template: NAME, or NAME@VERSION
    pub name: String,
}

pub fn run(globals: &Globals, command: TemplatesCommand) -> Result<ExitCode> {
    let dir = EngineDir::located()?;
    match command {
        TemplatesCommand::Path => match globals.json {
            true => print_json(&json!({ "path": dir.prompts() })),
            false => {
                outln!("{}", dir.prompts().display())?;
                Ok(ExitCode::SUCCESS)
            }
        },
        TemplatesCommand::List => list(&dir, globals.json),
        TemplatesCommand::Show(args) => {
            let (id, version) = prompt_id(&args.name)?;
            let file = dir.prompt_file(id, version)?;
            let text = std::fs::read_to_string(&file.path)
                .map_err(|error| anyhow!("cannot read {}: {error}", file.path.display()))?;
            if globals.json {
                return print_json(&json!({
                    "template": file.id,
                    "version": file.version,
                    "file": file.path,
                    "text": text,
                }));
            }
            outln!("{}", text.trim_end_matches('\n'))?;
            Ok(ExitCode::SUCCESS)
        }
        TemplatesCommand::Edit(args) => {
            let (id, version) = prompt_id(&args.name)?;
            let file = dir.prompt_file(id, version)?;
            edit(&file.path)?;
            if let Err(error) = skein::engine::load_dir(&dir.root) {
                bail!(
                    "{} no longer loads: {error}; run `skein templates edit {}` again to fix it",
                    file.path.display(),
                    args.name
                );
            }
            crate::ui::note(format!("{} saved and checked", file.path.display()));
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn list(dir: &EngineDir, json: bool) -> Result<ExitCode> {
    let catalog = dir.catalog()?;
    let files = dir.prompt_files()?;
    let mut ids: Vec<&str> = files.iter().map(|file| file.id.as_str()).collect();
    ids.dedup();
    let rows: Vec<serde_json::Value> = ids
        .iter()
        .map(|id| {
            let versions: Vec<u32> = files
                .iter()
                .filter(|file| file.id == *id)
                .map(|file| file.version)
                .collect();
            let newest = files.iter().rfind(|file| file.id == *id);
            let prompt = catalog.find_prompt(id, None);
            json!({
                "name": id,
                "versions": versions,
                "file": newest.map(|file| &file.path),
                "profile": prompt.and_then(|p| p.default_profile.clone()),
                "variables": prompt.map(|p| p.variables.iter().map(|v| v.name.clone()).collect::<Vec<_>>()),
            })
        })
        .collect();
    if json {
        return print_json(&json!({ "path": dir.prompts(), "templates": rows }));
    }
    if rows.is_empty() {
        crate::ui::note(format!(
            "no templates in {}: save one with `skein prompt … --save NAME`",
            dir.prompts().display()
        ));
    }
    for row in rows {
        let list = |key: &str| {
            row[key]
                .as_array()
                .map(|items| {
                    items
                        .iter()
                        .map(|item| item.to_string().trim_matches('"').to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                })
                .unwrap_or_default()
        };
        let mut line = format!(
            "{:<16} version {}",
            row["name"].as_str().unwrap_or_default(),
            list("versions")
        );
        if let Some(profile) = row["profile"].as_str() {
            line.push_str(&format!(" · profile {profile}"));
        }
        let variables = list("variables");
        if !variables.is_empty() {
            line.push_str(&format!(" · variables {variables}"));
        }
        outln!("{line}")?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Open `path` in the user's editor (`$VISUAL`, else `$EDITOR`, else `vi`;
/// the variable may hold arguments, split at spaces) and wait for it.
fn edit(path: &std::path::Path) -> Result<()> {
    let editor = ["VISUAL", "EDITOR"]
        .iter()
        .find_map(|name| std::env::var(name).ok().filter(|v| !v.trim().is_empty()))
        .unwrap_or_else(|| "vi".to_string());
    let mut words = editor.split_whitespace();
    let program = words.next().unwrap_or("vi");
    let status = std::process::Command::new(program)
        .args(words)
        .arg(path)
        .status()
        .map_err(|error| {
            anyhow!("cannot start the editor `{program}` ($VISUAL or $EDITOR): {error}")
        })?;
    if !status.success() {
        bail!(
            "the editor `{program}` failed ({status}): the template was left as the editor left it"
        );
    }
    Ok(())
}
