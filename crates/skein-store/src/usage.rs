/*!
Usage accounts: totals over related runs, asked of the store at any time
([`Store::usage`]), so figures outlive the process that made the runs.

What a total adds up, and how, is [`skein_core::usage`]'s (shared with the
engine's ledger): each run counted once however many scopes it falls in,
failed runs counted and listed, any run without figures named so the total
is marked incomplete rather than silently low. This module says which runs
each [`UsageScope`] holds:

- **a run**: that run;
- **a node**: the runs that produced it (one reply can be produced by many
  runs: a greedy model answering the same history twice), except runs
  imported with a cases file (`Relation::Imported`): they were spent where
  the case was recorded, and count only where named (a run, runs);
- **a conversation**: the runs recorded in it (failed ones included), plus
  the runs that produced the prefix it shares with the conversations it
  was forked from (runs of those conversations whose reply is a message of
  its history up to where it branched, and for a fork from a rerun, the
  rerun's runs that produced it). So a fork's account includes its share
  of the work it starts from;
- **a family**: every conversation joined to this one by origin links (up
  to the first, then down through every fork and reply branch), the runs
  of each, and the runs of every rerun of their turns. Work a fork shares
  with its origin is one set of runs, counted once;
- **a coordinator sequence**: its start, its continuations
  ([`skein_core::usage::sequence`]);
- **runs**: those runs (a replayed turn's, or the original turn's).

Every scope also counts the runs made on behalf of a run it holds
(`associated_with`, transitively). The relations are read from the
`run_links` index; the SQL is in sqlite/usage.rs and postgres/usage.rs.

This module declares `UsageRows`, the backend trait sqlite/usage.rs and
postgres/usage.rs implement, and holds the public operations that call it:
on `Store`, blocking only.
*/

use crate::backend::BoxFuture;
use crate::error::{Result, StoreError};
use crate::family::FamilyLimits;
use crate::records::{ConversationId, RunId, RunStatus};
use crate::store::Store;
use skein_core::usage::{self, Link, RunFigures, RunLinks, Totals};
use skein_core::{NodeId, Usage};
use std::collections::{BTreeSet, HashMap, HashSet};

/// The rows usage accounts are added up from: the SQL is in sqlite/usage.rs
/// and postgres/usage.rs.
pub(crate) trait UsageRows {
    fn run_rows<'a>(&'a self, ids: &'a [RunId]) -> BoxFuture<'a, Result<Vec<RunRow>>>;
    fn conversation_run_rows<'a>(
        &'a self,
        id: &'a ConversationId,
    ) -> BoxFuture<'a, Result<RunOutputs>>;
    fn ancestor_ids(&self, head: NodeId) -> BoxFuture<'_, Result<HashSet<NodeId>>>;
    fn link_sources<'a>(
        &'a self,
        kind: &'a str,
        targets: &'a [&'a str],
    ) -> BoxFuture<'a, Result<Vec<RunId>>>;
    fn link_targets<'a>(
        &'a self,
        kind: &'a str,
        runs: &'a [RunId],
    ) -> BoxFuture<'a, Result<Vec<String>>>;
}

/// Which runs a total of [`Store::usage`] covers. Each also counts the
/// runs made on behalf of a run it holds (`associated_with`,
/// transitively).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum UsageScope {
    /// The run.
    Run(RunId),
    /// The runs that produced the node (not those imported with a cases
    /// file: spent elsewhere).
    Node(NodeId),
    /// The runs recorded in the conversation (failed ones included), and
    /// those that produced the prefix it shares with the conversations it
    /// was forked from (and, for a fork from a rerun, the rerun's runs that
    /// produced it).
    Conversation(ConversationId),
    /// Every conversation joined to this one by origin links, their runs
    /// and the runs of every rerun of their turns: shared work counted once.
    Family(ConversationId),
    /// A coordinator sequence: its start and continuations.
    Sequence(String),
    /// These runs (a replayed turn's, or its original's); one not stored
    /// counts as a run that reported nothing, so the total is incomplete.
    Runs(Vec<RunId>),
}

/// A stored run's figures, and the node it produced.
#[derive(Clone, Debug)]
pub(crate) struct RunRow {
    pub id: RunId,
    pub output_head: Option<NodeId>,
    pub figures: RunFigures,
}

impl RunRow {
    /// A row from its columns: id, model, provider, output head, status,
    /// the four token figures and the completeness flag.
    #[allow(
        clippy::too_many_arguments,
        reason = "one argument per column of a usage row"
    )]
    pub(crate) fn new(
        id: String,
        model: String,
        provider: String,
        output_head: Option<&[u8]>,
        status: &str,
        tokens: [Option<i64>; 4],
        usage_complete: bool,
    ) -> Result<RunRow> {
        let status = RunStatus::parse(status)
            .ok_or_else(|| StoreError::MalformedRow(format!("run {id} has status `{status}`")))?;
        let figure = |n: Option<i64>| n.map(|n| n as u64);
        Ok(RunRow {
            output_head: output_head.and_then(NodeId::from_slice),
            figures: RunFigures {
                model,
                provider,
                status,
                usage: Usage {
                    input_tokens: figure(tokens[0]),
                    output_tokens: figure(tokens[1]),
                    cache_read_tokens: figure(tokens[2]),
                    cache_write_tokens: figure(tokens[3]),
                },
                usage_complete,
            },
            id: RunId(id),
        })
    }
}

/// Runs, each with the node it produced (`None` for a failed one).
pub(crate) type RunOutputs = Vec<(RunId, Option<NodeId>)>;

impl Store {
    /// The usage totals of `scope`, from every run this store recorded.
    /// A run, node or conversation that is not stored is a not-found error;
    /// a sequence no stored run belongs to has empty totals.
    pub fn usage(&self, scope: &UsageScope) -> Result<Totals> {
        let seeds: BTreeSet<RunId> = match scope {
            UsageScope::Run(id) => {
                if self.run_rows(std::slice::from_ref(id))?.is_empty() {
                    return Err(StoreError::RunNotFound(id.to_string()));
                }
                BTreeSet::from([id.clone()])
            }
            UsageScope::Node(node) => {
                if !self.contains(*node)? {
                    return Err(StoreError::NodeNotFound(*node));
                }
                // A case's runs were spent where it was recorded (they are
                // counted where named: a run, a replay's original side).
                self.runs_producing(*node)?
                    .into_iter()
                    .filter(|run| !run.is_imported())
                    .map(|run| run.id)
                    .collect()
            }
            UsageScope::Conversation(id) => self.conversation_runs(id)?,
            UsageScope::Family(id) => self.family_runs(id)?,
            UsageScope::Sequence(id) => usage::sequence(self, id)?,
            UsageScope::Runs(ids) => ids.iter().cloned().collect(),
        };
        let members = usage::with_associated(self, seeds)?;
        self.totals(members)
    }

    /// Totals over `runs` with their stored figures.
    fn totals(&self, runs: BTreeSet<RunId>) -> Result<Totals> {
        let ids: Vec<RunId> = runs.into_iter().collect();
        let mut figures: HashMap<RunId, RunFigures> = self
            .run_rows(&ids)?
            .into_iter()
            .map(|row| (row.id, row.figures))
            .collect();
        Ok(Totals::of(ids.into_iter().map(|id| {
            let found = figures.remove(&id);
            (id, found)
        })))
    }

    fn run_rows(&self, ids: &[RunId]) -> Result<Vec<RunRow>> {
        self.wait(self.backend().run_rows(ids))
    }

    /// A conversation's own runs and the runs of the prefix it shares with
    /// the conversations (and the rerun) it came from.
    fn conversation_runs(&self, id: &ConversationId) -> Result<BTreeSet<RunId>> {
        let conversation = self.conversation(id)?;
        let mut runs: BTreeSet<RunId> = self
            .wait(self.backend().conversation_run_rows(id))?
            .into_iter()
            .map(|(run, _)| run)
            .collect();
        // The first branch point is the deepest: every earlier origin's node
        // is on its path, so one walk gives the whole shared prefix.
        let mut prefix: Option<HashSet<NodeId>> = None;
        let mut visited = HashSet::from([id.clone()]);
        let mut origin = conversation.origin;
        while let Some(from) = origin.take() {
            let Some(node) = from.node else { break };
            if prefix.is_none() {
                prefix = Some(self.wait(self.backend().ancestor_ids(node))?);
            }
            let shared = prefix.as_ref().expect("just filled");
            let on_prefix = |output: &Option<NodeId>| output.is_some_and(|n| shared.contains(&n));
            if let Some(rerun) = &from.rerun {
                match self.rerun(rerun) {
                    Ok(record) => {
                        let ids: Vec<RunId> = record
                            .sample_runs
                            .into_iter()
                            .chain(record.baseline_runs)
                            .collect();
                        runs.extend(
                            self.run_rows(&ids)?
                                .into_iter()
                                .filter(|row| on_prefix(&row.output_head))
                                .map(|row| row.id),
                        );
                    }
                    Err(StoreError::RerunNotFound(_)) => {}
                    Err(other) => return Err(other),
                }
            }
            let Some(parent) = from.conversation else {
                break;
            };
            if !visited.insert(parent.clone()) {
                break;
            }
            runs.extend(
                self.wait(self.backend().conversation_run_rows(&parent))?
                    .into_iter()
                    .filter(|(_, output)| on_prefix(output))
                    .map(|(run, _)| run),
            );
            origin = match self.conversation(&parent) {
                Ok(parent) => parent.origin,
                // An origin this database does not hold (a partial import):
                // the prefix ends here.
                Err(StoreError::ConversationNotFound(_)) => None,
                Err(other) => return Err(other),
            };
        }
        Ok(runs)
    }

    /// Every run of every conversation of `id`'s family, and of the reruns
    /// of their turns.
    fn family_runs(&self, id: &ConversationId) -> Result<BTreeSet<RunId>> {
        // Every member (totals of part of a family would be wrong), with
        // a bound the SQL's `LIMIT` arithmetic cannot overflow.
        let everyone = FamilyLimits {
            members: u32::MAX as usize,
            shares: 0,
        };
        let family = self.family(id, everyone)?;
        let mut runs = BTreeSet::new();
        for member in &family.members {
            runs.extend(
                self.wait(
                    self.backend()
                        .conversation_run_rows(&member.conversation.id),
                )?
                .into_iter()
                .map(|(run, _)| run),
            );
        }
        for rerun in family.reruns {
            runs.extend(rerun.sample_runs);
            runs.extend(rerun.baseline_runs);
        }
        Ok(runs)
    }
}

/// The store's relations, from the `run_links` index.
impl RunLinks for Store {
    type Error = StoreError;

    fn sources(&self, link: Link, targets: &[&str]) -> Result<Vec<RunId>> {
        self.wait(self.backend().link_sources(link.kind(), targets))
    }

    fn targets(&self, link: Link, runs: &[RunId]) -> Result<Vec<String>> {
        self.wait(self.backend().link_targets(link.kind(), runs))
    }
}
