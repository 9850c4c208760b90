/*!
The engine directory as the command line writes it: templates (`prompt
--save NAME`) are its configured prompts and aliases (`aliases set`) its
profiles, so `-t`, `-m`, `inspect`, `prepare` and replay's
`--prompt-version` see them as they see any prompt or profile written by
hand. There is no second store.

What skein writes, beside what people write themselves:

- `prompts/NAME.toml` (version 1) and `prompts/NAME@VERSION.toml` (each
  later `--save NAME`: a new version, the older ones kept for replay);
- `profiles/templates.toml`: a template's own profile `NAME@VERSION`, when
  it was saved with a model or options;
- `profiles/aliases.toml`: one profile per alias, named by the alias;
- `backends/models.toml`: one backend per model name those profiles run on,
  named by the model name (`openai:gpt-4o-mini`).

The directory is the configuration file's `engine`, else `engine/` beside
the configuration file ([`skein::config::default_engine_dir`]), created on
the first write. Every write is checked by loading the whole directory
again; a change that would not load is undone and reported.
*/

use crate::exit::{ExitWith, NOT_FOUND, usage};
use anyhow::{Context as _, Result, anyhow, bail};
use skein::core::Role;
use skein::core::provider::GenerationOptions;
use skein::engine::config::{BackendDef, Catalog, MessageTemplate, Profile, PromptDef};
use std::path::{Path, PathBuf};

/// The file of the aliases' profiles, under `profiles/`.
const ALIASES_FILE: &str = "aliases.toml";
/// The file of the templates' profiles, under `profiles/`.
const TEMPLATE_PROFILES_FILE: &str = "templates.toml";
/// The file of the backends model names run on, under `backends/`.
const MODELS_FILE: &str = "models.toml";

/// The engine directory, configured or default (which may not exist yet).
pub struct EngineDir {
    pub root: PathBuf,
}

/// What `prompt --save` stores: the prompt as the command line gave it.
#[derive(Default)]
pub struct TemplateSpec {
    pub system: Option<String>,
    pub text: Option<String>,
    pub model: Option<String>,
    pub options: GenerationOptions,
    pub tools: Vec<String>,
    pub schema: Option<serde_json::Value>,
}

/// A template once saved.
pub struct SavedTemplate {
    pub version: u32,
    pub file: PathBuf,
    /// The profile it runs on (`None`: `-m`, else the default model).
    pub profile: Option<String>,
    pub variables: Vec<String>,
}

/// One prompt file of `prompts/`.
pub struct PromptFile {
    pub path: PathBuf,
    pub id: String,
    pub version: u32,
}

/// An alias: its name and the profile it is.
pub struct Alias {
    pub name: String,
    pub profile: Profile,
}

/// A template or alias name: letters, digits, `-`, `_` and `.`, not
/// starting with `.` or `-` (so it is a file name, a flag's value and
/// never a model name's `backend:` or a version's `@`).
pub fn check_name(what: &str, name: &str) -> Result<()> {
    let fine = !name.is_empty()
        && !name.starts_with(['.', '-'])
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if !fine {
        return Err(usage(format!(
            "`{name}` cannot name {what}: use letters, digits, `-`, `_` and `.` (not first)"
        )));
    }
    Ok(())
}

impl EngineDir {
    /// The configuration file's `engine`, else the default directory.
    pub fn located() -> Result<EngineDir> {
        let root = match &skein::config::get()?.engine {
            Some(dir) => dir.clone(),
            None => skein::config::default_engine_dir()?,
        };
        Ok(EngineDir { root })
    }

    pub fn prompts(&self) -> PathBuf {
        self.root.join("prompts")
    }

    /// Everything the directory holds (empty when it does not exist yet).
    pub fn catalog(&self) -> Result<Catalog> {
        if !self.root.exists() {
            return Ok(Catalog::new());
        }
        skein::engine::load_dir(&self.root)
            .with_context(|| format!("the engine directory {}", self.root.display()))
    }

    /// The prompt files of `prompts/`, sorted by id and version.
    pub fn prompt_files(&self) -> Result<Vec<PromptFile>> {
        let mut files = Vec::new();
        let Ok(entries) = std::fs::read_dir(self.prompts()) else {
            return Ok(files);
        };
        for entry in entries {
            let path = entry?.path();
            let is_toml = path.extension().is_some_and(|e| e == "toml")
                && !path
                    .file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with('.'));
            if !is_toml || !path.is_file() {
                continue;
            }
            let text = std::fs::read_to_string(&path)
                .with_context(|| format!("cannot read {}", path.display()))?;
            let Ok(table) = text.parse::<toml::Table>() else {
                continue;
            };
            let Some(id) = table.get("id").and_then(|v| v.as_str()) else {
                continue;
            };
            let version = table
                .get("version")
                .and_then(|v| v.as_integer())
                .unwrap_or(1);
            files.push(PromptFile {
                id: id.to_string(),
                version: u32::try_from(version).unwrap_or(0),
                path,
            });
        }
        files.sort_by(|a, b| (&a.id, a.version).cmp(&(&b.id, b.version)));
        Ok(files)
    }

    /// The file of template `id` at `version`, else its newest; exit code
    /// 3 when there is none.
    pub fn prompt_file(&self, id: &str, version: Option<u32>) -> Result<PromptFile> {
        let files = self.prompt_files()?;
        let known: Vec<&str> = {
            let mut ids: Vec<&str> = files.iter().map(|f| f.id.as_str()).collect();
            ids.dedup();
            ids
        };
        let found = files
            .iter()
            .rfind(|f| f.id == id && version.is_none_or(|version| f.version == version));
        if let Some(found) = found {
            return Ok(PromptFile {
                path: found.path.clone(),
                id: found.id.clone(),
                version: found.version,
            });
        }
        let known = if known.is_empty() {
            "none".to_string()
        } else {
            known.join(", ")
        };
        Err(anyhow::Error::new(ExitWith(
            NOT_FOUND,
            match version {
                Some(version) if files.iter().any(|f| f.id == id) => {
                    format!("template `{id}` has no version {version}")
                }
                _ => format!(
                    "there is no template `{id}` in {} (known: {known}); save one with \
                     `skein prompt … --save {id}`",
                    self.prompts().display()
                ),
            },
        )))
    }

    /// Save a template: a new version of `name` when it exists.
    pub fn save_template(&self, name: &str, spec: TemplateSpec) -> Result<SavedTemplate> {
        check_name("a template", name)?;
        let catalog = self.catalog()?;
        let version = catalog
            .find_prompt(name, None)
            .map_or(1, |newest| newest.version + 1);
        let mut messages = Vec::new();
        if let Some(system) = &spec.system {
            messages.push(MessageTemplate::new(Role::System, system));
        }
        if let Some(text) = &spec.text {
            messages.push(MessageTemplate::new(Role::User, text));
        }
        let mut prompt = PromptDef::new(name, messages)
            .version(version)
            .tools(spec.tools.clone())
            .declare_used_variables()
            .map_err(|error| usage(format!("cannot save template `{name}`: {error}")))?;
        if let Some(schema) = spec.schema {
            prompt = prompt.output_contract(schema);
        }
        let mut writes = Vec::new();
        let own_options = spec.options != GenerationOptions::default();
        let profile = match (spec.model, own_options) {
            (None, false) => None,
            (model, _) => {
                let model = match model {
                    Some(model) => model,
                    None => crate::config::default_model()?.0,
                };
                match catalog.find_profile(&model) {
                    Some(_) if !own_options => Some(model),
                    Some(base) => {
                        let mut profile = base.clone();
                        profile.name = format!("{name}@{version}");
                        profile.options = merged(&base.options, &spec.options);
                        writes.push(self.with_profile(TEMPLATE_PROFILES_FILE, &profile)?);
                        Some(profile.name)
                    }
                    None => {
                        let (backend, sends) = model_backend(&catalog, &model)?;
                        if let Some(write) = self.with_backend(&backend)? {
                            writes.push(write);
                        }
                        let profile =
                            Profile::new(format!("{name}@{version}"), backend.name, sends)
                                .options(spec.options.clone());
                        writes.push(self.with_profile(TEMPLATE_PROFILES_FILE, &profile)?);
                        Some(profile.name)
                    }
                }
            }
        };
        if let Some(profile) = &profile {
            prompt = prompt.default_profile(profile.clone());
        }
        let file = match version {
            1 => self.prompts().join(format!("{name}.toml")),
            _ => self.prompts().join(format!("{name}@{version}.toml")),
        };
        if file.exists() {
            bail!(
                "cannot save template `{name}` (version {version}): {} already exists and holds \
                 another prompt; rename that file or save under another name",
                file.display()
            );
        }
        let mut fields = toml::Table::try_from(&prompt)
            .map_err(|error| anyhow!("cannot write the template: {error}"))?;
        // What a template never has is left out, as someone writing one by
        // hand would.
        for empty in ["variables", "artifacts"] {
            let is_empty = match fields.get(empty) {
                Some(toml::Value::Array(items)) => items.is_empty(),
                Some(toml::Value::Table(items)) => items.is_empty(),
                _ => false,
            };
            if is_empty {
                fields.remove(empty);
            }
        }
        let text = format!(
            "# A template `skein prompt … --save {name}` wrote; `skein templates edit {name}` edits it.\n{}",
            toml::to_string(&fields)
                .map_err(|error| anyhow!("cannot write the template: {error}"))?
        );
        writes.push((file.clone(), Some(text)));
        self.write_checked(writes)?;
        Ok(SavedTemplate {
            version,
            file,
            profile,
            variables: prompt.variables.into_iter().map(|v| v.name).collect(),
        })
    }

    /// The aliases, by name.
    pub fn aliases(&self) -> Result<Vec<Alias>> {
        let path = self.root.join("profiles").join(ALIASES_FILE);
        let entries = read_list(&path, "profile")?;
        entries
            .into_iter()
            .map(|entry| {
                let profile: Profile = entry.try_into().with_context(|| {
                    format!("{} holds a profile that is not one", path.display())
                })?;
                Ok(Alias {
                    name: profile.name.clone(),
                    profile,
                })
            })
            .collect()
    }

    /// Make `name` an alias of `target` (a model name or a profile),
    /// replacing the alias of that name if there is one. A name a built-in
    /// model or another profile has is refused.
    pub fn set_alias(&self, name: &str, target: &str) -> Result<Alias> {
        check_name("an alias", name)?;
        let catalog = self.catalog()?;
        let aliases = self.aliases()?;
        let is_alias = aliases.iter().any(|alias| alias.name == name);
        if !is_alias && catalog.find_profile(name).is_some() {
            return Err(usage(format!(
                "`{name}` is already a profile of the engine directory {}: choose another alias \
                 name",
                self.root.display()
            )));
        }
        if skein::providers::kind_of(name).is_ok() {
            return Err(usage(format!(
                "`{name}` is already a model name: choose another alias name"
            )));
        }
        if name == target {
            return Err(usage(format!("`{name}` cannot be an alias of itself")));
        }
        let mut writes = Vec::new();
        let profile = match catalog.find_profile(target) {
            Some(profile) => {
                let mut copy = profile.clone();
                copy.name = name.to_string();
                copy
            }
            None => {
                let (backend, sends) = model_backend(&catalog, target)?;
                if let Some(write) = self.with_backend(&backend)? {
                    writes.push(write);
                }
                Profile::new(name, backend.name, sends)
            }
        };
        writes.push(self.with_profile(ALIASES_FILE, &profile)?);
        self.write_checked(writes)?;
        Ok(Alias {
            name: name.to_string(),
            profile,
        })
    }

    /// Remove alias `name`; exit code 3 when there is none, and refused
    /// while a prompt runs on it.
    pub fn remove_alias(&self, name: &str) -> Result<()> {
        let aliases = self.aliases()?;
        if !aliases.iter().any(|alias| alias.name == name) {
            let known: Vec<&str> = aliases.iter().map(|a| a.name.as_str()).collect();
            return Err(anyhow::Error::new(ExitWith(
                NOT_FOUND,
                format!(
                    "there is no alias `{name}` (aliases: {})",
                    if known.is_empty() {
                        "none".to_string()
                    } else {
                        known.join(", ")
                    }
                ),
            )));
        }
        let catalog = self.catalog()?;
        let users: Vec<String> = self
            .prompt_files()?
            .into_iter()
            .filter(|file| {
                catalog
                    .find_prompt(&file.id, Some(file.version))
                    .is_some_and(|p| p.default_profile.as_deref() == Some(name))
            })
            .map(|file| format!("{}@{}", file.id, file.version))
            .collect();
        if !users.is_empty() {
            bail!(
                "alias `{name}` is the model of {}: edit {} first (`skein templates edit`)",
                users.join(", "),
                if users.len() == 1 { "it" } else { "them" }
            );
        }
        let path = self.root.join("profiles").join(ALIASES_FILE);
        let mut entries = read_list(&path, "profile")?;
        entries.retain(|entry| entry.get("name").and_then(|n| n.as_str()) != Some(name));
        self.write_checked(vec![(
            path.clone(),
            Some(list_text(&path, "profile", entries)?),
        )])
    }

    /// `file` under `profiles/` with `profile` added (or replacing the one
    /// of its name).
    fn with_profile(&self, file: &str, profile: &Profile) -> Result<(PathBuf, Option<String>)> {
        let path = self.root.join("profiles").join(file);
        let mut entries = read_list(&path, "profile")?;
        entries.retain(|entry| entry.get("name").and_then(|n| n.as_str()) != Some(&profile.name));
        entries.push(
            toml::Value::try_from(profile)
                .map_err(|error| anyhow!("cannot write profile `{}`: {error}", profile.name))?,
        );
        let text = list_text(&path, "profile", entries)?;
        Ok((path, Some(text)))
    }

    /// `backends/models.toml` with `backend` added, unless the directory
    /// has it already.
    fn with_backend(&self, backend: &BackendDef) -> Result<Option<(PathBuf, Option<String>)>> {
        if self.catalog()?.find_backend(&backend.name).is_some() {
            return Ok(None);
        }
        let path = self.root.join("backends").join(MODELS_FILE);
        let mut entries = read_list(&path, "backend")?;
        entries.push(
            toml::Value::try_from(backend)
                .map_err(|error| anyhow!("cannot write backend `{}`: {error}", backend.name))?,
        );
        let text = list_text(&path, "backend", entries)?;
        Ok(Some((path, Some(text))))
    }

    /// Write every file (`None`: remove it), then load the directory; when
    /// it does not load, put every file back as it was and say why.
    fn write_checked(&self, writes: Vec<(PathBuf, Option<String>)>) -> Result<()> {
        let mut before = Vec::new();
        for (path, _) in &writes {
            before.push((path.clone(), std::fs::read_to_string(path).ok()));
        }
        let result = writes
            .iter()
            .try_for_each(|(path, text)| write(path, text.as_deref()));
        let result =
            result.and_then(|()| {
                skein::engine::load_dir(&self.root).map(|_| ()).map_err(|error| {
                anyhow!(
                    "the engine directory {} would not load after this change, so nothing was \
                     changed: {error}",
                    self.root.display()
                )
            })
            });
        if result.is_err() {
            for (path, text) in before {
                let _ = write(&path, text.as_deref());
            }
        }
        result
    }
}

/// Write `text` to `path` (creating its directory), or remove it.
fn write(path: &Path, text: Option<&str>) -> Result<()> {
    match text {
        Some(text) => {
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir)
                    .with_context(|| format!("cannot create {}", dir.display()))?;
            }
            std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))
        }
        None => match std::fs::remove_file(path) {
            Err(error) if error.kind() != std::io::ErrorKind::NotFound => {
                Err(anyhow!("cannot remove {}: {error}", path.display()))
            }
            _ => Ok(()),
        },
    }
}

/// The `[[key]]` tables of a list file (none when it does not exist).
fn read_list(path: &Path, key: &str) -> Result<Vec<toml::Value>> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(error) => bail!("cannot read {}: {error}", path.display()),
    };
    let table: toml::Table = text
        .parse()
        .map_err(|error| anyhow!("{} is not valid TOML: {error}", path.display()))?;
    Ok(table
        .get(key)
        .and_then(|list| list.as_array())
        .cloned()
        .unwrap_or_default())
}

/// A list file's text: a comment saying who writes it, then its tables.
fn list_text(path: &Path, key: &str, entries: Vec<toml::Value>) -> Result<String> {
    let mut table = toml::Table::new();
    table.insert(key.to_string(), toml::Value::Array(entries));
    let body = toml::to_string(&table)
        .map_err(|error| anyhow!("cannot write {}: {error}", path.display()))?;
    let writer = match path.file_name().and_then(|n| n.to_str()) {
        Some(ALIASES_FILE) => "`skein aliases`",
        Some(TEMPLATE_PROFILES_FILE) => "`skein prompt --save`",
        _ => "`skein prompt --save` and `skein aliases set`",
    };
    Ok(format!("# Written by {writer}.\n{body}"))
}

/// The backend a model name runs on, named by the name (its file, if
/// any, absolute), and the model it sends: the catalog's backend of that
/// name when there is one of the same kind. An unknown name is the same
/// error `-m` gives (exit code 2, with the nearest known name).
fn model_backend(catalog: &Catalog, model: &str) -> Result<(BackendDef, String)> {
    let model = skein::providers::with_absolute_path(model).into_owned();
    let (kind, sends) = skein::providers::kind_of(&model)?;
    if let Some(backend) = catalog.find_backend(&model) {
        if backend.kind != kind {
            return Err(usage(format!(
                "the engine directory has a backend `{model}` of another kind: name the model \
                 by a profile instead"
            )));
        }
        return Ok((backend.clone(), sends));
    }
    Ok((BackendDef::new(model, kind), sends))
}

/// `over`'s options, else `base`'s.
fn merged(base: &GenerationOptions, over: &GenerationOptions) -> GenerationOptions {
    GenerationOptions {
        temperature: over.temperature.or(base.temperature),
        top_p: over.top_p.or(base.top_p),
        seed: over.seed.or(base.seed),
        max_tokens: over.max_tokens.or(base.max_tokens),
    }
}

/// How a profile is shown: the model name its backend is named by, else
/// its backend and model.
pub fn describe(catalog: &Catalog, profile: &Profile) -> String {
    let by_name = skein::providers::kind_of(&profile.backend)
        .ok()
        .zip(catalog.find_backend(&profile.backend))
        .is_some_and(|((kind, sends), backend)| backend.kind == kind && sends == profile.model);
    match by_name {
        true => profile.backend.clone(),
        false => format!("backend {}, model {}", profile.backend, profile.model),
    }
}

/// The key a profile needs: the variable it reads, `None` when it needs
/// none.
pub fn needs_key(catalog: &Catalog, profile: &Profile) -> Option<String> {
    use skein::engine::config::CredentialSource;
    match &profile.credential {
        CredentialSource::None => None,
        CredentialSource::Env(variable) => Some(variable.clone()),
        CredentialSource::Explicit => Some("a key with each request".to_string()),
        CredentialSource::Default => catalog
            .find_backend(&profile.backend)
            .and_then(|backend| backend.default_credential_variable())
            .map(str::to_string),
    }
}
