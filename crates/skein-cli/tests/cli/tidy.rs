//! Conventions that check themselves (rust-analyzer's tidy tests are the
//! model): every path ARCHITECTURE.md, docs/schema.md and docs/testing.md
//! name exists (and a test named as `FILE::NAME` is in that file),
//! ARCHITECTURE.md stays within 30 KB, every Rust file of a crate's `src/`
//! and `tests/` (and `bench-support/`) opens with a module doc,
//! ARCHITECTURE.md's recipe for adding a store operation
//! names what the store defines, every store operation sits in its
//! concern's file (store_concerns.rs), and docs/cli.md documents exactly the
//! commands and flags that `skein help` and each `skein COMMAND --help`
//! list; every command is one module of `crates/skein-cli/src/commands/`
//! with its `run` and one dispatch arm; no surface compares conversation
//! ids to learn where a turn landed (`Response::landed` says); and no code
//! outside the turn layer
//! runs the engine to record a turn or builds a bookmark. Each failure
//! lists every disagreement: what is missing, and where.

mod store_concerns;

use crate::BIN;
use skein_testkit::Cli;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The repository's root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn read(relative: &str) -> String {
    std::fs::read_to_string(root().join(relative))
        .unwrap_or_else(|error| panic!("cannot read {relative}: {error}"))
}

/// The pieces of `line` between backticks (spans on one line only).
fn backticked(line: &str) -> impl Iterator<Item = &str> {
    line.split('`').skip(1).step_by(2)
}

/// Every file and directory under the root (directories with a trailing
/// `/`), relative to it, without build output and version control.
fn repository_entries() -> Vec<String> {
    fn walk(dir: &Path, relative: &str, entries: &mut Vec<String>) {
        let listing = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{dir:?}: {e}"));
        for entry in listing {
            let entry = entry.unwrap();
            let name = entry.file_name().to_string_lossy().into_owned();
            if matches!(name.as_str(), "target" | ".git" | "node_modules") {
                continue;
            }
            let path = format!("{relative}{name}");
            if entry.file_type().unwrap().is_dir() {
                entries.push(format!("{path}/"));
                walk(&entry.path(), &format!("{path}/"), entries);
            } else {
                entries.push(path);
            }
        }
    }
    let mut entries = Vec::new();
    walk(&root(), "", &mut entries);
    entries
}

/// The workspace's crate directories (`skein`, `skein-cli`, ...).
fn crate_names() -> BTreeSet<String> {
    std::fs::read_dir(root().join("crates"))
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

/// A path ARCHITECTURE.md names: a file or directory, and optionally a
/// function in it (`crates/x/tests/y/z.rs::name`).
struct PathReference<'a> {
    path: &'a str,
    function: Option<&'a str>,
}

impl<'a> PathReference<'a> {
    /// Directories a path the document names may start with.
    const ROOTS: [&'static str; 11] = [
        "crates/",
        "docs/",
        "scripts/",
        "bench/",
        "bench-support/",
        "examples/",
        ".ci/",
        "python/",
        "tests/",
        "src/",
        "benches/",
    ];
    /// What a file name the document names may end with.
    const EXTENSIONS: [&'static str; 6] = [".rs", ".md", ".py", ".pyi", ".toml", ".sh"];

    /// `span` as a path reference, or `None` when it is something else (a
    /// Rust path, a URL, a placeholder such as `sqlite/X.rs` or
    /// `tests/<crate>/`, a path outside the repository).
    fn parse(span: &'a str, crates: &BTreeSet<String>) -> Option<Self> {
        let (path, function) = match span.split_once("::") {
            Some((path, function)) => (path, Some(function)),
            None => (span, None),
        };
        let placeholder = path.split('/').any(|segment| {
            segment.len() >= 2
                && segment.as_bytes()[1] == b'.'
                && segment.as_bytes()[0].is_ascii_uppercase()
        });
        let plain = path
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_./-".contains(c));
        if !plain || placeholder || path.starts_with("../") || path == "/" {
            return None;
        }
        if function.is_some() && !path.ends_with(".rs") {
            return None;
        }
        let first = path.split('/').next().unwrap_or_default();
        let looks_like_a_path = Self::ROOTS.iter().any(|root| path.starts_with(root))
            || (crates.contains(first) && path.contains('/'))
            || Self::EXTENSIONS
                .iter()
                .any(|extension| path.ends_with(extension));
        looks_like_a_path.then_some(PathReference { path, function })
    }

    /// Where the path may be, relative to the root: under the crate it
    /// starts with, or under the directory whose section names it
    /// (`graph.rs` in the section of `crates/skein-store`), at the root, or
    /// under any crate (`tests/web.rs`).
    fn candidates(
        &self,
        section: Option<&str>,
        entries: &[String],
        crates: &BTreeSet<String>,
    ) -> Vec<String> {
        let first = self.path.split('/').next().unwrap_or_default();
        if crates.contains(first) && self.path.contains('/') {
            return vec![format!("crates/{}", self.path)];
        }
        let mut candidates: Vec<String> = section
            .into_iter()
            .flat_map(|section| {
                entries.iter().filter(move |entry| {
                    entry.starts_with(section)
                        && (**entry == format!("{section}{}", self.path)
                            || entry.ends_with(&format!("/{}", self.path)))
                })
            })
            .cloned()
            .collect();
        candidates.push(self.path.to_owned());
        if self.path.contains('/') {
            candidates.extend(
                crates
                    .iter()
                    .map(|name| format!("crates/{name}/{}", self.path)),
            );
        }
        candidates
    }
}

/// Whether `source` defines the function `name`, directly or as a name a
/// test macro (`for_each_backend!`, `both_forms!`) is given on a line of
/// its own.
fn defines_function(source: &str, name: &str) -> bool {
    let direct = source
        .match_indices(&format!("fn {name}"))
        .any(|(at, found)| {
            !source[at + found.len()..]
                .chars()
                .next()
                .is_some_and(|c| c.is_alphanumeric() || c == '_')
        });
    direct || source.lines().any(|line| line.trim() == format!("{name},"))
}

/// The directory a heading names (`### \`crates/skein-store\``), if any.
fn section_directory(heading: &str) -> Option<String> {
    let named = backticked(heading).next()?;
    root()
        .join(named)
        .is_dir()
        .then(|| format!("{}/", named.trim_end_matches('/')))
}

/// Every path `document` names in backticks that does not exist (or a
/// `FILE::NAME` whose FILE has no function NAME), each with its line; and
/// how many paths it named.
fn missing_paths(document: &str) -> (Vec<String>, usize) {
    let text = read(document);
    let entries = repository_entries();
    let crates = crate_names();
    let (mut section, mut in_code_block, mut checked) = (None, false, 0);
    let mut problems = Vec::new();
    for (number, line) in text.lines().enumerate() {
        if line.starts_with("```") {
            in_code_block = !in_code_block;
            continue;
        }
        if in_code_block {
            continue;
        }
        if line.starts_with('#') {
            section = section_directory(line);
        }
        for span in backticked(line) {
            let Some(reference) = PathReference::parse(span, &crates) else {
                continue;
            };
            checked += 1;
            let found: Vec<String> = reference
                .candidates(section.as_deref(), &entries, &crates)
                .into_iter()
                .filter(|candidate| root().join(candidate).exists())
                .collect();
            let place = format!("{document}:{}: `{span}`", number + 1);
            if found.is_empty() {
                let under = section
                    .as_deref()
                    .map_or(String::new(), |s| format!(" (nor under {s})"));
                problems.push(format!("{place}: no such file or directory{under}"));
            } else if let Some(function) = reference.function {
                let defined = found.iter().any(|file| {
                    std::fs::read_to_string(root().join(file))
                        .is_ok_and(|source| defines_function(&source, function))
                });
                if !defined {
                    problems.push(format!(
                        "{place}: {} has no function `{function}`",
                        found.join(" or ")
                    ));
                }
            }
        }
    }
    (problems, checked)
}

/// The documents whose paths are checked, with the fewest paths each
/// names (fewer means the parser broke): ARCHITECTURE.md, and the docs
/// that hold the detail moved out of it.
const PATH_CHECKED: [(&str, usize); 3] = [
    ("ARCHITECTURE.md", 100),
    ("docs/schema.md", 30),
    ("docs/testing.md", 30),
];

#[test]
fn every_path_architecture_md_names_exists() {
    let mut problems = Vec::new();
    for (document, fewest) in PATH_CHECKED {
        let (missing, checked) = missing_paths(document);
        assert!(
            checked >= fewest,
            "only {checked} paths found in {document}: is the parser broken?"
        );
        problems.extend(missing);
    }
    assert!(
        problems.is_empty(),
        "the documents name what does not exist (fix the document, or the path if it was renamed):\n{}",
        problems.join("\n")
    );
}

/// ARCHITECTURE.md's limit, in bytes.
const ARCHITECTURE_MD_LIMIT: usize = 30 * 1024;

#[test]
fn architecture_md_is_at_most_30_kb() {
    let size = read("ARCHITECTURE.md").len();
    assert!(
        size <= ARCHITECTURE_MD_LIMIT,
        "ARCHITECTURE.md is {size} bytes, over its limit of {ARCHITECTURE_MD_LIMIT}: it says \
         what each crate is for, its boundaries, where each job lives and the invariants; move \
         detail (schema history, measurements, test lists, a feature's internals) into docs/ \
         (docs/schema.md, docs/performance.md, docs/testing.md or the feature's guide) and \
         leave a pointer"
    );
}

/// Whether `source` opens with a module doc: its first line that is not
/// blank and not part of an attribute (`#![...]`, `#[...]`, over several
/// lines too) starts `//!` or `/*!`.
fn has_module_doc(source: &str) -> bool {
    // Brackets an attribute has opened and not yet closed.
    let mut open: usize = 0;
    for line in source.lines().map(str::trim) {
        if open > 0 || line.starts_with("#[") || line.starts_with("#![") {
            open = (open + line.matches('[').count()).saturating_sub(line.matches(']').count());
            continue;
        }
        if !line.is_empty() {
            return line.starts_with("//!") || line.starts_with("/*!");
        }
    }
    false
}

#[test]
fn every_rust_file_opens_with_a_module_doc() {
    let mut directories = vec![root().join("bench-support")];
    for name in crate_names() {
        directories.push(root().join("crates").join(&name).join("src"));
        directories.push(root().join("crates").join(&name).join("tests"));
    }
    let mut checked = 0;
    let mut missing = Vec::new();
    for file in directories.iter().flat_map(|dir| rust_files(dir)) {
        checked += 1;
        let source = std::fs::read_to_string(&file).unwrap();
        if !has_module_doc(&source) {
            missing.push(
                file.strip_prefix(root())
                    .unwrap_or(&file)
                    .display()
                    .to_string(),
            );
        }
    }
    missing.sort();
    assert!(
        checked > 100,
        "only {checked} Rust files found: is the walk broken?"
    );
    assert!(
        missing.is_empty(),
        "these files do not open with a module doc (`//!`: one paragraph saying what the file \
         is for):\n{}",
        missing.join("\n")
    );
}

/// The paragraph of ARCHITECTURE.md that says how to add a store
/// operation.
fn store_recipe(architecture: &str) -> &str {
    let start = architecture
        .find("To add a store operation:")
        .expect("ARCHITECTURE.md has a paragraph starting `To add a store operation:`");
    let paragraph = &architecture[start..];
    &paragraph[..paragraph.find("\n\n").unwrap_or(paragraph.len())]
}

#[test]
fn the_store_recipe_names_the_macros_and_the_async_api_the_store_defines() {
    let architecture = read("ARCHITECTURE.md");
    let recipe = store_recipe(&architecture);
    let store = |file: &str| read(&format!("crates/skein-store/{file}"));
    // What the recipe must describe, and where the code defines it.
    let facts = [
        (
            "`reading!`",
            store("src/postgres/mod.rs"),
            "macro_rules! reading",
        ),
        (
            "`write_retrying!`",
            store("src/postgres/mod.rs"),
            "macro_rules! write_retrying",
        ),
        (
            "`AsyncStore`",
            store("src/async_store.rs"),
            "pub struct AsyncStore",
        ),
        ("`self.deferred`", store("src/sqlite/mod.rs"), "fn deferred"),
        ("`self.read`", store("src/sqlite/mod.rs"), "fn read<"),
        ("`self.write`", store("src/sqlite/mod.rs"), "fn write<"),
        (
            "`self.point_read`",
            store("src/sqlite/mod.rs"),
            "fn point_read<",
        ),
        ("`BoxFuture`", store("src/backend.rs"), "type BoxFuture"),
        (
            "self.wait(self.nonblocking()",
            store("src/graph.rs"),
            "self.wait(self.nonblocking()",
        ),
        (
            "`for_each_backend!`",
            store("tests/store/common/mod.rs"),
            "macro_rules! for_each_backend",
        ),
    ];
    let mut problems = Vec::new();
    for (named, source, definition) in &facts {
        if !recipe.contains(named) {
            problems.push(format!("the recipe does not mention {named}"));
        }
        if !source.contains(definition) {
            problems.push(format!(
                "the recipe names {named}, but the store no longer has `{definition}`"
            ));
        }
    }
    // The recipe's old form: PostgreSQL's SQL in closures.
    if recipe.contains("async SQL in a `self.read`") {
        problems.push(
            "the recipe still says PostgreSQL's SQL runs in `self.read`/`self.write` closures"
                .into(),
        );
    }
    assert!(
        problems.is_empty(),
        "ARCHITECTURE.md's \"To add a store operation\" paragraph disagrees with crates/skein-store:\n{}",
        problems.join("\n")
    );
}

/// A flag as `--help` lists it: its forms (`-m`, `--model`).
type Flag = BTreeSet<String>;

/// The lines of `help` under `heading:` (`Commands`, `Options`).
fn help_section<'h>(help: &'h str, heading: &str) -> Vec<&'h str> {
    let mut lines = Vec::new();
    let mut inside = false;
    for line in help.lines() {
        if !line.starts_with(' ') && line.ends_with(':') {
            inside = line == format!("{heading}:");
        } else if inside && !line.trim().is_empty() {
            lines.push(line);
        }
    }
    lines
}

fn indent(line: &str) -> usize {
    line.len() - line.trim_start().len()
}

/// The subcommands `help` lists (not `help` itself).
fn subcommands(help: &str) -> Vec<String> {
    help_section(help, "Commands")
        .into_iter()
        .filter(|line| indent(line) == 2)
        .filter_map(|line| line.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_owned)
        .collect()
}

/// The flags `help` lists, each with its visible aliases (`[alias:
/// --at]`), without `--help` and `--version`: a command's own (under
/// `Options:`) and the global ones (under `Global options:`, apart).
fn flags(help: &str) -> Vec<Flag> {
    let mut entries: Vec<(Flag, String)> = Vec::new();
    let sections = [
        help_section(help, "Options"),
        help_section(help, "Global options"),
    ];
    for line in sections.into_iter().flatten() {
        if indent(line) <= 6 && line.trim_start().starts_with('-') {
            let forms = line
                .split_whitespace()
                .map(|word| word.trim_end_matches(','))
                .take_while(|word| word.starts_with('-'))
                .map(str::to_owned)
                .collect();
            entries.push((forms, line.to_owned()));
        } else if let Some((_, description)) = entries.last_mut() {
            description.push_str(line);
        }
    }
    entries
        .into_iter()
        .map(|(mut forms, description)| {
            forms.extend(aliases(&description));
            forms
        })
        .filter(|flag| {
            !flag
                .iter()
                .any(|form| ["-h", "--help", "-V", "--version"].contains(&form.as_str()))
        })
        .collect()
}

/// The long aliases clap shows after a flag's description
/// (`[alias: --at]`, `[aliases: --a, --b]`).
fn aliases(description: &str) -> Vec<String> {
    ["[alias: ", "[aliases: "]
        .iter()
        .filter_map(|opening| description.split_once(opening))
        .filter_map(|(_, rest)| rest.split_once(']'))
        .flat_map(|(list, _)| list.split(", ").map(|alias| alias.trim().to_owned()))
        .collect()
}

/// Every command path (`[]`, `["models"]`, `["models", "pull"]`, ...) with
/// the flags its `--help` lists, read from the binary.
fn command_tree(cli: &Cli) -> BTreeMap<Vec<String>, Vec<Flag>> {
    fn walk(cli: &Cli, path: Vec<String>, tree: &mut BTreeMap<Vec<String>, Vec<Flag>>) {
        let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
        args.push("--help");
        let help = cli.ok(&args);
        for name in subcommands(&help) {
            let mut child = path.clone();
            child.push(name);
            walk(cli, child, tree);
        }
        tree.insert(path, flags(&help));
    }
    let mut tree = BTreeMap::new();
    walk(cli, Vec::new(), &mut tree);
    tree
}

/// The flag-like words of `text` (`-m`, `--cid`), not words with a dash
/// inside (`read-only`).
fn flag_words(text: &str) -> BTreeSet<String> {
    let bytes = text.as_bytes();
    let mut words = BTreeSet::new();
    let mut at = 0;
    while at < bytes.len() {
        let starts = bytes[at] == b'-'
            && (at == 0
                || !(bytes[at - 1].is_ascii_alphanumeric() || b"-_".contains(&bytes[at - 1])));
        if starts {
            let dashes = if bytes.get(at + 1) == Some(&b'-') {
                2
            } else {
                1
            };
            let mut end = at + dashes;
            if bytes.get(end).is_some_and(u8::is_ascii_alphabetic) {
                while bytes
                    .get(end)
                    .is_some_and(|b| b.is_ascii_alphanumeric() || b"-_".contains(b))
                {
                    end += 1;
                }
                words.insert(text[at..end].to_owned());
                at = end;
                continue;
            }
        }
        at += 1;
    }
    words
}

fn shown(path: &[String]) -> String {
    std::iter::once("skein")
        .chain(path.iter().map(String::as_str))
        .collect::<Vec<_>>()
        .join(" ")
}

/// What docs/cli.md says about each command, and the flags it claims
/// each has.
struct CliDoc {
    /// Per command path: the text that documents it (its rows of the
    /// command table, the flag tables for it, its own `## \`skein X\``
    /// section).
    about: BTreeMap<Vec<String>, String>,
    /// Per command path: the flags the document gives it, with the line.
    claimed: Vec<(usize, Vec<String>, String)>,
    problems: Vec<String>,
}

impl CliDoc {
    fn read(doc: &str, tree: &BTreeMap<Vec<String>, Vec<Flag>>) -> CliDoc {
        let mut this = CliDoc {
            about: BTreeMap::new(),
            claimed: Vec::new(),
            problems: Vec::new(),
        };
        let lines: Vec<&str> = doc.lines().collect();
        let (mut heading, mut paragraph, mut last_paragraph) = ("", Vec::new(), Vec::new());
        let mut index = 0;
        while index < lines.len() {
            let line = lines[index];
            if line.starts_with('#') {
                heading = line;
                paragraph.clear();
            }
            if line.starts_with("| flag |") || line.starts_with("| option |") {
                let owners = table_owners(heading, &last_paragraph.join(" "), tree);
                if owners.is_empty() {
                    this.problems.push(format!(
                        "docs/cli.md:{}: cannot tell which commands this flag table is for (name them in backticks before the table, or in its section's heading)",
                        index + 1
                    ));
                }
                index += 2;
                while index < lines.len() && lines[index].starts_with('|') {
                    let row = lines[index];
                    let first = row[1..].split(" | ").next().unwrap_or_default();
                    for owner in &owners {
                        this.about.entry(owner.clone()).or_default().push_str(row);
                        for flag in flag_words(first) {
                            this.claimed.push((index + 1, owner.clone(), flag));
                        }
                    }
                    index += 1;
                }
                continue;
            }
            if line.trim().is_empty() {
                if !paragraph.is_empty() {
                    last_paragraph = std::mem::take(&mut paragraph);
                }
            } else {
                paragraph.push(line);
            }
            if line.starts_with("| `skein") {
                this.read_command_row(index + 1, line, tree);
            }
            index += 1;
        }
        for (path, section) in command_sections(doc) {
            this.about.entry(path).or_default().push_str(section);
        }
        this
    }

    /// A row of the command table: the command (or commands, `/`-separated)
    /// its first cell shows, with their flags.
    fn read_command_row(
        &mut self,
        number: usize,
        row: &str,
        tree: &BTreeMap<Vec<String>, Vec<Flag>>,
    ) {
        let first = row[1..].split(" | ").next().unwrap_or_default();
        let mut command: Vec<String> = Vec::new();
        for synopsis in backticked(first) {
            let words: Vec<&str> = synopsis
                .strip_prefix("skein ")
                .unwrap_or(synopsis)
                .split_whitespace()
                .collect();
            let named = command_path(&words, tree);
            if !named.is_empty() {
                command = named;
            } else if !(synopsis.starts_with('-') || synopsis.starts_with('[')) {
                command.clear();
            }
            if command.is_empty() {
                continue;
            }
            self.about.entry(command.clone()).or_default().push_str(row);
            for flag in flag_words(synopsis) {
                self.claimed.push((number, command.clone(), flag));
            }
        }
    }
}

/// The longest command path `words` starts with.
fn command_path(words: &[&str], tree: &BTreeMap<Vec<String>, Vec<Flag>>) -> Vec<String> {
    let mut path = Vec::new();
    for word in words {
        path.push((*word).to_owned());
        if !tree.contains_key(&path) {
            path.pop();
            break;
        }
    }
    path
}

/// The commands a flag table is for: its section's (`## \`skein serve\``),
/// the top level's (Global options), or those its introduction names in
/// backticks before any parenthesis (`the same for \`prompt\`, \`reply\``).
fn table_owners(
    heading: &str,
    introduction: &str,
    tree: &BTreeMap<Vec<String>, Vec<Flag>>,
) -> Vec<Vec<String>> {
    if let Some(command) = backticked(heading).find_map(|span| span.strip_prefix("skein ")) {
        return vec![vec![command.to_owned()]];
    }
    if heading.contains("Global options") {
        return vec![Vec::new()];
    }
    let before_parenthesis = introduction.split('(').next().unwrap_or_default();
    backticked(before_parenthesis)
        .map(|name| vec![name.to_owned()])
        .filter(|path| tree.contains_key(path))
        .collect()
}

/// The `## \`skein X\`` sections of docs/cli.md, by command.
fn command_sections(doc: &str) -> Vec<(Vec<String>, &str)> {
    let mut sections = Vec::new();
    let starts: Vec<usize> = doc.match_indices("\n## ").map(|(at, _)| at + 1).collect();
    for (number, &start) in starts.iter().enumerate() {
        let end = starts.get(number + 1).copied().unwrap_or(doc.len());
        let section = &doc[start..end];
        let heading = section.lines().next().unwrap_or_default();
        if let Some(command) = heading
            .strip_prefix("## `skein ")
            .and_then(|rest| rest.strip_suffix('`'))
        {
            sections.push((vec![command.to_owned()], section));
        }
    }
    sections
}

/// Whether `doc` names the command at `path` in backticks (`\`skein
/// models pull` or, in a row listing several, `\`models pull`).
fn names_command(doc: &str, path: &[String]) -> bool {
    let name = path.join(" ");
    [format!("`skein {name}"), format!("`{name}")]
        .iter()
        .any(|needle| {
            doc.match_indices(needle.as_str()).any(|(at, found)| {
                !doc[at + found.len()..]
                    .chars()
                    .next()
                    .is_some_and(|c| c.is_alphanumeric() || c == '-' || c == '_')
            })
        })
}

#[test]
fn docs_cli_md_documents_every_command_and_flag_of_skein_help_and_no_other() {
    let tree = command_tree(&Cli::temp(BIN));
    assert!(
        tree.len() > 20,
        "only {} commands read from `skein help`: is the parser broken?",
        tree.len()
    );
    let doc = read("docs/cli.md");
    let CliDoc {
        about,
        claimed,
        mut problems,
    } = CliDoc::read(&doc, &tree);
    let global = &tree[&Vec::new()];
    for (path, flags) in &tree {
        if !path.is_empty() && !names_command(&doc, path) {
            problems.push(format!(
                "`{}` (listed by `skein help`) is not in docs/cli.md",
                shown(path)
            ));
        }
        let documented = about
            .get(path)
            .map(|text| flag_words(text))
            .unwrap_or_default();
        let own = flags
            .iter()
            .filter(|flag| path.is_empty() || !global.contains(flag));
        for flag in own {
            if flag.is_disjoint(&documented) {
                let forms: Vec<&str> = flag.iter().map(String::as_str).collect();
                problems.push(format!(
                    "`{} --help` lists {}, which docs/cli.md does not document for it (its command-table row, a flag table for it, or its section)",
                    shown(path),
                    forms.join("/")
                ));
            }
        }
    }
    for (line, path, flag) in claimed {
        if !tree[&path].iter().any(|forms| forms.contains(&flag)) {
            problems.push(format!(
                "docs/cli.md:{line}: documents {flag} for `{}`, which its --help does not list",
                shown(&path)
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "docs/cli.md and `skein help` disagree (fix the document, or the flag's definition beside its command in crates/skein-cli/src/commands/):\n{}",
        problems.join("\n")
    );
}

/// The CLI's command modules: the files of `crates/skein-cli/src/commands/`
/// but `mod.rs`, by name (`log` for `log.rs`).
fn command_modules() -> BTreeMap<String, String> {
    let dir = root().join("crates/skein-cli/src/commands");
    std::fs::read_dir(&dir)
        .unwrap_or_else(|error| panic!("cannot list {}: {error}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|extension| extension == "rs"))
        .filter(|path| !path.ends_with("mod.rs"))
        .map(|path| {
            let name = path.file_stem().unwrap().to_string_lossy().into_owned();
            let source = std::fs::read_to_string(&path).unwrap();
            (name, source)
        })
        .collect()
}

#[test]
fn every_command_of_skein_help_is_one_module_with_one_dispatch_arm() {
    let tree = command_tree(&Cli::temp(BIN));
    let commands: BTreeSet<String> = tree
        .keys()
        .filter(|path| path.len() == 1)
        .map(|path| path[0].replace('-', "_"))
        .collect();
    assert!(
        commands.len() > 20,
        "only {} commands read from `skein help`: is the parser broken?",
        commands.len()
    );
    let modules = command_modules();
    let dispatch = read("crates/skein-cli/src/commands/mod.rs");
    let mut problems = Vec::new();
    for command in &commands {
        let Some(source) = modules.get(command) else {
            problems.push(format!(
                "`skein {command}` has no module crates/skein-cli/src/commands/{command}.rs (its arguments and handler)"
            ));
            continue;
        };
        if !defines_function(source, "run") {
            problems.push(format!(
                "crates/skein-cli/src/commands/{command}.rs defines no `run`, the command's handler"
            ));
        }
        let arms = dispatch.matches(&format!(" => {command}::run(")).count();
        if arms != 1 {
            problems.push(format!(
                "crates/skein-cli/src/commands/mod.rs has {arms} dispatch arms calling `{command}::run` (one is the rule)"
            ));
        }
    }
    for module in modules.keys().filter(|module| !commands.contains(*module)) {
        problems.push(format!(
            "crates/skein-cli/src/commands/{module}.rs is no command of `skein help` (what commands share goes in commands/common/)"
        ));
    }
    assert!(
        problems.is_empty(),
        "the CLI's commands and their modules disagree (ARCHITECTURE.md, crates/skein-cli, says how to add a command):\n{}",
        problems.join("\n")
    );
}

/// The crates that may run the engine and write a turn: the engine and the
/// store, which define those operations, and the turn layer, whose turn
/// service is the one caller every surface goes through.
const TURN_LAYER: [&str; 3] = ["skein-engine", "skein-store", "skein-conversation"];

/// What running a model call or writing a turn by hand looks like: the
/// engine's and the store's operations, which are public because the turn
/// layer is another crate. Writing a turn through the turn layer's own
/// internals cannot be done outside it at all: its `commit` module and a
/// bookmark's constructors and fields are crate-private (the compiler
/// checks that, so this list no longer does).
const RUNS_OR_RECORDS: [&str; 8] = [
    "prepare_execution(",
    "engine().run(",
    "engine.run(",
    "chain.run(",
    ".run(&self.engine",
    ".run(&engine",
    ".run(engine",
    "commit_turn(",
];

/// Every `.rs` file under `dir`, recursively.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let Ok(listing) = std::fs::read_dir(dir) else {
        return files;
    };
    for entry in listing {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(rust_files(&path));
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            files.push(path);
        }
    }
    files
}

/// Every line of code outside the turn layer's crates (comments left
/// out) holding one of `patterns`, as `path:line: `pattern``.
fn outside_the_turn_layer(patterns: &[&str]) -> Vec<String> {
    let mut found = Vec::new();
    for name in crate_names() {
        if TURN_LAYER.contains(&name.as_str()) {
            continue;
        }
        for file in rust_files(&root().join("crates").join(&name).join("src")) {
            let source = std::fs::read_to_string(&file).unwrap();
            for (number, line) in source.lines().enumerate() {
                let code = line.split("//").next().unwrap_or_default();
                for pattern in patterns.iter().filter(|p| code.contains(**p)) {
                    let relative = file.strip_prefix(root()).unwrap_or(&file).to_owned();
                    found.push(format!(
                        "{}:{}: `{pattern}`",
                        relative.display(),
                        number + 1
                    ));
                }
            }
        }
    }
    found
}

#[test]
fn no_code_outside_the_turn_layer_runs_the_engine_to_record_a_turn_or_builds_a_bookmark() {
    let found = outside_the_turn_layer(&RUNS_OR_RECORDS);
    assert!(
        found.is_empty(),
        "a surface runs the engine or writes a turn itself; ask the turn service \
         (skein_conversation::service::TurnRequest) instead:\n{}",
        found.join("\n")
    );
}

/// What learning where a turn landed by comparing conversation ids looks
/// like: a response says so itself (`Response::landed`).
const COMPARES_LANDING: [&str; 5] = [
    "conversation().id() !=",
    "conversation().id() ==",
    "conversation.id() !=",
    "conversation.id() ==",
    "landed_in !=",
];

#[test]
fn no_surface_compares_ids_to_learn_where_a_turn_landed() {
    let found = outside_the_turn_layer(&COMPARES_LANDING);
    assert!(
        found.is_empty(),
        "a surface compares conversation ids to learn where a turn landed; read \
         `Response::landed` instead:\n{}",
        found.join("\n")
    );
}
