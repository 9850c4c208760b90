/*!
Run records as both backends read them: the columns of a run row
([`RunColumns`], [`RawRun`]) turned into a [`RunRecord`], the relations
indexed in `run_links` (continuation, association, coordinator sequence),
and an offered tool rebuilt from its stored columns. The SQL is in
sqlite/runs.rs and postgres/runs.rs.
*/

use crate::error::{Result, StoreError};
use crate::records::{RunId, RunRecord, RunStatus, TurnStep};
use skein_core::ToolSpec;
use skein_core::usage::Link;

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
