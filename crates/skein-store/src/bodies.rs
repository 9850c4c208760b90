/*!
Request bodies as content-addressed pieces (DESIGN invariant 13).

A recorded proxy client re-sends its whole history with every request, so
keeping each body whole grows with the square of the conversation. The
store keeps a body instead as a chain of *pieces*: the body is cut where
its content says (FastCDC, so a cut depends only on the bytes around it,
and two bodies that begin alike are cut alike up to where they differ),
and each piece is identified like a node, by the BLAKE3 hash of its
parent piece's id and its bytes' digest. A piece is stored once: a body
that re-sends an earlier one's bytes shares that body's chain up to the
last cut before the first new byte, and adds only the pieces after it. A
run keeps its body's last piece, the whole body's digest and its length,
so a reconstruction is checked byte for byte.

Erasing a message erases the pieces that hold it (`bytes` gone, their
digest kept, like a node's tombstone): a reconstruction then reports which
spans were erased ([`RequestBody::erased`]) and never shows stale text.

What is here needs no SQL: the cut rule, piece ids, and the
reconstruction's type. Each backend's `bodies.rs` stores and reads pieces.
*/

use skein_core::id::Digest;
use std::ops::Range;

/// FastCDC's bounds: no piece shorter than this (but a body's last)...
const MIN_PIECE: usize = 128;
/// ...pieces of about this size, so a re-sent body adds about one piece
/// of bytes it already stored (the one holding the first new byte): half
/// a KiB, where a piece's row and index entries cost ~150 bytes...
const AVERAGE_PIECE: usize = 512;
/// ...and none longer.
const MAX_PIECE: usize = 4096;

/// One piece of a body being stored: its id, its parent's, and where its
/// bytes lie in the body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct NewPiece {
    pub id: Digest,
    pub parent: Option<Digest>,
    pub range: Range<usize>,
}

/// What a run keeps of its body: the last piece (none for an empty body),
/// the whole body's digest and its length.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct BodyHead {
    pub last: Option<Digest>,
    pub digest: Digest,
    pub len: usize,
}

/// `body` cut into its pieces, in order, with the head a run keeps.
pub(crate) fn cut(body: &[u8]) -> (Vec<NewPiece>, BodyHead) {
    let mut pieces: Vec<NewPiece> = Vec::new();
    let mut parent = None;
    for chunk in fastcdc::v2020::FastCDC::new(body, MIN_PIECE, AVERAGE_PIECE, MAX_PIECE) {
        let range = chunk.offset..chunk.offset + chunk.length;
        let id = piece_id(parent.as_ref(), &Digest::of(&body[range.clone()]));
        pieces.push(NewPiece { id, parent, range });
        parent = Some(id);
    }
    let head = BodyHead {
        last: parent,
        digest: Digest::of(body),
        len: body.len(),
    };
    (pieces, head)
}

/// A piece's id: the hash of its parent's id (or nothing, for a body's
/// first piece) and its bytes' digest, so an erased piece keeps its id.
pub(crate) fn piece_id(parent: Option<&Digest>, bytes: &Digest) -> Digest {
    let mut hasher = blake3::Hasher::new();
    hasher.update(b"skein request piece 1\0");
    match parent {
        Some(parent) => hasher.update(&[1]).update(parent.as_bytes()),
        None => hasher.update(&[0]),
    };
    hasher.update(bytes.as_bytes());
    Digest(*hasher.finalize().as_bytes())
}

/// A 32-byte digest column (a piece's id, its parent's, a body's digest).
pub(crate) fn digest_of(bytes: Vec<u8>) -> crate::error::Result<Digest> {
    <[u8; 32]>::try_from(bytes.as_slice())
        .map(Digest)
        .map_err(|_| {
            crate::error::StoreError::MalformedRow(format!("a digest of {} bytes", bytes.len()))
        })
}

/// A stored piece as read back, in body order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct StoredPiece {
    pub id: Digest,
    pub parent: Option<Digest>,
    pub content: PieceContent,
}

/// A stored piece's bytes, or what is left of them once erased.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum PieceContent {
    Bytes(Vec<u8>),
    Erased { digest: Digest, len: usize },
}

impl StoredPiece {
    /// Whether the piece's id is its parent's and content's hash (an erased
    /// piece by the digest its tombstone keeps).
    pub(crate) fn id_checks(&self) -> bool {
        let digest = match &self.content {
            PieceContent::Bytes(bytes) => Digest::of(bytes),
            PieceContent::Erased { digest, .. } => *digest,
        };
        piece_id(self.parent.as_ref(), &digest) == self.id
    }
}

/// A recorded request body, reconstructed from its pieces.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestBody {
    bytes: Vec<u8>,
    erased: Vec<Range<usize>>,
}

impl RequestBody {
    /// Put `pieces` (in body order) together and check the result against
    /// the run's `head`: every byte there, or, where pieces were erased,
    /// the rest with the erased spans named.
    pub(crate) fn assemble(
        pieces: Vec<StoredPiece>,
        digest: &Digest,
        len: usize,
    ) -> Result<RequestBody, String> {
        let mut bytes = Vec::with_capacity(len);
        let mut erased: Vec<Range<usize>> = Vec::new();
        let mut parent = None;
        for piece in pieces {
            if piece.parent != parent || !piece.id_checks() {
                return Err(format!(
                    "piece {} does not follow its chain or its content",
                    piece.id.to_hex()
                ));
            }
            parent = Some(piece.id);
            match piece.content {
                PieceContent::Bytes(more) => bytes.extend_from_slice(&more),
                PieceContent::Erased { len, .. } => {
                    let at = bytes.len();
                    match erased.last_mut() {
                        Some(last) if last.end == at => last.end += len,
                        _ => erased.push(at..at + len),
                    }
                    bytes.resize(at + len, 0);
                }
            }
        }
        if bytes.len() != len {
            return Err(format!(
                "its pieces hold {} bytes, the run recorded {len}",
                bytes.len()
            ));
        }
        if erased.is_empty() && Digest::of(&bytes) != *digest {
            return Err("its pieces do not hash to the digest the run recorded".into());
        }
        Ok(RequestBody { bytes, erased })
    }

    /// The exact body the client sent, when nothing of it was erased.
    pub fn whole(&self) -> Option<&str> {
        if self.erased.is_empty() {
            std::str::from_utf8(&self.bytes).ok()
        } else {
            None
        }
    }

    /// The spans (byte ranges) erased with the messages they held.
    pub fn erased(&self) -> &[Range<usize>] {
        &self.erased
    }

    /// Its length in bytes, erased spans included.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// Whether the body was empty.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// The body to show: the whole text, or what is left of it with each
    /// erased span marked `[erased N bytes]` (a character an erased span
    /// cut in two shows as U+FFFD).
    pub fn display(&self) -> String {
        let mut shown = String::with_capacity(self.bytes.len());
        let mut at = 0;
        for span in &self.erased {
            shown.push_str(&String::from_utf8_lossy(&self.bytes[at..span.start]));
            shown.push_str(&format!("[erased {} bytes]", span.len()));
            at = span.end;
        }
        shown.push_str(&String::from_utf8_lossy(&self.bytes[at..]));
        shown
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored(body: &[u8], pieces: &[NewPiece]) -> Vec<StoredPiece> {
        pieces
            .iter()
            .map(|piece| StoredPiece {
                id: piece.id,
                parent: piece.parent,
                content: PieceContent::Bytes(body[piece.range.clone()].to_vec()),
            })
            .collect()
    }

    fn history(messages: usize) -> String {
        let list: Vec<String> = (0..messages)
            .map(|i| {
                // Varied words: a repeated phrase gives cuts nothing to cut at.
                let words: Vec<String> = (0..120)
                    .map(|j| (i * 7919 + j * 104_729) % 9973)
                    .map(|n| n.to_string())
                    .collect();
                format!(
                    r#"{{"role":"user","content":"message {i} {}"}}"#,
                    words.join(" ")
                )
            })
            .collect();
        format!(
            r#"{{"model":"m","messages":[{}],"stream":true}}"#,
            list.join(",")
        )
    }

    #[test]
    fn a_body_reassembles_byte_for_byte() {
        let body = history(40);
        let (pieces, head) = cut(body.as_bytes());
        assert!(pieces.len() > 10, "{} pieces", pieces.len());
        let back = RequestBody::assemble(stored(body.as_bytes(), &pieces), &head.digest, head.len)
            .unwrap();
        assert_eq!(back.whole(), Some(body.as_str()));
    }

    #[test]
    fn a_resent_history_shares_all_but_its_last_pieces() {
        let (before, _) = cut(history(100).as_bytes());
        let (after, _) = cut(history(101).as_bytes());
        let shared = after.iter().filter(|piece| before.contains(piece)).count();
        let new_bytes: usize = after[shared..].iter().map(|piece| piece.range.len()).sum();
        assert!(shared + 3 >= before.len(), "{shared} of {}", before.len());
        assert!(new_bytes < 600 + 2 * MAX_PIECE, "{new_bytes} new bytes");
    }

    #[test]
    fn an_empty_body_has_no_pieces() {
        let (pieces, head) = cut(b"");
        assert!(pieces.is_empty() && head.last.is_none());
        let back = RequestBody::assemble(Vec::new(), &head.digest, 0).unwrap();
        assert_eq!(back.whole(), Some(""));
    }

    #[test]
    fn an_erased_piece_is_a_named_span_and_a_changed_one_an_error() {
        let body = history(20);
        let (pieces, head) = cut(body.as_bytes());
        let mut parts = stored(body.as_bytes(), &pieces);
        let second = parts[1].range_len();
        parts[1].content = PieceContent::Erased {
            digest: Digest::of(&body.as_bytes()[pieces[1].range.clone()]),
            len: second,
        };
        let back = RequestBody::assemble(parts.clone(), &head.digest, head.len).unwrap();
        assert_eq!(back.whole(), None);
        assert_eq!(back.erased(), &[pieces[1].range.clone()]);
        assert!(back.display().contains(&format!("[erased {second} bytes]")));

        parts[1].content = PieceContent::Bytes(b"tampered".to_vec());
        assert!(RequestBody::assemble(parts, &head.digest, head.len).is_err());
    }

    impl StoredPiece {
        fn range_len(&self) -> usize {
            match &self.content {
                PieceContent::Bytes(bytes) => bytes.len(),
                PieceContent::Erased { len, .. } => *len,
            }
        }
    }
}
