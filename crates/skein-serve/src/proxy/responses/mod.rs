/*!
OpenAI Responses (`POST /v1/responses`), as the proxy reads and writes
them: the request's items mapped onto skein's messages, the reply written
back as a `response` object, whole or as its stream events
(`response.created`, `response.output_item.added`,
`response.output_text.delta`, ..., `response.completed`).

- `instructions` is the leading system message; `input` a string (one user
  message) or a list of items: messages (`role` user, system, developer or
  assistant; content a string or `input_text`/`output_text`,
  `input_image` and `input_file` parts), `function_call` items (tool calls
  of the assistant message before them, or of one of their own) and
  `function_call_output` items (tool results, consecutive ones in one tool
  message). So a history maps to the same parts as through chat
  completions: an assistant text followed by its calls is one assistant
  message, its results one tool message.
- `previous_response_id` names an earlier response by the proxy (`resp_`
  and its run id): its thread, from the graph, comes before `input`, less
  its leading system messages (instructions are not carried over, as
  OpenAI documents), with this request's `instructions` in their place.
- `store: false` answers without recording anything; such a response
  cannot be continued with `previous_response_id`.
- Function tools only; `max_output_tokens`, `temperature` and `top_p` are
  the generation options.

The response id is `resp_` and the run id, output items `msg_`/`fc_` and
the run id or call id, so every id maps back to the graph.

`read.rs` maps the request; `reply.rs` writes the response object whole (and errors); `events.rs` writes it as typed `response.*` events.
*/

mod events;
mod read;
mod reply;

pub use events::*;
pub use read::*;
pub use reply::*;
