/*!
The read-only commands: `log` (recent turns, or one conversation's
messages), `tree` (the branching structure, drawn, with the reruns of its
turns), `show` (one node in full, with the runs that produced it) and
`conversations`. Their text goes through `ui`, which escapes control
characters on a terminal: stored text came from models and imports.
*/

use super::{Context, print_json};
use crate::flags::{ConversationsArgs, LogArgs, ShowArgs, TreeArgs};
use crate::ui::{self, outln};
use anyhow::Result;
use serde_json::json;
use skein::NodeId;
use skein::core::Part;
use skein::store::{Conversation, TreeEntry, preview};
use std::collections::HashMap;
use std::process::ExitCode;

pub fn log(ctx: &Context, args: LogArgs) -> Result<ExitCode> {
    let conversation = match (&args.cid, args.current) {
        (Some(cid), _) => Some(ctx.conversation(cid)?),
        (None, true) => Some(ctx.latest_conversation()?),
        (None, false) => None,
    };
    let turns = args.model.is_some() || args.query.is_some() || args.usage;
    match conversation {
        Some(conversation) if !turns => log_conversation(ctx, &conversation, args.short),
        conversation => log_recent(ctx, &args, conversation.as_ref()),
    }
}

/// `skein conversations`: newest first, with their model and origin.
pub fn conversations(ctx: &Context, args: ConversationsArgs) -> Result<ExitCode> {
    let conversations = ctx.store.list_conversations(args.count)?;
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

fn log_conversation(ctx: &Context, conversation: &Conversation, short: bool) -> Result<ExitCode> {
    let Some(head) = conversation.head else {
        if ctx.json {
            return print_json(&json!({ "conversation": conversation, "messages": [] }));
        }
        outln!(
            "conversation {} has no messages yet",
            conversation.id.short()
        )?;
        return Ok(ExitCode::SUCCESS);
    };
    let thread = ctx.store.load_thread(head)?;
    if ctx.json {
        let messages: Vec<_> = thread
            .nodes()
            .into_iter()
            .map(|node| json!({ "node": node.id(), "role": node.message().role, "parts": node.message().parts }))
            .collect();
        return print_json(&json!({ "conversation": conversation, "messages": messages }));
    }
    outln!(
        "conversation {}{} · {} messages",
        conversation.id.short(),
        conversation
            .name
            .as_deref()
            .map(|n| format!(" ({n})"))
            .unwrap_or_default(),
        conversation.len
    )?;
    for node in thread.nodes() {
        if short {
            outln!(
                "{} {:<9} {}",
                node.id().short(),
                node.message().role.as_str(),
                ui::one_line(&preview(node.message(), 200), 100)
            )?;
            continue;
        }
        outln!("\n{} {}", node.id().short(), node.message().role)?;
        let parts = &node.message().parts;
        for (index, part) in parts.iter().enumerate() {
            // A message of several parts (fragments, attachments) shows
            // where each one starts.
            if parts.len() > 1 {
                outln!("[part {index}: {}{}]", part.kind_name(), storage(part))?;
            }
            match part {
                Part::Text { text } => outln!("{text}")?,
                other => outln!(
                    "{}",
                    preview(
                        &skein::Message::new(node.message().role, vec![other.clone()]),
                        200
                    )
                )?,
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Recent turns, newest `count` last, optionally of one conversation and
/// filtered by model and text. Filters scan the runs newest first until
/// `count` match. With `usage`, each turn's tokens and the totals.
fn log_recent(
    ctx: &Context,
    args: &LogArgs,
    conversation: Option<&Conversation>,
) -> Result<ExitCode> {
    let filtering = args.model.is_some() || args.query.is_some();
    let mut runs = match conversation {
        Some(conversation) => {
            let mut runs = ctx.store.runs_of_conversation(&conversation.id)?;
            runs.reverse();
            runs
        }
        None if filtering => ctx.store.recent_runs(usize::MAX >> 1)?,
        None => ctx.store.recent_runs(args.count)?,
    };
    if let Some(model) = &args.model {
        runs.retain(|run| {
            run.model == *model
                || run.profile.as_deref() == Some(model)
                || run.backend.as_deref() == Some(model)
        });
    }
    // A failed run's request was never stored (a failed turn adds no node).
    let text_of = |id: Option<NodeId>| -> Result<Option<String>> {
        match id.map(|id| ctx.store.node(id)) {
            Some(Ok(node)) => Ok(Some(node.message.joined_text())),
            Some(Err(skein::store::StoreError::NodeNotFound(_))) | None => Ok(None),
            Some(Err(other)) => Err(other.into()),
        }
    };
    let query = args.query.as_deref().map(str::to_lowercase);
    let mut rows = Vec::new();
    for run in &runs {
        if rows.len() >= args.count {
            break;
        }
        let (prompt, reply) = (text_of(run.input_head)?, text_of(run.output_head)?);
        if let Some(query) = &query {
            let contains = |text: &Option<String>| {
                text.as_deref()
                    .is_some_and(|text| text.to_lowercase().contains(query.as_str()))
            };
            if !contains(&prompt) && !contains(&reply) {
                continue;
            }
        }
        rows.push((run, prompt, reply));
    }
    rows.reverse();
    if ctx.json {
        let records: Vec<_> = rows
            .iter()
            .map(|(run, prompt, reply)| json!({ "run": run, "prompt": prompt, "reply": reply }))
            .collect();
        return print_json(&records);
    }
    if rows.is_empty() {
        if filtering {
            outln!("no turns match")?;
        } else {
            outln!("no turns yet: start one with `skein prompt TEXT`")?;
        }
    }
    let tokens = |n: Option<u64>| n.map_or_else(|| "?".to_string(), |n| n.to_string());
    let usage_of = |run: &skein::store::RunRecord| {
        format!(
            "{} in / {} out tokens{}",
            tokens(run.usage.input_tokens),
            tokens(run.usage.output_tokens),
            if run.usage_complete {
                ""
            } else {
                " (incomplete)"
            }
        )
    };
    for (run, prompt, reply) in &rows {
        let node = run
            .output_head
            .map_or_else(|| "-".to_string(), |n| n.short());
        let conversation = run.conversation.as_ref().map_or("-", |c| c.short());
        if args.short {
            let said = match (reply, &run.error) {
                (Some(reply), _) => format!(" < {}", ui::one_line(reply, 40)),
                (None, Some(error)) => format!(" ! {}", ui::one_line(error, 40)),
                (None, None) => String::new(),
            };
            outln!(
                "{} {conversation} {node} {} > {}{said}{}",
                ui::timestamp(run.started_ms),
                run.model,
                ui::one_line(prompt.as_deref().unwrap_or(""), 40),
                if args.usage {
                    format!(" · {}", usage_of(run))
                } else {
                    String::new()
                }
            )?;
            continue;
        }
        outln!(
            "{} · conversation {conversation} · node {node} · {} · {}",
            ui::timestamp(run.started_ms),
            run.model,
            run.status.as_str()
        )?;
        outln!("  > {}", ui::one_line(prompt.as_deref().unwrap_or(""), 100))?;
        match (reply, &run.error) {
            (Some(reply), _) => outln!("  < {}", ui::one_line(reply, 100))?,
            (None, Some(error)) => outln!("  ! {}", ui::one_line(error, 100))?,
            (None, None) => {}
        }
        if args.usage {
            outln!("  = {}", usage_of(run))?;
        }
    }
    if args.usage && !rows.is_empty() {
        let total = rows
            .iter()
            .fold(skein::core::Usage::default(), |total, (run, _, _)| {
                total.add(&run.usage)
            });
        let unknown = rows
            .iter()
            .filter(|(run, _, _)| {
                !run.usage_complete
                    || run.usage.input_tokens.is_none()
                    || run.usage.output_tokens.is_none()
            })
            .count();
        outln!(
            "total over {} turn(s): {} in / {} out tokens{}",
            rows.len(),
            tokens(total.input_tokens),
            tokens(total.output_tokens),
            if unknown == 0 {
                String::new()
            } else {
                format!(" ({unknown} turn(s) with usage unknown or incomplete)")
            }
        )?;
    }
    Ok(ExitCode::SUCCESS)
}

pub fn tree(ctx: &Context, args: TreeArgs) -> Result<ExitCode> {
    let conversation = match &args.id {
        Some(id) => ctx.conversation(id)?,
        None => ctx.latest_conversation()?,
    };
    let Some(head) = conversation.head else {
        outln!(
            "conversation {} has no messages yet",
            conversation.id.short()
        )?;
        return Ok(ExitCode::SUCCESS);
    };
    let thread = ctx.store.load_thread(head)?;
    let root = thread.nodes()[0].id();
    let entries = ctx.store.subtree(root, args.limit)?;
    let mut labels: HashMap<NodeId, Vec<String>> = HashMap::new();
    let mut family = Vec::new();
    for other in ctx.store.list_conversations(100_000)? {
        if let Some(other_head) = other.head
            && entries.iter().any(|entry| entry.id == other_head)
        {
            let name = other
                .label()
                .map(|label| format!(" ({})", ui::one_line(label, 60)))
                .unwrap_or_default();
            labels
                .entry(other_head)
                .or_default()
                .push(format!("{}{name}", other.id.short()));
            family.push(other);
        }
    }
    let reruns = reruns_in(ctx, &entries, &mut labels)?;
    if ctx.json {
        return print_json(
            &json!({ "root": root, "nodes": entries, "conversations": family, "reruns": reruns }),
        );
    }
    for line in draw(&entries, &labels) {
        outln!("{line}")?;
    }
    for rerun in &reruns {
        let answer = rerun
            .answer_head
            .filter(|a| !entries.iter().any(|e| e.id == *a));
        if let Some(answer) = answer {
            ui::note(format!(
                "rerun {} of node {} answers at {} on a thread of its own (without {})",
                rerun.id.short(),
                rerun.turn_node.short(),
                answer.short(),
                rerun.ablation.join(", ")
            ));
        }
    }
    if entries.len() == args.limit {
        ui::note(format!(
            "(showing the first {} nodes; raise --limit to see more)",
            args.limit
        ));
    }
    Ok(ExitCode::SUCCESS)
}

/// The reruns of the turns among `entries`, labelled on the turn's node
/// and, when it is in the tree, on the rerun's answer.
fn reruns_in(
    ctx: &Context,
    entries: &[TreeEntry],
    labels: &mut HashMap<NodeId, Vec<String>>,
) -> Result<Vec<skein::store::RerunRecord>> {
    let mut reruns: Vec<skein::store::RerunRecord> = Vec::new();
    for entry in entries.iter().filter(|e| e.role == skein::Role::Assistant) {
        for rerun in ctx.store.reruns_answering(entry.id)? {
            if rerun.turn_node != entry.id && !entries.iter().any(|e| e.id == rerun.turn_node) {
                labels.entry(entry.id).or_default().push(format!(
                    "answer of rerun {} of node {}",
                    rerun.id.short(),
                    rerun.turn_node.short()
                ));
            }
        }
        for rerun in ctx.store.reruns_of_node(entry.id)? {
            let verdict = rerun.verdict.as_deref().unwrap_or("no verdict");
            labels.entry(entry.id).or_default().push(format!(
                "rerun {} without {} ({verdict})",
                rerun.id.short(),
                rerun.ablation.join(", ")
            ));
            if let Some(answer) = rerun.answer_head {
                labels
                    .entry(answer)
                    .or_default()
                    .push(format!("answer of rerun {}", rerun.id.short()));
            }
            reruns.push(rerun);
        }
    }
    Ok(reruns)
}

/// Draw a subtree. A node with one child continues on the same column; a
/// node with several children opens one branch per child. Iterative, so a
/// very long thread cannot overflow the stack.
fn draw(entries: &[TreeEntry], labels: &HashMap<NodeId, Vec<String>>) -> Vec<String> {
    let mut children: HashMap<NodeId, Vec<&TreeEntry>> = HashMap::new();
    for entry in entries {
        if let Some(parent) = entry.parent {
            children.entry(parent).or_default().push(entry);
        }
    }
    let mut lines = Vec::new();
    // (entry, prefix for its own line, prefix for what follows it)
    let mut stack: Vec<(&TreeEntry, String, String)> =
        vec![(&entries[0], String::new(), String::new())];
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
    lines
}

/// Where a text or an attachment is kept: a payload of
/// `BLOB_THRESHOLD` bytes or more is one blob, shared by every node that
/// holds the same bytes, named by its digest.
fn storage(part: &Part) -> String {
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

pub fn show(ctx: &Context, args: ShowArgs) -> Result<ExitCode> {
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
            _ => outln!("(a part this version cannot display)")?,
        }
    }
    for conversation in &heads {
        outln!("\nhead of conversation {}", conversation.id.short())?;
    }
    for run in &runs {
        outln!(
            "\nproduced by run {} · {} via {} · {} · {} in / {} out tokens{}",
            run.id.short(),
            run.model,
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
            }
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
