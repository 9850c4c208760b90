/*!
Export and import on PostgreSQL. The file format, parsing and every check
that needs no database are shared with SQLite (crate::transfer); this is only
the reading of nodes for export and the all-or-nothing write of an import.

Export reads nodes in pages of [`PAGE`] by `seq`, so memory stays bounded
whatever the graph's size. Import looks up which of the file's nodes (and
their parents) the database holds in batches of [`PAGE`] ids, and inserts
the new ones [`PAGE`] to a statement, all pipelined, so its round trips grow
with the file's size divided by a thousand, not with its node count.
*/

use super::bodies::input_thread;
use super::graph::{NodeRow, decode, fetch_blobs, queue_nodes};
use super::offers::fill_offers;
use super::pipeline::Pipeline;
use super::replays::{insert_replay, insert_replay_turn};
use super::reruns::queue_rerun;
use super::runs::queue_run;
use super::{PgStore, schema};
use crate::backend::Backend;
use crate::bodies::{BodyThreads, RunToStore, digest_of};
use crate::codec::{node_id, optional_node_id};
use crate::error::Result;
use crate::forget::DeletedConversation;
use crate::lanes::Lanes;
use crate::records::RunId;
use crate::transfer::{
    ImportReport, Line, PIECES_PARENT_FIRST, PieceLine, RUN_BODIES, RunBody, Target, Transfer,
    bad_conversation, check_same_head, dangling, missing_piece, orphan, references, write_header,
    write_node, write_piece, write_run_body,
};
use deadpool_postgres::GenericClient;
use skein_core::{ConversationId, Digest, Message, NodeId};
use std::collections::{HashMap, HashSet};
use std::io::Write;

/// Nodes read per query by export and verify.
pub(crate) const PAGE: i64 = 1000;

impl Transfer for PgStore {
    fn export_nodes(&self, out: &mut dyn Write) -> Result<()> {
        write_header(out)?;
        let mut after = 0_i64;
        loop {
            let (rows, blobs) = self.read(async |client| {
                let statement = client
                    .prepare_cached(
                        "SELECT seq, id, parent, body FROM nodes WHERE seq > $1 ORDER BY seq LIMIT $2",
                    )
                    .await?;
                let rows = client.query(&statement, &[&after, &PAGE]).await?;
                let blobs = fetch_blobs(client, rows.iter().map(|row| row.get::<_, &[u8]>(3))).await?;
                Ok((rows, blobs))
            })?;
            let Some(last) = rows.last() else {
                return Ok(());
            };
            after = last.get(0);
            for row in &rows {
                let id = node_id(row.get(1))?;
                let message = decode(id, row.get(3), &blobs)?;
                write_node(out, id, optional_node_id(row.get(2))?, message)?;
            }
        }
    }

    fn export_bodies(&self, out: &mut dyn Write) -> Result<()> {
        // Pieces hold no message texts (crate::bodies), so all of them fit
        // in memory where the whole bodies would not.
        let (pieces, runs) = self.read(async |client| {
            Ok((
                client.query(PIECES_PARENT_FIRST, &[]).await?,
                client.query(RUN_BODIES, &[]).await?,
            ))
        })?;
        for row in &pieces {
            write_piece(
                out,
                PieceLine {
                    id: digest_of(row.get(0))?,
                    parent: row
                        .get::<_, Option<Vec<u8>>>(1)
                        .map(digest_of)
                        .transpose()?,
                    bytes: row.get(2),
                    erased: row
                        .get::<_, Option<Vec<u8>>>(3)
                        .map(digest_of)
                        .transpose()?,
                    len: row.get::<_, i64>(4) as u64,
                },
            )?;
        }
        for row in &runs {
            write_run_body(
                out,
                RunBody {
                    run: RunId(row.get(0)),
                    piece: row
                        .get::<_, Option<Vec<u8>>>(1)
                        .map(digest_of)
                        .transpose()?,
                    digest: digest_of(row.get(2))?,
                    len: row.get::<_, i64>(3) as u64,
                },
            )?;
        }
        Ok(())
    }

    fn import_lines(&self, lines: &[(usize, Line)]) -> Result<ImportReport> {
        self.write(async |tx| {
            let mut report = ImportReport::default();
            // Depths and roots of the stored nodes the file names, then of
            // every node met so far, so a parent needs no query of its own.
            let (mut depths, stored, mut lanes) = stored_depths(tx, lines).await?;
            // Conversations and runs known to be stored, so references to
            // them need no query of their own.
            let mut known = Known::default();
            let mut new_nodes: Vec<NewNode> = Vec::new();
            let mut offering: Vec<ConversationId> = Vec::new();
            let mut threads = BodyThreads::default();
            for (number, line) in lines {
                let number = *number;
                match line {
                    Line::Header { .. } => {}
                    Line::Node { id, parent, role, parts } => {
                        if stored.contains(id) {
                            report.nodes_present += 1;
                            continue;
                        }
                        if depths.contains_key(id) {
                            // Listed earlier in the file: written once.
                            report.nodes_present += 1;
                            continue;
                        }
                        let placed = match parent {
                            None => Placed { depth: 0, root: Some(*id) },
                            Some(parent) => {
                                let above = depths.get(parent).ok_or_else(|| orphan(number, id, parent))?;
                                Placed { depth: above.depth + 1, root: above.root }
                            }
                        };
                        depths.insert(*id, placed);
                        let lane = lanes.file(*id, parent.as_ref(), placed.depth);
                        new_nodes.push(NewNode {
                            id: *id,
                            parent: *parent,
                            placed,
                            lane,
                            message: Message::new(*role, parts.clone()),
                        });
                        report.nodes_written += 1;
                    }
                    Line::Conversation(conversation) => {
                        // Its head must be written before it is named.
                        insert_batched(tx, &mut new_nodes).await?;
                        let statement = tx
                            .prepare_cached("SELECT head FROM conversations WHERE id = $1")
                            .await?;
                        if let Some(row) = tx.query_opt(&statement, &[&conversation.id.as_str()]).await? {
                            check_same_head(number, conversation, row.get(0))?;
                            known.conversations.insert(conversation.id.to_string());
                            continue;
                        }
                        known.check(tx, &depths, number, line).await?;
                        let origin = conversation.origin.clone().unwrap_or_default();
                        let statement = tx
                            .prepare_cached(
                                "INSERT INTO conversations(id, name, head, forked_from_node, forked_from_conversation,
                                     forked_from_rerun, created, updated, meta, imported, root)
                                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, TRUE,
                                         (SELECT root FROM nodes WHERE id = $3::bytea))",
                            )
                            .await?;
                        tx.execute(
                            &statement,
                            &[
                                &conversation.id.as_str(),
                                &conversation.name,
                                &conversation.head.as_ref().map(|id| id.0.as_slice()),
                                &origin.node.as_ref().map(|id| id.0.as_slice()),
                                &origin.conversation.as_ref().map(|c| c.as_str()),
                                &origin.rerun.as_ref().map(|rerun| rerun.as_str()),
                                &conversation.created_ms,
                                &conversation.updated_ms,
                                &conversation.settings.to_json(),
                            ],
                        )
                        .await
                        .map_err(|error| bad_conversation(number, conversation, error))?;
                        known.conversations.insert(conversation.id.to_string());
                        report.conversations += 1;
                    }
                    Line::Run(run) => {
                        insert_batched(tx, &mut new_nodes).await?;
                        let statement = tx.prepare_cached("SELECT 1 FROM runs WHERE id = $1").await?;
                        if tx.query_opt(&statement, &[&run.id.as_str()]).await?.is_none() {
                            known.check(tx, &depths, number, line).await?;
                            let mut pipeline = Pipeline::new();
                            let thread = match BodyThreads::input(run) {
                                Some(input) => Some(
                                    input_thread(
                                        tx,
                                        self.key(),
                                        &mut threads,
                                        run.conversation.as_ref(),
                                        input,
                                    )
                                    .await?,
                                ),
                                None => None,
                            };
                            let to_store = RunToStore::cut(run, thread.as_ref(), None);
                            queue_run(&mut pipeline, tx, &to_store, run.conversation.as_ref())
                                .await?;
                            pipeline.run().await?;
                            report.runs += 1;
                            if let Some(conversation) = &run.conversation
                                && !run.tools.is_empty()
                                && !offering.contains(conversation)
                            {
                                offering.push(conversation.clone());
                            }
                        }
                        known.runs.insert(run.id.to_string());
                    }
                    Line::Rerun(rerun) => {
                        insert_batched(tx, &mut new_nodes).await?;
                        let statement = tx.prepare_cached("SELECT 1 FROM reruns WHERE id = $1").await?;
                        if tx.query_opt(&statement, &[&rerun.id.as_str()]).await?.is_some() {
                            continue;
                        }
                        known.check(tx, &depths, number, line).await?;
                        let mut pipeline = Pipeline::new();
                        queue_rerun(&mut pipeline, tx, rerun).await?;
                        pipeline.run().await?;
                        report.reruns += 1;
                    }
                    Line::RequestPiece(piece) => {
                        if let Some(parent) = &piece.parent
                            && !piece_stored(tx, parent).await?
                        {
                            return Err(missing_piece(number, "a piece follows", parent));
                        }
                        let statement = tx
                            .prepare_cached(
                                "INSERT INTO request_pieces(id, parent, bytes, erased, len)
                                 VALUES ($1, $2, $3, $4, $5) ON CONFLICT (id) DO NOTHING",
                            )
                            .await?;
                        report.request_pieces += tx
                            .execute(
                                &statement,
                                &[
                                    &piece.id.as_bytes().as_slice(),
                                    &piece.parent.as_ref().map(|parent| parent.as_bytes().as_slice()),
                                    &piece.bytes,
                                    &piece.erased.as_ref().map(|erased| erased.as_bytes().as_slice()),
                                    &(piece.len as i64),
                                ],
                            )
                            .await? as usize;
                    }
                    Line::RunBody(body) => {
                        known.check(tx, &depths, number, line).await?;
                        if let Some(piece) = &body.piece
                            && !piece_stored(tx, piece).await?
                        {
                            return Err(missing_piece(number, "a request body ends at", piece));
                        }
                        let statement = tx
                            .prepare_cached(
                                "UPDATE runs SET request_piece = $2, request_digest = $3, request_len = $4
                                 WHERE id = $1 AND request_digest IS NULL",
                            )
                            .await?;
                        tx.execute(
                            &statement,
                            &[
                                &body.run.as_str(),
                                &body.piece.as_ref().map(|piece| piece.as_bytes().as_slice()),
                                &body.digest.as_bytes().as_slice(),
                                &(body.len as i64),
                            ],
                        )
                        .await?;
                    }
                    Line::Replay(replay) => {
                        report.replays += insert_replay(tx, replay).await? as usize;
                    }
                    Line::ReplayTurn(turn) => {
                        insert_batched(tx, &mut new_nodes).await?;
                        let statement = tx
                            .prepare_cached("SELECT 1 FROM replay_turns WHERE replay = $1 AND seq = $2")
                            .await?;
                        let seq = turn.seq as i64;
                        if tx.query_opt(&statement, &[&turn.replay.as_str(), &seq]).await?.is_some() {
                            continue;
                        }
                        known.check(tx, &depths, number, line).await?;
                        insert_replay_turn(tx, turn).await?;
                        report.replay_turns += 1;
                    }
                    Line::Label(label) => {
                        insert_batched(tx, &mut new_nodes).await?;
                        known.check(tx, &depths, number, line).await?;
                        let statement = tx
                            .prepare_cached(
                                "INSERT INTO labels(name, node, created) VALUES ($1, $2, $3)
                                 ON CONFLICT DO NOTHING",
                            )
                            .await?;
                        report.labels += tx
                            .execute(&statement, &[&label.name, &label.node.0.as_slice(), &label.created_ms])
                            .await? as usize;
                    }
                    Line::DeletedConversation(deleted) => {
                        let statement = tx
                            .prepare_cached(
                                "INSERT INTO deleted_conversations(id, deleted) VALUES ($1, $2)
                                 ON CONFLICT DO NOTHING",
                            )
                            .await?;
                        tx.execute(&statement, &[&deleted.id.as_str(), &deleted.deleted_ms])
                            .await?;
                    }
                }
            }
            insert_batched(tx, &mut new_nodes).await?;
            fill_offers(tx, Some(&offering)).await?;
            Ok(report)
        })
        .and_then(|report| {
            let written = report.nodes_written
                + report.conversations
                + report.runs
                + report.reruns
                + report.replay_turns
                + report.labels;
            if written >= schema::ANALYZE_AFTER_ROWS {
                self.read(async |client| schema::analyze(client).await)?;
            }
            Ok(report)
        })
    }

    fn deleted_origins(&self) -> Result<Vec<DeletedConversation>> {
        let rows = self.read(async |client| {
            Ok(client
                .query(
                    "SELECT id, deleted FROM deleted_conversations ORDER BY id",
                    &[],
                )
                .await?)
        })?;
        Ok(rows
            .iter()
            .map(|row| DeletedConversation {
                id: ConversationId(row.get(0)),
                deleted_ms: row.get(1),
            })
            .collect())
    }
}

/// Conversations and runs known to be stored (file lines already written,
/// or found by a query).
#[derive(Default)]
struct Known {
    conversations: HashSet<String>,
    runs: HashSet<String>,
}

impl Known {
    /// Fail unless everything `line` points at is stored: the nodes the
    /// import met (`depths`, its file's nodes written before any record
    /// line) or any row the database holds.
    async fn check(
        &mut self,
        client: &impl GenericClient,
        depths: &HashMap<NodeId, Placed>,
        number: usize,
        line: &Line,
    ) -> Result<()> {
        for reference in references(line) {
            let present = match &reference.target {
                Target::Node(id) => {
                    depths.contains_key(id) || {
                        let statement = client
                            .prepare_cached("SELECT 1 FROM nodes WHERE id = $1")
                            .await?;
                        client
                            .query_opt(&statement, &[&id.0.as_slice()])
                            .await?
                            .is_some()
                    }
                }
                Target::Conversation(id) => {
                    self.conversations.contains(id.as_str()) || {
                        let statement = client
                            .prepare_cached("SELECT 1 FROM conversations WHERE id = $1")
                            .await?;
                        let found = client
                            .query_opt(&statement, &[&id.as_str()])
                            .await?
                            .is_some();
                        if found {
                            self.conversations.insert(id.to_string());
                        }
                        found
                    }
                }
                Target::Replay(id) => {
                    let statement = client
                        .prepare_cached("SELECT 1 FROM replays WHERE id = $1")
                        .await?;
                    client
                        .query_opt(&statement, &[&id.as_str()])
                        .await?
                        .is_some()
                }
                Target::Run(id) => {
                    self.runs.contains(id.as_str()) || {
                        let statement = client
                            .prepare_cached("SELECT 1 FROM runs WHERE id = $1")
                            .await?;
                        let found = client
                            .query_opt(&statement, &[&id.as_str()])
                            .await?
                            .is_some();
                        if found {
                            self.runs.insert(id.to_string());
                        }
                        found
                    }
                }
            };
            if !present {
                return Err(dangling(number, line, &reference));
            }
        }
        Ok(())
    }
}

/// A node's depth and the id of its thread's first node, as an import
/// needs them for the nodes under it.
#[derive(Clone, Copy)]
struct Placed {
    depth: i64,
    root: Option<NodeId>,
}

/// A node of the file to insert.
struct NewNode {
    id: NodeId,
    parent: Option<NodeId>,
    placed: Placed,
    lane: NodeId,
    message: Message,
}

/// Where the nodes the file lists or names as parents that the database
/// already holds stand, the set of those it holds among the listed, and the
/// lanes they are the deepest nodes of (for the new nodes to file under
/// them).
async fn stored_depths(
    client: &impl GenericClient,
    lines: &[(usize, Line)],
) -> Result<(HashMap<NodeId, Placed>, HashSet<NodeId>, Lanes<NodeId>)> {
    let mut named: Vec<NodeId> = Vec::new();
    let mut listed = HashSet::new();
    for (_, line) in lines {
        if let Line::Node { id, parent, .. } = line {
            listed.insert(*id);
            named.push(*id);
            named.extend(*parent);
        }
    }
    named.sort();
    named.dedup();
    let statement = client
        // Whether the node is its lane's deepest, as a scalar subquery
        // (one index probe per row): `NOT EXISTS` may be planned as one
        // hashed scan of every node, taken for a batch of ids.
        .prepare_cached(
            "SELECT n.id, n.depth, n.root, n.lane,
                    (SELECT TRUE FROM nodes c WHERE c.lane = n.lane AND c.depth = n.depth + 1) IS NULL
             FROM nodes n WHERE n.id = ANY($1)",
        )
        .await?;
    let mut depths = HashMap::new();
    let mut lanes = Lanes::new();
    for chunk in named.chunks(PAGE as usize) {
        let ids: Vec<&[u8]> = chunk.iter().map(|id| id.0.as_slice()).collect();
        for row in client.query(&statement, &[&ids]).await? {
            let id = node_id(row.get(0))?;
            let depth = row.get(1);
            let root = row.get::<_, Option<&[u8]>>(2).and_then(NodeId::from_slice);
            if let Some(lane) = NodeId::from_slice(row.get(3))
                && row.get::<_, bool>(4)
            {
                lanes.stored_tip(id, lane, depth);
            }
            depths.insert(id, Placed { depth, root });
        }
    }
    let stored = listed
        .into_iter()
        .filter(|id| depths.contains_key(id))
        .collect();
    Ok((depths, stored, lanes))
}

/// Insert `nodes` (in file order, so parents first), [`PAGE`] to a
/// statement, all in one round trip; empties the list.
async fn insert_batched(client: &impl GenericClient, nodes: &mut Vec<NewNode>) -> Result<()> {
    let mut pipeline = Pipeline::new();
    let mut queued = Vec::new();
    for chunk in nodes.chunks(PAGE as usize) {
        let rows = chunk.iter().map(|node| NodeRow {
            id: node.id,
            parent: node.parent,
            depth: node.placed.depth as u64,
            message: &node.message,
            root: node.placed.root,
            lane: node.lane,
        });
        queued.extend(queue_nodes(&mut pipeline, client, rows).await?);
    }
    let changed = pipeline.run().await?;
    for insert in &queued {
        insert.written(client, &changed).await?;
    }
    nodes.clear();
    Ok(())
}

async fn piece_stored<C: GenericClient>(client: &C, id: &Digest) -> Result<bool> {
    let statement = client
        .prepare_cached("SELECT 1 FROM request_pieces WHERE id = $1")
        .await?;
    Ok(client
        .query_opt(&statement, &[&id.as_bytes().as_slice()])
        .await?
        .is_some())
}
