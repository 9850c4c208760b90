/*!
The read-only web view of the graph: a single page (embedded HTML, CSS and
vanilla JavaScript, no network access of its own) over a JSON API.

Routes, all `GET` (anything else is answered 405, once it has passed the
checks [`crate::access`] makes on every write):

| route | what |
|---|---|
| `/` | the page; it routes itself by URL fragment (`#/c/ID`, `#/compare/A/B`) |
| `/assets/{file}` | its script and style sheet |
| `/api/info` | version and database path |
| `/api/conversations?limit=N&after=CURSOR` | conversations, most recently updated first, a page at a time with the address of the `next` |
| `/api/conversations/{id}` | one conversation, by any unique prefix |
| `/api/conversations/{id}/family?limit=N` | its family's node graph, cut into branches, at most `limit` nodes |
| `/api/nodes/{id}` | a node's parts, children, the conversations it heads, the runs that produced it |
| `/api/nodes/{id}/parts/{index}` | an attachment's bytes, as a download |
| `/api/runs/{id}` | one run record |
| `/api/compare?a=NODE&b=NODE&limit=N` | two threads side by side from their last common node |
| `/api/search?q=TEXT&limit=N` | messages by their words (`Store::search`), newest first, each with a conversation holding it |

Modules: `api` (handlers and errors), [`views`] (the JSON shapes),
`family` (finding a family and cutting it into branches), `assets` (the
embedded files and the headers every response carries).

Everything shown is model or user output, so the page builds its DOM with
text nodes only, and every response carries headers that keep the browser
from executing anything else (`assets::security_headers`).
*/

mod api;
mod assets;
mod family;
pub mod views;

use crate::AppState;
use axum::Router;
use axum::middleware;
use axum::routing::get;
use std::sync::Arc;

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
        .route("/api/search", get(api::search))
        .route("/api", get(api::not_found))
        .route("/api/{*rest}", get(api::not_found))
        .layer(middleware::map_response(assets::security_headers))
}
