/*!
What the command line names for a turn, read within `--max-input`: files
given to `--source ID=@FILE`, `--schema FILE`, `-f` and `-a`, and what is
piped on stdin. The limit bounds all of one command's inputs together,
not each: a read that would take the total past it stops there with an
error naming the input and the limit, so `--source x=@/dev/zero` cannot
fill memory, nor can a thousand `-a` of a few megabytes each.
*/

use crate::flags::{PartsArgs, SourceText};
use anyhow::{Context as _, Result, anyhow, bail};
use skein::core::Attachment;
use skein::{Message, Part, Role, TurnInput};
use std::io::{IsTerminal, Read};
use std::path::Path;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

static LIMIT: OnceLock<u64> = OnceLock::new();
/// What this command has read of its inputs so far, in bytes.
static READ: AtomicU64 = AtomicU64::new(0);

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
    let bytes = read_bytes_capped(reader, what)?;
    String::from_utf8(bytes).map_err(|_| anyhow!("{what} is not UTF-8 text"))
}

/// Read all of `reader`, refusing to take this command's inputs past the
/// limit.
fn read_bytes_capped(reader: impl Read, what: &str) -> Result<Vec<u8>> {
    read_within(reader, what, limit(), &READ)
}

/// Read all of `reader` into the total `read`, refusing to take it past
/// `limit` bytes.
fn read_within(reader: impl Read, what: &str, limit: u64, read: &AtomicU64) -> Result<Vec<u8>> {
    let before = read.load(Ordering::Relaxed);
    let room = limit.saturating_sub(before);
    let mut bytes = Vec::new();
    reader
        .take(room.saturating_add(1))
        .read_to_end(&mut bytes)
        .with_context(|| format!("cannot read {what}"))?;
    if bytes.len() as u64 > room {
        if before == 0 {
            bail!(
                "{what} is larger than {} (the --max-input limit); raise it with --max-input \
                 BYTES (or SKEIN_MAX_INPUT) if you mean it",
                size(limit)
            );
        }
        bail!(
            "{what} takes this command's inputs past {} all together (the --max-input limit, \
             {} read before it); raise it with --max-input BYTES (or SKEIN_MAX_INPUT) if you \
             mean it",
            size(limit),
            size(before)
        );
    }
    read.fetch_add(bytes.len() as u64, Ordering::Relaxed);
    Ok(bytes)
}

/// A file named on the command line, as text.
fn file(path: &Path, what: &str) -> Result<String> {
    let bytes = file_bytes(path, what)?;
    String::from_utf8(bytes).map_err(|_| anyhow!("{what} {} is not UTF-8 text", path.display()))
}

/// A file named on the command line.
fn file_bytes(path: &Path, what: &str) -> Result<Vec<u8>> {
    let what = format!("{what} {}", path.display());
    if path.is_dir() {
        bail!("{what} is a directory: give a file");
    }
    let file = std::fs::File::open(path).with_context(|| format!("cannot open {what}"))?;
    read_bytes_capped(file, &what)
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

/// What is piped on stdin, as text (`None` on a terminal).
fn piped_text() -> Result<Option<String>> {
    let stdin = std::io::stdin();
    if stdin.is_terminal() {
        return Ok(None);
    }
    read_capped(stdin.lock(), "the text on stdin").map(Some)
}

/// The message a turn sends. Without `-a` or `-f` it is the turn's text
/// ([`turn_text`]); with them, a message of parts ([`parts_message`]).
pub fn turn_input(text: Option<String>, parts: &PartsArgs) -> Result<TurnInput> {
    if parts.is_empty() {
        return Ok(TurnInput::text(turn_text(text)?));
    }
    Ok(TurnInput::from(parts_message(text, parts)?))
}

/// The user message of a turn that may have none (one rendering a
/// configured prompt): as [`turn_input`], but `None` when there is neither
/// text nor a part.
pub fn optional_turn_message(text: Option<String>, parts: &PartsArgs) -> Result<Option<Message>> {
    if parts.is_empty() {
        return Ok(optional_turn_text(text)?.map(Message::user));
    }
    parts_message(text, parts).map(Some)
}

/// One user message of parts: each fragment's text, then the text (TEXT
/// with piped text after it; either may be left out), then each
/// attachment. `-a -` reads the attachment from stdin, which then adds no
/// text.
fn parts_message(text: Option<String>, parts: &PartsArgs) -> Result<Message> {
    let from_stdin = |path: &Path| path == Path::new("-");
    let typed: Vec<(&Path, &str)> = parts
        .typed_attachments
        .chunks(2)
        .map(|pair| match pair {
            [path, media_type] => Ok((Path::new(path.as_str()), media_type.as_str())),
            _ => Err(anyhow!("--at takes a FILE and a TYPE")),
        })
        .collect::<Result<_>>()?;
    let stdin_reads = parts
        .attachments
        .iter()
        .filter(|path| from_stdin(path))
        .count()
        + typed.iter().filter(|(path, _)| from_stdin(path)).count();
    if stdin_reads > 1 {
        bail!("stdin can be attached once: give `-a -` (or `--at - TYPE`) only once");
    }
    let text = if stdin_reads == 1 {
        text
    } else {
        optional_turn_text(text)?
    };
    let mut message = Vec::new();
    for path in &parts.fragments {
        message.push(Part::text(file(path, "the fragment")?));
    }
    message.extend(text.filter(|text| !text.is_empty()).map(Part::text));
    let sniffed = parts.attachments.iter().map(|path| (path.as_path(), None));
    let given = typed
        .iter()
        .map(|(path, media_type)| (*path, Some(*media_type)));
    for (path, media_type) in sniffed.chain(given) {
        message.push(Part::Attachment(attachment(path, media_type)?));
    }
    Ok(Message::new(Role::User, message))
}

/// The attachment `-a PATH` (or `--at PATH TYPE`) names.
fn attachment(path: &Path, media_type: Option<&str>) -> Result<Attachment> {
    let (data, shown, name) = if path == Path::new("-") {
        let data = read_bytes_capped(std::io::stdin().lock(), "the attachment on stdin")?;
        (data, "the attachment on stdin".to_string(), None)
    } else {
        let data = file_bytes(path, "the attachment")?;
        (
            data,
            format!("the attachment {}", path.display()),
            Some(path),
        )
    };
    if data.is_empty() {
        bail!("{shown} is empty");
    }
    let media_type = match media_type {
        Some(given) if skein::media::is_media_type(given) => given.to_ascii_lowercase(),
        Some(given) => bail!("`{given}` is not a media type: write TYPE/SUBTYPE, e.g. image/png"),
        None => match skein::media::sniff(&data, name) {
            Some(sniffed) => sniffed.to_string(),
            None => bail!(
                "cannot tell what kind of file {shown} is: give its type with --at {} TYPE (e.g. image/png)",
                path.display()
            ),
        },
    };
    Ok(Attachment { media_type, data })
}

/// The text of a turn: TEXT, with text piped on stdin added after a blank
/// line; stdin alone without TEXT. Empty stdin without TEXT is an error.
pub fn turn_text(text: Option<String>) -> Result<String> {
    match (text, piped_text()?) {
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
    Ok(match (text, piped_text()?) {
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
    fn the_limit_bounds_all_inputs_together() {
        let read = AtomicU64::new(0);
        let six = [b'a'; 600];
        assert_eq!(
            read_within(&six[..], "the first", 1000, &read)
                .unwrap()
                .len(),
            600
        );
        let error = read_within(&six[..], "the second", 1000, &read)
            .unwrap_err()
            .to_string();
        assert_eq!(
            error,
            "the second takes this command's inputs past 1000 bytes all together (the \
             --max-input limit, 600 bytes read before it); raise it with --max-input BYTES (or \
             SKEIN_MAX_INPUT) if you mean it"
        );
        // What was refused is not counted: the rest of the room is still there.
        assert_eq!(
            read_within(&six[..400], "the third", 1000, &read)
                .unwrap()
                .len(),
            400
        );
        assert!(read_within(&b"x"[..], "the fourth", 1000, &read).is_err());
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
