/*!
The transport shared by every HTTP call: one call's attempts, timeouts,
retries and body reading, turned into a stream of the decoder's events
([`StreamEvent`]s for the chat providers, vectors for the embedder).

A caller prepares an [`HttpRequest`] ([`Transport::post_json`]: URL,
headers with the key, JSON body) and a [`Decoder`] for its wire format;
[`Transport::stream`] (a model call's stream) or [`Transport::call`] (a
call run to its end, for replies that are one body) does the rest:

- **Attempts.** POST the body. A response with `Content-Type` JSON, or any
  response to a decoder that does not stream ([`Decoder::STREAMS`]), is
  read whole and decoded at once; anything else is read as server-sent
  events ([`super::sse`]) and decoded event by event as chunks arrive.
- **Timeouts.** Connect (set on the client), first byte (request sent to
  response headers) and idle (between two body chunks) each end the attempt
  with `ProviderError::Timeout` whose phase is `connect`, `first byte` or
  `idle`.
- **Retries.** Connection failures, timeouts and statuses 429, 500, 502,
  503, 529 are retried up to [`RetryPolicy::max_retries`] times, waiting
  as the policy or the server's `Retry-After` says ([`super::retry`]), but
  only while the decoder has produced no event of the reply: a failure
  after that ends the stream (`TruncatedStream` when the body breaks,
  `Timeout` when it stalls), never silently restarts it. Each retry is
  announced by an event ([`Reply::retrying`]; `StreamEvent::Retrying`)
  before the wait begins. OpenAI's `insufficient_quota` 429 is not retried
  (waiting cannot help).
- **End.** The stream ends after the decoder's last event ([`Reply::ends`];
  `Done`); a body that ends first is a `TruncatedStream` (the decoder
  decides, see [`Decoder::end`]).
- **Cancellation.** The stream owns the in-flight request: dropping it
  drops the connection at once, mid-request or mid-body.

The stream must be polled inside a Tokio runtime (with time enabled).

[`RetryPolicy::max_retries`]: super::config::RetryPolicy::max_retries
*/

use super::client::build_client;
use super::config::{HttpConfig, SetupError};
use super::errors::{connection_error, details_from_body, error_for_status, excerpt, redact_error};
use super::retry::{backoff, is_retryable_status, retry_after};
use super::secret::Secret;
use super::sse::{SseEvent, SseParser};
use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use skein_core::{BoxStream, ProviderError, StreamEvent};
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// The most a JSON reply body may hold.
const MAX_JSON_BODY: usize = 64 * 1024 * 1024;
/// The most of an error body that is read.
const MAX_ERROR_BODY: usize = 1024 * 1024;

/// What a call's stream carries besides failures.
pub(crate) trait Reply: Send + 'static {
    /// The announcement of retry number `attempt`, made before its wait.
    fn retrying(attempt: u32, reason: String, delay: Duration) -> Self;
    /// Whether this is the reply's last event (no more is read after it).
    fn ends(&self) -> bool;
    /// Whether this event starts the reply, so that a failure after it is
    /// a truncated reply rather than an attempt worth making again. Only
    /// what the reply says counts: which model answered does not.
    fn starts_reply(&self) -> bool {
        true
    }
}

impl Reply for StreamEvent {
    fn retrying(attempt: u32, reason: String, delay: Duration) -> StreamEvent {
        StreamEvent::Retrying {
            attempt,
            reason,
            delay,
        }
    }

    fn ends(&self) -> bool {
        matches!(self, StreamEvent::Done(_))
    }

    fn starts_reply(&self) -> bool {
        !matches!(self, StreamEvent::Model(_))
    }
}

/// Decodes one wire format's successful replies into events.
pub(crate) trait Decoder: Send + 'static {
    type Event: Reply;
    /// Whether replies may be event streams; when not, every successful
    /// body is read whole and given to [`Decoder::body`].
    const STREAMS: bool = true;
    /// One server-sent event.
    fn event(&mut self, event: SseEvent, out: &mut Vec<Self::Event>) -> Result<(), ProviderError>;
    /// A whole JSON reply body.
    fn body(&mut self, body: &[u8], out: &mut Vec<Self::Event>) -> Result<(), ProviderError>;
    /// The event stream ended without the last event: emit what completes
    /// the reply, or fail (usually with `TruncatedStream`).
    fn end(&mut self, out: &mut Vec<Self::Event>) -> Result<(), ProviderError>;
}

/// A call that failed: its error, and the HTTP status of the error
/// response that ended it (none when no response did: a connection
/// failure, a timeout, a reply that did not decode).
#[derive(Debug)]
pub(crate) struct Failure {
    pub error: ProviderError,
    pub status: Option<u16>,
}

/// Where a wire format sends the key.
#[derive(Debug, Clone, Copy)]
pub(crate) enum KeyHeader {
    /// `Authorization: Bearer KEY` (OpenAI and the servers that speak it).
    Bearer,
    /// The key alone, in the header named (Anthropic's `x-api-key`).
    Named(&'static str),
}

/// One prepared request.
pub(crate) struct HttpRequest {
    pub url: String,
    /// Headers with the key marked sensitive.
    pub headers: HeaderMap,
    pub body: Vec<u8>,
    /// The key, to redact from every message.
    pub secret: Option<Secret>,
}

/// A client and the configuration it was built from.
pub(crate) struct Transport {
    client: reqwest::Client,
    config: HttpConfig,
}

impl std::fmt::Debug for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transport")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Transport {
    pub(crate) fn new(config: HttpConfig) -> Result<Transport, SetupError> {
        Ok(Transport {
            client: build_client(&config)?,
            config,
        })
    }

    pub(crate) fn config(&self) -> &HttpConfig {
        &self.config
    }

    /// The key for this call, or an authentication error saying which
    /// variable to set.
    pub(crate) fn secret(&self) -> Result<Option<Secret>, ProviderError> {
        self.config
            .credential
            .resolve()
            .map_err(|error| ProviderError::Authentication {
                message: error.to_string(),
            })
    }

    /// A JSON POST to `path` under the base URL, with the key (when there
    /// is one) in `key`'s header, marked sensitive. A missing key fails
    /// before a `body` that could not be built.
    pub(crate) fn post_json(
        &self,
        path: &str,
        key: KeyHeader,
        body: Result<Vec<u8>, ProviderError>,
    ) -> Result<HttpRequest, ProviderError> {
        let secret = self.secret()?;
        let body = body?;
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        if let Some(secret) = &secret {
            let (name, value) = match key {
                KeyHeader::Bearer => (AUTHORIZATION, format!("Bearer {}", secret.expose())),
                KeyHeader::Named(name) => {
                    (HeaderName::from_static(name), secret.expose().to_owned())
                }
            };
            headers.insert(name, sensitive(&value)?);
        }
        Ok(HttpRequest {
            url: self.config.endpoint(path),
            headers,
            body,
            secret,
        })
    }

    /// Run one call as a stream of events, its decoder made with the
    /// call's key (to redact it); a request that could not be prepared is
    /// a stream of that one error.
    pub(crate) fn stream<D: Decoder>(
        self: &Arc<Self>,
        request: Result<HttpRequest, ProviderError>,
        decoder: impl FnOnce(Option<Secret>) -> D,
    ) -> BoxStream<'static, Item<D>> {
        let request = match request {
            Ok(request) => request,
            Err(error) => return Box::pin(futures_util::stream::iter([Err(error)])),
        };
        let decoder = decoder(request.secret.clone());
        Box::pin(futures_util::stream::unfold(
            self.start(request, decoder),
            |mut call| async move {
                let item = call.next().await?;
                Some((item, call))
            },
        ))
    }

    /// Run one call to its end: every event (retry announcements
    /// included), or the failure that ended it.
    pub(crate) async fn call<D: Decoder>(
        self: &Arc<Self>,
        request: HttpRequest,
        decoder: D,
    ) -> Result<Vec<D::Event>, Failure> {
        let mut call = self.start(request, decoder);
        let mut events = Vec::new();
        while let Some(item) = call.next().await {
            match item {
                Ok(event) => events.push(event),
                Err(error) => {
                    return Err(Failure {
                        error,
                        status: call.status,
                    });
                }
            }
        }
        Ok(events)
    }

    fn start<D: Decoder>(self: &Arc<Self>, request: HttpRequest, decoder: D) -> Call<D> {
        Call {
            transport: self.clone(),
            request,
            decoder,
            retries: 0,
            phase: Phase::Send,
            queue: VecDeque::new(),
            reply_started: false,
            status: None,
        }
    }
}

type Item<D> = Result<<D as Decoder>::Event, ProviderError>;

enum Phase {
    Send,
    Wait(Duration),
    Sse {
        response: reqwest::Response,
        parser: SseParser,
    },
    Json(reqwest::Response),
    Over,
}

struct Call<D: Decoder> {
    transport: Arc<Transport>,
    request: HttpRequest,
    decoder: D,
    retries: u32,
    phase: Phase,
    queue: VecDeque<Item<D>>,
    /// The decoder produced an event: no more retries.
    reply_started: bool,
    /// The status of the error response that ended the latest attempt.
    status: Option<u16>,
}

impl<D: Decoder> Call<D> {
    async fn next(&mut self) -> Option<Item<D>> {
        loop {
            if let Some(item) = self.queue.pop_front() {
                return Some(item);
            }
            match std::mem::replace(&mut self.phase, Phase::Over) {
                Phase::Over => return None,
                Phase::Wait(delay) => {
                    tokio::time::sleep(delay).await;
                    self.phase = Phase::Send;
                }
                Phase::Send => self.send().await,
                Phase::Sse { response, parser } => self.read_sse(response, parser).await,
                Phase::Json(response) => self.read_json(response).await,
            }
        }
    }

    fn timeouts(&self) -> super::config::Timeouts {
        self.transport.config.timeouts
    }

    fn secret(&self) -> Option<&Secret> {
        self.request.secret.as_ref()
    }

    async fn send(&mut self) {
        self.status = None;
        let attempt = self
            .transport
            .client
            .post(&self.request.url)
            .headers(self.request.headers.clone())
            .body(self.request.body.clone())
            .send();
        let response = match tokio::time::timeout(self.timeouts().first_byte, attempt).await {
            Err(_) => return self.fail(timeout("first byte"), true, None),
            Ok(Err(error)) if error.is_connect() && error.is_timeout() => {
                return self.fail(timeout("connect"), true, None);
            }
            Ok(Err(error)) if error.is_timeout() => {
                return self.fail(timeout("first byte"), true, None);
            }
            Ok(Err(error)) => {
                let error = connection_error(error, self.secret());
                return self.fail(error, true, None);
            }
            Ok(Ok(response)) => response,
        };
        let status = response.status();
        if !status.is_success() {
            self.status = Some(status.as_u16());
            let server_delay = retry_after(response.headers(), SystemTime::now());
            let body = read_error_body(response, self.timeouts().idle).await;
            let error = error_for_status(
                status.as_u16(),
                status.canonical_reason().unwrap_or(""),
                &body,
                server_delay,
                self.secret(),
            );
            let retryable = is_retryable_status(status.as_u16())
                && details_from_body(&body).code.as_deref() != Some("insufficient_quota");
            return self.fail(error, retryable, server_delay);
        }
        let is_json = !D::STREAMS
            || response
                .headers()
                .get(CONTENT_TYPE)
                .and_then(|value| value.to_str().ok())
                .is_some_and(|value| {
                    let value = value.to_ascii_lowercase();
                    value.starts_with("application/json") || value.contains("+json")
                });
        self.phase = if is_json {
            Phase::Json(response)
        } else {
            Phase::Sse {
                response,
                parser: SseParser::new(),
            }
        };
    }

    async fn read_sse(&mut self, mut response: reqwest::Response, mut parser: SseParser) {
        let chunk = match tokio::time::timeout(self.timeouts().idle, response.chunk()).await {
            Err(_) => return self.fail(timeout("idle"), true, None),
            Ok(Err(error)) => return self.body_failed(error),
            Ok(Ok(chunk)) => chunk,
        };
        let mut events = Vec::new();
        let parsed = match &chunk {
            Some(bytes) => parser.push(bytes, &mut events),
            None => {
                parser.finish(&mut events);
                Ok(())
            }
        };
        let mut out = Vec::new();
        let mut result = Ok(());
        for event in events {
            result = self.decoder.event(event, &mut out);
            if result.is_err() || has_done(&out) {
                break;
            }
        }
        if result.is_ok() && !has_done(&out) {
            result = parsed;
        }
        if result.is_ok() && chunk.is_none() && !has_done(&out) {
            result = self.decoder.end(&mut out);
        }
        let done = has_done(&out);
        self.emit(out);
        if let Err(error) = result {
            let retryable = error.is_retryable();
            return self.fail(error, retryable, None);
        }
        if !done {
            if chunk.is_none() {
                // The decoder's `end` neither failed nor finished: a decoder
                // bug, reported rather than hidden.
                return self.fail(ProviderError::TruncatedStream, false, None);
            }
            self.phase = Phase::Sse { response, parser };
        }
    }

    async fn read_json(&mut self, mut response: reqwest::Response) {
        let mut body = Vec::new();
        loop {
            match tokio::time::timeout(self.timeouts().idle, response.chunk()).await {
                Err(_) => return self.fail(timeout("idle"), true, None),
                Ok(Err(error)) => return self.body_failed(error),
                Ok(Ok(Some(chunk))) => {
                    body.extend_from_slice(&chunk);
                    if body.len() > MAX_JSON_BODY {
                        let error = malformed("the JSON reply is larger than 64 MiB");
                        return self.fail(error, false, None);
                    }
                }
                Ok(Ok(None)) => break,
            }
        }
        let mut out = Vec::new();
        let result = self.decoder.body(&body, &mut out);
        match result {
            Ok(()) => self.emit(out),
            Err(error) => {
                let retryable = error.is_retryable();
                self.fail(error, retryable, None);
            }
        }
    }

    /// The body broke: before the reply started it is a connection failure
    /// worth retrying; after, the reply is truncated.
    fn body_failed(&mut self, error: reqwest::Error) {
        if self.reply_started {
            self.fail(ProviderError::TruncatedStream, false, None);
        } else {
            let error = connection_error(error, self.secret());
            self.fail(error, true, None);
        }
    }

    fn emit(&mut self, events: Vec<D::Event>) {
        if events.iter().any(Reply::starts_reply) {
            self.reply_started = true;
        }
        self.queue.extend(events.into_iter().map(Ok));
    }

    /// End the attempt: schedule a retry when allowed, else end the call
    /// with `error`.
    fn fail(&mut self, error: ProviderError, retryable: bool, server_delay: Option<Duration>) {
        let error = redact_error(error, self.secret());
        let policy = self.transport.config.retry;
        if retryable && !self.reply_started && self.retries < policy.max_retries {
            let delay = match server_delay {
                Some(delay) if delay <= policy.max_delay => Some(delay),
                Some(_) => None,
                None => Some(backoff(&policy, self.retries + 1)),
            };
            if let Some(delay) = delay {
                self.retries += 1;
                self.queue.push_back(Ok(D::Event::retrying(
                    self.retries,
                    error.to_string(),
                    delay,
                )));
                self.phase = Phase::Wait(delay);
                return;
            }
        }
        self.queue.push_back(Err(error));
        self.phase = Phase::Over;
    }
}

/// An error body, bounded; whatever could be read when reading fails.
async fn read_error_body(mut response: reqwest::Response, idle: Duration) -> Vec<u8> {
    let mut body = Vec::new();
    while body.len() < MAX_ERROR_BODY {
        match tokio::time::timeout(idle, response.chunk()).await {
            Ok(Ok(Some(chunk))) => body.extend_from_slice(&chunk),
            _ => break,
        }
    }
    body.truncate(MAX_ERROR_BODY);
    body
}

fn has_done<E: Reply>(events: &[E]) -> bool {
    events.iter().any(Reply::ends)
}

fn timeout(phase: &str) -> ProviderError {
    ProviderError::Timeout {
        phase: phase.to_owned(),
    }
}

pub(crate) fn malformed(message: impl Into<String>) -> ProviderError {
    ProviderError::MalformedResponse {
        message: message.into(),
    }
}

/// `bytes` (`what`: "the reply", "a stream event") parsed as JSON, or a
/// malformed-response error quoting their start.
pub(crate) fn parse_json<'a, T: serde::Deserialize<'a>>(
    bytes: &'a [u8],
    what: &str,
) -> Result<T, ProviderError> {
    serde_json::from_slice(bytes).map_err(|error| {
        malformed(format!(
            "{what} is not the expected JSON ({error}): {}",
            excerpt(&String::from_utf8_lossy(bytes))
        ))
    })
}

/// A request the provider cannot take, refused before sending.
pub(crate) fn refused(message: String) -> ProviderError {
    ProviderError::BadRequest {
        message,
        context_too_long: false,
    }
}

/// A request body encoded as JSON.
pub(crate) fn json_body(body: &impl serde::Serialize) -> Result<Vec<u8>, ProviderError> {
    serde_json::to_vec(body)
        .map_err(|error| refused(format!("could not encode the request: {error}")))
}

/// A header value carrying the key, marked sensitive so the HTTP stack
/// never prints it. A key with characters a header cannot carry is an
/// authentication error that does not repeat the key.
fn sensitive(value: &str) -> Result<HeaderValue, ProviderError> {
    let mut value = HeaderValue::from_str(value).map_err(|_| ProviderError::Authentication {
        message: "the API key contains characters an HTTP header cannot carry".into(),
    })?;
    value.set_sensitive(true);
    Ok(value)
}
