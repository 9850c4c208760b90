/*!
A re-sent body read from where it differs: a chat completions client
sends its whole history with every request, so a request's body begins
with the bytes of the body that made a thread the proxy keeps ([`super::threads`]),
up to the end of its last message. Such a request's earlier messages are
that thread's, byte for byte: only what follows them is parsed, mapped and
checked, and the kept thread stands for the rest (no message of the
history is parsed, allocated, compared or hashed again).

The rest is read as a body of its own: the kept body's bytes up to its
message array's `[` (the fields before `messages`, equal in both), then the
new body from its first new message on. What that yields is the tail of
what reading the whole body yields, with two exceptions the caller guards
against: a refusal names the wrong index (so any refusal is re-read whole,
to name the right one), and a tool message right after a kept tool
message would have merged with it (so that request is read whole too).

Only chat completions requests are read so: their `messages` array is
the whole history. A Messages request's `system` and a Responses
request's `instructions` and grouped items put messages outside the array
or merge items across it; they are read whole.
*/

use serde::Deserialize;
use serde_json::value::RawValue;
use skein::core::Annotation;
use std::sync::Arc;

/// The body a kept thread was read from.
#[derive(Clone, Debug)]
pub struct ReadFrom {
    pub body: Arc<str>,
    /// Where its message array's items begin: just after the `[`.
    pub open: usize,
    /// Where its last message ends.
    pub end: usize,
    /// How many of the thread's messages the body's messages are (the
    /// rest is the reply).
    pub messages: usize,
    /// The request's annotations (message index, part index, annotation).
    pub annotations: Vec<(usize, u32, Annotation)>,
}

/// The top level of a chat completions body, its messages left unparsed.
#[derive(Deserialize)]
struct Shallow<'a> {
    #[serde(borrow)]
    messages: Vec<&'a RawValue>,
}

/// Where `body`'s message array opens (just after its `[`) and where its
/// last message ends; `None` when it has none, or is no object with one
/// `messages` array.
pub fn bounds(body: &str) -> Option<(usize, usize)> {
    let shallow: Shallow<'_> = serde_json::from_str(body).ok()?;
    let offset = |raw: &RawValue| raw.get().as_ptr() as usize - body.as_ptr() as usize;
    let first = offset(shallow.messages.first()?);
    let last = shallow.messages.last()?;
    let open = body[..first].rfind('[')? + 1;
    Some((open, offset(last) + last.get().len()))
}

impl ReadFrom {
    /// Whether `body` re-sends this body's messages and adds to them: its
    /// bytes are this body's up to the end of its last message, then a
    /// comma. The new messages' first byte then.
    pub fn continued_in(&self, body: &str) -> Option<usize> {
        let from = self.ends_like(body).then(|| self.after_end(body))??;
        (body.as_bytes()[..self.end] == self.body.as_bytes()[..self.end]).then_some(from)
    }

    /// What [`ReadFrom::continued_in`] checks first, in constant time: the
    /// last bytes of this body's messages stand in `body` too, then a comma
    /// (a body of another conversation differs there, long before its
    /// first difference from the start).
    pub fn ends_like(&self, body: &str) -> bool {
        let (kept, sent) = (self.body.as_bytes(), body.as_bytes());
        let last = self.end.saturating_sub(64);
        sent.len() > self.end
            && sent[last..self.end] == kept[last..self.end]
            && self.after_end(body).is_some()
    }

    /// Where `body`'s messages after this body's begin: past the comma
    /// after this body's end (only white space between).
    fn after_end(&self, body: &str) -> Option<usize> {
        let rest = &body.as_bytes()[self.end..];
        let comma = rest.iter().position(|byte| !byte.is_ascii_whitespace())?;
        (rest[comma] == b',').then_some(self.end + comma + 1)
    }

    /// The body whose messages are `body`'s from `from` on (what
    /// [`ReadFrom::continued_in`] found), with this body's fields before
    /// its messages.
    pub fn rest(&self, body: &str, from: usize) -> String {
        let mut rest = String::with_capacity(self.open + body.len() - from);
        rest.push_str(&self.body[..self.open]);
        rest.push_str(&body[from..]);
        rest
    }

    /// What a body read from `from` on (through [`ReadFrom::rest`]) is
    /// kept as: where its last message ends in the whole body, and its
    /// messages and annotations after this body's.
    pub fn continued(
        &self,
        body: Arc<str>,
        from: usize,
        rest: &str,
        messages: usize,
        annotations: &[(usize, u32, Annotation)],
    ) -> Option<ReadFrom> {
        let (_, end) = bounds(rest)?;
        Some(ReadFrom {
            open: self.open,
            end: end - self.open + from,
            messages: self.messages + messages,
            annotations: self
                .annotations
                .iter()
                .cloned()
                .chain(
                    annotations
                        .iter()
                        .map(|(at, part, hint)| (at + self.messages, *part, hint.clone())),
                )
                .collect(),
            body,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_from(body: &str, messages: usize) -> ReadFrom {
        let (open, end) = bounds(body).unwrap();
        ReadFrom {
            body: body.into(),
            open,
            end,
            messages,
            annotations: Vec::new(),
        }
    }

    #[test]
    fn the_bounds_are_those_of_the_message_array_wherever_it_stands() {
        let body = r#"{"model":"m", "messages" : [ {"role":"user","content":"a]"} ,{"role":"user","content":"b"} ], "stream":true}"#;
        let (open, end) = bounds(body).unwrap();
        assert_eq!(&body[..open], r#"{"model":"m", "messages" : ["#);
        assert_eq!(&body[end..], r#" ], "stream":true}"#);
        assert_eq!(bounds(r#"{"messages":[]}"#), None);
        assert_eq!(bounds(r#"{"messages":"x"}"#), None);
        assert_eq!(bounds("[1]"), None);
    }

    /// What is parsed of a re-sent body is its fields and new messages,
    /// the same at depth 10 and 1,000.
    #[test]
    fn what_is_read_of_a_resent_body_is_the_same_at_any_depth() {
        let body = |messages: usize| {
            let messages: Vec<serde_json::Value> = (0..messages)
                .map(|i| serde_json::json!({"role": "user", "content": format!("message {i}")}))
                .collect();
            serde_json::json!({"model": "m", "messages": messages, "stream": true}).to_string()
        };
        let rest = |depth: usize| {
            let kept = read_from(&body(depth), depth);
            let next = body(depth + 2);
            let from = kept.continued_in(&next).unwrap();
            kept.rest(&next, from)
        };
        let (shallow, deep) = (rest(10), rest(1_000));
        assert_eq!(
            shallow.replace("1001", "11").replace("1000", "10"),
            deep.replace("1001", "11").replace("1000", "10")
        );
        assert!(deep.len() < 200, "{deep}");
    }

    #[test]
    fn a_body_continues_one_whose_messages_it_begins_with() {
        let first = r#"{"model":"m","messages":[{"role":"user","content":"a"}]}"#;
        let kept = read_from(first, 1);
        let next = r#"{"model":"m","messages":[{"role":"user","content":"a"}, {"role":"assistant","content":"b"},{"role":"user","content":"c"}],"n":1}"#;
        let from = kept.continued_in(next).unwrap();
        let rest = kept.rest(next, from);
        assert_eq!(
            rest,
            r#"{"model":"m","messages":[ {"role":"assistant","content":"b"},{"role":"user","content":"c"}],"n":1}"#
        );
        let again = kept.continued(next.into(), from, &rest, 2, &[]).unwrap();
        assert_eq!(again.messages, 3);
        assert_eq!(&next[again.end..], r#"],"n":1}"#);
        assert_eq!(again.continued_in(next), None, "nothing added");
        // Another model, a changed message, nothing added, no comma.
        for other in [
            r#"{"model":"x","messages":[{"role":"user","content":"a"},{"role":"user","content":"c"}]}"#,
            r#"{"model":"m","messages":[{"role":"user","content":"A"},{"role":"user","content":"c"}]}"#,
            first,
            r#"{"model":"m","messages":[{"role":"user","content":"a"}]  }"#,
        ] {
            assert_eq!(kept.continued_in(other), None, "{other}");
        }
    }
}
