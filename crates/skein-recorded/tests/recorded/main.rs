//! The recorded-chat integration tests, one binary (each test file a module):
//! the advisor desk, cases files (what imported data may not choose),
//! embedders, forks and their provenance, opening a recorded turn for a
//! surface, persistence, replays (their leases, and
//! replays comparing models), reruns and turns; `local` runs the example on the embedded model
//! (the `local` feature).

mod common;

mod advisor;
mod cases;
mod embed;
mod fork;
#[cfg(feature = "local")]
mod local;
mod open;
mod persist;
mod replay;
mod replay_lease;
mod replay_models;
mod replay_prompt;
mod rerun;
mod turns;
mod verdicts;
