//! `contains:TEXT`: one answer contains the text and the other does not.

use super::{Compare, Finding, Kind, Means, matches_differ, text_only};
use crate::error::Result;
use skein_core::BoxFuture;
use std::sync::Arc;

pub(super) const KIND: Kind = Kind {
    name: "contains",
    aliases: &[],
    usage: "contains:TEXT",
    about: "one answer contains TEXT and the other does not",
    parse: |argument| {
        let text = argument
            .filter(|a| !a.is_empty())
            .ok_or("give the text: contains:TEXT")?;
        Ok(Arc::new(Contains(text.to_string())))
    },
};

struct Contains(String);

impl Compare for Contains {
    fn argument(&self) -> Option<String> {
        Some(self.0.clone())
    }

    fn decide<'a>(
        &'a self,
        original: &'a str,
        candidate: &'a str,
        _: &'a Means<'a>,
    ) -> BoxFuture<'a, Result<Finding>> {
        let text = self.0.as_str();
        text_only(matches_differ(
            &format!("contains `{text}`"),
            original.contains(text),
            candidate.contains(text),
        ))
    }
}
