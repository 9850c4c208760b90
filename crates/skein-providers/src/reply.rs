/*!
A planned reply and the stream events that deliver it.

Both deterministic providers decide their whole answer first (an
[`Outcome`]) and then turn it into events here, so streaming, length limits,
call ids and usage behave the same for both. The contract (event order,
`max_tokens`, usage figures) is documented at the crate root.
*/

use crate::call_id::deterministic_call_id;
use crate::chunk::{argument_pieces, cut_after_words, word_chunks, word_count};
use crate::stream::EventResult;
use skein_core::{FinishReason, ModelRequest, ProviderError, StreamEvent, Usage};

/// A tool call a reply will make (its id is minted when events are built).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PlannedCall {
    pub(crate) name: String,
    pub(crate) arguments: String,
}

/// A complete reply: text (possibly empty) and tool calls.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Reply {
    pub(crate) text: String,
    pub(crate) calls: Vec<PlannedCall>,
}

impl Reply {
    pub(crate) fn text(text: impl Into<String>) -> Reply {
        Reply {
            text: text.into(),
            calls: Vec::new(),
        }
    }
}

/// What a deterministic provider decided to do with a request.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// Answer normally.
    Reply(Reply),
    /// Fail the call with this error.
    Fail(ProviderError),
    /// Stream this text, then end without `Done`.
    Cut(String),
}

impl Outcome {
    /// The events a stream yields for this outcome.
    pub(crate) fn into_events(self, request: &ModelRequest) -> Vec<EventResult> {
        match self {
            Outcome::Reply(reply) => reply_events(&reply, request),
            Outcome::Fail(error) => vec![Err(error)],
            Outcome::Cut(text) => text_events(&text),
        }
    }
}

fn text_events(text: &str) -> Vec<EventResult> {
    word_chunks(text)
        .into_iter()
        .map(|chunk| Ok(StreamEvent::Text(chunk.to_owned())))
        .collect()
}

fn reply_events(reply: &Reply, request: &ModelRequest) -> Vec<EventResult> {
    let (text, calls, cut) = apply_limit(reply, request.options.max_tokens);
    let mut events = text_events(text);
    let parent = request.thread.head_id();
    let mut output_tokens = word_count(text);
    for (index, call) in calls.iter().enumerate() {
        output_tokens += word_count(&call.arguments);
        let id = deterministic_call_id(parent, index as u32);
        for (piece_index, piece) in argument_pieces(&call.arguments).into_iter().enumerate() {
            let first = piece_index == 0;
            events.push(Ok(StreamEvent::ToolCall {
                index,
                id: first.then(|| id.clone()),
                name: first.then(|| call.name.clone()),
                arguments: piece.to_owned(),
            }));
        }
    }
    events.push(Ok(StreamEvent::Usage(Usage {
        input_tokens: Some(input_tokens(request)),
        output_tokens: Some(output_tokens),
        cache_read_tokens: None,
        cache_write_tokens: None,
    })));
    let finish = if cut {
        FinishReason::Length
    } else if calls.is_empty() {
        FinishReason::Stop
    } else {
        FinishReason::ToolCalls
    };
    events.push(Ok(StreamEvent::Done(finish)));
    events
}

/// The text and calls that fit in `max_tokens` output words, and whether
/// anything was left out.
fn apply_limit(reply: &Reply, max_tokens: Option<u32>) -> (&str, &[PlannedCall], bool) {
    let Some(limit) = max_tokens else {
        return (&reply.text, &reply.calls, false);
    };
    let limit = limit as usize;
    if let Some(prefix) = cut_after_words(&reply.text, limit) {
        return (prefix, &[], true);
    }
    let mut budget = limit as u64 - word_count(&reply.text);
    let fitting = reply
        .calls
        .iter()
        .take_while(|call| {
            let words = word_count(&call.arguments);
            let fits = words <= budget;
            if fits {
                budget -= words;
            }
            fits
        })
        .count();
    (
        &reply.text,
        &reply.calls[..fitting],
        fitting < reply.calls.len(),
    )
}

/// Words over every text part, tool-call argument and tool-result content
/// in the request thread.
pub(crate) fn input_tokens(request: &ModelRequest) -> u64 {
    crate::summary::summary(&request.thread).words
}

#[cfg(test)]
mod tests {
    use super::*;
    use skein_core::{Message, Thread};

    fn call(name: &str, arguments: &str) -> PlannedCall {
        PlannedCall {
            name: name.into(),
            arguments: arguments.into(),
        }
    }

    fn events_of(reply: Reply, max_tokens: Option<u32>) -> Vec<StreamEvent> {
        let mut request = ModelRequest::new("m", Thread::from_messages([Message::user("hi")]));
        request.options.max_tokens = max_tokens;
        Outcome::Reply(reply)
            .into_events(&request)
            .into_iter()
            .map(Result::unwrap)
            .collect()
    }

    #[test]
    fn the_limit_cuts_text_and_drops_calls() {
        let reply = Reply {
            text: "one two three".into(),
            calls: vec![call("t", "{}")],
        };
        let events = events_of(reply, Some(2));
        assert_eq!(
            events,
            [
                StreamEvent::Text("one ".into()),
                StreamEvent::Text("two".into()),
                StreamEvent::Usage(Usage {
                    input_tokens: Some(1),
                    output_tokens: Some(2),
                    ..Usage::default()
                }),
                StreamEvent::Done(FinishReason::Length),
            ]
        );
    }

    #[test]
    fn calls_that_do_not_fit_whole_are_dropped() {
        let reply = Reply {
            text: "ok".into(),
            calls: vec![call("a", "{}"), call("b", r#"{"q": "x y"}"#)],
        };
        let events = events_of(reply, Some(3));
        let names: Vec<_> = events
            .iter()
            .filter_map(|e| match e {
                StreamEvent::ToolCall { name: Some(n), .. } => Some(n.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(names, ["a"]);
        assert_eq!(
            events.last(),
            Some(&StreamEvent::Done(FinishReason::Length))
        );
    }

    #[test]
    fn a_reply_within_the_limit_is_untouched() {
        let reply = Reply {
            text: "ok".into(),
            calls: vec![call("a", "{}")],
        };
        let events = events_of(reply, Some(2));
        assert_eq!(
            events.last(),
            Some(&StreamEvent::Done(FinishReason::ToolCalls))
        );
    }
}
