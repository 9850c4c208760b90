/*!
What the command line names for a turn, read within `--max-input`: files
given to `--source ID=@FILE` and `--schema FILE`, and text piped on stdin.
A read that would go past the limit stops there with an error naming the
input and the limit, so `--source x=@/dev/zero` cannot fill memory.
*/

use crate::flags::SourceText;
use anyhow::{Context as _, Result, anyhow, bail};
use std::io::{IsTerminal, Read};
use std::path::Path;
use std::sync::OnceLock;

static LIMIT: OnceLock<u64> = OnceLock::new();

/// Set the limit (`--max-input`) once, before any read.
pub fn set_limit(bytes: u64) {
    let _ = LIMIT.set(bytes);
}

fn limit() -> u64 {
    *LIMIT.get().unwrap_or(&(16 << 20))
}

/// `bytes` as people write sizes: `16 MiB`, `640 KiB`, `12 bytes`.
fn size(bytes: u64) -> String {
    match bytes {
        n if n >= 1 << 30 && n % (1 << 30) == 0 => format!("{} GiB", n >> 30),
        n if n >= 1 << 20 && n % (1 << 20) == 0 => format!("{} MiB", n >> 20),
        n if n >= 1 << 10 && n % (1 << 10) == 0 => format!("{} KiB", n >> 10),
        n => format!("{n} bytes"),
    }
}

/// Read all of `reader` as UTF-8 text, refusing more than the limit.
fn read_capped(reader: impl Read, what: &str) -> Result<String> {
    let limit = limit();
    let mut bytes = Vec::new();
    reader
        .take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .with_context(|| format!("cannot read {what}"))?;
    if bytes.len() as u64 > limit {
        bail!(
            "{what} is larger than {} (the --max-input limit); raise it with --max-input BYTES \
             (or SKEIN_MAX_INPUT) if you mean it",
            size(limit)
        );
    }
    String::from_utf8(bytes).map_err(|_| anyhow!("{what} is not UTF-8 text"))
}

/// A file named on the command line, as text.
fn file(path: &Path, what: &str) -> Result<String> {
    let what = format!("{what} {}", path.display());
    if path.is_dir() {
        bail!("{what} is a directory: give a file");
    }
    let file = std::fs::File::open(path).with_context(|| format!("cannot open {what}"))?;
    read_capped(file, &what)
}

/// The `--source` texts, files read.
pub fn sources(sources: Vec<(String, SourceText)>) -> Result<Vec<(String, String)>> {
    sources
        .into_iter()
        .map(|(id, text)| match text {
            SourceText::Inline(text) => Ok((id, text)),
            SourceText::File(path) => Ok((id, file(&path, "the --source file")?)),
        })
        .collect()
}

/// A `--schema` value: JSON when it is valid JSON, else a file of JSON;
/// either way a JSON object.
pub fn schema(value: &str) -> Result<serde_json::Value> {
    let schema: serde_json::Value = match serde_json::from_str(value) {
        Ok(schema) => schema,
        Err(json_error) => {
            let path = Path::new(value);
            if !path.exists() {
                bail!(
                    "--schema `{value}` is neither JSON ({json_error}) nor a file that exists: \
                     give a JSON Schema object, or the path of a file holding one"
                );
            }
            let text = file(path, "the --schema file")?;
            serde_json::from_str(&text)
                .with_context(|| format!("the --schema file {} is not JSON", path.display()))?
        }
    };
    if !schema.is_object() {
        bail!("--schema `{value}` is not a JSON Schema: a schema is a JSON object, `{{...}}`");
    }
    Ok(schema)
}

/// What is piped on stdin; `None` when stdin is a terminal.
fn piped() -> Result<Option<String>> {
    let stdin = std::io::stdin();
    if stdin.is_terminal() {
        return Ok(None);
    }
    read_capped(stdin.lock(), "the text on stdin").map(Some)
}

/// The text of a turn: TEXT, with text piped on stdin added after a blank
/// line; stdin alone without TEXT. Empty stdin without TEXT is an error.
pub fn turn_text(text: Option<String>) -> Result<String> {
    match (text, piped()?) {
        (Some(text), Some(piped)) if !piped.trim().is_empty() => Ok(format!("{text}\n\n{piped}")),
        (Some(text), _) => Ok(text),
        (None, None) => bail!("give the text as an argument, or pipe it on stdin"),
        (None, Some(piped)) if piped.trim().is_empty() => {
            bail!("stdin was empty: give the text as an argument, or pipe it on stdin")
        }
        (None, Some(piped)) => Ok(piped),
    }
}

/// The text of a turn that may have none (one rendering a configured
/// prompt): TEXT, with text piped on stdin added after a blank line; stdin
/// alone without TEXT; `None` when neither holds any text.
pub fn optional_turn_text(text: Option<String>) -> Result<Option<String>> {
    Ok(match (text, piped()?) {
        (Some(text), Some(piped)) if !piped.trim().is_empty() => Some(format!("{text}\n\n{piped}")),
        (Some(text), _) => Some(text),
        (None, Some(piped)) if !piped.trim().is_empty() => Some(piped),
        (None, _) => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_read_past_the_limit_stops_there_and_names_the_input() {
        let error = read_capped(std::io::repeat(b'a'), "the test input")
            .unwrap_err()
            .to_string();
        assert!(
            error.starts_with("the test input is larger than 16 MiB"),
            "{error}"
        );
        assert_eq!(read_capped(&b"small"[..], "x").unwrap(), "small");
    }

    #[test]
    fn a_schema_is_json_first_then_a_file() {
        assert!(schema(r#"{"type": "object"}"#).is_ok());
        let not_object = schema("true").unwrap_err().to_string();
        assert!(not_object.contains("is not a JSON Schema"), "{not_object}");
        let neither = schema("nonexistent.json").unwrap_err().to_string();
        assert!(neither.contains("neither JSON"), "{neither}");
    }
}
