/*!
How nodes are laid out in either database, independent of SQL: the blob
threshold, stored id checks and decoding a stored body given a way to fetch
its blobs. Both backends call these, so a node is stored and read back the
same way whatever holds it.
*/

use crate::error::{Result, StoreError};
use skein_core::encoding::decode_body;
use skein_core::{Digest, Message, NodeId};

/// Payloads of this many bytes or more are stored once in the blob table,
/// keyed by their digest, instead of inline in the node body. 4 KiB is one
/// SQLite page: smaller parts are cheaper inline, larger ones (documents,
/// attachments) are the ones that recur across conversations. The threshold
/// never affects node ids.
pub const BLOB_THRESHOLD: usize = 4096;

/// A stored node id; anything but 32 bytes means the row was damaged.
pub(crate) fn node_id(bytes: &[u8]) -> Result<NodeId> {
    NodeId::from_slice(bytes).ok_or_else(|| {
        StoreError::MalformedRow(format!("a node id has {} bytes instead of 32", bytes.len()))
    })
}

/// A stored id column that may be NULL.
pub(crate) fn optional_node_id(bytes: Option<&[u8]>) -> Result<Option<NodeId>> {
    bytes.map(node_id).transpose()
}

/// Decode a stored body; `fetch` is asked for each blob it references and
/// answers `Ok(None)` for a blob the database lacks.
pub(crate) fn decode_message(
    id: NodeId,
    body: &[u8],
    mut fetch: impl FnMut(&Digest) -> Result<Option<Vec<u8>>>,
) -> Result<Message> {
    let corrupt = |error| StoreError::Corrupt { id, error };
    let decoded = decode_body(body).map_err(corrupt)?;
    let mut failure = None;
    let message = decoded.resolve(|digest| match fetch(digest) {
        Ok(bytes) => bytes,
        Err(error) => {
            failure = Some(error);
            None
        }
    });
    if let Some(error) = failure {
        return Err(error);
    }
    message.map_err(corrupt)
}

/// The digests of the blobs a stored body references (none for a body that
/// cannot be decoded: decoding it later reports the damage).
pub(crate) fn blob_refs(body: &[u8]) -> Vec<Digest> {
    decode_body(body)
        .map(|decoded| decoded.blob_refs().collect())
        .unwrap_or_default()
}
