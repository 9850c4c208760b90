//! `exact`: the text differs at all.

use super::{Compare, Finding, Judgement, Kind, Means, text_only};
use crate::error::Result;
use skein_core::BoxFuture;
use std::sync::Arc;

pub(super) const KIND: Kind = Kind {
    name: "exact",
    aliases: &[],
    usage: "exact",
    about: "the text differs at all",
    parse: |_| Ok(Arc::new(Exact)),
};

struct Exact;

impl Compare for Exact {
    fn decide<'a>(
        &'a self,
        original: &'a str,
        candidate: &'a str,
        _: &'a Means<'a>,
    ) -> BoxFuture<'a, Result<Finding>> {
        text_only(Judgement {
            changed: original != candidate,
            why: if original == candidate {
                "the texts are identical".into()
            } else {
                format!(
                    "the texts differ from byte {}",
                    first_difference(original, candidate)
                )
            },
        })
    }
}

fn first_difference(a: &str, b: &str) -> usize {
    a.bytes()
        .zip(b.bytes())
        .position(|(x, y)| x != y)
        .unwrap_or(a.len().min(b.len()))
}

