/*!
The options of a turn, shared by the commands that run one (`prompt`,
`reply`, `fork`, `chat`) and by `prepare`: how it runs ([`TurnArgs`]),
what its request holds besides its text ([`RequestArgs`]), what its
message holds besides its text ([`PartsArgs`]) and which conversation it
goes on ([`ContinueArgs`]); read and checked once into [`TurnSettings`].
*/

use super::model::{KeyArgs, ModelArgs};
use super::tools::ToolArgs;
use crate::input;
use anyhow::Result;
use clap::Args;
use skein::core::provider::GenerationOptions;
use skein::{Conversation, Model, Prompt, Tool};
use std::path::PathBuf;
use std::sync::Arc;

/// How one turn runs, besides where: shared by `prompt`, `reply`, `fork`
/// and `chat` (where it applies to every line).
#[derive(Debug, Args)]
pub struct TurnArgs {
    #[command(flatten)]
    pub request: RequestArgs,
    #[command(flatten)]
    pub key: KeyArgs,
    /// Do not record the turn (nor create a conversation for it)
    #[arg(short = 'n', long)]
    pub no_log: bool,
    /// Print the turn's token usage on stderr after the reply
    #[arg(short = 'u', long)]
    pub usage: bool,
    /// Print the reply once it is complete instead of as it is produced
    #[arg(long)]
    pub no_stream: bool,
    /// Print only the first fenced code block of the reply (the whole reply when it has none)
    #[arg(short = 'x', long)]
    pub extract: bool,
}

/// What a turn's request is made of besides its text: shared by the
/// commands that run turns and by `prepare`.
#[derive(Debug, Args)]
pub struct RequestArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// A system prompt sent before the text (`chat`: before the first line
    /// of a new conversation)
    #[arg(short, long, value_name = "TEXT")]
    pub system: Option<String>,
    #[command(flatten)]
    pub tools: ToolArgs,
    /// Ask for a reply matching a JSON Schema, given as JSON, as a file, or as `llm`'s concise
    /// fields (`'name, age int, bio: one sentence'`); the reply is validated (and repaired when
    /// the model allows), and only the valid reply is printed
    #[arg(long, value_name = "JSON|FILE|FIELDS")]
    pub schema: Option<String>,
    /// A generation option (repeatable): temperature (0 to 2), top_p (above
    /// 0, at most 1), seed or max_tokens (at least 1)
    #[arg(
        short = 'o',
        long = "option",
        num_args = 2,
        value_names = ["KEY", "VALUE"],
        allow_negative_numbers = true
    )]
    pub options: Vec<String>,
}

/// What a turn's message holds beside its text: shared by `prompt`,
/// `reply` and `fork`.
#[derive(Debug, Default, Args)]
pub struct PartsArgs {
    /// Attach a file or an http(s) URL (repeatable; `-` reads it from stdin): an image, a PDF,
    /// audio... (its type told from its content or name), sent after the text; refused when the
    /// model cannot take it
    #[arg(short = 'a', long = "attachment", value_name = "FILE|URL")]
    pub attachments: Vec<PathBuf>,
    /// Attach a file whose media type you give (repeatable), e.g. `--at
    /// scan.bin image/jpeg`
    #[arg(
        long = "attachment-type",
        visible_alias = "at",
        num_args = 2,
        value_names = ["FILE", "TYPE"]
    )]
    pub typed_attachments: Vec<String>,
    /// Add a text file or an http(s) URL as a fragment (repeatable): a part of its own before
    /// the text, stored once however many prompts share it
    #[arg(short = 'f', long = "fragment", value_name = "FILE|URL")]
    pub fragments: Vec<PathBuf>,
}

impl PartsArgs {
    pub fn is_empty(&self) -> bool {
        self.attachments.is_empty()
            && self.typed_attachments.is_empty()
            && self.fragments.is_empty()
    }
}

/// Which conversation a turn goes on: the latest, one by id, or a new one.
#[derive(Debug, Args)]
pub struct ContinueArgs {
    /// Continue the most recently updated conversation
    #[arg(short = 'c', long = "continue", conflicts_with = "cid")]
    pub continue_last: bool,
    /// Continue the conversation with this id (any unique prefix) or name
    #[arg(long, value_name = "ID")]
    pub cid: Option<String>,
    /// Name a new conversation (not 4 to 64 hex digits: an id wins over a name)
    #[arg(long, value_name = "NAME", conflicts_with_all = ["continue_last", "cid"], value_parser = parse_conversation_name)]
    pub name: Option<String>,
}

/// A conversation name, refused like a malformed flag (exit code 2, before
/// anything runs) when it reads as an id.
pub fn parse_conversation_name(value: &str) -> Result<String, String> {
    skein::store::check_conversation_name(value)
        .map(|()| value.to_string())
        .map_err(|error| error.to_string())
}

/// What [`TurnArgs`] ask of each turn, read and checked once.
pub struct TurnSettings {
    pub model: Option<String>,
    pub system: Option<String>,
    /// The tools named with `-T` (`None`: the conversation's own).
    pub tools: Option<Vec<Arc<dyn Tool>>>,
    pub chain_limit: Option<u32>,
    pub options: GenerationOptions,
    pub schema: Option<serde_json::Value>,
    pub no_log: bool,
    pub output: TurnOutput,
}

/// How a turn's reply is printed (`-u`, `--no-stream`, `-x`).
#[derive(Clone, Copy, Debug, Default)]
pub struct TurnOutput {
    /// Note the token usage on stderr.
    pub usage: bool,
    /// Print the reply once complete.
    pub no_stream: bool,
    /// Print only the first fenced code block.
    pub extract: bool,
}

impl TurnArgs {
    /// Declare `--mcp`'s servers and use `--key`: before the command looks
    /// up a tool or opens a model.
    pub fn declare_tools_and_key(&self) -> Result<()> {
        super::tools::declare(&self.request.tools.mcp)?;
        self.key.use_for_this_command()
    }

    pub async fn settings(&self) -> Result<TurnSettings> {
        let mut settings = self.request.settings(self.no_log).await?;
        settings.output = TurnOutput {
            usage: self.usage,
            no_stream: self.no_stream,
            extract: self.extract,
        };
        Ok(settings)
    }
}

impl RequestArgs {
    pub async fn settings(&self, no_log: bool) -> Result<TurnSettings> {
        Ok(TurnSettings {
            model: self.model.model.clone(),
            system: self.system.clone(),
            tools: self.tools.resolve().await?,
            chain_limit: self.tools.chain_limit,
            options: generation_options(&self.options)?,
            schema: self.schema.as_deref().map(input::schema).transpose()?,
            no_log,
            output: TurnOutput::default(),
        })
    }
}

impl ContinueArgs {
    /// Whether the turn continues a stored conversation (`-c`, `--cid`).
    pub fn continues(&self) -> bool {
        self.continue_last || self.cid.is_some()
    }
}

impl TurnSettings {
    /// The turn's own settings on `prompt`, with `system` (the caller's to
    /// give: `chat` sends `--system` with its first line only).
    pub fn apply(&self, mut prompt: Prompt, system: Option<String>) -> Prompt {
        prompt = prompt.options(self.options.clone());
        if let Some(system) = system {
            prompt = prompt.system(system);
        }
        if let Some(schema) = &self.schema {
            prompt = prompt.schema(schema.clone());
        }
        if let Some(tools) = &self.tools {
            prompt = prompt.tools(tools.clone());
        }
        prompt
    }

    /// A new conversation on `home`, recorded in the CLI's store and named
    /// `name`, with the tools and chain limit asked for.
    pub fn new_conversation(
        &self,
        ctx: &super::context::Context,
        home: &Model,
        name: Option<String>,
    ) -> Conversation {
        let mut builder = home.conversation().store(&ctx.store);
        if let Some(name) = name {
            builder = builder.name(name);
        }
        if let Some(tools) = self.tools.clone() {
            builder = builder.tools(tools);
        }
        if let Some(limit) = self.chain_limit {
            builder = builder.chain_limit(limit);
        }
        builder.build()
    }

    /// `conversation`, or with `--no-log` the same one kept in memory only.
    pub fn recorded_or_not(&self, conversation: Conversation) -> Conversation {
        if self.no_log {
            conversation.without_store()
        } else {
            conversation
        }
    }
}

/// `-o KEY VALUE` pairs as generation options; an unknown key, a value of
/// the wrong kind or out of range is an error naming what is accepted.
fn generation_options(pairs: &[String]) -> Result<GenerationOptions> {
    let mut map = serde_json::Map::new();
    for pair in pairs.chunks(2) {
        let [key, value] = pair else {
            return Err(crate::exit::usage("-o takes a KEY and a VALUE"));
        };
        let value = serde_json::from_str(value)
            .unwrap_or_else(|_| serde_json::Value::String(value.clone()));
        map.insert(key.clone(), value);
    }
    let options: GenerationOptions = serde_json::from_value(serde_json::Value::Object(map))
        .map_err(|error| {
            crate::exit::usage(format!(
                "bad -o option: {error} (known: temperature, top_p, seed, max_tokens)"
            ))
        })?;
    options
        .check()
        .map_err(|problem| crate::exit::usage(format!("bad -o option: {problem}")))?;
    Ok(options)
}
