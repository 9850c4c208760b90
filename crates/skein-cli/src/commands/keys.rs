/*!
`skein keys set|get|list|path`: provider keys saved in a file only the user
can read (`keys.json` beside the configuration file); `--key` for one
command is `common::model`'s. The providers read the file themselves, after the environment
(`skein::providers::http::keys`); this module only says where it is and
edits it. A key is printed by `keys get` alone: never by `list`, `config
show` or an error.
*/

use super::common::context::Globals;
use crate::ui::outln;
use anyhow::{Context as _, Result, bail};
use clap::{Args, Subcommand};
use skein::providers::http::Secret;
use skein::providers::http::keys::KeyFile;
use skein::store::{BoundedLine, read_line_within};
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

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

/// The key file: `keys.json` beside the configuration file.
fn path() -> Result<PathBuf> {
    Ok(skein::config::keys_path()?)
}

pub fn run(globals: &Globals, command: KeysCommand) -> Result<ExitCode> {
    let json = globals.json;
    let file = KeyFile::at(path()?);
    match command {
        KeysCommand::Path => match json {
            true => crate::ui::json(&serde_json::json!({ "path": file.path() }))?,
            false => outln!("{}", file.path().display())?,
        },
        KeysCommand::List => {
            let names: Vec<String> = file.load()?.into_keys().collect();
            match json {
                true => crate::ui::json(&names)?,
                false => {
                    for name in names {
                        outln!("{name}")?;
                    }
                }
            }
        }
        KeysCommand::Get(args) => match file.get(&args.name)? {
            Some(key) => outln!("{}", key.expose())?,
            None => bail!(crate::exit::ExitWith(
                crate::exit::NOT_FOUND,
                format!(
                    "no key is saved as `{}` (`skein keys list` names the saved ones)",
                    args.name
                ),
            )),
        },
        KeysCommand::Set(args) => {
            check_name(&args.name)?;
            let key = match args.value {
                Some(value) => value,
                None => read_key(&args.name)?,
            };
            if key.trim().is_empty() {
                bail!("the key is empty: give it with --value KEY or on stdin");
            }
            file.set(&args.name, &Secret::new(key.trim()))?;
            crate::ui::note(format!(
                "saved the key `{}` in {}",
                args.name,
                file.path().display()
            ));
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// A name a key can be found by: a provider's, or a variable's.
fn check_name(name: &str) -> Result<()> {
    let fine = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if !fine {
        bail!(
            "`{name}` cannot name a key: use letters, digits, `_` and `-` \
             (`openai`, `anthropic`, or a variable's name)"
        );
    }
    Ok(())
}

/// The longest key read from stdin, in bytes (the longest provider keys
/// are a few hundred).
const KEY_LIMIT: usize = 16 << 10;

/// The key from stdin: its first line, at most [`KEY_LIMIT`] bytes. On a
/// terminal it is typed without echo, so it never shows on the screen or
/// in a scrollback.
fn read_key(name: &str) -> Result<String> {
    let stdin = std::io::stdin();
    // Echo goes off before the prompt shows, so nothing typed after it is
    // shown.
    let _quiet = if stdin.is_terminal() {
        let quiet = NoEcho::on(&stdin)?;
        crate::ui::note(format!(
            "Enter the key for `{name}` and press Enter (it is not shown):"
        ));
        Some(quiet)
    } else {
        None
    };
    let mut line = Vec::new();
    let read = read_line_within(&mut stdin.lock(), KEY_LIMIT, &mut line)
        .context("cannot read the key from stdin")?;
    if read == BoundedLine::TooLong {
        bail!("the key on stdin is longer than {KEY_LIMIT} bytes: is it a key?");
    }
    String::from_utf8(line).map_err(|_| anyhow::anyhow!("the key on stdin is not UTF-8 text"))
}

/// A terminal's echo turned off until dropped (then restored as it was,
/// and the line the user ended with Enter ended on the screen too).
struct NoEcho {
    saved: rustix::termios::Termios,
}

impl NoEcho {
    fn on(terminal: &std::io::Stdin) -> Result<NoEcho> {
        use rustix::termios::{LocalModes, OptionalActions, tcgetattr, tcsetattr};
        let saved = tcgetattr(terminal).context("cannot read the terminal's settings")?;
        let mut quiet = saved.clone();
        quiet.local_modes.remove(LocalModes::ECHO);
        tcsetattr(terminal, OptionalActions::Now, &quiet)
            .context("cannot turn the terminal's echo off")?;
        Ok(NoEcho { saved })
    }
}

impl Drop for NoEcho {
    fn drop(&mut self) {
        use rustix::termios::{OptionalActions, tcsetattr};
        let _ = tcsetattr(std::io::stdin(), OptionalActions::Now, &self.saved);
        eprintln!();
    }
}
