//! The local sentence embedder end to end: all-MiniLM-L6-v2 converted to a
//! GGUF and run through llama.cpp's embedding mode.
//!
//! These tests need the model files: `skein models pull minilm` (the setup
//! script fetches them).

use skein_local::sentence::{MAX_TOKENS, minilm_gguf};
use skein_local::{SentenceEmbedder, default_models_dir};
use std::sync::OnceLock;

fn embedder() -> &'static SentenceEmbedder {
    static EMBEDDER: OnceLock<SentenceEmbedder> = OnceLock::new();
    EMBEDDER.get_or_init(|| {
        let dir = default_models_dir().expect("a models directory");
        SentenceEmbedder::minilm_in(&dir, 1).unwrap_or_else(|error| {
            panic!("{error} (run `cargo run -p skein-cli -- models pull minilm`)")
        })
    })
}

fn cos(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

fn embed(texts: &[&str]) -> Vec<Vec<f32>> {
    embedder()
        .embed_blocking(texts.iter().map(|t| t.to_string()).collect())
        .unwrap()
}

#[test]
fn vectors_are_unit_length_384_dimensional_and_deterministic() {
    assert_eq!(embedder().dims(), 384);
    let first = embed(&["The cat sits on the mat.", ""]);
    assert_eq!(first.len(), 2);
    for vector in &first {
        assert_eq!(vector.len(), 384);
        let norm: f32 = vector.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-4, "norm {norm}");
    }
    let again = embed(&["The cat sits on the mat."]);
    assert_eq!(
        again[0], first[0],
        "a text's vector does not depend on what it was embedded with"
    );
    assert!(minilm_gguf(&default_models_dir().unwrap()).is_file());
}

#[test]
fn similar_sentences_are_closer_than_unrelated_ones() {
    let v = embed(&[
        "BUY: sentiment is bullish and momentum supports it.",
        "Buy the stock, the mood of investors is very positive.",
        "HOLD: flat revenue alone does not justify buying more.",
        "The recipe needs two eggs and a cup of flour.",
    ]);
    let paraphrase = cos(&v[0], &v[1]);
    let related = cos(&v[0], &v[2]);
    let unrelated = cos(&v[0], &v[3]);
    assert!(paraphrase > related, "{paraphrase} vs {related}");
    assert!(related > unrelated, "{related} vs {unrelated}");
    assert!(unrelated < 0.2, "{unrelated}");
    // Case does not matter to an uncased model.
    let cased = embed(&["HELLO WORLD", "hello world"]);
    assert!(cos(&cased[0], &cased[1]) > 0.999);
}

#[test]
fn long_texts_are_cut_to_the_model_window() {
    let long = "word ".repeat(MAX_TOKENS * 3);
    let v = embed(&[&long]);
    assert_eq!(v[0].len(), 384);
}

/// Similarities sentence-transformers reports for all-MiniLM-L6-v2 in its
/// documentation: the conversion and llama.cpp's tokenizer and mean pooling
/// must reproduce them.
#[test]
fn similarities_match_the_reference_implementation() {
    let pairs = [
        (
            "The cat sits outside",
            "The dog plays in the garden",
            0.2838,
        ),
        ("A man is playing guitar", "A woman watches TV", -0.0327),
        (
            "The new movie is awesome",
            "The new movie is so great",
            0.8939,
        ),
        (
            "A man is eating food.",
            "A man is eating a piece of bread.",
            0.7553,
        ),
    ];
    for (a, b, expected) in pairs {
        let v = embed(&[a, b]);
        let got = cos(&v[0], &v[1]);
        assert!(
            (got - expected).abs() < 0.002,
            "{a} | {b}: {got} vs {expected}"
        );
    }
}
