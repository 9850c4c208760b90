//! The Python with the clients some tests drive (`openai`, `anthropic`,
//! `llm` with `llm-echo`, `mcp`, and the client matrix's libraries),
//! installed by `scripts/python-clients` into the venv named by
//! `SKEIN_TEST_VENV`; `instructor`, which cannot share it, has its own
//! venv inside it (`$SKEIN_TEST_VENV/instructor`).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The venv's `python`, or `None` (said loudly) when it is not installed;
/// under CI a missing venv fails the test instead.
pub fn python() -> Option<PathBuf> {
    let found = venv()
        .map(|venv| venv.join("bin/python"))
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

/// [`python`], which must import `modules` (a comma-separated Python
/// import list): a venv installed before a test needed them fails the test
/// saying how to bring it up to date.
pub fn python_with(modules: &str) -> Option<PathBuf> {
    python().inspect(|python| assert_imports(python, modules))
}

/// The `python` of the instructor venv inside the test venv, which must
/// import `instructor`; `None` (said loudly) when the test venv is not
/// installed, a failure when it lacks the instructor venv.
pub fn instructor_python() -> Option<PathBuf> {
    python()?;
    let python = venv()?.join("instructor/bin/python");
    assert_imports(&python, "instructor, openai");
    Some(python)
}

fn venv() -> Option<PathBuf> {
    std::env::var_os("SKEIN_TEST_VENV").map(PathBuf::from)
}

/// `python` exists and imports `modules`, else the test fails saying how
/// to bring the venv up to date.
fn assert_imports(python: &Path, modules: &str) {
    let imports = Command::new(python)
        .args(["-c", &format!("import {modules}")])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success());
    assert!(
        imports,
        "{} cannot import {modules}: run `scripts/python-clients` to bring the test venv up to date",
        python.display()
    );
}
