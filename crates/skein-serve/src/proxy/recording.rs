/*!
Answers from the recording (`skein serve --proxy --from-recording`). A
request the proxy recorded before — the same messages (so, by content, the
same thread head), the same tools offered, the same generation options and
the same requested model — is answered with the reply recorded for it, in
the client's API and streamed when the client asks for a stream, without
calling a model or writing anything. An application's own tests then run
offline and deterministic against real traffic, with nothing to maintain
but the database.

A request whose recorded reply was erased (`skein redact`) is never
answered with what is left of it: it is refused (410, code
`recording_erased`), or with `--record-misses` sent to the model as a
request the recording lacks.

A request the recording lacks is refused with its first difference from
what was recorded (the first message no recorded request had in that
place, or the tools, options or model that differ from the recorded call
on the same messages); with `--record-misses` it goes on to the model and
is recorded like any proxied request.

A keyed client of the proxy (`super::clients`) is answered from its own
recordings only, and its misses name no other client's messages: a request
its own recordings lack is refused without saying what else the graph
holds (whether another client sent those messages is not told).
*/

use skein::core::{Message, NodeId, Role, RunRecord, RunStatus, Thread};
use skein::engine::Prepared;
use skein::store::{Store, StoreError};

/// How the proxy uses the recording.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FromRecording {
    /// Answer recorded requests; refuse every other.
    Only,
    /// Answer recorded requests; forward every other to the model and
    /// record it.
    RecordMisses,
}

/// A recorded call that answered the very request: its run, and the reply
/// its run produced.
#[derive(Debug)]
pub struct Hit {
    pub run: RunRecord,
    pub message: Message,
}

/// What the recording holds for a request.
#[derive(Debug)]
pub enum Lookup {
    Hit(Box<Hit>),
    /// Nothing: why, naming the request's first difference.
    Miss(String),
    /// The request was recorded, but every reply recorded for it was
    /// erased (`skein redact`): the newest's message, and why it was
    /// erased. It is never answered with what is left of it.
    Erased {
        reply: NodeId,
        reason: String,
    },
}

/// The longest stretch of a message shown when naming a difference.
const PREVIEW: usize = 60;

/// Look `prepared` (the request as the model would receive it) up in the
/// recording. `requested` is the model name the client asked for; a keyed
/// `client` is answered from its own recordings only.
pub async fn find(
    store: &Store,
    prepared: &Prepared,
    requested: Option<&str>,
    client: Option<&str>,
) -> Result<Lookup, StoreError> {
    let store = store.nonblocking();
    let Some(head) = prepared.thread.head_id() else {
        return Ok(Lookup::Miss("the request has no messages".into()));
    };
    let unseen = || {
        Lookup::Miss(format!(
            "this client's recordings have no request with these {} messages",
            prepared.thread.len()
        ))
    };
    if !store.contains(head).await? {
        if client.is_some() {
            return Ok(unseen());
        }
        return first_new_message(&store, &prepared.thread)
            .await
            .map(Lookup::Miss);
    }
    let mut answered = Vec::new();
    for reply in store.children(head).await? {
        for run in store.runs_producing(reply).await? {
            if run.input_head == Some(head)
                && run.status == RunStatus::Succeeded
                && client.is_none_or(|client| run.client.as_deref() == Some(client))
            {
                answered.push((run, reply));
            }
        }
    }
    // The latest recording of the request wins, as a cassette's last take.
    answered.sort_by_key(|(run, _)| std::cmp::Reverse(run.started_ms));
    let Some((newest, _)) = answered.first() else {
        if client.is_some() {
            return Ok(unseen());
        }
        return Ok(Lookup::Miss(format!(
            "its {} messages were recorded, but never sent as a request whose last message is \
             the {}",
            prepared.thread.len(),
            ordinal_role(prepared.thread.len(), &prepared.thread)
        )));
    };
    let newest_difference = difference(newest, prepared, requested);
    // The newest matching recording whose reply is whole answers; a reply
    // that was erased is never answered (it would be empty, or a part).
    let mut erased = None;
    for (run, reply) in answered
        .iter()
        .filter(|(run, _)| difference(run, prepared, requested).is_none())
    {
        let message = store.node(*reply).await?.message;
        if message.is_erased() {
            let reason = message.erased_reason().unwrap_or_default().to_string();
            erased.get_or_insert((*reply, reason));
            continue;
        }
        return Ok(Lookup::Hit(Box::new(Hit {
            run: run.clone(),
            message,
        })));
    }
    if let Some((reply, reason)) = erased {
        return Ok(Lookup::Erased { reply, reason });
    }
    Ok(Lookup::Miss(newest_difference.unwrap_or_else(|| {
        "no recorded call matches it".to_string()
    })))
}

/// How a recorded call on the same messages differs from the request, in
/// the order a reader checks: model, tools, options.
fn difference(run: &RunRecord, prepared: &Prepared, requested: Option<&str>) -> Option<String> {
    // The proxy keeps the model the client asked for; a call recorded
    // elsewhere is compared by the model that answered it.
    let (recorded_model, asked) = match &run.requested_model {
        Some(recorded) => (recorded.as_str(), requested.unwrap_or("")),
        None => (run.model.as_str(), prepared.model.as_str()),
    };
    if recorded_model != asked {
        return Some(format!(
            "the model differs: recorded `{recorded_model}`, this request `{asked}`"
        ));
    }
    if run.tools != prepared.tools {
        let names = |tools: &[skein::core::ToolSpec]| {
            let names: Vec<&str> = tools.iter().map(|tool| tool.name.as_str()).collect();
            format!("[{}]", names.join(", "))
        };
        let detail = match run
            .tools
            .iter()
            .zip(&prepared.tools)
            .find(|(recorded, asked)| recorded != asked)
        {
            Some((recorded, asked)) if recorded.name == asked.name => {
                format!("tool `{}` has another description or schema", asked.name)
            }
            _ => format!(
                "recorded {}, this request {}",
                names(&run.tools),
                names(&prepared.tools)
            ),
        };
        return Some(format!("the tools offered differ: {detail}"));
    }
    if run.options != prepared.options {
        let show = |options| serde_json::to_string(options).unwrap_or_default();
        return Some(format!(
            "the generation options differ: recorded {}, this request {}",
            show(&run.options),
            show(&prepared.options)
        ));
    }
    None
}

/// The first message of `thread` that no recorded request had after the
/// messages before it, and what was recorded there instead. A node is
/// only ever stored after its parent, so the stored messages are a prefix
/// of the thread, found by bisection.
async fn first_new_message(
    store: &skein::store::AsyncStore<'_>,
    thread: &Thread,
) -> Result<String, StoreError> {
    let nodes = thread.nodes();
    // nodes[..stored] are stored and nodes[new] is not (the head is not).
    let (mut stored, mut new) = (0, nodes.len() - 1);
    while stored < new {
        let middle = stored + (new - stored) / 2;
        if store.contains(nodes[middle].id()).await? {
            stored = middle + 1;
        } else {
            new = middle;
        }
    }
    let message = nodes[new].message();
    let place = format!(
        "message {} of {} ({})",
        new + 1,
        nodes.len(),
        role_name(message.role)
    );
    if new == 0 {
        return Ok(format!(
            "{place}, {}, starts no recorded conversation",
            preview(&message.joined_text())
        ));
    }
    let parent = nodes[new - 1].id();
    let mut recorded = None;
    for sibling in store.children(parent).await? {
        let sibling = store.node(sibling).await?.message;
        if sibling.role == message.role {
            recorded = Some(sibling);
            break;
        }
    }
    Ok(match recorded {
        Some(recorded) => {
            let (was, is) = (recorded.joined_text(), message.joined_text());
            let at = was
                .chars()
                .zip(is.chars())
                .take_while(|(a, b)| a == b)
                .count();
            if was == is {
                format!(
                    "{place} has the recorded text but other parts (tool calls, results or \
                     attachments) than the recorded one"
                )
            } else {
                format!(
                    "{place} differs from the recorded one at character {}: recorded {}, this \
                     request {}",
                    at + 1,
                    preview_from(&was, at),
                    preview_from(&is, at)
                )
            }
        }
        None => format!(
            "{place}, {}, follows messages that were recorded, but none like it was recorded \
             after them",
            preview(&message.joined_text())
        ),
    })
}

/// "the user message": the role of the thread's last message, for a miss.
fn ordinal_role(len: usize, thread: &Thread) -> String {
    let role = thread
        .head()
        .map(|head| role_name(head.message().role))
        .unwrap_or("");
    format!("{role} message (message {len})")
}

fn preview(text: &str) -> String {
    preview_from(text, 0)
}

/// `text` from character `at` (with a few before it for context), quoted
/// and cut at [`PREVIEW`] characters.
fn preview_from(text: &str, at: usize) -> String {
    let from = at.saturating_sub(10);
    let shown: String = text.chars().skip(from).take(PREVIEW).collect();
    let before = if from > 0 { "…" } else { "" };
    let after = if text.chars().count() > from + PREVIEW {
        "…"
    } else {
        ""
    };
    format!("{:?}", format!("{before}{shown}{after}"))
}

fn role_name(role: Role) -> &'static str {
    match role {
        Role::System => "system",
        Role::User => "user",
        Role::Assistant => "assistant",
        Role::Tool => "tool",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use skein::core::NodeId;

    fn ids(thread: &Thread) -> Vec<NodeId> {
        thread.nodes().iter().map(|node| node.id()).collect()
    }

    fn thread(texts: &[&str]) -> Thread {
        Thread::from_messages(texts.iter().enumerate().map(|(index, text)| {
            if index % 2 == 0 {
                Message::user(*text)
            } else {
                Message::assistant(*text)
            }
        }))
    }

    #[tokio::test]
    async fn the_first_new_message_is_found_at_every_depth_and_compared_with_its_recorded_sibling()
    {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path().join("skein.db")).unwrap();
        let recorded = thread(&["a", "b", "c", "d", "e", "f", "g"]);
        store.append(&recorded).unwrap();
        let store = store.nonblocking();
        for depth in 0..7 {
            let mut texts: Vec<String> = ["a", "b", "c", "d", "e", "f", "g"]
                .iter()
                .map(|text| text.to_string())
                .collect();
            texts[depth] = format!("{} changed", texts[depth]);
            let asked = thread(&texts.iter().map(String::as_str).collect::<Vec<_>>());
            assert_eq!(ids(&asked)[..depth], ids(&recorded)[..depth]);
            let why = first_new_message(&store, &asked).await.unwrap();
            assert!(
                why.starts_with(&format!("message {} of 7", depth + 1)),
                "{why}"
            );
            if depth > 0 {
                assert!(why.contains("at character 2"), "{why}");
                assert!(
                    why.contains("\"a changed\"") || why.contains(" changed\""),
                    "{why}"
                );
            } else {
                assert!(why.contains("starts no recorded conversation"), "{why}");
            }
        }
    }

    #[test]
    fn a_preview_shows_the_difference_with_some_context_and_marks_cuts() {
        let long = "x".repeat(100) + "DIFF" + &"y".repeat(100);
        let shown = preview_from(&long, 100);
        assert!(shown.starts_with("\"…xxxxxxxxxxDIFF"), "{shown}");
        assert!(shown.ends_with("…\""), "{shown}");
        assert_eq!(preview("short"), "\"short\"");
    }
}
