/*!
`skein gc`: apply `[retention]`, collect the messages nothing reaches
(`Store::collect_garbage`), then rewrite the database so deleted and erased
bytes leave its file (`Store::vacuum`). With `--compact`, first cut every
recorded request body again so it refers to its messages
(`Store::compact_bodies`): the one-time upgrade of bodies recorded before
they did.
*/

use super::common::context::{Globals, print_json};
use super::delete::print_report;
use crate::ui::{self, outln};
use anyhow::Result;
use clap::Args;
use skein::store::OpenMode;
use std::process::ExitCode;

#[derive(Debug, Args)]
pub struct GcArgs {
    /// Print what would be deleted (by `[retention]`) and collected, and change nothing (no
    /// rewrite either)
    #[arg(long)]
    pub dry_run: bool,
    /// Also cut every proxied request body again so it refers to its messages instead of
    /// holding them (bodies recorded by skein before export format 5 shrink); reads every
    /// body once, with progress; stopped, it is finished by running it again
    #[arg(long, conflicts_with = "dry_run")]
    pub compact: bool,
}

pub fn run(globals: &Globals, args: GcArgs) -> Result<ExitCode> {
    let ctx = &globals.open(OpenMode::Existing)?;
    let rules = &skein::config::get()?.retention;
    let compacted = if args.compact {
        let bar = ui::counter("request bodies cut again");
        let recut = ctx.store.compact_bodies(&mut |done, total| {
            bar.set_length(total as u64);
            bar.set_position(done as u64);
        })?;
        bar.finish_and_clear();
        Some(recut)
    } else {
        None
    };
    let done = skein::retention::gc(&ctx.store, rules, args.dry_run, &mut |progress| {
        ui::note(format!(
            "collected {} of {} message(s) nothing reaches",
            progress.collected, progress.planned
        ));
    })?;
    if ctx.json {
        return print_json(&serde_json::json!({
            "retention": done.retention,
            "collected": done.collected,
            "compacted": compacted,
        }));
    }
    if let Some(recut) = compacted {
        outln!(
            "request bodies: {} cut again to refer to their messages, {} already did, {} kept as \
             they are (erased spans), {} old pieces deleted",
            recut.rewritten,
            recut.bodies - recut.rewritten - recut.erased,
            recut.erased,
            recut.pieces_released
        )?;
    }
    for (rule, report) in &done.retention {
        outln!("[retention] {rule}:")?;
        print_report(ctx, report)?;
    }
    outln!("messages nothing reaches:")?;
    print_report(ctx, &done.collected)?;
    if !args.dry_run {
        outln!("rewrote the database without its free pages")?;
    }
    Ok(ExitCode::SUCCESS)
}
