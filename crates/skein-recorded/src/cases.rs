/*!
Cases: labelled turns kept as a test set, written as JSONL and read back
into any database as a replay selection — a test set kept from real
traffic.

One line is one [`Case`]: the turn's exact recorded request (its messages,
and the first run's record, which holds the annotations, tools and
options the engine sent), what followed it in the original turn (tool
calls, their recorded results, the final answer), the final answer's
text, the label, and the comparators a replay judges it with.

[`export`] writes a label's turns a page of labels at a time;
[`label`] and [`unlabel`] put a label on turns and take it off, for
every surface. [`import`] stores each case's messages and runs (content addressed, so a
case imported twice, or into the database it came from, adds nothing) and
puts its label on the turn, reading one line at a time. Either way the
set is never held whole beyond the selection a replay stores.
*/

use crate::error::{RecordedError, Result};
use crate::replay::{CaseTurn, original_turn, request_of_turn};
use serde::{Deserialize, Serialize};
use skein_core::{Message, NodeId, RunRecord, Thread};
use skein_store::Store;
use std::io::{BufRead, Write};

/// Labelled turns read at a time.
const PAGE: usize = 200;

/// One kept turn.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Case {
    /// The label it was kept under.
    pub label: String,
    /// The recorded request's messages, from the first; the last is the
    /// message the turn answered.
    pub request: Vec<Message>,
    /// What followed in the original turn, ending with its final answer.
    pub turn: Vec<Message>,
    /// The final answer's text.
    pub answer: String,
    /// The runs that produced the turn's answers; the first holds the
    /// recorded request's annotations, tools and options.
    pub runs: Vec<RunRecord>,
    /// Comparators a replay judges it with (empty: the replay's).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub compare: Vec<String>,
}

/// Put the label `name` on `turns` (each a turn's final answer:
/// [`RecordedError::NotATurn`] otherwise, and nothing labelled); how many
/// did not carry it yet. Every surface labels through here (`skein label
/// add`, Python's `Store.label`, the web workbench).
pub async fn label(store: &Store, name: &str, turns: &[NodeId]) -> Result<u64> {
    skein_store::check_label_name(name)?;
    // Only turns: a label selects turns for replays and cases.
    for turn in turns {
        request_of_turn(store, *turn).await?;
    }
    Ok(store.nonblocking().add_label(name, turns).await?)
}

/// Take the label `name` off `turns`; how many carried it. Every surface
/// unlabels through here.
pub async fn unlabel(store: &Store, name: &str, turns: &[NodeId]) -> Result<u64> {
    skein_store::check_label_name(name)?;
    Ok(store.nonblocking().remove_label(name, turns).await?)
}

/// The case of the turn ending at `answer`.
pub async fn case_of(store: &Store, label: &str, answer: NodeId) -> Result<Case> {
    let request = request_of_turn(store, answer).await?;
    let original = original_turn(store, answer, request)
        .await?
        .ok_or(RecordedError::NotACase(answer))?;
    let depth = original.request.nodes().len();
    let messages: Vec<Message> = original
        .thread
        .nodes()
        .iter()
        .map(|node| node.message().clone())
        .collect();
    let (request, turn) = messages.split_at(depth);
    Ok(Case {
        label: label.to_string(),
        request: request.to_vec(),
        turn: turn.to_vec(),
        answer: original.text,
        runs: original.runs,
        compare: Vec::new(),
    })
}

/// Write every turn labelled `label` as a case line judged by `compare`;
/// returns how many.
pub async fn export(
    store: &Store,
    label: &str,
    compare: &[String],
    out: &mut (dyn Write + Send),
) -> Result<u64> {
    let mut written = 0;
    let mut after = None;
    loop {
        let page = store.nonblocking().labelled(label, after, PAGE).await?;
        after = page.last().map(|labelled| labelled.node);
        for labelled in page {
            let mut case = case_of(store, label, labelled.node).await?;
            case.compare = compare.to_vec();
            let line = serde_json::to_string(&case).map_err(|error| RecordedError::BadCase {
                line: written as usize + 1,
                why: error.to_string(),
            })?;
            writeln!(out, "{line}").map_err(RecordedError::CasesIo)?;
            written += 1;
        }
        if after.is_none() {
            out.flush().map_err(RecordedError::CasesIo)?;
            return Ok(written);
        }
    }
}

/// Store the cases `input` holds, one per line (blank lines skipped), and
/// label each turn with its case's label; returns each case's turn, with
/// its comparators, in the file's order. A line that is no case stops the
/// import there, naming it (the cases before it stay stored).
pub async fn import(store: &Store, input: impl BufRead) -> Result<Vec<CaseTurn>> {
    let mut turns = Vec::new();
    for (index, line) in input.lines().enumerate() {
        let line = line.map_err(RecordedError::CasesIo)?;
        if line.trim().is_empty() {
            continue;
        }
        let bad = |why: String| RecordedError::BadCase {
            line: index + 1,
            why,
        };
        let case: Case = serde_json::from_str(&line).map_err(|error| bad(error.to_string()))?;
        let answer = store_case(store, &case).await.map_err(|why| match why {
            Stored::Bad(why) => bad(why),
            Stored::Failed(error) => error,
        })?;
        store
            .nonblocking()
            .add_label(&case.label, &[answer])
            .await?;
        turns.push(CaseTurn {
            turn: answer,
            compare: case.compare,
        });
    }
    Ok(turns)
}

/// Why a case was not stored.
enum Stored {
    Bad(String),
    Failed(RecordedError),
}

/// Store a case's messages and runs; its final answer's node.
async fn store_case(store: &Store, case: &Case) -> std::result::Result<NodeId, Stored> {
    if case.request.is_empty() || case.turn.is_empty() {
        return Err(Stored::Bad(
            "a case needs the request's messages and the turn's answer".into(),
        ));
    }
    let request = Thread::from_messages(case.request.iter().cloned());
    let thread = request.extend(case.turn.iter().cloned());
    let first = case
        .runs
        .first()
        .ok_or_else(|| Stored::Bad("a case needs the run that answered its request".into()))?;
    if first.input_head != request.head_id() {
        return Err(Stored::Bad(
            "its first run did not answer its request (the messages were changed?)".into(),
        ));
    }
    let runs: Vec<RunRecord> = case
        .runs
        .iter()
        .cloned()
        .map(|mut run| {
            // The conversation it was recorded in is not in this database.
            run.conversation = None;
            run
        })
        .collect();
    let answer = thread.head_id().expect("a case's thread has messages");
    store
        .run_blocking(move |store| store.import_records(thread.nodes(), Vec::new(), runs))
        .await
        .map_err(|error| Stored::Failed(error.into()))?;
    Ok(answer)
}
