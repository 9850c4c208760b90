/*!
Full-text search over message text ([`Store::search`]), the one search every
surface uses (`skein log -q`, `skein search`, the web view's `/api/search`).

What needs no SQL is here, shared by both backends: the query language and
its parser, the words a message is indexed by, the query each backend's
index takes, and the snippet shown for a match. SQLite's index is an FTS5
table over those words (schema 11, kept up to date by `graph::insert_node`,
the one place a node is inserted; sqlite/search.rs); PostgreSQL's is a
`tsvector` column with a GIN index (postgres/search.rs).

Both backends index the same words: a message's text parts (not tool calls,
tool results or attachments), split into words of letters, digits and
combining marks, lowercased, words longer than [`MAX_WORD_CHARS`] left out,
up to [`INDEXED_BYTES`] of words per message. Text stored as a blob is
indexed like inline text: the index is filled from the message, not from
its storage. Both backends then tokenize those normalized words the same way
for the index and for the query, so a query finds the same nodes on either.

The query language: words, all of which must appear (`kernel panic`);
`"quoted phrases"`, whose words must appear in that order; a trailing `*`
makes a word (or a phrase's last word) a prefix (`deploy*`). A word that
splits into several (`e-mail`) is a phrase. Unbalanced quotes, a query with
no word, one too long or with too many terms are [`SearchError`]s.

This module declares `Search`, the backend trait sqlite/search.rs and
postgres/search.rs implement, and holds the public operations that call it:
the async ones on `AsyncStore` and their blocking forms on `Store`.
*/

use crate::async_store::AsyncStore;
use crate::backend::BoxFuture;
use crate::error::Result;
use crate::records::ConversationId;
use crate::store::Store;
use skein_core::{Message, NodeId, Part, Role};

/// The full-text index: the SQL is in sqlite/search.rs and
/// postgres/search.rs.
pub(crate) trait Search {
    /// Up to `limit` nodes matching `query`, newest first, within the
    /// thread ending at `within` when given; without `replays`, none that
    /// only a replay's runs produced (`runs::replay_only_message`).
    fn search_nodes<'a>(
        &'a self,
        query: &'a Parsed,
        role: Option<Role>,
        within: Option<NodeId>,
        replays: bool,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<(NodeId, Message)>>>;
    /// Up to `cap` conversations whose thread holds `node`, none of
    /// `excluding` (a deletion's, which a dry run still stores: so the
    /// lookup finds the same conversations before and after it).
    fn containing<'a>(
        &'a self,
        node: NodeId,
        cap: usize,
        excluding: &'a [String],
    ) -> BoxFuture<'a, Result<Vec<ConversationRef>>>;
}

/// The longest query text accepted, in bytes.
pub const MAX_QUERY_BYTES: usize = 1000;

/// The most terms (words and phrases) a query may have.
pub const MAX_TERMS: usize = 32;

/// The most matches one search returns; a larger limit is lowered to this.
pub const MAX_LIMIT: usize = 1000;

/// How many bytes of normalized words each message is indexed by (its
/// first ones). Keeps PostgreSQL's `tsvector` far below its 1 MiB limit.
pub const INDEXED_BYTES: usize = 256 * 1024;

/// Words longer than this many characters (encoded data, hashes) are not
/// indexed, so they are not found either.
pub const MAX_WORD_CHARS: usize = 100;

/// How many conversations are named for each match.
pub const CONVERSATIONS_PER_MATCH: usize = 3;

/// How many nodes below a match are walked to find conversations whose
/// thread contains it, when none has its head in the match's own lane.
pub(crate) const WALK_LIMIT: usize = 10_000;

/// How many nodes at the end of a match's lane are looked at for the heads
/// of conversations holding it.
pub(crate) const LANE_END: usize = 64;

/// A snippet's length, in characters, before its ellipses.
const SNIPPET_CHARS: usize = 160;

/// How much of a snippet comes before its first match, in characters.
const SNIPPET_LEAD: usize = 50;

/// What to search for.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SearchQuery {
    /// The query (see the module docs for its language).
    pub text: String,
    /// The most matches to return (at most [`MAX_LIMIT`]).
    pub limit: usize,
    /// Only nodes of this conversation's thread.
    pub conversation: Option<ConversationId>,
    /// Only messages of this role.
    pub role: Option<Role>,
    /// Also answers only a replay's runs produced (its replayed answers,
    /// its judge's verdicts), which are otherwise left out: they are not
    /// the user's history (`skein log` leaves their runs out alike).
    pub replays: bool,
}

impl SearchQuery {
    /// A search for `text` in every message, 20 matches at most.
    pub fn new(text: impl Into<String>) -> SearchQuery {
        SearchQuery {
            text: text.into(),
            limit: 20,
            conversation: None,
            role: None,
            replays: false,
        }
    }

    pub fn limit(mut self, limit: usize) -> SearchQuery {
        self.limit = limit;
        self
    }

    pub fn conversation(mut self, conversation: Option<ConversationId>) -> SearchQuery {
        self.conversation = conversation;
        self
    }

    pub fn role(mut self, role: Option<Role>) -> SearchQuery {
        self.role = role;
        self
    }

    /// With `true`, also the answers only replays produced.
    pub fn replays(mut self, replays: bool) -> SearchQuery {
        self.replays = replays;
        self
    }

    /// A search for the messages holding `message`'s text: one phrase of
    /// the words `message` is indexed by, in order (its first ones, as
    /// many as a query holds), so it matches a message quoting or echoing
    /// that text, a replay's answers included. `None` when `message` has
    /// no word to look for (no text part). What `skein redact` runs, before erasing a message, to name
    /// the others still holding what it erases.
    pub fn holding_text_of(message: &Message) -> Option<SearchQuery> {
        let indexed = index_text(message);
        let mut phrase = String::from("\"");
        for word in indexed.split(' ').filter(|word| !word.is_empty()) {
            // The phrase, a space and the closing quote stay within a query.
            if phrase.len() + word.len() + 2 > MAX_QUERY_BYTES {
                break;
            }
            if phrase.len() > 1 {
                phrase.push(' ');
            }
            phrase.push_str(word);
        }
        if phrase.len() == 1 {
            return None;
        }
        phrase.push('"');
        // Every copy, a replay's answers too: what is erased is erased
        // wherever it is, history or not.
        Some(SearchQuery::new(phrase).replays(true))
    }
}

/// A search's matches, newest first.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct SearchResults {
    pub matches: Vec<SearchMatch>,
    /// More nodes match than were returned.
    pub truncated: bool,
}

/// One message that matches.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct SearchMatch {
    pub node: NodeId,
    pub role: Role,
    /// The text around the first match, on one line, with `…` where it was
    /// cut.
    pub snippet: String,
    /// Where the query's words are in `snippet`: byte ranges.
    pub highlights: Vec<(usize, usize)>,
    /// Conversations whose thread contains the node (at most
    /// [`CONVERSATIONS_PER_MATCH`]; with a conversation filter, that one).
    /// Empty for a node no conversation leads to (a rerun's request, or
    /// one past the walk's limit).
    pub conversations: Vec<ConversationRef>,
}

/// A conversation, by id and name.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct ConversationRef {
    pub id: ConversationId,
    pub name: Option<String>,
}

/// A query the store cannot run. Nothing was searched.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SearchError {
    #[error("the search has an unclosed quote: close the phrase with `\"`")]
    UnclosedQuote,
    #[error("the search has no words to look for (words are letters and digits)")]
    NoWords,
    #[error("the search is longer than {limit} bytes")]
    TooLong { limit: usize },
    #[error("the search has more than {limit} words and phrases")]
    TooManyTerms { limit: usize },
}

/// A parsed query: terms that must all match.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Parsed {
    pub terms: Vec<Term>,
}

/// A word, or a phrase of words in order; `prefix` makes the last word a
/// prefix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Term {
    pub words: Vec<String>,
    pub prefix: bool,
}

impl Parsed {
    pub(crate) fn parse(text: &str) -> Result<Parsed, SearchError> {
        if text.len() > MAX_QUERY_BYTES {
            return Err(SearchError::TooLong {
                limit: MAX_QUERY_BYTES,
            });
        }
        let mut terms = Vec::new();
        let mut rest = text;
        loop {
            rest = rest.trim_start();
            let Some(first) = rest.chars().next() else {
                break;
            };
            let (chunk, after) = if first == '"' {
                let body = &rest[1..];
                let end = body.find('"').ok_or(SearchError::UnclosedQuote)?;
                (&body[..end], &body[end + 1..])
            } else {
                let end = rest
                    .find(|c: char| c.is_whitespace() || c == '"')
                    .unwrap_or(rest.len());
                (&rest[..end], &rest[end..])
            };
            let stars = after.len() - after.trim_start_matches('*').len();
            let prefix = stars > 0 || (first != '"' && chunk.ends_with('*'));
            rest = &after[stars..];
            let words: Vec<String> = words(chunk).map(|(_, word)| normalize(word)).collect();
            if !words.is_empty() {
                terms.push(Term { words, prefix });
            }
        }
        if terms.is_empty() {
            return Err(SearchError::NoWords);
        }
        if terms.len() > MAX_TERMS {
            return Err(SearchError::TooManyTerms { limit: MAX_TERMS });
        }
        Ok(Parsed { terms })
    }

    /// The FTS5 query: each term a quoted string (words are letters and
    /// digits only, so nothing in them needs escaping), `*` after a prefix.
    pub(crate) fn fts5(&self) -> String {
        let terms: Vec<String> = self
            .terms
            .iter()
            .map(|term| {
                let star = if term.prefix { " *" } else { "" };
                format!("\"{}\"{star}", term.words.join(" "))
            })
            .collect();
        terms.join(" AND ")
    }

    /// The PostgreSQL `to_tsquery` text: lexemes quoted, a phrase's words
    /// joined by `<->`, terms by `&`, `:*` on a prefix.
    #[cfg(feature = "postgres")]
    pub(crate) fn tsquery(&self) -> String {
        let terms: Vec<String> = self
            .terms
            .iter()
            .map(|term| {
                let last = term.words.len() - 1;
                let words: Vec<String> = term
                    .words
                    .iter()
                    .enumerate()
                    .map(|(index, word)| {
                        let star = if term.prefix && index == last {
                            ":*"
                        } else {
                            ""
                        };
                        format!("'{word}'{star}")
                    })
                    .collect();
                format!("({})", words.join(" <-> "))
            })
            .collect();
        terms.join(" & ")
    }

    /// Whether `word` (normalized) is one the query looks for.
    fn wants(&self, word: &str) -> bool {
        self.terms.iter().any(|term| {
            let last = term.words.len() - 1;
            term.words.iter().enumerate().any(|(index, wanted)| {
                word == wanted
                    || (term.prefix && index == last && word.starts_with(wanted.as_str()))
            })
        })
    }
}

/// Whether `c` belongs to a word: letters, digits and the combining marks
/// that are part of letters in many scripts.
fn is_word_char(c: char) -> bool {
    c.is_alphanumeric()
        || matches!(c,
            '\u{0300}'..='\u{036F}' | '\u{0483}'..='\u{0489}' | '\u{0591}'..='\u{05C7}'
            | '\u{0610}'..='\u{061A}' | '\u{064B}'..='\u{065F}' | '\u{0900}'..='\u{0963}'
            | '\u{0966}'..='\u{0DFF}' | '\u{0E00}'..='\u{0EFF}' | '\u{1AB0}'..='\u{1AFF}'
            | '\u{1DC0}'..='\u{1DFF}' | '\u{20D0}'..='\u{20FF}' | '\u{FE20}'..='\u{FE2F}')
}

/// The words of `text` with their byte offsets.
fn words(text: &str) -> impl Iterator<Item = (usize, &str)> {
    let mut rest = text.char_indices().peekable();
    std::iter::from_fn(move || {
        while rest.peek().is_some_and(|(_, c)| !is_word_char(*c)) {
            rest.next();
        }
        let (start, _) = *rest.peek()?;
        let mut end = start;
        while let Some((at, c)) = rest.peek().copied() {
            if !is_word_char(c) {
                break;
            }
            end = at + c.len_utf8();
            rest.next();
        }
        Some((start, &text[start..end]))
    })
}

fn normalize(word: &str) -> String {
    word.to_lowercase()
}

/// The words `message` is indexed by, space-separated (empty when it has no
/// text part).
pub(crate) fn index_text(message: &Message) -> String {
    let mut out = String::new();
    for part in &message.parts {
        let Part::Text { text } = part else {
            continue;
        };
        for (_, word) in words(text) {
            if word.chars().count() > MAX_WORD_CHARS {
                continue;
            }
            let word = normalize(word);
            if out.len() + word.len() + 1 > INDEXED_BYTES {
                return out;
            }
            if !out.is_empty() {
                out.push(' ');
            }
            out.push_str(&word);
        }
    }
    out
}

/// The snippet of `message` around its first wanted word, and where the
/// wanted words are in it.
pub(crate) fn snippet(message: &Message, query: &Parsed) -> (String, Vec<(usize, usize)>) {
    let text: Vec<&str> = message.parts.iter().filter_map(Part::as_text).collect();
    let text = text.join("\n");
    let first = words(&text)
        .find(|(_, word)| query.wants(&normalize(word)))
        .map_or(0, |(at, _)| at);
    // Start a little before the match, at a word's start.
    let lead_start = text[..first]
        .char_indices()
        .rev()
        .nth(SNIPPET_LEAD.saturating_sub(1))
        .map_or(0, |(at, _)| at);
    let start = if lead_start == 0 {
        0
    } else {
        // Skip a word cut in the middle.
        let cut = text[..lead_start]
            .chars()
            .next_back()
            .is_some_and(is_word_char);
        let mut lead = words(&text[lead_start..first]);
        if cut { lead.nth(1) } else { lead.next() }.map_or(first, |(at, _)| lead_start + at)
    };
    let end = text[start..]
        .char_indices()
        .nth(SNIPPET_CHARS)
        .map_or(text.len(), |(at, _)| start + at);
    let mut snippet = String::new();
    if start > 0 {
        snippet.push('…');
    }
    snippet.push_str(
        &text[start..end]
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" "),
    );
    if end < text.len() {
        snippet.push('…');
    }
    let highlights = words(&snippet)
        .filter(|(_, word)| query.wants(&normalize(word)))
        .map(|(at, word)| (at, at + word.len()))
        .collect();
    (snippet, highlights)
}

impl Store {
    /// The messages matching `query`, newest first (by when they were
    /// stored), each with a snippet and the conversations whose thread
    /// contains it. A query the parser refuses is
    /// [`StoreError::Search`](crate::StoreError::Search); a conversation filter naming no conversation
    /// is [`StoreError::ConversationNotFound`](crate::StoreError::ConversationNotFound).
    pub fn search(&self, query: &SearchQuery) -> Result<SearchResults> {
        self.wait(self.nonblocking().search(query))
    }

    /// Up to `cap` conversations whose thread holds `node`, none of
    /// `excluding` (what a deletion reports as still sharing its messages).
    pub(crate) fn containing_conversations(
        &self,
        node: NodeId,
        cap: usize,
        excluding: &[String],
    ) -> Result<Vec<ConversationRef>> {
        self.wait(self.backend().containing(node, cap, excluding))
    }
}

impl AsyncStore<'_> {
    /// [`Store::search`].
    pub async fn search(&self, query: &SearchQuery) -> Result<SearchResults> {
        let parsed = Parsed::parse(&query.text)?;
        let limit = query.limit.min(MAX_LIMIT);
        let within = match &query.conversation {
            Some(id) => {
                let conversation = self.conversation(id).await?;
                let Some(head) = conversation.head else {
                    return Ok(SearchResults {
                        matches: Vec::new(),
                        truncated: false,
                    });
                };
                Some((
                    head,
                    ConversationRef {
                        id: conversation.id,
                        name: conversation.name,
                    },
                ))
            }
            None => None,
        };
        if limit == 0 {
            return Ok(SearchResults {
                matches: Vec::new(),
                truncated: false,
            });
        }
        let head = within.as_ref().map(|(head, _)| *head);
        let backend = self.store.backend();
        let mut found = backend
            .search_nodes(&parsed, query.role, head, query.replays, limit + 1)
            .await?;
        let truncated = found.len() > limit;
        found.truncate(limit);
        let mut matches = Vec::with_capacity(found.len());
        for (node, message) in found {
            let conversations = match &within {
                Some((_, conversation)) => vec![conversation.clone()],
                None => {
                    backend
                        .containing(node, CONVERSATIONS_PER_MATCH, &[])
                        .await?
                }
            };
            let (snippet, highlights) = snippet(&message, &parsed);
            matches.push(SearchMatch {
                node,
                role: message.role,
                snippet,
                highlights,
                conversations,
            });
        }
        Ok(SearchResults { matches, truncated })
    }

    /// Up to `cap` conversations whose thread holds `node` (found by its
    /// lane first, as search finds them).
    pub async fn conversations_containing(
        &self,
        node: NodeId,
        cap: usize,
    ) -> Result<Vec<ConversationRef>> {
        self.store.backend().containing(node, cap, &[]).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Parsed, SearchError> {
        Parsed::parse(text)
    }

    #[test]
    fn a_message_is_held_by_the_phrase_of_its_indexed_words() {
        let message = Message::new(
            Role::User,
            vec![
                Part::text("My card is 4111-1111, call me!"),
                Part::text("Bye."),
            ],
        );
        let query = SearchQuery::holding_text_of(&message).unwrap();
        assert_eq!(query.text, r#""my card is 4111 1111 call me bye""#);
        assert_eq!(parse(&query.text).unwrap().terms.len(), 1);
        let long = Message::new(Role::User, vec![Part::text("word ".repeat(1000))]);
        let query = SearchQuery::holding_text_of(&long).unwrap();
        assert!(query.text.len() <= MAX_QUERY_BYTES, "{}", query.text.len());
        assert!(parse(&query.text).is_ok());
        let none = Message::new(Role::User, vec![Part::text("…!?")]);
        assert_eq!(SearchQuery::holding_text_of(&none), None);
    }

    #[test]
    fn queries_parse_into_words_phrases_and_prefixes() {
        let parsed = parse(r#"Kernel "Panic at" deploy* e-mail"#).unwrap();
        let terms: Vec<(Vec<&str>, bool)> = parsed
            .terms
            .iter()
            .map(|t| (t.words.iter().map(String::as_str).collect(), t.prefix))
            .collect();
        assert_eq!(
            terms,
            vec![
                (vec!["kernel"], false),
                (vec!["panic", "at"], false),
                (vec!["deploy"], true),
                (vec!["e", "mail"], false),
            ]
        );
        assert_eq!(
            parsed.fts5(),
            r#""kernel" AND "panic at" AND "deploy" * AND "e mail""#
        );
    }

    #[test]
    fn bad_queries_are_typed_errors() {
        assert_eq!(parse(r#"say "hello"#), Err(SearchError::UnclosedQuote));
        assert_eq!(parse("*"), Err(SearchError::NoWords));
        assert_eq!(parse("  !!! ()"), Err(SearchError::NoWords));
        assert_eq!(parse(""), Err(SearchError::NoWords));
        assert!(matches!(
            parse(&"a".repeat(MAX_QUERY_BYTES + 1)),
            Err(SearchError::TooLong { .. })
        ));
        let many = vec!["w"; MAX_TERMS + 1].join(" ");
        assert!(matches!(
            parse(&many),
            Err(SearchError::TooManyTerms { .. })
        ));
        // Quotes and operators of either engine are only ever separators.
        let odd = parse(r"a' OR 1=1 -- NEAR(x y) ^z").unwrap();
        assert!(
            odd.fts5()
                .chars()
                .all(|c| c.is_alphanumeric() || " \"*".contains(c))
        );
    }

    #[test]
    fn index_text_keeps_words_of_text_parts_only() {
        let message = Message::new(
            Role::User,
            vec![
                Part::text("Héllo, WORLD! naïve café"),
                Part::Attachment(skein_core::message::Attachment {
                    media_type: "text/plain".into(),
                    data: b"secret words".to_vec(),
                }),
                Part::text(format!("{} tail", "x".repeat(MAX_WORD_CHARS + 1))),
            ],
        );
        assert_eq!(index_text(&message), "héllo world naïve café tail");
    }

    #[test]
    fn snippets_show_the_first_match_and_mark_it() {
        let text = format!(
            "{} the needle is here {}",
            "hay ".repeat(100),
            "straw ".repeat(100)
        );
        let message = Message::user(text);
        let query = parse("NEEDLE").unwrap();
        let (snippet, highlights) = snippet(&message, &query);
        assert!(
            snippet.starts_with('…') && snippet.ends_with('…'),
            "{snippet}"
        );
        assert_eq!(highlights.len(), 1);
        let (from, to) = highlights[0];
        assert_eq!(&snippet[from..to], "needle");
        // The snippet starts at a whole word.
        assert!(snippet.starts_with("…hay "), "{snippet}");
        let cut = Message::user(format!("{} needle", "abcdefghij".repeat(20)));
        let (snippet, _) = super::snippet(&cut, &query);
        assert_eq!(snippet, "…needle", "a word cut at the lead is left out");
        let prefix = parse("stra*").unwrap();
        let (snippet, highlights) = super::snippet(&message, &prefix);
        assert!(!highlights.is_empty());
        assert!(snippet[highlights[0].0..].starts_with("straw"));
    }
}
