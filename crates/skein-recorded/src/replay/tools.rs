//! Tools answered from the recording: a call of the same tool with
//! value-equal arguments gets the recorded result; any other call diverges
//! unless its tool was named live.

use serde_json::Value;
use skein_core::BoxFuture;
use skein_core::{NodeId, Thread, ToolCall, ToolSpec};
use skein_engine::{Tool, ToolError};
use skein_providers::http::arguments_value;
use std::collections::HashSet;
use std::sync::Arc;

/// A recorded tool call and the result the recording gave it.
#[derive(Clone, Debug)]
pub(super) struct RecordedCall {
    pub(super) name: String,
    pub(super) arguments: Value,
    pub(super) content: String,
    pub(super) is_error: bool,
}

/// The calls a turn made after `request`, with their recorded results.
pub(super) fn recorded_calls(thread: &Thread, request: NodeId) -> Vec<RecordedCall> {
    let nodes = thread.nodes();
    let start = nodes
        .iter()
        .position(|node| node.id() == request)
        .map_or(nodes.len(), |at| at + 1);
    let span = &nodes[start..];
    let mut calls = Vec::new();
    for (index, node) in span.iter().enumerate() {
        for call in node.message().tool_calls() {
            let result = span[index + 1..]
                .iter()
                .flat_map(|later| later.message().tool_results_iter())
                .find(|result| result.call_id == call.id);
            if let Some(result) = result {
                calls.push(RecordedCall {
                    name: call.name.clone(),
                    arguments: arguments_value(&call.arguments),
                    content: result.content.clone(),
                    is_error: result.is_error,
                });
            }
        }
    }
    calls
}

/// Which calls a replayed turn may make: those the recording answers, and
/// any call of a live tool.
pub(super) struct Answerable {
    pub(super) calls: Vec<RecordedCall>,
    pub(super) live: HashSet<String>,
}

impl Answerable {
    pub(super) fn answers(&self, call: &ToolCall) -> bool {
        if self.live.contains(&call.name) {
            return true;
        }
        let value = arguments_value(&call.arguments);
        self.calls
            .iter()
            .any(|recorded| recorded.name == call.name && recorded.arguments == value)
    }
}

/// A tool as a replay offers it: its (recorded or changed) spec, answered
/// from the recording, else by the live tool when one was named.
pub(super) struct ReplayTool {
    spec: ToolSpec,
    recorded: Vec<RecordedCall>,
    live: Option<Arc<dyn Tool>>,
}

impl ReplayTool {
    pub(super) fn new(
        spec: ToolSpec,
        calls: &[RecordedCall],
        live: Option<Arc<dyn Tool>>,
    ) -> ReplayTool {
        ReplayTool {
            recorded: calls
                .iter()
                .filter(|call| call.name == spec.name)
                .cloned()
                .collect(),
            spec,
            live,
        }
    }
}

impl Tool for ReplayTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn call(&self, arguments: Value) -> BoxFuture<'_, Result<String, ToolError>> {
        // The engine parsed the argument text as JSON; an object's value is
        // its `arguments_value`.
        let recorded = self
            .recorded
            .iter()
            .find(|call| call.arguments == arguments)
            .cloned();
        match (recorded, &self.live) {
            (Some(call), _) => Box::pin(async move {
                if call.is_error {
                    Err(ToolError(call.content))
                } else {
                    Ok(call.content)
                }
            }),
            (None, Some(live)) => live.call(arguments),
            (None, None) => Box::pin(async {
                Err(ToolError(
                    "the recording has no result for this call and the tool is not live".into(),
                ))
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replay::original::answer_steps;
    use crate::replay::select::turns_of;
    use skein_core::{Message, Part, Role, ToolResult};

    #[test]
    fn a_thread_splits_into_turns_at_user_messages_and_tool_loops_stay_whole() {
        let call = ToolCall {
            id: "c1".into(),
            name: "weather".into(),
            arguments: "{\"city\": \"Paris\"}".into(),
        };
        let thread = Thread::from_messages([
            Message::system("s"),
            Message::user("q1"),
            Message::new(Role::Assistant, vec![Part::ToolCall(call.clone())]),
            Message::tool_results([ToolResult {
                call_id: "c1".into(),
                content: "sunny".into(),
                is_error: false,
            }]),
            Message::assistant("a1"),
            Message::user("q2"),
            Message::assistant("a2"),
            Message::user("unanswered"),
        ]);
        let nodes = thread.nodes();
        let turns = turns_of(&thread);
        assert_eq!(
            turns,
            vec![
                (nodes[1].id(), nodes[4].id()),
                (nodes[5].id(), nodes[6].id())
            ]
        );
        let upto = thread.at(nodes[4].id()).unwrap();
        assert_eq!(answer_steps(&upto, nodes[1].id()).len(), 2);
        let calls = recorded_calls(&upto, nodes[1].id());
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].content, "sunny");
        let answerable = Answerable {
            calls,
            live: HashSet::new(),
        };
        let respaced = ToolCall {
            arguments: "{ \"city\":\"Paris\" }".into(),
            ..call.clone()
        };
        assert!(answerable.answers(&respaced));
        let elsewhere = ToolCall {
            arguments: "{\"city\": \"Rome\"}".into(),
            ..call
        };
        assert!(!answerable.answers(&elsewhere));
    }
}
