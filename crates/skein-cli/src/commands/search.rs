/*!
`skein search`: messages by their words (through `Store::search`): newest
first, each with the conversations it is in and a snippet around the
match; the messages only replays sent or reached (their answers, a judge's
prompts) are left out unless `--replays`.
*/

use super::common::context::{Globals, print_json};
use crate::ui::{self, outln};
use anyhow::Result;
use clap::Args;
use skein::store::SearchQuery;
use skein::store::search::MAX_LIMIT;
use std::process::ExitCode;

#[derive(Debug, Args)]
pub struct SearchArgs {
    /// The words to find (every word; "quoted phrases" in order; word* is a prefix)
    pub text: String,
    /// Only messages of this conversation's thread (any unique prefix of its id, or its name)
    #[arg(long, value_name = "ID")]
    pub cid: Option<String>,
    /// Only messages of this role (system, user, assistant, tool)
    #[arg(long, value_name = "ROLE")]
    pub role: Option<skein::core::Role>,
    /// How many matches to show, newest first (at most 1000)
    #[arg(short = 'n', long, default_value_t = 20, value_name = "N")]
    pub count: usize,
    /// Include the messages only replays sent or reached (left out by default, as `skein log` leaves
    /// out their runs)
    #[arg(long)]
    pub replays: bool,
}

/// `skein search`: matching messages, newest first, each with the
/// conversations it is in and a snippet around the match.
pub fn run(globals: &Globals, args: SearchArgs) -> Result<ExitCode> {
    let ctx = &globals.open_to_show()?;
    let conversation = args
        .cid
        .as_deref()
        .map(|cid| ctx.store.resolve_conversation(cid))
        .transpose()?;
    let results = ctx.store.search(
        &SearchQuery::new(args.text)
            .limit(args.count)
            .conversation(conversation)
            .role(args.role)
            .replays(args.replays),
    )?;
    if ctx.json {
        return print_json(&results);
    }
    if results.matches.is_empty() {
        outln!("no messages match")?;
    }
    for found in &results.matches {
        let conversations: Vec<String> = found
            .conversations
            .iter()
            .map(|c| match &c.name {
                Some(name) => format!("{} ({})", c.id.short(), ui::one_line(name, 40)),
                None => c.id.short().to_string(),
            })
            .collect();
        outln!(
            "{} · {} · {}",
            found.node.short(),
            if conversations.is_empty() {
                "no conversation".to_string()
            } else {
                format!("conversation {}", conversations.join(", "))
            },
            found.role.as_str()
        )?;
        outln!("  {}", ui::one_line(&found.snippet, 200))?;
    }
    if results.truncated {
        outln!("(more messages match: show more with -n, up to {MAX_LIMIT}, or narrow the words)")?;
    }
    Ok(ExitCode::SUCCESS)
}
