/*!
A conversation's family on SQLite: the SQL behind crate::family's rows
(members joined by origin links, the reruns of their turns, and the
conversations that share messages by their root), read in one snapshot.
*/

use super::SqliteStore;
use super::conversations::conversation_from_row;
use super::reruns::raw_rerun;
use crate::backend::BoxFuture;
use crate::conversations::conversation_columns;
use crate::error::Result;
use crate::family::{Families, FamilyLimits, FamilyRows, Rooted, share_queries};
use crate::records::ConversationId;
use crate::reruns::SELECT_RERUN;
use rusqlite::params;
use skein_core::NodeId;

/// Members by origin links: up from `?1` to where the links end, then down
/// through every conversation that names one of them as its origin; the
/// walk up first, then at most `?2` more. `UNION` drops repeated rows, so
/// even a damaged cycle of origins ends.
const MEMBERS: &str = concat!(
    "WITH RECURSIVE
         up(id, origin) AS (
             SELECT id, forked_from_conversation FROM conversations WHERE id = ?1
             UNION
             SELECT c.id, c.forked_from_conversation FROM up JOIN conversations c ON c.id = up.origin
         ),
         down(id) AS (
             SELECT id FROM up
             UNION
             SELECT c.id FROM down JOIN conversations c ON c.forked_from_conversation = down.id
             LIMIT (SELECT count(*) FROM up) + ?2
         )
     SELECT ",
    conversation_columns!(),
    ", (SELECT r.id FROM nodes r WHERE r.seq = c.root)
     FROM conversations c WHERE c.id IN (SELECT id FROM down)"
);

/// The conversations whose thread starts at node `?1`, newest first, at
/// most `?2`. (Ordered by creation, which never changes, so no turn has to
/// update `conversations_by_root`.)
const ROOTED_AT: &str = concat!(
    "SELECT ",
    conversation_columns!(),
    ", ?1 FROM conversations c
     WHERE c.root = (SELECT root FROM nodes WHERE id = ?1)
     ORDER BY c.created DESC LIMIT ?2"
);

impl Families for SqliteStore {
    fn family<'a>(
        &'a self,
        id: &'a ConversationId,
        limits: FamilyLimits,
    ) -> BoxFuture<'a, Result<FamilyRows>> {
        let id = id.clone();
        self.deferred(move |store| store.family(&id, limits))
    }
}

impl SqliteStore {
    pub(crate) fn family(&self, id: &ConversationId, limits: FamilyLimits) -> Result<FamilyRows> {
        self.read(|conn| {
            // One snapshot for every statement below.
            let snapshot = conn.unchecked_transaction()?;
            let members = snapshot
                .prepare_cached(MEMBERS)?
                .query_map(
                    params![id.as_str(), sql_limit(limits.members.saturating_add(1))],
                    rooted,
                )?
                .collect::<rusqlite::Result<Vec<Rooted>>>()?;
            let mut reruns = Vec::new();
            let mut of_conversation = snapshot.prepare_cached(&format!(
                "{SELECT_RERUN} WHERE conversation = ?1 ORDER BY created, id"
            ))?;
            for member in &members {
                let raw = of_conversation
                    .query_map([member.conversation.id.as_str()], raw_rerun)?
                    .collect::<rusqlite::Result<Vec<_>>>()?;
                for raw in raw {
                    reruns.push(raw.finish()?);
                }
            }
            let mut sharing = Vec::new();
            let mut rooted_at = snapshot.prepare_cached(ROOTED_AT)?;
            for (root, wanted) in share_queries(&members, limits) {
                for row in
                    rooted_at.query_map(params![root.as_bytes(), sql_limit(wanted)], rooted)?
                {
                    sharing.push(row?);
                }
            }
            FamilyRows::assemble(id, members, limits, reruns, sharing)
        })
    }
}

fn sql_limit(n: usize) -> i64 {
    n.min(i64::MAX as usize) as i64
}

/// A conversation row with its root id in the column after its own.
fn rooted(row: &rusqlite::Row<'_>) -> rusqlite::Result<Rooted> {
    let root: Option<Vec<u8>> = row.get(11)?;
    Ok(Rooted {
        conversation: conversation_from_row(row)?,
        root: root.as_deref().and_then(NodeId::from_slice),
    })
}
