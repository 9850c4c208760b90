/*!
Recorded chats on the command line, as `prompt --source`, `explain`,
`rerun` and `fork --from-rerun` open them: the turn `explain` and `rerun`
name ([`TurnRef`]), loaded alone with its embedder, and the MCP servers a
loaded chat's tool loops need.

Every conversation the CLI records can be loaded as a recorded chat, so any
of its turns can be explained and re-run, with or without `--source`.
*/

use super::context::Context;
use super::home::{CliHome, cli_error, recorded_error};
use anyhow::{Result, bail};
use clap::Args;
use skein::Model;
use skein::recorded::{
    CachedEmbedder, EmbedError, Embedder, LoadedTurn, RecordedChat, RecordedError, TurnAt,
    open_turn,
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
    /// sentence embedder; `skein models pull minilm`) or `lexical` [default: minilm where it is
    /// downloaded, else lexical, said on stderr]
    #[arg(long, value_name = "NAME")]
    pub embedder: Option<String>,
}

/// A recorded chat on `model`, recording into the CLI's store.
pub fn chat_builder(ctx: &Context, model: &Model) -> skein::recorded::RecordedChatBuilder {
    RecordedChat::on_model(model).store(ctx.store.clone())
}

/// The turn, loaded alone (the turn layer's [`open_turn`]: its
/// conversation's tools started, on its own model), and the embedder to
/// use.
pub async fn load_turn(ctx: &Context, turn: &TurnRef) -> Result<(LoadedTurn, Arc<dyn Embedder>)> {
    let at = match (&turn.node, &turn.cid, turn.turn) {
        (Some(node), _, _) => TurnAt::Reply(ctx.node(node)?),
        (None, Some(cid), Some(k)) => TurnAt::Number(ctx.conversation(cid)?.id, k),
        (None, Some(_), None) => bail!("--cid needs --turn K (turns are numbered from 0)"),
        (None, None, _) => bail!("say which turn: NODE, or --cid ID --turn K"),
    };
    let embedder = embedder(ctx, turn.embedder.as_deref())?;
    let loaded = open_turn(
        &ctx.store,
        at,
        &CliHome::of_command()?,
        Some(embedder.clone()),
        None,
    )
    .await
    .map_err(recorded_error)?;
    Ok((loaded, embedder))
}

/// The embedder by name (`skein::recorded::embed::choose`: with none,
/// MiniLM where it is on this machine, else the lexical one, said on
/// stderr), caching its vectors in the store.
pub fn embedder(ctx: &Context, name: Option<&str>) -> Result<Arc<dyn Embedder>> {
    let chosen = skein::recorded::embed::choose(name).map_err(|error| match error {
        RecordedError::Embed(EmbedError::NoLocalModel) => {
            anyhow::anyhow!("{error}, such as --embedder lexical")
        }
        RecordedError::Embed(error) => anyhow::anyhow!(
            "{error}; fetch it with `skein models pull minilm`, or pass --embedder lexical"
        ),
        error => anyhow::Error::new(crate::exit::ExitWith(
            crate::exit::BAD_COMMAND_LINE,
            error.to_string(),
        )),
    })?;
    if let Some(note) = chosen.fallback {
        crate::ui::note(note);
    }
    Ok(Arc::new(CachedEmbedder::with_store(
        chosen.embedder,
        ctx.store.clone(),
    )))
}

/// Start the MCP servers whose tools `stored`'s turns may call (the turn
/// layer's [`offered_tools`](skein::conversation::home::offered_tools)), so
/// a loaded chat's tool loops (reruns, later turns) can call them again.
pub async fn start_offered_tools(
    ctx: &Context,
    stored: &skein::store::ConversationRecord,
) -> Result<()> {
    skein::conversation::home::start_offered_tools(&ctx.store, stored, &CliHome::of_command()?)
        .await
        .map_err(cli_error)
}
