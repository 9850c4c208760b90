/*!
Deleting conversations on SQLite (crate::forget explains what goes and what
stays): one `BEGIN IMMEDIATE` transaction deletes the selected rows, finds
the candidate nodes (the ancestors of the references those rows held) and
the seeds among them in two statements over a temporary table, and deletes
the garbage with its search-index rows, unreferenced blobs and cached
embeddings. A dry run rolls back to a savepoint taken first. A garbage
collection's plan is one read; each of its batches is one `BEGIN
IMMEDIATE` transaction deciding over the batch as its candidates. A
redaction rewrites the copies of the erased content by the rules of
crate::places, one statement pair per place (`erase_copies`).
*/

use super::graph::decode_message;
use super::{SqliteStore, bodies};
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
use crate::search::index_text;
use rusqlite::types::Value;
use rusqlite::{Connection, OptionalExtension, params};
use skein_core::encoding::encode_body;
use skein_core::{Digest, Message, NodeId};
use std::collections::{HashMap, HashSet};

impl Forget for SqliteStore {
    fn forget(
        &self,
        doomed: &[Doomed],
        replays: &[ReplayId],
        unowned: &[String],
        dry_run: bool,
    ) -> Result<Swept> {
        self.write(|tx| rolled_back_if(tx, dry_run, |tx| forget_in(tx, doomed, replays, unowned)))
    }

    fn unowned_runs(&self, filter: &Filter) -> Result<Vec<String>> {
        self.read(|conn| {
            Ok(conn
                .prepare_cached(UNOWNED_RUNS)?
                .query_map(
                    params![
                        filter.updated_before_ms,
                        filter.client,
                        i64::from(filter.proxy_only)
                    ],
                    |row| row.get(0),
                )?
                .collect::<rusqlite::Result<_>>()?)
        })
    }

    fn garbage(&self) -> Result<Planned> {
        self.read(|conn| {
            let mut ids: HashMap<i64, Vec<u8>> = HashMap::new();
            let mut candidates: Vec<(i64, Option<i64>, i64)> = Vec::new();
            let mut seeds: HashSet<i64> = HashSet::new();
            let mut stmt = conn.prepare(&format!(
                "SELECT seq, parent, id, id IN ({REFERENCED}) FROM nodes"
            ))?;
            let mut rows = stmt.query([])?;
            while let Some(row) = rows.next()? {
                let seq: i64 = row.get(0)?;
                candidates.push((seq, row.get(1)?, seq));
                ids.insert(seq, row.get(2)?);
                if row.get::<_, bool>(3)? {
                    seeds.insert(seq);
                }
            }
            let decided = sweep(&candidates, &seeds);
            let id_of = |seq: &i64| node_id(&ids[seq]);
            Ok(Planned {
                garbage: decided.garbage.iter().map(id_of).collect::<Result<_>>()?,
                kept: decided.kept,
                boundary: decided.boundary.iter().map(id_of).collect::<Result<_>>()?,
            })
        })
    }

    fn collect_batch(&self, nodes: &[NodeId], dry_run: bool) -> Result<Swept> {
        self.write(|tx| {
            rolled_back_if(tx, dry_run, |tx| {
                let mut swept = Swept::default();
                clear_temp_tables(tx)?;
                let mut insert = tx.prepare_cached(
                    "INSERT OR IGNORE INTO forget_candidates(seq, parent)
                     SELECT seq, parent FROM nodes WHERE id = ?1",
                )?;
                for node in nodes {
                    insert.execute([node.as_bytes()])?;
                }
                decide_and_delete(tx, &mut swept)?;
                Ok(swept)
            })
        })
    }

    fn conversations_of_client(&self, client: &str) -> Result<Vec<String>> {
        self.read(|conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT DISTINCT conversation FROM runs
                 WHERE client = ?1 AND conversation IS NOT NULL",
            )?;
            let ids = stmt.query_map([client], |row| row.get(0))?;
            Ok(ids.collect::<rusqlite::Result<_>>()?)
        })
    }

    fn exclusively(&self, _key: i64, work: &mut dyn FnMut() -> Result<()>) -> Result<bool> {
        work()?;
        Ok(true)
    }

    fn redact(&self, node: NodeId, original: &Message, erased: &Message) -> Result<Scrubbed> {
        self.write(|tx| {
            // Freed and overwritten cells are zeroed, not left in free pages.
            tx.pragma_update(None, "secure_delete", "ON")?;
            redact_in(tx, node, original, erased)
        })
    }

    fn erasures(&self) -> BoxFuture<'_, Result<u64>> {
        self.point_read(|store| {
            store.read(|conn| {
                let counted: Option<String> = conn
                    .prepare_cached("SELECT value FROM meta WHERE key = 'erasures'")?
                    .query_row([], |row| row.get(0))
                    .optional()?;
                Ok(counted.and_then(|value| value.parse().ok()).unwrap_or(0))
            })
        })
    }

    fn vacuum(&self) -> Result<()> {
        if self.is_read_only() {
            return Err(crate::StoreError::ReadOnly {
                location: self.location(),
            });
        }
        let conn = super::lock(&self.shared.writer);
        // A deleted node's words stay in the search index's older segments
        // until they are merged: merge them, then rewrite the file.
        conn.execute_batch(
            "PRAGMA secure_delete = ON;
             INSERT INTO node_search(node_search) VALUES ('optimize');
             VACUUM;",
        )?;
        conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))?;
        Ok(())
    }
}

/// `work` inside a savepoint of the caller's transaction, rolled back when
/// `dry_run` or when it fails.
fn rolled_back_if<T>(
    tx: &Connection,
    dry_run: bool,
    work: impl FnOnce(&Connection) -> Result<T>,
) -> Result<T> {
    tx.execute_batch("SAVEPOINT forget")?;
    let done = work(tx);
    let end = if dry_run || done.is_err() {
        "ROLLBACK TO forget; RELEASE forget"
    } else {
        "RELEASE forget"
    };
    tx.execute_batch(end)?;
    done
}

/// The redaction, inside the caller's transaction.
fn redact_in(
    conn: &Connection,
    node: NodeId,
    original: &Message,
    erased: &Message,
) -> Result<Scrubbed> {
    conn.prepare_cached(COUNT_ERASURE)?.execute([])?;
    let mut scrubbed = Scrubbed::default();
    let Some((seq, body)) = conn
        .prepare_cached("SELECT seq, body FROM nodes WHERE id = ?1")?
        .query_row([node.as_bytes()], |row| {
            Ok((row.get::<_, i64>(0)?, row.get::<_, Vec<u8>>(1)?))
        })
        .optional()?
    else {
        return Err(crate::StoreError::NodeNotFound(node));
    };
    let words = index_text(original);
    if !words.is_empty() {
        conn.prepare_cached(
            "INSERT INTO node_search(node_search, rowid, words) VALUES ('delete', ?1, ?2)",
        )?
        .execute(params![seq, words])?;
        // A deleted row's words stay in older index segments until they
        // are merged: merge them all now.
        conn.execute_batch("INSERT INTO node_search(node_search) VALUES ('optimize')")?;
    }
    conn.prepare_cached("UPDATE nodes SET body = ?1 WHERE seq = ?2")?
        .execute(params![encode_body(erased, BLOB_THRESHOLD).bytes, seq])?;
    scrubbed.blobs = delete_unused_blobs(conn, blob_refs(&body))?;
    scrubbed.embeddings = delete_embeddings(conn, embedded_digests(original))?;
    // The bodies that carried the message: those of the runs whose
    // threads pass through it.
    let carried: Vec<(String, Vec<u8>)> = conn
        .prepare_cached(&format!(
            "{BELOW} SELECT id, request_piece FROM runs
             WHERE request_piece IS NOT NULL
               AND (input_head IN (SELECT id FROM ids) OR output_head IN (SELECT id FROM ids))"
        ))?
        .query_map([seq], |row| Ok((row.get(0)?, row.get(1)?)))?
        .collect::<rusqlite::Result<_>>()?;
    scrubbed.body_pieces = bodies::erase_carried(conn, &carried)?;
    for (place, copies) in copy_rules(false) {
        let rows = erase_copies(conn, place, copies, seq, node, original)?;
        if rows > 0 {
            scrubbed.copies.push(Holding {
                table: place.table,
                column: place.column,
                rows,
            });
        }
    }
    Ok(scrubbed)
}

/// The nodes at or below the node whose `seq` is `?1`, as `ids(id)`.
const BELOW: &str = "WITH RECURSIVE below(seq) AS (
         SELECT ?1
         UNION ALL
         SELECT n.seq FROM nodes n JOIN below ON n.parent = below.seq
     ),
     ids(id) AS (SELECT n.id FROM below JOIN nodes n ON n.seq = below.seq)";

/// Rewrite the copies of `original`'s content `place` holds, by its rule
/// (crate::places): the rows it reaches are read once, and each one that
/// changes is written back by its key; how many rows changed.
fn erase_copies(
    conn: &Connection,
    place: &Place,
    copies: &Copies,
    seq: i64,
    node: NodeId,
    original: &Message,
) -> Result<u64> {
    let (table, column, may_hold) = (place.table, place.column, copies.may_hold);
    let (with, reach, bound) = match copies.reach {
        Reach::Below(columns) => {
            let reach = columns
                .iter()
                .map(|column| format!("{column} IN (SELECT id FROM ids)"))
                .collect::<Vec<_>>()
                .join(" OR ");
            (BELOW, reach, Some(Value::Integer(seq)))
        }
        Reach::At(column) => (
            "",
            format!("{column} = ?1"),
            Some(Value::Blob(node.as_bytes().to_vec())),
        ),
        Reach::Every => ("", "TRUE".to_string(), None),
    };
    let keys = copies.key.join(", ");
    let mut select = conn.prepare_cached(&format!(
        "{with} SELECT {column}, {keys} FROM {table} WHERE ({may_hold}) AND ({reach})"
    ))?;
    let held: Vec<(String, Vec<Value>)> = select
        .query_map(rusqlite::params_from_iter(bound.iter()), |row| {
            let key = (1..=copies.key.len())
                .map(|at| row.get(at))
                .collect::<rusqlite::Result<_>>()?;
            Ok((row.get(0)?, key))
        })?
        .collect::<rusqlite::Result<_>>()?;
    let by_key = (2..)
        .zip(copies.key)
        .map(|(at, key)| format!("{key} = ?{at}"))
        .collect::<Vec<_>>()
        .join(" AND ");
    let mut rewrite =
        conn.prepare_cached(&format!("UPDATE {table} SET {column} = ?1 WHERE {by_key}"))?;
    let mut rows = 0;
    for (value, key) in held {
        if let Some(without) = (copies.without)(&value, original) {
            let values = std::iter::once(Value::Text(without)).chain(key);
            rows += rewrite.execute(rusqlite::params_from_iter(values))? as u64;
        }
    }
    Ok(rows)
}

/// Delete the blobs among `digests` no node references any more.
fn delete_unused_blobs(
    conn: &Connection,
    digests: impl IntoIterator<Item = Digest>,
) -> Result<u64> {
    let mut deleted = 0;
    for digest in digests.into_iter().collect::<HashSet<_>>() {
        // The bodies holding the digest's bytes, then the ones among them
        // that reference it as a blob (an erased part holds its payload's
        // digest without referencing anything).
        let mut holding =
            conn.prepare_cached("SELECT body FROM nodes WHERE instr(body, ?1) > 0")?;
        let mut rows = holding.query([digest.as_bytes()])?;
        let mut used = false;
        while let Some(row) = rows.next()? {
            let body = row.get_ref(0)?.as_blob().map_err(rusqlite::Error::from)?;
            if blob_refs(body).contains(&digest) {
                used = true;
                break;
            }
        }
        if !used {
            deleted += conn
                .prepare_cached("DELETE FROM blobs WHERE digest = ?1")?
                .execute([digest.as_bytes()])? as u64;
        }
    }
    Ok(deleted)
}

/// Delete the cached embeddings of the texts with these digests.
fn delete_embeddings(conn: &Connection, digests: impl IntoIterator<Item = Digest>) -> Result<u64> {
    let mut deleted = 0;
    for digest in digests.into_iter().collect::<HashSet<_>>() {
        deleted += conn
            .prepare_cached("DELETE FROM embeddings WHERE digest = ?1")?
            .execute([digest.as_bytes()])? as u64;
    }
    Ok(deleted)
}

/// The whole deletion, inside the caller's transaction.
fn forget_in(
    conn: &Connection,
    doomed: &[Doomed],
    replays: &[ReplayId],
    unowned: &[String],
) -> Result<Swept> {
    let mut swept = Swept::default();
    let mut released: Vec<Vec<u8>> = Vec::new();
    for conversation in doomed {
        if delete_conversation(conn, conversation, &mut released, &mut swept)? {
            swept.deleted.push(conversation.id.clone());
        } else {
            swept.skipped.push(conversation.id.clone());
        }
    }
    for replay in replays {
        let mut runs = Vec::new();
        let before = swept.replays;
        delete_replay_turns(
            conn,
            TurnsOf::Replay,
            replay.as_str(),
            &mut released,
            &mut runs,
            &mut swept,
        )?;
        // A replay without turns (all its conversations deleted) has none
        // to release, and goes all the same.
        swept.replays += conn
            .prepare_cached("DELETE FROM replays WHERE id = ?1")?
            .execute([replay.as_str()])? as u64;
        if swept.replays > before {
            swept.deleted_replays.push(replay.clone());
        }
        runs.sort();
        runs.dedup();
        delete_runs(conn, &runs, &mut released, &mut swept)?;
    }
    // (A run's conversation is set once, when it is written.)
    let before = swept.runs;
    delete_runs(conn, unowned, &mut released, &mut swept)?;
    swept.unowned_runs = swept.runs - before;
    record_deleted_origins(conn, &swept.deleted)?;
    collect(conn, &released, &mut swept)?;
    Ok(swept)
}

/// Record the deleted conversations that remaining forks name as their
/// origin (so `verify` tells them from dangling origins), and drop the
/// records no remaining conversation names any more.
fn record_deleted_origins(
    conn: &Connection,
    deleted: &[crate::records::ConversationId],
) -> Result<()> {
    if deleted.is_empty() {
        return Ok(());
    }
    let now = crate::records::now_ms();
    let mut record = conn.prepare_cached(
        "INSERT OR IGNORE INTO deleted_conversations(id, deleted)
         SELECT ?1, ?2 WHERE EXISTS
             (SELECT 1 FROM conversations WHERE forked_from_conversation = ?1)",
    )?;
    for id in deleted {
        record.execute(params![id.as_str(), now])?;
    }
    conn.execute_batch(PRUNE_DELETED_ORIGINS)?;
    Ok(())
}

/// The deleted-conversation records no remaining conversation names.
pub(crate) const PRUNE_DELETED_ORIGINS: &str = "DELETE FROM deleted_conversations
     WHERE NOT EXISTS (SELECT 1 FROM conversations c
                       WHERE c.forked_from_conversation = deleted_conversations.id)";

/// Delete one conversation's rows, pushing every node they referenced onto
/// `released`; false (and nothing deleted) when it is gone or was updated
/// since the selection saw it.
fn delete_conversation(
    conn: &Connection,
    doomed: &Doomed,
    released: &mut Vec<Vec<u8>>,
    swept: &mut Swept,
) -> Result<bool> {
    let id = doomed.id.as_str();
    let Some((head, origin, updated)) = conn
        .prepare_cached("SELECT head, forked_from_node, updated FROM conversations WHERE id = ?1")?
        .query_row([id], |row| {
            Ok((
                row.get::<_, Option<Vec<u8>>>(0)?,
                row.get::<_, Option<Vec<u8>>>(1)?,
                row.get::<_, i64>(2)?,
            ))
        })
        .optional()?
    else {
        return Ok(false);
    };
    if doomed.updated_ms.is_some_and(|seen| seen != updated) {
        return Ok(false);
    }
    released.extend(head);
    released.extend(origin);
    let mut runs: Vec<String> = conn
        .prepare_cached("SELECT id FROM runs WHERE conversation = ?1")?
        .query_map([id], |row| row.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    let mut reruns = conn.prepare_cached(
        "SELECT id, turn_node, request_head, answer_head, sample_runs, baseline_runs
         FROM reruns WHERE conversation = ?1",
    )?;
    let mut rows = reruns.query([id])?;
    while let Some(row) = rows.next()? {
        released.push(row.get(1)?);
        released.extend(row.get::<_, Option<Vec<u8>>>(2)?);
        released.extend(row.get::<_, Option<Vec<u8>>>(3)?);
        for column in [4, 5] {
            let listed: Vec<String> = serde_json::from_str(&row.get::<_, String>(column)?)?;
            runs.extend(listed);
        }
        swept.reruns += 1;
    }
    drop(rows);
    conn.prepare_cached("DELETE FROM reruns WHERE conversation = ?1")?
        .execute([id])?;
    delete_replay_turns(conn, TurnsOf::Conversation, id, released, &mut runs, swept)?;
    runs.sort();
    runs.dedup();
    delete_runs(conn, &runs, released, swept)?;
    conn.prepare_cached("DELETE FROM tool_offers WHERE conversation = ?1")?
        .execute([id])?;
    conn.prepare_cached("DELETE FROM conversations WHERE id = ?1")?
        .execute([id])?;
    Ok(true)
}

/// Delete `runs` (their tool lists and links too), pushing the nodes they
/// referenced onto `released` and releasing their bodies' pieces.
fn delete_runs(
    conn: &Connection,
    runs: &[String],
    released: &mut Vec<Vec<u8>>,
    swept: &mut Swept,
) -> Result<()> {
    let mut bodies = Vec::new();
    for run in runs {
        let heads = conn
            .prepare_cached(
                "SELECT input_head, output_head, request_piece FROM runs WHERE id = ?1",
            )?
            .query_row([run], |row| {
                Ok((
                    row.get::<_, Option<Vec<u8>>>(0)?,
                    row.get::<_, Option<Vec<u8>>>(1)?,
                    row.get::<_, Option<Vec<u8>>>(2)?,
                ))
            })
            .optional()?;
        let Some((input, output, body)) = heads else {
            continue;
        };
        released.extend(input);
        released.extend(output);
        bodies.extend(body);
        conn.prepare_cached("DELETE FROM run_tools WHERE run_id = ?1")?
            .execute([run])?;
        conn.prepare_cached("DELETE FROM run_links WHERE run_id = ?1")?
            .execute([run])?;
        conn.prepare_cached("DELETE FROM runs WHERE id = ?1")?
            .execute([run])?;
        swept.runs += 1;
    }
    swept.body_pieces += bodies::release(conn, bodies)?;
    Ok(())
}

/// Whose replayed turns [`delete_replay_turns`] deletes.
#[derive(Clone, Copy)]
enum TurnsOf {
    /// Those of a conversation's turns (in every replay).
    Conversation,
    /// Every turn of one replay.
    Replay,
}

/// Delete the replayed turns of conversation `id`'s turns, or of replay
/// `id`, pushing their nodes onto `released` and their runs (a judge's
/// too) onto `runs`; then the replays left without turns.
fn delete_replay_turns(
    conn: &Connection,
    of: TurnsOf,
    id: &str,
    released: &mut Vec<Vec<u8>>,
    runs: &mut Vec<String>,
    swept: &mut Swept,
) -> Result<()> {
    let mut touched: Vec<String> = Vec::new();
    let mut turns = conn.prepare_cached(match of {
        TurnsOf::Conversation => {
            "DELETE FROM replay_turns WHERE conversation = ?1
             RETURNING replay, turn_node, answer_head, runs, detail"
        }
        TurnsOf::Replay => {
            "DELETE FROM replay_turns WHERE replay = ?1
             RETURNING replay, turn_node, answer_head, runs, detail"
        }
    })?;
    let mut rows = turns.query([id])?;
    while let Some(row) = rows.next()? {
        let replay: String = row.get(0)?;
        released.push(row.get(1)?);
        released.extend(row.get::<_, Option<Vec<u8>>>(2)?);
        runs.extend(replay_turn_runs(
            &row.get::<_, String>(3)?,
            &row.get::<_, String>(4)?,
        )?);
        if !touched.contains(&replay) {
            touched.push(replay);
        }
        swept.replay_turns += 1;
    }
    drop(rows);
    for replay in &touched {
        conn.prepare_cached(
            "UPDATE replays SET turns = (SELECT count(*) FROM replay_turns WHERE replay = ?1)
             WHERE id = ?1",
        )?
        .execute([replay])?;
        swept.replays += conn
            .prepare_cached("DELETE FROM replays WHERE id = ?1 AND turns = 0")?
            .execute([replay])? as u64;
    }
    Ok(())
}

/// Find the candidates above the `released` references and delete those
/// nothing reaches ([`decide_and_delete`]).
fn collect(conn: &Connection, released: &[Vec<u8>], swept: &mut Swept) -> Result<()> {
    clear_temp_tables(conn)?;
    {
        let mut insert = conn.prepare_cached(
            "INSERT OR IGNORE INTO forget_refs(seq) SELECT seq FROM nodes WHERE id = ?1",
        )?;
        for node in released {
            insert.execute([node])?;
        }
    }
    conn.execute_batch(
        "INSERT OR IGNORE INTO forget_candidates(seq, parent)
         WITH RECURSIVE up(seq) AS (
             SELECT seq FROM forget_refs
             UNION
             SELECT n.parent FROM nodes n JOIN up ON n.seq = up.seq WHERE n.parent IS NOT NULL
         )
         SELECT n.seq, n.parent FROM up JOIN nodes n ON n.seq = up.seq;",
    )?;
    decide_and_delete(conn, swept)
}

/// The temporary tables a deletion fills, created when missing, empty.
fn clear_temp_tables(conn: &Connection) -> Result<()> {
    conn.execute_batch(
        "CREATE TEMP TABLE IF NOT EXISTS forget_refs(seq INTEGER PRIMARY KEY);
         CREATE TEMP TABLE IF NOT EXISTS forget_candidates(seq INTEGER PRIMARY KEY, parent INTEGER);
         DELETE FROM forget_refs; DELETE FROM forget_candidates;",
    )?;
    Ok(())
}

/// Find the seeds among `forget_candidates`, and delete the candidates
/// they do not keep (children first).
fn decide_and_delete(conn: &Connection, swept: &mut Swept) -> Result<()> {
    let candidates: Vec<(i64, Option<i64>, i64)> = conn
        .prepare("SELECT seq, parent FROM forget_candidates")?
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?, row.get(0)?)))?
        .collect::<rusqlite::Result<_>>()?;
    let seeds: HashSet<i64> = conn
        .prepare(SEEDS)?
        .query_map([], |row| row.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    let decided = sweep(&candidates, &seeds);
    swept.kept = decided.kept;
    swept.labelled = conn
        .prepare_cached(
            "SELECT count(*) FROM forget_candidates c JOIN nodes n ON n.seq = c.seq
             WHERE EXISTS (SELECT 1 FROM labels WHERE node = n.id)",
        )?
        .query_row([], |row| row.get::<_, i64>(0))? as u64;
    for seq in &decided.boundary {
        let id: Vec<u8> = conn
            .prepare_cached("SELECT id FROM nodes WHERE seq = ?1")?
            .query_row([seq], |row| row.get(0))?;
        swept.boundary.push(node_id(&id)?);
    }
    delete_nodes(conn, &decided.garbage, swept)?;
    conn.execute_batch("DELETE FROM forget_refs; DELETE FROM forget_candidates;")?;
    Ok(())
}

/// The candidates something remaining reaches directly: a conversation's
/// head or origin, a run's input or output head, a rerun's nodes, a
/// replayed turn's original or answer (its request lies above the
/// original), a label, or a child that is no candidate (a thread this
/// deletion does not touch).
const SEEDS: &str = "SELECT c.seq FROM forget_candidates c JOIN nodes n ON n.seq = c.seq
     WHERE EXISTS (SELECT 1 FROM conversations WHERE head = n.id)
        OR EXISTS (SELECT 1 FROM conversations WHERE forked_from_node = n.id)
        OR EXISTS (SELECT 1 FROM runs WHERE output_head = n.id)
        OR EXISTS (SELECT 1 FROM runs WHERE input_head = n.id)
        OR EXISTS (SELECT 1 FROM reruns WHERE turn_node = n.id)
        OR EXISTS (SELECT 1 FROM reruns WHERE request_head = n.id)
        OR EXISTS (SELECT 1 FROM reruns WHERE answer_head = n.id)
        OR EXISTS (SELECT 1 FROM labels WHERE node = n.id)
        OR EXISTS (SELECT 1 FROM replay_turns WHERE turn_node = n.id)
        OR EXISTS (SELECT 1 FROM replay_turns WHERE answer_head = n.id)
        OR EXISTS (SELECT 1 FROM nodes x WHERE x.parent = c.seq
                   AND x.seq NOT IN (SELECT seq FROM forget_candidates))";

/// Delete the garbage nodes (children first), their search-index rows, the
/// blobs no remaining node references and their texts' cached embeddings.
fn delete_nodes(conn: &Connection, garbage: &[i64], swept: &mut Swept) -> Result<()> {
    if !garbage.is_empty() {
        conn.prepare_cached(COUNT_ERASURE)?.execute([])?;
    }
    let mut blobs: HashSet<Digest> = HashSet::new();
    let mut embedded: HashSet<Digest> = HashSet::new();
    for seq in garbage {
        let (id, body): (Vec<u8>, Vec<u8>) = conn
            .prepare_cached("SELECT id, body FROM nodes WHERE seq = ?1")?
            .query_row([seq], |row| Ok((row.get(0)?, row.get(1)?)))?;
        blobs.extend(blob_refs(&body));
        // An undecodable node (`verify` reports it) has no index row to
        // remove: it was never indexed.
        if let Ok(message) = decode_message(conn, node_id(&id)?, &body) {
            let words = index_text(&message);
            if !words.is_empty() {
                conn.prepare_cached(
                    "INSERT INTO node_search(node_search, rowid, words) VALUES ('delete', ?1, ?2)",
                )?
                .execute(params![seq, words])?;
            }
            embedded.extend(embedded_digests(&message));
            super::calls::unindex_calls(conn, *seq, &message)?;
        }
        conn.prepare_cached("DELETE FROM nodes WHERE seq = ?1")?
            .execute([seq])?;
        swept.nodes += 1;
    }
    swept.blobs = delete_unused_blobs(conn, blobs)?;
    swept.embeddings = delete_embeddings(conn, embedded)?;
    Ok(())
}
