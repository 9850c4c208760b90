//! The facade's integration tests, one binary (each former test file a
//! module): conversations continued, branched and recorded through
//! `skein::Conversation`; the provider fault matrix; importing `llm`'s
//! logs.db.

#[macro_use]
mod support;

mod continuing;
mod costs;
mod faults;
mod import;
mod telemetry;
