/*!
The node graph on SQLite: appending threads, loading them back, and
walking children and subtrees (the PostgreSQL one is postgres/graph.rs).

Appending walks back from the head only until it meets a node this database
holds (known from the node's in-memory mark, or found by one indexed
lookup), so its cost is proportional to the new nodes. Because a node is
only ever inserted after its parent, holding a node implies holding its whole
ancestry, and `seq` order is a topological order.

Loading reads lanes, not parent links. A *lane* is a chain of nodes, one
per depth, each the parent of the next: a new node joins its parent's lane
when the parent is that lane's deepest node, and otherwise (a root, or a
branch off the middle of a lane) starts a lane of its own, numbered by its
own `seq`. A conversation that only grows is therefore one lane, read by one
range scan of the `(lane, depth)` index, and a thread crosses one more lane
per branch point on its way to the root. The lane column is derived data:
`verify` checks it against the parent links, and loading checks every row's
parent as it goes.
*/

use super::SqliteStore;
use crate::backend::{Backend, BoxFuture};
use crate::codec::{BLOB_THRESHOLD, node_id, optional_node_id};
use crate::error::{Result, StoreError};
use crate::graph::{Graph, StoredNode, TreeEntry, preview};
use crate::lanes::Lanes;
#[cfg(any(test, feature = "testkit"))]
use crate::{
    blocking,
    graph::{AppendReport, mark_all},
};
use rusqlite::{Connection, OptionalExtension, params};
use skein_core::encoding::encode_body;
use skein_core::{Message, Node, NodeId, StoreKey, Thread};

impl Graph for SqliteStore {
    #[cfg(any(test, feature = "testkit"))]
    fn append<'a>(&'a self, thread: &'a Thread) -> BoxFuture<'a, Result<AppendReport>> {
        Box::pin(blocking::run_borrowing(
            self,
            |store| store.append(thread),
            || {
                let thread = thread.clone();
                move |store: &SqliteStore| store.append(&thread)
            },
        ))
    }

    fn load_thread(&self, head: NodeId) -> BoxFuture<'_, Result<Thread>> {
        self.deferred(move |store| store.load_thread(head))
    }

    fn node(&self, id: NodeId) -> BoxFuture<'_, Result<StoredNode>> {
        self.point_read(move |store| store.node(id))
    }

    fn contains(&self, id: NodeId) -> BoxFuture<'_, Result<bool>> {
        self.point_read(move |store| store.contains(id))
    }

    fn children(&self, id: NodeId) -> BoxFuture<'_, Result<Vec<NodeId>>> {
        self.point_read(move |store| store.children(id))
    }

    fn nodes_calling<'a>(
        &'a self,
        call_id: &'a str,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<NodeId>>> {
        let call_id = call_id.to_string();
        self.deferred(move |store| store.nodes_calling(&call_id, limit))
    }

    fn subtree(&self, root: NodeId, limit: usize) -> BoxFuture<'_, Result<Vec<TreeEntry>>> {
        self.deferred(move |store| store.subtree(root, limit))
    }

    fn ancestry(&self, head: NodeId, limit: usize) -> BoxFuture<'_, Result<Vec<TreeEntry>>> {
        self.deferred(move |store| store.ancestry(head, limit))
    }
}

impl SqliteStore {
    #[cfg(any(test, feature = "testkit"))]
    /// Store every node of `thread` this database does not hold yet, in one
    /// transaction. Marks the nodes as persisted here once committed.
    pub(crate) fn append(&self, thread: &Thread) -> Result<AppendReport> {
        let mut marks = Vec::new();
        let written = self.write(|tx| {
            marks.clear();
            append_nodes(tx, self.key(), thread, &mut marks)
        })?;
        mark_all(&marks, self.key());
        Ok(AppendReport {
            written,
            head: thread.head_id(),
        })
    }

    /// Load the thread whose head is `head`: one range scan per lane it
    /// runs through.
    pub(crate) fn load_thread(&self, head: NodeId) -> Result<Thread> {
        self.read(|conn| match load_thread(conn, self.key(), head) {
            // Each statement of a load reads its own snapshot: a deletion
            // (crate::forget) committing between them can take the rows the
            // first ones found. Then the head is gone (its thread with it),
            // or, when it was written again meanwhile, a second load reads it
            // whole. Damage that is really there fails both ways.
            Err(StoreError::MalformedRow(_)) if seq_of(conn, head)?.is_none() => {
                Err(StoreError::NodeNotFound(head))
            }
            Err(StoreError::MalformedRow(_)) => load_thread(conn, self.key(), head),
            other => other,
        })
    }

    /// One node by id, without loading its thread.
    pub(crate) fn node(&self, id: NodeId) -> Result<StoredNode> {
        self.read(|conn| {
            let row = conn
                .prepare_cached(
                    "SELECT (SELECT p.id FROM nodes p WHERE p.seq = n.parent), n.depth, n.body
                     FROM nodes n WHERE n.id = ?1",
                )?
                .query_row([id.as_bytes()], |row| {
                    Ok((
                        row.get::<_, Option<Vec<u8>>>(0)?,
                        row.get::<_, i64>(1)?,
                        row.get::<_, Vec<u8>>(2)?,
                    ))
                })
                .optional()?
                .ok_or(StoreError::NodeNotFound(id))?;
            let (parent, depth, body) = row;
            Ok(StoredNode {
                id,
                parent: optional_node_id(parent.as_deref())?,
                depth: depth as u64,
                message: decode_message(conn, id, &body)?,
            })
        })
    }

    /// Whether the database holds the node.
    pub(crate) fn contains(&self, id: NodeId) -> Result<bool> {
        self.read(|conn| Ok(seq_of(conn, id)?.is_some()))
    }

    /// The nodes whose parent is `id`, oldest first.
    pub(crate) fn children(&self, id: NodeId) -> Result<Vec<NodeId>> {
        self.read(|conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT c.id FROM nodes c JOIN nodes p ON c.parent = p.seq WHERE p.id = ?1 ORDER BY c.seq",
            )?;
            let rows = stmt.query_map([id.as_bytes()], |row| row.get::<_, Vec<u8>>(0))?;
            rows.map(|row| node_id(&row?))
                .collect::<Result<Vec<_>>>()
        })
    }

    pub(crate) fn nodes_calling(&self, call_id: &str, limit: usize) -> Result<Vec<NodeId>> {
        self.read(|conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT n.id FROM tool_calls c JOIN nodes n ON n.seq = c.node
                 WHERE c.call_id = ?1 ORDER BY c.node LIMIT ?2",
            )?;
            let rows = stmt.query_map(params![call_id, limit as i64], |row| {
                row.get::<_, Vec<u8>>(0)
            })?;
            rows.map(|row| node_id(&row?)).collect::<Result<Vec<_>>>()
        })
    }

    /// The subtree under `root` (inclusive): its `limit` nodes nearest the
    /// root (breadth first), in topological order. The walk stops there.
    /// `CROSS JOIN` keeps the walk driving the query: otherwise the planner
    /// may scan every node in `seq` order to skip the final sort.
    pub(crate) fn subtree(&self, root: NodeId, limit: usize) -> Result<Vec<TreeEntry>> {
        self.read(|conn| {
            let mut stmt = conn.prepare_cached(
                "WITH RECURSIVE sub(seq) AS (
                     SELECT seq FROM nodes WHERE id = ?1
                     UNION ALL
                     SELECT n.seq FROM nodes n JOIN sub ON n.parent = sub.seq
                     LIMIT ?2
                 )
                 SELECT n.id, p.id, n.depth, n.body
                 FROM sub CROSS JOIN nodes n ON n.seq = sub.seq LEFT JOIN nodes p ON p.seq = n.parent
                 ORDER BY sub.seq",
            )?;
            tree_entries(conn, &mut stmt, root, limit)
        })
    }

    /// The last `limit` nodes of the thread ending at `head`, oldest first.
    pub(crate) fn ancestry(&self, head: NodeId, limit: usize) -> Result<Vec<TreeEntry>> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        self.read(|conn| {
            let mut stmt = conn.prepare_cached(
                "WITH RECURSIVE up(seq, k) AS (
                     SELECT seq, 1 FROM nodes WHERE id = ?1
                     UNION ALL
                     SELECT n.parent, up.k + 1 FROM up JOIN nodes n ON n.seq = up.seq
                     WHERE n.parent IS NOT NULL AND up.k < ?2
                 )
                 SELECT n.id, p.id, n.depth, n.body
                 FROM up JOIN nodes n ON n.seq = up.seq LEFT JOIN nodes p ON p.seq = n.parent
                 ORDER BY up.k DESC",
            )?;
            tree_entries(conn, &mut stmt, head, limit)
        })
    }
}

/// The entries a subtree or ancestry statement lists (id, parent id,
/// depth, body; `?1` the node asked about, `?2` the limit); none means
/// `asked` is not stored.
fn tree_entries(
    conn: &Connection,
    stmt: &mut rusqlite::CachedStatement<'_>,
    asked: NodeId,
    limit: usize,
) -> Result<Vec<TreeEntry>> {
    let rows = stmt.query_map(params![asked.as_bytes(), limit as i64], |row| {
        Ok((
            row.get::<_, Vec<u8>>(0)?,
            row.get::<_, Option<Vec<u8>>>(1)?,
            row.get::<_, i64>(2)?,
            row.get::<_, Vec<u8>>(3)?,
        ))
    })?;
    let mut entries = Vec::new();
    for row in rows {
        let (id, parent, depth, body) = row?;
        let id = node_id(&id)?;
        let message = decode_message(conn, id, &body)?;
        entries.push(TreeEntry {
            id,
            parent: optional_node_id(parent.as_deref())?,
            depth: depth as u64,
            role: message.role,
            preview: preview(&message, 60),
        });
    }
    if entries.is_empty() {
        return Err(StoreError::NodeNotFound(asked));
    }
    Ok(entries)
}

/// Insert the nodes of `thread` the database lacks; push every node that is
/// now known to be stored onto `marks` (to be marked after commit).
pub(crate) fn append_nodes<'t>(
    conn: &Connection,
    key: StoreKey,
    thread: &'t Thread,
    marks: &mut Vec<&'t Node>,
) -> Result<usize> {
    let mut missing: Vec<&Node> = Vec::new();
    let mut parent: Option<Placed> = None;
    for node in thread.ancestors() {
        let known = node.is_persisted_in(key);
        match placed(conn, node.id())? {
            Some(stored) => {
                parent = Some(stored);
                if !known {
                    marks.push(node);
                }
                break;
            }
            // Also a node marked stored that a deletion collected since
            // (crate::forget): its content is here, so it is written again.
            None => missing.push(node),
        }
    }
    for node in missing.iter().rev() {
        parent = Some(insert_node(
            conn,
            node.id(),
            parent,
            node.depth(),
            node.message(),
        )?);
        marks.push(node);
    }
    Ok(missing.len())
}

/// Where a stored node stands: its `seq`, and the `seq` of its thread's
/// first node (`None` only in a damaged database, which `verify` reports).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Placed {
    pub seq: i64,
    pub root: Option<i64>,
}

/// Where the node `id` is stored, if it is.
pub(crate) fn placed(conn: &Connection, id: NodeId) -> Result<Option<Placed>> {
    let mut stmt = conn.prepare_cached("SELECT seq, root FROM nodes WHERE id = ?1")?;
    Ok(stmt
        .query_row([id.as_bytes()], |row| {
            Ok(Placed {
                seq: row.get(0)?,
                root: row.get(1)?,
            })
        })
        .optional()?)
}

/// Insert one node (its blobs first) under `parent` (none for a first
/// message); returns where it is stored.
pub(crate) fn insert_node(
    conn: &Connection,
    id: NodeId,
    parent: Option<Placed>,
    depth: u64,
    message: &Message,
) -> Result<Placed> {
    let encoded = encode_body(message, BLOB_THRESHOLD);
    if !encoded.blobs.is_empty() {
        let mut insert_blob = conn.prepare_cached(
            "INSERT INTO blobs(digest, bytes) VALUES (?1, ?2) ON CONFLICT DO NOTHING",
        )?;
        for (digest, bytes) in &encoded.blobs {
            insert_blob.execute(params![digest.as_bytes(), bytes])?;
        }
    }
    let parent_seq = parent.map(|parent| parent.seq);
    let seq = conn
        .prepare_cached("SELECT IFNULL(MAX(seq), 0) + 1 FROM nodes")?
        .query_row([], |row| row.get::<_, i64>(0))?;
    let lane = file_lane(conn, parent_seq, seq, depth as i64)?;
    // A first message starts a lane, so its own seq is known here.
    let root = match parent {
        Some(parent) => parent.root,
        None => Some(seq),
    };
    conn.prepare_cached(
        "INSERT INTO nodes(seq, id, parent, depth, role, body, lane, root)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
    )?
    .execute(params![
        seq,
        id.as_bytes(),
        parent_seq,
        depth as i64,
        message.role.code(),
        encoded.bytes,
        lane,
        root
    ])?;
    super::search::index_node(conn, seq, message)?;
    super::calls::index_calls(conn, seq, message)?;
    Ok(Placed { seq, root })
}

/// The lane a new node (`seq`, at `depth`) under `parent_seq` is filed in,
/// by the rule crate::lanes keeps, given whether its parent is the deepest
/// node of its lane.
fn file_lane(conn: &Connection, parent_seq: Option<i64>, seq: i64, depth: i64) -> Result<i64> {
    let mut lanes = Lanes::new();
    if let Some(parent_seq) = parent_seq {
        let tip = conn
            .prepare_cached(
                "SELECT p.lane, p.depth FROM nodes p WHERE p.seq = ?1 AND p.lane IS NOT NULL
                 AND NOT EXISTS (SELECT 1 FROM nodes c WHERE c.lane = p.lane AND c.depth > p.depth)",
            )?
            .query_row([parent_seq], |row| Ok((row.get(0)?, row.get(1)?)))
            .optional()?;
        if let Some((lane, parent_depth)) = tip {
            lanes.stored_tip(parent_seq, lane, parent_depth);
        }
    }
    Ok(lanes.file(seq, parent_seq.as_ref(), depth))
}

pub(crate) fn seq_of(conn: &Connection, id: NodeId) -> Result<Option<i64>> {
    let mut stmt = conn.prepare_cached("SELECT seq FROM nodes WHERE id = ?1")?;
    Ok(stmt
        .query_row([id.as_bytes()], |row| row.get(0))
        .optional()?)
}

pub(crate) fn load_thread(conn: &Connection, key: StoreKey, head: NodeId) -> Result<Thread> {
    let spans = lane_spans(conn, head)?;
    // Both statements return a lane's rows up to `top` in depth order (in a
    // lane, seq order is depth order): by the lane index, or by walking the
    // table between the lane's first and top rows, which reads the rows in
    // storage order without a seek per row but also passes over other lanes'
    // rows stored in between. The walk is taken when those are at most as
    // many as the lane's own.
    let mut by_index = conn.prepare_cached(
        "SELECT seq, parent, id, body FROM nodes WHERE lane = ?1 AND depth <= ?2 ORDER BY depth",
    )?;
    let mut by_walk = conn.prepare_cached(
        "SELECT seq, parent, id, body FROM nodes
         WHERE seq BETWEEN ?1 AND ?2 AND +lane = ?1 ORDER BY seq",
    )?;
    let mut thread = Thread::new();
    let mut last_seq: Option<i64> = None;
    let mut below = -1;
    for span in spans.iter().rev() {
        let own_rows = span.top - below;
        below = span.top;
        let stored_between = span.top_seq - span.lane + 1;
        let mut rows = if stored_between <= 2 * own_rows {
            by_walk.query(params![span.lane, span.top_seq])?
        } else {
            by_index.query(params![span.lane, span.top])?
        };
        while let Some(row) = rows.next()? {
            let seq: i64 = row.get(0)?;
            let parent: Option<i64> = row.get(1)?;
            let blob = |index| row.get_ref(index)?.as_blob().map_err(rusqlite::Error::from);
            let id = node_id(blob(2)?)?;
            if parent != last_seq {
                return Err(StoreError::MalformedRow(format!(
                    "node {} is filed in lane {} but does not continue it; run `skein verify`",
                    id.short(),
                    span.lane
                )));
            }
            let message = decode_message(conn, id, blob(3)?)?;
            thread = thread.push_with_id(id, message);
            thread.head().expect("just pushed").mark_persisted_in(key);
            last_seq = Some(seq);
        }
    }
    if thread.head_id() != Some(head) {
        return Err(StoreError::MalformedRow(format!(
            "the lanes of node {} do not lead to it; run `skein verify`",
            head.short()
        )));
    }
    Ok(thread)
}

/// Where a thread runs through one lane: the lane (the seq of its first
/// node) and the depth and seq of the thread's deepest node in it.
pub(crate) struct Span {
    pub lane: i64,
    pub top: i64,
    pub top_seq: i64,
}

/// The lanes a thread runs through, head first. One indexed lookup per lane
/// (a recursive query would build a temporary table for its queue, which
/// costs more than the lookups for the few lanes a thread crosses).
pub(crate) fn lane_spans(conn: &Connection, head: NodeId) -> Result<Vec<Span>> {
    let span = |row: &rusqlite::Row<'_>| {
        Ok((
            row.get::<_, Option<i64>>(0)?,
            row.get::<_, i64>(1)?,
            row.get::<_, i64>(2)?,
        ))
    };
    let mut next = conn
        .prepare_cached("SELECT lane, depth, seq FROM nodes WHERE id = ?1")?
        .query_row([head.as_bytes()], span)
        .optional()?
        .ok_or(StoreError::NodeNotFound(head))?;
    let mut base = conn.prepare_cached(
        "SELECT lane, depth, seq FROM nodes WHERE seq = (SELECT parent FROM nodes WHERE seq = ?1)",
    )?;
    let mut spans: Vec<Span> = Vec::new();
    loop {
        let (Some(lane), top, top_seq) = next else {
            return Err(StoreError::MalformedRow(format!(
                "a node on the path to {} has no lane; run `skein verify`",
                head.short()
            )));
        };
        if spans.last().is_some_and(|below| top >= below.top) || top_seq < lane {
            return Err(StoreError::MalformedRow(format!(
                "the lanes on the path to {} do not descend; run `skein verify`",
                head.short()
            )));
        }
        spans.push(Span { lane, top, top_seq });
        match base.query_row([lane], span).optional()? {
            Some(found) => next = found,
            None => return Ok(spans),
        }
    }
}

/// Decode a stored body, fetching any blobs it references.
pub(crate) fn decode_message(conn: &Connection, id: NodeId, body: &[u8]) -> Result<Message> {
    crate::codec::decode_message(id, body, |digest| {
        let mut stmt = conn.prepare_cached("SELECT bytes FROM blobs WHERE digest = ?1")?;
        Ok(stmt
            .query_row([digest.as_bytes()], |row| row.get::<_, Vec<u8>>(0))
            .optional()?)
    })
}
