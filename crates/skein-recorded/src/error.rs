/*!
The recorded-chat error type: one variant per way an operation can fail,
each saying what to do about it.
*/

use crate::embed::EmbedError;
use crate::source::HookError;
use skein_core::NodeId;
use skein_engine::EngineError;
use skein_store::StoreError;

pub type Result<T, E = RecordedError> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RecordedError {
    /// A turn number past the last recorded turn.
    #[error("{}", out_of_range(*.turn, *.turns))]
    TurnOutOfRange { turn: usize, turns: usize },
    /// A turn of a chat loaded for another turn alone
    /// ([`LoadedTurn`](crate::LoadedTurn)).
    #[error(
        "turn {turn}'s evidence is not loaded: the chat was loaded for turn {loaded} alone \
         (load that turn, or the whole chat with RecordedChatBuilder::load)"
    )]
    TurnNotLoaded { turn: usize, loaded: usize },
    /// A stored turn of a chat resumed to continue
    /// ([`RecordedChatBuilder::resume`](crate::RecordedChatBuilder::resume)),
    /// which holds only the turns sent since.
    #[error(
        "turn {turn}'s evidence is not loaded: the chat was resumed after its {stored} stored turns \
         to continue it (load that turn with RecordedChatBuilder::load_turn, or the whole chat with \
         RecordedChatBuilder::load)"
    )]
    TurnBeforeResume { turn: usize, stored: usize },
    /// A node that is not the assistant node of any recorded turn.
    #[error("node {} is not the reply of a recorded turn of this chat (give the turn's final assistant node)", .0.short())]
    NotATurn(NodeId),
    /// The tool loop stopped to wait for the application. Nothing was
    /// recorded.
    #[error(
        "turn {turn} paused its tool loop for application input; a recorded turn cannot pause, so no turn was recorded (its model calls are kept for usage) \
         (drive pausing tool loops with skein_engine::Chain directly)"
    )]
    Paused { turn: usize },
    /// The tool loop reached its limit with calls still pending. No turn
    /// was recorded; its model calls were kept.
    #[error(
        "turn {turn} reached the chain limit of {limit} model calls with tool calls pending; no turn was recorded (its model calls are kept for usage) \
         (raise the limit with RecordedChatBuilder::chain_limit)"
    )]
    ChainLimit { turn: usize, limit: u32 },
    /// The model run failed. No turn was recorded; its model calls were
    /// kept.
    #[error("the model run failed, no turn was recorded: {0}")]
    Engine(EngineError),
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The source hook failed. Nothing was recorded.
    #[error("the source hook failed on turn {turn}: {error}")]
    Hook { turn: usize, error: HookError },
    #[error(transparent)]
    Embed(#[from] EmbedError),
    /// The stored conversation could not be opened: its model, or what
    /// serves its tools ([`open_turn`](crate::open_turn)).
    #[error(transparent)]
    Conversation(skein_conversation::Error),
    /// An embedder name no embedder has.
    #[error("unknown embedder `{0}`: use `minilm` or `lexical`")]
    UnknownEmbedder(String),
    /// An operation needs an embedder and none was given.
    #[error("{0} needs an embedder: pass one in its options or with RecordedChatBuilder::embedder")]
    NoEmbedder(&'static str),
    /// `ignore` named nothing.
    #[error("a rerun needs at least one source to ignore; removable sources of turn {turn}: {}", list(.removable))]
    NothingToIgnore { turn: usize, removable: Vec<String> },
    /// `ignore` named a source the turn's report does not know.
    #[error("turn {turn} has no source `{id}`; removable sources: {}", list(.removable))]
    UnknownSource {
        turn: usize,
        id: String,
        removable: Vec<String>,
    },
    /// `ignore` named a source ranked below the report's suspect cap.
    #[error(
        "source `{id}` of turn {turn} ranks {rank} (from 1), below the report's cap of {cap} suspects, so it is not removable; \
         re-run reason with ReasonOptions::max_suspects({rank}) and .fresh() to widen the cap (removable now: {})",
        list(.removable)
    )]
    BeyondCap {
        turn: usize,
        id: String,
        rank: usize,
        cap: usize,
        removable: Vec<String>,
    },
    /// Fewer than two samples were asked for.
    #[error(
        "a rerun needs at least 2 samples (a majority of one is no majority); {0} were asked for"
    )]
    TooFewSamples(u32),
    /// A rerun result that this chat did not produce for this turn.
    #[error("cannot fork from rerun {rerun}: {reason}")]
    Provenance { rerun: String, reason: String },
    /// The operation needs a store and the chat has none.
    #[error("{0} needs a store: attach one with RecordedChatBuilder::store")]
    NoStore(&'static str),
    /// A blocking call was made inside an async runtime.
    #[error(
        "a blocking recorded-chat call was made inside an async runtime, where it would block the runtime; \
         use the async form (`.await`) there"
    )]
    InsideRuntime,
    /// The runtime for a blocking call could not start.
    #[error("cannot start a runtime for a blocking call: {0}")]
    Runtime(std::io::Error),
    /// A replay selected no turn.
    #[error(
        "the selection holds no recorded turn (a turn is a user message and the answers that \
         follow it); select conversations, families, turns' answer nodes, labels or cases, or \
         loosen the filters (search, time range, client)"
    )]
    EmptySelection,
    /// A turn that cannot be a case: no run record produced its answer, so
    /// the request it re-sends (tools, options) is unknown.
    #[error(
        "turn {} has no run record (an imported turn?): its tools and options are unknown, so \
         it cannot be kept as a case; label a turn skein recorded",
        .0.short()
    )]
    NotACase(NodeId),
    /// A line of a cases file that is not a case.
    #[error("line {line} of the cases file: {why}")]
    BadCase { line: usize, why: String },
    /// Reading or writing a cases file failed.
    #[error("cannot read or write the cases: {0}")]
    CasesIo(#[source] std::io::Error),
    /// A replay's search matches more messages of one conversation than a
    /// search returns.
    #[error(
        "the search matches more than {limit} messages of conversation {conversation}; use \
         more words, or a time range"
    )]
    SearchTooWide { conversation: String, limit: usize },
    /// A replay names a live tool the worker was not given.
    #[error(
        "the replay runs tool `{name}` live, but this worker has no tool of that name; give it \
         the tool, or replay without it live"
    )]
    UnknownLiveTool { name: String },
    /// A replay names no model to replay on.
    #[error("say which model to replay on (one, or several to compare)")]
    NoModel,
    /// A replay that compares models names one twice.
    #[error(
        "model `{0}` is named twice: a replay compares each candidate model once (-m A -m B -m C)"
    )]
    DuplicateModel(String),
    /// A replay compares a candidate model the worker was not given.
    #[error(
        "the replay compares model `{model}`, but this worker has no such model; give it every          candidate the replay names ({})",
        .candidates.join(", ")
    )]
    UnknownCandidate {
        model: String,
        candidates: Vec<String>,
    },
    /// A replay's prompt version is not written `ID@VERSION`.
    #[error("a prompt version is written ID@VERSION (e.g. `summarize@2`), not `{0}`")]
    BadPromptVersion(String),
    /// A replay renders a version of a configured prompt the worker's
    /// engine does not have.
    #[error(
        "the replay renders version {version} of configured prompt `{id}`, but this worker's \
         engine has {}; give a version it has, or configure that version (`skein inspect prompt {id}`)",
        known_versions(.known)
    )]
    UnknownPromptVersion {
        id: String,
        version: u32,
        known: Vec<u32>,
    },
    /// A comparator that cannot be read or cannot run.
    #[error("comparator `{spec}`: {why}")]
    BadComparator { spec: String, why: String },
    /// A judge model's answer said neither CHANGED nor HELD.
    #[error(
        "the judge model {model} answered neither CHANGED nor HELD (it said: {answer});          choose a model that follows the instruction, or another comparator"
    )]
    JudgeUnclear { model: String, answer: String },
    /// A stored conversation that is not a recorded chat or is damaged.
    #[error("conversation {conversation} cannot be loaded as a recorded chat: {problem}")]
    NotRecorded {
        conversation: String,
        problem: String,
    },
}

// A store error stays a store error, whichever layer met it.
impl From<skein_conversation::Error> for RecordedError {
    fn from(error: skein_conversation::Error) -> RecordedError {
        match error {
            skein_conversation::Error::Store(error) => RecordedError::Store(error),
            error => RecordedError::Conversation(error),
        }
    }
}

// Not `#[from]`: the message shows the engine's error, so it is not also
// the source (a chain printer would say it twice).
impl From<EngineError> for RecordedError {
    fn from(error: EngineError) -> RecordedError {
        RecordedError::Engine(error)
    }
}

fn known_versions(known: &[u32]) -> String {
    match known {
        [] => "no such prompt".into(),
        versions => format!(
            "version(s) {}",
            versions
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

fn out_of_range(turn: usize, turns: usize) -> String {
    match turns {
        0 => format!("no turn {turn}: the chat has no turns yet (turns are numbered from 0)"),
        n => format!(
            "no turn {turn}: the chat has {n} turn{} (numbered 0 to {})",
            if n == 1 { "" } else { "s" },
            n - 1
        ),
    }
}

fn list(ids: &[String]) -> String {
    if ids.is_empty() {
        "none".to_string()
    } else {
        ids.join(", ")
    }
}

impl From<skein_conversation::service::TurnError> for RecordedError {
    fn from(error: skein_conversation::service::TurnError) -> RecordedError {
        use skein_conversation::service::TurnError;
        match error {
            TurnError::Call(error) => error.into(),
            TurnError::Loop(failed) => failed.error.into(),
            TurnError::Store(error) => RecordedError::Store(error),
        }
    }
}
