/*!
Counterfactual reruns from the page, through skein's recorded chats exactly
as `skein explain`, `skein rerun` and `skein fork --from-rerun` do: a
recorded turn's report (its sources, ranked by resemblance to the reply,
with which a rerun may ignore), a rerun without chosen sources (samples,
and with `baseline` a verdict), and a fork from a rerun's answer.

Sources are ranked, and samples compared, with the server's embedder
(`super::embedder`: MiniLM where it is on the machine, else the lexical
one, each answer saying so in `embedder_fallback`), as `skein explain` and
`skein rerun` choose it. Its vectors are cached in the store only by the
writes (a rerun, a fork from one) of a server that may write; a report is a
`GET`, which never writes, so it keeps them in memory.
*/

use super::actions::{
    NAME_MAX_CHARS, TEXT_MAX_CHARS, check_length, check_name, page_home, turn_error, turn_permit,
};
use super::api::{ApiError, Shared};
use super::embedder::{Writes, embedder};
use super::stream::{self, Done, Start};
use crate::AppState;
use axum::Json;
use axum::extract::Path;
use axum::extract::rejection::JsonRejection;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};
use skein::core::{Annotation, Part};
use skein::recorded::{
    LoadedTurn, ReasonOptions, RecordedError, RerunOptions, Suspect, Turn, TurnAt, open_turn,
};
use skein::store::RerunId;

/// Samples a rerun takes unless asked otherwise, and the most it may.
const SAMPLES_DEFAULT: u32 = 3;
const SAMPLES_MAX: u32 = 10;
/// How many source ids one rerun may name.
const IGNORE_MAX: usize = 64;
/// Width of a source's preview.
const PREVIEW_CHARS: usize = 200;

/// A recorded chat error as an answer: a node that is no recorded turn is
/// 404, a source or sample count the rerun cannot take 400.
fn recorded_error(error: RecordedError) -> ApiError {
    match error {
        RecordedError::Store(error) => error.into(),
        error @ (RecordedError::NotATurn(_) | RecordedError::TurnOutOfRange { .. }) => {
            ApiError::new(StatusCode::NOT_FOUND, error.to_string())
        }
        error @ (RecordedError::NothingToIgnore { .. }
        | RecordedError::UnknownSource { .. }
        | RecordedError::BeyondCap { .. }
        | RecordedError::TooFewSamples(_)
        | RecordedError::Provenance { .. }) => {
            ApiError::new(StatusCode::BAD_REQUEST, error.to_string())
        }
        RecordedError::Conversation(error) => turn_error(error),
        error => {
            tracing::warn!(%error, "web view: a recorded chat failed");
            ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, error.to_string())
        }
    }
}

/// Recorded turn `at`, loaded alone through the turn layer's one opening
/// of a recorded turn ([`open_turn`]: the tools its conversation's runs
/// offered started, on the model `model` names when given, else the
/// conversation's own),
/// with the note that the server compares with the lexical embedder, when
/// it does.
async fn load_turn_at(
    state: &AppState,
    at: TurnAt,
    model: Option<&str>,
    writes: Writes,
) -> Result<(LoadedTurn, Option<String>), ApiError> {
    let comparing = embedder(state, writes).await?;
    let loaded = open_turn(
        &state.store,
        at,
        &page_home(state),
        Some(comparing.embedder),
        model,
    )
    .await
    .map_err(recorded_error)?;
    Ok((loaded, comparing.fallback))
}

/// The recorded turn whose reply is `prefix`, loaded alone.
async fn load_turn(
    state: &AppState,
    prefix: String,
    writes: Writes,
) -> Result<(LoadedTurn, Option<String>), ApiError> {
    let node = state.store.nonblocking().resolve_node(&prefix).await?;
    load_turn_at(state, TurnAt::Reply(node), None, writes).await
}

/// `GET /api/nodes/{id}/report`: the recorded turn whose reply is the
/// node, and its sources ranked (the removable ones first).
pub async fn report(state: Shared, Path(prefix): Path<String>) -> Result<Json<Value>, ApiError> {
    let (mut loaded, fallback) = load_turn(&state, prefix, Writes::Never).await?;
    let report = loaded
        .reason(ReasonOptions::new())
        .await
        .map_err(recorded_error)?;
    let (k, turn) = (loaded.index(), loaded.turn());
    let previews = previews(turn);
    let source = |suspect: &Suspect, removable: bool| {
        json!({
            "id": suspect.id,
            "kind": suspect.kind.as_str(),
            "removable": removable,
            "score": suspect.score,
            "preview": previews
                .iter()
                .find(|(id, _)| *id == suspect.id)
                .map(|(_, text)| text.as_str())
                .unwrap_or(""),
        })
    };
    let sources: Vec<Value> = report
        .suspects
        .iter()
        .map(|suspect| source(suspect, true))
        .chain(
            report
                .beyond_cap
                .iter()
                .map(|suspect| source(suspect, false)),
        )
        .collect();
    Ok(Json(json!({
        "turn": {
            "index": k,
            "node": turn.node(),
            "conversation": loaded.conversation(),
            "user_text": turn.user_text(),
            "text": turn.text(),
            "runs": turn.runs(),
        },
        "sources": sources,
        "embedder": report.embedder,
        "embedder_fallback": fallback,
        "note": skein::recorded::Report::NOTE,
    })))
}

/// Each tagged source's text in the turn's request (a tool's description
/// for a tool), cut to a preview.
fn previews(turn: &Turn) -> Vec<(String, String)> {
    let mut texts: Vec<(String, String)> = turn
        .tools()
        .iter()
        .map(|tool| (tool.name.clone(), tool.description.clone()))
        .collect();
    for node in turn.request().nodes() {
        for (index, part) in node.message().parts.iter().enumerate() {
            let Part::Text { text } = part else { continue };
            for annotation in turn.annotations().get(node.id(), index as u32) {
                let Annotation::Source(id) = annotation else {
                    continue;
                };
                match texts.iter_mut().find(|(known, _)| known == id) {
                    Some((_, known)) => {
                        known.push('\n');
                        known.push_str(text);
                    }
                    None => texts.push((id.clone(), text.clone())),
                }
            }
        }
    }
    for (_, text) in &mut texts {
        if text.chars().count() > PREVIEW_CHARS {
            *text = format!(
                "{}…",
                text.chars().take(PREVIEW_CHARS - 1).collect::<String>()
            );
        }
    }
    texts
}

/// What a rerun asks for.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RerunBody {
    ignore: Option<Vec<String>>,
    samples: Option<u32>,
    baseline: Option<bool>,
}

/// `POST /api/nodes/{id}/rerun`: the turn again without the sources
/// `ignore` names, as `skein rerun`.
pub async fn rerun(
    state: Shared,
    Path(prefix): Path<String>,
    body: Result<Json<RerunBody>, JsonRejection>,
) -> Result<Json<Value>, ApiError> {
    let Json(body) = body?;
    let ignore = body.ignore.unwrap_or_default();
    let samples = body.samples.unwrap_or(SAMPLES_DEFAULT);
    if !(2..=SAMPLES_MAX).contains(&samples) {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            format!("`samples` must be from 2 to {SAMPLES_MAX}, not {samples}"),
        ));
    }
    if ignore.len() > IGNORE_MAX {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            format!("`ignore` names more than {IGNORE_MAX} sources"),
        ));
    }
    for id in &ignore {
        check_length("ignore", Some(id), NAME_MAX_CHARS)?;
    }
    let _permit = turn_permit(&state)?;
    let (mut loaded, fallback) = load_turn(&state, prefix, Writes::IfAllowed).await?;
    loaded
        .reason(ReasonOptions::new())
        .await
        .map_err(recorded_error)?;
    let mut options = RerunOptions::ignore(ignore).samples(samples);
    if body.baseline == Some(true) {
        options = options.check_baseline();
    }
    let result = loaded.rerun(options).await.map_err(recorded_error)?;
    let samples: Vec<Value> = result
        .samples
        .iter()
        .map(|sample| {
            json!({
                "answer": sample.answer,
                "changed": sample.changed,
                "similarity": sample.similarity,
                "runs": sample.runs,
                "node": sample.thread.head_id(),
            })
        })
        .collect();
    Ok(Json(json!({
        "rerun": result.id,
        "verdict": result.verdict,
        "changed": result.what_changed.answer_flipped,
        "what_changed": result.what_changed,
        "samples": samples,
        "answer_head": result.samples.first().and_then(|sample| sample.thread.head_id()),
        "baseline": result.baseline.as_ref().map(|baseline| json!({
            "changed": baseline.changed,
            "stable": baseline.stable,
            "similarity": baseline.similarity,
        })),
        "turn": result.turn,
        "turn_node": result.turn_node,
        "removed": result.removed,
        "original": result.original,
        "conversation": loaded.conversation(),
        "embedder_fallback": fallback,
    })))
}

/// What a fork from a rerun asks for.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RerunForkBody {
    text: Option<String>,
    name: Option<String>,
    model: Option<String>,
}

/// `POST /api/reruns/{id}/fork`: a new conversation from the rerun's
/// answer, as `skein fork --from-rerun`; with `text`, its first turn
/// (streamed), else the conversation as JSON.
pub async fn fork(
    state: Shared,
    Path(prefix): Path<String>,
    body: Result<Json<RerunForkBody>, JsonRejection>,
) -> Result<Response, ApiError> {
    let Json(body) = body?;
    check_length("text", body.text.as_deref(), TEXT_MAX_CHARS)?;
    check_name(body.name.as_deref())?;
    check_length("model", body.model.as_deref(), NAME_MAX_CHARS)?;
    if body
        .text
        .as_deref()
        .is_some_and(|text| text.trim().is_empty())
    {
        return Err(ApiError::new(StatusCode::BAD_REQUEST, "`text` is empty"));
    }
    let permit = match body.text {
        Some(_) => Some(turn_permit(&state)?),
        None => None,
    };
    super::actions::check_name_free(&state, body.name.as_deref()).await?;
    let store = state.store.nonblocking();
    let id: RerunId = store.resolve_rerun(&prefix).await?;
    let record = store.rerun(&id).await?;
    let model = super::actions::chosen_name(&state, body.model.as_deref())?;
    let at = TurnAt::Number(record.conversation.clone(), record.turn as usize);
    let (loaded, _) = load_turn_at(&state, at, model, Writes::IfAllowed).await?;
    let mut fork = loaded.fork_from_rerun(&id).await.map_err(recorded_error)?;
    let conversation = fork.conversation().cloned().ok_or_else(|| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "a fork with a store has a conversation",
        )
    })?;
    if let Some(name) = body.name.clone() {
        store
            .rename_conversation(&conversation, Some(&name))
            .await?;
    }
    let from = record.answer_head;
    let (Some(permit), Some(text)) = (permit, body.text) else {
        return Ok((
            StatusCode::CREATED,
            Json(json!({ "conversation": conversation, "from": from, "rerun": id })),
        )
            .into_response());
    };
    let start = Start {
        conversation: conversation.clone(),
        branched: true,
        from,
        at: record.turn_node,
    };
    let store = state.store.clone();
    Ok(stream::finished(start, async move {
        let _permit = permit;
        let turn = fork
            .send(text)
            .await
            .map_err(|error| error.to_string())?
            .clone();
        let run = turn.runs().last().cloned();
        let finish_reason = match &run {
            Some(run) => store
                .nonblocking()
                .run_record(run)
                .await
                .ok()
                .and_then(|record| record.finish_reason)
                .map(|reason| reason.name().to_string()),
            None => None,
        };
        Ok(Done {
            conversation,
            branched: true,
            node: turn.node(),
            run: run.map(|run| run.to_string()),
            finish_reason,
            text: turn.text(),
        })
    }))
}
