//! The original turn a replay re-sends: its request, what it said, the runs
//! that produced its answers and the tool calls it made.

use super::tools::{RecordedCall, recorded_calls};
use crate::error::{RecordedError, Result};
use skein_core::{NodeId, Role, RunRecord, RunStatus, Thread};
use skein_store::{Store, StoreError};

/// The original turn ending at `answer` that answered `request`: its
/// request, what it said, the runs that produced its answers; `None` when
/// no run record produced its first answer (its tools and options are
/// unknown).
pub(crate) async fn original_turn(
    store: &Store,
    answer: NodeId,
    request_node: NodeId,
) -> Result<Option<Original>> {
    let api = store.nonblocking();
    let thread = api.load_thread(answer).await?;
    let Some(request) = thread.at(request_node) else {
        return Err(RecordedError::Store(StoreError::MalformedRow(format!(
            "turn {}: its request {} is not on its answer's thread",
            answer.short(),
            request_node.short()
        ))));
    };
    let said: Vec<Thread> = answer_steps(&thread, request_node);
    let Some(first) = said.first().and_then(Thread::head_id) else {
        return Ok(None);
    };
    let mut runs = Vec::new();
    for step in &said {
        let node = step.head_id().expect("a step");
        let producing = api.runs_producing(node).await?;
        if let Some(run) = producing.into_iter().find(|run| {
            run.status == RunStatus::Succeeded && run.input_head == step.parent().head_id()
        }) {
            runs.push(run);
        } else if node == first {
            return Ok(None);
        }
    }
    let calls = recorded_calls(&thread, request_node);
    Ok(Some(Original {
        request,
        text: thread
            .head()
            .map(|node| node.message().joined_text())
            .unwrap_or_default(),
        runs,
        calls,
        thread,
    }))
}

/// An original turn, as its replay needs it.
pub(crate) struct Original {
    /// The thread up to the message the turn answered.
    pub(crate) request: Thread,
    /// The thread up to the turn's final answer.
    pub(crate) thread: Thread,
    /// The turn's final answer.
    pub(crate) text: String,
    /// The runs that produced each of its answers, in order.
    pub(crate) runs: Vec<RunRecord>,
    /// The tool calls it made, with their recorded results.
    pub(super) calls: Vec<RecordedCall>,
}

/// The answers of a turn that answered `request`: the thread at each
/// assistant message after it, up to the thread's head.
pub(super) fn answer_steps(thread: &Thread, request: NodeId) -> Vec<Thread> {
    let mut steps = Vec::new();
    let mut at = thread.clone();
    while let Some(head) = at.head() {
        if head.id() == request {
            break;
        }
        if head.message().role == Role::Assistant {
            steps.push(at.clone());
        }
        at = at.parent();
    }
    steps.reverse();
    steps
}
