/*!
`skein fork`: start a new conversation at a node (its origin recorded),
optionally with a first turn, which stores it only if it succeeds; or,
with `--from-rerun`, from a rerun's counterfactual answer.
*/

use super::common::context::{Context, Globals, print_json};
use super::common::home::{CliHome, recorded_error};
use super::common::turn::{branch_at, run_turn};
use super::common::turn_options::{PartsArgs, TurnArgs, parse_conversation_name};
use crate::input;
use crate::ui::{self, outln};
use anyhow::{Context as _, Result, bail};
use clap::Args;
use serde_json::json;
use skein::recorded::{TurnAt, open_turn};
use skein::store::OpenMode;
use std::process::ExitCode;

#[derive(Debug, Args)]
pub struct ForkArgs {
    /// The node the new conversation starts at (a conversation's id or name stands for its head)
    #[arg(required_unless_present = "from_rerun")]
    pub node: Option<String>,
    /// Start from a rerun's counterfactual answer instead (its removals
    /// carry forward); then the only positional argument is TEXT
    #[arg(long, value_name = "RERUN")]
    pub from_rerun: Option<String>,
    /// Run this first turn in the new conversation
    pub text: Option<String>,
    /// Name the new conversation (not 4 to 64 hex digits: an id wins over a name)
    #[arg(long, value_name = "NAME", value_parser = parse_conversation_name)]
    pub name: Option<String>,
    #[command(flatten)]
    pub parts: PartsArgs,
    #[command(flatten)]
    pub turn: TurnArgs,
}

pub async fn run(globals: &Globals, args: ForkArgs) -> Result<ExitCode> {
    args.turn.declare_tools_and_key()?;
    // It starts at a node (or a rerun), so it needs a database with that.
    let ctx = &globals.open_for_turn(OpenMode::Existing, args.turn.no_log, true)?;
    ctx.check_name_free(args.name.as_deref())?;
    if let Some(rerun) = args.from_rerun.clone() {
        // With --from-rerun there is no NODE: a single positional is TEXT.
        let mut args = args;
        if args.text.is_some() {
            anyhow::bail!("with --from-rerun, give only the TEXT of the fork's first turn");
        }
        if !args.parts.is_empty() {
            anyhow::bail!(
                "a fork --from-rerun continues a recorded chat, whose turns are text: -a and -f cannot be used with it"
            );
        }
        args.text = args.node.take();
        return fork_from_rerun(ctx, args, &rerun).await;
    }
    let settings = args.turn.settings().await?;
    if settings.no_log && args.text.is_none() && args.parts.is_empty() {
        bail!(
            "--no-log records nothing, and a fork without TEXT only records a conversation: give TEXT for an unrecorded first turn"
        );
    }
    let node = ctx.node(
        args.node
            .as_deref()
            .expect("clap requires NODE without --from-rerun"),
    )?;
    let mut fork = branch_at(ctx, node, settings.model.as_deref()).await?;
    if let Some(name) = args.name {
        fork = fork.name(name);
    }
    match (args.text, args.parts.is_empty()) {
        (None, true) => {
            let conversation = fork.create().await?;
            if ctx.json {
                return print_json(&ctx.store.conversation(&conversation.id())?);
            }
            outln!("{}", conversation.id().short())?;
            ui::note(format!(
                "forked new conversation {} at node {}; continue it with `skein prompt --cid {} TEXT`",
                conversation.id().short(),
                node.short(),
                conversation.id().short()
            ));
            Ok(ExitCode::SUCCESS)
        }
        (text, _) => {
            let input = input::turn_input(text, &args.parts).await?;
            // Stored with its first turn, and only if that turn succeeds.
            let conversation = settings.recorded_or_not(fork.conversation());
            let note = format!("forked at node {} into conversation", node.short());
            let prompt = settings.apply(conversation.prompt(input), settings.system.clone());
            run_turn(ctx, prompt, &settings, Some(note)).await?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// `skein fork --from-rerun RERUN [TEXT]`.
pub async fn fork_from_rerun(ctx: &Context, args: ForkArgs, rerun: &str) -> Result<ExitCode> {
    let id = ctx.store.resolve_rerun(rerun)?;
    let record = ctx.store.rerun(&id)?;
    let turn = open_turn(
        &ctx.store,
        TurnAt::Number(record.conversation.clone(), record.turn as usize),
        &CliHome::of_command()?,
        None,
        args.turn.request.model.model.as_deref(),
    )
    .await
    .map_err(recorded_error)?;
    let mut fork = turn.fork_from_rerun(&id).await?;
    let conversation = fork
        .conversation()
        .cloned()
        .context("a fork with a store has a conversation")?;
    if let Some(name) = &args.name {
        ctx.store.rename_conversation(&conversation, Some(name))?;
    }
    match args.text {
        None if ctx.json => print_json(&ctx.store.conversation(&conversation)?),
        None => {
            outln!("{}", conversation.short())?;
            ui::note(format!(
                "forked conversation {} from rerun {} (without {}); continue it with `skein prompt --cid {} TEXT`",
                conversation.short(),
                id.short(),
                record.ablation.join(", "),
                conversation.short()
            ));
            Ok(ExitCode::SUCCESS)
        }
        Some(text) => {
            let turn = fork.send(text).await?.clone();
            // A fork's first turn lands in the fork (nobody else knows it).
            let conversation = fork.conversation().cloned().unwrap_or(conversation);
            if ctx.json {
                return print_json(&json!({
                    "conversation": conversation,
                    "node": turn.node(),
                    "turn": turn.index(),
                    "text": turn.text(),
                }));
            }
            outln!("{}", turn.text())?;
            ui::note(format!(
                "conversation {} (forked from rerun {}) · node {}",
                conversation.short(),
                id.short(),
                turn.node().short()
            ));
            Ok(ExitCode::SUCCESS)
        }
    }
}
