/*!
`skein label`: put a name on recorded turns to keep them as cases (`add`,
`rm`, `list`; by node, or every turn a replay re-sent, or those of a
result: a replay's regressions), and write a label's turns as a JSONL test set (`export`)
that `skein label import` or `skein replay --cases FILE` reads into any
database (a line at a time, within a limit; a case chooses no model and
attaches no run to another conversation's messages: `skein_recorded::cases`).
A labelled turn is kept by `skein delete` and `skein gc` until
its label is removed.
*/

use super::common::context::{Context, Globals, print_json};
use crate::ui::outln;
use anyhow::{Context as _, Result};
use clap::{Args, Subcommand};
use serde_json::json;
use skein::NodeId;
use skein::recorded::cases;
use skein::recorded::replay::turns_of_replay;
use skein::store::OpenMode;
use std::io::{BufReader, Write};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Debug, Subcommand)]
pub enum LabelCommand {
    /// Put a label on turns (each given by its final answer's node)
    Add(LabelTurnsArgs),
    /// Take a label off turns
    Rm(LabelTurnsArgs),
    /// The labels and how many turns carry each, or the turns of one label
    List(LabelListArgs),
    /// Write a label's turns as cases, one JSON line each: the recorded request, the original
    /// answer, the label and the comparators (`skein replay --cases FILE` replays them)
    Export(LabelExportArgs),
    /// Store the cases of a file written by `skein label export`, each turn labelled as in the file
    Import(LabelImportArgs),
}

#[derive(Debug, Args)]
pub struct LabelTurnsArgs {
    /// The label's name
    pub name: String,
    /// Turns, by their final answer's node (any unique prefix)
    #[arg(value_name = "TURN", required_unless_present = "replay")]
    pub turns: Vec<String>,
    /// Every turn a replay re-sent (its original turn), as well (any unique prefix of its id)
    #[arg(long, value_name = "REPLAY")]
    pub replay: Option<String>,
    /// With --replay: only its turns with this result (repeatable)
    #[arg(
        long = "result",
        value_name = "RESULT",
        requires = "replay",
        value_parser = ["changed", "held", "diverged", "failed", "pending", "running"]
    )]
    pub results: Vec<String>,
}

#[derive(Debug, Args)]
pub struct LabelListArgs {
    /// List this label's turns instead of every label
    pub name: Option<String>,
}

#[derive(Debug, Args)]
pub struct LabelExportArgs {
    /// The label whose turns to write
    pub name: String,
    /// A comparator each case is judged with when replayed (repeatable; see `skein replay
    /// --compare`, but a case names no model: `judge`, judged by `replay --judge MODEL`;
    /// default: the replay's)
    #[arg(long = "compare", value_name = "SPEC")]
    pub compare: Vec<String>,
    /// Write to this file instead of standard output
    #[arg(short = 'o', long, value_name = "FILE")]
    pub output: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct LabelImportArgs {
    /// The cases file (JSONL, as `skein label export` writes it)
    pub file: PathBuf,
}

/// Turns read at a time when a label's turns are listed.
const PAGE: usize = 500;

pub async fn run(globals: &Globals, command: LabelCommand) -> Result<ExitCode> {
    let ctx = &globals.open(match &command {
        LabelCommand::List(_) | LabelCommand::Export(_) => OpenMode::ReadOnly,
        LabelCommand::Add(_) | LabelCommand::Rm(_) => OpenMode::Existing,
        // Cases are a test set for any database, an empty one included.
        LabelCommand::Import(_) => OpenMode::Create,
    })?;
    match command {
        LabelCommand::Add(args) => add(ctx, args).await,
        LabelCommand::Rm(args) => remove(ctx, args).await,
        LabelCommand::List(args) => list(ctx, args),
        LabelCommand::Export(args) => export(ctx, args).await,
        LabelCommand::Import(args) => import(ctx, args).await,
    }
}

async fn add(ctx: &Context, args: LabelTurnsArgs) -> Result<ExitCode> {
    let turns = resolve(ctx, &args)?;
    let added = cases::label(&ctx.store, &args.name, &turns).await?;
    report(ctx, "labelled", &args.name, added, turns.len())
}

async fn remove(ctx: &Context, args: LabelTurnsArgs) -> Result<ExitCode> {
    let turns = resolve(ctx, &args)?;
    let removed = cases::unlabel(&ctx.store, &args.name, &turns).await?;
    report(ctx, "unlabelled", &args.name, removed, turns.len())
}

/// The turns named, and a replay's (its original turns, those with the
/// results asked for).
fn resolve(ctx: &Context, args: &LabelTurnsArgs) -> Result<Vec<NodeId>> {
    let mut turns: Vec<NodeId> = args
        .turns
        .iter()
        .map(|text| ctx.node(text))
        .collect::<Result<_>>()?;
    if let Some(given) = &args.replay {
        let id = super::replay::find_replay(ctx, given)?;
        turns.extend(turns_of_replay(&ctx.store, &id, &args.results)?);
    }
    let mut seen = std::collections::HashSet::new();
    turns.retain(|turn| seen.insert(*turn));
    Ok(turns)
}

fn report(ctx: &Context, verb: &str, name: &str, changed: u64, given: usize) -> Result<ExitCode> {
    if ctx.json {
        return print_json(&json!({ "label": name, verb: changed, "given": given }));
    }
    let unchanged = given as u64 - changed.min(given as u64);
    let note = match (unchanged, verb) {
        (0, _) => String::new(),
        (n, "labelled") => format!(" ({n} already were)"),
        (n, _) => format!(" ({n} were not)"),
    };
    outln!("{verb} {changed} turn(s) `{name}`{note}")?;
    Ok(ExitCode::SUCCESS)
}

fn list(ctx: &Context, args: LabelListArgs) -> Result<ExitCode> {
    let Some(name) = args.name else {
        let counts = ctx.store.label_counts()?;
        if ctx.json {
            return print_json(&counts);
        }
        for count in &counts {
            outln!("{:>6}  {}", count.nodes, count.name)?;
        }
        return Ok(ExitCode::SUCCESS);
    };
    let mut after = None;
    let mut all = Vec::new();
    loop {
        let page = ctx.store.labelled(&name, after, PAGE)?;
        after = page.last().map(|label| label.node);
        for label in page {
            if ctx.json {
                all.push(label);
            } else {
                outln!("{}", label.node)?;
            }
        }
        if after.is_none() {
            break;
        }
    }
    if ctx.json {
        return print_json(&all);
    }
    Ok(ExitCode::SUCCESS)
}

async fn export(ctx: &Context, args: LabelExportArgs) -> Result<ExitCode> {
    let mut out: Box<dyn Write + Send> = match &args.output {
        Some(path) => Box::new(std::io::BufWriter::new(
            std::fs::File::create(path)
                .with_context(|| format!("cannot write {}", path.display()))?,
        )),
        None => Box::new(std::io::BufWriter::new(std::io::stdout())),
    };
    let written = cases::export(&ctx.store, &args.name, &args.compare, &mut *out).await?;
    drop(out);
    if args.output.is_some() || written == 0 {
        crate::ui::note(format!("{written} case(s) of label `{}`", args.name));
    }
    Ok(ExitCode::SUCCESS)
}

async fn import(ctx: &Context, args: LabelImportArgs) -> Result<ExitCode> {
    let turns = import_cases(ctx, &args.file).await?;
    if ctx.json {
        return print_json(&turns);
    }
    outln!("imported {} case(s)", turns.len())?;
    Ok(ExitCode::SUCCESS)
}

/// Store the cases of `file`, labelled; their turns.
pub async fn import_cases(
    ctx: &Context,
    file: &std::path::Path,
) -> Result<Vec<skein::recorded::replay::CaseTurn>> {
    let opened = std::fs::File::open(file)
        .with_context(|| format!("cannot read the cases file {}", file.display()))?;
    let max_line = skein::store::DEFAULT_IMPORT_LINE_LIMIT;
    Ok(cases::import(&ctx.store, BufReader::new(opened), max_line).await?)
}
