//! The Python with the clients some tests drive (`openai`, `anthropic`,
//! `llm` with `llm-echo`), installed by `scripts/python-clients` into the
//! venv named by `SKEIN_TEST_VENV`.

use std::path::PathBuf;

/// The venv's `python`, or `None` (said loudly) when it is not installed;
/// under CI a missing venv fails the test instead.
pub fn python() -> Option<PathBuf> {
    let found = std::env::var_os("SKEIN_TEST_VENV")
        .map(|venv| PathBuf::from(venv).join("bin/python"))
        .filter(|python| python.exists());
    if found.is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "SKEIN_TEST_VENV is not set or has no python: CI must run scripts/test"
        );
        eprintln!(
            "SKIPPED: the Python clients are not installed; run `export SKEIN_TEST_VENV=$(scripts/python-clients)` first"
        );
    }
    found
}
