/*!
`skein prepare`: the fully rendered request a `prompt` with the same
arguments would send (a configured prompt with `-t`), with nothing run or
recorded; it reads the database only for the history `-c` or `--cid`
names.
*/

use super::common::configured::{TemplateArgs, show_prepared, turn_input};
use super::common::context::{Globals, latest_conversation};
use super::common::model::{home_model, turn_model};
use super::common::tools::declare;
use super::common::turn_options::{PartsArgs, RequestArgs};
use anyhow::Result;
use clap::Args;
use skein::Conversation;
use skein::store::OpenMode;
use std::process::ExitCode;

#[derive(Debug, Args)]
pub struct PrepareArgs {
    /// The turn's text, as `prompt` takes it (optional with -t)
    pub text: Option<String>,
    #[command(flatten)]
    pub template: TemplateArgs,
    #[command(flatten)]
    pub request: RequestArgs,
    /// After the most recently updated conversation's history
    #[arg(short = 'c', long = "continue", conflicts_with = "cid")]
    pub continue_last: bool,
    /// After the history of the conversation with this id (any unique prefix) or name
    #[arg(long, value_name = "ID")]
    pub cid: Option<String>,
}

pub async fn run(globals: &Globals, args: PrepareArgs) -> Result<ExitCode> {
    declare(&args.request.tools.mcp)?;
    // A request rendered without a conversation's history needs no
    // database.
    let ctx = match args.cid.is_some() || args.continue_last {
        // Only read, as a `--no-log` turn that continues one.
        true => Some(globals.open_for_turn(OpenMode::ReadOnly, true, true)?),
        false => None,
    };
    prepare(ctx.as_ref().map(|ctx| &ctx.store), globals.json, args).await
}

/// The request a `prompt` with the same arguments would send, rendered and
/// resolved, with nothing run or recorded. `store` is needed only with
/// `--cid` or `-c`.
async fn prepare(store: Option<&skein::Store>, json: bool, args: PrepareArgs) -> Result<ExitCode> {
    let mut settings = args.request.settings(true).await?;
    let (input, configured_model) = turn_input(
        &args.template,
        args.text,
        &PartsArgs::default(),
        &mut settings,
    )
    .await?;
    let stored = match (store, &args.cid, args.continue_last) {
        (Some(store), Some(cid), _) => Some(store.conversation(&store.resolve_conversation(cid)?)?),
        (Some(store), None, true) => Some(latest_conversation(store)?),
        _ => None,
    };
    let conversation = match (stored, store) {
        (Some(stored), Some(store)) => {
            let model = match configured_model {
                Some(model) => model,
                None => turn_model(settings.model.as_deref(), Some(&stored))?,
            };
            Conversation::load(store, &stored.id, &model)
                .model(&model)
                .await?
        }
        _ => {
            let home = match configured_model {
                Some(model) => model,
                None => home_model(settings.model.clone())?,
            };
            let mut builder = home.conversation();
            if let Some(tools) = settings.tools.clone() {
                builder = builder.tools(tools);
            }
            builder.build()
        }
    };
    let prompt = settings.apply(
        conversation.without_store().prompt(input),
        settings.system.clone(),
    );
    show_prepared(&prompt.prepare()?, json)
}
