/*!
Request bodies on SQLite: `request_pieces` (schema 22), one row per piece
of a body's skeleton (crate::bodies), a piece referring to its parent by id
as on PostgreSQL; a run keeps its last piece's id, the body's digest and
its length.

Storing a body finds the last of its pieces already stored and inserts
only the pieces after it, in a constant number of statements: one probe of
the body's last few pieces (a re-sent history finds one of them stored),
one insert per [`INSERT_BATCH`] new pieces; a body that shares less with
what is stored is searched by halves (what is stored of a chain is always
a prefix of it: a piece is inserted after its parent and deleted only
after its children). So a proxied turn writes what is new, at any depth.
Reading one walks its chain up from the last piece, then reads the nodes
its references name. When runs go, the
pieces no remaining run's chain reaches are deleted from the chains' ends
([`release`]); erasure takes the pieces of the bodies that carried an
erased message, except those a body that did not carry it shares
([`erase_carried`]).
*/

use super::SqliteStore;
use crate::backend::Backend;
use crate::bodies::{
    Assembled, Bodies, BodyHead, BodyThreads, Cut, PieceContent, Recut, RequestBody, StoredPiece,
    cut, digest_of, input_messages,
};
use crate::codec::optional_node_id;
use crate::error::{Result, StoreError};
use crate::records::{ConversationId, RunId};
use rusqlite::{Connection, OptionalExtension, params, params_from_iter};
use skein_core::{Digest, NodeId, StoreKey, Thread};
use std::collections::{HashMap, HashSet};

/// How many of a body's last pieces one probe looks for.
const PROBE: usize = 8;

/// New pieces inserted per statement.
const INSERT_BATCH: usize = 32;

/// Store the pieces of a body's `cut` that are not stored yet; what the
/// run keeps.
pub(crate) fn store(conn: &Connection, cut: &Cut<'_>) -> Result<BodyHead> {
    let ids: Vec<&Digest> = cut.pieces.iter().map(|piece| &piece.id).collect();
    let first_new = stored_prefix(conn, &ids)?;
    for batch in cut.pieces[first_new..].chunks(INSERT_BATCH) {
        let rows = vec!["(?, ?, ?, ?)"; batch.len()].join(", ");
        let mut insert = conn.prepare_cached(&format!(
            "INSERT INTO request_pieces(id, parent, bytes, len) VALUES {rows}"
        ))?;
        let mut values: Vec<rusqlite::types::Value> = Vec::with_capacity(4 * batch.len());
        for piece in batch {
            let bytes = cut.bytes(piece);
            values.push(piece.id.as_bytes().to_vec().into());
            values.push(piece.parent.map(|parent| parent.as_bytes().to_vec()).into());
            values.push(bytes.to_vec().into());
            values.push((bytes.len() as i64).into());
        }
        insert.execute(params_from_iter(values))?;
    }
    Ok(cut.head.clone())
}

/// How many of `ids` (a body's chain, in order) are stored: a prefix.
fn stored_prefix(conn: &Connection, ids: &[&Digest]) -> Result<usize> {
    let probed = &ids[ids.len().saturating_sub(PROBE)..];
    if probed.is_empty() {
        return Ok(0);
    }
    // The last stored among the last few, by its place (one row at most).
    let candidates = (1..=probed.len())
        .map(|place| format!("({place}, ?)"))
        .collect::<Vec<_>>()
        .join(", ");
    let found: Option<usize> = conn
        .prepare_cached(&format!(
            "SELECT c.column1 FROM (VALUES {candidates}) AS c
             WHERE EXISTS (SELECT 1 FROM request_pieces p WHERE p.id = c.column2)
             ORDER BY c.column1 DESC LIMIT 1"
        ))?
        .query_row(
            params_from_iter(probed.iter().map(|id| id.as_bytes().as_slice())),
            |row| row.get::<_, i64>(0),
        )
        .optional()?
        .map(|place| ids.len() - probed.len() + place as usize);
    if let Some(stored) = found {
        return Ok(stored);
    }
    // Fewer shared: halve the rest (stored ones always form a prefix).
    let mut find = conn.prepare_cached("SELECT 1 FROM request_pieces WHERE id = ?1")?;
    let (mut low, mut high) = (0, ids.len() - probed.len());
    while low < high {
        let middle = (low + high).div_ceil(2);
        if find.exists([ids[middle - 1].as_bytes()])? {
            low = middle;
        } else {
            high = middle - 1;
        }
    }
    Ok(low)
}

/// The body of the run whose row holds `last`, `digest` and `len`.
pub(crate) fn load(
    conn: &Connection,
    run: &str,
    last: Option<Vec<u8>>,
    digest: &Digest,
    len: i64,
) -> Result<RequestBody> {
    let mut pieces = Vec::new();
    if let Some(last) = last {
        let mut chain = conn.prepare_cached(
            "WITH RECURSIVE chain(id, depth) AS (
                 SELECT ?1, 0
                 UNION ALL
                 SELECT p.parent, c.depth + 1 FROM request_pieces p JOIN chain c ON p.id = c.id
                 WHERE p.parent IS NOT NULL
             )
             SELECT p.id, p.parent, p.bytes, p.erased, p.len FROM chain c
             JOIN request_pieces p ON p.id = c.id ORDER BY c.depth DESC",
        )?;
        let mut rows = chain.query([last])?;
        while let Some(row) = rows.next()? {
            let content = match row.get::<_, Option<Vec<u8>>>(2)? {
                Some(bytes) => PieceContent::Bytes(bytes),
                None => PieceContent::Erased {
                    digest: digest_of(row.get(3)?)?,
                    len: row.get::<_, i64>(4)? as usize,
                },
            };
            pieces.push(StoredPiece {
                id: digest_of(row.get(0)?)?,
                parent: row
                    .get::<_, Option<Vec<u8>>>(1)?
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
    let mut messages = HashMap::new();
    let mut node = conn.prepare_cached("SELECT body FROM nodes WHERE id = ?1")?;
    for id in assembled.nodes().map_err(unreadable)? {
        let body: Option<Vec<u8>> = node
            .query_row([id.as_bytes()], |row| row.get(0))
            .optional()?;
        if let Some(body) = body {
            messages.insert(id, super::graph::decode_message(conn, id, &body)?);
        }
    }
    assembled
        .body(&messages, digest, len as usize)
        .map_err(unreadable)
}

/// Delete the pieces ending at `lasts` (the last pieces of deleted runs'
/// bodies) that no remaining run's body reaches: each chain from its end
/// up to the first piece another chain or run still needs. The count.
pub(crate) fn release(conn: &Connection, lasts: Vec<Vec<u8>>) -> Result<u64> {
    let mut delete = conn.prepare_cached(
        "DELETE FROM request_pieces WHERE id = ?1
             AND NOT EXISTS (SELECT 1 FROM request_pieces c WHERE c.parent = ?1)
             AND NOT EXISTS (SELECT 1 FROM runs WHERE request_piece = ?1)
         RETURNING parent",
    )?;
    let mut deleted = 0;
    for last in lasts {
        let mut at = Some(last);
        while let Some(id) = at {
            at = match delete
                .query_row([id], |row| row.get::<_, Option<Vec<u8>>>(0))
                .optional()?
            {
                Some(parent) => {
                    deleted += 1;
                    parent
                }
                None => None,
            };
        }
    }
    Ok(deleted)
}

/// Erase the pieces of the bodies that carried an erased message:
/// `carried` lists those runs with their bodies' last pieces. A piece that
/// the body of a run not listed also holds stays: that body did not carry
/// the message, so the piece is bytes before it. Each erased piece keeps
/// its digest and length. The count of pieces erased.
pub(crate) fn erase_carried(conn: &Connection, carried: &[(String, Vec<u8>)]) -> Result<u64> {
    if carried.is_empty() {
        return Ok(0);
    }
    let carrying: HashSet<&str> = carried.iter().map(|(run, _)| run.as_str()).collect();
    let mut up = conn.prepare_cached("SELECT parent FROM request_pieces WHERE id = ?1")?;
    // A chain from its last piece up, stopping before a piece in `stop`;
    // and whether it went up to the body's first piece.
    let mut chain_of = |last: &[u8], stop: &HashSet<Vec<u8>>| -> Result<(Vec<Vec<u8>>, bool)> {
        let mut chain = Vec::new();
        let mut at = Some(last.to_vec());
        while let Some(id) = at {
            if stop.contains(&id) {
                return Ok((chain, false));
            }
            at = up
                .query_row([&id], |row| row.get::<_, Option<Vec<u8>>>(0))
                .optional()?
                .flatten();
            chain.push(id);
        }
        Ok((chain, true))
    };
    let mut doomed: HashSet<Vec<u8>> = HashSet::new();
    let mut roots: Vec<Vec<u8>> = Vec::new();
    for (_, last) in carried {
        let (chain, whole) = chain_of(last, &doomed)?;
        if whole {
            roots.extend(chain.last().cloned());
        }
        doomed.extend(chain);
    }
    // The other runs whose bodies begin with a doomed chain's first piece
    // (found down the pieces' tree), and the doomed pieces they hold.
    let mut below = conn.prepare_cached(
        "WITH RECURSIVE tree(id) AS (
             SELECT ?1
             UNION ALL
             SELECT p.id FROM request_pieces p JOIN tree t ON p.parent = t.id
         )
         SELECT r.id, r.request_piece FROM tree t JOIN runs r ON r.request_piece = t.id",
    )?;
    let mut kept: HashSet<Vec<u8>> = HashSet::new();
    let mut seen: HashSet<Vec<u8>> = HashSet::new();
    for root in roots {
        let sharing: Vec<(String, Vec<u8>)> = below
            .query_map([root], |row| Ok((row.get(0)?, row.get(1)?)))?
            .collect::<rusqlite::Result<_>>()?;
        for (run, last) in sharing {
            if !carrying.contains(run.as_str()) {
                let (chain, _) = chain_of(&last, &seen)?;
                kept.extend(chain.iter().filter(|id| doomed.contains(*id)).cloned());
                seen.extend(chain);
            }
        }
    }
    let mut read = conn.prepare_cached("SELECT bytes FROM request_pieces WHERE id = ?1")?;
    let mut erase =
        conn.prepare_cached("UPDATE request_pieces SET bytes = NULL, erased = ?2 WHERE id = ?1")?;
    let mut erased = 0;
    for id in doomed.difference(&kept) {
        let bytes: Option<Vec<u8>> = read.query_row([id], |row| row.get(0))?;
        if let Some(bytes) = bytes {
            erase.execute(params![id, Digest::of(&bytes).as_bytes()])?;
            erased += 1;
        }
    }
    Ok(erased)
}

/// The stored thread a run's body refers to: its conversation's, when that
/// passes through the run's `input`, else the thread up to it (the last
/// one loaded is held in `threads` for the runs that follow).
pub(crate) fn input_thread(
    conn: &Connection,
    key: StoreKey,
    threads: &mut BodyThreads,
    conversation: Option<&ConversationId>,
    input: NodeId,
) -> Result<Thread> {
    if let Some(thread) = threads.holding(input) {
        return Ok(thread);
    }
    let head: Option<Vec<u8>> = match conversation {
        Some(conversation) => conn
            .prepare_cached("SELECT head FROM conversations WHERE id = ?1")?
            .query_row([conversation.as_str()], |row| row.get(0))
            .optional()?
            .flatten(),
        None => None,
    };
    if let Some(head) = optional_node_id(head.as_deref())? {
        let thread = super::graph::load_thread(conn, key, head)?;
        if thread.at(input).is_some() {
            return Ok(threads.keep(thread));
        }
    }
    Ok(threads.keep(super::graph::load_thread(conn, key, input)?))
}

/// Cut the bodies of `runs` again against their stored threads (bodies
/// stored before they referred to their messages get smaller): each one
/// rewritten points its run at its new pieces, and the old pieces no run
/// reaches any more go. A body with an erased span is left as it is (its
/// bytes are not all known).
pub(crate) fn recut(conn: &Connection, key: StoreKey, runs: &[RunId]) -> Result<Recut> {
    let mut recut = Recut::default();
    let mut threads = BodyThreads::default();
    let mut row = conn.prepare_cached(
        "SELECT conversation, input_head, request_piece, request_digest, request_len
         FROM runs WHERE id = ?1 AND request_digest IS NOT NULL",
    )?;
    for run in runs {
        type Row = (
            Option<String>,
            Option<Vec<u8>>,
            Option<Vec<u8>>,
            Vec<u8>,
            i64,
        );
        let Some((conversation, input, last, digest, len)): Option<Row> = row
            .query_row([run.as_str()], |row| {
                Ok((
                    row.get(0)?,
                    row.get(1)?,
                    row.get(2)?,
                    row.get(3)?,
                    row.get(4)?,
                ))
            })
            .optional()?
        else {
            continue;
        };
        recut.bodies += 1;
        let body = load(conn, run.as_str(), last.clone(), &digest_of(digest)?, len)?;
        let (Some(text), Some(input)) = (body.whole(), optional_node_id(input.as_deref())?) else {
            recut.erased += u64::from(!body.erased().is_empty());
            continue;
        };
        let conversation = conversation.map(ConversationId);
        let thread = input_thread(conn, key, &mut threads, conversation.as_ref(), input)?;
        let messages = input_messages(Some(&thread), Some(input));
        let head = store(conn, &cut(text.as_bytes(), &messages))?;
        let new_last = head.last.map(|last| last.as_bytes().to_vec());
        if new_last == last {
            continue;
        }
        conn.prepare_cached("UPDATE runs SET request_piece = ?2 WHERE id = ?1")?
            .execute(params![run.as_str(), new_last])?;
        recut.rewritten += 1;
        recut.pieces_released += release(conn, last.into_iter().collect())?;
    }
    Ok(recut)
}

impl Bodies for SqliteStore {
    fn bodied_runs(&self) -> Result<Vec<RunId>> {
        self.read(|conn| {
            conn.prepare(
                "SELECT id FROM runs WHERE request_digest IS NOT NULL ORDER BY started, id",
            )?
            .query_map([], |row| Ok(RunId(row.get(0)?)))?
            .collect::<rusqlite::Result<_>>()
            .map_err(Into::into)
        })
    }

    fn recut_bodies(&self, runs: &[RunId]) -> Result<Recut> {
        self.write(|tx| recut(tx, self.key(), runs))
    }
}
