/*!
[`Cli`]: the `skein` binary run the way every CLI test runs it.

Each command gets `--db DB` (or `SKEIN_DB`), `SKEIN_CONFIG` pointing at the
test's own configuration file (which need not exist), `SKEIN_MODEL=echo`
(the deterministic model; a test that wants another passes `-m`) and no
stdin, so nothing from the developer's environment leaks in. The binary's
path comes from the test (`env!("CARGO_BIN_EXE_skein")` is only known
when compiling the CLI's own tests).
*/

use serde_json::Value;
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Arc;

/// The `skein` binary bound to one database and one configuration file.
#[derive(Clone, Debug)]
pub struct Cli {
    bin: PathBuf,
    db: OsString,
    config: PathBuf,
    db_in_env: bool,
    /// The directory the database lives in (for [`Cli::temp`], the
    /// temporary directory, removed when the last clone is dropped).
    dir: PathBuf,
    _temp: Option<Arc<tempfile::TempDir>>,
}

impl Cli {
    /// `bin` on the database file `db`, with the configuration file beside
    /// it (`DB.toml`).
    pub fn new(bin: impl Into<PathBuf>, db: impl AsRef<Path>) -> Cli {
        let db = db.as_ref();
        Cli {
            bin: bin.into(),
            db: db.as_os_str().to_owned(),
            config: db.with_extension("toml"),
            db_in_env: false,
            dir: db.parent().map(Path::to_path_buf).unwrap_or_default(),
            _temp: None,
        }
    }

    /// `bin` in a fresh temporary directory holding the database
    /// (`skein.db`) and the configuration file (`config.toml`), neither
    /// created yet. The directory lives as long as this value (or a clone).
    pub fn temp(bin: impl Into<PathBuf>) -> Cli {
        let temp = tempfile::tempdir().expect("a temporary directory");
        let dir = temp.path().to_path_buf();
        Cli {
            config: dir.join("config.toml"),
            _temp: Some(Arc::new(temp)),
            ..Cli::new(bin, dir.join("skein.db"))
        }
    }

    /// The same, on another database: a path or a `postgres://` URL.
    pub fn on(mut self, db: impl AsRef<OsStr>) -> Cli {
        self.db = db.as_ref().to_owned();
        self
    }

    /// Pass the database in `SKEIN_DB` instead of `--db`.
    pub fn db_in_env(mut self) -> Cli {
        self.db_in_env = true;
        self
    }

    /// Use this configuration file.
    pub fn config(mut self, path: impl Into<PathBuf>) -> Cli {
        self.config = path.into();
        self
    }

    /// The database as given to the binary.
    pub fn db(&self) -> PathBuf {
        PathBuf::from(&self.db)
    }

    /// The directory the database lives in.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// `skein --db DB ARGS` with the test environment, not yet run; the
    /// caller may change anything before running it.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(&self.bin);
        if self.db_in_env {
            command.env("SKEIN_DB", &self.db);
        } else {
            command.env_remove("SKEIN_DB").arg("--db").arg(&self.db);
        }
        command
            .args(args)
            .env("SKEIN_MODEL", "echo")
            .env("SKEIN_CONFIG", &self.config)
            .stdin(Stdio::null());
        command
    }

    /// Run and return what happened.
    pub fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("the skein binary runs")
    }

    /// Run, expect success, return stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let output = self.run(args);
        assert!(
            output.status.success(),
            "skein {args:?} failed ({:?}): {}",
            output.status.code(),
            stderr(&output)
        );
        String::from_utf8(output.stdout).expect("stdout is UTF-8")
    }

    /// Run `skein --json ARGS`, expect success, parse stdout.
    pub fn json(&self, args: &[&str]) -> Value {
        let mut all = vec!["--json"];
        all.extend_from_slice(args);
        let out = self.ok(&all);
        serde_json::from_str(&out).unwrap_or_else(|error| panic!("skein {args:?}: {error}: {out}"))
    }

    /// Run with `input` on stdin.
    pub fn run_with_stdin(&self, args: &[&str], input: &[u8]) -> Output {
        let mut child = self
            .command(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the skein binary starts");
        let mut stdin = child.stdin.take().expect("piped stdin");
        let input = input.to_vec();
        // A writer of its own: the child may stop reading early.
        let writer = std::thread::spawn(move || {
            use std::io::Write;
            let _ = stdin.write_all(&input);
        });
        let output = child.wait_with_output().expect("the skein binary ends");
        writer.join().expect("the stdin writer ends");
        output
    }
}

/// A command's stderr, lossily decoded.
pub fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}
