/*!
Deleting conversations on PostgreSQL (crate::forget explains what goes and
what stays): one transaction locks the selected conversations, deletes
their rows, finds the candidate nodes (one recursive query), locks them
`FOR UPDATE` so no turn can build on them while this decides, finds the
seeds among them, and deletes the garbage (its search column goes with the
row) with the blobs no remaining node references and their texts' cached
embeddings. A turn builds on a stored node only after locking it
`FOR KEY SHARE` (graph.rs), so it either committed before the lock here (and
its nodes and runs are seen as seeds) or waits and finds the node gone.
A dry run rolls back to a savepoint taken first. A garbage collection's
plan is one read that locks nothing; each of its batches locks only its
own nodes. Maintenance that must not run twice at once holds a session
advisory lock ([`Forget::exclusively`]). A redaction rewrites the copies
of the erased content by the rules of crate::places, their rows locked
(`erase_copies`).
*/

use super::PgStore;
use super::graph::{decode, fetch_blobs};
use crate::backend::{Backend, BoxFuture};
use crate::codec::{BLOB_THRESHOLD, blob_refs, node_id};
use crate::error::Result;
use crate::forget::{
    COUNT_ERASURE, Doomed, Filter, Forget, Planned, REFERENCED, Scrubbed, Swept, UNOWNED_RUNS,
    embedded_digests, sweep,
};
use crate::places::{Copies, Holding, Place, Reach, copy_rules};
use crate::records::ReplayId;
use crate::replays::replay_turn_runs;
use deadpool_postgres::{Client, GenericClient};
use skein_core::encoding::encode_body;
use skein_core::{Digest, Message, NodeId};
use std::collections::HashSet;
use tokio_postgres::types::ToSql;

impl Forget for PgStore {
    fn forget(
        &self,
        doomed: &[Doomed],
        replays: &[ReplayId],
        unowned: &[String],
        dry_run: bool,
    ) -> Result<Swept> {
        self.write(async |tx| {
            tx.batch_execute("SAVEPOINT forget").await?;
            let swept = forget_in(tx, doomed, replays, unowned).await;
            end_savepoint(tx, dry_run, swept).await
        })
    }

    fn unowned_runs(&self, filter: &Filter) -> Result<Vec<String>> {
        let proxy_only = i64::from(filter.proxy_only);
        let rows = self.read(async |db| {
            Ok(db
                .query(
                    UNOWNED_RUNS,
                    &[&filter.updated_before_ms, &filter.client, &proxy_only],
                )
                .await?)
        })?;
        Ok(rows.iter().map(|row| row.get(0)).collect())
    }

    fn conversations_of_client(&self, client: &str) -> Result<Vec<String>> {
        let rows = self.read(async |db| {
            Ok(db
                .query(
                    "SELECT DISTINCT conversation FROM runs
                     WHERE client = $1 AND conversation IS NOT NULL",
                    &[&client],
                )
                .await?)
        })?;
        Ok(rows.iter().map(|row| row.get(0)).collect())
    }

    fn garbage(&self) -> Result<Planned> {
        let rows = self.read(async |client| {
            Ok(client
                .query(
                    &format!("SELECT id, parent, seq, id IN ({REFERENCED}) FROM nodes"),
                    &[],
                )
                .await?)
        })?;
        let mut candidates: Vec<(Id, Option<Id>, i64)> = Vec::with_capacity(rows.len());
        let mut seeds: HashSet<Id> = HashSet::new();
        for row in &rows {
            let id: Id = row.get(0);
            if row.get::<_, bool>(3) {
                seeds.insert(id.clone());
            }
            candidates.push((id, row.get(1), row.get(2)));
        }
        let decided = sweep(&candidates, &seeds);
        let ids = |ids: &[Id]| ids.iter().map(|id| node_id(id)).collect::<Result<Vec<_>>>();
        Ok(Planned {
            garbage: ids(&decided.garbage)?,
            kept: decided.kept,
            boundary: ids(&decided.boundary)?,
        })
    }

    fn collect_batch(&self, nodes: &[NodeId], dry_run: bool) -> Result<Swept> {
        let ids: Vec<&[u8]> = nodes.iter().map(|id| id.as_bytes().as_slice()).collect();
        self.write(async |tx| {
            tx.batch_execute("SAVEPOINT forget").await?;
            let swept = collect_listed(tx, &ids).await;
            end_savepoint(tx, dry_run, swept).await
        })
    }

    fn exclusively(&self, key: i64, work: &mut dyn FnMut() -> Result<()>) -> Result<bool> {
        if self.is_read_only() {
            return Err(crate::StoreError::ReadOnly {
                location: self.location(),
            });
        }
        let Some(held) = self.advisory_lock(key)? else {
            return Ok(false);
        };
        let done = work();
        self.advisory_unlock(held, key)?;
        done.map(|()| true)
    }

    fn redact(&self, node: NodeId, original: &Message, erased: &Message) -> Result<Scrubbed> {
        self.write(async |tx| redact_in(tx, node, original, erased).await)
    }

    fn erasures(&self) -> BoxFuture<'_, Result<u64>> {
        Box::pin(async move {
            reading!(self, |client| {
                let row = client
                    .query_opt("SELECT value FROM meta WHERE key = 'erasures'", &[])
                    .await?;
                Ok(row
                    .and_then(|row| row.get::<_, String>(0).parse().ok())
                    .unwrap_or(0))
            })
        })
    }

    fn vacuum(&self) -> Result<()> {
        if self.is_read_only() {
            return Err(crate::StoreError::ReadOnly {
                location: self.location(),
            });
        }
        self.read(async |client| {
            client
                .batch_execute(
                    "VACUUM FULL nodes, blobs, runs, conversations, reruns, embeddings, tool_offers,
                         request_pieces",
                )
                .await?;
            Ok(())
        })
    }
}

/// Release the savepoint `work` ran in, rolling it back first when
/// `dry_run`; a failed `work` leaves it to the caller's rollback (the
/// transaction may be aborted).
async fn end_savepoint(tx: &Client, dry_run: bool, done: Result<Swept>) -> Result<Swept> {
    let swept = done?;
    tx.batch_execute(if dry_run {
        "ROLLBACK TO SAVEPOINT forget; RELEASE SAVEPOINT forget"
    } else {
        "RELEASE SAVEPOINT forget"
    })
    .await?;
    Ok(swept)
}

/// Lock the nodes of a garbage collection's batch (`FOR UPDATE`, in one
/// order) and delete those nothing reaches still.
async fn collect_listed(tx: &Client, ids: &[&[u8]]) -> Result<Swept> {
    let lock = tx
        .prepare_cached(
            "SELECT id, parent, seq FROM nodes WHERE id = ANY($1) ORDER BY seq FOR UPDATE",
        )
        .await?;
    let rows = tx.query(&lock, &[&ids]).await?;
    let mut swept = Swept::default();
    decide_and_delete(tx, &rows, &mut swept).await?;
    Ok(swept)
}

/// The redaction, inside the caller's transaction. The node's row is locked
/// first, so a concurrent deletion of it waits (or has already removed it).
async fn redact_in(
    tx: &Client,
    node: NodeId,
    original: &Message,
    erased: &Message,
) -> Result<Scrubbed> {
    tx.batch_execute(COUNT_ERASURE).await?;
    let id = node.as_bytes().as_slice();
    let lock = tx
        .prepare_cached("SELECT blob_refs FROM nodes WHERE id = $1 FOR UPDATE")
        .await?;
    let Some(row) = tx.query_opt(&lock, &[&id]).await? else {
        return Err(crate::StoreError::NodeNotFound(node));
    };
    let refs: Option<Vec<u8>> = row.get(0);
    let update = tx
        .prepare_cached("UPDATE nodes SET body = $2, blob_refs = NULL, search = NULL WHERE id = $1")
        .await?;
    tx.execute(&update, &[&id, &encode_body(erased, BLOB_THRESHOLD).bytes])
        .await?;
    let referenced: Vec<&[u8]> = refs.as_deref().unwrap_or_default().chunks(32).collect();
    let blobs = delete_unused_blobs(tx, &referenced).await?;
    let digests: Vec<Digest> = embedded_digests(original);
    let embedded: Vec<&[u8]> = digests.iter().map(|d| d.as_bytes().as_slice()).collect();
    let forget = tx
        .prepare_cached("DELETE FROM embeddings WHERE digest = ANY($1)")
        .await?;
    let embeddings = tx.execute(&forget, &[&embedded]).await?;
    // The bodies that carried the message: those of the runs whose
    // threads pass through it.
    let carried: Vec<(String, Vec<u8>)> = tx
        .query(
            &format!(
                "{BELOW} SELECT id, request_piece FROM runs
                 WHERE request_piece IS NOT NULL
                   AND (input_head IN (SELECT id FROM below) OR output_head IN (SELECT id FROM below))"
            ),
            &[&id],
        )
        .await?
        .into_iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect();
    let body_pieces = super::bodies::erase_carried(tx, &carried).await?;
    let mut copies = Vec::new();
    for (place, rule) in copy_rules(true) {
        let rows = erase_copies(tx, place, rule, id, original).await?;
        if rows > 0 {
            copies.push(Holding {
                table: place.table,
                column: place.column,
                rows,
            });
        }
    }
    Ok(Scrubbed {
        blobs,
        embeddings,
        body_pieces,
        copies,
    })
}

/// The nodes at or below the node `$1`, as `below(id)`.
const BELOW: &str = "WITH RECURSIVE below(id) AS (
         SELECT $1::bytea
         UNION ALL
         SELECT n.id FROM nodes n JOIN below ON n.parent = below.id
     )";

/// Rewrite the copies of `original`'s content `place` holds, by its rule
/// (crate::places): the rows it reaches are read once and locked, and each
/// one that changes is written back by its key (read as text); how many
/// rows changed.
async fn erase_copies(
    tx: &Client,
    place: &Place,
    copies: &Copies,
    id: &[u8],
    original: &Message,
) -> Result<u64> {
    let (table, column, may_hold) = (place.table, place.column, copies.may_hold);
    let (with, reach, bound) = match copies.reach {
        Reach::Below(columns) => {
            let reach = columns
                .iter()
                .map(|column| format!("{column} IN (SELECT id FROM below)"))
                .collect::<Vec<_>>()
                .join(" OR ");
            (BELOW, reach, true)
        }
        Reach::At(column) => ("", format!("{column} = $1"), true),
        Reach::Every => ("", "TRUE".to_string(), false),
    };
    let node: Vec<&(dyn ToSql + Sync)> = if bound { vec![&id] } else { Vec::new() };
    let keys = copies
        .key
        .iter()
        .map(|key| format!("CAST({key} AS TEXT)"))
        .collect::<Vec<_>>()
        .join(", ");
    let held: Vec<(String, Vec<String>)> = tx
        .query(
            &format!(
                "{with} SELECT {column}, {keys} FROM {table}
                 WHERE ({may_hold}) AND ({reach}) FOR UPDATE"
            ),
            &node,
        )
        .await?
        .into_iter()
        .map(|row| {
            (
                row.get(0),
                (1..=copies.key.len()).map(|at| row.get(at)).collect(),
            )
        })
        .collect();
    let by_key = (2..)
        .zip(copies.key)
        .map(|(at, key)| format!("CAST({key} AS TEXT) = ${at}"))
        .collect::<Vec<_>>()
        .join(" AND ");
    let rewrite = tx
        .prepare_cached(&format!(
            "UPDATE {table} SET {column} = $1::text WHERE {by_key}"
        ))
        .await?;
    let mut rows = 0;
    for (value, key) in &held {
        if let Some(without) = (copies.without)(value, original) {
            let mut values: Vec<&(dyn ToSql + Sync)> = vec![&without];
            values.extend(key.iter().map(|key| key as &(dyn ToSql + Sync)));
            rows += tx.execute(&rewrite, &values).await?;
        }
    }
    Ok(rows)
}

/// Delete the blobs among `referenced` no node references any more. They
/// are locked first: a turn storing a node that references one of them
/// locks it too (graph.rs), so it is seen here or waits.
async fn delete_unused_blobs(tx: &Client, referenced: &[&[u8]]) -> Result<u64> {
    if referenced.is_empty() {
        return Ok(0);
    }
    let lock = tx
        .prepare_cached("SELECT 1 FROM blobs WHERE digest = ANY($1) ORDER BY digest FOR UPDATE")
        .await?;
    tx.query(&lock, &[&referenced]).await?;
    let unused = tx
        .prepare_cached(
            "DELETE FROM blobs b WHERE b.digest = ANY($1)
             AND NOT EXISTS (SELECT 1 FROM nodes n WHERE n.blob_refs IS NOT NULL
                             AND position(b.digest IN n.blob_refs) > 0)",
        )
        .await?;
    Ok(tx.execute(&unused, &[&referenced]).await?)
}

type Id = Vec<u8>;

async fn forget_in(
    tx: &Client,
    doomed: &[Doomed],
    replays: &[ReplayId],
    unowned: &[String],
) -> Result<Swept> {
    let mut swept = Swept::default();
    let named: Vec<&str> = replays.iter().map(|id| id.as_str()).collect();
    let mut released: Vec<Id> = Vec::new();
    let ids: Vec<&str> = doomed.iter().map(|d| d.id.as_str()).collect();
    // Locked in one order, so two deletions wait rather than deadlock.
    let lock = tx
        .prepare_cached(
            "SELECT id, head, forked_from_node, updated FROM conversations
             WHERE id = ANY($1) ORDER BY id FOR UPDATE",
        )
        .await?;
    let rows = tx.query(&lock, &[&ids]).await?;
    let mut gone: Vec<String> = Vec::new();
    for conversation in doomed {
        let row = rows
            .iter()
            .find(|row| row.get::<_, &str>(0) == conversation.id.as_str());
        let Some(row) = row.filter(|row| {
            conversation
                .updated_ms
                .is_none_or(|seen| seen == row.get::<_, i64>(3))
        }) else {
            swept.skipped.push(conversation.id.clone());
            continue;
        };
        released.extend(row.get::<_, Option<Id>>(1));
        released.extend(row.get::<_, Option<Id>>(2));
        gone.push(conversation.id.0.clone());
        swept.deleted.push(conversation.id.clone());
    }
    let reruns = tx
        .prepare_cached(
            "DELETE FROM reruns WHERE conversation = ANY($1)
             RETURNING turn_node, request_head, answer_head, sample_runs, baseline_runs",
        )
        .await?;
    let mut runs: Vec<String> = Vec::new();
    for row in tx.query(&reruns, &[&gone]).await? {
        released.push(row.get(0));
        released.extend(row.get::<_, Option<Id>>(1));
        released.extend(row.get::<_, Option<Id>>(2));
        for column in [3, 4] {
            let listed: Vec<String> = serde_json::from_str(row.get::<_, &str>(column))?;
            runs.extend(listed);
        }
        swept.reruns += 1;
    }
    let replayed = tx
        .prepare_cached(
            "DELETE FROM replay_turns WHERE conversation = ANY($1) OR replay = ANY($2)
             RETURNING replay, turn_node, answer_head, runs, detail",
        )
        .await?;
    let mut touched: Vec<String> = named.iter().map(|id| id.to_string()).collect();
    for row in tx.query(&replayed, &[&gone, &named]).await? {
        let replay: String = row.get(0);
        released.push(row.get(1));
        released.extend(row.get::<_, Option<Id>>(2));
        runs.extend(replay_turn_runs(row.get(3), row.get(4))?);
        if !touched.contains(&replay) {
            touched.push(replay);
        }
        swept.replay_turns += 1;
    }
    let recount = tx
        .prepare_cached(
            "UPDATE replays r SET turns = (SELECT count(*) FROM replay_turns t WHERE t.replay = r.id)
             WHERE r.id = ANY($1)",
        )
        .await?;
    tx.execute(&recount, &[&touched]).await?;
    let emptied = tx
        .prepare_cached("DELETE FROM replays WHERE id = ANY($1) AND turns = 0 RETURNING id")
        .await?;
    let emptied = tx.query(&emptied, &[&touched]).await?;
    swept.replays = emptied.len() as u64;
    swept.deleted_replays = replays
        .iter()
        .filter(|id| {
            emptied
                .iter()
                .any(|row| row.get::<_, &str>(0) == id.as_str())
        })
        .cloned()
        .collect();
    let owned = tx
        .prepare_cached("SELECT id FROM runs WHERE conversation = ANY($1)")
        .await?;
    runs.extend(
        tx.query(&owned, &[&gone])
            .await?
            .iter()
            .map(|row| row.get::<_, String>(0)),
    );
    runs.sort();
    runs.dedup();
    let more: Vec<String> = unowned
        .iter()
        .filter(|run| runs.binary_search(run).is_err())
        .cloned()
        .collect();
    runs.extend(more);
    for sql in [
        "DELETE FROM run_tools WHERE run_id = ANY($1)",
        "DELETE FROM run_links WHERE run_id = ANY($1)",
    ] {
        let statement = tx.prepare_cached(sql).await?;
        tx.execute(&statement, &[&runs]).await?;
    }
    let delete_runs = tx
        .prepare_cached(
            "DELETE FROM runs WHERE id = ANY($1)
             RETURNING input_head, output_head, request_piece, id",
        )
        .await?;
    let mut bodies = Vec::new();
    for row in tx.query(&delete_runs, &[&runs]).await? {
        released.extend(row.get::<_, Option<Id>>(0));
        released.extend(row.get::<_, Option<Id>>(1));
        bodies.extend(row.get::<_, Option<Vec<u8>>>(2));
        swept.runs += 1;
        swept.unowned_runs += u64::from(unowned.iter().any(|run| run == row.get::<_, &str>(3)));
    }
    swept.body_pieces += super::bodies::release(tx, bodies).await?;
    for sql in [
        "DELETE FROM tool_offers WHERE conversation = ANY($1)",
        "DELETE FROM conversations WHERE id = ANY($1)",
    ] {
        let statement = tx.prepare_cached(sql).await?;
        tx.execute(&statement, &[&gone]).await?;
    }
    record_deleted_origins(tx, &gone).await?;
    collect(tx, released, &mut swept).await?;
    Ok(swept)
}

/// Record the deleted conversations that remaining forks name as their
/// origin (so `verify` tells them from dangling origins), and drop the
/// records no remaining conversation names any more.
async fn record_deleted_origins(tx: &Client, gone: &[String]) -> Result<()> {
    if gone.is_empty() {
        return Ok(());
    }
    let record = tx
        .prepare_cached(
            "INSERT INTO deleted_conversations(id, deleted)
             SELECT g, $2 FROM unnest($1::text[]) AS g
             WHERE EXISTS (SELECT 1 FROM conversations WHERE forked_from_conversation = g)
             ON CONFLICT (id) DO NOTHING",
        )
        .await?;
    tx.execute(&record, &[&gone, &crate::records::now_ms()])
        .await?;
    tx.batch_execute(crate::sqlite::forget::PRUNE_DELETED_ORIGINS)
        .await?;
    Ok(())
}

/// Find and lock the candidates above the `released` references, and
/// delete those nothing reaches ([`decide_and_delete`]).
async fn collect(tx: &Client, mut released: Vec<Id>, swept: &mut Swept) -> Result<()> {
    released.sort();
    released.dedup();
    let up = tx
        .prepare_cached(
            "WITH RECURSIVE up(id) AS (
                 SELECT id FROM nodes WHERE id = ANY($1)
                 UNION
                 SELECT n.parent FROM nodes n JOIN up ON n.id = up.id WHERE n.parent IS NOT NULL
             )
             SELECT n.id, n.parent, n.seq FROM up JOIN nodes n ON n.id = up.id
             ORDER BY n.seq FOR UPDATE OF n",
        )
        .await?;
    let rows = tx.query(&up, &[&released]).await?;
    decide_and_delete(tx, &rows, swept).await
}

/// Find the seeds among the locked candidate `rows` (id, parent, seq), and
/// delete the candidates they do not keep.
async fn decide_and_delete(
    tx: &Client,
    rows: &[tokio_postgres::Row],
    swept: &mut Swept,
) -> Result<()> {
    let candidates: Vec<(Id, Option<Id>, i64)> = rows
        .iter()
        .map(|row| (row.get(0), row.get(1), row.get(2)))
        .collect();
    let ids: Vec<&Id> = candidates.iter().map(|(id, _, _)| id).collect();
    let seeds = tx.prepare_cached(SEEDS).await?;
    let seeds: HashSet<Id> = tx
        .query(&seeds, &[&ids])
        .await?
        .iter()
        .map(|row| row.get(0))
        .collect();
    let decided = sweep(&candidates, &seeds);
    swept.kept = decided.kept;
    let labelled = tx
        .prepare_cached("SELECT count(DISTINCT node) FROM labels WHERE node = ANY($1::bytea[])")
        .await?;
    swept.labelled = tx.query_one(&labelled, &[&ids]).await?.get::<_, i64>(0) as u64;
    for id in &decided.boundary {
        swept.boundary.push(node_id(id)?);
    }
    delete_nodes(tx, &decided.garbage, swept).await
}

/// The candidates (`$1`) something remaining reaches directly: a
/// conversation's head or origin, a run's input or output head, a rerun's
/// nodes, a replayed turn's original or answer, a label, or a child that is
/// no candidate.
const SEEDS: &str = "SELECT c FROM unnest($1::bytea[]) AS c
     WHERE EXISTS (SELECT 1 FROM conversations WHERE head = c)
        OR EXISTS (SELECT 1 FROM conversations WHERE forked_from_node = c)
        OR EXISTS (SELECT 1 FROM runs WHERE output_head = c)
        OR EXISTS (SELECT 1 FROM runs WHERE input_head = c)
        OR EXISTS (SELECT 1 FROM reruns WHERE turn_node = c)
        OR EXISTS (SELECT 1 FROM reruns WHERE request_head = c)
        OR EXISTS (SELECT 1 FROM reruns WHERE answer_head = c)
        OR EXISTS (SELECT 1 FROM labels WHERE node = c)
        OR EXISTS (SELECT 1 FROM replay_turns WHERE turn_node = c)
        OR EXISTS (SELECT 1 FROM replay_turns WHERE answer_head = c)
        OR EXISTS (SELECT 1 FROM nodes x WHERE x.parent = c AND x.id <> ALL($1::bytea[]))";

/// Delete the garbage nodes, the blobs no remaining node references and
/// their texts' cached embeddings.
async fn delete_nodes(tx: &Client, garbage: &[Id], swept: &mut Swept) -> Result<()> {
    if garbage.is_empty() {
        return Ok(());
    }
    tx.batch_execute(COUNT_ERASURE).await?;
    let read = tx
        .prepare_cached("SELECT id, body FROM nodes WHERE id = ANY($1)")
        .await?;
    let rows = tx.query(&read, &[&garbage]).await?;
    let blobs = fetch_blobs(tx, rows.iter().map(|row| row.get::<_, &[u8]>(1))).await?;
    let mut referenced: HashSet<Digest> = HashSet::new();
    let mut embedded: HashSet<Digest> = HashSet::new();
    let (mut call_ids, mut calling): (Vec<String>, Vec<&[u8]>) = (Vec::new(), Vec::new());
    for row in &rows {
        let body: &[u8] = row.get(1);
        referenced.extend(blob_refs(body));
        if let Ok(message) = decode(node_id(row.get(0))?, body, &blobs) {
            embedded.extend(embedded_digests(&message));
            for call in super::calls::call_ids(&message) {
                call_ids.push(call.to_string());
                calling.push(row.get(0));
            }
        }
    }
    if !call_ids.is_empty() {
        let unindex = tx
            .prepare_cached(
                "DELETE FROM tool_calls c USING unnest($1::text[], $2::bytea[]) AS u(call_id, node)
                 WHERE c.call_id = u.call_id AND c.node = u.node",
            )
            .await?;
        tx.execute(&unindex, &[&call_ids, &calling]).await?;
    }
    let delete = tx
        .prepare_cached("DELETE FROM nodes WHERE id = ANY($1)")
        .await?;
    swept.nodes = tx.execute(&delete, &[&garbage]).await?;
    let referenced: Vec<&[u8]> = referenced.iter().map(|d| d.as_bytes().as_slice()).collect();
    swept.blobs = delete_unused_blobs(tx, &referenced).await?;
    let embedded: Vec<&[u8]> = embedded.iter().map(|d| d.as_bytes().as_slice()).collect();
    let forget = tx
        .prepare_cached("DELETE FROM embeddings WHERE digest = ANY($1)")
        .await?;
    swept.embeddings = tx.execute(&forget, &[&embedded]).await?;
    Ok(())
}
