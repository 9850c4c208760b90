/*!
The tools a conversation's calls offered, on PostgreSQL: the `tool_offers`
rows (schema 12; crate::offers says what they are), read by a load, written
by a turn's transaction, and filled from stored runs by the migration and
by imports. The same statements as SQLite's sqlite/offers.rs.
*/

use super::PgStore;
use crate::error::Result;
use crate::offers::{Offers, StoredOffer, ToolOffer, fill, turn_offers};
use deadpool_postgres::GenericClient;
use skein_core::{ConversationId, Digest, RunRecord, Thread};
use std::collections::HashSet;

impl PgStore {
    pub(crate) async fn tool_offers(
        &self,
        conversation: &ConversationId,
        up_to_depth: Option<u64>,
    ) -> Result<Vec<ToolOffer>> {
        reading!(self, |client| {
            read_offers(client, conversation, up_to_depth).await
        })
    }
}

/// `conversation`'s rows up to `up_to_depth` (all without it), oldest
/// first.
async fn read_offers(
    client: &impl GenericClient,
    conversation: &ConversationId,
    up_to_depth: Option<u64>,
) -> Result<Vec<ToolOffer>> {
    let statement = client
        .prepare_cached(
            "SELECT depth, name, schema FROM tool_offers
             WHERE conversation = $1 AND depth <= $2 ORDER BY depth, name",
        )
        .await?;
    let depth = up_to_depth.map_or(i64::MAX, |depth| depth.min(i64::MAX as u64) as i64);
    let rows = client
        .query(&statement, &[&conversation.as_str(), &depth])
        .await?;
    Ok(rows
        .iter()
        .filter_map(|row| {
            let schema = <[u8; 32]>::try_from(row.get::<_, &[u8]>(2)).ok()?;
            Some(ToolOffer {
                depth: row.get::<_, i64>(0) as u64,
                name: row.get(1),
                schema: Digest(schema),
            })
        })
        .collect())
}

/// Inside a turn's transaction: the rows the turn's calls add to
/// `conversation`, whose thread `thread` now is. A turn that offered no
/// tool costs nothing here.
pub(super) async fn record_offers(
    tx: &impl GenericClient,
    conversation: &ConversationId,
    thread: Option<&Thread>,
    runs: &[RunRecord],
) -> Result<()> {
    let offered = turn_offers(thread, runs);
    if offered.is_empty() {
        return Ok(());
    }
    let mut offers = Offers::seeded(read_offers(tx, conversation, None).await?);
    for (depth, tools) in offered {
        for row in offers.changes(depth, tools) {
            insert_offer(tx, conversation, &row).await?;
        }
    }
    Ok(())
}

async fn insert_offer(
    tx: &impl GenericClient,
    conversation: &ConversationId,
    row: &ToolOffer,
) -> Result<()> {
    let statement = tx
        .prepare_cached(
            "INSERT INTO tool_offers(conversation, depth, name, schema) VALUES ($1, $2, $3, $4)
             ON CONFLICT (conversation, depth, name) DO UPDATE SET schema = excluded.schema",
        )
        .await?;
    tx.execute(
        &statement,
        &[
            &conversation.as_str(),
            &(row.depth as i64),
            &row.name,
            &row.schema.as_bytes().as_slice(),
        ],
    )
    .await?;
    Ok(())
}

/// Rebuild the rows of `conversations` (every conversation when `None`)
/// from their stored runs: those whose reply is stored, reruns' samples and
/// baselines left out, in thread order (the depth of their reply, then
/// the order they started: runs of one turn may share a millisecond).
pub(super) async fn fill_offers(
    tx: &impl GenericClient,
    conversations: Option<&[ConversationId]>,
) -> Result<()> {
    const SELECT: &str = "SELECT r.conversation, r.id, n.depth, t.name, t.input_schema
         FROM runs r
         JOIN nodes n ON n.id = r.output_head
         JOIN run_tools rt ON rt.run_id = r.id
         JOIN tools t ON t.hash = rt.tool_hash";
    const ORDER: &str = "ORDER BY r.conversation, n.depth, r.started, r.id, rt.position";
    let rerun_runs = rerun_runs(tx, conversations).await?;
    let rows = match conversations {
        None => {
            tx.query(
                &format!("{SELECT} WHERE r.conversation IS NOT NULL {ORDER}"),
                &[],
            )
            .await?
        }
        Some(ids) => {
            let ids: Vec<&str> = ids.iter().map(ConversationId::as_str).collect();
            tx.execute(
                "DELETE FROM tool_offers WHERE conversation = ANY($1)",
                &[&ids],
            )
            .await?;
            tx.query(
                &format!("{SELECT} WHERE r.conversation = ANY($1) {ORDER}"),
                &[&ids],
            )
            .await?
        }
    };
    let offers = rows
        .iter()
        .filter(|row| !rerun_runs.contains(row.get::<_, &str>(1)))
        .map(|row| StoredOffer {
            conversation: ConversationId(row.get(0)),
            depth: row.get::<_, i64>(2) as u64,
            name: row.get(3),
            input_schema: row.get(4),
        });
    for (conversation, row) in fill(offers.collect::<Vec<_>>()) {
        insert_offer(tx, &conversation, &row).await?;
    }
    Ok(())
}

/// The ids of the sample and baseline runs of the reruns of
/// `conversations` (of every conversation when `None`).
async fn rerun_runs(
    tx: &impl GenericClient,
    conversations: Option<&[ConversationId]>,
) -> Result<HashSet<String>> {
    const SELECT: &str = "SELECT sample_runs, baseline_runs FROM reruns";
    let rows = match conversations {
        None => tx.query(SELECT, &[]).await?,
        Some(ids) => {
            let ids: Vec<&str> = ids.iter().map(ConversationId::as_str).collect();
            tx.query(&format!("{SELECT} WHERE conversation = ANY($1)"), &[&ids])
                .await?
        }
    };
    let mut ids = HashSet::new();
    for row in &rows {
        for column in [0, 1] {
            let list: &str = row.get(column);
            ids.extend(serde_json::from_str::<Vec<String>>(list).unwrap_or_default());
        }
    }
    Ok(ids)
}

/// Schema 12: the table.
pub(super) const CREATE_TOOL_OFFERS: &str = "CREATE TABLE tool_offers (
        conversation TEXT COLLATE \"C\" NOT NULL,
        depth        BIGINT NOT NULL,
        name         TEXT NOT NULL,
        schema       BYTEA NOT NULL,
        PRIMARY KEY (conversation, depth, name)
    );";
