//! `specifics`: named entities, numbers, dates, quoted strings, proper
//! names, e-mail addresses, links and negations present in one answer and
//! not the other ([`specifics`], [`changed_specifics`]).

use super::{Compare, Finding, Judgement, Kind, Means, text_only};
use crate::error::Result;
use regex::Regex;
use skein_core::BoxFuture;
use std::collections::BTreeSet;
use std::sync::Arc;

pub(super) const KIND: Kind = Kind {
    name: "specifics",
    aliases: &[],
    usage: "specifics",
    about: "a name, number, date, quotation, link or negation is in one answer and not the other",
    parse: |_| Ok(Arc::new(Specifics)),
};

pub(super) struct Specifics;

impl Compare for Specifics {
    fn decide<'a>(
        &'a self,
        original: &'a str,
        candidate: &'a str,
        _: &'a Means<'a>,
    ) -> BoxFuture<'a, Result<Finding>> {
        let (gone, new) = changed_specifics(original, candidate);
        text_only(if gone.is_empty() && new.is_empty() {
            Judgement {
                changed: false,
                why: "the same names, numbers, dates and quotations".into(),
            }
        } else {
            let mut parts = Vec::new();
            if !gone.is_empty() {
                parts.push(format!("only in the original: {}", gone.join(", ")));
            }
            if !new.is_empty() {
                parts.push(format!("only in the replay: {}", new.join(", ")));
            }
            Judgement {
                changed: true,
                why: parts.join("; "),
            }
        })
    }
}

/// Words that start sentences without naming anything.
const STARTERS: &[&str] = &[
    "a",
    "about",
    "according",
    "actually",
    "after",
    "all",
    "also",
    "although",
    "an",
    "and",
    "another",
    "any",
    "are",
    "as",
    "at",
    "based",
    "because",
    "before",
    "being",
    "both",
    "but",
    "by",
    "can",
    "certainly",
    "could",
    "definitely",
    "do",
    "does",
    "each",
    "either",
    "even",
    "every",
    "finally",
    "first",
    "for",
    "from",
    "generally",
    "given",
    "good",
    "great",
    "had",
    "has",
    "have",
    "he",
    "her",
    "here",
    "hers",
    "his",
    "how",
    "however",
    "i",
    "if",
    "in",
    "indeed",
    "instead",
    "is",
    "it",
    "its",
    "just",
    "let",
    "many",
    "may",
    "maybe",
    "meanwhile",
    "might",
    "more",
    "most",
    "my",
    "next",
    "no",
    "none",
    "nor",
    "not",
    "note",
    "now",
    "of",
    "ok",
    "okay",
    "on",
    "once",
    "one",
    "or",
    "other",
    "otherwise",
    "our",
    "overall",
    "perhaps",
    "please",
    "since",
    "so",
    "some",
    "sorry",
    "still",
    "such",
    "sure",
    "thank",
    "thanks",
    "that",
    "the",
    "their",
    "then",
    "there",
    "these",
    "they",
    "this",
    "those",
    "though",
    "thus",
    "to",
    "today",
    "unfortunately",
    "unless",
    "until",
    "we",
    "well",
    "what",
    "when",
    "where",
    "whether",
    "which",
    "while",
    "who",
    "why",
    "will",
    "with",
    "would",
    "yes",
    "yet",
    "you",
    "your",
];

/// What an answer states specifically: numbers (and codes holding digits),
/// quoted strings, capitalised words (proper names, months), e-mail
/// addresses and links, lower-cased, and its negations (`not`, `no`,
/// `never`, `none`, `nothing`, `nor`, `cannot`, a word ending in `n't`: one
/// answer saying the other's sentence with a `not` in it says the opposite,
/// which an embedder scores as nearly the same). A capitalised word that
/// starts a sentence counts unless it is a common sentence opener or the
/// texts use it in lower case too.
pub fn specifics(text: &str) -> BTreeSet<String> {
    specifics_given(text, &lower_words(text))
}

/// The specifics present in one text and not the other: (only in
/// `original`, only in `candidate`), sorted.
pub fn changed_specifics(original: &str, candidate: &str) -> (Vec<String>, Vec<String>) {
    let mut lower = lower_words(original);
    lower.extend(lower_words(candidate));
    let a = specifics_given(original, &lower);
    let b = specifics_given(candidate, &lower);
    (
        a.difference(&b).cloned().collect(),
        b.difference(&a).cloned().collect(),
    )
}

/// The words written in lower case.
fn lower_words(text: &str) -> BTreeSet<String> {
    text.split(|c: char| !c.is_alphanumeric() && c != '\'')
        .filter(|word| word.chars().next().is_some_and(char::is_lowercase))
        .map(str::to_string)
        .collect()
}

fn specifics_given(text: &str, lower: &BTreeSet<String>) -> BTreeSet<String> {
    let mut found: BTreeSet<String> = quoted(text)
        .into_iter()
        .map(|quote| format!("\"{}\"", quote.to_lowercase()))
        .collect();
    let mut sentence_start = true;
    for raw in text.split_whitespace() {
        let token = raw.trim_matches(|c: char| !c.is_alphanumeric());
        if let Some(negation) = negation(token) {
            found.insert(negation.to_string());
        }
        let ends_sentence = raw.ends_with(['.', '!', '?', ':']) || raw.ends_with(".\"");
        if token.is_empty() {
            sentence_start |= ends_sentence;
            continue;
        }
        let token = token
            .strip_suffix("'s")
            .or_else(|| token.strip_suffix("’s"))
            .unwrap_or(token);
        if raw.contains('@') || raw.contains("://") {
            found.insert(raw.trim_end_matches(['.', ',', ';', ')']).to_lowercase());
        } else if token.chars().any(|c| c.is_ascii_digit()) {
            found.insert(number(token));
        } else if token.chars().nth(1).is_some()
            && token.chars().next().is_some_and(char::is_uppercase)
        {
            let word = token.to_lowercase();
            // A quotation starts a sentence of its own.
            let opens = sentence_start || raw.starts_with(['"', '“', '\'', '`', '(']);
            let opener = opens && (STARTERS.contains(&word.as_str()) || lower.contains(&word));
            if !opener {
                found.insert(word);
            }
        }
        sentence_start = ends_sentence;
    }
    found
}

/// The negation `token` says, if any (`isn't` says `not`).
fn negation(token: &str) -> Option<&'static str> {
    let word = token.to_lowercase();
    if word.ends_with("n't") || word.ends_with("n’t") || word == "cannot" {
        return Some("not");
    }
    [
        "not", "no", "never", "none", "nothing", "nobody", "nor", "neither",
    ]
    .into_iter()
    .find(|negation| *negation == word)
}

/// A number as written, without thousands separators.
fn number(token: &str) -> String {
    let grouped = token
        .split(',')
        .skip(1)
        .all(|group| group.len() == 3 && group.chars().all(|c| c.is_ascii_digit()))
        && token.contains(',');
    let token = if grouped {
        token.replace(',', "")
    } else {
        token.to_string()
    };
    token.to_lowercase()
}

/// The strings quoted in `text` ("…", “…”, `…`, and '…' standing apart
/// from words).
fn quoted(text: &str) -> Vec<String> {
    static PATTERN: std::sync::OnceLock<Regex> = std::sync::OnceLock::new();
    let pattern = PATTERN.get_or_init(|| {
        Regex::new(r#""([^"\n]{1,200})"|“([^”\n]{1,200})”|`([^`\n]{1,200})`|(?:^|\s)'([^'\n]{1,200})'(?:[\s.,;:!?]|$)"#)
            .expect("the quotation pattern compiles")
    });
    pattern
        .captures_iter(text)
        .filter_map(|captures| {
            (1..=4)
                .find_map(|group| captures.get(group))
                .map(|quote| quote.as_str().trim().to_string())
        })
        .filter(|quote| !quote.is_empty())
        .collect()
}

