/*!
skein's turn layer: the one place a turn is run and recorded.

- [`Conversation`]: a live bookmark into the graph with default tools,
  hooks and a chain limit, optionally attached to a store; loading and
  forking stored ones.
- [`Prompt`] and [`ChainPrompt`]: one turn (a model call, or a tool loop)
  with its per-turn overrides, a chain's own hooks included, and `prepare`
  (the rendered request, nothing run); [`TurnInput`]: what a turn adds
  (text, messages, a configured prompt with variables, or nothing new);
  [`Response`], [`ChainResponse`] and [`Fork`]:
  what a turn returns, and replying and forking from it.
- [`Model`]: a handle on a model through the engine, by configured profile
  or by name; [`Home`] and [`home`](mod@home): what a surface supplies to
  open stored conversations, and the one way each surface gets one ready
  to go on with (its tools started, its model chosen).
- [`service`]: the turn service, the one place a turn is run and
  recorded: a surface's request (engine, rendered request, landing) in,
  the run's output and where it landed out; the landing rule, and where a
  request that names no conversation lands.
- `commit`: how the turn service writes a turn: one store transaction, the
  first turn of a conversation included, with the surface's choice of what
  a lost race does; and the failure rule for a failed model call (its input
  messages and its failed run stored, nothing moved).
- [`blocking`]: every operation that waits, run to completion for callers
  without an async runtime.
- [`family`](mod@family): a conversation's family, the one meaning every surface
  draws: members joined by origin, reruns on the turns they re-ran, and
  the conversations that merely share messages by content.

Recorded chats, the recording proxy, the command line and the Python
package all run and record their turns through [`service`]; none runs the
engine to record a turn, builds a bookmark, writes conversation settings or
assembles store writes by hand.
*/

mod again;
pub mod blocking;
pub(crate) mod commit;
mod conversation;
mod error;
pub mod family;
pub mod home;
mod input;
mod landing;
mod model;
mod open;
mod prompt;
mod response;
pub mod service;
mod settings;
mod settle;
pub mod telemetry;
mod turn;
mod write;

pub use again::AgainAt;
pub use commit::{Bookmark, OnMoved};
pub use conversation::{AfterCallHook, BeforeCallHook, Conversation, ConversationBuilder};
pub use error::{Error, Result};
pub use family::{Family, FamilyGraph, Joined, Member, Sharer, family};
pub use home::{Home, SurfaceError};
pub use input::{ConfiguredPrompt, TurnInput};
pub use landing::{PROBABLY_CONTINUES, asker_of_node, owner_of_node, producer_of_node};
pub use model::Model;
pub use open::{BranchAt, Load, ReplyAt};
pub use prompt::{ChainPrompt, Prompt, TextSink};
pub use response::{ChainResponse, Fork, Response};
pub use service::Landed;
