//! `skein serve` for tests: started on a free loopback port with a
//! configuration file of its own, its address read from what it prints,
//! and killed on drop.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

pub struct Server {
    child: Child,
    /// `127.0.0.1:PORT`.
    pub address: String,
}

impl Server {
    /// `skein --db DB serve --bind 127.0.0.1:0 EXTRA...`.
    pub fn start(db: &Path, extra: &[&str]) -> Server {
        Server::start_with_env(db, extra, &[])
    }

    /// The same, with environment variables set (a model's base URL and
    /// key, say).
    #[allow(dead_code)]
    pub fn start_with_env(db: &Path, extra: &[&str], env: &[(&str, &str)]) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_skein"))
            .arg("--db")
            .arg(db)
            .args(["serve", "--bind", "127.0.0.1:0"])
            .args(extra)
            .env_remove("SKEIN_DB")
            .env_remove("SKEIN_MODEL")
            .env_remove("SKEIN_SERVE_TOKEN")
            .env("SKEIN_CONFIG", db.with_extension("toml"))
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let address = loop {
            let line = lines
                .next()
                .expect("skein serve exited before saying where it listens")
                .unwrap();
            if let Some(rest) = line.split("serving the graph on http://").nth(1) {
                let url = rest.split_whitespace().next().unwrap();
                break url.trim_end_matches('/').to_string();
            }
        };
        // Keep draining stderr so the server never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        Server { child, address }
    }

    /// `http://127.0.0.1:PORT`.
    pub fn base(&self) -> String {
        format!("http://{}", self.address)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
