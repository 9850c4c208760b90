/*!
A request body's skeleton: the body with each message text the graph holds
replaced by a reference to its node (DESIGN invariant 13).

A client of the recording proxy sends its messages' texts inside its
request body, as JSON strings; the same texts are the nodes of the turn's
input thread. The skeleton keeps the body's bytes except each span that
is exactly a JSON string's contents and exactly the encoding of a text one
of those nodes holds: that span becomes the byte `0xFF` followed by a
[`Ref`] (how the text was escaped, which part of which node, the span's
length). UTF-8 never contains `0xFF`, so a body stored before references
existed is a skeleton with none and reads back unchanged.

A span is only replaced when re-encoding the node's text gives exactly its
bytes, so expanding a skeleton gives the body back byte for byte; a text
no escaping here reproduces (or shorter than [`MIN_REFERENCED`]) stays in
the skeleton as it was sent. Erasing the node erases the text everywhere
its references point: the expanded body names that span as erased.
*/

use skein_core::{Message, NodeId, Part};
use std::borrow::Cow;
use std::collections::HashMap;

/// The byte that starts a reference (never part of UTF-8).
const MARK: u8 = 0xFF;

/// A reference's bytes after [`MARK`]: style, part, length, node id.
const REF_BYTES: usize = 1 + 2 + 4 + 32;

/// Spans shorter than this stay literal: a reference costs 40 bytes.
pub(crate) const MIN_REFERENCED: usize = 64;

/// How a client escaped a text into a JSON string.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Style {
    /// Only what JSON requires (`"`, `\`, control characters; `\n`-style
    /// short escapes, `\u00xx` for the rest): serde_json, JavaScript's
    /// `JSON.stringify`, Python's `json.dumps(ensure_ascii=False)`.
    Minimal,
    /// As [`Style::Minimal`], and every character outside printable ASCII
    /// as `\uxxxx` (UTF-16, lower-case hex): Python's default `json.dumps`.
    Ascii,
}

const STYLES: [Style; 2] = [Style::Minimal, Style::Ascii];

fn other(style: Style) -> Style {
    match style {
        Style::Minimal => Style::Ascii,
        Style::Ascii => Style::Minimal,
    }
}

impl Style {
    fn code(self) -> u8 {
        match self {
            Style::Minimal => 0,
            Style::Ascii => 1,
        }
    }

    fn from_code(code: u8) -> Option<Style> {
        STYLES.into_iter().find(|style| style.code() == code)
    }
}

/// Where a span of the body comes from: the text of part `part` of node
/// `node`, escaped in `style`, `len` bytes long once escaped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Ref {
    pub node: NodeId,
    pub part: u16,
    pub style: Style,
    pub len: usize,
}

/// A skeleton read back: literal bytes and references, in body order.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Segment<'s> {
    Bytes(&'s [u8]),
    Ref(Ref),
}

/// The text a message's part contributes to a request body, if any: a
/// text, a tool call's raw arguments, a tool result.
pub(crate) fn referable(part: &Part) -> Option<&str> {
    match part {
        Part::Text { text } => Some(text),
        Part::ToolCall(call) => Some(&call.arguments),
        Part::ToolResult(result) => Some(&result.content),
        _ => None,
    }
}

/// `text` as the contents of a JSON string escaped in `style`, appended to
/// `out`. Runs of bytes that need no escape are found eight at a time and
/// copied whole: a proxied request escapes every text it re-sends.
pub(crate) fn encode(text: &str, style: Style, out: &mut Vec<u8>) {
    let bytes = text.as_bytes();
    let mut at = 0;
    while at < bytes.len() {
        let end = at + plain_prefix(&bytes[at..], style);
        out.extend_from_slice(&bytes[at..end]);
        let Some(ch) = text[end..].chars().next() else {
            break;
        };
        escape(ch, out);
        at = end + ch.len_utf8();
    }
}

/// Whether `byte` goes into a JSON string as itself in `style`.
fn plain(byte: u8, style: Style) -> bool {
    match style {
        Style::Minimal => byte >= b' ' && byte != b'"' && byte != b'\\',
        Style::Ascii => (b' '..=b'~').contains(&byte) && byte != b'"' && byte != b'\\',
    }
}

/// How many of `bytes`' first bytes go into a JSON string as themselves.
fn plain_prefix(bytes: &[u8], style: Style) -> usize {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    // Whether some byte of `word` is below `n` (exact for n <= 128).
    let below = |word: u64, n: u8| word.wrapping_sub(ONES * u64::from(n)) & !word & HIGH != 0;
    let has = |word: u64, byte: u8| below(word ^ (ONES * u64::from(byte)), 1);
    let mut at = 0;
    while let Some(chunk) = bytes.get(at..at + 8) {
        let word = u64::from_le_bytes(chunk.try_into().expect("eight bytes"));
        let special = below(word, b' ')
            || has(word, b'"')
            || has(word, b'\\')
            || (style == Style::Ascii && (word & HIGH != 0 || has(word, 0x7f)));
        if special {
            break;
        }
        at += 8;
    }
    at + bytes[at..]
        .iter()
        .position(|&byte| !plain(byte, style))
        .unwrap_or(bytes.len() - at)
}

/// One character JSON-escaped: a short escape where JSON has one, else
/// `\uxxxx` (UTF-16, lower-case hex).
fn escape(ch: char, out: &mut Vec<u8>) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let short: &[u8] = match ch {
        '"' => b"\\\"",
        '\\' => b"\\\\",
        '\n' => b"\\n",
        '\r' => b"\\r",
        '\t' => b"\\t",
        '\u{8}' => b"\\b",
        '\u{c}' => b"\\f",
        _ => b"",
    };
    if !short.is_empty() {
        out.extend_from_slice(short);
        return;
    }
    let mut units = [0u16; 2];
    for &unit in ch.encode_utf16(&mut units).iter() {
        out.extend_from_slice(b"\\u");
        for shift in [12, 8, 4, 0] {
            out.push(HEX[usize::from((unit >> shift) & 0xF)]);
        }
    }
}

/// A body's skeleton, and the points where the skeleton of a body that
/// begins with the same bytes may be taken up ([`Resume`]).
pub(crate) struct Skeleton<'b> {
    pub bytes: Cow<'b, [u8]>,
    pub resumes: Vec<Resume>,
}

/// A point just after a referenced string's closing quote (outside every
/// string) where a skeleton can be continued: everything before `body` in
/// the body is `skeleton`'s bytes before it, refers only to the messages
/// before `messages` (in thread order), and no later message is referred
/// to before it; `styles` is the escaping order the messages before it
/// left. A body whose first `body` bytes are these, sent with the same
/// messages first, has the same skeleton up to here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Resume {
    pub body: usize,
    pub skeleton: usize,
    pub messages: usize,
    styles: [Style; 2],
}

impl Resume {
    /// The start of every body.
    pub(crate) const START: Resume = Resume {
        body: 0,
        skeleton: 0,
        messages: 0,
        styles: STYLES,
    };
}

/// `body`'s skeleton given the messages of the run's input thread (root
/// first, as a client sends them): each
/// string whose contents are one of their texts, escaped as a client
/// escapes, becomes a reference. With no such string, the body's bytes.
pub(crate) fn of<'b>(body: &'b [u8], messages: &[(NodeId, &Message)]) -> Skeleton<'b> {
    resumed(body, messages, &[], Resume::START)
}

/// [`of`] taken up at `from`, one of the [`Skeleton::resumes`] of an
/// earlier body whose skeleton began with `prefix` (its bytes before
/// `from.skeleton`) and whose first `from.body` bytes are `body`'s: only
/// the bytes after it are searched, for `messages`, the input thread's
/// messages from the one at index `from.messages` on.
pub(crate) fn resumed<'b>(
    body: &'b [u8],
    messages: &[(NodeId, &Message)],
    prefix: &[u8],
    from: Resume,
) -> Skeleton<'b> {
    let mut strings = long_strings(body, from.body);
    // Each reference's place, and which message it names.
    let mut spans: Vec<(usize, Ref, usize)> = Vec::new();
    // The escaping order after each message (for the resumes).
    let mut styles_after: Vec<[Style; 2]> = Vec::with_capacity(messages.len());
    let mut styles = from.styles;
    for (index, (node, message)) in (from.messages..).zip(messages) {
        if !strings.is_empty() {
            for (part, text) in message.parts.iter().enumerate() {
                // No escaping makes a character more than six bytes long.
                let Some(text) = referable(text).filter(|text| text.len() >= MIN_REFERENCED / 6)
                else {
                    continue;
                };
                let Ok(part) = u16::try_from(part) else { break };
                if let Some((at, style, len)) = find(&mut strings, body, text, &mut styles) {
                    let reference = Ref {
                        node: *node,
                        part,
                        style,
                        len,
                    };
                    spans.push((at, reference, index));
                }
            }
        }
        styles_after.push(styles);
    }
    if spans.is_empty() && prefix.is_empty() && from.body == 0 {
        return Skeleton {
            bytes: Cow::Borrowed(body),
            resumes: Vec::new(),
        };
    }
    spans.sort_by_key(|(at, _, _)| *at);
    // A resume after span j needs every later span to name a message after
    // every one named so far.
    let mut first_later = vec![usize::MAX; spans.len() + 1];
    for (j, (_, _, index)) in spans.iter().enumerate().rev() {
        first_later[j] = first_later[j + 1].min(*index);
    }
    let mut skeleton = Vec::with_capacity(prefix.len() + (body.len() - from.body) / 4);
    skeleton.extend_from_slice(prefix);
    let mut resumes = Vec::new();
    let mut copied = from.body;
    let mut named_most = from.messages;
    for (j, (at, reference, index)) in spans.into_iter().enumerate() {
        skeleton.extend_from_slice(&body[copied..at]);
        skeleton.push(MARK);
        skeleton.push(reference.style.code());
        skeleton.extend_from_slice(&reference.part.to_le_bytes());
        skeleton.extend_from_slice(&(reference.len as u32).to_le_bytes());
        skeleton.extend_from_slice(reference.node.as_bytes());
        copied = at + reference.len;
        named_most = named_most.max(index);
        if first_later[j + 1] > named_most {
            resumes.push(Resume {
                body: copied + 1,
                skeleton: skeleton.len() + 1,
                messages: named_most + 1,
                styles: styles_after[named_most - from.messages],
            });
        }
    }
    skeleton.extend_from_slice(&body[copied..]);
    Skeleton {
        bytes: Cow::Owned(skeleton),
        resumes,
    }
}

/// Where `text` is one of `strings` (taking it), escaped in which style
/// and how long: a text that needs no escape is looked up as it is (most
/// are: found by a comparison, never escaped); another is escaped in each
/// style, the one that matched last first (a client escapes alike).
fn find(
    strings: &mut Strings,
    body: &[u8],
    text: &str,
    styles: &mut [Style; 2],
) -> Option<(usize, Style, usize)> {
    let bytes = text.as_bytes();
    let plain = memchr::memchr2(b'"', b'\\', bytes).is_none()
        && !bytes
            .iter()
            .fold(false, |control, &byte| control | (byte < b' '));
    if plain && let Some(at) = strings.take(body, bytes) {
        return Some((at, Style::Minimal, bytes.len()));
    }
    // An ASCII text without DEL escapes alike in both styles.
    let alike = text.is_ascii() && !bytes.contains(&0x7f);
    if plain && alike {
        return None;
    }
    let mut encoded = Vec::with_capacity(bytes.len() + bytes.len() / 8);
    for style in *styles {
        if (plain && style == Style::Minimal) || (alike && style == Style::Ascii) {
            continue;
        }
        encoded.clear();
        encode(text, style, &mut encoded);
        if let Some(at) = strings.take(body, &encoded) {
            *styles = [style, other(style)];
            return Some((at, style, encoded.len()));
        }
    }
    None
}

/// The JSON strings of a body at least [`MIN_REFERENCED`] bytes long, in
/// body order. A client sends its messages in thread order, so the text
/// looked for next is nearly always among the next few strings: those are
/// compared first, and only a text not found there is looked up by a key
/// (its length and first and last bytes, the index built when first
/// needed).
#[derive(Default)]
struct Strings {
    /// Where each string's contents start, and their length.
    spans: Vec<(usize, usize)>,
    taken: Vec<bool>,
    /// The string after the last one taken in order.
    next: usize,
    by_key: Option<HashMap<Key, Vec<usize>>>,
}

/// Strings compared in order before the index is consulted.
const AHEAD: usize = 8;

type Key = (usize, [u8; 16], [u8; 16]);

fn key(contents: &[u8]) -> Key {
    let mut first = [0u8; 16];
    let mut last = [0u8; 16];
    first.copy_from_slice(&contents[..16]);
    last.copy_from_slice(&contents[contents.len() - 16..]);
    (contents.len(), first, last)
}

impl Strings {
    /// Where a string whose contents are `contents` starts, taken so that
    /// no other text claims it.
    fn take(&mut self, body: &[u8], contents: &[u8]) -> Option<usize> {
        if contents.len() < MIN_REFERENCED {
            return None;
        }
        let holds = |&(start, len): &(usize, usize)| {
            len == contents.len() && &body[start..start + len] == contents
        };
        let ahead = self.next..(self.next + AHEAD).min(self.spans.len());
        let found = ahead
            .into_iter()
            .find(|&index| !self.taken[index] && holds(&self.spans[index]))
            .or_else(|| {
                let spans = &self.spans;
                let by_key = self.by_key.get_or_insert_with(|| {
                    let mut by_key: HashMap<Key, Vec<usize>> = HashMap::new();
                    for (index, &(start, len)) in spans.iter().enumerate() {
                        by_key
                            .entry(key(&body[start..start + len]))
                            .or_default()
                            .push(index);
                    }
                    by_key
                });
                by_key
                    .get(&key(contents))?
                    .iter()
                    .copied()
                    .find(|&index| !self.taken[index] && holds(&spans[index]))
            })?;
        self.taken[found] = true;
        self.next = found + 1;
        Some(self.spans[found].0)
    }

    fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }
}

/// Every JSON string in `body` from `at` (outside any string) on at least
/// [`MIN_REFERENCED`] bytes long, with where its contents start.
fn long_strings(body: &[u8], mut at: usize) -> Strings {
    let mut spans = Vec::new();
    'strings: while let Some(open) = memchr::memchr(b'"', &body[at..]) {
        let start = at + open + 1;
        let mut end = start;
        loop {
            match memchr::memchr2(b'"', b'\\', &body[end..]) {
                Some(found) if body[end + found] == b'\\' => end += found + 2,
                Some(found) => {
                    end += found;
                    break;
                }
                None => break 'strings,
            }
            if end >= body.len() {
                break 'strings;
            }
        }
        if end - start >= MIN_REFERENCED {
            spans.push((start, end - start));
        }
        at = end + 1;
    }
    Strings {
        taken: vec![false; spans.len()],
        spans,
        ..Strings::default()
    }
}

/// `skeleton`'s segments. `whole` says whether it is all there: a
/// skeleton cut short (where erased pieces begin) may end inside a
/// reference, which is then left out; a whole one may not.
pub(crate) fn segments(skeleton: &[u8], whole: bool) -> Result<Vec<Segment<'_>>, String> {
    let mut segments = Vec::new();
    let mut at = 0;
    while at < skeleton.len() {
        let Some(mark) = memchr::memchr(MARK, &skeleton[at..]).map(|found| at + found) else {
            segments.push(Segment::Bytes(&skeleton[at..]));
            break;
        };
        if mark > at {
            segments.push(Segment::Bytes(&skeleton[at..mark]));
        }
        let Some(bytes) = skeleton.get(mark + 1..mark + 1 + REF_BYTES) else {
            if whole {
                return Err(format!("a reference cut short at byte {mark}"));
            }
            break;
        };
        let style = Style::from_code(bytes[0])
            .ok_or_else(|| format!("a reference with unknown escaping {}", bytes[0]))?;
        let part = u16::from_le_bytes([bytes[1], bytes[2]]);
        let len = u32::from_le_bytes([bytes[3], bytes[4], bytes[5], bytes[6]]) as usize;
        let node = NodeId::from_slice(&bytes[7..]).expect("32 bytes");
        segments.push(Segment::Ref(Ref {
            node,
            part,
            style,
            len,
        }));
        at = mark + 1 + REF_BYTES;
    }
    Ok(segments)
}

#[cfg(test)]
mod tests {
    use super::*;
    use skein_core::{Role, ToolCall};

    fn json(text: &str, ascii: bool) -> Vec<u8> {
        // What serde_json (minimal) and Python's default (ASCII) would send,
        // spelled out for the characters that differ.
        let mut out = Vec::new();
        encode(
            text,
            if ascii { Style::Ascii } else { Style::Minimal },
            &mut out,
        );
        out
    }

    #[test]
    fn minimal_escaping_is_serde_jsons() {
        let text = "tab\there \"quoted\" back\\slash \u{1} bell\u{7} é 雪 🎉 del\u{7f} </script>";
        let ours = json(text, false);
        let theirs = serde_json::to_string(text).unwrap();
        assert_eq!(ours, theirs.as_bytes()[1..theirs.len() - 1]);
    }

    #[test]
    fn every_byte_at_every_place_escapes_as_serde_json_and_python_do() {
        // The eight-at-a-time scan must see a special byte wherever it is.
        let specials = [
            '"', '\\', '\n', '\u{1}', '\u{1f}', '\u{7f}', 'é', '雪', '🎉', ' ', '~',
        ];
        for special in specials {
            for place in 0..20 {
                let mut text: String = "abcdefghijklmnopqrst".into();
                text.insert(place, special);
                let minimal = serde_json::to_string(&text).unwrap();
                assert_eq!(json(&text, false), minimal.as_bytes()[1..minimal.len() - 1]);
                let ascii: String = minimal[1..minimal.len() - 1]
                    .chars()
                    .map(|ch| match ch {
                        ch if ch.is_ascii() && ch != '\u{7f}' => ch.to_string(),
                        ch => ch
                            .encode_utf16(&mut [0; 2])
                            .iter()
                            .map(|unit| format!("\\u{unit:04x}"))
                            .collect(),
                    })
                    .collect();
                assert_eq!(
                    String::from_utf8(json(&text, true)).unwrap(),
                    ascii,
                    "{text:?}"
                );
            }
        }
    }

    #[test]
    fn ascii_escaping_is_pythons_default() {
        // json.dumps("é 雪 🎉 \x7f \x01 \n") in Python 3.
        let text = "é 雪 🎉 \u{7f} \u{1} \n";
        assert_eq!(
            String::from_utf8(json(text, true)).unwrap(),
            r"\u00e9 \u96ea \ud83c\udf89 \u007f \u0001 \n"
        );
    }

    fn message(text: &str) -> Message {
        Message::user(text)
    }

    fn expand(skeleton: &[u8], messages: &[(NodeId, &Message)]) -> Vec<u8> {
        let mut body = Vec::new();
        for segment in segments(skeleton, true).unwrap() {
            match segment {
                Segment::Bytes(bytes) => body.extend_from_slice(bytes),
                Segment::Ref(reference) => {
                    let (_, message) = messages
                        .iter()
                        .find(|(id, _)| *id == reference.node)
                        .unwrap();
                    let text = referable(&message.parts[usize::from(reference.part)]).unwrap();
                    encode(text, reference.style, &mut body);
                }
            }
        }
        body
    }

    #[test]
    fn texts_become_references_and_expand_to_the_same_bytes() {
        let long = "a long message with \"quotes\", a newline\nand ünïcödé, repeated. ".repeat(3);
        let call = Message {
            role: Role::Assistant,
            parts: vec![Part::ToolCall(ToolCall {
                id: "call_1".into(),
                name: "weather".into(),
                arguments:
                    r#"{"city": "Paris", "when": "tomorrow morning, early, before the rain"}"#
                        .into(),
            })],
        };
        let first = message(&long);
        let second = message(&format!("{long} (again)"));
        let messages = [
            (NodeId([1; 32]), &first),
            (NodeId([2; 32]), &call),
            (NodeId([3; 32]), &second),
        ];
        for ascii in [false, true] {
            let body = serde_json::json!({
                "model": "m",
                "messages": [
                    {"role": "user", "content": long},
                    {"role": "assistant", "tool_calls": [{"id": "call_1", "type": "function",
                        "function": {"name": "weather", "arguments": call.parts.iter().find_map(referable).unwrap()}}]},
                    {"role": "user", "content": format!("{long} (again)")},
                    {"role": "user", "content": "short"},
                ],
            });
            let body = if ascii {
                // Python's default separators and escaping.
                let mut out = Vec::new();
                python_dumps(&body, &mut out);
                out
            } else {
                serde_json::to_vec(&body).unwrap()
            };
            let skeleton = of(&body, &messages).bytes;
            let references = segments(&skeleton, true)
                .unwrap()
                .into_iter()
                .filter(|segment| matches!(segment, Segment::Ref(_)))
                .count();
            assert_eq!(references, 3, "ascii {ascii}");
            assert!(
                skeleton.len() < body.len() / 2,
                "{} of {}",
                skeleton.len(),
                body.len()
            );
            assert_eq!(expand(&skeleton, &messages), body, "ascii {ascii}");
        }
    }

    #[test]
    fn a_text_inside_a_longer_string_or_escaped_otherwise_stays_literal() {
        let text = "x".repeat(100);
        let held = message(&text);
        let messages = [(NodeId([1; 32]), &held)];
        let body = format!(
            r#"{{"content":"prefix {text}","other":"{}"}}"#,
            text.replace('x', "\\u0078")
        );
        assert_eq!(of(body.as_bytes(), &messages).bytes, body.as_bytes());
    }

    #[test]
    fn a_skeleton_cut_short_inside_a_reference_keeps_what_precedes_it() {
        let text = "y".repeat(100);
        let held = message(&text);
        let messages = [(NodeId([1; 32]), &held)];
        let body = format!(r#"{{"content":"{text}"}}"#);
        let skeleton = of(body.as_bytes(), &messages).bytes;
        let cut = &skeleton[..15];
        assert!(segments(cut, true).is_err());
        assert_eq!(
            segments(cut, false).unwrap(),
            vec![Segment::Bytes(br#"{"content":""#)]
        );
    }

    /// Python's `json.dumps` with its defaults: `", "` and `": "` between
    /// items, ASCII escaping.
    fn python_dumps(value: &serde_json::Value, out: &mut Vec<u8>) {
        match value {
            serde_json::Value::String(text) => {
                out.push(b'"');
                encode(text, Style::Ascii, out);
                out.push(b'"');
            }
            serde_json::Value::Array(items) => {
                out.push(b'[');
                for (index, item) in items.iter().enumerate() {
                    if index > 0 {
                        out.extend_from_slice(b", ");
                    }
                    python_dumps(item, out);
                }
                out.push(b']');
            }
            serde_json::Value::Object(fields) => {
                out.push(b'{');
                for (index, (key, item)) in fields.iter().enumerate() {
                    if index > 0 {
                        out.extend_from_slice(b", ");
                    }
                    python_dumps(&serde_json::Value::String(key.clone()), out);
                    out.extend_from_slice(b": ");
                    python_dumps(item, out);
                }
                out.push(b'}');
            }
            other => out.extend_from_slice(other.to_string().as_bytes()),
        }
    }
}
