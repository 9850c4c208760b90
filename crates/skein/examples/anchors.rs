/*!
skein's side of the anchor comparison (`bench/anchors.py` runs it next to
PyPI `llm` and LangGraph): the same workloads through the facade, with the
`echo` model and a SQLite store in a temporary directory, printing one JSON
object.

- `turns`: a 500-turn conversation, each turn persisted as it completes;
  per-turn times of the first and last 50 turns, and the database size
  (after a WAL checkpoint) at 250 and 500 turns. `turns_fixed` repeats it
  with a model that returns a fixed reply without reading the request
  (what the LangGraph node does), because `echo` summarises the whole
  history on every call and so costs more with depth;
- `forks`: 100 forks of a 200-turn conversation at its middle (message
  200), each loaded from the store and given one turn;
- `load`: loading the 1,000-message thread of the 500-turn conversation:
  `Conversation::load` on each runtime flavour, `load_blocking`, and
  `Store::load_thread` alone.

The turn and fork workloads run on a current-thread Tokio runtime (the
top-level figures) and again on a multi-thread one (`multi_thread`).

`--deep N DB` does none of this: it writes a conversation of N `echo` turns
into the SQLite database DB (created if missing) and prints its id, so the
benchmarks can time the CLI continuing a deep conversation without first
running N CLI processes.

```sh
cargo run --release -p skein --example anchors
cargo run --release -p skein --example anchors -- --load-only 2000   # for perf
cargo run --release -p skein --example anchors -- --deep 3000 deep.db
```
*/

use serde_json::{Value, json};
use skein::engine::config::{BackendDef, BackendKind, Catalog, Profile};
use skein::{Conversation, Engine, Model, Store};
use skein_testkit::Fixed;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn fixed_model() -> Model {
    let catalog = Catalog::new()
        .backend(BackendDef::new("fixed", BackendKind::Echo))
        .profile(Profile::new("fixed", "fixed", "fixed"));
    let engine = Engine::builder(catalog)
        // Answers every request with the same text, unread.
        .provider(
            "fixed",
            Arc::new(Fixed::reply(format!(
                "echo: \"{}\" (history: 1 messages, system: no, tools: 0)",
                question(0)
            ))),
        )
        .build()
        .unwrap();
    Model::from_profile(&engine, "fixed").unwrap()
}

/// A question of about 200 bytes, like the other tools get.
fn question(i: usize) -> String {
    format!("question {i}: {}", "lorem ipsum dolor sit amet ".repeat(7))
}

fn ms(duration: Duration) -> f64 {
    (duration.as_secs_f64() * 1e6).round() / 1e3
}

fn summary(times: &[Duration]) -> Value {
    let mut sorted = times.to_vec();
    sorted.sort();
    let mean = times.iter().sum::<Duration>() / times.len() as u32;
    json!({"mean_ms": ms(mean), "median_ms": ms(sorted[sorted.len() / 2]), "n": times.len()})
}

/// The database's size once its WAL is folded in.
fn size(store: &Store, path: &Path) -> u64 {
    store
        .raw_connection()
        .unwrap()
        .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
        .unwrap();
    let wal = path.with_extension("db-wal");
    std::fs::metadata(path).unwrap().len() + std::fs::metadata(wal).map_or(0, |m| m.len())
}

async fn turns(model: &Model, dir: &Path, name: &str) -> (Value, Store, Conversation) {
    let path = dir.join(name);
    let store = Store::open(&path).unwrap();
    let conversation = Conversation::builder(model.clone()).store(&store).build();
    let mut times = Vec::new();
    let mut size_250 = 0;
    for i in 0..500 {
        let started = Instant::now();
        conversation.prompt(question(i)).send().await.unwrap();
        times.push(started.elapsed());
        if i == 249 {
            size_250 = size(&store, &path);
        }
    }
    let size_500 = size(&store, &path);
    let figures = json!({
        "first_tenth": summary(&times[..50]),
        "last_tenth": summary(&times[450..]),
        "all": summary(&times),
        "bytes_at_250": size_250,
        "bytes_at_500": size_500,
    });
    (figures, store, conversation)
}

async fn forks(model: &Model, dir: &Path) -> Value {
    let path = dir.join("forks.db");
    let store = Store::open(&path).unwrap();
    let conversation = Conversation::builder(model.clone()).store(&store).build();
    let mut middle = None;
    for i in 0..200 {
        let response = conversation.prompt(question(i)).send().await.unwrap();
        if i == 99 {
            middle = Some(response.head());
        }
    }
    let middle = middle.unwrap();
    let before = size(&store, &path);
    let mut times = Vec::new();
    for i in 0..100 {
        let started = Instant::now();
        let fork = Conversation::fork_at(&store, middle, model).await.unwrap();
        fork.prompt(format!("fork {i}")).send().await.unwrap();
        times.push(started.elapsed());
    }
    let after = size(&store, &path);
    json!({
        "per_fork": summary(&times),
        "bytes_before_forks": before,
        "bytes_per_fork": (after - before) as f64 / 100.0,
    })
}

/// Loading the 1,000-message thread, timed three ways through the facade
/// (each a way an application calls it) and once through the store alone.
fn load(model: &Model, store: &Store, conversation: &Conversation, reps: usize) -> Value {
    let id = conversation.id().clone();
    let head = conversation.head().unwrap();
    let time = |load: &dyn Fn() -> usize| {
        let times: Vec<Duration> = (0..reps)
            .map(|_| {
                let started = Instant::now();
                let messages = load();
                let elapsed = started.elapsed();
                assert_eq!(messages, 1000);
                elapsed
            })
            .collect();
        summary(&times)
    };
    let current_thread = runtime(&mut tokio::runtime::Builder::new_current_thread());
    let multi_thread = runtime(&mut tokio::runtime::Builder::new_multi_thread());
    let load_async = |runtime: &tokio::runtime::Runtime| {
        runtime.block_on(async {
            let loaded = Conversation::load(store, &id, model).await.unwrap();
            loaded.thread().len()
        })
    };
    json!({
        "conversation_load": time(&|| load_async(&current_thread)),
        "conversation_load_multi_thread": time(&|| load_async(&multi_thread)),
        "conversation_load_blocking": time(&|| {
            Conversation::load(store, &id, model)
                .blocking()
                .unwrap()
                .thread()
                .len()
        }),
        "load_thread": time(&|| store.load_thread(head).unwrap().len()),
    })
}

fn runtime(builder: &mut tokio::runtime::Builder) -> tokio::runtime::Runtime {
    builder.enable_all().build().unwrap()
}

/// A conversation of `turns` echo turns written into the database at
/// `path`; returns its id.
async fn deep_conversation(model: &Model, path: &Path, turns: usize) -> String {
    let store = Store::open(path).unwrap();
    let conversation = Conversation::builder(model.clone()).store(&store).build();
    for i in 0..turns {
        conversation.prompt(question(i)).send().await.unwrap();
    }
    conversation.id().to_string()
}

fn main() {
    let model = Model::open("echo").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let current_thread = runtime(&mut tokio::runtime::Builder::new_current_thread());
    let mut args = std::env::args().skip(1);
    let mode = args.next();
    if mode.as_deref() == Some("--deep") {
        let usage = "usage: anchors --deep TURNS DB";
        let turns: usize = args.next().expect(usage).parse().expect(usage);
        let path = args.next().expect(usage);
        let id = current_thread.block_on(deep_conversation(&model, Path::new(&path), turns));
        println!("{}", json!({"conversation": id, "turns": turns}));
        return;
    }
    if mode.as_deref() == Some("--load-only") {
        let reps = args.next().map_or(2000, |n| n.parse().unwrap());
        let (_, store, conversation) =
            current_thread.block_on(turns(&model, dir.path(), "turns.db"));
        println!("{}", load(&model, &store, &conversation, reps));
        return;
    }
    // The turn and fork workloads on each runtime flavour: on a
    // current-thread runtime every store call hops to the blocking pool and
    // back; on a multi-thread one it runs in place (`Store::run_blocking`).
    let (turns_echo, store, conversation) =
        current_thread.block_on(turns(&model, dir.path(), "turns.db"));
    let (turns_fixed, ..) = current_thread.block_on(turns(&fixed_model(), dir.path(), "fixed.db"));
    let current_forks = current_thread.block_on(forks(&model, dir.path()));
    let multi_thread = runtime(&mut tokio::runtime::Builder::new_multi_thread());
    let (multi_echo, ..) = multi_thread.block_on(turns(&model, dir.path(), "turns-mt.db"));
    let (multi_fixed, ..) = multi_thread.block_on(turns(&fixed_model(), dir.path(), "fixed-mt.db"));
    let multi_forks = multi_thread.block_on(forks(&model, dir.path().join("mt").as_path()));
    // The load workload builds runtimes of its own; this one's workers would
    // only compete with them.
    drop(multi_thread);
    let load = load(&model, &store, &conversation, 100);
    let report = json!({
        "tool": "skein",
        "turns": turns_echo,
        "turns_fixed": turns_fixed,
        "forks": current_forks,
        "multi_thread": {"turns": multi_echo, "turns_fixed": multi_fixed, "forks": multi_forks},
        "load": load,
    });
    println!("{report}");
}
