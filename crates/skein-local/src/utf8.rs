/*!
Incremental UTF-8 decoding of token pieces. A token's bytes can end in the
middle of a character; the decoder holds such a tail until the next piece
completes it, so every emitted string is whole characters and nothing
invalid is ever stored.
*/

/// Accumulates bytes and releases the longest valid UTF-8 prefix.
#[derive(Debug, Default)]
pub struct Utf8Decoder {
    pending: Vec<u8>,
}

impl Utf8Decoder {
    pub fn new() -> Utf8Decoder {
        Utf8Decoder::default()
    }

    /// Add bytes; return the text that is now complete (maybe empty).
    /// Bytes that can never become valid (not a prefix of any character)
    /// are replaced by U+FFFD rather than held forever.
    pub fn push(&mut self, bytes: &[u8]) -> String {
        self.pending.extend_from_slice(bytes);
        let mut out = String::new();
        loop {
            match std::str::from_utf8(&self.pending) {
                Ok(text) => {
                    out.push_str(text);
                    self.pending.clear();
                    return out;
                }
                Err(error) => {
                    let valid = error.valid_up_to();
                    out.push_str(
                        std::str::from_utf8(&self.pending[..valid]).expect("valid prefix"),
                    );
                    match error.error_len() {
                        // An incomplete character at the end: wait for more.
                        None => {
                            self.pending.drain(..valid);
                            return out;
                        }
                        Some(bad) => {
                            out.push('\u{FFFD}');
                            self.pending.drain(..valid + bad);
                        }
                    }
                }
            }
        }
    }

    /// Bytes held back because they end mid-character. A reply cut by the
    /// token limit drops them and keeps its valid prefix.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_character_split_across_pieces_is_released_whole() {
        let mut decoder = Utf8Decoder::new();
        let euro = "€".as_bytes();
        assert_eq!(decoder.push(b"price: "), "price: ");
        assert_eq!(decoder.push(&euro[..1]), "");
        assert_eq!(decoder.push(&euro[1..2]), "");
        assert_eq!(decoder.pending(), 2);
        assert_eq!(decoder.push(&euro[2..]), "€");
        assert_eq!(decoder.pending(), 0);
    }

    #[test]
    fn every_split_of_mixed_text_reassembles_exactly() {
        let text = "héllo wörld 日本 🦀!";
        let bytes = text.as_bytes();
        for cut in 0..=bytes.len() {
            let mut decoder = Utf8Decoder::new();
            let mut out = decoder.push(&bytes[..cut]);
            out.push_str(&decoder.push(&bytes[cut..]));
            assert_eq!(out, text, "cut at {cut}");
        }
    }

    #[test]
    fn invalid_bytes_become_replacement_characters() {
        let mut decoder = Utf8Decoder::new();
        assert_eq!(decoder.push(&[b'a', 0xff, b'b']), "a\u{FFFD}b");
        assert_eq!(decoder.pending(), 0);
    }
}
