/*!
The page's actions at a message: reply, edit, regenerate and fork. Each
goes through the turn layer exactly as the CLI's `reply` and `fork` do
(`Conversation::load`, `Conversation::fork_at`, `Fork`, `Prompt`), so each
makes new nodes and moves or creates bookmarks only, and a failed model
call is recorded as everywhere else.

- reply at a conversation's head continues it; anywhere else it branches
  there, with the settings of the conversation the node belongs to; a
  reply whose conversation moves on while it runs lands in a new branch
  at the node (the landing rule, [`super::stream::turn`]);
- edit and regenerate: the turn layer's `Conversation::again_at` (as the
  CLI's `skein again` and the chat's `!edit`/`!retry`): an edit is a new
  branch where the user message stood, with new text (for a thread's first
  message, a branch from the start of its conversation); a regenerated
  reply a branch at its request with nothing new;
- fork: a new conversation at the node, with or without a first turn
  (with one, it is stored only when that turn succeeds).

Turns stream their reply ([`super::stream`]); `model` and `options`
choose the model and generation options for the turn (default: the
conversation's), as `-m` and `-o` do on the command line.
*/

use super::api::{ApiError, Shared};
use super::models::PageHome;
use super::stream::{self, Start};
use crate::AppState;
use axum::Json;
use axum::extract::Path;
use axum::extract::rejection::JsonRejection;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::json;
use skein::conversation::home;
use skein::core::provider::GenerationOptions;
use skein::store::check_conversation_name;
use skein::{Conversation, Fork, Model, NodeId, Prompt, Role, TurnInput};
use tokio::sync::OwnedSemaphorePermit;

/// The longest text a turn may send, in characters.
pub const TEXT_MAX_CHARS: usize = 200_000;
/// The longest conversation name or model name, in characters.
pub const NAME_MAX_CHARS: usize = 200;
/// The largest `max_tokens` a turn may ask for: every streamed reply is
/// bounded by its model's token limit, and this bounds that limit.
pub const MAX_TOKENS: u32 = 65_536;

/// What a turn action's body may say.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TurnBody {
    text: Option<String>,
    model: Option<String>,
    /// `null` or absent: the model's defaults.
    options: Option<GenerationOptions>,
    name: Option<String>,
}

impl TurnBody {
    /// The body, checked: lengths, options, and text when `text` says
    /// whether the action needs it (`Some(true)`), refuses it
    /// (`Some(false)`) or takes either (`None`).
    fn checked(
        body: Result<Json<TurnBody>, JsonRejection>,
        text: Option<bool>,
    ) -> Result<TurnBody, ApiError> {
        let Json(body) = body?;
        let bad = |message: String| ApiError::new(StatusCode::BAD_REQUEST, message);
        match (&body.text, text) {
            (None, Some(true)) => return Err(bad("this action needs `text`".into())),
            (Some(text), Some(true)) if text.trim().is_empty() => {
                return Err(bad("`text` is empty".into()));
            }
            (Some(_), Some(false)) => {
                return Err(bad("this action takes no `text`".into()));
            }
            _ => {}
        }
        check_length("text", body.text.as_deref(), TEXT_MAX_CHARS)?;
        check_name(body.name.as_deref())?;
        check_length("model", body.model.as_deref(), NAME_MAX_CHARS)?;
        check_options(
            body.options
                .as_ref()
                .unwrap_or(&GenerationOptions::default()),
        )?;
        Ok(body)
    }
}

/// A conversation name a new conversation may take: at most
/// [`NAME_MAX_CHARS`] long, and not one that reads as an id (400, before
/// anything runs or is stored).
pub(crate) fn check_name(name: Option<&str>) -> Result<(), ApiError> {
    check_length("name", name, NAME_MAX_CHARS)?;
    match name {
        Some(name) => Ok(check_conversation_name(name)?),
        None => Ok(()),
    }
}

/// Refuse a name another conversation has (409, before any model runs);
/// the store checks again when the conversation is written.
pub(crate) async fn check_name_free(state: &AppState, name: Option<&str>) -> Result<(), ApiError> {
    match name {
        Some(name) => Ok(state.store.nonblocking().check_name_free(name).await?),
        None => Ok(()),
    }
}

/// A text field at most `max` characters long.
pub(crate) fn check_length(field: &str, value: Option<&str>, max: usize) -> Result<(), ApiError> {
    match value {
        Some(value) if value.chars().count() > max => Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("`{field}` is longer than {max} characters"),
        )),
        _ => Ok(()),
    }
}

pub(crate) fn check_options(options: &GenerationOptions) -> Result<(), ApiError> {
    options.check().map_err(|problem| {
        ApiError::new(StatusCode::BAD_REQUEST, format!("bad option: {problem}"))
    })?;
    match options.max_tokens {
        Some(n) if n > MAX_TOKENS => Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            format!("bad option: max_tokens {n} is above this server's limit of {MAX_TOKENS}"),
        )),
        _ => Ok(()),
    }
}

/// A turn layer error as an answer: a missing id is 404, a bad model name
/// 400, anything else 500.
pub(crate) fn turn_error(error: skein::Error) -> ApiError {
    match error {
        skein::Error::Store(error) => error.into(),
        error @ (skein::Error::Model(_)
        | skein::Error::UnknownTool { .. }
        | skein::Error::StoredModelNamesAFile { .. }
        | skein::Error::StoredModelFileMissing { .. }
        | skein::Error::ModelNameTaken { .. }
        | skein::Error::CannotAskAgain { .. }
        | skein::Error::NotInConversation { .. }
        | skein::Error::ChosenModel(_)) => {
            ApiError::new(StatusCode::BAD_REQUEST, error.to_string())
        }
        error => {
            tracing::error!(%error, "web view: a turn could not start");
            ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, error.to_string())
        }
    }
}

/// One of the server's turn permits, or 429 when all are in use.
pub(crate) fn turn_permit(state: &AppState) -> Result<OwnedSemaphorePermit, ApiError> {
    state.turns.clone().try_acquire_owned().map_err(|_| {
        ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "this server is running as many turns as it runs at once: try again when one ends",
        )
    })
}

/// The model the page chose (`None` when it chose none), checked: only a
/// model the server offers (one of `/api/session`'s `models`) is taken:
/// every model is called with the operator's credentials, so a request
/// never chooses another one (a provider's model the operator did not
/// offer, or a file of the server's machine: `local:PATH`,
/// `scripted:PATH`). Any other name is a 400 naming the offered ones, and
/// nothing is opened or called.
pub(crate) fn chosen_name<'a>(
    state: &AppState,
    name: Option<&'a str>,
) -> Result<Option<&'a str>, ApiError> {
    let Some(name) = name else {
        return Ok(None);
    };
    let choices = state.models.choices();
    if !choices.iter().any(|choice| choice.name == name) {
        let offered: Vec<String> = choices
            .iter()
            .map(|choice| format!("`{}`", choice.name))
            .collect();
        let why = if skein::providers::names_a_file(name) {
            "opens a file of the server's machine, and this server does not offer it"
        } else {
            "is not one this server offers (its models are called with the operator's \
             credentials)"
        };
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            format!(
                "model `{name}` {why}: choose one of the models of /api/session: {}",
                offered.join(", ")
            ),
        ));
    }
    Ok(Some(name))
}

/// The model the page chose ([`chosen_name`]), opened.
pub(crate) fn chosen_model(
    state: &AppState,
    name: Option<&str>,
) -> Result<Option<Model>, ApiError> {
    let Some(name) = chosen_name(state, name)? else {
        return Ok(None);
    };
    state
        .models
        .open(Some(name))
        .map(Some)
        .map_err(|problem| ApiError::new(StatusCode::BAD_REQUEST, format!("{problem:#}")))
}

/// The server's models as the turn layer's [`Home`](skein::Home): what
/// every action opens stored conversations with
/// ([`skein::conversation::home`], as the CLI's commands do).
pub(crate) fn page_home(state: &AppState) -> PageHome<'_> {
    PageHome(&*state.models)
}

/// A stored message as an action finds it: its node, role and parent.
struct StoredMessage {
    node: NodeId,
    role: Role,
    parent: Option<NodeId>,
}

/// The message `prefix` names (404 when none does).
async fn stored_message(state: &AppState, prefix: String) -> Result<StoredMessage, ApiError> {
    let store = state.store.nonblocking();
    let node = store.resolve_node(&prefix).await?;
    let stored = store.node(node).await?;
    Ok(StoredMessage {
        node,
        role: stored.message.role,
        parent: stored.parent,
    })
}

/// A branch at `node` named `name`, with the settings of the conversation
/// the node belongs to (as the CLI's `branch_at`), on the model `model`
/// names when given; its tools (MCP servers among them) started first
/// ([`home::ready_at`]).
async fn branch(
    state: &AppState,
    node: NodeId,
    model: Option<&str>,
    name: Option<String>,
) -> Result<Fork, ApiError> {
    check_name_free(state, name.as_deref()).await?;
    let ready = home::ready_at(&state.store, node, &page_home(state), model)
        .await
        .map_err(turn_error)?;
    let branch = Conversation::fork_at(&state.store, node, &ready.home);
    match &ready.chosen {
        Some(model) => branch.model(model).await,
        None => branch.await,
    }
    .map(|fork| match name {
        Some(name) => fork.name(name),
        None => fork,
    })
    .map_err(turn_error)
}

/// The stored message `node` asked again through the turn layer's
/// [`Conversation::again_at`] (edited with `edited` when given), as the
/// CLI's `skein again` and the chat's `!retry`/`!edit` do: the asking
/// conversation's tools started first ([`home::ready_to_ask_again`]), on
/// the model `model` names when given, else on that conversation's own.
async fn again(
    state: &AppState,
    node: NodeId,
    model: Option<&str>,
    body: &TurnBody,
    edited: Option<TurnInput>,
) -> Result<Prompt, ApiError> {
    let (asker, ready) = home::ready_to_ask_again(&state.store, node, &page_home(state), model)
        .await
        .map_err(turn_error)?;
    let mut again = Conversation::again_at(&state.store, node, &ready.home);
    // Found once: the turn layer need not look the asker up again.
    if let Some(asker) = &asker {
        again = again.of(asker);
    }
    if let Some(model) = &ready.chosen {
        again = again.model(model);
    }
    if let Some(name) = body.name.clone() {
        again = again.name(name);
    }
    if let Some(input) = edited {
        again = again.edited(input);
    }
    again.await.map_err(turn_error)
}

/// Stream `prompt` with the body's options.
fn run(permit: OwnedSemaphorePermit, start: Start, prompt: Prompt, body: &TurnBody) -> Response {
    stream::turn(
        permit,
        start,
        prompt.options(body.options.clone().unwrap_or_default()),
    )
}

/// `POST /api/nodes/{id}/reply`: as `skein reply`.
pub async fn reply(
    state: Shared,
    Path(prefix): Path<String>,
    body: Result<Json<TurnBody>, JsonRejection>,
) -> Result<Response, ApiError> {
    let body = TurnBody::checked(body, Some(true))?;
    let permit = turn_permit(&state)?;
    let node = state.store.nonblocking().resolve_node(&prefix).await?;
    let model = chosen_name(&state, body.model.as_deref())?;
    check_name_free(&state, body.name.as_deref()).await?;
    let ready = home::ready_at(&state.store, node, &page_home(&state), model)
        .await
        .map_err(turn_error)?;
    let mut reply = Conversation::reply_at(&state.store, node, &ready.home);
    if let Some(model) = &ready.chosen {
        reply = reply.model(model);
    }
    if let Some(name) = body.name.clone() {
        reply = reply.branch_name(name);
    }
    let conversation = reply.await.map_err(turn_error)?;
    let start = Start {
        conversation: conversation.id(),
        branched: !conversation.is_stored(),
        from: Some(node),
        at: node,
    };
    let input = TurnInput::text(body.text.clone().unwrap_or_default());
    Ok(run(permit, start, conversation.prompt(input), &body))
}

/// `POST /api/nodes/{id}/edit`: a user message's new text, branched from
/// its parent.
pub async fn edit(
    state: Shared,
    Path(prefix): Path<String>,
    body: Result<Json<TurnBody>, JsonRejection>,
) -> Result<Response, ApiError> {
    let body = TurnBody::checked(body, Some(true))?;
    let permit = turn_permit(&state)?;
    let message = stored_message(&state, prefix).await?;
    if message.role != Role::User {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            format!(
                "node {} is a{} {} message: only a user message can be edited",
                message.node.short(),
                if message.role == Role::Assistant {
                    "n"
                } else {
                    ""
                },
                message.role.as_str()
            ),
        ));
    }
    let model = chosen_name(&state, body.model.as_deref())?;
    check_name_free(&state, body.name.as_deref()).await?;
    let input = TurnInput::text(body.text.clone().unwrap_or_default());
    let prompt = again(&state, message.node, model, &body, Some(input)).await?;
    let start = Start {
        conversation: prompt.conversation().id().clone(),
        branched: true,
        from: message.parent,
        at: message.node,
    };
    Ok(run(permit, start, prompt, &body))
}

/// `POST /api/nodes/{id}/regenerate`: another reply to the request an
/// assistant message answered, in a branch at its parent.
pub async fn regenerate(
    state: Shared,
    Path(prefix): Path<String>,
    body: Result<Json<TurnBody>, JsonRejection>,
) -> Result<Response, ApiError> {
    let body = TurnBody::checked(body, Some(false))?;
    let permit = turn_permit(&state)?;
    let message = stored_message(&state, prefix).await?;
    let parent = match (message.role, message.parent) {
        (Role::Assistant, Some(parent)) => parent,
        (role, _) => {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                format!(
                    "node {} is a {} message{}: only an assistant reply can be regenerated",
                    message.node.short(),
                    role.as_str(),
                    if role == Role::Assistant {
                        " with nothing before it"
                    } else {
                        ""
                    }
                ),
            ));
        }
    };
    let model = chosen_name(&state, body.model.as_deref())?;
    check_name_free(&state, body.name.as_deref()).await?;
    let prompt = again(&state, message.node, model, &body, None).await?;
    let start = Start {
        conversation: prompt.conversation().id().clone(),
        branched: true,
        from: Some(parent),
        at: message.node,
    };
    Ok(run(permit, start, prompt, &body))
}

/// `POST /api/nodes/{id}/fork`: a new conversation at the node; with
/// `text`, its first turn streamed, else the conversation as JSON.
pub async fn fork(
    state: Shared,
    Path(prefix): Path<String>,
    body: Result<Json<TurnBody>, JsonRejection>,
) -> Result<Response, ApiError> {
    let body = TurnBody::checked(body, None)?;
    let permit = match body.text {
        Some(_) => Some(turn_permit(&state)?),
        None => None,
    };
    let message = stored_message(&state, prefix).await?;
    let model = chosen_name(&state, body.model.as_deref())?;
    let fork = branch(&state, message.node, model, body.name.clone()).await?;
    let (Some(permit), Some(text)) = (permit, body.text.clone()) else {
        let conversation = fork.create().await.map_err(turn_error)?;
        return Ok((
            StatusCode::CREATED,
            Json(json!({ "conversation": conversation.id(), "from": message.node })),
        )
            .into_response());
    };
    // Stored with its first turn, and only if that turn succeeds.
    let conversation = fork.conversation();
    let start = Start {
        conversation: conversation.id().clone(),
        branched: true,
        from: Some(message.node),
        at: message.node,
    };
    Ok(run(
        permit,
        start,
        conversation.prompt(TurnInput::text(text)),
        &body,
    ))
}
