//! The engine's integration tests, one binary (each test file a module): tool
//! chains, the coordinator and its examples, the engine's turns, and loading
//! configuration directories.

mod chain;
mod coordinator;
mod engine;
mod load;
