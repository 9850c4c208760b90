/*!
The read-only web view of the graph. (Routes and embedded assets.)
*/

use crate::AppState;
use axum::Router;
use axum::response::Html;
use axum::routing::get;
use std::sync::Arc;

/// The web view's routes.
pub fn routes() -> Router<Arc<AppState>> {
    Router::new().route("/", get(index))
}

async fn index() -> Html<&'static str> {
    Html("<!doctype html><title>skein</title><p>skein</p>")
}
