/*!
`skein gc`: apply `[retention]`, collect the messages nothing reaches
(`Store::collect_garbage`), then rewrite the database so deleted and erased
bytes leave its file (`Store::vacuum`).
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
}

pub fn run(globals: &Globals, args: GcArgs) -> Result<ExitCode> {
    let ctx = &globals.open(OpenMode::Existing)?;
    let rules = &skein::config::get()?.retention;
    let done = skein::retention::gc(&ctx.store, rules, args.dry_run, &mut |progress| {
        ui::note(format!(
            "collected {} of {} message(s) nothing reaches",
            progress.collected, progress.planned
        ));
    })?;
    if ctx.json {
        return print_json(&done);
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
