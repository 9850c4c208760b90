//! `skein serve` for tests: started on a free loopback port with a
//! configuration file of its own, its address read from what it prints,
//! and killed on drop.

use skein_testkit::Cli;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};

pub struct Server {
    child: Child,
    /// `127.0.0.1:PORT`.
    pub address: String,
    /// Every line the server printed on stderr so far.
    stderr: Arc<Mutex<Vec<String>>>,
    /// The thread draining stderr; it ends when the server does.
    drain: Option<std::thread::JoinHandle<()>>,
}

impl Server {
    /// `skein --db DB serve --bind 127.0.0.1:0 EXTRA...`.
    pub fn start(db: &Path, extra: &[&str]) -> Server {
        Server::start_with_env(db, extra, &[])
    }

    /// The same, with environment variables set (a model's base URL and
    /// key, say).
    #[allow(dead_code, reason = "not every module that includes this file uses it")]
    pub fn start_with_env(db: &Path, extra: &[&str], env: &[(&str, &str)]) -> Server {
        let mut args = vec!["serve", "--bind", "127.0.0.1:0"];
        args.extend_from_slice(extra);
        // The server runs only the models its own flags name.
        let mut child = Cli::new(crate::BIN, db)
            .command(&args)
            .env_remove("SKEIN_MODEL")
            .env_remove("SKEIN_SERVE_TOKEN")
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let address = loop {
            let line = lines
                .next()
                .expect("skein serve exited before saying where it listens")
                .unwrap();
            stderr.lock().unwrap().push(line.clone());
            if let Some(rest) = line.split("serving the graph on http://").nth(1) {
                let url = rest.split_whitespace().next().unwrap();
                break url.trim_end_matches('/').to_string();
            }
        };
        // Keep draining stderr so the server never blocks on a full pipe.
        let kept = stderr.clone();
        let drain = std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                kept.lock().unwrap().push(line);
            }
        });
        Server {
            child,
            address,
            stderr,
            drain: Some(drain),
        }
    }

    /// `http://127.0.0.1:PORT`.
    pub fn base(&self) -> String {
        format!("http://{}", self.address)
    }

    /// Stop the server and return everything it printed on stderr.
    #[allow(dead_code, reason = "not every module that includes this file uses it")]
    pub fn stop(mut self) -> String {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(drain) = self.drain.take() {
            let _ = drain.join();
        }
        self.stderr.lock().unwrap().join("\n")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
