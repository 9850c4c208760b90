/*!
Model names and backend kinds to providers: the one table of backends.

[`BackendKind`] is what kind of provider a backend is (the engine's
configured backends are one each); [`BackendKind::provider`] builds it. A
model name is `BACKEND` or `BACKEND:ARGUMENT`, and each backend is one row
of `BACKENDS`: its name, the syntax shown to users, whether it takes an
argument, the model name it sends, whether the argument names a file of the
machine, and the kind it stands for. [`resolve`] turns a name into a
provider through that row; the engine builds configured backends and the
turn layer opens model names through the same table. Adding a backend is
adding a row and a kind.

| name | provider |
|---|---|
| `smollm2` | the embedded SmolLM2-135M-Instruct (`crate::local`), the default |
| `local:PATH` | any GGUF chat model at `PATH`, in-process |
| `openai:MODEL` | an OpenAI-compatible server: `OPENAI_BASE_URL` (default OpenAI), key from `OPENAI_API_KEY` |
| `anthropic:MODEL` | Anthropic's Messages API: `ANTHROPIC_BASE_URL` (default Anthropic), key from `ANTHROPIC_API_KEY` |
| `echo` | [`crate::Echo`] |
| `scripted:PATH` | [`crate::Scripted`] loaded from the rule file at `PATH` |

An OpenAI-compatible server without a key (a local vLLM, llama.cpp server
or Ollama) is used by setting `OPENAI_BASE_URL` and leaving `OPENAI_API_KEY`
unset; against the default OpenAI URL a missing key is an error at once.

Without the `local` feature the embedded model is not built in: `smollm2`,
`local:PATH` and configured `local` backends fail with
[`ResolveError::NoLocalModel`], which says how to get it.
*/

use crate::http::{
    ANTHROPIC_API_KEY_VAR, ANTHROPIC_BASE_URL, CredentialError, OPENAI_API_KEY_VAR,
    OPENAI_BASE_URL, SetupError,
};
use crate::{Anthropic, Credential, Echo, HttpConfig, OpenAiCompatible, ScriptError, Scripted};
use serde::{Deserialize, Serialize};
use skein_core::Provider;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The variables a model name's HTTP backend reads its base URL from.
const OPENAI_BASE_URL_VAR: &str = "OPENAI_BASE_URL";
const ANTHROPIC_BASE_URL_VAR: &str = "ANTHROPIC_BASE_URL";

/// Why a model name or a backend kind does not give a provider.
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
    #[cfg(feature = "local")]
    #[error(transparent)]
    Local(#[from] skein_local::LocalError),
    /// The embedded model was left out of this build (the `local` feature).
    #[error(
        "this skein was built without the embedded model, so it cannot run `{model}`; \
         rebuild it with the `local` feature (e.g. `cargo install --path crates/skein-cli --features local`) \
         or use a model served over HTTP (`openai:MODEL`, `anthropic:MODEL`)"
    )]
    NoLocalModel { model: String },
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

/// What kind of provider a backend is, and what it needs besides a
/// credential.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum BackendKind {
    /// The deterministic echo model.
    Echo,
    /// A scripted model from a rule file.
    Scripted { script: PathBuf },
    /// The embedded llama.cpp model (default: SmolLM2 from the models dir).
    Local { path: Option<PathBuf> },
    /// An OpenAI-compatible chat-completions server.
    Openai { base_url: Option<String> },
    /// Anthropic's Messages API.
    Anthropic { base_url: Option<String> },
}

impl BackendKind {
    /// The name of the provider this kind builds ([`Provider::name`]).
    pub fn provider_name(&self) -> &'static str {
        match self {
            BackendKind::Echo => "echo",
            BackendKind::Scripted { .. } => "scripted",
            BackendKind::Local { .. } => "local",
            BackendKind::Openai { .. } => "openai",
            BackendKind::Anthropic { .. } => "anthropic",
        }
    }

    /// The environment variable a backend's key is read from by default.
    pub fn default_credential_variable(&self) -> Option<&'static str> {
        match self {
            BackendKind::Openai { .. } => Some(OPENAI_API_KEY_VAR),
            BackendKind::Anthropic { .. } => Some(ANTHROPIC_API_KEY_VAR),
            _ => None,
        }
    }

    /// A provider of this kind. Only the HTTP backends use `credential`;
    /// a base URL left unset is the service's own.
    pub fn provider(&self, credential: Credential) -> Result<Arc<dyn Provider>, ResolveError> {
        Ok(match self {
            BackendKind::Echo => Arc::new(Echo),
            BackendKind::Scripted { script } => Arc::new(Scripted::from_file(script)?),
            BackendKind::Local { path } => local_model(path.as_deref())?,
            BackendKind::Openai { base_url } => {
                let url = base_url.as_deref().unwrap_or(OPENAI_BASE_URL);
                Arc::new(OpenAiCompatible::new(HttpConfig::new(url, credential))?)
            }
            BackendKind::Anthropic { base_url } => {
                let url = base_url.as_deref().unwrap_or(ANTHROPIC_BASE_URL);
                Arc::new(Anthropic::new(HttpConfig::new(url, credential))?)
            }
        })
    }
}

#[cfg(feature = "local")]
fn local_model(path: Option<&Path>) -> Result<Arc<dyn Provider>, ResolveError> {
    Ok(crate::local::shared(path)?)
}

#[cfg(not(feature = "local"))]
fn local_model(path: Option<&Path>) -> Result<Arc<dyn Provider>, ResolveError> {
    Err(ResolveError::NoLocalModel {
        model: path.map_or_else(
            || "smollm2".to_string(),
            |path| format!("local:{}", path.display()),
        ),
    })
}

/// A provider, the model name to send it, and the kind of backend the
/// model name stands for.
#[derive(Clone)]
pub struct Resolved {
    pub provider: Arc<dyn Provider>,
    pub model: String,
    pub kind: BackendKind,
}

impl std::fmt::Debug for Resolved {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Resolved")
            .field("provider", &self.provider.name())
            .field("model", &self.model)
            .field("kind", &self.kind)
            .finish()
    }
}

/// One backend a model name can select.
struct Backend {
    name: &'static str,
    syntax: &'static str,
    takes_argument: bool,
    /// The model name sent to the provider: this, or else the argument.
    sends: Option<&'static str>,
    /// The argument is the path of a file of this machine.
    names_a_file: bool,
    /// The kind the name stands for, given its argument.
    kind: fn(argument: &str) -> BackendKind,
}

const BACKENDS: &[Backend] = &[
    Backend {
        name: "smollm2",
        syntax: "smollm2",
        takes_argument: false,
        sends: Some("smollm2"),
        names_a_file: false,
        kind: |_| BackendKind::Local { path: None },
    },
    Backend {
        name: "local",
        syntax: "local:PATH",
        takes_argument: true,
        sends: None,
        names_a_file: true,
        kind: |path| BackendKind::Local {
            path: Some(PathBuf::from(path)),
        },
    },
    Backend {
        name: "openai",
        syntax: "openai:MODEL",
        takes_argument: true,
        sends: None,
        names_a_file: false,
        kind: |_| BackendKind::Openai {
            base_url: variable(OPENAI_BASE_URL_VAR),
        },
    },
    Backend {
        name: "anthropic",
        syntax: "anthropic:MODEL",
        takes_argument: true,
        sends: None,
        names_a_file: false,
        kind: |_| BackendKind::Anthropic {
            base_url: variable(ANTHROPIC_BASE_URL_VAR),
        },
    },
    Backend {
        name: "echo",
        syntax: "echo",
        takes_argument: false,
        sends: Some("echo"),
        names_a_file: false,
        kind: |_| BackendKind::Echo,
    },
    Backend {
        name: "scripted",
        syntax: "scripted:PATH",
        takes_argument: true,
        sends: Some("scripted"),
        names_a_file: true,
        kind: |path| BackendKind::Scripted {
            script: PathBuf::from(path),
        },
    },
];

/// A variable's value, unless unset or empty.
fn variable(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|value| !value.is_empty())
}

/// The key of a model name's backend, read on every call from the kind's
/// variable (or the key file, see [`crate::http::keys`]) when it has one
/// now. A custom base URL may go without a key (a local server); the
/// service's own URL may not.
fn credential(kind: &BackendKind) -> Result<Credential, CredentialError> {
    let Some(key) = kind.default_credential_variable() else {
        return Ok(Credential::None);
    };
    let custom_url = matches!(
        kind,
        BackendKind::Openai { base_url: Some(_) } | BackendKind::Anthropic { base_url: Some(_) }
    );
    match Credential::env(key).resolve() {
        Ok(_) => Ok(Credential::env(key)),
        Err(CredentialError::Missing { .. } | CredentialError::Empty { .. }) if custom_url => {
            Ok(Credential::None)
        }
        Err(CredentialError::Empty { variable }) => Err(CredentialError::Missing { variable }),
        Err(error) => Err(error),
    }
}

/// The syntax of every model name [`resolve`] accepts.
pub fn available() -> Vec<&'static str> {
    BACKENDS.iter().map(|backend| backend.syntax).collect()
}

/// The model name someone probably meant by a name that is not one: a
/// mistyped backend (`opnai:gpt-4o` is `openai:gpt-4o`, `ecoh` is `echo`),
/// a model skein knows by name written short or with other separators
/// (`4o-mini` is `openai:gpt-4o-mini`, `claude-3.5-sonnet` is
/// `anthropic:claude-3-5-sonnet`: the names of the built-in price table),
/// a provider's model (`gpt-4o` is `openai:gpt-4o`, `claude-…` is
/// `anthropic:claude-…`), a GGUF file (`local:PATH`) or a rule file
/// (`scripted:PATH`).
pub fn suggest(model: &str) -> Option<String> {
    if let Some((name, argument)) = model.split_once(':') {
        let backends = BACKENDS.iter().filter(|backend| backend.takes_argument);
        let backend = nearest(name, backends.map(|backend| backend.name))?;
        return Some(format!("{backend}:{argument}"));
    }
    let plain = BACKENDS.iter().filter(|backend| !backend.takes_argument);
    if let Some(backend) = nearest(model, plain.map(|backend| backend.name)) {
        return Some(backend.to_string());
    }
    let lower = model.to_ascii_lowercase();
    if let Some(known) = known_model(&lower) {
        return Some(format!("{}:{known}", provider_of(known)?));
    }
    Some(format!("{}:{model}", provider_of(&lower)?))
}

/// The backend a bare model name (lower case) belongs to, by its shape.
fn provider_of(lower: &str) -> Option<&'static str> {
    let openai = [
        "gpt-", "gpt4", "chatgpt", "o1", "o3", "o4", "text-", "davinci", "ft:gpt",
    ];
    if openai.iter().any(|prefix| lower.starts_with(prefix)) {
        Some("openai")
    } else if lower.starts_with("claude") {
        Some("anthropic")
    } else if lower.ends_with(".gguf") {
        Some("local")
    } else if lower.ends_with(".toml") {
        Some("scripted")
    } else {
        None
    }
}

/// The one model of the built-in price table that `lower` names: the same
/// name up to separators (`gpt4o-mini`, `claude-3.5-sonnet`), or the end of
/// a name after a `-` (`4o-mini`, `sonnet-4-5`). `None` when none or
/// several do.
fn known_model(lower: &str) -> Option<&'static str> {
    let squeezed = |name: &str| -> String {
        name.chars()
            .filter(|c| !matches!(c, '-' | '.' | '_' | ' '))
            .collect()
    };
    let wanted = squeezed(lower);
    if wanted.is_empty() {
        return None;
    }
    let known: Vec<&'static str> = skein_core::price::builtin_models().collect();
    if let Some(same) = known.iter().find(|name| squeezed(name) == wanted) {
        return Some(same);
    }
    let tail = format!("-{lower}");
    let mut ending = known.iter().filter(|name| name.ends_with(&tail));
    match (ending.next(), ending.next()) {
        (Some(only), None) => Some(only),
        _ => None,
    }
}

/// The one of `names` that `typed` is a likely typo of: at most one edit
/// away (two for names of six letters or more), `typed` being at least
/// three characters long. (Also how surfaces suggest one of their own
/// names, such as a configured profile, for a name that is none.)
pub fn nearest<'a>(typed: &str, names: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    let typed = typed.to_ascii_lowercase();
    if typed.chars().count() < 3 {
        return None;
    }
    let mut close = names.filter(|name| {
        let allowed = if name.len() >= 6 { 2 } else { 1 };
        *name != typed && edits(&typed, name) <= allowed
    });
    match (close.next(), close.next()) {
        (Some(only), None) => Some(only),
        _ => None,
    }
}

/// The optimal-string-alignment distance between `a` and `b`: insertions,
/// deletions, substitutions and swaps of neighbours.
fn edits(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let mut table = vec![vec![0_usize; b.len() + 1]; a.len() + 1];
    for (i, row) in table.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in table[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (table[i - 1][j] + 1)
                .min(table[i][j - 1] + 1)
                .min(table[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(table[i - 2][j - 2] + 1);
            }
            table[i][j] = best;
        }
    }
    table[a.len()][b.len()]
}

/// A model name whose backend opens a file (`local:PATH`,
/// `scripted:PATH`) with a relative path made absolute against the working
/// directory, so that the name means the same file from any directory (a
/// conversation stores the name it was opened with). Any other name comes
/// back as it is.
pub fn with_absolute_path(model: &str) -> std::borrow::Cow<'_, str> {
    if let Some((name, path)) = model.split_once(':')
        && names_a_file(model)
        && !path.is_empty()
        && Path::new(path).is_relative()
        && let Ok(absolute) = std::path::absolute(path)
    {
        return std::borrow::Cow::Owned(format!("{name}:{}", absolute.display()));
    }
    std::borrow::Cow::Borrowed(model)
}

/// The file a model name opens (`local:PATH`, `scripted:PATH`), if its
/// backend opens one.
pub fn file_of(model: &str) -> Option<&Path> {
    match model.split_once(':') {
        Some((_, path)) if names_a_file(model) && !path.is_empty() => Some(Path::new(path)),
        _ => None,
    }
}

/// Whether a model name opens a file of this machine (`local:PATH`,
/// `scripted:PATH`), judged by its backend alone.
pub fn names_a_file(model: &str) -> bool {
    model.split_once(':').is_some_and(|(name, _)| {
        BACKENDS
            .iter()
            .any(|backend| backend.name == name && backend.names_a_file)
    })
}

/// The provider for a model name, the model name to send it and the kind
/// of backend it stands for.
pub fn resolve(model: &str) -> Result<Resolved, ResolveError> {
    let (kind, sends) = kind_of(model)?;
    let provider = kind.provider(credential(&kind)?)?;
    Ok(Resolved {
        provider,
        model: sends,
        kind,
    })
}

/// The kind of backend a model name stands for and the model name to send
/// it, without building a provider or looking for its key: for a backend
/// that is given its key with each request.
pub fn kind_of(model: &str) -> Result<(BackendKind, String), ResolveError> {
    let (backend, argument) = lookup(model)?;
    Ok((
        (backend.kind)(argument),
        backend.sends.unwrap_or(argument).to_string(),
    ))
}

/// A model name's row and argument ("" for a backend without one).
fn lookup(model: &str) -> Result<(&'static Backend, &str), ResolveError> {
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
        (true, Some(argument)) if !argument.is_empty() => Ok((backend, argument)),
        (true, _) => Err(ResolveError::MissingArgument {
            model: model.to_owned(),
            syntax: backend.syntax,
        }),
        (false, None) => Ok((backend, "")),
        (false, Some(_)) => Err(unknown()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kind_names_the_provider_it_builds() {
        let script = std::env::temp_dir().join(format!("skein-kind-{}.toml", std::process::id()));
        std::fs::write(&script, "[[rules]]\nname = \"any\"\nreply = \"hi\"\n").unwrap();
        for kind in [
            BackendKind::Echo,
            BackendKind::Scripted {
                script: script.clone(),
            },
            BackendKind::Openai {
                base_url: Some("http://127.0.0.1:9/v1".into()),
            },
            BackendKind::Anthropic {
                base_url: Some("http://127.0.0.1:9".into()),
            },
        ] {
            let provider = kind.provider(Credential::None).unwrap();
            assert_eq!(provider.name(), kind.provider_name(), "{kind:?}");
        }
        let _ = std::fs::remove_file(&script);
        assert_eq!(BackendKind::Local { path: None }.provider_name(), "local");
    }
}
