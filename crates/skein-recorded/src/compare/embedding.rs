//! `embedding[:THRESHOLD]`: cosine similarity of the answers' embeddings
//! below the threshold (default [`DEFAULT_EMBEDDING_THRESHOLD`]).

use super::{Compare, Finding, Judgement, Kind, Means};
use crate::embed::cosine;
use crate::error::{RecordedError, Result};
use skein_core::BoxFuture;
use std::sync::Arc;

/// The default embedding threshold: below this cosine similarity, changed.
pub const DEFAULT_EMBEDDING_THRESHOLD: f32 = 0.8;

pub(super) const KIND: Kind = Kind {
    name: "embedding",
    aliases: &[],
    usage: "embedding[:THRESHOLD]",
    about: "cosine similarity of the answers' embeddings is below THRESHOLD (default 0.8)",
    parse: |argument| {
        let threshold = match argument {
            None => DEFAULT_EMBEDDING_THRESHOLD,
            Some(text) => text
                .parse::<f32>()
                .ok()
                .filter(|t| (-1.0..=1.0).contains(t))
                .ok_or("the threshold is a number from -1 to 1")?,
        };
        Ok(Arc::new(Embedding { threshold }))
    },
};

pub(super) struct Embedding {
    pub(super) threshold: f32,
}

impl Compare for Embedding {
    fn argument(&self) -> Option<String> {
        Some(self.threshold.to_string())
    }

    fn check(&self, _: &str, means: &Means<'_>) -> Result<()> {
        match means.embedder {
            Some(_) => Ok(()),
            None => Err(RecordedError::NoEmbedder("the embedding comparator")),
        }
    }

    fn decide<'a>(
        &'a self,
        original: &'a str,
        candidate: &'a str,
        means: &'a Means<'a>,
    ) -> BoxFuture<'a, Result<Finding>> {
        Box::pin(async move {
            let embedder = means
                .embedder
                .ok_or(RecordedError::NoEmbedder("the embedding comparator"))?;
            let value = match means.similarity {
                Some(known) => known,
                None => similarity(embedder.as_ref(), original, candidate).await?,
            };
            let threshold = self.threshold;
            Ok(Finding {
                similarity: Some(value),
                ..Finding::from(Judgement {
                    changed: value < threshold,
                    why: format!(
                        "cosine similarity {value:.2} by {} (threshold {threshold})",
                        embedder.id()
                    ),
                })
            })
        })
    }
}

/// The cosine similarity of the two texts' embeddings.
async fn similarity(
    embedder: &dyn crate::embed::Embedder,
    original: &str,
    candidate: &str,
) -> Result<f32> {
    let texts = [original.to_string(), candidate.to_string()];
    let vectors = embedder.embed(&texts).await?;
    if vectors.len() != 2 {
        return Err(crate::embed::EmbedError::Count {
            expected: 2,
            got: vectors.len(),
        }
        .into());
    }
    Ok(cosine(&vectors[0], &vectors[1]))
}
