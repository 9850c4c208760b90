/*!
A turn run for the page, streamed as server-sent events: `start` (where the
turn lands), `delta` (the reply's text as it is produced), then `done`
(where it was recorded: a turn whose conversation another writer moved on
meanwhile lands in a new branch where it started, and says so) or `error` (why it failed; a failed model call is
recorded by the turn layer as on every surface).

The turn runs in a task of its own holding one of the server's turn
permits, so a page that goes away does not cut a turn short: it is
recorded either way, and the page sees it through `/api/events`. What it
streams is bounded: each model call of the turn is stopped past
[`STREAM_MAX_BYTES`] of text by the engine's reply bound
([`with_reply_limit`]), which fails the call as any failed model call (its
run is recorded as failed, the conversation does not move); its `error`
says so. A turn's permit is free before its last event is sent.
*/

use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::json;
use skein::engine::with_reply_limit;
use skein::store::ConversationId;
use skein::{Landed, NodeId, OnMoved, Prompt};
use std::convert::Infallible;
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, mpsc};

/// The most reply text one model call of a streamed turn may produce.
pub const STREAM_MAX_BYTES: usize = 4 * 1024 * 1024;
/// How often an idle stream sends a keepalive comment.
pub(crate) const KEEPALIVE: Duration = Duration::from_secs(10);

/// The `start` event: where the turn lands.
#[derive(Debug, Serialize)]
pub(crate) struct Start {
    pub conversation: ConversationId,
    /// Whether the turn makes a new conversation (a branch or fork).
    pub branched: bool,
    /// The node the new turn goes on from (`None` at the very start).
    pub from: Option<NodeId>,
    /// The node the action was asked at.
    pub at: NodeId,
}

/// The `done` event: where the turn was recorded.
#[derive(Debug, Serialize)]
pub(crate) struct Done {
    pub conversation: ConversationId,
    /// Whether the turn landed in a new conversation: a branch or fork
    /// (as `start` said), or a branch because the conversation it went on
    /// with moved on while it ran (then `conversation` is that branch).
    pub branched: bool,
    pub node: NodeId,
    pub run: Option<String>,
    pub finish_reason: Option<String>,
    pub text: String,
}

fn event(name: &str, data: &impl Serialize) -> Event {
    Event::default()
        .event(name)
        .json_data(data)
        .unwrap_or_else(|_| Event::default().event("error").data("{}"))
}

/// The events of a turn as a `text/event-stream` response.
fn respond(receiver: mpsc::UnboundedReceiver<Event>) -> Response {
    let stream = futures_util::stream::unfold(receiver, |mut receiver| async move {
        let event = receiver.recv().await?;
        Some((Ok::<_, Infallible>(event), receiver))
    });
    Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(KEEPALIVE))
        .into_response()
}

/// Run `prompt` (a tool loop when it offers tools, as the CLI does) and
/// stream it. When the conversation it goes on with moves on while it
/// runs, it lands in a new branch where it started (the landing rule).
pub(crate) fn turn(permit: OwnedSemaphorePermit, start: Start, prompt: Prompt) -> Response {
    let (sender, receiver) = mpsc::unbounded_channel();
    let _ = sender.send(event("start", &start));
    let prompt = prompt.on_moved(OnMoved::Branch);
    let deltas = sender.clone();
    let prompt = prompt.on_text(move |text: &str| {
        let _ = deltas.send(event("delta", &json!({ "text": text })));
    });
    tokio::spawn(async move {
        let send = async {
            if prompt.offers_tools() {
                prompt
                    .chain()
                    .send()
                    .await
                    .map(|chain| chain.last().clone())
            } else {
                prompt.send().await
            }
        };
        let outcome = with_reply_limit(STREAM_MAX_BYTES, send).await;
        // The turn is over: its permit is free before the page hears so,
        // so a turn started on `done` or `error` is not refused.
        drop(permit);
        let last = match outcome {
            Ok(response) => event(
                "done",
                &Done {
                    branched: start.branched
                        || matches!(response.landed(), Landed::Branched { .. }),
                    conversation: response.conversation().id(),
                    node: response.head(),
                    run: Some(response.run_id().to_string()),
                    finish_reason: Some(response.output().finish_reason.name().to_string()),
                    text: response.text(),
                },
            ),
            Err(error) => {
                tracing::warn!(%error, "web view: a turn failed");
                error_event(&error.to_string())
            }
        };
        let _ = sender.send(last);
    });
    respond(receiver)
}

/// A turn run elsewhere (a recorded chat, which has no text stream of its
/// own): `start`, then the whole reply as one `delta` and `done`, or
/// `error`.
pub(crate) fn finished(
    start: Start,
    work: impl Future<Output = Result<Done, String>> + Send + 'static,
) -> Response {
    let (sender, receiver) = mpsc::unbounded_channel();
    let _ = sender.send(event("start", &start));
    tokio::spawn(async move {
        match work.await {
            Ok(done) => {
                let _ = sender.send(event("delta", &json!({ "text": done.text })));
                let _ = sender.send(event("done", &done));
            }
            Err(message) => {
                let _ = sender.send(error_event(&message));
            }
        }
    });
    respond(receiver)
}

fn error_event(message: &str) -> Event {
    event("error", &json!({ "message": message }))
}
