/*!
What a caller asks the engine for: a named prompt with variables, or inline
messages, plus overrides (profile, model, output contract, session id,
tools, options), the credential for this execution, whether to capture the
exchange, and how to wait, cancel, observe and relate the run.

Message order in the rendered request: captured history (when continuing
an exchange), then the prompt's own messages, then the caller's messages,
roles as authored.
*/

use crate::admission::WhenBusy;
use crate::exchange::Exchange;
use crate::observe::{EventChannel, Observer, RunId, Watchers};
use serde_json::{Map, Value};
use skein_core::Relation;
use skein_core::provider::GenerationOptions;
use skein_core::{Annotation, Annotations, Message, Thread, ToolSpec};
use skein_providers::Secret;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// A message the caller appends, with annotations on its parts.
#[derive(Clone, Debug, PartialEq)]
pub struct RequestMessage {
    pub message: Message,
    /// (part index, annotation) pairs: keyed to the node once it exists.
    pub annotations: Vec<(u32, Annotation)>,
}

/// The thread a request continues, with its annotations, and the run whose
/// captured exchange it is (when it is one).
#[derive(Clone, Debug)]
pub(crate) struct History {
    pub(crate) thread: Thread,
    pub(crate) annotations: Annotations,
    pub(crate) run: Option<RunId>,
}

/// One run's request.
#[derive(Clone, Default)]
pub struct Request {
    pub(crate) prompt: Option<(String, Option<u32>)>,
    pub(crate) variables: Map<String, Value>,
    pub(crate) messages: Vec<RequestMessage>,
    pub(crate) profile: Option<String>,
    pub(crate) model: Option<String>,
    pub(crate) output_contract: Option<Value>,
    pub(crate) session_id: Option<String>,
    pub(crate) tools: Vec<ToolSpec>,
    pub(crate) options: GenerationOptions,
    pub(crate) credential: Option<Secret>,
    pub(crate) capture: bool,
    pub(crate) when_busy: WhenBusy,
    pub(crate) cancel: Option<CancellationToken>,
    pub(crate) watchers: Watchers,
    pub(crate) relations: Vec<Relation>,
    pub(crate) history: Option<History>,
    pub(crate) text_sink: Option<tokio::sync::mpsc::UnboundedSender<String>>,
    pub(crate) erased_placeholder: Option<String>,
}

impl std::fmt::Debug for Request {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Request")
            .field("prompt", &self.prompt)
            .field("variables", &self.variables)
            .field("messages", &self.messages.len())
            .field("profile", &self.profile)
            .field("model", &self.model)
            .field("session_id", &self.session_id)
            .field("credential", &self.credential)
            .field("capture", &self.capture)
            .finish_non_exhaustive()
    }
}

impl Request {
    /// A request rendering the newest version of a configured prompt.
    pub fn prompt(id: impl Into<String>) -> Request {
        Request {
            prompt: Some((id.into(), None)),
            ..Request::default()
        }
    }

    /// A request rendering one version of a configured prompt.
    pub fn prompt_version(id: impl Into<String>, version: u32) -> Request {
        Request {
            prompt: Some((id.into(), Some(version))),
            ..Request::default()
        }
    }

    /// A request made of inline messages only.
    pub fn messages(messages: impl IntoIterator<Item = Message>) -> Request {
        Request::default().with_messages(messages)
    }

    /// Set a variable of the prompt.
    pub fn var(mut self, name: impl Into<String>, value: impl Into<Value>) -> Request {
        self.variables.insert(name.into(), value.into());
        self
    }

    /// Append a message after the prompt's own.
    pub fn message(mut self, message: Message) -> Request {
        self.messages.push(RequestMessage {
            message,
            annotations: Vec::new(),
        });
        self
    }

    /// Append a message whose parts carry annotations.
    pub fn annotated_message(
        mut self,
        message: Message,
        annotations: Vec<(u32, Annotation)>,
    ) -> Request {
        self.messages.push(RequestMessage {
            message,
            annotations,
        });
        self
    }

    pub fn with_messages(mut self, messages: impl IntoIterator<Item = Message>) -> Request {
        for message in messages {
            self = self.message(message);
        }
        self
    }

    /// Render the request after `thread` (a stored conversation's history,
    /// or any branch point), keeping the annotations of its parts. A request
    /// with a non-empty history needs no message of its own: it asks the
    /// model to go on from the history (for example from tool results it
    /// ends with). Unlike
    /// [`Engine::continue_from`](crate::Engine::continue_from) this names
    /// no earlier run: use [`Request::continuing`] when the history is a
    /// captured exchange.
    pub fn history(mut self, thread: Thread, annotations: Annotations) -> Request {
        self.history = Some(History {
            thread,
            annotations,
            run: None,
        });
        self
    }

    /// Render the request after a captured exchange, recording the run as
    /// a continuation of the exchange's run.
    pub fn continuing(mut self, exchange: &Exchange) -> Request {
        self.history = Some(History {
            thread: exchange.thread.clone(),
            annotations: exchange.annotations.clone(),
            run: Some(exchange.run.clone()),
        });
        self.relation(Relation::ContinuationOf(exchange.run.clone()))
    }

    /// The next call of a tool loop: `messages` (the tool results) on the
    /// resolved profile and model, with this request's settings (tools,
    /// options, session, credential, waiting, cancellation, watchers,
    /// relations, text sink) and none of its content.
    pub(crate) fn follow_up(&self, messages: Vec<Message>, profile: &str, model: &str) -> Request {
        Request {
            profile: Some(profile.to_string()),
            model: Some(model.to_string()),
            ..self.clone()
        }
        .without_content()
        .with_messages(messages)
    }

    fn without_content(mut self) -> Request {
        self.prompt = None;
        self.variables = Map::new();
        self.messages = Vec::new();
        self.history = None;
        self.output_contract = None;
        self.relations
            .retain(|relation| !matches!(relation, Relation::ContinuationOf(_)));
        self
    }

    /// The thread the request continues, if any.
    pub fn history_thread(&self) -> Option<&Thread> {
        self.history.as_ref().map(|history| &history.thread)
    }

    pub fn profile(mut self, profile: impl Into<String>) -> Request {
        self.profile = Some(profile.into());
        self
    }

    /// Use this model instead of the profile's (same backend).
    pub fn model(mut self, model: impl Into<String>) -> Request {
        self.model = Some(model.into());
        self
    }

    /// Replace the prompt's output contract entirely.
    pub fn output_contract(mut self, schema: Value) -> Request {
        self.output_contract = Some(schema);
        self
    }

    pub fn session_id(mut self, session: impl Into<String>) -> Request {
        self.session_id = Some(session.into());
        self
    }

    /// The tools offered on this call.
    pub fn tools(mut self, tools: Vec<ToolSpec>) -> Request {
        self.tools = tools;
        self
    }

    /// Options laid over the profile's, figure by figure.
    pub fn options(mut self, options: GenerationOptions) -> Request {
        self.options = options;
        self
    }

    /// The key for this execution only; never stored.
    pub fn credential(mut self, secret: Secret) -> Request {
        self.credential = Some(secret);
        self
    }

    /// Return the exchange (rendered request plus final reply).
    pub fn capture(mut self) -> Request {
        self.capture = true;
        self
    }

    /// Fail with a capacity error instead of waiting for a permit.
    pub fn fail_when_busy(mut self) -> Request {
        self.when_busy = WhenBusy::Fail;
        self
    }

    /// Cancel the run when `token` is: while it waits for admission
    /// (no run), or during its model call, which then stops at once
    /// ([`EngineError::Cancelled`](crate::EngineError::Cancelled) names
    /// the run and the text it had produced).
    pub fn cancel_with(mut self, token: CancellationToken) -> Request {
        self.cancel = Some(token);
        self
    }

    /// Watch this run's events (called after the run releases its permit).
    pub fn observe(mut self, observer: Arc<dyn Observer>) -> Request {
        self.watchers.observers.push(observer);
        self
    }

    /// Receive this run's events live.
    pub fn event_channel(mut self, channel: EventChannel) -> Request {
        self.watchers.channels.push(channel);
        self
    }

    /// Receive the reply text live, piece by piece.
    pub fn text_channel(mut self, channel: tokio::sync::mpsc::UnboundedSender<String>) -> Request {
        self.text_sink = Some(channel);
        self
    }

    /// Send `placeholder` where the history holds erased content (`skein
    /// redact`) instead of refusing the request; overrides the process's
    /// choice ([`crate::erased::set_default_placeholder`]).
    pub fn erased_placeholder(mut self, placeholder: impl Into<String>) -> Request {
        self.erased_placeholder = Some(placeholder.into());
        self
    }

    /// Record a relationship of this run.
    pub fn relation(mut self, relation: Relation) -> Request {
        self.relations.push(relation);
        self
    }

    /// Mark this run as done on behalf of `run` (counted with it).
    pub fn associated_with(self, run: &RunId) -> Request {
        self.relation(Relation::AssociatedWith(run.clone()))
    }
}
