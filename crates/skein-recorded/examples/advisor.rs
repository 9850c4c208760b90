//! The seed's three-turn advisor desk on the scripted model: record three
//! turns, explain turn 1, re-run it without `social-sentiment` (BUY flips
//! to HOLD, verdict confirmed), and fork from the counterfactual, whose
//! turn 2 answers KEEP where the original answered ADD.
//!
//! Run it with `cargo run -p skein-recorded --example advisor`; pass a path
//! to record everything in that database (`skein tree` shows it).

use skein_engine::{BackendDef, BackendKind, Catalog, Engine, Profile};
use skein_providers::Scripted;
use skein_recorded::{
    LexicalEmbedder, ReasonOptions, RecordedChat, RecordedChatBuilder, RerunOptions, Source,
    Verdict,
};
use skein_store::Store;
use std::sync::Arc;

/// The rule file the scripted advisor answers by.
pub const SCRIPT: &str = include_str!("data/advisor.toml");

/// What the walkthrough saw.
#[allow(
    dead_code,
    reason = "its fields are read by the tests that include this file"
)]
pub struct Outcome {
    pub chat: RecordedChat,
    pub fork: RecordedChat,
    pub explained: String,
    pub rerun: skein_recorded::RerunResult,
    pub original_allocation: String,
    pub fork_allocation: String,
}

/// An engine whose `advisor` profile answers with the scripted advisor.
pub fn engine(provider: Arc<dyn skein_core::Provider>) -> Engine {
    let catalog = Catalog::new()
        .backend(BackendDef::new("script", BackendKind::Echo))
        .profile(Profile::new("advisor", "script", "advisor-1"));
    Engine::builder(catalog)
        .provider("script", provider)
        .build()
        .expect("the catalog is valid")
}

/// The scripted advisor model.
pub fn model() -> Arc<dyn skein_core::Provider> {
    Arc::new(Scripted::from_toml_str(SCRIPT).expect("the script loads"))
}

/// The advisor desk on `provider`: its system message, three sources and
/// the lexical embedder.
pub fn builder(provider: Arc<dyn skein_core::Provider>) -> RecordedChatBuilder {
    RecordedChat::builder(engine(provider), "advisor")
        .system("You are an investment advisor. Answer BUY or HOLD when asked.")
        .source(Source::fact(
            "fundamentals",
            "fundamentals: revenue flat, margins stable",
        ))
        .source(Source::fact(
            "social-sentiment",
            "social-sentiment: bullish, retail chatter at a three-month high",
        ))
        .source(Source::document(
            "analyst-note",
            "analyst-note: price target unchanged",
        ))
        .embedder(Arc::new(LexicalEmbedder::default()))
}

/// Record, explain, re-run and fork.
pub async fn run(
    provider: Arc<dyn skein_core::Provider>,
    store: Option<Store>,
) -> Result<Outcome, skein_recorded::RecordedError> {
    let mut builder = builder(provider).name("advisor desk");
    if let Some(store) = store {
        builder = builder.store(store);
    }
    let mut chat = builder.build().await?;

    // 1. Record turns: each send freezes its evidence.
    chat.send("How is the position looking?").await?;
    chat.send("Should we BUY or HOLD this position?").await?;
    let original_allocation = chat.send("How much should we allocate?").await?.text();

    // 2. What drove turn 1's reply? (correlational)
    let report = chat.reason(1, ReasonOptions::new()).await?;
    let explained = report.render();

    // 3. Re-run turn 1 byte for byte, minus one source, with a baseline.
    let rerun = chat
        .rerun_turn(
            1,
            RerunOptions::ignore(["social-sentiment"])
                .comparator(|a: &str, b: &str| a.split(':').next() != b.split(':').next())
                .check_baseline(),
        )
        .await?;
    assert_eq!(rerun.verdict, Some(Verdict::Confirmed));

    // 4. Continue from the what-if as a new chat; the original is untouched.
    let mut fork = chat.fork(1, Some(&rerun)).await?;
    let fork_allocation = fork.send("How much should we allocate?").await?.text();

    Ok(Outcome {
        chat,
        fork,
        explained,
        rerun,
        original_allocation,
        fork_allocation,
    })
}

#[allow(dead_code, reason = "unused where the tests include this file")]
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let store = match std::env::args().nth(1) {
        Some(path) => Some(Store::open(path)?),
        None => None,
    };
    let outcome = run(model(), store).await?;
    println!("{}", outcome.explained);
    print!("{}", outcome.rerun.render());
    println!("original turn 2: {}", outcome.original_allocation);
    println!("fork turn 0:     {}", outcome.fork_allocation);
    if let Some(conversation) = outcome.fork.conversation() {
        println!("fork conversation: {conversation}");
    }
    Ok(())
}
