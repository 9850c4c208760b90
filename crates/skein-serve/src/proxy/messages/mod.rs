/*!
Anthropic Messages (`POST /v1/messages`), as the proxy reads and writes
them: the request mapped onto skein's messages, the reply written back
whole or as Anthropic's stream events (`message_start`,
`content_block_start`/`_delta`/`_stop`, `message_delta`, `message_stop`).

The mapping is the inverse of the Anthropic provider's
(`skein_providers::http::anthropic`), so a history means the same parts
whichever API carried it:

- `system` (a string, or text blocks) is the leading system message, one
  text part per block.
- A `user` turn's `tool_result` blocks become a tool message (one result
  each, in order), and its other blocks a user message after it: the
  shape OpenAI's tool messages and skein's tool loop give the same
  history. A result's content is its text (text blocks concatenated);
  `is_error` is kept.
- `tool_use` blocks are tool calls. Their `input` is a JSON object, which
  a client re-serialises as it likes: the graph step
  (`super::graph`) matches it, by JSON value, against the stored call
  the proxy answered with, so the exact argument text the model wrote is
  kept; an `input` no stored node has is kept as the client sent it.
- `image` and `document` blocks with base64 (or, for a document, plain
  text) sources are attachment parts (`super::media`).
- `cache_control` on a text, media, tool-use or tool-result block is a
  cache-hint annotation on its part (recorded on the run, never in the
  node); on a tool definition it has no part to stand on and is not kept.
- Empty text blocks add no part (a message left with none is kept,
  empty, as chat completions keep theirs). `max_tokens`, `temperature` and `top_p`
  are the generation options; `stop_sequences`, `top_k`, `tool_choice`,
  `metadata` and `thinking` are not used.
- Message threads (`anthropic-beta: message-threads-…`, the SDK's
  `beta.messages.tool_runner` and `beta.messages.thread`): a `thread`
  `create` is an ordinary request whose reply `id` (`msg_` and its run's
  id) is the thread's handle; a `continue` from `previous_message_id`
  sends only the new messages, and the graph step (`super::graph`) puts
  the stored history of that reply (its `system` included) before them
  and offers the tools that reply was offered, so the turn lands where a
  client re-sending everything would. An id the graph lacks is refused
  with `error.details.error_code` `thread_not_found`, on which the SDK
  sends the whole history again under a new thread. A reply continued
  twice is a branch, as any history continued twice is.

Blocks skein has no part for (`thinking`, server tools, search results,
media by URL or file id) are refused with a 400 naming them, never
dropped.

`read.rs` maps the request; `reply.rs` writes the message whole (and errors); `events.rs` writes it as Anthropic's named stream events.
*/

mod events;
mod read;
mod reply;

pub use events::*;
pub use read::*;
pub use reply::*;
