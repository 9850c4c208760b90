/*!
skein records, continues, branches and replays conversations with language
models. Every message lives once in a content-addressed graph; a
conversation is a bookmark into it.

This facade re-exports the pieces a user meets first:

- [`core`]: messages, parts, threads, node ids, tool specs, the provider trait;
- [`store`]: the SQLite store of the graph;
- [`providers`]: model backends, resolved from a model name;
- `local` (the `local` feature, on by default): the embedded llama.cpp
  model and `models pull`;
- [`engine`]: configured prompts, profiles and backends, admission,
  structured output with repair, captured exchanges and continuation, and
  the usage ledger;
- [`recorded`]: recorded chats: turn evidence, sources and ablations,
  attribution, counterfactual reruns with verdicts, forks from the
  counterfactual, embedders;
- [`conversation`]: the turn layer, where every turn is run and recorded
  (its main types are re-exported at the top level), and [`family`](mod@family): a
  conversation's relatives by origin, and those that merely share its
  messages by content;
- [`blocking`]: blocking forms of the engine's async operations, for code
  that has no async runtime;
- [`builtin`]: the built-in tools the command line offers by name;
- [`command`]: an executable offered to a model as a tool;
- [`mcp`]: the tools of Model Context Protocol servers;
- [`media`]: the media type of an attached file;
- [`retention`]: `[retention]` and garbage collection, as `skein gc`,
  `skein serve` and Python run them;
- [`import`]: importing other tools' data (`llm`'s logs.db).

And the types most code starts from: [`Model`] (a handle on a model
through the engine), [`Conversation`] (a named bookmark with default tools,
hooks and a chain limit, optionally attached to a store), [`Response`] and
[`ChainResponse`] with `reply` and `fork`, and [`TurnInput`] (what a turn
adds: text, messages, or nothing new). Every operation that waits has
an async form (`send().await`) and a blocking one (`send_blocking()`) that
behaves identically. See docs/continuing-and-branching.md.

```
use skein::Model;

let model = Model::open("echo")?;
let first = model.prompt("Ten words about rivers.").send_blocking()?;
let second = first.reply("Now about lakes.").send_blocking()?;
let branch = first.fork().prompt("Now about seas.").send_blocking()?;
assert_eq!(second.conversation().id(), first.conversation().id());
assert_ne!(branch.conversation().id(), first.conversation().id());
# Ok::<(), skein::Error>(())
```

```
use skein::core::{Message, Thread};

let history = Thread::new().push(Message::system("You are terse."));
let a = history.push(Message::user("left?"));
let b = history.push(Message::user("right?"));
// Equal prefixes have equal ids: both branches share the system node.
assert_eq!(a.parent().head_id(), b.parent().head_id());
```
*/

pub use skein_conversation as conversation;
pub use skein_core as core;
pub use skein_engine as engine;
#[cfg(feature = "local")]
pub use skein_local as local;
pub use skein_providers as providers;
pub use skein_recorded as recorded;
pub use skein_store as store;

pub mod builtin;
pub mod command;
pub mod config;
pub mod home;
pub mod import;
pub mod mcp;
pub mod media;
pub mod retention;
pub mod telemetry;

pub use skein_conversation::blocking;
pub use skein_conversation::{
    AfterCallHook, BeforeCallHook, ChainPrompt, ChainResponse, Conversation, ConversationBuilder,
    Error, Family, Fork, Home, Landed, Model, OnMoved, Prompt, Response, Result, SurfaceError,
    TurnInput, family,
};
pub use skein_core::{Message, NodeId, Part, Role, Thread, ToolCall, ToolResult, ToolSpec};
pub use skein_engine::{
    CallDecision, ChainStatus, DEFAULT_CHAIN_LIMIT, DriftWarning, Engine, Tool, ToolError, tool_fn,
};
pub use skein_store::{CostMeter, Costs, Store};

/// The guide's examples, run as doc tests.
#[doc = include_str!("../../../docs/continuing-and-branching.md")]
#[cfg(doctest)]
pub struct ContinuingAndBranchingGuide;

/// The coordinator guide's examples, run as doc tests.
#[doc = include_str!("../../../docs/coordinator.md")]
#[cfg(doctest)]
pub struct CoordinatorGuide;

/// The README's examples, run as doc tests.
#[doc = include_str!("../../../README.md")]
#[cfg(doctest)]
pub struct Readme;
