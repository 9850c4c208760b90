/*!
The usage ledger: every run's usage and status, plus its relationships to
other runs, and totals over sets of related runs.

What each total includes:

- a run's own usage includes all its attempts: transport retries that
  produced usage and structural repairs;
- [`Ledger::total`] sums a set of runs, each counted once however often it
  is named, so the shared initial run of several branches counts once;
- [`Ledger::family`] is a run plus everything that continues it (branches,
  continuations of continuations) and every run explicitly associated with
  any of them;
- [`Ledger::sequence`] is a coordinator sequence: its starting run, every
  coordinated continuation, and the runs associated with them.

Failed runs are listed as failed, never silently dropped; a figure some run
did not report is marked incomplete and names the runs it is missing from,
never reported as zero.
*/

use crate::observe::RunId;
use serde::Serialize;
use skein_core::Usage;
use skein_core::{Relation, RunStatus};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

/// One run as the ledger knows it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LedgerEntry {
    pub run: RunId,
    pub status: RunStatus,
    pub backend: String,
    pub model: String,
    pub usage: Usage,
    /// False when some attempt did not report input or output tokens.
    pub usage_complete: bool,
    pub attempts: u32,
    pub relations: Vec<Relation>,
}

/// One usage figure summed over runs.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Figure {
    pub value: u64,
    /// Runs that did not report this figure. Empty means complete.
    pub missing_from: Vec<RunId>,
}

impl Figure {
    pub fn is_complete(&self) -> bool {
        self.missing_from.is_empty()
    }
}

/// Totals over a set of runs.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Totals {
    /// Every run counted, once each.
    pub runs: Vec<RunId>,
    pub failed: Vec<RunId>,
    pub input_tokens: Figure,
    pub output_tokens: Figure,
    pub cache_read_tokens: Figure,
    pub cache_write_tokens: Figure,
}

impl Totals {
    /// Whether input and output token totals are complete.
    pub fn is_complete(&self) -> bool {
        self.input_tokens.is_complete() && self.output_tokens.is_complete()
    }
}

/// The runs an engine has made.
#[derive(Debug, Default)]
pub struct Ledger {
    entries: Mutex<BTreeMap<RunId, LedgerEntry>>,
}

impl Ledger {
    pub(crate) fn record(&self, entry: LedgerEntry) {
        self.lock().insert(entry.run.clone(), entry);
    }

    /// Add a relation to a run already recorded (for example an
    /// association made after the fact).
    pub fn relate(&self, run: &RunId, relation: Relation) -> bool {
        match self.lock().get_mut(run) {
            Some(entry) => {
                if !entry.relations.contains(&relation) {
                    entry.relations.push(relation);
                }
                true
            }
            None => false,
        }
    }

    pub fn entry(&self, run: &RunId) -> Option<LedgerEntry> {
        self.lock().get(run).cloned()
    }

    /// Every run recorded, oldest id order.
    pub fn entries(&self) -> Vec<LedgerEntry> {
        self.lock().values().cloned().collect()
    }

    /// Totals over `runs`, each counted once.
    pub fn total<'a>(&self, runs: impl IntoIterator<Item = &'a RunId>) -> Totals {
        let entries = self.lock();
        let unique: BTreeSet<&RunId> = runs.into_iter().collect();
        let mut totals = Totals::default();
        for run in unique {
            totals.runs.push(run.clone());
            let Some(entry) = entries.get(run) else {
                // Unknown to this ledger: nothing reported at all.
                totals.input_tokens.missing_from.push(run.clone());
                totals.output_tokens.missing_from.push(run.clone());
                continue;
            };
            if entry.status != RunStatus::Succeeded {
                totals.failed.push(run.clone());
            }
            // Token counts are expected from every run; cache figures only
            // from backends that cache, so their absence is not a gap.
            let usage = entry.usage;
            for (figure, value) in [
                (&mut totals.input_tokens, usage.input_tokens),
                (&mut totals.output_tokens, usage.output_tokens),
            ] {
                figure.value += value.unwrap_or(0);
                if value.is_none() || !entry.usage_complete {
                    figure.missing_from.push(run.clone());
                }
            }
            totals.cache_read_tokens.value += usage.cache_read_tokens.unwrap_or(0);
            totals.cache_write_tokens.value += usage.cache_write_tokens.unwrap_or(0);
        }
        totals
    }

    /// A run, every run that continues it (transitively), and every run
    /// associated with any of those.
    pub fn family(&self, root: &RunId) -> Totals {
        let members = {
            let entries = self.lock();
            let mut members: BTreeSet<RunId> = BTreeSet::from([root.clone()]);
            loop {
                let before = members.len();
                for entry in entries.values() {
                    let joins = entry.relations.iter().any(|relation| match relation {
                        Relation::ContinuationOf(run) | Relation::AssociatedWith(run) => {
                            members.contains(run)
                        }
                        _ => false,
                    });
                    if joins {
                        members.insert(entry.run.clone());
                    }
                }
                if members.len() == before {
                    break members;
                }
            }
        };
        self.total(members.iter())
    }

    /// The runs of a coordinator sequence: its start, its continuations and
    /// their associated runs. The start counts once however many branches
    /// share it.
    pub fn sequence(&self, sequence: &str) -> Totals {
        let members =
            {
                let entries = self.lock();
                let mut members: BTreeSet<RunId> = entries
                    .values()
                    .filter(|entry| {
                        entry.relations.iter().any(|r| match r {
                            Relation::Sequence(id) | Relation::SequenceStart(id) => id == sequence,
                            _ => false,
                        })
                    })
                    .map(|entry| entry.run.clone())
                    .collect();
                for entry in entries.values() {
                    if entry.relations.iter().any(
                        |r| matches!(r, Relation::AssociatedWith(run) if members.contains(run)),
                    ) {
                        members.insert(entry.run.clone());
                    }
                }
                members
            };
        self.total(members.iter())
    }

    /// The runs that continue `run`'s exchange directly: its branches.
    pub fn branches_of(&self, run: &RunId) -> Vec<RunId> {
        self.lock()
            .values()
            .filter(|entry| {
                entry
                    .relations
                    .iter()
                    .any(|r| matches!(r, Relation::ContinuationOf(of) if of == run))
            })
            .map(|entry| entry.run.clone())
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<RunId, LedgerEntry>> {
        self.entries
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}
