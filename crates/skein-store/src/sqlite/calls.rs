/*!
The tool calls each stored message makes, by call id, on SQLite: filled by
`graph::insert_node` (the one place a node is inserted) through
[`index_calls`], read by `Graph::nodes_calling`. A request that carries a
call made in another conversation (an agent handing off to another, with
the handoff call in its history) is linked to that conversation by it (see
`skein_conversation::landing`).
*/

use super::graph::decode_message;
use crate::codec::node_id;
use crate::error::Result;
use rusqlite::{Connection, params};
use skein_core::{Message, Role};

/// Index the calls of `message`, stored at `seq`.
pub(crate) fn index_calls(conn: &Connection, seq: i64, message: &Message) -> Result<()> {
    let mut calls = message.tool_calls().peekable();
    if calls.peek().is_none() {
        return Ok(());
    }
    let mut insert = conn.prepare_cached(
        "INSERT INTO tool_calls(call_id, node) VALUES (?1, ?2) ON CONFLICT DO NOTHING",
    )?;
    for call in calls {
        insert.execute(params![call.id, seq])?;
    }
    Ok(())
}

/// Remove the calls of `message`, stored at `seq`, from the index (the
/// node is being deleted).
pub(crate) fn unindex_calls(conn: &Connection, seq: i64, message: &Message) -> Result<()> {
    let mut delete =
        conn.prepare_cached("DELETE FROM tool_calls WHERE call_id = ?1 AND node = ?2")?;
    for call in message.tool_calls() {
        delete.execute(params![call.id, seq])?;
    }
    Ok(())
}

/// The migration that adds the index, filled from the stored assistant
/// messages (the only ones that make calls). A node that cannot be decoded
/// is left out (`verify` reports it).
pub(crate) fn add_tool_calls(conn: &Connection) -> Result<()> {
    conn.execute_batch(
        "CREATE TABLE tool_calls (
             call_id TEXT NOT NULL,
             node    INTEGER NOT NULL,
             PRIMARY KEY (call_id, node)
         ) WITHOUT ROWID;",
    )?;
    let mut nodes = conn.prepare("SELECT seq, id, body FROM nodes WHERE role = ?1 ORDER BY seq")?;
    let mut rows = nodes.query([Role::Assistant.code()])?;
    while let Some(row) = rows.next()? {
        let seq: i64 = row.get(0)?;
        let Ok(id) = node_id(&row.get::<_, Vec<u8>>(1)?) else {
            continue;
        };
        if let Ok(message) = decode_message(conn, id, &row.get::<_, Vec<u8>>(2)?) {
            index_calls(conn, seq, &message)?;
        }
    }
    Ok(())
}
