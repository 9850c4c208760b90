//! The embedded model's integration tests, one binary: generation on the
//! pulled model file, and sentence embeddings.

mod local;
mod sentence;
