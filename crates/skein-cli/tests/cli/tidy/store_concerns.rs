//! Where a store operation lives (ARCHITECTURE.md, "Adding a store
//! operation"): a concern is one file stem X of `crates/skein-store/src/`.
//! `X.rs` declares the concern's backend trait and holds every
//! `AsyncStore` and `Store` method that calls it; `sqlite/X.rs` and
//! `postgres/X.rs` implement the trait. `async_store.rs` holds only the
//! struct, and `store.rs` only opening, the handle's facts and the plumbing.
//! The check reads the sources as text and names every method in the wrong
//! file with the file it belongs in.

use super::read;
use std::collections::{BTreeMap, BTreeSet};

/// The store's sources, relative to the repository's root.
const SRC: &str = "crates/skein-store/src";

/// The backend supertrait: declared in backend.rs, implemented in each
/// backend's mod.rs, not a concern.
const SUPERTRAIT: &str = "Backend";

/// The `Backend` methods `store.rs` may call, each with why it stays
/// there: they are the handle's own facts and lifecycle, not a concern's
/// operations. Each must be a method of `trait Backend`.
const STORE_RS_MAY_CALL: [(&str, &str); 12] = [
    ("name", "which backend was opened (`backend_name`)"),
    ("reads", "opening a handle on the standby (`Store::reads`)"),
    (
        "works_on_caller_thread",
        "where blocking work runs (`run_blocking`, `wait`)",
    ),
    ("is_read_only", "how the handle was opened"),
    ("created_blank", "whether opening created the database"),
    ("location", "where the handle points"),
    ("path", "where the handle points"),
    ("key", "the database's identity"),
    ("meter", "counting the handle's statements"),
    ("raw_connection", "test access to the handle"),
    ("debug_execute", "test access to the handle"),
    ("debug_query_i64", "test access to the handle"),
];

/// The `.rs` files directly in `directory` (relative to [`SRC`]), by stem,
/// with their text.
fn sources(directory: &str) -> BTreeMap<String, String> {
    let path = super::root().join(SRC).join(directory);
    let listing = std::fs::read_dir(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    let mut files = BTreeMap::new();
    for entry in listing {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        if let Some(stem) = name.strip_suffix(".rs") {
            let relative = format!("{SRC}/{directory}{name}");
            files.insert(stem.to_string(), read(&relative));
        }
    }
    files
}

/// The identifier `text` starts with.
fn identifier(text: &str) -> &str {
    let end = text
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(text.len());
    &text[..end]
}

/// The top-level items of `source` whose opening line starts with `opening`
/// (`"pub(crate) trait "`, `"impl Store {"`), each as that line and the
/// lines up to its closing `}` at column 0.
fn items<'s>(source: &'s str, opening: &str) -> Vec<(&'s str, Vec<&'s str>)> {
    let mut found = Vec::new();
    let mut lines = source.lines();
    while let Some(line) = lines.next() {
        if line.starts_with(opening) {
            let body = lines.by_ref().take_while(|line| *line != "}").collect();
            found.push((line, body));
        }
    }
    found
}

/// The methods `lines` (an item's body) declares or defines at its top
/// level, by name, each with the lines up to the next one.
fn methods<'s>(lines: &[&'s str]) -> Vec<(&'s str, Vec<&'s str>)> {
    let mut found: Vec<(&str, Vec<&str>)> = Vec::new();
    for line in lines {
        let item = line
            .strip_prefix("    ")
            .filter(|rest| !rest.starts_with(' '));
        let name = item.and_then(|rest| {
            let rest = rest
                .trim_start_matches("pub(crate) ")
                .trim_start_matches("pub ");
            let rest = rest.trim_start_matches("async ");
            rest.strip_prefix("fn ").map(identifier)
        });
        match (name, found.last_mut()) {
            (Some(name), _) => found.push((name, vec![line])),
            (None, Some((_, body))) => body.push(line),
            (None, None) => {}
        }
    }
    found
}

/// The methods `body` calls on `receiver` (`backend().`, `nonblocking().`):
/// `receiver` followed by a name and `(`.
fn calls<'s>(body: &[&'s str], receiver: &str) -> BTreeSet<&'s str> {
    let mut called = BTreeSet::new();
    for line in body {
        for (at, _) in line.match_indices(receiver) {
            let name = identifier(&line[at + receiver.len()..]);
            if line[at + receiver.len() + name.len()..].starts_with('(') {
                called.insert(name);
            }
        }
    }
    called
}

/// The backend's calls in `body`: through `backend().` or a `backend`
/// binding of it (`let backend = self.store.backend();`).
fn backend_calls<'s>(body: &[&'s str]) -> BTreeSet<&'s str> {
    let mut called = calls(body, "backend().");
    called.extend(calls(body, "backend."));
    called
}

/// The concerns' traits, each with the stem of the file declaring it and
/// its methods, from the top-level files (without the supertrait).
struct Concerns {
    trait_stem: BTreeMap<String, String>,
    /// Each trait method, with the stems of the files whose trait declares
    /// it (one, unless two concerns use the same name).
    method_stems: BTreeMap<String, BTreeSet<String>>,
}

fn concerns(top: &BTreeMap<String, String>) -> Concerns {
    let mut trait_stem = BTreeMap::new();
    let mut method_stems: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (stem, source) in top {
        for (line, body) in items(source, "pub(crate) trait ") {
            let name = identifier(&line["pub(crate) trait ".len()..]);
            if name == SUPERTRAIT {
                continue;
            }
            trait_stem.insert(name.to_string(), stem.clone());
            for (method, _) in methods(&body) {
                method_stems
                    .entry(method.to_string())
                    .or_default()
                    .insert(stem.clone());
            }
        }
    }
    Concerns {
        trait_stem,
        method_stems,
    }
}

/// Every `impl T for SqliteStore` / `impl T for PgStore` not in the file
/// the rule puts it in, and every concern one backend implements in a file
/// where the other does not.
fn misplaced_backend_impls(concerns: &Concerns) -> Vec<String> {
    let mut problems = Vec::new();
    let mut implemented: BTreeMap<(&str, String), BTreeSet<String>> = BTreeMap::new();
    for (directory, store) in [("sqlite/", "SqliteStore"), ("postgres/", "PgStore")] {
        for (stem, source) in sources(directory) {
            for line in source.lines() {
                let Some(rest) = line.strip_prefix("impl ") else {
                    continue;
                };
                let name = identifier(rest);
                if rest[name.len()..] != format!(" for {store} {{") || name == SUPERTRAIT {
                    continue;
                }
                let here = format!("{SRC}/{directory}{stem}.rs");
                match concerns.trait_stem.get(name) {
                    None => problems.push(format!(
                        "{here} implements `{name}` for {store}, but no top-level file of \
                         {SRC} declares `pub(crate) trait {name}`: declare it in {SRC}/{stem}.rs"
                    )),
                    Some(home) if *home != stem => problems.push(format!(
                        "`impl {name} for {store}` is in {here}; it belongs in \
                         {SRC}/{directory}{home}.rs (trait {name} is declared in {SRC}/{home}.rs)"
                    )),
                    Some(_) => {}
                }
                implemented
                    .entry((directory, stem.clone()))
                    .or_default()
                    .insert(name.to_string());
            }
        }
    }
    // Each backend's impls outside backend directories.
    for (stem, source) in sources("") {
        for store in ["SqliteStore", "PgStore"] {
            for line in source.lines() {
                if line.starts_with("impl ") && line.ends_with(&format!(" for {store} {{")) {
                    problems.push(format!(
                        "{SRC}/{stem}.rs has `{line}`: a backend's impls belong in its \
                         directory (sqlite/ or postgres/)"
                    ));
                }
            }
        }
    }
    let empty = BTreeSet::new();
    let stems: BTreeSet<&String> = implemented.keys().map(|(_, stem)| stem).collect();
    for stem in stems {
        let sqlite = implemented
            .get(&("sqlite/", stem.clone()))
            .unwrap_or(&empty);
        let postgres = implemented
            .get(&("postgres/", stem.clone()))
            .unwrap_or(&empty);
        for name in sqlite.difference(postgres) {
            problems.push(format!(
                "{SRC}/sqlite/{stem}.rs implements `{name}` for SqliteStore, but \
                 {SRC}/postgres/{stem}.rs has no `impl {name} for PgStore`"
            ));
        }
        for name in postgres.difference(sqlite) {
            problems.push(format!(
                "{SRC}/postgres/{stem}.rs implements `{name}` for PgStore, but \
                 {SRC}/sqlite/{stem}.rs has no `impl {name} for SqliteStore`"
            ));
        }
    }
    problems
}

/// The impl blocks of the store's public types in `source`.
const STORE_IMPLS: [(&str, &str); 3] = [
    ("impl AsyncStore<'_> {", "AsyncStore"),
    ("impl Store {", "Store"),
    ("impl crate::Store {", "Store"),
];

/// Every `AsyncStore`/`Store` method (private helpers too: a concern
/// reaches another's tables through that concern's methods) that calls a
/// concern trait's method through the backend outside that trait's file,
/// and every blocking `Store` method that waits for an `AsyncStore` one in
/// another file.
fn misplaced_operations(top: &BTreeMap<String, String>, concerns: &Concerns) -> Vec<String> {
    let mut problems = Vec::new();
    let mut async_home = BTreeMap::new();
    for (stem, source) in top {
        for (_, body) in items(source, STORE_IMPLS[0].0) {
            for (method, _) in methods(&body) {
                async_home.insert(method, stem.clone());
            }
        }
    }
    for (stem, source) in top {
        for (opening, owner) in STORE_IMPLS {
            for (_, body) in items(source, opening) {
                for (method, lines) in methods(&body) {
                    let here = format!("`{owner}::{method}` is in {SRC}/{stem}.rs");
                    for called in backend_calls(&lines) {
                        let Some(homes) = concerns.method_stems.get(called) else {
                            continue;
                        };
                        if !homes.contains(stem) {
                            let home = homes.iter().next().unwrap();
                            problems.push(format!(
                                "{here}; it calls the backend's `{called}`, declared in \
                                 {SRC}/{home}.rs, so it belongs in {SRC}/{home}.rs"
                            ));
                        }
                    }
                    if owner != "Store" {
                        continue;
                    }
                    for waited in calls(&lines, "nonblocking().") {
                        match async_home.get(waited) {
                            Some(home) if home != stem => problems.push(format!(
                                "{here}; it waits for `AsyncStore::{waited}`, which is in \
                                 {SRC}/{home}.rs, so it belongs in {SRC}/{home}.rs"
                            )),
                            _ => {}
                        }
                    }
                }
            }
        }
    }
    problems
}

/// What `async_store.rs` and `store.rs` hold beyond the struct, opening
/// and plumbing: an async operation, or a call of a backend method that is
/// not one of [`STORE_RS_MAY_CALL`] (or an allowed one the supertrait no
/// longer declares). A concern trait's method is left to
/// [`misplaced_operations`], which names its file.
fn operations_in_the_facade(top: &BTreeMap<String, String>, concerns: &Concerns) -> Vec<String> {
    let mut problems = Vec::new();
    for line in top["async_store"].lines() {
        if line.contains("pub async fn ") {
            problems.push(format!(
                "{SRC}/async_store.rs defines `{}`: an async operation belongs in the file \
                 of the backend trait it calls",
                line.trim()
            ));
        }
    }
    let supertrait = items(&top["backend"], "pub(crate) trait Backend")
        .into_iter()
        .flat_map(|(_, body)| methods(&body))
        .map(|(name, _)| name)
        .collect::<BTreeSet<_>>();
    let allowed: BTreeSet<&str> = STORE_RS_MAY_CALL.iter().map(|(name, _)| *name).collect();
    for name in allowed.difference(&supertrait) {
        problems.push(format!(
            "the allow-list of store.rs names `{name}`, which `trait Backend` in \
             {SRC}/backend.rs does not declare"
        ));
    }
    for (_, body) in items(&top["store"], "impl Store {") {
        for (method, lines) in methods(&body) {
            for called in backend_calls(&lines) {
                if !allowed.contains(called) && !concerns.method_stems.contains_key(called) {
                    problems.push(format!(
                        "`Store::{method}` in {SRC}/store.rs calls the backend's `{called}`, \
                         which is not on the allow-list of store.rs (STORE_RS_MAY_CALL): \
                         declare it in a concern's trait and move `Store::{method}` to that \
                         file, or allow it with why"
                    ));
                }
            }
        }
    }
    problems
}

#[test]
fn every_store_operation_sits_in_its_concerns_file() {
    let top = sources("");
    let concerns = concerns(&top);
    // Fewer means the parser broke.
    assert!(
        concerns.trait_stem.len() >= 16 && concerns.method_stems.len() >= 60,
        "found only {} concern traits with {} methods in {SRC}",
        concerns.trait_stem.len(),
        concerns.method_stems.len()
    );
    let mut problems = misplaced_backend_impls(&concerns);
    problems.extend(misplaced_operations(&top, &concerns));
    problems.extend(operations_in_the_facade(&top, &concerns));
    assert!(
        problems.is_empty(),
        "store operations outside their concern's file (ARCHITECTURE.md, \"Adding a store \
         operation\"):\n{}",
        problems.join("\n")
    );
}
