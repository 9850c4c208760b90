/*!
The page's forgetting actions, through the store's one implementation
(`Store::forget`, `Store::redact`): deleting a conversation (and what only
it used) and erasing one message's content in place. Like every write they
need the page's CSRF token and are refused by a read-only server
(`crate::access`).
*/

use super::api::{ApiError, Shared};
use axum::Json;
use axum::extract::Path;
use axum::extract::rejection::JsonRejection;
use axum::http::StatusCode;
use serde::Deserialize;
use skein::store::{Forgotten, Redacted, Selection};

/// What a delete's body may say.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeleteBody {
    /// Only say what would be deleted and kept.
    #[serde(default)]
    dry_run: bool,
    /// The conversation's whole family by origin links, not only it.
    #[serde(default)]
    family: bool,
}

/// `POST /api/conversations/{id}/delete`: delete the conversation (or its
/// family) and what only it used; the report says what was kept and why.
pub async fn delete(
    state: Shared,
    Path(prefix): Path<String>,
    body: Result<Json<DeleteBody>, JsonRejection>,
) -> Result<Json<Forgotten>, ApiError> {
    let Json(body) = body?;
    let id = state
        .store
        .nonblocking()
        .resolve_conversation(&prefix)
        .await?;
    let selection = if body.family {
        Selection::Family(id)
    } else {
        Selection::Conversations(vec![id])
    };
    let report = state
        .store
        .run_blocking(move |store| store.forget(&selection, body.dry_run))
        .await?;
    Ok(Json(report))
}

/// The longest reason or name a redaction may give, in characters.
const NOTE_MAX_CHARS: usize = 1_000;

/// What a redaction's body says.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RedactBody {
    /// Why (free text, kept in the tombstone).
    reason: String,
    /// Who (free text; default `web`).
    by: Option<String>,
}

/// `POST /api/nodes/{id}/redact`: erase the message's content in place;
/// its id and place stay.
pub async fn redact(
    state: Shared,
    Path(prefix): Path<String>,
    body: Result<Json<RedactBody>, JsonRejection>,
) -> Result<Json<Redacted>, ApiError> {
    let Json(body) = body?;
    let by = body.by.unwrap_or_else(|| "web".to_string());
    for (what, text) in [("reason", &body.reason), ("by", &by)] {
        if text.trim().is_empty() || text.chars().count() > NOTE_MAX_CHARS {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                format!("`{what}` must say something, in at most {NOTE_MAX_CHARS} characters"),
            ));
        }
    }
    let node = state.store.nonblocking().resolve_node(&prefix).await?;
    let reason = body.reason;
    let redacted = state
        .store
        .run_blocking(move |store| store.redact(node, &by, &reason))
        .await?;
    Ok(Json(redacted))
}
