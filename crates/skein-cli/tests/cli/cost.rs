//! Cost and cache visibility end to end: `skein usage` and `log -u` price
//! recorded usage when they read it (built-in prices, the configuration
//! file's `[prices]`), count shared work once, name what they could not
//! price, and split cached input without counting it twice for both
//! providers' usage shapes; a replay's report and `usage --replay` price
//! its original and replayed turns apart.

use serde_json::Value;
use skein_testkit::Cli;
use std::path::Path;

fn temp() -> Cli {
    Cli::temp(crate::BIN)
}

fn script() -> String {
    format!(
        "scripted:{}",
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data/advisor.toml")
            .display()
    )
}

fn close(a: &Value, b: f64) -> bool {
    (a.as_f64().unwrap() - b).abs() < 1e-12
}

/// Prices `echo` at $1 per million input tokens and $2 per million output.
fn price_echo(skein: &Cli) {
    std::fs::write(
        skein.dir().join("config.toml"),
        "[prices.echo]\ninput = 1.0\noutput = 2.0\n",
    )
    .unwrap();
}

/// An OpenAI-compatible server for paid models' gaps: `gpt-4o-mini`
/// answers without reporting its usage, `gpt-unpriced` (a model no table
/// prices) with it.
fn paid_upstream(runtime: &tokio::runtime::Runtime) -> wiremock::MockServer {
    use wiremock::matchers::{body_partial_json, method};
    use wiremock::{Mock, MockServer, ResponseTemplate};
    let reply = |model: &str| {
        serde_json::json!({
            "id": "c", "object": "chat.completion", "created": 1, "model": model,
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": "paid answer"}}],
        })
    };
    let mut unpriced = reply("gpt-unpriced");
    unpriced["usage"] =
        serde_json::json!({"prompt_tokens": 5, "completion_tokens": 4, "total_tokens": 9});
    runtime.block_on(async {
        let server = MockServer::start().await;
        Mock::given(method("POST"))
            .and(body_partial_json(
                serde_json::json!({"model": "gpt-4o-mini"}),
            ))
            .respond_with(ResponseTemplate::new(200).set_body_json(reply("gpt-4o-mini")))
            .mount(&server)
            .await;
        Mock::given(method("POST"))
            .and(body_partial_json(
                serde_json::json!({"model": "gpt-unpriced"}),
            ))
            .respond_with(ResponseTemplate::new(200).set_body_json(unpriced))
            .mount(&server)
            .await;
        server
    })
}

/// `skein --json ARGS` with OpenAI at `upstream`.
fn paid(skein: &Cli, upstream: &wiremock::MockServer, args: &[&str]) -> Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let output = skein
        .command(&all)
        .env("OPENAI_API_KEY", "k")
        .env("OPENAI_BASE_URL", format!("{}/v1", upstream.uri()))
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

/// The recorded input and output tokens of a conversation's runs.
fn tokens(skein: &Cli, conversation: &str) -> Vec<(u64, u64)> {
    let store = skein::Store::open(skein.db()).unwrap();
    let id = store.resolve_conversation(conversation).unwrap();
    store
        .runs_of_conversation(&id)
        .unwrap()
        .into_iter()
        .map(|run| {
            (
                run.usage.input_tokens.unwrap(),
                run.usage.output_tokens.unwrap(),
            )
        })
        .collect()
}

fn dollars((input, output): (u64, u64)) -> f64 {
    (input as f64 * 1.0 + output as f64 * 2.0) / 1e6
}

#[test]
fn a_family_costs_its_shared_prefix_once_and_gaps_are_named() {
    let skein = temp();
    price_echo(&skein);
    let first = skein.json(&["prompt", "one"]);
    let a = first["conversation"].as_str().unwrap().to_string();
    skein.json(&["prompt", "-c", "two"]);
    let fork = skein.json(&["fork", first["node"].as_str().unwrap(), "bee"]);
    let b = fork["conversation"].as_str().unwrap().to_string();
    let (a_runs, b_runs) = (tokens(&skein, &a), tokens(&skein, &b));
    assert_eq!((a_runs.len(), b_runs.len()), (2, 1));
    // The fork shares the first turn (a_runs[0]) with its origin.
    let family = skein.json(&["usage", "--family", &b]);
    let expected = dollars(a_runs[0]) + dollars(a_runs[1]) + dollars(b_runs[0]);
    assert!(close(&family["cost"]["dollars"], expected), "{family}");
    assert_eq!(family["cost"]["complete"], true);
    assert_eq!(family["cost"]["by_model"][0]["source"], "configured");
    let own = skein.json(&["usage", "--cid", &b]);
    assert!(close(
        &own["cost"]["dollars"],
        dollars(a_runs[0]) + dollars(b_runs[0])
    ));
    let text = skein.ok(&["usage", "--family", &b]);
    assert!(
        text.contains(&format!(
            "cost: ${expected:.6} (built-in prices of 2025-11-24, 1 from the config file)"
        )),
        "{text}"
    );

    // Models of this machine cost nothing: a failed scripted call (no
    // usage) and a scripted turn leave the cost whole.
    let failed = skein.run(&["prompt", "--cid", &a, "-m", &script(), "fail please"]);
    assert_eq!(failed.status.code(), Some(5));
    skein.json(&["prompt", "--cid", &a, "-m", &script(), "hello"]);
    let total = skein.json(&["usage", "--cid", &a]);
    assert_eq!(total["cost"]["complete"], true, "{total}");
    assert_eq!(
        total["complete"], false,
        "the failed call's tokens are unknown"
    );
    // A paid model that reported no usage, and a model without a price:
    // the cost is a lower bound that says why, never counting them as zero.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let upstream = paid_upstream(&runtime);
    paid(
        &skein,
        &upstream,
        &[
            "prompt",
            "--cid",
            &a,
            "-m",
            "openai:gpt-4o-mini",
            "say nothing of usage",
        ],
    );
    paid(
        &skein,
        &upstream,
        &["prompt", "--cid", &a, "-m", "openai:gpt-unpriced", "hello"],
    );
    let total = skein.json(&["usage", "--cid", &a]);
    assert_eq!(total["cost"]["complete"], false);
    assert_eq!(
        total["cost"]["unmeasured_runs"].as_array().unwrap().len(),
        1
    );
    assert_eq!(total["cost"]["unpriced_runs"].as_array().unwrap().len(), 1);
    assert!(close(
        &total["cost"]["dollars"],
        dollars(a_runs[0]) + dollars(a_runs[1])
    ));
    let text = skein.ok(&["usage", "--cid", &a]);
    assert!(text.contains("cost: at least $"), "{text}");
    assert!(
        text.contains("; incomplete: 1 run(s) reported no usage"),
        "{text}"
    );
    assert!(
        text.contains("have no price (add it under [prices]"),
        "{text}"
    );

    // log -u prices each turn and the total the same way.
    let log = skein.ok(&["log", "--cid", &a, "-u"]);
    assert!(
        log.contains(&format!("· ${:.6}\n", dollars(a_runs[0]))),
        "{log}"
    );
    assert!(log.contains("· $? (no price for gpt-unpriced)"), "{log}");
    assert!(!log.contains("$? (no price for scripted"), "{log}");
    assert!(log.contains("cost: at least $"), "{log}");
    let log = skein.json(&["log", "--cid", &a, "-u"]);
    assert_eq!(log["totals"]["cost"], total["cost"]);

    // Without a configured price, echo's runs are free (echo runs here),
    // priced at exactly zero; only the paid gaps are named.
    std::fs::write(skein.dir().join("config.toml"), "").unwrap();
    let unpriced = skein.json(&["usage", "--family", &b]);
    assert_eq!(
        unpriced["cost"]["unpriced_runs"].as_array().unwrap().len(),
        1
    );
    assert_eq!(unpriced["cost"]["complete"], false);
    let echo = unpriced["cost"]["by_model"]
        .as_array()
        .unwrap()
        .iter()
        .find(|model| model["model"] == "echo")
        .unwrap()
        .clone();
    assert_eq!(
        (echo["dollars"].as_f64(), echo["source"].as_str()),
        (Some(0.0), Some("local"))
    );
    let text = skein.ok(&["usage", "--family", &b]);
    assert!(
        text.contains("1 run(s) of gpt-unpriced")
            && text.contains("have no price (add it under [prices] in "),
        "{text}"
    );
    let log = skein.ok(&["log", "--cid", &b, "-u"]);
    assert!(!log.contains("$?"), "{log}");
    assert!(log.contains("· $0.000000\n"), "{log}");
    let own = skein.ok(&["usage", "--cid", &b]);
    assert!(
        own.contains("cost: $0.000000 (models of this machine cost nothing)"),
        "{own}"
    );

    // Prices are applied when read: a new price re-prices history.
    std::fs::write(
        skein.dir().join("config.toml"),
        "[prices.echo]\ninput = 10.0\noutput = 20.0\n",
    )
    .unwrap();
    let repriced = skein.json(&["usage", "--family", &b]);
    assert!(close(&repriced["cost"]["dollars"], expected * 10.0));
}

/// Both providers' wire shapes with prompt caching: each run's input
/// splits into uncached, cache-read and cache-written tokens that add up
/// to the recorded input, priced once each at the built-in prices.
#[test]
fn cached_tokens_of_both_providers_are_counted_once_and_priced_at_their_rate() {
    use wiremock::matchers::method;
    use wiremock::{Mock, MockServer, ResponseTemplate};
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let skein = temp();
    let openai = serde_json::json!({
        "id": "c", "object": "chat.completion", "created": 1, "model": "gpt-4o",
        "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "hi"}}],
        "usage": {"prompt_tokens": 2000, "completion_tokens": 100, "total_tokens": 2100,
                  "prompt_tokens_details": {"cached_tokens": 1500}}
    });
    let anthropic = serde_json::json!({
        "id": "m", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
        "content": [{"type": "text", "text": "hi"}], "stop_reason": "end_turn",
        "usage": {"input_tokens": 100, "output_tokens": 50,
                  "cache_read_input_tokens": 3000, "cache_creation_input_tokens": 400}
    });
    let cases = [
        (
            "openai:gpt-4o",
            "OPENAI_API_KEY",
            "OPENAI_BASE_URL",
            "/v1",
            openai,
        ),
        (
            "anthropic:claude-sonnet-4-5",
            "ANTHROPIC_API_KEY",
            "ANTHROPIC_BASE_URL",
            "",
            anthropic,
        ),
    ];
    let mut runs = Vec::new();
    for (model, key, url, suffix, body) in cases {
        let server = runtime.block_on(async {
            let server = MockServer::start().await;
            Mock::given(method("POST"))
                .respond_with(ResponseTemplate::new(200).set_body_json(body))
                .mount(&server)
                .await;
            server
        });
        let mut command = skein.command(&["--json", "prompt", "-m", model, "hi"]);
        command
            .env(key, "k")
            .env(url, format!("{}{suffix}", server.uri()));
        let output = command.output().unwrap();
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let record: Value = serde_json::from_slice(&output.stdout).unwrap();
        runs.push(record["run"].as_str().unwrap().to_string());
    }
    let openai = skein.json(&["usage", "--run", &runs[0]]);
    let split = |usage: &Value| {
        let (_, model) = usage["by_model"]
            .as_object()
            .unwrap()
            .iter()
            .next()
            .unwrap();
        (
            model["uncached_input"].as_u64().unwrap(),
            model["cache_read"].as_u64().unwrap(),
            model["cache_write"].as_u64().unwrap(),
        )
    };
    assert_eq!(openai["input_tokens"]["value"], 2000);
    assert_eq!(split(&openai), (500, 1500, 0));
    assert!(close(&openai["cache_hit_rate"], 0.75));
    let gpt = (500.0 * 2.5 + 1500.0 * 1.25 + 100.0 * 10.0) / 1e6;
    assert!(close(&openai["cost"]["dollars"], gpt), "{openai}");
    assert!(close(&openai["cost"]["cache_savings"], 1500.0 * 1.25 / 1e6));

    let anthropic = skein.json(&["usage", "--run", &runs[1]]);
    assert_eq!(anthropic["input_tokens"]["value"], 3500);
    assert_eq!(split(&anthropic), (100, 3000, 400));
    let claude = (100.0 * 3.0 + 3000.0 * 0.3 + 400.0 * 3.75 + 50.0 * 15.0) / 1e6;
    assert!(close(&anthropic["cost"]["dollars"], claude), "{anthropic}");

    let text = skein.ok(&["usage", "--run", &runs[1]]);
    assert!(text.contains("cache read tokens: 3000\n"), "{text}");
    assert!(text.contains("cache hit rate: 85.7%\n"), "{text}");
    assert!(text.contains("saved by cache reads"), "{text}");
    let log = skein.ok(&["log", "-n", "2", "-u"]);
    assert!(
        log.contains("(3000 cache read, 85.7% hit) (400 cache write)"),
        "{log}"
    );
    assert!(
        log.contains(&format!("cost: ${:.6}", gpt + claude)),
        "{log}"
    );
}

/// `skein replay` prices each turn's original and replay, and the whole,
/// at the prices of when the report is read; a model without a price
/// makes its side a lower bound that says so.
#[test]
fn a_replay_report_prices_the_original_and_the_replay() {
    let skein = temp();
    price_echo(&skein);
    let first = skein.json(&["prompt", "one"]);
    let cid = first["conversation"].as_str().unwrap().to_string();
    skein.json(&["prompt", "-c", "two"]);
    let original: f64 = tokens(&skein, &cid).into_iter().map(dollars).sum();

    let output = skein.run(&[
        "replay",
        "--cid",
        &cid,
        "-m",
        "echo",
        "--system",
        "Be brief.",
        "--format",
        "json",
    ]);
    assert!(matches!(output.status.code(), Some(0 | 7)));
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    let store = skein::Store::open(skein.db()).unwrap();
    let mut replayed = 0.0;
    for turn in report["turns"].as_array().unwrap() {
        let mut cost = 0.0;
        for run in turn["runs"].as_array().unwrap() {
            let run = store
                .run_record(&skein::store::RunId(run.as_str().unwrap().into()))
                .unwrap();
            cost += dollars((
                run.usage.input_tokens.unwrap(),
                run.usage.output_tokens.unwrap(),
            ));
        }
        assert!(close(&turn["cost"]["dollars"], cost), "{turn}");
        assert_eq!(turn["original_cost"]["complete"], true);
        replayed += cost;
    }
    drop(store);
    let cost = &report["cost"];
    assert!(close(&cost["original"]["dollars"], original), "{cost}");
    assert!(close(&cost["replay"]["dollars"], replayed), "{cost}");
    assert!(close(&cost["delta"], replayed - original), "{cost}");
    assert_eq!(cost["complete"], true);
    let id = report["replay"].as_str().unwrap().to_string();
    let junit = skein.ok_or_7(&["replay", "--resume", &id, "--format", "junit"]);
    assert!(
        junit.contains(&format!(
            "<property name=\"cost.original\" value=\"{original:.6}\"/>"
        )),
        "{junit}"
    );

    // `usage --replay`: the same sides, each run counted once (resuming
    // the finished replay above added nothing), no judge.
    let usage = skein.json(&["usage", "--replay", &id[..8]]);
    assert_eq!(usage["scope"]["replay"], id.as_str());
    assert_eq!(
        (usage["turns"].as_u64(), usage["selected"].as_u64()),
        (Some(2), Some(2))
    );
    assert!(
        close(&usage["original"]["cost"]["dollars"], original),
        "{usage}"
    );
    assert!(
        close(&usage["replay"]["cost"]["dollars"], replayed),
        "{usage}"
    );
    assert!(
        close(&usage["delta"]["dollars"], replayed - original),
        "{usage}"
    );
    assert_eq!(usage["delta"]["complete"], true);
    assert_eq!(usage["original"]["runs"].as_array().unwrap().len(), 2);
    let replay_runs: usize = report["turns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|turn| turn["runs"].as_array().unwrap().len())
        .sum();
    assert_eq!(
        usage["replay"]["runs"].as_array().unwrap().len(),
        replay_runs
    );
    assert_eq!(usage["judge"]["runs"], serde_json::json!([]));
    let text = skein.ok(&["usage", "--replay", &id]);
    assert!(
        text.contains(&format!(
            "replay {}, the original turns (2 of 2 turns replayed): 2 run(s)",
            &id[..12]
        )),
        "{text}"
    );
    assert!(text.contains(&format!("cost: ${original:.6}")), "{text}");
    assert!(text.contains("difference: tokens "), "{text}");
    assert!(!text.contains("lower bound"), "{text}");

    // Replayed on a model of this machine: that side costs exactly
    // nothing, and is whole.
    let text = skein.ok_or_7(&["replay", "--cid", &cid, "-m", &script()]);
    let summary = text.lines().last().unwrap();
    assert!(
        summary.contains(&format!(
            "cost ${original:.6} → $0.000000 (-${original:.6})"
        )),
        "{summary}"
    );

    // Replayed on a paid model without a price: the replay's side is a
    // lower bound, and the text says so.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let upstream = paid_upstream(&runtime);
    let output = skein
        .command(&["replay", "--cid", &cid, "-m", "openai:gpt-unpriced"])
        .env("OPENAI_API_KEY", "k")
        .env("OPENAI_BASE_URL", format!("{}/v1", upstream.uri()))
        .output()
        .unwrap();
    assert!(matches!(output.status.code(), Some(0 | 7)));
    let text = String::from_utf8(output.stdout).unwrap();
    let summary = text.lines().last().unwrap();
    assert!(
        summary.contains(&format!("cost ${original:.6} → at least $")),
        "{summary}"
    );
    // The report says what changed at its top.
    assert!(
        text.starts_with(&format!(
            "replay {} · echo → openai:gpt-unpriced\n",
            summary.split_whitespace().nth(1).unwrap()
        )),
        "{text}"
    );
    let short = summary.split_whitespace().nth(1).unwrap();
    let usage = skein.json(&["usage", "--replay", short]);
    assert_eq!(usage["delta"]["complete"], false);
    assert_eq!(usage["replay"]["cost"]["complete"], false);
    assert!(
        !usage["replay"]["cost"]["unpriced_runs"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    let text = skein.ok(&["usage", "--replay", short]);
    assert!(
        text.contains("(a side is a lower bound: see above)"),
        "{text}"
    );

    // An unknown replay is not found; a replay and another scope conflict.
    let unknown = skein.run(&["usage", "--replay", "fffffffff"]);
    assert_eq!(unknown.status.code(), Some(3));
    let both = skein.run(&["usage", "--replay", short, "--cid", &cid]);
    assert_eq!(both.status.code(), Some(2));
}

trait OkOr7 {
    /// Run, expect exit code 0 or 7 (a replay whose turns did not all
    /// hold), return stdout.
    fn ok_or_7(&self, args: &[&str]) -> String;
}

impl OkOr7 for Cli {
    fn ok_or_7(&self, args: &[&str]) -> String {
        let output = self.run(args);
        assert!(
            matches!(output.status.code(), Some(0 | 7)),
            "skein {args:?}: {}",
            skein_testkit::cli::stderr(&output)
        );
        String::from_utf8(output.stdout).unwrap()
    }
}
