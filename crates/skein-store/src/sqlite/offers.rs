/*!
The tools a conversation's calls offered, on SQLite: the `tool_offers`
rows (schema 12; crate::offers says what they are), read by a load, written
by a turn's transaction, and filled from stored runs by the migration and
by imports.
*/

use super::SqliteStore;
use crate::error::Result;
use crate::offers::{Offers, StoredOffer, ToolOffer, fill, turn_offers};
use rusqlite::{Connection, params};
use skein_core::{ConversationId, Digest, RunRecord, Thread};
use std::collections::HashSet;

impl SqliteStore {
    pub(crate) fn tool_offers(
        &self,
        conversation: &ConversationId,
        up_to_depth: Option<u64>,
    ) -> Result<Vec<ToolOffer>> {
        self.read(|conn| read_offers(conn, conversation, up_to_depth))
    }
}

/// `conversation`'s rows up to `up_to_depth` (all without it), oldest
/// first.
fn read_offers(
    conn: &Connection,
    conversation: &ConversationId,
    up_to_depth: Option<u64>,
) -> Result<Vec<ToolOffer>> {
    let mut stmt = conn.prepare_cached(
        "SELECT depth, name, schema FROM tool_offers
         WHERE conversation = ?1 AND depth <= ?2 ORDER BY depth, name",
    )?;
    let depth = up_to_depth.map_or(i64::MAX, |depth| depth as i64);
    let rows = stmt.query_map(params![conversation.as_str(), depth], |row| {
        let schema: Vec<u8> = row.get(2)?;
        Ok((row.get::<_, i64>(0)?, row.get::<_, String>(1)?, schema))
    })?;
    let mut offers = Vec::new();
    for row in rows {
        let (depth, name, schema) = row?;
        if let Ok(schema) = <[u8; 32]>::try_from(schema.as_slice()) {
            offers.push(ToolOffer {
                depth: depth as u64,
                name,
                schema: Digest(schema),
            });
        }
    }
    Ok(offers)
}

/// Inside a turn's transaction: the rows the turn's calls add to
/// `conversation`, whose thread `thread` now is. A turn that offered no
/// tool costs nothing here.
pub(super) fn record_offers(
    tx: &Connection,
    conversation: &ConversationId,
    thread: Option<&Thread>,
    runs: &[RunRecord],
) -> Result<()> {
    let offered = turn_offers(thread, runs);
    if offered.is_empty() {
        return Ok(());
    }
    let mut offers = Offers::seeded(read_offers(tx, conversation, None)?);
    for (depth, tools) in offered {
        for row in offers.changes(depth, tools) {
            insert_offer(tx, conversation, &row)?;
        }
    }
    Ok(())
}

fn insert_offer(tx: &Connection, conversation: &ConversationId, row: &ToolOffer) -> Result<()> {
    tx.prepare_cached(
        "INSERT INTO tool_offers(conversation, depth, name, schema) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT(conversation, depth, name) DO UPDATE SET schema = excluded.schema",
    )?
    .execute(params![
        conversation.as_str(),
        row.depth as i64,
        row.name,
        row.schema.as_bytes()
    ])?;
    Ok(())
}

/// Rebuild the rows of `conversations` (every conversation when `None`)
/// from their stored runs: those whose reply is stored, reruns' samples and
/// baselines left out, in thread order (the depth of their reply, then
/// the order they started: runs of one turn may share a millisecond).
pub(super) fn fill_offers(tx: &Connection, conversations: Option<&[ConversationId]>) -> Result<()> {
    const SELECT: &str = "SELECT r.conversation, r.id, n.depth, t.name, t.input_schema
         FROM runs r
         JOIN nodes n ON n.id = r.output_head
         JOIN run_tools rt ON rt.run_id = r.id
         JOIN tools t ON t.hash = rt.tool_hash";
    const ORDER: &str = "ORDER BY r.conversation, n.depth, r.started, r.id, rt.position";
    let rerun_runs = rerun_runs(tx, conversations)?;
    let mut offers = Vec::new();
    let mut read = |sql: &str, param: Option<&str>| -> Result<()> {
        let mut stmt = tx.prepare(sql)?;
        let mut rows = match param {
            Some(id) => stmt.query([id])?,
            None => stmt.query([])?,
        };
        while let Some(row) = rows.next()? {
            if rerun_runs.contains(&row.get::<_, String>(1)?) {
                continue;
            }
            offers.push(StoredOffer {
                conversation: ConversationId(row.get(0)?),
                depth: row.get::<_, i64>(2)? as u64,
                name: row.get(3)?,
                input_schema: row.get(4)?,
            });
        }
        Ok(())
    };
    match conversations {
        None => read(
            &format!("{SELECT} WHERE r.conversation IS NOT NULL {ORDER}"),
            None,
        )?,
        Some(ids) => {
            for id in ids {
                tx.prepare_cached("DELETE FROM tool_offers WHERE conversation = ?1")?
                    .execute([id.as_str()])?;
                read(
                    &format!("{SELECT} WHERE r.conversation = ?1 {ORDER}"),
                    Some(id.as_str()),
                )?;
            }
        }
    }
    for (conversation, row) in fill(offers) {
        insert_offer(tx, &conversation, &row)?;
    }
    Ok(())
}

/// The ids of the sample and baseline runs of the reruns of
/// `conversations` (of every conversation when `None`).
fn rerun_runs(
    tx: &Connection,
    conversations: Option<&[ConversationId]>,
) -> Result<HashSet<String>> {
    let mut ids = HashSet::new();
    let mut read = |sql: &str, param: Option<&str>| -> Result<()> {
        let mut stmt = tx.prepare_cached(sql)?;
        let mut rows = match param {
            Some(id) => stmt.query([id])?,
            None => stmt.query([])?,
        };
        while let Some(row) = rows.next()? {
            for column in [0, 1] {
                let list: String = row.get(column)?;
                ids.extend(serde_json::from_str::<Vec<String>>(&list).unwrap_or_default());
            }
        }
        Ok(())
    };
    const SELECT: &str = "SELECT sample_runs, baseline_runs FROM reruns";
    match conversations {
        None => read(SELECT, None)?,
        Some(conversations) => {
            for id in conversations {
                read(
                    &format!("{SELECT} WHERE conversation = ?1"),
                    Some(id.as_str()),
                )?;
            }
        }
    }
    Ok(ids)
}

/// Schema 12: the table, filled from the runs already stored.
pub(super) fn add_tool_offers(tx: &Connection) -> Result<()> {
    tx.execute_batch(
        "CREATE TABLE tool_offers (
             conversation TEXT NOT NULL,
             depth        INTEGER NOT NULL,
             name         TEXT NOT NULL,
             schema       BLOB NOT NULL,
             PRIMARY KEY (conversation, depth, name)
         ) WITHOUT ROWID;",
    )?;
    fill_offers(tx, None)
}
