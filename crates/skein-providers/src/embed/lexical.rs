/*!
The lexical embedder: a deterministic, model-free embedder for tests and
demos. Each lowercase alphanumeric word is hashed (BLAKE3) into one of
`dims` buckets; the counts are L2-normalised. Similarities lie in [0, 1]:
texts sharing no words have cosine 0 (unless two words share a bucket);
texts with the same words have cosine 1.
*/

use super::{EmbedError, Embedder, normalise};
use skein_core::BoxFuture;

/// Hashed bag of words.
#[derive(Clone, Debug)]
pub struct LexicalEmbedder {
    dims: usize,
    id: String,
}

impl Default for LexicalEmbedder {
    fn default() -> LexicalEmbedder {
        LexicalEmbedder::new(256)
    }
}

impl LexicalEmbedder {
    /// An embedder into `dims` dimensions (at least 1).
    pub fn new(dims: usize) -> LexicalEmbedder {
        let dims = dims.max(1);
        LexicalEmbedder {
            dims,
            id: format!("lexical-v2/{dims}"),
        }
    }

    /// The vector of one text.
    pub fn vector(&self, text: &str) -> Vec<f32> {
        let mut vector = vec![0f32; self.dims];
        for word in text
            .split(|c: char| !c.is_alphanumeric())
            .filter(|word| !word.is_empty())
        {
            let hash = blake3::hash(word.to_lowercase().as_bytes());
            let bytes = hash.as_bytes();
            let bucket = u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes"));
            vector[(bucket % self.dims as u64) as usize] += 1.0;
        }
        normalise(&mut vector);
        vector
    }
}

impl Embedder for LexicalEmbedder {
    fn id(&self) -> &str {
        &self.id
    }

    fn embed<'a>(
        &'a self,
        texts: &'a [String],
    ) -> BoxFuture<'a, Result<Vec<Vec<f32>>, EmbedError>> {
        let vectors = texts.iter().map(|text| self.vector(text)).collect();
        Box::pin(async move { Ok(vectors) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::embed::cosine;

    #[test]
    fn equal_words_match_and_disjoint_words_do_not() {
        let e = LexicalEmbedder::default();
        let a = e.vector("BUY: sentiment is bullish.");
        assert!((cosine(&a, &e.vector("buy sentiment IS bullish")) - 1.0).abs() < 1e-5);
        assert!(cosine(&a, &e.vector("HOLD: not enough evidence")).abs() < 0.3);
        assert_eq!(e.vector(""), vec![0.0; 256]);
        assert_eq!(e.id(), "lexical-v2/256");
    }
}
