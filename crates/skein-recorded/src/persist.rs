/*!
Loading a recorded chat back from its stored conversation: the history
from the bookmark, the source layout and persistent removals from its
settings (a builder's own system text and sources take precedence), each
turn's evidence from its runs (the first run's request and annotations, the
tools it offered, the sources it recorded, its observation events; the last
run's reply), and the reruns it produced (for provenance).

Runs are grouped into turns by their recorded turn number; runs without one
(conversations recorded by plain `skein` turns load too) by their chain,
each run outside a chain being a turn of its own.
*/

use crate::chat::{Config, RecordedChat, Stamp};
use crate::error::{RecordedError, Result};
use crate::evidence::Turn;
use crate::source::{Ablation, Source, SourceInfo, SourceKind};
use skein_conversation::Bookmark;
use skein_core::{Annotation, NodeId, RecordedSettings, Relation, Thread, Usage};
use skein_engine::Event;
use skein_store::{ConversationId, RunRecord, Store};
use std::collections::HashMap;
use std::sync::Arc;

/// The conversation holding the turn whose reply is `node` (what
/// `skein explain NODE` needs before loading the chat).
pub async fn conversation_of_node(store: &Store, node: NodeId) -> Result<ConversationId> {
    let runs = store.nonblocking().runs_producing(node).await?;
    runs.into_iter()
        .find_map(|run| run.conversation)
        .ok_or(RecordedError::NotATurn(node))
}

pub(crate) async fn load(config: Arc<Config>, id: &ConversationId) -> Result<RecordedChat> {
    let store = config
        .store
        .clone()
        .ok_or(RecordedError::NoStore("loading a recorded chat"))?;
    let cid = id.clone();
    let (conversation, history, runs, reruns) = store
        .run_blocking(move |s| {
            let conversation = s.conversation(&cid)?;
            let history = match conversation.head {
                Some(head) => s.load_thread(head)?,
                None => Thread::new(),
            };
            let runs = s.runs_of_conversation(&cid)?;
            let reruns = s.reruns_of_conversation(&cid)?;
            Ok((conversation, history, runs, reruns))
        })
        .await?;
    let damaged = |problem: String| RecordedError::NotRecorded {
        conversation: id.to_string(),
        problem,
    };
    let recorded = conversation.settings.recorded.clone().unwrap_or_default();
    let removed: Ablation = recorded.removed.iter().cloned().collect();
    let config = with_offered_tools(with_layout(config, &recorded), &runs);
    let mut loaded = Vec::new();
    for group in group_turns(runs) {
        let started = group[0].started_ms;
        let first = group[0].id.clone();
        let turn = load_turn(&store, 0, group, &removed)
            .await
            .map_err(|e| damaged(format!("the turn of run {first}: {e}")))?;
        loaded.push((started, turn));
    }
    // Turns started in the same millisecond: a later turn of a conversation
    // has a longer history. (The sort is stable, so recorded turns keep the
    // order their turn numbers gave.)
    loaded.sort_by_key(|(started, turn)| (*started, turn.thread.len()));
    let turns = loaded
        .into_iter()
        .enumerate()
        .map(|(index, (_, mut turn))| {
            turn.index = index;
            Arc::new(turn)
        })
        .collect();
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
    Ok(RecordedChat {
        config,
        bookmark: Bookmark {
            id: id.clone(),
            stored: true,
            name: conversation.name,
            origin: conversation.origin,
            settings: conversation.settings,
        },
        removed,
        history,
        turns,
        reports: HashMap::new(),
        reruns: stamps,
    })
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

/// `config` with the tools the recorded runs offered, taken by name from
/// the engine's registered tools where the builder did not give them, so
/// a rerun's tool loop can call them again.
fn with_offered_tools(config: Arc<Config>, runs: &[RunRecord]) -> Arc<Config> {
    let missing: Vec<_> =
        runs.iter()
            .flat_map(|run| run.tools.iter())
            .filter(|spec| {
                !config
                    .tools
                    .iter()
                    .any(|tool| tool.spec().name == spec.name)
            })
            .filter_map(|spec| config.engine.tool(&spec.name))
            .fold(Vec::new(), |mut tools, tool| {
                if !tools.iter().any(|known: &Arc<dyn skein_engine::Tool>| {
                    known.spec().name == tool.spec().name
                }) {
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
fn chain_of(run: &RunRecord) -> Option<&str> {
    run.relations.iter().find_map(|relation| match relation {
        Relation::Chain(id) => Some(id.as_str()),
        _ => None,
    })
}

/// Successful runs grouped by turn, in order. Runs a recorded chat wrote
/// carry their turn and step; others are grouped by chain (a run without
/// one is a turn of its own) in the order they started. (`load` settles
/// ties between turns started in the same millisecond.)
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

async fn load_turn(
    store: &Store,
    index: usize,
    runs: Vec<RunRecord>,
    removed: &Ablation,
) -> std::result::Result<Turn, String> {
    let first = runs[0].clone();
    let last = runs.last().expect("a group has a run").clone();
    let input = first.input_head.ok_or("its first run has no request")?;
    let output = last.output_head.ok_or("its last run has no reply")?;
    let api = store.nonblocking();
    let request = api.load_thread(input).await.map_err(|e| e.to_string())?;
    let thread = api.load_thread(output).await.map_err(|e| e.to_string())?;
    let mut sources: Vec<SourceInfo> = sources_of(&first).collect();
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
                    kind: SourceKind::Other,
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
        removed: removed.clone(),
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
