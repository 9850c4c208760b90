/*!
The commands, one module each (its clap arguments beside its handler,
`run`, which opens what the command needs), the [`Command`] enum that
names them, and the dispatch: one arm per command. What several commands
share lives in [`common`].

To add a command: write `commands/NAME.rs` (its `Args` and `run`), add its
`mod` line, its [`Command`] variant (the doc comment is its line in `skein
help`) and its arm in [`run_command`], and document it in docs/cli.md.
*/

mod again;
mod aliases;
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
mod rename;
mod replay;
mod replays;
mod reply;
mod rerun;
mod search;
mod serve;
mod show;
mod templates;
mod tools;
mod tree;
mod usage;
mod verify;

use crate::cli::Cli;
use anyhow::Result;
use clap::Subcommand;
use common::context::Globals;
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
    /// Ask a stored message again, as a new branch: a user message retried or edited (with TEXT),
    /// a reply regenerated
    Again(again::AgainArgs),
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
    Verify(verify::VerifyArgs),
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
    /// List replays newest first (model change, turns, results, running/stopped/finished), show one's
    /// report again, or delete one with what only it reached
    Replays(replays::ReplaysArgs),
    /// Label recorded turns to keep them as cases; export a label's turns as a JSONL test set
    /// and import one into any database (labelled turns are kept by delete and gc)
    #[command(subcommand)]
    Label(label::LabelCommand),
    /// List conversations, newest first
    Conversations(conversations::ConversationsArgs),
    /// Name a conversation (what --cid NAME finds it by), rename it, or take its name away
    Rename(rename::RenameArgs),
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
    /// The templates `prompt --save` wrote (the engine directory's prompts): list, show, edit
    #[command(subcommand)]
    Templates(templates::TemplatesCommand),
    /// Short names for models and profiles (`-m ALIAS`), kept as profiles of the engine directory
    #[command(subcommand)]
    Aliases(aliases::AliasesCommand),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell)
    Completions(completions::CompletionsArgs),
    /// Print the man page (roff) on stdout
    Man,
    /// Serve the web view of the graph, which can reply, edit, fork and re-run (and, with --proxy, a recording proxy for OpenAI and Anthropic clients)
    Serve(serve::ServeArgs),
}

pub async fn run(cli: Cli) -> Result<ExitCode> {
    skein::config::use_privacy_settings()?;
    common::model::use_key_file();
    let telemetry = start_telemetry(cli.otlp.as_deref())?;
    let globals = Globals {
        db: cli.db,
        db_read: cli.db_read,
        json: cli.json,
    };
    let outcome = run_command(&globals, cli.command).await;
    if outcome.is_err() {
        common::context::remove_blank_databases();
    }
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

async fn run_command(globals: &Globals, command: Command) -> Result<ExitCode> {
    match command {
        Command::Prompt(args) => prompt::run(globals, args).await,
        Command::Chat(args) => chat::run(globals, args).await,
        Command::Reply(args) => reply::run(globals, args).await,
        Command::Fork(args) => fork::run(globals, args).await,
        Command::Again(args) => again::run(globals, args).await,
        Command::Log(args) => log::run(globals, args),
        Command::Search(args) => search::run(globals, args),
        Command::Tree(args) => tree::run(globals, args).await,
        Command::Show(args) => show::run(globals, args),
        Command::Export(args) => export::run(globals, args),
        Command::Import(args) => import::run(globals, args),
        Command::Verify(args) => verify::run(globals, &args),
        Command::Delete(args) => delete::run(globals, args),
        Command::Redact(args) => redact::run(globals, args),
        Command::Gc(args) => gc::run(globals, args),
        Command::Models(args) => models::run(globals, args),
        Command::Tools(args) => tools::run(globals, args).await,
        Command::Explain(args) => explain::run(globals, args).await,
        Command::Rerun(args) => rerun::run(globals, args).await,
        Command::Replay(args) => replay::run(globals, args).await,
        Command::Replays(args) => replays::run(globals, args),
        Command::Label(command) => label::run(globals, command).await,
        Command::Conversations(args) => conversations::run(globals, args),
        Command::Rename(args) => rename::run(globals, args),
        Command::Usage(args) => usage::run(globals, args),
        Command::Prepare(args) => prepare::run(globals, args).await,
        Command::Inspect(command) => inspect::run(globals, command),
        Command::Config(command) => config::run(globals, command),
        Command::Keys(command) => keys::run(globals, command),
        Command::Templates(command) => templates::run(globals, command),
        Command::Aliases(command) => aliases::run(globals, command),
        Command::Completions(args) => completions::run(args),
        Command::Man => man::run(),
        Command::Serve(args) => serve::run(globals, args).await,
    }
}
