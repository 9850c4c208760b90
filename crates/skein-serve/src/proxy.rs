/*!
The recording proxy: an OpenAI-compatible chat-completions endpoint.
*/

use crate::AppState;
use axum::Router;
use std::sync::Arc;

/// The proxy's routes, with the request body limit.
pub fn routes(_body_limit: usize) -> Router<Arc<AppState>> {
    Router::new()
}
