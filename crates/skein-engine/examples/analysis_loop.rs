/*!
The analysis loop (seed 002, decision 3): the application examines each new
response and chooses the next question, or decides that its investigation is
complete. skein keeps the history and performs each execution; it never
decides whether a reply answered anything.

Run it with `cargo run -p skein-engine --example analysis_loop`. The model is
the scripted one, with its rules inline below.
*/

use skein_core::Role;
use skein_engine::coordinator::{Next, Outcome};
use skein_engine::{
    BackendDef, BackendKind, Catalog, CoordinateError, Engine, MessageTemplate, Profile, PromptDef,
    Request, Totals,
};
use skein_providers::Scripted;
use std::sync::Arc;

/// A research assistant that ends each reply with its open question, if any.
pub const RULES: &str = r#"
[[rules]]
name = "survey"
last_user_contains = "Investigate"
reply = "Survey: the bridge opened in 1932. Open question: who maintains the bridge?"

[[rules]]
name = "maintainer"
last_user_contains = "who maintains the bridge"
reply = "The county maintains it. Open question: when was it last inspected?"

[[rules]]
name = "inspection"
last_user_contains = "when was it last inspected"
reply = "It was inspected in 2021 and passed."

[[rules]]
name = "fallback"
reply = "I have nothing to add."
"#;

fn engine() -> Result<Engine, Box<dyn std::error::Error + Send + Sync>> {
    let catalog = Catalog::new()
        .backend(BackendDef::new("model", BackendKind::Echo).capacity(1))
        .profile(Profile::new("researcher", "model", "scripted"))
        .prompt(
            PromptDef::new(
                "research/start",
                vec![
                    MessageTemplate::new(Role::System, "You investigate one topic at a time."),
                    MessageTemplate::new(Role::User, "Investigate {{ topic }}."),
                ],
            )
            .variable("topic")
            .default_profile("researcher"),
        )
        .prompt(
            PromptDef::new(
                "research/investigate",
                vec![MessageTemplate::new(Role::User, "{{ question }}")],
            )
            .variable("question")
            .default_profile("researcher"),
        );
    Ok(Engine::builder(catalog)
        .provider("model", Arc::new(Scripted::from_toml_str(RULES)?))
        .build()?)
}

/// The application's own state: what it has learned and asked. All meaning
/// lives here.
#[derive(Debug, Default)]
pub struct Analysis {
    pub findings: Vec<String>,
    pub asked: Vec<String>,
}

impl Analysis {
    fn record(&mut self, text: &str) {
        self.findings.push(text.to_string());
    }

    /// The application's reading of its latest finding.
    fn next_question(&self) -> Option<String> {
        let latest = self.findings.last()?;
        let (_, question) = latest.split_once("Open question: ")?;
        let question = question.trim().to_string();
        (!self.asked.contains(&question)).then_some(question)
    }
}

/// What the example ends with.
#[derive(Debug)]
pub struct Report {
    pub analysis: Analysis,
    pub outcome: Result<Outcome, CoordinateError>,
    /// The runs of the coordinated sequence, the start included.
    pub usage: Totals,
}

pub async fn demo() -> Result<Report, Box<dyn std::error::Error + Send + Sync>> {
    let engine = engine()?;
    let initial = engine
        .run(
            Request::prompt("research/start")
                .var("topic", "the old bridge")
                .capture(),
        )
        .await?;
    let initial = initial.exchange.expect("capture was asked for");

    // application.start_analysis(initial_exchange)
    let mut analysis = Analysis::default();
    analysis.record(&initial.text());

    let coordinator = engine.coordinator(&initial, 3);
    let sequence = coordinator.sequence().to_string();
    let outcome = coordinator
        .run_with(&mut analysis, |analysis, turn, _cancel| {
            Box::pin(async move {
                if let Some(response) = turn.response() {
                    analysis.record(&response.text());
                }
                let Some(question) = analysis.next_question() else {
                    return Ok(Next::Stop);
                };
                analysis.asked.push(question.clone());
                Ok(Next::Continue(
                    Request::prompt("research/investigate").var("question", question),
                ))
            })
        })
        .await;
    let usage = engine.ledger().sequence(&sequence);
    Ok(Report {
        analysis,
        outcome,
        usage,
    })
}

pub fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let report = runtime.block_on(demo())?;
    for (i, finding) in report.analysis.findings.iter().enumerate() {
        println!("finding {i}: {finding}");
    }
    println!("outcome: {:?}", report.outcome);
    println!(
        "sequence: {} runs, {} input tokens, {} output tokens",
        report.usage.runs.len(),
        report.usage.input_tokens.value,
        report.usage.output_tokens.value
    );
    Ok(())
}
