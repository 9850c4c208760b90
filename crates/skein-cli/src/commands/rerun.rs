/*!
`skein rerun`: a recorded turn again without chosen sources, sampled,
with a verdict when the unchanged request is re-run too (`--baseline`);
its answer can start a fork (`skein fork --from-rerun`).
*/

use super::common::context::{Globals, print_json};
use super::common::recorded::{TurnRef, load_turn};
use super::common::values::compare_help;
use crate::ui::{self, outln};
use anyhow::Result;
use clap::Args;
use serde_json::json;
use skein::recorded::compare::Comparator;
use skein::recorded::{ReasonOptions, RerunOptions};
use skein::store::OpenMode;
use std::process::ExitCode;

#[derive(Debug, Args)]
pub struct RerunArgs {
    #[command(flatten)]
    pub turn: TurnRef,
    /// A source to remove (repeatable; see `skein explain` for the removable ones)
    #[arg(long = "ignore", value_name = "ID", required = true)]
    pub ignore: Vec<String>,
    /// Samples per probe (at least 2)
    #[arg(long, default_value_t = 3, value_name = "N", value_parser = clap::value_parser!(u32).range(2..))]
    pub samples: u32,
    /// Also re-run the unchanged request, so the result gets a verdict
    #[arg(long)]
    pub baseline: bool,
    #[arg(long = "compare", value_name = "SPEC", help = compare_help())]
    pub compare: Vec<String>,
    /// Keep at most N suspects in the report the ignored ids are checked against
    #[arg(long, default_value_t = 12, value_name = "N")]
    pub max_suspects: usize,
}

pub async fn run(globals: &Globals, args: RerunArgs) -> Result<ExitCode> {
    let ctx = &globals.open(OpenMode::Existing)?;
    let (mut turn, embedder) = load_turn(ctx, &args.turn).await?;
    turn.reason(
        ReasonOptions::new()
            .embedder(embedder.clone())
            .max_suspects(args.max_suspects),
    )
    .await?;
    let k = turn.index();
    let comparators = args
        .compare
        .iter()
        .map(|spec| Comparator::parse(spec))
        .collect::<Result<Vec<_>, _>>()?;
    let mut options = RerunOptions::ignore(args.ignore.clone())
        .samples(args.samples)
        .embedder(embedder)
        .compare(comparators);
    if args.baseline {
        options = options.check_baseline();
    }
    let calls = args.samples * if args.baseline { 2 } else { 1 };
    let spinner = ui::spinner(format!(
        "re-running turn {k} without {} ({calls} model calls)",
        args.ignore.join(", ")
    ));
    let result = turn.rerun(options).await;
    spinner.finish_and_clear();
    let result = result?;
    if ctx.json {
        return print_json(&json!({
            "rerun": result.id,
            "turn": result.turn,
            "turn_node": result.turn_node,
            "removed": result.removed,
            "original": result.original,
            "answers": result.answers(),
            "what_changed": result.what_changed,
            "verdict": result.verdict,
        }));
    }
    outln!("{}", result.render().trim_end())?;
    ui::note(format!(
        "rerun {} · fork from its answer with `skein fork --from-rerun {}`{}",
        result.id.short(),
        result.id.short(),
        if result.verdict.is_none() {
            " · add --baseline for a verdict"
        } else {
            ""
        }
    ));
    Ok(ExitCode::SUCCESS)
}
