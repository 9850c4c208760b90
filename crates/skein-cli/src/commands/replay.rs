/*!
`skein replay`: replay recorded turns with one change and report, worst
first, what changed, held, diverged and failed, as text, JSON or JUnit XML
(exit code 7 when any turn did not hold, so a CI job fails on a
regression): what changed first, then per turn the question re-sent, its
conversation's name and both answers. The replay's id, with the
`--resume` command, is said on stderr before it starts; progress, with an
ETA, goes to stderr on a terminal. `--resume ID` goes on with a replay
whose worker died, or joins one other workers run. `skein replays` lists,
shows and deletes replays ([`print_report`] is how both print one).
*/

mod diff;

use super::common::context::{Context, Globals, print_json};
use super::common::model::home_model;
use super::common::values::{compare_help, parse_cutoff};
use super::usage::dollars;
use crate::exit::{BAD_COMMAND_LINE, ExitWith, NOT_FOUND, REPLAY_REGRESSED};
use crate::ui::{self, outln};
use anyhow::{Context as _, Result, bail};
use clap::Args;
use diff::{marked, word_diff};
use skein::core::ToolSpec;
use skein::core::price::CostSummary;
use skein::core::provider::GenerationOptions;
use skein::recorded::replay::{
    Change, PromptVersion, ReplayPlan, ReplayReport, Replayer, Selection, TurnReport, plan_of,
    result_of,
};
use skein::store::OpenMode;
use skein::store::{ReplayId, StoreError};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

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
    /// Only turns recorded since then: an age (`7d`, `12h`, `45min`, `6mo`) or a date (`2026-11-01`,
    /// UTC)
    #[arg(long, value_name = "AGE|DATE", value_parser = parse_cutoff, conflicts_with = "resume")]
    pub since: Option<i64>,
    /// Only turns recorded before then: an age or a date, as for --since
    #[arg(long, value_name = "AGE|DATE", value_parser = parse_cutoff, conflicts_with = "resume")]
    pub until: Option<i64>,
    /// Only turns the recording proxy recorded for this client (its `x-skein-client` header,
    /// else OpenAI's `user` or Anthropic's `metadata.user_id`, kept on each run; repeatable)
    #[arg(long = "client", value_name = "NAME", conflicts_with = "resume")]
    pub clients: Vec<String>,
    /// Go on with a replay a worker left unfinished (or join one other workers run)
    #[arg(long, value_name = "REPLAY")]
    pub resume: Option<String>,
    /// The model to replay on (a model name or a configured profile; required unless --resume);
    /// repeat it to compare candidates: each turn is replayed on each, one report for all
    #[arg(short = 'm', long = "model", value_name = "MODEL")]
    pub models: Vec<String>,
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
    /// A source replaced in each request: its first tagged text part holds TEXT, its other tagged
    /// parts go (repeatable)
    #[arg(long = "replace-source", value_name = "ID=TEXT")]
    pub replace_sources: Vec<String>,
    /// Render this version of a configured prompt in place of the recorded one, with the recorded
    /// variables (turns that rendered no such prompt fail)
    #[arg(long = "prompt-version", value_name = "ID@VERSION")]
    pub prompt_version: Option<String>,
    #[arg(long = "compare", value_name = "SPEC", help = compare_help())]
    pub compare: Vec<String>,
    /// The model of the `judge` comparator (a case's `judge`, or `--compare judge`); cases files
    /// never choose it
    #[arg(long, value_name = "MODEL", conflicts_with = "resume")]
    pub judge: Option<String>,
    /// Run this tool for calls the recording lacks (repeatable); others stop the turn as diverged
    #[arg(long = "live-tool", value_name = "NAME")]
    pub live_tools: Vec<String>,
    /// The embedder of the embedding comparator: `minilm` or `lexical` [default: minilm where it
    /// is downloaded, else lexical, said on stderr]
    #[arg(long, value_name = "NAME")]
    pub embedder: Option<String>,
    /// Turns replayed at once (default: the model's capacity)
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub concurrency: Option<u32>,
    /// Seconds a claim on a turn lasts: renewed while this worker holds the turn, taken over by another once passed
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

/// Words that read as a listing's verb, not a node: `skein replay list`
/// is pointed at `skein replays`.
const LISTING_WORDS: &[&str] = &["list", "ls", "show", "delete", "rm"];

pub async fn run(globals: &Globals, args: ReplayArgs) -> Result<ExitCode> {
    if args.resume.is_none() && args.models.is_empty() {
        let said = match args.nodes.first().map(String::as_str) {
            Some(word) if LISTING_WORDS.contains(&word) => format!(
                "`skein replay {word}` replays turns, and `{word}` names none: replays are listed \
                 by `skein replays`, shown by `skein replays show REPLAY` and deleted by \
                 `skein replays delete REPLAY`"
            ),
            _ => "say which model to replay on: -m MODEL (or go on with a replay: \
                  --resume REPLAY)"
                .to_string(),
        };
        return Err(ExitWith(BAD_COMMAND_LINE, said).into());
    }
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
    let replayer = replayer(ctx, &args, &plan).await?;
    let id = match id {
        Some(id) => id,
        None => replayer.start(&selection, &plan).await?,
    };
    let record = ctx.store.replay(&id)?;
    // Said before anything runs, on a terminal or not (where the progress
    // bar is hidden), so a replay killed in a script or a CI job, or by a
    // closed terminal, can be found and resumed.
    let models = plan.candidates().len() as u64;
    let turns = match models {
        1 => format!("{} turn(s)", record.turns),
        n => format!("{} turn(s) × {n} models", record.turns / n),
    };
    ui::note(format!(
        "replay {id}: {turns}; if it stops, `skein replay --resume {id}` goes on"
    ));
    let bar = progress_bar(record.turns, &id);
    let totals = replayer
        .run(&id, |progress| {
            bar.set_position(progress.finished);
            bar.set_message(format!(
                "turn {}{} {}",
                progress.turn.seq / models,
                progress
                    .turn
                    .model
                    .as_deref()
                    .map_or(String::new(), |model| format!(" on {model}")),
                result_of(&progress.turn)
            ));
        })
        .await;
    bar.finish_and_clear();
    totals?;
    print_report(ctx, &id, args.format)
}

/// Replay `id`'s report, worst turns first, in `format` (JSON with
/// `--json`), the way a replay ends and `skein replays show` prints it
/// again: exit code 7 when some turn did not hold.
pub fn print_report(ctx: &Context, id: &ReplayId, format: ReplayFormat) -> Result<ExitCode> {
    let report = ReplayReport::read(&ctx.store, id, &crate::config::prices()?)?.worst_first();
    let format = if ctx.json { ReplayFormat::Json } else { format };
    match format {
        ReplayFormat::Text => print_text(&report)?,
        ReplayFormat::Json => {
            print_json(&report)?;
        }
        ReplayFormat::Junit => outln!("{}", junit(&report).trim_end())?,
    }
    if report.regressed() {
        return Ok(ExitCode::from(REPLAY_REGRESSED));
    }
    Ok(ExitCode::SUCCESS)
}

/// The plan the command line asks for.
fn plan_from(args: &ReplayArgs) -> Result<ReplayPlan> {
    let mut plan = ReplayPlan::comparing(args.models.clone())?;
    plan.change = change_from(args)?;
    plan.compare = args.compare.clone();
    plan.judge = args.judge.clone();
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
    change.prompt_version = args
        .prompt_version
        .as_deref()
        .map(PromptVersion::parse)
        .transpose()?;
    for given in &args.replace_sources {
        let Some((id, text)) = given.split_once('=').filter(|(id, _)| !id.is_empty()) else {
            bail!(
                "--replace-source takes ID=TEXT (the source's id, then its new text), not `{given}`"
            );
        };
        change
            .replace_sources
            .insert(id.to_string(), text.to_string());
    }
    for path in &args.add_tools {
        let text = crate::input::text_file(path, "the --add-tool file")?;
        let tool: ToolSpec = serde_json::from_str(&text).with_context(|| {
            format!(
                "{} is not a tool: write {{\"name\": …, \"description\": …, \"input_schema\": {{…}}}}",
                path.display()
            )
        })?;
        tool.check()
            .with_context(|| format!("{} is not a tool to offer", path.display()))?;
        change.add_tools.push(tool);
    }
    Ok(change)
}

/// A worker for `plan`: its models (every candidate it compares), the
/// embedder, the judge's model (the command line's: a case never names
/// one), the live tools.
async fn replayer(ctx: &Context, args: &ReplayArgs, plan: &ReplayPlan) -> Result<Replayer> {
    let model = home_model(Some(plan.model.clone()))?;
    let mut replayer = Replayer::new(&ctx.store, model)
        .embedder(super::common::recorded::embedder(
            ctx,
            args.embedder.as_deref(),
        )?)
        .lease(Duration::from_secs(args.lease));
    for name in plan
        .candidates()
        .into_iter()
        .filter(|name| *name != plan.model)
    {
        replayer = replayer.candidate(name.clone(), home_model(Some(name))?);
    }
    if let Some(n) = args.concurrency {
        replayer = replayer.concurrency(n as usize);
    }
    if let Some(judge) = plan.judge_model()? {
        replayer = replayer.judge(home_model(Some(judge))?);
    }
    if !plan.live_tools.is_empty() {
        super::common::tools::start_for(&plan.live_tools).await?;
        for tool in super::common::tools::named(&plan.live_tools).await? {
            replayer = replayer.live_tool(tool);
        }
    }
    Ok(replayer)
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
pub fn find_replay(ctx: &Context, given: &str) -> Result<ReplayId> {
    ctx.store
        .resolve_replay(given)
        .map_err(|error| match error {
            error @ (StoreError::UnknownPrefix { .. } | StoreError::AmbiguousPrefix { .. }) => {
                ExitWith(NOT_FOUND, error.to_string()).into()
            }
            error => error.into(),
        })
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

/// Tokens (in + out) and latency of the original and the replay.
fn tokens_and_latency(turn: &TurnReport) -> Option<(i64, i64, i64, i64)> {
    let (original, replayed) = (turn.original_usage?, turn.usage?);
    Some((
        original.tokens() as i64,
        replayed.tokens() as i64,
        original.latency_ms,
        replayed.latency_ms,
    ))
}

/// `cost $A → $B (+$D)`, each side "at least" when it is a lower bound.
fn cost_line(original: &CostSummary, replay: &CostSummary) -> String {
    if is_free(original) && is_free(replay) {
        // Models of this machine on both sides: no figures to compare.
        return "cost $0".to_string();
    }
    format!(
        "cost {} → {} ({})",
        priced(original),
        priced(replay),
        signed_dollars(replay.dollars - original.dollars)
    )
}

/// Whole and zero: what models of this machine cost.
fn is_free(cost: &CostSummary) -> bool {
    cost.complete && cost.dollars == 0.0
}

fn priced(cost: &CostSummary) -> String {
    match cost.complete {
        true => dollars(cost.dollars),
        false => format!("at least {}", dollars(cost.dollars)),
    }
}

fn signed_dollars(value: f64) -> String {
    let sign = if value < 0.0 { "-" } else { "+" };
    format!("{sign}{}", dollars(value.abs()))
}

/// How much of a question the text report and JUnit's test names show.
const QUESTION_WIDTH: usize = 100;

/// The conversation a turn belongs to, as reports name it: its name, else
/// its title, else its short id.
fn conversation_shown(turn: &TurnReport) -> Option<String> {
    turn.conversation_name
        .as_deref()
        .map(|name| ui::one_line(name, 40))
        .or_else(|| turn.conversation.as_ref().map(|c| c.short().to_string()))
}

fn print_text(report: &ReplayReport) -> Result<()> {
    if !report.model_totals.is_empty() {
        return print_matrix(report);
    }
    outln!(
        "replay {} · {}",
        report.replay.short(),
        report.change_line()
    )?;
    outln!(
        "{} turn(s) selected: {} · {}",
        report.selected,
        report.selection_text,
        report.state
    )?;
    for turn in &report.turns {
        outln!(
            "{:<8} turn {}{} · {}{}",
            turn.result.to_uppercase(),
            turn.seq,
            conversation_shown(turn).map_or(String::new(), |c| format!(" · {c}")),
            turn.turn_node.short(),
            turn.comparator
                .as_deref()
                .map_or(String::new(), |c| format!(" · {c}"))
        )?;
        if let Some(question) = &turn.question {
            outln!("  question: {}", ui::one_line(question, QUESTION_WIDTH))?;
        }
        let why = turn.why.as_deref().unwrap_or_default();
        if !why.is_empty() {
            outln!("  why:      {}", ui::one_line(why, 200))?;
        }
        let original = turn.original.as_deref().unwrap_or_default();
        let answer = turn.answer.as_deref().unwrap_or_default();
        let (original, answer) = if turn.result == "changed" {
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
            let cost = match (&turn.original_cost, &turn.cost) {
                (Some(original), Some(replay)) if !(is_free(original) && is_free(replay)) => {
                    format!(" · {}", cost_line(original, replay))
                }
                _ => String::new(),
            };
            outln!(
                "  tokens {before} → {after} ({:+}) · latency {was} → {now} ms ({:+}){cost}",
                after - before,
                now - was
            )?;
        }
    }
    let (mut tokens, mut time) = (0i64, 0i64);
    for (before, after, was, now) in report.turns.iter().filter_map(tokens_and_latency) {
        tokens += after - before;
        time += now - was;
    }
    let totals = &report.totals;
    outln!(
        "replay {} on {}: {} turns · {} changed · {} held · {} diverged · {} failed · tokens {tokens:+} · latency {time:+} ms · {}",
        report.replay.short(),
        report.model,
        report.selected,
        totals.changed,
        totals.held,
        totals.diverged,
        totals.failed,
        cost_line(&report.cost.original, &report.cost.replay)
    )?;
    Ok(())
}

/// A turn's place in the selection, from 0 (its row's place, in a replay
/// that compares models: a row per turn and model).
fn turn_number(report: &ReplayReport, turn: &TurnReport) -> u64 {
    turn.seq / report.models.len().max(1) as u64
}

/// A replay that compares models, as text: per turn (worst first, by its
/// worst model) the question and the original answer, then each model's
/// result, why, answer, tokens and latency; then each model's totals.
fn print_matrix(report: &ReplayReport) -> Result<()> {
    outln!(
        "replay {} · {}",
        report.replay.short(),
        report.change_line()
    )?;
    outln!(
        "{} turn(s) selected × {} models: {} · {}",
        report.turns_selected(),
        report.models.len(),
        report.selection_text,
        report.state
    )?;
    let width = report
        .models
        .iter()
        .map(|m| m.chars().count())
        .max()
        .unwrap_or(0);
    let mut at = 0;
    while at < report.turns.len() {
        let node = report.turns[at].turn_node;
        let end = report.turns[at..]
            .iter()
            .position(|turn| turn.turn_node != node)
            .map_or(report.turns.len(), |n| at + n);
        let rows = &report.turns[at..end];
        let first = &rows[0];
        outln!(
            "turn {}{} · {}",
            turn_number(report, first),
            conversation_shown(first).map_or(String::new(), |c| format!(" · {c}")),
            first.turn_node.short()
        )?;
        if let Some(question) = &first.question {
            outln!("  question: {}", ui::one_line(question, QUESTION_WIDTH))?;
        }
        let original = first.original.as_deref().unwrap_or_default();
        outln!("  original: {}", ui::one_line(original, 200))?;
        for turn in rows {
            let model = turn.model.as_deref().unwrap_or(&report.model);
            let usage = tokens_and_latency(turn).map_or(String::new(), |(a, b, was, now)| {
                format!(
                    " · tokens {a} → {b} ({:+}) · latency {was} → {now} ms ({:+})",
                    b - a,
                    now - was
                )
            });
            outln!(
                "  {:<8} {model:<width$}{}{usage}",
                turn.result.to_uppercase(),
                turn.comparator
                    .as_deref()
                    .map_or(String::new(), |c| format!(" · {c}"))
            )?;
            let why = turn.why.as_deref().unwrap_or_default();
            if !why.is_empty() {
                outln!("    why:    {}", ui::one_line(why, 200))?;
            }
            if let Some(answer) = turn.answer.as_deref().filter(|a| !a.is_empty()) {
                outln!("    replay: {}", ui::one_line(answer, 200))?;
            }
        }
        at = end;
    }
    for model in &report.model_totals {
        let totals = &model.totals;
        let original = &model.original_usage;
        let replayed = &model.usage;
        outln!(
            "replay {} on {}: {} turns · {} changed · {} held · {} diverged · {} failed · tokens {:+} · latency {:+} ms · {}",
            report.replay.short(),
            model.model,
            report.turns_selected(),
            totals.changed,
            totals.held,
            totals.diverged,
            totals.failed,
            replayed.tokens() as i64 - original.tokens() as i64,
            replayed.latency_ms - original.latency_ms,
            cost_line(&model.cost.original, &model.cost.replay)
        )?;
    }
    Ok(())
}

/// The report as JUnit XML: a test suite of a turn per test case (a
/// suite per model, in `<testsuites>`, when the replay compares models).
/// A held turn passes, a changed or diverged one fails, a failed one is an
/// error.
fn junit(report: &ReplayReport) -> String {
    let header = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
    if report.model_totals.is_empty() {
        let turns: Vec<&TurnReport> = report.turns.iter().collect();
        let name = format!("skein replay {}", report.replay.as_str());
        let suite = junit_suite(report, &name, None, &turns, &report.totals, &report.cost);
        return format!("{header}{suite}");
    }
    let totals = &report.totals;
    let mut out = format!(
        "{header}<testsuites name=\"skein replay {}\" tests=\"{}\" failures=\"{}\" errors=\"{}\">\n",
        xml(report.replay.as_str()),
        report.turns.len(),
        totals.changed + totals.diverged,
        totals.failed,
    );
    for model in &report.model_totals {
        let turns: Vec<&TurnReport> = report
            .turns
            .iter()
            .filter(|turn| turn.model.as_deref() == Some(model.model.as_str()))
            .collect();
        out.push_str(&junit_suite(
            report,
            &model.model,
            Some(&model.model),
            &turns,
            &model.totals,
            &model.cost,
        ));
    }
    out.push_str("</testsuites>\n");
    out
}

/// One JUnit test suite named `name`: `turns`, with `totals` and `cost`
/// (and the model they ran on, when the replay compares models).
fn junit_suite(
    report: &ReplayReport,
    name: &str,
    model: Option<&str>,
    turns: &[&TurnReport],
    totals: &skein::store::ReplayTotals,
    cost: &skein::recorded::replay::CostDelta,
) -> String {
    let model_property = model.map_or(String::new(), |model| {
        format!("    <property name=\"model\" value=\"{}\"/>\n", xml(model))
    });
    let mut out = format!(
        "<testsuite name=\"{}\" tests=\"{}\" failures=\"{}\" errors=\"{}\">\n  <properties>\n{model_property}    <property name=\"change\" value=\"{}\"/>\n    <property name=\"turns\" value=\"{}\"/>\n{}  </properties>\n",
        xml(name),
        turns.len(),
        totals.changed + totals.diverged,
        totals.failed,
        xml(&report.change_line()),
        xml(&report.selection_text),
        cost_properties("    ", &cost.original, &cost.replay)
    );
    for turn in turns {
        // The question as the test's name (a turn without one, or whose
        // question is empty, by its place); the conversation's name (else
        // title, else id) as its class.
        let name = match turn
            .question
            .as_deref()
            .map(|q| ui::one_line(q, QUESTION_WIDTH))
        {
            Some(question) if !question.is_empty() => question,
            _ => format!(
                "turn {} ({})",
                turn_number(report, turn),
                turn.turn_node.short()
            ),
        };
        let class = turn
            .conversation_name
            .clone()
            .or_else(|| turn.conversation.as_ref().map(|c| c.to_string()))
            .unwrap_or_else(|| "replay".to_string());
        out.push_str(&format!(
            "  <testcase name=\"{}\" classname=\"{}\">",
            xml(&name),
            xml(&class)
        ));
        let mut inner = String::new();
        if let (Some(original), Some(replay)) = (&turn.original_cost, &turn.cost) {
            inner.push_str(&format!(
                "\n    <properties>\n{}    </properties>",
                cost_properties("      ", original, replay)
            ));
        }
        let body = format!(
            "turn {} ({})\nquestion: {}\noriginal: {}\nreplay: {}",
            turn_number(report, turn),
            turn.turn_node.short(),
            turn.question.as_deref().unwrap_or_default(),
            turn.original.as_deref().unwrap_or_default(),
            turn.answer.as_deref().unwrap_or_default()
        );
        let why = turn.why.as_deref().unwrap_or_default();
        match turn.rank() {
            0 => inner.push_str(&format!("\n    <error message=\"{}\"/>", xml(why))),
            1 | 2 => inner.push_str(&format!(
                "\n    <failure type=\"{}\" message=\"{}\">{}</failure>",
                turn.result,
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
fn cost_properties(indent: &str, original: &CostSummary, replay: &CostSummary) -> String {
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
            (original.complete && replay.complete).to_string(),
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
    fn xml_is_escaped_and_control_characters_dropped() {
        assert_eq!(xml("a<b & \"c\"\u{1}"), "a&lt;b &amp; &quot;c&quot;");
    }
}
