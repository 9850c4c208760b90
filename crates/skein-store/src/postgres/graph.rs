/*!
The node graph on PostgreSQL: appending threads, loading them back, and
walking children and subtrees.

An append finds the newest node the database already holds by probing the
thread's nearest ancestors in batches (8, then 64, then 512, ... ids per
query, each stopping at a node already marked as stored here), then writes
all missing blobs and nodes in two statements with `ON CONFLICT DO NOTHING`
(queued on a pipeline, so they share a round trip with whatever the caller
queues after them), so a writer racing on the same nodes neither fails nor
duplicates them.

Nodes are filed in lanes as on SQLite (sqlite/graph.rs; the rule is in
crate::lanes), a lane being named by its first node's id. The probe that
finds the stored ancestor also says whether it is its lane's deepest node,
and the new nodes' lanes are decided from that before they are inserted.
Two writers extending the same lane tip at once both decide to continue it;
the unique `(lane, depth)` index lets only one of them insert, and the
other's transaction fails with a unique violation on `nodes_by_lane`, which
the write loop (mod.rs) retries like a serialization failure: the retry sees
the winner's node and starts a lane of its own. One more race is caught after
the insert: when a concurrent writer stored some of a batch's nodes first
(they are skipped), they may sit in another lane than this writer assumed
for them, so their children would not continue it; when a batch wrote fewer
rows than it held, one query checks its nodes' lanes and a mismatch fails
the attempt the same retryable way ([`StoreError::Interfered`]).

A thread loads in one query: a recursive walk over the lanes it crosses (a
lane's first node is found by its id, its parent is the deepest node of the
next lane up), then one range scan of the `(lane, depth)` index per lane,
blobs included (each node lists the digests its body references in
`blob_refs`); every row's parent is checked as the thread is assembled.
*/

use super::PgStore;
use super::pipeline::{Param, Pipeline};
use crate::backend::{Backend, BoxFuture};
use crate::codec::{self, BLOB_THRESHOLD, node_id};
use crate::error::{Result, StoreError};
#[cfg(any(test, feature = "testkit"))]
use crate::graph::{AppendReport, mark_all};
use crate::graph::{Graph, StoredNode, TreeEntry, preview};
use crate::lanes::Lanes;
use deadpool_postgres::GenericClient;
use skein_core::encoding::encode_body;
use skein_core::{Digest, Message, Node, NodeId, StoreKey, Thread};
use std::collections::{HashMap, HashSet};
use tokio_postgres::Row;

/// Ancestors checked by the first existence probe; each later probe checks
/// eight times more, so a stateless client resending a deep history costs a
/// few round trips, and a normal turn exactly one.
const FIRST_PROBE: usize = 8;
/// The largest batch of ids one probe asks about.
const LAST_PROBE: usize = 32_768;

/// The lanes a thread crosses (`spans`: each lane and the depth of the
/// thread's deepest node in it, head first; depths strictly fall, so even a
/// damaged database ends the walk), then each lane's rows up to that depth.
/// Rows come back grouped by lane; the caller orders them by depth.
const LOAD_THREAD: &str = "WITH RECURSIVE spans(lane, top) AS (
         SELECT lane, depth FROM nodes WHERE id = $1
         UNION ALL
         SELECT p.lane, p.depth
         FROM spans s JOIN nodes f ON f.id = s.lane JOIN nodes p ON p.id = f.parent
         WHERE p.depth < s.top
     )
     SELECT n.id, n.parent, n.depth, n.body,
            CASE WHEN n.blob_refs IS NOT NULL THEN ARRAY(
                SELECT b.digest || b.bytes FROM blobs b
                WHERE b.digest IN (
                    SELECT substring(n.blob_refs FROM i * 32 + 1 FOR 32)
                    FROM generate_series(0, length(n.blob_refs) / 32 - 1) AS i))
            END
     FROM spans s CROSS JOIN LATERAL (
         SELECT id, parent, depth, body, blob_refs FROM nodes
         WHERE lane = s.lane AND depth <= s.top
     ) n";

impl Graph for PgStore {
    #[cfg(any(test, feature = "testkit"))]
    fn append<'a>(&'a self, thread: &'a Thread) -> BoxFuture<'a, Result<AppendReport>> {
        Box::pin(async move {
            let key = self.key();
            let (written, marks) = write_retrying!(self, |tx| {
                let missing = find_missing(tx, key, thread).await?;
                let mut pipeline = Pipeline::new();
                let nodes = queue_nodes(&mut pipeline, tx, missing.rows()).await?;
                let changed = pipeline.run().await?;
                let written = match &nodes {
                    Some(nodes) => nodes.written(tx, &changed).await?,
                    None => 0,
                };
                Ok((written, missing.into_marks()))
            })?;
            mark_all(&marks, key);
            Ok(AppendReport {
                written,
                head: thread.head_id(),
            })
        })
    }

    fn load_thread(&self, head: NodeId) -> BoxFuture<'_, Result<Thread>> {
        Box::pin(self.thread(head))
    }

    fn node(&self, id: NodeId) -> BoxFuture<'_, Result<StoredNode>> {
        Box::pin(self.stored_node(id))
    }

    fn contains(&self, id: NodeId) -> BoxFuture<'_, Result<bool>> {
        Box::pin(self.holds_node(id))
    }

    fn children(&self, id: NodeId) -> BoxFuture<'_, Result<Vec<NodeId>>> {
        Box::pin(self.children_of(id))
    }

    fn nodes_calling<'a>(
        &'a self,
        call_id: &'a str,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<NodeId>>> {
        Box::pin(async move {
            let rows = self
                .rows(
                    "SELECT c.node FROM tool_calls c JOIN nodes n ON n.id = c.node
                     WHERE c.call_id = $1 ORDER BY n.seq LIMIT $2",
                    &[&call_id, &(limit as i64)],
                )
                .await?;
            rows.iter().map(|row| node_id(row.get(0))).collect()
        })
    }

    fn subtree(&self, root: NodeId, limit: usize) -> BoxFuture<'_, Result<Vec<TreeEntry>>> {
        Box::pin(self.subtree_of(root, limit))
    }

    fn ancestry(&self, head: NodeId, limit: usize) -> BoxFuture<'_, Result<Vec<TreeEntry>>> {
        Box::pin(self.ancestry_of(head, limit))
    }
}

impl PgStore {
    /// The subtree under `root`, its `limit` nodes nearest the root.
    async fn subtree_of(&self, root: NodeId, limit: usize) -> Result<Vec<TreeEntry>> {
        let (rows, blobs) = reading!(self, |client| {
            let statement = client
                .prepare_cached(
                    // The server evaluates a recursive query only as far
                    // as its reader fetches: `picked` stops the walk.
                    "WITH RECURSIVE sub(id) AS (
                         SELECT id FROM nodes WHERE id = $1
                         UNION ALL
                         SELECT n.id FROM nodes n JOIN sub ON n.parent = sub.id
                     ), picked AS (SELECT id FROM sub LIMIT $2)
                     SELECT n.id, n.parent, n.depth, n.body
                     FROM picked JOIN nodes n ON n.id = picked.id ORDER BY n.seq",
                )
                .await?;
            let rows = client
                .query(&statement, &[&root.as_bytes().as_slice(), &(limit as i64)])
                .await?;
            let blobs = fetch_blobs(client, rows.iter().map(|row| row.get::<_, &[u8]>(3))).await?;
            Ok((rows, blobs))
        })?;
        tree_entries(&rows, &blobs, root)
    }

    /// The last `limit` nodes of the thread ending at `head`, oldest first.
    async fn ancestry_of(&self, head: NodeId, limit: usize) -> Result<Vec<TreeEntry>> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let limit = limit.min(i64::MAX as usize) as i64;
        let (rows, blobs) = reading!(self, |client| {
            let statement = client
                .prepare_cached(
                    "WITH RECURSIVE up(id, parent, k) AS (
                         SELECT id, parent, 1::bigint FROM nodes WHERE id = $1
                         UNION ALL
                         SELECT n.id, n.parent, up.k + 1 FROM nodes n JOIN up ON n.id = up.parent
                         WHERE up.k < $2
                     )
                     SELECT n.id, n.parent, n.depth, n.body
                     FROM up JOIN nodes n ON n.id = up.id ORDER BY up.k DESC",
                )
                .await?;
            let rows = client
                .query(&statement, &[&head.as_bytes().as_slice(), &limit])
                .await?;
            let blobs = fetch_blobs(client, rows.iter().map(|row| row.get::<_, &[u8]>(3))).await?;
            Ok((rows, blobs))
        })?;
        tree_entries(&rows, &blobs, head)
    }
}

/// The entries of subtree or ancestry rows (id, parent, depth, body);
/// none means `asked` is not stored.
fn tree_entries(
    rows: &[Row],
    blobs: &HashMap<Digest, Vec<u8>>,
    asked: NodeId,
) -> Result<Vec<TreeEntry>> {
    let mut entries = Vec::with_capacity(rows.len());
    for row in rows {
        let id = node_id(row.get(0))?;
        let message = decode(id, row.get(3), blobs)?;
        entries.push(TreeEntry {
            id,
            parent: codec::optional_node_id(row.get(1))?,
            depth: row.get::<_, i64>(2) as u64,
            role: message.role,
            preview: preview(&message, 60),
        });
    }
    if entries.is_empty() {
        return Err(StoreError::NodeNotFound(asked));
    }
    Ok(entries)
}

impl PgStore {
    /// The thread ending at `head`, in one query.
    /// One node by id: its row, then the blobs its body refers to, on one
    /// connection.
    async fn holds_node(&self, id: NodeId) -> Result<bool> {
        let rows = self
            .rows(
                "SELECT 1 FROM nodes WHERE id = $1",
                &[&id.as_bytes().as_slice()],
            )
            .await?;
        Ok(!rows.is_empty())
    }

    async fn children_of(&self, id: NodeId) -> Result<Vec<NodeId>> {
        let rows = self
            .rows(
                "SELECT id FROM nodes WHERE parent = $1 ORDER BY seq",
                &[&id.as_bytes().as_slice()],
            )
            .await?;
        rows.iter().map(|row| node_id(row.get(0))).collect()
    }

    async fn stored_node(&self, id: NodeId) -> Result<StoredNode> {
        let (parent, depth, body, blobs) = reading!(self, |client| {
            let statement = client
                .prepare_cached("SELECT parent, depth, body FROM nodes WHERE id = $1")
                .await?;
            let row = client
                .query_opt(&statement, &[&id.as_bytes().as_slice()])
                .await?
                .ok_or(StoreError::NodeNotFound(id))?;
            let (parent, depth, body): (Option<Vec<u8>>, i64, Vec<u8>) =
                (row.get(0), row.get(1), row.get(2));
            let blobs = fetch_blobs(client, [body.as_slice()]).await?;
            Ok((parent, depth, body, blobs))
        })?;
        Ok(StoredNode {
            id,
            parent: codec::optional_node_id(parent.as_deref())?,
            depth: depth as u64,
            message: decode(id, &body, &blobs)?,
        })
    }

    async fn thread(&self, head: NodeId) -> Result<Thread> {
        // A task of the runtime, so the rows reach it without waking the
        // caller for each batch (bridge.rs).
        let rows = self
            .read_spawned(move |client| {
                Box::pin(async move {
                    let statement = client.prepare_cached(LOAD_THREAD).await?;
                    Ok(client
                        .query(&statement, &[&head.as_bytes().as_slice()])
                        .await?)
                })
            })
            .await?;
        thread_of_rows(&rows, self.key(), head)
    }
}

/// The thread ending at `head`, read in `client`'s transaction (an
/// import's).
pub(crate) async fn load_thread_in<C: GenericClient>(
    client: &C,
    key: StoreKey,
    head: NodeId,
) -> Result<Thread> {
    let statement = client.prepare_cached(LOAD_THREAD).await?;
    let rows = client
        .query(&statement, &[&head.as_bytes().as_slice()])
        .await?;
    thread_of_rows(&rows, key, head)
}

/// The thread `LOAD_THREAD`'s rows for `head` hold.
fn thread_of_rows(rows: &[Row], key: StoreKey, head: NodeId) -> Result<Thread> {
    if rows.is_empty() {
        return Err(StoreError::NodeNotFound(head));
    }
    // Lanes come head first, each in depth order; each row's depth is
    // read once for the sort.
    let mut order: Vec<(i64, &Row)> = rows.iter().map(|row| (row.get::<_, i64>(2), row)).collect();
    order.sort_by_key(|(depth, _)| *depth);
    let rows: Vec<&Row> = order.into_iter().map(|(_, row)| row).collect();
    let mut blobs = HashMap::new();
    for row in &rows {
        for joined in row.get::<_, Option<Vec<&[u8]>>>(4).unwrap_or_default() {
            if let Some((digest, bytes)) = joined.split_first_chunk::<32>() {
                blobs.insert(Digest(*digest), bytes.to_vec());
            }
        }
    }
    let mut thread = Thread::new();
    for row in &rows {
        let id = node_id(row.get(0))?;
        let parent = codec::optional_node_id(row.get(1))?;
        if parent != thread.head_id() {
            return Err(StoreError::MalformedRow(format!(
                "node {} is filed in a lane it does not continue; run `skein verify`",
                id.short()
            )));
        }
        let message = decode(id, row.get(3), &blobs)?;
        thread = thread.push_with_id(id, message);
        thread.head().expect("just pushed").mark_persisted_in(key);
    }
    if thread.head_id() != Some(head) {
        return Err(StoreError::MalformedRow(format!(
            "the lanes of node {} do not lead to it; run `skein verify`",
            head.short()
        )));
    }
    Ok(thread)
}

/// What an append must write: the nodes of a thread the database lacks,
/// oldest first, with the lane each is to be filed in, and the stored nodes
/// that still need a persistence mark (to mark after commit, with the
/// missing ones once they are written).
pub(crate) struct Missing<'t> {
    pub nodes: Vec<&'t Node>,
    lanes: Vec<NodeId>,
    pub marks: Vec<&'t Node>,
    /// The root of the thread (its first node's id): the stored ancestor's
    /// `root`, or the first missing node's id when nothing is stored.
    pub root: Option<NodeId>,
}

impl<'t> Missing<'t> {
    /// What [`queue_nodes`] takes for each missing node.
    pub(crate) fn rows(&self) -> impl Iterator<Item = NodeRow<'t>> + '_ {
        self.nodes
            .iter()
            .zip(&self.lanes)
            .map(|(node, lane)| NodeRow {
                id: node.id(),
                parent: node.parent_id(),
                depth: node.depth(),
                message: node.message(),
                root: self.root,
                lane: *lane,
            })
    }

    /// Every node to mark once the transaction commits.
    pub(crate) fn into_marks(mut self) -> Vec<&'t Node> {
        self.marks.append(&mut self.nodes);
        self.marks
    }
}

/// A stored node as a new child needs it: its thread's root and, when it is
/// the deepest node of its lane, that lane and its depth.
struct Stored {
    root: Option<NodeId>,
    tip: Option<(NodeId, i64)>,
}

/// Find the nodes of `thread` the database lacks, and the lanes they join.
pub(crate) async fn find_missing<'t>(
    tx: &impl GenericClient,
    key: StoreKey,
    thread: &'t Thread,
) -> Result<Missing<'t>> {
    let probe = tx
        // Whether the node is its lane's deepest, as a scalar subquery
        // (one index probe per row): `NOT EXISTS` may be planned as one
        // hashed scan of every node, taken for a batch of ids.
        .prepare_cached(
            "SELECT n.id, n.root, n.lane, n.depth,
                    (SELECT TRUE FROM nodes c WHERE c.lane = n.lane AND c.depth = n.depth + 1) IS NULL
             FROM nodes n WHERE n.id = ANY($1) FOR KEY SHARE OF n",
        )
        .await?;
    let mut missing: Vec<&Node> = Vec::new();
    let mut marks: Vec<&Node> = Vec::new();
    let mut stored: Option<(NodeId, Stored)> = None;
    let mut ancestors = thread.ancestors();
    let mut size = FIRST_PROBE;
    'probing: loop {
        let mut batch = Vec::with_capacity(size.min(thread.len()));
        for node in ancestors.by_ref() {
            batch.push(node);
            if batch.len() == size || node.is_persisted_in(key) {
                break;
            }
        }
        if batch.is_empty() {
            break;
        }
        let ids: Vec<Vec<u8>> = batch.iter().map(|node| node.id().0.to_vec()).collect();
        let mut present: HashMap<Vec<u8>, Stored> = HashMap::new();
        for row in tx.query(&probe, &[&ids]).await? {
            let lane = row.get::<_, &[u8]>(2);
            let deepest: bool = row.get(4);
            present.insert(
                row.get(0),
                Stored {
                    root: row.get::<_, Option<&[u8]>>(1).and_then(NodeId::from_slice),
                    tip: NodeId::from_slice(lane)
                        .filter(|_| deepest)
                        .map(|lane| (lane, row.get(3))),
                },
            );
        }
        for node in batch {
            if let Some(found) = present.remove(node.id().0.as_slice()) {
                stored = Some((node.id(), found));
                if !node.is_persisted_in(key) {
                    marks.push(node);
                }
                break 'probing;
            }
            // Missing though marked stored: a deletion collected it since
            // (crate::forget). Its content is here: it is written again.
            missing.push(node);
        }
        // Bounded: a thread whose stored nodes a deletion collected meanwhile
        // ends a batch at every node still marked stored.
        size = size.saturating_mul(8).min(LAST_PROBE);
    }
    missing.reverse();
    let mut lanes = Lanes::new();
    let mut root = None;
    if let Some((id, found)) = stored {
        root = found.root;
        if let Some((lane, depth)) = found.tip {
            lanes.stored_tip(id, lane, depth);
        }
    }
    if missing
        .first()
        .is_some_and(|first| first.parent_id().is_none())
    {
        root = missing.first().map(|first| first.id());
    }
    let lanes = missing
        .iter()
        .map(|node| lanes.file(node.id(), node.parent_id().as_ref(), node.depth() as i64))
        .collect();
    Ok(Missing {
        nodes: missing,
        lanes,
        marks,
        root,
    })
}

/// One node for [`queue_nodes`] to insert.
pub(crate) struct NodeRow<'m> {
    pub id: NodeId,
    pub parent: Option<NodeId>,
    pub depth: u64,
    pub message: &'m Message,
    /// The id of its thread's first node (itself for a first message).
    pub root: Option<NodeId>,
    /// The lane it is filed in (crate::lanes decides).
    pub lane: NodeId,
}

/// A node insert queued by [`queue_nodes`]: where its row count lands in
/// the pipeline's results, and the nodes it carries.
pub(crate) struct QueuedNodes {
    at: usize,
    ids: Vec<Vec<u8>>,
}

impl QueuedNodes {
    /// The nodes the insert wrote, given the pipeline's row counts. When a
    /// concurrent writer had stored some of them first (they were skipped),
    /// checks that the nodes' lanes still chain, and fails with the
    /// retryable [`StoreError::Interfered`] when they do not.
    pub(crate) async fn written(&self, tx: &impl GenericClient, changed: &[u64]) -> Result<usize> {
        let written = changed[self.at] as usize;
        if written < self.ids.len() {
            let statement = tx
                .prepare_cached(
                    "SELECT 1 FROM nodes c JOIN nodes p ON p.id = c.parent
                     WHERE c.id = ANY($1) AND c.lane <> c.id AND c.lane <> p.lane LIMIT 1",
                )
                .await?;
            if tx.query_opt(&statement, &[&self.ids]).await?.is_some() {
                return Err(StoreError::Interfered(
                    "another writer stored some of these nodes in other lanes at the same time",
                ));
            }
        }
        Ok(written)
    }
}

/// Queue the insertion of nodes (each after its parent) and their blobs,
/// skipping any the database already holds. Returns the queued node insert
/// (`None` when there is nothing to insert).
pub(crate) async fn queue_nodes<'c, 'm, C: GenericClient>(
    pipeline: &mut Pipeline<'c>,
    tx: &'c C,
    nodes: impl Iterator<Item = NodeRow<'m>>,
) -> Result<Option<QueuedNodes>> {
    let mut ids = Vec::new();
    let mut parents = Vec::new();
    let mut depths = Vec::new();
    let mut roles = Vec::new();
    let mut bodies = Vec::new();
    let mut blob_refs = Vec::new();
    let mut roots = Vec::new();
    let mut words = Vec::new();
    let mut lanes = Vec::new();
    let (mut call_ids, mut calling) = (Vec::new(), Vec::new());
    let mut blob_digests = Vec::new();
    let mut blob_bytes: Vec<Vec<u8>> = Vec::new();
    let mut seen = HashSet::new();
    for NodeRow {
        id,
        parent,
        depth,
        message,
        root,
        lane,
    } in nodes
    {
        let encoded = encode_body(message, BLOB_THRESHOLD);
        blob_refs.push((!encoded.blobs.is_empty()).then(|| {
            encoded
                .blobs
                .iter()
                .flat_map(|(digest, _)| digest.0)
                .collect::<Vec<u8>>()
        }));
        for (digest, bytes) in encoded.blobs {
            if seen.insert(digest) {
                blob_digests.push(digest.as_bytes().to_vec());
                blob_bytes.push(bytes.to_vec());
            }
        }
        for call in super::calls::call_ids(message) {
            call_ids.push(call.to_string());
            calling.push(id.0.to_vec());
        }
        ids.push(id.0.to_vec());
        parents.push(parent.map(|parent| parent.0.to_vec()));
        depths.push(depth as i64);
        roles.push(i16::from(message.role.code()));
        bodies.push(encoded.bytes);
        roots.push(root.map(|root| root.0.to_vec()));
        words.push(super::search::words(message));
        lanes.push(lane.0.to_vec());
    }
    if ids.is_empty() {
        return Ok(None);
    }
    if !blob_digests.is_empty() {
        let statement = tx
            .prepare_cached(
                "INSERT INTO blobs(digest, bytes)
                 SELECT * FROM unnest($1::bytea[], $2::bytea[])
                 ON CONFLICT (digest) DO UPDATE SET bytes = EXCLUDED.bytes WHERE FALSE",
            )
            .await?;
        let params: Vec<Param> = vec![Box::new(blob_digests), Box::new(blob_bytes)];
        pipeline.push(tx, statement, params);
    }
    // ORDER BY keeps each parent's `seq` below its children's.
    let statement = tx
        .prepare_cached(
            "INSERT INTO nodes(id, parent, depth, role, body, blob_refs, root, search, lane)
             SELECT id, parent, depth, role, body, blob_refs, root,
                    to_tsvector('pg_catalog.simple', words), lane
             FROM unnest($1::bytea[], $2::bytea[], $3::int8[], $4::int2[], $5::bytea[], $6::bytea[],
                         $7::bytea[], $8::text[], $9::bytea[])
                  WITH ORDINALITY
                  AS t(id, parent, depth, role, body, blob_refs, root, words, lane, position)
             ORDER BY position
             ON CONFLICT (id) DO NOTHING",
        )
        .await?;
    let queued_ids = ids.clone();
    let params: Vec<Param> = vec![
        Box::new(ids),
        Box::new(parents),
        Box::new(depths),
        Box::new(roles),
        Box::new(bodies),
        Box::new(blob_refs),
        Box::new(roots),
        Box::new(words),
        Box::new(lanes),
    ];
    let at = pipeline.push(tx, statement, params);
    if !call_ids.is_empty() {
        let statement = tx.prepare_cached(super::calls::INSERT_TOOL_CALLS).await?;
        let params: Vec<Param> = vec![Box::new(call_ids), Box::new(calling)];
        pipeline.push(tx, statement, params);
    }
    Ok(Some(QueuedNodes {
        at,
        ids: queued_ids,
    }))
}

/// Whether `error` is a lane another writer took first (see the module
/// documentation): worth retrying, like a serialization failure.
pub(crate) fn is_lane_conflict(error: &tokio_postgres::Error) -> bool {
    error.as_db_error().is_some_and(|db| {
        *db.code() == tokio_postgres::error::SqlState::UNIQUE_VIOLATION
            && db.constraint() == Some("nodes_by_lane")
    })
}

/// Every blob the given bodies reference, in one query (none when no body
/// references a blob).
pub(crate) async fn fetch_blobs<'b>(
    client: &impl GenericClient,
    bodies: impl IntoIterator<Item = &'b [u8]>,
) -> Result<HashMap<Digest, Vec<u8>>> {
    let digests: HashSet<Digest> = bodies.into_iter().flat_map(codec::blob_refs).collect();
    if digests.is_empty() {
        return Ok(HashMap::new());
    }
    let wanted: Vec<&[u8]> = digests.iter().map(|d| d.as_bytes().as_slice()).collect();
    let statement = client
        .prepare_cached("SELECT digest, bytes FROM blobs WHERE digest = ANY($1)")
        .await?;
    let mut blobs = HashMap::with_capacity(wanted.len());
    for row in client.query(&statement, &[&wanted]).await? {
        if let Ok(digest) = <[u8; 32]>::try_from(row.get::<_, &[u8]>(0)) {
            blobs.insert(Digest(digest), row.get(1));
        }
    }
    Ok(blobs)
}

/// Decode a stored body with its blobs already fetched.
pub(crate) fn decode(id: NodeId, body: &[u8], blobs: &HashMap<Digest, Vec<u8>>) -> Result<Message> {
    codec::decode_message(id, body, |digest| Ok(blobs.get(digest).cloned()))
}
