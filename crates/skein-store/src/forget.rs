/*!
Deleting conversations from a content-addressed graph: what goes, what
stays, and why (invariant 12 of the design: deleting is reachability).

A [`Selection`] names conversations (one, a family, or every one matching a
[`Filter`]), or replays ([`Selection::Replays`]: their turns' rows and runs
go, and what only they reached, by the same rule; the conversations they
replayed stay). [`Store::forget`] removes, in one write transaction, their
bookmarks, their runs (with the tools offered and relation rows), their
reruns (with the reruns' own runs), the replayed turns of their turns
(with those turns' runs and a judge's; a replay left without turns goes
too), and then every node that nothing left
in the database reaches any more, with the node's search-index row, the
blobs no remaining node references and the embedding-cache rows of its
texts. A node stays when a remaining conversation's head or origin, a
remaining run's input or output head, a remaining rerun's turn, request
or answer node, a remaining replayed turn's original or answer, or a label
is the node itself or lies below it: what another
conversation still uses is never touched, and the report says how much was
kept and which conversations share it.

Which nodes could become unreachable is known without scanning the graph:
only the ancestors of the references the deleted rows held (the
*candidates*). A candidate is kept when it is referenced by a remaining row
or has a child that is no candidate (a *seed*), or lies above a seed; the
rest is garbage. [`sweep`] decides that once for both backends, which only
find candidates and seeds (sqlite/forget.rs, postgres/forget.rs).

Concurrent turns: on SQLite the deletion is one `BEGIN IMMEDIATE`
transaction, so a turn commits wholly before or after it; a turn that
built on nodes deleted meanwhile writes them again from memory (their ids
are their content), so nothing it names dangles. On PostgreSQL the
deletion locks the selected conversations and the candidate nodes
(`FOR UPDATE`) before deciding; a turn locks the stored node it builds on
(`FOR KEY SHARE`) and the conversation it continues, so either the turn
commits first and the deletion sees its nodes and runs, or it waits and
then finds the nodes gone (and writes them again) or its conversation gone
([`StoreError::ConversationNotFound`](crate::StoreError::ConversationNotFound)).

A dry run does all of it in a transaction that is rolled back, so its
plan is exactly what the deletion would do at that moment.

[`Store::collect_garbage`] deletes every node nothing reaches instead, in
bounded batches: the plan (every node, the referenced ones as seeds) is
read without locks, then each batch of planned nodes, children first, is
the candidate set of a transaction of its own, decided again by the same
rule, so a node a turn built on since the plan stays.

[`Store::forget`] also records the deleted conversations that remaining
forks name as their origin (`deleted_conversations`), so `verify` tells an
origin deleted on purpose from a dangling one.

[`Store::redact`] erases one node's content in place instead: the node keeps
its id and place (its parts become [`Part::Erased`], which enter the id
preimage as the parts they were), and the same cleaning reaches the search
index, blobs, the embedding cache and runs' request bodies.
[`Store::vacuum`] then rewrites the database file without the freed bytes.

This module declares `Forget`, the backend trait sqlite/forget.rs and
postgres/forget.rs implement, and holds the public operations that call it:
the async ones on `AsyncStore` and their blocking forms on `Store`.
*/

use crate::async_store::AsyncStore;
use crate::backend::BoxFuture;
use crate::error::Result;
use crate::family::FamilyLimits;
use crate::places::Holding;
use crate::records::{ConversationId, ConversationRecord, ReplayId};
use crate::search::ConversationRef;
use crate::store::Store;
use serde::Serialize;
use skein_core::encoding::node_id;
use skein_core::{Digest, Erased, Message, NodeId, Part};
use std::collections::{HashMap, HashSet};
use std::hash::Hash;

/// Deleting conversations and collecting what only they reached: the SQL is
/// in sqlite/forget.rs and postgres/forget.rs. Blocking only, like export
/// and verify.
pub(crate) trait Forget {
    /// Delete `doomed`, `replays` (each with its turns' rows and runs) and
    /// `unowned` (runs no conversation holds: failed first turns), and the
    /// rows and nodes only they reached, in one transaction; with
    /// `dry_run` the transaction is rolled back.
    fn forget(
        &self,
        doomed: &[Doomed],
        replays: &[ReplayId],
        unowned: &[String],
        dry_run: bool,
    ) -> Result<Swept>;
    /// The runs no conversation holds that `filter` takes (by when they
    /// started, their client, whether the proxy made them).
    fn unowned_runs(&self, filter: &Filter) -> Result<Vec<String>>;
    /// Every node nothing reaches (children first), read without locking
    /// anything, with how many nodes are kept and the kept ones something
    /// references directly (the deepest [`crate::SHARERS_SHOWN`]).
    fn garbage(&self) -> Result<Planned>;
    /// Delete those of `nodes` that nothing reaches still (a turn may have
    /// built on one since it was planned), with what only they used, in
    /// one transaction that locks only them; with `dry_run` it is rolled
    /// back.
    fn collect_batch(&self, nodes: &[NodeId], dry_run: bool) -> Result<Swept>;
    /// Run `work` unless another connection runs work under `key` now
    /// (false then, and `work` is not run).
    fn exclusively(&self, key: i64, work: &mut dyn FnMut() -> Result<()>) -> Result<bool>;
    /// Replace `node`'s body by `erased` (the same id), and remove what held
    /// `original`'s content elsewhere, in one transaction.
    fn redact(&self, node: NodeId, original: &Message, erased: &Message) -> Result<Scrubbed>;
    /// Rewrite the database without its free pages.
    fn vacuum(&self) -> Result<()>;
    /// The erasures counted so far (crate::forget::COUNT_ERASURE).
    fn erasures(&self) -> BoxFuture<'_, Result<u64>>;
    /// The conversations holding a run the recording proxy's client
    /// `client` made (see [`crate::Filter::client`]).
    fn conversations_of_client(&self, client: &str) -> Result<Vec<String>>;
}

/// Which conversations (or replays) to delete.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Selection {
    /// These conversations.
    Conversations(Vec<ConversationId>),
    /// The conversation and every conversation tied to it by origin links
    /// (its forks, the ones it was forked from, reply branches); not the
    /// ones that merely share messages by content.
    Family(ConversationId),
    /// Every conversation matching the filter.
    Matching(Filter),
    /// No conversation: these replays, each with its turns' rows, their
    /// runs (a judge's too), and the answers and requests only they
    /// reached (`skein replays delete`). The conversations they replayed
    /// stay as they are.
    Replays(Vec<ReplayId>),
}

/// Conversations a [`Selection::Matching`] takes: all of the given
/// conditions must hold (none given matches every conversation). A new
/// condition (a label) is a new field.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Filter {
    /// Last updated before this Unix time, in milliseconds.
    pub updated_before_ms: Option<i64>,
    /// Recorded by the recording proxy (`skein serve --proxy`).
    pub proxy_only: bool,
    /// Holding a run this client of the recording proxy made (its
    /// [`RunRecord::client`](skein_core::RunRecord::client)).
    pub client: Option<String>,
}

impl Filter {
    /// Conversations last updated before `ms` (Unix time, milliseconds).
    pub fn updated_before_ms(mut self, ms: i64) -> Filter {
        self.updated_before_ms = Some(ms);
        self
    }

    /// Only conversations the recording proxy recorded.
    pub fn proxy_only(mut self) -> Filter {
        self.proxy_only = true;
        self
    }

    /// Only conversations holding a run the recording proxy's client
    /// `name` made.
    pub fn client(mut self, name: impl Into<String>) -> Filter {
        self.client = Some(name.into());
        self
    }

    /// Whether `conversation` matches, on what its record says (the
    /// [`client`](Filter::client) condition is the runs', checked by
    /// [`Store::forget`]).
    pub fn matches(&self, conversation: &ConversationRecord) -> bool {
        self.updated_before_ms
            .is_none_or(|before| conversation.updated_ms < before)
            && (!self.proxy_only || conversation.settings.proxy)
    }
}

/// A deleted conversation that a remaining fork still names as its origin
/// (the `deleted_conversations` ledger), so `verify` tells its missing
/// origin from a dangling one; exports carry it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DeletedConversation {
    pub id: ConversationId,
    /// When it was deleted (0: before deletions were recorded).
    pub deleted_ms: i64,
}

/// One conversation a backend is to delete. `updated_ms`, when set, is
/// when it was last updated as the selection saw it: a conversation updated
/// since (a turn landed on it) no longer matched what was asked for and is
/// skipped.
#[derive(Clone, Debug)]
pub(crate) struct Doomed {
    pub id: ConversationId,
    pub updated_ms: Option<i64>,
}

/// What a backend's deletion did (or, in a dry run, would do).
#[derive(Clone, Debug, Default)]
pub(crate) struct Swept {
    pub deleted: Vec<ConversationId>,
    /// The replays deleted by name ([`Selection::Replays`]).
    pub deleted_replays: Vec<ReplayId>,
    pub skipped: Vec<ConversationId>,
    pub runs: u64,
    pub unowned_runs: u64,
    pub reruns: u64,
    pub replay_turns: u64,
    pub replays: u64,
    pub nodes: u64,
    pub blobs: u64,
    pub embeddings: u64,
    /// Pieces of request bodies no remaining run holds.
    pub body_pieces: u64,
    pub kept: u64,
    /// Of the kept nodes, those a label keeps.
    pub labelled: u64,
    /// The deepest kept nodes on the deleted conversations' paths.
    pub boundary: Vec<NodeId>,
}

/// The plan of a garbage collection ([`Forget::garbage`]).
#[derive(Clone, Debug, Default)]
pub(crate) struct Planned {
    /// Every node nothing reaches, children before parents.
    pub garbage: Vec<NodeId>,
    /// How many nodes stay.
    pub kept: u64,
    /// The deepest kept nodes something references directly.
    pub boundary: Vec<NodeId>,
}

/// Messages one batch of [`Store::collect_garbage`] deletes at most.
pub const GC_BATCH: usize = 500;

/// How far a [`Store::collect_garbage_with`] has got.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Progress {
    /// Messages deleted so far.
    pub collected: u64,
    /// Messages nothing reached when the collection started.
    pub planned: u64,
}

/// The references that keep a node (and everything above it), for a
/// garbage collection's plan: the same SQL on both backends.
pub(crate) const REFERENCED: &str = "SELECT head FROM conversations WHERE head IS NOT NULL
     UNION ALL SELECT forked_from_node FROM conversations WHERE forked_from_node IS NOT NULL
     UNION ALL SELECT input_head FROM runs WHERE input_head IS NOT NULL
     UNION ALL SELECT output_head FROM runs WHERE output_head IS NOT NULL
     UNION ALL SELECT turn_node FROM reruns WHERE turn_node IS NOT NULL
     UNION ALL SELECT request_head FROM reruns WHERE request_head IS NOT NULL
     UNION ALL SELECT answer_head FROM reruns WHERE answer_head IS NOT NULL
     UNION ALL SELECT node FROM labels
     UNION ALL SELECT turn_node FROM replay_turns WHERE turn_node IS NOT NULL
     UNION ALL SELECT answer_head FROM replay_turns WHERE answer_head IS NOT NULL";

/// What [`Store::forget`] removed, or in a dry run would remove, and what
/// it kept.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Forgotten {
    /// Nothing was changed: this is the plan.
    pub dry_run: bool,
    /// The conversations deleted.
    pub conversations: Vec<ConversationId>,
    /// Conversations selected by a filter but updated since the selection
    /// was made (a turn landed on them meanwhile): kept.
    pub skipped: Vec<ConversationId>,
    pub runs: u64,
    /// Of those, runs no conversation held (a failed first turn's: the
    /// proxy, the CLI or the web view kept its request), taken by the
    /// filter's age, client or proxy condition.
    pub unowned_runs: u64,
    pub reruns: u64,
    /// Replayed turns of the deleted conversations' turns (with their
    /// runs, counted in `runs`).
    pub replay_turns: u64,
    /// Replays left without turns by that, removed too (and the replays
    /// deleted by name).
    pub replays: u64,
    /// The replays deleted by name ([`Selection::Replays`]); absent from
    /// JSON when none were.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub deleted_replays: Vec<ReplayId>,
    /// Messages (nodes) removed.
    pub messages: u64,
    /// Large payloads removed (no remaining message references them).
    pub blobs: u64,
    /// Embedding-cache rows removed (the vectors of removed texts).
    pub embeddings: u64,
    /// Pieces of the removed runs' request bodies that no remaining run's
    /// body holds, removed.
    pub body_pieces: u64,
    /// Messages of the deleted conversations that stay because something
    /// remaining still reaches them.
    pub kept_messages: u64,
    /// Of the kept messages, those carrying a label (a labelled message is
    /// kept with its thread until the label is removed).
    pub labelled_messages: u64,
    /// Remaining conversations whose threads hold kept messages (at most
    /// [`SHARERS_SHOWN`]), found from the deepest kept messages; a dry run
    /// lists the same as the deletion. Empty for a garbage collection,
    /// which deletes no conversation: what it keeps is every message
    /// something reaches.
    pub shared_with: Vec<ConversationRef>,
    /// More conversations may share kept messages than listed.
    pub more_sharers: bool,
    /// A garbage collection's report ([`Store::collect_garbage`]): no
    /// conversation was selected, `kept_messages` counts every message
    /// something still reaches, and nothing is "shared".
    #[serde(skip)]
    pub collection: bool,
}

/// At most this many sharing conversations are listed in a report.
pub const SHARERS_SHOWN: usize = 20;

/// At most this many of the deepest kept messages are looked up to find
/// the conversations sharing them; past it a report says "or more".
const BOUNDARY_EXAMINED: usize = 200;

impl std::fmt::Display for Forgotten {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let verb = if self.dry_run {
            "would delete"
        } else {
            "deleted"
        };
        if self.collection {
            let reached = if self.dry_run { "reaches" } else { "reached" };
            writeln!(
                f,
                "{verb} {} message(s) nothing {reached}, {} blob(s), {} cached embedding(s)",
                self.messages, self.blobs, self.embeddings
            )?;
            return writeln!(
                f,
                "{} message(s) kept: each is still reached by a conversation, run, rerun, label \
                 or replayed turn",
                self.kept_messages
            );
        }
        if !self.deleted_replays.is_empty() && self.conversations.is_empty() {
            let ids: Vec<&str> = self.deleted_replays.iter().map(|id| id.short()).collect();
            writeln!(
                f,
                "{verb} replay {}: {} replayed turn(s), {} run(s), {} message(s), {} blob(s), {} cached embedding(s)",
                ids.join(", "),
                self.replay_turns,
                self.runs,
                self.messages,
                self.blobs,
                self.embeddings
            )?;
            return self.kept_lines(f, verb);
        }
        writeln!(
            f,
            "{verb} {} conversation(s), {} run(s), {} rerun(s), {} message(s), {} blob(s), {} cached embedding(s)",
            self.conversations.len(),
            self.runs,
            self.reruns,
            self.messages,
            self.blobs,
            self.embeddings
        )?;
        if self.unowned_runs > 0 {
            writeln!(
                f,
                "{verb} {} run(s) no conversation held (failed first turns) among them",
                self.unowned_runs
            )?;
        }
        if self.body_pieces > 0 {
            writeln!(
                f,
                "{verb} {} piece(s) of request bodies only those runs held",
                self.body_pieces
            )?;
        }
        if self.replay_turns > 0 {
            writeln!(
                f,
                "{verb} {} replayed turn(s) of them, and {} replay(s) left without turns",
                self.replay_turns, self.replays
            )?;
        }
        self.kept_lines(f, verb)
    }
}

impl Forgotten {
    /// The lines every report ends with: request bodies released, messages
    /// kept and why, conversations skipped.
    fn kept_lines(&self, f: &mut std::fmt::Formatter<'_>, verb: &str) -> std::fmt::Result {
        if !self.deleted_replays.is_empty() && self.body_pieces > 0 {
            writeln!(
                f,
                "{verb} {} piece(s) of request bodies only those runs held",
                self.body_pieces
            )?;
        }
        if self.kept_messages > 0 {
            let sharers = self.shared_with.len();
            let more = if self.more_sharers { " or more" } else { "" };
            let why = if sharers == 0 {
                "still reached by remaining runs, reruns or labels".to_string()
            } else {
                format!("shared with {sharers}{more} conversation(s)")
            };
            writeln!(f, "{} message(s) kept: {why}", self.kept_messages)?;
            if self.labelled_messages > 0 {
                writeln!(
                    f,
                    "{} of them labelled: they and the messages before them stay until \
                     `skein label rm` removes their labels",
                    self.labelled_messages
                )?;
            }
        }
        if !self.skipped.is_empty() {
            writeln!(
                f,
                "{} conversation(s) kept: updated while the selection was made",
                self.skipped.len()
            )?;
        }
        Ok(())
    }
}

impl Store {
    /// Delete the selected conversations and everything only they reached
    /// (see the module documentation); with `dry_run`, only say what that
    /// would do. Blocking, like export and verify: from async code run it
    /// with [`Store::run_blocking`]. A read-only store refuses both.
    pub fn forget(&self, selection: &Selection, dry_run: bool) -> Result<Forgotten> {
        let doomed = self.doomed(selection)?;
        let unowned = match selection {
            Selection::Matching(filter) => self.backend().unowned_runs(filter)?,
            _ => Vec::new(),
        };
        let replays: &[ReplayId] = match selection {
            Selection::Replays(ids) => ids,
            _ => &[],
        };
        let swept = self.backend().forget(&doomed, replays, &unowned, dry_run);
        self.drop_cached_content();
        self.report(swept?, dry_run)
    }

    /// Delete every message nothing reaches (no conversation, run or rerun:
    /// what a deletion interrupted before skein had it, or writes of other
    /// tools, left behind), with its search row, blobs and cached
    /// embeddings, as [`Store::forget`] does for a deletion's candidates,
    /// in batches of [`GC_BATCH`] ([`Store::collect_garbage_with`]). With
    /// `dry_run`, only say what it would delete.
    pub fn collect_garbage(&self, dry_run: bool) -> Result<Forgotten> {
        self.collect_garbage_with(dry_run, GC_BATCH, &mut |_| {})
    }

    /// [`Store::collect_garbage`] in batches of at most `batch` messages,
    /// calling `progress` after each. The messages nothing reaches are
    /// found first, reading the whole graph without locking anything;
    /// then each batch is deleted in a transaction of its own that locks
    /// only its messages (on PostgreSQL, `FOR UPDATE`) and deletes those
    /// nothing reaches still (children before parents, so a batch never
    /// leaves a message whose parent is gone). Killed between or during
    /// batches, the database keeps every message something reaches, and
    /// the next collection finds and deletes the rest. A dry run deletes
    /// the whole plan in one transaction that is rolled back (so its
    /// figures are the real run's), locking only the messages nothing
    /// reaches.
    pub fn collect_garbage_with(
        &self,
        dry_run: bool,
        batch: usize,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<Forgotten> {
        let plan = self.backend().garbage()?;
        let planned = plan.garbage.len() as u64;
        let mut total = Swept {
            boundary: plan.boundary,
            ..Swept::default()
        };
        let batches: Vec<&[NodeId]> = if dry_run {
            vec![&plan.garbage]
        } else {
            plan.garbage.chunks(batch.max(1)).collect()
        };
        for nodes in batches {
            let swept = self.backend().collect_batch(nodes, dry_run);
            self.drop_cached_content();
            let swept = swept?;
            total.nodes += swept.nodes;
            total.blobs += swept.blobs;
            total.embeddings += swept.embeddings;
            if !dry_run {
                progress(Progress {
                    collected: total.nodes,
                    planned,
                });
            }
        }
        // A planned message a turn has built on since stays, and counts as
        // kept.
        total.kept = plan.kept + (planned - total.nodes);
        // Nothing was deleted that anything shares: no sharers to name.
        total.boundary.clear();
        Ok(Forgotten {
            collection: true,
            ..self.report(total, dry_run)?
        })
    }

    /// Run `work` unless another process runs work under the same `name`
    /// on this database now: `Ok(None)` then, and `work` is not run. On
    /// PostgreSQL a session advisory lock (keyed by the hash of `name` and
    /// the store's key) is held
    /// while `work` runs, and released when it ends or the process dies;
    /// on SQLite `work` always runs (the maintenance it guards, deleting
    /// and collecting, is serialised by SQLite's write lock, one
    /// transaction at a time, and a second pass finds only what the first
    /// left). Blocking.
    pub fn exclusively<T>(
        &self,
        name: &str,
        work: impl FnOnce() -> Result<T>,
    ) -> Result<Option<T>> {
        // The store's key too: schemas of one PostgreSQL database share
        // its advisory locks.
        let digest = Digest::of(format!("{name}\0{}", self.backend().key()).as_bytes());
        let key = i64::from_le_bytes(digest.as_bytes()[..8].try_into().expect("8 bytes"));
        let mut work = Some(work);
        let mut done = None;
        let ran = self.backend().exclusively(key, &mut || {
            if let Some(work) = work.take() {
                done = Some(work()?);
            }
            Ok(())
        })?;
        Ok(if ran { done } else { None })
    }

    #[cfg(any(test, feature = "testkit"))]
    /// [`Store::forget`] of conversations a filter saw last updated at the
    /// given times, for tests of a turn landing between the selection and
    /// the deletion.
    #[doc(hidden)]
    pub fn forget_as_seen(
        &self,
        seen: &[(ConversationId, i64)],
        dry_run: bool,
    ) -> Result<Forgotten> {
        let doomed: Vec<Doomed> = seen
            .iter()
            .map(|(id, updated_ms)| Doomed {
                id: id.clone(),
                updated_ms: Some(*updated_ms),
            })
            .collect();
        let swept = self.backend().forget(&doomed, &[], &[], dry_run);
        self.drop_cached_content();
        self.report(swept?, dry_run)
    }

    /// What a backend swept, as reported: with the conversations sharing
    /// what it kept.
    fn report(&self, swept: Swept, dry_run: bool) -> Result<Forgotten> {
        let (shared_with, more_sharers) = self.sharers(&swept)?;
        Ok(Forgotten {
            dry_run,
            conversations: swept.deleted,
            skipped: swept.skipped,
            runs: swept.runs,
            unowned_runs: swept.unowned_runs,
            reruns: swept.reruns,
            replay_turns: swept.replay_turns,
            replays: swept.replays,
            deleted_replays: swept.deleted_replays,
            messages: swept.nodes,
            blobs: swept.blobs,
            embeddings: swept.embeddings,
            body_pieces: swept.body_pieces,
            kept_messages: swept.kept,
            labelled_messages: swept.labelled,
            shared_with,
            more_sharers,
            collection: false,
        })
    }

    /// The conversations `selection` names, each with the update time a
    /// filter saw.
    fn doomed(&self, selection: &Selection) -> Result<Vec<Doomed>> {
        let exactly = |id: ConversationId| Doomed {
            id,
            updated_ms: None,
        };
        Ok(match selection {
            Selection::Conversations(ids) => ids.iter().cloned().map(exactly).collect(),
            Selection::Replays(_) => Vec::new(),
            Selection::Family(id) => self
                .family(id, FamilyLimits::WHOLE)?
                .members
                .into_iter()
                .map(|member| exactly(member.conversation.id))
                .collect(),
            Selection::Matching(filter) => {
                let of_client: Option<HashSet<String>> = match &filter.client {
                    Some(client) => Some(
                        self.backend()
                            .conversations_of_client(client)?
                            .into_iter()
                            .collect(),
                    ),
                    None => None,
                };
                self.list_conversations(usize::MAX >> 1)?
                    .into_iter()
                    .filter(|conversation| {
                        filter.matches(conversation)
                            && of_client
                                .as_ref()
                                .is_none_or(|ids| ids.contains(&conversation.id.0))
                    })
                    .map(|conversation| Doomed {
                        id: conversation.id,
                        updated_ms: Some(conversation.updated_ms),
                    })
                    .collect()
            }
        })
    }

    /// The remaining conversations holding the kept boundary nodes. The
    /// deleted ones are left out of the lookup itself (a dry run still
    /// stores them), so a dry run lists exactly what the deletion does.
    fn sharers(&self, swept: &Swept) -> Result<(Vec<ConversationRef>, bool)> {
        let deleted: Vec<String> = swept.deleted.iter().map(|id| id.0.clone()).collect();
        let mut seen = HashSet::new();
        let mut sharers = Vec::new();
        for node in swept.boundary.iter().take(BOUNDARY_EXAMINED) {
            if sharers.len() > SHARERS_SHOWN {
                break;
            }
            let found = match self.containing_conversations(*node, SHARERS_SHOWN + 1, &deleted) {
                Ok(found) => found,
                // Collected by a concurrent deletion since.
                Err(crate::StoreError::NodeNotFound(_)) => continue,
                Err(error) => return Err(error),
            };
            for conversation in found {
                if seen.insert(conversation.id.clone()) {
                    sharers.push(conversation);
                }
            }
        }
        // Deeper kept messages than were looked up may name others.
        let more = sharers.len() > SHARERS_SHOWN || swept.boundary.len() > BOUNDARY_EXAMINED;
        sharers.truncate(SHARERS_SHOWN);
        Ok((sharers, more))
    }
}

/// What [`Store::redact`] erased.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Redacted {
    /// The node, whose id and place did not change.
    pub node: NodeId,
    /// Its parts erased now (a part erased before stays as it was).
    pub parts: usize,
    /// Large payloads removed (no other message references them).
    pub blobs: u64,
    /// Embedding-cache rows removed (the vectors of its texts).
    pub embeddings: u64,
    /// Pieces of the request bodies that carried the message (proxied
    /// runs' exact requests), erased: those bodies now read back with the
    /// erased spans named ([`crate::RequestBody::erased`]).
    pub body_pieces_erased: u64,
    /// The copies of its content kept outside the graph, rewritten without
    /// it: per place of [`crate::places::CONTENT`] (runs' error texts,
    /// events and configured prompts' records; conversations' titles and a
    /// recorded chat's system text and sources; replays' changes and search
    /// words; comparators' reasons), how many rows.
    pub copies: Vec<Holding>,
}

/// Count an erasure (a redaction, or nodes deleted) in `meta`, in the
/// transaction that makes it, so a running server's caches can tell that
/// content they hold may have left the store ([`Store::erasures`]). The
/// same SQL on both backends.
pub(crate) const COUNT_ERASURE: &str = "INSERT INTO meta(key, value) VALUES ('erasures', '1')
     ON CONFLICT (key) DO UPDATE SET value = CAST(CAST(meta.value AS BIGINT) + 1 AS TEXT)";

/// What a run's error text becomes when a message its request carried is
/// erased: a provider's error may quote the request (DESIGN invariant 13).
pub(crate) const ERASED_ERROR: &str = "[erased: this call failed on a request carrying a message since erased, and its error \
     text could quote it]";

/// The runs no conversation holds that a filter takes, as SQL on both
/// backends: `$1` started before (or NULL), `$2` the client (or NULL),
/// `$3` only the proxy's (it kept their request bodies).
pub(crate) const UNOWNED_RUNS: &str = "SELECT id FROM runs WHERE conversation IS NULL
     AND (CAST($1 AS BIGINT) IS NULL OR started < CAST($1 AS BIGINT))
     AND (CAST($2 AS TEXT) IS NULL OR client = CAST($2 AS TEXT))
     AND (CAST($3 AS BIGINT) = 0 OR request_digest IS NOT NULL)
     ORDER BY id";

/// What a backend's redaction removed besides the content.
#[derive(Clone, Debug, Default)]
pub(crate) struct Scrubbed {
    pub blobs: u64,
    pub embeddings: u64,
    pub body_pieces: u64,
    pub copies: Vec<Holding>,
}

/// What a copy of an erased text kept outside the graph becomes.
pub(crate) const ERASED_TEXT: &str = "[erased]";

/// Whether the erased message held `text` (in one of its text parts, or
/// its tool results): then a copy of `text` kept outside the graph must go
/// with it.
fn erased_holds(original: &Message, text: &str) -> bool {
    !text.is_empty()
        && original.parts.iter().any(|part| match part {
            Part::Text { text: held } => held.contains(text),
            Part::ToolResult(result) => result.content.contains(text),
            _ => false,
        })
}

/// Replace the string at `value` by [`ERASED_TEXT`] when the erased
/// message held it; whether it did.
fn erase_copy(value: Option<&mut serde_json::Value>, original: &Message) -> bool {
    match value {
        Some(serde_json::Value::String(text)) if erased_holds(original, text) => {
            *text = ERASED_TEXT.to_string();
            true
        }
        _ => false,
    }
}

/// A run's error text once a message its request carried is erased:
/// [`ERASED_ERROR`] (a provider's error may quote the request).
pub(crate) fn error_without(error: &str, _: &Message) -> Option<String> {
    (error != ERASED_ERROR).then(|| ERASED_ERROR.to_string())
}

/// The observation events of the run that produced an erased message:
/// none.
pub(crate) fn events_without(events: &str, _: &Message) -> Option<String> {
    (events != "[]").then(|| "[]".to_string())
}

/// A run's relations without its configured prompt's record (its
/// variables are content), once a message of its thread is erased.
pub(crate) fn relations_without(relations: &str, _: &Message) -> Option<String> {
    let mut relations: Vec<serde_json::Value> = serde_json::from_str(relations).ok()?;
    let before = relations.len();
    relations.retain(|relation| relation.get("kind").and_then(|k| k.as_str()) != Some("prompt"));
    (relations.len() < before).then(|| serde_json::Value::from(relations).to_string())
}

/// A conversation's stored settings without what the erased message gave
/// them: the title made from it, and the copies it held (a recorded chat's
/// system text and sources' texts, which render into every turn's system
/// message).
pub(crate) fn meta_without(meta: &str, original: &Message) -> Option<String> {
    let mut settings: serde_json::Value = serde_json::from_str(meta).ok()?;
    let settings_object = settings.as_object_mut()?;
    let title = settings_object.get("title").and_then(|t| t.as_str());
    let mut changed = title.is_some() && title.map(str::to_string) == derived_title(original);
    if changed {
        settings_object.remove("title");
    }
    if let Some(recorded) = settings_object.get_mut("recorded") {
        changed |= erase_copy(recorded.get_mut("system"), original);
        if let Some(sources) = recorded.get_mut("sources").and_then(|s| s.as_array_mut()) {
            for source in sources {
                changed |= erase_copy(source.get_mut("text"), original);
            }
        }
    }
    changed.then(|| settings.to_string())
}

/// Why a comparator decided (a replayed turn's reason, or a rerun's per
/// sample), once a message of the compared threads is erased: every
/// reason becomes [`ERASED_TEXT`], as it may quote either answer.
pub(crate) fn detail_without(detail: &str, _: &Message) -> Option<String> {
    let mut detail: serde_json::Value = serde_json::from_str(detail).ok()?;
    let erased = || serde_json::Value::from(ERASED_TEXT);
    let changed = match detail.get_mut("why")? {
        why @ serde_json::Value::String(_) if *why != erased() => {
            *why = erased();
            true
        }
        serde_json::Value::Array(reasons) if reasons.iter().any(|why| *why != erased()) => {
            for why in reasons.iter_mut() {
                *why = erased();
            }
            true
        }
        _ => false,
    };
    changed.then(|| detail.to_string())
}

/// A replay's change without the copies the erased message held (its
/// replacement system prompt and source texts, which its replayed requests
/// carried); `None` when it held none.
pub(crate) fn change_without(change: &str, original: &Message) -> Option<String> {
    let mut change: serde_json::Value = serde_json::from_str(change).ok()?;
    let mut changed = erase_copy(change.get_mut("system"), original);
    if let Some(sources) = change
        .get_mut("replace_sources")
        .and_then(|s| s.as_object_mut())
    {
        for text in sources.values_mut() {
            changed |= erase_copy(Some(text), original);
        }
    }
    changed.then(|| change.to_string())
}

/// A replay's selection without the search words the erased message held
/// (`--search`: typed by the user, but the words it found are gone);
/// `None` when it held none.
pub(crate) fn selection_without(selection: &str, original: &Message) -> Option<String> {
    let mut selection: serde_json::Value = serde_json::from_str(selection).ok()?;
    erase_copy(selection.get_mut("search"), original).then(|| selection.to_string())
}

impl Store {
    /// How many erasures (redactions, and deletions that removed messages)
    /// this database has seen: a server that keeps content in memory (the
    /// proxy's recent threads) drops it when this changes, so erased
    /// content leaves the process before it answers again. One point read.
    pub fn erasures(&self) -> Result<u64> {
        self.wait(self.nonblocking().erasures())
    }

    /// Drop the content this handle keeps in memory: the request bodies it
    /// stored last, kept so that the next body of their conversations is
    /// cut from where it differs. Deletion and redaction through this
    /// handle do it themselves; a server that learns from
    /// [`Store::erasures`] that another process erased something calls it.
    pub fn drop_cached_content(&self) {
        self.backend().recent_bodies().clear();
    }

    /// Erase the content of `node` in place (design invariant 12): each part
    /// becomes a [`Part::Erased`] keeping the original kind, small fields
    /// (tool names and call ids, media types) and payload digest, with who
    /// erased it (`erased_by`, free text), when and why (`reason`). The id
    /// still checks, so every thread through the node loads as before and
    /// `verify` counts it as erased, not tampered; the search index, blobs
    /// only it used, its texts' cached embeddings, the request bodies,
    /// events and configured prompts' records (their variables) of the runs
    /// whose threads pass through it, and the titles
    /// made from it of the conversations holding it lose it too.
    /// The freed bytes stay in the database file until
    /// [`Store::vacuum`]. Blocking, like [`Store::forget`].
    pub fn redact(&self, node: NodeId, erased_by: &str, reason: &str) -> Result<Redacted> {
        let stored = self.node(node)?;
        let at = crate::records::now_ms();
        let erased = Message::new(
            stored.message.role,
            stored
                .message
                .parts
                .iter()
                .map(|part| Erased::part(part, erased_by, at, reason))
                .collect(),
        );
        if node_id(stored.parent.as_ref(), &erased) != node {
            return Err(crate::StoreError::MalformedRow(format!(
                "node {} does not match its content; run `skein verify` before erasing it",
                node.short()
            )));
        }
        let parts = stored
            .message
            .parts
            .iter()
            .filter(|part| !matches!(part, Part::Erased(_)))
            .count();
        let scrubbed = self.backend().redact(node, &stored.message, &erased);
        self.drop_cached_content();
        let scrubbed = scrubbed?;
        Ok(Redacted {
            node,
            parts,
            blobs: scrubbed.blobs,
            embeddings: scrubbed.embeddings,
            body_pieces_erased: scrubbed.body_pieces,
            copies: scrubbed.copies,
        })
    }

    /// Rewrite the database so that deleted and erased bytes leave its file:
    /// SQLite `VACUUM` with `secure_delete` (and a WAL checkpoint that
    /// truncates the log); PostgreSQL `VACUUM FULL` of the tables that hold
    /// content. Takes the database for itself while it runs: run it when
    /// nothing else writes.
    pub fn vacuum(&self) -> Result<()> {
        self.backend().vacuum()
    }
}

/// The candidates' fate: garbage (to delete, children before parents) and
/// how many are kept, with the boundary (the kept candidates that are
/// seeds: where a remaining thread or reference starts to need them).
pub(crate) struct Sweep<K> {
    pub garbage: Vec<K>,
    pub kept: u64,
    pub boundary: Vec<K>,
}

/// Decide which candidates are garbage. `candidates` are the nodes that
/// could have become unreachable, each with its parent, in any order,
/// closed under ancestry (every candidate's parent is a candidate);
/// `order` gives each a topological rank (its `seq`). A candidate is kept
/// when it is a seed or lies above one.
pub(crate) fn sweep<K: Clone + Eq + Hash>(
    candidates: &[(K, Option<K>, i64)],
    seeds: &HashSet<K>,
) -> Sweep<K> {
    let parents: HashMap<&K, Option<&K>> = candidates
        .iter()
        .map(|(node, parent, _)| (node, parent.as_ref()))
        .collect();
    let mut kept: HashSet<&K> = HashSet::new();
    for seed in seeds {
        let mut next = parents.get_key_value(seed).map(|(node, _)| *node);
        while let Some(node) = next {
            if !kept.insert(node) {
                break;
            }
            next = parents.get(node).copied().flatten();
        }
    }
    let mut garbage: Vec<&(K, Option<K>, i64)> = candidates
        .iter()
        .filter(|(node, _, _)| !kept.contains(node))
        .collect();
    garbage.sort_by_key(|(_, _, seq)| std::cmp::Reverse(*seq));
    let mut boundary: Vec<&(K, Option<K>, i64)> = candidates
        .iter()
        .filter(|(node, _, _)| seeds.contains(node))
        .collect();
    boundary.sort_by_key(|(_, _, seq)| std::cmp::Reverse(*seq));
    Sweep {
        garbage: garbage
            .into_iter()
            .map(|(node, _, _)| node.clone())
            .collect(),
        kept: kept.len() as u64,
        boundary: boundary
            .into_iter()
            .take(BOUNDARY_EXAMINED + 1)
            .map(|(node, _, _)| node.clone())
            .collect(),
    }
}

/// The title a conversation whose first prompt was `original` was given
/// (the turn layer's `title_from`): a redaction removes it too.
pub(crate) fn derived_title(original: &Message) -> Option<String> {
    skein_core::ConversationSettings::title_from(&original.joined_text())
}

/// The digests the embedding cache keys a removed message's texts by (a
/// text embedded by a recorded chat is keyed by the digest of its bytes).
pub(crate) fn embedded_digests(message: &Message) -> Vec<Digest> {
    message
        .parts
        .iter()
        .filter_map(|part| match part {
            Part::Text { text } => Some(Digest::of(text.as_bytes())),
            Part::ToolResult(result) => Some(Digest::of(result.content.as_bytes())),
            _ => None,
        })
        .collect()
}

impl AsyncStore<'_> {
    /// [`Store::erasures`].
    pub async fn erasures(&self) -> Result<u64> {
        self.store.backend().erasures().await
    }
}

#[cfg(test)]
mod tests {
    use super::sweep;
    use std::collections::HashSet;

    /// 1 ← 2 ← 3 ← 4, and 2 ← 5: a seed at 5 keeps 5, 2 and 1; 3 and 4 go,
    /// children first.
    #[test]
    fn a_seed_keeps_its_ancestors_and_the_rest_goes_deepest_first() {
        let candidates = vec![
            (1, None, 1),
            (2, Some(1), 2),
            (3, Some(2), 3),
            (4, Some(3), 4),
            (5, Some(2), 5),
        ];
        let swept = sweep(&candidates, &HashSet::from([5]));
        assert_eq!(swept.garbage, vec![4, 3]);
        assert_eq!(swept.kept, 3);
        assert_eq!(swept.boundary, vec![5]);
    }

    #[test]
    fn without_seeds_everything_goes_and_a_seed_at_the_root_keeps_only_it() {
        let candidates = vec![(1, None, 1), (2, Some(1), 2)];
        assert_eq!(sweep(&candidates, &HashSet::new()).garbage, vec![2, 1]);
        let swept = sweep(&candidates, &HashSet::from([1]));
        assert_eq!(swept.garbage, vec![2]);
        assert_eq!(swept.kept, 1);
    }
}
