//! `regex:PATTERN`: one answer matches the pattern and the other does not.

use super::{Compare, Finding, Kind, Means, matches_differ, text_only};
use crate::error::Result;
use regex::Regex;
use skein_core::BoxFuture;
use std::sync::Arc;

pub(super) const KIND: Kind = Kind {
    name: "regex",
    aliases: &[],
    usage: "regex:PATTERN",
    about: "one answer matches PATTERN and the other does not",
    parse: |argument| {
        let pattern = argument
            .filter(|a| !a.is_empty())
            .ok_or("give the pattern: regex:PATTERN")?;
        let regex = Regex::new(pattern)
            .map_err(|error| format!("the pattern does not compile: {error}"))?;
        Ok(Arc::new(Matches(regex)))
    },
};

struct Matches(Regex);

impl Compare for Matches {
    fn argument(&self) -> Option<String> {
        Some(self.0.as_str().to_string())
    }

    fn decide<'a>(
        &'a self,
        original: &'a str,
        candidate: &'a str,
        _: &'a Means<'a>,
    ) -> BoxFuture<'a, Result<Finding>> {
        text_only(matches_differ(
            &format!("matches /{}/", self.0.as_str()),
            self.0.is_match(original),
            self.0.is_match(candidate),
        ))
    }
}
