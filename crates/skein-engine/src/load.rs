/*!
Loading a [`Catalog`] from a directory of TOML files: [`load_dir`].

# Layout

```text
config/
├── prompts/              one prompt per `.toml` file
│   ├── summarize.toml
│   ├── summarize-v2.toml
│   ├── style.md          (artifacts, schemas: other files are left alone)
│   └── answer.schema.json
├── profiles.toml         `[[profile]]` tables
├── profiles/<name>.toml  (optional, same format as profiles.toml)
├── backends.toml         `[[backend]]` tables
└── backends/<name>.toml  (optional, same format as backends.toml)
```

Every part is optional: a missing `prompts/`, `profiles.toml` or
`backends/` is simply empty. The directory itself must exist. Files are read
in a fixed order (`backends.toml`, then `backends/<name>.toml` sorted by name;
the same for profiles; then `prompts/<name>.toml` sorted by name), so the same
directory always loads the same way and reports the same first error. Only
regular files ending in `.toml` whose names do not start with `.` are read;
subdirectories of `prompts/` are not searched.

## A prompt file (`prompts/summarize.toml`)

```toml
id = "summarize"
version = 2                       # default 1
default_profile = "quick"         # optional; must name a loaded profile
session_id = "summary-{{ topic }}" # optional template over the variables

[[messages]]
role = "system"
template = "You write summaries. Style guide:\n{{ artifacts.style }}"
cache = "ephemeral"               # optional: a cache hint on this message

[[messages]]
role = "user"
template = "Summarize {{ topic }} in {{ words }} words."

[[variables]]
name = "topic"
description = "what to summarize"

[[variables]]
name = "words"
required = false
default = 50

[artifacts]                       # read at render time, not at load time
style = "style.md"                # relative to this file's directory

[output_contract]                 # a JSON Schema, written as TOML
type = "object"
required = ["summary"]
properties.summary.type = "string"
```

Instead of an inline `[output_contract]`, a prompt may name a JSON file:
`output_contract_file = "answer.schema.json"` (relative to the prompt
file), which is read and parsed when the directory loads. Giving both is an
error. Either way the contract must be a valid JSON Schema.

## A profiles file (`profiles.toml` or `profiles/<name>.toml`)

```toml
[[profile]]
name = "quick"
backend = "echo"                  # must name a loaded backend
model = "echo"
repair_attempts = 1               # default 2
credential = "default"            # "default" | "none" | "explicit" | { env = "VAR" }
options = { temperature = 0.2, max_tokens = 256 }
```

## A backends file (`backends.toml` or `backends/<name>.toml`)

```toml
[[backend]]
name = "echo"
kind = "echo"
capacity = 8                      # concurrent runs, default 4, at least 1

[[backend]]
name = "script"
kind = "scripted"
script = "rules/replies.toml"     # required; relative to this file

[[backend]]
name = "small"
kind = "local"
path = "models/small.gguf"        # optional; relative to this file

[[backend]]
name = "openai"
kind = "openai"                   # or "anthropic"
base_url = "http://localhost:8080/v1"  # optional
```

`script` is only for `scripted`, `path` only for `local`, `base_url` only
for `openai` and `anthropic`. Script and model files are not opened at
load time (the backend opens them when it is first used).

# Errors

Every failure is an [`EngineError::PromptLoad`] (for the directory itself,
`prompts/` and prompt files) or an [`EngineError::ProfileLoad`] (for
profile and backend files) whose `file` is the offending file, whose `key`
is the key path inside it (`profile[1].backend`, `messages[0].role`) when
there is one, and whose `problem` says what is wrong, starting with the
line (and column) where TOML gives one. This covers TOML syntax errors,
unknown or missing keys, values of the wrong type, duplicate prompt
`(id, version)`s, duplicate profile or backend names, a profile naming an
unknown backend, a prompt whose `default_profile` names an unknown profile,
and an `output_contract_file` that cannot be read or parsed.
*/

use crate::config::{BackendDef, BackendKind, Catalog, Profile, PromptDef};
use crate::error::{EngineError, Result};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::ops::Range;
use std::path::{Path, PathBuf};
use toml::Spanned;
use toml::de::{DeTable, DeValue};

/// Load every prompt, profile and backend under `dir` (see the
/// [module documentation](self) for the layout) into a [`Catalog`],
/// checking that names are unique and that references resolve.
pub fn load_dir(dir: &Path) -> Result<Catalog> {
    let dir = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
    if !dir.is_dir() {
        let problem = if dir.exists() {
            "the configuration path is not a directory"
        } else {
            "the configuration directory does not exist"
        };
        return Err(Section::Prompt.error(&dir, None, problem.to_string()));
    }
    let mut catalog = Catalog::new();
    let mut origins = Origins::default();
    for path in config_files(&dir, "backends", Section::Profile)? {
        load_backends(&path, &mut catalog, &mut origins)?;
    }
    for path in config_files(&dir, "profiles", Section::Profile)? {
        load_profiles(&path, &mut catalog, &mut origins)?;
    }
    for path in toml_files(&dir.join("prompts"), Section::Prompt)? {
        load_prompt(&path, &mut catalog, &mut origins)?;
    }
    Ok(catalog)
}

/// Which error variant a file's problems become.
#[derive(Clone, Copy, Debug)]
enum Section {
    Prompt,
    Profile,
}

impl Section {
    fn error(self, file: &Path, key: Option<String>, problem: String) -> EngineError {
        let file = Some(file.to_path_buf());
        match self {
            Section::Prompt => EngineError::PromptLoad { file, key, problem },
            Section::Profile => EngineError::ProfileLoad { file, key, problem },
        }
    }
}

/// Where each name was first defined, for duplicate and reference errors.
#[derive(Default)]
struct Origins {
    backends: BTreeMap<String, Origin>,
    profiles: BTreeMap<String, Origin>,
    prompts: BTreeMap<(String, u32), Origin>,
}

struct Origin {
    file: PathBuf,
    line: Option<usize>,
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.file.display())?;
        if let Some(line) = self.line {
            write!(f, ", line {line}")?;
        }
        Ok(())
    }
}

/// `NAME.toml` (if it is a file), then `NAME/*.toml` sorted.
fn config_files(dir: &Path, name: &str, section: Section) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    let single = dir.join(format!("{name}.toml"));
    if single.is_file() {
        files.push(single);
    } else if single.exists() {
        return Err(section.error(&single, None, "expected a file".into()));
    }
    files.extend(toml_files(&dir.join(name), section)?);
    Ok(files)
}

/// The `*.toml` files directly in `dir`, sorted; none when `dir` is absent.
fn toml_files(dir: &Path, section: Section) -> Result<Vec<PathBuf>> {
    if !dir.exists() {
        return Ok(Vec::new());
    }
    if !dir.is_dir() {
        return Err(section.error(dir, None, "expected a directory".into()));
    }
    let unreadable = |error: std::io::Error| {
        section.error(dir, None, format!("cannot list the directory: {error}"))
    };
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(unreadable)? {
        let path = entry.map_err(unreadable)?.path();
        let name = path
            .file_name()
            .and_then(|name| name.to_str())
            .unwrap_or("");
        if name.starts_with('.') || path.extension().is_none_or(|extension| extension != "toml") {
            continue;
        }
        if path.is_file() {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

/// One segment of a key path.
#[derive(Clone, Debug)]
enum Seg {
    Key(String),
    Index(usize),
}

fn key(name: &str) -> Seg {
    Seg::Key(name.to_string())
}

/// `profile[1].options.temperature`, quoting keys that are not bare.
fn render_path(path: &[Seg]) -> String {
    let mut out = String::new();
    for seg in path {
        match seg {
            Seg::Key(name) => {
                if !out.is_empty() {
                    out.push('.');
                }
                let bare = !name.is_empty()
                    && name
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
                if bare {
                    out.push_str(name);
                } else {
                    let _ = write!(out, "{name:?}");
                }
            }
            Seg::Index(index) => {
                let _ = write!(out, "[{index}]");
            }
        }
    }
    out
}

/// A TOML file's text, and how to report problems in it.
struct Source {
    path: PathBuf,
    text: String,
    section: Section,
}

impl Source {
    fn read(path: &Path, section: Section) -> Result<Source> {
        let text = std::fs::read_to_string(path)
            .map_err(|error| section.error(path, None, format!("cannot read the file: {error}")))?;
        Ok(Source {
            path: path.to_path_buf(),
            text,
            section,
        })
    }

    fn fail(&self, key: Option<String>, problem: String) -> EngineError {
        self.section.error(&self.path, key, problem)
    }

    /// An error at `path`, with the line where that key is written.
    fn fail_at(
        &self,
        tree: &DeTable<'_>,
        path: &[Seg],
        problem: impl std::fmt::Display,
    ) -> EngineError {
        self.fail_near(tree, path, path, problem)
    }

    /// An error about `path`, with the line where `near` is written (for a
    /// key that is missing).
    fn fail_near(
        &self,
        tree: &DeTable<'_>,
        path: &[Seg],
        near: &[Seg],
        problem: impl std::fmt::Display,
    ) -> EngineError {
        let problem = match self.line_of(tree, near) {
            Some(line) => format!("line {line}: {problem}"),
            None => problem.to_string(),
        };
        self.fail(Some(render_path(path)), problem)
    }

    fn line_of(&self, tree: &DeTable<'_>, path: &[Seg]) -> Option<usize> {
        find(tree, path).map(|span| position(&self.text, span.start).0)
    }

    /// The document's tree, or its syntax error.
    fn parse(&self) -> Result<Spanned<DeTable<'_>>> {
        DeTable::parse(&self.text).map_err(|error| {
            let span = error.span();
            // A partial parse often still tells which key was being written.
            let key = span
                .as_ref()
                .filter(|span| !span.is_empty())
                .and_then(|span| {
                    let (partial, _) = DeTable::parse_recoverable(&self.text);
                    let path = locate(partial.get_ref(), span, false);
                    if !path.is_empty() {
                        return Some(render_path(&path));
                    }
                    // A key written twice: the error points at the second one.
                    let written = self.text.get(span.clone())?.trim();
                    (error.message().starts_with("duplicate key") && !written.is_empty())
                        .then(|| written.to_string())
                });
            self.fail(key, self.describe(&error, span))
        })
    }

    /// Deserialize `tree`; a failure names the key path and line.
    fn deserialize<T: DeserializeOwned>(&self, tree: Spanned<DeTable<'_>>) -> Result<T> {
        let lookup = tree.clone();
        T::deserialize(toml::de::Deserializer::from(tree)).map_err(|error| {
            let message = error.message();
            let missing = missing_field(message);
            // An empty span is the document itself.
            let span = error.span().filter(|span| !span.is_empty());
            let mut path = match &span {
                Some(span) => locate(lookup.get_ref(), span, missing.is_some()),
                None => Vec::new(),
            };
            if let Some(field) = missing {
                path.push(key(field));
            }
            let key = (!path.is_empty()).then(|| render_path(&path));
            self.fail(key, self.describe(&error, span))
        })
    }

    fn describe(&self, error: &toml::de::Error, span: Option<Range<usize>>) -> String {
        let message = tidy(error.message().trim_end());
        match span {
            Some(span) => {
                let (line, column) = position(&self.text, span.start);
                format!("line {line}, column {column}: {message}")
            }
            None => message,
        }
    }
}

/// serde's messages name internal types ("expected struct BackendEntry");
/// a file's author wrote a table.
fn tidy(message: &str) -> String {
    const STRUCT: &str = "expected struct ";
    match message.find(STRUCT) {
        Some(at) => {
            let rest = &message[at + STRUCT.len()..];
            let end = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            format!("{}expected a table{}", &message[..at], &rest[end..])
        }
        None => message.to_string(),
    }
}

/// The field a "missing field `x`" message names.
fn missing_field(message: &str) -> Option<&str> {
    let rest = message.strip_prefix("missing field `")?;
    rest.split('`').next()
}

/// 1-based line and column (in characters) of a byte offset.
fn position(text: &str, offset: usize) -> (usize, usize) {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |newline| newline + 1);
    let column = before[line_start..].chars().count() + 1;
    (line, column)
}

fn covers(node: &Range<usize>, span: &Range<usize>) -> bool {
    node.start <= span.start && span.end <= node.end && !node.is_empty()
}

/// The key path `span` points at: a key written exactly there, else the
/// deepest key or value covering it (only tables when `tables_only`, for
/// "missing field" errors, which point at their table).
fn locate(table: &DeTable<'_>, span: &Range<usize>, tables_only: bool) -> Vec<Seg> {
    let mut search = Search {
        span,
        tables_only,
        path: Vec::new(),
        best: Vec::new(),
        exact: false,
    };
    search.table(table);
    search.best
}

struct Search<'s> {
    span: &'s Range<usize>,
    tables_only: bool,
    path: Vec<Seg>,
    best: Vec<Seg>,
    /// Whether `best` is a key written exactly at `span`.
    exact: bool,
}

impl Search<'_> {
    fn table(&mut self, table: &DeTable<'_>) {
        for (name, value) in table {
            self.path.push(key(name.get_ref()));
            if !self.tables_only {
                let at = name.span();
                if at == *self.span && !self.exact {
                    self.best = self.path.clone();
                    self.exact = true;
                } else if covers(&at, self.span) {
                    self.consider();
                }
            }
            self.value(value);
            self.path.pop();
        }
    }

    fn value(&mut self, value: &Spanned<DeValue<'_>>) {
        let is_table = matches!(value.get_ref(), DeValue::Table(_));
        if (is_table || !self.tables_only) && covers(&value.span(), self.span) {
            self.consider();
        }
        match value.get_ref() {
            DeValue::Table(table) => self.table(table),
            DeValue::Array(items) => {
                for (index, item) in items.iter().enumerate() {
                    self.path.push(Seg::Index(index));
                    self.value(item);
                    self.path.pop();
                }
            }
            _ => {}
        }
    }

    fn consider(&mut self) {
        if !self.exact && self.path.len() > self.best.len() {
            self.best = self.path.clone();
        }
    }
}

/// The span of the key (or array element) at `path`.
fn find(table: &DeTable<'_>, path: &[Seg]) -> Option<Range<usize>> {
    let (first, rest) = path.split_first()?;
    let Seg::Key(name) = first else { return None };
    let (found, value) = table.get_key_value(name.as_str())?;
    let mut span = found.span();
    let mut value = value;
    for seg in rest {
        value = match (seg, value.get_ref()) {
            (Seg::Key(name), DeValue::Table(table)) => {
                let (found, next) = table.get_key_value(name.as_str())?;
                span = found.span();
                next
            }
            (Seg::Index(index), DeValue::Array(items)) => {
                let next = items.get(*index)?;
                span = next.span();
                next
            }
            _ => return None,
        };
    }
    Some(span)
}

/// A path relative to `base` unless it is absolute.
fn resolve(base: &Path, path: PathBuf) -> PathBuf {
    if path.is_relative() {
        base.join(path)
    } else {
        path
    }
}

fn parent(path: &Path) -> PathBuf {
    path.parent().map(Path::to_path_buf).unwrap_or_default()
}

fn known(names: impl Iterator<Item = impl std::fmt::Display>) -> String {
    let names: Vec<String> = names.map(|name| format!("`{name}`")).collect();
    if names.is_empty() {
        "none are defined".to_string()
    } else {
        format!("known: {}", names.join(", "))
    }
}

// ---- backends ----

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BackendsFile {
    #[serde(default)]
    backend: Vec<BackendEntry>,
}

/// A backend as written: [`BackendDef`] flattens its kind, which TOML
/// deserialization with unknown-key checks cannot express, so the file's
/// shape is spelled out here and converted.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BackendEntry {
    name: String,
    kind: KindName,
    script: Option<PathBuf>,
    path: Option<PathBuf>,
    base_url: Option<String>,
    capacity: Option<usize>,
}

#[derive(Clone, Copy, Deserialize)]
#[serde(rename_all = "snake_case")]
enum KindName {
    Echo,
    Scripted,
    Local,
    Openai,
    Anthropic,
}

impl KindName {
    fn name(self) -> &'static str {
        match self {
            KindName::Echo => "echo",
            KindName::Scripted => "scripted",
            KindName::Local => "local",
            KindName::Openai => "openai",
            KindName::Anthropic => "anthropic",
        }
    }
}

fn load_backends(path: &Path, catalog: &mut Catalog, origins: &mut Origins) -> Result<()> {
    let source = Source::read(path, Section::Profile)?;
    let tree = source.parse()?;
    let file: BackendsFile = source.deserialize(tree.clone())?;
    let tree = tree.get_ref();
    let base = parent(path);
    for (index, entry) in file.backend.into_iter().enumerate() {
        let at = |field: &str| vec![key("backend"), Seg::Index(index), key(field)];
        let misplaced = |field: &str, applies: &str| {
            source.fail_at(
                tree,
                &at(field),
                format!(
                    "`{field}` does not apply to kind = \"{}\" (only to {applies})",
                    entry.kind.name()
                ),
            )
        };
        if entry.script.is_some() && !matches!(entry.kind, KindName::Scripted) {
            return Err(misplaced("script", "\"scripted\""));
        }
        if entry.path.is_some() && !matches!(entry.kind, KindName::Local) {
            return Err(misplaced("path", "\"local\""));
        }
        if entry.base_url.is_some() && !matches!(entry.kind, KindName::Openai | KindName::Anthropic)
        {
            return Err(misplaced("base_url", "\"openai\" and \"anthropic\""));
        }
        let kind = match entry.kind {
            KindName::Echo => BackendKind::Echo,
            KindName::Scripted => match entry.script {
                Some(script) => BackendKind::Scripted {
                    script: resolve(&base, script),
                },
                None => {
                    return Err(source.fail_near(
                        tree,
                        &at("script"),
                        &at("kind"),
                        "missing field `script`: kind = \"scripted\" needs the path of its rule file",
                    ));
                }
            },
            KindName::Local => BackendKind::Local {
                path: entry.path.map(|model| resolve(&base, model)),
            },
            KindName::Openai => BackendKind::Openai {
                base_url: entry.base_url,
            },
            KindName::Anthropic => BackendKind::Anthropic {
                base_url: entry.base_url,
            },
        };
        let mut backend = BackendDef::new(entry.name, kind);
        if let Some(capacity) = entry.capacity {
            if capacity == 0 {
                return Err(source.fail_at(tree, &at("capacity"), "capacity must be at least 1"));
            }
            backend = backend.capacity(capacity);
        }
        let line = source.line_of(tree, &at("name"));
        if let Some(first) = origins.backends.get(&backend.name) {
            return Err(source.fail_at(
                tree,
                &at("name"),
                format!(
                    "duplicate backend `{}` (first defined at {first})",
                    backend.name
                ),
            ));
        }
        origins.backends.insert(
            backend.name.clone(),
            Origin {
                file: path.to_path_buf(),
                line,
            },
        );
        catalog.backends.insert(backend.name.clone(), backend);
    }
    Ok(())
}

// ---- profiles ----

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ProfilesFile {
    #[serde(default)]
    profile: Vec<Profile>,
}

fn load_profiles(path: &Path, catalog: &mut Catalog, origins: &mut Origins) -> Result<()> {
    let source = Source::read(path, Section::Profile)?;
    let tree = source.parse()?;
    let file: ProfilesFile = source.deserialize(tree.clone())?;
    let tree = tree.get_ref();
    for (index, profile) in file.profile.into_iter().enumerate() {
        let at = |field: &str| vec![key("profile"), Seg::Index(index), key(field)];
        if !catalog.backends.contains_key(&profile.backend) {
            return Err(source.fail_at(
                tree,
                &at("backend"),
                format!(
                    "profile `{}` names an unknown backend `{}` ({})",
                    profile.name,
                    profile.backend,
                    known(catalog.backends.keys())
                ),
            ));
        }
        if let Some(first) = origins.profiles.get(&profile.name) {
            return Err(source.fail_at(
                tree,
                &at("name"),
                format!(
                    "duplicate profile `{}` (first defined at {first})",
                    profile.name
                ),
            ));
        }
        origins.profiles.insert(
            profile.name.clone(),
            Origin {
                file: path.to_path_buf(),
                line: source.line_of(tree, &at("name")),
            },
        );
        catalog.profiles.insert(profile.name.clone(), profile);
    }
    Ok(())
}

// ---- prompts ----

fn load_prompt(path: &Path, catalog: &mut Catalog, origins: &mut Origins) -> Result<()> {
    let source = Source::read(path, Section::Prompt)?;
    let tree = source.parse()?;
    let lookup = tree.get_ref().clone();
    let mut without_file = tree;
    let contract_file = without_file.get_mut().remove("output_contract_file");
    let mut prompt: PromptDef = source.deserialize(without_file)?;
    let base = parent(path);

    if let Some(value) = contract_file {
        let at = [key("output_contract_file")];
        let DeValue::String(name) = value.get_ref() else {
            return Err(source.fail_at(
                &lookup,
                &at,
                format!(
                    "expected a string (a path), found {}",
                    value.get_ref().type_str()
                ),
            ));
        };
        if prompt.output_contract.is_some() {
            return Err(source.fail_at(
                &lookup,
                &at,
                "give either `output_contract` or `output_contract_file`, not both",
            ));
        }
        let schema_path = resolve(&base, PathBuf::from(name.as_ref()));
        let text = std::fs::read_to_string(&schema_path).map_err(|error| {
            source.fail_at(
                &lookup,
                &at,
                format!("cannot read {}: {error}", schema_path.display()),
            )
        })?;
        let schema: serde_json::Value = serde_json::from_str(&text).map_err(|error| {
            source.fail_at(
                &lookup,
                &at,
                format!("{} is not valid JSON: {error}", schema_path.display()),
            )
        })?;
        check_schema(&source, &lookup, &at, &schema)?;
        prompt.output_contract = Some(schema);
    } else if let Some(schema) = &prompt.output_contract {
        check_schema(&source, &lookup, &[key("output_contract")], schema)?;
    }

    check_templates(&source, &lookup, &prompt)?;

    if let Some(profile) = &prompt.default_profile
        && !catalog.profiles.contains_key(profile)
    {
        return Err(source.fail_at(
            &lookup,
            &[key("default_profile")],
            format!(
                "prompt `{}` names an unknown profile `{profile}` ({})",
                prompt.id,
                known(catalog.profiles.keys())
            ),
        ));
    }

    let id_path = if lookup.contains_key("version") {
        [key("version")]
    } else {
        [key("id")]
    };
    let identity = (prompt.id.clone(), prompt.version);
    if let Some(first) = origins.prompts.get(&identity) {
        return Err(source.fail_at(
            &lookup,
            &id_path,
            format!(
                "duplicate prompt `{}` version {} (first defined at {first})",
                prompt.id, prompt.version
            ),
        ));
    }
    origins.prompts.insert(
        identity,
        Origin {
            file: path.to_path_buf(),
            line: source.line_of(&lookup, &id_path),
        },
    );
    catalog.add_prompt(prompt, Some(base));
    Ok(())
}

/// Compile every template now, so a syntax error names its file and key
/// (variables are checked when the prompt renders).
fn check_templates(source: &Source, tree: &DeTable<'_>, prompt: &PromptDef) -> Result<()> {
    let mut templates: Vec<(Vec<Seg>, &str)> = prompt
        .messages
        .iter()
        .enumerate()
        .map(|(index, message)| {
            let path = vec![key("messages"), Seg::Index(index), key("template")];
            (path, message.template.as_str())
        })
        .collect();
    if let Some(template) = &prompt.session_id {
        templates.push((vec![key("session_id")], template.as_str()));
    }
    for (path, template) in templates {
        let name = render_path(&path);
        let env = minijinja::Environment::new();
        if let Err(error) = env.template_from_named_str(&name, template) {
            return Err(source.fail_at(
                tree,
                &path,
                format!("the template does not compile: {error}"),
            ));
        }
    }
    Ok(())
}

fn check_schema(
    source: &Source,
    tree: &DeTable<'_>,
    at: &[Seg],
    schema: &serde_json::Value,
) -> Result<()> {
    jsonschema::validator_for(schema)
        .map(drop)
        .map_err(|error| source.fail_at(tree, at, format!("not a valid JSON Schema: {error}")))
}
