/*!
Labels from the page, through the one labelling path of every surface
(`skein_recorded::cases::label` and `unlabel`, as `skein label add|rm`
and Python's `Store.label`/`unlabel` call them): the labels and how many
turns carry each, one label's turns a page at a time, and putting a label
on turns or taking it off — turns given by their final answer's node, or
every turn a replay re-sent (those with the results asked for), as `skein
label add NAME --replay ID --result R` takes them. Like every write,
adding and removing need the page's CSRF token and are refused by a
read-only server (`crate::access`).
*/

use super::api::{ApiError, Shared, limit};
use super::replays::recorded_error;
use axum::Json;
use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{Path, Query};
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use skein::NodeId;
use skein::recorded::cases;
use skein::recorded::replay::turns_of_replay;
use skein::store::LabelCount;
use std::collections::HashSet;

/// How many turns one request may name, and a page of a label's turns.
const TURNS_MAX: usize = 1_000;
const PAGE_DEFAULT: usize = 200;

/// The results a replay's turns may be chosen by.
const RESULTS: [&str; 6] = [
    "changed", "held", "diverged", "failed", "pending", "running",
];

/// `GET /api/labels`: every label and how many turns carry it.
pub async fn list(state: Shared) -> Result<Json<Vec<LabelCount>>, ApiError> {
    Ok(Json(state.reads.nonblocking().label_counts().await?))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TurnsQuery {
    limit: Option<usize>,
    /// The last turn of the previous page (a node id).
    after: Option<String>,
}

/// One label's turns, a page at a time.
#[derive(Debug, Serialize)]
pub struct LabelTurns {
    pub label: String,
    /// The turns' final answers, in node order.
    pub turns: Vec<NodeId>,
    pub limit: usize,
    pub truncated: bool,
    /// The address of the following page.
    pub next: Option<String>,
}

/// `GET /api/labels/{name}?limit=N&after=NODE`: the turns carrying the
/// label, a page at a time.
pub async fn turns(
    state: Shared,
    Path(name): Path<String>,
    query: Result<Query<TurnsQuery>, QueryRejection>,
) -> Result<Json<LabelTurns>, ApiError> {
    let Query(query) = query?;
    let limit = limit(query.limit, PAGE_DEFAULT, TURNS_MAX)?;
    let after = query
        .after
        .as_deref()
        .map(|text| {
            text.parse::<NodeId>().map_err(|_| {
                ApiError::new(
                    StatusCode::BAD_REQUEST,
                    format!("`after` is a node id (64 hex digits), not `{text}`"),
                )
            })
        })
        .transpose()?;
    let mut page = state
        .reads
        .nonblocking()
        .labelled(&name, after, limit + 1)
        .await?;
    let truncated = page.len() > limit;
    page.truncate(limit);
    let next = page.last().filter(|_| truncated).map(|last| {
        format!(
            "/api/labels/{}?limit={limit}&after={}",
            encode(&name),
            last.node.to_hex()
        )
    });
    Ok(Json(LabelTurns {
        label: name,
        turns: page.into_iter().map(|label| label.node).collect(),
        limit,
        truncated,
        next,
    }))
}

/// A label's name in a path: percent-encoded but for unreserved bytes.
fn encode(name: &str) -> String {
    name.bytes()
        .map(|byte| match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (byte as char).to_string()
            }
            other => format!("%{other:02X}"),
        })
        .collect()
}

/// Which turns a label goes on or comes off: some by their final answer's
/// node (any unique prefix), and every turn a replay re-sent (with
/// `results`, only those), as `skein label add|rm` takes them.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LabelBody {
    #[serde(default)]
    turns: Vec<String>,
    /// A replay (any unique prefix of its id).
    replay: Option<String>,
    #[serde(default)]
    results: Vec<String>,
}

/// What adding or removing did.
#[derive(Debug, Serialize)]
pub struct Labelled {
    pub label: String,
    /// Turns that did not carry it and now do (adding), or that carried
    /// it and no longer do (removing).
    pub changed: u64,
    /// Turns named, each once.
    pub given: usize,
}

/// `POST /api/labels/{name}`: put the label on the turns.
pub async fn add(
    state: Shared,
    Path(name): Path<String>,
    body: Result<Json<LabelBody>, JsonRejection>,
) -> Result<Json<Labelled>, ApiError> {
    let Json(body) = body?;
    let turns = body.turns(&state).await?;
    let changed = cases::label(&state.store, &name, &turns)
        .await
        .map_err(recorded_error)?;
    Ok(Json(Labelled {
        label: name,
        changed,
        given: turns.len(),
    }))
}

/// `POST /api/labels/{name}/remove`: take the label off the turns.
pub async fn remove(
    state: Shared,
    Path(name): Path<String>,
    body: Result<Json<LabelBody>, JsonRejection>,
) -> Result<Json<Labelled>, ApiError> {
    let Json(body) = body?;
    let turns = body.turns(&state).await?;
    let changed = cases::unlabel(&state.store, &name, &turns)
        .await
        .map_err(recorded_error)?;
    Ok(Json(Labelled {
        label: name,
        changed,
        given: turns.len(),
    }))
}

impl LabelBody {
    /// The turns named, each once (404 for an id that matches nothing).
    async fn turns(&self, state: &crate::AppState) -> Result<Vec<NodeId>, ApiError> {
        if self.turns.is_empty() && self.replay.is_none() {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                "say which turns: `turns` (their final answers' nodes) or a `replay`",
            ));
        }
        if self.turns.len() > TURNS_MAX {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                format!("`turns` lists more than {TURNS_MAX} turns"),
            ));
        }
        if let Some(bad) = self.results.iter().find(|r| !RESULTS.contains(&r.as_str())) {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                format!("`results` takes {}, not `{bad}`", RESULTS.join(", ")),
            ));
        }
        if !self.results.is_empty() && self.replay.is_none() {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                "`results` chooses among a replay's turns: give the `replay` too",
            ));
        }
        let store = state.store.nonblocking();
        let mut turns = Vec::with_capacity(self.turns.len());
        for given in &self.turns {
            turns.push(store.resolve_node(given).await?);
        }
        if let Some(given) = &self.replay {
            let id = store.resolve_replay(given).await?;
            let (store, results) = (state.store.clone(), self.results.clone());
            let replayed =
                tokio::task::spawn_blocking(move || turns_of_replay(&store, &id, &results))
                    .await
                    .map_err(|error| {
                        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, error.to_string())
                    })?
                    .map_err(recorded_error)?;
            turns.extend(replayed);
        }
        let mut seen = HashSet::new();
        turns.retain(|turn| seen.insert(*turn));
        Ok(turns)
    }
}
