/*!
Request bodies on PostgreSQL: `request_pieces` (schema 22), as on SQLite
(sqlite/bodies.rs): a body's skeleton's pieces go in with the run in one
`unnest` insert queued on the turn's pipeline (no round trip to learn what
is stored: a piece already there is skipped by its primary key, so only
new pieces are written). Reading one walks its chain and reads the nodes
its references name in one query.
*/

use super::PgStore;
use super::pipeline::{Param, Pipeline};
use crate::backend::Backend;
use crate::bodies::{
    Assembled, Bodies, BodyHead, BodyThreads, Cut, PieceContent, Recut, RequestBody, StoredPiece,
    cut, digest_of, input_messages,
};
use crate::codec::optional_node_id;
use crate::error::{Result, StoreError};
use crate::records::{ConversationId, RunId};
use deadpool_postgres::GenericClient;
use skein_core::{Digest, Message, NodeId, StoreKey, Thread};
use std::collections::{HashMap, HashSet};

/// Migration 22's SQL: the pieces, and what a run keeps of its body.
pub(crate) const REQUEST_PIECES: &str = r"
    CREATE TABLE IF NOT EXISTS request_pieces (
        id     BYTEA PRIMARY KEY,
        parent BYTEA,
        bytes  BYTEA,
        erased BYTEA,
        len    BIGINT NOT NULL
    );
    CREATE INDEX IF NOT EXISTS request_pieces_by_parent ON request_pieces(parent)
        WHERE parent IS NOT NULL;
    ALTER TABLE runs ADD COLUMN IF NOT EXISTS request_piece BYTEA;
    ALTER TABLE runs ADD COLUMN IF NOT EXISTS request_digest BYTEA;
    ALTER TABLE runs ADD COLUMN IF NOT EXISTS request_len BIGINT;
    CREATE INDEX IF NOT EXISTS runs_by_request_piece ON runs(request_piece)
        WHERE request_piece IS NOT NULL;
";

/// Queue the insertion of the pieces of a body's `cut`; what the run keeps
/// of it.
pub(crate) async fn queue<'c, C: GenericClient>(
    pipeline: &mut Pipeline<'c>,
    tx: &'c C,
    cut: &Cut<'_>,
) -> Result<BodyHead> {
    if cut.pieces.is_empty() {
        return Ok(cut.head.clone());
    }
    let statement = tx
        .prepare_cached(
            "INSERT INTO request_pieces(id, parent, bytes, len)
             SELECT * FROM unnest($1::bytea[], $2::bytea[], $3::bytea[], $4::int8[])
             ON CONFLICT (id) DO NOTHING",
        )
        .await?;
    let mut ids = Vec::with_capacity(cut.pieces.len());
    let mut parents = Vec::with_capacity(cut.pieces.len());
    let mut bytes = Vec::with_capacity(cut.pieces.len());
    let mut lens = Vec::with_capacity(cut.pieces.len());
    for piece in &cut.pieces {
        ids.push(piece.id.as_bytes().to_vec());
        parents.push(piece.parent.map(|parent| parent.as_bytes().to_vec()));
        bytes.push(cut.bytes(piece).to_vec());
        lens.push(piece.range.len() as i64);
    }
    let params: Vec<Param> = vec![
        Box::new(ids),
        Box::new(parents),
        Box::new(bytes),
        Box::new(lens),
    ];
    pipeline.push(tx, statement, params);
    Ok(cut.head.clone())
}

/// Store `body`'s pieces now (a migration's or a compaction's, outside a
/// turn's pipeline).
pub(crate) async fn store<C: GenericClient>(
    tx: &C,
    body: &str,
    messages: &[(NodeId, &Message)],
) -> Result<BodyHead> {
    let mut pipeline = Pipeline::new();
    let head = queue(&mut pipeline, tx, &cut(body.as_bytes(), messages)).await?;
    pipeline.run().await?;
    Ok(head)
}

/// Migration 22's code: every body kept whole in `runs.request`, oldest
/// first, moved into pieces, and the column dropped.
pub(crate) async fn move_whole_bodies(tx: &deadpool_postgres::Transaction<'_>) -> Result<()> {
    let has_request = tx
        .query_opt(
            "SELECT 1 FROM information_schema.columns
             WHERE table_schema = current_schema() AND table_name = 'runs'
               AND column_name = 'request'",
            &[],
        )
        .await?
        .is_some();
    if !has_request {
        return Ok(());
    }
    let kept: Vec<String> = tx
        .query(
            "SELECT id FROM runs WHERE request IS NOT NULL ORDER BY started, id",
            &[],
        )
        .await?
        .into_iter()
        .map(|row| row.get(0))
        .collect();
    for run in kept {
        let body: String = tx
            .query_one("SELECT request FROM runs WHERE id = $1", &[&run])
            .await?
            .get(0);
        let head = store(tx, &body, &[]).await?;
        tx.execute(
            "UPDATE runs SET request_piece = $2, request_digest = $3, request_len = $4
             WHERE id = $1",
            &[
                &run,
                &head.last.map(|last| last.as_bytes().to_vec()),
                &head.digest.as_bytes().to_vec(),
                &(head.len as i64),
            ],
        )
        .await?;
    }
    tx.batch_execute("ALTER TABLE runs DROP COLUMN request;")
        .await?;
    Ok(())
}

/// The body whose last piece is `last`, checked against `digest` and
/// `len`.
pub(crate) async fn load<C: GenericClient>(
    client: &C,
    run: &str,
    last: Option<Vec<u8>>,
    digest: &Digest,
    len: i64,
) -> Result<RequestBody> {
    let mut pieces = Vec::new();
    if let Some(last) = last {
        let rows = client
            .query(
                "WITH RECURSIVE chain(id, depth) AS (
                     SELECT $1::bytea, 0
                     UNION ALL
                     SELECT p.parent, c.depth + 1 FROM request_pieces p JOIN chain c ON p.id = c.id
                     WHERE p.parent IS NOT NULL
                 )
                 SELECT p.id, p.parent, p.bytes, p.erased, p.len FROM chain c
                 JOIN request_pieces p ON p.id = c.id ORDER BY c.depth DESC",
                &[&last],
            )
            .await?;
        for row in rows {
            let content = match row.get::<_, Option<Vec<u8>>>(2) {
                Some(bytes) => PieceContent::Bytes(bytes),
                None => PieceContent::Erased {
                    digest: digest_of(row.get(3))?,
                    len: row.get::<_, i64>(4) as usize,
                },
            };
            pieces.push(StoredPiece {
                id: digest_of(row.get(0))?,
                parent: row
                    .get::<_, Option<Vec<u8>>>(1)
                    .map(digest_of)
                    .transpose()?,
                content,
            });
        }
    }
    let unreadable = |problem: String| {
        StoreError::MalformedRow(format!(
            "the request body of run {run} does not reconstruct: {problem}"
        ))
    };
    let assembled = Assembled::from_pieces(pieces).map_err(unreadable)?;
    let nodes = assembled.nodes().map_err(unreadable)?;
    let mut messages = HashMap::with_capacity(nodes.len());
    if !nodes.is_empty() {
        let wanted: Vec<&[u8]> = nodes.iter().map(|id| id.as_bytes().as_slice()).collect();
        let rows = client
            .query("SELECT id, body FROM nodes WHERE id = ANY($1)", &[&wanted])
            .await?;
        let blobs = super::graph::fetch_blobs(client, rows.iter().map(|row| row.get(1))).await?;
        for row in &rows {
            let id = NodeId(digest_of(row.get(0))?.0);
            messages.insert(id, super::graph::decode(id, row.get(1), &blobs)?);
        }
    }
    assembled
        .body(&messages, digest, len as usize)
        .map_err(unreadable)
}

/// Delete the pieces ending at `lasts` that no remaining run's body
/// reaches, each chain from its end up (sqlite/bodies.rs's `release`).
pub(crate) async fn release<C: GenericClient>(tx: &C, lasts: Vec<Vec<u8>>) -> Result<u64> {
    let delete = tx
        .prepare_cached(
            "DELETE FROM request_pieces WHERE id = $1
                 AND NOT EXISTS (SELECT 1 FROM request_pieces c WHERE c.parent = $1)
                 AND NOT EXISTS (SELECT 1 FROM runs WHERE request_piece = $1)
             RETURNING parent",
        )
        .await?;
    let mut deleted = 0;
    for last in lasts {
        let mut at = Some(last);
        while let Some(id) = at {
            at = match tx.query_opt(&delete, &[&id]).await? {
                Some(row) => {
                    deleted += 1;
                    row.get::<_, Option<Vec<u8>>>(0)
                }
                None => None,
            };
        }
    }
    Ok(deleted)
}

/// Erase the pieces of the bodies that carried an erased message, as
/// sqlite/bodies.rs's `erase_carried` (`carried`: those runs with their
/// bodies' last pieces).
pub(crate) async fn erase_carried<C: GenericClient>(
    tx: &C,
    carried: &[(String, Vec<u8>)],
) -> Result<u64> {
    if carried.is_empty() {
        return Ok(0);
    }
    let carrying: HashSet<&str> = carried.iter().map(|(run, _)| run.as_str()).collect();
    let chain = tx
        .prepare_cached(
            "WITH RECURSIVE chain(id) AS (
                 SELECT $1::bytea
                 UNION
                 SELECT p.parent FROM request_pieces p JOIN chain c ON p.id = c.id
                 WHERE p.parent IS NOT NULL
             )
             SELECT id FROM chain",
        )
        .await?;
    let mut doomed: HashSet<Vec<u8>> = HashSet::new();
    for (_, last) in carried {
        for row in tx.query(&chain, &[last]).await? {
            doomed.insert(row.get(0));
        }
    }
    let roots: Vec<Vec<u8>> = tx
        .query(
            "SELECT id FROM request_pieces WHERE id = ANY($1) AND parent IS NULL",
            &[&doomed.iter().cloned().collect::<Vec<_>>()],
        )
        .await?
        .into_iter()
        .map(|row| row.get(0))
        .collect();
    let sharing = tx
        .query(
            "WITH RECURSIVE tree(id) AS (
                 SELECT unnest($1::bytea[])
                 UNION ALL
                 SELECT p.id FROM request_pieces p JOIN tree t ON p.parent = t.id
             )
             SELECT r.id, r.request_piece FROM tree t JOIN runs r ON r.request_piece = t.id",
            &[&roots],
        )
        .await?;
    let mut kept: HashSet<Vec<u8>> = HashSet::new();
    for row in sharing {
        let run: String = row.get(0);
        if !carrying.contains(run.as_str()) {
            let last: Vec<u8> = row.get(1);
            for row in tx.query(&chain, &[&last]).await? {
                let id: Vec<u8> = row.get(0);
                if doomed.contains(&id) {
                    kept.insert(id);
                }
            }
        }
    }
    let read = tx
        .prepare_cached("SELECT bytes FROM request_pieces WHERE id = $1 AND bytes IS NOT NULL")
        .await?;
    let update = tx
        .prepare_cached("UPDATE request_pieces SET bytes = NULL, erased = $2 WHERE id = $1")
        .await?;
    let mut erased = 0;
    for id in doomed.difference(&kept) {
        if let Some(row) = tx.query_opt(&read, &[id]).await? {
            let bytes: Vec<u8> = row.get(0);
            let digest = Digest::of(&bytes).as_bytes().to_vec();
            tx.execute(&update, &[id, &digest]).await?;
            erased += 1;
        }
    }
    Ok(erased)
}

/// The stored thread a run's body refers to: its conversation's, when that
/// passes through the run's `input`, else the thread up to it (the last
/// one loaded is held in `threads` for the runs that follow).
pub(crate) async fn input_thread<C: GenericClient>(
    client: &C,
    key: StoreKey,
    threads: &mut BodyThreads,
    conversation: Option<&ConversationId>,
    input: NodeId,
) -> Result<Thread> {
    if let Some(thread) = threads.holding(input) {
        return Ok(thread);
    }
    if let Some(conversation) = conversation {
        let head: Option<Vec<u8>> = client
            .query_opt(
                "SELECT head FROM conversations WHERE id = $1",
                &[&conversation.as_str()],
            )
            .await?
            .and_then(|row| row.get(0));
        if let Some(head) = optional_node_id(head.as_deref())? {
            let thread = super::graph::load_thread_in(client, key, head).await?;
            if thread.at(input).is_some() {
                return Ok(threads.keep(thread));
            }
        }
    }
    Ok(threads.keep(super::graph::load_thread_in(client, key, input).await?))
}

/// Cut the bodies of `runs` again against their stored threads, as on
/// SQLite (sqlite/bodies.rs `recut`).
pub(crate) async fn recut<C: GenericClient>(
    tx: &C,
    key: StoreKey,
    runs: &[RunId],
) -> Result<Recut> {
    let mut recut = Recut::default();
    let mut threads = BodyThreads::default();
    for run in runs {
        let Some(row) = tx
            .query_opt(
                "SELECT conversation, input_head, request_piece, request_digest, request_len
                 FROM runs WHERE id = $1 AND request_digest IS NOT NULL",
                &[&run.as_str()],
            )
            .await?
        else {
            continue;
        };
        recut.bodies += 1;
        let last: Option<Vec<u8>> = row.get(2);
        let digest = digest_of(row.get(3))?;
        let body = load(tx, run.as_str(), last.clone(), &digest, row.get(4)).await?;
        let input = optional_node_id(row.get::<_, Option<&[u8]>>(1))?;
        let (Some(text), Some(input)) = (body.whole(), input) else {
            recut.erased += u64::from(!body.erased().is_empty());
            continue;
        };
        let conversation = row.get::<_, Option<String>>(0).map(ConversationId);
        let thread = input_thread(tx, key, &mut threads, conversation.as_ref(), input).await?;
        let head = store(tx, text, &input_messages(Some(&thread), Some(input))).await?;
        let new_last = head.last.map(|last| last.as_bytes().to_vec());
        if new_last == last {
            continue;
        }
        tx.execute(
            "UPDATE runs SET request_piece = $2 WHERE id = $1",
            &[&run.as_str(), &new_last],
        )
        .await?;
        recut.rewritten += 1;
        recut.pieces_released += release(tx, last.into_iter().collect()).await?;
    }
    Ok(recut)
}

impl Bodies for PgStore {
    fn bodied_runs(&self) -> Result<Vec<RunId>> {
        self.read(async |client| {
            Ok(client
                .query(
                    "SELECT id FROM runs WHERE request_digest IS NOT NULL ORDER BY started, id",
                    &[],
                )
                .await?
                .iter()
                .map(|row| RunId(row.get(0)))
                .collect())
        })
    }

    fn recut_bodies(&self, runs: &[RunId]) -> Result<Recut> {
        let key = self.key();
        self.write(async |tx| recut(tx, key, runs).await)
    }
}
