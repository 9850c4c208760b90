/*!
The web view of the graph: a single page (embedded HTML, CSS and vanilla
JavaScript, no network access of its own) over a JSON API, which reads the
graph and, unless the server is read-only, acts on it through the turn
layer.

Reads (`GET`):

| route | what |
|---|---|
| `/` | the page; it routes itself by URL fragment (`#/c/ID`, `#/compare/A/B`, `#/replays/ID`) |
| `/assets/{file}` | its script and style sheet |
| `/api/info` | version and database path |
| `/api/conversations?limit=N&after=CURSOR` | conversations, most recently updated first, a page at a time with the address of the `next` |
| `/api/conversations/{id}` | one conversation, by any unique prefix |
| `/api/conversations/{id}/family?limit=N` | its family's node graph, cut into branches, at most `limit` nodes |
| `/api/nodes/{id}` | a node's parts, children, the conversations it heads, the runs that produced it |
| `/api/nodes/{id}/parts/{index}` | an attachment's bytes, as a download |
| `/api/runs/{id}` | one run record |
| `/api/compare?a=NODE&b=NODE&limit=N` | two threads side by side from their last common node |
| `/api/session` | the CSRF token, whether the server is read-only, the models to choose from |
| `/api/nodes/{id}/report` | a recorded turn's sources, for choosing which a rerun ignores |
| `/api/events` | a stream of `turn` events as conversations move, from any process |
| `/api/search?q=TEXT&limit=N` | messages by their words (`Store::search`), newest first, each with a conversation holding it |
| `/api/replays?limit=N&after=CURSOR` | replays, newest first, a page at a time, with where their turns stand and the address of the `next` page |
| `/api/replays/{id}` | one replay's report: per turn both answers, the comparator's decision and why, tokens, latency, cost |
| `/api/replays/{id}/progress` | where its turns stand (what a page polls while it runs) |
| `/api/labels` | every label and how many turns carry it |
| `/api/labels/{name}?limit=N&after=NODE` | a label's turns, a page at a time |

Writes (`POST`, JSON bodies of at most [`BODY_LIMIT`], each past the checks
[`crate::access`] makes, the CSRF token among them):

| route | what |
|---|---|
| `/api/nodes/{id}/reply` | continue the conversation the node heads, else branch there (streamed) |
| `/api/nodes/{id}/edit` | a user message's new text, branched from its parent (streamed) |
| `/api/nodes/{id}/regenerate` | another reply to an assistant message's request (streamed) |
| `/api/nodes/{id}/fork` | a new conversation at the node, with a first turn (streamed) or without |
| `/api/nodes/{id}/rerun` | the recorded turn again without chosen sources |
| `/api/reruns/{id}/fork` | a new conversation from a rerun's answer |
| `/api/replays` | a replay of chosen turns with one change, run on this server (202; poll its progress) |
| `/api/replays/{id}/resume` | an unfinished replay's remaining turns, when no worker of this server is on it |
| `/api/labels/{name}` | the label put on turns (by node, or a replay's, by result) |
| `/api/labels/{name}/remove` | the label taken off turns |

Modules: `api` (read handlers and errors), [`views`] (the JSON shapes),
`family` (finding a family and cutting it into branches), `assets` (the
embedded files and the headers every response carries), `session` (what the
page needs to act), [`models`] (the models actions run on), `actions`
(reply, edit, regenerate, fork), `embedder` (the embedder explanations, reruns and replays compare with,
chosen once as every surface chooses it), `reruns` (reports, reruns, forks from
them), `replays` (replays: list, report, start, resume), `labels` (labels put
on turns and taken off, listed), `erase` (deleting a conversation, erasing a message's content), `stream` (a turn as server-sent events), [`events`] (the live
stream of moved conversations).

Everything shown is model or user output, so the page builds its DOM with
text nodes only, and every response carries headers that keep the browser
from executing anything else (`assets::security_headers`).
*/

mod actions;
mod api;
mod assets;
mod embedder;
mod erase;
pub mod events;
mod family;
mod labels;
pub mod models;
mod replays;
mod reruns;
mod session;
mod stream;
pub mod views;

use crate::AppState;
use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::middleware;
use axum::routing::{get, post};
use std::sync::Arc;

/// The largest request body the web view's writes accept (larger: 413).
pub const BODY_LIMIT: usize = 1024 * 1024;

/// The web view's routes.
pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/", get(assets::index))
        .route("/assets/{file}", get(assets::asset))
        .route("/api/info", get(api::info))
        .route("/api/conversations", get(api::conversations))
        .route("/api/conversations/{id}", get(api::conversation))
        .route("/api/conversations/{id}/family", get(api::family))
        .route("/api/nodes/{id}", get(api::node))
        .route("/api/nodes/{id}/parts/{index}", get(api::part))
        .route("/api/runs/{id}", get(api::run))
        .route("/api/compare", get(api::compare))
        .route("/api/session", get(session::session))
        .route("/api/events", get(events::events))
        .route("/api/nodes/{id}/report", get(reruns::report))
        .route("/api/nodes/{id}/reply", post(actions::reply))
        .route("/api/nodes/{id}/edit", post(actions::edit))
        .route("/api/nodes/{id}/regenerate", post(actions::regenerate))
        .route("/api/nodes/{id}/fork", post(actions::fork))
        .route("/api/nodes/{id}/rerun", post(reruns::rerun))
        .route("/api/reruns/{id}/fork", post(reruns::fork))
        .route("/api/replays", get(replays::list).post(replays::start))
        .route("/api/replays/{id}", get(replays::report))
        .route("/api/replays/{id}/progress", get(replays::progress))
        .route("/api/replays/{id}/resume", post(replays::resume))
        .route("/api/labels", get(labels::list))
        .route("/api/labels/{name}", get(labels::turns).post(labels::add))
        .route("/api/labels/{name}/remove", post(labels::remove))
        .route("/api/conversations/{id}/delete", post(erase::delete))
        .route("/api/nodes/{id}/redact", post(erase::redact))
        .route("/api/search", get(api::search))
        .route("/api", get(api::not_found))
        .route("/api/{*rest}", get(api::not_found))
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .layer(middleware::map_response(assets::security_headers))
}
