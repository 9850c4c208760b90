/*!
Full-text search on PostgreSQL: the port of `crate::search`'s SQL. Each node
carries `search`, the `tsvector` of the words `search::index_text` gives
(made by `to_tsvector('simple', ...)` as the node is inserted, so any
language works and nothing is stemmed), under a GIN index; a query is the
`to_tsquery` text `Parsed::tsquery` builds from the same words. The
planner cannot tell a rare word from a common one before it runs, so a
search first reads up to `CANDIDATES` matches from the GIN index unordered
and, when those are all, takes the newest itself; only a word with more
matches is found by walking `seq` backwards, where the newest come soon.

The conversations containing a match are found as on SQLite: a head among
the last `LANE_END` nodes of the match's lane, else one anywhere lower in
the lane (both by the `(lane, depth)` index), else by walking the nodes
below it breadth first, up to `WALK_LIMIT` deep, stopping at the first
conversations met.
*/

use super::PgStore;
use super::graph::{decode, fetch_blobs};
use crate::backend::BoxFuture;
use crate::codec::node_id;
use crate::error::{Result, StoreError};
use crate::records::ConversationId;
use crate::runs::replay_only_message;
use crate::search::{ConversationRef, LANE_END, Parsed, Search, WALK_LIMIT, index_text};
use deadpool_postgres::Transaction;
use skein_core::{Message, NodeId, Role};

/// How many matches a search reads from the GIN index, unordered, before
/// it takes the newest by walking `seq` instead.
const CANDIDATES: usize = 200;

impl Search for PgStore {
    fn search_nodes<'a>(
        &'a self,
        query: &'a Parsed,
        role: Option<Role>,
        within: Option<NodeId>,
        replays: bool,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<(NodeId, Message)>>> {
        Box::pin(self.search_nodes(query, role, within, replays, limit))
    }

    fn containing<'a>(
        &'a self,
        node: NodeId,
        cap: usize,
        excluding: &'a [String],
    ) -> BoxFuture<'a, Result<Vec<ConversationRef>>> {
        Box::pin(self.containing(node, cap, excluding))
    }
}

impl PgStore {
    /// The nodes matching `query`, newest first, at most `limit`; only
    /// those of `role`, and of the thread ending at `within`, when given;
    /// without `replays`, none only a replay's runs produced.
    async fn search_nodes(
        &self,
        query: &Parsed,
        role: Option<Role>,
        within: Option<NodeId>,
        replays: bool,
        limit: usize,
    ) -> Result<Vec<(NodeId, Message)>> {
        let tsquery = query.tsquery();
        let role = role.map(|role| i16::from(role.code()));
        let users = replay_only_message("nodes.id");
        let (rows, blobs) = reading!(self, |client| {
            let rows = match within {
                None => {
                    // The planner cannot know how many nodes match: walking
                    // `seq` backwards suits a common word, the GIN index a
                    // rare one. So ask the index first, for at most
                    // CANDIDATES matches, unordered; when that is all of
                    // them, the newest are picked here; otherwise the
                    // matches are many and the backward walk finds the
                    // newest soon.
                    let candidates = client
                        .prepare_cached(&format!(
                            "SELECT seq FROM nodes
                             WHERE search @@ to_tsquery('pg_catalog.simple', $1)
                               AND ($2::int2 IS NULL OR role = $2)
                               AND ($4::bool OR NOT {users})
                             LIMIT $3"
                        ))
                        .await?;
                    let mut seqs: Vec<i64> = client
                        .query(
                            &candidates,
                            &[&tsquery, &role, &(CANDIDATES as i64 + 1), &replays],
                        )
                        .await?
                        .iter()
                        .map(|row| row.get(0))
                        .collect();
                    if seqs.len() <= CANDIDATES {
                        seqs.sort_unstable_by(|a, b| b.cmp(a));
                        seqs.truncate(limit);
                        let statement = client
                            .prepare_cached(
                                "SELECT id, body FROM nodes WHERE seq = ANY($1) ORDER BY seq DESC",
                            )
                            .await?;
                        client.query(&statement, &[&seqs]).await?
                    } else {
                        let statement = client
                            .prepare_cached(&format!(
                                "SELECT id, body FROM nodes
                                 WHERE search @@ to_tsquery('pg_catalog.simple', $1)
                                   AND ($2::int2 IS NULL OR role = $2)
                                   AND ($4::bool OR NOT {users})
                                 ORDER BY seq DESC LIMIT $3"
                            ))
                            .await?;
                        client
                            .query(&statement, &[&tsquery, &role, &(limit as i64), &replays])
                            .await?
                    }
                }
                Some(head) => {
                    let statement = client
                        .prepare_cached(&format!(
                            "WITH RECURSIVE chain(id, parent) AS (
                                 SELECT id, parent FROM nodes WHERE id = $4
                                 UNION ALL
                                 SELECT n.id, n.parent FROM nodes n JOIN chain c ON n.id = c.parent
                             )
                             SELECT n.id, n.body FROM chain c JOIN nodes n ON n.id = c.id
                             WHERE n.search @@ to_tsquery('pg_catalog.simple', $1)
                               AND ($2::int2 IS NULL OR n.role = $2)
                               AND ($5::bool OR NOT {})
                             ORDER BY n.seq DESC LIMIT $3",
                            replay_only_message("n.id")
                        ))
                        .await?;
                    client
                        .query(
                            &statement,
                            &[
                                &tsquery,
                                &role,
                                &(limit as i64),
                                &head.as_bytes().as_slice(),
                                &replays,
                            ],
                        )
                        .await?
                }
            };
            let blobs = fetch_blobs(client, rows.iter().map(|row| row.get::<_, &[u8]>(1))).await?;
            Ok((rows, blobs))
        })?;
        rows.iter()
            .map(|row| {
                let id = node_id(row.get(0))?;
                Ok((id, decode(id, row.get(1), &blobs)?))
            })
            .collect()
    }

    /// Up to `cap` conversations whose thread contains `node`: heads at the
    /// end of its lane first, then the nearest below it. The recursive walk
    /// is evaluated only as far as the outer `LIMIT` needs.
    async fn containing(
        &self,
        node: NodeId,
        cap: usize,
        excluding: &[String],
    ) -> Result<Vec<ConversationRef>> {
        let rows = reading!(self, |client| {
            let place = client
                .prepare_cached("SELECT lane, depth FROM nodes WHERE id = $1")
                .await?;
            let Some(place) = client
                .query_opt(&place, &[&node.as_bytes().as_slice()])
                .await?
            else {
                return Err(StoreError::NodeNotFound(node));
            };
            let (lane, depth): (Vec<u8>, i64) = (place.get(0), place.get(1));
            let at_end = client
                .prepare_cached(
                    "SELECT c.id, c.name FROM (
                         SELECT id FROM nodes WHERE lane = $1 AND depth >= $2
                         ORDER BY depth DESC LIMIT $3
                     ) h JOIN conversations c ON c.head = h.id
                     WHERE c.id <> ALL($5::text[])
                     LIMIT $4",
                )
                .await?;
            let found = client
                .query(
                    &at_end,
                    &[&lane, &depth, &(LANE_END as i64), &(cap as i64), &excluding],
                )
                .await?;
            if !found.is_empty() {
                return Ok(found);
            }
            let in_lane = client
                .prepare_cached(
                    "SELECT c.id, c.name FROM nodes h JOIN conversations c ON c.head = h.id
                     WHERE h.lane = $1 AND h.depth >= $2 AND c.id <> ALL($3::text[])
                     ORDER BY h.depth DESC LIMIT 1",
                )
                .await?;
            let found = client.query(&in_lane, &[&lane, &depth, &excluding]).await?;
            if !found.is_empty() {
                return Ok(found);
            }
            let below = client
                .prepare_cached(
                    "WITH RECURSIVE sub(id, k) AS (
                         SELECT id, 0 FROM nodes WHERE id = $1
                         UNION ALL
                         SELECT n.id, sub.k + 1 FROM sub JOIN nodes n ON n.parent = sub.id
                         WHERE sub.k < $2
                     )
                     SELECT c.id, c.name FROM sub JOIN conversations c ON c.head = sub.id
                     WHERE c.id <> ALL($4::text[])
                     LIMIT $3",
                )
                .await?;
            Ok(client
                .query(
                    &below,
                    &[
                        &node.as_bytes().as_slice(),
                        &(WALK_LIMIT as i32),
                        &(cap as i64),
                        &excluding,
                    ],
                )
                .await?)
        })?;
        Ok(rows
            .iter()
            .map(|row| ConversationRef {
                id: ConversationId(row.get(0)),
                name: row.get(1),
            })
            .collect())
    }
}

/// Migration 10's fill: every stored node's `search`, a page of nodes (and
/// their blobs) at a time. A node that cannot be decoded is left out
/// (`verify` reports it).
pub(crate) async fn fill(tx: &Transaction<'_>) -> Result<()> {
    const PAGE: i64 = 500;
    let page = tx
        .prepare("SELECT seq, id, body FROM nodes WHERE seq > $1 ORDER BY seq LIMIT $2")
        .await?;
    let update = tx
        .prepare(
            "UPDATE nodes SET search = to_tsvector('pg_catalog.simple', t.words)
             FROM unnest($1::bytea[], $2::text[]) AS t(id, words) WHERE nodes.id = t.id",
        )
        .await?;
    let mut after = 0i64;
    loop {
        let rows = tx.query(&page, &[&after, &PAGE]).await?;
        let Some(last) = rows.last() else {
            return Ok(());
        };
        after = last.get(0);
        let blobs = fetch_blobs(tx, rows.iter().map(|row| row.get::<_, &[u8]>(2))).await?;
        let mut ids: Vec<&[u8]> = Vec::new();
        let mut words: Vec<String> = Vec::new();
        for row in &rows {
            let Ok(id) = node_id(row.get(1)) else {
                continue;
            };
            let Ok(message) = decode(id, row.get(2), &blobs) else {
                continue;
            };
            let text = index_text(&message);
            if !text.is_empty() {
                ids.push(row.get(1));
                words.push(text);
            }
        }
        if !ids.is_empty() {
            tx.execute(&update, &[&ids, &words]).await?;
        }
    }
}

/// The `search` words of a node about to be inserted (NULL, no tsvector,
/// for a message without text).
pub(crate) fn words(message: &Message) -> Option<String> {
    Some(index_text(message)).filter(|words| !words.is_empty())
}
