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
it. A variable that is not set is a [`CredentialError`] naming the variable
and saying how to set it; no error ever carries the key itself.
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
         (for example `export {variable}=...`)"
    )]
    Missing { variable: String },
    #[error(
        "the environment variable {variable} is empty: set it to your API key \
         (for example `export {variable}=...`)"
    )]
    Empty { variable: String },
    #[error("the environment variable {variable} is not valid unicode")]
    NotUnicode { variable: String },
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
            Credential::Env(variable) => match std::env::var(variable) {
                Ok(value) if value.is_empty() => Err(CredentialError::Empty {
                    variable: variable.clone(),
                }),
                Ok(value) => Ok(Some(Secret(value))),
                Err(std::env::VarError::NotPresent) => Err(CredentialError::Missing {
                    variable: variable.clone(),
                }),
                Err(std::env::VarError::NotUnicode(_)) => Err(CredentialError::NotUnicode {
                    variable: variable.clone(),
                }),
            },
        }
    }
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
