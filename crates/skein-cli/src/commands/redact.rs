/*!
`skein redact`: erase one message's content in place (`Store::redact`): it
keeps its id and place in every thread, and a tombstone keeps its
content's hash, who erased it, when and why.
*/

use super::common::context::{Globals, print_json};
use crate::ui::outln;
use anyhow::Result;
use clap::Args;
use skein::store::OpenMode;
use std::process::ExitCode;

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
    let ctx = &globals.open(OpenMode::Create)?;
    let node = ctx.node(&args.node)?;
    let by = args
        .by
        .or_else(|| std::env::var("USER").ok())
        .unwrap_or_else(|| "unknown".into());
    let redacted = ctx.store.redact(node, &by, &args.reason)?;
    if ctx.json {
        return print_json(&redacted);
    }
    outln!(
        "erased {} part(s) of {} (its id and place stay); removed {} blob(s), {} cached embedding(s), \
         {} piece(s) of the request bodies that carried it, the events or prompt records of {} run(s)",
        redacted.parts,
        redacted.node,
        redacted.blobs,
        redacted.embeddings,
        redacted.body_pieces_erased,
        redacted.runs_scrubbed
    )?;
    outln!("run `skein gc` to rewrite the database without the erased bytes")?;
    Ok(ExitCode::SUCCESS)
}
