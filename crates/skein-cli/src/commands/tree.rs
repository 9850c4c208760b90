/*!
`skein tree`: a conversation's family from the library (`skein::family`),
drawn: its members' lines, each head labelled with how the member joined
(`fork of`, `edit or retry of`, `from rerun`), the reruns of their turns,
the replays of their turns collapsed to one label per turn (`2 replays:
1 changed, 1 held`; their answers are not drawn), and the conversations
that only share messages with it. Several first messages (an edited first
message) are drawn as sibling branches of one family.
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
            labels.entry(head).or_default().push(format!(
                "{}{}",
                named(&member.conversation),
                joined(member)
            ));
        }
    }
    // Replays collapse to one label on the turn they replayed; their own
    // answers (and a thread only a replay made) are not drawn.
    // A replay comparing models has a row per model for each turn.
    let mut replays: HashMap<NodeId, Vec<(&str, &str)>> = HashMap::new();
    for turn in &family.replayed {
        replays.entry(turn.turn_node).or_default().push((
            turn.replay.as_str(),
            skein::recorded::replay::result_of(turn),
        ));
    }
    for (node, results) in &replays {
        if shown.contains(node) {
            labels.entry(*node).or_default().push(replay_label(results));
        }
    }
    let kept_heads: HashSet<NodeId> = family
        .members
        .iter()
        .map(|member| &member.conversation)
        .chain(family.shares.iter().map(|sharer| &sharer.conversation))
        .filter_map(|conversation| conversation.head)
        .chain(family.reruns.iter().flat_map(|rerun| rerun.answer_head))
        .collect();
    let replay_answers: HashSet<NodeId> = family
        .replayed
        .iter()
        .filter_map(|turn| turn.answer_head)
        .filter(|answer| !kept_heads.contains(answer))
        .collect();
    let hidden = replay_only(&graph.nodes, &replay_answers, &kept_heads);
    let drawn: Vec<TreeEntry> = graph
        .nodes
        .iter()
        .filter(|entry| !hidden.contains(&entry.id))
        .cloned()
        .collect();
    let roots: Vec<NodeId> = roots
        .into_iter()
        .filter(|root| !hidden.contains(root))
        .collect();
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
    for line in draw(&drawn, &roots, &labels) {
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
    for (i, root) in roots.iter().enumerate() {
        let start = by_id[root];
        let lead = if start.parent.is_some() { "… " } else { "" };
        // Several first messages are siblings: each opens a branch.
        let (own, rest) = match (roots.len(), i + 1 == roots.len()) {
            (1, _) => (String::new(), String::new()),
            (_, false) => ("├─ ".to_string(), "│  ".to_string()),
            (_, true) => ("└─ ".to_string(), "   ".to_string()),
        };
        // (entry, prefix for its own line, prefix for what follows it)
        let mut stack: Vec<(&TreeEntry, String, String)> =
            vec![(start, format!("{own}{lead}"), rest)];
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

/// How a member joined its family, after its name.
fn joined(member: &skein::conversation::Member) -> String {
    match &member.joined {
        skein::conversation::Joined::Branch { from, at: Some(at) } => {
            format!(" [fork of {} at {}]", from.short(), at.short())
        }
        skein::conversation::Joined::Branch { from, at: None } => {
            format!(" [edit or retry of {}'s first message]", from.short())
        }
        skein::conversation::Joined::Rerun { rerun, .. } => {
            format!(" [from rerun {}]", rerun.short())
        }
        _ => String::new(),
    }
}

/// One label for every replay of a turn, from each (replay, result) row:
/// `2 replays: 1 changed, 1 held`; a replay comparing models answered once
/// per model, `1 replay, 3 answers: 2 held, 1 changed`.
fn replay_label(rows: &[(&str, &str)]) -> String {
    let mut counts: Vec<(&str, usize)> = Vec::new();
    for (_, result) in rows {
        match counts.iter_mut().find(|(seen, _)| seen == result) {
            Some((_, n)) => *n += 1,
            None => counts.push((result, 1)),
        }
    }
    counts.sort_unstable();
    let counts: Vec<String> = counts.iter().map(|(r, n)| format!("{n} {r}")).collect();
    let replays = rows
        .iter()
        .map(|(replay, _)| *replay)
        .collect::<HashSet<_>>()
        .len();
    let answers = match rows.len() == replays {
        true => String::new(),
        false => format!(", {} answers", rows.len()),
    };
    format!(
        "{replays} replay{}{answers}: {}",
        if replays == 1 { "" } else { "s" },
        counts.join(", ")
    )
}

/// The nodes only replays made: a replayed answer no member, sharer or
/// rerun stands at, and every node all of whose shown descendants are
/// such (the tool calls of a replayed loop, a thread a replay's changed
/// system prompt started), unless a kept head lies below it.
fn replay_only(
    entries: &[TreeEntry],
    answers: &HashSet<NodeId>,
    kept: &HashSet<NodeId>,
) -> HashSet<NodeId> {
    let mut hidden = HashSet::new();
    if answers.is_empty() {
        return hidden;
    }
    let shown: HashSet<NodeId> = entries.iter().map(|entry| entry.id).collect();
    let mut children: HashMap<NodeId, Vec<NodeId>> = HashMap::new();
    for entry in entries {
        if let Some(parent) = entry.parent.filter(|parent| shown.contains(parent)) {
            children.entry(parent).or_default().push(entry.id);
        }
    }
    // Entries come in topological order: children after their parents.
    for entry in entries.iter().rev() {
        let kids = children.get(&entry.id).map(Vec::as_slice).unwrap_or(&[]);
        let only_replays = if kept.contains(&entry.id) {
            false
        } else if answers.contains(&entry.id) {
            kids.iter().all(|kid| hidden.contains(kid))
        } else {
            !kids.is_empty() && kids.iter().all(|kid| hidden.contains(kid))
        };
        if only_replays {
            hidden.insert(entry.id);
        }
    }
    hidden
}

#[cfg(test)]
mod tests {
    use super::replay_label;

    #[test]
    fn a_replay_label_counts_replays_and_their_answers() {
        assert_eq!(
            replay_label(&[("a", "held"), ("b", "changed")]),
            "2 replays: 1 changed, 1 held"
        );
        assert_eq!(
            replay_label(&[("a", "held"), ("a", "held"), ("a", "changed")]),
            "1 replay, 3 answers: 1 changed, 2 held"
        );
    }
}
