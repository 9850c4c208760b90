/*!
Comparators: did a replayed (or re-run) answer change from the original,
and why. One [`Comparator`] per way of telling, each a file of its own under
`compare/` listed once in the [`REGISTRY`]:

- `exact`: the text differs at all;
- `normalised`: it differs after case, whitespace and punctuation are set
  aside;
- `json` (whole, or named fields `a.b,c`): the JSON values differ (the
  first JSON object or array in each answer, so fenced output works);
- `contains:TEXT`, `regex:PATTERN`: one answer matches and the other does
  not;
- `embedding[:THRESHOLD]`: cosine similarity of embeddings below the
  threshold (default 0.8);
- `specifics`: named entities, numbers, dates, quoted strings, proper
  names, e-mail addresses and links present in one answer and not the
  other ([`specifics`]): "called Hotel Lutetia" → "called the Hotel de la
  Lumière" changed, "Paris is lovely" → "Paris is beautiful" held;
- `judge` or `judge:MODEL`: a model asked, with a rubric, whether the
  answers differ in a way that matters; its call is a run of its own, kept
  apart from the compared turn's usage. The model is always the caller's
  ([`Comparison::judge`]): `judge` alone is the replay's judge, and a cases
  file may name only that ([`Comparator::parse_for_case`]), so imported
  data never chooses a model, a file or a key.

A [`Comparison`] asks its comparators in order; the first that says
"changed" decides, and when none does the answer held by all of them. The
[`Decision`] names the comparator that decided and why. Without a choice,
[`Comparison::default_for`] asks `specifics` then `embedding`: a
counterfactual that changes a name or a number is changed even when its
wording stays close.

Adding a comparator: a file under `compare/` with a type implementing
[`Compare`] (what it decides, what it needs) and its [`Kind`] (its name,
how its spec reads, a line saying what it does, its parser), and one line
in [`REGISTRY`]. The parser, `skein replay --compare` and `skein rerun
--compare` (help and errors), the web view's list (`/api/comparators`)
and reruns all read the registry, so nothing else changes.
*/

mod comparison;

pub use comparison::{Comparison, Decision};
pub use embedding::DEFAULT_EMBEDDING_THRESHOLD;
pub use judge::DEFAULT_RUBRIC;
pub use normalised::normalise;
pub use specifics::{changed_specifics, specifics};

use crate::embed::Embedder;
use crate::error::{RecordedError, Result};
use skein_conversation::Model;
use skein_core::{BoxFuture, RunRecord, Thread};
use std::fmt;
use std::sync::Arc;

/// Declares each comparator's file and lists its [`Kind`] in [`REGISTRY`]:
/// one line per comparator.
macro_rules! registry {
    ($($file:ident,)*) => {
        $(mod $file;)*
        /// Every comparator, in the order help and the web view list them.
        pub static REGISTRY: &[Kind] = &[$($file::KIND),*];
    };
}

registry! {
    exact,
    normalised,
    json,
    contains,
    regex,
    embedding,
    specifics,
    judge,
    length,
}

/// How a [`Kind`] reads its spec's argument: the comparator, or what to
/// write instead.
type Parser = fn(Option<&str>) -> std::result::Result<Arc<dyn Compare>, String>;

/// A comparator's entry in the [`REGISTRY`].
pub struct Kind {
    /// The name a spec starts with and decisions record.
    pub name: &'static str,
    /// Other spellings of the name a spec may use.
    pub aliases: &'static [&'static str],
    /// How its spec reads (`embedding[:THRESHOLD]`).
    pub usage: &'static str,
    /// What it decides, in one line, for help and the web view.
    pub about: &'static str,
    /// The comparator its spec's argument (after the first `:`) names, or
    /// what to write instead.
    parse: Parser,
}

impl Kind {
    fn answers_to(&self, name: &str) -> bool {
        self.name == name || self.aliases.contains(&name)
    }
}

/// The comparators' usages, as help and errors list them:
/// `exact, normalised, …, specifics and judge[:MODEL]`.
pub fn usages() -> String {
    let usages: Vec<&str> = REGISTRY.iter().map(|kind| kind.usage).collect();
    match usages.split_last() {
        Some((last, [])) => last.to_string(),
        Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
        None => String::new(),
    }
}

/// What a comparator may need besides the two texts: the embedder and the
/// judging model the [`Comparison`] holds, and a similarity already known
/// (a rerun embeds all its samples at once).
#[derive(Clone, Copy, Default)]
pub struct Means<'a> {
    pub embedder: Option<&'a Arc<dyn Embedder>>,
    pub judge: Option<&'a Model>,
    pub similarity: Option<f32>,
}

/// One comparator's answer.
#[derive(Clone, Debug)]
pub struct Judgement {
    pub changed: bool,
    /// Why, in words a person reads.
    pub why: String,
}

/// One comparator's answer, with what it measured or called on the way.
#[derive(Clone, Debug)]
pub struct Finding {
    pub judgement: Judgement,
    /// Cosine similarity, when it embedded.
    pub similarity: Option<f32>,
    /// The judge's own model call: its request and answer, and its run.
    pub judge: Option<(Thread, RunRecord)>,
}

impl From<Judgement> for Finding {
    fn from(judgement: Judgement) -> Finding {
        Finding {
            judgement,
            similarity: None,
            judge: None,
        }
    }
}

/// One way of telling whether an answer changed. Its [`Kind`] parses it.
pub trait Compare: Send + Sync {
    /// The spec's argument as [`Kind`]'s parser reads it back (`None`: the
    /// name alone).
    fn argument(&self) -> Option<String> {
        None
    }

    /// The model the spec chose (`judge:MODEL`), which a cases file may not.
    fn model(&self) -> Option<&str> {
        None
    }

    /// Refuse to run without what it needs, before any model is called
    /// (`spec` names it in the error).
    fn check(&self, spec: &str, means: &Means<'_>) -> Result<()> {
        let _ = (spec, means);
        Ok(())
    }

    /// Whether `candidate` changed from `original`, and why.
    fn decide<'a>(
        &'a self,
        original: &'a str,
        candidate: &'a str,
        means: &'a Means<'a>,
    ) -> BoxFuture<'a, Result<Finding>>;
}

/// A comparator that needs nothing but the two texts: its finding, ready.
fn text_only<'a>(judgement: Judgement) -> BoxFuture<'a, Result<Finding>> {
    Box::pin(std::future::ready(Ok(Finding::from(judgement))))
}

/// `what` holds of one answer and not the other.
fn matches_differ(what: &str, original: bool, candidate: bool) -> Judgement {
    let said = |yes: bool| if yes { "does" } else { "does not" };
    Judgement {
        changed: original != candidate,
        why: format!(
            "the original {} and the replay {} ({what})",
            said(original),
            said(candidate)
        ),
    }
}

/// A comparator, as a spec names it: its [`Kind`] and what it decides.
#[derive(Clone)]
pub struct Comparator {
    kind: &'static Kind,
    compare: Arc<dyn Compare>,
}

impl Comparator {
    /// A comparator as the command line names it: one of the [`REGISTRY`]'s
    /// usages (`exact`, `json[:FIELD,FIELD]`, `embedding[:THRESHOLD]`,
    /// `judge` or `judge:MODEL` with the default rubric, …).
    pub fn parse(spec: &str) -> Result<Comparator> {
        let (name, argument) = match spec.split_once(':') {
            Some((name, argument)) => (name, Some(argument)),
            None => (spec, None),
        };
        let bad = |why: String| RecordedError::BadComparator {
            spec: spec.to_string(),
            why,
        };
        let name = name.trim();
        let kind = REGISTRY
            .iter()
            .find(|kind| kind.answers_to(name))
            .ok_or_else(|| bad(format!("comparators are {}", usages())))?;
        let compare = (kind.parse)(argument).map_err(bad)?;
        Ok(Comparator { kind, compare })
    }

    /// A comparator as a cases file may name it: any of [`parse`]'s, but
    /// none that chooses a model, a file or a key. A judge is `judge`
    /// alone, judged by the replay's judge; `judge:MODEL` is refused.
    ///
    /// [`parse`]: Comparator::parse
    pub fn parse_for_case(spec: &str) -> Result<Comparator> {
        let comparator = Comparator::parse(spec)?;
        if comparator.model().is_some() {
            return Err(RecordedError::BadComparator {
                spec: spec.to_string(),
                why: "a case may not choose a model: write `judge`, and the replay's judge \
                      (`skein replay --judge MODEL`) judges it"
                    .into(),
            });
        }
        Ok(comparator)
    }

    /// `specifics`, as the default comparison asks first.
    pub fn specifics() -> Comparator {
        Comparator {
            kind: &specifics::KIND,
            compare: Arc::new(specifics::Specifics),
        }
    }

    /// `embedding:THRESHOLD`.
    pub fn embedding(threshold: f32) -> Comparator {
        Comparator {
            kind: &embedding::KIND,
            compare: Arc::new(embedding::Embedding { threshold }),
        }
    }

    /// The comparator's name, as decisions record it.
    pub fn name(&self) -> &'static str {
        self.kind.name
    }

    /// The model its spec chose (`judge:MODEL`).
    pub fn model(&self) -> Option<&str> {
        self.compare.model()
    }
}

impl fmt::Display for Comparator {
    /// The form [`Comparator::parse`] reads back (a judge's rubric aside).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.compare.argument() {
            Some(argument) => write!(f, "{}:{argument}", self.name()),
            None => f.write_str(self.name()),
        }
    }
}

impl fmt::Debug for Comparator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Comparator({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::FutureExt;

    fn text(comparator: &str, a: &str, b: &str) -> bool {
        let means = Means::default();
        let comparator = Comparator::parse(comparator).unwrap();
        let decided = comparator.compare.decide(a, b, &means).now_or_never();
        decided
            .expect("decided without waiting")
            .unwrap()
            .judgement
            .changed
    }

    #[test]
    fn the_hotel_case_is_changed_and_a_paraphrase_with_the_same_specifics_held() {
        let (gone, new) = changed_specifics(
            "Your hotel is called Hotel Lutetia.",
            "Your hotel is called the Hotel de la Lumière.",
        );
        assert_eq!(gone, vec!["lutetia"]);
        assert_eq!(new, vec!["lumière"]);
        assert!(text(
            "specifics",
            "Your hotel is called Hotel Lutetia.",
            "Your hotel is called the Hotel de la Lumière."
        ));
        assert!(!text("specifics", "Paris is lovely", "Paris is beautiful"));
        assert!(text("specifics", "Paris is lovely", "London is lovely"));
        // A quotation is one specific; an option's letter is none.
        assert_eq!(
            changed_specifics(
                "Ask \"What time is it?\" with -T clock.",
                "Ask \"What time is it?\" with -T clock, please."
            ),
            (vec![], vec![])
        );
        // Sentence openers are not names, wherever they stand.
        assert!(!text(
            "specifics",
            "Sure. The museum opens at 9.",
            "Certainly! It opens at 9."
        ));
    }

    #[test]
    fn specifics_are_numbers_dates_quotes_and_links() {
        let found = specifics(
            "It costs 1,250 euros on March 3, 2024. He said \"bring cash\"; write to a@b.org or https://x.io.",
        );
        for expected in [
            "1250",
            "march",
            "3",
            "2024",
            "\"bring cash\"",
            "a@b.org",
            "https://x.io",
        ] {
            assert!(found.contains(expected), "{expected} in {found:?}");
        }
        assert!(!found.contains("it") && !found.contains("he"));
        assert!(text(
            "specifics",
            "It costs 12 euros.",
            "It costs 13 euros."
        ));
        assert!(!text(
            "specifics",
            "It costs 1,250 euros.",
            "The price is 1250 euros."
        ));
    }

    #[test]
    fn exact_and_normalised_text() {
        assert!(!text("exact", "a b", "a b"));
        assert!(text("exact", "a b", "a  b"));
        assert!(!text("normalised", "Hello, World!", "hello world"));
        assert!(text("normalised", "hello world", "hello there"));
    }

    #[test]
    fn json_whole_or_named_fields() {
        let a = r#"{"city": "Paris", "n": 2, "note": "x"}"#;
        let b = "Here it is:\n```json\n{\"n\": 2, \"city\": \"Paris\", \"note\": \"y\"}\n```";
        assert!(text("json", a, b));
        assert!(!text("json:city,n", a, b));
        assert!(text("json:note", a, b));
        assert!(text("json", a, "no json here"));
        assert!(!text("json:a.0", r#"{"a": [1, 2]}"#, r#"{"a": [1, 3]}"#));
        assert!(text("json:a.1", r#"{"a": [1, 2]}"#, r#"{"a": [1, 3]}"#));
    }

    #[test]
    fn contains_and_regex_compare_both_answers() {
        assert!(!text("contains:Paris", "in Paris", "Paris!"));
        assert!(text("contains:Paris", "in Paris", "in London"));
        assert!(!text("contains:Paris", "in Rome", "in London"));
        assert!(text(r"regex:\d+ euros", "12 euros", "twelve euros"));
        assert!(!text(r"regex:\d+ euros", "12 euros", "13 euros"));
    }

    #[test]
    fn bad_specs_say_what_to_write() {
        for spec in ["contains", "regex:(", "embedding:2", "judge:", "nope"] {
            let error = Comparator::parse(spec).unwrap_err().to_string();
            assert!(error.contains(spec), "{error}");
        }
        assert_eq!(
            Comparator::parse("embedding:0.9").unwrap().to_string(),
            "embedding:0.9"
        );
        for spec in ["judge", "judge:gpt-4o"] {
            assert_eq!(Comparator::parse(spec).unwrap().to_string(), spec);
        }
    }

    #[test]
    fn a_case_names_no_model() {
        assert_eq!(
            Comparator::parse_for_case("judge").unwrap().to_string(),
            "judge"
        );
        let error = Comparator::parse_for_case("judge:scripted:/etc/hostname")
            .unwrap_err()
            .to_string();
        assert!(error.contains("may not choose a model"), "{error}");
    }

    #[tokio::test]
    async fn the_first_comparator_that_says_changed_decides() {
        let comparison = Comparison::new(vec![
            Comparator::parse("normalised").unwrap(),
            Comparator::specifics(),
        ]);
        let held = comparison.decide("Paris, yes.", "paris yes").await.unwrap();
        assert!(!held.changed);
        assert_eq!(held.comparator, "normalised+specifics");
        let changed = comparison
            .decide("Hotel Lutetia.", "Hotel Lumière.")
            .await
            .unwrap();
        assert_eq!(changed.comparator, "normalised");
        let embedding = Comparison::new(vec![Comparator::embedding(0.5)]);
        assert!(matches!(
            embedding.decide("a", "b").await,
            Err(RecordedError::NoEmbedder(_))
        ));
    }
}
