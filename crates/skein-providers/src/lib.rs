/*!
skein's model backends.

- `local` (the `local` feature, on by default): the embedded llama.cpp
  model (`smollm2`, `local:PATH`), shared per process.
- [`http`]: OpenAI-compatible chat completions and Anthropic Messages, with
  streaming, retries, timeouts and typed failures.
- [`Echo`] (`echo`): replies with a summary of the request it received.
- [`Scripted`] (`scripted:PATH`): answers by the first matching rule of a
  TOML rule file; can call tools, fail with any provider error, or cut its
  stream. The file format is documented on [`scripted`].
- [`resolve`]: turns a model name into a provider and the model name to send
  it; [`BackendKind`] builds a configured backend's provider ([`registry`],
  the one table of backends).
- [`embed`]: embedders (texts to vectors): the lexical one, an
  OpenAI-compatible endpoint over the HTTP transport, and the local MiniLM
  sentence embedder (the `local` feature).

The echo and scripted models are deterministic and never touch the network:
tests, docs and demos rely on them.

# Streams of the deterministic models

Both models compute their whole answer up front and stream it the same way:

- reply text as word chunks (each word with the whitespace after it), which
  concatenate to the exact text;
- each tool call as `ToolCall` events: the first carries the id and name;
  arguments longer than four characters are split across at least two
  events, and the pieces concatenate to the exact raw text; ids are
  deterministic ([`deterministic_call_id`]);
- one `Usage` event, then `Done` with `Stop`, `ToolCalls` when the reply
  calls tools, or `Length` when `max_tokens` cut it;
- a failure is the stream's only item (`Err`); a scripted `truncate` yields
  its text and ends without `Usage` or `Done`.

`GenerationOptions::max_tokens` bounds the output words, counted over the
text first and then each call's arguments: longer text is cut after that
many words (its inner whitespace kept) and every tool call is dropped; when
the text fits, calls that do not fit whole are dropped.

Usage: `input_tokens` is the number of whitespace-separated words over every
text part, tool-call argument and tool-result content in the request thread;
`output_tokens` the words of the emitted text and arguments. Cache figures
are not reported (`None`).

# Modules

[`echo`], [`scripted`] and `script` (rules: file shape, loading, conditions,
actions, templates), `facts` (what conditions read from a request), `reply`
(an answer to stream events), `chunk` (cutting text), `stream` (the stream
type), [`call_id`], [`registry`], [`http`], [`embed`], `local`.
*/

pub mod call_id;
mod chunk;
pub mod echo;
pub mod embed;
mod facts;
pub mod http;
#[cfg(feature = "local")]
pub mod local;
pub mod registry;
mod reply;
mod script;
pub mod scripted;
mod stream;
mod summary;

pub use call_id::deterministic_call_id;
pub use echo::Echo;
pub use http::{Anthropic, Credential, CredentialError, HttpConfig, OpenAiCompatible, Secret};
pub use registry::{
    BackendKind, ResolveError, Resolved, available, file_of, kind_of, names_a_file, nearest,
    resolve, suggest, with_absolute_path,
};
pub use script::{RuleLabel, ScriptError};
pub use scripted::Scripted;
