/*!
`delete`, `redact` and `gc`: removing conversations and what only they
used (`Store::forget`, which says what it kept and why), erasing one
message's content in place (`Store::redact`), and collecting what nothing
reaches before rewriting the file (`Store::collect_garbage`,
`Store::vacuum`). Ids and names are resolved here, once, before anything
changes, so a typo changes nothing.
*/

use super::{Context, print_json};
use crate::flags::{DeleteArgs, GcArgs, RedactArgs};
use crate::ui::{self, outln};
use anyhow::Result;
use skein::store::{Filter, Forgotten, Selection};
use std::process::ExitCode;

pub fn delete(ctx: &Context, args: DeleteArgs) -> Result<ExitCode> {
    let selection = selection(ctx, &args)?;
    let report = ctx.store.forget(&selection, args.dry_run)?;
    print_report(ctx, &report)
}

fn print_report(ctx: &Context, report: &Forgotten) -> Result<ExitCode> {
    if ctx.json {
        return print_json(report);
    }
    for line in report.to_string().lines() {
        outln!("{line}")?;
    }
    for sharer in &report.shared_with {
        let name = sharer.name.as_deref().unwrap_or("");
        outln!("  shared with {} {name}", sharer.id.short())?;
    }
    if report.dry_run {
        outln!("nothing was changed (--dry-run)")?;
    }
    Ok(ExitCode::SUCCESS)
}

pub fn redact(ctx: &Context, args: RedactArgs) -> Result<ExitCode> {
    let node = ctx.node(&args.node)?;
    let by = args
        .by
        .or_else(|| std::env::var("USER").ok())
        .unwrap_or_else(|| "unknown".into());
    let redacted = ctx.store.redact(node, &by, &args.reason)?;
    if ctx.json {
        return print_json(&redacted);
    }
    outln!(
        "erased {} part(s) of {} (its id and place stay); removed {} blob(s), {} cached embedding(s), the request bodies of {} run(s)",
        redacted.parts,
        redacted.node,
        redacted.blobs,
        redacted.embeddings,
        redacted.runs_scrubbed
    )?;
    outln!("run `skein gc` to rewrite the database without the erased bytes")?;
    Ok(ExitCode::SUCCESS)
}

pub fn gc(ctx: &Context, args: GcArgs) -> Result<ExitCode> {
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

/// What the flags select (clap requires at least one).
fn selection(ctx: &Context, args: &DeleteArgs) -> Result<Selection> {
    if let Some(family) = &args.family {
        return Ok(Selection::Family(ctx.store.resolve_conversation(family)?));
    }
    if !args.ids.is_empty() {
        let ids = args
            .ids
            .iter()
            .map(|id| ctx.store.resolve_conversation(id))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        return Ok(Selection::Conversations(ids));
    }
    let mut filter = Filter::default();
    if let Some(cutoff) = args.older_than {
        filter = filter.updated_before_ms(cutoff);
    }
    if args.proxy {
        filter = filter.proxy_only();
    }
    if let Some(client) = &args.client {
        filter = filter.client(client.clone());
    }
    Ok(Selection::Matching(filter))
}
