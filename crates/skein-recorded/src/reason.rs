/*!
Attribution: which of a turn's sources the reply looks most like. The
reference four-signal scorer, over embeddings:

- FA: cosine of the source's text to the final reply;
- AVG: mean cosine of the source to the tool loop's intermediate outputs;
- PERSIST: the share of intermediate outputs with cosine above 0.3;
- DEPTH: `1 / (1 + n)`, with `n` the model calls between the source's
  content reaching the model and the final reply. Everything rendered in
  the turn's request (the system text's sources, hook sources, earlier
  turns' tool exchanges, the tools offered) reached it with the request;
  a tool's results in this turn reach it when its first result does. So
  DEPTH separates what a tool brought in mid-turn from what the request
  held (with no tool result in the turn it is the same for every source).

Score `0.4·FA + 0.3·AVG + 0.2·PERSIST + 0.1·DEPTH`, or `0.8·FA + 0.2·DEPTH`
when the turn had no intermediate outputs. The ranking is correlational:
it says what to re-run, never what caused the reply.
*/

use crate::chat::RecordedChat;
use crate::embed::{Embedder, cosine};
use crate::error::{RecordedError, Result};
use crate::evidence::{Turn, message_text};
use crate::layout::tag_tool_parts;
use crate::source::SourceKind;
use serde::Serialize;
use skein_core::{Annotation, NodeId};
use std::fmt::Write as _;
use std::sync::Arc;

/// Suspects a report keeps unless told otherwise.
pub const DEFAULT_MAX_SUSPECTS: usize = 12;
/// The cosine above which an intermediate output counts for PERSIST.
pub const PERSIST_THRESHOLD: f32 = 0.3;

/// How to reason about a turn.
#[derive(Clone, Default)]
pub struct ReasonOptions {
    embedder: Option<Arc<dyn Embedder>>,
    max_suspects: Option<usize>,
    fresh: bool,
}

impl ReasonOptions {
    pub fn new() -> ReasonOptions {
        ReasonOptions::default()
    }

    /// Embed with this embedder (default: the chat's).
    pub fn embedder(mut self, embedder: Arc<dyn Embedder>) -> ReasonOptions {
        self.embedder = Some(embedder);
        self
    }

    /// Keep at most `n` suspects (default 12, at least 1).
    pub fn max_suspects(mut self, n: usize) -> ReasonOptions {
        self.max_suspects = Some(n.max(1));
        self
    }

    /// Recompute even when a report for the turn is memoised.
    pub fn fresh(mut self) -> ReasonOptions {
        self.fresh = true;
        self
    }
}

/// The four signals behind a score.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Signals {
    pub fa: f32,
    /// `None` when the turn had no intermediate outputs.
    pub avg: Option<f32>,
    pub persist: Option<f32>,
    pub depth: f32,
}

/// One source and how much the reply resembles it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Suspect {
    pub id: String,
    pub kind: SourceKind,
    pub score: f32,
    pub signals: Signals,
}

/// A turn's sources ranked by resemblance to its reply.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub turn: usize,
    pub node: NodeId,
    pub embedder: String,
    pub max_suspects: usize,
    /// The removable sources, best first, at most `max_suspects`.
    pub suspects: Vec<Suspect>,
    /// Sources ranked below the cap, best first: not removable until the
    /// turn is reasoned about again with a bigger cap.
    pub beyond_cap: Vec<Suspect>,
    pub intermediate_outputs: usize,
}

impl Report {
    /// What the scores are, and are not.
    pub const NOTE: &'static str = "correlational: scores rank how much the reply resembles each source; \
         only a rerun shows what a source caused";

    /// Always true: attribution by resemblance is correlational.
    pub fn is_correlational(&self) -> bool {
        true
    }

    /// The ids a rerun may ignore, in rank order.
    pub fn removable(&self) -> Vec<&str> {
        self.suspects.iter().map(|s| s.id.as_str()).collect()
    }

    /// A source's rank from 1 among every scored source.
    pub fn rank_of(&self, id: &str) -> Option<usize> {
        self.suspects
            .iter()
            .chain(&self.beyond_cap)
            .position(|s| s.id == id)
            .map(|i| i + 1)
    }

    /// The report as text.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "turn {} · reply {} · embedder {}",
            self.turn,
            self.node.short(),
            self.embedder
        );
        let _ = writeln!(out, "{}", Report::NOTE);
        if self.suspects.is_empty() {
            let _ = writeln!(out, "no sources in this turn's request");
            return out;
        }
        let width = self
            .suspects
            .iter()
            .map(|s| s.id.len())
            .max()
            .unwrap_or(6)
            .max(6);
        let _ = writeln!(
            out,
            "rank  score  {:<width$}  kind         FA     AVG    PERSIST  DEPTH",
            "source"
        );
        let opt = |v: Option<f32>| v.map_or("-".to_string(), |v| format!("{v:.2}"));
        for (i, s) in self.suspects.iter().enumerate() {
            let _ = writeln!(
                out,
                "{:<4}  {:.3}  {:<width$}  {:<11}  {:.2}   {:<5}  {:<7}  {:.2}",
                i + 1,
                s.score,
                s.id,
                s.kind.as_str(),
                s.signals.fa,
                opt(s.signals.avg),
                opt(s.signals.persist),
                s.signals.depth
            );
        }
        let _ = writeln!(out, "removable: {}", self.removable().join(", "));
        if !self.beyond_cap.is_empty() {
            let _ = writeln!(
                out,
                "{} more below the cap of {}: {}",
                self.beyond_cap.len(),
                self.max_suspects,
                self.beyond_cap
                    .iter()
                    .map(|s| s.id.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        out
    }
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.render())
    }
}

impl RecordedChat {
    /// Rank turn `k`'s sources by resemblance to its reply. Memoised per
    /// turn; [`ReasonOptions::fresh`] recomputes.
    pub async fn reason(&mut self, k: usize, options: ReasonOptions) -> Result<Arc<Report>> {
        let turn = self.turn(k)?.clone();
        if !options.fresh
            && let Some(report) = self.reports.get(&k)
        {
            return Ok(report.clone());
        }
        let embedder = options
            .embedder
            .or_else(|| self.config.embedder.clone())
            .ok_or(RecordedError::NoEmbedder("reason"))?;
        let max = options.max_suspects.unwrap_or(DEFAULT_MAX_SUSPECTS);
        let report = Arc::new(score(&turn, embedder.as_ref(), max).await?);
        self.reports.insert(k, report.clone());
        Ok(report)
    }

    /// The memoised report of turn `k`, if any.
    pub fn report(&self, k: usize) -> Option<&Arc<Report>> {
        self.reports.get(&k)
    }
}

/// One source's text and where its content first reached the model: the
/// request's last node, or for a tool called in the turn, its first
/// result.
struct Gathered {
    id: String,
    kind: SourceKind,
    text: String,
    first: usize,
}

fn gather(turn: &Turn) -> Vec<Gathered> {
    let mut tags = turn.annotations.clone();
    tag_tool_parts(&turn.thread, &mut tags);
    let mut out: Vec<Gathered> = Vec::new();
    let kind_of = |id: &str| {
        turn.sources
            .iter()
            .find(|s| s.id == id)
            .map_or(SourceKind::Other, |s| s.kind)
    };
    let request_end = turn.request.len().saturating_sub(1);
    for tool in &turn.tools {
        out.push(Gathered {
            id: tool.name.clone(),
            kind: SourceKind::Tool,
            text: format!("{}: {}", tool.name, tool.description),
            first: request_end,
        });
    }
    let final_index = turn.thread.len() - 1;
    for (position, node) in turn
        .thread
        .nodes()
        .into_iter()
        .enumerate()
        .take(final_index)
    {
        for (index, part) in node.message().parts.iter().enumerate() {
            let Some(id) = tags
                .get(node.id(), index as u32)
                .iter()
                .find_map(|a| match a {
                    Annotation::Source(id) => Some(id.clone()),
                    _ => None,
                })
            else {
                continue;
            };
            let text = message_text(&skein_core::Message::new(
                node.message().role,
                vec![part.clone()],
            ));
            let is_result = node.message().role == skein_core::Role::Tool;
            match out.iter_mut().find(|g| g.id == id) {
                Some(g) => {
                    if !g.text.is_empty() {
                        g.text.push('\n');
                    }
                    g.text.push_str(&text);
                    // A tool's first result in this turn is when what it
                    // brought reached the model.
                    if g.kind == SourceKind::Tool
                        && is_result
                        && position > request_end
                        && g.first == request_end
                    {
                        g.first = position;
                    }
                }
                None => out.push(Gathered {
                    kind: kind_of(&id),
                    id,
                    text,
                    first: position.max(request_end),
                }),
            }
        }
    }
    out
}

async fn score(turn: &Turn, embedder: &dyn Embedder, max: usize) -> Result<Report> {
    let sources = gather(turn);
    let intermediates = turn.intermediate_texts();
    let nodes = turn.thread.nodes();
    let mut texts = vec![turn.text()];
    texts.extend(intermediates.iter().cloned());
    texts.extend(sources.iter().map(|s| s.text.clone()));
    let vectors = embedder.embed(&texts).await?;
    if vectors.len() != texts.len() {
        return Err(crate::embed::EmbedError::Count {
            expected: texts.len(),
            got: vectors.len(),
        }
        .into());
    }
    let reply = &vectors[0];
    let steps = &vectors[1..1 + intermediates.len()];
    let final_index = nodes.len() - 1;
    let mut scored: Vec<Suspect> = sources
        .iter()
        .zip(&vectors[1 + intermediates.len()..])
        .map(|(source, vector)| {
            let fa = cosine(vector, reply);
            let calls_after = nodes[source.first..final_index]
                .iter()
                .filter(|n| n.message().role == skein_core::Role::Assistant)
                .count();
            let depth = 1.0 / (1.0 + calls_after as f32);
            let (avg, persist, score) = if steps.is_empty() {
                (None, None, 0.8 * fa + 0.2 * depth)
            } else {
                let sims: Vec<f32> = steps.iter().map(|s| cosine(vector, s)).collect();
                let avg = sims.iter().sum::<f32>() / sims.len() as f32;
                let persist = sims.iter().filter(|&&c| c > PERSIST_THRESHOLD).count() as f32
                    / sims.len() as f32;
                (
                    Some(avg),
                    Some(persist),
                    0.4 * fa + 0.3 * avg + 0.2 * persist + 0.1 * depth,
                )
            };
            Suspect {
                id: source.id.clone(),
                kind: source.kind,
                score,
                signals: Signals {
                    fa,
                    avg,
                    persist,
                    depth,
                },
            }
        })
        .collect();
    scored.sort_by(|a, b| b.score.total_cmp(&a.score).then_with(|| a.id.cmp(&b.id)));
    let beyond_cap = scored.split_off(scored.len().min(max));
    Ok(Report {
        turn: turn.index,
        node: turn.node(),
        embedder: embedder.id().to_string(),
        max_suspects: max,
        suspects: scored,
        beyond_cap,
        intermediate_outputs: intermediates.len(),
    })
}
