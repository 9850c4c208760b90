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
puts its label on the turn, reading one line at a time, each within a
limit. Either way the set is never held whole beyond the selection a
replay stores.

A cases file comes from elsewhere, so it chooses nothing here: its
comparators name no model, file or key (a judge is the replay's), and
its runs attach only to messages the case brings and no conversation of
this database holds; they are kept marked imported
([`skein_core::Relation::Imported`]), and usage counts them only where
they are named.
*/

use crate::compare::Comparator;
use crate::error::{RecordedError, Result};
use crate::replay::{CaseTurn, original_turn, request_of_turn};
use serde::{Deserialize, Serialize};
use skein_core::{Message, NodeId, Relation, RunId, RunRecord, Thread};
use skein_store::{BoundedLine, Store, StoreError, read_line_within};
use std::collections::HashSet;
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

/// Write every turn labelled `label` as a case line judged by `compare`
/// (which, like every case's, names no model: `judge`, not `judge:MODEL`);
/// returns how many.
pub async fn export(
    store: &Store,
    label: &str,
    compare: &[String],
    out: &mut (dyn Write + Send),
) -> Result<u64> {
    // What a cases file could not be read back with is not written.
    for spec in compare {
        Comparator::parse_for_case(spec)?;
    }
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
/// import there, naming it (the cases before it stay stored), and so does
/// a line longer than `max_line` bytes, before it is read whole.
///
/// A cases file is data from elsewhere, so it chooses nothing here: its
/// comparators name no model ([`Comparator::parse_for_case`]), its runs
/// attach only to messages it brings and no conversation here holds, keep
/// only relations among themselves and what describes their request, and
/// are marked [`Relation::Imported`] so usage does not count them as spent
/// here.
pub async fn import(store: &Store, input: impl BufRead, max_line: usize) -> Result<Vec<CaseTurn>> {
    let mut input = input;
    let mut turns = Vec::new();
    let mut text = Vec::new();
    for number in 1.. {
        let bad = |why: String| RecordedError::BadCase { line: number, why };
        match read_line_within(&mut input, max_line, &mut text).map_err(RecordedError::CasesIo)? {
            BoundedLine::End => break,
            BoundedLine::TooLong => return Err(bad(too_long(max_line))),
            BoundedLine::Line if text.iter().all(u8::is_ascii_whitespace) => continue,
            BoundedLine::Line => {}
        }
        let case: Case = serde_json::from_slice(&text).map_err(|error| bad(error.to_string()))?;
        for spec in &case.compare {
            Comparator::parse_for_case(spec).map_err(|error| bad(error.to_string()))?;
        }
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

/// Why a line longer than `max_line` bytes was refused.
fn too_long(max_line: usize) -> String {
    let limit = match max_line % (1 << 20) {
        0 => format!("{} MiB", max_line >> 20),
        _ => format!("{max_line} bytes"),
    };
    format!("the line is longer than the limit of {limit} per line (nothing more was read)")
}

/// Why a case was not stored.
enum Stored {
    Bad(String),
    Failed(RecordedError),
}

impl From<StoreError> for Stored {
    fn from(error: StoreError) -> Stored {
        Stored::Failed(error.into())
    }
}

/// Store a case's messages and the runs this database lacks; its final
/// answer's node.
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
    let brought: HashSet<NodeId> = thread.nodes().iter().map(|node| node.id()).collect();
    let own: HashSet<&RunId> = case.runs.iter().map(|run| &run.id).collect();
    let mut runs = Vec::new();
    for run in &case.runs {
        match store.nonblocking().run_record(&run.id).await {
            // Already here (the database the case came from, or a case
            // imported twice): it adds nothing.
            Ok(_) => continue,
            Err(StoreError::RunNotFound(_)) => {}
            Err(error) => return Err(error.into()),
        }
        check_attachment(store, run, &brought).await?;
        runs.push(imported(run, &own));
    }
    let answer = thread.head_id().expect("a case's thread has messages");
    store
        .run_blocking(move |store| store.import_records(thread.nodes(), Vec::new(), runs))
        .await?;
    Ok(answer)
}

/// Refuse a run that names a message the case does not bring, or one a
/// conversation of this database holds: node ids are computed from
/// content, so a case could otherwise attach a run (its tokens, its
/// claim to a message) to anyone's conversation.
async fn check_attachment(
    store: &Store,
    run: &RunRecord,
    brought: &HashSet<NodeId>,
) -> std::result::Result<(), Stored> {
    for node in [run.input_head, run.output_head].into_iter().flatten() {
        if !brought.contains(&node) {
            return Err(Stored::Bad(format!(
                "run {} names message {}, which the case does not bring (a case's runs \
                 attach only to its own messages)",
                run.id,
                node.short()
            )));
        }
        let holders = match store.nonblocking().conversations_containing(node, 1).await {
            Err(StoreError::NodeNotFound(_)) => continue,
            holders => holders?,
        };
        if let Some(holder) = holders.first() {
            return Err(Stored::Bad(format!(
                "run {} would attach to message {} of conversation {} of this database (a \
                 case's runs attach only to messages no conversation here holds)",
                run.id,
                node.short(),
                holder.id.short()
            )));
        }
    }
    Ok(())
}

/// A case's run as this database keeps it: in no conversation (the one it
/// was recorded in is not here), with only the relations that describe its
/// request or link it to the case's other runs (sequences, sessions,
/// reruns and replays name records of the database it came from), and
/// marked imported.
fn imported(run: &RunRecord, own: &HashSet<&RunId>) -> RunRecord {
    let mut run = run.clone();
    run.conversation = None;
    run.relations.retain(|relation| match relation {
        Relation::ContinuationOf(target) | Relation::AssociatedWith(target) => own.contains(target),
        Relation::Chain(_)
        | Relation::Source(_)
        | Relation::Prompt(_)
        | Relation::Unrecorded(_) => true,
        _ => false,
    });
    run.relations.push(Relation::Imported("cases".into()));
    run
}
