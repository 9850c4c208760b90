/*!
Property tests of the event-stream parser (`http::sse`), the first code to
touch bytes from the network:

- arbitrary bytes, cut into arbitrary chunks, never panic, and the parser
  returns the same events and the same typed error however the body is
  cut;
- well-formed streams (names, multi-line data, comments, any mix of `\n`,
  `\r\n` and `\r` line endings) round-trip to the events they encode.

Failures are not persisted: copy the minimal input proptest prints into a
unit test in `src/http/sse.rs`.
*/

use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::Config;
use skein_core::ProviderError;
use skein_providers::http::sse::{SseEvent, SseParser};

/// `cases` per property, or `PROPTEST_CASES` for a longer run.
fn config(cases: u32) -> Config {
    Config {
        cases: std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(cases),
        failure_persistence: None,
        ..Config::default()
    }
}

/// The events of `body` fed in pieces cut at `cuts`, and the error that
/// stopped the parser, if one did.
fn parse(body: &[u8], cuts: &[Index]) -> (Vec<SseEvent>, Option<ProviderError>) {
    let mut positions: Vec<usize> = cuts.iter().map(|cut| cut.index(body.len() + 1)).collect();
    positions.push(0);
    positions.push(body.len());
    positions.sort_unstable();
    let mut parser = SseParser::new();
    let mut events = Vec::new();
    for window in positions.windows(2) {
        if let Err(error) = parser.push(&body[window[0]..window[1]], &mut events) {
            return (events, Some(error));
        }
    }
    parser.finish(&mut events);
    (events, None)
}

/// Bytes that look like an event stream often enough to reach every branch.
fn stream_like() -> impl Strategy<Value = Vec<u8>> {
    let piece = prop_oneof![
        Just(b"data: ".to_vec()),
        Just(b"data:".to_vec()),
        Just(b"event: x".to_vec()),
        Just(b": comment".to_vec()),
        Just(b"\n".to_vec()),
        Just(b"\r\n".to_vec()),
        Just(b"\r".to_vec()),
        Just("\u{feff}".as_bytes().to_vec()),
        Just(b"[DONE]".to_vec()),
        Just(vec![0xff]),
        Just("é".as_bytes()[..1].to_vec()),
        proptest::collection::vec(any::<u8>(), 0..8),
        "[a-z{}\":, ]{0,12}".prop_map(String::into_bytes),
    ];
    proptest::collection::vec(piece, 0..40).prop_map(|pieces| pieces.concat())
}

fn line_ending() -> impl Strategy<Value = &'static str> {
    prop_oneof![Just("\n"), Just("\r\n"), Just("\r")]
}

/// One event: an optional name and at least one data line (no line breaks).
fn event() -> impl Strategy<Value = (Option<String>, Vec<String>)> {
    (
        proptest::option::of("[^\r\n]{0,10}"),
        proptest::collection::vec("[^\r\n]{0,20}", 1..4),
    )
}

proptest! {
    #![proptest_config(config(512))]

    #[test]
    fn arbitrary_bytes_cut_anywhere_never_panic_and_parse_alike(
        body in prop_oneof![stream_like(), proptest::collection::vec(any::<u8>(), 0..200)],
        cuts in proptest::collection::vec(any::<Index>(), 0..10),
    ) {
        let whole = parse(&body, &[]);
        let pieces = parse(&body, &cuts);
        prop_assert_eq!(&pieces, &whole);
        if let Some(error) = whole.1 {
            prop_assert!(matches!(error, ProviderError::MalformedResponse { .. }), "{error:?}");
        }
    }

    #[test]
    fn well_formed_streams_round_trip(
        events in proptest::collection::vec(event(), 0..6),
        endings in proptest::collection::vec(line_ending(), 1..8),
        comments in proptest::collection::vec(any::<bool>(), 1..8),
        cuts in proptest::collection::vec(any::<Index>(), 0..10),
    ) {
        let mut body = String::new();
        let mut n = 0;
        let mut line = |body: &mut String, text: &str| {
            if comments[n % comments.len()] {
                body.push_str(": keep-alive");
                body.push_str(endings[n % endings.len()]);
            }
            body.push_str(text);
            // `\r` then a blank line ended by `\n` would read as one `\r\n`.
            let ending = match endings[n % endings.len()] {
                "\n" if text.is_empty() && body.ends_with('\r') => "\r\n",
                ending => ending,
            };
            body.push_str(ending);
            n += 1;
        };
        for (name, data) in &events {
            if let Some(name) = name {
                line(&mut body, &format!("event: {name}"));
            }
            for value in data {
                line(&mut body, &format!("data: {value}"));
            }
            line(&mut body, "");
        }
        let expected: Vec<SseEvent> = events
            .iter()
            .map(|(name, data)| SseEvent { event: name.clone(), data: data.join("\n") })
            .collect();
        prop_assert_eq!(parse(body.as_bytes(), &cuts), (expected, None));
    }
}
