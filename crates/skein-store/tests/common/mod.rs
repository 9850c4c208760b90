//! Shared helpers for the store's integration tests: temporary databases,
//! turn builders and re-running this test binary as a child process.

#![allow(dead_code)]

use skein_core::{Message, Thread};
use skein_store::{ConversationId, RunRecord, Store, TurnCommit};
use std::path::PathBuf;
use std::process::Command;

pub struct TempStore {
    pub dir: tempfile::TempDir,
    pub store: Store,
}

impl TempStore {
    pub fn new() -> TempStore {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = Store::open(dir.path().join("skein.db")).expect("open store");
        TempStore { dir, store }
    }

    pub fn path(&self) -> PathBuf {
        self.dir.path().join("skein.db")
    }

    pub fn count(&self, table: &str) -> i64 {
        self.store
            .raw_connection()
            .unwrap()
            .query_row(&format!("SELECT count(*) FROM {table}"), [], |row| {
                row.get(0)
            })
            .unwrap()
    }
}

/// A thread of `n` alternating user/assistant messages after a system prompt.
pub fn history(system: &str, n: usize) -> Thread {
    let mut thread = Thread::new().push(Message::system(system));
    for i in 0..n.saturating_sub(1) {
        thread = if i % 2 == 0 {
            thread.push(Message::user(format!("question {i}")))
        } else {
            thread.push(Message::assistant(format!("answer {i}")))
        };
    }
    thread
}

/// Run one user/assistant turn on `conversation` from its current head,
/// retrying on a head-moved conflict. Returns the new head's user text.
pub fn append_turn(store: &Store, conversation: &ConversationId, text: &str) -> usize {
    let mut conflicts = 0;
    loop {
        let current = store.conversation(conversation).unwrap();
        let base = match current.head {
            Some(head) => store.load_thread(head).unwrap(),
            None => Thread::new(),
        };
        let thread = base
            .push(Message::user(text.to_string()))
            .push(Message::assistant(format!("reply to {text}")));
        let mut run = RunRecord::new("echo", "echo");
        run.conversation = Some(conversation.clone());
        run.input_head = thread.parent().head_id();
        run.output_head = thread.head_id();
        let turn = TurnCommit {
            conversation,
            expected_head: current.head,
            thread: &thread,
            runs: std::slice::from_ref(&run),
        };
        match store.commit_turn(&turn) {
            Ok(_) => return conflicts,
            Err(skein_store::StoreError::HeadMoved(_)) => conflicts += 1,
            Err(other) => panic!("turn failed: {other}"),
        }
    }
}

/// Re-run this test binary, executing only the ignored test `name` with the
/// given environment.
pub fn spawn_child(name: &str, env: &[(&str, String)]) -> std::process::Child {
    let mut command = Command::new(std::env::current_exe().unwrap());
    command.args([
        "--ignored",
        "--exact",
        name,
        "--nocapture",
        "--test-threads=1",
    ]);
    for (key, value) in env {
        command.env(key, value);
    }
    command.stdout(std::process::Stdio::piped());
    command.stderr(std::process::Stdio::piped());
    command.spawn().expect("spawn child test process")
}
