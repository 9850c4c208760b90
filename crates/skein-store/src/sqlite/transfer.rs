/*!
Export and import on SQLite: the node section of an export, in `seq`
(topological) order, and an import's one `BEGIN IMMEDIATE` transaction,
checking each line's references against the database and the lines before
it (crate::transfer holds the format, the parsing and every check that needs
no database).
*/

use super::SqliteStore;
use super::bodies::input_thread;
use super::graph::{Placed, decode_message, insert_node, seq_of};
use super::offers::fill_offers;
use super::replays::{insert_replay, insert_replay_turn};
use super::reruns::insert_rerun;
use super::runs::insert_run;
use crate::backend::Backend;
use crate::bodies::{BodyThreads, RunToStore, digest_of};
use crate::codec::{node_id, optional_node_id};
use crate::error::Result;
use crate::forget::DeletedConversation;
use crate::records::RunId;
use crate::transfer::{
    ImportReport, Line, PIECES_PARENT_FIRST, PieceLine, RUN_BODIES, RunBody, Target, Transfer,
    bad_conversation, check_same_head, dangling, missing_piece, orphan, references, write_header,
    write_node, write_piece, write_run_body,
};
use rusqlite::{Connection, OptionalExtension, params};
use skein_core::{Digest, Message, NodeId};
use std::io::Write;

impl Transfer for SqliteStore {
    /// Write the header and every node, in topological order.
    fn export_nodes(&self, out: &mut dyn Write) -> Result<()> {
        self.read(|conn| {
            write_header(out)?;
            let mut stmt = conn.prepare(
                "SELECT n.id, p.id, n.body FROM nodes n LEFT JOIN nodes p ON p.seq = n.parent ORDER BY n.seq",
            )?;
            let mut rows = stmt.query([])?;
            while let Some(row) = rows.next()? {
                let id = node_id(&row.get::<_, Vec<u8>>(0)?)?;
                let parent = optional_node_id(row.get::<_, Option<Vec<u8>>>(1)?.as_deref())?;
                let message = decode_message(conn, id, &row.get::<_, Vec<u8>>(2)?)?;
                write_node(out, id, parent, message)?;
            }
            Ok(())
        })
    }

    fn export_bodies(&self, out: &mut dyn Write) -> Result<()> {
        self.read(|conn| {
            let mut pieces = conn.prepare(PIECES_PARENT_FIRST)?;
            let mut rows = pieces.query([])?;
            while let Some(row) = rows.next()? {
                write_piece(
                    out,
                    PieceLine {
                        id: digest_of(row.get(0)?)?,
                        parent: row
                            .get::<_, Option<Vec<u8>>>(1)?
                            .map(digest_of)
                            .transpose()?,
                        bytes: row.get(2)?,
                        erased: row
                            .get::<_, Option<Vec<u8>>>(3)?
                            .map(digest_of)
                            .transpose()?,
                        len: row.get::<_, i64>(4)? as u64,
                    },
                )?;
            }
            let mut runs = conn.prepare(RUN_BODIES)?;
            let mut rows = runs.query([])?;
            while let Some(row) = rows.next()? {
                write_run_body(
                    out,
                    RunBody {
                        run: RunId(row.get(0)?),
                        piece: row
                            .get::<_, Option<Vec<u8>>>(1)?
                            .map(digest_of)
                            .transpose()?,
                        digest: digest_of(row.get(2)?)?,
                        len: row.get::<_, i64>(3)? as u64,
                    },
                )?;
            }
            Ok(())
        })
    }

    /// Import parsed and checked export lines. All or nothing.
    fn import_lines(&self, lines: &[(usize, Line)]) -> Result<ImportReport> {
        self.write(|tx| {
            let mut report = ImportReport::default();
            let mut offering = Vec::new();
            let mut threads = BodyThreads::default();
            for (number, line) in lines {
                let number = *number;
                match line {
                    Line::Header { .. } => {}
                    Line::Node { id, parent, role, parts } => {
                        if seq_of(tx, *id)?.is_some() {
                            report.nodes_present += 1;
                            continue;
                        }
                        let parent_row = match parent {
                            None => None,
                            Some(parent) => Some(
                                tx.prepare_cached("SELECT seq, root, depth FROM nodes WHERE id = ?1")?
                                    .query_row([parent.as_bytes()], |row| {
                                        Ok((Placed { seq: row.get(0)?, root: row.get(1)? }, row.get::<_, i64>(2)?))
                                    })
                                    .optional()?
                                    .ok_or_else(|| orphan(number, id, parent))?,
                            ),
                        };
                        let depth = parent_row.map_or(0, |(_, depth)| depth as u64 + 1);
                        let message = Message::new(*role, parts.clone());
                        insert_node(tx, *id, parent_row.map(|(placed, _)| placed), depth, &message)?;
                        report.nodes_written += 1;
                    }
                    Line::Conversation(conversation) => {
                        let existing: Option<Option<Vec<u8>>> = tx
                            .prepare_cached("SELECT head FROM conversations WHERE id = ?1")?
                            .query_row([conversation.id.as_str()], |row| row.get(0))
                            .optional()?;
                        if let Some(head) = existing {
                            check_same_head(number, conversation, head.as_deref())?;
                            continue;
                        }
                        check_references(tx, number, line)?;
                        let origin = conversation.origin.clone().unwrap_or_default();
                        tx.prepare_cached(
                            "INSERT INTO conversations(id, name, head, forked_from_node, forked_from_conversation,
                                 forked_from_rerun, created, updated, meta, imported, root)
                             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, 1, (SELECT root FROM nodes WHERE id = ?3))",
                        )?
                        .execute(params![
                            conversation.id.as_str(),
                            conversation.name,
                            conversation.head.as_ref().map(NodeId::as_bytes),
                            origin.node.as_ref().map(NodeId::as_bytes),
                            origin.conversation.as_ref().map(|c| c.as_str()),
                            origin.rerun.as_ref().map(|rerun| rerun.as_str()),
                            conversation.created_ms,
                            conversation.updated_ms,
                            conversation.settings.to_json(),
                        ])
                        .map_err(|error| bad_conversation(number, conversation, error))?;
                        report.conversations += 1;
                    }
                    Line::Run(run) => {
                        let exists = tx
                            .prepare_cached("SELECT 1 FROM runs WHERE id = ?1")?
                            .exists([run.id.as_str()])?;
                        if !exists {
                            check_references(tx, number, line)?;
                            let thread = match BodyThreads::input(run) {
                                Some(input) => Some(input_thread(
                                    tx,
                                    self.key(),
                                    &mut threads,
                                    run.conversation.as_ref(),
                                    input,
                                )?),
                                None => None,
                            };
                            insert_run(
                                tx,
                                &RunToStore::cut(run, thread.as_ref(), None),
                                run.conversation.as_ref(),
                            )?;
                            report.runs += 1;
                            if let Some(conversation) = &run.conversation
                                && !run.tools.is_empty()
                                && !offering.contains(conversation)
                            {
                                offering.push(conversation.clone());
                            }
                        }
                    }
                    Line::Rerun(rerun) => {
                        let exists = tx
                            .prepare_cached("SELECT 1 FROM reruns WHERE id = ?1")?
                            .exists([rerun.id.as_str()])?;
                        if exists {
                            continue;
                        }
                        check_references(tx, number, line)?;
                        insert_rerun(tx, rerun)?;
                        report.reruns += 1;
                    }
                    Line::RequestPiece(piece) => {
                        if let Some(parent) = &piece.parent
                            && !piece_stored(tx, parent)?
                        {
                            return Err(missing_piece(number, "a piece follows", parent));
                        }
                        report.request_pieces += tx
                            .prepare_cached(
                                "INSERT INTO request_pieces(id, parent, bytes, erased, len)
                                 VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT(id) DO NOTHING",
                            )?
                            .execute(params![
                                piece.id.as_bytes(),
                                piece.parent.as_ref().map(Digest::as_bytes),
                                piece.bytes,
                                piece.erased.as_ref().map(Digest::as_bytes),
                                piece.len as i64,
                            ])?;
                    }
                    Line::RunBody(body) => {
                        check_references(tx, number, line)?;
                        if let Some(piece) = &body.piece
                            && !piece_stored(tx, piece)?
                        {
                            return Err(missing_piece(number, "a request body ends at", piece));
                        }
                        tx.prepare_cached(
                            "UPDATE runs SET request_piece = ?2, request_digest = ?3, request_len = ?4
                             WHERE id = ?1 AND request_digest IS NULL",
                        )?
                        .execute(params![
                            body.run.as_str(),
                            body.piece.as_ref().map(Digest::as_bytes),
                            body.digest.as_bytes(),
                            body.len as i64,
                        ])?;
                    }
                    Line::Replay(replay) => {
                        let exists = tx
                            .prepare_cached("SELECT 1 FROM replays WHERE id = ?1")?
                            .exists([replay.id.as_str()])?;
                        if !exists {
                            insert_replay(tx, replay)?;
                            report.replays += 1;
                        }
                    }
                    Line::ReplayTurn(turn) => {
                        let exists = tx
                            .prepare_cached("SELECT 1 FROM replay_turns WHERE replay = ?1 AND seq = ?2")?
                            .exists(params![turn.replay.as_str(), turn.seq as i64])?;
                        if exists {
                            continue;
                        }
                        check_references(tx, number, line)?;
                        insert_replay_turn(tx, turn)?;
                        report.replay_turns += 1;
                    }
                    Line::Label(label) => {
                        check_references(tx, number, line)?;
                        report.labels += tx
                            .prepare_cached(
                                "INSERT INTO labels(name, node, created) VALUES (?1, ?2, ?3)
                                 ON CONFLICT DO NOTHING",
                            )?
                            .execute(params![label.name, label.node.as_bytes(), label.created_ms])?;
                    }
                    Line::DeletedConversation(deleted) => {
                        tx.prepare_cached(
                            "INSERT INTO deleted_conversations(id, deleted) VALUES (?1, ?2)
                             ON CONFLICT DO NOTHING",
                        )?
                        .execute(params![deleted.id.as_str(), deleted.deleted_ms])?;
                    }
                }
            }
            fill_offers(tx, Some(&offering))?;
            Ok(report)
        })
    }

    fn deleted_origins(&self) -> Result<Vec<DeletedConversation>> {
        self.read(|conn| {
            let mut stmt =
                conn.prepare_cached("SELECT id, deleted FROM deleted_conversations ORDER BY id")?;
            let rows = stmt.query_map([], |row| {
                Ok(DeletedConversation {
                    id: crate::records::ConversationId(row.get(0)?),
                    deleted_ms: row.get(1)?,
                })
            })?;
            Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
        })
    }
}

/// Fail unless everything `line` points at is in the database (which, in
/// the import's transaction, holds the file's earlier lines too).
fn check_references(tx: &rusqlite::Transaction<'_>, number: usize, line: &Line) -> Result<()> {
    for reference in references(line) {
        let present = match &reference.target {
            Target::Node(id) => seq_of(tx, *id)?.is_some(),
            Target::Conversation(id) => tx
                .prepare_cached("SELECT 1 FROM conversations WHERE id = ?1")?
                .exists([id.as_str()])?,
            Target::Run(id) => tx
                .prepare_cached("SELECT 1 FROM runs WHERE id = ?1")?
                .exists([id.as_str()])?,
            Target::Replay(id) => tx
                .prepare_cached("SELECT 1 FROM replays WHERE id = ?1")?
                .exists([id.as_str()])?,
        };
        if !present {
            return Err(dangling(number, line, &reference));
        }
    }
    Ok(())
}

fn piece_stored(conn: &Connection, id: &Digest) -> Result<bool> {
    Ok(conn
        .prepare_cached("SELECT 1 FROM request_pieces WHERE id = ?1")?
        .exists([id.as_bytes()])?)
}
