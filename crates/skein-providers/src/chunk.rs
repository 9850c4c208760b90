/*!
Cutting text into the pieces a stream delivers, and counting words.

- [`word_chunks`]: reply text in word-sized chunks (each word with the
  whitespace that follows it), so the chunks concatenate to the exact text.
- [`argument_pieces`]: tool-call arguments in at least two pieces when longer
  than [`SPLIT_ABOVE`] characters, so consumers exercise call assembly.
- [`cut_after_words`]: the prefix of a text that holds its first `n` words.
- [`word_count`]: the unit of the deterministic providers' usage figures.

All cuts fall on character boundaries.
*/

/// Arguments longer than this many characters are split across events.
pub(crate) const SPLIT_ABOVE: usize = 4;

/// The largest argument piece, in characters.
const MAX_PIECE: usize = 8;

/// The number of whitespace-separated words in `text`, as
/// `text.split_whitespace().count()` gives it.
///
/// The echo model counts every word of its request's history on every call,
/// so this is on the per-turn path. ASCII text (the common case) counts the
/// word starts (a space followed by a non-space) with one-byte counters over
/// runs of 255 byte pairs, a loop the compiler vectorises: about ten times
/// faster than `split_whitespace`.
pub(crate) fn word_count(text: &str) -> u64 {
    if !text.is_ascii() {
        return text.split_whitespace().count() as u64;
    }
    let bytes = text.as_bytes();
    let Some(&first) = bytes.first() else {
        return 0;
    };
    let (before, at) = (&bytes[..bytes.len() - 1], &bytes[1..]);
    let mut starts = u64::from(!is_ascii_space(first));
    for (before, at) in before.chunks(255).zip(at.chunks(255)) {
        let mut run = 0u8;
        for (&before, &at) in before.iter().zip(at) {
            run += u8::from(is_ascii_space(before) & !is_ascii_space(at));
        }
        starts += u64::from(run);
    }
    starts
}

/// `char::is_whitespace` for an ASCII byte: tab, line feed, vertical tab,
/// form feed, carriage return and space (`u8::is_ascii_whitespace` leaves
/// out the vertical tab).
fn is_ascii_space(byte: u8) -> bool {
    byte == b' ' || byte.wrapping_sub(b'\t') < 5
}

/// `text` cut into chunks of one word plus the whitespace after it (leading
/// whitespace stays with the first word). Empty text gives no chunks.
pub(crate) fn word_chunks(text: &str) -> Vec<&str> {
    let mut chunks = Vec::new();
    let mut start = 0;
    let mut seen_word = false;
    let mut after_space = false;
    for (i, c) in text.char_indices() {
        let space = c.is_whitespace();
        if !space && after_space && seen_word {
            chunks.push(&text[start..i]);
            start = i;
        }
        seen_word |= !space;
        after_space = space;
    }
    if start < text.len() {
        chunks.push(&text[start..]);
    }
    chunks
}

/// The prefix of `text` that ends with its `n`-th word, or `None` when the
/// text has no more than `n` words (nothing to cut).
pub(crate) fn cut_after_words(text: &str, n: usize) -> Option<&str> {
    let mut words = 0;
    let mut after_space = true;
    for (i, c) in text.char_indices() {
        let space = c.is_whitespace();
        if !space && after_space {
            if words == n {
                return Some(text[..i].trim_end());
            }
            words += 1;
        }
        after_space = space;
    }
    None
}

/// Tool-call arguments in pieces: one piece (possibly empty) up to
/// [`SPLIT_ABOVE`] characters, otherwise at least two pieces of at most
/// eight characters.
pub(crate) fn argument_pieces(arguments: &str) -> Vec<&str> {
    let chars = arguments.chars().count();
    if chars <= SPLIT_ABOVE {
        return vec![arguments];
    }
    let size = chars.div_ceil(2).min(MAX_PIECE);
    let mut pieces = Vec::new();
    let mut start = 0;
    for (count, (i, _)) in arguments.char_indices().enumerate() {
        if count > 0 && count % size == 0 {
            pieces.push(&arguments[start..i]);
            start = i;
        }
    }
    pieces.push(&arguments[start..]);
    pieces
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_concatenate_to_the_exact_text() {
        for text in [
            "",
            "one",
            "  lead and trail  ",
            "tabs\tand\nnew lines\r\n",
            "héllo wörld ✓ done",
        ] {
            let chunks = word_chunks(text);
            assert_eq!(chunks.concat(), text);
            assert_eq!(chunks.len() as u64, word_count(text));
            assert!(chunks.iter().all(|chunk| word_count(chunk) == 1));
        }
        assert_eq!(word_chunks("a  b c"), ["a  ", "b ", "c"]);
        assert_eq!(word_chunks(" a"), [" a"]);
        assert_eq!(word_chunks("   "), ["   "]);
    }

    #[test]
    fn ascii_space_is_what_char_is_whitespace_says() {
        for byte in 0..=127u8 {
            assert_eq!(
                is_ascii_space(byte),
                char::from(byte).is_whitespace(),
                "{byte}"
            );
        }
    }

    proptest::proptest! {
        #[test]
        fn word_count_agrees_with_split_whitespace(
            ascii in "[ a-c\\t\\n\\r\\x0b\\x0c\\x1c\\x1f]{0,40}",
            mixed in "[ a-c\\t\\x0b\\x85\u{a0}\u{2003}é]{0,40}",
        ) {
            for text in [ascii, mixed] {
                proptest::prop_assert_eq!(word_count(&text), text.split_whitespace().count() as u64);
            }
        }
    }

    #[test]
    fn cutting_keeps_whole_words_and_their_inner_spacing() {
        assert_eq!(cut_after_words("a  b   c d", 2), Some("a  b"));
        assert_eq!(cut_after_words("  a b", 1), Some("  a"));
        assert_eq!(cut_after_words("a b", 0), Some(""));
        assert_eq!(cut_after_words("a b", 2), None);
        assert_eq!(cut_after_words("a b  ", 2), None);
        assert_eq!(cut_after_words("", 0), None);
    }

    #[test]
    fn long_arguments_split_on_character_boundaries() {
        assert_eq!(argument_pieces(""), [""]);
        assert_eq!(argument_pieces("{}"), ["{}"]);
        assert_eq!(argument_pieces("abcde"), ["abc", "de"]);
        let text = r#"{"q": "ünïcödé ✓ text that is long"}"#;
        let pieces = argument_pieces(text);
        assert!(pieces.len() >= 2);
        assert!(pieces.iter().all(|p| p.chars().count() <= 8));
        assert_eq!(pieces.concat(), text);
    }

    #[test]
    fn words_are_whitespace_separated() {
        assert_eq!(word_count(" a  b\tc\n"), 3);
        assert_eq!(word_count(r#"{"q": "x"}"#), 2);
        assert_eq!(word_count("   "), 0);
    }
}
