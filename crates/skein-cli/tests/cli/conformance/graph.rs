//! The part of the graph one cell of the table made, read from the
//! database's export (`Store::export`, what `skein export` prints: the same
//! way whatever surface made it, on either backend), with
//! the cell's tag taken out so that every surface's part compares equal.
//!
//! A node is named by its thread: each message as its role's initial and
//! its parts (`u:one / a:scripted: one`; a tool call `a:call NAME`, a tool
//! result `t:result`). A conversation is named by its head's thread, its
//! origin by its node's and its conversation's; a run by its status, its
//! conversation, its input and its output.

use super::{Place, Tag};
use serde_json::Value;
use std::collections::{BTreeSet, HashMap};

/// A conversation: its head, and where it came from.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Conversation {
    head: Option<String>,
    /// The origin's node and conversation (each by its head).
    origin: Option<(Option<String>, Option<String>)>,
}

/// A run: status, conversation (by its head), input and output.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Run {
    status: String,
    conversation: Option<String>,
    input: Option<String>,
    output: Option<String>,
}

/// What a cell left in the database.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Graph {
    conversations: BTreeSet<Conversation>,
    runs: Vec<Run>,
    /// Every stored node of the cell, reachable or not.
    nodes: BTreeSet<String>,
}

impl Graph {
    pub(crate) fn new() -> Graph {
        Graph::default()
    }

    /// With a conversation (no origin) whose head is `head`.
    pub(crate) fn conversation(mut self, head: &str) -> Graph {
        self.add_thread(head);
        self.conversations.insert(Conversation {
            head: Some(head.to_string()),
            origin: None,
        });
        self
    }

    /// With a conversation whose head is `head` and whose origin is node
    /// `at` of the conversation whose head is `of`.
    pub(crate) fn branch(mut self, head: &str, at: &str, of: &str) -> Graph {
        self.add_thread(head);
        self.conversations.insert(Conversation {
            head: Some(head.to_string()),
            origin: Some((Some(at.to_string()), Some(of.to_string()))),
        });
        self
    }

    /// With a conversation whose head is `head`, branched from the start of
    /// the conversation whose head is `of` (its origin names no node).
    pub(crate) fn branch_from_start(mut self, head: &str, of: &str) -> Graph {
        self.add_thread(head);
        self.conversations.insert(Conversation {
            head: Some(head.to_string()),
            origin: Some((None, Some(of.to_string()))),
        });
        self
    }

    /// With a run that succeeded in conversation `of` (by its head).
    pub(crate) fn ran(mut self, of: &str, input: &str, output: &str) -> Graph {
        self.add_thread(output);
        self.add_run(Run {
            status: "succeeded".into(),
            conversation: Some(of.to_string()),
            input: Some(input.to_string()),
            output: Some(output.to_string()),
        });
        self
    }

    /// With a failed run in conversation `of` (by its head; `None`: in
    /// none) whose input is `input`.
    pub(crate) fn failed(mut self, of: Option<&str>, input: &str) -> Graph {
        self.add_thread(input);
        self.add_run(Run {
            status: "failed".into(),
            conversation: of.map(str::to_string),
            input: Some(input.to_string()),
            output: None,
        });
        self
    }

    fn add_run(&mut self, run: Run) {
        self.runs.push(run);
        self.runs.sort();
    }

    /// Every node of the thread named `head`.
    fn add_thread(&mut self, head: &str) {
        let messages: Vec<&str> = head.split(" / ").collect();
        for end in 1..=messages.len() {
            self.nodes.insert(messages[..end].join(" / "));
        }
    }

    /// The part of `place`'s database whose texts carry `tag`.
    pub(crate) fn read(place: &Place, tag: &Tag) -> Graph {
        let mut export = Vec::new();
        place.store.export(&mut export).unwrap();
        let records: Vec<Value> = String::from_utf8(export)
            .unwrap()
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect();
        let of_kind = |kind: &'static str| records.iter().filter(move |r| r["kind"] == kind);
        let mut names = Names::new(tag);
        for node in of_kind("node") {
            names.add(node);
        }
        let heads: HashMap<&str, Option<String>> = of_kind("conversation")
            .map(|c| (c["id"].as_str().unwrap(), names.of(&c["head"])))
            .collect();
        let mut graph = Graph::new();
        graph.nodes = names.tagged();
        for conversation in of_kind("conversation") {
            let head = names.of(&conversation["head"]);
            let origin = &conversation["origin"];
            let at = names.of(&origin["node"]);
            // A conversation belongs to the cell when its thread or its
            // origin does; an empty one without an origin is anybody's,
            // and never allowed.
            if head.is_none() && at.is_none() && !conversation["head"].is_null() {
                continue;
            }
            let origin = (!origin.is_null()).then(|| {
                let of = origin["conversation"]
                    .as_str()
                    .and_then(|id| heads.get(id).cloned().flatten());
                (at, of)
            });
            graph.conversations.insert(Conversation { head, origin });
        }
        for run in of_kind("run") {
            let input = names.of(&run["input_head"]);
            let output = names.of(&run["output_head"]);
            if input.is_none() && output.is_none() {
                continue;
            }
            let conversation = run["conversation"].as_str().map(|id| {
                heads
                    .get(id)
                    .cloned()
                    .flatten()
                    .unwrap_or_else(|| format!("{id}?"))
            });
            graph.add_run(Run {
                status: run["status"].as_str().unwrap().to_string(),
                conversation,
                input,
                output,
            });
        }
        graph
    }
}

/// The names of the nodes of an export, by id; only threads that carry
/// the tag are named.
struct Names<'a> {
    tag: &'a Tag,
    /// Each node's parent and message.
    nodes: HashMap<String, (Option<String>, String)>,
}

impl<'a> Names<'a> {
    fn new(tag: &'a Tag) -> Names<'a> {
        Names {
            tag,
            nodes: HashMap::new(),
        }
    }

    fn add(&mut self, node: &Value) {
        let role = node["role"].as_str().unwrap();
        let parts: Vec<String> = node["parts"].as_array().unwrap().iter().map(part).collect();
        let message = format!("{}:{}", &role[..1], parts.join("|"));
        self.nodes.insert(
            node["id"].as_str().unwrap().to_string(),
            (node["parent"].as_str().map(str::to_string), message),
        );
    }

    /// The thread ending at node `id` with the tag taken out, when it
    /// carries the tag.
    fn of(&self, id: &Value) -> Option<String> {
        let mut messages = Vec::new();
        let mut at = id.as_str().map(str::to_string);
        while let Some(id) = at {
            let (parent, message) = self.nodes.get(&id)?;
            messages.push(message.as_str());
            at = parent.clone();
        }
        messages.reverse();
        let thread = messages.join(" / ");
        self.tag.is_in(&thread).then(|| self.tag.strip(&thread))
    }

    /// Every node whose thread carries the tag.
    fn tagged(&self) -> BTreeSet<String> {
        self.nodes
            .keys()
            .filter_map(|id| self.of(&Value::String(id.clone())))
            .collect()
    }
}

/// A part as the graph names it.
fn part(part: &Value) -> String {
    match part["type"].as_str().unwrap() {
        "text" => part["text"].as_str().unwrap().to_string(),
        "tool_call" => format!("call {}", part["name"].as_str().unwrap_or("?")),
        "tool_result" => "result".to_string(),
        other => other.to_string(),
    }
}
