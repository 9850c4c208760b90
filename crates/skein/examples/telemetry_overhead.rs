/*!
What OpenTelemetry export costs a turn: 1,000 `echo` turns, each a new
conversation persisted to a SQLite store in a temporary directory, timed
three ways in one process (the baseline first): export off; export on to
a collector nobody listens on (every batch fails); export on to the test
kit's in-process receiver. Prints one JSON object: seconds per workload,
and the runs each store holds (every turn is recorded whatever export
does).

```sh
cargo run -p skein --example telemetry_overhead            # debug: relative figures
cargo run --release -p skein --example telemetry_overhead
```
*/

use skein::config::OtelProtocol;
use skein::telemetry::{Settings, install};
use skein::{Model, Store};
use std::collections::HashMap;
use std::time::Instant;

const TURNS: usize = 1000;

async fn turns(label: &str) -> (f64, usize) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let store = Store::open(dir.path().join("skein.db")).expect("a store");
    let model = Model::open("echo").expect("the echo model");
    let started = Instant::now();
    for n in 0..TURNS {
        model
            .conversation()
            .store(&store)
            .build()
            .prompt(format!("{label} turn {n}"))
            .send()
            .await
            .expect("a turn");
    }
    let seconds = started.elapsed().as_secs_f64();
    let runs = store.recent_runs(TURNS * 2).expect("runs").len();
    (seconds, runs)
}

fn settings(url: String) -> Settings {
    Settings {
        endpoint: Some(url),
        protocol: OtelProtocol::HttpProtobuf,
        headers: HashMap::new(),
        content: false,
        service_name: "skein-bench".to_string(),
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let (off, off_runs) = turns("off").await;
    let dead = skein_testkit::refused();
    let telemetry = install(&settings(format!("http://{dead}"))).expect("export");
    let (down, down_runs) = turns("down").await;
    tokio::task::spawn_blocking(move || drop(telemetry))
        .await
        .expect("shut down");
    let receiver = skein_testkit::otlp::OtlpReceiver::start().await;
    let telemetry = install(&settings(receiver.url.clone())).expect("export");
    let (up, up_runs) = turns("up").await;
    tokio::task::spawn_blocking(move || drop(telemetry))
        .await
        .expect("shut down");
    println!(
        "{}",
        serde_json::json!({
            "turns": TURNS,
            "seconds": {"export_off": off, "collector_down": down, "collector_up": up},
            "runs_stored": {"export_off": off_runs, "collector_down": down_runs, "collector_up": up_runs},
            "spans_received": receiver.spans().len(),
        })
    );
}
