/*!
Model names to providers: [`resolve`] and its table of backends.

A model name is `BACKEND` or `BACKEND:ARGUMENT`. Each backend is one row of
`BACKENDS`: its name, the syntax shown to users, whether it takes an
argument, and a constructor that returns the provider and the model name to
send it. Adding a backend is adding a row.

| name | provider |
|---|---|
| `smollm2` | the embedded SmolLM2-135M-Instruct ([`crate::local`]), the default |
| `local:PATH` | any GGUF chat model at `PATH`, in-process |
| `openai:MODEL` | an OpenAI-compatible server: `OPENAI_BASE_URL` (default OpenAI), key from `OPENAI_API_KEY` |
| `anthropic:MODEL` | Anthropic's Messages API: `ANTHROPIC_BASE_URL` (default Anthropic), key from `ANTHROPIC_API_KEY` |
| `echo` | [`crate::Echo`] |
| `scripted:PATH` | [`crate::Scripted`] loaded from the rule file at `PATH` |

An OpenAI-compatible server without a key (a local vLLM, llama.cpp server
or Ollama) is used by setting `OPENAI_BASE_URL` and leaving `OPENAI_API_KEY`
unset; against the default OpenAI URL a missing key is an error at once.
*/

use crate::http::{
    ANTHROPIC_API_KEY_VAR, ANTHROPIC_BASE_URL, CredentialError, OPENAI_API_KEY_VAR,
    OPENAI_BASE_URL, SetupError,
};
use crate::{Anthropic, Credential, Echo, HttpConfig, OpenAiCompatible, ScriptError, Scripted};
use skein_core::Provider;
use std::path::Path;
use std::sync::Arc;

/// Why a model name does not resolve to a provider.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ResolveError {
    #[error(
        "unknown model `{model}`{}: {}",
        suggest(.model).map(|name| format!("; did you mean `{name}`? Available")).unwrap_or_else(|| "; available".into()),
        .available.join(", ")
    )]
    UnknownModel {
        model: String,
        /// The syntax of every available backend.
        available: Vec<&'static str>,
    },
    #[error("model `{model}` needs an argument: write `{syntax}`")]
    MissingArgument { model: String, syntax: &'static str },
    /// The scripted backend's rule file did not load (boxed: it is large).
    #[error(transparent)]
    Script(Box<ScriptError>),
    /// The local model could not be loaded (its message says how to fetch it).
    #[error(transparent)]
    Local(#[from] skein_local::LocalError),
    #[error(transparent)]
    Credential(#[from] CredentialError),
    #[error(transparent)]
    Setup(#[from] SetupError),
}

impl From<ScriptError> for ResolveError {
    fn from(error: ScriptError) -> ResolveError {
        ResolveError::Script(Box::new(error))
    }
}

/// A provider and the model name to send it.
#[derive(Clone)]
pub struct Resolved {
    pub provider: Arc<dyn Provider>,
    pub model: String,
}

impl std::fmt::Debug for Resolved {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Resolved")
            .field("provider", &self.provider.name())
            .field("model", &self.model)
            .finish()
    }
}

/// One backend a model name can select.
struct Backend {
    name: &'static str,
    syntax: &'static str,
    takes_argument: bool,
    build: fn(argument: &str) -> Result<Resolved, ResolveError>,
}

fn resolved(provider: Arc<dyn Provider>, model: &str) -> Resolved {
    Resolved {
        provider,
        model: model.to_string(),
    }
}

const BACKENDS: &[Backend] = &[
    Backend {
        name: "smollm2",
        syntax: "smollm2",
        takes_argument: false,
        build: |_| Ok(resolved(crate::local::shared(None)?, "smollm2")),
    },
    Backend {
        name: "local",
        syntax: "local:PATH",
        takes_argument: true,
        build: |path| Ok(resolved(crate::local::shared(Some(Path::new(path)))?, path)),
    },
    Backend {
        name: "openai",
        syntax: "openai:MODEL",
        takes_argument: true,
        build: |model| {
            let config = http_config("OPENAI_BASE_URL", OPENAI_BASE_URL, OPENAI_API_KEY_VAR)?;
            Ok(resolved(Arc::new(OpenAiCompatible::new(config)?), model))
        },
    },
    Backend {
        name: "anthropic",
        syntax: "anthropic:MODEL",
        takes_argument: true,
        build: |model| {
            let config = http_config(
                "ANTHROPIC_BASE_URL",
                ANTHROPIC_BASE_URL,
                ANTHROPIC_API_KEY_VAR,
            )?;
            Ok(resolved(Arc::new(Anthropic::new(config)?), model))
        },
    },
    Backend {
        name: "echo",
        syntax: "echo",
        takes_argument: false,
        build: |_| Ok(resolved(Arc::new(Echo), "echo")),
    },
    Backend {
        name: "scripted",
        syntax: "scripted:PATH",
        takes_argument: true,
        build: |path| Ok(resolved(Arc::new(Scripted::from_file(path)?), "scripted")),
    },
];

/// The base URL from `url_variable` (else `default_url`) and the key from
/// `key_variable`, read on every call. A custom URL may go without a key.
fn http_config(
    url_variable: &str,
    default_url: &str,
    key_variable: &str,
) -> Result<HttpConfig, ResolveError> {
    let custom_url = std::env::var(url_variable)
        .ok()
        .filter(|url| !url.is_empty());
    let key_set = std::env::var_os(key_variable).is_some_and(|key| !key.is_empty());
    let credential = match (&custom_url, key_set) {
        (_, true) => Credential::env(key_variable),
        (Some(_), false) => Credential::None,
        (None, false) => {
            return Err(CredentialError::Missing {
                variable: key_variable.to_string(),
            }
            .into());
        }
    };
    Ok(HttpConfig::new(
        custom_url.as_deref().unwrap_or(default_url),
        credential,
    ))
}

/// The syntax of every model name [`resolve`] accepts.
pub fn available() -> Vec<&'static str> {
    BACKENDS.iter().map(|backend| backend.syntax).collect()
}

/// The provider for a model name, and the model name to send it.
/// The model name someone probably meant by a bare name that is not a
/// backend: a provider's model (`gpt-4o` is `openai:gpt-4o`, `claude-…` is
/// `anthropic:claude-…`), a GGUF file (`local:PATH`) or a rule file
/// (`scripted:PATH`).
pub fn suggest(model: &str) -> Option<String> {
    let lower = model.to_ascii_lowercase();
    let openai = [
        "gpt-", "gpt4", "chatgpt", "o1", "o3", "o4", "text-", "davinci", "ft:gpt",
    ];
    let backend = if openai.iter().any(|prefix| lower.starts_with(prefix)) {
        "openai"
    } else if lower.starts_with("claude") {
        "anthropic"
    } else if lower.ends_with(".gguf") {
        "local"
    } else if lower.ends_with(".toml") {
        "scripted"
    } else {
        return None;
    };
    Some(format!("{backend}:{model}"))
}

pub fn resolve(model: &str) -> Result<Resolved, ResolveError> {
    let (name, argument) = match model.split_once(':') {
        Some((name, argument)) => (name, Some(argument)),
        None => (model, None),
    };
    let unknown = || ResolveError::UnknownModel {
        model: model.to_owned(),
        available: available(),
    };
    let backend = BACKENDS
        .iter()
        .find(|backend| backend.name == name)
        .ok_or_else(unknown)?;
    match (backend.takes_argument, argument) {
        (true, Some(argument)) if !argument.is_empty() => (backend.build)(argument),
        (true, _) => Err(ResolveError::MissingArgument {
            model: model.to_owned(),
            syntax: backend.syntax,
        }),
        (false, None) => (backend.build)(""),
        (false, Some(_)) => Err(unknown()),
    }
}
