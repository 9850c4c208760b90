//! skein-core's integration tests, one binary: the canonical encoding against
//! its golden files, and properties of identity and threads.

mod encoding;
mod properties;
