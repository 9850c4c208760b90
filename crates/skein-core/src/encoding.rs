/*!
The canonical encoding: how a node's id is computed, and how a message is
serialised for storage. Specified byte by byte in `docs/canonical-encoding.md`
and pinned by golden vectors in `tests/data/golden-ids.json`.

Two forms share one layout of small fields:

- the **id preimage**: version, parent id, role, and per part its kind, its
  small fields and the BLAKE3 digest of its payload. A node id is the BLAKE3
  hash of the preimage, so it is a Merkle shape: it never depends on whether a
  payload is stored inline or in the blob table.
- the **body**: version, role, and per part its kind, its small fields and its
  payload, either inline or as a reference (length and digest) to a blob.

Changing either form is a breaking change: bump [`ENCODING_VERSION`] and ship
a migration.
*/

use crate::id::{Digest, NodeId};
use crate::message::{Attachment, Erased, ErasedPart, Message, Part, Role, ToolCall, ToolResult};

/// The version of the canonical encoding, the first byte of every body and
/// of every id preimage after the domain tag.
pub const ENCODING_VERSION: u8 = 1;

/// Domain separation for node ids, so a node id is never the hash of some
/// other skein structure.
pub const NODE_DOMAIN: &[u8] = b"skein/node";

const KIND_TEXT: u8 = 1;
const KIND_TOOL_CALL: u8 = 2;
const KIND_TOOL_RESULT: u8 = 3;
const KIND_ATTACHMENT: u8 = 4;

const PAYLOAD_INLINE: u8 = 0;
const PAYLOAD_BLOB: u8 = 1;
/// An erased payload: its digest, when, who and why (body only; the id
/// preimage holds the digest as for any part).
const PAYLOAD_ERASED: u8 = 2;

/// Why bytes could not be decoded into a message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    #[error("encoding version {0} is not supported (this build reads version {ENCODING_VERSION})")]
    UnsupportedVersion(u8),
    #[error("the encoding ends early (needed {needed} more bytes at offset {offset})")]
    UnexpectedEnd { offset: usize, needed: u64 },
    #[error("unknown role code {0}")]
    UnknownRole(u8),
    #[error("unknown part kind {0}")]
    UnknownPartKind(u8),
    #[error("unknown payload storage tag {0}")]
    UnknownPayloadTag(u8),
    #[error("invalid boolean byte {0}")]
    InvalidBool(u8),
    #[error("the {0} is not valid UTF-8")]
    InvalidUtf8(&'static str),
    #[error("{0} trailing bytes after the last part")]
    TrailingBytes(usize),
    #[error("blob {0} is referenced but missing")]
    MissingBlob(Digest),
    #[error("blob {digest} has {actual} bytes where the body says {expected}")]
    BlobLengthMismatch {
        digest: Digest,
        expected: u64,
        actual: u64,
    },
}

/// Where an encoder writes: a byte vector (to keep the bytes) or a hasher
/// (to hash them without building them).
trait Sink {
    fn put(&mut self, bytes: &[u8]);
}

impl Sink for Vec<u8> {
    fn put(&mut self, bytes: &[u8]) {
        self.extend_from_slice(bytes);
    }
}

impl Sink for blake3::Hasher {
    fn put(&mut self, bytes: &[u8]) {
        self.update(bytes);
    }
}

fn put_u8(out: &mut impl Sink, value: u8) {
    out.put(&[value]);
}

fn put_u32(out: &mut impl Sink, value: u32) {
    out.put(&value.to_le_bytes());
}

fn put_u64(out: &mut impl Sink, value: u64) {
    out.put(&value.to_le_bytes());
}

fn put_field(out: &mut impl Sink, field: &[u8]) {
    put_u32(out, len_u32(field.len()));
    out.put(field);
}

fn len_u32(len: usize) -> u32 {
    u32::try_from(len).expect("a small field or part count exceeds 4 GiB")
}

/// Kind and small fields of a part: the prefix both forms share.
fn put_part_header(out: &mut impl Sink, part: &Part) {
    match part {
        Part::Text { .. } => put_u8(out, KIND_TEXT),
        Part::ToolCall(call) => put_tool_call_header(out, &call.id, &call.name),
        Part::ToolResult(result) => {
            put_tool_result_header(out, &result.call_id, result.is_error);
        }
        Part::Attachment(attachment) => put_attachment_header(out, &attachment.media_type),
        // An erased part enters both forms as the part it was.
        Part::Erased(erased) => match &erased.was {
            ErasedPart::Text => put_u8(out, KIND_TEXT),
            ErasedPart::ToolCall { id, name } => put_tool_call_header(out, id, name),
            ErasedPart::ToolResult { call_id, is_error } => {
                put_tool_result_header(out, call_id, *is_error);
            }
            ErasedPart::Attachment { media_type } => put_attachment_header(out, media_type),
        },
    }
}

fn put_tool_call_header(out: &mut impl Sink, id: &str, name: &str) {
    put_u8(out, KIND_TOOL_CALL);
    put_field(out, id.as_bytes());
    put_field(out, name.as_bytes());
}

fn put_tool_result_header(out: &mut impl Sink, call_id: &str, is_error: bool) {
    put_u8(out, KIND_TOOL_RESULT);
    put_field(out, call_id.as_bytes());
    put_u8(out, u8::from(is_error));
}

fn put_attachment_header(out: &mut impl Sink, media_type: &str) {
    put_u8(out, KIND_ATTACHMENT);
    put_field(out, media_type.as_bytes());
}

fn write_preimage(out: &mut impl Sink, parent: Option<&NodeId>, message: &Message) {
    out.put(NODE_DOMAIN);
    put_u8(out, ENCODING_VERSION);
    match parent {
        None => put_u8(out, 0),
        Some(parent) => {
            put_u8(out, 1);
            out.put(parent.as_bytes());
        }
    }
    put_u8(out, message.role.code());
    put_u32(out, len_u32(message.parts.len()));
    for part in &message.parts {
        put_part_header(out, part);
        out.put(part.payload_digest().as_bytes());
    }
}

/// The id of the node (parent, message).
pub fn node_id(parent: Option<&NodeId>, message: &Message) -> NodeId {
    let mut hasher = blake3::Hasher::new();
    write_preimage(&mut hasher, parent, message);
    NodeId(*hasher.finalize().as_bytes())
}

/// The bytes whose BLAKE3 hash is the node id (for docs and golden tests).
pub fn id_preimage(parent: Option<&NodeId>, message: &Message) -> Vec<u8> {
    let mut out = Vec::new();
    write_preimage(&mut out, parent, message);
    out
}

/// A message encoded for storage, with the payloads that went to blobs.
#[derive(Debug)]
pub struct EncodedBody<'m> {
    pub bytes: Vec<u8>,
    /// Payloads of at least the blob threshold, keyed by their digest, in
    /// part order. The body references them; the store keeps them once.
    pub blobs: Vec<(Digest, &'m [u8])>,
}

/// Encode a message for storage. Payloads of `blob_threshold` bytes or more
/// are moved out by reference. The threshold never affects the node id.
pub fn encode_body(message: &Message, blob_threshold: usize) -> EncodedBody<'_> {
    let mut bytes = Vec::with_capacity(
        16 + message
            .parts
            .iter()
            .map(|p| p.payload().len() + 16)
            .sum::<usize>(),
    );
    let mut blobs = Vec::new();
    put_u8(&mut bytes, ENCODING_VERSION);
    put_u8(&mut bytes, message.role.code());
    put_u32(&mut bytes, len_u32(message.parts.len()));
    for part in &message.parts {
        put_part_header(&mut bytes, part);
        if let Part::Erased(erased) = part {
            put_u8(&mut bytes, PAYLOAD_ERASED);
            bytes.put(erased.digest.as_bytes());
            put_u64(&mut bytes, erased.erased_at_ms as u64);
            put_field(&mut bytes, erased.erased_by.as_bytes());
            put_field(&mut bytes, erased.reason.as_bytes());
            continue;
        }
        let payload = part.payload();
        if payload.len() >= blob_threshold {
            let digest = Digest::of(payload);
            put_u8(&mut bytes, PAYLOAD_BLOB);
            put_u64(&mut bytes, payload.len() as u64);
            bytes.put(digest.as_bytes());
            blobs.push((digest, payload));
        } else {
            put_u8(&mut bytes, PAYLOAD_INLINE);
            put_u64(&mut bytes, payload.len() as u64);
            bytes.put(payload);
        }
    }
    EncodedBody { bytes, blobs }
}

/// A body whose structure has been checked, borrowed from the bytes it was
/// decoded from; its blob references may still need resolving.
///
/// Decoding allocates nothing: [`decode_body`] walks the parts once to check
/// every length, tag and header string, and [`DecodedBody::resolve`] walks
/// them again to build the message, allocating only what the message holds.
/// Loading a thread decodes every body in it, so this is on the hot path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodedBody<'a> {
    pub role: Role,
    count: u32,
    /// The bytes after the part count, already checked.
    parts: &'a [u8],
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PartHeader<'a> {
    Text,
    ToolCall { id: &'a str, name: &'a str },
    ToolResult { call_id: &'a str, is_error: bool },
    Attachment { media_type: &'a str },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Payload<'a> {
    Inline(&'a [u8]),
    Blob {
        digest: Digest,
        len: u64,
    },
    Erased {
        digest: Digest,
        at_ms: u64,
        by: &'a str,
        reason: &'a str,
    },
}

impl<'a> DecodedBody<'a> {
    /// Digests of the blobs this body references, in part order.
    pub fn blob_refs(&self) -> impl Iterator<Item = Digest> + '_ {
        self.checked_parts()
            .filter_map(|(_, payload)| match payload {
                Payload::Blob { digest, .. } => Some(digest),
                Payload::Inline(_) | Payload::Erased { .. } => None,
            })
    }

    /// Turn the body into a message, fetching referenced blobs with `lookup`.
    pub fn resolve(
        self,
        mut lookup: impl FnMut(&Digest) -> Option<Vec<u8>>,
    ) -> Result<Message, DecodeError> {
        let mut parts = Vec::with_capacity(self.count as usize);
        for (header, payload) in self.checked_parts() {
            if let Payload::Erased {
                digest,
                at_ms,
                by,
                reason,
            } = payload
            {
                parts.push(Part::Erased(Erased {
                    was: header.erased(),
                    digest,
                    erased_by: by.to_owned(),
                    erased_at_ms: at_ms as i64,
                    reason: reason.to_owned(),
                }));
                continue;
            }
            let payload = match payload {
                Payload::Inline(bytes) => bytes.to_vec(),
                Payload::Blob { digest, len } => {
                    let bytes = lookup(&digest).ok_or(DecodeError::MissingBlob(digest))?;
                    if bytes.len() as u64 != len {
                        return Err(DecodeError::BlobLengthMismatch {
                            digest,
                            expected: len,
                            actual: bytes.len() as u64,
                        });
                    }
                    bytes
                }
                Payload::Erased { .. } => unreachable!("handled above"),
            };
            parts.push(header.into_part(payload)?);
        }
        Ok(Message {
            role: self.role,
            parts,
        })
    }

    /// The parts again; [`decode_body`] already checked them all.
    fn checked_parts(&self) -> impl Iterator<Item = (PartHeader<'a>, Payload<'a>)> + use<'a> {
        let mut reader = Reader {
            bytes: self.parts,
            offset: 0,
        };
        (0..self.count).map(move |_| read_part(&mut reader).expect("checked by decode_body"))
    }
}

impl PartHeader<'_> {
    /// The header as an erased part keeps it.
    fn erased(self) -> ErasedPart {
        match self {
            PartHeader::Text => ErasedPart::Text,
            PartHeader::ToolCall { id, name } => ErasedPart::ToolCall {
                id: id.to_owned(),
                name: name.to_owned(),
            },
            PartHeader::ToolResult { call_id, is_error } => ErasedPart::ToolResult {
                call_id: call_id.to_owned(),
                is_error,
            },
            PartHeader::Attachment { media_type } => ErasedPart::Attachment {
                media_type: media_type.to_owned(),
            },
        }
    }

    fn into_part(self, payload: Vec<u8>) -> Result<Part, DecodeError> {
        let utf8 = |bytes: Vec<u8>, what| {
            String::from_utf8(bytes).map_err(|_| DecodeError::InvalidUtf8(what))
        };
        Ok(match self {
            PartHeader::Text => Part::Text {
                text: utf8(payload, "text")?,
            },
            PartHeader::ToolCall { id, name } => Part::ToolCall(ToolCall {
                id: id.to_owned(),
                name: name.to_owned(),
                arguments: utf8(payload, "tool-call arguments")?,
            }),
            PartHeader::ToolResult { call_id, is_error } => Part::ToolResult(ToolResult {
                call_id: call_id.to_owned(),
                content: utf8(payload, "tool-result content")?,
                is_error,
            }),
            PartHeader::Attachment { media_type } => Part::Attachment(Attachment {
                media_type: media_type.to_owned(),
                data: payload,
            }),
        })
    }
}

/// Decode a storage body. Every length is checked against the bytes that
/// remain, and nothing is allocated, so hostile input cannot make the
/// decoder allocate at all.
pub fn decode_body(bytes: &[u8]) -> Result<DecodedBody<'_>, DecodeError> {
    let mut reader = Reader { bytes, offset: 0 };
    let version = reader.u8()?;
    if version != ENCODING_VERSION {
        return Err(DecodeError::UnsupportedVersion(version));
    }
    let role_code = reader.u8()?;
    let role = Role::from_code(role_code).ok_or(DecodeError::UnknownRole(role_code))?;
    let count = reader.u32()?;
    let start = reader.offset;
    for _ in 0..count {
        read_part(&mut reader)?;
    }
    if reader.remaining() != 0 {
        return Err(DecodeError::TrailingBytes(reader.remaining()));
    }
    Ok(DecodedBody {
        role,
        count,
        parts: &bytes[start..],
    })
}

/// One part's header and payload (a payload's text is checked for UTF-8
/// only when it is resolved).
fn read_part<'a>(reader: &mut Reader<'a>) -> Result<(PartHeader<'a>, Payload<'a>), DecodeError> {
    let header = match reader.u8()? {
        KIND_TEXT => PartHeader::Text,
        KIND_TOOL_CALL => PartHeader::ToolCall {
            id: reader.string("tool-call id")?,
            name: reader.string("tool name")?,
        },
        KIND_TOOL_RESULT => PartHeader::ToolResult {
            call_id: reader.string("tool-result call id")?,
            is_error: reader.bool()?,
        },
        KIND_ATTACHMENT => PartHeader::Attachment {
            media_type: reader.string("media type")?,
        },
        other => return Err(DecodeError::UnknownPartKind(other)),
    };
    let payload = match reader.u8()? {
        PAYLOAD_INLINE => {
            let len = reader.u64()?;
            Payload::Inline(reader.take(len)?)
        }
        PAYLOAD_BLOB => {
            let len = reader.u64()?;
            let digest = Digest(reader.take(32)?.try_into().expect("32 bytes"));
            Payload::Blob { digest, len }
        }
        PAYLOAD_ERASED => Payload::Erased {
            digest: Digest(reader.take(32)?.try_into().expect("32 bytes")),
            at_ms: reader.u64()?,
            by: reader.string("erased-by note")?,
            reason: reader.string("erasure reason")?,
        },
        other => return Err(DecodeError::UnknownPayloadTag(other)),
    };
    Ok((header, payload))
}

struct Reader<'a> {
    bytes: &'a [u8],
    offset: usize,
}

impl<'a> Reader<'a> {
    fn remaining(&self) -> usize {
        self.bytes.len() - self.offset
    }

    fn take(&mut self, len: u64) -> Result<&'a [u8], DecodeError> {
        if len > self.remaining() as u64 {
            return Err(DecodeError::UnexpectedEnd {
                offset: self.offset,
                needed: len - self.remaining() as u64,
            });
        }
        let start = self.offset;
        self.offset += len as usize;
        Ok(&self.bytes[start..self.offset])
    }

    fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take(1)?[0])
    }

    fn bool(&mut self) -> Result<bool, DecodeError> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            other => Err(DecodeError::InvalidBool(other)),
        }
    }

    fn u32(&mut self) -> Result<u32, DecodeError> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }

    fn u64(&mut self) -> Result<u64, DecodeError> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }

    fn string(&mut self, what: &'static str) -> Result<&'a str, DecodeError> {
        let len = self.u32()?;
        let bytes = self.take(u64::from(len))?;
        std::str::from_utf8(bytes).map_err(|_| DecodeError::InvalidUtf8(what))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Message {
        Message::new(
            Role::Assistant,
            vec![
                Part::text("hello"),
                Part::ToolCall(ToolCall {
                    id: "call_1".into(),
                    name: "search".into(),
                    arguments: r#"{"q": "rust"}"#.into(),
                }),
            ],
        )
    }

    #[test]
    fn body_round_trips_inline_and_through_blobs() {
        let message = sample();
        for threshold in [0, 6, usize::MAX] {
            let encoded = encode_body(&message, threshold);
            let blobs: Vec<(Digest, Vec<u8>)> = encoded
                .blobs
                .iter()
                .map(|(d, b)| (*d, b.to_vec()))
                .collect();
            let decoded = decode_body(&encoded.bytes).unwrap();
            let back = decoded
                .resolve(|digest| {
                    blobs
                        .iter()
                        .find(|(d, _)| d == digest)
                        .map(|(_, b)| b.clone())
                })
                .unwrap();
            assert_eq!(back, message, "threshold {threshold}");
        }
    }

    #[test]
    fn missing_and_short_blobs_are_reported() {
        let message = sample();
        let encoded = encode_body(&message, 0);
        let decoded = decode_body(&encoded.bytes).unwrap();
        assert_eq!(decoded.blob_refs().count(), 2);
        assert!(matches!(
            decoded.clone().resolve(|_| None),
            Err(DecodeError::MissingBlob(_))
        ));
        assert!(matches!(
            decoded.resolve(|_| Some(vec![1])),
            Err(DecodeError::BlobLengthMismatch { .. })
        ));
    }

    #[test]
    fn truncated_or_extended_bodies_are_rejected() {
        let encoded = encode_body(&sample(), usize::MAX).bytes;
        for cut in 0..encoded.len() {
            assert!(decode_body(&encoded[..cut]).is_err(), "cut at {cut}");
        }
        let mut longer = encoded.clone();
        longer.push(0);
        assert_eq!(decode_body(&longer), Err(DecodeError::TrailingBytes(1)));
        let mut future = encoded;
        future[0] = 2;
        assert_eq!(
            decode_body(&future),
            Err(DecodeError::UnsupportedVersion(2))
        );
    }

    #[test]
    fn a_huge_declared_count_does_not_allocate() {
        let bytes = [ENCODING_VERSION, 1, 0xff, 0xff, 0xff, 0xff];
        assert!(matches!(
            decode_body(&bytes),
            Err(DecodeError::UnexpectedEnd { .. })
        ));
    }

    #[test]
    fn ids_hash_exactly_the_preimage() {
        let message = sample();
        let parent = node_id(None, &Message::system("s"));
        let preimage = id_preimage(Some(&parent), &message);
        assert_eq!(
            NodeId(*blake3::hash(&preimage).as_bytes()),
            node_id(Some(&parent), &message)
        );
    }

    #[test]
    fn erasing_every_part_keeps_the_id_and_the_body_round_trips_without_the_payload() {
        let parent = NodeId([7; 32]);
        let mut message = sample();
        message.parts.push(Part::text("x".repeat(5000)));
        let id = node_id(Some(&parent), &message);
        let erased = Message::new(
            message.role,
            message
                .parts
                .iter()
                .map(|part| Erased::part(part, "alice", 42, "pasted a secret"))
                .collect(),
        );
        assert!(erased.is_erased());
        assert_eq!(node_id(Some(&parent), &erased), id);
        let body = encode_body(&erased, 16);
        assert!(body.blobs.is_empty(), "an erased part references no blob");
        assert!(!body.bytes.windows(5).any(|w| w == b"hello"));
        let decoded = decode_body(&body.bytes).unwrap().resolve(|_| None).unwrap();
        assert_eq!(decoded, erased);
        // Erasing again changes nothing; a changed digest is another id.
        let again = Erased::part(&erased.parts[0], "bob", 43, "again");
        assert_eq!(again, erased.parts[0]);
        let mut forged = erased.clone();
        if let Part::Erased(part) = &mut forged.parts[0] {
            part.digest = Digest::of(b"something else");
        }
        assert_ne!(node_id(Some(&parent), &forged), id);
    }
}
