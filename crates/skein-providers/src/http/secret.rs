/*!
Credentials: [`Secret`], [`Credential`] and [`CredentialError`].

A [`Secret`] is a key whose `Debug` and `Display` print `Secret(****)`; the
value is reachable only through [`Secret::expose`], which the transport calls
when it builds a request header (marked sensitive, so the HTTP stack never
prints it either). [`Secret::redact`] blanks the key out of any text a
provider sends back (some services echo the key in their error messages).

A [`Credential`] says where the key comes from: nowhere (local servers such
as vLLM, llama.cpp or Ollama need none), an explicit value, or an
environment variable. It is resolved on every call, so a rotated variable is
picked up and a key is never held longer than the configuration that names
it. A variable's key is, in order: the key given for the command
([`super::keys::use_key_for_command`]), the variable, the key saved in the
key file ([`super::keys`]). A variable that is none of these is a
[`CredentialError`] naming the variable and saying how to set it; no error
ever carries the key itself.
*/

use std::fmt;

/// A credential string that never shows itself in `Debug` or `Display`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }

    /// The key itself, for building a request header. Never log it.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// `text` with every occurrence of the key replaced by `****`. Keys
    /// shorter than four characters are too short to find reliably in text
    /// and are left alone.
    pub fn redact(&self, text: &str) -> String {
        if self.0.len() < 4 {
            return text.to_owned();
        }
        text.replace(&self.0, "****")
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(****)")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(****)")
    }
}

impl From<String> for Secret {
    fn from(value: String) -> Secret {
        Secret(value)
    }
}

impl From<&str> for Secret {
    fn from(value: &str) -> Secret {
        Secret(value.to_owned())
    }
}

/// Where a backend's key comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Credential {
    /// No key: the server needs none (a local vLLM, llama.cpp or Ollama).
    None,
    /// A key passed explicitly.
    Value(Secret),
    /// A key read from this environment variable on every call.
    Env(String),
}

/// Why a [`Credential`] did not resolve to a key. Never contains the key.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CredentialError {
    #[error(
        "the environment variable {variable} is not set: set it to your API key \
         (for example `export {variable}=...`), or save the key with `skein keys set {}`",
        super::keys::stored_name(.variable)
    )]
    Missing { variable: String },
    #[error(
        "the environment variable {variable} is empty: set it to your API key \
         (for example `export {variable}=...`)"
    )]
    Empty { variable: String },
    #[error("the environment variable {variable} is not valid unicode")]
    NotUnicode { variable: String },
    /// The key file could not be read.
    #[error(transparent)]
    KeyFile(#[from] super::keys::KeyFileError),
}

impl Credential {
    /// A key passed explicitly.
    pub fn value(value: impl Into<String>) -> Credential {
        Credential::Value(Secret::new(value))
    }

    /// A key read from the environment variable `variable` on every call.
    pub fn env(variable: impl Into<String>) -> Credential {
        Credential::Env(variable.into())
    }

    /// The key, if the credential has one.
    pub fn resolve(&self) -> Result<Option<Secret>, CredentialError> {
        match self {
            Credential::None => Ok(None),
            Credential::Value(secret) => Ok(Some(secret.clone())),
            Credential::Env(variable) => resolve_variable(variable).map(Some),
        }
    }
}

/// The key for `variable`: the command's key, the variable's value, else
/// the key file's entry for it.
fn resolve_variable(variable: &str) -> Result<Secret, CredentialError> {
    if let Some(key) = super::keys::command_key() {
        return Ok(key.clone());
    }
    let unset = match std::env::var(variable) {
        Ok(value) if !value.is_empty() => return Ok(Secret(value)),
        Ok(_) => CredentialError::Empty {
            variable: variable.to_string(),
        },
        Err(std::env::VarError::NotPresent) => CredentialError::Missing {
            variable: variable.to_string(),
        },
        Err(std::env::VarError::NotUnicode(_)) => {
            return Err(CredentialError::NotUnicode {
                variable: variable.to_string(),
            });
        }
    };
    let stored = match super::keys::key_file() {
        Some(file) => file.get(super::keys::stored_name(variable))?,
        None => None,
    };
    stored.ok_or(unset)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_never_print_their_value() {
        let secret = Secret::new("sk-live-abcdef");
        assert_eq!(format!("{secret:?}"), "Secret(****)");
        assert_eq!(format!("{secret}"), "Secret(****)");
        let credential = Credential::Value(secret.clone());
        assert!(!format!("{credential:?}").contains("abcdef"));
        assert_eq!(secret.expose(), "sk-live-abcdef");
    }

    #[test]
    fn redaction_blanks_every_occurrence() {
        let secret = Secret::new("sk-live-abcdef");
        assert_eq!(
            secret.redact("bad key sk-live-abcdef (sk-live-abcdef)"),
            "bad key **** (****)"
        );
        assert_eq!(Secret::new("ab").redact("abc"), "abc");
    }

    #[test]
    fn a_missing_variable_names_itself_and_how_to_set_it() {
        let variable = "SKEIN_TEST_SURELY_UNSET_VARIABLE_7f3a";
        let error = Credential::env(variable).resolve().unwrap_err();
        assert_eq!(
            error,
            CredentialError::Missing {
                variable: variable.into()
            }
        );
        let message = error.to_string();
        assert!(message.contains(variable), "{message}");
        assert!(message.contains("export"), "{message}");
    }

    #[test]
    fn no_credential_resolves_to_no_key() {
        assert_eq!(Credential::None.resolve(), Ok(None));
        assert_eq!(
            Credential::value("k3y-value").resolve(),
            Ok(Some(Secret::new("k3y-value")))
        );
    }
}
