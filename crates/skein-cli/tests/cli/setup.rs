//! `scripts/setup`'s detection, on simulated machines: each need must be
//! found by the exact file or command the build looks for, so a machine of
//! our kind (which ships `libclang-cpp14` but not libclang) is reported as
//! missing libclang, and a machine with libclang anywhere clang-sys looks is
//! not.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A simulated file tree with `scripts/setup check PURPOSE` run against it.
struct Machine {
    root: tempfile::TempDir,
}

impl Machine {
    /// The fresh machine of our kind: Rust, Python and `libclang-cpp14`
    /// (whose `libclang-cpp.so.14` once fooled the detection), nothing else.
    fn fresh() -> Machine {
        let machine = Machine {
            root: tempfile::tempdir().unwrap(),
        };
        machine.file("usr/lib/x86_64-linux-gnu/libclang-cpp.so.14");
        machine.file("usr/lib/llvm-14/lib/libclang-cpp.so.14");
        machine.executable("usr/bin/python3");
        machine
    }

    fn file(&self, path: &str) -> PathBuf {
        let path = self.root.path().join(path);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(&path, b"").unwrap();
        path
    }

    fn executable(&self, path: &str) {
        use std::os::unix::fs::PermissionsExt;
        let path = self.file(path);
        fs::set_permissions(path, fs::Permissions::from_mode(0o755)).unwrap();
    }

    /// What `check` reports missing, and whether it exited 0.
    fn check(&self, purpose: &str, env: &[(&str, &str)]) -> (String, bool) {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/setup");
        let mut command = Command::new(script);
        command
            .args(["check", purpose])
            .env("SKEIN_SETUP_ROOT", self.root.path())
            .env_remove("LIBCLANG_PATH")
            .env_remove("LD_LIBRARY_PATH")
            .env_remove("LIBRARY_PATH");
        for (key, value) in env {
            command.env(key, value);
        }
        let output = command.output().unwrap();
        let stdout = String::from_utf8(output.stdout).unwrap();
        let missing = stdout
            .trim()
            .strip_prefix("missing: ")
            .unwrap_or_else(|| panic!("unexpected output: {stdout:?}"))
            .to_string();
        (missing, output.status.success())
    }
}

#[test]
fn a_fresh_machine_with_only_libclang_cpp_is_missing_libclang_and_cmake() {
    let machine = Machine::fresh();
    assert_eq!(
        machine.check("demo", &[]),
        ("cmake libclang-dev".to_string(), false)
    );
    assert_eq!(
        machine.check("test", &[]),
        (
            "cmake libclang-dev chromium chromium-driver".to_string(),
            false
        )
    );
}

#[test]
fn the_demo_never_asks_for_a_browser() {
    let machine = Machine::fresh();
    machine.executable("usr/bin/cmake");
    machine.file("usr/lib/llvm-14/lib/libclang.so.1");
    assert_eq!(machine.check("demo", &[]), ("nothing".to_string(), true));
    assert_eq!(
        machine.check("test", &[]),
        ("chromium chromium-driver".to_string(), false)
    );
}

#[test]
fn libclang_is_found_under_every_name_clang_sys_loads() {
    for name in [
        "usr/lib/x86_64-linux-gnu/libclang.so",
        "usr/lib/x86_64-linux-gnu/libclang-14.so.1",
        "usr/lib/llvm-14/lib/libclang-14.so",
        "usr/lib/llvm-14/lib/libclang.so.1",
        "usr/local/llvm-18/lib/libclang.so.18",
        "usr/local/lib/libclang.so",
    ] {
        let machine = Machine::fresh();
        machine.executable("usr/bin/cmake");
        machine.file(name);
        assert_eq!(
            machine.check("demo", &[]),
            ("nothing".to_string(), true),
            "{name} is a libclang bindgen loads"
        );
    }
}

#[test]
fn libclang_outside_the_usual_directories_counts_only_where_clang_sys_looks() {
    let machine = Machine::fresh();
    machine.executable("usr/bin/cmake");
    machine.file("opt/llvm/lib/libclang.so.1");
    assert_eq!(
        machine.check("demo", &[]).0,
        "libclang-dev",
        "a directory clang-sys does not search"
    );
    assert_eq!(
        machine.check("demo", &[("LIBCLANG_PATH", "/opt/llvm/lib")]),
        ("nothing".to_string(), true),
        "LIBCLANG_PATH names the directory"
    );
    assert_eq!(
        machine.check("demo", &[("LD_LIBRARY_PATH", "/nowhere:/opt/llvm/lib")]),
        ("nothing".to_string(), true),
        "a directory on LD_LIBRARY_PATH"
    );
    assert_eq!(
        machine
            .check("demo", &[("LIBCLANG_PATH", "/opt/elsewhere")])
            .0,
        "libclang-dev",
        "LIBCLANG_PATH is the only place searched when set, as in clang-sys"
    );
}
