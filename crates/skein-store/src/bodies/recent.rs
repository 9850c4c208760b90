/*!
The cuts of the request bodies a store handle stored last ([`Recent`]), so
that storing the next body of a conversation does work in proportion to
what is new in it (DESIGN invariant 13; issue "content lives once", item 5).

A client of the recording proxy re-sends its whole history with each
request: the new body begins with the bytes of the one before, then
differs (the new messages, the closing brackets). Cutting it from scratch
would search every string of it for the thread's texts, cut the whole
skeleton and hash the whole body, at every turn: work that grows with the
conversation. With the earlier body's cut remembered, a body is compared
with it (a `memcmp`, far cheaper than hashing), and only what follows the
last point they share is searched ([`skeleton::resumed`]), cut into pieces
and hashed (the body's digest resumes from a snapshot of the hasher taken
every [`SNAPSHOT`] bytes).

The result is the cut a whole body's would be, piece for piece, for the
bodies clients send (each text referred to in the order it is sent); and
it is always a valid one: what is kept of the earlier skeleton stands for
bytes the new body holds, and refers only to nodes of its input thread
(the earlier body's thread must be a prefix of the new one's, node for
node).

It holds message texts in memory: forgetting clears it (`redact`, `delete`
and retention in this process; the proxy when another process erased
something, `Store::drop_cached_content`). Bounded to [`ENTRIES`] bodies and
[`BYTES`] bytes, the least recently stored dropped first.
*/

use super::skeleton::{self, Resume};
use super::{BodyHead, Cut, MAX_PIECE, NewPiece, pieces_after};
use skein_core::id::Digest;
use skein_core::{Message, NodeId};
use std::borrow::Cow;
use std::collections::VecDeque;
use std::sync::Mutex;

/// Bodies remembered at most...
const ENTRIES: usize = 64;
/// ...and their bytes (body and skeleton) at most.
const BYTES: usize = 64 << 20;
/// How often (in body bytes) the body's hasher is kept along the way.
const SNAPSHOT: usize = 64 << 10;

/// The last bodies a store handle cut, to take the next ones up from.
#[derive(Default)]
pub(crate) struct Recent {
    cuts: Mutex<VecDeque<Remembered>>,
}

/// One body's cut, as the next body of its conversation takes it up.
struct Remembered {
    /// Its input thread's nodes, root first.
    thread: Vec<NodeId>,
    body: Vec<u8>,
    /// Its skeleton, when it is not the body itself (no text referred to).
    skeleton: Option<Vec<u8>>,
    resumes: Vec<Resume>,
    pieces: Vec<NewPiece>,
    /// The body's hasher after its first N bytes, N rising.
    hashers: Vec<(usize, blake3::Hasher)>,
}

impl Remembered {
    fn skeleton(&self) -> &[u8] {
        self.skeleton.as_deref().unwrap_or(&self.body)
    }

    fn bytes(&self) -> usize {
        self.body.len() + self.skeleton.as_ref().map_or(0, Vec::len)
    }
}

impl Recent {
    /// `body` cut as [`super::cut`] cuts it, taken up from the remembered
    /// body its thread continues where there is one; remembered in turn.
    pub(crate) fn cut<'b>(&self, body: &'b [u8], messages: &[(NodeId, &Message)]) -> Cut<'b> {
        if messages.is_empty() {
            return super::cut(body, messages);
        }
        let thread: Vec<NodeId> = messages.iter().map(|(id, _)| *id).collect();
        let earlier = self.take(&thread);
        let (cut, remembered, _) = cut_after(earlier.as_ref(), body, messages, thread);
        self.keep(remembered);
        cut
    }

    /// Forget every body (their texts may have been erased).
    pub(crate) fn clear(&self) {
        self.cuts.lock().expect("recent bodies").clear();
    }

    /// The remembered body with the longest thread that `thread` continues,
    /// taken out (its successor replaces it).
    fn take(&self, thread: &[NodeId]) -> Option<Remembered> {
        let mut cuts = self.cuts.lock().expect("recent bodies");
        let continues = |earlier: &Remembered| {
            let len = earlier.thread.len();
            len <= thread.len()
                && earlier.thread.last() == thread.get(len.wrapping_sub(1))
                && earlier.thread[..] == thread[..len]
        };
        let (index, _) = cuts
            .iter()
            .enumerate()
            .filter(|(_, earlier)| continues(earlier))
            .max_by_key(|(_, earlier)| earlier.thread.len())?;
        cuts.remove(index)
    }

    fn keep(&self, remembered: Remembered) {
        if remembered.bytes() > BYTES {
            return;
        }
        let mut cuts = self.cuts.lock().expect("recent bodies");
        cuts.push_back(remembered);
        let mut held: usize = cuts.iter().map(Remembered::bytes).sum();
        while cuts.len() > ENTRIES || held > BYTES {
            let Some(dropped) = cuts.pop_front() else {
                break;
            };
            held -= dropped.bytes();
        }
    }
}

/// Where a cut took up the work: the body searched from `searched`, the
/// skeleton cut from `cut`, the body hashed from `hashed`.
#[derive(Debug)]
#[cfg_attr(not(test), expect(dead_code, reason = "what the tests check"))]
struct Work {
    searched: usize,
    cut: usize,
    hashed: usize,
}

/// `body`'s cut, taken up from `earlier` (a body whose thread this one's
/// continues) where they stop agreeing, what to remember of it, and where
/// its work began.
fn cut_after<'b>(
    earlier: Option<&Remembered>,
    body: &'b [u8],
    messages: &[(NodeId, &Message)],
    thread: Vec<NodeId>,
) -> (Cut<'b>, Remembered, Work) {
    let same = earlier.map_or(0, |earlier| common_prefix(&earlier.body, body));
    let (prefix, from, mut resumes): (&[u8], Resume, Vec<Resume>) = match earlier {
        Some(earlier) => {
            let kept: Vec<Resume> = earlier
                .resumes
                .iter()
                .copied()
                .take_while(|resume| resume.body <= same)
                .collect();
            let from = kept.last().copied().unwrap_or(Resume::START);
            (&earlier.skeleton()[..from.skeleton], from, kept)
        }
        None => (&[], Resume::START, Vec::new()),
    };
    let taken_up = skeleton::resumed(body, messages, prefix, from);
    resumes.extend(taken_up.resumes);
    let skeleton = taken_up.bytes;
    let kept_pieces = match earlier {
        Some(earlier) => {
            // A piece's cut looks at most MAX_PIECE bytes from its start.
            let alike = common_prefix(earlier.skeleton(), &skeleton);
            earlier
                .pieces
                .iter()
                .take_while(|piece| piece.range.start + MAX_PIECE <= alike)
                .cloned()
                .collect()
        }
        None => Vec::new(),
    };
    let cut_from = kept_pieces
        .last()
        .map_or(0, |piece: &NewPiece| piece.range.end);
    let pieces = pieces_after(&skeleton, kept_pieces);
    let (digest, hashers, hashed) =
        digest_after(earlier.map_or(&[][..], |e| &e.hashers), same, body);
    let head = BodyHead {
        last: pieces.last().map(|piece| piece.id),
        digest,
        len: body.len(),
    };
    let remembered = Remembered {
        thread,
        body: body.to_vec(),
        skeleton: match &skeleton {
            Cow::Borrowed(_) => None,
            Cow::Owned(owned) => Some(owned.clone()),
        },
        resumes,
        pieces: pieces.clone(),
        hashers,
    };
    let work = Work {
        searched: from.body,
        cut: cut_from,
        hashed,
    };
    let cut = Cut {
        skeleton,
        pieces,
        head,
    };
    (cut, remembered, work)
}

/// `body`'s digest, hashing on from the last of `hashers` (an earlier
/// body's) within its first `same` bytes, which `body` shares; the hashers
/// of `body` to remember, and where hashing began.
fn digest_after(
    hashers: &[(usize, blake3::Hasher)],
    same: usize,
    body: &[u8],
) -> (Digest, Vec<(usize, blake3::Hasher)>, usize) {
    let mut kept: Vec<(usize, blake3::Hasher)> = hashers
        .iter()
        .take_while(|(at, _)| *at <= same)
        .cloned()
        .collect();
    let (mut at, mut hasher) = kept.last().cloned().unwrap_or((0, blake3::Hasher::new()));
    let began = at;
    while at < body.len() {
        let end = ((at / SNAPSHOT + 1) * SNAPSHOT).min(body.len());
        hasher.update(&body[at..end]);
        at = end;
        if at % SNAPSHOT == 0 && at < body.len() {
            kept.push((at, hasher.clone()));
        }
    }
    (Digest(*hasher.finalize().as_bytes()), kept, began)
}

/// How many first bytes `a` and `b` share, compared a block at a time.
fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    const BLOCK: usize = 4096;
    let len = a.len().min(b.len());
    let mut at = 0;
    while at + BLOCK <= len && a[at..at + BLOCK] == b[at..at + BLOCK] {
        at += BLOCK;
    }
    at + a[at..len]
        .iter()
        .zip(&b[at..len])
        .position(|(x, y)| x != y)
        .unwrap_or(len - at)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(i: usize) -> String {
        let words: Vec<String> = (0..90)
            .map(|j| ((i * 7919 + j * 104_729) % 9973).to_string())
            .collect();
        format!("message {i} \"quoted\" é {}", words.join(" "))
    }

    fn node(i: usize) -> NodeId {
        let mut id = [0u8; 32];
        id[..8].copy_from_slice(&(i as u64).to_le_bytes());
        NodeId(id)
    }

    /// A client's body for `texts` (as serde_json writes it), with `tail`
    /// after the messages.
    fn body(texts: &[String], tail: &str) -> Vec<u8> {
        let messages: Vec<serde_json::Value> = texts
            .iter()
            .enumerate()
            .map(|(i, text)| {
                let role = if i % 2 == 0 { "user" } else { "assistant" };
                serde_json::json!({ "role": role, "content": text })
            })
            .collect();
        let mut out = br#"{"model":"m","messages":"#.to_vec();
        out.extend(serde_json::to_vec(&messages).unwrap());
        out.extend_from_slice(tail.as_bytes());
        out.push(b'}');
        out
    }

    fn thread(texts: &[String]) -> Vec<(NodeId, Message)> {
        texts
            .iter()
            .enumerate()
            .map(|(i, text)| (node(i), Message::user(text.clone())))
            .collect()
    }

    fn refs(thread: &[(NodeId, Message)]) -> Vec<(NodeId, &Message)> {
        thread.iter().map(|(id, message)| (*id, message)).collect()
    }

    fn same_cut(a: &Cut<'_>, b: &Cut<'_>) -> bool {
        a.skeleton == b.skeleton && a.pieces == b.pieces && a.head == b.head
    }

    #[test]
    fn a_resent_history_is_cut_as_a_whole_body_would_be() {
        let recent = Recent::default();
        let texts: Vec<String> = (0..300).map(words).collect();
        for turn in (1..=300).step_by(2) {
            let nodes = thread(&texts[..turn]);
            let sent = body(&texts[..turn], r#","stream":true"#);
            let taken_up = recent.cut(&sent, &refs(&nodes));
            let whole = super::super::cut(&sent, &refs(&nodes));
            assert!(same_cut(&taken_up, &whole), "turn {turn}");
        }
        assert_eq!(recent.cuts.lock().unwrap().len(), 1, "one body per line");
    }

    /// The work of a turn at depth 1,000 begins near the end of its body:
    /// the last messages are searched, the last pieces cut and the last
    /// snapshot's bytes hashed, whatever the depth.
    #[test]
    fn a_resent_history_is_searched_cut_and_hashed_from_near_its_end() {
        let texts: Vec<String> = (0..1002).map(words).collect();
        let mut earlier = None;
        for turn in [1000, 1002] {
            let nodes = thread(&texts[..turn]);
            let sent = body(&texts[..turn], r#","stream":true"#);
            let ids = nodes.iter().map(|(id, _)| *id).collect();
            let (cut, remembered, work) = cut_after(earlier.as_ref(), &sent, &refs(&nodes), ids);
            assert!(same_cut(&cut, &super::super::cut(&sent, &refs(&nodes))));
            if turn == 1002 {
                let last_two = sent.len() - 2 * 700;
                assert!(work.searched > last_two, "{work:?} of {}", sent.len());
                assert!(work.hashed + 2 * SNAPSHOT > sent.len(), "{work:?}");
                let skeleton = cut.skeleton.len();
                assert!(
                    work.cut + 2 * MAX_PIECE + 200 > skeleton,
                    "{work:?} of {skeleton}"
                );
            }
            earlier = Some(remembered);
        }
    }

    /// Short messages are never referred to: the skeleton is the body,
    /// remembered once, and a re-sent one is still cut as a whole one.
    #[test]
    fn a_history_of_short_messages_is_cut_as_a_whole_body_would_be() {
        let recent = Recent::default();
        let texts: Vec<String> = (0..400).map(|i| format!("short {i}")).collect();
        for turn in [100, 102, 250, 400] {
            let nodes = thread(&texts[..turn]);
            let sent = body(&texts[..turn], "");
            let taken_up = recent.cut(&sent, &refs(&nodes));
            assert_eq!(&taken_up.skeleton[..], &sent[..]);
            assert!(same_cut(
                &taken_up,
                &super::super::cut(&sent, &refs(&nodes))
            ));
        }
        let cuts = recent.cuts.lock().unwrap();
        assert!(cuts.iter().all(|cut| cut.skeleton.is_none()));
    }

    #[test]
    fn a_body_that_differs_early_or_a_thread_that_does_not_continue_is_cut_whole() {
        let recent = Recent::default();
        let texts: Vec<String> = (0..40).map(words).collect();
        let nodes = thread(&texts);
        recent.cut(&body(&texts, ""), &refs(&nodes));
        // The same thread, its second text sent differently (an edit the
        // graph stored as another node would not continue the thread).
        let mut edited = texts.clone();
        edited[1] = format!("{} (edited)", edited[1]);
        let mut edited_nodes = thread(&edited);
        edited_nodes[1].0 = node(1000);
        for (sent, nodes) in [
            (body(&texts, ",\"n\":1"), &nodes),
            (body(&edited, ""), &edited_nodes),
        ] {
            let taken_up = recent.cut(&sent, &refs(nodes));
            assert!(same_cut(&taken_up, &super::super::cut(&sent, &refs(nodes))));
        }
    }

    #[test]
    fn what_is_taken_up_always_expands_to_the_body() {
        // Texts sent twice, out of order, and a history cut back and grown
        // again: whatever the resumes, the skeleton stands for the body.
        let recent = Recent::default();
        let texts: Vec<String> = (0..30).map(|i| words(i % 7)).collect();
        let nodes = thread(&texts);
        for turn in [10, 20, 12, 30, 30, 5, 29] {
            let mut order: Vec<String> = texts[..turn].to_vec();
            if turn % 2 == 0 {
                order.swap(0, turn - 1);
            }
            let sent = body(&order, "");
            let cut = recent.cut(&sent, &refs(&nodes[..turn]));
            let messages: std::collections::HashMap<NodeId, Message> =
                nodes[..turn].iter().cloned().collect();
            let pieces: Vec<super::super::StoredPiece> = cut
                .pieces
                .iter()
                .map(|piece| super::super::StoredPiece {
                    id: piece.id,
                    parent: piece.parent,
                    content: super::super::PieceContent::Bytes(cut.bytes(piece).to_vec()),
                })
                .collect();
            let back = super::super::Assembled::from_pieces(pieces)
                .unwrap()
                .body(&messages, &cut.head.digest, cut.head.len)
                .unwrap();
            assert_eq!(
                back.whole().map(str::as_bytes),
                Some(&sent[..]),
                "turn {turn}"
            );
            assert_eq!(cut.head.digest, Digest::of(&sent));
        }
    }

    #[test]
    fn the_digest_resumes_from_any_snapshot() {
        let long: Vec<u8> = (0..5 * SNAPSHOT + 17).map(|i| (i % 251) as u8).collect();
        let (digest, hashers, _) = digest_after(&[], 0, &long);
        assert_eq!(digest, Digest::of(&long));
        assert_eq!(hashers.len(), 5);
        let mut changed = long.clone();
        changed[3 * SNAPSHOT + 5] ^= 1;
        changed.extend_from_slice(b"more");
        let same = common_prefix(&long, &changed);
        let (again, _, began) = digest_after(&hashers, same, &changed);
        assert_eq!(again, Digest::of(&changed));
        assert_eq!(began, 3 * SNAPSHOT);
    }
}
