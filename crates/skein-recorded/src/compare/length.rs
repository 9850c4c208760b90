//! `length[:RATIO]`: the replayed answer's length, in words, differs from
//! the original's by more than RATIO of the original's (default
//! [`DEFAULT_LENGTH_RATIO`]: half as long, or half as long again). Catches
//! a model that turned terse or rambling, which text comparators call
//! "changed" for any rewording and an embedder may call "held".

use super::{Compare, Finding, Judgement, Kind, Means, text_only};
use crate::error::Result;
use skein_core::BoxFuture;
use std::sync::Arc;

/// The default ratio: a change of more than half the original's length.
pub const DEFAULT_LENGTH_RATIO: f64 = 0.5;

pub(super) const KIND: Kind = Kind {
    name: "length",
    aliases: &[],
    usage: "length[:RATIO]",
    about: "the answer's length in words differs from the original's by more than RATIO of it \
            (default 0.5)",
    parse: |argument| {
        let ratio = match argument {
            None => DEFAULT_LENGTH_RATIO,
            Some(text) => text
                .parse::<f64>()
                .ok()
                .filter(|ratio| ratio.is_finite() && *ratio > 0.0)
                .ok_or("the ratio is a positive number (length:0.5: more than half)")?,
        };
        Ok(Arc::new(Length { ratio }))
    },
};

struct Length {
    ratio: f64,
}

impl Compare for Length {
    fn argument(&self) -> Option<String> {
        Some(self.ratio.to_string())
    }

    fn decide<'a>(
        &'a self,
        original: &'a str,
        candidate: &'a str,
        _: &'a Means<'a>,
    ) -> BoxFuture<'a, Result<Finding>> {
        let (before, after) = (words(original), words(candidate));
        let allowed = self.ratio * before.max(1) as f64;
        let changed = before.abs_diff(after) as f64 > allowed;
        let difference = match before {
            0 if after == 0 => "the same".to_string(),
            0 => "the original is empty".to_string(),
            _ => format!(
                "{:+.0}%",
                (after as f64 - before as f64) / before as f64 * 100.0
            ),
        };
        text_only(Judgement {
            changed,
            why: format!(
                "{after} words against the original's {before} ({difference}; more than {:.0}% is \
                 changed)",
                self.ratio * 100.0
            ),
        })
    }
}

fn words(text: &str) -> usize {
    text.split_whitespace().count()
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::FutureExt;

    fn length(spec: Option<&str>, original: &str, candidate: &str) -> Judgement {
        let compare = (KIND.parse)(spec).unwrap();
        let means = Means::default();
        let decided = compare.decide(original, candidate, &means).now_or_never();
        decided.unwrap().unwrap().judgement
    }

    #[test]
    fn a_terse_or_rambling_answer_changed_a_reworded_one_held() {
        let original = "The museum opens at nine and closes at six.";
        let held = length(None, original, "It opens at nine, closing at six in the evening.");
        assert!(!held.changed, "{}", held.why);
        let terse = length(None, original, "Nine.");
        assert!(terse.changed, "{}", terse.why);
        assert!(terse.why.starts_with("1 words against the original's 9"), "{}", terse.why);
        let rambling = original.repeat(2);
        assert!(length(None, original, &rambling).changed);
        assert!(!length(Some("1.5"), original, &rambling).changed);
        assert!((KIND.parse)(Some("-1")).is_err());
        assert!((KIND.parse)(Some("x")).is_err());
    }
}
