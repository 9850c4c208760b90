//! The store's list of every place that can hold content
//! (`skein_store::places`), on both backends: every column of the live
//! schema is either a content place (with what forgetting does to it) or
//! listed with why it holds none, and every content place of a backend is
//! in its schema. A table or column added without being classified fails
//! here.

use crate::common::{Backend, TempStore};
use skein_store::places::{CONTENT, NO_CONTENT};
use std::collections::BTreeSet;

for_each_backend!(every_column_is_a_content_place_or_says_why_it_holds_none);

fn every_column_is_a_content_place_or_says_why_it_holds_none(backend: Backend) {
    let db = TempStore::new(backend);
    let columns: BTreeSet<(String, String)> =
        db.store.schema_columns().unwrap().into_iter().collect();
    assert!(columns.len() > 50, "{columns:?}");
    let on_this_backend = |place: &&skein_store::places::Place| match backend {
        Backend::Sqlite => place.sqlite,
        Backend::Postgres => place.postgres,
    };
    let content: BTreeSet<(String, String)> = CONTENT
        .iter()
        .filter(on_this_backend)
        .map(|place| (place.table.to_string(), place.column.to_string()))
        .collect();
    let without: BTreeSet<(String, String)> = NO_CONTENT
        .iter()
        .flat_map(|(table, columns, _)| {
            columns
                .iter()
                .map(|column| (table.to_string(), column.to_string()))
        })
        .collect();
    let unlisted: Vec<&(String, String)> = columns
        .iter()
        .filter(|column| !content.contains(*column) && !without.contains(*column))
        .collect();
    assert!(
        unlisted.is_empty(),
        "columns neither listed as content places nor as holding none \
         (crates/skein-store/src/places.rs): {unlisted:?}"
    );
    let missing: Vec<&(String, String)> = content.difference(&columns).collect();
    assert!(
        missing.is_empty(),
        "content places not in the schema: {missing:?}"
    );
    let both: Vec<&(String, String)> = content.intersection(&without).collect();
    assert!(both.is_empty(), "listed twice: {both:?}");
}
