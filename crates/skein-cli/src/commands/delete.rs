/*!
`delete`: removing conversations and what only they used, through the
store's one deletion (`Store::forget`, which says what it kept and why).
Ids and names are resolved here, once, before anything is deleted, so a
typo deletes nothing.
*/

use super::{Context, print_json};
use crate::flags::DeleteArgs;
use crate::ui::outln;
use anyhow::Result;
use skein::store::{Filter, Selection};
use std::process::ExitCode;

pub fn delete(ctx: &Context, args: DeleteArgs) -> Result<ExitCode> {
    let selection = selection(ctx, &args)?;
    let report = ctx.store.forget(&selection, args.dry_run)?;
    if ctx.json {
        return print_json(&report);
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
