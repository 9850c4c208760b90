/*!
`skein replay`: replay recorded turns with one change and report, worst
first, what changed, held, diverged and failed, as text, JSON or JUnit XML
(exit code 7 when any turn did not hold, so a CI job fails on a
regression). Progress, with an ETA, goes to stderr. `--resume ID` goes on
with a replay whose worker died, or joins one other workers run.
*/

use super::{Context, print_json};
use crate::exit::{ExitWith, NOT_FOUND, REPLAY_REGRESSED};
use crate::flags::{ReplayArgs, ReplayFormat};
use crate::ui::{self, outln};
use anyhow::{Context as _, Result, bail};
use serde_json::{Value, json};
use skein::core::ToolSpec;
use skein::core::provider::GenerationOptions;
use skein::recorded::compare::{Segment, word_diff};
use skein::recorded::embed::{CachedEmbedder, Embedder, LexicalEmbedder, MiniLmEmbedder};
use skein::recorded::replay::{Change, ReplayPlan, Replayer, Selection, plan_of};
use skein::store::{ReplayId, ReplayRecord, ReplayStatus, ReplayTotals, ReplayTurn};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

/// Rows read from the store at a time for the report.
const PAGE: usize = 500;

pub async fn replay(ctx: &Context, args: ReplayArgs) -> Result<ExitCode> {
    let (id, plan) = match &args.resume {
        Some(given) => {
            let id = find_replay(ctx, given)?;
            let plan = plan_of(&ctx.store.replay(&id)?)?;
            (Some(id), plan)
        }
        None => (None, plan_from(&args)?),
    };
    let replayer = replayer(ctx, &args, &plan).await?;
    let id = match id {
        Some(id) => id,
        None => replayer.start(&selection(ctx, &args)?, &plan).await?,
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
    let format = if ctx.json {
        ReplayFormat::Json
    } else {
        args.format
    };
    match format {
        ReplayFormat::Text => print_text(&record, &totals, &turns)?,
        ReplayFormat::Json => {
            print_json(&report_json(&record, &totals, &turns))?;
        }
        ReplayFormat::Junit => outln!("{}", junit(&record, &totals, &turns).trim_end())?,
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

/// A worker for `plan`: its model, the embedder, a judge's model, the
/// live tools.
async fn replayer(ctx: &Context, args: &ReplayArgs, plan: &ReplayPlan) -> Result<Replayer> {
    let model = super::turns::home_model(Some(plan.model.clone()))?;
    let mut replayer = Replayer::new(&ctx.store, model)
        .embedder(embedder(ctx, &args.embedder)?)
        .lease(Duration::from_secs(args.lease));
    if let Some(n) = args.concurrency {
        replayer = replayer.concurrency(n as usize);
    }
    for comparator in plan.comparators()? {
        if let skein::recorded::compare::Comparator::Judge { model, .. } = comparator {
            replayer = replayer.judge(super::turns::home_model(Some(model))?);
        }
    }
    if !plan.live_tools.is_empty() {
        super::tools::start_for(&plan.live_tools).await?;
        for tool in super::tools::named(&plan.live_tools).await? {
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

/// The turns the command line names.
fn selection(ctx: &Context, args: &ReplayArgs) -> Result<Selection> {
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
    if selection.is_empty() {
        bail!("say which turns to replay: NODE, --cid ID or --family ID (or --resume REPLAY)");
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
fn costs(turn: &ReplayTurn) -> Option<(i64, i64, i64, i64)> {
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

fn print_text(record: &ReplayRecord, totals: &ReplayTotals, turns: &[ReplayTurn]) -> Result<()> {
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
        if let Some((before, after, was, now)) = costs(turn) {
            outln!(
                "  tokens {before} → {after} ({:+}) · latency {was} → {now} ms ({:+})",
                after - before,
                now - was
            )?;
        }
    }
    let (mut tokens, mut time) = (0i64, 0i64);
    for (before, after, was, now) in turns.iter().filter_map(costs) {
        tokens += after - before;
        time += now - was;
    }
    outln!(
        "replay {} on {}: {} turns · {} changed · {} held · {} diverged · {} failed · tokens {tokens:+} · latency {time:+} ms",
        record.id.short(),
        record.model,
        record.turns,
        totals.changed,
        totals.held,
        totals.diverged,
        totals.failed
    )?;
    Ok(())
}

fn report_json(record: &ReplayRecord, totals: &ReplayTotals, turns: &[ReplayTurn]) -> Value {
    json!({
        "replay": record.id,
        "model": record.model,
        "selection": record.selection,
        "change": record.change,
        "settings": record.settings,
        "totals": totals,
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
            "runs": turn.runs,
        })).collect::<Vec<_>>(),
    })
}

/// The report as a JUnit test suite: a held turn passes, a changed or
/// diverged one fails, a failed one is an error.
fn junit(record: &ReplayRecord, totals: &ReplayTotals, turns: &[ReplayTurn]) -> String {
    let mut out = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuite name=\"skein replay {}\" tests=\"{}\" failures=\"{}\" errors=\"{}\">\n",
        xml(record.id.as_str()),
        turns.len(),
        totals.changed + totals.diverged,
        totals.failed
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
        let body = format!(
            "original: {}\nreplay: {}",
            text_of(turn, "original"),
            text_of(turn, "answer")
        );
        let why = text_of(turn, "why");
        match rank(turn) {
            0 => out.push_str(&format!("\n    <error message=\"{}\"/>\n  ", xml(why))),
            1 | 2 => out.push_str(&format!(
                "\n    <failure type=\"{}\" message=\"{}\">{}</failure>\n  ",
                word(turn),
                xml(why),
                xml(&body)
            )),
            _ => {}
        }
        out.push_str("</testcase>\n");
    }
    out.push_str("</testsuite>\n");
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
