/*!
skein records, continues, branches and replays conversations with language
models. Every message lives once in a content-addressed graph; a
conversation is a bookmark into it.

This facade re-exports the pieces a user meets first:

- [`core`]: messages, parts, threads, node ids, tool specs, the provider trait;
- [`store`]: the SQLite store of the graph;
- [`providers`]: model backends, resolved from a model name;
- [`local`]: the embedded llama.cpp model and `models pull`;
- [`engine`]: configured prompts, profiles and backends, admission,
  structured output with repair, captured exchanges and continuation, and
  the usage ledger;
- [`recorded`]: recorded chats: turn evidence, sources and ablations,
  attribution, counterfactual reruns with verdicts, forks from the
  counterfactual, embedders;
- [`blocking`]: blocking forms of the engine's async operations, for code
  that has no async runtime;
- [`turn`]: running one turn (one model call) on a history and recording it.

```
use skein::core::{Message, Thread};

let history = Thread::new().push(Message::system("You are terse."));
let a = history.push(Message::user("left?"));
let b = history.push(Message::user("right?"));
// Equal prefixes have equal ids: both branches share the system node.
assert_eq!(a.parent().head_id(), b.parent().head_id());
```
*/

pub use skein_core as core;
pub use skein_engine as engine;
pub use skein_local as local;
pub use skein_providers as providers;
pub use skein_recorded as recorded;
pub use skein_store as store;

pub mod blocking;
pub mod turn;

pub use skein_core::{Message, NodeId, Part, Role, Thread, ToolSpec};
pub use skein_store::Store;
pub use turn::{Turn, TurnError, TurnOutcome};
