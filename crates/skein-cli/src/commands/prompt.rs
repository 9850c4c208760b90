/*!
`skein prompt`: run a turn and record it, in a new conversation or one it
continues (`-c`, `--cid`), through the library's `Conversation`; with `-t`
it renders a configured prompt (a template), with `--save NAME` it saves
one instead of running, and with `--source` it is a recorded chat's turn
whose tagged context sources `explain` and `rerun` work on.
*/

use super::common::configured::{TemplateArgs, turn_input};
use super::common::context::{Context, Globals, print_json};
use super::common::engine_dir::{EngineDir, TemplateSpec};
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
    /// Save the prompt as template NAME instead of running it: TEXT, -s, -m, -o, -T and --schema
    /// (`{{ name }}` in TEXT or -s is a variable, set with -p); run it with `-t NAME`
    #[arg(
        long,
        value_name = "NAME",
        conflicts_with_all = ["template", "continue_last", "cid", "name", "sources", "no_log"]
    )]
    pub save: Option<String>,
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
    if let Some(name) = &args.save {
        return save(globals, name, &args).await;
    }
    // A new conversation may create the database; continuing one needs it.
    let continues = args.conversation.continues();
    let recording = match continues {
        true => OpenMode::Existing,
        false => OpenMode::Create,
    };
    let ctx = &globals.open_for_turn(recording, args.turn.no_log, continues)?;
    ctx.check_name_free(args.conversation.name.as_deref())?;
    let mut settings = args.turn.settings().await?;
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
        turn_input(&args.template, args.text, &args.parts, &mut settings).await?;
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

/// `--save NAME`: the prompt as a template of the engine directory, run
/// nothing and open no database.
async fn save(globals: &Globals, name: &str, args: &PromptArgs) -> Result<ExitCode> {
    if !args.parts.is_empty() {
        return Err(crate::exit::usage(
            "a template holds text, not attachments or fragments: leave -a and -f out of --save",
        ));
    }
    let request = &args.turn.request;
    let settings = request.settings(true).await?;
    let spec = TemplateSpec {
        system: request.system.clone(),
        text: args.text.clone(),
        model: request.model.model.clone(),
        options: settings.options,
        tools: request.tools.tools.clone(),
        schema: settings.schema,
    };
    let empty = spec.system.is_none()
        && spec.text.is_none()
        && spec.model.is_none()
        && spec.options == Default::default()
        && spec.tools.is_empty()
        && spec.schema.is_none();
    if empty {
        return Err(crate::exit::usage(format!(
            "--save {name} has nothing to save: give the prompt TEXT, -s TEXT, -m MODEL, \
             -o KEY VALUE, -T TOOL or --schema"
        )));
    }
    let dir = EngineDir::located()?;
    let saved = dir.save_template(name, spec)?;
    if globals.json {
        return print_json(&json!({
            "template": name,
            "version": saved.version,
            "file": saved.file,
            "profile": saved.profile,
            "variables": saved.variables,
        }));
    }
    outln!("{}", saved.file.display())?;
    let variables = match saved.variables.as_slice() {
        [] => String::new(),
        names => format!(
            " {}",
            names
                .iter()
                .map(|name| format!("-p {name} VALUE"))
                .collect::<Vec<_>>()
                .join(" ")
        ),
    };
    ui::note(format!(
        "saved template {name} (version {}{}); run it with `skein -t {name}{variables}`",
        saved.version,
        saved
            .profile
            .as_ref()
            .map(|profile| format!(", on profile {profile}"))
            .unwrap_or_default()
    ));
    Ok(ExitCode::SUCCESS)
}
