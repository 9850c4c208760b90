/*!
`GET /api/events`: a `text/event-stream` telling the page when any
conversation's bookmark moves or a conversation is created, by any process
writing the same database (the CLI, the proxy, another server on the same
PostgreSQL), so its list and an open family update without a reload.

The database is the only thing every writer shares, so it is polled: one
task per server (started by the first open stream, ended when the last
closes) lists the conversations updated since the newest one it saw, every
[`POLL`], through the store's listing by `updated` (an index scan that
stops at the first conversation it has already seen), and broadcasts each
as an `event: turn` with `{"conversation", "head", "updated_ms"}`. Every
write sets `updated` past the database's newest, so nothing is missed
between polls however clocks differ. A stream starts with `event: ready`
once the poller knows where the database stands, so any write after it
is reported; an idle stream sends keepalive comments; a stream too slow to
keep up is told `event: lagged` (reload). At most [`MAX_STREAMS`] are open
at once (more are 503).
*/

use super::api::{ApiError, Shared};
use super::stream::KEEPALIVE;
use axum::http::StatusCode;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::json;
use skein::NodeId;
use skein::Store;
use skein::store::{AsyncStore, ConversationId, ListPosition};
use std::collections::HashSet;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{Semaphore, broadcast};

/// How often the database is polled while a stream is open.
pub const POLL: Duration = Duration::from_millis(500);
/// Event streams open at once.
pub const MAX_STREAMS: usize = 32;
/// Conversations read per page of a poll, and pages per poll at most.
const PAGE: usize = 64;
const PAGES: usize = 16;
/// Events a stream may fall behind before it is told it lagged.
const BACKLOG: usize = 1024;

/// One moved or created conversation.
#[derive(Clone, Debug, Serialize)]
pub struct TurnEvent {
    pub conversation: ConversationId,
    pub head: Option<NodeId>,
    pub updated_ms: i64,
}

/// The server's poller and its listeners.
pub struct Hub {
    sender: Arc<Mutex<Option<broadcast::Sender<TurnEvent>>>>,
    streams: Arc<Semaphore>,
}

impl Default for Hub {
    fn default() -> Hub {
        Hub {
            sender: Arc::new(Mutex::new(None)),
            streams: Arc::new(Semaphore::new(MAX_STREAMS)),
        }
    }
}

/// Where the database stood at the last poll: the newest `updated` seen,
/// and the conversations seen with exactly that value.
struct Seen {
    updated_ms: i64,
    at_newest: HashSet<ConversationId>,
}

impl Seen {
    fn is_new(&self, updated_ms: i64, id: &ConversationId) -> bool {
        updated_ms > self.updated_ms
            || (updated_ms == self.updated_ms && !self.at_newest.contains(id))
    }

    async fn now(store: AsyncStore<'_>) -> skein::store::Result<Seen> {
        let newest = store.list_conversations(1).await?;
        let mut seen = Seen {
            updated_ms: i64::MIN,
            at_newest: HashSet::new(),
        };
        if let Some(newest) = newest.first() {
            seen.updated_ms = newest.updated_ms;
            seen.at_newest.insert(newest.id.clone());
            // Others written in the same millisecond (another database's
            // clock) follow it in the listing.
            let others = store
                .list_conversations_after(&newest.position(), PAGE)
                .await?;
            for other in others {
                if other.updated_ms != newest.updated_ms {
                    break;
                }
                seen.at_newest.insert(other.id);
            }
        }
        Ok(seen)
    }

    /// The conversations updated since, oldest first, and the new place.
    async fn poll(&mut self, store: AsyncStore<'_>) -> skein::store::Result<Vec<TurnEvent>> {
        let mut found = Vec::new();
        let mut page = store.list_conversations(PAGE).await?;
        for _ in 0..PAGES {
            let full = page.len() == PAGE;
            let mut reached_seen = false;
            for conversation in &page {
                if !self.is_new(conversation.updated_ms, &conversation.id) {
                    reached_seen = true;
                    break;
                }
                found.push(TurnEvent {
                    conversation: conversation.id.clone(),
                    head: conversation.head,
                    updated_ms: conversation.updated_ms,
                });
            }
            let Some(last) = page.last().filter(|_| full && !reached_seen) else {
                break;
            };
            let after: ListPosition = last.position();
            page = store.list_conversations_after(&after, PAGE).await?;
        }
        found.reverse();
        if let Some(newest) = found.last() {
            if newest.updated_ms > self.updated_ms {
                self.updated_ms = newest.updated_ms;
                self.at_newest.clear();
            }
            for event in found.iter().filter(|e| e.updated_ms == self.updated_ms) {
                self.at_newest.insert(event.conversation.clone());
            }
        }
        Ok(found)
    }
}

impl Hub {
    /// Listen, starting the poller when none runs. Returns once the
    /// poller knows where the database stands.
    async fn subscribe(&self, store: &Store) -> Result<broadcast::Receiver<TurnEvent>, ApiError> {
        if let Some(sender) = self.sender.lock().expect("not poisoned").as_ref() {
            return Ok(sender.subscribe());
        }
        let seen = Seen::now(store.nonblocking()).await?;
        let mut slot = self.sender.lock().expect("not poisoned");
        if let Some(sender) = slot.as_ref() {
            return Ok(sender.subscribe());
        }
        let (sender, receiver) = broadcast::channel(BACKLOG);
        *slot = Some(sender.clone());
        tokio::spawn(poll(store.clone(), seen, sender, self.sender.clone()));
        Ok(receiver)
    }
}

/// The poller: until no stream listens (checked under the hub's lock, so
/// a stream opening meanwhile either joins this poller or starts the
/// next), or the store fails.
async fn poll(
    store: Store,
    mut seen: Seen,
    sender: broadcast::Sender<TurnEvent>,
    slot: Arc<Mutex<Option<broadcast::Sender<TurnEvent>>>>,
) {
    let mut interval = tokio::time::interval(POLL);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        interval.tick().await;
        {
            let mut slot = slot.lock().expect("not poisoned");
            if sender.receiver_count() == 0 {
                *slot = None;
                return;
            }
        }
        match seen.poll(store.nonblocking()).await {
            Ok(events) => {
                for event in events {
                    let _ = sender.send(event);
                }
            }
            Err(error) => {
                tracing::warn!(%error, "web view: polling for turns failed");
                *slot.lock().expect("not poisoned") = None;
                return;
            }
        }
    }
}

/// `GET /api/events`.
pub async fn events(state: Shared) -> Result<Response, ApiError> {
    let permit = state
        .events
        .streams
        .clone()
        .try_acquire_owned()
        .map_err(|_| {
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("this server already serves {MAX_STREAMS} event streams: close a page"),
            )
        })?;
    let receiver = state.events.subscribe(&state.reads).await?;
    let ready = Event::default().event("ready").data("{}");
    let stream = futures_util::stream::unfold(
        (Some(ready), receiver, permit),
        |(first, mut receiver, permit)| async move {
            if let Some(ready) = first {
                return Some((Ok::<_, Infallible>(ready), (None, receiver, permit)));
            }
            let event = match receiver.recv().await {
                Ok(turn) => Event::default()
                    .event("turn")
                    .json_data(&turn)
                    .unwrap_or_else(|_| Event::default().comment("unencodable")),
                Err(broadcast::error::RecvError::Lagged(missed)) => Event::default()
                    .event("lagged")
                    .data(json!({ "missed": missed }).to_string()),
                Err(broadcast::error::RecvError::Closed) => return None,
            };
            Some((Ok(event), (None, receiver, permit)))
        },
    );
    Ok(Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(KEEPALIVE))
        .into_response())
}

#[cfg(test)]
mod tests {
    use super::*;
    use skein::store::NewConversation;

    #[tokio::test]
    async fn a_poll_reports_every_conversation_written_since_the_last_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path().join("skein.db")).unwrap();
        store
            .create_conversation(NewConversation::default())
            .unwrap();
        let mut seen = Seen::now(store.nonblocking()).await.unwrap();
        assert!(
            seen.poll(store.nonblocking()).await.unwrap().is_empty(),
            "nothing new yet"
        );
        // More than a poll's pages of one: every one, oldest first.
        let created: Vec<ConversationId> = (0..PAGE * 2 + 5)
            .map(|_| {
                store
                    .create_conversation(NewConversation::default())
                    .unwrap()
                    .id
            })
            .collect();
        let found: Vec<ConversationId> = seen
            .poll(store.nonblocking())
            .await
            .unwrap()
            .into_iter()
            .map(|event| event.conversation)
            .collect();
        assert_eq!(found, created);
        assert!(
            seen.poll(store.nonblocking()).await.unwrap().is_empty(),
            "each is reported once"
        );
        let last = store
            .create_conversation(NewConversation::default())
            .unwrap();
        let found = seen.poll(store.nonblocking()).await.unwrap();
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].conversation, last.id);
    }
}
