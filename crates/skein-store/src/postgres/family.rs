/*!
A conversation's family on PostgreSQL: the port of `crate::family` (its SQL
only; which rows come back is decided there). The server evaluates a
recursive query only as far as its reader fetches, so the `LIMIT` on
`picked` bounds the walk down.
*/

use super::PgStore;
use super::conversations::conversation_from_row;
use crate::backend::BoxFuture;
use crate::conversations::conversation_columns;
use crate::error::Result;
use crate::family::{Families, FamilyLimits, FamilyRows, Rooted, share_queries};
use crate::records::ConversationId;
use crate::reruns::SELECT_RERUN;
use skein_core::NodeId;
use tokio_postgres::Row;

const MEMBERS: &str = concat!(
    "WITH RECURSIVE
         up(id, origin) AS (
             SELECT id, forked_from_conversation FROM conversations WHERE id = $1
             UNION
             SELECT c.id, c.forked_from_conversation FROM up JOIN conversations c ON c.id = up.origin
         ),
         down(id) AS (
             SELECT id FROM up
             UNION
             SELECT c.id FROM down JOIN conversations c ON c.forked_from_conversation = down.id
         ),
         picked AS (SELECT id FROM down LIMIT (SELECT count(*) FROM up) + $2)
     SELECT ",
    conversation_columns!(),
    ", c.root FROM conversations c WHERE c.id IN (SELECT id FROM picked)"
);

const ROOTED_AT: &str = concat!(
    "SELECT ",
    conversation_columns!(),
    ", c.root FROM conversations c WHERE c.root = $1 ORDER BY c.created DESC LIMIT $2"
);

impl Families for PgStore {
    fn family<'a>(
        &'a self,
        id: &'a ConversationId,
        limits: FamilyLimits,
    ) -> BoxFuture<'a, Result<FamilyRows>> {
        let limit = |n: usize| n.min(i64::MAX as usize) as i64;
        Box::pin(async move {
            reading!(self, |client| {
                let statement = client.prepare_cached(MEMBERS).await?;
                let members: Vec<Rooted> = client
                    .query(
                        &statement,
                        &[&id.as_str(), &limit(limits.members.saturating_add(1))],
                    )
                    .await?
                    .iter()
                    .map(rooted)
                    .collect();
                let ids: Vec<&str> = members.iter().map(|m| m.conversation.id.as_str()).collect();
                let statement = client
                    .prepare_cached(&format!(
                        "{SELECT_RERUN} WHERE conversation = ANY($1) ORDER BY created, id"
                    ))
                    .await?;
                let mut reruns = Vec::new();
                for row in client.query(&statement, &[&ids]).await? {
                    reruns.push(super::reruns::raw_rerun(&row).finish()?);
                }
                let statement = client.prepare_cached(ROOTED_AT).await?;
                let mut sharing = Vec::new();
                for (root, wanted) in share_queries(&members, limits) {
                    let rows = client
                        .query(&statement, &[&root.0.as_slice(), &limit(wanted)])
                        .await?;
                    sharing.extend(rows.iter().map(rooted));
                }
                FamilyRows::assemble(id, members, limits, reruns, sharing)
            })
        })
    }
}

/// A conversation row with its root in the column after its own.
fn rooted(row: &Row) -> Rooted {
    Rooted {
        conversation: conversation_from_row(row),
        root: row.get::<_, Option<&[u8]>>(11).and_then(NodeId::from_slice),
    }
}
