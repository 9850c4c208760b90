//! What loading, continuing and forking a stored conversation cost, counted
//! in statements run and rows returned (SQLite's trace hook, through
//! `Store::meter`), never timed: as functions of the thread's depth and of
//! how many runs the conversation has made. A load and a fork read the
//! thread plus a constant, never the conversation's runs; a turn costs the
//! same at any depth and after any number of runs. A change that makes one
//! of these grow fails here, with the numbers (docs/performance.md, "What a
//! load, a turn and a fork may cost").

use crate::support::Fixture;
use skein::store::{RunRecord, RunStatus};
use skein::{Conversation, Costs, Store};

/// Turns of the shallow conversations; the deep ones have `DEEP`.
const SHALLOW: usize = 10;
const DEEP: usize = 40;
/// Runs added to a conversation that change nothing in its graph: failed
/// calls recorded at its head, runs only.
const EXTRA_RUNS: usize = 200;

/// Statements a load may run beyond those of loading its thread (resolving
/// the id, the conversation's row, the runs that produced its head, what its
/// calls offered); rows likewise.
const LOAD_OVERHEAD: Costs = Costs {
    statements: 6,
    rows: 6,
};

struct Grown {
    id: skein::core::ConversationId,
    head: skein::NodeId,
}

/// A stored conversation of `turns` turns, each offering the `add` tool (so
/// what its calls offered is recorded), with `failures` failed calls after
/// them (runs only: a failed call that sent a new message would store it,
/// and the next turn would then start a lane of its own). `label` keeps each
/// conversation's messages its own.
fn grown(store: &Store, fixture: &Fixture, label: &str, turns: usize, failures: usize) -> Grown {
    let conversation = fixture
        .model()
        .conversation()
        .tools([fixture.tool("add")])
        .store(store)
        .build();
    for turn in 0..turns {
        conversation
            .prompt(format!("{label}: turn {turn}"))
            .send_blocking()
            .unwrap();
    }
    for _ in 0..failures {
        let mut failed = RunRecord::new("main-model", "scripted");
        failed.conversation = Some(conversation.id().clone());
        failed.status = RunStatus::Failed;
        failed.input_head = conversation.head();
        failed.tools = vec![fixture.tool("add").spec().clone()];
        store.record_run(&failed).unwrap();
    }
    Grown {
        id: conversation.id().clone(),
        head: conversation.head().unwrap(),
    }
}

struct Scene {
    _dir: tempfile::TempDir,
    store: Store,
    fixture: Fixture,
    shallow: Grown,
    deep: Grown,
    /// As shallow, with [`EXTRA_RUNS`] failed calls.
    busy: Grown,
}

fn scene() -> Scene {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("skein.db")).unwrap();
    let fixture = Fixture::new();
    Scene {
        shallow: grown(&store, &fixture, "shallow", SHALLOW, 0),
        deep: grown(&store, &fixture, "deep", DEEP, 0),
        busy: grown(&store, &fixture, "busy", SHALLOW, EXTRA_RUNS),
        _dir: dir,
        store,
        fixture,
    }
}

impl Scene {
    fn measure<T>(&self, work: impl FnOnce() -> T) -> (T, Costs) {
        let meter = self.store.meter().expect("SQLite counts its costs");
        meter.measure(work)
    }

    fn load(&self, grown: &Grown) -> Costs {
        let model = self.fixture.model();
        self.measure(|| {
            Conversation::load(&self.store, &grown.id, &model)
                .blocking()
                .unwrap()
        })
        .1
    }

    fn load_thread(&self, grown: &Grown) -> Costs {
        self.measure(|| self.store.load_thread(grown.head).unwrap())
            .1
    }

    /// One more turn of the stored conversation (loaded first, not
    /// counted).
    fn turn(&self, grown: &Grown, text: &str) -> Costs {
        let model = self.fixture.model();
        let conversation = Conversation::load(&self.store, &grown.id, &model)
            .blocking()
            .unwrap();
        self.measure(|| conversation.prompt(text).send_blocking().unwrap())
            .1
    }

    /// A fork at the conversation's head and its first turn.
    fn fork_and_turn(&self, grown: &Grown, text: &str) -> Costs {
        let model = self.fixture.model();
        self.measure(|| {
            Conversation::fork_at(&self.store, grown.head, &model)
                .blocking()
                .unwrap()
                .prompt(text)
                .send_blocking()
                .unwrap()
        })
        .1
    }
}

fn messages(turns: usize) -> u64 {
    2 * turns as u64
}

/// `what`, done on the shallow, deep and busy conversations, cost the same
/// statements, one more row per message of the deeper thread, and nothing
/// more for the busy one's runs.
fn assert_reads_the_thread_once(what: &str, shallow: Costs, deep: Costs, busy: Costs) {
    assert_eq!(
        busy, shallow,
        "{EXTRA_RUNS} more runs changed what {what} costs ({shallow} -> {busy})"
    );
    assert_eq!(
        deep.statements, shallow.statements,
        "{what}: a deeper thread took more statements ({shallow} -> {deep})"
    );
    assert_eq!(
        deep.rows - shallow.rows,
        messages(DEEP) - messages(SHALLOW),
        "{what} reads one row per message of its thread, once ({shallow} -> {deep})"
    );
}

#[test]
fn a_load_costs_its_thread_and_a_constant_never_its_runs() {
    let scene = scene();
    let shallow = scene.load(&scene.shallow);
    let deep = scene.load(&scene.deep);
    let busy = scene.load(&scene.busy);
    assert_reads_the_thread_once("a load", shallow, deep, busy);
    for (grown, load) in [(&scene.shallow, shallow), (&scene.deep, deep)] {
        let thread = scene.load_thread(grown);
        assert!(
            load.statements <= thread.statements + LOAD_OVERHEAD.statements
                && load.rows <= thread.rows + LOAD_OVERHEAD.rows,
            "Conversation::load costs {load}, its thread {thread}: more than {LOAD_OVERHEAD} over"
        );
    }
}

#[test]
fn a_turn_costs_the_same_at_any_depth_and_after_any_number_of_runs() {
    let scene = scene();
    let shallow = scene.turn(&scene.shallow, "one more");
    let deep = scene.turn(&scene.deep, "one more");
    let busy = scene.turn(&scene.busy, "one more");
    assert_eq!(deep, shallow, "depth changed what a turn costs");
    assert_eq!(
        busy, shallow,
        "{EXTRA_RUNS} more runs changed what a turn costs"
    );
}

#[test]
fn a_fork_and_its_first_turn_cost_one_thread_and_a_constant() {
    let scene = scene();
    let shallow = scene.fork_and_turn(&scene.shallow, "what if");
    let deep = scene.fork_and_turn(&scene.deep, "what if");
    let busy = scene.fork_and_turn(&scene.busy, "what if");
    assert_reads_the_thread_once("a fork and its turn", shallow, deep, busy);
}
