/*!
`skein usage`: token totals asked of the store, from every recorded run,
for a node's runs, a conversation, a family or a coordinator sequence (what
each holds is `skein::store::UsageScope`'s), or a replay's two sides
(`skein::recorded::replay::ReplayUsage`, each candidate model apart when it
compares several); and how totals are printed, which
`log -u` shares. Each run counts once however many ways it is
reached; a run that reported no figures makes the total *incomplete*, and
the output says how many runs it lacks, never a silent zero.

Cost is the totals priced when they are read (`skein::core::price`: the
built-in dated table with the configuration file's `[prices]`), so a
price change re-prices history; a run without usage or without a price
makes the cost a lower bound, said so. Cache reads show as a hit rate
(their share of the input tokens) and as what they saved.
*/

use super::common::context::{Context, Globals, print_json};
use crate::exit::{ExitWith, NOT_FOUND};
use crate::ui::outln;
use anyhow::Result;
use clap::Args;
use serde_json::{Value, json};
use skein::core::price::{Cost, CostSummary, PriceSource, PriceTable};
use skein::recorded::replay::ReplayUsage;
use skein::store::{Totals, UsageScope};
use std::process::ExitCode;

#[derive(Debug, Args)]
pub struct UsageArgs {
    /// A node: the runs that produced it (any unique prefix; a conversation's name stands for its
    /// head) [default: the most recently updated
    /// conversation]
    #[arg(conflicts_with_all = ["cid", "family", "run", "sequence"])]
    pub node: Option<String>,
    /// A conversation: its runs, and the runs of the history it shares with the conversations it
    /// was forked from
    #[arg(long, value_name = "ID", conflicts_with_all = ["family", "run", "sequence"])]
    pub cid: Option<String>,
    /// A conversation's whole family: every conversation joined to it by forks and reply
    /// branches, and every rerun of their turns
    #[arg(long, value_name = "ID", conflicts_with_all = ["run", "sequence"])]
    pub family: Option<String>,
    /// One run (any unique prefix of its id)
    #[arg(long, value_name = "RUN", conflicts_with = "sequence")]
    pub run: Option<String>,
    /// A coordinator sequence, by its id: its start, its continuations
    #[arg(long, value_name = "SEQUENCE")]
    pub sequence: Option<String>,
    /// A replay (any unique prefix of its id): what its original turns and its replayed turns
    /// used and cost, each run counted once, and the difference; a judge's calls apart
    #[arg(
        long,
        value_name = "REPLAY",
        conflicts_with_all = ["node", "cid", "family", "run", "sequence"]
    )]
    pub replay: Option<String>,
}

pub fn run(globals: &Globals, args: UsageArgs) -> Result<ExitCode> {
    let ctx = &globals.open_to_show()?;
    if let Some(replay) = &args.replay {
        return replay_usage(ctx, replay);
    }
    let (scope, what, described) = if let Some(node) = &args.node {
        let node = ctx.node(node)?;
        (
            UsageScope::Node(node),
            format!("node {}", node.short()),
            json!({"node": node}),
        )
    } else if let Some(run) = &args.run {
        let run = ctx.store.resolve_run(run)?;
        (
            UsageScope::Run(run.clone()),
            format!("run {}", run.short()),
            json!({"run": run}),
        )
    } else if let Some(sequence) = &args.sequence {
        (
            UsageScope::Sequence(sequence.clone()),
            format!("sequence {sequence}"),
            json!({"sequence": sequence}),
        )
    } else if let Some(family) = &args.family {
        let conversation = ctx.conversation(family)?;
        (
            UsageScope::Family(conversation.id.clone()),
            format!("the family of conversation {}", conversation.id.short()),
            json!({"family": conversation.id}),
        )
    } else {
        let conversation = match &args.cid {
            Some(cid) => ctx.conversation(cid)?,
            None => ctx.latest_conversation()?,
        };
        (
            UsageScope::Conversation(conversation.id.clone()),
            format!("conversation {}", conversation.id.short()),
            json!({"conversation": conversation.id}),
        )
    };
    let totals = ctx.store.usage(&scope)?;
    let prices = crate::config::prices()?;
    if totals.runs.is_empty() && matches!(scope, UsageScope::Sequence(_)) {
        return Err(ExitWith(
            NOT_FOUND,
            format!("no recorded run belongs to {what}: check the sequence id"),
        )
        .into());
    }
    if ctx.json {
        let mut value = totals_json(&totals, &prices);
        value["scope"] = described;
        return print_json(&value);
    }
    print_totals(&what, &totals, &prices)?;
    Ok(ExitCode::SUCCESS)
}

/// `usage --replay ID`: the original turns' and the replayed turns' usage
/// and cost (only turns replayed so far, so the two compare like for
/// like), the judge's calls apart, and the difference; for a replay
/// comparing models, the same for each candidate after the whole.
fn replay_usage(ctx: &Context, given: &str) -> Result<ExitCode> {
    let id = super::replay::find_replay(ctx, given)?;
    let usage = ReplayUsage::read(&ctx.store, &id)?;
    let prices = crate::config::prices()?;
    if ctx.json {
        let mut value = sides_json(&usage, &prices);
        value["scope"] = json!({"replay": id});
        if !usage.models.is_empty() {
            value["models"] = usage
                .models
                .iter()
                .map(|model| {
                    let mut value = sides_json(&model.usage, &prices);
                    value["model"] = json!(model.model);
                    value
                })
                .collect();
        }
        return print_json(&value);
    }
    let whole = match usage.models.len() {
        0 => format!("replay {}", id.short()),
        n => format!("replay {} ({n} models)", id.short()),
    };
    print_sides(&whole, &usage, &prices)?;
    for model in &usage.models {
        outln!("")?;
        print_sides(&format!("on {}", model.model), &model.usage, &prices)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// What the replayed side used and cost beside the original: tokens and
/// dollars, and whether both sides' costs are whole.
fn difference(usage: &ReplayUsage, prices: &PriceTable) -> (i64, f64, bool) {
    let (original, replay) = (prices.cost(&usage.original), prices.cost(&usage.replay));
    let tokens = |totals: &Totals| totals.input_tokens.value + totals.output_tokens.value;
    let token_delta = tokens(&usage.replay) as i64 - tokens(&usage.original) as i64;
    let complete = original.is_complete() && replay.is_complete();
    (token_delta, replay.dollars - original.dollars, complete)
}

/// A replay's (or one candidate's) sides as `usage --replay --json` gives them.
fn sides_json(usage: &ReplayUsage, prices: &PriceTable) -> Value {
    let (tokens, dollars, complete) = difference(usage, prices);
    json!({
        "turns": usage.turns,
        "selected": usage.selected,
        "original": totals_json(&usage.original, prices),
        "replay": totals_json(&usage.replay, prices),
        "judge": totals_json(&usage.judge, prices),
        "delta": {"tokens": tokens, "dollars": dollars, "complete": complete},
    })
}

/// A replay's (or one candidate's) sides as text, under `what`.
fn print_sides(what: &str, usage: &ReplayUsage, prices: &PriceTable) -> Result<()> {
    let replayed = format!("{} of {} turns replayed", usage.turns, usage.selected);
    print_totals(
        &format!("{what}, the original turns ({replayed})"),
        &usage.original,
        prices,
    )?;
    print_totals("the replayed turns", &usage.replay, prices)?;
    if !usage.judge.runs.is_empty() {
        print_totals("the judge's calls (in neither)", &usage.judge, prices)?;
    }
    let (token_delta, dollar_delta, complete) = difference(usage, prices);
    let sign = if dollar_delta < 0.0 { "-" } else { "+" };
    outln!(
        "difference: tokens {token_delta:+} · cost {sign}{}{}",
        dollars(dollar_delta.abs()),
        if complete {
            ""
        } else {
            " (a side is a lower bound: see above)"
        }
    )?;
    Ok(())
}

/// Totals as the text output prints them: runs, each figure, the cache
/// hit rate, the cost and what makes them incomplete.
fn print_totals(what: &str, totals: &Totals, prices: &PriceTable) -> Result<()> {
    outln!("{what}: {}", runs_line(totals))?;
    let figures = [
        ("input tokens", &totals.input_tokens),
        ("output tokens", &totals.output_tokens),
        ("cache read tokens", &totals.cache_read_tokens),
        ("cache write tokens", &totals.cache_write_tokens),
    ];
    for (index, (name, figure)) in figures.into_iter().enumerate() {
        // Cache figures only from backends that cache: shown when there are some.
        if index >= 2 && figure.value == 0 {
            continue;
        }
        let gap = if figure.is_complete() {
            String::new()
        } else {
            format!(
                " (incomplete: {} run(s) reported none)",
                figure.missing_from.len()
            )
        };
        outln!("{name}: {}{gap}", figure.value)?;
    }
    if let Some(rate) = cache_line(totals) {
        outln!("{rate}")?;
    }
    outln!("{}", cost_line(&prices.cost(totals), prices))?;
    if let Some(note) = incomplete_note(totals) {
        outln!("{note}")?;
    }
    Ok(())
}

/// `cache hit rate: N%` of the input tokens, when some were read from a
/// cache.
pub fn cache_line(totals: &Totals) -> Option<String> {
    let rate = totals.cache_hit_rate().filter(|rate| *rate > 0.0)?;
    Some(format!("cache hit rate: {}", percent(rate)))
}

pub fn percent(rate: f64) -> String {
    format!("{:.1}%", rate * 100.0)
}

/// Dollars with enough digits for a single cheap call.
pub fn dollars(value: f64) -> String {
    format!("${value:.6}")
}

/// `cost: $X` with the prices' date, and when it is a lower bound, why.
pub fn cost_line(cost: &Cost, prices: &PriceTable) -> String {
    let local = !cost.by_model.is_empty()
        && cost
            .by_model
            .iter()
            .all(|model| model.source == Some(PriceSource::Local));
    if local && cost.is_complete() {
        // Nothing but models of this machine: nothing to date or explain.
        return format!(
            "cost: {} (models of this machine cost nothing)",
            dollars(0.0)
        );
    }
    let mut line = if cost.is_complete() {
        format!("cost: {}", dollars(cost.dollars))
    } else {
        format!("cost: at least {}", dollars(cost.dollars))
    };
    if cost.cache_savings > 0.0 {
        line.push_str(&format!(
            ", {} saved by cache reads",
            dollars(cost.cache_savings)
        ));
    }
    line.push_str(&format!(" (built-in prices of {}", cost.prices_date));
    if prices.configured() > 0 {
        line.push_str(&format!(", {} from the config file", prices.configured()));
    }
    line.push(')');
    if !cost.unmeasured.is_empty() {
        line.push_str(&format!(
            "; incomplete: {} run(s) reported no usage",
            cost.unmeasured.len()
        ));
    }
    if !cost.unpriced.is_empty() {
        line.push_str(&format!(
            "; incomplete: {} run(s) of {} have no price (add it under [prices] in {})",
            cost.unpriced.len(),
            cost.unpriced_models().join(", "),
            crate::config::path_shown()
        ));
    }
    line
}

/// A cost as `--json` prints it.
pub fn cost_json(cost: &Cost) -> Value {
    json!(CostSummary::from(cost))
}

/// `N run(s)`, with how many failed.
fn runs_line(totals: &Totals) -> String {
    let mut line = format!("{} run(s)", totals.runs.len());
    if !totals.failed.is_empty() {
        line.push_str(&format!(", {} failed or cancelled", totals.failed.len()));
    }
    line
}

/// What makes `totals` incomplete, or `None` when nothing does.
pub fn incomplete_note(totals: &Totals) -> Option<String> {
    let missing = totals.incomplete_runs();
    if missing.is_empty() {
        return None;
    }
    let shown: Vec<&str> = missing.iter().take(5).map(|run| run.short()).collect();
    Some(format!(
        "incomplete: {} of {} run(s) reported no token figures or only part of them ({}{})",
        missing.len(),
        totals.runs.len(),
        shown.join(", "),
        if missing.len() > shown.len() {
            ", ..."
        } else {
            ""
        }
    ))
}

/// Totals as `--json` prints them: the runs counted and failed, each
/// figure with the runs it is missing from, whether the whole is
/// complete, the cache hit rate and the cost at `prices`.
pub fn totals_json(totals: &Totals, prices: &PriceTable) -> Value {
    let figure = |figure: &skein::store::Figure| {
        json!({
            "value": figure.value,
            "complete": figure.is_complete(),
            "missing_from": figure.missing_from,
        })
    };
    json!({
        "runs": totals.runs,
        "failed": totals.failed,
        "input_tokens": figure(&totals.input_tokens),
        "output_tokens": figure(&totals.output_tokens),
        "cache_read_tokens": figure(&totals.cache_read_tokens),
        "cache_write_tokens": figure(&totals.cache_write_tokens),
        "complete": totals.is_complete(),
        "incomplete_runs": totals.incomplete_runs(),
        "by_model": totals.by_model,
        "cache_hit_rate": totals.cache_hit_rate(),
        "cost": cost_json(&prices.cost(totals)),
    })
}
