/*!
The tool calls each stored message makes, by call id, on PostgreSQL (as
sqlite/calls.rs): queued with the nodes that make them by
`graph::queue_nodes`, read by `Graph::nodes_calling`, filled for older
databases by the migration that adds them.
*/

use super::graph::{decode, fetch_blobs};
use crate::codec::node_id;
use crate::error::Result;
use deadpool_postgres::Transaction;
use skein_core::{Message, Role};

/// The table, keyed by call id then node id.
pub(crate) const CREATE_TOOL_CALLS: &str = "CREATE TABLE tool_calls (
    call_id TEXT NOT NULL,
    node    BYTEA NOT NULL,
    PRIMARY KEY (call_id, node)
);";

/// The statement that indexes queued calls: `unnest` of call ids and node
/// ids. Nodes are inserted before it in the same pipeline.
pub(crate) const INSERT_TOOL_CALLS: &str = "INSERT INTO tool_calls(call_id, node)
     SELECT * FROM unnest($1::text[], $2::bytea[]) ON CONFLICT DO NOTHING";

/// The call ids `message` makes.
pub(crate) fn call_ids(message: &Message) -> impl Iterator<Item = &str> {
    message.tool_calls().map(|call| call.id.as_str())
}

/// Fill the table from the stored assistant messages, a page at a time. A
/// node that cannot be decoded is left out (`verify` reports it).
pub(crate) async fn fill(tx: &Transaction<'_>) -> Result<()> {
    const PAGE: i64 = 500;
    let page = tx
        .prepare(
            "SELECT seq, id, body FROM nodes WHERE role = $1 AND seq > $2 ORDER BY seq LIMIT $3",
        )
        .await?;
    let insert = tx.prepare(INSERT_TOOL_CALLS).await?;
    let assistant = i16::from(Role::Assistant.code());
    let mut after = 0i64;
    loop {
        let rows = tx.query(&page, &[&assistant, &after, &PAGE]).await?;
        let Some(last) = rows.last() else {
            return Ok(());
        };
        after = last.get(0);
        let blobs = fetch_blobs(tx, rows.iter().map(|row| row.get::<_, &[u8]>(2))).await?;
        let (mut calls, mut nodes): (Vec<String>, Vec<&[u8]>) = (Vec::new(), Vec::new());
        for row in &rows {
            let Ok(id) = node_id(row.get(1)) else {
                continue;
            };
            let Ok(message) = decode(id, row.get(2), &blobs) else {
                continue;
            };
            for call in call_ids(&message) {
                calls.push(call.to_string());
                nodes.push(row.get(1));
            }
        }
        if !calls.is_empty() {
            tx.execute(&insert, &[&calls, &nodes]).await?;
        }
    }
}
