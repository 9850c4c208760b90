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
use crate::ui::outln;
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
    let retained = retention(ctx, args.dry_run)?;
    let report = ctx.store.collect_garbage(args.dry_run)?;
    if !args.dry_run {
        ctx.store.vacuum()?;
    }
    if ctx.json {
        return print_json(&serde_json::json!({ "retention": retained, "collected": report }));
    }
    for (rule, report) in &retained {
        outln!("[retention] {rule}:")?;
        print_report(ctx, report)?;
    }
    outln!("messages nothing reaches:")?;
    print_report(ctx, &report)?;
    if !args.dry_run {
        outln!("rewrote the database without its free pages")?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Apply `[retention]` of the configuration file: each rule set deletes the
/// conversations it selects, as `delete --older-than` would.
fn retention(ctx: &Context, dry_run: bool) -> Result<Vec<(String, Forgotten)>> {
    let rules = &skein::config::get()?.retention;
    let mut applied = Vec::new();
    for (key, age, proxy_only) in [
        ("older_than", &rules.older_than, false),
        ("proxy_older_than", &rules.proxy_older_than, true),
    ] {
        let Some(age) = age else { continue };
        let cutoff = crate::flags::parse_cutoff(age).map_err(|problem| {
            anyhow::anyhow!(
                "retention.{key} in {}: {problem}",
                skein::config::path().map_or_else(
                    |_| "the configuration file".into(),
                    |p| p.display().to_string()
                )
            )
        })?;
        let mut filter = Filter::default().updated_before_ms(cutoff);
        if proxy_only {
            filter = filter.proxy_only();
        }
        let report = ctx.store.forget(&Selection::Matching(filter), dry_run)?;
        applied.push((format!("{key} = \"{age}\""), report));
    }
    Ok(applied)
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
    Ok(Selection::Matching(filter))
}
