/*!
`skein import`: a JSONL export (all or nothing; every id is rechecked), or
an `llm` logs.db (`--from-llm`).
*/

use super::common::context::{Context, Globals, print_json};
use crate::exit::{ExitWith, INTEGRITY};
use crate::ui::{self, outln};
use anyhow::{Context as _, Result};
use clap::Args;
use skein::store::OpenMode;
use skein::store::StoreError;
use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Debug, Args)]
pub struct ImportArgs {
    /// The JSONL file written by `skein export`
    #[arg(required_unless_present = "from_llm")]
    pub file: Option<PathBuf>,
    /// Import an `llm` (0.3x) logs.db instead: its threads, forks, tool calls and turns
    #[arg(long, value_name = "PATH", conflicts_with = "file")]
    pub from_llm: Option<PathBuf>,
    /// The longest line accepted, in MiB (a node line holds its attachments, base64-encoded)
    #[arg(
        long,
        value_name = "MIB",
        env = "SKEIN_IMPORT_MAX_LINE_MIB",
        default_value_t = 64,
        value_parser = clap::value_parser!(u32).range(1..=4096)
    )]
    pub max_line_mib: u32,
}

/// An import is all or nothing: a failed one into a database it created
/// leaves no empty file behind (as for every command, see
/// `common::context::remove_blank_databases`).
pub fn run(globals: &Globals, args: ImportArgs) -> Result<ExitCode> {
    import(&globals.open(OpenMode::Create)?, args)
}

fn import(ctx: &Context, args: ImportArgs) -> Result<ExitCode> {
    if let Some(path) = &args.from_llm {
        return import_llm(ctx, path);
    }
    let path = args.file.expect("clap requires a file without --from-llm");
    let file = File::open(&path).with_context(|| format!("cannot open {}", path.display()))?;
    let spinner = ui::spinner(format!(
        "importing {} (every id is checked)",
        path.display()
    ));
    let max_line = args.max_line_mib as usize * (1 << 20);
    let report = ctx
        .store
        .import_with_line_limit(&mut BufReader::new(file), max_line);
    spinner.finish_and_clear();
    let report = report.map_err(|error| match error {
        StoreError::LineTooLong { .. } => anyhow::Error::new(ExitWith(
            INTEGRITY,
            format!(
                "{error}; raise the limit with `skein import --max-line-mib N` \
                 (or SKEIN_IMPORT_MAX_LINE_MIB=N)"
            ),
        )),
        other => other.into(),
    })?;
    if ctx.json {
        return print_json(&report);
    }
    outln!(
        "imported {} new nodes ({} already present), {} conversations, {} runs, {} reruns, {} replays ({} replayed turns), {} labels",
        report.nodes_written,
        report.nodes_present,
        report.conversations,
        report.runs,
        report.reruns,
        report.replays,
        report.replay_turns,
        report.labels
    )?;
    Ok(ExitCode::SUCCESS)
}

fn import_llm(ctx: &Context, path: &Path) -> Result<ExitCode> {
    if !path.is_file() {
        anyhow::bail!(
            "{} is not a file: give the path of llm's logs.db (`llm logs path` prints it)",
            path.display()
        );
    }
    let spinner = ui::spinner(format!("importing {} from llm", path.display()));
    let report = skein::import::llm::import(&ctx.store, path);
    spinner.finish_and_clear();
    let report = report?;
    if ctx.json {
        return print_json(&report);
    }
    outln!(
        "imported {} messages, {} conversations and {} runs from llm ({} already present)",
        report.messages,
        report.conversations,
        report.runs,
        report.already_present
    )?;
    if !report.renamed_models.is_empty() {
        let renamed: Vec<String> = report
            .renamed_models
            .iter()
            .map(|(llm, skein)| format!("{llm} → {skein}"))
            .collect();
        outln!(
            "the conversations keep their models, under skein's names: {}",
            renamed.join(", ")
        )?;
    }
    if !report.unknown_models.is_empty() {
        let kept: Vec<&str> = report.unknown_models.iter().map(String::as_str).collect();
        outln!(
            "kept as llm named them, which skein cannot run: {} (continue such a conversation \
             with -m MODEL; `skein models` lists skein's)",
            kept.join(", ")
        )?;
    }
    for (kind, count) in &report.skipped_parts {
        ui::note(format!(
            "skipped {count} {kind} part(s): skein has no equivalent"
        ));
    }
    Ok(ExitCode::SUCCESS)
}
