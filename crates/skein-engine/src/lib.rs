/*!
skein's execution engine.

- [`config`]: prompts, profiles and backends as data, in a [`Catalog`];
  [`load`] reads them from a directory of TOML files.
- [`Engine`]: `prepare` (resolve and render, no generation),
  `prepare_execution` (a single-use handle), `run`, `continue_from` a
  captured [`Exchange`], and `inspect_*`.
- Admission per backend ([`admission`]), structured output with repair
  (the `contract` module), capture ([`exchange`]), observation
  ([`observe`]), the usage ledger ([`ledger`]) and the bounds on a reply's
  text and time ([`with_reply_limit`], [`with_reply_deadline`]).

Settings are resolved fresh for every execution; a continuation carries
conversation content forward and nothing else.

```
use skein_core::Role;
use skein_engine::{BackendDef, BackendKind, Catalog, Engine, MessageTemplate, Profile, PromptDef, Request};

let catalog = Catalog::new()
    .backend(BackendDef::new("echo", BackendKind::Echo).capacity(1))
    .profile(Profile::new("quick", "echo", "echo"))
    .prompt(
        PromptDef::new("ask", vec![MessageTemplate::new(Role::User, "What is {{ thing }}?")])
            .variable("thing")
            .default_profile("quick"),
    );
let engine = Engine::new(catalog)?;

// Resolve and render without generating.
let prepared = engine.prepare(&Request::prompt("ask").var("thing", "a skein"))?;
assert_eq!((prepared.profile.as_str(), prepared.backend.as_str()), ("quick", "echo"));

let runtime = tokio::runtime::Builder::new_current_thread().build()?;
runtime.block_on(async {
    let first = engine.run(Request::prompt("ask").var("thing", "a skein").capture()).await?;
    let exchange = first.exchange.expect("capture was asked for");
    // A follow-up with the exchange as history: settings resolved afresh.
    let next = engine
        .continue_from(&exchange, Request::prompt("ask").var("thing", "a thread"))
        .await?;
    assert_eq!(next.prepared.thread.len(), 3);
    // The ledger counts the shared first run once.
    assert_eq!(engine.ledger().family(&first.run).runs.len(), 2);
    Ok::<_, skein_engine::EngineError>(())
})?;
# Ok::<_, Box<dyn std::error::Error>>(())
```
*/

pub mod admission;
mod backends;
mod chain;
pub mod config;
mod contract;
pub mod coordinator;
mod engine;
pub mod erased;
pub mod error;
pub mod exchange;
mod execute;
pub mod ledger;
pub mod load;
pub mod observe;
mod render;
mod reply_limit;
pub mod request;
pub mod tools;

pub use admission::WhenBusy;
pub use chain::{
    AfterCall, BeforeCall, CallDecision, Chain, ChainFailure, ChainOutput, ChainStatus,
    DEFAULT_CHAIN_LIMIT, DriftTracker, DriftWarning,
};
pub use config::{
    BackendDef, BackendKind, Catalog, CredentialSource, MessageTemplate, Profile, PromptDef,
    VariableDecl,
};
pub use coordinator::{CallbackError, CoordinateError, Coordinator, Next, Outcome, TurnView};
pub use engine::{
    BackendInspection, Engine, EngineBuilder, Prepared, PreparedExecution, PromptInspection,
};
pub use error::{EngineError, Result};
pub use exchange::{Exchange, ExchangeDetails, PromptRef, RenderedPrompt, Validation};
pub use execute::RunOutput;
pub use ledger::{Figure, Ledger, LedgerEntry, Totals};
pub use load::load_dir;
pub use observe::{AttemptKind, Event, EventChannel, EventKind, Observer, RunId};
pub use reply_limit::{with_reply_deadline, with_reply_limit};
pub use request::{Request, RequestMessage};
pub use tokio_util::sync::CancellationToken;
pub use tools::{Tool, ToolError, tool_fn};
