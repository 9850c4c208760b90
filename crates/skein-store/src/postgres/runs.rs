/*!
Run records on PostgreSQL: one row per logical model call, the exact tool
set it offered (`run_tools`, by tool hash, each tool stored once) and the
relations usage totals follow (`run_links`).
A run's tools are read back with the run in the same query.
*/

use super::pipeline::{Param, Pipeline};
use super::{PgStore, bodies};
use crate::backend::BoxFuture;
use crate::bodies::{RequestBody, RunToStore};
use crate::error::{Result, StoreError};
use crate::offers::ToolOffer;
use crate::records::{ConversationId, RequestRef, RunId, RunRecord};
use crate::runs::{RawRun, RunColumns, Runs, run_links, tool_from_columns};
use deadpool_postgres::GenericClient;
use skein_core::{NodeId, ToolSpec, Usage};
use tokio_postgres::Row;
use tokio_postgres::types::ToSql;

/// Each run with its tools as parallel arrays in position order, so a list
/// of runs is one query.
const SELECT_RUN: &str =
    "SELECT r.id, r.conversation, r.input_head, r.output_head, r.model, r.provider,
        r.profile, r.backend, r.status, r.input_tokens, r.output_tokens, r.cache_read_tokens,
        r.cache_write_tokens, r.usage_complete, r.started, r.finished, r.error, r.annotations,
        r.options, r.relations, r.request_digest, r.events, r.finish_reason, r.turn, r.step,
        r.requested_model, r.response_model,
        ARRAY(SELECT t.name FROM run_tools rt JOIN tools t ON t.hash = rt.tool_hash
              WHERE rt.run_id = r.id ORDER BY rt.position),
        ARRAY(SELECT t.description FROM run_tools rt JOIN tools t ON t.hash = rt.tool_hash
              WHERE rt.run_id = r.id ORDER BY rt.position),
        ARRAY(SELECT t.input_schema FROM run_tools rt JOIN tools t ON t.hash = rt.tool_hash
              WHERE rt.run_id = r.id ORDER BY rt.position),
        r.client, r.request_len
     FROM runs r";

impl Runs for PgStore {
    #[cfg(any(test, feature = "testkit"))]
    fn record_run<'a>(&'a self, run: &'a RunRecord) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            write_retrying!(self, |tx| {
                let mut pipeline = Pipeline::new();
                let to_store = RunToStore::cut(run, None, None);
                queue_run(&mut pipeline, tx, &to_store, run.conversation.as_ref()).await?;
                pipeline.run().await?;
                Ok(())
            })
        })
    }

    fn run_record<'a>(&'a self, id: &'a RunId) -> BoxFuture<'a, Result<RunRecord>> {
        Box::pin(self.run_by_id(id))
    }

    fn request_body<'a>(&'a self, id: &'a RunId) -> BoxFuture<'a, Result<Option<RequestBody>>> {
        Box::pin(self.request_body_of(id))
    }

    fn runs_of_conversation<'a>(
        &'a self,
        id: &'a ConversationId,
    ) -> BoxFuture<'a, Result<Vec<RunRecord>>> {
        Box::pin(self.runs_in(id))
    }

    fn runs_producing(&self, node: NodeId) -> BoxFuture<'_, Result<Vec<RunRecord>>> {
        Box::pin(self.runs_with_head(node))
    }

    fn tool_offers<'a>(
        &'a self,
        conversation: &'a ConversationId,
        up_to_depth: Option<u64>,
    ) -> BoxFuture<'a, Result<Vec<ToolOffer>>> {
        Box::pin(PgStore::tool_offers(self, conversation, up_to_depth))
    }

    fn recent_runs(
        &self,
        limit: usize,
        without_replays: bool,
    ) -> BoxFuture<'_, Result<Vec<RunRecord>>> {
        let limit = limit.min(i64::MAX as usize) as i64;
        let only = if without_replays {
            format!("WHERE NOT ({})", crate::runs::replay_run("r.relations"))
        } else {
            String::new()
        };
        Box::pin(async move {
            self.query_runs(
                format!("{SELECT_RUN} {only} ORDER BY r.started DESC, r.id LIMIT $1"),
                &limit,
            )
            .await
        })
    }
}

impl PgStore {
    async fn run_by_id(&self, id: &RunId) -> Result<RunRecord> {
        self.query_runs(format!("{SELECT_RUN} WHERE r.id = $1"), &id.as_str())
            .await?
            .pop()
            .ok_or_else(|| StoreError::RunNotFound(id.to_string()))
    }

    async fn request_body_of(&self, id: &RunId) -> Result<Option<RequestBody>> {
        reading!(self, |client| {
            let row = client
                .query_opt(
                    "SELECT request_piece, request_digest, request_len FROM runs WHERE id = $1",
                    &[&id.as_str()],
                )
                .await?
                .ok_or_else(|| StoreError::RunNotFound(id.to_string()))?;
            let (Some(digest), Some(len)) = (
                row.get::<_, Option<Vec<u8>>>(1),
                row.get::<_, Option<i64>>(2),
            ) else {
                return Ok(None);
            };
            let digest = crate::bodies::digest_of(digest)?;
            bodies::load(client, id.as_str(), row.get(0), &digest, len)
                .await
                .map(Some)
        })
    }

    async fn runs_in(&self, id: &ConversationId) -> Result<Vec<RunRecord>> {
        self.query_runs(
            format!("{SELECT_RUN} WHERE r.conversation = $1 ORDER BY r.started, r.id"),
            &id.as_str(),
        )
        .await
    }

    async fn runs_with_head(&self, node: NodeId) -> Result<Vec<RunRecord>> {
        let head = node.0.as_slice();
        self.query_runs(
            format!("{SELECT_RUN} WHERE r.output_head = $1 ORDER BY r.started, r.id"),
            &head,
        )
        .await
    }

    async fn query_runs(&self, sql: String, param: &(dyn ToSql + Sync)) -> Result<Vec<RunRecord>> {
        let rows = self.rows(&sql, &[param]).await?;
        rows.iter().map(run_from_row).collect()
    }
}

/// Queue the insertion of a run as belonging to `conversation`, the tools
/// it offered (each stored once), its tool list and its request body's
/// pieces. A run already stored (a commit retried after its outcome was
/// unknown) is left as it is.
pub(crate) async fn queue_run<'c, C: GenericClient>(
    pipeline: &mut Pipeline<'c>,
    tx: &'c C,
    to_store: &RunToStore<'_>,
    conversation: Option<&ConversationId>,
) -> Result<()> {
    let run = to_store.run;
    let columns = RunColumns::of(run)?;
    let tokens = |n: Option<u64>| n.map(|n| n as i64);
    let body = match &to_store.body {
        Some(cut) => Some(bodies::queue(pipeline, tx, cut).await?),
        None => None,
    };
    let statement = tx
        .prepare_cached(
            "INSERT INTO runs(id, conversation, input_head, output_head, model, provider, profile, backend,
                 status, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, usage_complete,
                 started, finished, error, annotations, options, relations, request_piece, events,
                 finish_reason, turn, step, requested_model, response_model, client, request_digest,
                 request_len)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18,
                     $19, $20, $21, $22, $23, $24, $25, $26, $27, $28, $29, $30)
             ON CONFLICT (id) DO NOTHING",
        )
        .await?;
    let id = |id: &Option<NodeId>| id.as_ref().map(|id| id.0.to_vec());
    let params: Vec<Param> = vec![
        Box::new(run.id.0.clone()),
        Box::new(conversation.map(|c| c.0.clone())),
        Box::new(id(&run.input_head)),
        Box::new(id(&run.output_head)),
        Box::new(run.model.clone()),
        Box::new(run.provider.clone()),
        Box::new(run.profile.clone()),
        Box::new(run.backend.clone()),
        Box::new(run.status.as_str()),
        Box::new(tokens(run.usage.input_tokens)),
        Box::new(tokens(run.usage.output_tokens)),
        Box::new(tokens(run.usage.cache_read_tokens)),
        Box::new(tokens(run.usage.cache_write_tokens)),
        Box::new(run.usage_complete),
        Box::new(run.started_ms),
        Box::new(run.finished_ms),
        Box::new(run.error.clone()),
        Box::new(columns.annotations),
        Box::new(columns.options),
        Box::new(columns.relations),
        Box::new(
            body.as_ref()
                .and_then(|body| body.last)
                .map(|last| last.as_bytes().to_vec()),
        ),
        Box::new(columns.events),
        Box::new(columns.finish_reason),
        Box::new(columns.turn),
        Box::new(columns.step),
        Box::new(run.requested_model.clone()),
        Box::new(run.response_model.clone()),
        Box::new(run.client.clone()),
        Box::new(body.as_ref().map(|body| body.digest.as_bytes().to_vec())),
        Box::new(body.as_ref().map(|body| body.len as i64)),
    ];
    pipeline.push(tx, statement, params);
    let (kinds, targets): (Vec<&str>, Vec<&str>) = run_links(run).unzip();
    if !kinds.is_empty() {
        let statement = tx
            .prepare_cached(
                "INSERT INTO run_links(kind, target, run_id)
                 SELECT k, t, $3 FROM unnest($1::text[], $2::text[]) AS l(k, t)
                 ON CONFLICT DO NOTHING",
            )
            .await?;
        let to_owned = |list: Vec<&str>| list.into_iter().map(str::to_string).collect::<Vec<_>>();
        let params: Vec<Param> = vec![
            Box::new(to_owned(kinds)),
            Box::new(to_owned(targets)),
            Box::new(run.id.0.clone()),
        ];
        pipeline.push(tx, statement, params);
    }
    if run.tools.is_empty() {
        return Ok(());
    }
    let mut hashes = Vec::with_capacity(run.tools.len());
    let mut names: Vec<String> = Vec::with_capacity(run.tools.len());
    let mut descriptions: Vec<String> = Vec::with_capacity(run.tools.len());
    let mut schemas = Vec::with_capacity(run.tools.len());
    for tool in &run.tools {
        hashes.push(tool.hash().as_bytes().to_vec());
        names.push(tool.name.clone());
        descriptions.push(tool.description.clone());
        schemas.push(serde_json::to_string(&tool.input_schema)?);
    }
    let statement = tx
        .prepare_cached(
            "INSERT INTO tools(hash, name, description, input_schema)
             SELECT * FROM unnest($1::bytea[], $2::text[], $3::text[], $4::text[])
             ON CONFLICT DO NOTHING",
        )
        .await?;
    let params: Vec<Param> = vec![
        Box::new(hashes.clone()),
        Box::new(names),
        Box::new(descriptions),
        Box::new(schemas),
    ];
    pipeline.push(tx, statement, params);
    let positions: Vec<i64> = (0..run.tools.len() as i64).collect();
    let statement = tx
        .prepare_cached(
            "INSERT INTO run_tools(run_id, position, tool_hash)
             SELECT $1, * FROM unnest($2::int8[], $3::bytea[])
             ON CONFLICT DO NOTHING",
        )
        .await?;
    let params: Vec<Param> = vec![
        Box::new(run.id.0.clone()),
        Box::new(positions),
        Box::new(hashes),
    ];
    pipeline.push(tx, statement, params);
    Ok(())
}

fn run_from_row(row: &Row) -> Result<RunRecord> {
    let id = |index: usize| {
        row.get::<_, Option<&[u8]>>(index)
            .and_then(NodeId::from_slice)
    };
    let tokens = |index: usize| row.get::<_, Option<i64>>(index).map(|n| n as u64);
    let mut record = RunRecord::new(row.get::<_, String>(4), row.get::<_, String>(5));
    record.id = RunId(row.get(0));
    record.conversation = row.get::<_, Option<String>>(1).map(ConversationId);
    record.input_head = id(2);
    record.output_head = id(3);
    record.profile = row.get(6);
    record.backend = row.get(7);
    record.usage = Usage {
        input_tokens: tokens(9),
        output_tokens: tokens(10),
        cache_read_tokens: tokens(11),
        cache_write_tokens: tokens(12),
    };
    record.usage_complete = row.get(13);
    record.started_ms = row.get(14);
    record.finished_ms = row.get(15);
    record.error = row.get(16);
    if let Some(digest) = row.get::<_, Option<Vec<u8>>>(20) {
        record.request_ref = Some(RequestRef {
            digest: crate::bodies::digest_of(digest)?,
            len: row.get::<_, i64>(31) as u64,
        });
    }
    record.requested_model = row.get(25);
    record.response_model = row.get(26);
    record.client = row.get(30);
    let names: Vec<String> = row.get(27);
    let descriptions: Vec<String> = row.get(28);
    let schemas: Vec<String> = row.get(29);
    let tools = names
        .into_iter()
        .zip(descriptions)
        .zip(&schemas)
        .map(|((name, description), schema)| tool_from_columns(name, description, schema))
        .collect::<Result<Vec<ToolSpec>>>()?;
    RawRun {
        record,
        status: row.get(8),
        annotations: row.get(17),
        options: row.get(18),
        relations: row.get(19),
        events: row.get(21),
        finish_reason: row.get(22),
        turn: row.get(23),
        step: row.get(24),
    }
    .finish(tools)
}
