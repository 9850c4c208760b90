/*!
What a replay is, in words a reviewer reads without opening another
window: the model change (`smollm2 → openai:gpt-4o-mini`, the original
side named as the original turns' runs were: their profile, else their
model), the rest of the change (`system prompt replaced`, `tool weather
removed`), the turns selected with the conversations' names, and where it
stands (running, stopped, finished). [`ReplayOverview`] is a listing's
row (`skein replays`, the web workbench's list); [`ReplayReport`] carries
the same words. Texts come from the graph (replay rows keep node ids):
a question whose message was erased reads `[erased]`.

[`ReplayReport`]: super::ReplayReport
*/

use crate::error::Result;
use serde::Serialize;
use skein_core::{ConversationId, NodeId, ReplayId, Role, RunRecord, RunStatus, now_ms};
use skein_store::{
    ListedReplay, NewReplayTurn, ReplayRecord, ReplayState, ReplayTotals, ReplayTurn, Store,
    StoreError,
};
use std::collections::{BTreeSet, HashMap};

use super::{Change, Selection};

/// The first turns whose runs name the models a replay replays from.
const SAMPLE: usize = 8;

/// Conversations a selection's words name before `+N more`.
const NAMES_SHOWN: usize = 3;

/// A replay as a listing shows it: its record's facts, where its turns
/// stand, and what it changed and selected in words.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ReplayOverview {
    pub replay: ReplayId,
    pub model: String,
    /// Every candidate model (`model` alone, or those it compares).
    pub models: Vec<String>,
    pub created_ms: i64,
    /// Turn rows: the turns selected, once per candidate model.
    pub selected: u64,
    pub totals: ReplayTotals,
    pub state: ReplayState,
    /// The models the original turns ran on (of a sample of them).
    pub original_models: Vec<String>,
    /// What changed, in words, the model change first
    /// (`describe_change`).
    pub changes: Vec<String>,
    /// Which turns, in words, conversations by name.
    pub selection_text: String,
    pub selection: serde_json::Value,
    pub change: serde_json::Value,
}

impl ReplayOverview {
    /// The overview of a listed replay (a blocking read; see
    /// [`ReplayOverview::read_page`]).
    pub fn read(store: &Store, listed: ListedReplay) -> Result<ReplayOverview> {
        let mut page = ReplayOverview::read_page(store, vec![listed])?;
        Ok(page.remove(0))
    }

    /// The overviews of a page of listed replays, in its order (a blocking
    /// read of one statement however many they are: the conversations
    /// their selections name; the models replayed from are kept with each
    /// record, and read from its first turns' runs only for a replay
    /// stored before they were).
    pub fn read_page(store: &Store, listed: Vec<ListedReplay>) -> Result<Vec<ReplayOverview>> {
        let mut names = Names::default();
        let named: Vec<ConversationId> = listed
            .iter()
            .flat_map(|listed| named_conversations(&listed.record.selection))
            .collect();
        names.read_all(store, &named)?;
        listed
            .into_iter()
            .map(|listed| {
                let originals = Originals::of_record(store, &listed.record)?;
                ReplayOverview::of(store, listed.record, listed.totals, &originals, &mut names)
            })
            .collect()
    }

    fn of(
        store: &Store,
        record: ReplayRecord,
        totals: ReplayTotals,
        originals: &Originals,
        names: &mut Names,
    ) -> Result<ReplayOverview> {
        Ok(ReplayOverview {
            changes: describe_change(&record, originals),
            selection_text: selection_text(store, &record.selection, names)?,
            state: totals.state(now_ms()),
            original_models: originals.models.clone(),
            models: candidates(&record),
            replay: record.id,
            model: record.model,
            created_ms: record.created_ms,
            selected: record.turns,
            totals,
            selection: record.selection,
            change: record.change,
        })
    }

    /// `A → B · system prompt replaced`: every change, joined.
    pub fn change_line(&self) -> String {
        self.changes.join(" · ")
    }
}

/// What the original turns of a replay ran on, from a sample of them.
#[derive(Clone, Debug, Default)]
pub(crate) struct Originals {
    /// Distinct model names, in the order first met.
    pub models: Vec<String>,
    /// The tools the original turns offered, by name.
    pub tools: BTreeSet<String>,
}

impl Originals {
    /// What the first selected turns ran on, as a replay is started (the
    /// succeeded run that gave each one's final answer), to keep with its
    /// record.
    pub(crate) async fn sampled(store: &Store, turns: &[NewReplayTurn]) -> Result<Originals> {
        let mut originals = Originals::default();
        for turn in turns.iter().take(SAMPLE) {
            let runs = match store.nonblocking().runs_producing(turn.turn_node).await {
                Ok(runs) => runs,
                Err(StoreError::NodeNotFound(_)) => continue,
                Err(error) => return Err(error.into()),
            };
            if let Some(run) = runs.iter().find(|run| run.status == RunStatus::Succeeded) {
                originals.add(run);
            }
        }
        Ok(originals)
    }

    /// A stored replay's: kept with its record (`original_models`,
    /// `original_tools` in its settings), else read from its first turns'
    /// runs (a replay stored before they were kept).
    pub(crate) fn of_record(store: &Store, record: &ReplayRecord) -> Result<Originals> {
        let strings = |key: &str| -> Option<Vec<String>> {
            serde_json::from_value(record.settings.get(key)?.clone()).ok()
        };
        if let Some(models) = strings("original_models") {
            return Ok(Originals {
                models,
                tools: strings("original_tools")
                    .unwrap_or_default()
                    .into_iter()
                    .collect(),
            });
        }
        let mut originals = Originals::default();
        for turn in store.replay_turns(&record.id, None, SAMPLE)? {
            if let Some(run) = original_run(store, &turn)? {
                originals.add(&run);
            }
        }
        Ok(originals)
    }

    /// A run's model (its profile, else its model) and tools.
    fn add(&mut self, run: &RunRecord) {
        let name = run.profile.clone().unwrap_or(run.model.clone());
        if !self.models.contains(&name) {
            self.models.push(name);
        }
        self.tools
            .extend(run.tools.iter().map(|tool| tool.name.clone()));
    }
}

fn original_run(store: &Store, turn: &ReplayTurn) -> Result<Option<RunRecord>> {
    let recorded: Option<Vec<skein_core::RunId>> = turn
        .detail
        .get("original_runs")
        .and_then(|runs| serde_json::from_value(runs.clone()).ok());
    if let Some(first) = recorded.as_ref().and_then(|runs| runs.first()) {
        match store.run_record(first) {
            Ok(run) => return Ok(Some(run)),
            Err(StoreError::RunNotFound(_)) => {}
            Err(error) => return Err(error.into()),
        }
    }
    match store.runs_producing(turn.turn_node) {
        Ok(runs) => Ok(runs
            .into_iter()
            .find(|run| run.status == RunStatus::Succeeded)),
        Err(StoreError::NodeNotFound(_)) => Ok(None),
        Err(error) => Err(error.into()),
    }
}

/// The candidate models of a stored replay: those it compares (its
/// settings' `models`), or its one model.
pub(crate) fn candidates(record: &ReplayRecord) -> Vec<String> {
    let compared: Vec<String> = record.settings["models"]
        .as_array()
        .map(|models| {
            models
                .iter()
                .filter_map(|model| model.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    match compared.is_empty() {
        true => vec![record.model.clone()],
        false => compared,
    }
}

/// What a replay changed, in words: the model change first
/// (`smollm2 → openai:gpt-4o-mini`, `echo (model unchanged)`, or `on B`
/// when the originals' models are unknown), then each other change
/// (`temperature 0.2`, `system prompt replaced`, `prompt brief at version
/// 2`, `tool weather removed`, `tool lookup added`, `tool lookup swapped`,
/// `source hotel removed`, `source hotel replaced`).
pub(crate) fn describe_change(record: &ReplayRecord, originals: &Originals) -> Vec<String> {
    let models = candidates(record);
    let compared;
    let target = match models.as_slice() {
        [_, _, ..] => {
            compared = format!("{} models: {}", models.len(), models.join(", "));
            &compared
        }
        _ => &record.model,
    };
    let mut out = vec![match originals.models.as_slice() {
        [] => format!("on {target}"),
        [only] if only == target => format!("{target} (model unchanged)"),
        models => format!("{} → {target}", models.join(", ")),
    }];
    let Ok(change) = serde_json::from_value::<Change>(record.change.clone()) else {
        return out;
    };
    let options = &change.options;
    if let Some(t) = options.temperature {
        out.push(format!("temperature {t}"));
    }
    if let Some(p) = options.top_p {
        out.push(format!("top_p {p}"));
    }
    if let Some(seed) = options.seed {
        out.push(format!("seed {seed}"));
    }
    if let Some(n) = options.max_tokens {
        out.push(format!("max tokens {n}"));
    }
    if change.system.is_some() {
        out.push("system prompt replaced".to_string());
    }
    if let Some(version) = &change.prompt_version {
        out.push(format!(
            "prompt {} at version {}",
            version.id, version.version
        ));
    }
    for name in &change.remove_tools {
        out.push(format!("tool {name} removed"));
    }
    for tool in &change.add_tools {
        let how = match originals.tools.contains(&tool.name) {
            true => "swapped",
            false => "added",
        };
        out.push(format!("tool {} {how}", tool.name));
    }
    for id in &change.remove_sources {
        out.push(format!("source {id} removed"));
    }
    for id in change.replace_sources.keys() {
        out.push(format!("source {id} replaced"));
    }
    out
}

/// The conversations a selection names (its conversations and families),
/// as many as its words show.
fn named_conversations(selection: &serde_json::Value) -> Vec<ConversationId> {
    let selection: Selection = serde_json::from_value(selection.clone()).unwrap_or_default();
    selection
        .conversations
        .iter()
        .take(NAMES_SHOWN)
        .chain(selection.families.iter().take(NAMES_SHOWN))
        .cloned()
        .collect()
}

/// Conversations' names (else titles), read once each.
#[derive(Default)]
pub(crate) struct Names(HashMap<ConversationId, Option<String>>);

impl Names {
    /// Read these conversations' names in one statement (a deleted one
    /// has none).
    pub(crate) fn read_all(&mut self, store: &Store, ids: &[ConversationId]) -> Result<()> {
        let wanted: Vec<ConversationId> = ids
            .iter()
            .filter(|id| !self.0.contains_key(id))
            .cloned()
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        if wanted.is_empty() {
            return Ok(());
        }
        for record in store.conversations_by_ids(&wanted)? {
            self.0
                .insert(record.id.clone(), record.label().map(str::to_string));
        }
        for id in wanted {
            self.0.entry(id).or_insert(None);
        }
        Ok(())
    }

    /// The conversation's name, else its title; `None` without either, or
    /// once it is deleted.
    pub(crate) fn of(&mut self, store: &Store, id: &ConversationId) -> Result<Option<String>> {
        if let Some(known) = self.0.get(id) {
            return Ok(known.clone());
        }
        let name = match store.conversation(id) {
            Ok(record) => record.label().map(str::to_string),
            Err(StoreError::ConversationNotFound(_)) => None,
            Err(error) => return Err(error.into()),
        };
        self.0.insert(id.clone(), name.clone());
        Ok(name)
    }

    /// Its name or title (quoted when it has spaces, as a title does),
    /// else its short id.
    fn shown(&mut self, store: &Store, id: &ConversationId) -> Result<String> {
        Ok(match self.of(store, id)? {
            Some(name) if name.contains(char::is_whitespace) => format!("\"{name}\""),
            Some(name) => name,
            None => id.short().to_string(),
        })
    }
}

/// Which turns a selection took, in words: `conversation support-bot ·
/// family triage · 3 turns · label regress · 5 cases · matching "refund" ·
/// client app-1 · since 2026-11-01 · until 2026-12-01`.
pub(crate) fn selection_text(
    store: &Store,
    selection: &serde_json::Value,
    names: &mut Names,
) -> Result<String> {
    let selection: Selection = serde_json::from_value(selection.clone()).unwrap_or_default();
    let mut parts = Vec::new();
    for (ids, one) in [
        (&selection.conversations, "conversation"),
        (&selection.families, "family"),
    ] {
        if ids.is_empty() {
            continue;
        }
        let mut shown: Vec<String> = Vec::new();
        for id in ids.iter().take(NAMES_SHOWN) {
            shown.push(names.shown(store, id)?);
        }
        if ids.len() > NAMES_SHOWN {
            shown.push(format!("+{} more", ids.len() - NAMES_SHOWN));
        }
        let noun = match (ids.len(), one) {
            (1, _) => one.to_string(),
            (_, "family") => "families".to_string(),
            _ => format!("{one}s"),
        };
        parts.push(format!("{noun} {}", shown.join(", ")));
    }
    if !selection.turns.is_empty() {
        parts.push(plural(selection.turns.len(), "turn"));
    }
    if !selection.labels.is_empty() {
        let noun = if selection.labels.len() == 1 {
            "label"
        } else {
            "labels"
        };
        parts.push(format!("{noun} {}", selection.labels.join(", ")));
    }
    if !selection.cases.is_empty() {
        parts.push(plural(selection.cases.len(), "case"));
    }
    if let Some(search) = &selection.search {
        parts.push(format!("matching \"{search}\""));
    }
    if !selection.clients.is_empty() {
        parts.push(format!("client {}", selection.clients.join(", ")));
    }
    if let Some(since) = selection.since_ms {
        parts.push(format!("since {}", day(since)));
    }
    if let Some(until) = selection.until_ms {
        parts.push(format!("until {}", day(until)));
    }
    Ok(match parts.is_empty() {
        true => "every turn".to_string(),
        false => parts.join(" · "),
    })
}

fn plural(n: usize, one: &str) -> String {
    match n {
        1 => format!("1 {one}"),
        n => format!("{n} {one}s"),
    }
}

/// A Unix time in milliseconds as its UTC day, `2026-11-01`.
fn day(ms: i64) -> String {
    let (y, m, d) = skein_core::calendar::civil_from_days(ms.div_euclid(86_400_000));
    format!("{y:04}-{m:02}-{d:02}")
}

/// The question a turn re-sent: the last user message of its request (the
/// message it answered, or the nearest user message above it), read from
/// the graph; `[erased]` once erased, `None` when the request holds no
/// user message or its node is gone.
pub(crate) fn question(store: &Store, request: NodeId) -> Result<Option<String>> {
    let mut next = Some(request);
    while let Some(id) = next {
        let node = match store.node(id) {
            Ok(node) => node,
            Err(StoreError::NodeNotFound(_)) => return Ok(None),
            Err(error) => return Err(error.into()),
        };
        if node.message.role == Role::User {
            let text = node.message.joined_text();
            return Ok(Some(if node.message.is_erased() && text.is_empty() {
                "[erased]".to_string()
            } else {
                text
            }));
        }
        next = node.parent;
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_day_is_the_utc_calendar_day() {
        assert_eq!(day(0), "1970-01-01");
        assert_eq!(day(1_793_491_200_000), "2026-11-01");
        assert_eq!(day(1_793_577_599_999), "2026-11-01");
        assert_eq!(day(951_782_400_000), "2000-02-29");
    }

    fn record(model: &str, change: serde_json::Value) -> ReplayRecord {
        ReplayRecord {
            id: ReplayId::random(),
            selection: serde_json::json!({}),
            change,
            model: model.into(),
            settings: serde_json::json!({}),
            turns: 1,
            created_ms: 0,
        }
    }

    #[test]
    fn a_change_is_said_in_words_the_model_first() {
        let originals = Originals {
            models: vec!["smollm2".into()],
            tools: ["lookup".to_string()].into(),
        };
        let change = serde_json::json!({
            "options": {"temperature": 0.2, "seed": 7},
            "system": "Be terse.",
            "remove_tools": ["weather"],
            "add_tools": [
                {"name": "lookup", "description": "d", "input_schema": {"type": "object"}},
                {"name": "clock", "description": "d", "input_schema": {"type": "object"}}
            ],
            "remove_sources": ["notes"],
            "replace_sources": {"hotel": "The Ritz."},
            "prompt_version": {"id": "brief", "version": 2}
        });
        assert_eq!(
            describe_change(&record("openai:gpt-4o-mini", change), &originals),
            [
                "smollm2 → openai:gpt-4o-mini",
                "temperature 0.2",
                "seed 7",
                "system prompt replaced",
                "prompt brief at version 2",
                "tool weather removed",
                "tool lookup swapped",
                "tool clock added",
                "source notes removed",
                "source hotel replaced",
            ]
        );
        let same = describe_change(&record("smollm2", serde_json::json!({})), &originals);
        assert_eq!(same, ["smollm2 (model unchanged)"]);
        let unknown = describe_change(
            &record("echo", serde_json::json!({})),
            &Originals::default(),
        );
        assert_eq!(unknown, ["on echo"]);
    }
}
