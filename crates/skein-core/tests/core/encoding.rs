/*!
Golden vectors for the canonical encoding, version 1 (specified byte by byte
in `docs/canonical-encoding.md`).

`tests/data/golden-ids.json` holds messages with FIXED expected node ids, id
preimages, storage bodies and tool-spec hashes. The tests here recompute all
of them and fail on any difference: a changed value means the encoding
changed, which is a breaking change (a new version byte and a migration).

After a deliberate change, regenerate the file and review the diff:

```text
SKEIN_UPDATE_GOLDEN=1 cargo test -p skein-core --test encoding
```

Besides the golden file, this suite carries a small reference encoder written
from the specification alone, so the document and `src/encoding.rs` cannot
drift apart without a test failing.
*/

use serde::{Deserialize, Serialize};
use serde_json::Value;
use skein_core::encoding::{
    DecodeError, ENCODING_VERSION, NODE_DOMAIN, decode_body, encode_body, id_preimage, node_id,
};
use skein_core::tool::canonical_json_string;
use skein_core::{Attachment, Digest, Message, NodeId, Part, Role, ToolCall, ToolResult, ToolSpec};
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

/// The blob threshold the store uses: payloads of this many bytes or more go
/// to the blob table.
const STORE_THRESHOLD: usize = 4096;

/// Thresholds every vector's body is exercised at.
const THRESHOLDS: [usize; 3] = [0, STORE_THRESHOLD, usize::MAX];

const UPDATE_ENV: &str = "SKEIN_UPDATE_GOLDEN";

// ---------------------------------------------------------------------------
// The golden file
// ---------------------------------------------------------------------------

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct GoldenFile {
    about: Vec<String>,
    encoding_version: u8,
    vectors: Vec<Vector>,
    tool_specs: Vec<ToolVector>,
}

/// One node: its content, its parent (another vector, by name) and what the
/// encoding must make of it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Vector {
    name: String,
    parent: Option<String>,
    role: Role,
    parts: Vec<Part>,
    /// The node id, hex.
    id: String,
    /// The id preimage, hex (pinned for some vectors only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    preimage: Option<String>,
    /// Storage bodies, hex, keyed by blob threshold ("0", "4096", "max").
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    bodies: BTreeMap<String, String>,
}

/// One tool spec; the schema is kept as the raw text a user might write, so
/// the canonical form and the hashes visibly do not depend on its layout.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ToolVector {
    name: String,
    description: String,
    input_schema_text: String,
    canonical_schema: String,
    hash: String,
    schema_hash: String,
}

impl Vector {
    fn message(&self) -> Message {
        Message::new(self.role, self.parts.clone())
    }
}

impl ToolVector {
    fn spec(&self) -> ToolSpec {
        let schema: Value = serde_json::from_str(&self.input_schema_text)
            .unwrap_or_else(|e| panic!("tool spec {}: schema is not JSON: {e}", self.name));
        ToolSpec::new(&self.name, &self.description, schema)
    }
}

fn golden_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/golden-ids.json")
}

fn read_golden_text() -> String {
    std::fs::read_to_string(golden_path()).expect("tests/data/golden-ids.json is readable")
}

fn load_golden() -> GoldenFile {
    serde_json::from_str(&read_golden_text()).expect("tests/data/golden-ids.json parses")
}

fn threshold_from_key(key: &str) -> usize {
    match key {
        "max" => usize::MAX,
        other => other
            .parse()
            .unwrap_or_else(|_| panic!("body key `{other}` is not a threshold")),
    }
}

/// Each vector's message and parent id, computed in file order (a parent
/// must come before its children).
fn resolve_vectors(golden: &GoldenFile) -> Vec<(Option<NodeId>, Message)> {
    let mut ids: HashMap<&str, NodeId> = HashMap::new();
    let mut out = Vec::new();
    for vector in &golden.vectors {
        let parent = vector.parent.as_deref().map(|name| {
            *ids.get(name).unwrap_or_else(|| {
                panic!(
                    "vector `{}` names parent `{name}`, which is not an earlier vector",
                    vector.name
                )
            })
        });
        let message = vector.message();
        let id = node_id(parent.as_ref(), &message);
        assert!(
            ids.insert(&vector.name, id).is_none(),
            "vector name `{}` is used twice",
            vector.name
        );
        out.push((parent, message));
    }
    out
}

/// The golden file as the current encoding computes it: same content, every
/// expected value recomputed.
fn regenerate(golden: &GoldenFile) -> GoldenFile {
    let mut next = golden.clone();
    next.encoding_version = ENCODING_VERSION;
    for (vector, (parent, message)) in next.vectors.iter_mut().zip(resolve_vectors(golden)) {
        vector.id = node_id(parent.as_ref(), &message).to_hex();
        if vector.preimage.is_some() {
            vector.preimage = Some(hex(&id_preimage(parent.as_ref(), &message)));
        }
        for (key, body) in &mut vector.bodies {
            *body = hex(&encode_body(&message, threshold_from_key(key)).bytes);
        }
    }
    for tool in &mut next.tool_specs {
        let spec = tool.spec();
        tool.canonical_schema = canonical_json_string(&spec.input_schema);
        tool.hash = spec.hash().to_hex();
        tool.schema_hash = spec.schema_hash().to_hex();
    }
    next
}

fn render(golden: &GoldenFile) -> String {
    let mut text = serde_json::to_string_pretty(golden).expect("the golden file serialises");
    text.push('\n');
    text
}

/// Field-by-field differences between the committed file and the current
/// encoding, for a failure message a reviewer can act on.
fn differences(committed: &GoldenFile, current: &GoldenFile) -> Vec<String> {
    let mut out = Vec::new();
    if committed.encoding_version != current.encoding_version {
        out.push(format!(
            "encoding_version: file {}, code {}",
            committed.encoding_version, current.encoding_version
        ));
    }
    for (old, new) in committed.vectors.iter().zip(&current.vectors) {
        let name = &old.name;
        if old.id != new.id {
            out.push(format!("{name}.id:\n  file {}\n  code {}", old.id, new.id));
        }
        if old.preimage != new.preimage {
            out.push(format!(
                "{name}.preimage:\n  file {}\n  code {}",
                old.preimage.as_deref().unwrap_or_default(),
                new.preimage.as_deref().unwrap_or_default()
            ));
        }
        for (key, body) in &old.bodies {
            if new.bodies.get(key) != Some(body) {
                out.push(format!(
                    "{name}.bodies[{key}]:\n  file {body}\n  code {}",
                    new.bodies[key]
                ));
            }
        }
    }
    for (old, new) in committed.tool_specs.iter().zip(&current.tool_specs) {
        let name = &old.name;
        for (field, a, b) in [
            (
                "canonical_schema",
                &old.canonical_schema,
                &new.canonical_schema,
            ),
            ("hash", &old.hash, &new.hash),
            ("schema_hash", &old.schema_hash, &new.schema_hash),
        ] {
            if a != b {
                out.push(format!("tool {name}.{field}:\n  file {a}\n  code {b}"));
            }
        }
    }
    out
}

/// Write atomically, so a test reading the file concurrently never sees half
/// of it.
fn write_golden(text: &str) {
    let path = golden_path();
    let temporary = path.with_extension("json.tmp");
    std::fs::write(&temporary, text).expect("write the regenerated golden file");
    std::fs::rename(&temporary, &path).expect("replace the golden file");
}

#[test]
fn golden_vectors_match_the_encoding() {
    let text = read_golden_text();
    let committed: GoldenFile = serde_json::from_str(&text).expect("golden file parses");
    let current = regenerate(&committed);
    let rendered = render(&current);
    if rendered == text {
        return;
    }
    if std::env::var_os(UPDATE_ENV).is_some_and(|v| v == "1") {
        write_golden(&rendered);
        eprintln!(
            "{UPDATE_ENV}=1: rewrote {}; review the diff, and update the worked example in \
             docs/canonical-encoding.md if the root vector changed",
            golden_path().display()
        );
        return;
    }
    let diffs = differences(&committed, &current);
    panic!(
        "the canonical encoding no longer produces the golden values in {}.\n\
         Changing the encoding is a breaking change: bump ENCODING_VERSION and ship a migration.\n\
         If the change is deliberate, regenerate with `{UPDATE_ENV}=1 cargo test -p skein-core \
         --test encoding` and review the diff.\n\n{}",
        golden_path().display(),
        if diffs.is_empty() {
            "(the values agree; only the file's layout differs from its canonical rendering)"
                .to_string()
        } else {
            diffs.join("\n")
        }
    );
}

/// The golden file keeps covering what the encoding must get right, so a
/// later edit cannot quietly drop a case.
#[test]
fn golden_vectors_cover_every_kind_of_content() {
    let golden = load_golden();
    let vectors = &golden.vectors;
    let parts = || vectors.iter().flat_map(|v| v.parts.iter());
    assert!(vectors.iter().any(|v| v.parent.is_none()), "a root node");
    assert!(vectors.iter().any(|v| v.parent.is_some()), "a child node");
    for role in [Role::System, Role::User, Role::Assistant, Role::Tool] {
        assert!(vectors.iter().any(|v| v.role == role), "role {role}");
    }
    assert!(vectors.iter().any(|v| v.parts.is_empty()), "no parts");
    assert!(
        parts().any(|p| matches!(p, Part::ToolCall(call)
            if serde_json::from_str::<Value>(&call.arguments)
                .and_then(|v| serde_json::to_string(&v))
                .is_ok_and(|compact| compact != call.arguments))),
        "tool-call arguments that are valid but not canonical JSON"
    );
    assert!(parts().any(|p| matches!(p, Part::ToolResult(r) if r.is_error)));
    assert!(parts().any(|p| matches!(p, Part::ToolResult(r) if !r.is_error)));
    assert!(
        parts().any(|p| matches!(p, Part::Attachment(a) if std::str::from_utf8(&a.data).is_err())),
        "an attachment that is not UTF-8"
    );
    assert!(
        parts().any(|p| p.as_text().is_some_and(|t| !t.is_ascii())),
        "non-ASCII text"
    );
    assert!(
        parts().any(|p| p.payload().len() == 5000),
        "a 5000-byte payload (above the store's blob threshold)"
    );
    let pinned = |pred: &dyn Fn(&Vector) -> bool| vectors.iter().filter(|v| pred(v)).count();
    assert!(pinned(&|v| v.preimage.is_some()) >= 2, "pinned preimages");
    assert!(pinned(&|v| v.bodies.contains_key("0")) >= 1);
    assert!(pinned(&|v| v.bodies.contains_key("max")) >= 1);
    assert!(
        vectors.iter().any(|v| v.bodies.contains_key("4096")
            && v.parts.iter().any(|p| p.payload().len() >= STORE_THRESHOLD)),
        "a pinned body that references a blob at the store's threshold"
    );
    assert!(!golden.tool_specs.is_empty());
}

#[test]
fn ids_are_the_blake3_hash_of_the_preimage() {
    for (parent, message) in resolve_vectors(&load_golden()) {
        let preimage = id_preimage(parent.as_ref(), &message);
        assert_eq!(
            NodeId(*blake3::hash(&preimage).as_bytes()),
            node_id(parent.as_ref(), &message)
        );
    }
}

// ---------------------------------------------------------------------------
// A reference encoder written from docs/canonical-encoding.md
// ---------------------------------------------------------------------------

fn reference_role_code(role: Role) -> u8 {
    match role {
        Role::System => 0,
        Role::User => 1,
        Role::Assistant => 2,
        Role::Tool => 3,
    }
}

fn reference_field(out: &mut Vec<u8>, field: &str) {
    out.extend_from_slice(&u32::try_from(field.len()).unwrap().to_le_bytes());
    out.extend_from_slice(field.as_bytes());
}

/// Kind code, small fields, payload bytes.
fn reference_part(part: &Part) -> (u8, Vec<u8>, &[u8]) {
    let mut small = Vec::new();
    match part {
        Part::Text { text } => (1, small, text.as_bytes()),
        Part::ToolCall(call) => {
            reference_field(&mut small, &call.id);
            reference_field(&mut small, &call.name);
            (2, small, call.arguments.as_bytes())
        }
        Part::ToolResult(result) => {
            reference_field(&mut small, &result.call_id);
            small.push(u8::from(result.is_error));
            (3, small, result.content.as_bytes())
        }
        Part::Attachment(attachment) => {
            reference_field(&mut small, &attachment.media_type);
            (4, small, &attachment.data)
        }
        other => panic!(
            "part kind {} is not in encoding version 1",
            other.kind_name()
        ),
    }
}

fn reference_preimage(parent: Option<&NodeId>, message: &Message) -> Vec<u8> {
    let mut out = b"skein/node".to_vec();
    out.push(1);
    match parent {
        None => out.push(0),
        Some(id) => {
            out.push(1);
            out.extend_from_slice(id.as_bytes());
        }
    }
    out.push(reference_role_code(message.role));
    out.extend_from_slice(&u32::try_from(message.parts.len()).unwrap().to_le_bytes());
    for part in &message.parts {
        let (kind, small, payload) = reference_part(part);
        out.push(kind);
        out.extend_from_slice(&small);
        out.extend_from_slice(blake3::hash(payload).as_bytes());
    }
    out
}

fn reference_body(message: &Message, threshold: usize) -> Vec<u8> {
    let mut out = vec![1, reference_role_code(message.role)];
    out.extend_from_slice(&u32::try_from(message.parts.len()).unwrap().to_le_bytes());
    for part in &message.parts {
        let (kind, small, payload) = reference_part(part);
        out.push(kind);
        out.extend_from_slice(&small);
        let len = (payload.len() as u64).to_le_bytes();
        if payload.len() >= threshold {
            out.push(1);
            out.extend_from_slice(&len);
            out.extend_from_slice(blake3::hash(payload).as_bytes());
        } else {
            out.push(0);
            out.extend_from_slice(&len);
            out.extend_from_slice(payload);
        }
    }
    out
}

#[test]
fn the_specification_describes_the_implementation() {
    assert_eq!(ENCODING_VERSION, 1);
    assert_eq!(NODE_DOMAIN, b"skein/node");
    for (parent, message) in resolve_vectors(&load_golden()) {
        assert_eq!(
            hex(&id_preimage(parent.as_ref(), &message)),
            hex(&reference_preimage(parent.as_ref(), &message)),
            "preimage of {message:?}"
        );
        for threshold in THRESHOLDS {
            assert_eq!(
                hex(&encode_body(&message, threshold).bytes),
                hex(&reference_body(&message, threshold)),
                "body of {message:?} at threshold {threshold}"
            );
        }
    }
}

/// The worked example in the document is the root vector, byte for byte.
#[test]
fn the_worked_example_in_the_docs_is_current() {
    let doc_path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/canonical-encoding.md");
    let doc = std::fs::read_to_string(&doc_path).expect("docs/canonical-encoding.md is readable");
    let golden = load_golden();
    let root = golden
        .vectors
        .iter()
        .find(|v| v.name == "root_system")
        .expect("the root_system vector");
    let (parent, message) = (None, root.message());
    assert_eq!(message, Message::system("You are terse."));
    let preimage = hex(&id_preimage(parent, &message));
    let id = node_id(parent, &message).to_hex();
    assert!(
        doc.contains(&preimage),
        "the doc shows the preimage {preimage}"
    );
    assert!(doc.contains(&id), "the doc shows the id {id}");
    let body = hex(&encode_body(&message, usize::MAX).bytes);
    assert!(doc.contains(&body), "the doc shows the inline body {body}");
    let payload_digest = Digest::of(b"You are terse.").to_hex();
    assert!(
        doc.contains(&payload_digest),
        "the doc shows the payload digest"
    );
}

// ---------------------------------------------------------------------------
// Bodies and blobs
// ---------------------------------------------------------------------------

/// Encode at `threshold`, decode, resolve through an in-memory blob table.
fn round_trip(message: &Message, threshold: usize) -> Message {
    let encoded = encode_body(message, threshold);
    let expected_blobs: Vec<Digest> = message
        .parts
        .iter()
        .filter(|p| p.payload().len() >= threshold)
        .map(|p| Digest::of(p.payload()))
        .collect();
    let blob_digests: Vec<Digest> = encoded.blobs.iter().map(|(d, _)| *d).collect();
    assert_eq!(blob_digests, expected_blobs, "threshold {threshold}");
    for (digest, bytes) in &encoded.blobs {
        assert_eq!(*digest, Digest::of(bytes));
    }
    let table: HashMap<Digest, Vec<u8>> = encoded
        .blobs
        .iter()
        .map(|(d, b)| (*d, b.to_vec()))
        .collect();
    let decoded = decode_body(&encoded.bytes).expect("a body we wrote decodes");
    assert_eq!(decoded.role, message.role);
    assert_eq!(decoded.blob_refs().collect::<Vec<_>>(), expected_blobs);
    decoded
        .resolve(|digest| table.get(digest).cloned())
        .expect("every referenced blob is in the table")
}

#[test]
fn bodies_round_trip_at_every_threshold() {
    for (parent, message) in resolve_vectors(&load_golden()) {
        let id = node_id(parent.as_ref(), &message);
        for threshold in THRESHOLDS {
            let back = round_trip(&message, threshold);
            assert_eq!(back, message, "threshold {threshold}");
            assert_eq!(
                node_id(parent.as_ref(), &back),
                id,
                "the id does not depend on how the body stored the payloads"
            );
        }
    }
}

#[test]
fn node_id_is_independent_of_the_blob_threshold() {
    let vectors = resolve_vectors(&load_golden());
    let (parent, message) = vectors
        .iter()
        .find(|(_, m)| m.parts.iter().any(|p| p.payload().len() == 5000))
        .expect("the 5000-byte vector");
    let inline = encode_body(message, usize::MAX);
    let stored = encode_body(message, STORE_THRESHOLD);
    assert!(inline.blobs.is_empty());
    assert_eq!(stored.blobs.len(), 1, "the store moves the 5000 bytes out");
    assert!(inline.bytes.len() > 5000 && stored.bytes.len() < 100);
    assert_ne!(inline.bytes, stored.bytes, "the bodies differ ...");
    let from_inline = decode_body(&inline.bytes)
        .unwrap()
        .resolve(|_| None)
        .unwrap();
    let from_blob = decode_body(&stored.bytes)
        .unwrap()
        .resolve(|d| (*d == stored.blobs[0].0).then(|| stored.blobs[0].1.to_vec()))
        .unwrap();
    let expected = node_id(parent.as_ref(), message);
    assert_eq!(
        node_id(parent.as_ref(), &from_inline),
        expected,
        "... the id does not"
    );
    assert_eq!(node_id(parent.as_ref(), &from_blob), expected);
    assert_eq!(from_inline, from_blob);
}

/// A payload enters the preimage as its 32-byte digest: the preimage has
/// the same size however large the payload, and a document repeated in
/// several parts (or several nodes) contributes the same 32 bytes each time.
#[test]
fn payloads_enter_the_preimage_by_digest() {
    let document = "0123456789".repeat(500);
    let small = Message::user("x");
    let large = Message::user(document.clone());
    assert_eq!(
        id_preimage(None, &small).len(),
        id_preimage(None, &large).len()
    );
    let digest = *Digest::of(document.as_bytes()).as_bytes();
    let twice = Message::new(
        Role::User,
        vec![Part::text(document.clone()), Part::text(document.clone())],
    );
    let preimage = id_preimage(None, &twice);
    let occurrences = preimage.windows(32).filter(|w| *w == digest).count();
    assert_eq!(occurrences, 2);
    assert!(
        !preimage.windows(10).any(|w| w == b"0123456789"),
        "the payload bytes themselves are not in the preimage"
    );
    // Stored, the repeated document is one blob (referenced twice).
    let encoded = encode_body(&twice, STORE_THRESHOLD);
    assert_eq!(encoded.blobs.len(), 2);
    assert_eq!(encoded.blobs[0].0, encoded.blobs[1].0);
}

// ---------------------------------------------------------------------------
// What the encoding deliberately does not do
// ---------------------------------------------------------------------------

#[test]
fn content_is_hashed_exactly_as_produced() {
    let id = |message: Message| node_id(None, &message);
    // No Unicode normalisation: NFC and NFD spellings are different nodes.
    assert_ne!(
        id(Message::user("caf\u{e9}")),
        id(Message::user("cafe\u{301}"))
    );
    // No trimming.
    assert_ne!(id(Message::user("hi")), id(Message::user("hi ")));
    assert_ne!(id(Message::user("hi")), id(Message::user("hi\n")));
    // No re-serialisation of tool-call arguments.
    let call = |arguments: &str| {
        Message::new(
            Role::Assistant,
            vec![Part::ToolCall(ToolCall {
                id: "c".into(),
                name: "f".into(),
                arguments: arguments.into(),
            })],
        )
    };
    assert_ne!(id(call(r#"{"a":1}"#)), id(call(r#"{ "a": 1 }"#)));
    assert_ne!(id(call(r#"{"a":1,"b":2}"#)), id(call(r#"{"b":2,"a":1}"#)));
    // Part boundaries are content: one part "ab" is not two parts "a", "b".
    assert_ne!(
        id(Message::user("ab")),
        id(Message::new(
            Role::User,
            vec![Part::text("a"), Part::text("b")]
        ))
    );
    // The kind is content: the same bytes as text and as an attachment differ.
    assert_ne!(
        id(Message::user("x")),
        id(Message::new(
            Role::User,
            vec![Part::Attachment(Attachment {
                media_type: String::new(),
                data: b"x".to_vec(),
            })]
        ))
    );
    // Small fields cannot run into each other: ("ab", "c") is not ("a", "bc").
    let named = |id: &str, name: &str| {
        Message::new(
            Role::Assistant,
            vec![Part::ToolCall(ToolCall {
                id: id.into(),
                name: name.into(),
                arguments: String::new(),
            })],
        )
    };
    assert_ne!(
        node_id(None, &named("ab", "c")),
        node_id(None, &named("a", "bc"))
    );
    // A root is not a child of the all-zero id.
    let message = Message::system("s");
    assert_ne!(
        node_id(None, &message),
        node_id(Some(&NodeId([0; 32])), &message)
    );
    // The error flag is content.
    let result = |is_error| {
        Message::tool_results([ToolResult {
            call_id: "c".into(),
            content: "boom".into(),
            is_error,
        }])
    };
    assert_ne!(id(result(true)), id(result(false)));
}

// ---------------------------------------------------------------------------
// The decoder's contract on malformed bodies
// ---------------------------------------------------------------------------

#[test]
fn malformed_bodies_are_rejected_with_the_matching_error() {
    let text_part = |payload: &[u8]| {
        let mut out = vec![1, 1, 1, 0, 0, 0, 1, 0];
        out.extend_from_slice(&(payload.len() as u64).to_le_bytes());
        out.extend_from_slice(payload);
        out
    };
    assert_eq!(
        hex(&text_part(b"hi")),
        hex(&encode_body(&Message::user("hi"), usize::MAX).bytes)
    );
    let decode = |bytes: &[u8]| decode_body(bytes).map(|_| ());

    assert!(matches!(
        decode(&[]),
        Err(DecodeError::UnexpectedEnd { .. })
    ));
    assert_eq!(
        decode(&[0, 1, 0, 0, 0, 0]),
        Err(DecodeError::UnsupportedVersion(0))
    );
    assert_eq!(
        decode(&[2, 1, 0, 0, 0, 0]),
        Err(DecodeError::UnsupportedVersion(2))
    );
    assert_eq!(
        decode(&[1, 4, 0, 0, 0, 0]),
        Err(DecodeError::UnknownRole(4))
    );
    assert_eq!(decode(&[1, 1, 0, 0, 0, 0]), Ok(()), "no parts is valid");
    assert_eq!(
        decode(&[1, 1, 1, 0, 0, 0, 0]),
        Err(DecodeError::UnknownPartKind(0))
    );
    assert_eq!(
        decode(&[1, 1, 1, 0, 0, 0, 5]),
        Err(DecodeError::UnknownPartKind(5))
    );

    let mut bad_tag = text_part(b"hi");
    bad_tag[7] = 3;
    assert_eq!(decode(&bad_tag), Err(DecodeError::UnknownPayloadTag(3)));
    // Tag 2 is an erased payload, whose digest and note must follow whole.
    bad_tag[7] = 2;
    assert!(matches!(
        decode(&bad_tag),
        Err(DecodeError::UnexpectedEnd { .. })
    ));

    assert_eq!(
        decode_body(&text_part(b"\xff")).unwrap().resolve(|_| None),
        Err(DecodeError::InvalidUtf8("text"))
    );

    let mut trailing = text_part(b"hi");
    trailing.extend_from_slice(b"??");
    assert_eq!(decode(&trailing), Err(DecodeError::TrailingBytes(2)));

    let mut too_long = text_part(b"hi");
    too_long[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
    assert!(matches!(
        decode(&too_long),
        Err(DecodeError::UnexpectedEnd { .. })
    ));

    // A tool result whose error flag is neither 0 nor 1.
    let result = Message::tool_results([ToolResult {
        call_id: "c".into(),
        content: "ok".into(),
        is_error: true,
    }]);
    let mut bytes = encode_body(&result, usize::MAX).bytes;
    let flag = 1 + 1 + 4 + 1 + 4 + 1; // version, role, count, kind, length, "c"
    assert_eq!(bytes[flag], 1);
    bytes[flag] = 2;
    assert_eq!(decode(&bytes), Err(DecodeError::InvalidBool(2)));
}

// ---------------------------------------------------------------------------
// Tool specs
// ---------------------------------------------------------------------------

/// The spec hash is the documented construction, computed here by hand.
#[test]
fn tool_spec_hashes_follow_the_documented_construction() {
    for tool in load_golden().tool_specs {
        let spec = tool.spec();
        let canonical = canonical_json_string(&spec.input_schema);
        let mut preimage = b"skein/tool\x01".to_vec();
        preimage.extend_from_slice(Value::String(spec.name.clone()).to_string().as_bytes());
        preimage.push(1);
        preimage.extend_from_slice(
            Value::String(spec.description.clone())
                .to_string()
                .as_bytes(),
        );
        preimage.push(1);
        preimage.extend_from_slice(canonical.as_bytes());
        assert_eq!(spec.hash(), Digest::of(&preimage), "tool {}", tool.name);
        assert_eq!(spec.schema_hash(), Digest::of(canonical.as_bytes()));
        // Layout of the schema text does not matter; its values do.
        let compact: Value = serde_json::from_str(&canonical).unwrap();
        assert_eq!(
            ToolSpec::new(&spec.name, &spec.description, compact).hash(),
            spec.hash()
        );
    }
}

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        out.push(DIGITS[usize::from(byte >> 4)] as char);
        out.push(DIGITS[usize::from(byte & 0xf)] as char);
    }
    out
}
