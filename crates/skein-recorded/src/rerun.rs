/*!
Counterfactual reruns: replay a recorded turn's exact request without
chosen sources, several times, and say whether the answer changed.

Probes replay the recorded request minus the ablation (removed by tag, so
everything else is byte-identical; hook sources are rendered again with the
ablation); the baseline replays it unchanged, the same number of times. A
sample *changed* when the comparison says so: the [`Comparison`] replays
use, with the comparators [`RerunOptions::compare`] names, else the
default, two comparators of [`crate::compare`]: `specifics` (a name, number, date or
quotation present in one answer and not the other: "Hotel Lutetia" →
"Hotel de la Lumière" changed, however close the wording) and, when that
holds, cosine similarity of embeddings below 0.8; each sample records which
one decided ([`Sample::decided_by`]). The probe *flipped* when a strict majority of its
samples changed; the baseline is *stable* only when none of its samples
changed. The verdict, only when the baseline was checked, in this order:
unstable baseline, `inconclusive`; probe flipped, `confirmed`; some but not
a majority flipped, `inconclusive`; none flipped, `not-confirmed`.
*/

use crate::chat::{LoopFailure, RecordedChat, Stamp, Unrecorded};
use crate::compare::{Comparator, Comparison};
use crate::embed::{Embedder, cosine};
use crate::error::{RecordedError, Result};
use crate::evidence::Turn;
use crate::layout::Layout;
use crate::reason::ReasonOptions;
use crate::source::{Ablation, Purpose};
use futures_util::StreamExt;
use serde::Serialize;
use skein_core::Relation;
use skein_core::{Annotations, NodeId, Thread, ToolSpec};
use skein_store::{RerunCommit, RerunId, RerunRecord, RunId, RunRecord};
use std::collections::BTreeSet;
use std::sync::Arc;

/// Samples per probe unless told otherwise.
pub const DEFAULT_SAMPLES: u32 = 3;
/// Below this cosine similarity the default comparator says "changed".
pub const DEFAULT_THRESHOLD: f32 = 0.8;

/// Decides whether `candidate` changed the answer `original`.
pub type CompareFn = Arc<dyn Fn(&str, &str) -> bool + Send + Sync>;

/// What to re-run and how.
#[derive(Clone)]
pub struct RerunOptions {
    ignore: Vec<String>,
    samples: u32,
    threshold: f32,
    comparator: Option<CompareFn>,
    compare: Vec<Comparator>,
    check_baseline: bool,
    embedder: Option<Arc<dyn Embedder>>,
}

impl RerunOptions {
    /// Re-run without the sources `ids` (resolved against the turn's
    /// report).
    pub fn ignore(ids: impl IntoIterator<Item = impl Into<String>>) -> RerunOptions {
        RerunOptions {
            ignore: ids.into_iter().map(Into::into).collect(),
            samples: DEFAULT_SAMPLES,
            threshold: DEFAULT_THRESHOLD,
            comparator: None,
            compare: Vec::new(),
            check_baseline: false,
            embedder: None,
        }
    }

    /// Samples per probe (and per baseline); at least 2.
    pub fn samples(mut self, n: u32) -> RerunOptions {
        self.samples = n;
        self
    }

    /// The default comparator's cosine threshold.
    pub fn threshold(mut self, threshold: f32) -> RerunOptions {
        self.threshold = threshold;
        self
    }

    /// Decide "changed" with this function of (original, candidate).
    pub fn comparator(
        mut self,
        compare: impl Fn(&str, &str) -> bool + Send + Sync + 'static,
    ) -> RerunOptions {
        self.comparator = Some(Arc::new(compare));
        self
    }

    /// Decide "changed" with these comparators, asked in order as a
    /// replay asks them ([`Comparison`]; parsed by [`Comparator::parse`]),
    /// in place of the default (`specifics`, then `embedding` at
    /// [`threshold`](RerunOptions::threshold)).
    pub fn compare(mut self, comparators: Vec<Comparator>) -> RerunOptions {
        self.compare = comparators;
        self
    }

    /// Also replay the unchanged request, which unlocks a verdict.
    pub fn check_baseline(mut self) -> RerunOptions {
        self.check_baseline = true;
        self
    }

    /// Embed with this embedder (default: the chat's).
    pub fn embedder(mut self, embedder: Arc<dyn Embedder>) -> RerunOptions {
        self.embedder = Some(embedder);
        self
    }
}

/// The verdict of a baseline-checked rerun.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    /// The probe flipped and the baseline was stable.
    Confirmed,
    /// No probe sample changed and the baseline was stable.
    NotConfirmed,
    /// The baseline was unstable, or some but not most samples changed.
    Inconclusive,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Confirmed => "confirmed",
            Verdict::NotConfirmed => "not-confirmed",
            Verdict::Inconclusive => "inconclusive",
        }
    }

    /// The verdict rules, in their order.
    pub fn decide(baseline_stable: bool, flips: u32, samples: u32) -> Verdict {
        if !baseline_stable {
            Verdict::Inconclusive
        } else if flipped(flips, samples) {
            Verdict::Confirmed
        } else if flips > 0 {
            Verdict::Inconclusive
        } else {
            Verdict::NotConfirmed
        }
    }
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A strict majority changed.
fn flipped(flips: u32, samples: u32) -> bool {
    flips * 2 > samples
}

/// One run of a probe or baseline.
#[derive(Clone, Debug)]
pub struct Sample {
    /// The request the provider received (first model call).
    pub request: Thread,
    pub annotations: Annotations,
    pub tools: Vec<ToolSpec>,
    /// The request, the tool loop and the answer.
    pub thread: Thread,
    pub answer: String,
    pub runs: Vec<RunId>,
    pub changed: bool,
    /// The comparator that decided `changed` (`specifics`, `embedding`,
    /// both joined by `+` when both held, `custom` for
    /// [`RerunOptions::comparator`]), and why.
    pub decided_by: Option<String>,
    pub why: Option<String>,
    /// Cosine similarity to the original reply, when an embedder was at hand.
    pub similarity: Option<f32>,
    pub(crate) records: Vec<RunRecord>,
}

/// Minimum, mean and maximum similarity to the original reply.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Similarity {
    pub min: f32,
    pub mean: f32,
    pub max: f32,
}

impl Similarity {
    fn of(samples: &[Sample]) -> Option<Similarity> {
        let sims: Option<Vec<f32>> = samples.iter().map(|s| s.similarity).collect();
        let sims = sims.filter(|s| !s.is_empty())?;
        Some(Similarity {
            min: sims.iter().copied().fold(f32::INFINITY, f32::min),
            mean: sims.iter().sum::<f32>() / sims.len() as f32,
            max: sims.iter().copied().fold(f32::NEG_INFINITY, f32::max),
        })
    }
}

/// What removing the sources did to the answer.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct WhatChanged {
    /// A strict majority of the samples changed.
    pub answer_flipped: bool,
    pub flips: u32,
    pub samples: u32,
    pub similarity: Option<Similarity>,
    pub summary: String,
}

/// The unchanged request, replayed.
#[derive(Clone, Debug)]
pub struct Baseline {
    pub samples: Vec<Sample>,
    /// Samples whose answer changed with nothing removed.
    pub changed: u32,
    /// No sample changed.
    pub stable: bool,
    pub similarity: Option<Similarity>,
}

/// A rerun of one turn.
#[derive(Clone, Debug)]
pub struct RerunResult {
    /// The rerun's id (stored with the record when a store is attached).
    pub id: RerunId,
    /// The chat that produced it ([`RecordedChat::id`]).
    pub chat: String,
    pub turn: usize,
    /// The turn's reply node.
    pub turn_node: NodeId,
    /// The sources removed, sorted.
    pub removed: Vec<String>,
    /// The original reply's text.
    pub original: String,
    pub samples: Vec<Sample>,
    pub what_changed: WhatChanged,
    pub baseline: Option<Baseline>,
    /// Only when the baseline was checked.
    pub verdict: Option<Verdict>,
}

impl RerunResult {
    /// The first sample's answer: where a fork from this rerun continues.
    pub fn answer(&self) -> &str {
        &self.samples[0].answer
    }

    /// Every sample's answer.
    pub fn answers(&self) -> Vec<&str> {
        self.samples.iter().map(|s| s.answer.as_str()).collect()
    }

    /// The result as text: what was removed, what changed, the verdict.
    pub fn render(&self) -> String {
        let mut out = format!(
            "rerun {} of turn {} without {}\n{}\n",
            self.id.short(),
            self.turn,
            self.removed.join(", "),
            self.what_changed.summary
        );
        for (i, sample) in self.samples.iter().enumerate() {
            out.push_str(&format!(
                "  sample {i}{}: {}\n",
                match (sample.changed, &sample.why) {
                    (true, Some(why)) => format!(" (changed: {why})"),
                    (true, None) => " (changed)".to_string(),
                    (false, _) => String::new(),
                },
                one_line(&sample.answer)
            ));
        }
        match (&self.baseline, self.verdict) {
            (Some(baseline), Some(verdict)) => out.push_str(&format!(
                "baseline {} ({} of {} changed)\nverdict: {verdict}\n",
                if baseline.stable {
                    "stable"
                } else {
                    "unstable"
                },
                baseline.changed,
                baseline.samples.len()
            )),
            _ => out.push_str("no verdict: the baseline was not checked\n"),
        }
        out
    }
}

fn one_line(text: &str) -> String {
    let line: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if line.chars().count() > 100 {
        format!("{}…", line.chars().take(99).collect::<String>())
    } else {
        line
    }
}

impl RecordedChat {
    /// Re-run turn `k` without the sources `options` ignores.
    pub async fn rerun_turn(&mut self, k: usize, options: RerunOptions) -> Result<RerunResult> {
        let turn = self.turn(k)?.clone();
        if options.samples < 2 {
            return Err(RecordedError::TooFewSamples(options.samples));
        }
        let embedder = options
            .embedder
            .clone()
            .or_else(|| self.config.embedder.clone());
        let ablation = self.resolve_ignore(k, &options, embedder.clone()).await?;
        // A comparison that cannot run is refused before any model call.
        comparison_of(&options, embedder.clone())?;
        let id = RerunId::random();
        let original = turn.text();
        // Probes, then baselines, run as many at once as the backend admits
        // (each sample is a request of its own, so the outcome is the same
        // as running them one by one); results keep their order.
        let unchanged = Ablation::new();
        let mut jobs = Vec::new();
        for i in 0..options.samples {
            jobs.push(self.sample(&turn, &ablation, Purpose::Probe, i, &id));
        }
        if options.check_baseline {
            for i in 0..options.samples {
                jobs.push(self.sample(&turn, &unchanged, Purpose::Baseline, i, &id));
            }
        }
        let outcomes: Vec<std::result::Result<Sample, LoopFailure>> =
            futures_util::stream::iter(jobs)
                .buffered(self.sample_capacity())
                .collect()
                .await;
        let mut all = self.settle(outcomes).await?;
        let baseline_samples = all.split_off(options.samples as usize);
        let mut samples = all;
        let mut baseline_samples = baseline_samples;
        compare(
            &original,
            samples.iter_mut().chain(baseline_samples.iter_mut()),
            &options,
            embedder.clone(),
        )
        .await?;
        let flips = samples.iter().filter(|s| s.changed).count() as u32;
        let n = options.samples;
        let similarity = Similarity::of(&samples);
        let removed: Vec<String> = ablation.iter().cloned().collect();
        let summary = format!(
            "without {}: {flips} of {n} samples changed the answer{}{}",
            removed.join(", "),
            if flipped(flips, n) {
                " (flipped)"
            } else {
                " (not flipped)"
            },
            similarity.map_or(String::new(), |s| format!(
                "; similarity to the original min {:.2}, mean {:.2}, max {:.2}",
                s.min, s.mean, s.max
            ))
        );
        let baseline = options.check_baseline.then(|| {
            let changed = baseline_samples.iter().filter(|s| s.changed).count() as u32;
            Baseline {
                similarity: Similarity::of(&baseline_samples),
                samples: baseline_samples,
                changed,
                stable: changed == 0,
            }
        });
        let verdict = baseline
            .as_ref()
            .map(|b| Verdict::decide(b.stable, flips, n));
        let result = RerunResult {
            id,
            chat: self.id().to_string(),
            turn: k,
            turn_node: turn.node(),
            removed,
            original,
            what_changed: WhatChanged {
                answer_flipped: flipped(flips, n),
                flips,
                samples: n,
                similarity,
                summary,
            },
            samples,
            baseline,
            verdict,
        };
        self.persist_rerun(&result).await?;
        self.reruns.insert(
            result.id.clone(),
            Stamp {
                turn: k,
                answer_head: result.samples[0].thread.head_id().expect("an answer"),
                removed: result.removed.clone(),
            },
        );
        Ok(result)
    }

    /// The ablation `options.ignore` names, checked against the turn's
    /// report (the memoised one, or a new one with the default cap).
    async fn resolve_ignore(
        &mut self,
        k: usize,
        options: &RerunOptions,
        embedder: Option<Arc<dyn Embedder>>,
    ) -> Result<Ablation> {
        let report = match self.report(k) {
            Some(report) => report.clone(),
            None => {
                let embedder = embedder.ok_or(RecordedError::NoEmbedder(
                    "resolving `ignore` against the turn's report",
                ))?;
                self.reason(k, ReasonOptions::new().embedder(embedder))
                    .await?
            }
        };
        let removable: Vec<String> = report.removable().iter().map(|s| s.to_string()).collect();
        if options.ignore.is_empty() {
            return Err(RecordedError::NothingToIgnore { turn: k, removable });
        }
        let mut ablation = BTreeSet::new();
        for id in &options.ignore {
            if removable.contains(id) {
                ablation.insert(id.clone());
            } else if let Some(rank) = report.rank_of(id) {
                return Err(RecordedError::BeyondCap {
                    turn: k,
                    id: id.clone(),
                    rank,
                    cap: report.max_suspects,
                    removable,
                });
            } else {
                return Err(RecordedError::UnknownSource {
                    turn: k,
                    id: id.clone(),
                    removable,
                });
            }
        }
        Ok(ablation)
    }

    /// The recorded request of `turn` minus `ablation`: tagged parts
    /// removed, hook sources rendered again with the ablation.
    pub(crate) async fn replay_layout(
        &self,
        turn: &Turn,
        ablation: &Ablation,
        purpose: Purpose,
    ) -> Result<Layout> {
        let mut layout = Layout::of(&turn.request, &turn.annotations);
        let mut strip: Ablation = ablation.clone();
        strip.extend(turn.sources.iter().filter(|s| s.hook).map(|s| s.id.clone()));
        layout.remove(&strip);
        if self.config.hook.is_some() {
            let mut all = turn.removed.clone();
            all.extend(ablation.iter().cloned());
            let fresh = self
                .hook_sources(turn.index, &turn.user_text, &all, purpose)
                .await?;
            layout.append_to_system(fresh.into_iter().map(|s| (s.id, s.text)).collect());
        }
        Ok(layout)
    }

    /// How many samples may run at once: the capacity of the backend the
    /// chat's profile uses (one when it cannot be told).
    fn sample_capacity(&self) -> usize {
        let engine = &self.config.engine;
        engine
            .inspect_profile(&self.config.profile)
            .and_then(|profile| engine.inspect_backend(&profile.backend))
            .map_or(1, |backend| backend.backend.capacity.max(1))
    }

    /// Every sample, or when one failed, its error: a rerun records
    /// nothing then, but keeps every model call its samples made (the
    /// completed samples' and the failed ones') for usage.
    async fn settle(
        &self,
        outcomes: Vec<std::result::Result<Sample, LoopFailure>>,
    ) -> Result<Vec<Sample>> {
        if outcomes.iter().all(|outcome| outcome.is_ok()) {
            return Ok(outcomes.into_iter().flatten().collect());
        }
        let mut first_error = None;
        for outcome in outcomes {
            let kept = match outcome {
                Ok(sample) => Some(Unrecorded {
                    thread: sample.thread,
                    runs: sample.records,
                    why: "rerun_failed",
                }),
                Err(failure) => {
                    first_error.get_or_insert(failure.error);
                    failure.kept.map(|kept| Unrecorded {
                        why: "rerun_failed",
                        ..kept
                    })
                }
            };
            self.keep_unrecorded(kept).await;
        }
        Err(first_error.expect("a sample failed"))
    }

    async fn sample(
        &self,
        turn: &Turn,
        ablation: &Ablation,
        purpose: Purpose,
        index: u32,
        rerun: &RerunId,
    ) -> std::result::Result<Sample, LoopFailure> {
        let layout = self.replay_layout(turn, ablation, purpose).await?;
        let offered: BTreeSet<&str> = turn.tools.iter().map(|t| t.name.as_str()).collect();
        let mut options = self.config.options.clone();
        options.seed = Some(u64::from(index));
        let output = self
            .config
            .run_unrecorded(
                &layout,
                |name| offered.contains(name) && !ablation.contains(name),
                options,
                turn.index,
                |request| request.relation(Relation::Rerun(rerun.clone())),
            )
            .await?;
        let first = &output.responses[0];
        Ok(Sample {
            request: first.prepared.thread.clone(),
            annotations: first.prepared.annotations.clone(),
            tools: first.tools.clone(),
            answer: output.last().text(),
            thread: output.thread.clone(),
            runs: output.responses.iter().map(|r| r.run.clone()).collect(),
            changed: false,
            decided_by: None,
            why: None,
            similarity: None,
            records: output.responses.iter().map(|r| r.record(None)).collect(),
        })
    }

    async fn persist_rerun(&self, result: &RerunResult) -> Result<()> {
        let (Some(store), Some(conversation)) = (&self.config.store, self.conversation()) else {
            return Ok(());
        };
        let baseline = result.baseline.as_ref().map_or(&[][..], |b| &b.samples[..]);
        let all = result.samples.iter().chain(baseline);
        let threads: Vec<Thread> = all.clone().map(|s| s.thread.clone()).collect();
        let runs: Vec<RunRecord> = all.flat_map(|s| s.records.clone()).collect();
        let record = RerunRecord {
            id: result.id.clone(),
            conversation: conversation.clone(),
            turn: result.turn as u32,
            turn_node: result.turn_node,
            request_head: result.samples[0].request.head_id(),
            answer_head: result.samples[0].thread.head_id(),
            ablation: result.removed.clone(),
            samples: result.what_changed.samples,
            sample_runs: result.samples.iter().flat_map(|s| s.runs.clone()).collect(),
            baseline_runs: baseline.iter().flat_map(|s| s.runs.clone()).collect(),
            verdict: result.verdict.map(|v| v.as_str().to_string()),
            summary: result.what_changed.summary.clone(),
            // No texts: the original and the answers are the nodes the
            // row and its runs name (DESIGN invariant 13).
            detail: serde_json::json!({
                "changed": result.samples.iter().map(|s| s.changed).collect::<Vec<_>>(),
                "decided_by": result.samples.iter().map(|s| s.decided_by.clone()).collect::<Vec<_>>(),
                "why": result.samples.iter().map(|s| s.why.clone()).collect::<Vec<_>>(),
                "baseline_changed": result.baseline.as_ref().map(|b| b.changed),
            }),
            created_ms: skein_core::now_ms(),
        };
        store
            .nonblocking()
            .commit_rerun(&RerunCommit {
                record: &record,
                threads: &threads,
                runs: &runs,
            })
            .await?;
        skein_conversation::telemetry::rerun(
            store,
            &record.id,
            record.turn_node,
            &runs,
            threads.first(),
        )
        .await;
        Ok(())
    }
}

/// The comparison `options` asks for, refused when it cannot run (no
/// embedder for the default or `embedding`, no judge for `judge`); a custom
/// comparator needs none.
fn comparison_of(
    options: &RerunOptions,
    embedder: Option<Arc<dyn Embedder>>,
) -> Result<Comparison> {
    let custom = options.comparator.is_some();
    if !custom && options.compare.is_empty() && embedder.is_none() {
        return Err(RecordedError::NoEmbedder(
            "the default rerun comparator (changed specifics, then cosine similarity)",
        ));
    }
    let comparison = if options.compare.is_empty() {
        Comparison::default_with(embedder, options.threshold)
    } else {
        Comparison::new(options.compare.clone()).embedder(embedder)
    };
    if !custom {
        comparison.check()?;
    }
    Ok(comparison)
}

/// Mark each sample changed or not, and fill in similarities when an
/// embedder is at hand: a custom comparator decides alone; otherwise the
/// [`Comparison`] a replay would ask ([`RerunOptions::compare`], by
/// default `specifics`, then the cosine threshold), every sample embedded
/// in one call.
async fn compare<'a>(
    original: &str,
    samples: impl Iterator<Item = &'a mut Sample>,
    options: &RerunOptions,
    embedder: Option<Arc<dyn Embedder>>,
) -> Result<()> {
    let mut samples: Vec<&mut Sample> = samples.collect();
    let custom = options.comparator.as_ref();
    let comparison = comparison_of(options, embedder.clone())?;
    if let Some(embedder) = &embedder {
        let mut texts = vec![original.to_string()];
        texts.extend(samples.iter().map(|s| s.answer.clone()));
        let vectors = embedder.embed(&texts).await?;
        if vectors.len() != texts.len() {
            return Err(crate::embed::EmbedError::Count {
                expected: texts.len(),
                got: vectors.len(),
            }
            .into());
        }
        for (sample, vector) in samples.iter_mut().zip(&vectors[1..]) {
            sample.similarity = Some(cosine(&vectors[0], vector));
        }
    }
    for sample in samples {
        if let Some(compare) = custom {
            sample.changed = compare(original, &sample.answer);
            sample.decided_by = Some("custom".into());
            sample.why = None;
            continue;
        }
        let decision = comparison
            .decide_knowing(original, &sample.answer, sample.similarity)
            .await?;
        sample.changed = decision.changed;
        sample.decided_by = Some(decision.comparator);
        sample.why = Some(decision.why);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdict_rules_in_order() {
        assert_eq!(Verdict::decide(false, 3, 3), Verdict::Inconclusive);
        assert_eq!(Verdict::decide(true, 2, 3), Verdict::Confirmed);
        assert_eq!(Verdict::decide(true, 1, 3), Verdict::Inconclusive);
        assert_eq!(Verdict::decide(true, 0, 3), Verdict::NotConfirmed);
        // A tie is not a strict majority.
        assert_eq!(Verdict::decide(true, 1, 2), Verdict::Inconclusive);
        assert_eq!(Verdict::decide(true, 2, 2), Verdict::Confirmed);
        assert_eq!(Verdict::Confirmed.as_str(), "confirmed");
        assert_eq!(
            serde_json::to_string(&Verdict::NotConfirmed).unwrap(),
            "\"not-confirmed\""
        );
    }
}
