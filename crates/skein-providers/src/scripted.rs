/*!
[`Scripted`]: a deterministic model driven by a TOML rule file.

# The rule file

A file is a list of `[[rules]]` tables, tried in order; the **first rule
whose conditions all hold** answers. A rule without conditions always
matches (a fallback). When no rule matches, the call fails with
[`ProviderError::Scripted`] naming the file and quoting the last user
message. Unknown keys are errors.

```toml
[[rules]]
name = "buy"                                  # optional, used in messages
system_contains = "social-sentiment: bullish" # conditions (all must hold)
last_user_contains = ["ACME", "buy"]          # an array: every text must be found
reply = "BUY. You asked: {last_user}"         # exactly one action

[[rules]]
name = "search first"
tool_offered = "search"
last_role = "user"
tool_calls = [{ name = "search", arguments = '{"q": "ACME"}' }]

[[rules]]
name = "fallback"
reply = "HOLD"
```

## Conditions

Each takes a string; the `*_contains`, `last_user_matches` and
`tool_offered` conditions also take an array of strings, meaning every entry
must hold. A `not_*` form holds when *none* of its texts is found.

| key | holds when |
|---|---|
| `system_contains`, `not_system_contains` | a system message's text contains the text |
| `any_contains`, `not_any_contains` | any message's text, or any tool result's content, contains it |
| `last_user_contains`, `not_last_user_contains` | the last user message's text contains it |
| `last_user_matches` | the last user message's text matches the regex (Rust `regex` syntax, unanchored) |
| `previous_assistant_contains`, `not_previous_assistant_contains` | the most recent assistant message *before* the last user message contains it |
| `tool_offered` | a tool of that name is offered on this call |
| `last_role` | the last message has that role (`system`, `user`, `assistant`, `tool`) |

A message's text is its text parts joined. The last user message is the
most recent `user` message (after tool results it is still the one that
started the loop). Where there is nothing to look in (no system message, no
previous assistant message) positive conditions fail and `not_*` ones hold.

## Actions

Exactly one per rule:

- `reply = "text"`: answer with text.
- `tool_calls = [{ name = "search", arguments = '{"q": "x"}' }, ...]`: call
  tools (finish reason `tool_calls`), optionally with `reply` text before
  them. `arguments` is raw text kept byte for byte (it may be invalid JSON
  on purpose); it defaults to `{}`. Call ids are deterministic, see
  [`crate::deterministic_call_id`].
- `error = { kind = "...", message = "..." }`: fail the call. Kinds and the
  [`ProviderError`] they become: `rate_limited` → `RateLimited` (optional
  `retry_after_ms`), `authentication` → `Authentication`, `bad_request` →
  `BadRequest`, `context_too_long` → `BadRequest { context_too_long: true }`,
  `server` → `Server` (optional `status`, default 500), `timeout` → `Timeout`
  (the message is the phase), `connection` → `Connection`, `malformed` →
  `MalformedResponse`, `scripted` → `Scripted`. `message` defaults to
  `scripted <kind> error`.
- `truncate = "text"`: stream the text, then end the stream without `Done`,
  as a cut connection would ([`Provider::complete`] then returns
  [`ProviderError::TruncatedStream`]).

## Substitutions

`reply` and `truncate` texts may use `{last_user}` (the last user message's
text), `{last_tool_result}` (the content of the last tool result in the
request) and `{history}` (the number of messages in the request thread).
Nothing else is replaced: other braces are kept, so JSON needs no escaping.
Using a placeholder the request has no value for fails the call with
[`ProviderError::Scripted`]. Tool-call arguments are never substituted.

Streaming, `max_tokens` and usage figures follow the
[crate-level stream contract](crate#streams).
*/

use crate::reply::Outcome;
use crate::script::{RuleLabel, Script, ScriptError};
use crate::stream::EventStream;
use skein_core::{BoxStream, ModelRequest, Provider, ProviderError, StreamEvent};
use std::path::Path;

/// The origin that scripts loaded from text are named by.
pub const INLINE_ORIGIN: &str = "<inline script>";

/// The scripted model: answers by the first matching rule of a script.
#[derive(Clone, Debug)]
pub struct Scripted {
    script: Script,
}

impl Scripted {
    /// Load a rule file.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Scripted, ScriptError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| ScriptError::Read {
            path: path.to_owned(),
            error: source,
        })?;
        Scripted::from_toml_str_named(&text, &path.display().to_string())
    }

    /// Load rules from TOML text; messages name it `<inline script>`.
    pub fn from_toml_str(text: &str) -> Result<Scripted, ScriptError> {
        Scripted::from_toml_str_named(text, INLINE_ORIGIN)
    }

    /// Load rules from TOML text; messages name it `origin`.
    pub fn from_toml_str_named(text: &str, origin: &str) -> Result<Scripted, ScriptError> {
        Ok(Scripted {
            script: Script::load(text, origin)?,
        })
    }

    /// The file path (or `<inline script>`) the rules came from.
    pub fn origin(&self) -> &str {
        self.script.origin()
    }

    /// The rules, in the order they are tried.
    pub fn rules(&self) -> impl Iterator<Item = &RuleLabel> {
        self.script.rules().iter().map(|rule| &rule.label)
    }

    /// The rule that would answer `request`, if any.
    pub fn matching_rule(&self, request: &ModelRequest) -> Option<&RuleLabel> {
        self.script.first_match(request).map(|rule| &rule.label)
    }
}

impl Provider for Scripted {
    fn name(&self) -> &str {
        "scripted"
    }

    fn stream(
        &self,
        request: ModelRequest,
    ) -> BoxStream<'static, Result<StreamEvent, ProviderError>> {
        let outcome: Outcome = self.script.respond(&request);
        Box::pin(EventStream::new(outcome.into_events(&request)))
    }
}
