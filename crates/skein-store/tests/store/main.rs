//! The store's integration tests, one binary (each former test file a module):
//! the graph, conversations (their names and ids) and turns, runs, reruns and replays,
//! lanes, opening and migrating databases (and PostgreSQL connections),
//! transfer, concurrency across threads and processes, crashes mid-write,
//! and import properties.
//! Tests that need a child process re-run this binary on one ignored test,
//! named by its module path.

#[macro_use]
mod common;

mod bodies;
mod concurrency;
mod crash;
mod forget;
mod graph;
mod import_properties;
mod labels;
mod lanes;
mod names;
mod offers;
mod open;
mod places;
mod processes;
mod redact;
mod replay_records;
mod replays;
mod reruns;
mod run;
mod standbys;
mod transfer;
mod turns;
