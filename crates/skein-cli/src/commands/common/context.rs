/*!
The database and output options every command may use ([`Globals`]:
`--db`, `--db-read`, `--json`), and what a command that reads or writes
the graph gets from them, a [`Context`]: the store opened in the mode the
command asks for, and resolving what people type (a conversation by id or
name, a node by id or a conversation standing for its head).

Commands that only show what is recorded never create a database nor
write to it (so read-only files and mounts work) and read from the
standby `--db-read` names; commands that work on recorded turns (and a
turn that continues a conversation) need an existing one; commands that
record may create it. No command touches a file that is not a skein
database, and a command that fails before anything is recorded leaves no
database it created behind ([`remove_blank_databases`]).
*/

use super::turn_options::ContinueArgs;
use crate::exit::{ExitWith, NOT_FOUND};
use crate::ui;
use anyhow::{Context as _, Result};
use skein::store::{ConversationRecord, OpenMode, StoreError};
use skein::{NodeId, Store};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Mutex;

/// The databases this command created that still held nothing when the
/// context that opened them closed.
static CREATED_BLANK: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// The database this command opened last, as messages show it.
static OPENED: Mutex<Option<String>> = Mutex::new(None);

/// The global options every command may use: where the database is, and
/// whether records are printed as JSON.
pub struct Globals {
    pub db: Option<PathBuf>,
    pub db_read: Option<String>,
    pub json: bool,
}

/// What a command that reads or writes the graph gets.
pub struct Context {
    pub store: Store,
    pub json: bool,
    /// The directory of a scratch database, removed after the store closes
    /// (fields drop in order).
    _scratch: Option<tempfile::TempDir>,
}

impl Globals {
    /// The database and its standby: `--db` (or `SKEIN_DB`) with
    /// `--db-read`, else the configuration file's `db` with its `db_read`,
    /// else `skein.db` in the user's data directory.
    pub fn location(&self) -> Result<(PathBuf, Option<String>)> {
        if let Some(path) = &self.db {
            return Ok((path.clone(), self.db_read.clone()));
        }
        Ok(match default_db_path()? {
            // The configuration file's standby belongs to its database.
            (path, crate::config::Source::ConfigFile) => (
                path,
                self.db_read
                    .clone()
                    .or_else(|| crate::config::get().ok()?.db_read.clone()),
            ),
            (path, _) => (path, self.db_read.clone()),
        })
    }

    /// The database opened in `mode`, reading from itself (as turns do).
    pub fn open(&self, mode: OpenMode) -> Result<Context> {
        let (path, read_url) = self.location()?;
        Ok(self.context(open_store(&path, read_url.as_deref(), mode)?))
    }

    /// The database for a command that only shows what is recorded:
    /// read-only, and read from the standby `--db-read` names, a view a
    /// moment old (docs/postgres.md).
    pub fn open_to_show(&self) -> Result<Context> {
        let opened = self.open(OpenMode::ReadOnly)?;
        Ok(self.context(opened.store.reads()))
    }

    /// The database for a turn: opened in `recording` when the turn is
    /// recorded, else read-only (a `--no-log` turn only reads the history it
    /// continues). A `--no-log` turn that `continues` nothing needs no
    /// database at all: when there is none, it runs on a scratch one that
    /// vanishes with the command.
    pub fn open_for_turn(
        &self,
        recording: OpenMode,
        no_log: bool,
        continues: bool,
    ) -> Result<Context> {
        let path = self.location()?.0;
        if continues && is_missing_file(&path) {
            // Nothing to continue, and nothing is created.
            return Err(anyhow::Error::new(ExitWith(
                NOT_FOUND,
                format!(
                    "there are no conversations yet: there is no database at {}; start one with \
                     `skein prompt TEXT`, or check --db, SKEIN_DB or `db` in the configuration \
                     file (`skein config show` says which is in force)",
                    path.display()
                ),
            )));
        }
        if !no_log {
            return self.open(recording);
        }
        if !continues && is_missing_file(&path) {
            let dir = tempfile::tempdir().context("cannot make a scratch directory")?;
            let store = open_store(&dir.path().join("scratch.db"), None, OpenMode::Create)?;
            return Ok(Context {
                store,
                json: self.json,
                _scratch: Some(dir),
            });
        }
        self.open(OpenMode::ReadOnly)
    }

    /// The database for the web view, and whether it is read-only (see
    /// [`open_for_web_view`]).
    pub fn open_for_web_view(&self) -> Result<(Context, bool)> {
        let (path, read_url) = self.location()?;
        let (store, read_only) = open_for_web_view(&path, read_url.as_deref())?;
        Ok((self.context(store), read_only))
    }

    fn context(&self, store: Store) -> Context {
        Context {
            store,
            json: self.json,
            _scratch: None,
        }
    }
}

impl Drop for Context {
    /// A database this command created and recorded nothing in is noted,
    /// for [`remove_blank_databases`] should the command fail.
    fn drop(&mut self) {
        if self._scratch.is_none() && self.store.created_blank().unwrap_or(false) {
            let mut created = CREATED_BLANK.lock().unwrap_or_else(|e| e.into_inner());
            created.push(self.store.path().to_path_buf());
        }
    }
}

/// After a command failed: remove each database it created that still held
/// nothing when it was closed (a typo in `--db` must not leave a new, empty
/// database behind). Only a file this command created is removed (the
/// store says so: it was missing, and this process made it), never one
/// that existed before; and not while another process has it open, which
/// its WAL file shows (SQLite removes it when the last connection closes,
/// and every connection of this command is closed by now).
pub fn remove_blank_databases() {
    let created = std::mem::take(&mut *CREATED_BLANK.lock().unwrap_or_else(|e| e.into_inner()));
    for path in created {
        let mut wal = path.as_os_str().to_owned();
        wal.push("-wal");
        if !Path::new(&wal).exists() {
            remove_database_files(&path);
        }
    }
}

/// The database this command opened (its path, or its URL without the
/// password), for messages that name it.
pub fn opened_database() -> Option<String> {
    OPENED.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

/// Whether `path` names a SQLite file that does not exist (a PostgreSQL
/// URL is never created by skein, so it never counts).
pub fn is_missing_file(path: &Path) -> bool {
    let url = path
        .to_str()
        .is_some_and(skein::store::location::is_postgres_url);
    !url && !path.exists()
}

/// Remove a SQLite database and its journal files.
fn remove_database_files(path: &Path) {
    for suffix in ["", "-wal", "-shm", "-journal"] {
        let mut name = path.as_os_str().to_owned();
        name.push(suffix);
        let _ = std::fs::remove_file(PathBuf::from(name));
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
    let why = match refused.downcast_ref::<StoreError>() {
        Some(StoreError::CannotWrite { reason, .. }) => reason.clone(),
        _ => format!("{refused:#}"),
    };
    ui::note(format!(
        "the database cannot be written ({why}): serving it read-only, as --read-only does"
    ));
    Ok((store, true))
}

fn open_store(path: &Path, read_url: Option<&str>, mode: OpenMode) -> Result<Store> {
    let shown = skein::store::location::redact(&path.display().to_string());
    *OPENED.lock().unwrap_or_else(|e| e.into_inner()) = Some(shown.clone());
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
        | StoreError::MigrationDenied { .. }
        | StoreError::CannotWrite { .. }) => anyhow::Error::new(error),
        error => anyhow::Error::new(error).context(format!("cannot open the database {shown}")),
    })
}

/// The database when neither `--db` nor `SKEIN_DB` names one: the
/// configuration file's `db`, else `skein.db` in the user's data directory.
pub fn default_db_path() -> Result<(PathBuf, crate::config::Source)> {
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
                format!(
                    "there are no conversations yet in {}: start one with `skein prompt TEXT`",
                    store.location()
                ),
            ))
        })
}

pub fn print_json(value: &impl serde::Serialize) -> Result<ExitCode> {
    ui::json(value)?;
    Ok(ExitCode::SUCCESS)
}
