/*!
`skein replay`: replay recorded turns with one change and report, worst
first, what changed, held, diverged and failed, as text, JSON or JUnit XML
(exit code 7 when any turn did not hold, so a CI job fails on a
regression). Progress, with an ETA, goes to stderr. `--resume ID` goes on
with a replay whose worker died, or joins one other workers run.
*/

use super::common::context::{Context, Globals, print_json};
use super::common::model::home_model;
use super::common::values::parse_cutoff;
use super::usage::{cost_json, dollars};
use crate::exit::{ExitWith, NOT_FOUND, REPLAY_REGRESSED};
use crate::ui::{self, outln};
use anyhow::{Context as _, Result, bail};
use clap::Args;
use serde_json::{Value, json};
use skein::core::ToolSpec;
use skein::core::price::{Cost, PriceTable};
use skein::core::provider::GenerationOptions;
use skein::recorded::compare::{Segment, word_diff};
use skein::recorded::embed::{CachedEmbedder, Embedder, LexicalEmbedder, MiniLmEmbedder};
use skein::recorded::replay::{Change, ReplayPlan, Replayer, Selection, plan_of};
use skein::store::OpenMode;
use skein::store::{
    ReplayId, ReplayRecord, ReplayStatus, ReplayTotals, ReplayTurn, RunId, Totals, UsageScope,
};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

/// Rows read from the store at a time for the report.
const PAGE: usize = 500;

#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// Turns to replay by their answer's node (any unique prefix)
    #[arg(value_name = "NODE", conflicts_with = "resume")]
    pub nodes: Vec<String>,
    /// Every turn of a conversation (id, prefix or name; repeatable)
    #[arg(long = "cid", value_name = "ID", conflicts_with = "resume")]
    pub conversations: Vec<String>,
    /// Every turn of a conversation's family (repeatable)
    #[arg(long = "family", value_name = "ID", conflicts_with = "resume")]
    pub families: Vec<String>,
    /// Every turn carrying this label (`skein label add`; repeatable)
    #[arg(long = "label", value_name = "NAME", conflicts_with = "resume")]
    pub labels: Vec<String>,
    /// The cases of a file `skein label export` wrote, stored here first (each judged by its
    /// own comparators unless --compare is given)
    #[arg(long = "cases", value_name = "FILE", conflicts_with = "resume")]
    pub cases: Option<PathBuf>,
    /// Only turns whose request or answers have these words (as `skein search` finds them)
    #[arg(long, value_name = "TEXT", conflicts_with = "resume")]
    pub search: Option<String>,
    /// Only turns recorded since then: an age (`7d`, `12h`) or a date (`2026-11-01`, UTC)
    #[arg(long, value_name = "AGE|DATE", value_parser = parse_cutoff, conflicts_with = "resume")]
    pub since: Option<i64>,
    /// Only turns recorded before then: an age or a date, as for --since
    #[arg(long, value_name = "AGE|DATE", value_parser = parse_cutoff, conflicts_with = "resume")]
    pub until: Option<i64>,
    /// Only turns the recording proxy recorded for this client (the conversation its
    /// `x-skein-conversation-name` header named; repeatable)
    #[arg(long = "client", value_name = "NAME", conflicts_with = "resume")]
    pub clients: Vec<String>,
    /// Go on with a replay a worker left unfinished (or join one other workers run)
    #[arg(long, value_name = "REPLAY")]
    pub resume: Option<String>,
    /// The model to replay on (a model name or a configured profile)
    #[arg(
        short = 'm',
        long = "model",
        value_name = "MODEL",
        required_unless_present = "resume"
    )]
    pub model: Option<String>,
    /// The system prompt, in place of the recorded one
    #[arg(long, value_name = "TEXT")]
    pub system: Option<String>,
    /// Sampling temperature, in place of the recorded one
    #[arg(long, value_name = "T")]
    pub temperature: Option<f64>,
    /// Seed, in place of the recorded one
    #[arg(long, value_name = "N")]
    pub seed: Option<u64>,
    /// At most N tokens per reply, in place of the recorded limit
    #[arg(long, value_name = "N")]
    pub max_tokens: Option<u32>,
    /// A tool no longer offered (repeatable)
    #[arg(long = "remove-tool", value_name = "NAME")]
    pub remove_tools: Vec<String>,
    /// A tool to offer besides the recorded ones, or in place of the recorded tool of its name (a
    /// swapped schema): a JSON file `{"name", "description", "input_schema"}` (repeatable)
    #[arg(long = "add-tool", value_name = "FILE")]
    pub add_tools: Vec<PathBuf>,
    /// A source whose tagged parts are removed from each request (repeatable)
    #[arg(long = "ignore", value_name = "ID")]
    pub ignore: Vec<String>,
    /// A comparator (repeatable, asked in order; the first that says changed decides):
    /// exact, normalised, json[:FIELD,FIELD], contains:TEXT, regex:PATTERN,
    /// embedding[:THRESHOLD], specifics, judge:MODEL (default: specifics, then embedding)
    #[arg(long = "compare", value_name = "SPEC")]
    pub compare: Vec<String>,
    /// Run this tool for calls the recording lacks (repeatable); others stop the turn as diverged
    #[arg(long = "live-tool", value_name = "NAME")]
    pub live_tools: Vec<String>,
    /// The embedder of the embedding comparator: `lexical` or `minilm`
    #[arg(long, default_value = "lexical", value_name = "NAME")]
    pub embedder: String,
    /// Turns replayed at once (default: the model's capacity)
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub concurrency: Option<u32>,
    /// Seconds a worker holds a turn before another may take it over
    #[arg(long, default_value_t = 120, value_name = "SECS")]
    pub lease: u64,
    /// The report's format
    #[arg(long, value_enum, default_value_t = ReplayFormat::Text)]
    pub format: ReplayFormat,
}

/// How `skein replay` reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ReplayFormat {
    Text,
    Json,
    Junit,
}

pub async fn run(globals: &Globals, args: ReplayArgs) -> Result<ExitCode> {
    let ctx = &globals.open(match args.cases {
        // Cases are a test set for any database, an empty one included.
        Some(_) => OpenMode::Create,
        None => OpenMode::Existing,
    })?;
    let (id, plan, selection) = match &args.resume {
        Some(given) => {
            let id = find_replay(ctx, given)?;
            let record = ctx.store.replay(&id)?;
            let selection: Selection =
                serde_json::from_value(record.selection.clone()).unwrap_or_default();
            (Some(id), plan_of(&record)?, selection)
        }
        None => {
            let plan = plan_from(&args)?;
            (None, plan, selection(ctx, &args).await?)
        }
    };
    let replayer = replayer(ctx, &args, &plan, &selection).await?;
    let id = match id {
        Some(id) => id,
        None => replayer.start(&selection, &plan).await?,
    };
    let record = ctx.store.replay(&id)?;
    let bar = progress_bar(record.turns, &id);
    let totals = replayer
        .run(&id, |progress| {
            bar.set_position(progress.finished);
            bar.set_message(format!(
                "turn {} {}",
                progress.turn.seq,
                word(&progress.turn)
            ));
        })
        .await;
    bar.finish_and_clear();
    let totals = totals?;
    let turns = worst_first(all_turns(ctx, &id)?);
    let costs = Costs::of(ctx, &turns)?;
    let format = if ctx.json {
        ReplayFormat::Json
    } else {
        args.format
    };
    match format {
        ReplayFormat::Text => print_text(&record, &totals, &turns, &costs)?,
        ReplayFormat::Json => {
            print_json(&report_json(&record, &totals, &turns, &costs))?;
        }
        ReplayFormat::Junit => outln!("{}", junit(&record, &totals, &turns, &costs).trim_end())?,
    }
    if totals.changed + totals.diverged + totals.failed > 0 {
        return Ok(ExitCode::from(REPLAY_REGRESSED));
    }
    Ok(ExitCode::SUCCESS)
}

/// The plan the command line asks for.
fn plan_from(args: &ReplayArgs) -> Result<ReplayPlan> {
    let model = args
        .model
        .clone()
        .ok_or_else(|| anyhow::anyhow!("say which model to replay on: -m MODEL"))?;
    let mut plan = ReplayPlan::new(model);
    plan.change = change_from(args)?;
    plan.compare = args.compare.clone();
    plan.live_tools = args.live_tools.clone();
    plan.comparators()?;
    Ok(plan)
}

fn change_from(args: &ReplayArgs) -> Result<Change> {
    let mut change = Change::default();
    change.options = GenerationOptions {
        temperature: args.temperature,
        seed: args.seed,
        max_tokens: args.max_tokens,
        ..GenerationOptions::default()
    };
    change.system = args.system.clone();
    change.remove_tools = args.remove_tools.clone();
    change.remove_sources = args.ignore.clone();
    for path in &args.add_tools {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read the tool file {}", path.display()))?;
        let tool: ToolSpec = serde_json::from_str(&text).with_context(|| {
            format!(
                "{} is not a tool: write {{\"name\": …, \"description\": …, \"input_schema\": {{…}}}}",
                path.display()
            )
        })?;
        change.add_tools.push(tool);
    }
    Ok(change)
}

/// A worker for `plan`: its model, the embedder, a judge's model (the
/// plan's or a case's), the live tools.
async fn replayer(
    ctx: &Context,
    args: &ReplayArgs,
    plan: &ReplayPlan,
    selection: &Selection,
) -> Result<Replayer> {
    let model = home_model(Some(plan.model.clone()))?;
    let mut replayer = Replayer::new(&ctx.store, model)
        .embedder(embedder(ctx, &args.embedder)?)
        .lease(Duration::from_secs(args.lease));
    if let Some(n) = args.concurrency {
        replayer = replayer.concurrency(n as usize);
    }
    let cases = selection.cases.iter().flat_map(|case| &case.compare);
    for spec in plan.compare.iter().chain(cases) {
        let comparator = skein::recorded::compare::Comparator::parse(spec)?;
        if let skein::recorded::compare::Comparator::Judge { model, .. } = comparator {
            replayer = replayer.judge(home_model(Some(model))?);
            break;
        }
    }
    if !plan.live_tools.is_empty() {
        super::common::tools::start_for(&plan.live_tools).await?;
        for tool in super::common::tools::named(&plan.live_tools).await? {
            replayer = replayer.live_tool(tool);
        }
    }
    Ok(replayer)
}

fn embedder(ctx: &Context, name: &str) -> Result<Arc<dyn Embedder>> {
    let inner: Arc<dyn Embedder> = match name {
        "lexical" => Arc::new(LexicalEmbedder::new(256)),
        "minilm" => Arc::new(MiniLmEmbedder::load(1).map_err(|error| {
            anyhow::anyhow!(
                "{error}; fetch it with `skein models pull minilm`, or pass --embedder lexical"
            )
        })?),
        other => bail!("unknown embedder `{other}`: use `lexical` or `minilm`"),
    };
    Ok(Arc::new(CachedEmbedder::with_store(
        inner,
        ctx.store.clone(),
    )))
}

/// The turns the command line names (a cases file's stored first).
async fn selection(ctx: &Context, args: &ReplayArgs) -> Result<Selection> {
    let mut selection = Selection::new();
    for given in &args.conversations {
        selection = selection.conversation(ctx.conversation(given)?.id);
    }
    for given in &args.families {
        selection = selection.family(ctx.conversation(given)?.id);
    }
    for given in &args.nodes {
        selection = selection.turn(ctx.node(given)?);
    }
    for name in &args.labels {
        selection = selection.label(name.clone());
    }
    if let Some(file) = &args.cases {
        for case in super::label::import_cases(ctx, file).await? {
            selection = selection.case(case);
        }
    }
    if let Some(text) = &args.search {
        selection = selection.search(text.clone());
    }
    selection = selection.between(args.since, args.until);
    for name in &args.clients {
        selection = selection.client(name.clone());
    }
    if selection.is_empty() {
        bail!(
            "say which turns to replay: NODE, --cid ID, --family ID, --label NAME, --cases FILE, \
             or a filter over every conversation (--search, --since, --until, --client) (or \
             --resume REPLAY)"
        );
    }
    Ok(selection)
}

/// The replay whose id starts with `given`.
fn find_replay(ctx: &Context, given: &str) -> Result<ReplayId> {
    let matching: Vec<ReplayId> = ctx
        .store
        .all_replays()?
        .into_iter()
        .map(|replay| replay.id)
        .filter(|id| id.as_str().starts_with(given))
        .collect();
    match &matching[..] {
        [one] => Ok(one.clone()),
        [] => Err(ExitWith(NOT_FOUND, format!("no replay starts with `{given}`")).into()),
        many => Err(ExitWith(
            NOT_FOUND,
            format!(
                "`{given}` matches several replays ({}); give more digits",
                many.iter()
                    .map(|id| id.short())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        )
        .into()),
    }
}

fn progress_bar(total: u64, id: &ReplayId) -> indicatif::ProgressBar {
    let bar = if std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        indicatif::ProgressBar::new(total)
    } else {
        indicatif::ProgressBar::hidden()
    };
    if let Ok(style) = indicatif::ProgressStyle::with_template(
        "replay {prefix} {bar:30} {pos}/{len} · {elapsed} elapsed, ETA {eta} · {msg}",
    ) {
        bar.set_style(style);
    }
    bar.set_prefix(id.short().to_string());
    bar
}

fn all_turns(ctx: &Context, id: &ReplayId) -> Result<Vec<ReplayTurn>> {
    let mut turns = Vec::new();
    loop {
        let page = ctx
            .store
            .replay_turns(id, turns.last().map(|t: &ReplayTurn| t.seq), PAGE)?;
        let done = page.len() < PAGE;
        turns.extend(page);
        if done {
            return Ok(turns);
        }
    }
}

/// How bad a turn is: failed, diverged, changed, held.
fn rank(turn: &ReplayTurn) -> u8 {
    match (turn.status, turn.decision.as_deref()) {
        (ReplayStatus::Failed, _) => 0,
        (ReplayStatus::Diverged, _) => 1,
        (_, Some("changed")) => 2,
        (ReplayStatus::Pending | ReplayStatus::Running, _) => 3,
        _ => 4,
    }
}

fn worst_first(mut turns: Vec<ReplayTurn>) -> Vec<ReplayTurn> {
    turns.sort_by_key(|turn| (rank(turn), turn.seq));
    turns
}

/// `changed`, `held`, `diverged`, `failed` (or where it stands).
fn word(turn: &ReplayTurn) -> &str {
    match turn.status {
        ReplayStatus::Done => turn.decision.as_deref().unwrap_or("done"),
        other => other.as_str(),
    }
}

fn text_of<'t>(turn: &'t ReplayTurn, key: &str) -> &'t str {
    turn.detail[key].as_str().unwrap_or_default()
}

/// A text with the words the other lacks between `open` and `close`
/// (`[-gone-]`, `{+new+}`, as `git diff --word-diff` writes them).
fn marked(segments: &[Segment], open: &str, close: &str) -> String {
    let mut out = String::new();
    for segment in segments {
        if !segment.changed {
            out.push_str(&segment.text);
            continue;
        }
        let word = segment.text.trim_end();
        out.push_str(open);
        out.push_str(word);
        out.push_str(close);
        out.push_str(&segment.text[word.len()..]);
    }
    out
}

/// Tokens (in + out) and latency of the original and the replay.
fn tokens_and_latency(turn: &ReplayTurn) -> Option<(i64, i64, i64, i64)> {
    let tokens =
        |usage: &Value| Some(usage["input_tokens"].as_i64()? + usage["output_tokens"].as_i64()?);
    let original = &turn.detail["original_usage"];
    let replayed = &turn.detail["usage"];
    Some((
        tokens(original)?,
        tokens(replayed)?,
        original["latency_ms"].as_i64()?,
        replayed["latency_ms"].as_i64()?,
    ))
}

/// What each turn's original and replay cost at today's prices (a price
/// change re-prices the report), and the totals.
struct Costs {
    /// By turn seq: (original, replay); absent for a turn not replayed yet
    /// or replayed before replays kept their originals' runs.
    turns: std::collections::HashMap<u64, (Cost, Cost)>,
    original: Totals,
    replay: Totals,
    prices: PriceTable,
}

impl Costs {
    fn of(ctx: &Context, turns: &[ReplayTurn]) -> Result<Costs> {
        let prices = crate::config::prices()?;
        let usage = |runs: &[RunId]| ctx.store.usage(&UsageScope::Runs(runs.to_vec()));
        let mut by_turn = std::collections::HashMap::new();
        let (mut all_original, mut all_replay) = (Vec::new(), Vec::new());
        for turn in turns {
            let Ok(original) =
                serde_json::from_value::<Vec<RunId>>(turn.detail["original_runs"].clone())
            else {
                continue;
            };
            let replayed = (
                prices.cost(&usage(&original)?),
                prices.cost(&usage(&turn.runs)?),
            );
            by_turn.insert(turn.seq, replayed);
            all_original.extend(original);
            all_replay.extend(turn.runs.iter().cloned());
        }
        Ok(Costs {
            turns: by_turn,
            original: usage(&all_original)?,
            replay: usage(&all_replay)?,
            prices,
        })
    }

    /// `cost $A → $B (+$D)`, each side "at least" when it is a lower bound.
    fn line(original: &Cost, replay: &Cost) -> String {
        format!(
            "cost {} → {} ({})",
            priced(original),
            priced(replay),
            signed_dollars(replay.dollars - original.dollars)
        )
    }

    fn total(&self) -> (Cost, Cost) {
        (
            self.prices.cost(&self.original),
            self.prices.cost(&self.replay),
        )
    }
}

fn priced(cost: &Cost) -> String {
    match cost.is_complete() {
        true => dollars(cost.dollars),
        false => format!("at least {}", dollars(cost.dollars)),
    }
}

fn signed_dollars(value: f64) -> String {
    let sign = if value < 0.0 { "-" } else { "+" };
    format!("{sign}{}", dollars(value.abs()))
}

/// A cost in a report's JSON.
fn cost_value(cost: &Cost) -> Value {
    cost_json(cost)
}

fn print_text(
    record: &ReplayRecord,
    totals: &ReplayTotals,
    turns: &[ReplayTurn],
    costs: &Costs,
) -> Result<()> {
    for turn in turns {
        outln!(
            "{:<8} turn {} · {}{}",
            word(turn).to_uppercase(),
            turn.seq,
            turn.turn_node.short(),
            turn.comparator
                .as_deref()
                .map_or(String::new(), |c| format!(" · {c}"))
        )?;
        let why = text_of(turn, "why");
        if !why.is_empty() {
            outln!("  why:      {}", ui::one_line(why, 200))?;
        }
        let (original, answer) = (text_of(turn, "original"), text_of(turn, "answer"));
        let (original, answer) = if turn.decision.as_deref() == Some("changed") {
            let (a, b) = word_diff(original, answer);
            (marked(&a, "[-", "-]"), marked(&b, "{+", "+}"))
        } else {
            (original.to_string(), answer.to_string())
        };
        outln!("  original: {}", ui::one_line(&original, 200))?;
        if !answer.is_empty() {
            outln!("  replay:   {}", ui::one_line(&answer, 200))?;
        }
        if let Some((before, after, was, now)) = tokens_and_latency(turn) {
            let cost = costs
                .turns
                .get(&turn.seq)
                .map_or(String::new(), |(original, replay)| {
                    format!(" · {}", Costs::line(original, replay))
                });
            outln!(
                "  tokens {before} → {after} ({:+}) · latency {was} → {now} ms ({:+}){cost}",
                after - before,
                now - was
            )?;
        }
    }
    let (original_cost, replay_cost) = costs.total();
    let (mut tokens, mut time) = (0i64, 0i64);
    for (before, after, was, now) in turns.iter().filter_map(tokens_and_latency) {
        tokens += after - before;
        time += now - was;
    }
    outln!(
        "replay {} on {}: {} turns · {} changed · {} held · {} diverged · {} failed · tokens {tokens:+} · latency {time:+} ms · {}",
        record.id.short(),
        record.model,
        record.turns,
        totals.changed,
        totals.held,
        totals.diverged,
        totals.failed,
        Costs::line(&original_cost, &replay_cost)
    )?;
    Ok(())
}

fn report_json(
    record: &ReplayRecord,
    totals: &ReplayTotals,
    turns: &[ReplayTurn],
    costs: &Costs,
) -> Value {
    let (original_cost, replay_cost) = costs.total();
    let turn_cost = |turn: &ReplayTurn, side: usize| {
        costs
            .turns
            .get(&turn.seq)
            .map(|pair| cost_value(if side == 0 { &pair.0 } else { &pair.1 }))
    };
    json!({
        "replay": record.id,
        "model": record.model,
        "selection": record.selection,
        "change": record.change,
        "settings": record.settings,
        "totals": totals,
        "cost": {
            "original": cost_value(&original_cost),
            "replay": cost_value(&replay_cost),
            "delta": replay_cost.dollars - original_cost.dollars,
            "complete": original_cost.is_complete() && replay_cost.is_complete(),
        },
        "turns": turns.iter().map(|turn| json!({
            "seq": turn.seq,
            "result": word(turn),
            "conversation": turn.conversation,
            "turn_node": turn.turn_node,
            "answer_node": turn.answer_head,
            "comparator": turn.comparator,
            "why": turn.detail["why"],
            "original": turn.detail["original"],
            "answer": turn.detail["answer"],
            "original_usage": turn.detail["original_usage"],
            "usage": turn.detail["usage"],
            "original_cost": turn_cost(turn, 0),
            "cost": turn_cost(turn, 1),
            "runs": turn.runs,
        })).collect::<Vec<_>>(),
    })
}

/// The report as a JUnit test suite: a held turn passes, a changed or
/// diverged one fails, a failed one is an error.
fn junit(
    record: &ReplayRecord,
    totals: &ReplayTotals,
    turns: &[ReplayTurn],
    costs: &Costs,
) -> String {
    let (original_cost, replay_cost) = costs.total();
    let mut out = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuite name=\"skein replay {}\" tests=\"{}\" failures=\"{}\" errors=\"{}\">\n  <properties>\n{}  </properties>\n",
        xml(record.id.as_str()),
        turns.len(),
        totals.changed + totals.diverged,
        totals.failed,
        cost_properties("    ", &original_cost, &replay_cost)
    );
    for turn in turns {
        let name = format!("turn {} ({})", turn.seq, turn.turn_node.short());
        let class = turn
            .conversation
            .as_ref()
            .map_or("replay".to_string(), |c| c.to_string());
        out.push_str(&format!(
            "  <testcase name=\"{}\" classname=\"{}\">",
            xml(&name),
            xml(&class)
        ));
        let mut inner = String::new();
        if let Some((original, replay)) = costs.turns.get(&turn.seq) {
            inner.push_str(&format!(
                "\n    <properties>\n{}    </properties>",
                cost_properties("      ", original, replay)
            ));
        }
        let body = format!(
            "original: {}\nreplay: {}",
            text_of(turn, "original"),
            text_of(turn, "answer")
        );
        let why = text_of(turn, "why");
        match rank(turn) {
            0 => inner.push_str(&format!("\n    <error message=\"{}\"/>", xml(why))),
            1 | 2 => inner.push_str(&format!(
                "\n    <failure type=\"{}\" message=\"{}\">{}</failure>",
                word(turn),
                xml(why),
                xml(&body)
            )),
            _ => {}
        }
        if !inner.is_empty() {
            out.push_str(&inner);
            out.push_str("\n  ");
        }
        out.push_str("</testcase>\n");
    }
    out.push_str("</testsuite>\n");
    out
}

/// The original's and the replay's cost as JUnit properties (dollars, and
/// whether each is complete rather than a lower bound).
fn cost_properties(indent: &str, original: &Cost, replay: &Cost) -> String {
    let mut out = String::new();
    for (name, value) in [
        ("cost.original", format!("{:.6}", original.dollars)),
        ("cost.replay", format!("{:.6}", replay.dollars)),
        (
            "cost.delta",
            format!("{:.6}", replay.dollars - original.dollars),
        ),
        (
            "cost.complete",
            (original.is_complete() && replay.is_complete()).to_string(),
        ),
    ] {
        out.push_str(&format!(
            "{indent}<property name=\"{name}\" value=\"{value}\"/>\n"
        ));
    }
    out
}

/// `text` escaped for XML attributes and content.
fn xml(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c if (c as u32) < 0x20 && !matches!(c, '\n' | '\t' | '\r') => {}
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changed_words_are_marked_as_git_marks_them() {
        let (a, b) = word_diff("called Hotel Lutetia.", "called the Hotel Lumière.");
        assert_eq!(marked(&a, "[-", "-]"), "called Hotel [-Lutetia.-]");
        assert_eq!(marked(&b, "{+", "+}"), "called {+the+} Hotel {+Lumière.+}");
    }

    #[test]
    fn xml_is_escaped_and_control_characters_dropped() {
        assert_eq!(xml("a<b & \"c\"\u{1}"), "a&lt;b &amp; &quot;c&quot;");
    }
}
