/*!
Full-text search on SQLite: an FTS5 table over the words crate::search
indexes a message by (schema 11, filled by `graph::insert_node`, the one
place a node is inserted, through [`index_node`]), searched within a thread
by its lanes or across the database, and the conversations a match belongs
to, found by its lane first.
*/

use super::SqliteStore;
use super::graph::{decode_message, lane_spans};
use crate::backend::BoxFuture;
use crate::codec::node_id;
use crate::error::{Result, StoreError};
use crate::records::ConversationId;
use crate::runs::replay_only_message;
use crate::search::{ConversationRef, LANE_END, Parsed, Search, WALK_LIMIT, index_text};
use rusqlite::{Connection, OptionalExtension, params};
use skein_core::{Message, NodeId, Role};

impl Search for SqliteStore {
    fn search_nodes<'a>(
        &'a self,
        query: &'a Parsed,
        role: Option<Role>,
        within: Option<NodeId>,
        replays: bool,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<(NodeId, Message)>>> {
        let query = query.clone();
        self.deferred(move |store| store.search_nodes(&query, role, within, replays, limit))
    }

    fn containing<'a>(
        &'a self,
        node: NodeId,
        cap: usize,
        excluding: &'a [String],
    ) -> BoxFuture<'a, Result<Vec<ConversationRef>>> {
        let excluding = serde_json::to_string(excluding).expect("strings serialise");
        self.deferred(move |store| store.containing(node, cap, &excluding))
    }
}

impl SqliteStore {
    /// The nodes matching `query`, newest first, at most `limit`; only
    /// those of `role`, and of the thread ending at `within`, when given;
    /// without `replays`, none only a replay's runs produced.
    pub(crate) fn search_nodes(
        &self,
        query: &Parsed,
        role: Option<Role>,
        within: Option<NodeId>,
        replays: bool,
        limit: usize,
    ) -> Result<Vec<(NodeId, Message)>> {
        self.read(|conn| {
            // The thread as the lanes it crosses: [[lane, top depth], ...].
            let spans = match within {
                Some(head) => Some(serde_json::to_string(
                    &lane_spans(conn, head)?
                        .iter()
                        .map(|span| [span.lane, span.top])
                        .collect::<Vec<_>>(),
                )?),
                None => None,
            };
            let mut stmt = conn.prepare_cached(&format!(
                "SELECT n.id, n.body FROM node_search s CROSS JOIN nodes n ON n.seq = s.rowid
                 WHERE node_search MATCH ?1
                   AND (?2 IS NULL OR n.role = ?2)
                   AND (?3 IS NULL OR EXISTS (
                        SELECT 1 FROM json_each(?3) j
                        WHERE j.value ->> 0 = n.lane AND n.depth <= j.value ->> 1))
                   AND (?5 OR NOT {})
                 ORDER BY s.rowid DESC LIMIT ?4",
                replay_only_message("n.id")
            ))?;
            let mut rows = stmt.query(params![
                query.fts5(),
                role.map(Role::code),
                spans,
                limit as i64,
                replays
            ])?;
            let mut found = Vec::new();
            while let Some(row) = rows.next()? {
                let id = node_id(blob(row, 0)?)?;
                let message = decode_message(conn, id, blob(row, 1)?)?;
                found.push((id, message));
            }
            Ok(found)
        })
    }

    /// Up to `cap` conversations whose thread contains `node`: those with
    /// their head among the last [`LANE_END`] nodes of the node's lane (at or
    /// below it; the common case, read backwards from the lane index), else
    /// the deepest one with its head anywhere in the lane below it, else
    /// those found walking the nodes below it, nearest first, up to
    /// [`WALK_LIMIT`] nodes.
    pub(crate) fn containing(
        &self,
        node: NodeId,
        cap: usize,
        excluding: &str,
    ) -> Result<Vec<ConversationRef>> {
        self.read(|conn| {
            let Some((seq, lane, depth)) = conn
                .prepare_cached("SELECT seq, lane, depth FROM nodes WHERE id = ?1")?
                .query_row([node.as_bytes()], |row| {
                    Ok((
                        row.get::<_, i64>(0)?,
                        row.get::<_, Option<i64>>(1)?,
                        row.get::<_, i64>(2)?,
                    ))
                })
                .optional()?
            else {
                return Err(StoreError::NodeNotFound(node));
            };
            let refs = |stmt: &mut rusqlite::CachedStatement<'_>,
                        params: &[&dyn rusqlite::ToSql]|
             -> Result<Vec<ConversationRef>> {
                let rows = stmt.query_map(params, |row| {
                    Ok(ConversationRef {
                        id: ConversationId(row.get(0)?),
                        name: row.get(1)?,
                    })
                })?;
                Ok(rows.collect::<rusqlite::Result<_>>()?)
            };
            if let Some(lane) = lane {
                // Heads are mostly at a lane's end: look there for up to
                // `cap`, then down the rest of the lane for one.
                let mut at_end = conn.prepare_cached(
                    "SELECT c.id, c.name FROM (
                         SELECT id FROM nodes WHERE lane = ?1 AND depth >= ?2
                         ORDER BY depth DESC LIMIT ?3
                     ) h CROSS JOIN conversations c ON c.head = h.id
                     WHERE c.id NOT IN (SELECT value FROM json_each(?5))
                     LIMIT ?4",
                )?;
                let found = refs(
                    &mut at_end,
                    &[&lane, &depth, &(LANE_END as i64), &(cap as i64), &excluding],
                )?;
                if !found.is_empty() {
                    return Ok(found);
                }
                let mut in_lane = conn.prepare_cached(
                    "SELECT c.id, c.name FROM nodes h CROSS JOIN conversations c ON c.head = h.id
                     WHERE h.lane = ?1 AND h.depth >= ?2
                       AND c.id NOT IN (SELECT value FROM json_each(?3))
                     ORDER BY h.depth DESC LIMIT 1",
                )?;
                let found = refs(&mut in_lane, &[&lane, &depth, &excluding])?;
                if !found.is_empty() {
                    return Ok(found);
                }
            }
            let mut below = conn.prepare_cached(
                "WITH RECURSIVE sub(seq) AS (
                     SELECT ?1
                     UNION ALL
                     SELECT n.seq FROM nodes n JOIN sub ON n.parent = sub.seq
                     LIMIT ?2
                 )
                 SELECT c.id, c.name FROM sub CROSS JOIN nodes n ON n.seq = sub.seq
                 CROSS JOIN conversations c ON c.head = n.id
                 WHERE c.id NOT IN (SELECT value FROM json_each(?4))
                 ORDER BY c.updated DESC LIMIT ?3",
            )?;
            refs(
                &mut below,
                &[&seq, &(WALK_LIMIT as i64), &(cap as i64), &excluding],
            )
        })
    }
}

fn blob<'r>(row: &'r rusqlite::Row<'_>, index: usize) -> rusqlite::Result<&'r [u8]> {
    row.get_ref(index)?.as_blob().map_err(rusqlite::Error::from)
}

/// Index one stored node's words (nothing for a message without text).
pub(crate) fn index_node(conn: &Connection, seq: i64, message: &Message) -> Result<()> {
    let words = index_text(message);
    if !words.is_empty() {
        conn.prepare_cached("INSERT INTO node_search(rowid, words) VALUES (?1, ?2)")?
            .execute(params![seq, words])?;
    }
    Ok(())
}

/// Migration 11: the FTS5 index, filled from every stored node. A node that
/// cannot be decoded is left out (`verify` reports it).
pub(crate) fn add_search(conn: &Connection) -> Result<()> {
    conn.execute_batch(
        "CREATE VIRTUAL TABLE node_search USING fts5(
             words, content = '', columnsize = 0,
             tokenize = 'unicode61 remove_diacritics 0')",
    )?;
    let mut nodes = conn.prepare("SELECT seq, id, body FROM nodes ORDER BY seq")?;
    let mut rows = nodes.query([])?;
    while let Some(row) = rows.next()? {
        let seq: i64 = row.get(0)?;
        let Ok(id) = node_id(blob(row, 1)?) else {
            continue;
        };
        if let Ok(message) = decode_message(conn, id, blob(row, 2)?) {
            index_node(conn, seq, &message)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use rusqlite::Connection;

    /// The index needs FTS5, which rusqlite's `bundled` SQLite compiles in.
    #[test]
    fn the_bundled_sqlite_has_fts5() {
        let conn = Connection::open_in_memory().unwrap();
        let used: i64 = conn
            .query_row(
                "SELECT sqlite_compileoption_used('ENABLE_FTS5')",
                [],
                |row| row.get(0),
            )
            .unwrap();
        assert_eq!(used, 1);
    }
}
