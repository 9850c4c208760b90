/*!
Configuration as data: prompts, profiles and backends, built in code or
loaded from TOML ([`crate::load`]), collected in a [`Catalog`].

- A **prompt** has an id and a version, messages whose text is a minijinja
  template over declared variables and named artifacts (files read at render
  time), each optionally with a cache hint, and optionally a default profile, an output contract (a JSON Schema)
  and a session-id template.
- A **profile** names a backend and a model, with sampling options, how many
  structural repairs to attempt, and where its credential comes from.
- A **backend** is a provider kind, where to reach it, and its capacity
  (how many runs may use it at once).
*/

use crate::error::EngineError;
use serde::{Deserialize, Serialize};
use skein_core::provider::GenerationOptions;
use skein_core::{CacheHint, Role};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// One message of a prompt: a role, a template for its text, and
/// optionally a cache hint.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MessageTemplate {
    pub role: Role,
    pub template: String,
    /// Ask the provider to cache the request up to the end of this message
    /// (`cache = "ephemeral"` in TOML): the rendered message's text carries
    /// an [`Annotation::CacheHint`](skein_core::Annotation::CacheHint),
    /// kept on the run like any annotation of its request and carried into
    /// the turns that continue it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache: Option<CacheHint>,
}

/// A variable a prompt's templates may use.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VariableDecl {
    pub name: String,
    /// Must a request supply it? (Optional variables without a default
    /// render as undefined, which templates can test with `is defined`.)
    #[serde(default = "yes")]
    pub required: bool,
    pub default: Option<serde_json::Value>,
    pub description: Option<String>,
}

fn yes() -> bool {
    true
}

/// A configured prompt.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PromptDef {
    pub id: String,
    #[serde(default = "first_version")]
    pub version: u32,
    pub messages: Vec<MessageTemplate>,
    #[serde(default)]
    pub variables: Vec<VariableDecl>,
    /// Named files, available to templates as `artifacts.NAME` (their text,
    /// read at render time). Relative paths are relative to the prompt file.
    #[serde(default)]
    pub artifacts: BTreeMap<String, PathBuf>,
    pub default_profile: Option<String>,
    /// A JSON Schema the final reply must satisfy.
    pub output_contract: Option<serde_json::Value>,
    /// A template over the variables giving the run's session id.
    pub session_id: Option<String>,
    /// The tools a surface offers with the prompt, by the names its users
    /// give them (the command line's `-T NAME`), when the turn names none
    /// itself. The engine does not look these names up: a request carries
    /// the tools it offers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<String>,
}

fn first_version() -> u32 {
    1
}

impl PromptDef {
    /// A prompt of one user message, version 1.
    pub fn new(id: impl Into<String>, messages: Vec<MessageTemplate>) -> PromptDef {
        PromptDef {
            id: id.into(),
            version: 1,
            messages,
            variables: Vec::new(),
            artifacts: BTreeMap::new(),
            default_profile: None,
            output_contract: None,
            session_id: None,
            tools: Vec::new(),
        }
    }

    /// Declare, as required, every variable the message templates use that
    /// is not declared yet (`artifacts` aside): a prompt written as text
    /// with `{{ name }}` in it takes `name` as a variable. A template that
    /// does not parse is an [`EngineError::PromptLoad`] naming the message.
    pub fn declare_used_variables(mut self) -> Result<PromptDef, EngineError> {
        let env = minijinja::Environment::new();
        let mut used = std::collections::BTreeSet::new();
        for (index, message) in self.messages.iter().enumerate() {
            let template = env.template_from_str(&message.template).map_err(|error| {
                EngineError::PromptLoad {
                    file: None,
                    key: Some(format!("{}: messages[{index}]", self.id)),
                    problem: error.to_string(),
                }
            })?;
            used.extend(template.undeclared_variables(false));
        }
        for name in used {
            if name != "artifacts" && !self.variables.iter().any(|v| v.name == name) {
                self = self.variable(name);
            }
        }
        Ok(self)
    }

    /// Offer these tools (by name) with the prompt.
    pub fn tools(mut self, names: impl IntoIterator<Item = impl Into<String>>) -> PromptDef {
        self.tools.extend(names.into_iter().map(Into::into));
        self
    }

    pub fn variable(mut self, name: impl Into<String>) -> PromptDef {
        self.variables.push(VariableDecl {
            name: name.into(),
            required: true,
            default: None,
            description: None,
        });
        self
    }

    pub fn artifact(mut self, name: impl Into<String>, path: impl Into<PathBuf>) -> PromptDef {
        self.artifacts.insert(name.into(), path.into());
        self
    }

    pub fn default_profile(mut self, profile: impl Into<String>) -> PromptDef {
        self.default_profile = Some(profile.into());
        self
    }

    pub fn output_contract(mut self, schema: serde_json::Value) -> PromptDef {
        self.output_contract = Some(schema);
        self
    }

    pub fn session_id(mut self, template: impl Into<String>) -> PromptDef {
        self.session_id = Some(template.into());
        self
    }

    pub fn version(mut self, version: u32) -> PromptDef {
        self.version = version;
        self
    }
}

impl MessageTemplate {
    pub fn new(role: Role, template: impl Into<String>) -> MessageTemplate {
        MessageTemplate {
            role,
            template: template.into(),
            cache: None,
        }
    }

    /// Give the message a cache hint.
    pub fn cache(mut self, hint: CacheHint) -> MessageTemplate {
        self.cache = Some(hint);
        self
    }
}

/// Where a profile's credential comes from. Never a key in a file: keys
/// live in the environment or are passed in code per request.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum CredentialSource {
    /// The backend needs no key, or the backend's default variable applies.
    #[default]
    Default,
    /// No key at all.
    None,
    /// Read this environment variable on every execution.
    Env(String),
    /// The request must carry a key explicitly.
    Explicit,
}

/// A configured profile.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    pub name: String,
    pub backend: String,
    pub model: String,
    #[serde(default)]
    pub options: GenerationOptions,
    #[serde(default)]
    pub credential: CredentialSource,
    /// Structural repairs attempted after the first reply fails its output
    /// contract.
    #[serde(default = "default_repairs")]
    pub repair_attempts: u32,
}

/// Two repairs: three candidates in all.
pub const DEFAULT_REPAIR_ATTEMPTS: u32 = 2;

fn default_repairs() -> u32 {
    DEFAULT_REPAIR_ATTEMPTS
}

impl Profile {
    pub fn new(
        name: impl Into<String>,
        backend: impl Into<String>,
        model: impl Into<String>,
    ) -> Profile {
        Profile {
            name: name.into(),
            backend: backend.into(),
            model: model.into(),
            options: GenerationOptions::default(),
            credential: CredentialSource::Default,
            repair_attempts: DEFAULT_REPAIR_ATTEMPTS,
        }
    }

    pub fn credential(mut self, source: CredentialSource) -> Profile {
        self.credential = source;
        self
    }

    pub fn options(mut self, options: GenerationOptions) -> Profile {
        self.options = options;
        self
    }

    pub fn repair_attempts(mut self, attempts: u32) -> Profile {
        self.repair_attempts = attempts;
        self
    }
}

/// What kind of provider a backend is: the providers' table of backends.
pub use skein_providers::BackendKind;

/// A configured backend. (Read from TOML by [`crate::load`], which checks
/// each kind's own keys; serde's `flatten` cannot reject unknown ones.)
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct BackendDef {
    pub name: String,
    #[serde(flatten)]
    pub kind: BackendKind,
    /// How many runs may use the backend at once.
    pub capacity: usize,
}

fn default_capacity() -> usize {
    4
}

impl BackendDef {
    pub fn new(name: impl Into<String>, kind: BackendKind) -> BackendDef {
        BackendDef {
            name: name.into(),
            kind,
            capacity: default_capacity(),
        }
    }

    pub fn capacity(mut self, capacity: usize) -> BackendDef {
        self.capacity = capacity;
        self
    }

    /// The environment variable a backend's key is read from by default.
    pub fn default_credential_variable(&self) -> Option<&'static str> {
        self.kind.default_credential_variable()
    }
}

/// Every prompt, profile and backend an engine knows.
#[derive(Clone, Debug, Default)]
pub struct Catalog {
    pub(crate) prompts: BTreeMap<String, BTreeMap<u32, PromptDef>>,
    pub(crate) profiles: BTreeMap<String, Profile>,
    pub(crate) backends: BTreeMap<String, BackendDef>,
    /// Where each prompt was loaded from, for relative artifact paths.
    pub(crate) prompt_dirs: BTreeMap<(String, u32), PathBuf>,
}

impl Catalog {
    pub fn new() -> Catalog {
        Catalog::default()
    }

    pub fn prompt(mut self, prompt: PromptDef) -> Catalog {
        self.add_prompt(prompt, None);
        self
    }

    pub fn profile(mut self, profile: Profile) -> Catalog {
        self.profiles.insert(profile.name.clone(), profile);
        self
    }

    pub fn backend(mut self, backend: BackendDef) -> Catalog {
        self.backends.insert(backend.name.clone(), backend);
        self
    }

    pub(crate) fn add_prompt(&mut self, prompt: PromptDef, dir: Option<PathBuf>) {
        if let Some(dir) = dir {
            self.prompt_dirs
                .insert((prompt.id.clone(), prompt.version), dir);
        }
        self.prompts
            .entry(prompt.id.clone())
            .or_default()
            .insert(prompt.version, prompt);
    }

    /// A prompt by id, at a version or the newest.
    pub fn find_prompt(&self, id: &str, version: Option<u32>) -> Option<&PromptDef> {
        let versions = self.prompts.get(id)?;
        match version {
            Some(version) => versions.get(&version),
            None => versions.values().next_back(),
        }
    }

    pub fn find_profile(&self, name: &str) -> Option<&Profile> {
        self.profiles.get(name)
    }

    pub fn find_backend(&self, name: &str) -> Option<&BackendDef> {
        self.backends.get(name)
    }

    pub fn prompt_ids(&self) -> impl Iterator<Item = &str> {
        self.prompts.keys().map(String::as_str)
    }

    pub fn profile_names(&self) -> impl Iterator<Item = &str> {
        self.profiles.keys().map(String::as_str)
    }

    pub fn backend_names(&self) -> impl Iterator<Item = &str> {
        self.backends.keys().map(String::as_str)
    }

    pub(crate) fn prompt_dir(&self, id: &str, version: u32) -> Option<&PathBuf> {
        self.prompt_dirs.get(&(id.to_string(), version))
    }
}
