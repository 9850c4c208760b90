/*!
The usage ledger: the runs an engine made lately, with their usage, status
and relationships to other runs, and totals over sets of related runs.

What each total includes is defined once, in [`skein_core::usage`], and
shared with the store, which answers the same questions about every run
it recorded, across restarts:

- a run's own usage includes all its attempts: transport retries that
  produced usage and structural repairs;
- [`Ledger::total`] sums a set of runs, each counted once however often it
  is named, so the shared initial run of several branches counts once;
- [`Ledger::family`] is a run plus everything that continues it (branches,
  continuations of continuations) and every run made on behalf of any of
  them ([`skein_core::usage::continuations`]);
- [`Ledger::sequence`] is a coordinator sequence: its starting run, every
  coordinated continuation, and the runs associated with them
  ([`skein_core::usage::sequence`]).

Failed runs are listed as failed, never silently dropped; a figure some run
did not report is marked incomplete and names the runs it is missing from,
never reported as zero.

**The ledger is bounded.** It keeps the [`capacity`](Ledger::capacity)
most recently finished runs (by default [`DEFAULT_CAPACITY`]; set with
[`EngineBuilder::ledger_capacity`](crate::EngineBuilder::ledger_capacity))
and forgets the oldest beyond that, so an engine that lives as long as a
server (the recording proxy) holds a fixed amount of memory. A total that
names a run the ledger no longer holds lists that run among the ones its
figures are missing from, exactly like a run it never knew. The ledger
serves what happens in this process (a coordinator's report, the figures
of a failed run about to be recorded); the store keeps every recorded run's
figures for good (`Store::usage`).
*/

use crate::observe::RunId;
use serde::Serialize;
use skein_core::usage::{self, Link, RunFigures, RunLinks};
use skein_core::{Relation, RunStatus, Usage};
use std::collections::{BTreeMap, HashMap};
use std::convert::Infallible;
use std::sync::Mutex;

pub use skein_core::usage::{Figure, Totals};

/// How many runs a ledger keeps unless the engine is built with another
/// capacity.
pub const DEFAULT_CAPACITY: usize = 10_000;

/// One run as the ledger knows it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LedgerEntry {
    pub run: RunId,
    pub status: RunStatus,
    pub backend: String,
    /// The provider that ran it ([`skein_core::Provider::name`]).
    pub provider: String,
    pub model: String,
    pub usage: Usage,
    /// False when some attempt did not report input or output tokens.
    pub usage_complete: bool,
    pub attempts: u32,
    pub relations: Vec<Relation>,
}

impl LedgerEntry {
    fn figures(&self) -> RunFigures {
        RunFigures {
            model: self.model.clone(),
            provider: self.provider.clone(),
            status: self.status,
            usage: self.usage,
            usage_complete: self.usage_complete,
        }
    }
}

/// The runs an engine made lately (see the [module docs](self)).
#[derive(Debug)]
pub struct Ledger {
    capacity: usize,
    entries: Mutex<Entries>,
}

/// The entries, and the order they were recorded in (oldest first), so the
/// oldest is found without a scan.
#[derive(Debug, Default)]
struct Entries {
    by_run: HashMap<RunId, (u64, LedgerEntry)>,
    order: BTreeMap<u64, RunId>,
    next: u64,
}

impl Default for Ledger {
    fn default() -> Ledger {
        Ledger::with_capacity(DEFAULT_CAPACITY)
    }
}

impl Ledger {
    /// A ledger keeping at most `capacity` runs (at least one).
    pub fn with_capacity(capacity: usize) -> Ledger {
        Ledger {
            capacity: capacity.max(1),
            entries: Mutex::default(),
        }
    }

    /// How many runs the ledger keeps at most.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    pub(crate) fn record(&self, entry: LedgerEntry) {
        let mut entries = self.lock();
        let order = entries.next;
        entries.next += 1;
        if let Some((old, _)) = entries.by_run.remove(&entry.run) {
            entries.order.remove(&old);
        }
        entries.order.insert(order, entry.run.clone());
        entries.by_run.insert(entry.run.clone(), (order, entry));
        while entries.by_run.len() > self.capacity {
            let Some((_, oldest)) = entries.order.pop_first() else {
                break;
            };
            entries.by_run.remove(&oldest);
        }
    }

    /// Add a relation to a run the ledger holds (for example an association
    /// made after the fact). False when it holds no such run.
    pub fn relate(&self, run: &RunId, relation: Relation) -> bool {
        match self.lock().by_run.get_mut(run) {
            Some((_, entry)) => {
                if !entry.relations.contains(&relation) {
                    entry.relations.push(relation);
                }
                true
            }
            None => false,
        }
    }

    pub fn entry(&self, run: &RunId) -> Option<LedgerEntry> {
        self.lock().by_run.get(run).map(|(_, entry)| entry.clone())
    }

    /// Every run the ledger holds, in id order.
    pub fn entries(&self) -> Vec<LedgerEntry> {
        let entries = self.lock();
        let mut all: Vec<LedgerEntry> = entries
            .by_run
            .values()
            .map(|(_, entry)| entry.clone())
            .collect();
        all.sort_by(|a, b| a.run.cmp(&b.run));
        all
    }

    /// Totals over `runs`, each counted once.
    pub fn total<'a>(&self, runs: impl IntoIterator<Item = &'a RunId>) -> Totals {
        let entries = self.lock();
        Totals::of(runs.into_iter().map(|run| {
            let figures = entries.by_run.get(run).map(|(_, entry)| entry.figures());
            (run.clone(), figures)
        }))
    }

    /// A run, every run that continues it (transitively), and every run
    /// associated with any of those.
    pub fn family(&self, root: &RunId) -> Totals {
        let members = usage::continuations(self, root).unwrap_or_else(|never| match never {});
        self.total(members.iter())
    }

    /// The runs of a coordinator sequence: its start, its continuations and
    /// their associated runs. The start counts once however many branches
    /// share it.
    pub fn sequence(&self, sequence: &str) -> Totals {
        let members = usage::sequence(self, sequence).unwrap_or_else(|never| match never {});
        self.total(members.iter())
    }

    /// The runs that continue `run`'s exchange directly: its branches, in
    /// id order.
    pub fn branches_of(&self, run: &RunId) -> Vec<RunId> {
        let mut branches = self
            .sources(Link::ContinuationOf, &[run.as_str()])
            .unwrap_or_else(|never| match never {});
        branches.sort();
        branches
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Entries> {
        self.entries
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// The ledger's relations, read by scanning the runs it holds (a bounded
/// number).
impl RunLinks for Ledger {
    type Error = Infallible;

    fn sources(&self, link: Link, targets: &[&str]) -> Result<Vec<RunId>, Infallible> {
        Ok(self
            .lock()
            .by_run
            .values()
            .filter(|(_, entry)| {
                entry.relations.iter().any(|relation| {
                    Link::of(relation)
                        .is_some_and(|(l, target)| l == link && targets.contains(&target))
                })
            })
            .map(|(_, entry)| entry.run.clone())
            .collect())
    }

    fn targets(&self, link: Link, runs: &[RunId]) -> Result<Vec<String>, Infallible> {
        let entries = self.lock();
        Ok(runs
            .iter()
            .filter_map(|run| entries.by_run.get(run))
            .flat_map(|(_, entry)| entry.relations.iter())
            .filter_map(Link::of)
            .filter(|(l, _)| *l == link)
            .map(|(_, target)| target.to_string())
            .collect())
    }
}
