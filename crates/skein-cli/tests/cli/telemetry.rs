//! `--otlp` and `OTEL_EXPORTER_OTLP_ENDPOINT` end to end: a command's turn
//! reaches an OTLP collector (the test kit's receiver) before the process
//! exits, with its run's ids and usage; a collector nobody listens on is
//! reported once and fails no turn.

use skein_testkit::Cli;
use skein_testkit::otlp::{OtlpReceiver, int, string};
use std::time::Duration;

#[test]
fn a_command_s_turn_reaches_the_collector_before_the_process_exits() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let receiver = runtime.block_on(OtlpReceiver::start());
    let skein = Cli::temp(crate::BIN);
    let record = skein.json(&["--otlp", &receiver.url, "prompt", "hello"]);
    let spans = runtime.block_on(receiver.wait_for(2, Duration::from_secs(5)));
    let call = spans
        .iter()
        .find(|span| span.name == "chat echo")
        .expect("the model call's span");
    assert_eq!(
        string(call, "skein.run.id"),
        record["run"].as_str().map(String::from)
    );
    assert_eq!(
        string(call, "skein.node.id"),
        record["node"].as_str().map(String::from)
    );
    let store = skein::Store::open(skein.db()).unwrap();
    let run = store
        .run_record(&store.resolve_run(record["run"].as_str().unwrap()).unwrap())
        .unwrap();
    assert_eq!(
        int(call, "gen_ai.usage.input_tokens").map(|n| n as u64),
        run.usage.input_tokens
    );
    assert!(spans.iter().any(|span| span.name == "turn"));

    // The environment names the collector as every OTel SDK reads it.
    let mut command = skein.command(&["prompt", "again"]);
    command.env("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.url);
    assert!(command.output().unwrap().status.success());
    let spans = runtime.block_on(receiver.wait_for(4, Duration::from_secs(5)));
    assert_eq!(spans.iter().filter(|span| span.name == "turn").count(), 2);

    // Nobody listening: the turn is recorded all the same.
    let dead = skein_testkit::refused();
    let output = skein.run(&["--otlp", &format!("http://{dead}"), "prompt", "still"]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(skein.json(&["log", "-n", "5"]).as_array().unwrap().len(), 3);
}
