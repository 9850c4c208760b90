/*!
Recorded chats on the command line: `prompt --source` (a turn whose context
sources are tagged so it can be explained and re-run), `explain` (rank a
turn's sources), `rerun` (the turn again without chosen sources, with a
verdict when the baseline is checked) and `fork --from-rerun` (a new
conversation from the counterfactual answer).

Every conversation the CLI records can be loaded as a recorded chat, so any
of its turns can be explained and re-run, with or without `--source`.
*/

use super::turns::turn_model;
use super::{Context, print_json};
use crate::flags::{ExplainArgs, ForkArgs, RerunArgs, TurnRef};
use crate::ui::{self, outln};
use anyhow::{Context as _, Result, bail};
use serde_json::json;
use skein::recorded::{
    CachedEmbedder, EmbedError, Embedder, LexicalEmbedder, LoadedTurn, MiniLmEmbedder,
    ReasonOptions, RecordedChat, RerunOptions, Source, TurnAt, conversation_of_node,
};
use skein::{Model, Tool};
use std::process::ExitCode;
use std::sync::Arc;

/// A turn with tagged context sources: a new conversation, or the latest
/// (`-c`) or a chosen one (`--cid`) continued.
/// A `prompt --source` turn: what the command line gave.
pub struct SourcedTurn {
    pub model: Option<String>,
    pub existing: Option<skein::store::ConversationRecord>,
    pub name: Option<String>,
    pub system: Option<String>,
    pub sources: Vec<(String, String)>,
    /// Built-in tools offered (`-T`); each is a source named by the tool.
    pub tools: Vec<Arc<dyn Tool>>,
    pub chain_limit: Option<u32>,
    pub text: String,
}

pub async fn prompt_with_sources(ctx: &Context, turn: SourcedTurn) -> Result<ExitCode> {
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

pub async fn explain(ctx: &Context, args: ExplainArgs) -> Result<ExitCode> {
    let (mut turn, embedder) = load_turn(ctx, &args.turn).await?;
    let report = turn
        .reason(
            ReasonOptions::new()
                .embedder(embedder)
                .max_suspects(args.max_suspects),
        )
        .await?;
    if ctx.json {
        return print_json(&*report);
    }
    outln!("{}", report.render().trim_end())?;
    Ok(ExitCode::SUCCESS)
}

pub async fn rerun(ctx: &Context, args: RerunArgs) -> Result<ExitCode> {
    let (mut turn, embedder) = load_turn(ctx, &args.turn).await?;
    turn.reason(
        ReasonOptions::new()
            .embedder(embedder.clone())
            .max_suspects(args.max_suspects),
    )
    .await?;
    let k = turn.index();
    let mut options = RerunOptions::ignore(args.ignore.clone())
        .samples(args.samples)
        .embedder(embedder);
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

/// `skein fork --from-rerun RERUN [TEXT]`.
pub async fn fork_from_rerun(ctx: &Context, args: ForkArgs, rerun: &str) -> Result<ExitCode> {
    let id = ctx.store.resolve_rerun(rerun)?;
    let record = ctx.store.rerun(&id)?;
    let stored = ctx.store.conversation(&record.conversation)?;
    start_offered_tools(ctx, &stored).await?;
    let home = turn_model(args.turn.request.model.model.as_deref(), Some(&stored))?;
    let turn = chat_builder(ctx, &home)
        .load_turn(TurnAt::Number(
            record.conversation.clone(),
            record.turn as usize,
        ))
        .await?;
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

/// A recorded chat on `model`, recording into the CLI's store.
fn chat_builder(ctx: &Context, model: &Model) -> skein::recorded::RecordedChatBuilder {
    RecordedChat::on_model(model).store(ctx.store.clone())
}

/// The turn, loaded alone, and the embedder to use.
async fn load_turn(ctx: &Context, turn: &TurnRef) -> Result<(LoadedTurn, Arc<dyn Embedder>)> {
    let (conversation, at) = match (&turn.node, &turn.cid, turn.turn) {
        (Some(node), _, _) => {
            let node = ctx.node(node)?;
            let conversation = conversation_of_node(&ctx.store, node).await?;
            (conversation, TurnAt::Reply(node))
        }
        (None, Some(cid), Some(k)) => {
            let conversation = ctx.conversation(cid)?.id;
            (conversation.clone(), TurnAt::Number(conversation, k))
        }
        (None, Some(_), None) => bail!("--cid needs --turn K (turns are numbered from 0)"),
        (None, None, _) => bail!("say which turn: NODE, or --cid ID --turn K"),
    };
    let embedder = embedder(ctx, &turn.embedder)?;
    let stored = ctx.store.conversation(&conversation)?;
    start_offered_tools(ctx, &stored).await?;
    let home = turn_model(None, Some(&stored))?;
    let loaded = chat_builder(ctx, &home)
        .embedder(embedder.clone())
        .load_turn(at)
        .await?;
    Ok((loaded, embedder))
}

/// The embedder by name, caching its vectors in the store.
fn embedder(ctx: &Context, name: &str) -> Result<Arc<dyn Embedder>> {
    let inner: Arc<dyn Embedder> = match name {
        "minilm" => Arc::new(MiniLmEmbedder::load(1).map_err(|error| match error {
            EmbedError::NoLocalModel => anyhow::anyhow!("{error}, such as --embedder lexical"),
            error => anyhow::anyhow!(
                "{error}; fetch it with `skein models pull minilm`, or pass --embedder lexical"
            ),
        })?),
        "lexical" => Arc::new(LexicalEmbedder::new(256)),
        other => bail!("unknown embedder `{other}`: use `minilm` or `lexical`"),
    };
    Ok(Arc::new(CachedEmbedder::with_store(
        inner,
        ctx.store.clone(),
    )))
}

/// Start the MCP servers whose tools `stored`'s runs offered, so a loaded
/// chat's tool loops (reruns, later turns) can call them again.
async fn start_offered_tools(
    ctx: &Context,
    stored: &skein::store::ConversationRecord,
) -> Result<()> {
    let runs = ctx.store.runs_of_conversation(&stored.id)?;
    let names: Vec<String> = runs
        .iter()
        .flat_map(|run| run.tools.iter().map(|tool| tool.name.clone()))
        .chain(stored.settings.tools.iter().cloned())
        .collect();
    super::tools::start_for(&names).await
}
