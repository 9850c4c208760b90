/*!
Property tests for the canonical encoding and for threads.

- (a) bodies round-trip through `encode_body` / `decode_body` / `resolve` at
  any blob threshold, and the threshold never changes the node id;
- (b) every change to content (a payload, a small field, the role, the
  error flag, the order of parts, the parent) changes the node id;
- (c) equal prefixes give equal ids, and two threads sharing a prefix share
  exactly that prefix's ids;
- (d) the decoder never panics, on arbitrary bytes or on damaged bodies.

Failures are not persisted to `proptest-regressions/`: copy the minimal
input proptest prints into a test in `tests/encoding.rs` instead.
*/

use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::Config;
use skein_core::encoding::{decode_body, encode_body, id_preimage, node_id};
use skein_core::{Attachment, Digest, Message, NodeId, Part, Role, Thread, ToolCall, ToolResult};
use std::collections::{HashMap, HashSet};

fn config(cases: u32) -> Config {
    Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    }
}

// ---------------------------------------------------------------------------
// Strategies
// ---------------------------------------------------------------------------

fn arb_role() -> impl Strategy<Value = Role> {
    prop_oneof![
        Just(Role::System),
        Just(Role::User),
        Just(Role::Assistant),
        Just(Role::Tool),
    ]
}

/// Any Unicode scalar values, control characters and astral planes included.
fn arb_string(max: usize) -> impl Strategy<Value = String> {
    proptest::collection::vec(any::<char>(), 0..max).prop_map(String::from_iter)
}

fn arb_bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(any::<u8>(), 0..max)
}

fn arb_part() -> impl Strategy<Value = Part> {
    prop_oneof![
        arb_string(40).prop_map(|text| Part::Text { text }),
        (arb_string(12), arb_string(12), arb_string(40)).prop_map(|(id, name, arguments)| {
            Part::ToolCall(ToolCall {
                id,
                name,
                arguments,
            })
        }),
        (arb_string(12), arb_string(40), any::<bool>()).prop_map(|(call_id, content, is_error)| {
            Part::ToolResult(ToolResult {
                call_id,
                content,
                is_error,
            })
        }),
        (arb_string(12), arb_bytes(64))
            .prop_map(|(media_type, data)| { Part::Attachment(Attachment { media_type, data }) }),
    ]
}

fn arb_message() -> impl Strategy<Value = Message> {
    (arb_role(), proptest::collection::vec(arb_part(), 0..6))
        .prop_map(|(role, parts)| Message::new(role, parts))
}

fn arb_nonempty_message() -> impl Strategy<Value = Message> {
    (arb_role(), proptest::collection::vec(arb_part(), 1..6))
        .prop_map(|(role, parts)| Message::new(role, parts))
}

fn arb_node_id() -> impl Strategy<Value = NodeId> {
    proptest::array::uniform32(any::<u8>()).prop_map(NodeId)
}

fn arb_parent() -> impl Strategy<Value = Option<NodeId>> {
    proptest::option::of(arb_node_id())
}

/// Thresholds around the payload sizes the strategies produce, plus the two
/// extremes (everything a blob, everything inline).
fn arb_threshold() -> impl Strategy<Value = usize> {
    prop_oneof![Just(0usize), Just(usize::MAX), Just(4096usize), 0usize..200,]
}

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

fn id_of(parent: &Option<NodeId>, message: &Message) -> NodeId {
    node_id(parent.as_ref(), message)
}

/// Replace the payload of `part` (same kind, same small fields).
fn with_payload(part: &Part, text: String, bytes: Vec<u8>) -> Part {
    match part {
        Part::Text { .. } => Part::Text { text },
        Part::ToolCall(call) => Part::ToolCall(ToolCall {
            arguments: text,
            ..call.clone()
        }),
        Part::ToolResult(result) => Part::ToolResult(ToolResult {
            content: text,
            ..result.clone()
        }),
        Part::Attachment(attachment) => Part::Attachment(Attachment {
            data: bytes,
            ..attachment.clone()
        }),
        other => panic!("unexpected part kind {}", other.kind_name()),
    }
}

/// The small fields of `part`, for changing one of them.
fn small_fields(part: &mut Part) -> Vec<&mut String> {
    match part {
        Part::Text { .. } => Vec::new(),
        Part::ToolCall(call) => vec![&mut call.id, &mut call.name],
        Part::ToolResult(result) => vec![&mut result.call_id],
        Part::Attachment(attachment) => vec![&mut attachment.media_type],
        other => panic!("unexpected part kind {}", other.kind_name()),
    }
}

// ---------------------------------------------------------------------------
// (a) bodies round-trip; the threshold never changes the id
// ---------------------------------------------------------------------------

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn bodies_round_trip_at_any_threshold(
        message in arb_message(),
        parent in arb_parent(),
        threshold in arb_threshold(),
    ) {
        let encoded = encode_body(&message, threshold);
        let moved = message.parts.iter().filter(|p| p.payload().len() >= threshold).count();
        prop_assert_eq!(encoded.blobs.len(), moved);
        for (digest, bytes) in &encoded.blobs {
            prop_assert_eq!(*digest, Digest::of(bytes));
            prop_assert!(bytes.len() >= threshold);
        }
        let table: HashMap<Digest, Vec<u8>> =
            encoded.blobs.iter().map(|(d, b)| (*d, b.to_vec())).collect();
        let decoded = decode_body(&encoded.bytes).expect("a body we wrote decodes");
        prop_assert_eq!(decoded.role, message.role);
        let refs: Vec<Digest> = decoded.blob_refs().collect();
        let written: Vec<Digest> = encoded.blobs.iter().map(|(d, _)| *d).collect();
        prop_assert_eq!(refs, written);
        let back = decoded.resolve(|d| table.get(d).cloned()).expect("blobs resolve");
        prop_assert_eq!(&back, &message);
        prop_assert_eq!(id_of(&parent, &back), id_of(&parent, &message));
    }

    #[test]
    fn the_id_is_the_hash_of_the_preimage(message in arb_message(), parent in arb_parent()) {
        let preimage = id_preimage(parent.as_ref(), &message);
        prop_assert_eq!(NodeId(*blake3::hash(&preimage).as_bytes()), id_of(&parent, &message));
        // Every payload enters as 32 bytes, whatever its size: the preimage
        // length depends only on the small fields.
        let small: usize = message.parts.iter().map(|p| {
            1 + 32 + match p {
                Part::ToolCall(c) => 8 + c.id.len() + c.name.len(),
                Part::ToolResult(r) => 4 + r.call_id.len() + 1,
                Part::Attachment(a) => 4 + a.media_type.len(),
                _ => 0,
            }
        }).sum();
        let header = 10 + 1 + 1 + parent.map_or(0, |_| 32) + 1 + 4;
        prop_assert_eq!(preimage.len(), header + small);
    }
}

// ---------------------------------------------------------------------------
// (b) every change to content changes the id
// ---------------------------------------------------------------------------

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn changing_any_payload_changes_the_id(
        message in arb_nonempty_message(),
        parent in arb_parent(),
        which in any::<Index>(),
        text in arb_string(40),
        bytes in arb_bytes(64),
    ) {
        let i = which.index(message.parts.len());
        let replaced = with_payload(&message.parts[i], text, bytes);
        prop_assume!(replaced != message.parts[i]);
        let mut changed = message.clone();
        changed.parts[i] = replaced;
        prop_assert_ne!(id_of(&parent, &changed), id_of(&parent, &message));
    }

    #[test]
    fn changing_one_byte_or_char_of_a_payload_changes_the_id(
        message in arb_nonempty_message(),
        parent in arb_parent(),
        which in any::<Index>(),
        at in any::<Index>(),
        mask in 1u8..=255,
        replacement in any::<char>(),
    ) {
        let i = which.index(message.parts.len());
        let mut changed = message.clone();
        match &mut changed.parts[i] {
            Part::Attachment(attachment) => {
                prop_assume!(!attachment.data.is_empty());
                let at = at.index(attachment.data.len());
                attachment.data[at] ^= mask;
            }
            part => {
                let text = String::from_utf8(part.payload().to_vec()).unwrap();
                let chars: Vec<char> = text.chars().collect();
                prop_assume!(!chars.is_empty());
                let at = at.index(chars.len());
                prop_assume!(chars[at] != replacement);
                let mut edited = chars;
                edited[at] = replacement;
                *part = with_payload(part, edited.into_iter().collect(), Vec::new());
            }
        }
        prop_assert_ne!(id_of(&parent, &changed), id_of(&parent, &message));
    }

    #[test]
    fn changing_any_small_field_changes_the_id(
        message in arb_nonempty_message(),
        parent in arb_parent(),
        which in any::<Index>(),
        field in any::<Index>(),
        value in arb_string(12),
    ) {
        let i = which.index(message.parts.len());
        let mut changed = message.clone();
        let mut fields = small_fields(&mut changed.parts[i]);
        prop_assume!(!fields.is_empty());
        let slot = field.index(fields.len());
        prop_assume!(*fields[slot] != value);
        *fields[slot] = value;
        prop_assert_ne!(id_of(&parent, &changed), id_of(&parent, &message));
    }

    #[test]
    fn changing_the_role_changes_the_id(
        message in arb_message(),
        parent in arb_parent(),
        role in arb_role(),
    ) {
        prop_assume!(role != message.role);
        let changed = Message::new(role, message.parts.clone());
        prop_assert_ne!(id_of(&parent, &changed), id_of(&parent, &message));
    }

    #[test]
    fn flipping_the_error_flag_changes_the_id(
        message in arb_nonempty_message(),
        parent in arb_parent(),
        which in any::<Index>(),
    ) {
        let mut changed = message.clone();
        let results: Vec<&mut ToolResult> = changed
            .parts
            .iter_mut()
            .filter_map(|p| match p {
                Part::ToolResult(r) => Some(r),
                _ => None,
            })
            .collect();
        prop_assume!(!results.is_empty());
        let n = results.len();
        let result = results.into_iter().nth(which.index(n)).unwrap();
        result.is_error = !result.is_error;
        prop_assert_ne!(id_of(&parent, &changed), id_of(&parent, &message));
    }

    #[test]
    fn swapping_two_different_parts_changes_the_id(
        message in (arb_role(), proptest::collection::vec(arb_part(), 2..6))
            .prop_map(|(role, parts)| Message::new(role, parts)),
        parent in arb_parent(),
        a in any::<Index>(),
        b in any::<Index>(),
    ) {
        let (i, j) = (a.index(message.parts.len()), b.index(message.parts.len()));
        prop_assume!(message.parts[i] != message.parts[j]);
        let mut changed = message.clone();
        changed.parts.swap(i, j);
        prop_assert_ne!(id_of(&parent, &changed), id_of(&parent, &message));
    }

    #[test]
    fn adding_or_removing_a_part_changes_the_id(
        message in arb_message(),
        parent in arb_parent(),
        extra in arb_part(),
        at in any::<Index>(),
    ) {
        let mut longer = message.clone();
        longer.parts.insert(at.index(message.parts.len() + 1), extra);
        prop_assert_ne!(id_of(&parent, &longer), id_of(&parent, &message));
    }

    #[test]
    fn changing_the_parent_changes_the_id(
        message in arb_message(),
        a in arb_parent(),
        b in arb_parent(),
    ) {
        prop_assume!(a != b);
        prop_assert_ne!(id_of(&a, &message), id_of(&b, &message));
    }
}

// ---------------------------------------------------------------------------
// (c) equal prefixes give equal ids
// ---------------------------------------------------------------------------

fn ids(thread: &Thread) -> Vec<NodeId> {
    thread.nodes().iter().map(|node| node.id()).collect()
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn building_the_same_messages_twice_gives_the_same_ids(
        messages in proptest::collection::vec(arb_message(), 0..8),
    ) {
        let first = Thread::from_messages(messages.clone());
        let second = Thread::from_messages(messages.clone());
        prop_assert_eq!(ids(&first), ids(&second));
        prop_assert_eq!(first.len(), messages.len());
        // ... and they are the chained node ids, computed by hand.
        let mut parent = None;
        for (node, message) in first.nodes().into_iter().zip(&messages) {
            let id = id_of(&parent, message);
            prop_assert_eq!(node.id(), id);
            prop_assert_eq!(node.parent_id(), parent);
            parent = Some(id);
        }
    }

    #[test]
    fn threads_sharing_a_prefix_share_exactly_its_ids(
        prefix in proptest::collection::vec(arb_message(), 0..5),
        left in proptest::collection::vec(arb_message(), 1..4),
        right in proptest::collection::vec(arb_message(), 1..4),
    ) {
        prop_assume!(left[0] != right[0]);
        let build = |tail: &[Message]| {
            Thread::from_messages(prefix.iter().chain(tail).cloned())
        };
        let (a, b) = (ids(&build(&left)), ids(&build(&right)));
        let p = prefix.len();
        prop_assert_eq!(&a[..p], &b[..p]);
        for depth in p..a.len().min(b.len()) {
            prop_assert_ne!(a[depth], b[depth], "depth {}", depth);
        }
        let a_set: HashSet<NodeId> = a.iter().copied().collect();
        let b_set: HashSet<NodeId> = b.iter().copied().collect();
        let shared: HashSet<NodeId> = a_set.intersection(&b_set).copied().collect();
        let expected: HashSet<NodeId> = a[..p].iter().copied().collect();
        prop_assert_eq!(shared, expected);

        // Forking the prefix thread gives the same ids, sharing its nodes.
        let base = Thread::from_messages(prefix.clone());
        let fork_a = base.extend(left.clone());
        let fork_b = base.extend(right.clone());
        prop_assert_eq!(ids(&fork_a), a);
        prop_assert_eq!(ids(&fork_b), b);
        if let Some(head) = base.head() {
            let at = |t: &Thread| t.nodes()[p - 1] as *const _;
            prop_assert!(std::ptr::eq(at(&fork_a), &**head));
            prop_assert!(std::ptr::eq(at(&fork_b), &**head));
        }
    }
}

// ---------------------------------------------------------------------------
// (d) the decoder never panics
// ---------------------------------------------------------------------------

/// Decode, and if that works, resolve blobs with whatever `lookup` gives:
/// neither step may panic, and a resolved message must encode again.
fn decode_anything(bytes: &[u8], lookup: &[u8]) {
    if let Ok(decoded) = decode_body(bytes) {
        let _ = decoded.blob_refs().count();
        if let Ok(message) = decoded.resolve(|_| Some(lookup.to_vec())) {
            let again = encode_body(&message, usize::MAX);
            let back = decode_body(&again.bytes)
                .unwrap()
                .resolve(|_| None)
                .unwrap();
            assert_eq!(back, message);
        }
    }
}

/// Bytes that get past the version and role more often than pure noise.
fn arb_body_like_bytes() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        arb_bytes(256),
        (0u8..5, 0u32..4, arb_bytes(256)).prop_map(|(role, count, rest)| {
            let mut out = vec![1, role];
            out.extend_from_slice(&count.to_le_bytes());
            out.extend_from_slice(&rest);
            out
        }),
    ]
}

#[derive(Debug, Clone)]
enum Damage {
    Flip {
        at: Index,
        mask: u8,
    },
    Truncate {
        at: Index,
    },
    Insert {
        at: Index,
        byte: u8,
    },
    Remove {
        at: Index,
    },
    /// Overwrite eight bytes with a huge little-endian length.
    HugeLength {
        at: Index,
        value: u64,
    },
}

fn arb_damage() -> impl Strategy<Value = Damage> {
    prop_oneof![
        (any::<Index>(), 1u8..=255).prop_map(|(at, mask)| Damage::Flip { at, mask }),
        any::<Index>().prop_map(|at| Damage::Truncate { at }),
        (any::<Index>(), any::<u8>()).prop_map(|(at, byte)| Damage::Insert { at, byte }),
        any::<Index>().prop_map(|at| Damage::Remove { at }),
        (
            any::<Index>(),
            prop_oneof![Just(u64::MAX), Just(u64::from(u32::MAX)), any::<u64>()]
        )
            .prop_map(|(at, value)| Damage::HugeLength { at, value }),
    ]
}

fn damage(bytes: &mut Vec<u8>, damage: &Damage) {
    if bytes.is_empty() {
        return;
    }
    let len = bytes.len();
    match damage {
        Damage::Flip { at, mask } => bytes[at.index(len)] ^= mask,
        Damage::Truncate { at } => bytes.truncate(at.index(len)),
        Damage::Insert { at, byte } => bytes.insert(at.index(len + 1), *byte),
        Damage::Remove { at } => {
            bytes.remove(at.index(len));
        }
        Damage::HugeLength { at, value } => {
            let start = at.index(len);
            let end = (start + 8).min(len);
            bytes[start..end].copy_from_slice(&value.to_le_bytes()[..end - start]);
        }
    }
}

proptest! {
    #![proptest_config(config(2000))]

    #[test]
    fn decoding_arbitrary_bytes_never_panics(
        bytes in arb_body_like_bytes(),
        lookup in arb_bytes(16),
    ) {
        decode_anything(&bytes, &lookup);
    }
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn decoding_damaged_bodies_never_panics(
        message in arb_message(),
        threshold in arb_threshold(),
        damages in proptest::collection::vec(arb_damage(), 1..4),
    ) {
        let encoded = encode_body(&message, threshold);
        let mut bytes = encoded.bytes.clone();
        for d in &damages {
            damage(&mut bytes, d);
        }
        let payload = encoded.blobs.first().map(|(_, b)| b.to_vec()).unwrap_or_default();
        decode_anything(&bytes, &payload);
    }
}
