/*!
`skein redact`: erase one message's content in place (`Store::redact`): it
keeps its id and place in every thread, and a tombstone keeps its
content's hash, who erased it, when and why. Other messages may still
hold the same text (a reply that echoed it, the same prompt asked again):
after erasing, it searches for them (`Store::search`, one phrase of the
message's words) and names up to ten, to be redacted too.
*/

use super::common::context::{Globals, print_json};
use crate::ui::{self, outln};
use anyhow::Result;
use clap::Args;
use skein::NodeId;
use skein::store::{OpenMode, SearchQuery, Store};
use std::process::ExitCode;

/// How many of the other messages holding the erased text are named.
const STILL_IN_SHOWN: usize = 10;

#[derive(Debug, Args)]
pub struct RedactArgs {
    /// The message (any unique prefix of its id)
    pub node: String,
    /// Why it is erased (kept in the tombstone)
    #[arg(long, value_name = "TEXT")]
    pub reason: String,
    /// Who erases it (kept in the tombstone) [default: $USER]
    #[arg(long, value_name = "NAME")]
    pub by: Option<String>,
}

pub fn run(globals: &Globals, args: RedactArgs) -> Result<ExitCode> {
    let ctx = &globals.open(OpenMode::Existing)?;
    let node = ctx.node(&args.node)?;
    let by = args
        .by
        .or_else(|| std::env::var("USER").ok())
        .unwrap_or_else(|| "unknown".into());
    // The query is made before erasing: afterwards there is no text.
    let query = SearchQuery::holding_text_of(&ctx.store.node(node)?.message);
    let redacted = ctx.store.redact(node, &by, &args.reason)?;
    let (still_in, more) = match query {
        Some(query) => still_in(&ctx.store, node, query),
        None => (Vec::new(), false),
    };
    if ctx.json {
        let mut report = serde_json::to_value(&redacted)?;
        report["still_in"] = serde_json::json!(still_in);
        report["still_in_truncated"] = serde_json::json!(more);
        return print_json(&report);
    }
    outln!(
        "erased {} part(s) of {} (its id and place stay); removed {} blob(s), {} cached embedding(s), \
         {} piece(s) of the request bodies that carried it",
        redacted.parts,
        redacted.node,
        redacted.blobs,
        redacted.embeddings,
        redacted.body_pieces_erased,
    )?;
    if !redacted.copies.is_empty() {
        let places: Vec<String> = redacted
            .copies
            .iter()
            .map(|held| format!("{}.{} ({} row(s))", held.table, held.column, held.rows))
            .collect();
        outln!(
            "erased its copies kept outside the graph: {}",
            places.join(", ")
        )?;
    }
    if !still_in.is_empty() {
        let ids: Vec<String> = still_in.iter().map(|node| node.short()).collect();
        outln!(
            "the erased text is still in {}{} other message(s): {}{}",
            if more { "more than " } else { "" },
            still_in.len(),
            ids.join(", "),
            if more { ", …" } else { "" }
        )?;
        outln!("redact them too (`skein redact ID --reason ...`); `skein search` finds the rest")?;
    }
    outln!("run `skein gc` to rewrite the database without the erased bytes")?;
    Ok(ExitCode::SUCCESS)
}

/// The other messages that still hold the text `query` looks for (at most
/// [`STILL_IN_SHOWN`], newest first), and whether there are more. A search
/// that fails is a note: the message is erased whatever it finds.
fn still_in(store: &Store, erased: NodeId, query: SearchQuery) -> (Vec<NodeId>, bool) {
    match store.search(&query.limit(STILL_IN_SHOWN + 1)) {
        Ok(found) => {
            let mut nodes: Vec<NodeId> = found
                .matches
                .into_iter()
                .map(|found| found.node)
                .filter(|node| *node != erased)
                .collect();
            let more = found.truncated || nodes.len() > STILL_IN_SHOWN;
            nodes.truncate(STILL_IN_SHOWN);
            (nodes, more)
        }
        Err(error) => {
            ui::note(format!(
                "could not look for other messages holding the erased text: {error}"
            ));
            (Vec::new(), false)
        }
    }
}
