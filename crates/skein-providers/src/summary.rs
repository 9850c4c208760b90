/*!
Whole-history figures of a request thread, kept per node so that a
deterministic model's cost per call does not grow with the history.

The echo model reports the words of the whole request as its input usage
and says whether any system message is present. Computed from scratch,
that is a walk over every message on every call: one `skein chat` session
of 25,000 lines spent most of its 12 minutes there. A thread's figures are
those of its parent's plus its head's, and node ids commit to the whole
history, so the figures of each request's head are remembered (in a
bounded process-wide table) and the next request (the same history plus a
reply and a new message) walks back only to the last remembered node.
*/

use crate::chunk::word_count;
use skein_core::{Message, NodeId, Part, Role, Thread};
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

/// Figures over every message of a thread.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Summary {
    /// Whitespace-separated words in text parts, tool-call arguments and
    /// tool results: the unit of the deterministic providers' usage.
    pub(crate) words: u64,
    pub(crate) has_system: bool,
}

impl Summary {
    fn then(self, message: &Message) -> Summary {
        let words: u64 = message
            .parts
            .iter()
            .map(|part| match part {
                Part::Text { text } => word_count(text),
                Part::ToolCall(call) => word_count(&call.arguments),
                Part::ToolResult(result) => word_count(&result.content),
                _ => 0,
            })
            .sum();
        Summary {
            words: self.words + words,
            has_system: self.has_system || message.role == Role::System,
        }
    }
}

/// Remembered heads; cleared when full (the next call then walks its
/// whole history once).
const CAPACITY: usize = 1 << 16;

fn remembered() -> std::sync::MutexGuard<'static, HashMap<NodeId, Summary>> {
    static TABLE: OnceLock<Mutex<HashMap<NodeId, Summary>>> = OnceLock::new();
    TABLE
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The figures of `thread`: O(messages since the last remembered node).
pub(crate) fn summary(thread: &Thread) -> Summary {
    let Some(head) = thread.head_id() else {
        return Summary::default();
    };
    let mut newer = Vec::new();
    let mut known = Summary::default();
    {
        let table = remembered();
        for node in thread.ancestors() {
            if let Some(summary) = table.get(&node.id()) {
                known = *summary;
                break;
            }
            newer.push(node);
        }
    }
    let summary = newer
        .iter()
        .rev()
        .fold(known, |summary, node| summary.then(node.message()));
    let mut table = remembered();
    if table.len() >= CAPACITY {
        table.clear();
    }
    table.insert(head, summary);
    summary
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The figures computed by a walk over every message.
    fn walked(thread: &Thread) -> Summary {
        thread
            .messages()
            .into_iter()
            .fold(Summary::default(), Summary::then)
    }

    #[test]
    fn remembered_figures_equal_a_full_walk() {
        let mut thread = Thread::new().push(Message::system("be brief"));
        for turn in 0..50 {
            thread = thread.push(Message::user(format!("question {turn} has five words")));
            assert_eq!(summary(&thread), walked(&thread));
            thread = thread.push(Message::assistant("an answer"));
        }
        // A branch from an early node, and a thread without a system message.
        let branch = thread
            .at(thread.nodes()[3].id())
            .unwrap()
            .push(Message::user("other"));
        assert_eq!(summary(&branch), walked(&branch));
        let plain = Thread::from_messages([Message::user("no system here")]);
        assert_eq!(summary(&plain), walked(&plain));
        assert!(!summary(&plain).has_system);
        assert_eq!(summary(&Thread::new()), Summary::default());
    }
}
