/*!
What `skein chat`'s line editor recalls, kept so that nothing outside the
graph holds a message (DESIGN invariant 13).

The messages a user typed are recalled from the conversation itself: the
editor starts with the user messages of the thread it continues, so a
message erased or deleted from the graph is gone from the recall too. The
history file (`chat_history` in the data directory) keeps only bare chat
commands (`!retry`, `!tree`: no argument, so no text), is created readable
by its owner only, and is not written at all with `-n`. A file an older
skein wrote, with typed lines in it, is rewritten without them when a chat
next saves it.
*/

use std::io::Write;
use std::path::{Path, PathBuf};

/// The most lines the editor recalls (messages and commands).
pub const RECALLED: usize = 1000;

/// The commands a chat keeps in its history file.
pub struct CommandFile {
    path: PathBuf,
    commands: Vec<String>,
    /// The file held lines that are not kept (an older skein's).
    dropped: bool,
}

impl CommandFile {
    /// The commands kept at `path` (none when it is missing or unreadable).
    pub fn load(path: PathBuf) -> CommandFile {
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        let commands: Vec<String> = text
            .lines()
            .filter(|line| kept(line))
            .map(str::to_string)
            .collect();
        let dropped = commands.len() < text.lines().count();
        CommandFile {
            path,
            commands,
            dropped,
        }
    }

    /// Whether the file held lines it does not keep.
    pub fn dropped(&self) -> bool {
        self.dropped
    }

    pub fn commands(&self) -> &[String] {
        &self.commands
    }

    /// Keep `line` if it is a bare command; then write the file.
    pub fn add(&mut self, line: &str) -> std::io::Result<()> {
        if kept(line) {
            self.commands.retain(|command| command != line);
            self.commands.push(line.to_string());
            let excess = self.commands.len().saturating_sub(RECALLED);
            self.commands.drain(..excess);
        }
        self.save()
    }

    /// Write the kept commands, readable by the owner only, replacing the
    /// file whole (an older file's typed lines go with it).
    pub fn save(&self) -> std::io::Result<()> {
        if let Some(dir) = self.path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let staged = self.path.with_extension("new");
        let mut file = owner_only(&staged)?;
        for command in &self.commands {
            writeln!(file, "{command}")?;
        }
        file.sync_all()?;
        std::fs::rename(&staged, &self.path)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// A bare chat command: `!` and a word, nothing a message could be in.
fn kept(line: &str) -> bool {
    line.len() > 1
        && line.starts_with('!')
        && line[1..]
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

/// `path` created (or truncated) with mode 0600 where there are modes.
fn owner_only(path: &Path) -> std::io::Result<std::fs::File> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
        options.mode(0o600);
        let file = options.open(path)?;
        file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
        Ok(file)
    }
    #[cfg(not(unix))]
    options.open(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_bare_commands_are_kept_and_the_file_is_the_owners() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("chat_history");
        std::fs::write(&path, "my card is 4111 1111\n!tree\n!reply abc\n").unwrap();
        let mut file = CommandFile::load(path.clone());
        assert_eq!(file.commands(), ["!tree"]);
        assert!(file.dropped());
        file.add("a message typed in chat").unwrap();
        file.add("!retry").unwrap();
        file.add("!tree").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "!retry\n!tree\n");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
    }
}
