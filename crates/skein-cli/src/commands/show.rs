/*!
`skein show`: one node in full (its parts and where each is kept, the runs
that produced it, its children).
*/

use super::common::context::{Globals, print_json};
use crate::ui::outln;
use anyhow::Result;
use clap::Args;
use serde_json::json;
use skein::core::Part;
use std::process::ExitCode;

#[derive(Debug, Args)]
pub struct ShowArgs {
    /// The node (any unique prefix of its id; a conversation's id or name stands for its head)
    pub node: String,
}

pub fn run(globals: &Globals, args: ShowArgs) -> Result<ExitCode> {
    let ctx = &globals.open_to_show()?;
    let id = ctx.node(&args.node)?;
    let node = ctx.store.node(id)?;
    let runs = ctx.store.runs_producing(id)?;
    let children = ctx.store.children(id)?;
    let heads = ctx.store.conversations_at(id)?;
    if ctx.json {
        return print_json(&json!({
            "node": node,
            "children": children,
            "runs": runs,
            "head_of": heads.iter().map(|c| &c.id).collect::<Vec<_>>(),
        }));
    }
    outln!("node      {}", node.id)?;
    outln!(
        "parent    {}",
        node.parent
            .map_or_else(|| "(root)".to_string(), |p| p.to_hex())
    )?;
    outln!("depth     {}", node.depth)?;
    outln!("role      {}", node.message.role)?;
    for (index, part) in node.message.parts.iter().enumerate() {
        outln!("\npart {index}: {}{}", part.kind_name(), storage(part))?;
        match part {
            Part::Text { text } => outln!("{text}")?,
            Part::ToolCall(call) => outln!(
                "id {}\nname {}\narguments {}",
                call.id,
                call.name,
                call.arguments
            )?,
            Part::ToolResult(result) => outln!(
                "call {}{}\n{}",
                result.call_id,
                if result.is_error { " (error)" } else { "" },
                result.content
            )?,
            Part::Attachment(a) => outln!("{} · {} bytes", a.media_type, a.data.len())?,
            Part::Erased(erased) => outln!(
                "erased by {} at {} ms since 1970: {}\ncontent digest {}",
                erased.erased_by,
                erased.erased_at_ms,
                erased.reason,
                erased.digest
            )?,
            _ => outln!("(a part this version cannot display)")?,
        }
    }
    for conversation in &heads {
        outln!("\nhead of conversation {}", conversation.id.short())?;
    }
    for run in &runs {
        outln!(
            "\nproduced by run {} · {}{} via {} · {} · {} in / {} out tokens{}{}",
            run.id.short(),
            run.model,
            answered_as(run),
            run.provider,
            run.status.as_str(),
            run.usage.input_tokens.map_or("?".into(), |n| n.to_string()),
            run.usage
                .output_tokens
                .map_or("?".into(), |n| n.to_string()),
            if run.tools.is_empty() {
                String::new()
            } else {
                format!(
                    " · tools: {}",
                    run.tools
                        .iter()
                        .map(|t| t.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            },
            run.client
                .as_ref()
                .map_or(String::new(), |client| format!(" · client {client}")),
        )?;
    }
    if !children.is_empty() {
        outln!(
            "\nchildren: {}",
            children
                .iter()
                .map(|c| c.short())
                .collect::<Vec<_>>()
                .join(", ")
        )?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Where a text or an attachment is kept: a payload of
/// `BLOB_THRESHOLD` bytes or more is one blob, shared by every node that
/// holds the same bytes, named by its digest.
pub fn storage(part: &Part) -> String {
    let bytes = match part {
        Part::Text { .. } | Part::Attachment(_) => part.payload(),
        _ => return String::new(),
    };
    if bytes.len() < skein::store::BLOB_THRESHOLD {
        return String::new();
    }
    format!(
        " · {} bytes · blob {}",
        bytes.len(),
        &skein::core::Digest::of(bytes).to_hex()[..12]
    )
}

/// What a run's model line adds to its model: the model a proxy client
/// asked for, and the one the provider says answered when it names another.
fn answered_as(run: &skein::store::RunRecord) -> String {
    let mut notes = Vec::new();
    if let Some(asked) = &run.requested_model {
        notes.push(format!("asked for {asked}"));
    }
    if let Some(answered) = run.response_model.as_ref().filter(|m| **m != run.model) {
        notes.push(format!("answered by {answered}"));
    }
    match notes.is_empty() {
        true => String::new(),
        false => format!(" ({})", notes.join(", ")),
    }
}
