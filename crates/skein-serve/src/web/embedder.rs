//! The embedder the web view ranks sources and compares answers with
//! (explanations, reruns, replays), chosen as every surface chooses it
//! (`skein_recorded::embed::choose` with none named: MiniLM where it is on
//! this machine, else the lexical embedder with a note saying so). The
//! server chooses once, the first time it needs one, off the runtime (MiniLM
//! loads from disk), and every request uses that choice; the note reaches
//! the page in each answer that compared (`embedder_fallback`).

use super::api::ApiError;
use crate::AppState;
use axum::http::StatusCode;
use skein::recorded::embed::{CachedEmbedder, Chosen, Embedder, choose};
use std::sync::Arc;

/// Whether a request may write what it computes to the store.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Writes {
    /// A `GET`: it writes nothing, whatever the server allows.
    Never,
    /// A write the server may refuse (read-only mode).
    IfAllowed,
}

/// The embedder this server compares with, and the note saying it is the
/// lexical fallback (`None` when MiniLM is on the machine).
pub(super) struct Comparing {
    pub embedder: Arc<dyn Embedder>,
    pub fallback: Option<String>,
}

/// The server's embedder, its vectors cached in the store when `writes`
/// allows it on this server, else in memory only.
pub(super) async fn embedder(state: &AppState, writes: Writes) -> Result<Comparing, ApiError> {
    let chosen = chosen(state).await?;
    let inner = chosen.embedder.clone();
    let embedder: Arc<dyn Embedder> =
        Arc::new(match writes == Writes::IfAllowed && !state.read_only {
            false => CachedEmbedder::new(inner),
            true => CachedEmbedder::with_store(inner, state.store.clone()),
        });
    Ok(Comparing {
        embedder,
        fallback: chosen.fallback.clone(),
    })
}

/// The note that this server compares with the lexical embedder, when it
/// does (the choice made now if it was not yet).
pub(super) async fn fallback(state: &AppState) -> Result<Option<String>, ApiError> {
    Ok(chosen(state).await?.fallback.clone())
}

async fn chosen(state: &AppState) -> Result<&Chosen, ApiError> {
    state
        .embedder
        .get_or_try_init(|| async {
            tokio::task::spawn_blocking(|| choose(None))
                .await
                .map_err(|error| {
                    ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, error.to_string())
                })?
                .map_err(|error| {
                    ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, error.to_string())
                })
        })
        .await
}
