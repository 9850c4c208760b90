/*!
Comparators: did a replayed (or re-run) answer change from the original,
and why. One [`Comparator`] per way of telling:

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
*/

use crate::embed::{Embedder, cosine};
use crate::error::{RecordedError, Result};
use regex::Regex;
use serde_json::Value;
use skein_conversation::Model;
use skein_conversation::service::TurnRequest;
use skein_core::{Message, RunRecord, Thread};
use skein_engine::Request;
use std::collections::BTreeSet;
use std::fmt;
use std::sync::Arc;

/// The default embedding threshold: below this cosine similarity, changed.
pub const DEFAULT_EMBEDDING_THRESHOLD: f32 = 0.8;

/// The rubric a judge uses unless given one.
pub const DEFAULT_RUBRIC: &str = "Two answers to the same request are compared. They differ when \
     they state different facts, names, numbers, dates or conclusions, or when one does what was \
     asked and the other does not. Wording, tone and order do not matter.";

/// One way of telling whether an answer changed.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum Comparator {
    Exact,
    Normalised,
    /// JSON values, whole (`fields` empty) or at dotted paths.
    Json {
        fields: Vec<String>,
    },
    Contains(String),
    Regex(Regex),
    Embedding {
        threshold: f32,
    },
    Specifics,
    /// A model judging with `rubric`: the one the [`Comparison`] holds
    /// ([`Comparison::judge`]), which `model` names when the spec did
    /// (`judge:MODEL`; `None` for `judge`, the replay's judge).
    Judge {
        model: Option<String>,
        rubric: String,
    },
}

impl Comparator {
    /// A comparator as the command line names it: `exact`, `normalised`,
    /// `json[:FIELD,FIELD]`, `contains:TEXT`, `regex:PATTERN`,
    /// `embedding[:THRESHOLD]`, `specifics`, `judge` or `judge:MODEL` (the
    /// default rubric).
    pub fn parse(spec: &str) -> Result<Comparator> {
        let (name, argument) = match spec.split_once(':') {
            Some((name, argument)) => (name, Some(argument)),
            None => (spec, None),
        };
        let bad = |why: &str| RecordedError::BadComparator {
            spec: spec.to_string(),
            why: why.to_string(),
        };
        let needs = |what: &str| argument.filter(|a| !a.is_empty()).ok_or_else(|| bad(what));
        Ok(match name.trim() {
            "exact" => Comparator::Exact,
            "normalised" | "normalized" => Comparator::Normalised,
            "json" => Comparator::Json {
                fields: argument
                    .map(|fields| {
                        fields
                            .split(',')
                            .map(str::trim)
                            .filter(|f| !f.is_empty())
                            .map(str::to_string)
                            .collect()
                    })
                    .unwrap_or_default(),
            },
            "contains" => Comparator::Contains(needs("give the text: contains:TEXT")?.to_string()),
            "regex" => Comparator::Regex(
                Regex::new(needs("give the pattern: regex:PATTERN")?)
                    .map_err(|error| bad(&format!("the pattern does not compile: {error}")))?,
            ),
            "embedding" => Comparator::Embedding {
                threshold: match argument {
                    None => DEFAULT_EMBEDDING_THRESHOLD,
                    Some(text) => text
                        .parse::<f32>()
                        .ok()
                        .filter(|t| (-1.0..=1.0).contains(t))
                        .ok_or_else(|| bad("the threshold is a number from -1 to 1"))?,
                },
            },
            "specifics" => Comparator::Specifics,
            "judge" => Comparator::Judge {
                model: match argument {
                    None => None,
                    Some(_) => Some(needs("name the judging model: judge:MODEL")?.to_string()),
                },
                rubric: DEFAULT_RUBRIC.to_string(),
            },
            _ => {
                return Err(bad(
                    "comparators are exact, normalised, json[:FIELDS], contains:TEXT, \
                     regex:PATTERN, embedding[:THRESHOLD], specifics and judge[:MODEL]",
                ));
            }
        })
    }

    /// A comparator as a cases file may name it: any of [`parse`]'s, but
    /// none that chooses a model, a file or a key. A judge is `judge`
    /// alone, judged by the replay's judge; `judge:MODEL` is refused.
    ///
    /// [`parse`]: Comparator::parse
    pub fn parse_for_case(spec: &str) -> Result<Comparator> {
        let comparator = Comparator::parse(spec)?;
        if let Comparator::Judge { model: Some(_), .. } = comparator {
            return Err(RecordedError::BadComparator {
                spec: spec.to_string(),
                why: "a case may not choose a model: write `judge`, and the replay's judge \
                      (`skein replay --judge MODEL`) judges it"
                    .into(),
            });
        }
        Ok(comparator)
    }

    /// The comparator's name, as decisions record it.
    pub fn name(&self) -> &'static str {
        match self {
            Comparator::Exact => "exact",
            Comparator::Normalised => "normalised",
            Comparator::Json { .. } => "json",
            Comparator::Contains(_) => "contains",
            Comparator::Regex(_) => "regex",
            Comparator::Embedding { .. } => "embedding",
            Comparator::Specifics => "specifics",
            Comparator::Judge { .. } => "judge",
        }
    }
}

impl fmt::Display for Comparator {
    /// The form [`Comparator::parse`] reads back (a judge's rubric aside).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Comparator::Json { fields } if !fields.is_empty() => {
                write!(f, "json:{}", fields.join(","))
            }
            Comparator::Contains(text) => write!(f, "contains:{text}"),
            Comparator::Regex(regex) => write!(f, "regex:{}", regex.as_str()),
            Comparator::Embedding { threshold } => write!(f, "embedding:{threshold}"),
            Comparator::Judge {
                model: Some(model), ..
            } => write!(f, "judge:{model}"),
            other => f.write_str(other.name()),
        }
    }
}

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

/// One comparator's answer.
struct Verdict {
    changed: bool,
    why: String,
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
        let mut comparators = vec![Comparator::Specifics];
        if embedder.is_some() {
            comparators.push(Comparator::Embedding {
                threshold: DEFAULT_EMBEDDING_THRESHOLD,
            });
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

    /// Refuse a comparison that cannot run, before any model is called.
    pub fn check(&self) -> Result<()> {
        if self.comparators.is_empty() {
            return Err(RecordedError::BadComparator {
                spec: String::new(),
                why: "no comparator was chosen".into(),
            });
        }
        for comparator in &self.comparators {
            match comparator {
                Comparator::Embedding { .. } if self.embedder.is_none() => {
                    return Err(RecordedError::NoEmbedder("the embedding comparator"));
                }
                Comparator::Judge { .. } if self.judge.is_none() => {
                    return Err(RecordedError::BadComparator {
                        spec: comparator.to_string(),
                        why: "no judging model was given (the replay's judge: `--judge MODEL`, \
                              `ReplayPlan::judge`; or `judge:MODEL`)"
                            .into(),
                    });
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Whether `candidate` changed from `original`, and why.
    pub async fn decide(&self, original: &str, candidate: &str) -> Result<Decision> {
        self.check()?;
        let mut similarity = None;
        let mut judge = None;
        let mut held = Vec::new();
        for comparator in &self.comparators {
            let verdict = match comparator {
                Comparator::Embedding { threshold } => {
                    let value = self.similarity(original, candidate).await?;
                    similarity = Some(value);
                    let by = self.embedder.as_ref().map_or("", |embedder| embedder.id());
                    Verdict {
                        changed: value < *threshold,
                        why: format!(
                            "cosine similarity {value:.2} by {by} (threshold {threshold})"
                        ),
                    }
                }
                Comparator::Judge { rubric, .. } => {
                    let model = self.judge.as_ref().expect("checked");
                    let (verdict, call) = judge_answers(model, rubric, original, candidate).await?;
                    judge = Some(call);
                    verdict
                }
                other => decide_text(other, original, candidate),
            };
            if verdict.changed {
                return Ok(Decision {
                    changed: true,
                    comparator: comparator.name().to_string(),
                    why: verdict.why,
                    similarity,
                    judge,
                });
            }
            held.push((comparator.name(), verdict.why));
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

    async fn similarity(&self, original: &str, candidate: &str) -> Result<f32> {
        let embedder = self
            .embedder
            .as_ref()
            .ok_or(RecordedError::NoEmbedder("the embedding comparator"))?;
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
}

/// The comparators that need nothing but the two texts.
fn decide_text(comparator: &Comparator, original: &str, candidate: &str) -> Verdict {
    match comparator {
        Comparator::Exact => Verdict {
            changed: original != candidate,
            why: if original == candidate {
                "the texts are identical".into()
            } else {
                format!(
                    "the texts differ from byte {}",
                    first_difference(original, candidate)
                )
            },
        },
        Comparator::Normalised => {
            let (a, b) = (normalise(original), normalise(candidate));
            Verdict {
                changed: a != b,
                why: if a == b {
                    "the texts are equal once case, spacing and punctuation are set aside".into()
                } else {
                    "the words differ".into()
                },
            }
        }
        Comparator::Json { fields } => compare_json(fields, original, candidate),
        Comparator::Contains(text) => matches_differ(
            &format!("contains `{text}`"),
            original.contains(text.as_str()),
            candidate.contains(text.as_str()),
        ),
        Comparator::Regex(regex) => matches_differ(
            &format!("matches /{}/", regex.as_str()),
            regex.is_match(original),
            regex.is_match(candidate),
        ),
        Comparator::Specifics => {
            let (gone, new) = changed_specifics(original, candidate);
            if gone.is_empty() && new.is_empty() {
                Verdict {
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
                Verdict {
                    changed: true,
                    why: parts.join("; "),
                }
            }
        }
        Comparator::Embedding { .. } | Comparator::Judge { .. } => {
            unreachable!("decided with an embedder or an engine")
        }
    }
}

fn matches_differ(what: &str, original: bool, candidate: bool) -> Verdict {
    let said = |yes: bool| if yes { "does" } else { "does not" };
    Verdict {
        changed: original != candidate,
        why: format!(
            "the original {} and the replay {} ({what})",
            said(original),
            said(candidate)
        ),
    }
}

fn first_difference(a: &str, b: &str) -> usize {
    a.bytes()
        .zip(b.bytes())
        .position(|(x, y)| x != y)
        .unwrap_or(a.len().min(b.len()))
}

/// Lower case, words only, single spaces.
pub fn normalise(text: &str) -> String {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|word| !word.is_empty())
        .map(str::to_lowercase)
        .collect::<Vec<_>>()
        .join(" ")
}

fn compare_json(fields: &[String], original: &str, candidate: &str) -> Verdict {
    let (Some(a), Some(b)) = (json_in(original), json_in(candidate)) else {
        let which = match (json_in(original).is_some(), json_in(candidate).is_some()) {
            (false, false) => {
                return Verdict {
                    changed: original != candidate,
                    why: "neither answer holds JSON; compared as text".into(),
                };
            }
            (true, false) => "the replay holds no JSON",
            _ => "the original holds no JSON",
        };
        return Verdict {
            changed: true,
            why: which.into(),
        };
    };
    if fields.is_empty() {
        return Verdict {
            changed: a != b,
            why: if a == b {
                "equal JSON values".into()
            } else {
                "the JSON values differ".into()
            },
        };
    }
    let differing: Vec<&str> = fields
        .iter()
        .filter(|field| at_path(&a, field) != at_path(&b, field))
        .map(String::as_str)
        .collect();
    Verdict {
        changed: !differing.is_empty(),
        why: if differing.is_empty() {
            format!("equal at {}", fields.join(", "))
        } else {
            format!("differs at {}", differing.join(", "))
        },
    }
}

/// The JSON an answer holds: all of it, else its first object or array
/// (a fenced block, or JSON after a sentence).
fn json_in(text: &str) -> Option<Value> {
    if let Ok(value) = serde_json::from_str(text.trim()) {
        return Some(value);
    }
    let start = text.find(['{', '['])?;
    let mut values = serde_json::Deserializer::from_str(&text[start..]).into_iter::<Value>();
    values.next()?.ok()
}

/// The value at a dotted path (`a.b.0`).
fn at_path<'v>(value: &'v Value, path: &str) -> Option<&'v Value> {
    path.split('.').try_fold(value, |at, key| match at {
        Value::Object(map) => map.get(key),
        Value::Array(items) => key.parse::<usize>().ok().and_then(|i| items.get(i)),
        _ => None,
    })
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

/// Past this many cells of the comparison table, the differing middle of
/// two texts is marked changed as a whole (as the web view's compare does).
const MAX_DIFF_CELLS: usize = 4_000_000;

/// A run of a text's words, marked when the other text lacks them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Segment {
    pub text: String,
    pub changed: bool,
}

/// The word-level differences of two texts, as the web view's compare
/// draws them (`diff.js`): the longest common subsequence of their words,
/// after trimming what both begin and end with; each text as runs of
/// kept and changed words (whitespace joins the run around it).
pub fn word_diff(a: &str, b: &str) -> (Vec<Segment>, Vec<Segment>) {
    let x = tokens(a);
    let y = tokens(b);
    let mut start = 0;
    while start < x.len() && start < y.len() && x[start] == y[start] {
        start += 1;
    }
    let (mut end_x, mut end_y) = (x.len(), y.len());
    while end_x > start && end_y > start && x[end_x - 1] == y[end_y - 1] {
        end_x -= 1;
        end_y -= 1;
    }
    let mut kept_x = vec![true; x.len()];
    let mut kept_y = vec![true; y.len()];
    let (n, m) = (end_x - start, end_y - start);
    if n.saturating_mul(m) > MAX_DIFF_CELLS {
        kept_x[start..end_x].fill(false);
        kept_y[start..end_y].fill(false);
    } else if n > 0 || m > 0 {
        let width = m + 1;
        let mut lengths = vec![0u32; (n + 1) * width];
        for i in (0..n).rev() {
            for j in (0..m).rev() {
                lengths[i * width + j] = if x[start + i] == y[start + j] {
                    lengths[(i + 1) * width + j + 1] + 1
                } else {
                    lengths[(i + 1) * width + j].max(lengths[i * width + j + 1])
                };
            }
        }
        let (mut i, mut j) = (0, 0);
        while i < n || j < m {
            if i < n && j < m && x[start + i] == y[start + j] {
                i += 1;
                j += 1;
            } else if j >= m
                || (i < n && lengths[(i + 1) * width + j] >= lengths[i * width + j + 1])
            {
                kept_x[start + i] = false;
                i += 1;
            } else {
                kept_y[start + j] = false;
                j += 1;
            }
        }
    }
    (segments(&x, &kept_x), segments(&y, &kept_y))
}

/// Words and the whitespace between them: joined, the text again.
fn tokens(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut begin = 0;
    let mut space = None;
    for (at, c) in text.char_indices() {
        let is_space = c.is_whitespace();
        if space.is_some_and(|was| was != is_space) {
            out.push(&text[begin..at]);
            begin = at;
        }
        space = Some(is_space);
    }
    if begin < text.len() {
        out.push(&text[begin..]);
    }
    out
}

/// Runs of kept and changed tokens; whitespace joins the run around it.
fn segments(tokens: &[&str], kept: &[bool]) -> Vec<Segment> {
    let mut out: Vec<Segment> = Vec::new();
    for (token, kept) in tokens.iter().zip(kept) {
        let blank = token.trim().is_empty();
        let changed = !kept && !blank;
        match out.last_mut() {
            Some(last) if blank || last.changed == changed => last.text.push_str(token),
            _ => out.push(Segment {
                text: (*token).to_string(),
                changed,
            }),
        }
    }
    out
}

/// Ask `model` whether the answers differ, by `rubric`: its call is made
/// through the turn service and recorded by the caller, apart from the
/// compared turn.
async fn judge_answers(
    judge: &Model,
    rubric: &str,
    original: &str,
    candidate: &str,
) -> Result<(Verdict, (Thread, RunRecord))> {
    let prompt = format!(
        "{rubric}\n\nOriginal answer:\n<<<\n{original}\n>>>\n\nNew answer:\n<<<\n{candidate}\n>>>\n\n\
         Reply with CHANGED or HELD on the first line, then one sentence saying why."
    );
    let request = judge.bind(Request::messages([Message::user(prompt)]).capture());
    let done = TurnRequest::new(judge.engine(), request).call().await?;
    let model = judge.name();
    let text = done.output.text();
    let first = text.trim_start().to_ascii_uppercase();
    let changed = if first.starts_with("CHANGED") {
        true
    } else if first.starts_with("HELD") {
        false
    } else {
        return Err(RecordedError::JudgeUnclear {
            model: model.to_string(),
            answer: text.chars().take(200).collect(),
        });
    };
    let why = text
        .trim_start()
        .split_once('\n')
        .map_or("", |(_, rest)| rest)
        .trim()
        .to_string();
    let thread = done
        .output
        .exchange
        .as_ref()
        .map(|exchange| exchange.thread().clone())
        .unwrap_or_default();
    let record = done.output.record(None);
    Ok((
        Verdict {
            changed,
            why: if why.is_empty() {
                format!("the judge ({model}) said so")
            } else {
                format!("the judge ({model}): {why}")
            },
        },
        (thread, record),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(comparator: &str, a: &str, b: &str) -> bool {
        decide_text(&Comparator::parse(comparator).unwrap(), a, b).changed
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
    fn the_word_diff_marks_what_the_other_text_lacks() {
        let (a, b) = word_diff(
            "Your hotel is called Hotel Lutetia.",
            "Your hotel is called the Hotel de la Lumière.",
        );
        let marked = |segments: &[Segment]| -> Vec<String> {
            segments
                .iter()
                .filter(|s| s.changed)
                .map(|s| s.text.trim().to_string())
                .collect()
        };
        assert_eq!(marked(&a), vec!["Lutetia."]);
        assert_eq!(marked(&b), vec!["the", "de la Lumière."]);
        let joined: String = b.iter().map(|s| s.text.as_str()).collect();
        assert_eq!(joined, "Your hotel is called the Hotel de la Lumière.");
        let (same, _) = word_diff("a  b", "a  b");
        assert!(same.iter().all(|s| !s.changed));
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
        let comparison = Comparison::new(vec![Comparator::Normalised, Comparator::Specifics]);
        let held = comparison.decide("Paris, yes.", "paris yes").await.unwrap();
        assert!(!held.changed);
        assert_eq!(held.comparator, "normalised+specifics");
        let changed = comparison
            .decide("Hotel Lutetia.", "Hotel Lumière.")
            .await
            .unwrap();
        assert_eq!(changed.comparator, "normalised");
        let embedding = Comparison::new(vec![Comparator::Embedding { threshold: 0.5 }]);
        assert!(matches!(
            embedding.decide("a", "b").await,
            Err(RecordedError::NoEmbedder(_))
        ));
    }
}
