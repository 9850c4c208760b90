/*!
skein's functional core: the data every other crate speaks.

- [`message`]: roles, parts and messages: the content of the graph.
- [`id`]: node ids and content digests, and their short hex forms.
- [`encoding`]: the canonical encoding that defines node ids, and the
  storage body format (documented in `docs/canonical-encoding.md`).
- [`thread`]: `Thread`, an `Arc`-linked persistent list of nodes.
- [`annotation`]: per-run metadata about request parts (cache hints, source
  tags) that is never part of node identity.
- [`tool`]: tool specs and their stable hashes.
- [`provider`]: the `Provider` trait every model backend implements, with its
  request, stream event, response and usage types.
- [`settings`]: a conversation's stored settings, one typed schema.
- [`run`]: run records (one logical model call each) with their typed
  relations, and the conversation, run and rerun ids every layer shares.
- [`usage`]: usage totals over related runs, the one definition the engine's
  ledger and the store share.
- [`price`]: a dated price table applied to usage totals when they are
  read: what runs cost, and what prompt caching saved.

This crate performs no I/O and owns no async runtime.
*/

pub mod annotation;
pub mod calendar;
pub mod encoding;
pub mod id;
pub mod message;
pub mod price;
pub mod provider;
pub mod run;
pub mod settings;
pub mod thread;
pub mod tool;
pub mod usage;

pub use annotation::{Annotation, Annotations, CacheHint, PartRef};
pub use id::{Digest, NodeId};
pub use message::{Attachment, Erased, ErasedPart, Message, Part, Role, ToolCall, ToolResult};
pub use provider::{
    AttachmentSupport, BoxFuture, BoxStream, FinishReason, GenerationOptions, ModelRequest,
    ModelResponse, Provider, ProviderError, ResponseAssembler, StreamEvent, Usage,
};
pub use run::{
    ConversationId, Origin, Relation, ReplayId, RequestRef, RerunId, RunId, RunRecord, RunStatus,
    TurnStep, now_ms,
};
pub use settings::{ConversationSettings, RecordedSettings, StoredSource};
pub use thread::{Node, StoreKey, Thread};
pub use tool::{InvalidToolSpec, ToolSpec};
