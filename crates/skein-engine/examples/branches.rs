/*!
Three coordinators branching from one exchange, concurrently, each on its
own task with its own budget, history and outcome. Scheduling and joining
them, and deciding what a failed branch means for the others, stay with the
application (seed 002, decision 3).

- `coast` asks one follow-up and stops: `Stopped`.
- `mountains` keeps asking, and has each reply summarised by a model call of
  its own, associated with the turn: it runs out of turns, `Exhausted`.
- `city` asks for something the model fails on: its continuation's error.

Each branch's sequence report counts the shared starting run once, and a
total over all three counts it once too.

Run it with `cargo run -p skein-engine --example branches`.
*/

use skein_core::Message;
use skein_engine::coordinator::{Next, Outcome};
use skein_engine::{
    BackendDef, BackendKind, Catalog, CoordinateError, Engine, Profile, Request, RunId, Totals,
};
use skein_providers::Scripted;
use std::sync::Arc;

pub const RULES: &str = r#"
[[rules]]
name = "outage"
last_user_contains = "city"
error = { kind = "server", status = 503, message = "the city guide is down" }

[[rules]]
name = "summary"
last_user_contains = "Summarise"
reply = "In short: {last_user}"

[[rules]]
name = "plan"
last_user_contains = "weekend"
reply = "Three options: the coast, the mountains, or the city."

[[rules]]
name = "more"
reply = "More about {last_user} ({history} messages so far)."
"#;

fn engine() -> Result<Engine, Box<dyn std::error::Error + Send + Sync>> {
    let catalog = Catalog::new()
        .backend(BackendDef::new("model", BackendKind::Echo).capacity(2))
        .profile(Profile::new("guide", "model", "scripted"));
    Ok(Engine::builder(catalog)
        .provider("model", Arc::new(Scripted::from_toml_str(RULES)?))
        .build()?)
}

fn ask(text: &str) -> Request {
    Request::messages([Message::user(text)]).profile("guide")
}

/// One branch as it ended.
#[derive(Debug)]
pub struct BranchReport {
    pub name: &'static str,
    pub outcome: Result<Outcome, CoordinateError>,
    /// The replies the callback received, in order.
    pub replies: Vec<String>,
    pub usage: Totals,
}

#[derive(Debug)]
pub struct Report {
    pub start: RunId,
    pub branches: Vec<BranchReport>,
    /// All three branches together: the start counted once.
    pub combined: Totals,
}

/// One branch: how many turns it may use and what it asks.
async fn branch(
    engine: Engine,
    start: skein_engine::Exchange,
    name: &'static str,
    turns: u32,
) -> (BranchReport, String) {
    let coordinator = engine.coordinator(&start, turns);
    let sequence = coordinator.sequence().to_string();
    let mut replies: Vec<String> = Vec::new();
    let outcome = coordinator
        .run_with(&mut replies, |replies, turn, _cancel| {
            let engine = engine.clone();
            Box::pin(async move {
                if let Some(response) = turn.response() {
                    replies.push(response.text());
                    if name == "coast" {
                        return Ok(Next::Stop);
                    }
                    if name == "mountains" {
                        let summary =
                            turn.associate(ask(&format!("Summarise: {}", response.text())));
                        engine.run(summary).await?;
                    }
                }
                Ok(Next::Continue(ask(&format!("Tell me about the {name}."))))
            })
        })
        .await;
    let usage = engine.ledger().sequence(&sequence);
    (
        BranchReport {
            name,
            outcome,
            replies,
            usage,
        },
        sequence,
    )
}

pub async fn demo() -> Result<Report, Box<dyn std::error::Error + Send + Sync>> {
    let engine = engine()?;
    let first = engine.run(ask("Plan my weekend.").capture()).await?;
    let start = first.exchange.expect("capture was asked for");

    let tasks: Vec<_> = [("coast", 3), ("mountains", 2), ("city", 3)]
        .into_iter()
        .map(|(name, turns)| tokio::spawn(branch(engine.clone(), start.clone(), name, turns)))
        .collect();
    let mut branches = Vec::new();
    let mut runs: Vec<RunId> = Vec::new();
    for task in tasks {
        let (report, _sequence) = task.await?;
        runs.extend(report.usage.runs.iter().cloned());
        branches.push(report);
    }
    let combined = engine.ledger().total(runs.iter());
    Ok(Report {
        start: first.run,
        branches,
        combined,
    })
}

pub fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let report = runtime.block_on(demo())?;
    for branch in &report.branches {
        let outcome = match &branch.outcome {
            Ok(outcome) => format!("{outcome:?}"),
            Err(error) => format!("error: {error}"),
        };
        println!(
            "{}: {outcome}; {} replies; {} runs in its sequence",
            branch.name,
            branch.replies.len(),
            branch.usage.runs.len()
        );
    }
    println!(
        "all branches: {} runs, the shared start counted once",
        report.combined.runs.len()
    );
    Ok(())
}
