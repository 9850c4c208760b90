/*!
The commands, one module each (its clap arguments beside its handler),
the [`Command`] enum that names them, and dispatch: what each command
needs opened before it runs. What several commands share lives in
[`common`].
*/

mod chat;
pub mod common;
mod completions;
mod config;
mod conversations;
mod delete;
mod explain;
mod export;
mod fork;
mod gc;
mod import;
mod inspect;
mod keys;
mod label;
mod log;
mod man;
mod models;
mod prepare;
pub mod prompt;
mod redact;
mod replay;
mod reply;
mod rerun;
mod search;
mod serve;
mod show;
mod tools;
mod tree;
mod usage;
mod verify;

use crate::cli::Cli;
use anyhow::{Context as _, Result};
use clap::Subcommand;
use common::context::{Context, default_db_path, open_for_web_view, open_store};
use skein::store::OpenMode;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a turn and record it (a new conversation unless -c or --cid)
    Prompt(prompt::PromptArgs),
    /// Talk interactively: each line is a turn (`!multi`, `!retry`, `!edit`, `!fork`, `!reply NODE`,
    /// `!tree`, `!log`, `!help`, `!quit`; Ctrl-C stops a reply)
    Chat(chat::ChatArgs),
    /// Continue from any node: extends the conversation whose head it is, or branches a new one there
    Reply(reply::ReplyArgs),
    /// Start a new conversation at a node, optionally running a first turn
    Fork(fork::ForkArgs),
    /// Show recent turns, or the messages of one conversation
    #[command(visible_alias = "logs")]
    Log(log::LogArgs),
    /// Find messages by their words: all words must appear; "quoted phrases" in order; word* is a
    /// prefix. Newest first, with the conversations they are in
    Search(search::SearchArgs),
    /// Draw the branching structure around a conversation
    Tree(tree::TreeArgs),
    /// Show one node: its parts, the runs that produced it, its children
    Show(show::ShowArgs),
    /// Write the whole database as JSONL (to stdout or a file)
    Export(export::ExportArgs),
    /// Import a JSONL export (all or nothing; every id is rechecked)
    Import(import::ImportArgs),
    /// Recompute every id and hash in the database and report problems
    Verify,
    /// Delete conversations (by id or name, a family, or every one older than a time or recorded by
    /// the proxy) with their runs and reruns, and every message nothing remaining still uses;
    /// shared messages stay, and the report says why. --dry-run prints the plan
    Delete(delete::DeleteArgs),
    /// Erase one message's content in place: it keeps its id and place in every thread, and a
    /// tombstone keeps its content's hash, who erased it, when and why
    Redact(redact::RedactArgs),
    /// Collect the messages nothing reaches, then rewrite the database so deleted and erased bytes
    /// leave its file (SQLite VACUUM with secure_delete; PostgreSQL VACUUM FULL)
    Gc(gc::GcArgs),
    /// List the models skein can use (`models list`), fetch local ones, set the default
    Models(models::ModelsArgs),
    /// List the tools -T can offer (built in, command tools and MCP servers' tools) with their schema
    /// hashes (starts every MCP server declared)
    Tools(tools::ToolsArgs),
    /// Rank the context sources of a recorded turn by their influence on its reply
    Explain(explain::ExplainArgs),
    /// Re-run a recorded turn without chosen sources; prints the rerun id and verdict
    Rerun(rerun::RerunArgs),
    /// Replay recorded turns with one change (another model, options, system prompt, tools or
    /// sources), tool calls answered from the recording; reports what changed, held and diverged
    /// (exit 7 when any turn did not hold)
    Replay(replay::ReplayArgs),
    /// Label recorded turns to keep them as cases; export a label's turns as a JSONL test set
    /// and import one into any database (labelled turns are kept by delete and gc)
    #[command(subcommand)]
    Label(label::LabelCommand),
    /// List conversations, newest first
    Conversations(conversations::ConversationsArgs),
    /// Token usage totals of a node's runs, a conversation, a family or a coordinator sequence,
    /// from the recorded runs (each counted once; incomplete figures are marked)
    Usage(usage::UsageArgs),
    /// Print the fully rendered request a turn would send (a configured prompt with -t), without
    /// running or recording anything
    Prepare(prepare::PrepareArgs),
    /// Show a configured prompt, profile or backend of the engine directory (`engine` in the
    /// configuration file)
    #[command(subcommand)]
    Inspect(inspect::InspectCommand),
    /// Where the configuration file is, and the settings in force
    #[command(subcommand)]
    Config(config::ConfigCommand),
    /// Save provider keys in a file only you can read (used when the environment variable is unset)
    #[command(subcommand)]
    Keys(keys::KeysCommand),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell)
    Completions(completions::CompletionsArgs),
    /// Print the man page (roff) on stdout
    Man,
    /// Serve the web view of the graph, which can reply, edit, fork and re-run (and, with --proxy, a recording proxy for OpenAI and Anthropic clients)
    Serve(serve::ServeArgs),
}

pub async fn run(cli: Cli) -> Result<ExitCode> {
    let mcp = match &cli.command {
        Command::Prompt(args) => Some(&args.turn.request.tools.mcp),
        Command::Chat(args) => Some(&args.turn.request.tools.mcp),
        Command::Reply(args) => Some(&args.turn.request.tools.mcp),
        Command::Fork(args) => Some(&args.turn.request.tools.mcp),
        Command::Tools(args) => Some(&args.mcp),
        _ => None,
    };
    if let Some(mcp) = mcp {
        common::tools::declare(mcp)?;
    }
    skein::config::use_privacy_settings()?;
    common::model::use_keys_for_this_command(
        key_args(&cli.command).and_then(|args| args.key.as_deref()),
    )?;
    let telemetry = start_telemetry(cli.otlp.as_deref())?;
    let outcome = dispatch(cli).await;
    common::tools::close().await;
    if let Some(telemetry) = telemetry {
        // Flushing waits for the exporter, whose requests run on this
        // runtime: wait off its thread so that it keeps running them.
        let _ = tokio::task::spawn_blocking(move || drop(telemetry)).await;
    }
    outcome
}

/// OpenTelemetry export when `--otlp`, the environment or the
/// configuration file asks for it. A collector that cannot be set up is
/// reported and the command goes on without export.
fn start_telemetry(flag: Option<&str>) -> Result<Option<skein::telemetry::Telemetry>> {
    let Some(settings) = skein::telemetry::Settings::resolve(flag, &crate::config::get()?.otel)?
    else {
        return Ok(None);
    };
    match skein::telemetry::install(&settings) {
        Ok(telemetry) => Ok(Some(telemetry)),
        Err(error) => {
            crate::ui::note(format!("warning: no OpenTelemetry export: {error}"));
            Ok(None)
        }
    }
}

/// The `--key` of a command that calls models.
fn key_args(command: &Command) -> Option<&common::model::KeyArgs> {
    match command {
        Command::Prompt(args) => Some(&args.turn.key),
        Command::Chat(args) => Some(&args.turn.key),
        Command::Reply(args) => Some(&args.turn.key),
        Command::Fork(args) => Some(&args.turn.key),
        Command::Serve(args) => Some(&args.key),
        _ => None,
    }
}

async fn dispatch(cli: Cli) -> Result<ExitCode> {
    // Model management, configuration and generated docs never touch the
    // database.
    let command = match cli.command {
        Command::Models(args) => {
            return models::run(args, cli.json);
        }
        Command::Config(command) => return config::run(command, cli.db.as_deref(), cli.json),
        Command::Keys(command) => return keys::run(command, cli.json),
        Command::Tools(_) => return tools::run(cli.json).await,
        Command::Completions(args) => return completions::run(args),
        Command::Man => return man::run(),
        // The engine directory alone.
        Command::Inspect(command) => return inspect::run(command, cli.json),
        // A request rendered without a conversation's history needs no
        // database.
        Command::Prepare(args) if args.cid.is_none() && !args.continue_last => {
            return prepare::run(None, cli.json, args).await;
        }
        other => other,
    };
    // The configuration file's standby belongs to its database.
    let (path, read_url) = match cli.db {
        Some(path) => (path, cli.db_read),
        None => match default_db_path()? {
            (path, crate::config::Source::ConfigFile) => (
                path,
                cli.db_read
                    .or_else(|| crate::config::get().ok()?.db_read.clone()),
            ),
            (path, _) => (path, cli.db_read),
        },
    };
    let read_url = read_url.as_deref();
    let fresh = is_missing_file(&path);
    // A turn that records nothing never creates the database: with no
    // database to read history from, it runs on a scratch one that
    // vanishes with the command.
    let scratch = match (fresh, unrecorded_new_turn(&command)) {
        (true, true) => Some(tempfile::tempdir().context("cannot make a scratch directory")?),
        _ => None,
    };
    let (opened, command) = match (&scratch, command) {
        (Some(dir), command) => (
            open_store(&dir.path().join("scratch.db"), None, OpenMode::Create),
            command,
        ),
        // The web view without the proxy: a database it cannot write is
        // served read-only rather than refused.
        (None, Command::Serve(mut args)) if !args.proxy && !args.read_only => {
            let (store, read_only) = open_for_web_view(&path, read_url)?;
            args.read_only = read_only;
            (Ok(store), Command::Serve(args))
        }
        (None, other) => (open_store(&path, read_url, open_mode(&other)), other),
    };
    let opened = opened?;
    // Commands that only show what is recorded take a view a moment old
    // from the standby; `serve` gives its pages one and records on the
    // primary; turns read from the primary.
    let store = if shows_recorded(&command) {
        opened.reads()
    } else {
        opened
    };
    let ctx = Context {
        store,
        json: cli.json,
    };
    let importing = matches!(command, Command::Import(_));
    let outcome = run_command(&ctx, command).await;
    drop(ctx);
    drop(scratch);
    // An import is all or nothing: a failed one into a database it created
    // leaves no empty file behind.
    if importing && fresh && outcome.is_err() {
        remove_database_files(&path);
    }
    outcome
}

/// Whether `path` names a SQLite file that does not exist (a PostgreSQL
/// URL is never created by skein, so it never counts).
fn is_missing_file(path: &Path) -> bool {
    let url = path
        .to_str()
        .is_some_and(skein::store::location::is_postgres_url);
    !url && !path.exists()
}

/// A `--no-log` turn that continues nothing: it needs no database at all.
fn unrecorded_new_turn(command: &Command) -> bool {
    match command {
        Command::Prompt(args) => {
            args.turn.no_log && !args.conversation.continue_last && args.conversation.cid.is_none()
        }
        Command::Chat(args) => {
            args.turn.no_log && !args.conversation.continue_last && args.conversation.cid.is_none()
        }
        _ => false,
    }
}

/// Remove a SQLite database and its journal files.
fn remove_database_files(path: &Path) {
    for suffix in ["", "-wal", "-shm", "-journal"] {
        let mut name = path.as_os_str().to_owned();
        name.push(suffix);
        let _ = std::fs::remove_file(PathBuf::from(name));
    }
}

async fn run_command(ctx: &Context, command: Command) -> Result<ExitCode> {
    match command {
        Command::Prompt(args) => prompt::run(ctx, args).await,
        Command::Chat(args) => chat::run(ctx, args).await,
        Command::Reply(args) => reply::run(ctx, args).await,
        Command::Fork(args) => fork::run(ctx, args).await,
        Command::Log(args) => log::run(ctx, args),
        Command::Search(args) => search::run(ctx, args),
        Command::Tree(args) => tree::run(ctx, args).await,
        Command::Show(args) => show::run(ctx, args),
        Command::Export(args) => export::run(ctx, args),
        Command::Import(args) => import::run(ctx, args),
        Command::Verify => verify::run(ctx),
        Command::Delete(args) => delete::run(ctx, args),
        Command::Redact(args) => redact::run(ctx, args),
        Command::Gc(args) => gc::run(ctx, args),
        Command::Serve(args) => serve::run(ctx, args).await,
        Command::Conversations(args) => conversations::run(ctx, args),
        Command::Explain(args) => explain::run(ctx, args).await,
        Command::Rerun(args) => rerun::run(ctx, args).await,
        Command::Replay(args) => replay::run(ctx, args).await,
        Command::Label(command) => label::run(ctx, command).await,
        Command::Usage(args) => usage::run(ctx, args),
        Command::Prepare(args) => prepare::run(Some(&ctx.store), ctx.json, args).await,
        Command::Models(_)
        | Command::Config(_)
        | Command::Keys(_)
        | Command::Tools(_)
        | Command::Completions(_)
        | Command::Man
        | Command::Inspect(_) => {
            unreachable!("handled before opening the database")
        }
    }
}

/// Whether a command only shows what is recorded, and so reads from the
/// standby `--db-read` names (docs/postgres.md).
fn shows_recorded(command: &Command) -> bool {
    matches!(
        command,
        Command::Log(_)
            | Command::Search(_)
            | Command::Tree(_)
            | Command::Show(_)
            | Command::Usage(_)
            | Command::Conversations(_)
            | Command::Export(_)
            | Command::Verify
    )
}

/// How a command opens the database. Commands that only read never create
/// one, nor write to it (so read-only files and mounts work); commands that
/// work on recorded turns need an existing one; commands that record may
/// create it. No command touches a file that is not a skein database.
fn open_mode(command: &Command) -> OpenMode {
    match command {
        Command::Log(_)
        | Command::Search(_)
        | Command::Tree(_)
        | Command::Show(_)
        | Command::Usage(_)
        | Command::Prepare(_)
        | Command::Conversations(_)
        | Command::Export(_)
        | Command::Label(label::LabelCommand::List(_) | label::LabelCommand::Export(_))
        | Command::Verify => OpenMode::ReadOnly,
        // A turn that records nothing only reads the history it continues.
        Command::Prompt(args) if args.turn.no_log => OpenMode::ReadOnly,
        Command::Chat(args) if args.turn.no_log => OpenMode::ReadOnly,
        Command::Reply(args) if args.turn.no_log => OpenMode::ReadOnly,
        Command::Fork(args) if args.turn.no_log => OpenMode::ReadOnly,
        Command::Serve(args) if args.read_only => OpenMode::ReadOnly,
        // The web view acts on the graph; only the proxy creates one.
        Command::Serve(args) if !args.proxy => OpenMode::Existing,
        // Cases are a test set for any database, an empty one included.
        Command::Replay(args) if args.cases.is_some() => OpenMode::Create,
        // Explain caches embeddings; the others add to what exists.
        Command::Explain(_)
        | Command::Rerun(_)
        | Command::Replay(_)
        | Command::Label(label::LabelCommand::Add(_) | label::LabelCommand::Rm(_))
        | Command::Reply(_)
        | Command::Fork(_)
        | Command::Delete(_) => OpenMode::Existing,
        _ => OpenMode::Create,
    }
}
