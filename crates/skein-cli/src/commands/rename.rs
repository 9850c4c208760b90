/*!
`skein rename`: give a conversation a name (the one `--cid NAME` and every
command that takes a conversation then find it by), change it, or take it
away (`--clear`), through the store's one naming rule
(`Store::rename_conversation`, as `--name` and the proxy's
`x-skein-session` name conversations): a name that reads as an id, or that
another conversation has, is refused and nothing changes.
*/

use super::common::context::{Globals, print_json};
use crate::exit::{BAD_COMMAND_LINE, ExitWith};
use crate::ui::{self, outln};
use anyhow::Result;
use clap::Args;
use skein::store::OpenMode;
use std::process::ExitCode;

#[derive(Debug, Args)]
pub struct RenameArgs {
    /// The conversation (any unique prefix of its id, or its name)
    #[arg(value_name = "CONVERSATION")]
    pub conversation: String,
    /// Its new name: what `--cid NAME` then finds it by
    #[arg(
        value_name = "NEWNAME",
        required_unless_present = "clear",
        conflicts_with = "clear"
    )]
    pub name: Option<String>,
    /// Take its name away instead (it is listed by its title again)
    #[arg(long)]
    pub clear: bool,
}

pub fn run(globals: &Globals, args: RenameArgs) -> Result<ExitCode> {
    let ctx = &globals.open(OpenMode::Existing)?;
    let conversation = ctx.conversation(&args.conversation)?;
    let name = args.name.as_deref();
    if name.is_some_and(|name| name.trim().is_empty()) {
        return Err(anyhow::Error::new(ExitWith(
            BAD_COMMAND_LINE,
            "a conversation's name cannot be empty: give a name, or --clear to take its name \
             away"
                .into(),
        )));
    }
    let old = conversation.name.clone();
    let unchanged = old.as_deref() == name;
    if !unchanged {
        ctx.store.rename_conversation(&conversation.id, name)?;
    }
    let renamed = ctx.store.conversation(&conversation.id)?;
    if ctx.json {
        return print_json(&renamed);
    }
    let short = renamed.id.short();
    let was = old.map_or_else(String::new, |old| {
        format!(" (was `{}`)", ui::one_line(&old, 60))
    });
    match (name, unchanged) {
        (Some(name), true) => outln!("conversation {short} is already named `{name}`")?,
        (Some(name), false) => outln!("conversation {short} is now named `{name}`{was}")?,
        (None, true) => outln!("conversation {short} has no name")?,
        (None, false) => outln!("conversation {short} has no name now{was}")?,
    }
    Ok(ExitCode::SUCCESS)
}
