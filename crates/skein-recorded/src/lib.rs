/*!
Recorded chats: record a conversation turn by turn so that any reply can
be explained, counterfactually re-run without chosen context sources, and
forked from the counterfactual.

- [`source`]: context sources (facts, documents, memory, tools, tool
  results), tagged on the request by annotations, and the hook for sources
  only the application can render.
- [`RecordedChat`] ([`chat`]): `send` runs a turn and freezes its
  [`Turn`] evidence ([`evidence`]).
- [`reason`](RecordedChat::reason) ([`reason`]): the reference four-signal
  attribution, memoised per turn.
- [`rerun_turn`](RecordedChat::rerun_turn) ([`rerun`]): probes and
  baselines, what changed, the verdict.
- [`fork`](RecordedChat::fork) ([`fork`]): a new chat from a turn's reply or
  a rerun's answer, with provenance enforced.
- [`embed`]: the embedders (the trait, lexical, OpenAI-compatible, local
  MiniLM; from `skein_providers::embed`) and the embedding cache.
- [`persist`]: loading a recorded chat back from its conversation, whole
  ([`load`](RecordedChatBuilder::load)) or one turn alone
  ([`load_turn`](RecordedChatBuilder::load_turn), a [`LoadedTurn`]);
  [`open_turn`] ([`open`]): a recorded turn opened for a surface, its
  tools started and its model chosen, as every surface opens one.
- [`blocking`]: `*_blocking` forms of the async operations.

The walkthrough with runnable examples is `docs/recorded-chats.md`.
*/

pub mod blocking;
pub mod cases;
pub mod chat;
pub mod compare;
pub mod embed;
pub mod error;
pub mod evidence;
pub mod fork;
mod layout;
pub mod open;
pub mod persist;
pub mod reason;
pub mod replay;
pub mod rerun;
pub mod source;

pub use chat::{BeforeCallFn, RecordedChat, RecordedChatBuilder};
pub use embed::{
    CachedEmbedder, EmbedError, Embedder, LexicalEmbedder, MiniLmEmbedder, OpenAiEmbedder, cosine,
};
pub use error::{RecordedError, Result};
pub use evidence::Turn;
pub use open::open_turn;
pub use persist::{LoadedTurn, TurnAt, conversation_of_node};
pub use reason::{DEFAULT_MAX_SUSPECTS, ReasonOptions, Report, Signals, Suspect};
pub use rerun::{
    Baseline, CompareFn, DEFAULT_SAMPLES, DEFAULT_THRESHOLD, RerunOptions, RerunResult, Sample,
    Similarity, Verdict, WhatChanged,
};
pub use skein_store::RerunId;

/// The guide, `docs/recorded-chats.md`, whose examples run as doctests.
#[doc = include_str!("../../../docs/recorded-chats.md")]
pub mod guide {}
pub use source::{
    Ablation, HookContext, HookError, Purpose, Source, SourceHook, SourceInfo, SourceKind,
};
