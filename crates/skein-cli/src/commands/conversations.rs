/*!
`skein conversations`: the conversations, newest first, with their model,
name and origin.
*/

use super::common::context::{Globals, print_json};
use crate::ui::{self, outln};
use anyhow::Result;
use clap::Args;
use std::process::ExitCode;

#[derive(Debug, Args)]
pub struct ConversationsArgs {
    /// How many to list; 0 lists them all
    #[arg(short = 'n', long, default_value_t = 20, value_name = "N")]
    pub count: usize,
}

/// `skein conversations`: newest first, with their model and origin.
pub fn run(globals: &Globals, args: ConversationsArgs) -> Result<ExitCode> {
    let ctx = &globals.open_to_show()?;
    let count = match args.count {
        0 => usize::MAX >> 1,
        count => count,
    };
    let conversations = ctx.store.list_conversations(count)?;
    if ctx.json {
        return print_json(&conversations);
    }
    if conversations.is_empty() {
        outln!("no conversations yet: start one with `skein prompt TEXT`")?;
    }
    for conversation in &conversations {
        let model = conversation.settings.model.as_deref().unwrap_or("-");
        let origin = conversation.origin.as_ref().map(|origin| {
            format!(
                " · forked from {}{}",
                origin
                    .conversation
                    .as_ref()
                    .map_or_else(|| "a node".to_string(), |c| c.short().to_string()),
                origin
                    .node
                    .map(|node| format!(" at {}", node.short()))
                    .unwrap_or_default()
            )
        });
        outln!(
            "{} · {} · {} messages · {}{}{}",
            conversation.id.short(),
            ui::timestamp(conversation.updated_ms),
            conversation.len,
            model,
            conversation
                .label()
                .map(|label| format!(" · {}", ui::one_line(label, 60)))
                .unwrap_or_default(),
            origin.unwrap_or_default()
        )?;
    }
    Ok(ExitCode::SUCCESS)
}
