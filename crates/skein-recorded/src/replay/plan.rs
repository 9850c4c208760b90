//! The plan: what a replay changes in each recorded request (a [`Change`],
//! a [`PromptVersion`]), on which models, judged how; stored with the
//! replay and read back by [`plan_of`].

use crate::compare::Comparator;
use crate::error::{RecordedError, Result};
use crate::layout::Layout;
use serde::{Deserialize, Serialize};
use skein_core::provider::GenerationOptions;
use skein_core::{RunRecord, Thread, ToolSpec};
use skein_store::{ReplayRecord, StoreError};
use std::collections::{BTreeMap, HashSet};

/// What a replay changes in each recorded request; everything else is
/// re-sent byte for byte.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Change {
    /// Options set here replace the recorded ones (the rest stay).
    #[serde(default)]
    pub options: GenerationOptions,
    /// The system prompt, in place of the recorded system messages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system: Option<String>,
    /// Tools no longer offered.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub remove_tools: Vec<String>,
    /// Tools offered besides, or in place of the recorded tool of the same
    /// name (a swapped schema).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub add_tools: Vec<ToolSpec>,
    /// Sources whose tagged parts are removed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub remove_sources: Vec<String>,
    /// Sources replaced: by id, the text their first tagged text part
    /// holds instead (their other tagged parts are removed). A request
    /// without the source is re-sent as it was.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub replace_sources: BTreeMap<String, String>,
    /// A configured prompt rendered at another version: in a request that
    /// rendered this prompt, its messages are the version's, rendered with
    /// the recorded variables. A turn whose first run rendered no such
    /// prompt fails, and says so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_version: Option<PromptVersion>,
}

/// A configured prompt of the engine at one version, written `ID@VERSION`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PromptVersion {
    pub id: String,
    pub version: u32,
}

impl PromptVersion {
    pub fn new(id: impl Into<String>, version: u32) -> PromptVersion {
        PromptVersion {
            id: id.into(),
            version,
        }
    }

    /// `ID@VERSION` read ([`RecordedError::BadPromptVersion`] otherwise).
    pub fn parse(text: &str) -> Result<PromptVersion> {
        let bad = || RecordedError::BadPromptVersion(text.to_string());
        let (id, version) = text.rsplit_once('@').ok_or_else(bad)?;
        if id.is_empty() {
            return Err(bad());
        }
        let version = version.parse().map_err(|_| bad())?;
        Ok(PromptVersion::new(id, version))
    }
}

impl std::fmt::Display for PromptVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}@{}", self.id, self.version)
    }
}

/// A configured prompt's messages in a recorded request, and the messages
/// of another version to put in their place.
pub(super) struct PromptSwap {
    /// The recorded messages' positions in the request.
    pub(super) at: std::ops::Range<usize>,
    pub(super) messages: Layout,
}

impl Change {
    /// The recorded request of a turn with this change applied: its
    /// layout, tools and options.
    pub(super) fn apply(
        &self,
        request: &Thread,
        run: &RunRecord,
        prompt: Option<PromptSwap>,
    ) -> (Layout, Vec<ToolSpec>, GenerationOptions) {
        let mut layout = Layout::of(request, &run.annotations);
        if let Some(swap) = prompt {
            layout.entries.splice(swap.at, swap.messages.entries);
        }
        if !self.remove_sources.is_empty() {
            layout.remove(&self.remove_sources.iter().cloned().collect());
        }
        for (id, text) in &self.replace_sources {
            layout.replace(id, text);
        }
        if let Some(system) = &self.system {
            layout.replace_system(system);
        }
        let mut tools: Vec<ToolSpec> = run
            .tools
            .iter()
            .filter(|tool| {
                !self.remove_tools.contains(&tool.name)
                    && !self.add_tools.iter().any(|added| added.name == tool.name)
            })
            .cloned()
            .collect();
        tools.extend(self.add_tools.iter().cloned());
        let given = &self.options;
        let recorded = &run.options;
        let options = GenerationOptions {
            temperature: given.temperature.or(recorded.temperature),
            top_p: given.top_p.or(recorded.top_p),
            seed: given.seed.or(recorded.seed),
            max_tokens: given.max_tokens.or(recorded.max_tokens),
        };
        (layout, tools, options)
    }
}

/// A replay's plan: what it changes, on which model, judged how. Stored
/// with the replay, so any worker can run it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReplayPlan {
    /// The model turns are replayed on, as the worker opens it (the first
    /// candidate, when the replay compares several).
    pub model: String,
    /// Every candidate model, in order, when the replay compares several
    /// (`model` first): each turn is replayed once on each, one report
    /// for all. Empty: `model` alone.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub models: Vec<String>,
    pub change: Change,
    /// The comparators, as [`Comparator::parse`] reads them; empty for the
    /// default ([`Comparison::default_for`](crate::compare::Comparison::default_for)).
    #[serde(default)]
    pub compare: Vec<String>,
    /// The model that judges for a `judge` comparator without one of its
    /// own (a case's: a cases file never names a model). The caller's
    /// choice, like `model`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub judge: Option<String>,
    /// Tools that may run for calls the recording lacks, by name.
    #[serde(default)]
    pub live_tools: Vec<String>,
    /// Model calls a replayed turn may make.
    #[serde(default = "default_chain_limit")]
    pub chain_limit: u32,
}

fn default_chain_limit() -> u32 {
    skein_engine::DEFAULT_CHAIN_LIMIT
}

impl ReplayPlan {
    pub fn new(model: impl Into<String>) -> ReplayPlan {
        ReplayPlan {
            model: model.into(),
            models: Vec::new(),
            change: Change::default(),
            compare: Vec::new(),
            judge: None,
            live_tools: Vec::new(),
            chain_limit: default_chain_limit(),
        }
    }

    /// A plan comparing `models` (at least one; each named once): every
    /// turn is replayed on each of them, in this order.
    pub fn comparing(models: Vec<String>) -> Result<ReplayPlan> {
        let mut seen = HashSet::new();
        if let Some(twice) = models.iter().find(|model| !seen.insert(model.as_str())) {
            return Err(RecordedError::DuplicateModel(twice.clone()));
        }
        let Some(first) = models.first() else {
            return Err(RecordedError::NoModel);
        };
        let mut plan = ReplayPlan::new(first.clone());
        if models.len() > 1 {
            plan.models = models;
        }
        Ok(plan)
    }

    /// The models turns are replayed on: every candidate, or `model`
    /// alone.
    pub fn candidates(&self) -> Vec<String> {
        if self.models.is_empty() {
            vec![self.model.clone()]
        } else {
            self.models.clone()
        }
    }

    /// The model the worker opens as its judge: [`judge`], else the one
    /// a `judge:MODEL` of [`compare`] names (never a case's comparators,
    /// which name none). Two different ones are refused: one replay has
    /// one judge.
    ///
    /// [`judge`]: ReplayPlan::judge
    /// [`compare`]: ReplayPlan::compare
    pub fn judge_model(&self) -> Result<Option<String>> {
        let mut chosen = self.judge.clone();
        for comparator in self.comparators()? {
            if let Some(model) = comparator.model().map(str::to_string) {
                match &chosen {
                    Some(other) if *other != model => {
                        return Err(RecordedError::BadComparator {
                            spec: comparator.to_string(),
                            why: format!("the replay's judge is already {other}: name one"),
                        });
                    }
                    _ => chosen = Some(model),
                }
            }
        }
        Ok(chosen)
    }

    /// The comparators, read.
    pub fn comparators(&self) -> Result<Vec<Comparator>> {
        self.compare
            .iter()
            .map(|spec| Comparator::parse(spec))
            .collect()
    }
}

/// A stored replay's plan.
pub fn plan_of(record: &ReplayRecord) -> Result<ReplayPlan> {
    let settings = &record.settings;
    let strings = |key: &str| -> Vec<String> {
        settings[key]
            .as_array()
            .map(|items| {
                items
                    .iter()
                    .filter_map(|item| item.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    Ok(ReplayPlan {
        model: record.model.clone(),
        models: strings("models"),
        change: serde_json::from_value(record.change.clone()).map_err(store_json)?,
        compare: strings("compare"),
        judge: settings["judge"].as_str().map(str::to_string),
        live_tools: strings("live_tools"),
        chain_limit: settings["chain_limit"]
            .as_u64()
            .map_or_else(default_chain_limit, |limit| limit as u32),
    })
}

pub(super) fn store_json(error: serde_json::Error) -> RecordedError {
    RecordedError::Store(StoreError::Json(error))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use skein_core::Message;

    #[test]
    fn a_change_replaces_only_what_it_names() {
        let thread = Thread::from_messages([Message::system("old"), Message::user("q")]);
        let mut run = RunRecord::new("m", "p");
        run.tools = vec![
            ToolSpec::new("a", "A", json!({"type": "object"})),
            ToolSpec::new("b", "B", json!({"type": "object"})),
        ];
        run.options.temperature = Some(0.5);
        run.options.seed = Some(3);
        let change = Change {
            system: Some("new".into()),
            remove_tools: vec!["a".into()],
            add_tools: vec![ToolSpec::new("b", "B2", json!({"type": "object"}))],
            options: GenerationOptions {
                temperature: Some(0.0),
                ..GenerationOptions::default()
            },
            ..Change::default()
        };
        let (layout, tools, options) = change.apply(&thread, &run, None);
        assert_eq!(layout.entries[0].message, Message::system("new"));
        assert_eq!(layout.entries[1].message, Message::user("q"));
        assert_eq!(tools.len(), 1);
        assert_eq!(tools[0].description, "B2");
        assert_eq!((options.temperature, options.seed), (Some(0.0), Some(3)));
        let kept = Change::default().apply(&thread, &run, None);
        assert_eq!(kept.0, Layout::of(&thread, &run.annotations));
        assert_eq!(kept.1, run.tools);
    }
}
