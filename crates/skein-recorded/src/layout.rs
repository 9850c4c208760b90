/*!
A request as an editable list of messages with their part annotations, and
the two edits recorded chats make on it: removing every part tagged with an
ablated source (by tag, so what remains is byte-identical), and placing
hook-rendered source parts at the end of the system message, where live
turns put them.

Annotations are keyed by (node, part); a node's id changes when a part is
removed from it or from an earlier message, so a layout keeps annotations by
(message position, part index) and re-keys them when it is turned back
into a thread.
*/

use skein_core::{Annotation, Annotations, Message, Part, Role, Thread};
use skein_engine::Request;
use std::collections::{BTreeSet, HashMap};

/// One message with its annotations by part index.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Entry {
    pub(crate) message: Message,
    pub(crate) annotations: Vec<(u32, Annotation)>,
}

/// A request's messages, root first.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Layout {
    pub(crate) entries: Vec<Entry>,
}

impl Layout {
    /// The messages of `thread` with the annotations `annotations` holds
    /// for them.
    pub(crate) fn of(thread: &Thread, annotations: &Annotations) -> Layout {
        let entries = thread
            .nodes()
            .into_iter()
            .map(|node| {
                let mut tags = Vec::new();
                for part in 0..node.message().parts.len() as u32 {
                    for annotation in annotations.get(node.id(), part) {
                        tags.push((part, annotation.clone()));
                    }
                }
                Entry {
                    message: node.message().clone(),
                    annotations: tags,
                }
            })
            .collect();
        Layout { entries }
    }

    /// The thread and annotations this layout stands for (the engine
    /// builds the same from [`Layout::request`]).
    #[cfg(test)]
    pub(crate) fn build(&self) -> (Thread, Annotations) {
        let mut thread = Thread::new();
        let mut annotations = Annotations::new();
        for entry in &self.entries {
            thread = thread.push(entry.message.clone());
            let node = thread.head_id().expect("just pushed");
            for (part, annotation) in &entry.annotations {
                annotations.add(node, *part, annotation.clone());
            }
        }
        (thread, annotations)
    }

    /// An engine request rendering exactly this layout.
    pub(crate) fn request(&self) -> Request {
        let mut request = Request::default();
        for entry in &self.entries {
            request = request.annotated_message(entry.message.clone(), entry.annotations.clone());
        }
        request
    }

    /// Remove every part tagged with one of `ids`, and every message left
    /// without parts. Untagged and other parts stay exactly as they were.
    pub(crate) fn remove(&mut self, ids: &BTreeSet<String>) {
        if ids.is_empty() {
            return;
        }
        self.remove_tagged(|_, id| ids.contains(id));
    }

    /// Put `text` in place of the source `id`: its first tagged text part
    /// holds `text` (still tagged), every other part tagged with it goes,
    /// and every other byte stays. Whether the layout had such a part.
    pub(crate) fn replace(&mut self, id: &str, text: &str) -> bool {
        let first = self.entries.iter().enumerate().find_map(|(at, entry)| {
            entry.annotations.iter().find_map(|(part, annotation)| {
                let tagged = matches!(annotation, Annotation::Source(source) if source == id);
                let is_text = matches!(
                    entry.message.parts.get(*part as usize),
                    Some(Part::Text { .. })
                );
                (tagged && is_text).then_some((at, *part))
            })
        });
        let Some((at, part)) = first else {
            return false;
        };
        self.entries[at].message.parts[part as usize] = Part::text(text);
        self.remove_tagged(|place, source| source == id && place != (at, part));
        true
    }

    /// Remove every part whose source tag `doomed` says (given the part's
    /// place, entry and part index, and the source id), and every message
    /// left without parts.
    fn remove_tagged(&mut self, doomed: impl Fn((usize, u32), &str) -> bool) {
        for (at, entry) in self.entries.iter_mut().enumerate() {
            let doomed: BTreeSet<u32> = entry
                .annotations
                .iter()
                .filter_map(|(part, annotation)| match annotation {
                    Annotation::Source(id) if doomed((at, *part), id) => Some(*part),
                    _ => None,
                })
                .collect();
            if doomed.is_empty() {
                continue;
            }
            let mut renumber = HashMap::new();
            let mut kept = Vec::new();
            for (index, part) in std::mem::take(&mut entry.message.parts)
                .into_iter()
                .enumerate()
            {
                if !doomed.contains(&(index as u32)) {
                    renumber.insert(index as u32, kept.len() as u32);
                    kept.push(part);
                }
            }
            entry.message.parts = kept;
            entry.annotations = std::mem::take(&mut entry.annotations)
                .into_iter()
                .filter_map(|(part, annotation)| renumber.get(&part).map(|&new| (new, annotation)))
                .collect();
        }
        self.entries.retain(|entry| !entry.message.parts.is_empty());
    }

    /// Append tagged text parts to the system message at the root, creating
    /// it when the layout has none.
    pub(crate) fn append_to_system(&mut self, parts: Vec<(String, String)>) {
        if parts.is_empty() {
            return;
        }
        if self
            .entries
            .first()
            .is_none_or(|entry| entry.message.role != Role::System)
        {
            self.entries.insert(
                0,
                Entry {
                    message: Message::new(Role::System, Vec::new()),
                    annotations: Vec::new(),
                },
            );
        }
        let system = &mut self.entries[0];
        for (id, text) in parts {
            let index = system.message.parts.len() as u32;
            system.message.parts.push(Part::text(text));
            system.annotations.push((index, Annotation::Source(id)));
        }
    }

    /// Replace every system message by one of `text` (a replay's changed
    /// system prompt), where the first one stood, or first.
    pub(crate) fn replace_system(&mut self, text: &str) {
        let at = self
            .entries
            .iter()
            .position(|entry| entry.message.role == Role::System)
            .unwrap_or(0);
        self.entries
            .retain(|entry| entry.message.role != Role::System);
        self.entries.insert(
            at.min(self.entries.len()),
            Entry {
                message: Message::system(text),
                annotations: Vec::new(),
            },
        );
    }

    /// Push a message with no annotations.
    pub(crate) fn push(&mut self, message: Message) {
        self.entries.push(Entry {
            message,
            annotations: Vec::new(),
        });
    }
}

/// Tag every tool call and tool result in `thread` with its tool's name
/// (a tool is a source named by its name), adding to `annotations`.
pub(crate) fn tag_tool_parts(thread: &Thread, annotations: &mut Annotations) {
    let mut names: HashMap<String, String> = HashMap::new();
    for node in thread.nodes() {
        for (index, part) in node.message().parts.iter().enumerate() {
            let tag = match part {
                Part::ToolCall(call) => {
                    names.insert(call.id.clone(), call.name.clone());
                    Some(call.name.clone())
                }
                Part::ToolResult(result) => names.get(&result.call_id).cloned(),
                _ => None,
            };
            if let Some(name) = tag {
                annotations.add(node.id(), index as u32, Annotation::Source(name));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tagged(thread: &Thread, node: usize, part: u32, id: &str) -> Annotations {
        let mut annotations = Annotations::new();
        annotations.add(
            thread.nodes()[node].id(),
            part,
            Annotation::Source(id.into()),
        );
        annotations
    }

    #[test]
    fn removal_keeps_every_other_byte_and_rekeys_annotations() {
        let system = Message::new(
            Role::System,
            vec![
                Part::text("be brief"),
                Part::text("a: 1"),
                Part::text("b: 2"),
            ],
        );
        let thread = Thread::from_messages([system, Message::user("q")]);
        let mut annotations = tagged(&thread, 0, 1, "a");
        annotations.add(thread.nodes()[0].id(), 2, Annotation::Source("b".into()));
        let mut layout = Layout::of(&thread, &annotations);
        layout.remove(&BTreeSet::from(["a".to_string()]));
        let (rebuilt, rekeyed) = layout.build();
        let messages = rebuilt.messages();
        assert_eq!(
            messages[0].parts,
            vec![Part::text("be brief"), Part::text("b: 2")]
        );
        assert_eq!(messages[1], thread.messages()[1]);
        assert_eq!(rekeyed.source_of(rebuilt.nodes()[0].id(), 1), Some("b"));
        assert_eq!(rekeyed.source_of(rebuilt.nodes()[0].id(), 0), None);
    }

    #[test]
    fn a_replaced_source_keeps_its_first_place_and_tag_and_loses_the_rest() {
        let system = Message::new(
            Role::System,
            vec![
                Part::text("be brief"),
                Part::text("hotel: Lutetia"),
                Part::text("budget: 200"),
            ],
        );
        let context = Message::new(Role::User, vec![Part::text("more on the hotel")]);
        let thread = Thread::from_messages([system, context, Message::user("q")]);
        let mut annotations = tagged(&thread, 0, 1, "hotel");
        annotations.add(
            thread.nodes()[0].id(),
            2,
            Annotation::Source("budget".into()),
        );
        annotations.add(
            thread.nodes()[1].id(),
            0,
            Annotation::Source("hotel".into()),
        );
        let mut layout = Layout::of(&thread, &annotations);
        assert!(
            !layout.replace("nowhere", "x"),
            "no such source: nothing changes"
        );
        assert_eq!(layout.build(), (thread.clone(), annotations.clone()));
        assert!(layout.replace("hotel", "hotel: Ritz"));
        let (rebuilt, rekeyed) = layout.build();
        let messages = rebuilt.messages();
        assert_eq!(
            messages[0].parts,
            vec![
                Part::text("be brief"),
                Part::text("hotel: Ritz"),
                Part::text("budget: 200")
            ]
        );
        assert_eq!(messages.len(), 2, "the message left empty is gone");
        assert_eq!(messages[1], thread.messages()[2]);
        assert_eq!(rekeyed.source_of(rebuilt.nodes()[0].id(), 1), Some("hotel"));
        assert_eq!(
            rekeyed.source_of(rebuilt.nodes()[0].id(), 2),
            Some("budget")
        );
    }

    #[test]
    fn a_message_left_empty_disappears_and_nothing_removed_is_identity() {
        let thread = Thread::from_messages([
            Message::new(Role::System, vec![Part::text("only a source")]),
            Message::user("q"),
        ]);
        let annotations = tagged(&thread, 0, 0, "a");
        let mut layout = Layout::of(&thread, &annotations);
        layout.remove(&BTreeSet::from(["other".to_string()]));
        assert_eq!(layout.build(), (thread.clone(), annotations.clone()));
        layout.remove(&BTreeSet::from(["a".to_string()]));
        assert_eq!(layout.build().0.messages(), vec![&Message::user("q")]);
    }
}
