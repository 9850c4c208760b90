/*!
OpenAI chat completions (`POST /v1/chat/completions`), as the proxy reads
and writes them: the request mapped onto skein's messages, the reply
written back whole or as `chat.completion.chunk` events.

Clients encode one message in several equivalent ways; they all map to the
same parts, so a client that re-serialises its history differently each
turn still finds its earlier nodes:
- content as a string, or as an array of text parts (one text part is the
  same as the string; an empty string adds no part);
- `null`, missing or empty content beside tool calls;
- consecutive `tool` messages, which become one tool message holding every
  result (as skein's own tool loop writes them).

Media in user messages (`image_url` and `file` parts with `data:` URLs,
`input_audio`) become attachment parts (`super::media`); an image's
`detail` is a rendering hint, not content, and is not kept.

Tool results are checked as on every API (`super::results`), and a
refusal names the field (`messages.[3].tool_call_id`).

The request's `store` (OpenAI's flag for its own distillation logs) does
not apply: every chat completion is recorded.

`read.rs` maps the request; `reply.rs` writes the reply whole (and errors); `events.rs` writes it as `chat.completion.chunk` events.
*/

mod events;
mod read;
mod reply;

pub use events::*;
pub use read::*;
pub use reply::*;
