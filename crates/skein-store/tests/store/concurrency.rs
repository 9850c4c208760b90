//! Many writers at once: 8 async tasks sharing one store (on PostgreSQL, its
//! pool of 4 connections) plus 2 separate OS processes append 2,000 turns,
//! each writer alternating between one conversation they all share and a
//! fork of its own. Afterwards the graph verifies, every turn stands on its
//! conversation exactly once, and every lost bookmark race was reported to
//! its writer (as `HeadMoved`, which the writer answered by retrying).

use crate::common::{Backend, TempStore, spawn_child};
use skein_core::{Message, Role, Thread};
use skein_store::{ConversationId, RunRecord, Store, StoreError, TurnCommit};

const TASKS: usize = 8;
const PROCESSES: usize = 2;
const TURNS_PER_TASK: usize = 150;
const TURNS_PER_PROCESS: usize = 400;
const _: () = assert!(TASKS * TURNS_PER_TASK + PROCESSES * TURNS_PER_PROCESS == 2000);

/// What one writer saw.
#[derive(Default)]
struct Tally {
    committed: usize,
    /// Commits refused with `HeadMoved` (each then retried).
    conflicts: usize,
}

/// Append `turns` turns as writer `me`, alternating between `shared` (even
/// turns) and `own` (odd turns). Every commit either moves the bookmark or
/// reports `HeadMoved`; anything else fails the test.
fn write_turns(
    store: &Store,
    me: &str,
    turns: usize,
    shared: &ConversationId,
    own: &ConversationId,
) -> Tally {
    let mut tally = Tally::default();
    // The last thread this writer saw per conversation, to skip reloading
    // when nobody else moved it.
    let mut cached: [Option<Thread>; 2] = [None, None];
    for i in 0..turns {
        let slot = i % 2;
        let target = if slot == 0 { shared } else { own };
        let text = format!("{me}-{i}");
        loop {
            let head = store.conversation(target).unwrap().head;
            let base = match &cached[slot] {
                Some(thread) if thread.head_id() == head => thread.clone(),
                _ => store.load_thread(head.expect("started")).unwrap(),
            };
            let thread = base
                .push(Message::user(text.clone()))
                .push(Message::assistant(format!("reply to {text}")));
            let mut run = RunRecord::new("echo", "echo");
            run.conversation = Some(target.clone());
            run.output_head = thread.head_id();
            let outcome = store.commit_turn(&TurnCommit::continuing(
                target,
                head,
                &thread,
                std::slice::from_ref(&run),
            ));
            match outcome {
                Ok(_) => {
                    tally.committed += 1;
                    cached[slot] = Some(thread);
                    break;
                }
                Err(StoreError::HeadMoved(moved)) => {
                    assert_eq!(moved.expected, head);
                    assert_ne!(moved.actual, head, "a refused move names the head that won");
                    tally.conflicts += 1;
                }
                Err(other) => panic!("{me}: turn {i} failed: {other}"),
            }
        }
    }
    tally
}

/// Child entry point: one OS-process writer.
#[test]
#[ignore = "run as a child process by eight_tasks_and_two_processes_append_2000_turns"]
fn child_concurrent_writer() {
    let Ok(location) = std::env::var("SKEIN_TEST_DB") else {
        return;
    };
    let store = Store::open(location).unwrap();
    let var = |name| std::env::var(name).unwrap();
    let tally = write_turns(
        &store,
        &var("SKEIN_WRITER"),
        var("SKEIN_TURNS").parse().unwrap(),
        &ConversationId(var("SKEIN_SHARED")),
        &ConversationId(var("SKEIN_OWN")),
    );
    println!(
        "COMMITTED {} CONFLICTS {}",
        tally.committed, tally.conflicts
    );
}

fn eight_tasks_and_two_processes_append_2000_turns(backend: Backend) {
    let db = TempStore::new(backend);
    let shared = db
        .store
        .create_conversation(skein_store::NewConversation::default())
        .unwrap();
    crate::common::append_turn(&db.store, &shared.id, "start");
    let start = db.store.conversation(&shared.id).unwrap().head.unwrap();
    let writers: Vec<(String, usize)> = (0..TASKS)
        .map(|i| (format!("task{i}"), TURNS_PER_TASK))
        .chain((0..PROCESSES).map(|i| (format!("proc{i}"), TURNS_PER_PROCESS)))
        .collect();
    let forks: Vec<ConversationId> = writers
        .iter()
        .map(|(name, _)| {
            db.store
                .fork(start, Some(name.clone()), Some(shared.id.clone()))
                .unwrap()
                .id
        })
        .collect();

    let started = std::time::Instant::now();
    let children: Vec<_> = (TASKS..TASKS + PROCESSES)
        .map(|w| {
            spawn_child(
                "concurrency::child_concurrent_writer",
                &[
                    ("SKEIN_TEST_DB", db.location()),
                    ("SKEIN_WRITER", writers[w].0.clone()),
                    ("SKEIN_TURNS", writers[w].1.to_string()),
                    ("SKEIN_SHARED", shared.id.to_string()),
                    ("SKEIN_OWN", forks[w].to_string()),
                ],
            )
        })
        .collect();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap();
    let tallies: Vec<Tally> = runtime.block_on(async {
        let tasks: Vec<_> = (0..TASKS)
            .map(|w| {
                let store = db.store.clone();
                let (me, turns) = writers[w].clone();
                let (shared, own) = (shared.id.clone(), forks[w].clone());
                tokio::spawn(async move {
                    store
                        .run_blocking(move |store| {
                            Ok(write_turns(store, &me, turns, &shared, &own))
                        })
                        .await
                        .unwrap()
                })
            })
            .collect();
        let mut tallies = Vec::new();
        for task in tasks {
            tallies.push(task.await.unwrap());
        }
        tallies
    });
    let mut conflicts: usize = tallies.iter().map(|t| t.conflicts).sum();
    eprintln!(
        "{backend:?}: tasks done after {:?}, {conflicts} conflicts",
        started.elapsed()
    );
    let mut committed: usize = tallies.iter().map(|t| t.committed).sum();
    for child in children {
        let output = child.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "child failed: {stdout}\n{stderr}");
        let line = stdout
            .lines()
            .find(|line| line.contains("COMMITTED"))
            .unwrap_or_else(|| panic!("child printed no tally: {stdout}"));
        let numbers: Vec<usize> = line
            .split_whitespace()
            .filter_map(|word| word.parse().ok())
            .collect();
        committed += numbers[0];
        conflicts += numbers[1];
    }
    assert_eq!(committed, 2000, "every turn reported committed once");

    let report = db.store.verify().unwrap();
    assert!(report.is_ok(), "{:?}", report.problems);
    let user_texts = |id: &ConversationId| -> Vec<String> {
        let head = db.store.conversation(id).unwrap().head.unwrap();
        db.store
            .load_thread(head)
            .unwrap()
            .messages()
            .iter()
            .filter(|m| m.role == Role::User)
            .map(|m| m.joined_text())
            .collect()
    };
    let on_shared = user_texts(&shared.id);
    let mut expected_shared = 1;
    for (w, (name, turns)) in writers.iter().enumerate() {
        let on_own = user_texts(&forks[w]);
        assert_eq!(
            on_own.len(),
            1 + turns / 2,
            "{name}'s fork holds its turns only"
        );
        for i in 0..*turns {
            let text = format!("{name}-{i}");
            let (thread, label) = if i % 2 == 0 {
                (&on_shared, "shared")
            } else {
                (&on_own, "own")
            };
            assert_eq!(
                thread.iter().filter(|t| **t == text).count(),
                1,
                "{text} on the {label} conversation exactly once"
            );
        }
        expected_shared += turns.div_ceil(2);
    }
    assert_eq!(on_shared.len(), expected_shared);
    // Every committed turn added two nodes to a bookmarked thread; each
    // conflict left two more, unbookmarked, in the graph (nothing is lost).
    let bookmarked = 2 + 2 * 2000;
    assert!(db.count("nodes") >= bookmarked as i64);
    assert!(
        conflicts > 0,
        "ten writers on one conversation collided at least once"
    );
    eprintln!("{backend:?}: 2000 turns committed, {conflicts} conflicts reported and retried");
}

for_each_backend!(eight_tasks_and_two_processes_append_2000_turns);
