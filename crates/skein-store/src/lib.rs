/*!
Persistence of the conversation graph.

[`Store`] is a database holding nodes, blobs, conversation bookmarks, runs
and the tools each run offered: a SQLite file (the embedded default) or,
with the `postgres` feature, a PostgreSQL database shared by many processes
and hosts, chosen by the location [`Store::open`] is given. Its methods
block on I/O; each waits for the same operation of the async API,
[`Store::nonblocking`] ([`AsyncStore`]), which async code awaits instead and
which on PostgreSQL awaits tokio-postgres on the caller's task and blocks
no thread. Export, import, verify and usage accounts are blocking only: from
async code run them with [`Store::run_blocking`], which runs blocking work
where it cannot stall the runtime (blocking.rs).

What it guarantees (see ARCHITECTURE.md for where each is enforced):

- appending a thread writes only nodes the database does not already hold,
  found by walking back from the head to the first stored node: cost is
  proportional to the new nodes, never to the depth;
- a thread loads from any head with one index range scan per lane it
  crosses (on PostgreSQL, all in one query);
- a turn ([`TurnCommit`]) is one transaction: its nodes, its runs and where
  it lands, whether a bookmark moved by compare-and-set, a conversation
  created with it (a first turn), or none (a failed first turn's run);
  losing the compare-and-set still stores the turn and either returns
  [`StoreError::HeadMoved`] or branches into a new conversation in the same
  transaction, as the target says;
- nodes are never updated, except by [`Store::redact`], which erases a
  node's content in place and keeps its id; only bookmarks move, and nodes
  are deleted only by [`Store::forget`], once nothing remaining reaches them
  (forget.rs).

[`Store::open_with`] takes an [`OpenMode`]: create the database when
missing, require it, or only read it (never creating, migrating or writing
anything where there is no skein database); no mode touches a file that is
not a skein database.

Modules: the facade (store.rs: [`Store`], which opens a backend by its
location and holds it as an `Arc<dyn Backend>`), its async API
(async_store.rs), the
backend supertrait (backend.rs; each concern's trait is in its module, with
that concern's public operations), where blocking work runs for
async callers (blocking.rs), and what both backends share, one module per
concern: [`records`] (the typed rows), [`error`], the graph's types and
lanes (graph.rs, lanes.rs), conversations, runs, reruns of recorded turns,
replays (and their workers' claims), families, [`search`]'s query language, resolve (id prefixes), usage
accounts, the embedding cache, transfer (the export format and import's
checks), verify (the checks), the open modes (open.rs), [`location`] and
codec.rs. Each backend implements the traits in a directory of files named
like those: sqlite/ (with open.rs recognising a skein file, and schema.rs
its migrations) and, with the `postgres` feature, postgres/ (with the pool,
TLS, URL settings and the blocking bridge).
*/

mod async_store;
mod backend;
mod blocking;
mod bodies;
mod codec;
mod conversations;
mod costs;
mod embeddings;
pub mod error;
mod family;
mod forget;
mod graph;
mod labels;
mod lanes;
pub mod location;
mod offers;
mod open;
pub mod places;
#[cfg(feature = "postgres")]
mod postgres;
pub mod records;
mod replays;
mod reruns;
mod resolve;
mod runs;
pub mod search;
mod sqlite;
mod store;
mod transfer;
mod usage;
mod verify;

pub use async_store::AsyncStore;
pub use blocking::blocking_caller;
pub use bodies::{RECUT_BATCH, Recut, RequestBody};
pub use codec::BLOB_THRESHOLD;
pub use conversations::CommitStage as CommitStageProbe;
pub use conversations::check_conversation_name;
pub use costs::{CostMeter, Costs};
pub use error::{HeadMoved, Result, StoreError, TlsProblem};
pub use family::{FamilyLimits, FamilyRows, Rooted};
pub use forget::{
    DeletedConversation, Filter, Forgotten, GC_BATCH, Progress, Redacted, SHARERS_SHOWN, Selection,
};
pub use graph::{AppendReport, StoredNode, TreeEntry, preview};
pub use labels::{Label, LabelCount, check_label_name};
pub use offers::ToolOffer;
pub use open::OpenMode;
#[cfg(feature = "postgres")]
#[doc(hidden)]
pub use postgres::scratch;
pub use records::{
    Committed, ConversationId, ConversationRecord, ListPosition, NewConversation, OnConflict,
    Origin, Relation, ReplayId, RerunId, RunId, RunRecord, RunStatus, Target, TurnCommit, TurnStep,
};
pub use replays::{
    ListedReplay, NewReplayTurn, ReplayPosition, ReplayRecord, ReplayState, ReplayStatus,
    ReplayTotals, ReplayTurn, ReplayTurnFinish,
};
pub use reruns::{RerunCommit, RerunRecord};
pub use search::{ConversationRef, SearchError, SearchMatch, SearchQuery, SearchResults};
pub use skein_core::usage::{Figure, Totals};
pub use skein_core::{ConversationSettings, RecordedSettings};
pub use store::Store;
pub use transfer::{BoundedLine, DEFAULT_IMPORT_LINE_LIMIT, ImportReport, read_line_within};
pub use usage::UsageScope;
pub use verify::{Problem, VerifyReport};
