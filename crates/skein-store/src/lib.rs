/*!
Persistence of the conversation graph.

[`Store`] is a database holding nodes, blobs, conversation bookmarks, runs
and the tools each run offered: a SQLite file (the embedded default) or,
with the `postgres` feature, a PostgreSQL database shared by many processes
and hosts, chosen by the location [`Store::open`] is given. Its methods
block on I/O; from async code use [`Store::run_blocking`], which moves the work to
tokio's blocking pool so the runtime never stalls, or the async forms of
the two hot paths, [`Store::load_thread_async`] and
[`Store::commit_turn_async`], which on PostgreSQL block no thread at all.

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
- nodes are never updated or deleted; only bookmarks move.

[`Store::open_with`] takes an [`OpenMode`]: create the database when
missing, require it, or only read it (never creating, migrating or writing
anything where there is no skein database); no mode touches a file that is
not a skein database.

Modules: [`records`] (the typed rows), [`error`], the facade (store.rs)
that picks a backend, the open modes and the recognition of a SQLite file
(open.rs), what both backends share (codec.rs, location.rs, and
the non-SQL halves of the modules below), the SQLite operations split by
concern (graph, conversations, families, runs, reruns of recorded turns,
the embedding cache, transfer, verify, resolve, usage accounts, schema) and the PostgreSQL
backend (postgres/, same split).
*/

mod codec;
mod conversations;
mod embeddings;
pub mod error;
mod family;
mod graph;
mod lanes;
pub mod location;
mod open;
#[cfg(feature = "postgres")]
mod postgres;
pub mod records;
mod reruns;
mod resolve;
mod runs;
mod schema;
pub mod search;
mod sqlite;
mod store;
mod transfer;
mod usage;
mod verify;

pub use codec::BLOB_THRESHOLD;
pub use conversations::CommitStage as CommitStageProbe;
pub use error::{HeadMoved, Result, StoreError, TlsProblem};
pub use family::{FamilyLimits, FamilyRows, Rooted};
pub use graph::{AppendReport, StoredNode, TreeEntry, preview};
pub use open::OpenMode;
#[cfg(feature = "postgres")]
#[doc(hidden)]
pub use postgres::scratch;
pub use records::{
    Committed, ConversationId, ConversationRecord, ListPosition, NewConversation, OnConflict,
    Origin, Relation, RerunId, RunId, RunRecord, RunStatus, Target, TurnCommit, TurnStep,
};
pub use reruns::{RerunCommit, RerunRecord};
pub use search::{ConversationRef, SearchError, SearchMatch, SearchQuery, SearchResults};
pub use skein_core::usage::{Figure, Totals};
pub use skein_core::{ConversationSettings, RecordedSettings};
pub use store::{Store, blocking_caller};
pub use transfer::{DEFAULT_IMPORT_LINE_LIMIT, ImportReport};
pub use usage::UsageScope;
pub use verify::{Problem, VerifyReport};
