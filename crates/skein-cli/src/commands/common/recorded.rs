/*!
Recorded chats on the command line, as `prompt --source`, `explain`,
`rerun` and `fork --from-rerun` open them: the turn `explain` and `rerun`
name ([`TurnRef`]), loaded alone with its embedder, and the MCP servers a
loaded chat's tool loops need.

Every conversation the CLI records can be loaded as a recorded chat, so any
of its turns can be explained and re-run, with or without `--source`.
*/

use super::context::Context;
use super::model::turn_model;
use anyhow::{Result, bail};
use clap::Args;
use skein::Model;
use skein::recorded::{
    CachedEmbedder, EmbedError, Embedder, LexicalEmbedder, LoadedTurn, MiniLmEmbedder,
    RecordedChat, TurnAt, conversation_of_node,
};
use std::sync::Arc;

#[derive(Debug, Args)]
pub struct TurnRef {
    /// The turn's reply node (any unique prefix; a conversation's id or name stands for its head)
    #[arg(required_unless_present = "cid", conflicts_with_all = ["cid", "turn"])]
    pub node: Option<String>,
    /// The conversation (with --turn)
    #[arg(long, value_name = "ID", requires = "turn")]
    pub cid: Option<String>,
    /// The turn's number in the conversation, from 0
    #[arg(long, value_name = "K")]
    pub turn: Option<usize>,
    /// How replies are compared and sources scored: `minilm` (the local
    /// sentence embedder; `skein models pull minilm`) or `lexical`
    #[arg(long, default_value = "minilm", value_name = "NAME")]
    pub embedder: String,
}

/// A recorded chat on `model`, recording into the CLI's store.
pub fn chat_builder(ctx: &Context, model: &Model) -> skein::recorded::RecordedChatBuilder {
    RecordedChat::on_model(model).store(ctx.store.clone())
}

/// The turn, loaded alone, and the embedder to use.
pub async fn load_turn(ctx: &Context, turn: &TurnRef) -> Result<(LoadedTurn, Arc<dyn Embedder>)> {
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
pub fn embedder(ctx: &Context, name: &str) -> Result<Arc<dyn Embedder>> {
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
pub async fn start_offered_tools(
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
