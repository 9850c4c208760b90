//! Selection: which recorded turns a replay re-sends, read one
//! conversation at a time, and the turns of a thread.

use crate::error::{RecordedError, Result};
use serde::{Deserialize, Serialize};
use skein_core::{ConversationId, NodeId, Role, Thread};
use skein_store::{ConversationRecord, FamilyLimits, NewReplayTurn, SearchQuery, Store};
use std::collections::{HashMap, HashSet};

/// Which recorded turns a replay re-sends: the turns of every source named
/// (conversations, families, turns, labels, cases), each once, kept when
/// they pass every filter (search, time range, proxy client); filters
/// alone select among every conversation's turns. More ways to select add
/// fields here.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Selection {
    /// Every turn of these conversations.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conversations: Vec<ConversationId>,
    /// Every turn of these conversations' families.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub families: Vec<ConversationId>,
    /// These turns, by their final answer's node.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub turns: Vec<NodeId>,
    /// The turns carrying these labels (`skein label add`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub labels: Vec<String>,
    /// Imported cases ([`crate::cases`]): turns, each with its own
    /// comparators.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cases: Vec<CaseTurn>,
    /// Filter: only turns whose request or answers have these words (the
    /// store's search language, within each turn's conversation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub search: Option<String>,
    /// Filter: only turns recorded at or after this time (Unix ms: when the
    /// run that gave the first answer started).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since_ms: Option<i64>,
    /// Filter: only turns recorded before this time (Unix ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until_ms: Option<i64>,
    /// Filter: only turns the recording proxy recorded for one of these
    /// clients (a run that produced the turn's answer names it:
    /// `x-skein-client`, else OpenAI's `user` or Anthropic's
    /// `metadata.user_id`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub clients: Vec<String>,
}

/// A case's turn as a selection holds it: its final answer and the
/// comparators the case names (empty: the replay's).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CaseTurn {
    pub turn: NodeId,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub compare: Vec<String>,
}

impl Selection {
    pub fn new() -> Selection {
        Selection::default()
    }

    pub fn conversation(mut self, id: ConversationId) -> Selection {
        self.conversations.push(id);
        self
    }

    pub fn family(mut self, id: ConversationId) -> Selection {
        self.families.push(id);
        self
    }

    pub fn turn(mut self, answer: NodeId) -> Selection {
        self.turns.push(answer);
        self
    }

    pub fn label(mut self, name: impl Into<String>) -> Selection {
        self.labels.push(name.into());
        self
    }

    pub fn case(mut self, case: CaseTurn) -> Selection {
        self.cases.push(case);
        self
    }

    /// Only turns whose messages have these words.
    pub fn search(mut self, text: impl Into<String>) -> Selection {
        self.search = Some(text.into());
        self
    }

    /// Only turns recorded in `[since, until)` (Unix ms; either open).
    pub fn between(mut self, since_ms: Option<i64>, until_ms: Option<i64>) -> Selection {
        self.since_ms = since_ms;
        self.until_ms = until_ms;
        self
    }

    /// Only turns the recording proxy recorded for this client.
    pub fn client(mut self, name: impl Into<String>) -> Selection {
        self.clients.push(name.into());
        self
    }

    /// Whether a source (conversations, families, turns, labels, cases) is
    /// named; without one, the filters apply to every conversation.
    pub fn has_source(&self) -> bool {
        !(self.conversations.is_empty()
            && self.families.is_empty()
            && self.turns.is_empty()
            && self.labels.is_empty()
            && self.cases.is_empty())
    }

    /// Whether any filter is set.
    pub fn has_filter(&self) -> bool {
        self.search.is_some()
            || self.since_ms.is_some()
            || self.until_ms.is_some()
            || !self.clients.is_empty()
    }

    /// Nothing is selected: no source and no filter.
    pub fn is_empty(&self) -> bool {
        !self.has_source() && !self.has_filter()
    }
}

/// The turns of `selection`, each once, conversation by conversation: the
/// sources' turns (every conversation's when only filters are given), kept
/// when they pass the filters.
pub(super) async fn select(store: &Store, selection: &Selection) -> Result<Vec<NewReplayTurn>> {
    let api = store.nonblocking();
    let mut picker = Picker {
        store,
        selection,
        seen: HashSet::new(),
        turns: Vec::new(),
        matches: HashMap::new(),
    };
    let mut conversations: Vec<ConversationId> = selection.conversations.clone();
    for id in &selection.families {
        let family = api.family(id, FamilyLimits::WHOLE).await?;
        conversations.extend(family.members.into_iter().map(|m| m.conversation.id));
    }
    for id in &conversations {
        let conversation = api.conversation(id).await?;
        picker.add_conversation(&conversation).await?;
    }
    if !selection.has_source() {
        // Page by page, so the listing is never held whole.
        let mut page = api.list_conversations(CONVERSATION_PAGE).await?;
        while let Some(last) = page.last().map(|c| c.position()) {
            for conversation in &page {
                picker.add_conversation(conversation).await?;
            }
            page = api
                .list_conversations_after(&last, CONVERSATION_PAGE)
                .await?;
        }
    }
    for answer in &selection.turns {
        picker.add_turn(*answer, Vec::new()).await?;
    }
    for name in &selection.labels {
        let mut after = None;
        loop {
            let page = api.labelled(name, after, LABEL_PAGE).await?;
            after = page.last().map(|label| label.node);
            for label in page {
                picker.add_turn(label.node, Vec::new()).await?;
            }
            if after.is_none() {
                break;
            }
        }
    }
    for case in &selection.cases {
        picker.add_turn(case.turn, case.compare.clone()).await?;
    }
    Ok(picker.turns)
}

/// Labelled nodes, and conversations, read at a time.
const LABEL_PAGE: usize = 500;
const CONVERSATION_PAGE: usize = 200;

/// The selection as it is read: the turns kept so far, and what the
/// filters found out per conversation.
struct Picker<'a> {
    store: &'a Store,
    selection: &'a Selection,
    seen: HashSet<NodeId>,
    turns: Vec<NewReplayTurn>,
    /// Per conversation, the nodes of its thread the search matches.
    matches: HashMap<ConversationId, HashSet<NodeId>>,
}

impl Picker<'_> {
    /// Every turn of `conversation` the filters keep.
    async fn add_conversation(&mut self, conversation: &ConversationRecord) -> Result<()> {
        let Some(head) = conversation.head else {
            return Ok(());
        };
        let thread = self.store.nonblocking().load_thread(head).await?;
        for (request, answer) in turns_of(&thread) {
            if self.seen.contains(&answer) {
                continue;
            }
            let turn = NewReplayTurn {
                conversation: Some(conversation.id.clone()),
                turn_node: answer,
                request_node: request,
                compare: Vec::new(),
                model: None,
            };
            if self.client_keeps(answer).await? && self.keeps(&turn, &thread).await? {
                self.seen.insert(answer);
                self.turns.push(turn);
            }
        }
        Ok(())
    }

    /// The turn whose final answer is `answer`, when the filters keep it.
    async fn add_turn(&mut self, answer: NodeId, compare: Vec<String>) -> Result<()> {
        if self.seen.contains(&answer) {
            return Ok(());
        }
        let api = self.store.nonblocking();
        let thread = api.load_thread(answer).await?;
        let request = request_in(&thread, answer)?;
        let owner = skein_conversation::owner_of_node(self.store, answer).await?;
        let turn = NewReplayTurn {
            conversation: owner,
            turn_node: answer,
            request_node: request,
            compare,
            model: None,
        };
        if self.client_keeps(answer).await? && self.keeps(&turn, &thread).await? {
            self.seen.insert(answer);
            self.turns.push(turn);
        }
        Ok(())
    }

    /// Whether the client filter keeps the turn answered by `answer`: a
    /// run that produced it was made by one of the selection's clients of
    /// the recording proxy (as its run records: `x-skein-client`, OpenAI's
    /// `user`, Anthropic's `metadata.user_id`).
    async fn client_keeps(&self, answer: NodeId) -> Result<bool> {
        let clients = &self.selection.clients;
        if clients.is_empty() {
            return Ok(true);
        }
        let runs = self.store.nonblocking().runs_producing(answer).await?;
        Ok(runs.iter().any(|run| {
            run.client
                .as_ref()
                .is_some_and(|client| clients.contains(client))
        }))
    }

    /// Whether the time and search filters keep `turn` of `thread`.
    async fn keeps(&mut self, turn: &NewReplayTurn, thread: &Thread) -> Result<bool> {
        let selection = self.selection;
        if selection.since_ms.is_some() || selection.until_ms.is_some() {
            let Some(at) = self.turn_time(turn, thread).await? else {
                return Ok(false);
            };
            if selection.since_ms.is_some_and(|since| at < since)
                || selection.until_ms.is_some_and(|until| at >= until)
            {
                return Ok(false);
            }
        }
        let Some(text) = &selection.search else {
            return Ok(true);
        };
        let Some(owner) = &turn.conversation else {
            return Ok(false);
        };
        if !self.matches.contains_key(owner) {
            let query = SearchQuery::new(text.clone())
                .limit(skein_store::search::MAX_LIMIT)
                .conversation(Some(owner.clone()));
            let found = self.store.nonblocking().search(&query).await?;
            if found.truncated {
                return Err(RecordedError::SearchTooWide {
                    conversation: owner.to_string(),
                    limit: skein_store::search::MAX_LIMIT,
                });
            }
            let nodes = found.matches.into_iter().map(|m| m.node).collect();
            self.matches.insert(owner.clone(), nodes);
        }
        let matched = &self.matches[owner];
        Ok(turn_nodes(thread, turn).any(|node| matched.contains(&node)))
    }

    /// When the turn was recorded: when the run that gave its first answer
    /// started (`None` when no run did).
    async fn turn_time(&self, turn: &NewReplayTurn, thread: &Thread) -> Result<Option<i64>> {
        let Some(first) = turn_nodes(thread, turn).nth(1) else {
            return Ok(None);
        };
        let runs = self.store.nonblocking().runs_producing(first).await?;
        Ok(runs
            .iter()
            .filter(|run| run.input_head == Some(turn.request_node))
            .map(|run| run.started_ms)
            .min())
    }
}

/// The nodes of `turn` on `thread`: its request, then every message up to
/// its final answer.
fn turn_nodes<'t>(thread: &'t Thread, turn: &NewReplayTurn) -> impl Iterator<Item = NodeId> + 't {
    let nodes: Vec<NodeId> = thread.nodes().iter().map(|node| node.id()).collect();
    let start = nodes.iter().position(|id| *id == turn.request_node);
    let end = nodes.iter().position(|id| *id == turn.turn_node);
    let span = match (start, end) {
        (Some(start), Some(end)) if start <= end => nodes[start..=end].to_vec(),
        _ => Vec::new(),
    };
    span.into_iter()
}

/// The message the turn ending at `answer` on `thread` answered.
fn request_in(thread: &Thread, answer: NodeId) -> Result<NodeId> {
    turns_of(thread)
        .into_iter()
        .rev()
        .find(|(_, last)| *last == answer)
        .map(|(request, _)| request)
        .ok_or(RecordedError::NotATurn(answer))
}

/// The message the turn ending at `answer` answered;
/// [`RecordedError::NotATurn`] when `answer` ends no turn.
pub async fn request_of_turn(store: &Store, answer: NodeId) -> Result<NodeId> {
    let thread = store.nonblocking().load_thread(answer).await?;
    request_in(&thread, answer)
}

/// The turns of a thread: (the message a turn answered, its final
/// answer), oldest first. A turn starts at a user message an assistant
/// message follows, and ends at the last assistant message before the
/// next user message.
pub(crate) fn turns_of(thread: &Thread) -> Vec<(NodeId, NodeId)> {
    let nodes = thread.nodes();
    let mut turns = Vec::new();
    let mut open: Option<(NodeId, NodeId)> = None;
    for (index, node) in nodes.iter().enumerate() {
        match node.message().role {
            Role::User => {
                turns.extend(open.take());
                if nodes
                    .get(index + 1)
                    .is_some_and(|next| next.message().role == Role::Assistant)
                {
                    open = Some((node.id(), node.id()));
                }
            }
            Role::Assistant => {
                if let Some((_, last)) = &mut open {
                    *last = node.id();
                }
            }
            Role::System | Role::Tool => {}
        }
    }
    turns.extend(open);
    turns
}
