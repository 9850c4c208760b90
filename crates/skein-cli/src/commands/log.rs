/*!
`skein log`: recent turns (filtered by model and by words, through
`Store::search` as `skein search` finds them; with their token usage and
cost), or the messages of one conversation. Text goes through `ui`, which
escapes control characters on a terminal: stored text came from models
and imports.
*/

use super::common::context::{Context, Globals, print_json};
use super::show::storage;
use crate::ui::{self, outln};
use anyhow::Result;
use clap::Args;
use serde_json::json;
use skein::NodeId;
use skein::core::Part;
use skein::core::price::PriceTable;
use skein::core::usage::{RunFigures, Totals};
use skein::store::search::MAX_LIMIT;
use skein::store::{ConversationRecord, SearchQuery, preview};
use std::collections::HashSet;
use std::process::ExitCode;

#[derive(Debug, Args)]
pub struct LogArgs {
    /// Show the messages of this conversation (id or name) instead of recent turns (with -m, -q,
    /// -u, -r or -n: only that conversation's turns)
    #[arg(
        long,
        visible_alias = "conversation",
        value_name = "ID",
        conflicts_with = "current"
    )]
    pub cid: Option<String>,
    /// The most recently updated conversation, as with --cid
    #[arg(short = 'c', long)]
    pub current: bool,
    /// Only turns answered by this model
    #[arg(short, long, value_name = "MODEL")]
    pub model: Option<String>,
    /// Only turns whose prompt or reply has the words of TEXT (as `skein search` finds them:
    /// every word, "quoted phrases", word* prefixes; case-insensitive)
    #[arg(short, long, value_name = "TEXT")]
    pub query: Option<String>,
    /// Show each turn's token usage, and the totals
    #[arg(short, long)]
    pub usage: bool,
    /// One line per turn (or per message)
    #[arg(short, long)]
    pub short: bool,
    /// How many recent turns to show; 0 shows them all, as with `llm logs -n 0` [default: 10]
    #[arg(short = 'n', long, value_name = "N")]
    pub count: Option<usize>,
    /// Print only the text of the last reply (of the turns the other flags choose)
    #[arg(short = 'r', long, conflicts_with_all = ["short", "usage"])]
    pub response: bool,
    /// Include the runs replays made, their judges' too (left out by default: `skein replays` lists replays)
    #[arg(long)]
    pub replays: bool,
}

pub fn run(globals: &Globals, args: LogArgs) -> Result<ExitCode> {
    print_log(&globals.open_to_show()?, args)
}

/// The turns or messages `args` choose (also the chat's `!log`).
pub fn print_log(ctx: &Context, args: LogArgs) -> Result<ExitCode> {
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

/// `-n 0`: no limit.
const EVERY_TURN: usize = usize::MAX >> 1;

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
    let count = match (args.response, args.count.unwrap_or(DEFAULT_TURNS)) {
        (true, _) => 1,
        // As with `llm logs -n 0`: every turn.
        (false, 0) => EVERY_TURN,
        (false, count) => count,
    };
    let mut runs = match conversation {
        Some(conversation) => {
            let mut runs = ctx.store.runs_of_conversation(&conversation.id)?;
            if !args.replays {
                runs.retain(|run| !run.relations.iter().any(|relation| relation.is_replays()));
            }
            runs.reverse();
            runs
        }
        None => {
            let limit = if filtering { EVERY_TURN } else { count };
            match args.replays {
                true => ctx.store.recent_runs(limit)?,
                false => ctx.store.recent_turns(limit)?,
            }
        }
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
        Some(text) => matching_runs(ctx, text, conversation, &runs, count, args.replays)?,
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
    replays: bool,
) -> Result<Vec<&'r skein::store::RunRecord>> {
    let mut limit = count.saturating_mul(4).clamp(100, MAX_LIMIT);
    loop {
        let results = ctx.store.search(
            &SearchQuery::new(text)
                .limit(limit)
                .conversation(conversation.map(|c| c.id.clone()))
                .replays(replays),
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
