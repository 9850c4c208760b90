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
    venv_python(Path::new("bin/python"))
}

/// [`python`], which must import `modules` (a comma-separated Python
/// import list): a venv installed before a test needed them fails the test
/// saying how to bring it up to date.
pub fn python_with(modules: &str) -> Option<PathBuf> {
    python().inspect(|python| assert_imports(python, modules))
}

/// The `python` of the instructor venv inside the test venv, which must
/// import `instructor`; `None` (said loudly) when the test venv is not
/// installed.
pub fn instructor_python() -> Option<PathBuf> {
    let python = venv_python(Path::new("instructor/bin/python"))?;
    assert_imports(&python, "instructor, openai");
    Some(python)
}

/// `relative` inside the venv `SKEIN_TEST_VENV` names.
fn venv_python(relative: &Path) -> Option<PathBuf> {
    let venv = std::env::var_os("SKEIN_TEST_VENV").map(PathBuf::from);
    let found = venv
        .as_ref()
        .map(|venv| venv.join(relative))
        .filter(|python| python.exists());
    if found.is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "SKEIN_TEST_VENV is not set or has no {}: CI must run scripts/test",
            relative.display()
        );
        if venv.is_some_and(|venv| venv.join("bin/python").exists()) {
            eprintln!(
                "SKIPPED: the test venv has no {}; run `scripts/python-clients` to complete it",
                relative.display()
            );
        } else {
            eprintln!(
                "SKIPPED: the Python clients are not installed; run `export SKEIN_TEST_VENV=$(scripts/python-clients)` first"
            );
        }
    }
    found
}

fn assert_imports(python: &Path, modules: &str) {
    let imports = Command::new(python)
        .args(["-c", &format!("import {modules}")])
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(
        imports.success(),
        "{} cannot import {modules}: run `scripts/python-clients` to bring the test venv up to date",
        python.display()
    );
}
