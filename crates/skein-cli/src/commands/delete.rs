/*!
`skein delete`: removing conversations and what only they used
(`Store::forget`, which says what it kept and why; `gc` prints its
retention passes the same way). Ids and names are resolved here, once, before anything
changes, so a typo changes nothing.
*/

use super::common::context::{Context, Globals, print_json};
use super::common::values::parse_cutoff;
use crate::ui::outln;
use anyhow::Result;
use clap::Args;
use skein::store::OpenMode;
use skein::store::{Filter, Forgotten, Selection};
use std::process::ExitCode;

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("selection").required(true).multiple(true)
    .args(["ids", "family", "older_than", "proxy", "client"])))]
pub struct DeleteArgs {
    /// Conversations to delete (any unique prefix of an id, or a name)
    #[arg(value_name = "ID", conflicts_with_all = ["family", "older_than", "proxy", "client"])]
    pub ids: Vec<String>,
    /// Delete this conversation's whole family: it and every conversation joined to it by forks,
    /// reply branches and reruns (not the ones that only share messages with it)
    #[arg(long, value_name = "ID", conflicts_with_all = ["older_than", "proxy", "client"])]
    pub family: Option<String>,
    /// Delete every conversation last updated longer ago than this: an age (`45min`, `12h`, `30d`,
    /// `2w`, `6mo`, `1y`; a bare `m` is refused) or a date (`2026-11-01`, midnight UTC)
    #[arg(long, value_name = "AGE|DATE", value_parser = parse_cutoff)]
    pub older_than: Option<i64>,
    /// Delete only conversations recorded by the proxy (`serve --proxy`); with --older-than, both
    /// must hold
    #[arg(long)]
    pub proxy: bool,
    /// Delete only conversations holding a run this client of the proxy made (its
    /// `x-skein-client` header, else OpenAI's `user` or Anthropic's `metadata.user_id`)
    #[arg(long, value_name = "NAME")]
    pub client: Option<String>,
    /// Print what would be deleted and kept, and change nothing
    #[arg(long)]
    pub dry_run: bool,
}

pub fn run(globals: &Globals, args: DeleteArgs) -> Result<ExitCode> {
    let ctx = &globals.open(OpenMode::Existing)?;
    let selection = selection(ctx, &args)?;
    let report = ctx.store.forget(&selection, args.dry_run)?;
    print_report(ctx, &report)
}

pub fn print_report(ctx: &Context, report: &Forgotten) -> Result<ExitCode> {
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
