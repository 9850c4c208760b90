/*!
`skein again`: ask a stored message again, through the turn layer's
[`Conversation::again_at`] (the operation the chat's `!retry` and `!edit`
and the web view's edit and regenerate use too): a user message retried as
it was, or edited (TEXT, attachments or stdin), or a reply regenerated.
Each is a new conversation branching where the message stood, stored with
its first turn; the conversation the message came from never moves.
*/

use super::common::context::Globals;
use super::common::home::{CliHome, cli_error};
use super::common::turn::run_turn;
use super::common::turn_options::{PartsArgs, TurnArgs, parse_conversation_name};
use crate::input;
use anyhow::{Result, bail};
use clap::Args;
use skein::Conversation;
use skein::conversation::home;
use skein::store::OpenMode;
use std::process::ExitCode;

#[derive(Debug, Args)]
pub struct AgainArgs {
    /// The message to ask again (any unique prefix of its id): a user message (retried, or edited
    /// with TEXT) or a reply (regenerated)
    pub node: String,
    /// The user message's new text (an edit); text piped on stdin is added after it, following a
    /// blank line. Without TEXT, attachments or stdin, the message is asked as it was
    pub text: Option<String>,
    /// Name the new conversation (not 4 to 64 hex digits: an id wins over a name)
    #[arg(long, value_name = "NAME", value_parser = parse_conversation_name)]
    pub name: Option<String>,
    #[command(flatten)]
    pub parts: PartsArgs,
    #[command(flatten)]
    pub turn: TurnArgs,
}

pub async fn run(globals: &Globals, args: AgainArgs) -> Result<ExitCode> {
    args.turn.declare_tools_and_key()?;
    if args.turn.no_log {
        bail!("`skein again` branches in the database, and --no-log records nothing");
    }
    let ctx = &globals.open_for_turn(OpenMode::Existing, false, true)?;
    ctx.check_name_free(args.name.as_deref())?;
    let settings = args.turn.settings().await?;
    let node = ctx.node(&args.node)?;
    let edited = input::optional_turn_message(args.text.clone(), &args.parts).await?;
    // The conversation that asked the message first, its MCP servers
    // started; the model -m names, else that conversation's own.
    let (asker, ready) = home::ready_to_ask_again(
        &ctx.store,
        node,
        &CliHome::of_command()?,
        settings.model.as_deref(),
    )
    .await
    .map_err(cli_error)?;
    let mut again = Conversation::again_at(&ctx.store, node, &ready.home);
    if let Some(asker) = &asker {
        again = again.of(asker);
    }
    if let Some(model) = &ready.chosen {
        again = again.model(model);
    }
    if let Some(name) = args.name.clone() {
        again = again.name(name);
    }
    let what = match &edited {
        Some(_) => "edited",
        None => "asked again",
    };
    if let Some(message) = edited {
        again = again.edited(message);
    }
    let prompt = settings.apply(again.await?, settings.system.clone());
    let note = format!(
        "node {} {what}, as a new branch: conversation",
        node.short()
    );
    run_turn(ctx, prompt, &settings, Some(note)).await?;
    Ok(ExitCode::SUCCESS)
}
