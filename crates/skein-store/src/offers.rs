/*!
What a conversation's model calls offered, kept for schema-drift warnings
without reading its runs: one row per change, `(conversation, depth, tool
name, input-schema hash)`, written when a call at that depth of the
conversation's thread offered a tool under a schema other than the one the
conversation last offered it with (or for the first time).

A conversation loaded at depth `d` knows the schema each tool was last
offered with by reading its rows up to `d` (and its origin's, up to the
fork), so a load costs those few rows, never the conversation's runs
(DESIGN.md, invariant 4). The rows are written by the turn's own
transaction ([`turn_offers`] then [`Offers::changes`]), and filled from the
stored runs by the migration that added them and by imports
([`Offers::changes`] over [`StoredOffer`]s in thread order).
*/

use skein_core::{ConversationId, Digest, RunRecord, Thread, ToolSpec};
use std::collections::HashMap;

/// A tool offered under a schema at a depth of a conversation's thread: a
/// row of the table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolOffer {
    /// The depth of the node the offering call produced.
    pub depth: u64,
    pub name: String,
    /// [`ToolSpec::schema_hash`].
    pub schema: Digest,
}

/// The latest schema of each tool name a conversation has rows for, to
/// tell which new offerings are changes.
#[derive(Default)]
pub(crate) struct Offers {
    latest: HashMap<String, Digest>,
}

impl Offers {
    /// Seeded with a conversation's stored rows, oldest first.
    pub(crate) fn seeded(rows: impl IntoIterator<Item = ToolOffer>) -> Offers {
        let mut offers = Offers::default();
        for row in rows {
            offers.latest.insert(row.name, row.schema);
        }
        offers
    }

    /// The rows `tools`, offered by a call whose reply is at `depth`, add:
    /// those whose schema differs from the name's latest.
    pub(crate) fn changes(&mut self, depth: u64, tools: &[ToolSpec]) -> Vec<ToolOffer> {
        let mut rows = Vec::new();
        for tool in tools {
            let schema = tool.schema_hash();
            if self.latest.insert(tool.name.clone(), schema) != Some(schema) {
                rows.push(ToolOffer {
                    depth,
                    name: tool.name.clone(),
                    schema,
                });
            }
        }
        rows
    }
}

/// The calls of a turn that offered tools, each with the depth of its
/// reply in `thread` (the history after the turn), in the turn's order.
/// A run whose reply is not in the thread (it failed, or only joins an
/// existing reply) offers nothing here.
pub(crate) fn turn_offers<'a>(
    thread: Option<&Thread>,
    runs: &'a [RunRecord],
) -> Vec<(u64, &'a [ToolSpec])> {
    let Some(thread) = thread else {
        return Vec::new();
    };
    runs.iter()
        .filter(|run| !run.tools.is_empty())
        .filter_map(|run| {
            let output = run.output_head?;
            // A turn's replies are its newest nodes: the walk is short.
            let node = thread.ancestors().find(|node| node.id() == output)?;
            Some((node.depth(), run.tools.as_slice()))
        })
        .collect()
}

/// One stored run's offering, as the fill from stored runs reads it.
pub(crate) struct StoredOffer {
    pub(crate) conversation: ConversationId,
    pub(crate) depth: u64,
    pub(crate) name: String,
    pub(crate) input_schema: String,
}

/// The rows stored runs' offerings make, given in thread order per
/// conversation (conversations may interleave). An input schema that is
/// not JSON (which no writer produces) is hashed as a JSON string.
pub(crate) fn fill(
    offers: impl IntoIterator<Item = StoredOffer>,
) -> Vec<(ConversationId, ToolOffer)> {
    let mut by_conversation: HashMap<ConversationId, Offers> = HashMap::new();
    let mut rows = Vec::new();
    for offer in offers {
        let input_schema = serde_json::from_str(&offer.input_schema)
            .unwrap_or(serde_json::Value::String(offer.input_schema));
        let tool = ToolSpec {
            name: offer.name,
            description: String::new(),
            input_schema,
        };
        let changes = by_conversation
            .entry(offer.conversation.clone())
            .or_default()
            .changes(offer.depth, std::slice::from_ref(&tool));
        rows.extend(
            changes
                .into_iter()
                .map(|row| (offer.conversation.clone(), row)),
        );
    }
    rows
}
