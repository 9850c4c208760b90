//! `normalised`: the text differs once case, whitespace and punctuation
//! are set aside ([`normalise`]).

use super::{Compare, Finding, Judgement, Kind, Means, text_only};
use crate::error::Result;
use skein_core::BoxFuture;
use std::sync::Arc;

pub(super) const KIND: Kind = Kind {
    name: "normalised",
    aliases: &["normalized"],
    usage: "normalised",
    about: "the words differ once case, spacing and punctuation are set aside",
    parse: |_| Ok(Arc::new(Normalised)),
};

struct Normalised;

impl Compare for Normalised {
    fn decide<'a>(
        &'a self,
        original: &'a str,
        candidate: &'a str,
        _: &'a Means<'a>,
    ) -> BoxFuture<'a, Result<Finding>> {
        let (a, b) = (normalise(original), normalise(candidate));
        text_only(Judgement {
            changed: a != b,
            why: if a == b {
                "the texts are equal once case, spacing and punctuation are set aside".into()
            } else {
                "the words differ".into()
            },
        })
    }
}

/// Lower case, words only, single spaces.
pub fn normalise(text: &str) -> String {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|word| !word.is_empty())
        .map(str::to_lowercase)
        .collect::<Vec<_>>()
        .join(" ")
}

