/*!
Command dispatch and what commands share: the opened store, the output
mode, resolving ids typed by people, and running-and-recording a turn.
*/

mod chat;
mod configured;
mod delete;
mod inspect;
mod keys;
pub mod label;
mod models;
mod recorded;
mod replay;
mod serve;
mod settings;
mod tools;
mod transfer;
mod turns;
mod usage;

use crate::exit::{ExitWith, NOT_FOUND};
use crate::flags::{Cli, Command, ContinueArgs};
use crate::ui;
use anyhow::{Context as _, Result};
use skein::store::{ConversationRecord, OpenMode, StoreError};
use skein::{NodeId, Store};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// The model used when neither `-m` nor the conversation names one:
/// `SKEIN_MODEL`, else the configuration file's, else the embedded SmolLM2.
pub fn default_model() -> Result<String> {
    Ok(crate::config::default_model()?.0)
}

/// What every command gets.
pub struct Context {
    pub store: Store,
    pub json: bool,
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
        tools::declare(mcp)?;
    }
    skein::config::use_privacy_settings()?;
    keys::use_for_this_command(key_args(&cli.command).and_then(|args| args.key.as_deref()))?;
    let telemetry = start_telemetry(cli.otlp.as_deref())?;
    let outcome = dispatch(cli).await;
    tools::close().await;
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
            ui::note(format!("warning: no OpenTelemetry export: {error}"));
            Ok(None)
        }
    }
}

/// The `--key` of a command that calls models.
fn key_args(command: &Command) -> Option<&crate::flags::KeyArgs> {
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
            let command = args.command.unwrap_or(crate::flags::ModelsCommand::List);
            return models::run(command, cli.json);
        }
        Command::Config(command) => return settings::run(command, cli.db.as_deref(), cli.json),
        Command::Keys(command) => return keys::run(command, cli.json),
        Command::Tools(_) => return tools::list(cli.json).await,
        Command::Completions(args) => return settings::completions(args),
        Command::Man => return settings::man(),
        // The engine directory alone.
        Command::Inspect(command) => return configured::inspect(command, cli.json),
        // A request rendered without a conversation's history needs no
        // database.
        Command::Prepare(args) if args.cid.is_none() && !args.continue_last => {
            return turns::prepare(None, cli.json, args).await;
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
        Command::Prompt(args) => turns::prompt(ctx, args).await,
        Command::Chat(args) => chat::chat(ctx, args).await,
        Command::Reply(args) => turns::reply(ctx, args).await,
        Command::Fork(args) => turns::fork(ctx, args).await,
        Command::Log(args) => inspect::log(ctx, args),
        Command::Search(args) => inspect::search(ctx, args),
        Command::Tree(args) => inspect::tree(ctx, args).await,
        Command::Show(args) => inspect::show(ctx, args),
        Command::Export(args) => transfer::export(ctx, args),
        Command::Import(args) => transfer::import(ctx, args),
        Command::Verify => transfer::verify(ctx),
        Command::Delete(args) => delete::delete(ctx, args),
        Command::Redact(args) => delete::redact(ctx, args),
        Command::Gc(args) => delete::gc(ctx, args),
        Command::Serve(args) => serve::serve(ctx, args).await,
        Command::Conversations(args) => inspect::conversations(ctx, args),
        Command::Explain(args) => recorded::explain(ctx, args).await,
        Command::Rerun(args) => recorded::rerun(ctx, args).await,
        Command::Replay(args) => replay::replay(ctx, args).await,
        Command::Label(command) => label::label(ctx, command).await,
        Command::Usage(args) => usage::usage(ctx, args),
        Command::Prepare(args) => turns::prepare(Some(&ctx.store), ctx.json, args).await,
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

/// The database for the web view: written when it can be, else (a file or
/// mount this user cannot write) opened read-only, which the server then
/// is, as with `--read-only`; a note says so and why. `true` when it is
/// read-only.
fn open_for_web_view(path: &Path, read_url: Option<&str>) -> Result<(Store, bool)> {
    let refused = match open_store(path, read_url, OpenMode::Existing) {
        Ok(store) => return Ok((store, false)),
        Err(error) => error,
    };
    let fixed = |error: &anyhow::Error| {
        matches!(
            error.downcast_ref::<StoreError>(),
            Some(
                StoreError::NotSkein { .. }
                    | StoreError::NewerSchema { .. }
                    | StoreError::MigrationDenied { .. }
            )
        ) || error.downcast_ref::<ExitWith>().is_some()
    };
    if fixed(&refused) {
        return Err(refused);
    }
    let Ok(store) = open_store(path, read_url, OpenMode::ReadOnly) else {
        return Err(refused);
    };
    ui::note(format!(
        "the database cannot be written ({refused:#}): serving it read-only, as --read-only does"
    ));
    Ok((store, true))
}

fn open_store(path: &Path, read_url: Option<&str>, mode: OpenMode) -> Result<Store> {
    let shown = skein::store::location::redact(&path.display().to_string());
    let opened = match read_url {
        Some(read_url) => Store::open_with_reads(path, read_url, mode),
        None => Store::open_with(path, mode),
    };
    opened.map_err(|error| match error {
        StoreError::NoDatabase { .. } => anyhow::Error::new(ExitWith(
            NOT_FOUND,
            format!(
                "{error}; check --db, SKEIN_DB or `db` in the configuration file \
                 (`skein config show` says which is in force)"
            ),
        )),
        // These name the location themselves.
        error @ (StoreError::NotSkein { .. }
        | StoreError::OutdatedReadOnly { .. }
        | StoreError::MigrationDenied { .. }) => anyhow::Error::new(error),
        error => anyhow::Error::new(error).context(format!("cannot open the database {shown}")),
    })
}

/// The database when neither `--db` nor `SKEIN_DB` names one: the
/// configuration file's `db`, else `skein.db` in the user's data directory.
fn default_db_path() -> Result<(PathBuf, crate::config::Source)> {
    if let Some(db) = &crate::config::get()?.db {
        return Ok((db.clone(), crate::config::Source::ConfigFile));
    }
    let dirs = directories::ProjectDirs::from("", "", "skein")
        .context("cannot find your data directory: pass --db PATH or set SKEIN_DB")?;
    Ok((
        dirs.data_dir().join("skein.db"),
        crate::config::Source::BuiltIn,
    ))
}

impl Context {
    /// The node `text` names: a node id (any unique prefix), else a
    /// conversation (its id or name, through the store's one resolver)
    /// standing for its head. A node id wins over a conversation.
    pub fn node(&self, text: &str) -> Result<NodeId> {
        let node_error = match self.store.resolve_node(text) {
            Ok(node) => return Ok(node),
            Err(error @ (StoreError::UnknownPrefix { .. } | StoreError::NotAnId(_))) => error,
            Err(other) => return Err(other.into()),
        };
        let id = match self.store.resolve_conversation(text) {
            Ok(id) => id,
            Err(StoreError::ConversationNotFound(_) | StoreError::UnknownPrefix { .. }) => {
                return Err(anyhow::Error::new(ExitWith(
                    NOT_FOUND,
                    format!("{node_error}, and no conversation has that id or name"),
                )));
            }
            Err(other) => return Err(other.into()),
        };
        let conversation = self.store.conversation(&id)?;
        conversation.head.ok_or_else(|| {
            anyhow::Error::new(ExitWith(
                NOT_FOUND,
                format!(
                    "conversation {} has no messages yet, so it names no node",
                    conversation.id.short()
                ),
            ))
        })
    }

    pub fn conversation(&self, prefix: &str) -> Result<ConversationRecord> {
        let id = self.store.resolve_conversation(prefix)?;
        Ok(self.store.conversation(&id)?)
    }

    /// Refuse `--name NAME` when a conversation already has that name
    /// (exit code 2, before anything runs), by the store's own check; the
    /// write that sets the name checks again in its transaction.
    pub fn check_name_free(&self, name: Option<&str>) -> Result<()> {
        match name {
            Some(name) => Ok(self.store.check_name_free(name)?),
            None => Ok(()),
        }
    }

    /// The stored conversation `-c` or `--cid` chooses, `None` for a new one.
    pub fn continued(&self, args: &ContinueArgs) -> Result<Option<ConversationRecord>> {
        if args.continue_last {
            Ok(Some(self.latest_conversation()?))
        } else if let Some(cid) = &args.cid {
            Ok(Some(self.conversation(cid)?))
        } else {
            Ok(None)
        }
    }

    /// The most recently updated conversation.
    pub fn latest_conversation(&self) -> Result<ConversationRecord> {
        latest_conversation(&self.store)
    }
}

/// The most recently updated conversation in `store` (what `-c` continues).
pub fn latest_conversation(store: &Store) -> Result<ConversationRecord> {
    store
        .list_conversations(1)?
        .into_iter()
        .next()
        .ok_or_else(|| {
            anyhow::Error::new(ExitWith(
                NOT_FOUND,
                "there are no conversations yet: start one with `skein prompt TEXT`".into(),
            ))
        })
}

pub fn print_json(value: &impl serde::Serialize) -> Result<ExitCode> {
    ui::json(value)?;
    Ok(ExitCode::SUCCESS)
}
