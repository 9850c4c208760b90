/*!
Persistence of the conversation graph.

[`Store`] is a SQLite database (the embedded default) holding nodes, blobs,
conversation bookmarks, runs and the tools each run offered. Its methods
block on I/O; from async code use [`Store::run`], which moves the work to
tokio's blocking pool so the runtime never stalls.

What it guarantees (see ARCHITECTURE.md for where each is enforced):

- appending a thread writes only nodes the database does not already hold,
  found by walking back from the head to the first stored node: cost is
  proportional to the new nodes, never to the depth;
- a thread loads from any head in one recursive query;
- a turn's nodes, run record and bookmark move commit in one `BEGIN
  IMMEDIATE` transaction; moving a bookmark is a compare-and-set on the head
  the turn started from, and losing that race still stores the turn and
  returns [`StoreError::HeadMoved`];
- nodes are never updated or deleted; only bookmarks move.

Modules: [`records`] (the typed rows), [`error`], and the store's operations
split by concern: graph, conversations, runs, reruns (counterfactual
re-runs of recorded turns), embeddings (a cache of vectors by content
digest), transfer (export/import) and verify.
*/

mod conversations;
mod embeddings;
pub mod error;
mod graph;
pub mod records;
mod reruns;
mod resolve;
mod runs;
mod schema;
mod sqlite;
mod transfer;
mod verify;

pub use conversations::CommitStage as CommitStageProbe;
pub use error::{HeadMoved, Result, StoreError};
pub use graph::{AppendReport, StoredNode, TreeEntry, preview};
pub use records::{
    Conversation, ConversationId, NewConversation, Origin, Relation, RerunId, RunId, RunRecord,
    RunStatus, TurnCommit,
};
pub use reruns::{RerunCommit, RerunRecord};
pub use sqlite::{BLOB_THRESHOLD, Store};
pub use transfer::ImportReport;
pub use verify::{Problem, VerifyReport};
