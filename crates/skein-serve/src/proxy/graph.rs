/*!
A [`Turn`] completed from the graph before it runs, through the store's async API:

- a `previous_response_id` (or an Anthropic thread's `previous_message_id`)
  becomes the stored thread of the reply it names (the node its run
  produced), put before the new messages; a thread also keeps its system
  message and the tools its reply was offered;
- tool calls whose arguments a client may have re-encoded (Anthropic's
  `input` objects, LangChain's `json.dumps` of chat completions'
  `arguments`: every API's calls) are matched against the stored assistant
  node they stand for:
  a child of the same parent whose calls are the same but for argument
  text that maps to the same JSON. That node's message, with the exact
  text the model wrote, takes the re-encoded one's place, so the history
  continues the stored thread instead of forking it by whitespace. Matches
  are remembered ([`Memo`]), so a history re-sent each turn costs queries
  only for its new messages.

Then the tool results of the whole history are checked
([`super::results`]).
*/

use super::results::{self, ParamPaths};
use super::turn::{Continued, ErrorKind, Previous, ProxyError, Turn};
use axum::http::StatusCode;
use serde_json::Value;
use skein::core::{Message, NodeId, Part, Role, Thread};
use skein::providers::http::arguments_value;
use skein::store::{AsyncStore, RunStatus, Store, StoreError};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// How many stored children of a node are compared with a re-encoded
/// assistant message.
const SIBLINGS_COMPARED: usize = 64;

/// How many matches the [`Memo`] keeps before it starts over.
const MEMO_CAPACITY: usize = 16_384;

/// Re-encoded messages already matched to the graph, by the node id the
/// client's encoding gives them. A client re-sends its whole history each
/// turn, so each turn would look every earlier match up in the store again;
/// with the memo only new messages cost a query. Only matches are kept (a
/// stored node never goes away, so they never go stale).
#[derive(Debug, Default)]
pub struct Memo(Mutex<HashMap<NodeId, Message>>);

impl Memo {
    fn get(&self, id: NodeId) -> Option<Message> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .get(&id)
            .cloned()
    }

    /// Forget every match (content they hold may have been erased).
    pub fn clear(&self) {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clear();
    }

    fn keep(&self, id: NodeId, message: Message) {
        let mut memo = self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if memo.len() >= MEMO_CAPACITY {
            memo.clear();
        }
        memo.insert(id, message);
    }
}

/// Complete `turn` from the graph and check its tool results; its
/// messages come after `before` (a kept thread a re-sent body's first
/// messages are: see `super::resent`) when given. A keyed `client`
/// continues only a reply its own request got: another client's is
/// answered as one the graph lacks.
pub async fn complete(
    store: &Store,
    memo: Arc<Memo>,
    turn: Turn,
    client: Option<&str>,
    before: Option<&Thread>,
) -> Result<Turn, ProxyError> {
    let turn = if turn.previous.is_some() || !turn.reencoded.is_empty() {
        let store = store.nonblocking();
        let start = before.cloned().unwrap_or_default();
        let read = async {
            let turn = previous(store, turn, client).await?;
            reencoded(store, &memo, turn, start).await
        };
        match read.await {
            Ok(turn) => turn,
            Err(Failure::Client(error)) => return Err(error),
            Err(Failure::Store(error)) => {
                return Err(ProxyError::server(format!(
                    "the graph could not be read: {error}"
                )));
            }
        }
    } else {
        turn
    };
    match before {
        None => results::check(&turn.messages, &turn.places)?,
        Some(before) => results::check_after(before, &turn.messages, &turn.places)?,
    }
    Ok(turn)
}

/// Why the graph step failed: a client's mistake, or the store's.
enum Failure {
    Client(ProxyError),
    Store(StoreError),
}

impl From<StoreError> for Failure {
    fn from(error: StoreError) -> Failure {
        Failure::Store(error)
    }
}

/// Put the stored thread of `turn.previous` before its new messages.
async fn previous(
    store: AsyncStore<'_>,
    mut turn: Turn,
    client: Option<&str>,
) -> Result<Turn, Failure> {
    let Some(Previous {
        given,
        run,
        instructions,
        of,
    }) = turn.previous.take()
    else {
        return Ok(turn);
    };
    let not_found = || Failure::Client(missing_reply(&given, of));
    let Some(run) = run else {
        return Err(not_found());
    };
    let record = match store.run_record(&run).await {
        Ok(record) => record,
        Err(StoreError::RunNotFound(_)) => return Err(not_found()),
        Err(error) => return Err(error.into()),
    };
    // A cancelled run's output is a partial answer, never one to continue;
    // another client's reply is not there for this one.
    let Some(head) = record.output_head.filter(|_| {
        record.status == RunStatus::Succeeded
            && client.is_none_or(|client| record.client.as_deref() == Some(client))
    }) else {
        return Err(not_found());
    };
    let thread = store.load_thread(head).await?;
    let stored: Vec<Message> = thread
        .messages()
        .into_iter()
        .skip_while(|message| of == Continued::Response && message.role == Role::System)
        .cloned()
        .collect();
    if of == (Continued::Thread { offers_tools: true }) {
        turn.tools = record.tools;
    }
    let inserted = stored.len();
    // The stored history stands where the request names it.
    let named_at = match of {
        Continued::Response => "previous_response_id",
        Continued::Thread { .. } => "thread.previous_message_id",
    };
    let stored_places: Vec<ParamPaths> = stored
        .iter()
        .map(|message| ParamPaths::uniform(named_at, message.parts.len(), ""))
        .collect();
    let mut messages = turn.messages;
    let rest = messages.split_off(instructions);
    messages.extend(stored);
    messages.extend(rest);
    turn.messages = messages;
    let mut places = turn.places;
    let rest = places.split_off(instructions.min(places.len()));
    places.extend(stored_places);
    places.extend(rest);
    turn.places = places;
    let shift = |index: usize| {
        if index >= instructions {
            index + inserted
        } else {
            index
        }
    };
    for (index, _, _) in &mut turn.annotations {
        *index = shift(*index);
    }
    for (index, _, _) in &mut turn.reencoded {
        *index = shift(*index);
    }
    Ok(turn)
}

/// A continuation of a reply the graph lacks, refused as its API says: an
/// Anthropic thread with the code on which the SDK sends the whole history
/// again under a new thread.
fn missing_reply(given: &str, of: Continued) -> ProxyError {
    match of {
        Continued::Response => ProxyError::invalid(format!(
            "previous response `{given}` is not in this proxy's graph: it was not recorded \
             (`store: false`), failed, or was answered by another server"
        ))
        .at("previous_response_id"),
        Continued::Thread { .. } => ProxyError::new(
            StatusCode::NOT_FOUND,
            ErrorKind::NotFound,
            format!(
                "message `{given}` is not in this proxy's graph (it failed, or another server \
                 answered it): send the whole history with `thread: {{\"type\": \"create\"}}`"
            ),
        )
        .at("thread.previous_message_id")
        .code("thread_not_found"),
    }
}

/// Replace each assistant message whose calls a client re-encoded by the
/// stored node it stands for, when the graph has one; the messages follow
/// the thread `start`.
async fn reencoded(
    store: AsyncStore<'_>,
    memo: &Memo,
    mut turn: Turn,
    start: Thread,
) -> Result<Turn, Failure> {
    let reencoded = std::mem::take(&mut turn.reencoded);
    let mut thread = start;
    for (index, message) in turn.messages.iter_mut().enumerate() {
        let values: Vec<(usize, &Value)> = reencoded
            .iter()
            .filter(|(at, _, _)| *at == index)
            .map(|(_, part, value)| (*part, value))
            .collect();
        if !values.is_empty()
            && let Some(parent) = thread.head_id()
        {
            let sent = thread.push(message.clone()).head_id().expect("pushed");
            if let Some(known) = memo.get(sent) {
                *message = known;
            } else if store.contains(sent).await? {
                memo.keep(sent, message.clone());
            } else {
                for child in store
                    .children(parent)
                    .await?
                    .into_iter()
                    .take(SIBLINGS_COMPARED)
                {
                    let stored = store.node(child).await?.message;
                    if stands_for(&stored, message, &values) {
                        memo.keep(sent, stored.clone());
                        *message = stored;
                        break;
                    }
                }
            }
        }
        thread = thread.push(message.clone());
    }
    Ok(turn)
}

/// Whether `stored` is the message a client re-encoded as `sent`: the same
/// parts, except that the calls at `values` carry argument text whose
/// Anthropic `input` is that JSON value.
fn stands_for(stored: &Message, sent: &Message, values: &[(usize, &Value)]) -> bool {
    stored.role == sent.role
        && stored.parts.len() == sent.parts.len()
        && stored
            .parts
            .iter()
            .zip(&sent.parts)
            .enumerate()
            .all(|(index, (stored, sent))| {
                match (values.iter().find(|(at, _)| *at == index), stored, sent) {
                    (Some((_, value)), Part::ToolCall(stored), Part::ToolCall(sent)) => {
                        stored.id == sent.id
                            && stored.name == sent.name
                            && arguments_value(&stored.arguments) == **value
                    }
                    (Some(_), _, _) => false,
                    (None, stored, sent) => stored == sent,
                }
            })
}

#[cfg(test)]
mod tests {
    use super::*;
    use skein::core::ToolCall;

    #[test]
    fn a_reencoded_call_stands_for_the_stored_one_with_equal_json() {
        let stored = Message::new(
            Role::Assistant,
            vec![
                Part::text("Let me look."),
                Part::ToolCall(ToolCall {
                    id: "c1".into(),
                    name: "get_weather".into(),
                    arguments: "{\"city\": \"Paris\"}".into(),
                }),
            ],
        );
        let mut sent = stored.clone();
        if let Part::ToolCall(call) = &mut sent.parts[1] {
            call.arguments = "{\"city\":\"Paris\"}".into();
        }
        let value = serde_json::json!({"city": "Paris"});
        assert!(stands_for(&stored, &sent, &[(1, &value)]));
        let other = serde_json::json!({"city": "Lyon"});
        assert!(!stands_for(&stored, &sent, &[(1, &other)]));
        let mut renamed = sent.clone();
        renamed.parts[0] = Part::text("Looking.");
        assert!(!stands_for(&stored, &renamed, &[(1, &value)]));
        // Empty arguments go out as `{}` and come back as `{}`.
        let mut empty = stored.clone();
        if let Part::ToolCall(call) = &mut empty.parts[1] {
            call.arguments = String::new();
        }
        assert!(stands_for(&empty, &sent, &[(1, &serde_json::json!({}))]));
    }
}
