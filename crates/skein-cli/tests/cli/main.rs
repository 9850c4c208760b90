//! The command line's integration tests, one binary (each former test file a
//! module): the commands end to end through the built `skein` binary
//! (`commands`, with the README tour and MCP tools), what a cases file may
//! not choose and the bounds on every input (`cases`), the surface
//! conformance table (`conformance`: every surface, the same scenarios, the
//! same graph), the replay selection table (`replay_selection`: every way of
//! choosing turns, the same turns on every surface), replays comparing
//! models (`replay_models`), replays kept out of the user's history
//! (`replay_history`), a user's day of replays (`replay_day`), importing
//! `llm`'s logs.db, names that never shadow ids, the PostgreSQL backend, the recording proxy with official clients (`proxy`)
//! and with the client matrix's libraries (`clients`), `scripts/setup`'s
//! detection, the web view in a real browser, and the tidy checks that keep
//! ARCHITECTURE.md and docs/cli.md true to the code.

#[path = "../support/pty.rs"]
mod pty;
#[path = "../support/python.rs"]
mod python;
#[path = "../support/serve.rs"]
mod serve;
#[path = "../support/webdriver.rs"]
mod webdriver;

/// The binary under test, for `skein_testkit::Cli`.
const BIN: &str = env!("CARGO_BIN_EXE_skein");

mod cases;
mod clients;
mod commands;
mod comparators;
mod conformance;
mod cost;
mod delete;
mod failover;
mod habits;
mod labels;
mod llm_import;
mod marker;
mod names;
mod postgres;
mod proxy;
mod replay_day;
mod replay_history;
mod replay_models;
mod replay_selection;
mod setup;
mod telemetry;
mod templates;
mod tidy;
mod web;
mod web_layout;
