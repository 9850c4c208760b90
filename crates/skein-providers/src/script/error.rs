/*!
[`ScriptError`]: why a rule file could not be loaded, and [`RuleLabel`],
which rule a problem is about.

Every message names the file (or `<inline script>`), the rule (index from 0
and name when it has one), the problem, and how to fix it.
*/

use std::fmt;
use std::path::PathBuf;

/// A rule's position in its file (numbered from 0) and its optional name.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RuleLabel {
    pub index: usize,
    pub name: Option<String>,
}

impl fmt::Display for RuleLabel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "rule {}", self.index)?;
        if let Some(name) = &self.name {
            write!(f, " (`{name}`)")?;
        }
        Ok(())
    }
}

/// Why a script could not be loaded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ScriptError {
    /// The file could not be read.
    #[error(
        "cannot read script file `{}`: {error}; fix: check the path{} and its permissions",
        .path.display(),
        if .path.is_relative() { " (it is relative to the working directory)" } else { "" }
    )]
    Read {
        path: PathBuf,
        error: std::io::Error,
    },
    /// The text is not TOML, or its top level is not a list of rules. The
    /// message names the place and the parser's complaint, never the text
    /// there: a file that is not a rule file may be anything.
    #[error(
        "script `{origin}` is not a valid rule file ({}{problem}); fix: write TOML whose only \
         top-level entries are `[[rules]]` tables",
        .line.map(|line| format!("line {line}: ")).unwrap_or_default()
    )]
    Syntax {
        origin: String,
        line: Option<usize>,
        problem: String,
    },
    /// A problem with the file as a whole.
    #[error("script `{origin}`: {problem}; fix: {fix}")]
    File {
        origin: String,
        problem: String,
        fix: String,
    },
    /// A rule is not valid.
    #[error("script `{origin}`, {rule}{}: {problem}; fix: {fix}", line_suffix(*.line))]
    Rule {
        origin: String,
        rule: RuleLabel,
        /// The line (from 1) the problem was found at, when known.
        line: Option<usize>,
        problem: String,
        fix: String,
    },
    /// A rule's `last_user_matches` pattern is not a valid regex.
    #[error("script `{origin}`, {rule}{}: `last_user_matches` pattern `{pattern}` is not a valid regular expression; fix: correct the pattern (Rust `regex` syntax); the parser said: {error}", line_suffix(*.line))]
    Regex {
        origin: String,
        rule: RuleLabel,
        line: Option<usize>,
        pattern: String,
        error: regex::Error,
    },
}

impl ScriptError {
    /// The rule the problem is about, when it is about one.
    pub fn rule(&self) -> Option<&RuleLabel> {
        match self {
            ScriptError::Rule { rule, .. } | ScriptError::Regex { rule, .. } => Some(rule),
            _ => None,
        }
    }
}

fn line_suffix(line: Option<usize>) -> String {
    line.map(|line| format!(", line {line}"))
        .unwrap_or_default()
}
