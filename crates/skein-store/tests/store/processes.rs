/*!
Concurrent writers: four OS processes append 500 turns each to one SQLite
file, alternating between a conversation they all share and a fork of
their own. Afterwards all 2,000 turns are present exactly once, every fork
holds its writer's turns in order, `verify` passes, and no writer ever saw
an error: not "database is locked" (busy databases are retried inside the
store), and a lost bookmark race only as the typed `HeadMoved`, after
which the writer reloads the head and tries again.

Each writer keeps its threads in memory, as an application does, and
reloads only after losing a race, so the test measures contention rather
than history loading.
*/

use crate::common::spawn_child;
use skein_core::{Message, Role, Thread};
use skein_store::{ConversationId, NewConversation, RunRecord, Store, StoreError, TurnCommit};
use std::time::Instant;

const WRITERS: usize = 4;
const TURNS: usize = 500;

/// One conversation as a writer sees it: its id and its thread so far.
struct Tip {
    id: ConversationId,
    thread: Thread,
}

/// Append one turn to `tip`, reloading and retrying after a lost race.
/// Returns the number of races lost.
fn append(store: &Store, tip: &mut Tip, text: &str) -> usize {
    let mut lost = 0;
    loop {
        let next = tip
            .thread
            .push(Message::user(text.to_string()))
            .push(Message::assistant(format!("reply to {text}")));
        let mut run = RunRecord::new("echo", "echo");
        run.conversation = Some(tip.id.clone());
        run.input_head = tip.thread.head_id();
        run.output_head = next.head_id();
        let turn = TurnCommit::continuing(
            &tip.id,
            tip.thread.head_id(),
            &next,
            std::slice::from_ref(&run),
        );
        match store.commit_turn(&turn) {
            Ok(_) => {
                tip.thread = next;
                return lost;
            }
            Err(StoreError::HeadMoved(moved)) => {
                lost += 1;
                let head = moved.actual.expect("a moved head is a node");
                tip.thread = store.load_thread(head).unwrap();
            }
            Err(other) => panic!("turn failed: {other}"),
        }
    }
}

/// Child entry point: `SKEIN_TURNS` turns, even ones on the shared
/// conversation, odd ones on this writer's fork.
#[test]
#[ignore = "run as a child process by four_processes_append_2000_turns_and_lose_none"]
fn child_writer() {
    let Ok(path) = std::env::var("SKEIN_TEST_DB") else {
        return;
    };
    let me = std::env::var("SKEIN_WRITER").unwrap();
    let turns: usize = std::env::var("SKEIN_TURNS").unwrap().parse().unwrap();
    let store = Store::open(path).unwrap();
    let mut tips: Vec<Tip> = ["SKEIN_SHARED", "SKEIN_OWN"]
        .iter()
        .map(|variable| {
            let id = store
                .resolve_conversation(&std::env::var(variable).unwrap())
                .unwrap();
            let head = store.conversation(&id).unwrap().head.unwrap();
            Tip {
                thread: store.load_thread(head).unwrap(),
                id,
            }
        })
        .collect();
    let mut lost = 0;
    for i in 0..turns {
        lost += append(&store, &mut tips[i % 2], &format!("{me}-{i}"));
    }
    println!("LOST_RACES {lost}");
}

fn user_texts(store: &Store, id: &ConversationId) -> Vec<String> {
    let head = store.conversation(id).unwrap().head.unwrap();
    store
        .load_thread(head)
        .unwrap()
        .messages()
        .iter()
        .filter(|m| m.role == Role::User)
        .map(|m| m.joined_text())
        .collect()
}

#[test]
fn four_processes_append_2000_turns_and_lose_none() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("skein.db");
    let store = Store::open(&path).unwrap();
    let shared = store
        .create_conversation(NewConversation::default())
        .unwrap()
        .id;
    let start = Thread::from_messages([Message::user("start"), Message::assistant("ok")]);
    store
        .commit_turn(&TurnCommit::continuing(&shared, None, &start, &[]))
        .unwrap();
    let head = start.head_id().unwrap();
    let forks: Vec<ConversationId> = (0..WRITERS)
        .map(|i| {
            store
                .fork(head, Some(format!("w{i}")), Some(shared.clone()))
                .unwrap()
                .id
        })
        .collect();

    let started = Instant::now();
    let children: Vec<_> = (0..WRITERS)
        .map(|i| {
            spawn_child(
                "processes::child_writer",
                &[
                    ("SKEIN_TEST_DB", path.display().to_string()),
                    ("SKEIN_WRITER", format!("w{i}")),
                    ("SKEIN_TURNS", TURNS.to_string()),
                    ("SKEIN_SHARED", shared.to_string()),
                    ("SKEIN_OWN", forks[i].to_string()),
                ],
            )
        })
        .collect();
    let mut lost = 0;
    for child in children {
        let output = child.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "a writer failed: {stderr}");
        assert!(!stderr.contains("locked"), "{stderr}");
        assert!(!stdout.contains("locked"), "{stdout}");
        lost += stdout
            .lines()
            // libtest may print `test NAME ... ` on the same line.
            .find_map(|line| Some(line.split_once("LOST_RACES ")?.1))
            .expect("the writer reports its lost races")
            .trim()
            .parse::<usize>()
            .unwrap();
    }
    eprintln!(
        "{WRITERS} writers x {TURNS} turns in {:.2?}; {lost} bookmark races lost and retried",
        started.elapsed()
    );

    let on_shared = user_texts(&store, &shared);
    assert_eq!(on_shared.len(), 1 + WRITERS * TURNS / 2);
    let mut total = on_shared.len() - 1;
    for (w, fork) in forks.iter().enumerate() {
        let mut wanted: Vec<String> = (0..TURNS).step_by(2).map(|i| format!("w{w}-{i}")).collect();
        let mine: Vec<&String> = on_shared
            .iter()
            .filter(|t| t.starts_with(&format!("w{w}-")))
            .collect();
        // Each writer's shared turns appear once each, in its own order.
        assert_eq!(
            mine,
            wanted.iter().collect::<Vec<_>>(),
            "w{w} on the shared conversation"
        );
        wanted = (1..TURNS).step_by(2).map(|i| format!("w{w}-{i}")).collect();
        let on_fork = user_texts(&store, fork);
        assert_eq!(on_fork[0], "start");
        assert_eq!(on_fork[1..], wanted[..], "w{w}'s fork");
        total += on_fork.len() - 1;
    }
    assert_eq!(total, WRITERS * TURNS, "every turn present, none lost");
    // Every turn's run is recorded: one per turn, plus none for lost races
    // (a lost race stores its nodes and runs, which stay reachable only by
    // run; count them separately).
    let runs: i64 = store
        .raw_connection()
        .unwrap()
        .query_row("SELECT count(*) FROM runs", [], |row| row.get(0))
        .unwrap();
    assert_eq!(runs as usize, WRITERS * TURNS + lost);
    assert!(store.verify().unwrap().is_ok());
}
