/*!
Request bodies as content-addressed pieces of their skeletons (DESIGN
invariant 13).

A recorded proxy client re-sends its whole history with every request, so
keeping each body whole grows with the square of the conversation, and
keeps a second copy of every message. The store keeps a body as its
*skeleton* instead ([`skeleton`]): the body with each message text the
run's input thread holds replaced by a reference to its node, so the texts
live once, in the graph. The skeleton is cut where its content says
(FastCDC, so a cut depends only on the bytes around it, and two skeletons
that begin alike are cut alike up to where they differ), and each piece is
identified like a node, by the BLAKE3 hash of its parent piece's id and
its bytes' digest. A piece is stored once: a body that re-sends an earlier
one's messages shares that body's chain up to the last cut before the
first new byte, and adds only the pieces after it. A run keeps its
skeleton's last piece and the whole body's digest and length, so a
reconstruction is checked byte for byte.

Erasing a message erases its node's text, which every reference reads,
and the pieces of the bodies that carried it (`bytes` gone, their digest
kept, like a node's tombstone): a reconstruction then reports which spans
were erased ([`RequestBody::erased`]) and never shows stale text.

What is here needs no SQL: the cut rule, piece ids, and the
reconstruction's types. Each backend's `bodies.rs` stores and reads pieces
and the nodes the references name.

This module declares `Bodies`, the backend trait sqlite/bodies.rs and
postgres/bodies.rs implement, and holds the public operations that call it:
on `Store`, blocking only.
*/

mod recent;
pub(crate) mod skeleton;

pub(crate) use recent::Recent;

use crate::records::RunId;
use skein_core::id::Digest;
use skein_core::{Message, NodeId, Part};
use std::collections::{HashMap, HashSet};
use std::ops::Range;

/// Cutting stored request bodies again: the SQL is in sqlite/bodies.rs and
/// postgres/bodies.rs.
pub(crate) trait Bodies {
    /// The runs that keep a request body, oldest first.
    fn bodied_runs(&self) -> crate::Result<Vec<RunId>>;
    /// Cut the bodies of `runs` again against their stored threads, in one
    /// transaction (`Store::compact_bodies`).
    fn recut_bodies(&self, runs: &[RunId]) -> crate::Result<Recut>;
}

/// FastCDC's bounds: no piece shorter than this (but a body's last)...
const MIN_PIECE: usize = 64;
/// ...pieces of about this size, so a re-sent body adds about one piece
/// of bytes it already stored (the one holding the first new byte): the
/// smallest FastCDC allows, as a skeleton is mostly references (40 bytes
/// a message) and a piece's row and index entries cost ~150 bytes...
const AVERAGE_PIECE: usize = 256;
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

/// A body ready to store: its skeleton, the skeleton's pieces in order,
/// and the head a run keeps.
pub(crate) struct Cut<'b> {
    pub skeleton: std::borrow::Cow<'b, [u8]>,
    pub pieces: Vec<NewPiece>,
    pub head: BodyHead,
}

impl Cut<'_> {
    /// The bytes of `piece`, one of [`Cut::pieces`].
    pub(crate) fn bytes(&self, piece: &NewPiece) -> &[u8] {
        &self.skeleton[piece.range.clone()]
    }
}

/// `body` as stored, given the messages of its run's input thread (none
/// for a body no stored thread goes with: kept as sent).
pub(crate) fn cut<'b>(body: &'b [u8], messages: &[(NodeId, &Message)]) -> Cut<'b> {
    let skeleton = skeleton::of(body, messages).bytes;
    let pieces = pieces_after(&skeleton, Vec::new());
    let head = BodyHead {
        last: pieces.last().map(|piece| piece.id),
        digest: Digest::of(body),
        len: body.len(),
    };
    Cut {
        skeleton,
        pieces,
        head,
    }
}

/// A run as a backend stores it: its record and the cut of its request
/// body, when it keeps one (the only way to make one, so no body is left
/// out).
pub(crate) struct RunToStore<'r> {
    pub run: &'r skein_core::RunRecord,
    pub body: Option<Cut<'r>>,
}

impl<'r> RunToStore<'r> {
    /// `run`, its body cut against its input thread in `thread` (the turn's
    /// stored thread), taken up from `recent` (a turn's commit, before its
    /// transaction) or cut whole.
    pub(crate) fn cut(
        run: &'r skein_core::RunRecord,
        thread: Option<&skein_core::Thread>,
        recent: Option<&Recent>,
    ) -> RunToStore<'r> {
        let body = run.request.as_deref().map(|body| {
            let input = Input::of(thread, run.input_head);
            match recent {
                Some(recent) => recent.cut(body.as_bytes(), input),
                None => cut(body.as_bytes(), &input.messages_from(0)),
            }
        });
        RunToStore { run, body }
    }
}

/// `skeleton`'s pieces: `kept` (its first pieces, already known), then
/// those FastCDC cuts from where they end. A cut depends only on the bytes
/// from its piece's start, so cutting from a known piece's end gives the
/// pieces cutting the whole would.
fn pieces_after(skeleton: &[u8], mut kept: Vec<NewPiece>) -> Vec<NewPiece> {
    let start = kept.last().map_or(0, |piece| piece.range.end);
    let mut parent = kept.last().map(|piece| piece.id);
    let rest = &skeleton[start..];
    for chunk in fastcdc::v2020::FastCDC::new(rest, MIN_PIECE, AVERAGE_PIECE, MAX_PIECE) {
        let range = start + chunk.offset..start + chunk.offset + chunk.length;
        let id = piece_id(parent.as_ref(), &Digest::of(&skeleton[range.clone()]));
        kept.push(NewPiece { id, parent, range });
        parent = Some(id);
    }
    kept
}

/// The messages of `thread` from its root to `input_head`, with their node
/// ids: what a run's body may refer to. None when the thread does not hold
/// `input_head`.
pub(crate) fn input_messages(
    thread: Option<&skein_core::Thread>,
    input_head: Option<NodeId>,
) -> Vec<(NodeId, &Message)> {
    Input::of(thread, input_head).messages_from(0)
}

/// A run's input thread, read from its head back only as far as a cut
/// needs (a body taken up from an earlier one needs its new messages only).
#[derive(Clone, Copy)]
pub(crate) struct Input<'t> {
    head: Option<&'t skein_core::Node>,
}

impl<'t> Input<'t> {
    /// The thread of `thread` that ends at `input_head` (none when it does
    /// not hold it).
    pub(crate) fn of(thread: Option<&'t skein_core::Thread>, input_head: Option<NodeId>) -> Self {
        let head = thread.zip(input_head).and_then(|(thread, input_head)| {
            thread.ancestors().find(|node| node.id() == input_head)
        });
        Input { head }
    }

    /// How many messages it has.
    pub(crate) fn len(&self) -> usize {
        self.head.map_or(0, |head| head.depth() as usize + 1)
    }

    /// Its nodes from the head back, newest first.
    pub(crate) fn back(&self) -> impl Iterator<Item = &'t skein_core::Node> {
        std::iter::successors(self.head, |node| node.parent().map(|parent| &**parent))
    }

    /// Its messages from the one at `index` (the root's is 0) on, with
    /// their ids, root first: a walk back from the head to there.
    pub(crate) fn messages_from(&self, index: usize) -> Vec<(NodeId, &'t Message)> {
        let mut messages: Vec<(NodeId, &Message)> = self
            .back()
            .take(self.len().saturating_sub(index))
            .map(|node| (node.id(), node.message()))
            .collect();
        messages.reverse();
        messages
    }
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

/// What [`crate::Store::compact_bodies`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Recut {
    /// Recorded request bodies looked at.
    pub bodies: u64,
    /// Of those, bodies cut again into fewer bytes (their messages' texts
    /// now references to the nodes).
    pub rewritten: u64,
    /// Bodies left as they were because erasure took a span of them.
    pub erased: u64,
    /// Old pieces no body reached any more, deleted.
    pub pieces_released: u64,
}

impl std::ops::AddAssign for Recut {
    fn add_assign(&mut self, more: Recut) {
        self.bodies += more.bodies;
        self.rewritten += more.rewritten;
        self.erased += more.erased;
        self.pieces_released += more.pieces_released;
    }
}

/// Runs whose bodies [`crate::Store::compact_bodies`] cuts again per
/// transaction: a kill loses at most one batch's work, and the next
/// compaction does it again (cutting a body again is idempotent).
pub const RECUT_BATCH: usize = 100;

impl crate::Store {
    /// Cut every recorded request body again against its stored thread,
    /// oldest first, [`RECUT_BATCH`] runs per transaction, telling
    /// `progress` how many of how many are done after each: bodies stored
    /// before they referred to their messages (skein before export format
    /// 5) shrink to their envelope. Idempotent, so a compaction that was
    /// stopped is finished by running it again.
    pub fn compact_bodies(&self, progress: &mut dyn FnMut(usize, usize)) -> crate::Result<Recut> {
        let runs = self.backend().bodied_runs()?;
        let mut total = Recut::default();
        for (done, batch) in runs.chunks(RECUT_BATCH).enumerate() {
            total += self.backend().recut_bodies(batch)?;
            progress(
                (done * RECUT_BATCH + batch.len()).min(runs.len()),
                runs.len(),
            );
        }
        Ok(total)
    }
}

/// The stored threads request bodies refer to, as an import or a compaction
/// meets them run by run: the last one loaded is kept, loaded at its
/// conversation's head, so the runs of one conversation load it once.
#[derive(Default)]
pub(crate) struct BodyThreads {
    held: Option<skein_core::Thread>,
}

impl BodyThreads {
    /// The input a run's body refers to, when it keeps a body.
    pub(crate) fn input(run: &crate::records::RunRecord) -> Option<NodeId> {
        run.request.as_ref().and(run.input_head)
    }

    /// The thread held, if it passes through `input`.
    pub(crate) fn holding(&self, input: NodeId) -> Option<skein_core::Thread> {
        self.held
            .as_ref()
            .filter(|thread| thread.at(input).is_some())
            .cloned()
    }

    /// Hold `thread` (just loaded) for the runs that follow.
    pub(crate) fn keep(&mut self, thread: skein_core::Thread) -> skein_core::Thread {
        self.held = Some(thread.clone());
        thread
    }
}

/// A body's skeleton put together from its pieces: all of it, or what
/// precedes its first erased piece (erasure takes a chain's pieces from
/// its end, so what follows is erased too).
#[derive(Debug)]
pub(crate) struct Assembled {
    skeleton: Vec<u8>,
    whole: bool,
}

impl Assembled {
    /// Put `pieces` (in body order) together, checking each follows its
    /// chain and matches its id.
    pub(crate) fn from_pieces(pieces: Vec<StoredPiece>) -> Result<Assembled, String> {
        let mut skeleton = Vec::new();
        let mut whole = true;
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
                PieceContent::Bytes(more) if whole => skeleton.extend_from_slice(&more),
                PieceContent::Bytes(_) => {}
                PieceContent::Erased { .. } => whole = false,
            }
        }
        Ok(Assembled { skeleton, whole })
    }

    /// The nodes whose texts the body refers to.
    pub(crate) fn nodes(&self) -> Result<Vec<NodeId>, String> {
        let mut nodes = HashSet::new();
        for segment in skeleton::segments(&self.skeleton, self.whole)? {
            if let skeleton::Segment::Ref(reference) = segment {
                nodes.insert(reference.node);
            }
        }
        Ok(nodes.into_iter().collect())
    }

    /// The body, its references read from `messages` (the stored messages
    /// of [`Assembled::nodes`]; a node not there was deleted), checked
    /// against the run's digest and length: every byte, or the rest with
    /// the erased spans named.
    pub(crate) fn body(
        &self,
        messages: &HashMap<NodeId, Message>,
        digest: &Digest,
        len: usize,
    ) -> Result<RequestBody, String> {
        let mut bytes = Vec::with_capacity(len);
        let mut erased: Vec<Range<usize>> = Vec::new();
        let mut erase = |bytes: &mut Vec<u8>, gone: usize| {
            let at = bytes.len();
            match erased.last_mut() {
                Some(last) if last.end == at => last.end += gone,
                _ => erased.push(at..at + gone),
            }
            bytes.resize(at + gone, 0);
        };
        for segment in skeleton::segments(&self.skeleton, self.whole)? {
            let reference = match segment {
                skeleton::Segment::Bytes(more) => {
                    bytes.extend_from_slice(more);
                    continue;
                }
                skeleton::Segment::Ref(reference) => reference,
            };
            let part = messages
                .get(&reference.node)
                .map(|message| message.parts.get(usize::from(reference.part)));
            match part {
                None | Some(Some(Part::Erased(_))) => erase(&mut bytes, reference.len),
                Some(part) => {
                    let text = part.and_then(skeleton::referable).ok_or_else(|| {
                        format!(
                            "node {} has no text at part {}",
                            reference.node.short(),
                            reference.part
                        )
                    })?;
                    let at = bytes.len();
                    skeleton::encode(text, reference.style, &mut bytes);
                    if bytes.len() - at != reference.len {
                        return Err(format!(
                            "node {}'s text no longer fills its {}-byte span",
                            reference.node.short(),
                            reference.len
                        ));
                    }
                }
            }
        }
        if !self.whole && bytes.len() <= len {
            let rest = len - bytes.len();
            erase(&mut bytes, rest);
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
}

/// A recorded request body, reconstructed from its pieces.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestBody {
    bytes: Vec<u8>,
    erased: Vec<Range<usize>>,
}

impl RequestBody {
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

    fn stored(cut: &Cut<'_>) -> Vec<StoredPiece> {
        cut.pieces
            .iter()
            .map(|piece| StoredPiece {
                id: piece.id,
                parent: piece.parent,
                content: PieceContent::Bytes(cut.bytes(piece).to_vec()),
            })
            .collect()
    }

    fn words(i: usize) -> String {
        // Varied words: a repeated phrase gives cuts nothing to cut at.
        let words: Vec<String> = (0..120)
            .map(|j| (i * 7919 + j * 104_729) % 9973)
            .map(|n| n.to_string())
            .collect();
        format!("message {i} {}", words.join(" "))
    }

    fn history(messages: usize) -> String {
        let list: Vec<String> = (0..messages)
            .map(|i| format!(r#"{{"role":"user","content":"{}"}}"#, words(i)))
            .collect();
        format!(
            r#"{{"model":"m","messages":[{}],"stream":true}}"#,
            list.join(",")
        )
    }

    /// The thread `history(messages)` sends, as stored nodes.
    fn thread(messages: usize) -> Vec<(NodeId, Message)> {
        (0..messages)
            .map(|i| {
                let mut id = [0u8; 32];
                id[..8].copy_from_slice(&(i as u64).to_le_bytes());
                (NodeId(id), Message::user(words(i)))
            })
            .collect()
    }

    fn refs(thread: &[(NodeId, Message)]) -> Vec<(NodeId, &Message)> {
        thread.iter().map(|(id, message)| (*id, message)).collect()
    }

    fn reassemble(
        pieces: Vec<StoredPiece>,
        thread: &[(NodeId, Message)],
        head: &BodyHead,
    ) -> Result<RequestBody, String> {
        let messages: HashMap<NodeId, Message> = thread.iter().cloned().collect();
        Assembled::from_pieces(pieces)?.body(&messages, &head.digest, head.len)
    }

    #[test]
    fn a_body_reassembles_byte_for_byte_with_or_without_its_thread() {
        let body = history(40);
        let nodes = thread(40);
        let kept_whole = cut(body.as_bytes(), &[]);
        assert_eq!(kept_whole.skeleton, body.as_bytes());
        assert!(
            kept_whole.pieces.len() > 10,
            "{} pieces",
            kept_whole.pieces.len()
        );
        let by_reference = cut(body.as_bytes(), &refs(&nodes));
        assert!(by_reference.skeleton.len() < body.len() / 5);
        assert_eq!(
            (by_reference.head.digest, by_reference.head.len),
            (kept_whole.head.digest, kept_whole.head.len)
        );
        for stored_cut in [&kept_whole, &by_reference] {
            let back = reassemble(stored(stored_cut), &nodes, &stored_cut.head).unwrap();
            assert_eq!(back.whole(), Some(body.as_str()));
        }
    }

    #[test]
    fn a_resent_history_shares_all_but_its_last_pieces() {
        let nodes = thread(101);
        let (shorter, longer) = (history(100), history(101));
        let before = cut(shorter.as_bytes(), &refs(&nodes[..100]));
        let after = cut(longer.as_bytes(), &refs(&nodes));
        let shared = after
            .pieces
            .iter()
            .filter(|piece| before.pieces.iter().any(|old| old.id == piece.id))
            .count();
        let new_bytes: usize = after.pieces[shared..].iter().map(|p| p.range.len()).sum();
        assert!(
            shared + 3 >= before.pieces.len(),
            "{shared} of {}",
            before.pieces.len()
        );
        assert!(new_bytes < 2 * MAX_PIECE, "{new_bytes} new bytes");
    }

    #[test]
    fn an_empty_body_has_no_pieces() {
        let empty = cut(b"", &[]);
        assert!(empty.pieces.is_empty() && empty.head.last.is_none());
        let back = reassemble(Vec::new(), &[], &empty.head).unwrap();
        assert_eq!(back.whole(), Some(""));
    }

    #[test]
    fn an_erased_piece_erases_the_rest_and_a_changed_one_is_an_error() {
        let body = history(20);
        let kept = cut(body.as_bytes(), &[]);
        let mut parts = stored(&kept);
        let second = &kept.pieces[1];
        parts[1].content = PieceContent::Erased {
            digest: Digest::of(kept.bytes(second)),
            len: second.range.len(),
        };
        let back = reassemble(parts.clone(), &[], &kept.head).unwrap();
        assert_eq!(back.whole(), None);
        let rest = second.range.start..body.len();
        assert_eq!(back.erased(), std::slice::from_ref(&rest));
        assert!(
            back.display()
                .contains(&format!("[erased {} bytes]", rest.len()))
        );

        parts[1].content = PieceContent::Bytes(b"tampered".to_vec());
        assert!(reassemble(parts, &[], &kept.head).is_err());
    }

    #[test]
    fn an_erased_or_deleted_message_is_an_erased_span_of_its_length() {
        let body = history(3);
        let mut nodes = thread(3);
        let by_reference = cut(body.as_bytes(), &refs(&nodes));
        let second = words(1);
        let at = body.find(&second).unwrap();
        let span = at..at + second.len();
        let erased = Part::Erased(skein_core::Erased {
            was: skein_core::ErasedPart::Text,
            digest: Digest::of(second.as_bytes()),
            erased_by: "test".into(),
            erased_at_ms: 0,
            reason: "test".into(),
        });
        nodes[1].1.parts = vec![erased];
        let back = reassemble(stored(&by_reference), &nodes, &by_reference.head).unwrap();
        assert_eq!(back.erased(), std::slice::from_ref(&span));
        assert!(!back.display().contains(&second));

        nodes.remove(1);
        let back = reassemble(stored(&by_reference), &nodes, &by_reference.head).unwrap();
        assert_eq!(back.erased(), std::slice::from_ref(&span));
    }

    #[test]
    fn a_changed_message_does_not_pass_for_the_body() {
        let body = history(3);
        let mut nodes = thread(3);
        let by_reference = cut(body.as_bytes(), &refs(&nodes));
        let mut changed = words(1);
        changed.replace_range(0..1, "M");
        nodes[1].1 = Message::user(changed);
        assert!(reassemble(stored(&by_reference), &nodes, &by_reference.head).is_err());
    }
}
