/*!
Captured exchanges: the complete rendered request of a run (content, roles
and annotations) followed by its final assistant content only. Structural
repair attempts, corrective instructions and transport retries never appear
in an exchange (DESIGN.md invariant 8).

An exchange is immutable and cheap to clone (its thread is `Arc`-linked).
Any number of continuations may start from one; none changes it. It is a
thread in the graph, so persisting it stores only what is new.
*/

use crate::observe::RunId;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use skein_core::{Annotations, Message, NodeId, Relation, Thread};

/// Whether an exchange's final content met the run's output contract.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum Validation {
    /// The run had no output contract.
    NotApplicable,
    Validated,
    /// The last candidate after the repairs ran out, with its errors. The
    /// application may still continue from it.
    NotValidated {
        errors: Vec<String>,
    },
}

/// Which prompt (id and version) rendered a request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PromptRef {
    pub id: String,
    pub version: u32,
}

/// What a run's configured prompt rendered, as the run's record keeps it
/// ([`Relation::Prompt`]): which prompt and version, the variables it was
/// rendered with, and the request's messages it rendered (contiguous, right
/// after the history), so a replay can render another version in their
/// place. Unlike [`PromptRef`] it holds content (the variables), so it is
/// never part of an exchange's metadata.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RenderedPrompt {
    pub id: String,
    pub version: u32,
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub variables: Map<String, Value>,
    /// The rendered messages' nodes, in request order.
    pub messages: Vec<NodeId>,
}

impl RenderedPrompt {
    /// The relation a run's record carries.
    pub fn relation(&self) -> Relation {
        Relation::Prompt(serde_json::to_string(self).expect("plain data"))
    }

    /// The configured prompt a run's relations say its request rendered.
    pub fn of(relations: &[Relation]) -> Option<RenderedPrompt> {
        relations.iter().find_map(|relation| match relation {
            Relation::Prompt(json) => serde_json::from_str(json).ok(),
            _ => None,
        })
    }
}

/// A captured request and its final reply.
#[derive(Clone, Debug)]
pub struct Exchange {
    pub(crate) thread: Thread,
    pub(crate) annotations: Annotations,
    pub(crate) run: RunId,
    pub(crate) validation: Validation,
    pub(crate) prompt: Option<PromptRef>,
    pub(crate) continuation_of: Option<RunId>,
}

/// An exchange's metadata, without its content.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ExchangeDetails {
    pub run: RunId,
    pub head: NodeId,
    pub messages: usize,
    pub prompt: Option<PromptRef>,
    pub continuation_of: Option<RunId>,
    pub validation: Validation,
}

impl Exchange {
    /// The request followed by the final reply.
    pub fn thread(&self) -> &Thread {
        &self.thread
    }

    /// The request alone.
    pub fn request(&self) -> Thread {
        self.thread.parent()
    }

    /// The final assistant content.
    pub fn reply(&self) -> &Message {
        self.thread
            .head()
            .expect("an exchange ends with its reply")
            .message()
    }

    /// The reply's text parts, joined.
    pub fn text(&self) -> String {
        self.reply().joined_text()
    }

    /// The reply's node id.
    pub fn head(&self) -> NodeId {
        self.thread
            .head_id()
            .expect("an exchange ends with its reply")
    }

    /// The request's annotations (cache hints, source tags).
    pub fn annotations(&self) -> &Annotations {
        &self.annotations
    }

    /// The run that produced the reply.
    pub fn run(&self) -> &RunId {
        &self.run
    }

    pub fn validation(&self) -> &Validation {
        &self.validation
    }

    pub fn is_validated(&self) -> bool {
        self.validation == Validation::Validated
    }

    /// Metadata only: what a log line or an inspector shows.
    pub fn details(&self) -> ExchangeDetails {
        ExchangeDetails {
            run: self.run.clone(),
            head: self.head(),
            messages: self.thread.len(),
            prompt: self.prompt.clone(),
            continuation_of: self.continuation_of.clone(),
            validation: self.validation.clone(),
        }
    }
}
