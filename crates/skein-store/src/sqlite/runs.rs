/*!
Run records on SQLite: one row per logical model call, with its usage,
status, annotations, relations and the exact tool set it offered
(`run_tools`, by tool hash, so a tool offered in a thousand runs is stored
once). The relations usage totals follow are also indexed in `run_links`
(kind, target, run), so the runs related to a run or a sequence are found
without reading every run.
*/

use super::{SqliteStore, bodies};
use crate::backend::BoxFuture;
use crate::bodies::{RequestBody, RunToStore};
use crate::error::{Result, StoreError};
use crate::offers::ToolOffer;
use crate::records::{ConversationId, RequestRef, RunId, RunRecord};
use crate::runs::{RawRun, RunColumns, Runs, replay_run, run_links, tool_from_columns};
use rusqlite::{Connection, OptionalExtension, Row, params};
use skein_core::{NodeId, ToolSpec, Usage};

const SELECT_RUN: &str =
    "SELECT id, conversation, input_head, output_head, model, provider, profile,
        backend, status, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens,
        usage_complete, started, finished, error, annotations, options, relations, request_digest,
        events, finish_reason, turn, step, requested_model, response_model, client, request_len
     FROM runs";

impl Runs for SqliteStore {
    #[cfg(any(test, feature = "testkit"))]
    fn record_run<'a>(&'a self, run: &'a RunRecord) -> BoxFuture<'a, Result<()>> {
        let run = run.clone();
        self.deferred(move |store| store.record_run(&run))
    }

    fn run_record<'a>(&'a self, id: &'a RunId) -> BoxFuture<'a, Result<RunRecord>> {
        let id = id.clone();
        self.point_read(move |store| store.run_record(&id))
    }

    fn request_body<'a>(&'a self, id: &'a RunId) -> BoxFuture<'a, Result<Option<RequestBody>>> {
        let id = id.clone();
        self.deferred(move |store| store.request_body(&id))
    }

    fn runs_of_conversation<'a>(
        &'a self,
        id: &'a ConversationId,
    ) -> BoxFuture<'a, Result<Vec<RunRecord>>> {
        let id = id.clone();
        self.deferred(move |store| store.runs_of_conversation(&id))
    }

    fn runs_producing(&self, node: NodeId) -> BoxFuture<'_, Result<Vec<RunRecord>>> {
        self.point_read(move |store| store.runs_producing(node))
    }

    fn recent_runs(
        &self,
        limit: usize,
        without_replays: bool,
    ) -> BoxFuture<'_, Result<Vec<RunRecord>>> {
        self.deferred(move |store| store.recent_runs(limit, without_replays))
    }

    fn tool_offers<'a>(
        &'a self,
        conversation: &'a ConversationId,
        up_to_depth: Option<u64>,
    ) -> BoxFuture<'a, Result<Vec<ToolOffer>>> {
        let conversation = conversation.clone();
        self.point_read(move |store| store.tool_offers(&conversation, up_to_depth))
    }
}

impl SqliteStore {
    #[cfg(any(test, feature = "testkit"))]
    /// Record a run on its own (a failed run adds no node, but keeps its
    /// record). Runs that produce a turn go through [`Store::commit_turn`].
    pub(crate) fn record_run(&self, run: &RunRecord) -> Result<()> {
        self.write(|tx| {
            let to_store = RunToStore::cut(run, None, None);
            insert_run(tx, &to_store, run.conversation.as_ref())
        })
    }

    pub(crate) fn run_record(&self, id: &RunId) -> Result<RunRecord> {
        self.read(|conn| {
            let record = conn
                .prepare_cached(&format!("{SELECT_RUN} WHERE id = ?1"))?
                .query_row([id.as_str()], raw_run)
                .optional()?
                .ok_or_else(|| StoreError::RunNotFound(id.to_string()))?;
            finish_run(conn, record)
        })
    }

    pub(crate) fn request_body(&self, id: &RunId) -> Result<Option<RequestBody>> {
        self.read(|conn| {
            let row = conn
                .prepare_cached(
                    "SELECT request_piece, request_digest, request_len FROM runs WHERE id = ?1",
                )?
                .query_row([id.as_str()], |row| {
                    Ok((
                        row.get::<_, Option<Vec<u8>>>(0)?,
                        row.get::<_, Option<Vec<u8>>>(1)?,
                        row.get::<_, Option<i64>>(2)?,
                    ))
                })
                .optional()?
                .ok_or_else(|| StoreError::RunNotFound(id.to_string()))?;
            let (last, Some(digest), Some(len)) = row else {
                return Ok(None);
            };
            let digest = crate::bodies::digest_of(digest)?;
            bodies::load(conn, id.as_str(), last, &digest, len).map(Some)
        })
    }

    pub(crate) fn runs_of_conversation(&self, id: &ConversationId) -> Result<Vec<RunRecord>> {
        self.query_runs(
            &format!("{SELECT_RUN} WHERE conversation = ?1 ORDER BY started, id"),
            id.as_str(),
        )
    }

    /// The runs that produced `node` (many runs may produce one node).
    pub(crate) fn runs_producing(&self, node: NodeId) -> Result<Vec<RunRecord>> {
        self.query_runs(
            &format!("{SELECT_RUN} WHERE output_head = ?1 ORDER BY started, id"),
            node.as_bytes(),
        )
    }

    /// The most recent runs, newest first.
    pub(crate) fn recent_runs(
        &self,
        limit: usize,
        without_replays: bool,
    ) -> Result<Vec<RunRecord>> {
        let only = match without_replays {
            true => format!("WHERE NOT ({})", replay_run("relations")),
            false => String::new(),
        };
        self.query_runs(
            &format!("{SELECT_RUN} {only} ORDER BY started DESC, id LIMIT ?1"),
            limit as i64,
        )
    }
}

impl SqliteStore {
    fn query_runs(&self, sql: &str, param: impl rusqlite::ToSql) -> Result<Vec<RunRecord>> {
        self.read(|conn| {
            let mut stmt = conn.prepare_cached(sql)?;
            let raw = stmt
                .query_map([param], raw_run)?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            raw.into_iter()
                .map(|record| finish_run(conn, record))
                .collect()
        })
    }
}

/// Insert a run as belonging to `conversation` (a turn's runs belong to the
/// conversation it landed in, whatever their own field says), with its
/// request body's pieces.
pub(crate) fn insert_run(
    conn: &Connection,
    to_store: &RunToStore<'_>,
    conversation: Option<&ConversationId>,
) -> Result<()> {
    let run = to_store.run;
    let columns = RunColumns::of(run)?;
    // A run written again (a repeated commit) finds its body's pieces
    // stored: nothing more is written.
    let body = to_store
        .body
        .as_ref()
        .map(|cut| bodies::store(conn, cut))
        .transpose()?;
    conn.prepare_cached(
        "INSERT INTO runs(id, conversation, input_head, output_head, model, provider, profile, backend,
             status, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, usage_complete,
             started, finished, error, annotations, options, relations, request_piece, events,
             finish_reason, turn, step, requested_model, response_model, client, request_digest,
             request_len)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19,
                 ?20, ?21, ?22, ?23, ?24, ?25, ?26, ?27, ?28, ?29, ?30)
         ON CONFLICT(id) DO NOTHING",
    )?
    .execute(params![
        run.id.as_str(),
        conversation.map(ConversationId::as_str),
        run.input_head.as_ref().map(NodeId::as_bytes),
        run.output_head.as_ref().map(NodeId::as_bytes),
        run.model,
        run.provider,
        run.profile,
        run.backend,
        run.status.as_str(),
        run.usage.input_tokens.map(|n| n as i64),
        run.usage.output_tokens.map(|n| n as i64),
        run.usage.cache_read_tokens.map(|n| n as i64),
        run.usage.cache_write_tokens.map(|n| n as i64),
        run.usage_complete,
        run.started_ms,
        run.finished_ms,
        run.error,
        columns.annotations,
        columns.options,
        columns.relations,
        body.as_ref()
            .and_then(|body| body.last)
            .map(|last| last.as_bytes().to_vec()),
        columns.events,
        columns.finish_reason,
        columns.turn,
        columns.step,
        run.requested_model,
        run.response_model,
        run.client,
        body.as_ref().map(|body| body.digest.as_bytes().to_vec()),
        body.as_ref().map(|body| body.len as i64),
    ])?;
    let mut insert_link = conn.prepare_cached(
        "INSERT INTO run_links(kind, target, run_id) VALUES (?1, ?2, ?3) ON CONFLICT DO NOTHING",
    )?;
    for (kind, target) in run_links(run) {
        insert_link.execute(params![kind, target, run.id.as_str()])?;
    }
    let mut insert_tool = conn.prepare_cached(
        "INSERT INTO tools(hash, name, description, input_schema) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT DO NOTHING",
    )?;
    let mut link = conn.prepare_cached(
        "INSERT INTO run_tools(run_id, position, tool_hash) VALUES (?1, ?2, ?3)
             ON CONFLICT DO NOTHING",
    )?;
    for (position, tool) in run.tools.iter().enumerate() {
        let hash = tool.hash();
        insert_tool.execute(params![
            hash.as_bytes(),
            tool.name,
            tool.description,
            serde_json::to_string(&tool.input_schema)?,
        ])?;
        link.execute(params![run.id.as_str(), position as i64, hash.as_bytes()])?;
    }
    Ok(())
}

fn raw_run(row: &Row<'_>) -> rusqlite::Result<RawRun> {
    let opt_id = |index: usize| -> rusqlite::Result<Option<Vec<u8>>> { row.get(index) };
    let tokens = |index: usize| -> rusqlite::Result<Option<u64>> {
        Ok(row.get::<_, Option<i64>>(index)?.map(|n| n as u64))
    };
    let mut record = RunRecord::new(row.get::<_, String>(4)?, row.get::<_, String>(5)?);
    record.id = RunId(row.get(0)?);
    record.conversation = row.get::<_, Option<String>>(1)?.map(ConversationId);
    record.input_head = opt_id(2)?.as_deref().and_then(NodeId::from_slice);
    record.output_head = opt_id(3)?.as_deref().and_then(NodeId::from_slice);
    record.profile = row.get(6)?;
    record.backend = row.get(7)?;
    record.usage = Usage {
        input_tokens: tokens(9)?,
        output_tokens: tokens(10)?,
        cache_read_tokens: tokens(11)?,
        cache_write_tokens: tokens(12)?,
    };
    record.usage_complete = row.get(13)?;
    record.started_ms = row.get(14)?;
    record.finished_ms = row.get(15)?;
    record.error = row.get(16)?;
    if let Some(digest) = row.get::<_, Option<Vec<u8>>>(20)? {
        record.request_ref = Some(RequestRef {
            digest: crate::bodies::digest_of(digest).map_err(|error| {
                rusqlite::Error::FromSqlConversionFailure(
                    20,
                    rusqlite::types::Type::Blob,
                    Box::new(error),
                )
            })?,
            len: row.get::<_, i64>(28)? as u64,
        });
    }
    record.requested_model = row.get(25)?;
    record.response_model = row.get(26)?;
    record.client = row.get(27)?;
    Ok(RawRun {
        record,
        status: row.get(8)?,
        annotations: row.get(17)?,
        options: row.get(18)?,
        relations: row.get(19)?,
        events: row.get(21)?,
        finish_reason: row.get(22)?,
        turn: row.get(23)?,
        step: row.get(24)?,
    })
}

fn finish_run(conn: &Connection, raw: RawRun) -> Result<RunRecord> {
    let tools = run_tools(conn, &raw.record.id)?;
    raw.finish(tools)
}

fn run_tools(conn: &Connection, id: &RunId) -> Result<Vec<ToolSpec>> {
    let mut stmt = conn.prepare_cached(
        "SELECT t.name, t.description, t.input_schema FROM run_tools r JOIN tools t ON t.hash = r.tool_hash
         WHERE r.run_id = ?1 ORDER BY r.position",
    )?;
    let rows = stmt.query_map([id.as_str()], |row| {
        Ok((
            row.get::<_, String>(0)?,
            row.get::<_, String>(1)?,
            row.get::<_, String>(2)?,
        ))
    })?;
    let mut tools = Vec::new();
    for row in rows {
        let (name, description, schema) = row?;
        tools.push(tool_from_columns(name, description, &schema)?);
    }
    Ok(tools)
}
