/*!
Loading a recorded chat back from its stored conversation: the history
from the bookmark, the source layout and persistent removals from its
settings (a builder's own system text and sources take precedence), each
turn's evidence from its runs (the first run's request and annotations, the
tools it offered, the sources it recorded, its observation events; the last
run's reply), and the reruns it produced (for provenance).

Runs are grouped into turns by their recorded turn number; runs without one
(conversations recorded by plain `skein` turns load too) by their chain,
each run outside a chain being a turn of its own. Runs kept from a turn or
rerun that recorded nothing (marked `Relation::Unrecorded`) are in no turn.

Three ways in, sharing every step but the last:

- [`RecordedChatBuilder::load`](crate::RecordedChatBuilder::load): the
  whole chat, to read every turn. It loads the history and builds every
  turn's evidence (two threads per turn), so it costs in proportion to the
  chat, and a damaged turn fails it.
- [`RecordedChatBuilder::resume`](crate::RecordedChatBuilder::resume): the
  chat to go on with (`skein prompt --source … -c`). It loads the history
  and reads the conversation's run records, only to count the turns: none
  is built, so continuing costs one history load whatever the chat's
  length, and a damaged old turn does not stop it. The chat holds the turns
  sent from then on; a stored one is loaded with `load_turn` (or `load`),
  which is where its damage is reported.
- [`RecordedChatBuilder::load_turn`](crate::RecordedChatBuilder::load_turn):
  one turn ([`TurnAt`]), for what `explain`, `rerun` and `fork
  --from-rerun` need ([`LoadedTurn`]). It reads the conversation row, the
  conversation's run records (one indexed query, no message bodies) and
  reruns, and the two threads of that turn alone: the other turns are
  numbered from their run records and never built, so a damaged turn
  elsewhere in the chat does not stop it.

Turns are numbered by when their first run started; turns started in the
same millisecond by their reply's depth (a later turn of a conversation
has a longer history), read from the reply node alone.

Every read goes through the store's async API (`Store::nonblocking`), so
on PostgreSQL loading blocks no thread of the caller's runtime.
*/

use crate::chat::{Config, Holds, RecordedChat, Stamp};
use crate::error::{RecordedError, Result};
use crate::evidence::Turn;
use crate::reason::{ReasonOptions, Report};
use crate::rerun::{RerunOptions, RerunResult};
use crate::source::{Ablation, Source, SourceInfo, SourceKind, tagged_kind};
use skein_conversation::Bookmark;
use skein_core::{Annotation, NodeId, RecordedSettings, Relation, Thread, Usage};
use skein_engine::Event;
use skein_store::{ConversationId, ConversationRecord, RerunId, RerunRecord, RunRecord, Store};
use std::collections::HashMap;
use std::sync::Arc;

/// The conversation holding the turn whose reply is `node` (what
/// `skein explain NODE` needs before loading the chat): the turn layer's
/// [`skein_conversation::producer_of_node`], the newest conversation still
/// stored whose turn produced it (a fork standing at the node holds the
/// node, not the turn); [`RecordedError::NotATurn`] when none did.
pub async fn conversation_of_node(store: &Store, node: NodeId) -> Result<ConversationId> {
    skein_conversation::producer_of_node(store, node)
        .await?
        .ok_or(RecordedError::NotATurn(node))
}

/// Which recorded turn [`RecordedChatBuilder::load_turn`](crate::RecordedChatBuilder::load_turn)
/// loads.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum TurnAt {
    /// The turn whose final reply is this node, in the conversation that
    /// recorded it (`skein explain NODE`).
    Reply(NodeId),
    /// Turn `k` (from 0) of this conversation (`--cid ID --turn K`, or the
    /// turn a stored rerun re-ran).
    Number(ConversationId, usize),
}

/// One turn of a stored recorded chat, loaded alone: its evidence, the
/// chat's layout, removals and reruns, and what can be done with the turn
/// (explain, re-run, fork). Built by
/// [`RecordedChatBuilder::load_turn`](crate::RecordedChatBuilder::load_turn);
/// every operation gives what the same operation on the whole loaded chat
/// gives.
pub struct LoadedTurn {
    /// A chat holding this turn's evidence only.
    chat: RecordedChat,
    at: Loaded,
}

impl std::fmt::Debug for LoadedTurn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadedTurn")
            .field("chat", self.chat.bookmark.id())
            .field("turn", &self.at.turn)
            .finish_non_exhaustive()
    }
}

impl LoadedTurn {
    /// The turn's number, from 0.
    pub fn index(&self) -> usize {
        self.at.turn
    }

    /// The turn's evidence.
    pub fn turn(&self) -> &Arc<Turn> {
        &self.chat.turns[0]
    }

    /// How many turns the chat has.
    pub fn turns(&self) -> usize {
        self.at.turns
    }

    /// The chat's identity ([`RecordedChat::id`]).
    pub fn id(&self) -> &str {
        self.chat.id()
    }

    /// The stored conversation the turn belongs to.
    pub fn conversation(&self) -> &ConversationId {
        self.chat.bookmark.id()
    }

    /// Sources removed from every turn and probe of the chat.
    pub fn removed(&self) -> &Ablation {
        self.chat.removed()
    }

    /// [`RecordedChat::reason`] on this turn.
    pub async fn reason(&mut self, options: ReasonOptions) -> Result<Arc<Report>> {
        self.chat.reason(self.at.turn, options).await
    }

    /// The memoised report, if any ([`RecordedChat::report`]).
    pub fn report(&self) -> Option<&Arc<Report>> {
        self.chat.report(self.at.turn)
    }

    /// [`RecordedChat::rerun_turn`] on this turn.
    pub async fn rerun(&mut self, options: RerunOptions) -> Result<RerunResult> {
        self.chat.rerun_turn(self.at.turn, options).await
    }

    /// [`RecordedChat::fork`] from this turn.
    pub async fn fork(&self, from_rerun: Option<&RerunResult>) -> Result<RecordedChat> {
        self.chat.fork(self.at.turn, from_rerun).await
    }

    /// [`RecordedChat::fork_from_rerun`]: the stored rerun must have re-run
    /// this turn of this chat.
    pub async fn fork_from_rerun(&self, rerun: &RerunId) -> Result<RecordedChat> {
        self.chat.fork_from_rerun(rerun).await
    }
}

/// Where a chat loaded for one turn stands: the turn's number and how many
/// turns the chat has.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Loaded {
    pub(crate) turn: usize,
    pub(crate) turns: usize,
}

/// What both ways in read: the conversation row and its persistent
/// removals, the kinds of the sources it knows, its successful runs grouped
/// into numbered turns, the tools its runs offered (by name, in order), and
/// its reruns.
struct Stored {
    conversation: ConversationRecord,
    removed: Ablation,
    kinds: HashMap<String, SourceKind>,
    turns: Vec<Vec<RunRecord>>,
    offered: Vec<String>,
    reruns: Vec<RerunRecord>,
}

async fn read(store: &Store, id: &ConversationId, history: bool) -> Result<(Stored, Thread)> {
    let api = store.nonblocking();
    let conversation = api.conversation(id).await?;
    let history = match (history, conversation.head) {
        (true, Some(head)) => api.load_thread(head).await?,
        _ => Thread::new(),
    };
    let runs: Vec<RunRecord> = api
        .runs_of_conversation(id)
        .await?
        .into_iter()
        .filter(|run| !is_unrecorded(run))
        .collect();
    let reruns = api.reruns_of_conversation(id).await?;
    let offered = runs
        .iter()
        .flat_map(|run| run.tools.iter().map(|spec| spec.name.clone()))
        .collect();
    let kinds = known_kinds(&conversation, &runs);
    let turns = number_turns(store, group_turns(runs)).await?;
    let removed = conversation
        .settings
        .recorded
        .as_ref()
        .map(|recorded| recorded.removed.iter().cloned().collect())
        .unwrap_or_default();
    Ok((
        Stored {
            conversation,
            removed,
            kinds,
            turns,
            offered,
            reruns,
        },
        history,
    ))
}

/// The kind of every source the conversation knows: those its layout
/// declares, then those its turns recorded (hook sources). A turn that
/// only carries a source's tag (a plain turn continuing a recorded chat)
/// names it by this kind, as the turn that rendered it did.
fn known_kinds(
    conversation: &ConversationRecord,
    runs: &[RunRecord],
) -> HashMap<String, SourceKind> {
    let declared = conversation
        .settings
        .recorded
        .iter()
        .flat_map(|recorded| recorded.sources.iter())
        .map(|source| (source.id.clone(), SourceKind::parse(&source.kind)));
    let recorded = runs
        .iter()
        .flat_map(sources_of)
        .map(|source| (source.id, source.kind));
    let mut kinds = HashMap::new();
    for (id, kind) in declared.chain(recorded) {
        kinds.entry(id).or_insert(kind);
    }
    kinds
}

/// The error for a conversation whose turn `problem` describes cannot be
/// loaded.
fn damaged(id: &ConversationId, problem: String) -> RecordedError {
    RecordedError::NotRecorded {
        conversation: id.to_string(),
        problem,
    }
}

/// `groups` in turn order: by start time, turns started in the same
/// millisecond by their reply's depth (read only for those). The sort is
/// stable, so recorded turns keep the order their turn numbers gave.
async fn number_turns(
    store: &Store,
    mut groups: Vec<Vec<RunRecord>>,
) -> Result<Vec<Vec<RunRecord>>> {
    let started = |group: &Vec<RunRecord>| group[0].started_ms;
    let tied: Vec<(usize, NodeId)> = groups
        .iter()
        .enumerate()
        .filter(|(i, group)| {
            let at = started(group);
            (i.checked_sub(1).is_some_and(|p| started(&groups[p]) == at))
                || groups.get(i + 1).is_some_and(|next| started(next) == at)
        })
        // A turn without a reply sorts first among its ties; building it
        // (only `load` does) says what is wrong with it.
        .filter_map(|(i, group)| reply_of(group).ok().map(|node| (i, node)))
        .collect();
    if tied.is_empty() {
        return Ok(groups);
    }
    let api = store.nonblocking();
    let mut depths: HashMap<usize, u64> = HashMap::with_capacity(tied.len());
    for (i, node) in tied {
        depths.insert(i, api.node(node).await?.depth);
    }
    let mut keyed: Vec<(i64, u64, Vec<RunRecord>)> = groups
        .drain(..)
        .enumerate()
        .map(|(i, group)| (started(&group), depths.get(&i).copied().unwrap_or(0), group))
        .collect();
    keyed.sort_by_key(|(started, depth, _)| (*started, *depth));
    Ok(keyed.into_iter().map(|(_, _, group)| group).collect())
}

/// A turn's final reply: its last run's output.
fn reply_of(runs: &[RunRecord]) -> std::result::Result<NodeId, &'static str> {
    runs.last()
        .and_then(|run| run.output_head)
        .ok_or("its last run has no reply")
}

/// The chat `stored` describes, holding `turns` (those `holds` names).
fn assemble(
    config: Arc<Config>,
    stored: Stored,
    history: Thread,
    turns: Vec<Arc<Turn>>,
    holds: Holds,
) -> RecordedChat {
    let Stored {
        conversation,
        removed,
        offered,
        reruns,
        ..
    } = stored;
    let recorded = conversation.settings.recorded.clone().unwrap_or_default();
    let config = with_offered_tools(with_layout(config, &recorded), &offered);
    let stamps = reruns
        .into_iter()
        .filter_map(|r| {
            r.answer_head.map(|answer_head| {
                (
                    r.id,
                    Stamp {
                        turn: r.turn as usize,
                        answer_head,
                        removed: r.ablation,
                    },
                )
            })
        })
        .collect();
    RecordedChat {
        config,
        bookmark: Bookmark::of(conversation),
        removed,
        history,
        turns,
        holds,
        reports: HashMap::new(),
        reruns: stamps,
    }
}

fn store_of(config: &Config, what: &'static str) -> Result<Store> {
    config.store.clone().ok_or(RecordedError::NoStore(what))
}

pub(crate) async fn load(config: Arc<Config>, id: &ConversationId) -> Result<RecordedChat> {
    let store = store_of(&config, "loading a recorded chat")?;
    let (stored, history) = read(&store, id, true).await?;
    let mut turns = Vec::with_capacity(stored.turns.len());
    for (index, group) in stored.turns.iter().enumerate() {
        turns.push(Arc::new(build(&store, id, index, group, &stored).await?));
    }
    Ok(assemble(config, stored, history, turns, Holds::All))
}

pub(crate) async fn resume(config: Arc<Config>, id: &ConversationId) -> Result<RecordedChat> {
    let store = store_of(&config, "resuming a recorded chat")?;
    let (stored, history) = read(&store, id, true).await?;
    let holds = Holds::SentSince {
        stored: stored.turns.len(),
    };
    Ok(assemble(config, stored, history, Vec::new(), holds))
}

pub(crate) async fn load_turn(config: Arc<Config>, at: TurnAt) -> Result<LoadedTurn> {
    let store = store_of(&config, "loading a recorded turn")?;
    let id = match &at {
        TurnAt::Reply(node) => conversation_of_node(&store, *node).await?,
        TurnAt::Number(id, _) => id.clone(),
    };
    load_turn_in(config, id, at).await
}

/// [`load_turn`] of turn `at` of conversation `id`, already resolved (for
/// [`TurnAt::Reply`], by [`conversation_of_node`]), so it is not looked up
/// again.
pub(crate) async fn load_turn_in(
    config: Arc<Config>,
    id: ConversationId,
    at: TurnAt,
) -> Result<LoadedTurn> {
    let store = store_of(&config, "loading a recorded turn")?;
    let wanted = match at {
        TurnAt::Reply(node) => Err(node),
        TurnAt::Number(_, k) => Ok(k),
    };
    let (stored, history) = read(&store, &id, false).await?;
    let count = stored.turns.len();
    let k = match wanted {
        Err(node) => stored
            .turns
            .iter()
            .position(|group| reply_of(group) == Ok(node))
            .ok_or(RecordedError::NotATurn(node))?,
        Ok(k) if k < count => k,
        Ok(k) => {
            return Err(RecordedError::TurnOutOfRange {
                turn: k,
                turns: count,
            });
        }
    };
    let turn = Arc::new(build(&store, &id, k, &stored.turns[k], &stored).await?);
    let at = Loaded {
        turn: k,
        turns: count,
    };
    let chat = assemble(config, stored, history, vec![turn], Holds::One(at));
    Ok(LoadedTurn { chat, at })
}

/// `config` with the stored layout where it declares none of its own.
fn with_layout(config: Arc<Config>, stored: &RecordedSettings) -> Arc<Config> {
    if config.system.is_some() || !config.sources.is_empty() {
        return config;
    }
    if stored.system.is_none() && stored.sources.is_empty() {
        return config;
    }
    let mut config = Config::clone(&config);
    config.system = stored.system.clone();
    config.sources = stored
        .sources
        .iter()
        .map(|source| {
            Source::new(
                source.id.clone(),
                SourceKind::parse(&source.kind),
                source.text.clone(),
            )
        })
        .collect();
    Arc::new(config)
}

/// `config` with the tools the recorded runs offered (`offered`, by
/// name), taken from the engine's registered tools where the builder did
/// not give them, so a rerun's tool loop can call them again.
fn with_offered_tools(config: Arc<Config>, offered: &[String]) -> Arc<Config> {
    let missing: Vec<_> = offered
        .iter()
        .filter(|name| !config.tools.iter().any(|tool| &tool.spec().name == *name))
        .filter_map(|name| config.engine.tool(name))
        .fold(Vec::new(), |mut tools, tool| {
            if !tools
                .iter()
                .any(|known: &Arc<dyn skein_engine::Tool>| known.spec().name == tool.spec().name)
            {
                tools.push(tool);
            }
            tools
        });
    if missing.is_empty() {
        return config;
    }
    let mut config = Config::clone(&config);
    config.tools.extend(missing);
    Arc::new(config)
}

/// The recorded sources a turn's first run names.
fn sources_of(run: &RunRecord) -> impl Iterator<Item = SourceInfo> + '_ {
    run.relations.iter().filter_map(|relation| match relation {
        Relation::Source(json) => serde_json::from_str(json).ok(),
        _ => None,
    })
}

/// The chain a run belongs to, if any.
/// Whether `run` is a model call kept for usage from a turn or rerun that
/// recorded nothing ([`Relation::Unrecorded`]): never part of a turn.
fn is_unrecorded(run: &RunRecord) -> bool {
    run.relations
        .iter()
        .any(|relation| matches!(relation, Relation::Unrecorded(_)))
}

fn chain_of(run: &RunRecord) -> Option<&str> {
    run.relations.iter().find_map(|relation| match relation {
        Relation::Chain(id) => Some(id.as_str()),
        _ => None,
    })
}

/// Successful runs grouped by turn, in order. Runs a recorded chat wrote
/// carry their turn and step; others are grouped by chain (a run without
/// one is a turn of its own) in the order they started. (`number_turns`
/// settles ties between turns started in the same millisecond.)
fn group_turns(runs: Vec<RunRecord>) -> Vec<Vec<RunRecord>> {
    #[derive(PartialEq, Eq, Hash)]
    enum Key {
        Turn(u32),
        Chain(String),
    }
    let mut groups: Vec<Vec<RunRecord>> = Vec::new();
    let mut keys: HashMap<Key, usize> = HashMap::new();
    for run in runs
        .into_iter()
        .filter(|r| r.status == skein_store::RunStatus::Succeeded)
    {
        let key = match run.turn {
            Some(at) => Some(Key::Turn(at.turn)),
            None => chain_of(&run).map(|chain| Key::Chain(chain.to_string())),
        };
        match key.as_ref().and_then(|k| keys.get(k)) {
            Some(&group) => groups[group].push(run),
            None => {
                if let Some(key) = key {
                    keys.insert(key, groups.len());
                }
                groups.push(vec![run]);
            }
        }
    }
    for group in &mut groups {
        group.sort_by_key(|run| (run.turn.map(|at| at.step), run.started_ms));
    }
    groups.sort_by_key(|group| {
        let first = &group[0];
        (
            first.started_ms,
            first.turn.map_or(u32::MAX, |at| at.turn),
            first.id.clone(),
        )
    });
    groups
}

/// Turn `index`'s evidence from its runs: the two threads it needs.
async fn build(
    store: &Store,
    id: &ConversationId,
    index: usize,
    runs: &[RunRecord],
    stored: &Stored,
) -> Result<Turn> {
    let first = &runs[0];
    let problem = |problem: String| damaged(id, format!("the turn of run {}: {problem}", first.id));
    let input = first
        .input_head
        .ok_or_else(|| problem("its first run has no request".into()))?;
    let output = reply_of(runs).map_err(|e| problem(e.into()))?;
    let api = store.nonblocking();
    let request = api
        .load_thread(input)
        .await
        .map_err(|e| problem(e.to_string()))?;
    let thread = api
        .load_thread(output)
        .await
        .map_err(|e| problem(e.to_string()))?;
    let mut sources: Vec<SourceInfo> = sources_of(first).collect();
    for tool in &first.tools {
        if !sources.iter().any(|s| s.id == tool.name) {
            sources.push(SourceInfo {
                id: tool.name.clone(),
                kind: SourceKind::Tool,
                hook: false,
            });
        }
    }
    for (_, tags) in first.annotations.iter() {
        for tag in tags {
            if let Annotation::Source(id) = tag
                && !sources.iter().any(|s| &s.id == id)
            {
                sources.push(SourceInfo {
                    id: id.clone(),
                    kind: tagged_kind(id, &stored.kinds, &request),
                    hook: false,
                });
            }
        }
    }
    let user_text = request
        .messages()
        .iter()
        .rev()
        .find(|m| m.role == skein_core::Role::User)
        .map(|m| m.joined_text())
        .unwrap_or_default();
    Ok(Turn {
        index,
        user_text,
        annotations: first.annotations.clone(),
        tools: first.tools.clone(),
        sources,
        removed: stored.removed.clone(),
        request,
        thread,
        usage: runs
            .iter()
            .fold(Usage::default(), |sum, r| sum.add(&r.usage)),
        runs: runs.iter().map(|r| r.id.clone()).collect(),
        events: runs.iter().flat_map(stored_events).collect(),
    })
}

/// A run's observation events as the store kept them. An event this build
/// cannot read (written by a newer skein) is left out of the turn; it stays
/// in the store.
fn stored_events(run: &RunRecord) -> impl Iterator<Item = Event> + '_ {
    run.events.iter().filter_map(|event| {
        let mut event = event.clone();
        event
            .as_object_mut()?
            .insert("run".into(), serde_json::json!(run.id));
        serde_json::from_value(event).ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use skein_store::{RunId, TurnStep};

    /// A run of turn and step `at` ("TURN.STEP"), or of chain `chain`.
    fn run(id: &str, started_ms: i64, at: Option<&str>, chain: Option<&str>) -> RunRecord {
        let mut run = RunRecord::new("m", "p");
        run.id = RunId(id.into());
        run.started_ms = started_ms;
        run.turn = at.map(|at| {
            let (turn, step) = at.split_once('.').unwrap();
            TurnStep {
                turn: turn.parse().unwrap(),
                step: step.parse().unwrap(),
            }
        });
        run.relations = chain
            .map(|chain| Relation::Chain(chain.into()))
            .into_iter()
            .collect();
        run
    }

    #[test]
    fn turns_keep_their_order_when_start_times_tie() {
        // Ids sort against the turn order and every run starts in the same
        // millisecond: only the recorded turn and step can order them.
        let runs = vec![
            run("a", 5, Some("1.1"), None),
            run("b", 5, Some("1.0"), None),
            run("c", 5, Some("0.0"), None),
            run("d", 9, None, Some("x")),
            run("e", 7, None, None),
            run("f", 9, None, Some("x")),
        ];
        let ids: Vec<Vec<&str>> = group_turns(runs)
            .iter()
            .map(|g| g.iter().map(|r| r.id.as_str()).collect::<Vec<_>>())
            .collect::<Vec<_>>()
            .iter()
            .map(|g| {
                g.iter()
                    .map(|s| match *s {
                        "a" => "a",
                        "b" => "b",
                        "c" => "c",
                        "d" => "d",
                        "e" => "e",
                        _ => "f",
                    })
                    .collect()
            })
            .collect();
        assert_eq!(
            ids,
            vec![vec!["c"], vec!["b", "a"], vec!["e"], vec!["d", "f"]]
        );
    }
}
