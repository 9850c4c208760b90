/*!
Run records as both backends read them: the columns of a run row
([`RunColumns`], [`RawRun`]) turned into a [`RunRecord`], the relations
indexed in `run_links` (continuation, association, coordinator sequence),
and an offered tool rebuilt from its stored columns. The SQL is in
sqlite/runs.rs and postgres/runs.rs.

This module declares `Runs`, the backend trait sqlite/runs.rs and
postgres/runs.rs implement, and holds the public operations that call it:
the async ones on `AsyncStore` and their blocking forms on `Store`.
*/

use crate::async_store::AsyncStore;
use crate::backend::BoxFuture;
use crate::bodies::RequestBody;
use crate::error::{Result, StoreError};
use crate::offers::ToolOffer;
use crate::records::{ConversationId, RunId, RunRecord, RunStatus, TurnStep};
use crate::store::Store;
use skein_core::usage::Link;
use skein_core::{NodeId, ToolSpec};

/// Run records: the SQL is in sqlite/runs.rs and postgres/runs.rs.
pub(crate) trait Runs {
    #[cfg(any(test, feature = "testkit"))]
    fn record_run<'a>(&'a self, run: &'a RunRecord) -> BoxFuture<'a, Result<()>>;
    fn run_record<'a>(&'a self, id: &'a RunId) -> BoxFuture<'a, Result<RunRecord>>;
    /// The request body run `id` kept, put together from its pieces
    /// (crate::bodies); `None` when it kept none.
    fn request_body<'a>(&'a self, id: &'a RunId) -> BoxFuture<'a, Result<Option<RequestBody>>>;
    fn runs_of_conversation<'a>(
        &'a self,
        id: &'a ConversationId,
    ) -> BoxFuture<'a, Result<Vec<RunRecord>>>;
    fn runs_producing(&self, node: NodeId) -> BoxFuture<'_, Result<Vec<RunRecord>>>;
    /// What `conversation`'s calls offered, one row per change, up to a
    /// depth of its thread (crate::offers).
    fn tool_offers<'a>(
        &'a self,
        conversation: &'a ConversationId,
        up_to_depth: Option<u64>,
    ) -> BoxFuture<'a, Result<Vec<ToolOffer>>>;
    /// The newest runs; `without_replays` leaves out the ones a replay
    /// made (a `replay` or `replay.judge` relation: `runs::replay_run`).
    fn recent_runs(
        &self,
        limit: usize,
        without_replays: bool,
    ) -> BoxFuture<'_, Result<Vec<RunRecord>>>;
}

/// Whether the run whose relations are in the column `relations` is one a
/// replay made (a `replay` or `replay.judge` relation:
/// [`Relation::is_replays`](skein_core::Relation::is_replays), the same
/// rule in memory), the same SQL on both backends. What `skein log` and
/// search leave out of the user's history.
pub(crate) fn replay_run(relations: &str) -> String {
    format!(
        "{relations} LIKE '%\"kind\":\"{}%'",
        skein_core::run::REPLAY_KINDS
    )
}

/// Whether the node in the column `node` is a message only runs a replay
/// made sent or produced: some run's input or output, and no other run's
/// (a replayed answer the original turn also reached, or a question re-sent
/// as it was, stays the user's; a judge's prompt, which quotes both
/// answers, is the replay's).
pub(crate) fn replay_only_message(node: &str) -> String {
    let replay = replay_run("rr.relations");
    format!(
        "((EXISTS (SELECT 1 FROM runs rr WHERE rr.output_head = {node}) \
           OR EXISTS (SELECT 1 FROM runs rr WHERE rr.input_head = {node})) \
         AND NOT EXISTS (SELECT 1 FROM runs rr WHERE rr.output_head = {node} AND NOT ({replay})) \
         AND NOT EXISTS (SELECT 1 FROM runs rr WHERE rr.input_head = {node} AND NOT ({replay})))"
    )
}

/// The relations of `run` that `run_links` indexes, as (kind, target).
pub(crate) fn run_links(run: &RunRecord) -> impl Iterator<Item = (&'static str, &str)> {
    run.relations
        .iter()
        .filter_map(Link::of)
        .map(|(link, target)| (link.kind(), target))
}

/// A run's columns that are not stored as they are in the record: JSON
/// text, and the recorded-chat position as two integers. Both backends
/// write them from here.
pub(crate) struct RunColumns {
    pub annotations: String,
    pub options: String,
    pub relations: String,
    pub events: String,
    pub finish_reason: Option<String>,
    pub turn: Option<i64>,
    pub step: Option<i64>,
}

impl RunColumns {
    pub(crate) fn of(run: &RunRecord) -> Result<RunColumns> {
        Ok(RunColumns {
            annotations: serde_json::to_string(&run.annotations)?,
            options: serde_json::to_string(&run.options)?,
            relations: serde_json::to_string(&run.relations)?,
            events: serde_json::to_string(&run.events)?,
            finish_reason: run
                .finish_reason
                .as_ref()
                .map(serde_json::to_string)
                .transpose()?,
            turn: run.turn.map(|at| i64::from(at.turn)),
            step: run.turn.map(|at| i64::from(at.step)),
        })
    }
}

/// A run row before its tool set and JSON columns are filled in.
pub(crate) struct RawRun {
    pub record: RunRecord,
    pub annotations: String,
    pub options: String,
    pub relations: String,
    pub events: String,
    pub status: String,
    pub finish_reason: Option<String>,
    pub turn: Option<i64>,
    pub step: Option<i64>,
}

impl RawRun {
    /// Parse the status and JSON columns and attach the run's tools.
    pub(crate) fn finish(self, tools: Vec<ToolSpec>) -> Result<RunRecord> {
        let mut record = self.record;
        record.status = RunStatus::parse(&self.status).ok_or_else(|| {
            StoreError::MalformedRow(format!("run {} has status `{}`", record.id, self.status))
        })?;
        record.annotations = serde_json::from_str(&self.annotations)?;
        record.options = serde_json::from_str(&self.options)?;
        record.relations = serde_json::from_str(&self.relations)?;
        record.events = serde_json::from_str(&self.events)?;
        record.finish_reason = self
            .finish_reason
            .as_deref()
            .map(serde_json::from_str)
            .transpose()?;
        record.turn = match (self.turn, self.step) {
            (Some(turn), Some(step)) => Some(TurnStep {
                turn: u32::try_from(turn).map_err(|_| bad_position(&record.id))?,
                step: u32::try_from(step).map_err(|_| bad_position(&record.id))?,
            }),
            (None, None) => None,
            _ => return Err(bad_position(&record.id)),
        };
        record.tools = tools;
        Ok(record)
    }
}

fn bad_position(run: &RunId) -> StoreError {
    StoreError::MalformedRow(format!("run {run} has a malformed turn and step"))
}

/// A stored tool: name, description and its input schema as JSON text.
pub(crate) fn tool_from_columns(
    name: String,
    description: String,
    schema: &str,
) -> Result<ToolSpec> {
    Ok(ToolSpec::new(
        name,
        description,
        serde_json::from_str(schema)?,
    ))
}

impl AsyncStore<'_> {
    #[cfg(any(test, feature = "testkit"))]
    /// [`Store::record_run`].
    pub async fn record_run(&self, run: &RunRecord) -> Result<()> {
        self.store.backend().record_run(run).await
    }

    /// [`Store::run_record`].
    pub async fn run_record(&self, id: &RunId) -> Result<RunRecord> {
        self.store.backend().run_record(id).await
    }

    /// [`Store::request_body`].
    pub async fn request_body(&self, id: &RunId) -> Result<Option<RequestBody>> {
        self.store.backend().request_body(id).await
    }

    /// [`Store::runs_of_conversation`].
    pub async fn runs_of_conversation(&self, id: &ConversationId) -> Result<Vec<RunRecord>> {
        self.store.backend().runs_of_conversation(id).await
    }

    /// [`Store::runs_producing`].
    pub async fn runs_producing(&self, node: NodeId) -> Result<Vec<RunRecord>> {
        self.store.backend().runs_producing(node).await
    }

    /// [`Store::recent_runs`].
    pub async fn recent_runs(&self, limit: usize) -> Result<Vec<RunRecord>> {
        self.store.backend().recent_runs(limit, false).await
    }

    /// What `conversation`'s own calls offered, one row per change of a
    /// tool's schema, oldest first, up to `up_to_depth` of its thread (all
    /// without it): what schema-drift warnings start from, read without its
    /// runs. A fork's rows start after its origin's (read those up to the
    /// fork's node).
    pub async fn tool_offers(
        &self,
        conversation: &ConversationId,
        up_to_depth: Option<u64>,
    ) -> Result<Vec<ToolOffer>> {
        self.store
            .backend()
            .tool_offers(conversation, up_to_depth)
            .await
    }
}

impl Store {
    #[cfg(any(test, feature = "testkit"))]
    /// Record a run on its own, as belonging to its `conversation`. Turns,
    /// failed ones included, go through [`Store::commit_turn`].
    pub fn record_run(&self, run: &RunRecord) -> Result<()> {
        self.wait(self.nonblocking().record_run(run))
    }

    pub fn run_record(&self, id: &RunId) -> Result<RunRecord> {
        self.wait(self.nonblocking().run_record(id))
    }

    /// The exact request body run `id` kept (a proxied run's), put
    /// together from its content-addressed pieces and checked against the
    /// digest the run recorded; where erasure took pieces of it, what is
    /// left with the erased spans named. `None` when the run kept no body;
    /// [`StoreError::RunNotFound`] when there is no such run.
    pub fn request_body(&self, id: &RunId) -> Result<Option<RequestBody>> {
        self.wait(self.nonblocking().request_body(id))
    }

    /// The runs of a conversation, oldest first.
    pub fn runs_of_conversation(&self, id: &ConversationId) -> Result<Vec<RunRecord>> {
        self.wait(self.nonblocking().runs_of_conversation(id))
    }

    /// The runs that produced `node` (many runs may produce one node).
    pub fn runs_producing(&self, node: NodeId) -> Result<Vec<RunRecord>> {
        self.wait(self.nonblocking().runs_producing(node))
    }

    /// [`AsyncStore::tool_offers`]: what `conversation`'s own calls
    /// offered, one row per change of a tool's schema, up to a depth.
    pub fn tool_offers(
        &self,
        conversation: &ConversationId,
        up_to_depth: Option<u64>,
    ) -> Result<Vec<ToolOffer>> {
        self.wait(self.nonblocking().tool_offers(conversation, up_to_depth))
    }

    /// The most recent runs, newest first.
    pub fn recent_runs(&self, limit: usize) -> Result<Vec<RunRecord>> {
        self.wait(self.nonblocking().recent_runs(limit))
    }

    /// The most recent runs of the user's own turns, newest first: the
    /// runs a replay made (its replayed answers) are left out, so a replay
    /// never fills `skein log`.
    pub fn recent_turns(&self, limit: usize) -> Result<Vec<RunRecord>> {
        self.wait(self.backend().recent_runs(limit, true))
    }
}
