/*!
`skein reply`: continue from any node; the turn extends the conversation
whose head it is, or branches a new conversation there.
*/

use super::common::context::Globals;
use super::common::turn::{continue_at, run_turn};
use super::common::turn_options::{PartsArgs, TurnArgs};
use crate::input;
use anyhow::Result;
use clap::Args;
use skein::store::OpenMode;
use std::process::ExitCode;

#[derive(Debug, Args)]
pub struct ReplyArgs {
    /// The node to continue from (any unique prefix of its id; a conversation's id or name stands
    /// for its head)
    pub node: String,
    /// The reply text; text piped on stdin is added after it, following a
    /// blank line (with no TEXT, stdin is the text)
    pub text: Option<String>,
    #[command(flatten)]
    pub parts: PartsArgs,
    #[command(flatten)]
    pub turn: TurnArgs,
}

pub async fn run(globals: &Globals, args: ReplyArgs) -> Result<ExitCode> {
    args.turn.declare_tools_and_key()?;
    // It continues from a node, so it needs a database with that node.
    let ctx = &globals.open_for_turn(OpenMode::Existing, args.turn.no_log, true)?;
    let settings = args.turn.settings().await?;
    let node = ctx.node(&args.node)?;
    let input = input::turn_input(args.text, &args.parts).await?;
    let (conversation, branched) = continue_at(ctx, node, settings.model.as_deref()).await?;
    let note = branched.then(|| {
        format!(
            "node {} is not the head of a conversation: branched into a new conversation",
            node.short()
        )
    });
    let prompt = settings.apply(
        settings.recorded_or_not(conversation).prompt(input),
        settings.system.clone(),
    );
    run_turn(ctx, prompt, &settings, note).await?;
    Ok(ExitCode::SUCCESS)
}
