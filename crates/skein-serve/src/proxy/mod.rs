/*!
The recording proxy: three wire APIs over one pipeline. Each request is
read in its API's format ([`chat`]: `POST /v1/chat/completions`,
[`messages`]: Anthropic's `POST /v1/messages`, [`responses`]:
`POST /v1/responses`) into a [`turn::Turn`], completed from the graph
(`graph`), answered by the model the [`models`] table picks for the
model the client asked for, and recorded into the graph (`record`) with
the exact request body and the requested model on its run. Equivalent
encodings map to the same parts, so a conversation that moves between APIs
shares its nodes. `GET /v1/models` lists the model names served.

Keys: the proxy calls its models with the credential its configuration
gives, and never forwards or stores a client's key, unless the server was
started with `pass_client_key` ([`ProxyConfig`]): then the key a request
carries (`x-api-key`, or `Authorization: Bearer` when the server has no
token of its own, which that header then carries) is that request's
credential for a model served over HTTP, and is dropped with the run. It
is never stored, logged or shown in an error.

Clients: without client keys every client reaches every conversation the
proxy recorded. With them ([`ProxyConfig::clients`]), each key is a
client, and a client reaches only the conversations its own requests made
([`clients`]).

A call lasts as long as its client listens: when the client goes away
(its connection closes while the handler waits, or a stream's body is
dropped), the call is cancelled, its upstream connection closed, and its
run recorded as `cancelled` with the text the model had produced by then
as its output (never as a turn). Each call is also bounded
([`ProxyConfig::reply_deadline`], [`ProxyConfig::reply_limit`]): past
either it is stopped and answered with an error, and its run recorded as
failed with the reason.
*/

pub mod chat;
pub mod clients;
pub(crate) mod graph;
mod media;
pub mod messages;
pub mod models;
mod record;
pub mod recording;
mod resent;
pub mod responses;
mod results;
pub(crate) mod threads;
pub mod turn;

use crate::AppState;
use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use futures_util::future::join;
use serde::de::DeserializeOwned;
use serde_json::json;
use skein::Model;
use skein::conversation::service::{TurnDone, TurnError, TurnRequest};
use skein::core::{Annotations, ConversationId, NodeId, ProviderError, Role, Thread};
use skein::engine::{
    CancellationToken, EngineError, Request, RunOutput, with_reply_deadline, with_reply_limit,
};
use skein::providers::Secret;
use skein::store::{RunId, StoreError, check_conversation_name};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::sync::mpsc;
use turn::{Api, ErrorKind, Events, ProxyError, Reply, Turn};

pub use clients::ClientKeys;
pub use models::ModelTable;
pub use recording::FromRecording;

/// The header that names a conversation the proxy creates.
pub const NAME_HEADER: &str = "x-skein-conversation-name";

/// The response header that lists the request's fields the model answered
/// without (Anthropic's `thinking`).
pub const UNHONOURED_HEADER: &str = "x-skein-unhonoured";

/// The response header that marks an answer given from the recording.
pub const FROM_RECORDING_HEADER: &str = "x-skein-from-recording";

/// The response header that lists the conversations a request probably
/// continues, comma-separated, when a tool-call id it carries was made in
/// each of them, so it was linked to none (its runs name them too).
pub const PROBABLY_CONTINUES_HEADER: &str = "x-skein-probably-continues";

/// The header that names a session: the conversation of that name, which
/// every request carrying it continues (see `skein_conversation::landing`).
pub const SESSION_HEADER: &str = "x-skein-session";

/// The header that says which client makes a request (kept on its run, for
/// per-client retention and selections); without it, OpenAI's `user` or
/// Anthropic's `metadata.user_id` says.
pub const CLIENT_HEADER: &str = "x-skein-client";

/// The longest conversation name (or client) a header may give, in bytes.
const NAME_LIMIT: usize = 256;

/// How long a proxied call may run by default: [`ProxyConfig::reply_deadline`].
pub const REPLY_DEADLINE: Duration = Duration::from_secs(600);

/// How much reply text a proxied call may produce by default, in bytes:
/// [`ProxyConfig::reply_limit`].
pub const REPLY_LIMIT: usize = 4 << 20;

/// How the proxy serves.
#[derive(Clone, Debug)]
pub struct ProxyConfig {
    /// Which model answers which requested model.
    pub models: ModelTable,
    /// Pass each request's own key through to the model (see the module
    /// docs); off, clients' keys are ignored.
    pub pass_client_key: bool,
    /// Answer requests from the recording ([`recording`]); `None`: every
    /// request goes to the model.
    pub from_recording: Option<FromRecording>,
    /// The longest one call may run, from its start to its last byte: a
    /// call still running then is stopped, and fails.
    pub reply_deadline: Duration,
    /// The most reply text one call may produce, in bytes: a call that
    /// passes it is stopped, and fails.
    pub reply_limit: usize,
    /// The clients, by key ([`clients`]): every request must carry one of
    /// these keys, where [`ProxyConfig::pass_client_key`] would read a
    /// model key (so the two do not go together), and reaches only its
    /// client's conversations. `None`: no keys, and every client reaches
    /// every conversation.
    pub clients: Option<Arc<ClientKeys>>,
}

impl ProxyConfig {
    /// Every request answered by `model`, clients' keys ignored.
    pub fn new(model: Model) -> ProxyConfig {
        ProxyConfig {
            models: ModelTable::single(model),
            pass_client_key: false,
            from_recording: None,
            reply_deadline: REPLY_DEADLINE,
            reply_limit: REPLY_LIMIT,
            clients: None,
        }
    }
}

/// The proxy's routes, with the request body limit.
pub fn routes(body_limit: usize) -> Router<Arc<AppState>> {
    Router::new()
        .route(
            "/v1/chat/completions",
            post(|state, headers, body| {
                handle(
                    state,
                    headers,
                    body,
                    "chat-completions",
                    |request: chat::ChatRequest| {
                        let api = request.api();
                        Ok((request.turn()?, api))
                    },
                )
            }),
        )
        .route(
            "/v1/messages",
            post(|state, headers, body| {
                handle(
                    state,
                    headers,
                    body,
                    "Messages",
                    |request: messages::MessagesRequest| Ok((request.turn()?, messages::Messages)),
                )
            }),
        )
        .route(
            "/v1/responses",
            post(|state, headers, body| {
                handle(
                    state,
                    headers,
                    body,
                    "Responses",
                    |request: responses::ResponsesRequest| Ok((request.turn()?, request.api())),
                )
            }),
        )
        .route(
            "/v1/messages/count_tokens",
            post(|| async {
                messages::Messages::error(&ProxyError::new(
                    StatusCode::NOT_FOUND,
                    ErrorKind::NotFound,
                    "the recording proxy does not count tokens (it has no tokenizer for every \
                     model it serves): send the request to /v1/messages, whose reply's `usage` \
                     counts them",
                ))
            }),
        )
        .route("/v1/models", get(list_models))
        .layer(DefaultBodyLimit::max(body_limit))
}

async fn list_models(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    let Some(proxy) = &state.proxy else {
        return chat::Chat::error(&not_proxying());
    };
    if let Err(error) = client_of_key(proxy, &headers) {
        return chat::Chat::error(&error);
    }
    // One listing both clients read: OpenAI's fields and Anthropic's.
    let names = proxy.models.names();
    let data: Vec<_> = names
        .iter()
        .map(|name| {
            json!({
                "id": name, "object": "model", "created": 0, "owned_by": "skein",
                "type": "model", "display_name": name, "created_at": "1970-01-01T00:00:00Z",
            })
        })
        .collect();
    axum::Json(json!({
        "object": "list",
        "data": data,
        "has_more": false,
        "first_id": names.first(),
        "last_id": names.last(),
    }))
    .into_response()
}

fn not_proxying() -> ProxyError {
    ProxyError::new(
        StatusCode::NOT_FOUND,
        ErrorKind::NotFound,
        "this server does not proxy: start it with `skein serve --proxy`",
    )
}

/// One request of any API: read, map, complete from the graph, run,
/// record, answer.
async fn handle<R: DeserializeOwned, A: Api>(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Bytes,
    api_name: &'static str,
    read: impl Fn(R) -> Result<(Turn, A), ProxyError>,
) -> Response {
    match prepare(&state, &headers, body, api_name, read).await {
        Ok(flight) => {
            let unhonoured = flight.unhonoured.clone();
            let mut response = flight.answer().await;
            if let Ok(value) = unhonoured.parse()
                && !unhonoured.is_empty()
            {
                response.headers_mut().insert(UNHONOURED_HEADER, value);
            }
            response
        }
        Err(error) => A::error(&error),
    }
}

async fn prepare<R: DeserializeOwned, A: Api>(
    state: &Arc<AppState>,
    headers: &HeaderMap,
    body: Bytes,
    api_name: &str,
    read: impl Fn(R) -> Result<(Turn, A), ProxyError>,
) -> Result<ProxiedCall<A>, ProxyError> {
    let Some(proxy) = &state.proxy else {
        return Err(not_proxying());
    };
    let keyed = client_of_key(proxy, headers)?;
    let body: Arc<str> = std::str::from_utf8(&body)
        .map_err(|_| ProxyError::invalid("the body is not UTF-8"))?
        .into();
    let parse = |text: &str| {
        let request: R = serde_json::from_str(text).map_err(|problem| {
            ProxyError::invalid(format!("the body is not a {api_name} request: {problem}"))
        })?;
        let (turn, api) = read(request)?;
        Ok((turn.calls_match_by_value(), api))
    };
    // What is kept from earlier requests is consulted below: erased
    // content leaves it first.
    drop_erased(state).await?;
    let resent = match A::READS_RESENT {
        true => state.threads.resent_in(&body),
        false => None,
    };
    let graph = Graph {
        store: &state.store,
        memo: &state.memo,
        threads: &state.threads,
    };
    let read = match resent {
        Some(resent) => read_rest(graph, &body, resent, keyed.as_deref(), &parse).await,
        None => None,
    };
    let Read {
        turn,
        api,
        history,
        read_from,
    } = match read {
        Some(read) => read,
        None => read_whole::<A>(graph, &body, keyed.as_deref(), &parse).await?,
    };
    // A keyed client's names are its own (see `clients`), and its key
    // says who it is.
    let own = |name: String| match &keyed {
        Some(client) => ClientKeys::scoped(client, &name),
        None => name,
    };
    let name = named_header(headers, NAME_HEADER)?.map(own);
    let session = named_header(headers, SESSION_HEADER)?
        .or_else(|| turn.session.clone())
        .map(own);
    let client = match &keyed {
        Some(client) => Some(client.clone()),
        None => header_text(headers, CLIENT_HEADER)?.or_else(|| turn.client.clone()),
    };
    let model = proxy.models.route(turn.model.as_deref())?.clone();
    let key = if proxy.pass_client_key {
        client_key(headers, state.token_required)
    } else {
        None
    };
    let meta = record::Meta {
        body,
        requested: turn.model.clone(),
        name,
        session,
        model: model.name().to_string(),
        client,
        keyed,
    };
    Ok(ProxiedCall {
        state: state.clone(),
        shown: turn
            .model
            .clone()
            .unwrap_or_else(|| model.name().to_string()),
        model,
        api,
        meta,
        stream: turn.stream,
        keep: turn.record,
        unhonoured: turn.unhonoured.join(", "),
        continued: history.as_ref().map(|history| history.place),
        read_from,
        request: engine_request(turn, history),
        key,
        from_recording: proxy.from_recording,
        bounds: (proxy.reply_deadline, proxy.reply_limit),
    })
}

/// What reading a request consults: the graph, the memo of re-encoded
/// messages matched to it, and the threads kept from earlier requests.
#[derive(Clone, Copy)]
struct Graph<'a> {
    store: &'a skein::store::Store,
    memo: &'a Arc<graph::Memo>,
    threads: &'a threads::RecentThreads,
}

/// A request read: its turn, completed from the graph; how it is written
/// back; the kept thread its first messages are; and, for a body a
/// re-sent one can be found by, what the thread it makes is kept with.
struct Read<A> {
    turn: Turn,
    api: A,
    history: Option<History>,
    read_from: Option<resent::ReadFrom>,
}

/// A kept thread that stands for a request's first messages.
struct History {
    thread: Thread,
    /// Where it is kept (the thread the request makes replaces it).
    place: threads::Place,
    /// How many of its messages come before the turn's first: none when
    /// the whole body was read, the re-sent ones when only the rest was.
    before: usize,
}

/// Read the whole body: parsed, mapped and completed from the graph, its
/// first messages then compared with the kept threads.
async fn read_whole<A: Api>(
    graph: Graph<'_>,
    body: &Arc<str>,
    keyed: Option<&str>,
    parse: &impl Fn(&str) -> Result<(Turn, A), ProxyError>,
) -> Result<Read<A>, ProxyError> {
    let (turn, api) = parse(body)?;
    let turn = graph::complete(graph.store, graph.memo.clone(), turn, keyed, None).await?;
    let history = graph
        .threads
        .continued_by(&turn.messages)
        .map(|continued| History {
            thread: continued.thread,
            place: continued.place,
            before: 0,
        });
    let read_from = match A::READS_RESENT {
        true => resent::bounds(body).map(|(open, end)| resent::ReadFrom {
            body: body.clone(),
            open,
            end,
            messages: turn.messages.len(),
            annotations: turn.annotations.clone(),
        }),
        false => None,
    };
    Ok(Read {
        turn,
        api,
        history,
        read_from,
    })
}

/// Read only what follows the messages a kept thread's body had (see
/// [`resent`]); `None` when the whole body must be read: a refusal (it
/// would name the wrong index), or a first new message that reading the
/// whole body would merge into the last kept one.
async fn read_rest<A: Api>(
    graph: Graph<'_>,
    body: &Arc<str>,
    resent: threads::Resent,
    keyed: Option<&str>,
    parse: &impl Fn(&str) -> Result<(Turn, A), ProxyError>,
) -> Option<Read<A>> {
    let rest = resent.read.rest(body, resent.from);
    let (turn, api) = parse(&rest).ok()?;
    let mut kept = resent.thread.clone();
    while kept.len() > resent.read.messages {
        kept = kept.parent();
    }
    let last = kept.head()?.message();
    let first = turn.messages.first()?;
    if turn.previous.is_some() || (last.role == Role::Tool && first.role == Role::Tool) {
        return None;
    }
    let mut turn = graph::complete(graph.store, graph.memo.clone(), turn, keyed, Some(&kept))
        .await
        .ok()?;
    let read_from = resent.read.continued(
        body.clone(),
        resent.from,
        &rest,
        turn.messages.len(),
        &turn.annotations,
    );
    let before = kept.len();
    turn.annotations = resent
        .read
        .annotations
        .iter()
        .cloned()
        .chain(
            std::mem::take(&mut turn.annotations)
                .into_iter()
                .map(|(at, part, hint)| (at + before, part, hint)),
        )
        .collect();
    // The reply re-sent as it was recorded: the kept thread stands for it
    // too (one message stays new).
    let replied = resent.thread.len() == before + 1
        && turn.messages.len() > 1
        && resent.thread.head().map(|reply| reply.message()) == turn.messages.first();
    Some(Read {
        turn,
        api,
        history: Some(History {
            thread: if replied { resent.thread } else { kept },
            place: resent.place,
            before,
        }),
        read_from,
    })
}

/// Drop what the proxy keeps of earlier requests in memory (the memo of
/// re-encoded messages, the recent threads and the bodies they were read
/// from, the store's recent bodies) when the store counted an erasure since
/// the last request looked: content erased or deleted by any process
/// leaves this one before it answers again (one point read).
async fn drop_erased(state: &AppState) -> Result<(), ProxyError> {
    let now = state
        .store
        .nonblocking()
        .erasures()
        .await
        .map_err(|error| ProxyError::server(format!("the database could not be read: {error}")))?;
    if state.erasures_seen.swap(now, Ordering::AcqRel) != now {
        state.memo.clear();
        state.threads.clear();
        state.store.drop_cached_content();
    }
    Ok(())
}

/// The engine request for a turn: its messages with their annotations,
/// tools and options, captured. The messages a kept thread stands for
/// (`history`) are that thread, not messages to hash again.
fn engine_request(turn: Turn, history: Option<History>) -> Request {
    let mut request = Request::default();
    let (mut kept, before) = (0, history.as_ref().map_or(0, |history| history.before));
    if let Some(History { thread, .. }) = history {
        kept = thread.len();
        let mut annotations = Annotations::new();
        if turn.annotations.iter().any(|(at, _, _)| *at < kept) {
            let nodes = thread.nodes();
            for (at, part, annotation) in &turn.annotations {
                if let Some(node) = nodes.get(*at).filter(|_| *at < kept) {
                    annotations.add(node.id(), *part, annotation.clone());
                }
            }
        }
        request = request.history(thread, annotations);
    }
    for (index, message) in turn.messages.into_iter().enumerate() {
        let at = before + index;
        if at < kept {
            continue;
        }
        let annotations = turn
            .annotations
            .iter()
            .filter(|(index, _, _)| *index == at)
            .map(|(_, part, annotation)| (*part, annotation.clone()))
            .collect();
        request = request.annotated_message(message, annotations);
    }
    request.tools(turn.tools).options(turn.options).capture()
}

/// A header that names a conversation (`x-skein-conversation-name`, or the
/// session `x-skein-session`), if given: checked as a conversation name.
fn named_header(headers: &HeaderMap, header: &str) -> Result<Option<String>, ProxyError> {
    let Some(name) = header_text(headers, header)? else {
        return Ok(None);
    };
    check_conversation_name(&name).map_err(|error| {
        ProxyError::invalid(format!("the `{header}` header is refused: {error}"))
    })?;
    Ok(Some(name))
}

/// A header's text, if given: visible ASCII, trimmed, neither empty nor
/// longer than [`NAME_LIMIT`] bytes.
fn header_text(headers: &HeaderMap, header: &str) -> Result<Option<String>, ProxyError> {
    let Some(value) = headers.get(header) else {
        return Ok(None);
    };
    let refuse = |why: &str| ProxyError::invalid(format!("the `{header}` header {why}"));
    let text = value
        .to_str()
        .map_err(|_| refuse("must be visible ASCII text"))?
        .trim();
    if text.is_empty() {
        return Err(refuse("is empty"));
    }
    if text.len() > NAME_LIMIT {
        return Err(refuse(&format!("is longer than {NAME_LIMIT} bytes")));
    }
    Ok(Some(text.to_string()))
}

/// The keyed client a request comes from ([`ProxyConfig::clients`]):
/// `None` without client keys; a 401 for a request without a key or with
/// one no client has (the key is never shown). The proxy's routes do not
/// take the server's token when it has client keys (see
/// [`crate::access`]), so a bearer is a client key too.
fn client_of_key(proxy: &ProxyConfig, headers: &HeaderMap) -> Result<Option<String>, ProxyError> {
    let Some(clients) = &proxy.clients else {
        return Ok(None);
    };
    let refused =
        |why: &str| ProxyError::new(StatusCode::UNAUTHORIZED, ErrorKind::Authentication, why);
    let Some(key) = client_key(headers, false) else {
        return Err(refused(
            "this proxy serves the clients its keys name: send your client key as \
             `x-api-key: KEY` or `Authorization: Bearer KEY`",
        ));
    };
    match clients.client(key.expose()) {
        Some(client) => Ok(Some(client.to_string())),
        None => Err(refused(
            "the client key is not one this proxy was given: check the key, or ask the \
             proxy's operator for one",
        )),
    }
}

/// The key a client sent: `x-api-key`, else (when the server's own token
/// does not take that header) `Authorization: Bearer`.
fn client_key(headers: &HeaderMap, token_required: bool) -> Option<Secret> {
    let given = |key: &str| Some(key.trim().to_string()).filter(|key| !key.is_empty());
    headers
        .get("x-api-key")
        .and_then(|value| value.to_str().ok())
        .and_then(given)
        .or_else(|| {
            (!token_required)
                .then(|| crate::access::bearer_of(headers))
                .flatten()
                .and_then(|key| given(&key))
        })
        .map(Secret::new)
}

/// One request on its way through the model.
struct ProxiedCall<A: Api> {
    state: Arc<AppState>,
    /// The request's fields the model answers without, for the
    /// `x-skein-unhonoured` header (empty: none).
    unhonoured: String,
    model: Model,
    /// The model name the client is answered with.
    shown: String,
    api: A,
    meta: record::Meta,
    stream: bool,
    /// Whether the exchange is recorded.
    keep: bool,
    request: Request,
    /// The kept thread the request continues (see [`threads`]).
    continued: Option<threads::Place>,
    /// What the thread it makes is kept with (see [`resent`]).
    read_from: Option<resent::ReadFrom>,
    key: Option<Secret>,
    from_recording: Option<FromRecording>,
    /// The call's deadline and reply text bound (see [`ProxyConfig`]).
    bounds: (Duration, usize),
}

/// What a running model call reports.
enum Progress {
    Text(String),
    /// The run ended, and was recorded (or failed, its failure recorded).
    Done(Box<Result<Finished, ProxyError>>),
}

/// A run that ended well, and where it was recorded.
struct Finished {
    output: RunOutput,
    recorded: Option<record::Recorded>,
    /// The conversations its request probably continues (see
    /// [`PROBABLY_CONTINUES_HEADER`]).
    probably_continues: Vec<ConversationId>,
}

impl<A: Api> ProxiedCall<A> {
    async fn answer(mut self) -> Response {
        let mut request = self.model.bind(std::mem::take(&mut self.request));
        if let Some(mode) = self.from_recording {
            match self.look_up(&request).await {
                Ok(recording::Lookup::Hit(hit)) => return self.recorded_answer(&hit),
                Ok(recording::Lookup::Miss(why)) if mode == FromRecording::Only => {
                    return A::error(&not_recorded(&why));
                }
                Ok(recording::Lookup::Erased { reply, reason }) if mode == FromRecording::Only => {
                    return A::error(&recording_erased(reply, &reason));
                }
                Ok(recording::Lookup::Miss(_) | recording::Lookup::Erased { .. }) => {}
                Err(error) => return A::error(&error),
            }
        }
        if let Some(key) = self.key.take() {
            request = request.credential(key);
        }
        let (texts, mut pieces) = mpsc::unbounded_channel::<String>();
        let (observed, mut runs) = mpsc::unbounded_channel();
        if self.stream {
            request = request.text_channel(texts).event_channel(observed);
        } else {
            drop((texts, observed));
        }
        // The call runs on a task of its own, so that its record is
        // written whatever becomes of the client; the client going away
        // cancels it, when whatever answers the client (this future, then
        // a stream's body) is dropped with this guard.
        let cancel = CancellationToken::new();
        let listening = cancel.clone().drop_guard();
        request = request.cancel_with(cancel);
        let mut turn = TurnRequest::new(self.model.engine(), request);
        if self.keep {
            turn = turn
                .recorded(&self.state.store, self.meta.landing())
                .mark(self.meta.mark());
        }
        let (progress, mut updates) = mpsc::unbounded_channel();
        let (state, continued, keep) = (self.state.clone(), self.continued, self.keep);
        let read_from = self.read_from.take();
        let bytes = self.meta.body.len();
        let (deadline, limit) = self.bounds;
        tokio::spawn(async move {
            let forward = async {
                while let Some(text) = pieces.recv().await {
                    let _ = progress.send(Progress::Text(text));
                }
            };
            let call = with_reply_deadline(deadline, with_reply_limit(limit, turn.call()));
            let (outcome, ()) = join(call, forward).await;
            if let Ok(done) = &outcome
                && keep
                && let Some(exchange) = &done.output.exchange
            {
                state
                    .threads
                    .keep(exchange.thread().clone(), bytes, continued, read_from);
            }
            let _ = progress.send(Progress::Done(Box::new(finished(outcome))));
        });
        match updates.recv().await {
            Some(Progress::Done(finished)) => match *finished {
                Ok(finished) if self.stream => {
                    let mut events = self.api.events(&self.shown);
                    let mut frames = events.start(&finished.output.run);
                    frames.extend(events.finish(&self.reply(&finished.output)));
                    let mut response = sse(futures_util::stream::iter(frames.into_iter().map(Ok)));
                    probably_continues(&mut response, &finished.probably_continues);
                    response
                }
                Ok(finished) => {
                    let body = self.api.body(&self.reply(&finished.output));
                    let mut response = axum::Json(body).into_response();
                    if let Some(recorded) = finished.recorded {
                        where_recorded(
                            &mut response,
                            Some(&recorded.conversation),
                            Some(recorded.node),
                            &finished.output.run,
                        );
                    }
                    probably_continues(&mut response, &finished.probably_continues);
                    response
                }
                Err(error) => A::error(&error),
            },
            Some(Progress::Text(text)) => {
                // The run's id came with its first event, before any text.
                let run = runs
                    .try_recv()
                    .map(|event| event.run)
                    .unwrap_or_else(|_| RunId::random());
                let (frames, body) = mpsc::channel::<Result<Bytes, std::io::Error>>(64);
                tokio::spawn(async move {
                    let mut events = self.api.events(&self.shown);
                    let send = |batch: Vec<Bytes>| {
                        let frames = frames.clone();
                        async move {
                            for frame in batch {
                                if frames.send(Ok(frame)).await.is_err() {
                                    return;
                                }
                            }
                        }
                    };
                    let mut opening = events.start(&run);
                    opening.extend(events.text(&text));
                    send(opening).await;
                    while let Some(update) = updates.recv().await {
                        let batch = match update {
                            Progress::Text(text) => events.text(&text),
                            Progress::Done(finished) => match *finished {
                                Ok(finished) => events.finish(&self.reply(&finished.output)),
                                Err(error) => events.fail(&error),
                            },
                        };
                        send(batch).await;
                    }
                });
                // The body holds the guard: dropped, the client is gone.
                let state = (body, listening);
                sse(futures_util::stream::unfold(
                    state,
                    |mut state| async move {
                        let frame = state.0.recv().await?;
                        Some((frame, state))
                    },
                ))
            }
            None => A::error(&ProxyError::server(
                "the model call ended without an answer",
            )),
        }
    }

    /// The recording's answer to `request` (bound to the model, so as the
    /// model would receive it).
    async fn look_up(&self, request: &Request) -> Result<recording::Lookup, ProxyError> {
        let prepared = self
            .model
            .engine()
            .prepare(request)
            .map_err(|error| engine_failure(&error))?;
        recording::find(
            &self.state.store,
            &prepared,
            self.meta.requested.as_deref(),
            self.meta.keyed.as_deref(),
        )
        .await
        .map_err(|error| ProxyError::server(format!("the recording could not be read: {error}")))
    }

    /// The recorded reply, as the model's own would be written: streamed
    /// when asked (its text in one piece), with the recorded run's id and
    /// time, and headers naming where it was recorded.
    fn recorded_answer(&self, hit: &recording::Hit) -> Response {
        let reply = Reply::recorded(&hit.run, &hit.message, &self.shown);
        let mut response = if self.stream {
            let mut events = self.api.events(&self.shown);
            let mut frames = events.start(reply.run());
            let text = hit.message.joined_text();
            if !text.is_empty() {
                frames.extend(events.text(&text));
            }
            frames.extend(events.finish(&reply));
            sse(futures_util::stream::iter(frames.into_iter().map(Ok)))
        } else {
            axum::Json(self.api.body(&reply)).into_response()
        };
        where_recorded(
            &mut response,
            hit.run.conversation.as_ref(),
            hit.run.output_head,
            &hit.run.id,
        );
        if let Ok(value) = "true".parse() {
            response.headers_mut().insert(FROM_RECORDING_HEADER, value);
        }
        response
    }

    fn reply<'a>(&'a self, output: &'a RunOutput) -> Reply<'a> {
        Reply::of(output, &self.shown)
    }
}

/// What the client is answered with after the turn service ran and
/// recorded a request's turn.
fn finished(outcome: Result<TurnDone<RunOutput>, TurnError>) -> Result<Finished, ProxyError> {
    match outcome {
        Ok(TurnDone {
            output,
            landed,
            probably_continues,
        }) => {
            let node = output
                .exchange
                .as_ref()
                .and_then(|exchange| exchange.thread().head_id());
            let recorded = match (landed.conversation(), node) {
                (Some(conversation), Some(node)) => Some(record::Recorded {
                    conversation: conversation.clone(),
                    node,
                }),
                _ => None,
            };
            Ok(Finished {
                output,
                recorded,
                probably_continues,
            })
        }
        // A new conversation under the `x-skein-conversation-name` of
        // another: the client's to fix, so nothing was recorded.
        Err(TurnError::Store(problem @ StoreError::NameTaken { .. })) => Err(ProxyError::invalid(
            format!("the reply was not recorded: {problem}"),
        )),
        Err(TurnError::Store(problem)) => {
            tracing::error!("the proxy could not record an exchange: {problem}");
            Err(ProxyError::server(format!(
                "the reply could not be recorded: {problem}"
            )))
        }
        Err(TurnError::Call(error)) => Err(engine_failure(&error)),
        Err(TurnError::Loop(failed)) => Err(engine_failure(&failed.error)),
    }
}

/// The headers that lead from an answer to the graph: its conversation,
/// reply node and run.
fn where_recorded(
    response: &mut Response,
    conversation: Option<&ConversationId>,
    node: Option<NodeId>,
    run: &RunId,
) {
    let headers = response.headers_mut();
    let named = [
        (
            "x-skein-conversation",
            conversation.map(ToString::to_string),
        ),
        ("x-skein-node", node.map(|node| node.to_string())),
        ("x-skein-run", Some(run.to_string())),
    ];
    for (name, value) in named {
        if let Some(Ok(value)) = value.map(|value| value.parse()) {
            headers.insert(name, value);
        }
    }
}

/// The header naming the conversations a request probably continues, when
/// there are any (a stream whose text began before its run ended has sent
/// its headers already: its runs name them still).
fn probably_continues(response: &mut Response, conversations: &[ConversationId]) {
    if conversations.is_empty() {
        return;
    }
    let listed: Vec<String> = conversations.iter().map(ToString::to_string).collect();
    if let Ok(value) = listed.join(", ").parse() {
        response
            .headers_mut()
            .insert(PROBABLY_CONTINUES_HEADER, value);
    }
}

/// A request the recording lacks, on a server that answers from it only.
fn not_recorded(why: &str) -> ProxyError {
    ProxyError::new(
        StatusCode::NOT_FOUND,
        ErrorKind::NotFound,
        format!(
            "no recorded answer for this request: {why}. This server answers from the \
             recording only (`--from-recording`); add `--record-misses` to send such requests \
             to the model and record them"
        ),
    )
    .code("not_recorded")
}

/// A request the recording answered, but whose recorded reply was erased
/// since (`skein redact`), on a server that answers from the recording only.
fn recording_erased(reply: NodeId, reason: &str) -> ProxyError {
    let why = if reason.is_empty() {
        String::new()
    } else {
        format!(": {reason}")
    };
    ProxyError::new(
        StatusCode::GONE,
        ErrorKind::NotFound,
        format!(
            "the recording's reply to this request was erased (message {}{why}), so it \
             cannot be answered from the recording. This server answers from the recording \
             only (`--from-recording`); add `--record-misses` to send the request to the model \
             and record a new reply",
            reply.short()
        ),
    )
    .code("recording_erased")
}

/// A streamed answer.
fn sse(
    frames: impl futures_util::Stream<Item = Result<Bytes, std::io::Error>> + Send + 'static,
) -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        Body::from_stream(frames),
    )
        .into_response()
}

/// A failed run, as the client is told.
fn engine_failure(error: &EngineError) -> ProxyError {
    use ProviderError as P;
    let (status, kind) = match error {
        EngineError::CredentialRequired { .. } => {
            return ProxyError::new(
                StatusCode::UNAUTHORIZED,
                ErrorKind::Authentication,
                "this proxy calls the model with each client's own key: send it as \
                 `x-api-key: KEY` (or `Authorization: Bearer KEY` when the server has no token)",
            );
        }
        // The graph holds the request's history, but part of it was
        // erased: the client's to fix (continue from before it), not a
        // failure of the model or the server; nothing was sent or recorded.
        EngineError::ErasedContent { .. } => {
            return ProxyError::new(
                StatusCode::CONFLICT,
                ErrorKind::InvalidRequest,
                format!("the request was refused: {error}"),
            )
            .code("erased_content");
        }
        EngineError::InvalidRequest(_) | EngineError::AttachmentRefused { .. } => {
            (StatusCode::BAD_REQUEST, ErrorKind::InvalidRequest)
        }
        EngineError::Capacity { .. } => (StatusCode::TOO_MANY_REQUESTS, ErrorKind::RateLimit),
        EngineError::Generation {
            error: error @ (P::ReplyTooSlow { .. } | P::ReplyTooLong { .. }),
            ..
        } => {
            let (status, code) = match error {
                P::ReplyTooSlow { .. } => (StatusCode::GATEWAY_TIMEOUT, "reply_too_slow"),
                _ => (StatusCode::BAD_GATEWAY, "reply_too_long"),
            };
            return ProxyError::new(
                status,
                ErrorKind::Server,
                format!("the proxy ended the call: {error}"),
            )
            .code(code);
        }
        EngineError::Generation { error, .. } => match error {
            P::BadRequest { .. } => (StatusCode::BAD_REQUEST, ErrorKind::InvalidRequest),
            P::Authentication { .. } => (StatusCode::UNAUTHORIZED, ErrorKind::Authentication),
            P::RateLimited { .. } => (StatusCode::TOO_MANY_REQUESTS, ErrorKind::RateLimit),
            _ => (StatusCode::BAD_GATEWAY, ErrorKind::Server),
        },
        _ => (StatusCode::BAD_GATEWAY, ErrorKind::Server),
    };
    ProxyError::new(status, kind, format!("the model failed: {error}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        pairs
            .iter()
            .map(|(name, value)| {
                (
                    axum::http::HeaderName::from_static(name),
                    value.parse().unwrap(),
                )
            })
            .collect()
    }

    /// A request that re-sends a kept thread's messages is that thread (its
    /// very nodes, not rebuilt) plus its new messages, and a cache hint on
    /// a message of the kept part stays on that message's node.
    #[test]
    fn a_resent_history_is_the_kept_thread_and_keeps_its_hints() {
        use skein::core::{Annotation, CacheHint};
        let messages = threads::tests::history(6);
        let recent = threads::RecentThreads::default();
        let kept = Thread::from_messages(messages[..4].iter().cloned());
        recent.keep(kept.clone(), 1, None, None);
        let hint = Annotation::CacheHint(CacheHint::Ephemeral);
        let turn = Turn {
            messages: messages.clone(),
            annotations: vec![(1, 0, hint.clone()), (5, 0, hint.clone())],
            ..Turn::default()
        };
        let continued = recent
            .continued_by(&turn.messages)
            .expect("the history continues the kept thread");
        let model = Model::open("echo").unwrap();
        let history = History {
            thread: continued.thread,
            place: continued.place,
            before: 0,
        };
        let request = model.bind(engine_request(turn, Some(history)));
        let prepared = model.engine().prepare(&request).unwrap();
        let nodes = prepared.thread.nodes();
        assert_eq!(prepared.thread.len(), 6);
        assert_eq!(
            prepared.thread.head_id(),
            Thread::from_messages(messages).head_id(),
            "the ids a thread built from scratch has"
        );
        let shared = prepared.thread.parent().parent();
        assert!(
            std::ptr::eq(
                shared.head().unwrap().as_ref(),
                kept.head().unwrap().as_ref()
            ),
            "the kept nodes themselves, not equal new ones"
        );
        for at in [1, 5] {
            assert_eq!(
                prepared.annotations.get(nodes[at].id(), 0),
                std::slice::from_ref(&hint),
                "the hint on message {at}"
            );
        }
        assert!(prepared.annotations.get(nodes[3].id(), 0).is_empty());
    }

    /// How a re-sent body was read.
    #[derive(Debug, PartialEq)]
    enum Path {
        /// Whole: nothing kept it begins with.
        Whole,
        /// From where it differs, the kept thread standing for its
        /// history (its reply too, when re-sent as recorded).
        Rest { replied: bool },
        /// Found by its bytes, but read whole (what reading only the rest
        /// cannot do right: here, a refusal).
        ReadWhole,
    }

    fn call(id: &str, arguments: &str) -> serde_json::Value {
        json!({"id": id, "type": "function", "function": {"name": "look", "arguments": arguments}})
    }

    /// A chat completions history re-sent turn after turn, each body read
    /// both ways: from where it differs from the kept one (with the kept
    /// threads the proxy has by then) and whole (with none). The two give
    /// the same thread (every id), options, tools and annotations, or the
    /// same refusal; reading only the rest is taken where it can be.
    #[tokio::test]
    async fn a_resent_body_read_from_where_it_differs_is_what_reading_it_whole_is() {
        use skein::core::Message;
        let dir = tempfile::tempdir().unwrap();
        let store = skein::store::Store::open(dir.path().join("skein.db")).unwrap();
        let memo = Arc::new(graph::Memo::default());
        let kept = threads::RecentThreads::default();
        let model = Model::open("echo").unwrap();
        let parse = |text: &str| {
            let request: chat::ChatRequest = serde_json::from_str(text)
                .map_err(|problem| ProxyError::invalid(problem.to_string()))?;
            let api = request.api();
            Ok((request.turn()?.calls_match_by_value(), api))
        };
        let prepare = |read: Read<chat::Chat>| {
            let request = model.bind(engine_request(read.turn, read.history));
            model.engine().prepare(&request).unwrap()
        };
        let wire_calls = |calls: &[(&str, &str)]| -> Vec<serde_json::Value> {
            calls
                .iter()
                .map(|(id, arguments)| call(id, arguments))
                .collect()
        };
        let tool_calls = |calls: &[(&str, &str)]| {
            Message::new(
                Role::Assistant,
                calls
                    .iter()
                    .map(|(id, arguments)| {
                        skein::core::Part::ToolCall(skein::core::ToolCall {
                            id: id.to_string(),
                            name: "look".into(),
                            arguments: arguments.to_string(),
                        })
                    })
                    .collect(),
            )
        };
        let tool =
            |id: &str| json!({"role": "tool", "tool_call_id": id, "content": format!("{id} done")});
        // (the messages a client adds, the fields after them, the reply
        // the model gives, how the body is read)
        let steps: Vec<(
            Vec<serde_json::Value>,
            serde_json::Value,
            Option<Message>,
            Path,
        )> = vec![
            (
                vec![
                    json!({"role": "system", "content": "Be brief."}),
                    json!({"role": "user", "content": "first"}),
                ],
                json!({}),
                Some(Message::assistant("one")),
                Path::Whole,
            ),
            (
                vec![
                    json!({"role": "assistant", "content": "one"}),
                    json!({"role": "user", "content": "look twice"}),
                ],
                json!({"stream": true}),
                Some(tool_calls(&[("c1", "{\"at\": 1}"), ("c2", "{}")])),
                Path::Rest { replied: true },
            ),
            // The calls re-sent re-encoded (as LangChain does): not the
            // kept reply's bytes, so it is read as a new message.
            (
                vec![
                    json!({"role": "assistant", "content": null, "tool_calls": wire_calls(&[("c1", "{\"at\":1}"), ("c2", "{}")])}),
                    tool("c1"),
                    tool("c2"),
                ],
                json!({"tools": [{"type": "function", "function": {"name": "look"}}], "temperature": 0.5}),
                Some(tool_calls(&[("c3", "{}")])),
                Path::Rest { replied: false },
            ),
            (
                vec![
                    json!({"role": "assistant", "tool_calls": wire_calls(&[("c3", "{}")])}),
                    tool("c3"),
                ],
                json!({"tools": [{"type": "function", "function": {"name": "look"}}]}),
                Some(Message::assistant("looked")),
                Path::Rest { replied: true },
            ),
            // Refused: a result no call asked for. Reading the rest would
            // name the wrong index, so the body is read whole.
            (
                vec![
                    json!({"role": "assistant", "content": "looked"}),
                    tool("c9"),
                ],
                json!({}),
                None,
                Path::ReadWhole,
            ),
            (
                vec![
                    json!({"role": "assistant", "content": "looked"}),
                    json!({"role": "user", "content": [{"type": "text", "text": "and "}, {"type": "text", "text": "then?"}]}),
                ],
                json!({"seed": 7}),
                Some(Message::assistant("then nothing")),
                Path::Rest { replied: true },
            ),
        ];
        let mut history: Vec<serde_json::Value> = Vec::new();
        for (step, (added, fields, reply, path)) in steps.into_iter().enumerate() {
            let mut messages = history.clone();
            messages.extend(added);
            let mut body = json!({"model": "echo", "messages": messages});
            for (key, value) in fields.as_object().unwrap() {
                body[key] = value.clone();
            }
            let body: Arc<str> = body.to_string().into();
            let fresh = threads::RecentThreads::default();
            let alone = Graph {
                store: &store,
                memo: &memo,
                threads: &fresh,
            };
            let graph = Graph {
                threads: &kept,
                ..alone
            };
            let whole = read_whole::<chat::Chat>(alone, &body, None, &parse).await;
            let resent = kept.resent_in(&body);
            let found = resent.is_some();
            let rest = match resent {
                Some(resent) => read_rest(graph, &body, resent, None, &parse).await,
                None => None,
            };
            let taken = match (&rest, found) {
                (Some(rest), _) => Path::Rest {
                    replied: rest.history.as_ref().unwrap().thread.len()
                        > rest.history.as_ref().unwrap().before,
                },
                (None, true) => Path::ReadWhole,
                (None, false) => Path::Whole,
            };
            assert_eq!(taken, path, "step {step}");
            let Some(reply) = reply else {
                // Named by its index in the whole body.
                let refused = whole.err().expect("refused");
                assert!(
                    refused.message.contains("`messages.[10].tool_call_id`"),
                    "step {step}: {}",
                    refused.message
                );
                continue;
            };
            let read = match rest {
                Some(rest) => rest,
                None => read_whole::<chat::Chat>(graph, &body, None, &parse)
                    .await
                    .unwrap(),
            };
            let (place, read_from) = (
                read.history.as_ref().map(|h| h.place),
                read.read_from.clone(),
            );
            assert!(read_from.is_some(), "step {step}: kept with its body");
            let (expected, got) = (prepare(whole.unwrap()), prepare(read));
            let ids = |thread: &Thread| -> Vec<NodeId> {
                thread.nodes().iter().map(|node| node.id()).collect()
            };
            assert_eq!(ids(&got.thread), ids(&expected.thread), "step {step}");
            assert_eq!(
                serde_json::to_value(&got).unwrap(),
                serde_json::to_value(&expected).unwrap(),
                "step {step}"
            );
            // What the proxy keeps once the reply is recorded.
            kept.keep(got.thread.push(reply.clone()), body.len(), place, read_from);
            history = messages;
        }
    }

    #[test]
    fn a_client_key_comes_from_x_api_key_else_a_bearer_the_token_does_not_take() {
        let key = |pairs: &[(&'static str, &str)], token: bool| {
            client_key(&headers(pairs), token).map(|secret| secret.expose().to_string())
        };
        let both = [("x-api-key", "sk-a"), ("authorization", "Bearer sk-b")];
        assert_eq!(key(&both, false).as_deref(), Some("sk-a"));
        assert_eq!(key(&both[1..], false).as_deref(), Some("sk-b"));
        assert_eq!(
            key(&both[1..], true),
            None,
            "the bearer is the server's token"
        );
        assert_eq!(key(&both[..1], true).as_deref(), Some("sk-a"));
        let empty = [("x-api-key", " "), ("authorization", "Bearer sk-b")];
        assert_eq!(key(&empty, false).as_deref(), Some("sk-b"));
        assert_eq!(key(&[], false), None);
    }

    #[test]
    fn a_conversation_name_is_visible_text_of_bounded_length_unlike_an_id() {
        let name = |value: &str| named_header(&headers(&[(NAME_HEADER, value)]), NAME_HEADER);
        assert_eq!(name(" my chat ").unwrap().as_deref(), Some("my chat"));
        assert!(name("  ").unwrap_err().message.contains("is empty"));
        for id_like in ["0123abcd", "DEADBEEF", "0123456789abcdef0123456789abcdef"] {
            let refused = name(id_like).unwrap_err();
            assert_eq!(refused.status, StatusCode::BAD_REQUEST);
            assert!(
                refused.message.contains("cannot look like an id"),
                "{}",
                refused.message
            );
        }
        assert_eq!(name("cafe-2").unwrap().as_deref(), Some("cafe-2"));
        assert!(
            name(&"x".repeat(NAME_LIMIT + 1))
                .unwrap_err()
                .message
                .contains("longer than")
        );
        assert_eq!(named_header(&HeaderMap::new(), NAME_HEADER).unwrap(), None);
    }
}
