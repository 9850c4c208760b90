/*!
`skein prompt`: run a turn and record it, in a new conversation or one it
continues (`-c`, `--cid`), through the library's `Conversation`; with `-t`
it renders a configured prompt, and with `--source` it is a recorded
chat's turn whose tagged context sources `explain` and `rerun` work on.
*/

use super::common::configured::{TemplateArgs, turn_input};
use super::common::context::{Context, Globals, print_json};
use super::common::model::{home_model, turn_model};
use super::common::recorded::{chat_builder, start_offered_tools};
use super::common::turn::{open_stored, run_turn};
use super::common::turn_options::{ContinueArgs, PartsArgs, TurnArgs};
use crate::input;
use crate::ui::{self, outln};
use anyhow::{Context as _, Result, bail};
use clap::Args;
use serde_json::json;
use skein::recorded::Source;
use skein::store::OpenMode;
use skein::{Conversation, Tool};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

#[derive(Debug, Args)]
pub struct PromptArgs {
    /// The prompt text; text piped on stdin is added after it, following a
    /// blank line (with no TEXT, stdin is the prompt; with -t, -a or -f, TEXT may be left out)
    pub text: Option<String>,
    #[command(flatten)]
    pub template: TemplateArgs,
    #[command(flatten)]
    pub parts: PartsArgs,
    #[command(flatten)]
    pub turn: TurnArgs,
    #[command(flatten)]
    pub conversation: ContinueArgs,
    /// A context source for this turn, as ID=TEXT or ID=@FILE (repeatable):
    /// rendered into the system text as a tagged part, so the reply can be
    /// explained and re-run without it
    #[arg(long = "source", value_name = "ID=TEXT", value_parser = parse_source, conflicts_with = "template")]
    pub sources: Vec<(String, SourceText)>,
}

/// A `--source` value: the text itself, or a file to read (when the
/// command runs, within `--max-input`).
#[derive(Clone, Debug)]
pub enum SourceText {
    Inline(String),
    File(PathBuf),
}

/// `ID=TEXT` or `ID=@FILE`.
fn parse_source(value: &str) -> Result<(String, SourceText), String> {
    let (id, text) = value
        .split_once('=')
        .ok_or_else(|| format!("`{value}` is not ID=TEXT or ID=@FILE"))?;
    if id.trim().is_empty() {
        return Err(format!("`{value}` has an empty source id"));
    }
    let text = match text.strip_prefix('@') {
        Some(path) => SourceText::File(PathBuf::from(path)),
        None => SourceText::Inline(text.to_string()),
    };
    Ok((id.trim().to_string(), text))
}

pub async fn run(globals: &Globals, args: PromptArgs) -> Result<ExitCode> {
    args.turn.declare_tools_and_key()?;
    // A new conversation may create the database; continuing one needs it.
    let continues = args.conversation.continues();
    let recording = match continues {
        true => OpenMode::Existing,
        false => OpenMode::Create,
    };
    let ctx = &globals.open_for_turn(recording, args.turn.no_log, continues)?;
    ctx.check_name_free(args.conversation.name.as_deref())?;
    let settings = args.turn.settings().await?;
    let stored = ctx.continued(&args.conversation)?;
    if !args.sources.is_empty() {
        if settings.no_log {
            bail!(
                "--source records the turn so it can be explained: it cannot be combined with --no-log"
            );
        }
        if !args.parts.is_empty() {
            bail!(
                "a turn with --source is text: give its fragments as sources (--source ID=@FILE), and attachments in a turn without --source"
            );
        }
        let text = input::turn_text(args.text)?;
        return prompt_with_sources(
            ctx,
            SourcedTurn {
                model: settings.model,
                existing: stored,
                name: args.conversation.name,
                system: settings.system,
                sources: input::sources(args.sources)?,
                tools: settings.tools.unwrap_or_default(),
                chain_limit: settings.chain_limit,
                text,
            },
        )
        .await;
    }
    let (input, configured_model) =
        turn_input(&args.template, args.text, &args.parts, &settings).await?;
    let conversation = match (stored, configured_model) {
        (Some(stored), Some(model)) => {
            Conversation::load(&ctx.store, &stored.id, &model)
                .model(&model)
                .await?
        }
        (Some(stored), None) => open_stored(ctx, &stored, settings.model.as_deref()).await?,
        (None, configured) => {
            let home = match configured {
                Some(model) => model,
                None => home_model(settings.model.clone())?,
            };
            settings.new_conversation(ctx, &home, args.conversation.name)
        }
    };
    let prompt = settings.apply(
        settings.recorded_or_not(conversation).prompt(input),
        settings.system.clone(),
    );
    run_turn(ctx, prompt, &settings, None).await?;
    Ok(ExitCode::SUCCESS)
}

/// A `prompt --source` turn, as the command line gave it: a turn with
/// tagged context sources in a new conversation, or the latest (`-c`) or a
/// chosen one (`--cid`) continued.
struct SourcedTurn {
    model: Option<String>,
    existing: Option<skein::store::ConversationRecord>,
    name: Option<String>,
    system: Option<String>,
    sources: Vec<(String, String)>,
    /// Built-in tools offered (`-T`); each is a source named by the tool.
    tools: Vec<Arc<dyn Tool>>,
    chain_limit: Option<u32>,
    text: String,
}

async fn prompt_with_sources(ctx: &Context, turn: SourcedTurn) -> Result<ExitCode> {
    let SourcedTurn {
        model,
        existing,
        name,
        system,
        sources,
        tools,
        chain_limit,
        text,
    } = turn;
    if let Some(existing) = &existing {
        start_offered_tools(ctx, existing).await?;
    }
    let home = turn_model(model.as_deref(), existing.as_ref())?;
    let mut builder = chat_builder(ctx, &home)
        .sources(sources.into_iter().map(|(id, text)| Source::fact(id, text)));
    if let Some(system) = system {
        builder = builder.system(system);
    }
    if let Some(name) = name {
        builder = builder.name(name);
    }
    for tool in tools {
        builder = builder.tool(tool);
    }
    if let Some(limit) = chain_limit {
        builder = builder.chain_limit(limit);
    }
    let mut chat = match &existing {
        Some(conversation) => builder.resume(&conversation.id).await?,
        None => builder.build().await?,
    };
    let asked = existing
        .as_ref()
        .map(|conversation| conversation.id.clone());
    let turn = chat.send(text).await?.clone();
    let conversation = chat
        .conversation()
        .cloned()
        .context("a recorded chat with a store has a conversation")?;
    if let Some(asked) = asked.filter(|asked| *asked != conversation) {
        ui::note(format!(
            "conversation {} moved on while this turn ran: the reply landed in a new branch, conversation {}",
            asked.short(),
            conversation.short()
        ));
    }
    let run = turn.runs().last().cloned();
    if ctx.json {
        return print_json(&json!({
            "conversation": conversation,
            "node": turn.node(),
            "run": run,
            "turn": turn.index(),
            "text": turn.text(),
            "sources": turn.sources(),
        }));
    }
    outln!("{}", turn.text())?;
    ui::note(format!(
        "conversation {} · turn {} · node {} · {} source(s) tagged: `skein explain {}` ranks them",
        conversation.short(),
        turn.index(),
        turn.node().short(),
        turn.sources().len(),
        turn.node().short()
    ));
    Ok(ExitCode::SUCCESS)
}
