/*!
The repair-branch loop (seed 002, decision 3, the second sketch), written
with content-neutral APIs: the application starts from one already-assessed
candidate and its findings, interprets and assesses each new response with
its own model call, and decides to stop. The writer and the checker share
one backend at capacity one: the coordinator holds no permit while the
callback assesses.

Only the application decides that a candidate is accepted or withdrawn;
skein's outcome only says that the application stopped.

Run it with `cargo run -p skein-engine --example repair_branch`.
*/

use serde_json::{Value, json};
use skein_core::Role;
use skein_engine::coordinator::{Next, Outcome, TurnView};
use skein_engine::{
    BackendDef, BackendKind, Catalog, CoordinateError, Engine, MessageTemplate, Profile, PromptDef,
    Request, Totals,
};
use skein_providers::Scripted;
use std::sync::Arc;

/// A writer that proposes candidates as JSON, and a checker that assesses
/// them as JSON. The first candidate comes out broken once, so its run
/// needs a structural repair.
pub const RULES: &str = r#"
[[rules]]
name = "repair"
last_user_contains = "did not match the schema"
reply = '{"action": "revise", "candidate": "fn add(a: i32, b: i32) -> i32 { a - b }"}'

[[rules]]
name = "first candidate (malformed)"
last_user_contains = "Correct this function"
reply = "Here is my fix: a - b"

[[rules]]
name = "accept"
last_user_contains = ["Assess", "a + b"]
reply = '{"verdict": "accept", "findings": ""}'

[[rules]]
name = "reject"
last_user_contains = "Assess"
reply = '{"verdict": "reject", "findings": "it subtracts instead of adding"}'

[[rules]]
name = "second candidate"
last_user_contains = ["rejected", "subtracts"]
reply = '{"action": "revise", "candidate": "fn add(a: i32, b: i32) -> i32 { a + b }"}'

[[rules]]
name = "withdraw"
reply = '{"action": "withdraw"}'
"#;

fn engine() -> Result<Engine, Box<dyn std::error::Error + Send + Sync>> {
    let proposal = json!({
        "type": "object",
        "required": ["action"],
        "properties": {"action": {"enum": ["revise", "withdraw"]}, "candidate": {"type": "string"}}
    });
    let assessment = json!({
        "type": "object",
        "required": ["verdict", "findings"],
        "properties": {"verdict": {"enum": ["accept", "reject"]}, "findings": {"type": "string"}}
    });
    let catalog = Catalog::new()
        .backend(BackendDef::new("model", BackendKind::Echo).capacity(1))
        .profile(Profile::new("writer", "model", "scripted-writer"))
        .profile(Profile::new("checker", "model", "scripted-checker"))
        .prompt(
            PromptDef::new(
                "fix/start",
                vec![MessageTemplate::new(
                    Role::User,
                    "Correct this function: {{ code }}",
                )],
            )
            .variable("code")
            .default_profile("writer")
            .output_contract(proposal.clone()),
        )
        .prompt(
            PromptDef::new(
                "fix/follow-up",
                vec![MessageTemplate::new(
                    Role::User,
                    "Your candidate was rejected: {{ findings }}. Revise it.",
                )],
            )
            .variable("findings")
            .default_profile("writer")
            .output_contract(proposal),
        )
        .prompt(
            PromptDef::new(
                "check/assess",
                vec![MessageTemplate::new(Role::User, "Assess: {{ candidate }}")],
            )
            .variable("candidate")
            .default_profile("checker")
            .output_contract(assessment),
        );
    Ok(Engine::builder(catalog)
        .provider("model", Arc::new(Scripted::from_toml_str(RULES)?))
        .build()?)
}

/// The application's state for one branch.
pub struct Branch {
    pub engine: Engine,
    pub candidate: String,
    pub findings: String,
    pub accepted: bool,
    pub withdrawn: bool,
    /// Assessments made during coordination (the initial one is not redone).
    pub assessments: u32,
}

impl Branch {
    /// The application's assessment: a model call of its own, related to
    /// the turn it serves.
    async fn assess(&mut self, turn: &TurnView<'_>) -> Result<Value, skein_engine::EngineError> {
        let output = self
            .engine
            .run(turn.associate(
                Request::prompt("check/assess").var("candidate", self.candidate.clone()),
            ))
            .await?;
        self.assessments += 1;
        Ok(output.value.expect("the checker has an output contract"))
    }

    async fn choose_next(
        &mut self,
        turn: TurnView<'_>,
    ) -> Result<Next, skein_engine::CallbackError> {
        if let Some(response) = turn.response() {
            let proposal = response
                .value
                .as_ref()
                .expect("the writer has an output contract");
            if proposal["action"] == "withdraw" {
                self.withdrawn = true;
                return Ok(Next::Stop);
            }
            self.candidate = proposal["candidate"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            let assessment = self.assess(&turn).await?;
            if assessment["verdict"] == "accept" {
                self.accepted = true;
                return Ok(Next::Stop);
            }
            self.findings = assessment["findings"]
                .as_str()
                .unwrap_or_default()
                .to_string();
        }
        Ok(Next::Continue(
            Request::prompt("fix/follow-up").var("findings", self.findings.clone()),
        ))
    }
}

/// What the example ends with.
#[derive(Debug)]
pub struct Report {
    pub candidate: String,
    pub accepted: bool,
    pub withdrawn: bool,
    pub assessments: u32,
    /// Model calls of the first run: 2, it needed a structural repair.
    pub initial_attempts: u32,
    pub outcome: Result<Outcome, CoordinateError>,
    /// The sequence: the start, each continuation, each assessment.
    pub usage: Totals,
}

pub async fn demo() -> Result<Report, Box<dyn std::error::Error + Send + Sync>> {
    let engine = engine()?;
    let initial = engine
        .run(
            Request::prompt("fix/start")
                .var("code", "fn add(a: i32, b: i32) -> i32 { a * b }")
                .capture(),
        )
        .await?;
    let initial_attempts = initial.attempts;
    let candidate = initial.value.as_ref().expect("validated")["candidate"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    // The batch assessment the application already made before coordinating.
    let first = engine
        .run(
            Request::prompt("check/assess")
                .var("candidate", candidate.clone())
                .associated_with(&initial.run),
        )
        .await?;
    let findings = first.value.expect("validated")["findings"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let start = initial.exchange.expect("capture was asked for");

    let mut branch = Branch {
        engine: engine.clone(),
        candidate,
        findings,
        accepted: false,
        withdrawn: false,
        assessments: 0,
    };
    let coordinator = engine.coordinator(&start, 3);
    let sequence = coordinator.sequence().to_string();
    let outcome = coordinator
        .run_with(&mut branch, |branch, turn, _cancel| {
            Box::pin(branch.choose_next(turn))
        })
        .await;
    Ok(Report {
        candidate: branch.candidate,
        accepted: branch.accepted,
        withdrawn: branch.withdrawn,
        assessments: branch.assessments,
        initial_attempts,
        outcome,
        usage: engine.ledger().sequence(&sequence),
    })
}

pub fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let report = runtime.block_on(demo())?;
    println!("candidate: {}", report.candidate);
    println!(
        "accepted: {}, withdrawn: {}, assessments during coordination: {}",
        report.accepted, report.withdrawn, report.assessments
    );
    println!("outcome: {:?}", report.outcome);
    println!(
        "sequence: {} runs, {} input tokens",
        report.usage.runs.len(),
        report.usage.input_tokens.value
    );
    Ok(())
}
