/*!
An incremental parser of server-sent events (the `text/event-stream` format
both OpenAI and Anthropic stream in).

Bytes are fed as they arrive from the network, cut anywhere: inside a line,
between `\r` and `\n`, inside a UTF-8 character. The parser follows the
WHATWG rules: lines end with `\r\n`, `\n` or `\r`; a line starting with `:`
is a comment; `field: value` drops one space after the colon; `data` lines
accumulate with `\n` between them; a blank line dispatches the event (an
event without data is dropped); `id` and `retry` are ignored. A leading
byte-order mark is skipped.

At the end of the body ([`SseParser::finish`]) a last line without its line
ending is discarded (the connection was cut inside it), but data from
complete lines that lacks only the final blank line is still dispatched, as
some servers end the body right after `data: [DONE]\n`.

The OpenAI end-of-stream sentinel `data: [DONE]` is an ordinary event here;
[`SseEvent::is_done`] recognises it.
*/

use skein_core::ProviderError;

/// The longest line the parser buffers (a guard against a server that
/// never ends a line).
const MAX_LINE: usize = 16 * 1024 * 1024;

/// One dispatched event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field, when present.
    pub event: Option<String>,
    /// The `data:` lines joined with `\n`.
    pub data: String,
}

impl SseEvent {
    /// Whether this is OpenAI's `[DONE]` sentinel.
    pub fn is_done(&self) -> bool {
        self.data.trim() == "[DONE]"
    }
}

/// Turns body bytes into events.
#[derive(Debug, Default)]
pub struct SseParser {
    line: Vec<u8>,
    /// The previous chunk ended with `\r`: a `\n` starting the next one
    /// belongs to that line ending.
    skip_lf: bool,
    started: bool,
    event: Option<String>,
    data: String,
    has_data: bool,
}

impl SseParser {
    pub fn new() -> SseParser {
        SseParser::default()
    }

    /// Feed the next bytes; complete events are appended to `out`.
    pub fn push(&mut self, mut bytes: &[u8], out: &mut Vec<SseEvent>) -> Result<(), ProviderError> {
        if self.skip_lf && !bytes.is_empty() {
            self.skip_lf = false;
            bytes = bytes.strip_prefix(b"\n").unwrap_or(bytes);
        }
        while let Some(end) = bytes.iter().position(|&b| b == b'\n' || b == b'\r') {
            self.line.extend_from_slice(&bytes[..end]);
            let crlf = bytes[end] == b'\r';
            bytes = &bytes[end + 1..];
            if crlf {
                match bytes.first() {
                    Some(b'\n') => bytes = &bytes[1..],
                    Some(_) => {}
                    None => self.skip_lf = true,
                }
            }
            let line = std::mem::take(&mut self.line);
            self.line(&line, out)?;
        }
        self.line.extend_from_slice(bytes);
        if self.line.len() > MAX_LINE {
            return Err(malformed("an event-stream line is longer than 16 MiB"));
        }
        Ok(())
    }

    /// The body ended: dispatch what complete lines left pending.
    pub fn finish(&mut self, out: &mut Vec<SseEvent>) {
        self.line.clear();
        self.dispatch(out);
    }

    fn line(&mut self, line: &[u8], out: &mut Vec<SseEvent>) -> Result<(), ProviderError> {
        let mut line = line;
        if !self.started {
            self.started = true;
            line = line.strip_prefix("\u{feff}".as_bytes()).unwrap_or(line);
        }
        let line = std::str::from_utf8(line)
            .map_err(|_| malformed("the event stream is not valid UTF-8"))?;
        if line.is_empty() {
            self.dispatch(out);
            return Ok(());
        }
        if line.starts_with(':') {
            return Ok(());
        }
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line, ""),
        };
        match field {
            "data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
            }
            "event" => self.event = Some(value.to_owned()),
            _ => {}
        }
        Ok(())
    }

    fn dispatch(&mut self, out: &mut Vec<SseEvent>) {
        let event = self.event.take();
        if self.has_data {
            self.has_data = false;
            out.push(SseEvent {
                event,
                data: std::mem::take(&mut self.data),
            });
        }
    }
}

fn malformed(message: &str) -> ProviderError {
    ProviderError::MalformedResponse {
        message: message.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_chunks(chunks: &[&[u8]]) -> Vec<SseEvent> {
        let mut parser = SseParser::new();
        let mut out = Vec::new();
        for chunk in chunks {
            parser.push(chunk, &mut out).unwrap();
        }
        parser.finish(&mut out);
        out
    }

    fn data(events: &[SseEvent]) -> Vec<&str> {
        events.iter().map(|event| event.data.as_str()).collect()
    }

    #[test]
    fn parses_events_with_names_and_data() {
        let events = parse_chunks(&[b"event: ping\ndata: {\"type\": \"ping\"}\n\ndata: two\n\n"]);
        assert_eq!(events.len(), 2);
        assert_eq!(events[0].event.as_deref(), Some("ping"));
        assert_eq!(events[0].data, "{\"type\": \"ping\"}");
        assert_eq!(events[1].event, None);
        assert_eq!(events[1].data, "two");
    }

    #[test]
    fn a_data_line_split_across_chunks_is_joined() {
        let whole: &[u8] = b"data: {\"choices\":[{\"delta\":{\"content\":\"h\xc3\xa9llo\"}}]}\n\n";
        // Cut at every position, including inside the two-byte character.
        for cut in 0..whole.len() {
            let events = parse_chunks(&[&whole[..cut], &whole[cut..]]);
            assert_eq!(
                data(&events),
                ["{\"choices\":[{\"delta\":{\"content\":\"h\u{e9}llo\"}}]}"],
                "cut at {cut}"
            );
        }
        // And byte by byte.
        let bytes: Vec<&[u8]> = whole.chunks(1).collect();
        assert_eq!(parse_chunks(&bytes).len(), 1);
    }

    #[test]
    fn multi_line_data_joins_with_newlines() {
        let events = parse_chunks(&[b"data: first\ndata:second\ndata:  third\n\n"]);
        assert_eq!(data(&events), ["first\nsecond\n third"]);
    }

    #[test]
    fn comments_and_unknown_fields_are_ignored() {
        let events = parse_chunks(&[b": keep-alive\n\nid: 7\nretry: 10\ndata: x\n: note\n\n"]);
        assert_eq!(data(&events), ["x"]);
    }

    #[test]
    fn crlf_and_cr_line_endings_work_even_split_between_chunks() {
        let events = parse_chunks(&[b"data: a\r", b"\n\r", b"\ndata: b\r\r"]);
        assert_eq!(data(&events), ["a", "b"]);
        let events = parse_chunks(&[b"event: x\rdata: c\r\rdata: d\r\n\r\n"]);
        assert_eq!(data(&events), ["c", "d"]);
        assert_eq!(events[0].event.as_deref(), Some("x"));
    }

    #[test]
    fn done_sentinel_is_recognised() {
        let events = parse_chunks(&[b"data: {}\n\ndata: [DONE]\n\n"]);
        assert!(!events[0].is_done());
        assert!(events[1].is_done());
    }

    #[test]
    fn a_blank_line_without_data_dispatches_nothing() {
        let events = parse_chunks(&[b"\n\nevent: lonely\n\n"]);
        assert!(events.is_empty());
    }

    #[test]
    fn end_of_body_keeps_complete_lines_and_drops_a_cut_line() {
        assert_eq!(data(&parse_chunks(&[b"data: [DONE]\n"])), ["[DONE]"]);
        assert!(parse_chunks(&[b"data: {\"cho"]).is_empty());
    }

    #[test]
    fn a_byte_order_mark_is_skipped() {
        let events = parse_chunks(&[b"\xef\xbb\xbfdata: x\n\n"]);
        assert_eq!(data(&events), ["x"]);
    }

    #[test]
    fn invalid_utf8_is_a_malformed_response() {
        let mut parser = SseParser::new();
        let error = parser.push(b"data: \xff\n\n", &mut Vec::new()).unwrap_err();
        assert!(matches!(error, ProviderError::MalformedResponse { .. }));
    }
}
