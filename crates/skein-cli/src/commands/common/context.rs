/*!
What every command that reads or writes the graph gets, a [`Context`]: the
opened store and the output mode; opening the database (where it is, in
the mode a command needs) and resolving what people type (a conversation
by id or name, a node by id or a conversation standing for its head).
*/

use super::turn_options::ContinueArgs;
use crate::exit::{ExitWith, NOT_FOUND};
use crate::ui;
use anyhow::{Context as _, Result};
use skein::store::{ConversationRecord, OpenMode, StoreError};
use skein::{NodeId, Store};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// What every command gets.
pub struct Context {
    pub store: Store,
    pub json: bool,
}

/// The database for the web view: written when it can be, else (a file or
/// mount this user cannot write) opened read-only, which the server then
/// is, as with `--read-only`; a note says so and why. `true` when it is
/// read-only.
pub fn open_for_web_view(path: &Path, read_url: Option<&str>) -> Result<(Store, bool)> {
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

pub fn open_store(path: &Path, read_url: Option<&str>, mode: OpenMode) -> Result<Store> {
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
                "there are no conversations yet: start one with `skein prompt TEXT`".into(),
            ))
        })
}

pub fn print_json(value: &impl serde::Serialize) -> Result<ExitCode> {
    ui::json(value)?;
    Ok(ExitCode::SUCCESS)
}
