//! A recorded chat on the embedded local model (SmolLM2-135M, greedy) with
//! the local MiniLM sentence embedder: record two turns, explain the
//! second, re-run it without one source with a baseline, and fork.
//!
//! Needs `skein models pull smollm2` and `skein models pull minilm`. Run
//! with `cargo run -p skein-recorded --example local_advisor`. What the
//! small model answers is whatever it answers; with greedy decoding the
//! baseline always repeats the recorded reply, so the verdict is never
//! "inconclusive" for an unstable baseline.

use skein_core::provider::GenerationOptions;
use skein_engine::{BackendDef, BackendKind, Catalog, Engine, Profile};
use skein_recorded::{
    MiniLmEmbedder, ReasonOptions, RecordedChat, RecordedError, RerunOptions, RerunResult, Source,
};
use std::sync::Arc;

/// What the walkthrough saw.
#[allow(
    dead_code,
    reason = "its fields are read by the tests that include this file"
)]
pub struct Outcome {
    pub chat: RecordedChat,
    pub explained: String,
    pub rerun: RerunResult,
    pub fork_reply: String,
}

/// An engine whose `local` profile runs SmolLM2 greedily, 40 tokens at most.
pub fn engine() -> Engine {
    let options = GenerationOptions {
        max_tokens: Some(40),
        ..GenerationOptions::default()
    };
    let catalog = Catalog::new()
        .backend(BackendDef::new("local", BackendKind::Local { path: None }).capacity(1))
        .profile(Profile::new("local", "local", "smollm2").options(options));
    Engine::new(catalog).expect("the catalog is valid")
}

pub async fn run() -> Result<Outcome, RecordedError> {
    let embedder = Arc::new(MiniLmEmbedder::load(1)?);
    let mut chat = RecordedChat::builder(engine(), "local")
        .system("You are a cautious investment advisor. Answer in one short sentence.")
        .source(Source::fact(
            "sentiment",
            "Fact: social media sentiment about ACME is very bullish.",
        ))
        .source(Source::fact(
            "revenue",
            "Fact: ACME revenue was flat this quarter.",
        ))
        .embedder(embedder)
        .build()
        .await?;
    chat.send("How is ACME doing?").await?;
    chat.send("Should I buy more ACME shares?").await?;
    let explained = chat.reason(1, ReasonOptions::new()).await?.render();
    let top = chat.report(1).expect("just reasoned").removable()[0].to_string();
    let rerun = chat
        .rerun_turn(1, RerunOptions::ignore([top]).samples(2).check_baseline())
        .await?;
    let mut fork = chat.fork(1, Some(&rerun)).await?;
    let fork_reply = fork.send("What would change your mind?").await?.text();
    Ok(Outcome {
        chat,
        explained,
        rerun,
        fork_reply,
    })
}

#[allow(dead_code, reason = "unused where the tests include this file")]
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let outcome = run().await?;
    for turn in outcome.chat.turns() {
        println!(
            "turn {}: {}\n  -> {}",
            turn.index(),
            turn.user_text(),
            turn.text().trim()
        );
    }
    println!("\n{}", outcome.explained);
    print!("{}", outcome.rerun.render());
    println!("fork: {}", outcome.fork_reply.trim());
    Ok(())
}
