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
(the earlier body's input head must be one of the new input thread's
nodes, so its whole thread is the new one's beginning: an id is its
content and its ancestors'). That node is looked for among the new
thread's last [`NEW_MESSAGES`] nodes, and only the messages after the
point the cut is taken up from are read: the work does not walk the
history.

It holds message texts in memory: forgetting clears it (`redact`, `delete`
and retention in this process; the proxy when another process erased
something, `Store::drop_cached_content`). Bounded to [`ENTRIES`] bodies and
[`BYTES`] bytes, the least recently stored dropped first.
*/

use super::skeleton::{self, Resume};
use super::{BodyHead, Cut, Input, MAX_PIECE, NewPiece, pieces_after};
use skein_core::NodeId;
use skein_core::id::Digest;
use std::borrow::Cow;
use std::collections::VecDeque;
use std::sync::Mutex;

/// Bodies remembered at most (about one per conversation in use, as many
/// as the proxy keeps threads for)...
const ENTRIES: usize = 512;
/// ...and their bytes (body and skeleton) at most.
const BYTES: usize = 64 << 20;
/// How often (in body bytes) the body's hasher is kept along the way.
const SNAPSHOT: usize = 64 << 10;
/// How many of a body's last input messages may be new since the body it
/// is taken up from (a body with more is cut whole).
const NEW_MESSAGES: usize = 64;

/// The last bodies a store handle cut, to take the next ones up from.
#[derive(Default)]
pub(crate) struct Recent {
    cuts: Mutex<Cuts>,
}

/// The remembered bodies, the least recently stored first, and how many
/// of them end at each input head (so a body of no remembered thread is
/// told in a few hash lookups).
#[derive(Default)]
struct Cuts {
    bodies: VecDeque<Remembered>,
    heads: std::collections::HashMap<NodeId, usize>,
}

impl Cuts {
    fn remove(&mut self, index: usize) -> Option<Remembered> {
        let removed = self.bodies.remove(index)?;
        if let Some(count) = self.heads.get_mut(&removed.head) {
            *count -= 1;
            if *count == 0 {
                self.heads.remove(&removed.head);
            }
        }
        Some(removed)
    }
}

/// One body's cut, as the next body of its conversation takes it up.
struct Remembered {
    /// Its input thread's head.
    head: NodeId,
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
    /// body its input thread continues where there is one; remembered in
    /// turn.
    pub(crate) fn cut<'b>(&self, body: &'b [u8], input: Input<'_>) -> Cut<'b> {
        let Some(head) = input.back().next().map(|node| node.id()) else {
            return super::cut(body, &[]);
        };
        let earlier = self.take(input);
        let (cut, remembered, _) = cut_after(earlier.as_ref(), body, input, head);
        self.keep(remembered);
        cut
    }

    /// Forget every body (their texts may have been erased).
    pub(crate) fn clear(&self) {
        *self.cuts.lock().expect("recent bodies") = Cuts::default();
    }

    /// The remembered body whose input head is the latest of `input`'s
    /// last [`NEW_MESSAGES`] nodes, taken out (its successor replaces it).
    fn take(&self, input: Input<'_>) -> Option<Remembered> {
        let mut cuts = self.cuts.lock().expect("recent bodies");
        let head = input
            .back()
            .take(NEW_MESSAGES)
            .map(|node| node.id())
            .find(|id| cuts.heads.contains_key(id))?;
        let index = cuts
            .bodies
            .iter()
            .rposition(|earlier| earlier.head == head)?;
        cuts.remove(index)
    }

    fn keep(&self, remembered: Remembered) {
        if remembered.bytes() > BYTES {
            return;
        }
        let mut cuts = self.cuts.lock().expect("recent bodies");
        *cuts.heads.entry(remembered.head).or_default() += 1;
        cuts.bodies.push_back(remembered);
        let mut held: usize = cuts.bodies.iter().map(Remembered::bytes).sum();
        while cuts.bodies.len() > ENTRIES || held > BYTES {
            let Some(dropped) = cuts.remove(0) else {
                break;
            };
            held -= dropped.bytes();
        }
    }
}

/// Where a cut took up the work: the body searched from `searched`, the
/// skeleton cut from `cut`, the body hashed from `hashed`, and how many of
/// the input thread's messages it read (`messages`).
#[derive(Debug)]
#[cfg_attr(not(test), expect(dead_code, reason = "what the tests check"))]
struct Work {
    searched: usize,
    cut: usize,
    hashed: usize,
    messages: usize,
}

/// `body`'s cut, taken up from `earlier` (a body whose thread this one's
/// continues) where they stop agreeing, what to remember of it, and where
/// its work began.
fn cut_after<'b>(
    earlier: Option<&Remembered>,
    body: &'b [u8],
    input: Input<'_>,
    input_head: NodeId,
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
    let messages = input.messages_from(from.messages);
    let taken_up = skeleton::resumed(body, &messages, prefix, from);
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
        head: input_head,
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
        messages: messages.len(),
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
    use skein_core::{Message, Thread};

    fn words(i: usize) -> String {
        let words: Vec<String> = (0..90)
            .map(|j| ((i * 7919 + j * 104_729) % 9973).to_string())
            .collect();
        format!("message {i} \"quoted\" é {}", words.join(" "))
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

    fn thread(texts: &[String]) -> Thread {
        Thread::from_messages(texts.iter().map(|text| Message::user(text.clone())))
    }

    fn input(thread: &Thread) -> Input<'_> {
        Input::of(Some(thread), thread.head_id())
    }

    fn refs(thread: &Thread) -> Vec<(NodeId, &Message)> {
        input(thread).messages_from(0)
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
            let taken_up = recent.cut(&sent, input(&nodes));
            let whole = super::super::cut(&sent, &refs(&nodes));
            assert!(same_cut(&taken_up, &whole), "turn {turn}");
        }
        assert_eq!(
            recent.cuts.lock().unwrap().bodies.len(),
            1,
            "one body per line"
        );
    }

    /// The work of a turn at depth 1,000 begins near the end of its body:
    /// the last messages are read and searched, the last pieces cut and
    /// the last snapshot's bytes hashed, whatever the depth.
    #[test]
    fn a_resent_history_is_searched_cut_and_hashed_from_near_its_end() {
        let texts: Vec<String> = (0..1002).map(words).collect();
        let mut earlier = None;
        for turn in [1000, 1002] {
            let nodes = thread(&texts[..turn]);
            let sent = body(&texts[..turn], r#","stream":true"#);
            let head = nodes.head_id().unwrap();
            let (cut, remembered, work) = cut_after(earlier.as_ref(), &sent, input(&nodes), head);
            assert!(same_cut(&cut, &super::super::cut(&sent, &refs(&nodes))));
            if turn == 1002 {
                let last_two = sent.len() - 2 * 700;
                assert!(work.searched > last_two, "{work:?} of {}", sent.len());
                assert!(work.messages <= 3, "{work:?}: the history was read");
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
            let taken_up = recent.cut(&sent, input(&nodes));
            assert_eq!(&taken_up.skeleton[..], &sent[..]);
            assert!(same_cut(
                &taken_up,
                &super::super::cut(&sent, &refs(&nodes))
            ));
        }
        let cuts = recent.cuts.lock().unwrap();
        assert!(cuts.bodies.iter().all(|cut| cut.skeleton.is_none()));
    }

    #[test]
    fn a_body_that_differs_early_or_a_thread_that_does_not_continue_is_cut_whole() {
        let recent = Recent::default();
        let texts: Vec<String> = (0..40).map(words).collect();
        let nodes = thread(&texts);
        recent.cut(&body(&texts, ""), input(&nodes));
        // The same thread, its second text sent differently (an edit: the
        // edited node and every one after it have other ids).
        let mut edited = texts.clone();
        edited[1] = format!("{} (edited)", edited[1]);
        let edited_nodes = thread(&edited);
        for (sent, nodes) in [
            (body(&texts, ",\"n\":1"), &nodes),
            (body(&edited, ""), &edited_nodes),
        ] {
            let taken_up = recent.cut(&sent, input(nodes));
            assert!(same_cut(&taken_up, &super::super::cut(&sent, &refs(nodes))));
        }
    }

    #[test]
    fn what_is_taken_up_always_expands_to_the_body() {
        // Texts sent twice, out of order, and a history cut back and grown
        // again: whatever the resumes, the skeleton stands for the body.
        let recent = Recent::default();
        let texts: Vec<String> = (0..30).map(|i| words(i % 7)).collect();
        for turn in [10, 20, 12, 30, 30, 5, 29] {
            let nodes = thread(&texts[..turn]);
            let mut order: Vec<String> = texts[..turn].to_vec();
            if turn % 2 == 0 {
                order.swap(0, turn - 1);
            }
            let sent = body(&order, "");
            let cut = recent.cut(&sent, input(&nodes));
            let messages: std::collections::HashMap<NodeId, Message> = refs(&nodes)
                .into_iter()
                .map(|(id, message)| (id, message.clone()))
                .collect();
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
