/*!
The read-only commands: `log` (recent turns, or one conversation's
messages), `search` (messages by their words, through `Store::search`,
which `log -q` uses too), `tree` (a conversation's family from the library, drawn: its
members' lines, the reruns of their turns, and the conversations that only
share messages with it), `show` (one node in full, with the runs that produced it) and
`conversations`. Their text goes through `ui`, which escapes control
characters on a terminal: stored text came from models and imports.
*/

use super::{Context, print_json};
use crate::flags::{ConversationsArgs, LogArgs, SearchArgs, ShowArgs, TreeArgs};
use crate::ui::{self, outln};
use anyhow::Result;
use serde_json::json;
use skein::NodeId;
use skein::core::Part;
use skein::core::price::PriceTable;
use skein::core::usage::{RunFigures, Totals};
use skein::store::search::MAX_LIMIT;
use skein::store::{ConversationRecord, SearchQuery, TreeEntry, preview};
use std::collections::{HashMap, HashSet};
use std::process::ExitCode;

pub fn log(ctx: &Context, args: LogArgs) -> Result<ExitCode> {
    let conversation = match (&args.cid, args.current) {
        (Some(cid), _) => Some(ctx.conversation(cid)?),
        (None, true) => Some(ctx.latest_conversation()?),
        (None, false) => None,
    };
    let turns = args.model.is_some()
        || args.query.is_some()
        || args.usage
        || args.count.is_some()
        || args.response;
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

fn log_conversation(
    ctx: &Context,
    conversation: &ConversationRecord,
    short: bool,
) -> Result<ExitCode> {
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

/// How many turns `log` shows without `-n`.
const DEFAULT_TURNS: usize = 10;

/// `log -r`: the reply text of the last turn chosen, as it was written.
fn last_response(
    ctx: &Context,
    last: Option<(&skein::store::RunRecord, Option<&str>)>,
) -> Result<ExitCode> {
    let Some((run, reply)) = last else {
        return Err(anyhow::Error::new(crate::exit::ExitWith(
            crate::exit::NOT_FOUND,
            "no turns match: there is no response to print".into(),
        )));
    };
    let Some(reply) = reply else {
        return Err(anyhow::anyhow!(
            "the last turn ({} on {}) failed and has no response: {}",
            run.id.as_str().chars().take(12).collect::<String>(),
            run.model,
            run.error.as_deref().unwrap_or("no error was recorded")
        ));
    };
    if ctx.json {
        return print_json(&json!({ "run": run, "reply": reply }));
    }
    outln!("{reply}")?;
    Ok(ExitCode::SUCCESS)
}

/// Recent turns, newest `count` last, optionally of one conversation and
/// filtered by model and by words (through `Store::search`). With `usage`,
/// each turn's tokens and the totals.
fn log_recent(
    ctx: &Context,
    args: &LogArgs,
    conversation: Option<&ConversationRecord>,
) -> Result<ExitCode> {
    let filtering = args.model.is_some() || args.query.is_some();
    let count = match args.response {
        true => 1,
        false => args.count.unwrap_or(DEFAULT_TURNS),
    };
    let mut runs = match conversation {
        Some(conversation) => {
            let mut runs = ctx.store.runs_of_conversation(&conversation.id)?;
            runs.reverse();
            runs
        }
        None if filtering => ctx.store.recent_runs(usize::MAX >> 1)?,
        None => ctx.store.recent_runs(count)?,
    };
    if let Some(model) = &args.model {
        runs.retain(|run| {
            run.model == *model
                || run.profile.as_deref() == Some(model)
                || run.backend.as_deref() == Some(model)
        });
    }
    // A failed run's prompt is its stored input; a database written before
    // failed calls kept their input may lack it, and then shows none.
    let text_of = |id: Option<NodeId>| -> Result<Option<String>> {
        match id.map(|id| ctx.store.node(id)) {
            Some(Ok(node)) => Ok(Some(node.message.joined_text())),
            Some(Err(skein::store::StoreError::NodeNotFound(_))) | None => Ok(None),
            Some(Err(other)) => Err(other.into()),
        }
    };
    let selected = match &args.query {
        Some(text) => matching_runs(ctx, text, conversation, &runs, count)?,
        None => runs.iter().take(count).collect(),
    };
    let mut rows = Vec::new();
    for run in selected {
        rows.push((run, text_of(run.input_head)?, text_of(run.output_head)?));
    }
    rows.reverse();
    if args.response {
        return last_response(
            ctx,
            rows.last().map(|(run, _, reply)| (*run, reply.as_deref())),
        );
    }
    // The totals of the turns shown, by the one definition every total uses.
    let prices = match args.usage {
        true => Some(crate::config::prices()?),
        false => None,
    };
    let totals = args.usage.then(|| {
        Totals::of(
            rows.iter()
                .map(|(run, _, _)| (run.id.clone(), Some(RunFigures::from(*run)))),
        )
    });
    if ctx.json {
        let records: Vec<_> = rows
            .iter()
            .map(|(run, prompt, reply)| json!({ "run": run, "prompt": prompt, "reply": reply }))
            .collect();
        return match (&totals, &prices) {
            (Some(totals), Some(prices)) => print_json(&json!({
                "turns": records,
                "totals": super::usage::totals_json(totals, prices),
            })),
            _ => print_json(&records),
        };
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
        let mut line = format!(
            "{} in / {} out tokens",
            tokens(run.usage.input_tokens),
            tokens(run.usage.output_tokens),
        );
        if let Some(read) = run.usage.cache_read_tokens.filter(|n| *n > 0) {
            let rate = run.usage.cache_hit_rate().unwrap_or(0.0);
            line.push_str(&format!(
                " ({read} cache read, {} hit)",
                super::usage::percent(rate)
            ));
        }
        if let Some(written) = run.usage.cache_write_tokens.filter(|n| *n > 0) {
            line.push_str(&format!(" ({written} cache write)"));
        }
        if !run.usage_complete {
            line.push_str(" (incomplete)");
        }
        if let Some(prices) = &prices {
            line.push_str(&format!(" · {}", run_cost(run, prices)));
        }
        line
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
            "{} · conversation {conversation} · node {node} · {} · {}{}",
            ui::timestamp(run.started_ms),
            run.model,
            run.status.as_str(),
            run.client
                .as_ref()
                .map_or(String::new(), |client| format!(" · client {client}")),
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
    if let (Some(totals), Some(prices)) = (totals.filter(|totals| !totals.runs.is_empty()), &prices)
    {
        let unknown = totals.incomplete_runs().len();
        outln!(
            "total over {} turn(s): {} in / {} out tokens{}",
            totals.runs.len(),
            totals.input_tokens.value,
            totals.output_tokens.value,
            if unknown == 0 {
                String::new()
            } else {
                format!(" (incomplete: {unknown} turn(s) reported no usage or only part of it)")
            }
        )?;
        if let Some(rate) = super::usage::cache_line(&totals) {
            outln!("{rate}")?;
        }
        outln!("{}", super::usage::cost_line(&prices.cost(&totals), prices))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// One run's cost at `prices`: dollars, `$? (no price for MODEL)` or a
/// lower bound when its usage is incomplete.
fn run_cost(run: &skein::store::RunRecord, prices: &PriceTable) -> String {
    let cost = prices.cost(&Totals::of([(run.id.clone(), Some(RunFigures::from(run)))]));
    if !cost.unpriced.is_empty() {
        return format!("$? (no price for {})", run.model);
    }
    let dollars = super::usage::dollars(cost.dollars);
    match cost.is_complete() {
        true => dollars,
        false => format!("at least {dollars}"),
    }
}

/// `skein tree`: the conversation's family (`skein::family`) drawn: its
/// members' lines, the reruns on their turns, and the conversations that
/// only share messages with them by content, labelled so.
pub async fn tree(ctx: &Context, args: TreeArgs) -> Result<ExitCode> {
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
            run.requested_model
                .as_ref()
                .map_or(String::new(), |asked| format!(" (asked for {asked})")),
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

/// The newest `count` of `runs` (newest first) whose prompt or reply matches
/// `text`. The store finds the matching messages, newest first; the search
/// widens (up to the store's limit) while it has more matches and fewer
/// than `count` turns are found.
fn matching_runs<'r>(
    ctx: &Context,
    text: &str,
    conversation: Option<&ConversationRecord>,
    runs: &'r [skein::store::RunRecord],
    count: usize,
) -> Result<Vec<&'r skein::store::RunRecord>> {
    let mut limit = (count * 4).clamp(100, MAX_LIMIT);
    loop {
        let results = ctx.store.search(
            &SearchQuery::new(text)
                .limit(limit)
                .conversation(conversation.map(|c| c.id.clone())),
        )?;
        let nodes: HashSet<NodeId> = results.matches.iter().map(|m| m.node).collect();
        let hit = |node: Option<NodeId>| node.is_some_and(|node| nodes.contains(&node));
        let selected: Vec<_> = runs
            .iter()
            .filter(|run| hit(run.input_head) || hit(run.output_head))
            .take(count)
            .collect();
        if selected.len() >= count || !results.truncated || limit >= MAX_LIMIT {
            return Ok(selected);
        }
        limit = (limit * 4).min(MAX_LIMIT);
    }
}

/// `skein search`: matching messages, newest first, each with the
/// conversations it is in and a snippet around the match.
pub fn search(ctx: &Context, args: SearchArgs) -> Result<ExitCode> {
    let conversation = args
        .cid
        .as_deref()
        .map(|cid| ctx.store.resolve_conversation(cid))
        .transpose()?;
    let results = ctx.store.search(
        &SearchQuery::new(args.text)
            .limit(args.count)
            .conversation(conversation)
            .role(args.role),
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
