/*!
`export`, `import` and `verify`: moving the whole graph in and out as JSONL,
and checking it.
*/

use super::{Context, print_json};
use crate::exit::{ExitWith, INTEGRITY};
use crate::flags::{ExportArgs, ImportArgs};
use crate::ui::{self, outln};
use anyhow::{Context as _, Result};
use std::fs::File;
use std::io::{BufReader, BufWriter, Write};
use std::process::ExitCode;

pub fn export(ctx: &Context, args: ExportArgs) -> Result<ExitCode> {
    match &args.output {
        Some(path) => {
            // Write beside the target and rename, so a failed export never
            // leaves a truncated file where a good one was.
            let partial = path.with_extension("partial");
            let file = File::create(&partial)
                .with_context(|| format!("cannot create {}", partial.display()))?;
            let mut out = BufWriter::new(file);
            ctx.store.export(&mut out)?;
            out.flush()?;
            drop(out);
            std::fs::rename(&partial, path)
                .with_context(|| format!("cannot write {}", path.display()))?;
            ui::note(format!("exported to {}", path.display()));
        }
        None => {
            let mut out = BufWriter::new(ui::Stdout);
            ctx.store.export(&mut out)?;
            out.flush()?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub fn import(ctx: &Context, args: ImportArgs) -> Result<ExitCode> {
    if let Some(path) = &args.from_llm {
        return import_llm(ctx, path);
    }
    let path = args.file.expect("clap requires a file without --from-llm");
    let file = File::open(&path).with_context(|| format!("cannot open {}", path.display()))?;
    let spinner = ui::spinner(format!(
        "importing {} (every id is checked)",
        path.display()
    ));
    let report = ctx.store.import(&mut BufReader::new(file));
    spinner.finish_and_clear();
    let report = report?;
    if ctx.json {
        return print_json(&report);
    }
    outln!(
        "imported {} new nodes ({} already present), {} conversations, {} runs, {} reruns",
        report.nodes_written,
        report.nodes_present,
        report.conversations,
        report.runs,
        report.reruns
    )?;
    Ok(ExitCode::SUCCESS)
}

fn import_llm(ctx: &Context, path: &std::path::Path) -> Result<ExitCode> {
    if !path.is_file() {
        anyhow::bail!(
            "{} is not a file: give the path of llm's logs.db (`llm logs path` prints it)",
            path.display()
        );
    }
    let spinner = ui::spinner(format!("importing {} from llm", path.display()));
    let report = ctx.store.import_llm(path);
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
    for (kind, count) in &report.skipped_parts {
        ui::note(format!(
            "skipped {count} {kind} part(s): skein has no equivalent"
        ));
    }
    Ok(ExitCode::SUCCESS)
}

pub fn verify(ctx: &Context) -> Result<ExitCode> {
    let report = ctx.store.verify()?;
    if ctx.json {
        ui::json(&report)?;
    } else {
        outln!(
            "checked {} nodes, {} blobs, {} conversations: {}",
            report.nodes,
            report.blobs,
            report.conversations,
            if report.is_ok() {
                "all consistent".to_string()
            } else {
                format!("{} problems", report.problems.len())
            }
        )?;
        for problem in &report.problems {
            outln!("  {}", serde_json::to_string(problem)?)?;
        }
    }
    if report.is_ok() {
        Ok(ExitCode::SUCCESS)
    } else {
        Err(anyhow::Error::new(ExitWith(
            INTEGRITY,
            "the database failed verification: restore it from an export, or re-import the affected conversations".into(),
        )))
    }
}
