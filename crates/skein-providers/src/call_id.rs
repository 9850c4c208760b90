/*!
Deterministic tool-call ids for the providers skein controls.

An id is `call_` followed by the first 24 hex digits of
`blake3(parent || index)`, where `parent` is the request thread's head node
id (32 zero bytes for an empty thread) and `index` is the call's position
in the reply as a little-endian `u32`. The same request therefore always
yields the same ids, so greedy re-runs produce equal nodes and dedup.
*/

use skein_core::NodeId;

/// How many hex digits of the hash an id keeps.
const HEX_DIGITS: usize = 24;

/// The id of the `index`-th tool call of a reply to a request whose thread
/// ends at `parent` (`None` for an empty thread).
pub fn deterministic_call_id(parent: Option<NodeId>, index: u32) -> String {
    let mut hasher = blake3::Hasher::new();
    hasher.update(&parent.map_or([0u8; 32], |id| id.0));
    hasher.update(&index.to_le_bytes());
    let hex = hasher.finalize().to_hex();
    format!("call_{}", &hex[..HEX_DIGITS])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_follow_the_documented_formula() {
        let parent = NodeId([7; 32]);
        let mut input = vec![7u8; 32];
        input.extend_from_slice(&3u32.to_le_bytes());
        let expected = format!("call_{}", &blake3::hash(&input).to_hex()[..24]);
        assert_eq!(deterministic_call_id(Some(parent), 3), expected);
    }

    #[test]
    fn an_empty_thread_hashes_zero_bytes() {
        assert_eq!(
            deterministic_call_id(None, 0),
            deterministic_call_id(Some(NodeId([0; 32])), 0)
        );
        assert_ne!(
            deterministic_call_id(None, 0),
            deterministic_call_id(None, 1)
        );
        assert_eq!(deterministic_call_id(None, 0).len(), "call_".len() + 24);
    }
}
