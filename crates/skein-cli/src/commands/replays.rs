/*!
`skein replays`: replays as things to find again. The listing (newest
first, a page at a time: the model change, the turns selected, the
results so far and whether a worker is on it) is the store's
`list_replays`, the one the web workbench's list reads; `show` prints a
replay's report again with the renderers a replay ends with; `delete`
removes a replay's rows, its runs and the answers only it reached,
through `Store::forget` (what `skein delete` uses), never the
conversations it replayed.
*/

use super::common::context::{Context, Globals, print_json};
use super::replay::{ReplayFormat, find_replay, print_report};
use crate::ui::{self, outln};
use anyhow::{Result, bail};
use clap::{Args, Subcommand};
use serde_json::json;
use skein::recorded::replay::ReplayOverview;
use skein::store::{OpenMode, ReplayPosition, ReplayState, Selection};
use std::process::ExitCode;

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct ReplaysArgs {
    /// What to do (default: `list`)
    #[command(subcommand)]
    pub command: Option<ReplaysCommand>,
    #[command(flatten)]
    pub list: ListArgs,
}

#[derive(Debug, Subcommand)]
pub enum ReplaysCommand {
    /// List replays, newest first: model change, turns, results, running/stopped/finished
    List(ListArgs),
    /// Print a replay's report again, as it ended (exit 7 when some turn did not hold)
    Show(ShowArgs),
    /// Delete a replay: its turns' rows, their runs and the answers only it reached (the
    /// conversations it replayed stay)
    Delete(DeleteArgs),
}

#[derive(Debug, Args)]
pub struct ListArgs {
    /// Replays per page
    #[arg(short = 'n', long, default_value_t = 20, value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..))]
    pub count: u32,
    /// Which page, from 1 (the newest replays)
    #[arg(long, default_value_t = 1, value_name = "P",
          value_parser = clap::value_parser!(u32).range(1..))]
    pub page: u32,
}

#[derive(Debug, Args)]
pub struct ShowArgs {
    /// The replay (any unique prefix of its id)
    #[arg(value_name = "REPLAY")]
    pub replay: String,
    /// The report's format
    #[arg(long, value_enum, default_value_t = ReplayFormat::Text)]
    pub format: ReplayFormat,
}

#[derive(Debug, Args)]
pub struct DeleteArgs {
    /// The replay (any unique prefix of its id)
    #[arg(value_name = "REPLAY")]
    pub replay: String,
    /// Print what would be deleted and kept, and change nothing
    #[arg(long)]
    pub dry_run: bool,
}

pub fn run(globals: &Globals, args: ReplaysArgs) -> Result<ExitCode> {
    match args.command {
        None => list(globals, &args.list),
        Some(ReplaysCommand::List(list_args)) => list(globals, &list_args),
        Some(ReplaysCommand::Show(show)) => {
            let ctx = &globals.open_to_show()?;
            let id = find_replay(ctx, &show.replay)?;
            print_report(ctx, &id, show.format)
        }
        Some(ReplaysCommand::Delete(delete)) => {
            let ctx = &globals.open(OpenMode::Existing)?;
            let id = find_replay(ctx, &delete.replay)?;
            let totals = ctx.store.replay_totals(&id)?;
            if !delete.dry_run && totals.state(skein::core::now_ms()) == ReplayState::Running {
                bail!(
                    "replay {} is running: a worker holds {} of its turns; stop it (or wait until \
                     its lease passes: it is stopped then) and delete it after",
                    id.short(),
                    totals.running
                );
            }
            let report = ctx
                .store
                .forget(&Selection::Replays(vec![id]), delete.dry_run)?;
            super::delete::print_report(ctx, &report)
        }
    }
}

/// One page of replays, newest first.
fn list(globals: &Globals, args: &ListArgs) -> Result<ExitCode> {
    let ctx = &globals.open_to_show()?;
    let count = args.count as usize;
    let (page, more) = page(ctx, count, args.page)?;
    let overviews = ReplayOverview::read_page(&ctx.store, page)?;
    if ctx.json {
        return print_json(&json!({
            "replays": overviews,
            "page": args.page,
            "per_page": count,
            "more": more,
        }));
    }
    if overviews.is_empty() {
        match args.page {
            1 => outln!("no replays yet: start one with `skein replay --cid ID -m MODEL`")?,
            page => outln!("no replays on page {page}")?,
        }
        return Ok(ExitCode::SUCCESS);
    }
    for overview in &overviews {
        outln!("{}", row(overview))?;
    }
    if let Some(stopped) = overviews
        .iter()
        .find(|overview| overview.state == ReplayState::Stopped)
    {
        outln!(
            "a stopped replay goes on with `skein replay --resume {}`",
            stopped.replay.short()
        )?;
    }
    if more {
        outln!(
            "older replays: `skein replays{} --page {}`",
            match count {
                20 => String::new(),
                n => format!(" -n {n}"),
            },
            args.page + 1
        )?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Page `number` (from 1) of `count` replays, and whether more follow,
/// read page by page through the listing's own order.
fn page(
    ctx: &Context,
    count: usize,
    number: u32,
) -> Result<(Vec<skein::store::ListedReplay>, bool)> {
    let mut after: Option<ReplayPosition> = None;
    for _ in 1..number {
        let skipped = ctx.store.list_replays(after.as_ref(), count)?;
        if skipped.len() < count {
            return Ok((Vec::new(), false));
        }
        after = skipped.last().map(|listed| listed.position());
    }
    let mut listed = ctx.store.list_replays(after.as_ref(), count + 1)?;
    let more = listed.len() > count;
    listed.truncate(count);
    Ok((listed, more))
}

/// `ID · started · A → B · change · turns · results · state` (a replay
/// that compares models: `A → 3 models: B, C, D`, its turns `× 3 models`
/// and its results over every turn and model).
fn row(overview: &ReplayOverview) -> String {
    let totals = &overview.totals;
    let finished = totals.done + totals.diverged + totals.failed;
    let state = match overview.state {
        ReplayState::Finished => "finished".to_string(),
        state => format!("{state} at {finished}/{}", overview.selected),
    };
    let models = overview.models.len().max(1) as u64;
    let turns = match models {
        1 => format!("{} turn(s)", overview.selected),
        n => format!("{} turn(s) × {n} models", overview.selected / n),
    };
    format!(
        "{} · {} · {} · {turns}: {} · {} changed, {} held, {} diverged, {} failed · {state}",
        overview.replay.short(),
        ui::timestamp(overview.created_ms),
        ui::one_line(&overview.change_line(), 80),
        ui::one_line(&overview.selection_text, 60),
        totals.changed,
        totals.held,
        totals.diverged,
        totals.failed,
    )
}
