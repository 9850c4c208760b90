/*!
Exit codes, documented in docs/cli.md:

| code | meaning |
|---|---|
| 0 | success |
| 1 | any other failure |
| 2 | the command line is wrong: printed by clap, or found when its values are used (an unknown model, tool or `-o` option, a malformed `--schema`, a name that reads as an id or is taken) |
| 3 | an id or prefix matches nothing, or several things; or there is no database where one must exist |
| 4 | a recorded chat's conversation moved while its turn ran (the turn is stored); other turns land in a branch instead |
| 5 | the model call failed (its failed run is recorded) |
| 6 | the data failed a check (`verify` found problems, an import was rejected) |
| 7 | `skein replay`: some replayed turn changed, diverged or failed (the report says which) |
*/

use skein::engine::EngineError;
use skein::store::StoreError;

/// What to print for an error: its chain of causes (each says only what
/// the one before it did not), except where the library's own wording
/// would give library advice; when stdout failed (however that error was
/// wrapped on its way up), what that means.
pub fn message(error: &anyhow::Error) -> String {
    if let Some((kind, text)) = crate::ui::stdout_failure() {
        return crate::ui::describe_failure(*kind, text);
    }
    for cause in error.chain() {
        if let Some(skein::Error::HeadMoved {
            conversation,
            current,
            response,
        }) = cause.downcast_ref::<skein::Error>()
        {
            return head_moved(conversation.as_str(), *current, Some(response.head()));
        }
        if let Some(StoreError::HeadMoved(moved)) = cause.downcast_ref::<StoreError>() {
            return head_moved(&moved.conversation, moved.actual, moved.turn_head);
        }
        if let Some(skein::Error::UnknownTool {
            conversation, tool, ..
        }) = cause.downcast_ref::<skein::Error>()
        {
            return unknown_tool(conversation.as_str(), tool);
        }
        if let Some(recorded) = cause.downcast_ref::<skein::recorded::RecordedError>()
            && let Some(text) = recorded_advice(recorded)
        {
            return text;
        }
        if let Some(store) = cause.downcast_ref::<StoreError>()
            && is_unknown_conversation(store)
            && let Some(database) = crate::commands::common::context::opened_database()
        {
            let here = match store {
                StoreError::ConversationNotFound(_) => "",
                _ => " in this database",
            };
            return format!(
                "{error:#}{here} ({database}): `skein conversations` lists them; --db, SKEIN_DB \
                 or `db` in the configuration file choose another database"
            );
        }
    }
    format!("{error:#}")
}

/// Whether `error` says a conversation typed on the command line is not
/// in the database.
fn is_unknown_conversation(error: &StoreError) -> bool {
    matches!(
        error,
        StoreError::ConversationNotFound(_)
            | StoreError::UnknownPrefix {
                kind: "conversation",
                ..
            }
    )
}

/// A recorded chat's error whose library wording advises a Rust API: what
/// to do on the command line instead.
fn recorded_advice(error: &skein::recorded::RecordedError) -> Option<String> {
    use skein::recorded::RecordedError;
    Some(match error {
        RecordedError::ChainLimit { turn, limit } => format!(
            "turn {turn} reached the chain limit of {limit} model calls with tool calls pending; \
             no turn was recorded (its model calls are kept for usage): raise the limit with \
             --chain-limit N"
        ),
        RecordedError::BeyondCap {
            turn,
            id,
            rank,
            cap,
            removable,
        } => format!(
            "source `{id}` of turn {turn} ranks {rank} (from 1), below the report's cap of {cap} \
             suspects, so it is not removable; run again with --max-suspects {rank} to widen the \
             cap (removable now: {})",
            match removable.is_empty() {
                true => "none".to_string(),
                false => removable.join(", "),
            }
        ),
        _ => return None,
    })
}

/// A conversation's stored tool that this command does not know: what to
/// declare (the library's message advises registering it in code).
fn unknown_tool(conversation: &str, tool: &str) -> String {
    let short: String = conversation.chars().take(12).collect();
    match tool.split_once("__") {
        Some((server, _)) => format!(
            "conversation {short} offers tool `{tool}` of the MCP server `{server}`, which this \
             command does not declare: declare it again as when the conversation began \
             (`--mcp {server}=COMMAND` or `--mcp {server}=URL`), or once for all commands under \
             `[mcp.servers.{server}]` in config.toml (`skein config path` says where)"
        ),
        None => format!(
            "conversation {short} offers tool `{tool}`, which this command does not know: define \
             it under `[tools.{tool}]` in config.toml (`skein config path` says where) as when \
             the conversation began"
        ),
    }
}

/// Exit code 4's message: where the conversation is now, where the stored
/// reply stands, and the commands that keep it.
fn head_moved(
    conversation: &str,
    current: Option<skein::NodeId>,
    reply: Option<skein::NodeId>,
) -> String {
    let short = |id: &str| id.chars().take(12).collect::<String>();
    let now = current.map_or_else(|| "empty".to_string(), |node| node.short());
    match reply {
        Some(reply) => format!(
            "conversation {} moved on while this turn ran (its head is now {now}); the reply is stored \
             as node {}: keep it as a branch with `skein fork {}`, or continue from it with `skein reply {} TEXT`",
            short(conversation),
            reply.short(),
            reply.short(),
            reply.short()
        ),
        None => format!(
            "conversation {} moved on while this turn ran (its head is now {now}); run the turn again",
            short(conversation)
        ),
    }
}

pub const FAILURE: u8 = 1;
/// What clap exits with for a wrong command line; also a name given that
/// the store refuses (one that reads as an id), however it got past clap.
pub const BAD_COMMAND_LINE: u8 = 2;
pub const NOT_FOUND: u8 = 3;
pub const HEAD_MOVED: u8 = 4;
pub const MODEL_FAILED: u8 = 5;
pub const INTEGRITY: u8 = 6;
pub const REPLAY_REGRESSED: u8 = 7;

/// The exit code for an error, from the first typed cause in its chain.
pub fn code_for(error: &anyhow::Error) -> u8 {
    for cause in error.chain() {
        // Opening a model wraps the turn layer's and the engine's errors.
        let cause: &(dyn std::error::Error + 'static) =
            match cause.downcast_ref::<skein::home::OpenModelError>() {
                Some(skein::home::OpenModelError::Model(inner)) => inner,
                Some(skein::home::OpenModelError::EngineDir { source, .. }) => source,
                Some(skein::home::OpenModelError::NearProfile { .. }) => return BAD_COMMAND_LINE,
                _ => cause,
            };
        if let Some(error) = cause.downcast_ref::<skein::Error>() {
            return match error {
                skein::Error::Store(store) => store_code(store),
                skein::Error::Model(resolve) => resolve_code(resolve),
                skein::Error::HeadMoved { .. } => HEAD_MOVED,
                skein::Error::ChainFailed { .. } => MODEL_FAILED,
                skein::Error::Engine(engine) => engine_code(engine),
                skein::Error::CannotAskAgain { .. } | skein::Error::NotInConversation { .. } => {
                    BAD_COMMAND_LINE
                }
                _ => FAILURE,
            };
        }
        if let Some(error) = cause.downcast_ref::<skein::recorded::RecordedError>() {
            use skein::recorded::RecordedError;
            return match error {
                RecordedError::Engine(engine) => engine_code(engine),
                RecordedError::Store(store) => store_code(store),
                RecordedError::NotATurn(_) | RecordedError::TurnOutOfRange { .. } => NOT_FOUND,
                RecordedError::BadComparator { .. }
                | RecordedError::UnknownLiveTool { .. }
                | RecordedError::DuplicateModel(_)
                | RecordedError::NoModel
                | RecordedError::UnknownCandidate { .. }
                | RecordedError::EmptySelection => BAD_COMMAND_LINE,
                RecordedError::Embed(_) => MODEL_FAILED,
                _ => FAILURE,
            };
        }
        if let Some(engine) = cause.downcast_ref::<EngineError>() {
            return engine_code(engine);
        }
        if let Some(store) = cause.downcast_ref::<StoreError>() {
            return store_code(store);
        }
        if let Some(error) = cause.downcast_ref::<skein::providers::ResolveError>() {
            return resolve_code(error);
        }
        if let Some(code) = cause.downcast_ref::<ExitWith>() {
            return code.0;
        }
        // A tool definition given on the command line (`--add-tool`).
        if cause
            .downcast_ref::<skein::core::InvalidToolSpec>()
            .is_some()
        {
            return BAD_COMMAND_LINE;
        }
    }
    FAILURE
}

/// A model name that names no model is the command line's mistake;
/// anything else (a model file or key missing) is the model's failure.
fn resolve_code(error: &skein::providers::ResolveError) -> u8 {
    use skein::providers::ResolveError;
    match error {
        ResolveError::UnknownModel { .. } | ResolveError::MissingArgument { .. } => {
            BAD_COMMAND_LINE
        }
        _ => MODEL_FAILED,
    }
}

fn engine_code(error: &EngineError) -> u8 {
    match error {
        EngineError::Generation { .. }
        | EngineError::Validation { .. }
        | EngineError::BackendUnavailable { .. }
        | EngineError::CredentialVariableUnset { .. } => MODEL_FAILED,
        _ => FAILURE,
    }
}

fn store_code(store: &StoreError) -> u8 {
    {
        {
            match store {
                StoreError::NodeNotFound(_)
                | StoreError::ConversationNotFound(_)
                | StoreError::RunNotFound(_)
                | StoreError::ReplayNotFound(_)
                | StoreError::UnknownPrefix { .. }
                | StoreError::AmbiguousPrefix { .. }
                | StoreError::AmbiguousName { .. }
                | StoreError::NotAnId(_)
                | StoreError::NoDatabase { .. } => NOT_FOUND,
                StoreError::HeadMoved(_) => HEAD_MOVED,
                StoreError::NameLooksLikeId(_) | StoreError::NameTaken { .. } => BAD_COMMAND_LINE,
                StoreError::Import { .. }
                | StoreError::LineTooLong { .. }
                | StoreError::Corrupt { .. }
                | StoreError::MalformedRow(_) => INTEGRITY,
                _ => FAILURE,
            }
        }
    }
}

/// An error that carries its own exit code.
#[derive(Debug)]
pub struct ExitWith(pub u8, pub String);

/// A mistake on the command line found when its values are used (exit
/// code 2), saying what is accepted.
pub fn usage(message: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(ExitWith(BAD_COMMAND_LINE, message.into()))
}

impl std::fmt::Display for ExitWith {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.1)
    }
}

impl std::error::Error for ExitWith {}
