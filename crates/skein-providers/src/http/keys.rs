/*!
The key file: provider keys saved on this machine ([`KeyFile`]), read by
[`Credential::resolve`](super::Credential::resolve) after the environment.

The file is a JSON object of names to keys (`{"openai": "sk-..."}`, the
shape of `llm`'s `keys.json`). A key is stored under its provider's name
(`openai` for `OPENAI_API_KEY`, `anthropic` for `ANTHROPIC_API_KEY`, see
[`stored_name`]) or, for a profile that reads another variable, under that
variable's name. The file is created readable and writable by its owner
only (mode 0600) and is refused when read while others may read it, so a
key never sits in a file other users can open.

A process says which file it uses once ([`use_key_file`]); a key given for
one command (`skein --key`) goes before the environment and the file
([`use_key_for_command`]). No error here ever carries a key.
*/

use super::secret::Secret;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// Why the key file could not be read or written. Never contains a key.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeyFileError {
    #[error(
        "the key file {path} can be read by other users (mode {mode:o}): \
         run `chmod 600 {path}` (keys must be readable by you only)"
    )]
    Exposed { path: PathBuf, mode: u32 },
    #[error(
        "the key file {path} is not a JSON object of names to keys ({problem}): fix or remove it"
    )]
    Malformed { path: PathBuf, problem: String },
    #[error("cannot read the key file {path}: {problem}")]
    Unreadable { path: PathBuf, problem: String },
    #[error("cannot write the key file {path}: {problem}")]
    Unwritable { path: PathBuf, problem: String },
}

/// The file of saved provider keys.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyFile {
    path: PathBuf,
}

impl KeyFile {
    /// The key file at `path` (which need not exist yet).
    pub fn at(path: impl Into<PathBuf>) -> KeyFile {
        KeyFile { path: path.into() }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Every saved key by name; none when the file does not exist.
    pub fn load(&self) -> Result<BTreeMap<String, Secret>, KeyFileError> {
        let text = match std::fs::read_to_string(&self.path) {
            Ok(text) => text,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                return Ok(BTreeMap::new());
            }
            Err(error) => return Err(self.unreadable(&error)),
        };
        self.check_private()?;
        let keys: BTreeMap<String, String> =
            serde_json::from_str(&text).map_err(|error| KeyFileError::Malformed {
                path: self.path.clone(),
                // Where, never what: serde's message quotes no input text
                // for a well-formed but mistyped value, but say only the place.
                problem: format!("line {}, column {}", error.line(), error.column()),
            })?;
        Ok(keys
            .into_iter()
            .map(|(name, key)| (name, Secret::new(key)))
            .collect())
    }

    /// The key saved as `name`.
    pub fn get(&self, name: &str) -> Result<Option<Secret>, KeyFileError> {
        Ok(self.load()?.remove(name))
    }

    /// Save `key` as `name`, replacing a key of that name; the file is
    /// written whole beside itself (mode 0600) and renamed into place.
    pub fn set(&self, name: &str, key: &Secret) -> Result<(), KeyFileError> {
        let mut keys: BTreeMap<String, String> = self
            .load()?
            .into_iter()
            .map(|(name, key)| (name, key.expose().to_string()))
            .collect();
        keys.insert(name.to_string(), key.expose().to_string());
        let text = serde_json::to_string_pretty(&keys).expect("a map of strings is JSON");
        self.write_private(text.as_bytes())
    }

    fn write_private(&self, bytes: &[u8]) -> Result<(), KeyFileError> {
        let fail = |error: std::io::Error| KeyFileError::Unwritable {
            path: self.path.clone(),
            problem: error.to_string(),
        };
        let dir = match self.path.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir.to_path_buf(),
            _ => PathBuf::from("."),
        };
        std::fs::create_dir_all(&dir).map_err(fail)?;
        let temp = dir.join(format!(
            ".{}.{}.partial",
            self.path
                .file_name()
                .map_or("keys".into(), |name| name.to_string_lossy()),
            std::process::id()
        ));
        // A fresh file, so it is created private rather than inheriting
        // the mode of a leftover.
        let _ = std::fs::remove_file(&temp);
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let written = options.open(&temp).and_then(|mut file| {
            file.write_all(bytes)?;
            file.sync_all()
        });
        if let Err(error) = written.and_then(|()| std::fs::rename(&temp, &self.path)) {
            let _ = std::fs::remove_file(&temp);
            return Err(fail(error));
        }
        Ok(())
    }

    /// Refuse a file others may read.
    fn check_private(&self) -> Result<(), KeyFileError> {
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&self.path)
                .map_err(|error| self.unreadable(&error))?
                .permissions()
                .mode()
                & 0o777;
            if mode & 0o077 != 0 {
                return Err(KeyFileError::Exposed {
                    path: self.path.clone(),
                    mode,
                });
            }
        }
        Ok(())
    }

    fn unreadable(&self, error: &std::io::Error) -> KeyFileError {
        KeyFileError::Unreadable {
            path: self.path.clone(),
            problem: error.to_string(),
        }
    }
}

/// The name a key read from `variable` is saved under: the provider's for
/// its default variable, else the variable's own.
pub fn stored_name(variable: &str) -> &str {
    match variable {
        super::OPENAI_API_KEY_VAR => "openai",
        super::ANTHROPIC_API_KEY_VAR => "anthropic",
        other => other,
    }
}

static KEY_FILE: OnceLock<KeyFile> = OnceLock::new();
static COMMAND_KEY: OnceLock<Secret> = OnceLock::new();

/// Read keys missing from the environment from `file`, for the rest of
/// the process (the first call wins).
pub fn use_key_file(file: KeyFile) {
    let _ = KEY_FILE.set(file);
}

/// The key file in use, if the process named one.
pub fn key_file() -> Option<&'static KeyFile> {
    KEY_FILE.get()
}

/// Use `key` for every credential read from a variable, before the
/// environment and the key file, for the rest of the process (a key given
/// for one command; the first call wins).
pub fn use_key_for_command(key: Secret) {
    let _ = COMMAND_KEY.set(key);
}

/// The key given for this command, if any.
pub(crate) fn command_key() -> Option<&'static Secret> {
    COMMAND_KEY.get()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_file() -> (tempfile_dir::Dir, KeyFile) {
        let dir = tempfile_dir::Dir::new();
        let file = KeyFile::at(dir.0.join("sub/keys.json"));
        (dir, file)
    }

    /// A directory removed when dropped (the crate has no tempfile).
    mod tempfile_dir {
        pub struct Dir(pub std::path::PathBuf);
        impl Dir {
            pub fn new() -> Dir {
                let path = std::env::temp_dir().join(format!(
                    "skein-keys-test-{}-{:?}",
                    std::process::id(),
                    std::thread::current().id()
                ));
                let _ = std::fs::remove_dir_all(&path);
                Dir(path)
            }
        }
        impl Drop for Dir {
            fn drop(&mut self) {
                let _ = std::fs::remove_dir_all(&self.0);
            }
        }
    }

    #[test]
    fn a_saved_key_reads_back_from_a_file_only_its_owner_can_read() {
        let (_dir, file) = temp_file();
        assert!(file.load().unwrap().is_empty(), "no file, no keys");
        file.set("openai", &Secret::new("sk-one")).unwrap();
        file.set("anthropic", &Secret::new("sk-two")).unwrap();
        file.set("openai", &Secret::new("sk-three")).unwrap();
        assert_eq!(file.get("openai").unwrap(), Some(Secret::new("sk-three")));
        assert_eq!(file.get("anthropic").unwrap(), Some(Secret::new("sk-two")));
        assert_eq!(file.get("other").unwrap(), None);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(file.path()).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
    }

    #[cfg(unix)]
    #[test]
    fn a_key_file_others_can_read_is_refused_without_showing_a_key() {
        use std::os::unix::fs::PermissionsExt;
        let (_dir, file) = temp_file();
        file.set("openai", &Secret::new("sk-secret-value")).unwrap();
        std::fs::set_permissions(file.path(), std::fs::Permissions::from_mode(0o644)).unwrap();
        let error = file.get("openai").unwrap_err();
        assert!(matches!(error, KeyFileError::Exposed { mode: 0o644, .. }));
        let message = error.to_string();
        assert!(message.contains("chmod 600"), "{message}");
        assert!(!message.contains("sk-secret"), "{message}");
    }

    #[test]
    fn a_malformed_file_is_an_error_that_quotes_nothing() {
        let (_dir, file) = temp_file();
        file.set("openai", &Secret::new("x")).unwrap();
        std::fs::write(file.path(), r#"{"openai": ["sk-secret-value"]}"#).unwrap();
        let message = file.load().unwrap_err().to_string();
        assert!(message.contains("not a JSON object"), "{message}");
        assert!(!message.contains("sk-secret"), "{message}");
    }

    #[test]
    fn default_variables_are_stored_under_their_providers_name() {
        assert_eq!(stored_name("OPENAI_API_KEY"), "openai");
        assert_eq!(stored_name("ANTHROPIC_API_KEY"), "anthropic");
        assert_eq!(stored_name("MY_GATEWAY_KEY"), "MY_GATEWAY_KEY");
    }
}
