/*!
Import from `llm` (0.3x): its content-addressed message store (`threads`,
`messages`, `parts`, `turns`, `tools`, `turn_tools`, and attachments) read
from its `logs.db` (with rusqlite, read-only), checked whole (every tip,
turn and parent names a message that exists; every tool schema is JSON),
then written in one transaction by [`Store::import_records`], the store's
batch write that JSONL import uses too, so it is all or nothing on both
backends.

- Each `llm` message becomes a node under its parent's node, so shared
  prefixes stay shared and a thread becomes a thread.
- Parts: text, tool calls (arguments re-serialised as JSON text) and tool
  results (an `exception` marks the result as an error) map one to one;
  attachments stored inline become attachment parts. Reasoning parts and
  attachments held only by path or URL have no skein equivalent and are
  counted as skipped, never silently dropped.
- Each `llm` thread becomes a conversation (created and updated at its
  first and latest turn's time); a fork (`forked_from`) keeps its origin:
  the thread it came from and the newest message both share. A
  conversation imported before keeps its bookmark. Its name is the
  thread's (`llm` names a thread after its first prompt); a thread named
  nothing (an empty prompt) is titled `(empty prompt)` instead.
- A conversation keeps the model its latest turn asked for, under skein's
  name for it where skein has one ([`skein_model`]: `gpt-4o-mini` is
  `openai:gpt-4o-mini`, `anthropic/claude-…` is `anthropic:claude-…`), so
  continuing it runs on that model; a name skein cannot run is kept as
  `llm` wrote it, and the report lists it ([`LlmImportReport::unknown_models`]).
- Each turn becomes a run with its model, usage, timings and the exact
  tools it offered.

Ids of conversations and runs are derived from `llm`'s own ids, so
importing the same database again changes nothing.

Failures are the store's: a database that is not `llm`'s, or is damaged,
is a [`StoreError::Import`] saying what was wrong (and that nothing was
imported); the store's own failures pass through.
*/

use rusqlite::{Connection, OpenFlags, OptionalExtension, params};
use serde::{Deserialize, Serialize};
use skein_core::thread::Node;
use skein_core::{
    Attachment, Digest, Message, NodeId, Part, Role, Thread, ToolCall, ToolResult, ToolSpec,
};
use skein_store::{
    ConversationId, ConversationRecord, Origin, Result, RunId, RunRecord, Store, StoreError,
};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::Path;

/// What an import from `llm` did.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct LlmImportReport {
    pub messages: usize,
    pub conversations: usize,
    pub runs: usize,
    /// Conversations and runs already imported before, left alone.
    pub already_present: usize,
    /// Parts with no skein equivalent, by kind.
    pub skipped_parts: HashMap<String, usize>,
    /// The models the imported conversations run on, by `llm`'s name,
    /// where skein's name differs (`gpt-4o-mini` → `openai:gpt-4o-mini`).
    pub renamed_models: BTreeMap<String, String>,
    /// Models of imported conversations that skein cannot run, kept as
    /// `llm` named them: continuing such a conversation needs `-m`.
    pub unknown_models: BTreeSet<String>,
}

/// skein's name for a model `llm` named, and whether skein can run it: a
/// name skein takes as it is (`echo`); `llm`'s provider-prefixed names
/// (`anthropic/claude-…`, `openai/…`); a provider's model named bare
/// (`gpt-4o-mini`, `claude-3-5-sonnet-latest`, as `skein -m` suggests it);
/// else the name as it was, which skein cannot run. Never a name that
/// opens a file: data from elsewhere does not choose local files.
pub fn skein_model(llm: &str) -> (String, bool) {
    let http = |name: &str| name.starts_with("openai:") || name.starts_with("anthropic:");
    for (prefix, backend) in [("anthropic/", "anthropic"), ("openai/", "openai")] {
        if let Some(model) = llm.strip_prefix(prefix).filter(|model| !model.is_empty()) {
            return (format!("{backend}:{model}"), true);
        }
    }
    if skein_providers::kind_of(llm).is_ok() && !skein_providers::names_a_file(llm) {
        return (llm.to_string(), true);
    }
    match skein_providers::suggest(llm).filter(|name| http(name)) {
        Some(name) => (name, true),
        None => (llm.to_string(), false),
    }
}

/// One `llm` message as read.
struct LlmMessage {
    parent: Option<String>,
    role: Role,
    parts: Vec<Part>,
}

#[derive(Deserialize)]
struct CallPayload {
    #[serde(default)]
    name: String,
    #[serde(default)]
    arguments: serde_json::Value,
    tool_call_id: Option<String>,
}

#[derive(Deserialize)]
struct ResultPayload {
    #[serde(default)]
    output: String,
    tool_call_id: Option<String>,
    exception: Option<String>,
}

/// Import the `llm` database at `path` (opened read-only) into `store`.
/// Everything is read and checked first, then written in one transaction:
/// a database with a dangling reference or a malformed row imports
/// nothing, and the error says what was wrong.
pub fn import(store: &Store, path: &Path) -> Result<LlmImportReport> {
    let llm = Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY)
        .map_err(|error| bad(format!("cannot open {}: {error}", path.display())))?;
    let mut report = LlmImportReport::default();
    let read = read_llm(&llm, path, &mut report).map_err(|error| match error {
        error @ StoreError::Import { .. } => error,
        other => bad(format!("cannot read {}: {other}", path.display())),
    })?;
    // Conversations imported before keep their bookmark, wherever it has
    // moved since; everything else is written (nodes and runs already
    // there are skipped by the batch write).
    let mut conversations = Vec::with_capacity(read.conversations.len());
    for conversation in read.conversations {
        match store.conversation(&conversation.id) {
            Ok(_) => report.already_present += 1,
            Err(StoreError::ConversationNotFound(_)) => conversations.push(conversation),
            Err(error) => return Err(error),
        }
    }
    let turns = read.runs.len();
    let written = store.import_records(nodes(&read.threads), conversations, read.runs)?;
    report.conversations = written.conversations;
    report.runs = written.runs;
    report.already_present += turns - written.runs;
    Ok(report)
}

/// Everything an `llm` database holds, as skein records.
struct Read {
    /// Each message's thread (itself and its ancestors), by `llm` hash.
    threads: HashMap<String, Thread>,
    conversations: Vec<ConversationRecord>,
    runs: Vec<RunRecord>,
}

/// Everything the import writes, read and checked.
fn read_llm(llm: &Connection, path: &Path, report: &mut LlmImportReport) -> Result<Read> {
    for table in ["threads", "messages", "parts", "turns"] {
        let present: Option<String> = llm
            .query_row(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name = ?1",
                [table],
                |row| row.get(0),
            )
            .optional()?;
        if present.is_none() {
            return Err(bad(format!(
                "{} has no `{table}` table: it is not an `llm` 0.3x logs.db (run `llm logs path` to find yours)",
                path.display()
            )));
        }
    }
    let messages = read_messages(llm, report)?;
    report.messages = messages.len();
    let threads = build_threads(&messages)?;

    let mut statement = llm.prepare(
        "SELECT id, name, tip_message_hash, forked_from, datetime_utc FROM threads ORDER BY datetime_utc, id",
    )?;
    let rows: Vec<LlmThread> = statement
        .query_map([], |row| {
            Ok(LlmThread {
                id: row.get(0)?,
                name: row.get(1)?,
                tip: row.get(2)?,
                forked_from: row.get(3)?,
                when: row.get(4)?,
            })
        })?
        .collect::<rusqlite::Result<_>>()?;
    let conversations: HashMap<String, ConversationId> = rows
        .iter()
        .map(|thread| (thread.id.clone(), derived_conversation(&thread.id)))
        .collect();

    let tools = read_turn_tools(llm)?;
    let mut statement = llm.prepare(
        "SELECT id, thread_id, parent_message_hash, tip_message_hash, model, resolved_model,
                input_tokens, output_tokens, duration_ms, datetime_utc, options_json
         FROM turns ORDER BY datetime_utc, id",
    )?;
    let turns = statement
        .query_map([], |row| {
            Ok(Turn {
                id: row.get(0)?,
                thread: row.get(1)?,
                input: row.get(2)?,
                output: row.get(3)?,
                model: row.get(4)?,
                resolved_model: row.get(5)?,
                input_tokens: row.get(6)?,
                output_tokens: row.get(7)?,
                duration_ms: row.get(8)?,
                when: row.get(9)?,
                options: row.get(10)?,
            })
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    let mut runs = Vec::with_capacity(turns.len());
    let mut conversations_read = Vec::with_capacity(rows.len());
    // A conversation was last updated by its newest turn, and runs on the
    // model that turn asked for (turns are read oldest first).
    let mut last_turn: HashMap<&str, i64> = HashMap::new();
    let mut last_model: HashMap<&str, &str> = HashMap::new();
    for turn in &turns {
        let run = run_of(turn, &threads, &conversations, &tools)?;
        if let Some(thread) = &turn.thread {
            let last = last_turn.entry(thread.as_str()).or_insert(run.started_ms);
            *last = (*last).max(run.started_ms);
            if let Some(model) = turn.model.as_deref().or(turn.resolved_model.as_deref()) {
                last_model.insert(thread.as_str(), model);
            }
        }
        runs.push(run);
    }

    for LlmThread {
        id,
        name,
        tip,
        forked_from,
        when,
    } in &rows
    {
        let head = tip
            .as_deref()
            .map(|tip| {
                node_of(&threads, tip).ok_or_else(|| {
                    bad(format!(
                        "thread {id} has tip message {tip}, but there is no such message"
                    ))
                })
            })
            .transpose()?;
        let origin = match forked_from {
            None => None,
            Some(from) => Some(Origin {
                node: fork_point(llm, &threads, tip.as_deref(), from)?,
                conversation: conversations.get(from).cloned(),
                rerun: None,
            }),
        };
        let created_ms = when.as_deref().and_then(parse_utc_ms).unwrap_or(0);
        let model = last_model.get(id.as_str()).map(|llm| {
            let (model, known) = skein_model(llm);
            if !known {
                report.unknown_models.insert(model.clone());
            } else if model != *llm {
                report.renamed_models.insert(llm.to_string(), model.clone());
            }
            model
        });
        // `llm` names a thread after its first prompt: an empty one names
        // it nothing, and the conversation gets a title that says so.
        let name = name.clone().filter(|name| !name.trim().is_empty());
        let title = name.is_none().then(|| {
            head.and_then(|head| first_prompt_title(&threads, head))
                .unwrap_or_else(|| "(empty prompt)".to_string())
        });
        conversations_read.push(ConversationRecord {
            id: conversations[id].clone(),
            name,
            head,
            len: 0,
            origin,
            created_ms,
            updated_ms: last_turn
                .get(id.as_str())
                .map_or(created_ms, |last| created_ms.max(*last)),
            settings: skein_core::ConversationSettings {
                model,
                title,
                imported_from: Some("llm".into()),
                llm_thread: Some(id.clone()),
                ..Default::default()
            },
            imported: true,
        });
    }
    Ok(Read {
        threads,
        conversations: conversations_read,
        runs,
    })
}

/// The title of the thread ending at `head`: made from its first user
/// message with visible text, as a prompt's title is.
fn first_prompt_title(threads: &HashMap<String, Thread>, head: NodeId) -> Option<String> {
    let thread = threads
        .values()
        .find(|thread| thread.head_id() == Some(head))?;
    thread
        .messages()
        .iter()
        .filter(|message| message.role == Role::User)
        .find_map(|message| skein_core::ConversationSettings::title_from(&message.joined_text()))
}

/// Every message's node once, parents before children.
fn nodes(threads: &HashMap<String, Thread>) -> Vec<&Node> {
    let mut nodes: Vec<&Node> = threads
        .values()
        .filter_map(|thread| thread.head().map(|node| &**node))
        .collect();
    nodes.sort_by_key(|node| (node.depth(), node.id()));
    nodes.dedup_by_key(|node| node.id());
    nodes
}

/// The run record of an `llm` turn, its references checked.
fn run_of(
    turn: &Turn,
    threads: &HashMap<String, Thread>,
    conversations: &HashMap<String, ConversationId>,
    tools: &HashMap<String, Vec<ToolSpec>>,
) -> Result<RunRecord> {
    let message = |which: &str, hash: &Option<String>| -> Result<Option<NodeId>> {
        hash.as_deref()
            .map(|hash| {
                node_of(threads, hash).ok_or_else(|| {
                    bad(format!(
                        "turn {} names message {hash} as its {which}, but there is no such message",
                        turn.id
                    ))
                })
            })
            .transpose()
    };
    let mut run = RunRecord::new(
        turn.resolved_model
            .clone()
            .or(turn.model.clone())
            .unwrap_or_else(|| "unknown".into()),
        "llm",
    );
    run.id = derived_run(&turn.id);
    run.conversation = turn
        .thread
        .as_ref()
        .and_then(|thread| conversations.get(thread).cloned());
    run.input_head = message("prompt", &turn.input)?;
    run.output_head = message("reply", &turn.output)?;
    run.usage.input_tokens = turn.input_tokens.map(|n| n as u64);
    run.usage.output_tokens = turn.output_tokens.map(|n| n as u64);
    run.usage_complete = turn.input_tokens.is_some() && turn.output_tokens.is_some();
    run.started_ms = turn.when.as_deref().and_then(parse_utc_ms).unwrap_or(0);
    run.finished_ms = turn.duration_ms.map(|duration| run.started_ms + duration);
    run.tools = tools.get(&turn.id).cloned().unwrap_or_default();
    if let Some(options) = turn.options.as_deref()
        && let Ok(options) = serde_json::from_str(options)
    {
        run.options = options;
    }
    Ok(run)
}

struct LlmThread {
    id: String,
    name: Option<String>,
    tip: Option<String>,
    forked_from: Option<String>,
    when: Option<String>,
}

struct Turn {
    id: String,
    thread: Option<String>,
    input: Option<String>,
    output: Option<String>,
    model: Option<String>,
    resolved_model: Option<String>,
    input_tokens: Option<i64>,
    output_tokens: Option<i64>,
    duration_ms: Option<i64>,
    when: Option<String>,
    options: Option<String>,
}

fn bad(problem: String) -> StoreError {
    StoreError::Import { line: 0, problem }
}

fn read_messages(
    llm: &Connection,
    report: &mut LlmImportReport,
) -> Result<HashMap<String, LlmMessage>> {
    let mut messages = HashMap::new();
    let mut statement = llm.prepare("SELECT hash, parent_hash, role FROM messages")?;
    let rows = statement.query_map([], |row| {
        Ok((
            row.get::<_, String>(0)?,
            row.get::<_, Option<String>>(1)?,
            row.get::<_, Option<String>>(2)?,
        ))
    })?;
    for row in rows {
        let (hash, parent, role) = row?;
        let role = match role.as_deref() {
            Some("system") => Role::System,
            Some("user") => Role::User,
            Some("assistant") => Role::Assistant,
            Some("tool") => Role::Tool,
            other => {
                return Err(bad(format!(
                    "message {hash} has role {other:?}, which skein does not know"
                )));
            }
        };
        messages.insert(
            hash,
            LlmMessage {
                parent,
                role,
                parts: Vec::new(),
            },
        );
    }
    let attachments = read_part_attachments(llm)?;
    let mut statement = llm.prepare(
        "SELECT id, message_hash, type, text, payload FROM parts ORDER BY message_hash, position",
    )?;
    let rows = statement.query_map([], |row| {
        Ok((
            row.get::<_, i64>(0)?,
            row.get::<_, String>(1)?,
            row.get::<_, String>(2)?,
            row.get::<_, Option<String>>(3)?,
            row.get::<_, Option<String>>(4)?,
        ))
    })?;
    for row in rows {
        let (id, message, kind, text, payload) = row?;
        let Some(target) = messages.get_mut(&message) else {
            return Err(bad(format!(
                "part {id} belongs to a missing message {message}"
            )));
        };
        let payload = || -> Result<serde_json::Value> {
            payload
                .as_deref()
                .map(serde_json::from_str)
                .transpose()
                .map_err(|error| bad(format!("part {id} has an unreadable payload: {error}")))
                .map(Option::unwrap_or_default)
        };
        match kind.as_str() {
            "text" => target.parts.push(Part::text(text.unwrap_or_default())),
            "tool_call" => {
                let call: CallPayload = serde_json::from_value(payload()?)
                    .map_err(|error| bad(format!("part {id}: {error}")))?;
                target.parts.push(Part::ToolCall(ToolCall {
                    id: call.tool_call_id.unwrap_or_default(),
                    name: call.name,
                    arguments: serde_json::to_string(&call.arguments)?,
                }));
            }
            "tool_result" => {
                let result: ResultPayload = serde_json::from_value(payload()?)
                    .map_err(|error| bad(format!("part {id}: {error}")))?;
                target.parts.push(Part::ToolResult(ToolResult {
                    call_id: result.tool_call_id.unwrap_or_default(),
                    content: result.output,
                    is_error: result.exception.is_some(),
                }));
            }
            "attachment" => match attachments.get(&id) {
                Some(attachment) => target.parts.push(Part::Attachment(attachment.clone())),
                None => {
                    *report
                        .skipped_parts
                        .entry("attachment by path or url".into())
                        .or_default() += 1;
                }
            },
            other => *report.skipped_parts.entry(other.to_string()).or_default() += 1,
        }
    }
    Ok(messages)
}

/// Inline attachments by part id.
fn read_part_attachments(llm: &Connection) -> Result<HashMap<i64, Attachment>> {
    let present: Option<String> = llm
        .query_row(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'part_attachments'",
            [],
            |row| row.get(0),
        )
        .optional()?;
    if present.is_none() {
        return Ok(HashMap::new());
    }
    let mut statement = llm.prepare(
        "SELECT pa.part_id, a.type, a.content FROM part_attachments pa
         JOIN attachments a ON a.id = pa.attachment_id
         WHERE a.content IS NOT NULL ORDER BY pa.part_id, pa.\"order\"",
    )?;
    let rows = statement.query_map([], |row| {
        Ok((
            row.get::<_, i64>(0)?,
            row.get::<_, Option<String>>(1)?,
            row.get::<_, Vec<u8>>(2)?,
        ))
    })?;
    let mut attachments = HashMap::new();
    for row in rows {
        let (part, media_type, data) = row?;
        attachments.entry(part).or_insert(Attachment {
            media_type: media_type.unwrap_or_else(|| "application/octet-stream".into()),
            data,
        });
    }
    Ok(attachments)
}

/// Every message's thread (itself and its ancestors), built parents first.
fn build_threads(messages: &HashMap<String, LlmMessage>) -> Result<HashMap<String, Thread>> {
    let mut threads: HashMap<String, Thread> = HashMap::with_capacity(messages.len());
    for start in messages.keys() {
        // Walk up to the nearest message already built, then build down.
        let mut pending = Vec::new();
        let mut cursor = Some(start.clone());
        let mut seen = HashSet::new();
        while let Some(hash) = cursor {
            if threads.contains_key(&hash) {
                break;
            }
            if !seen.insert(hash.clone()) {
                return Err(bad(format!("message {hash} is its own ancestor")));
            }
            let message = messages.get(&hash).ok_or_else(|| {
                bad(format!(
                    "message {} has parent {hash}, but there is no such message",
                    pending.last().map_or("?", String::as_str)
                ))
            })?;
            cursor = message.parent.clone();
            pending.push(hash);
        }
        while let Some(hash) = pending.pop() {
            let message = &messages[&hash];
            let parent = match &message.parent {
                Some(parent) => threads[parent].clone(),
                None => Thread::new(),
            };
            let thread = parent.push(Message::new(message.role, message.parts.clone()));
            threads.insert(hash, thread);
        }
    }
    Ok(threads)
}

fn node_of(threads: &HashMap<String, Thread>, hash: &str) -> Option<NodeId> {
    threads.get(hash).and_then(Thread::head_id)
}

/// Where a fork left its origin: the newest node its tip shares with the
/// tip of the thread it was forked from.
fn fork_point(
    llm: &Connection,
    threads: &HashMap<String, Thread>,
    tip: Option<&str>,
    from: &str,
) -> Result<Option<NodeId>> {
    let from_tip: Option<String> = llm
        .query_row(
            "SELECT tip_message_hash FROM threads WHERE id = ?1",
            params![from],
            |row| row.get(0),
        )
        .optional()?
        .flatten();
    let (Some(tip), Some(from_tip)) = (tip, from_tip) else {
        return Ok(None);
    };
    let thread_of = |hash: &str| {
        threads.get(hash).ok_or_else(|| {
            bad(format!(
                "thread {from} has tip message {hash}, but there is no such message"
            ))
        })
    };
    let ours: HashSet<NodeId> = thread_of(tip)?
        .nodes()
        .iter()
        .map(|node| node.id())
        .collect();
    Ok(thread_of(&from_tip)?
        .nodes()
        .iter()
        .rev()
        .map(|node| node.id())
        .find(|id| ours.contains(id)))
}

fn read_turn_tools(llm: &Connection) -> Result<HashMap<String, Vec<ToolSpec>>> {
    let present: Option<String> = llm
        .query_row(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'turn_tools'",
            [],
            |row| row.get(0),
        )
        .optional()?;
    let mut tools: HashMap<String, Vec<ToolSpec>> = HashMap::new();
    if present.is_none() {
        return Ok(tools);
    }
    let mut statement = llm.prepare(
        "SELECT tt.turn_id, t.name, t.description, t.input_schema FROM turn_tools tt
         JOIN tools t ON t.id = tt.tool_id ORDER BY tt.turn_id, t.id",
    )?;
    let rows = statement.query_map([], |row| {
        Ok((
            row.get::<_, String>(0)?,
            row.get::<_, Option<String>>(1)?,
            row.get::<_, Option<String>>(2)?,
            row.get::<_, Option<String>>(3)?,
        ))
    })?;
    for row in rows {
        let (turn, name, description, schema) = row?;
        let schema = schema
            .as_deref()
            .map(serde_json::from_str)
            .transpose()
            .map_err(|error| {
                bad(format!(
                    "tool {} offered in turn {turn} has an input schema that is not JSON: {error}",
                    name.as_deref().unwrap_or("(unnamed)")
                ))
            })?
            .unwrap_or_else(|| serde_json::json!({}));
        tools.entry(turn).or_default().push(ToolSpec::new(
            name.unwrap_or_default(),
            description.unwrap_or_default(),
            schema,
        ));
    }
    Ok(tools)
}

/// A skein id derived from an `llm` id, the same on every import.
fn derived(kind: &str, id: &str) -> String {
    let digest = Digest::of(format!("skein/llm-import/{kind}/{id}").as_bytes());
    digest.to_hex()[..32].to_string()
}

fn derived_conversation(thread: &str) -> ConversationId {
    ConversationId(derived("thread", thread))
}

fn derived_run(turn: &str) -> RunId {
    RunId(derived("turn", turn))
}

/// `llm`'s `datetime_utc` ("2026-11-30 04:09:55.027231+00:00" or ISO
/// with a `T`) as Unix milliseconds.
fn parse_utc_ms(text: &str) -> Option<i64> {
    let text = text.trim();
    let (date, time) = text.split_once([' ', 'T'])?;
    let mut date = date.split('-').map(|part| part.parse::<i64>());
    let (year, month, day) = (date.next()?.ok()?, date.next()?.ok()?, date.next()?.ok()?);
    let time = time.trim_end_matches('Z');
    let time = time.split(['+']).next()?;
    let mut clock = time.split(':');
    let hour: i64 = clock.next()?.parse().ok()?;
    let minute: i64 = clock.next()?.parse().ok()?;
    let seconds: f64 = clock.next().unwrap_or("0").parse().ok()?;
    let days = skein_core::calendar::days_from_civil(year, month, day);
    Some((days * 86_400 + hour * 3_600 + minute * 60) * 1_000 + (seconds * 1_000.0) as i64)
}

#[cfg(test)]
mod tests {
    use super::parse_utc_ms;

    #[test]
    fn parses_llm_timestamps() {
        assert_eq!(parse_utc_ms("1970-01-01 00:00:00+00:00"), Some(0));
        assert_eq!(
            parse_utc_ms("2026-11-30 04:09:55.027231+00:00"),
            Some(1_796_011_795_027)
        );
        assert_eq!(parse_utc_ms("2000-03-01T00:00:00Z"), Some(951_868_800_000));
        assert_eq!(parse_utc_ms("garbage"), None);
    }
}
