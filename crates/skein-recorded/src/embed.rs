/*!
Embedders for attribution, reruns and replays: the embedders themselves
live beside the model backends (`skein_providers::embed`, re-exported
here); this module adds [`choose`], the one way every surface picks one by
name (the sentence embedder MiniLM wherever it is on the machine, else the
lexical one, said so), and [`CachedEmbedder`], the embedding cache: vectors
keyed by (embedder id, BLAKE3 digest of the text). Always in memory; with a
store attached, also in the database's `embeddings` table, so vectors
survive restarts and are shared by every process using that database.
*/

pub use skein_providers::embed::{
    EmbedError, Embedder, LexicalEmbedder, MiniLmEmbedder, OpenAiEmbedder, cosine, normalise,
};

use skein_core::{BoxFuture, Digest};
use skein_store::Store;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The embedder [`choose`] picked, and why when it is not the one asked for.
pub struct Chosen {
    pub embedder: Arc<dyn Embedder>,
    /// Set when no embedder was named and MiniLM is not on this machine:
    /// the lexical embedder stands in, which sees words, not meaning (a
    /// paraphrase may read as changed). Say it where the verdicts are shown.
    pub fallback: Option<String>,
}

/// The embedder `name` names (`minilm` or `lexical`); with no name,
/// MiniLM when it is on this machine (`skein models pull minilm`), else
/// the lexical embedder with a [`Chosen::fallback`] note. Naming `minilm`
/// where it is missing is an error that says how to fetch it.
pub fn choose(name: Option<&str>) -> Result<Chosen, crate::RecordedError> {
    let chosen = |embedder: Arc<dyn Embedder>| Chosen {
        embedder,
        fallback: None,
    };
    match name {
        Some("lexical") => Ok(chosen(Arc::new(LexicalEmbedder::new(256)))),
        Some("minilm") => Ok(chosen(Arc::new(MiniLmEmbedder::load(1)?))),
        Some(other) => Err(crate::RecordedError::UnknownEmbedder(other.to_string())),
        None => match MiniLmEmbedder::load(1) {
            Ok(minilm) => Ok(chosen(Arc::new(minilm))),
            Err(why) => Ok(Chosen {
                embedder: Arc::new(LexicalEmbedder::new(256)),
                fallback: Some(format!(
                    "comparing with the lexical embedder, which sees words, not meaning: \
                     minilm is not available ({why}); `skein models pull minilm` fetches it"
                )),
            }),
        },
    }
}

/// An embedder with a cache in front of it.
pub struct CachedEmbedder {
    inner: Arc<dyn Embedder>,
    store: Option<Store>,
    memory: Mutex<HashMap<Digest, Vec<f32>>>,
}

impl CachedEmbedder {
    /// Cache in memory only.
    pub fn new(inner: Arc<dyn Embedder>) -> CachedEmbedder {
        CachedEmbedder {
            inner,
            store: None,
            memory: Mutex::new(HashMap::new()),
        }
    }

    /// Cache in memory and in `store`.
    pub fn with_store(inner: Arc<dyn Embedder>, store: Store) -> CachedEmbedder {
        CachedEmbedder {
            store: Some(store),
            ..CachedEmbedder::new(inner)
        }
    }

    fn remembered(&self, digest: &Digest) -> Option<Vec<f32>> {
        self.memory
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(digest)
            .cloned()
    }

    fn remember(&self, digest: Digest, vector: Vec<f32>) {
        self.memory
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(digest, vector);
    }

    async fn embed_cached(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let id = self.inner.id().to_string();
        let digests: Vec<Digest> = texts.iter().map(|t| Digest::of(t.as_bytes())).collect();
        let mut out: Vec<Option<Vec<f32>>> = digests.iter().map(|d| self.remembered(d)).collect();
        if let Some(store) = &self.store {
            let wanted: Vec<(usize, Digest)> = out
                .iter()
                .enumerate()
                .filter(|(_, v)| v.is_none())
                .map(|(i, _)| (i, digests[i]))
                .collect();
            for (i, digest) in wanted {
                let found = store
                    .nonblocking()
                    .cached_embedding(&id, &digest)
                    .await
                    .map_err(cache_error)?;
                if let Some(vector) = found {
                    self.remember(digest, vector.clone());
                    out[i] = Some(vector);
                }
            }
        }
        let missing: Vec<usize> = (0..texts.len()).filter(|&i| out[i].is_none()).collect();
        if !missing.is_empty() {
            let batch: Vec<String> = missing.iter().map(|&i| texts[i].clone()).collect();
            let vectors = self.inner.embed(&batch).await?;
            if vectors.len() != batch.len() {
                return Err(EmbedError::Count {
                    expected: batch.len(),
                    got: vectors.len(),
                });
            }
            let mut fresh = Vec::new();
            for (&i, vector) in missing.iter().zip(vectors) {
                self.remember(digests[i], vector.clone());
                fresh.push((digests[i], vector.clone()));
                out[i] = Some(vector);
            }
            if let Some(store) = &self.store {
                for (digest, vector) in &fresh {
                    store
                        .nonblocking()
                        .cache_embedding(&id, digest, vector)
                        .await
                        .map_err(cache_error)?;
                }
            }
        }
        Ok(out.into_iter().map(|v| v.expect("filled")).collect())
    }
}

/// The store's error, kept whole (a `StoreError` inside the box).
fn cache_error(error: skein_store::StoreError) -> EmbedError {
    EmbedError::Cache(Box::new(error))
}

impl Embedder for CachedEmbedder {
    /// The wrapped embedder's id: caching never changes a vector.
    fn id(&self) -> &str {
        self.inner.id()
    }

    fn embed<'a>(
        &'a self,
        texts: &'a [String],
    ) -> BoxFuture<'a, Result<Vec<Vec<f32>>, EmbedError>> {
        Box::pin(self.embed_cached(texts))
    }
}
