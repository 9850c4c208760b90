/*!
Usage totals over sets of related runs: the one definition the engine's
ledger (runs in memory) and the store (every recorded run) share.

Two questions make a total, and both are answered here:

- **Which runs.** A set of runs is named by seeds (a run, a conversation's
  runs, a coordinator sequence's members) and grown along relations
  ([`Link`]): [`with_associated`] adds every run made on behalf of one
  already counted (`associated_with`, transitively); [`continuations`] adds
  every run that continues one (branches, continuations of continuations);
  [`sequence`] gathers a coordinator sequence. Where the relations are read
  from is a [`RunLinks`]: the ledger's entries, or the store's index.
- **How they add up.** [`Totals::of`] counts each run once however often it
  is named, so shared work (the starting run of several branches, the prefix
  a fork shares with its origin) is counted once in a combined total. A run
  that did not report a token figure, or whose figures are partial, or that
  is unknown where the total is computed, is named in that figure's
  `missing_from`: the total is then *incomplete*, never silently zero.
  Cache figures come only from backends that cache, so their absence is no
  gap. Failed and cancelled runs are counted (their usage is real) and
  listed in `failed`.
- **By model.** [`Totals::by_model`] splits the tokens by the model that
  spent them, input into uncached, cache-read and cache-written parts
  ([`Usage`]'s `input_tokens` counts all three), which is what a price
  table needs ([`crate::price`]): pricing is linear, so pricing each
  model's sum is pricing each run.
*/

use crate::provider::Usage;
use crate::run::{Relation, RunId, RunRecord, RunStatus};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

/// What a total needs of one run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunFigures {
    /// The model that answered (what a price is looked up by).
    pub model: String,
    /// The provider that ran it ([`crate::Provider::name`]): one that runs
    /// on this machine ([`runs_here`]) costs nothing.
    pub provider: String,
    pub status: RunStatus,
    pub usage: Usage,
    /// False when some attempt of the run did not report its usage.
    pub usage_complete: bool,
}

impl From<&RunRecord> for RunFigures {
    fn from(run: &RunRecord) -> RunFigures {
        RunFigures {
            model: run.model.clone(),
            provider: run.provider.clone(),
            status: run.status,
            usage: run.usage,
            usage_complete: run.usage_complete,
        }
    }
}

/// One usage figure summed over runs.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Figure {
    /// The sum of the figures reported.
    pub value: u64,
    /// Runs that did not report this figure (or only in part). Empty means
    /// complete.
    pub missing_from: Vec<RunId>,
}

impl Figure {
    pub fn is_complete(&self) -> bool {
        self.missing_from.is_empty()
    }
}

/// Totals over a set of runs, each counted once.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Totals {
    /// Every run counted, once each, in id order.
    pub runs: Vec<RunId>,
    /// The runs that failed or were cancelled (counted all the same).
    pub failed: Vec<RunId>,
    pub input_tokens: Figure,
    pub output_tokens: Figure,
    pub cache_read_tokens: Figure,
    pub cache_write_tokens: Figure,
    /// The tokens of the runs that reported figures, by model (a run that
    /// reported none is only in the figures' `missing_from`).
    pub by_model: BTreeMap<String, ModelTokens>,
    /// The runs a provider of this machine ran ([`runs_here`]: the echo
    /// and scripted models, local GGUF files, the embedded models), with
    /// their model: they cost nothing, so a price table prices them at zero
    /// and their missing figures leave a cost whole ([`crate::price`]).
    #[serde(skip)]
    pub local_runs: BTreeMap<RunId, String>,
}

/// The providers that run on this machine, in skein's process: the echo
/// and scripted models and llama.cpp's (local GGUF files and the embedded
/// models). Their calls cost nothing.
pub const LOCAL_PROVIDERS: &[&str] = &["echo", "scripted", "local"];

/// Whether `provider` runs on this machine ([`LOCAL_PROVIDERS`]).
pub fn runs_here(provider: &str) -> bool {
    LOCAL_PROVIDERS.contains(&provider)
}

/// One model's share of a total. `uncached_input + cache_read +
/// cache_write` is the input the model's runs reported, so no token is
/// counted in two of them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ModelTokens {
    /// The runs of this model that reported figures (in id order).
    pub runs: Vec<RunId>,
    /// Input tokens neither read from nor written to a prompt cache.
    pub uncached_input: u64,
    pub cache_read: u64,
    pub cache_write: u64,
    pub output: u64,
}

impl ModelTokens {
    fn add(&mut self, run: RunId, usage: &Usage) {
        let read = usage.cache_read_tokens.unwrap_or(0);
        let write = usage.cache_write_tokens.unwrap_or(0);
        self.runs.push(run);
        self.uncached_input += usage
            .input_tokens
            .map_or(0, |input| input.saturating_sub(read + write));
        self.cache_read += read;
        self.cache_write += write;
        self.output += usage.output_tokens.unwrap_or(0);
    }
}

impl Totals {
    /// Sum `runs`, each counted once; `None` figures mean the run is
    /// unknown where the total is computed (its tokens are then missing).
    pub fn of(runs: impl IntoIterator<Item = (RunId, Option<RunFigures>)>) -> Totals {
        let mut totals = Totals::default();
        let mut seen = BTreeSet::new();
        let mut rows: Vec<(RunId, Option<RunFigures>)> = runs
            .into_iter()
            .filter(|(run, _)| seen.insert(run.clone()))
            .collect();
        rows.sort_by(|a, b| a.0.cmp(&b.0));
        for (run, figures) in rows {
            totals.count(run, figures);
        }
        totals
    }

    fn count(&mut self, run: RunId, figures: Option<RunFigures>) {
        self.runs.push(run.clone());
        let Some(figures) = figures else {
            self.input_tokens.missing_from.push(run.clone());
            self.output_tokens.missing_from.push(run);
            return;
        };
        if figures.status != RunStatus::Succeeded {
            self.failed.push(run.clone());
        }
        if runs_here(&figures.provider) {
            self.local_runs.insert(run.clone(), figures.model.clone());
        }
        let usage = figures.usage;
        if usage.input_tokens.is_some() || usage.output_tokens.is_some() {
            self.by_model
                .entry(figures.model)
                .or_default()
                .add(run.clone(), &usage);
        }
        for (figure, value) in [
            (&mut self.input_tokens, usage.input_tokens),
            (&mut self.output_tokens, usage.output_tokens),
        ] {
            figure.value += value.unwrap_or(0);
            if value.is_none() || !figures.usage_complete {
                figure.missing_from.push(run.clone());
            }
        }
        self.cache_read_tokens.value += usage.cache_read_tokens.unwrap_or(0);
        self.cache_write_tokens.value += usage.cache_write_tokens.unwrap_or(0);
    }

    /// Whether input and output token totals are complete.
    pub fn is_complete(&self) -> bool {
        self.input_tokens.is_complete() && self.output_tokens.is_complete()
    }

    /// The share of input tokens read from a prompt cache, `None` when no
    /// input was counted. Over runs of backends that do not cache, zero.
    pub fn cache_hit_rate(&self) -> Option<f64> {
        hit_rate(self.cache_read_tokens.value, self.input_tokens.value)
    }

    /// The runs whose input or output tokens are missing from the totals,
    /// in id order: what makes them incomplete.
    pub fn incomplete_runs(&self) -> Vec<RunId> {
        let missing: BTreeSet<&RunId> = self
            .input_tokens
            .missing_from
            .iter()
            .chain(&self.output_tokens.missing_from)
            .collect();
        missing.into_iter().cloned().collect()
    }
}

/// `read / input` as a share, `None` when there was no input.
fn hit_rate(read: u64, input: u64) -> Option<f64> {
    (input > 0).then(|| read as f64 / input as f64)
}

impl Usage {
    /// The share of this call's input tokens read from a prompt cache:
    /// `None` when the call reported no input (or none at all).
    pub fn cache_hit_rate(&self) -> Option<f64> {
        hit_rate(self.cache_read_tokens.unwrap_or(0), self.input_tokens?)
    }
}

/// A relation totals follow, by its stored kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Link {
    /// `continuation_of`: the run continued the target run's exchange.
    ContinuationOf,
    /// `associated_with`: the run was made on behalf of the target run.
    AssociatedWith,
    /// `sequence`: the run belongs to the coordinator sequence.
    Sequence,
    /// `sequence_start`: the run started the coordinator sequence.
    SequenceStart,
}

impl Link {
    pub const ALL: [Link; 4] = [
        Link::ContinuationOf,
        Link::AssociatedWith,
        Link::Sequence,
        Link::SequenceStart,
    ];

    /// The relation kind as stored.
    pub fn kind(self) -> &'static str {
        match self {
            Link::ContinuationOf => "continuation_of",
            Link::AssociatedWith => "associated_with",
            Link::Sequence => "sequence",
            Link::SequenceStart => "sequence_start",
        }
    }

    /// The link a relation makes, with its target; `None` for relations
    /// totals do not follow.
    pub fn of(relation: &Relation) -> Option<(Link, &str)> {
        match relation {
            Relation::ContinuationOf(run) => Some((Link::ContinuationOf, run.as_str())),
            Relation::AssociatedWith(run) => Some((Link::AssociatedWith, run.as_str())),
            Relation::Sequence(id) => Some((Link::Sequence, id.as_str())),
            Relation::SequenceStart(id) => Some((Link::SequenceStart, id.as_str())),
            _ => None,
        }
    }
}

/// Where the relations between runs are read from.
pub trait RunLinks {
    type Error;

    /// The runs with a `link` relation to one of `targets`.
    fn sources(&self, link: Link, targets: &[&str]) -> Result<Vec<RunId>, Self::Error>;

    /// The targets of the `link` relations of `runs`.
    fn targets(&self, link: Link, runs: &[RunId]) -> Result<Vec<String>, Self::Error>;
}

/// `seeds` and every run linked to one already included by one of
/// `follow`, transitively.
pub fn closure<L: RunLinks>(
    links: &L,
    seeds: impl IntoIterator<Item = RunId>,
    follow: &[Link],
) -> Result<BTreeSet<RunId>, L::Error> {
    let mut members: BTreeSet<RunId> = seeds.into_iter().collect();
    let mut frontier: Vec<RunId> = members.iter().cloned().collect();
    while !frontier.is_empty() {
        let targets: Vec<&str> = frontier.iter().map(RunId::as_str).collect();
        let mut next = Vec::new();
        for link in follow {
            for run in links.sources(*link, &targets)? {
                if members.insert(run.clone()) {
                    next.push(run);
                }
            }
        }
        frontier = next;
    }
    Ok(members)
}

/// `seeds` and every run made on their behalf (`associated_with` one of
/// them, or with a run so associated).
pub fn with_associated<L: RunLinks>(
    links: &L,
    seeds: impl IntoIterator<Item = RunId>,
) -> Result<BTreeSet<RunId>, L::Error> {
    closure(links, seeds, &[Link::AssociatedWith])
}

/// `root`, every run that continues it (its branches, and theirs), and
/// every run associated with any of them.
pub fn continuations<L: RunLinks>(links: &L, root: &RunId) -> Result<BTreeSet<RunId>, L::Error> {
    closure(
        links,
        [root.clone()],
        &[Link::ContinuationOf, Link::AssociatedWith],
    )
}

/// The runs of coordinator sequence `id`: its start, its continuations and
/// the runs associated with them. The start is the run marked
/// `sequence_start`, or else the run the sequence's continuations continue
/// that is not one of them (a record written before the coordinator marked
/// it), so several sequences from one exchange each count it once.
pub fn sequence<L: RunLinks>(links: &L, id: &str) -> Result<BTreeSet<RunId>, L::Error> {
    let mut members: BTreeSet<RunId> = links.sources(Link::Sequence, &[id])?.into_iter().collect();
    members.extend(links.sources(Link::SequenceStart, &[id])?);
    let continued: Vec<RunId> = members.iter().cloned().collect();
    let starts: Vec<RunId> = links
        .targets(Link::ContinuationOf, &continued)?
        .into_iter()
        .map(RunId)
        .collect();
    members.extend(starts);
    with_associated(links, members)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(id: &str) -> RunId {
        RunId(id.to_string())
    }

    fn figures(input: Option<u64>, output: Option<u64>) -> Option<RunFigures> {
        Some(RunFigures {
            model: "m".to_string(),
            provider: "openai".to_string(),
            status: RunStatus::Succeeded,
            usage: Usage {
                input_tokens: input,
                output_tokens: output,
                ..Usage::default()
            },
            usage_complete: true,
        })
    }

    #[test]
    fn a_run_named_twice_counts_once_and_a_missing_figure_is_named_not_zero() {
        let totals = Totals::of([
            (run("a"), figures(Some(10), Some(2))),
            (run("b"), figures(None, Some(3))),
            (run("a"), figures(Some(10), Some(2))),
            (run("c"), None),
        ]);
        assert_eq!(totals.runs, vec![run("a"), run("b"), run("c")]);
        assert_eq!(totals.input_tokens.value, 10);
        assert_eq!(totals.input_tokens.missing_from, vec![run("b"), run("c")]);
        assert_eq!(totals.output_tokens.value, 5);
        assert_eq!(totals.output_tokens.missing_from, vec![run("c")]);
        assert!(!totals.is_complete());
        assert_eq!(totals.incomplete_runs(), vec![run("b"), run("c")]);
        // A run whose figures are partial is incomplete though it has them.
        let partial = Totals::of([(
            run("p"),
            Some(RunFigures {
                usage_complete: false,
                ..figures(Some(1), Some(1)).unwrap()
            }),
        )]);
        assert_eq!(partial.input_tokens.value, 1);
        assert_eq!(partial.incomplete_runs(), vec![run("p")]);
        assert!(Totals::of([(run("a"), figures(Some(1), Some(1)))]).is_complete());
    }

    fn cached(model: &str, input: u64, read: u64, write: Option<u64>) -> Option<RunFigures> {
        Some(RunFigures {
            model: model.to_string(),
            provider: "anthropic".to_string(),
            status: RunStatus::Succeeded,
            usage: Usage {
                input_tokens: Some(input),
                output_tokens: Some(10),
                cache_read_tokens: Some(read),
                cache_write_tokens: write,
            },
            usage_complete: true,
        })
    }

    #[test]
    fn by_model_splits_input_so_cached_tokens_are_not_counted_twice() {
        // Normalised figures: input counts cached tokens for both providers
        // (Anthropic's adapter adds its cache figures back in).
        let totals = Totals::of([
            (run("a1"), cached("claude", 1000, 800, Some(100))),
            (run("a2"), cached("claude", 50, 0, Some(40))),
            (run("o1"), cached("gpt", 500, 200, None)),
            (run("o1"), cached("gpt", 500, 200, None)),
            (run("gone"), None),
        ]);
        let claude = &totals.by_model["claude"];
        assert_eq!(claude.runs, vec![run("a1"), run("a2")]);
        assert_eq!(
            (claude.uncached_input, claude.cache_read, claude.cache_write),
            (110, 800, 140)
        );
        let gpt = &totals.by_model["gpt"];
        assert_eq!(
            (gpt.uncached_input, gpt.cache_read, gpt.cache_write),
            (300, 200, 0)
        );
        assert_eq!(gpt.output, 10, "a run named twice counts once");
        let input: u64 = totals
            .by_model
            .values()
            .map(|m| m.uncached_input + m.cache_read + m.cache_write)
            .sum();
        assert_eq!(input, totals.input_tokens.value);
        assert_eq!(totals.input_tokens.value, 1550);
        assert_eq!(totals.cache_hit_rate(), Some(1000.0 / 1550.0));
        assert_eq!(Totals::default().cache_hit_rate(), None);
        let usage = cached("x", 400, 100, None).unwrap().usage;
        assert_eq!(usage.cache_hit_rate(), Some(0.25));
        assert_eq!(Usage::default().cache_hit_rate(), None);
    }

    /// Relations as a plain list: (source, link, target).
    struct Edges(Vec<(&'static str, Link, &'static str)>);

    impl RunLinks for Edges {
        type Error = std::convert::Infallible;

        fn sources(&self, link: Link, targets: &[&str]) -> Result<Vec<RunId>, Self::Error> {
            Ok(self
                .0
                .iter()
                .filter(|(_, l, t)| *l == link && targets.contains(t))
                .map(|(s, _, _)| run(s))
                .collect())
        }

        fn targets(&self, link: Link, runs: &[RunId]) -> Result<Vec<String>, Self::Error> {
            Ok(self
                .0
                .iter()
                .filter(|(s, l, _)| *l == link && runs.contains(&run(s)))
                .map(|(_, _, t)| t.to_string())
                .collect())
        }
    }

    #[test]
    fn a_sequence_finds_its_unmarked_start_and_work_done_for_its_runs() {
        use Link::*;
        let edges = Edges(vec![
            ("t1", Sequence, "s"),
            ("t1", ContinuationOf, "start"),
            ("t2", Sequence, "s"),
            ("t2", ContinuationOf, "t1"),
            ("check", AssociatedWith, "t2"),
            ("recheck", AssociatedWith, "check"),
            // Another sequence from the same start.
            ("u1", Sequence, "other"),
            ("u1", ContinuationOf, "start"),
            ("before", AssociatedWith, "start"),
        ]);
        let members: Vec<String> = sequence(&edges, "s")
            .unwrap()
            .into_iter()
            .map(|r| r.0)
            .collect();
        assert_eq!(members, ["before", "check", "recheck", "start", "t1", "t2"]);
        // From the start: both sequences' continuations and what was done
        // on their behalf.
        let family: Vec<String> = continuations(&edges, &run("start"))
            .unwrap()
            .into_iter()
            .map(|r| r.0)
            .collect();
        assert_eq!(
            family,
            ["before", "check", "recheck", "start", "t1", "t2", "u1"]
        );
    }
}
