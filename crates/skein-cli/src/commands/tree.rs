/*!
`skein tree`: a conversation's family from the library (`skein::family`),
drawn: its members' lines, the reruns of their turns, and the
conversations that only share messages with it.
*/

use super::common::context::{Context, Globals, print_json};
use crate::ui::{self, outln};
use anyhow::Result;
use clap::Args;
use serde_json::json;
use skein::NodeId;
use skein::store::{ConversationRecord, TreeEntry};
use std::collections::{HashMap, HashSet};
use std::process::ExitCode;

#[derive(Debug, Args)]
pub struct TreeArgs {
    /// A conversation's id (any unique prefix) or name (default: the most recently updated)
    pub id: Option<String>,
    /// Draw at most this many nodes
    #[arg(long, default_value_t = 500, value_name = "N")]
    pub limit: usize,
}

pub async fn run(globals: &Globals, args: TreeArgs) -> Result<ExitCode> {
    print_tree(&globals.open_to_show()?, args).await
}

/// The conversation's family (`skein::family`) drawn: its members' lines,
/// the reruns on their turns, and the conversations that only share
/// messages with them by content, labelled so (also the chat's `!tree`).
pub async fn print_tree(ctx: &Context, args: TreeArgs) -> Result<ExitCode> {
    let conversation = match &args.id {
        Some(id) => ctx.conversation(id)?,
        None => ctx.latest_conversation()?,
    };
    let family = skein::family(&ctx.store, &conversation.id).await?;
    let graph = family.graph(&ctx.store, args.limit).await?;
    let shown: HashSet<NodeId> = graph.nodes.iter().map(|entry| entry.id).collect();
    let roots: Vec<NodeId> = graph
        .nodes
        .iter()
        .filter(|entry| entry.parent.is_none_or(|parent| !shown.contains(&parent)))
        .map(|entry| entry.id)
        .collect();
    if ctx.json {
        return print_json(&json!({
            "root": roots.first(),
            "roots": roots,
            "nodes": graph.nodes,
            "conversations": family.members.iter().map(|m| &m.conversation).collect::<Vec<_>>(),
            "shares": family.shares.iter().map(|s| &s.conversation).collect::<Vec<_>>(),
            "reruns": family.reruns,
            "truncated": graph.truncated,
        }));
    }
    if graph.nodes.is_empty() {
        outln!(
            "conversation {} has no messages yet",
            conversation.id.short()
        )?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut labels: HashMap<NodeId, Vec<String>> = HashMap::new();
    let named = |c: &ConversationRecord| {
        let name = c
            .label()
            .map(|label| format!(" ({})", ui::one_line(label, 60)))
            .unwrap_or_default();
        format!("{}{name}", c.id.short())
    };
    for member in &family.members {
        if let Some(head) = member.conversation.head {
            labels
                .entry(head)
                .or_default()
                .push(named(&member.conversation));
        }
    }
    let mut unseen_shares = Vec::new();
    for sharer in &family.shares {
        match sharer.conversation.head.filter(|head| shown.contains(head)) {
            Some(head) => labels.entry(head).or_default().push(format!(
                "{} [shares messages by content, not forked from this family]",
                named(&sharer.conversation)
            )),
            None => unseen_shares.push(sharer.conversation.id.short()),
        }
    }
    for rerun in &family.reruns {
        let verdict = rerun.verdict.as_deref().unwrap_or("no verdict");
        if shown.contains(&rerun.turn_node) {
            labels.entry(rerun.turn_node).or_default().push(format!(
                "rerun {} without {} ({verdict})",
                rerun.id.short(),
                rerun.ablation.join(", ")
            ));
        }
        if let Some(answer) = rerun.answer_head.filter(|answer| shown.contains(answer)) {
            let of = if shown.contains(&rerun.turn_node) {
                String::new()
            } else {
                format!(" of node {}", rerun.turn_node.short())
            };
            labels
                .entry(answer)
                .or_default()
                .push(format!("answer of rerun {}{of}", rerun.id.short()));
        }
    }
    for line in draw(&graph.nodes, &roots, &labels) {
        outln!("{line}")?;
    }
    for rerun in &family.reruns {
        if let Some(answer) = rerun.answer_head.filter(|answer| !shown.contains(answer)) {
            ui::note(format!(
                "rerun {} of node {} answers at {} on a thread of its own (without {})",
                rerun.id.short(),
                rerun.turn_node.short(),
                answer.short(),
                rerun.ablation.join(", ")
            ));
        }
    }
    if !unseen_shares.is_empty() || family.more_shares {
        ui::note(format!(
            "{}{} more conversation(s) share messages with this family by content: {}",
            unseen_shares.len(),
            if family.more_shares { "+" } else { "" },
            unseen_shares.join(", ")
        ));
    }
    if graph.truncated {
        ui::note(format!(
            "(showing {} nodes; raise --limit to see more)",
            graph.nodes.len()
        ));
    }
    Ok(ExitCode::SUCCESS)
}

/// Draw the shown nodes from each root (a first message, or `…` where
/// earlier messages are not shown). A node with one child continues on the
/// same column; a node with several children opens one branch per child.
/// Iterative, so a very long thread cannot overflow the stack.
fn draw(
    entries: &[TreeEntry],
    roots: &[NodeId],
    labels: &HashMap<NodeId, Vec<String>>,
) -> Vec<String> {
    let by_id: HashMap<NodeId, &TreeEntry> = entries.iter().map(|e| (e.id, e)).collect();
    let mut children: HashMap<NodeId, Vec<&TreeEntry>> = HashMap::new();
    for entry in entries {
        if let Some(parent) = entry.parent.filter(|parent| by_id.contains_key(parent)) {
            children.entry(parent).or_default().push(entry);
        }
    }
    let mut lines = Vec::new();
    for root in roots {
        let start = by_id[root];
        let lead = if start.parent.is_some() { "… " } else { "" };
        // (entry, prefix for its own line, prefix for what follows it)
        let mut stack: Vec<(&TreeEntry, String, String)> =
            vec![(start, lead.to_string(), String::new())];
        while let Some((entry, lead, rest)) = stack.pop() {
            let label = labels
                .get(&entry.id)
                .map(|names| format!("  ◀ {}", names.join(", ")))
                .unwrap_or_default();
            lines.push(format!(
                "{lead}{} {:<9} {}{label}",
                entry.id.short(),
                entry.role.as_str(),
                entry.preview
            ));
            let kids = children.get(&entry.id).map(Vec::as_slice).unwrap_or(&[]);
            match kids {
                [] => {}
                [only] => stack.push((only, rest.clone(), rest)),
                many => {
                    for (i, kid) in many.iter().enumerate().rev() {
                        let last = i == many.len() - 1;
                        let (branch, next) = if last {
                            ("└─ ", "   ")
                        } else {
                            ("├─ ", "│  ")
                        };
                        stack.push((kid, format!("{rest}{branch}"), format!("{rest}{next}")));
                    }
                }
            }
        }
    }
    lines
}
