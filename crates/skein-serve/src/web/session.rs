/*!
`GET /api/session`: what the page needs before it may act. The CSRF token
every write must carry in `X-Skein-Csrf` (random for each server process:
a page of another origin cannot read it, since this server sends no CORS
headers, and cannot guess it), whether the server is read-only, the
models the page may choose, by name and label, never with a credential,
and the comparators a replay may judge with, from their registry
(`skein_recorded::compare::REGISTRY`), for the replay form's list.
*/

use super::api::Shared;
use super::models::ModelChoice;
use axum::Json;
use serde::Serialize;
use skein::recorded::compare::REGISTRY;

/// What `/api/session` answers.
#[derive(Debug, Serialize)]
pub struct Session {
    pub csrf: String,
    pub read_only: bool,
    pub models: Vec<ModelChoice>,
    pub default_model: String,
    pub comparators: Vec<ComparatorChoice>,
}

/// A comparator of the registry, as the replay form lists it.
#[derive(Debug, Serialize)]
pub struct ComparatorChoice {
    pub name: &'static str,
    /// How its spec reads (`embedding[:THRESHOLD]`).
    pub usage: &'static str,
    pub about: &'static str,
}

/// `GET /api/session`
pub async fn session(state: Shared) -> Json<Session> {
    Json(Session {
        csrf: state.csrf.to_string(),
        read_only: state.read_only,
        models: state.models.choices(),
        default_model: state.models.default_name(),
        comparators: REGISTRY
            .iter()
            .map(|kind| ComparatorChoice {
                name: kind.name,
                usage: kind.usage,
                about: kind.about,
            })
            .collect(),
    })
}
