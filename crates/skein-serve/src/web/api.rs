/*!
The JSON API under `/api`: the read handlers over the store (the writes
are in `actions` and `reruns`). Each one awaits the store's async API
([`Store::nonblocking`]), never blocking the async threads, and answers
with a typed view from [`super::views`] or a JSON error: 404 for an id or
prefix that matches nothing, 400 for one that is ambiguous or not
hexadecimal, 500 for anything else. They read through the state's
`reads` handle: the store's standby when `skein serve --db-read` names
one (a view a moment old; docs/postgres.md), else the store.
*/

use super::family;
use super::views::{
    CompareNode, Comparison, ConversationList, ConversationView, ErrorBody, Family, Info,
    NodeDetail, NodeSummary, PartView, ReplayedAt, RunSummary, RunView, SearchView, Side, parts_of,
};
use crate::AppState;
use axum::Json;
use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use skein::NodeId;
use skein::core::Part;
use skein::store::{
    AsyncStore, ConversationId, ListPosition, RunId, RunRecord, SearchQuery, StoreError, preview,
};
use std::sync::Arc;

pub(crate) type Shared = State<Arc<AppState>>;
type ApiResult<T> = Result<Json<T>, ApiError>;

// Each route's default page size and the most one request may ask for, so
// that no response (and no request's memory) grows with the database.
const CONVERSATIONS_DEFAULT: usize = 1_000;
const CONVERSATIONS_MAX: usize = 1_000;
const FAMILY_DEFAULT: usize = 2_000;
pub(crate) const FAMILY_MAX: usize = 10_000;
const COMPARE_DEFAULT: usize = 500;
const COMPARE_MAX: usize = 10_000;
const SEARCH_DEFAULT: usize = 20;
const SEARCH_MAX: usize = 200;
/// Width of the last-message preview in the conversation list.
const LIST_PREVIEW_WIDTH: usize = 100;

/// A failed API request: a status and a message saying what to do.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    message: String,
}

impl ApiError {
    pub(crate) fn new(status: StatusCode, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            message: message.into(),
        }
    }
}

impl From<StoreError> for ApiError {
    fn from(error: StoreError) -> ApiError {
        let status = match &error {
            StoreError::NodeNotFound(_)
            | StoreError::ConversationNotFound(_)
            | StoreError::RunNotFound(_)
            | StoreError::ReplayNotFound(_)
            | StoreError::UnknownPrefix { .. } => StatusCode::NOT_FOUND,
            StoreError::AmbiguousPrefix { .. }
            | StoreError::NotAnId(_)
            | StoreError::NameLooksLikeId(_)
            | StoreError::LabelName(_)
            | StoreError::Search(_) => StatusCode::BAD_REQUEST,
            StoreError::NameTaken { .. } => StatusCode::CONFLICT,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        if status == StatusCode::INTERNAL_SERVER_ERROR {
            tracing::error!(%error, "web view: store error");
        }
        ApiError::new(status, error.to_string())
    }
}

/// A body that is not JSON, or not JSON this route takes (an unknown key,
/// a value of the wrong type): 400, with the key or place that is wrong
/// (serde's words), not axum's 422 text. Other rejections keep their own
/// status.
impl From<JsonRejection> for ApiError {
    fn from(rejection: JsonRejection) -> ApiError {
        use std::error::Error as _;
        let (what, problem) = match &rejection {
            JsonRejection::JsonDataError(error) => ("is not what this route takes", error.source()),
            JsonRejection::JsonSyntaxError(error) => ("is not valid JSON", error.source()),
            _ => return ApiError::new(rejection.status(), rejection.body_text()),
        };
        let problem = problem.map_or_else(|| rejection.body_text(), ToString::to_string);
        ApiError::new(
            StatusCode::BAD_REQUEST,
            format!("the request body {what}: {problem}"),
        )
    }
}

impl From<QueryRejection> for ApiError {
    fn from(rejection: QueryRejection) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, rejection.body_text())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (
            self.status,
            Json(ErrorBody {
                error: self.message,
            }),
        )
            .into_response()
    }
}

#[derive(Debug, Deserialize)]
pub struct LimitQuery {
    limit: Option<usize>,
}

/// The limit a request asked for, at most `max`; `default` when it asked
/// for none.
pub(super) fn limit(
    requested: Option<usize>,
    default: usize,
    max: usize,
) -> Result<usize, ApiError> {
    match requested {
        None => Ok(default),
        Some(0) => Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "limit must be at least 1",
        )),
        Some(n) => Ok(n.min(max)),
    }
}

/// Wait for a turn at the reads that load a graph (families and
/// comparisons): a few at a time, so many at once queue instead of each
/// holding its graph in memory together.
async fn graph_read(state: &AppState) -> tokio::sync::SemaphorePermit<'_> {
    state
        .graph_reads
        .acquire()
        .await
        .expect("the semaphore is never closed")
}

/// `GET /api/info`
pub async fn info(State(state): Shared) -> Json<Info> {
    Json(Info {
        version: env!("CARGO_PKG_VERSION"),
        database: state.store.path().display().to_string(),
    })
}

#[derive(Debug, Deserialize)]
pub struct ListQuery {
    limit: Option<usize>,
    after: Option<String>,
}

/// `GET /api/conversations?limit=N&after=CURSOR`: most recently updated
/// first, a page at a time; `next` is the address of the following page.
pub async fn conversations(
    State(state): Shared,
    query: Result<Query<ListQuery>, QueryRejection>,
) -> ApiResult<ConversationList> {
    let Query(query) = query?;
    let limit = limit(query.limit, CONVERSATIONS_DEFAULT, CONVERSATIONS_MAX)?;
    let after = query.after.as_deref().map(parse_cursor).transpose()?;
    let store = state.reads.nonblocking();
    let mut listed = match &after {
        None => store.list_conversations(limit + 1).await?,
        Some(after) => store.list_conversations_after(after, limit + 1).await?,
    };
    let truncated = listed.len() > limit;
    listed.truncate(limit);
    let next = listed.last().filter(|_| truncated).map(|last| {
        format!(
            "/api/conversations?limit={limit}&after={}",
            cursor(&last.position())
        )
    });
    let mut conversations = Vec::with_capacity(listed.len());
    for conversation in &listed {
        let mut view = ConversationView::from(conversation);
        if let Some(head) = conversation.head {
            let message = store.node(head).await?.message;
            view.preview = Some(preview(&message, LIST_PREVIEW_WIDTH));
        }
        conversations.push(view);
    }
    Ok(Json(ConversationList {
        conversations,
        limit,
        truncated,
        next,
    }))
}

/// A place in the listing as a query value: `UPDATED.ID`, percent-encoded.
fn cursor(position: &ListPosition) -> String {
    let mut text = format!("{}.", position.updated_ms);
    for byte in position.id.as_str().bytes() {
        if byte.is_ascii_alphanumeric() || b"-_.~".contains(&byte) {
            text.push(byte as char);
        } else {
            text.push_str(&format!("%{byte:02X}"));
        }
    }
    text
}

/// The inverse of [`cursor`] (the query is already percent-decoded).
fn parse_cursor(text: &str) -> Result<ListPosition, ApiError> {
    text.split_once('.')
        .and_then(|(updated, id)| {
            Some(ListPosition {
                updated_ms: updated.parse().ok()?,
                id: ConversationId(id.to_string()),
            })
        })
        .filter(|position| !position.id.as_str().is_empty())
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

/// `GET /api/conversations/{id}`: one conversation, by any unique prefix.
pub async fn conversation(
    State(state): Shared,
    Path(prefix): Path<String>,
) -> ApiResult<ConversationView> {
    let store = state.reads.nonblocking();
    let id = store.resolve_conversation(&prefix).await?;
    let conversation = store.conversation(&id).await?;
    Ok(Json(ConversationView::from(&conversation)))
}

/// `GET /api/conversations/{id}/family?limit=N`: the family tree around a
/// conversation (see [`family`]).
pub async fn family(
    State(state): Shared,
    Path(prefix): Path<String>,
    query: Result<Query<LimitQuery>, QueryRejection>,
) -> ApiResult<Family> {
    let limit = limit(query?.limit, FAMILY_DEFAULT, FAMILY_MAX)?;
    let _turn = graph_read(&state).await;
    let id: ConversationId = state
        .reads
        .nonblocking()
        .resolve_conversation(&prefix)
        .await?;
    let family = family::load(&state.reads, &id, limit, &state.prices).await?;
    Ok(Json(family))
}

/// `GET /api/nodes/{id}`: a node's parts, children, the conversations it
/// heads and the runs that produced it.
pub async fn node(State(state): Shared, Path(prefix): Path<String>) -> ApiResult<NodeDetail> {
    let store = state.reads.nonblocking();
    let id = store.resolve_node(&prefix).await?;
    let node = store.node(id).await?;
    Ok(Json(NodeDetail {
        id,
        parent: node.parent,
        depth: node.depth,
        role: node.message.role,
        parts: parts_of(&node.message),
        children: store.children(id).await?,
        heads: store
            .conversations_at(id)
            .await?
            .iter()
            .map(ConversationView::from)
            .collect(),
        runs: {
            let mut runs = Vec::new();
            for run in store.runs_producing(id).await? {
                runs.push(run_view(&store, &run, &state).await?);
            }
            runs
        },
        replays: store
            .replay_turns_of_node(id)
            .await?
            .iter()
            .map(ReplayedAt::from)
            .collect(),
    }))
}

/// `GET /api/nodes/{id}/parts/{index}`: an attachment's bytes, as a
/// download. The bytes are model or user content: they are served so that
/// no browser renders them in this origin (a download, no sniffing, a
/// sandbox policy), whatever media type they claim.
pub async fn part(
    State(state): Shared,
    Path((prefix, index)): Path<(String, usize)>,
) -> Result<Response, ApiError> {
    let store = state.reads.nonblocking();
    let id = store.resolve_node(&prefix).await?;
    let part = store.node(id).await?.message.parts.into_iter().nth(index);
    let Some(Part::Attachment(attachment)) = part else {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!("node {} has no attachment at part {index}", id.short()),
        ));
    };
    let disposition = format!(
        "attachment; filename=\"{}-part{index}.{}\"",
        id.short(),
        extension(&attachment.media_type)
    );
    let mut response = attachment.data.into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    if let Ok(value) = HeaderValue::from_str(&disposition) {
        headers.insert(header::CONTENT_DISPOSITION, value);
    }
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static("sandbox"),
    );
    Ok(response)
}

/// A file extension for a media type: its subtype when that is a plain
/// word, else `bin`.
fn extension(media_type: &str) -> String {
    let subtype = media_type
        .split(';')
        .next()
        .and_then(|essence| essence.split('/').nth(1))
        .unwrap_or("");
    let subtype = subtype.rsplit('+').next().unwrap_or(subtype);
    if !subtype.is_empty()
        && subtype.len() <= 12
        && subtype.bytes().all(|b| b.is_ascii_alphanumeric())
    {
        subtype.to_ascii_lowercase()
    } else {
        "bin".to_string()
    }
}

/// `GET /api/runs/{id}`: one run record.
pub async fn run(State(state): Shared, Path(prefix): Path<String>) -> ApiResult<RunView> {
    let store = state.reads.nonblocking();
    let id: RunId = store.resolve_run(&prefix).await?;
    let record = store.run_record(&id).await?;
    Ok(Json(run_view(&store, &record, &state).await?))
}

/// A run as shown, with the request body it kept read back from its
/// pieces (what erasure left of it, erased spans marked).
async fn run_view(
    store: &AsyncStore<'_>,
    run: &RunRecord,
    state: &AppState,
) -> Result<RunView, ApiError> {
    let mut view = RunView::priced(run, &state.prices);
    if run.request_ref.is_some() {
        view.request = store
            .request_body(&run.id)
            .await?
            .map(|body| body.display());
    }
    Ok(view)
}

#[derive(Debug, Deserialize)]
pub struct CompareQuery {
    a: Option<String>,
    b: Option<String>,
    limit: Option<usize>,
}

/// `GET /api/compare?a=NODE&b=NODE&limit=N`: the two threads ending at `a`
/// and `b`, from their last common node; at most `limit` nodes per side and
/// of the shared history (its latest).
pub async fn compare(
    State(state): Shared,
    query: Result<Query<CompareQuery>, QueryRejection>,
) -> ApiResult<Comparison> {
    let Query(query) = query?;
    let limit = limit(query.limit, COMPARE_DEFAULT, COMPARE_MAX)?;
    let (Some(a), Some(b)) = (query.a, query.b) else {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "compare needs two nodes: /api/compare?a=NODE&b=NODE (the heads of the branches)",
        ));
    };
    let _turn = graph_read(&state).await;
    let store = state.reads.nonblocking();
    let a = store.resolve_node(&a).await?;
    let b = store.resolve_node(&b).await?;
    let thread_a = store.load_thread(a).await?;
    let thread_b = store.load_thread(b).await?;
    let (nodes_a, nodes_b) = (thread_a.nodes(), thread_b.nodes());
    // Ids hash the whole ancestry: equal at a depth means equal below it.
    let common = nodes_a
        .iter()
        .zip(&nodes_b)
        .take_while(|(x, y)| x.id() == y.id())
        .count();
    let shared_omitted = common.saturating_sub(limit);
    let shared = nodes_a[shared_omitted..common]
        .iter()
        .enumerate()
        .map(|(offset, node)| NodeSummary {
            id: node.id(),
            depth: (shared_omitted + offset) as u64,
            role: node.message().role,
            preview: preview(node.message(), 120),
        })
        .collect();
    let comparison = Comparison {
        ancestor: common.checked_sub(1).map(|last| nodes_a[last].id()),
        shared,
        shared_omitted,
        a: side(store, a, &nodes_a, common, limit).await?,
        b: side(store, b, &nodes_b, common, limit).await?,
    };
    Ok(Json(comparison))
}

/// One side of a comparison: the branch ending at `head`, from the node
/// after the `common` ones, at most `limit` nodes.
async fn side(
    store: AsyncStore<'_>,
    head: NodeId,
    nodes: &[&skein::core::Node],
    common: usize,
    limit: usize,
) -> skein::store::Result<Side> {
    let after = &nodes[common..];
    let shown = &after[..after.len().min(limit)];
    let mut listed = Vec::with_capacity(shown.len());
    for (offset, node) in shown.iter().enumerate() {
        listed.push(CompareNode {
            id: node.id(),
            depth: (common + offset) as u64,
            role: node.message().role,
            parts: node.message().parts.iter().map(PartView::from).collect(),
            runs: store
                .runs_producing(node.id())
                .await?
                .iter()
                .map(RunSummary::from)
                .collect(),
        });
    }
    Ok(Side {
        head,
        heads: store
            .conversations_at(head)
            .await?
            .iter()
            .map(ConversationView::from)
            .collect(),
        nodes: listed,
        omitted: after.len() - shown.len(),
    })
}

/// Any other `/api/…` path.
pub async fn not_found() -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "no such API route: the routes are /api/info, /api/session, /api/events, \
         /api/conversations, /api/conversations/{id}, /api/conversations/{id}/family, \
         /api/nodes/{id}, /api/nodes/{id}/parts/{index}, /api/nodes/{id}/report, \
         /api/runs/{id} and /api/compare?a=NODE&b=NODE; POST /api/nodes/{id}/reply, \
         /edit, /regenerate, /fork, /rerun and /api/reruns/{id}/fork",
    )
}

#[cfg(test)]
mod tests {
    use super::extension;

    #[test]
    fn download_names_take_a_plain_subtype_or_bin() {
        assert_eq!(extension("image/png"), "png");
        assert_eq!(extension("image/svg+xml"), "xml");
        assert_eq!(extension("text/plain; charset=utf-8"), "plain");
        assert_eq!(extension("application/x-evil\"name"), "bin");
        assert_eq!(extension("nonsense"), "bin");
    }
}

#[derive(Debug, Deserialize)]
pub struct SearchParams {
    q: Option<String>,
    limit: Option<usize>,
}

/// `GET /api/search?q=TEXT&limit=N`: the messages whose text has the words
/// of `q` (the store's query language: every word, "phrases", word*
/// prefixes), newest first, each with a conversation that holds it. An
/// empty `q` or one the store refuses is a 400 saying why.
pub async fn search(
    State(state): Shared,
    query: Result<Query<SearchParams>, QueryRejection>,
) -> ApiResult<SearchView> {
    let Query(params) = query?;
    let limit = limit(params.limit, SEARCH_DEFAULT, SEARCH_MAX)?;
    let Some(text) = params.q.filter(|q| !q.trim().is_empty()) else {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "search needs words to look for: /api/search?q=WORDS",
        ));
    };
    let results = state
        .reads
        .nonblocking()
        .search(&SearchQuery::new(text).limit(limit))
        .await?;
    Ok(Json(SearchView {
        truncated: results.truncated,
        results: results.matches.into_iter().map(Into::into).collect(),
    }))
}
