/*!
Replays from the page, through `skein_recorded::replay` exactly as `skein
replay` runs them: the list of replays, one replay's report
([`ReplayReport`], the type the command line and Python print), its
progress while it runs, starting one over a selection with a change (model
and options, system prompt, a configured prompt's version, tools removed or
added, sources removed or replaced) and
resuming one whose worker is gone.

A replay started here runs on a task of this server, holding one of its
turn permits until every turn is finished; the page polls its progress.
Tool calls are answered from the recording only: no tool runs live from
the page, so a call the recording lacks stops its turn as diverged. If the
server stops, the replay's rows say where it stood, and `skein replay
--resume ID` (or the page's resume) finishes it.
*/

use super::actions::{
    NAME_MAX_CHARS, TEXT_MAX_CHARS, check_length, check_options, chosen_model, turn_permit,
};
use super::api::{ApiError, Shared, limit};
use super::embedder::{Writes, embedder, fallback};
use crate::AppState;
use axum::Json;
use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{Path, Query};
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use skein::Model;
use skein::core::ToolSpec;
use skein::core::provider::GenerationOptions;
use skein::recorded::RecordedError;
use skein::recorded::replay::{
    Change, PromptVersion, ReplayOverview, ReplayPlan, ReplayReport, Replayer, Selection, plan_of,
};
use skein::store::{ListedReplay, ReplayId, ReplayPosition, ReplayRecord, ReplayTotals, Store};
use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use tokio::sync::OwnedSemaphorePermit;

/// How many ids (conversations, families, turns, labels, clients, tools,
/// sources, comparators) one field of a replay's body may list.
const LIST_MAX: usize = 1_000;

/// A replay in the list: its overview (the model change and the rest of
/// the change in words, the turns selected with the conversations' names,
/// where it stands), as `skein replays` lists it.
#[derive(Debug, Serialize)]
pub struct ReplaySummary {
    pub id: ReplayId,
    /// The 12-digit prefix the CLI prints.
    pub short: String,
    #[serde(flatten)]
    pub overview: ReplayOverview,
    /// A worker of this server is replaying it now.
    pub working: bool,
    /// Said when this server started or resumed it: it compares with the
    /// lexical embedder, since MiniLM is not on the machine (see
    /// `web::embedder`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub embedder_fallback: Option<String>,
}

/// Replays a page lists unless asked for fewer, and at most.
const PAGE_DEFAULT: usize = 100;
const PAGE_MAX: usize = 1_000;

/// A page of replays.
#[derive(Debug, Serialize)]
pub struct ReplayList {
    pub replays: Vec<ReplaySummary>,
    pub limit: usize,
    /// More replays follow this page.
    pub truncated: bool,
    /// The address of the following page.
    pub next: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    limit: Option<usize>,
    /// Where the previous page ended (its `next` says it).
    after: Option<String>,
}

/// `GET /api/replays?limit=N&after=CURSOR`: replays, newest first, a page
/// at a time with their totals (two statements a page, whatever its size);
/// `next` is the address of the following page.
pub async fn list(
    state: Shared,
    query: Result<Query<ListQuery>, QueryRejection>,
) -> Result<Json<ReplayList>, ApiError> {
    let Query(query) = query?;
    let limit = limit(query.limit, PAGE_DEFAULT, PAGE_MAX)?;
    let after = query.after.as_deref().map(parse_cursor).transpose()?;
    let mut listed = state
        .reads
        .nonblocking()
        .list_replays(after.as_ref(), limit + 1)
        .await?;
    let truncated = listed.len() > limit;
    listed.truncate(limit);
    let next = listed.last().filter(|_| truncated).map(|last| {
        format!(
            "/api/replays?limit={limit}&after={}",
            cursor(&last.position())
        )
    });
    Ok(Json(ReplayList {
        replays: summaries(&state, &state.reads, listed).await?,
        limit,
        truncated,
        next,
    }))
}

/// A place in the listing as a query value: `CREATED.ID`.
fn cursor(position: &ReplayPosition) -> String {
    format!("{}.{}", position.created_ms, position.id)
}

/// The inverse of [`cursor`].
fn parse_cursor(text: &str) -> Result<ReplayPosition, ApiError> {
    text.split_once('.')
        .and_then(|(created, id)| {
            Some(ReplayPosition {
                created_ms: created.parse().ok()?,
                id: ReplayId(id.to_string()),
            })
        })
        .filter(|position| {
            !position.id.as_str().is_empty()
                && position
                    .id
                    .as_str()
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric())
        })
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::BAD_REQUEST,
                format!(
                    "`after={text}` is not a place in the listing: use the `next` address of \
                     the previous page"
                ),
            )
        })
}

/// The summaries of `listed`, read from `store` (off the runtime: one
/// statement however many, for the conversations their selections name).
async fn summaries(
    state: &AppState,
    store: &Store,
    listed: Vec<ListedReplay>,
) -> Result<Vec<ReplaySummary>, ApiError> {
    let store = store.clone();
    let overviews = tokio::task::spawn_blocking(move || ReplayOverview::read_page(&store, listed))
        .await
        .map_err(|error| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, error.to_string()))?
        .map_err(recorded_error)?;
    Ok(overviews
        .into_iter()
        .map(|overview| ReplaySummary {
            id: overview.replay.clone(),
            short: overview.replay.short().to_string(),
            working: state.working(&overview.replay),
            overview,
            embedder_fallback: None,
        })
        .collect())
}

/// The summary of one replay, as it stands now in `store`.
async fn summary(
    state: &AppState,
    store: &Store,
    record: ReplayRecord,
    totals: ReplayTotals,
) -> Result<ReplaySummary, ApiError> {
    let listed = ListedReplay { record, totals };
    let mut one = summaries(state, store, vec![listed]).await?;
    Ok(one.remove(0))
}

/// What `/api/replays/{id}` answers: the report, worst turns first, and
/// whether a worker of this server is on it.
#[derive(Debug, Serialize)]
pub struct ReplayPage {
    #[serde(flatten)]
    pub report: ReplayReport,
    pub working: bool,
    /// When this server compares with the lexical embedder (MiniLM is not
    /// on the machine) and the replay's comparators embed: the note saying
    /// so, shown on the page.
    pub embedder_fallback: Option<String>,
}

/// `GET /api/replays/{id}`: one replay's report (any unique prefix of its
/// id), priced at the server's prices.
pub async fn report(
    state: Shared,
    Path(prefix): Path<String>,
) -> Result<Json<ReplayPage>, ApiError> {
    let id = state.reads.nonblocking().resolve_replay(&prefix).await?;
    let record = state.reads.nonblocking().replay(&id).await?;
    // A plan this build cannot read (it cannot be resumed either) still
    // has a report to show.
    let embedder_fallback = match plan_of(&record).is_ok_and(|plan| embeds(&plan)) {
        true => fallback(&state).await?,
        false => None,
    };
    let (reads, prices, read) = (state.reads.clone(), state.prices.clone(), id.clone());
    let report = tokio::task::spawn_blocking(move || ReplayReport::read(&reads, &read, &prices))
        .await
        .map_err(|error| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, error.to_string()))?
        .map_err(recorded_error)?;
    Ok(Json(ReplayPage {
        report: report.worst_first(),
        working: state.working(&id),
        embedder_fallback,
    }))
}

/// Whether `plan` compares by embedding: its default does (after the
/// specifics), and so does a named `embedding` comparator.
fn embeds(plan: &ReplayPlan) -> bool {
    plan.compare.is_empty()
        || plan.comparators().is_ok_and(|comparators| {
            comparators
                .iter()
                .any(|comparator| comparator.name() == "embedding")
        })
}

/// `GET /api/replays/{id}/progress`: where its turns stand, cheaply, for a
/// page polling a running replay.
pub async fn progress(
    state: Shared,
    Path(prefix): Path<String>,
) -> Result<Json<ReplaySummary>, ApiError> {
    let store = state.reads.nonblocking();
    let id = store.resolve_replay(&prefix).await?;
    let record = store.replay(&id).await?;
    let totals = store.replay_totals(&id).await?;
    Ok(Json(summary(&state, &state.reads, record, totals).await?))
}

/// What starting a replay asks for: the turns (at least one source or
/// filter, as `skein replay` takes them) and the change.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StartBody {
    /// The model to replay on (default: the server's).
    model: Option<String>,
    /// The candidate models to compare (in place of `model`): each turn
    /// replayed once on each, one report.
    #[serde(default)]
    models: Vec<String>,
    #[serde(default)]
    conversations: Vec<String>,
    #[serde(default)]
    families: Vec<String>,
    /// Turns by their final answer's node (any unique prefix).
    #[serde(default)]
    turns: Vec<String>,
    #[serde(default)]
    labels: Vec<String>,
    /// Cases, as the file `skein label export` wrote holds them (JSONL):
    /// stored here first, as `skein replay --cases` stores them (they
    /// choose nothing: see docs/replay.md), then selected, each judged by
    /// its own comparators unless `compare` names others.
    cases: Option<String>,
    search: Option<String>,
    since_ms: Option<i64>,
    until_ms: Option<i64>,
    #[serde(default)]
    clients: Vec<String>,
    /// In place of the recorded system messages.
    system: Option<String>,
    /// Set options replace the recorded ones.
    options: Option<GenerationOptions>,
    #[serde(default)]
    remove_tools: Vec<String>,
    #[serde(default)]
    add_tools: Vec<ToolSpec>,
    /// Sources whose tagged parts are removed.
    #[serde(default)]
    ignore: Vec<String>,
    /// Sources replaced: by id, the text their first tagged text part
    /// holds instead.
    #[serde(default)]
    replace_sources: BTreeMap<String, String>,
    /// A configured prompt rendered at another version, `ID@VERSION`.
    prompt_version: Option<String>,
    /// Comparators, as `--compare` takes them (default: specifics, then
    /// embedding).
    #[serde(default)]
    compare: Vec<String>,
}

impl StartBody {
    /// Lengths checked: every list and every name bounded.
    fn check(&self) -> Result<(), ApiError> {
        check_length("model", self.model.as_deref(), NAME_MAX_CHARS)?;
        check_length("search", self.search.as_deref(), NAME_MAX_CHARS)?;
        check_length("system", self.system.as_deref(), TEXT_MAX_CHARS)?;
        check_length(
            "prompt_version",
            self.prompt_version.as_deref(),
            NAME_MAX_CHARS,
        )?;
        if self.replace_sources.len() > LIST_MAX {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                format!("`replace_sources` names more than {LIST_MAX} sources"),
            ));
        }
        for (id, text) in &self.replace_sources {
            if id.is_empty() {
                return Err(ApiError::new(
                    StatusCode::BAD_REQUEST,
                    "`replace_sources` names a source with an empty id: give each source's id",
                ));
            }
            check_length("replace_sources", Some(id), NAME_MAX_CHARS)?;
            check_length("replace_sources", Some(text), TEXT_MAX_CHARS)?;
        }
        let lists = [
            ("conversations", &self.conversations),
            ("families", &self.families),
            ("turns", &self.turns),
            ("labels", &self.labels),
            ("clients", &self.clients),
            ("remove_tools", &self.remove_tools),
            ("ignore", &self.ignore),
            ("compare", &self.compare),
            ("models", &self.models),
        ];
        for (field, list) in lists {
            if list.len() > LIST_MAX {
                return Err(ApiError::new(
                    StatusCode::BAD_REQUEST,
                    format!("`{field}` lists more than {LIST_MAX} items"),
                ));
            }
            for item in list {
                check_length(field, Some(item), NAME_MAX_CHARS)?;
            }
        }
        if self.add_tools.len() > LIST_MAX {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                format!("`add_tools` lists more than {LIST_MAX} tools"),
            ));
        }
        for (at, tool) in self.add_tools.iter().enumerate() {
            check_length("add_tools", Some(&tool.name), NAME_MAX_CHARS)?;
            tool.check().map_err(|problem| {
                ApiError::new(
                    StatusCode::BAD_REQUEST,
                    format!("`add_tools[{at}]` cannot be offered: {problem}"),
                )
            })?;
        }
        if let Some(options) = &self.options {
            check_options(options)?;
        }
        Ok(())
    }

    /// The plan: the models' names, the change, the comparators.
    fn plan(&self, models: Vec<String>) -> Result<ReplayPlan, ApiError> {
        let mut change = Change::default();
        change.options = self.options.clone().unwrap_or_default();
        change.system = self.system.clone();
        change.remove_tools = self.remove_tools.clone();
        change.add_tools = self.add_tools.clone();
        change.remove_sources = self.ignore.clone();
        change.replace_sources = self.replace_sources.clone();
        change.prompt_version = self
            .prompt_version
            .as_deref()
            .filter(|given| !given.trim().is_empty())
            .map(PromptVersion::parse)
            .transpose()
            .map_err(recorded_error)?;
        let mut plan = ReplayPlan::comparing(models).map_err(recorded_error)?;
        plan.change = change;
        plan.compare = self.compare.clone();
        plan.comparators().map_err(recorded_error)?;
        Ok(plan)
    }

    /// The turns, every id resolved (404 for one that matches nothing).
    async fn selection(&self, state: &AppState) -> Result<Selection, ApiError> {
        let store = state.store.nonblocking();
        let mut selection = Selection::new();
        for given in &self.conversations {
            selection = selection.conversation(store.resolve_conversation(given).await?);
        }
        for given in &self.families {
            selection = selection.family(store.resolve_conversation(given).await?);
        }
        for given in &self.turns {
            selection = selection.turn(store.resolve_node(given).await?);
        }
        for name in &self.labels {
            selection = selection.label(name.clone());
        }
        if let Some(cases) = self.cases.as_deref().filter(|text| !text.trim().is_empty()) {
            let imported = skein::recorded::cases::import(
                &state.store,
                std::io::Cursor::new(cases.as_bytes()),
                skein::store::DEFAULT_IMPORT_LINE_LIMIT,
            )
            .await
            .map_err(recorded_error)?;
            for case in imported {
                selection = selection.case(case);
            }
        }
        if let Some(text) = self
            .search
            .as_deref()
            .filter(|text| !text.trim().is_empty())
        {
            selection = selection.search(text.to_string());
        }
        selection = selection.between(self.since_ms, self.until_ms);
        for name in &self.clients {
            selection = selection.client(name.clone());
        }
        if selection.is_empty() {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                "say which turns to replay: `conversations`, `families`, `turns`, `labels`, \
                 `cases`, or a filter over every conversation (`search`, `since_ms`, `until_ms`, \
                 `clients`)",
            ));
        }
        Ok(selection)
    }
}

/// `POST /api/replays`: store a replay of the selection with the change
/// and start replaying it here (202, with its id: the page polls its
/// progress).
pub async fn start(
    state: Shared,
    body: Result<Json<StartBody>, JsonRejection>,
) -> Result<(StatusCode, Json<ReplaySummary>), ApiError> {
    let Json(body) = body?;
    body.check()?;
    let permit = turn_permit(&state)?;
    let (model, names) = match (body.model.as_deref(), body.models.as_slice()) {
        (Some(_), [_, ..]) => {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                "give `model` (one model) or `models` (the candidates to compare), not both",
            ));
        }
        (None, [first, ..]) => (model_named(&state, first)?, body.models.clone()),
        (Some(name), []) => (model_named(&state, name)?, vec![name.to_string()]),
        (None, []) => (
            state.models.open(None).map_err(bad_model)?,
            vec![state.models.default_name()],
        ),
    };
    let plan = body.plan(names)?;
    let selection = body.selection(&state).await?;
    let (replayer, embedder_fallback) = replayer(&state, model, &plan).await?;
    let id = replayer
        .start(&selection, &plan)
        .await
        .map_err(recorded_error)?;
    run(&state, replayer, id.clone(), permit);
    let store = state.store.nonblocking();
    let record = store.replay(&id).await?;
    let totals = store.replay_totals(&id).await?;
    let mut summary = summary(&state, &state.store, record, totals).await?;
    summary.embedder_fallback = embedder_fallback;
    Ok((StatusCode::ACCEPTED, Json(summary)))
}

/// `POST /api/replays/{id}/resume`: replay the turns of an unfinished
/// replay that no worker holds (its worker stopped), as `skein replay
/// --resume` does; 409 when this server is on it already.
pub async fn resume(
    state: Shared,
    Path(prefix): Path<String>,
) -> Result<(StatusCode, Json<ReplaySummary>), ApiError> {
    let store = state.store.nonblocking();
    let id = store.resolve_replay(&prefix).await?;
    if state.working(&id) {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "this server is replaying it already: watch its progress",
        ));
    }
    let record = store.replay(&id).await?;
    let totals = store.replay_totals(&id).await?;
    if totals.finished() {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "every turn of this replay is finished: there is nothing to resume",
        ));
    }
    let permit = turn_permit(&state)?;
    let plan = plan_of(&record).map_err(recorded_error)?;
    let model = model_named(&state, &plan.model)?;
    let (replayer, embedder_fallback) = replayer(&state, model, &plan).await?;
    run(&state, replayer, id, permit);
    let mut summary = summary(&state, &state.store, record, totals).await?;
    summary.embedder_fallback = embedder_fallback;
    Ok((StatusCode::ACCEPTED, Json(summary)))
}

/// The model `name` names, as the page's other actions choose models: only
/// one the server offers (see [`chosen_model`]), for a replay started here
/// and for the model and judge of one resumed here alike.
fn model_named(state: &AppState, name: &str) -> Result<Model, ApiError> {
    match chosen_model(state, Some(name))? {
        Some(model) => Ok(model),
        None => state.models.open(Some(name)).map_err(bad_model),
    }
}

fn bad_model(problem: skein::SurfaceError) -> ApiError {
    ApiError::new(StatusCode::BAD_REQUEST, format!("{problem:#}"))
}

/// A worker for `plan` on `model` (and the other candidates it compares):
/// the server's embedder (with the note that it is the lexical fallback,
/// when it is and the plan embeds), and a judge's model when a comparator
/// names one (chosen as the page chooses models).
async fn replayer(
    state: &AppState,
    model: Model,
    plan: &ReplayPlan,
) -> Result<(Replayer, Option<String>), ApiError> {
    let comparing = embedder(state, Writes::IfAllowed).await?;
    let fallback = comparing.fallback.filter(|_| embeds(plan));
    let mut replayer = Replayer::new(&state.store, model).embedder(comparing.embedder);
    for name in plan
        .candidates()
        .into_iter()
        .filter(|name| *name != plan.model)
    {
        let candidate = model_named(state, &name)?;
        replayer = replayer.candidate(name, candidate);
    }
    if let Some(judge) = plan.judge_model().map_err(recorded_error)? {
        replayer = replayer.judge(model_named(state, &judge)?);
    }
    Ok((replayer, fallback))
}

/// Replay `id` on a task of this server until every turn is finished,
/// holding `permit` meanwhile.
fn run(state: &Arc<AppState>, replayer: Replayer, id: ReplayId, permit: OwnedSemaphorePermit) {
    let working = Working::on(state, id.clone());
    // The worker's future is not `Send` (its turns run concurrently on
    // borrowed state), so it runs on a blocking thread of its own, driven
    // by this server's runtime.
    let runtime = tokio::runtime::Handle::current();
    tokio::task::spawn_blocking(move || {
        let _permit = permit;
        let _working = working;
        if let Err(error) = runtime.block_on(replayer.run(&id, |_| {})) {
            tracing::warn!(
                %error,
                replay = %id,
                "web view: a replay stopped; resume it from its page or with `skein replay --resume`"
            );
        }
    });
}

/// The mark that a worker of this server is on a replay, taken off when
/// the worker ends however it ends.
struct Working {
    state: Arc<AppState>,
    id: ReplayId,
}

impl Working {
    fn on(state: &Arc<AppState>, id: ReplayId) -> Working {
        state.replaying().insert(id.clone());
        Working {
            state: state.clone(),
            id,
        }
    }
}

impl Drop for Working {
    fn drop(&mut self) {
        self.state.replaying().remove(&self.id);
    }
}

impl AppState {
    /// The replays this server's workers are on.
    fn replaying(&self) -> std::sync::MutexGuard<'_, HashSet<ReplayId>> {
        self.replaying
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn working(&self, id: &ReplayId) -> bool {
        self.replaying().contains(id)
    }
}

/// A replay error as an answer: what the request got wrong is 400, a
/// missing record 404, anything else 500.
pub(super) fn recorded_error(error: RecordedError) -> ApiError {
    match error {
        RecordedError::Store(error) => error.into(),
        error @ (RecordedError::EmptySelection
        | RecordedError::BadComparator { .. }
        | RecordedError::UnknownLiveTool { .. }
        | RecordedError::DuplicateModel(_)
        | RecordedError::NoModel
        | RecordedError::UnknownCandidate { .. }
        | RecordedError::BadPromptVersion(_)
        | RecordedError::UnknownPromptVersion { .. }
        | RecordedError::SearchTooWide { .. }
        | RecordedError::NotATurn(_)
        | RecordedError::BadCase { .. }
        | RecordedError::NoEmbedder(_)) => {
            ApiError::new(StatusCode::BAD_REQUEST, error.to_string())
        }
        error => {
            tracing::warn!(%error, "web view: a replay failed");
            ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, error.to_string())
        }
    }
}
