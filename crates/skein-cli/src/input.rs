/*!
What the command line names for a turn, read within `--max-input`: files
given to `--source ID=@FILE`, `--schema FILE`, `-f` and `-a` (which also
take an http(s) URL, fetched), `replay --add-tool FILE`, and what is piped
on stdin. The limit
bounds all of one command's inputs together, not each: a read that would
take the total past it stops there with an error naming the input and the
limit, so `--source x=@/dev/zero` (or an endless download) cannot fill
memory, nor can a thousand `-a` of a few megabytes each.
*/

use crate::commands::common::turn_options::PartsArgs;
use crate::commands::prompt::SourceText;
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

/// The limit (`--max-input`), in bytes.
pub fn limit() -> u64 {
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
        return Err(over_limit(what, limit, before));
    }
    read.fetch_add(bytes.len() as u64, Ordering::Relaxed);
    Ok(bytes)
}

/// Why `what` was refused: it would take the inputs read `before` it past
/// `limit`.
fn over_limit(what: &str, limit: u64, before: u64) -> anyhow::Error {
    if before == 0 {
        return anyhow!(
            "{what} is larger than {} (the --max-input limit); raise it with --max-input \
             BYTES (or SKEIN_MAX_INPUT) if you mean it",
            size(limit)
        );
    }
    anyhow!(
        "{what} takes this command's inputs past {} all together (the --max-input limit, \
         {} read before it); raise it with --max-input BYTES (or SKEIN_MAX_INPUT) if you \
         mean it",
        size(limit),
        size(before)
    )
}

/// A file named on the command line, as text.
pub fn text_file(path: &Path, what: &str) -> Result<String> {
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
            SourceText::File(path) => Ok((id, text_file(&path, "the --source file")?)),
        })
        .collect()
}

/// A `--schema` value: JSON when it is valid JSON, else a file of JSON,
/// else `llm`'s concise syntax (`name, age int`, see [`concise_schema`]);
/// either way a JSON object.
pub fn schema(value: &str) -> Result<serde_json::Value> {
    let schema: serde_json::Value = match serde_json::from_str(value) {
        Ok(schema) => schema,
        Err(json_error) => {
            let path = Path::new(value);
            if !path.exists() {
                if let Some(concise) = concise_schema(value) {
                    return concise;
                }
                return Err(crate::exit::usage(format!(
                    "--schema `{value}` is neither JSON ({json_error}), nor a file that exists, \
                     nor fields as `name, age int, bio: a description`: give a JSON Schema object, \
                     the path of a file holding one, or fields"
                )));
            }
            let text = text_file(path, "the --schema file")?;
            serde_json::from_str(&text)
                .with_context(|| format!("the --schema file {} is not JSON", path.display()))?
        }
    };
    if !schema.is_object() {
        return Err(crate::exit::usage(format!(
            "--schema `{value}` is not a JSON Schema: a schema is a JSON object, `{{...}}`"
        )));
    }
    Ok(schema)
}

/// `llm`'s concise schema: fields separated by commas (or by newlines,
/// when there are any), each `name [type][: description]`, the type one of
/// `str` (the default), `int`, `float`, `bool`; every field required.
/// `None` when `value` does not read as fields (a name that is not a word,
/// as a mistyped file name is not), so the caller can say what it is not.
fn concise_schema(value: &str) -> Option<Result<serde_json::Value>> {
    let separator = if value.contains('\n') { '\n' } else { ',' };
    let mut properties = serde_json::Map::new();
    let mut required = Vec::new();
    for field in value
        .split(separator)
        .map(str::trim)
        .filter(|f| !f.is_empty())
    {
        let (declaration, description) = match field.split_once(':') {
            Some((declaration, description)) => (declaration.trim(), Some(description.trim())),
            None => (field, None),
        };
        let mut words = declaration.split_whitespace();
        let name = words.next()?;
        let is_word = name
            .chars()
            .next()
            .is_some_and(|c| c.is_alphabetic() || c == '_')
            && name.chars().all(|c| c.is_alphanumeric() || c == '_');
        if !is_word {
            return None;
        }
        let kind = match words.next() {
            None | Some("str") => "string",
            Some("int") => "integer",
            Some("float") => "number",
            Some("bool") => "boolean",
            Some(other) => {
                return Some(Err(crate::exit::usage(format!(
                    "--schema field `{name}` has the type `{other}`: the types are str, int, float and bool"
                ))));
            }
        };
        if let Some(extra) = words.next() {
            return Some(Err(crate::exit::usage(format!(
                "--schema field `{field}` has `{extra}` after its type: write `name [type][: description]`"
            ))));
        }
        let mut property = serde_json::json!({ "type": kind });
        if let Some(description) = description.filter(|d| !d.is_empty()) {
            property["description"] = description.into();
        }
        if properties.insert(name.to_string(), property).is_some() {
            return Some(Err(crate::exit::usage(format!(
                "--schema names the field `{name}` twice"
            ))));
        }
        required.push(name.to_string());
    }
    if properties.is_empty() {
        return None;
    }
    Some(Ok(serde_json::json!({
        "type": "object",
        "properties": properties,
        "required": required,
    })))
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
pub async fn turn_input(text: Option<String>, parts: &PartsArgs) -> Result<TurnInput> {
    if parts.is_empty() {
        return Ok(TurnInput::text(turn_text(text)?));
    }
    Ok(TurnInput::from(parts_message(text, parts).await?))
}

/// The user message of a turn that may have none (one rendering a
/// configured prompt): as [`turn_input`], but `None` when there is neither
/// text nor a part.
pub async fn optional_turn_message(
    text: Option<String>,
    parts: &PartsArgs,
) -> Result<Option<Message>> {
    if parts.is_empty() {
        return Ok(optional_turn_text(text)?.map(Message::user));
    }
    parts_message(text, parts).await.map(Some)
}

/// One user message of parts: each fragment's text, then the text (TEXT
/// with piped text after it; either may be left out), then each
/// attachment. `-a -` reads the attachment from stdin, which then adds no
/// text.
async fn parts_message(text: Option<String>, parts: &PartsArgs) -> Result<Message> {
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
        message.push(Part::text(fragment(path).await?));
    }
    message.extend(text.filter(|text| !text.is_empty()).map(Part::text));
    let sniffed = parts.attachments.iter().map(|path| (path.as_path(), None));
    let given = typed
        .iter()
        .map(|(path, media_type)| (*path, Some(*media_type)));
    for (path, media_type) in sniffed.chain(given) {
        message.push(Part::Attachment(attachment(path, media_type).await?));
    }
    Ok(Message::new(Role::User, message))
}

/// The fragment `-f PATH` names: a file, or a URL fetched; UTF-8 text.
async fn fragment(path: &Path) -> Result<String> {
    let Some(url) = url_of(path) else {
        return text_file(path, "the fragment");
    };
    let (data, _) = fetch(url, "the fragment").await?;
    String::from_utf8(data).map_err(|_| anyhow!("the fragment {url} is not UTF-8 text"))
}

/// The attachment `-a PATH` (or `--at PATH TYPE`) names: a file, stdin
/// (`-`), or a URL fetched.
async fn attachment(path: &Path, media_type: Option<&str>) -> Result<Attachment> {
    let (data, shown, name, served_type) = if path == Path::new("-") {
        let data = read_bytes_capped(std::io::stdin().lock(), "the attachment on stdin")?;
        (data, "the attachment on stdin".to_string(), None, None)
    } else if let Some(url) = url_of(path) {
        let (data, served) = fetch(url, "the attachment").await?;
        // Its name, for the extension: the URL's path without the query.
        let name = url.split(['?', '#']).next().unwrap_or(url);
        (
            data,
            format!("the attachment {url}"),
            Some(Path::new(name)),
            served,
        )
    } else {
        let data = file_bytes(path, "the attachment")?;
        (
            data,
            format!("the attachment {}", path.display()),
            Some(path),
            None,
        )
    };
    if data.is_empty() {
        bail!("{shown} is empty");
    }
    let media_type = match media_type {
        Some(given) if skein::media::is_media_type(given) => given.to_ascii_lowercase(),
        Some(given) => bail!("`{given}` is not a media type: write TYPE/SUBTYPE, e.g. image/png"),
        None => match skein::media::sniff(&data, name)
            .map(str::to_string)
            .or(served_type)
        {
            Some(sniffed) => sniffed,
            None => bail!(
                "cannot tell what kind of file {shown} is: give its type with --at {} TYPE (e.g. image/png)",
                path.display()
            ),
        },
    };
    Ok(Attachment { media_type, data })
}

/// The URL `path` is, when it is an http(s) URL.
fn url_of(path: &Path) -> Option<&str> {
    path.to_str()
        .filter(|text| text.starts_with("http://") || text.starts_with("https://"))
}

/// The body of `url` within the limit, and the media type the server gave
/// it. A status that is not success is an error naming it.
async fn fetch(url: &str, what: &str) -> Result<(Vec<u8>, Option<String>)> {
    let what = format!("{what} {url}");
    skein::providers::http::install_crypto_provider();
    let client = reqwest::Client::builder()
        .connect_timeout(std::time::Duration::from_secs(10))
        .timeout(std::time::Duration::from_secs(120))
        .user_agent(concat!("skein/", env!("CARGO_PKG_VERSION")))
        .build()
        .with_context(|| format!("cannot fetch {what}"))?;
    let mut response = client
        .get(url)
        .send()
        .await
        .with_context(|| format!("cannot fetch {what}"))?;
    let status = response.status();
    if !status.is_success() {
        bail!("cannot fetch {what}: the server answered {status}");
    }
    let served = response
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.split(';').next())
        .map(|value| value.trim().to_ascii_lowercase())
        .filter(|value| skein::media::is_media_type(value));
    // A download counts toward the command's inputs like a file.
    let before = READ.load(Ordering::Relaxed);
    let room = limit().saturating_sub(before);
    let mut data = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .with_context(|| format!("cannot fetch {what}"))?
    {
        data.extend_from_slice(&chunk);
        if data.len() as u64 > room {
            return Err(over_limit(&what, limit(), before));
        }
    }
    READ.fetch_add(data.len() as u64, Ordering::Relaxed);
    Ok((data, served))
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

    #[test]
    fn a_concise_schema_is_llms_fields_syntax() {
        assert_eq!(
            schema("name, age int, score float, ok bool").unwrap(),
            serde_json::json!({
                "type": "object",
                "properties": {
                    "name": {"type": "string"}, "age": {"type": "integer"},
                    "score": {"type": "number"}, "ok": {"type": "boolean"}
                },
                "required": ["name", "age", "score", "ok"]
            })
        );
        // Newlines separate when there are any, so a description may hold commas.
        let described = schema("name: the dog's name, in full\nage int: in years").unwrap();
        assert_eq!(
            described["properties"]["name"]["description"],
            "the dog's name, in full"
        );
        assert_eq!(described["properties"]["age"]["type"], "integer");
        let bad_type = schema("age integer").unwrap_err().to_string();
        assert!(bad_type.contains("str, int, float and bool"), "{bad_type}");
        let twice = schema("a, a int").unwrap_err().to_string();
        assert!(twice.contains("twice"), "{twice}");
        let extra = schema("age int extra").unwrap_err().to_string();
        assert!(extra.contains("after its type"), "{extra}");
    }
}
