/*!
Node ids and content digests: 32-byte BLAKE3 outputs, shown as lowercase hex.

Ids are printed in a short form ([`NodeId::short`]) and accepted as any
unambiguous hex prefix; resolving a prefix is the store's job, since only it
knows which ids exist.
*/

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::str::FromStr;

/// How many hex digits the short form of an id has.
pub const SHORT_ID_LEN: usize = 12;

/// The BLAKE3 digest of a part's payload bytes (or of any other content).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Digest(pub [u8; 32]);

impl Digest {
    pub fn of(bytes: &[u8]) -> Digest {
        Digest(*blake3::hash(bytes).as_bytes())
    }

    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    pub fn to_hex(&self) -> String {
        to_hex(&self.0)
    }
}

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Digest({})", &self.to_hex()[..SHORT_ID_LEN])
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

/// The id of a node: BLAKE3 over the canonical encoding of (parent id, role,
/// parts). See [`crate::encoding`].
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId(pub [u8; 32]);

impl NodeId {
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    pub fn from_slice(bytes: &[u8]) -> Option<NodeId> {
        bytes.try_into().ok().map(NodeId)
    }

    pub fn to_hex(&self) -> String {
        to_hex(&self.0)
    }

    /// The first [`SHORT_ID_LEN`] hex digits: what the CLI prints.
    pub fn short(&self) -> String {
        let mut hex = self.to_hex();
        hex.truncate(SHORT_ID_LEN);
        hex
    }
}

impl fmt::Debug for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "NodeId({})", self.short())
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

/// A string that is not a full 64-digit lowercase or uppercase hex id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not a node id (expected 64 hex digits)")]
pub struct ParseIdError(pub String);

impl FromStr for NodeId {
    type Err = ParseIdError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse_hex32(s)
            .map(NodeId)
            .ok_or_else(|| ParseIdError(s.to_string()))
    }
}

impl FromStr for Digest {
    type Err = ParseIdError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse_hex32(s)
            .map(Digest)
            .ok_or_else(|| ParseIdError(s.to_string()))
    }
}

impl Serialize for NodeId {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.to_hex())
    }
}

impl<'de> Deserialize<'de> for NodeId {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = std::borrow::Cow::<str>::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

impl Serialize for Digest {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.to_hex())
    }
}

impl<'de> Deserialize<'de> for Digest {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = std::borrow::Cow::<str>::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// Whether `s` could be a prefix of a hex id: 1 to 64 hex digits.
pub fn is_hex_prefix(s: &str) -> bool {
    !s.is_empty() && s.len() <= 64 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

pub(crate) fn to_hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        out.push(DIGITS[(byte >> 4) as usize] as char);
        out.push(DIGITS[(byte & 0xf) as usize] as char);
    }
    out
}

fn parse_hex32(s: &str) -> Option<[u8; 32]> {
    let bytes = s.as_bytes();
    if bytes.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, pair) in bytes.chunks_exact(2).enumerate() {
        let hi = (pair[0] as char).to_digit(16)?;
        let lo = (pair[1] as char).to_digit(16)?;
        out[i] = (hi * 16 + lo) as u8;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trips_and_short_form_is_a_prefix() {
        let id = NodeId(*blake3::hash(b"x").as_bytes());
        let hex = id.to_hex();
        assert_eq!(hex.len(), 64);
        assert_eq!(hex.parse::<NodeId>().unwrap(), id);
        assert_eq!(hex.to_uppercase().parse::<NodeId>().unwrap(), id);
        assert!(hex.starts_with(&id.short()));
        assert_eq!(id.short().len(), SHORT_ID_LEN);
    }

    #[test]
    fn malformed_ids_are_rejected() {
        assert!("abc".parse::<NodeId>().is_err());
        assert!("g".repeat(64).parse::<NodeId>().is_err());
        assert!(is_hex_prefix("0aF"));
        assert!(!is_hex_prefix(""));
        assert!(!is_hex_prefix("xyz"));
    }
}
