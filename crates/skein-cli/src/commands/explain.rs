/*!
`skein explain`: rank the context sources of a recorded turn by their
influence on its reply (its sources probed by removal, replies compared by
the embedder).
*/

use super::common::context::{Globals, print_json};
use super::common::recorded::{TurnRef, load_turn};
use crate::ui::outln;
use anyhow::Result;
use clap::Args;
use skein::recorded::ReasonOptions;
use skein::store::OpenMode;
use std::process::ExitCode;

#[derive(Debug, Args)]
pub struct ExplainArgs {
    #[command(flatten)]
    pub turn: TurnRef,
    /// Keep at most N suspects in the report
    #[arg(long, default_value_t = 12, value_name = "N")]
    pub max_suspects: usize,
}

pub async fn run(globals: &Globals, args: ExplainArgs) -> Result<ExitCode> {
    let ctx = &globals.open(OpenMode::Existing)?;
    let (mut turn, embedder) = load_turn(ctx, &args.turn).await?;
    let report = turn
        .reason(
            ReasonOptions::new()
                .embedder(embedder)
                .max_suspects(args.max_suspects),
        )
        .await?;
    if ctx.json {
        let mut json = serde_json::to_value(&*report)?;
        json["conversation"] = serde_json::json!(turn.conversation());
        return print_json(&json);
    }
    outln!("{}", report.render().trim_end())?;
    Ok(ExitCode::SUCCESS)
}
