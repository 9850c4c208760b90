//! A [`Comparison`]: comparators asked in order, with the embedder and
//! judge they need; the first that says "changed" decides ([`Decision`]).

use super::{Comparator, DEFAULT_EMBEDDING_THRESHOLD, Means};
use crate::embed::Embedder;
use crate::error::{RecordedError, Result};
use skein_conversation::Model;
use skein_core::{RunRecord, Thread};
use std::sync::Arc;

/// What a comparison decided.
#[derive(Clone, Debug)]
pub struct Decision {
    pub changed: bool,
    /// The comparator that decided (`a+b` when all held).
    pub comparator: String,
    /// Why, in words a person reads.
    pub why: String,
    /// Cosine similarity, when an embedding comparator was asked.
    pub similarity: Option<f32>,
    /// The judge's own model call, when one was asked: its request and
    /// answer, and its run.
    pub judge: Option<(Thread, RunRecord)>,
}

impl Decision {
    /// `changed` or `held`.
    pub fn word(&self) -> &'static str {
        if self.changed { "changed" } else { "held" }
    }
}

/// Comparators asked in order, with what they need.
#[derive(Clone)]
pub struct Comparison {
    comparators: Vec<Comparator>,
    embedder: Option<Arc<dyn Embedder>>,
    judge: Option<Model>,
}

impl Comparison {
    pub fn new(comparators: Vec<Comparator>) -> Comparison {
        Comparison {
            comparators,
            embedder: None,
            judge: None,
        }
    }

    /// The default: `specifics`, then `embedding` when an embedder is at
    /// hand.
    pub fn default_for(embedder: Option<Arc<dyn Embedder>>) -> Comparison {
        Comparison::default_with(embedder, DEFAULT_EMBEDDING_THRESHOLD)
    }

    /// The default with another embedding threshold.
    pub fn default_with(embedder: Option<Arc<dyn Embedder>>, threshold: f32) -> Comparison {
        let mut comparators = vec![Comparator::specifics()];
        if embedder.is_some() {
            comparators.push(Comparator::embedding(threshold));
        }
        Comparison::new(comparators).embedder(embedder)
    }

    /// Embed with `embedder` (the `embedding` comparator needs one).
    pub fn embedder(mut self, embedder: Option<Arc<dyn Embedder>>) -> Comparison {
        self.embedder = embedder;
        self
    }

    /// Judge with `model` (the `judge` comparator needs one).
    pub fn judge(mut self, model: Model) -> Comparison {
        self.judge = Some(model);
        self
    }

    pub fn comparators(&self) -> &[Comparator] {
        &self.comparators
    }

    fn means(&self, similarity: Option<f32>) -> Means<'_> {
        Means {
            embedder: self.embedder.as_ref(),
            judge: self.judge.as_ref(),
            similarity,
        }
    }

    /// Refuse a comparison that cannot run, before any model is called.
    pub fn check(&self) -> Result<()> {
        if self.comparators.is_empty() {
            return Err(RecordedError::BadComparator {
                spec: String::new(),
                why: "no comparator was chosen".into(),
            });
        }
        let means = self.means(None);
        for comparator in &self.comparators {
            comparator.compare.check(&comparator.to_string(), &means)?;
        }
        Ok(())
    }

    /// Whether `candidate` changed from `original`, and why.
    pub async fn decide(&self, original: &str, candidate: &str) -> Result<Decision> {
        self.decide_knowing(original, candidate, None).await
    }

    /// [`decide`](Comparison::decide), with the texts' cosine similarity
    /// already measured (by this comparison's embedder) when `similarity`
    /// is given: an `embedding` comparator uses it instead of embedding
    /// again.
    pub async fn decide_knowing(
        &self,
        original: &str,
        candidate: &str,
        similarity: Option<f32>,
    ) -> Result<Decision> {
        self.check()?;
        let means = self.means(similarity);
        let mut similarity = None;
        let mut judge = None;
        let mut held = Vec::new();
        for comparator in &self.comparators {
            let finding = comparator
                .compare
                .decide(original, candidate, &means)
                .await?;
            similarity = finding.similarity.or(similarity);
            if finding.judge.is_some() {
                judge = finding.judge;
            }
            let judgement = finding.judgement;
            if judgement.changed {
                return Ok(Decision {
                    changed: true,
                    comparator: comparator.name().to_string(),
                    why: judgement.why,
                    similarity,
                    judge,
                });
            }
            held.push((comparator.name(), judgement.why));
        }
        Ok(Decision {
            changed: false,
            comparator: held
                .iter()
                .map(|(name, _)| *name)
                .collect::<Vec<_>>()
                .join("+"),
            why: held
                .into_iter()
                .map(|(name, why)| format!("{name}: {why}"))
                .collect::<Vec<_>>()
                .join("; "),
            similarity,
            judge,
        })
    }
}
