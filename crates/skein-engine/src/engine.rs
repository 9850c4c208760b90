/*!
The engine: resolve a request (prompt, profile, backend, credential,
contract, session id) into a [`Prepared`] plan, and execute it.

Settings are resolved fresh for every execution under one precedence:
an explicit request override, then the prompt's default, then the ordinary
error. A continuation inherits nothing from the run that produced its
exchange except the conversation content (seed decision 2): not its profile,
contract, credential or session id.
*/

use crate::admission::Admission;
use crate::backends::Providers;
use crate::config::{BackendDef, Catalog, Profile, PromptDef};
use crate::contract::{Contract, Contracts};
use crate::error::{EngineError, Result};
use crate::exchange::{Exchange, PromptRef, RenderedPrompt};
use crate::execute::{self, Plan, RunOutput};
use crate::ledger::Ledger;
use crate::observe::{Observer, RunId, Watchers};
use crate::render::Renderer;
use crate::request::Request;
use crate::tools::Tool;
use serde::Serialize;
use skein_core::provider::GenerationOptions;
use skein_core::{Annotations, AttachmentSupport, Part, Provider, Thread, ToolSpec};
use std::sync::Arc;

/// Executes requests against configured backends. Cheap to clone.
#[derive(Clone)]
pub struct Engine {
    inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) catalog: Catalog,
    renderer: Renderer,
    providers: Providers,
    pub(crate) admission: Admission,
    pub(crate) contracts: Contracts,
    pub(crate) ledger: Ledger,
    pub(crate) watchers: Watchers,
    tools: Vec<Arc<dyn Tool>>,
}

/// Builds an [`Engine`].
pub struct EngineBuilder {
    catalog: Catalog,
    providers: Providers,
    watchers: Watchers,
    tools: Vec<Arc<dyn Tool>>,
    ledger_capacity: usize,
}

impl EngineBuilder {
    /// Use `provider` for `backend` instead of building one from the
    /// configuration (tests, custom backends).
    pub fn provider(
        mut self,
        backend: impl Into<String>,
        provider: Arc<dyn Provider>,
    ) -> EngineBuilder {
        self.providers.set_override(backend.into(), provider);
        self
    }

    /// Watch every run's events.
    pub fn observe(mut self, observer: Arc<dyn Observer>) -> EngineBuilder {
        self.watchers.observers.push(observer);
        self
    }

    /// Register a tool, so that stored conversations naming it can be
    /// restored with it. A later tool of the same name replaces an earlier.
    pub fn tool(mut self, tool: Arc<dyn Tool>) -> EngineBuilder {
        self.tools
            .retain(|known| known.spec().name != tool.spec().name);
        self.tools.push(tool);
        self
    }

    /// Keep the usage of at most `runs` recent runs in the engine's
    /// [`Ledger`] (default [`DEFAULT_CAPACITY`](crate::ledger::DEFAULT_CAPACITY);
    /// at least one).
    pub fn ledger_capacity(mut self, runs: usize) -> EngineBuilder {
        self.ledger_capacity = runs;
        self
    }

    /// Compile every template of the catalog and build the engine.
    pub fn build(self) -> Result<Engine> {
        let renderer = Renderer::new(&self.catalog)?;
        Ok(Engine {
            inner: Arc::new(Inner {
                catalog: self.catalog,
                renderer,
                providers: self.providers,
                admission: Admission::default(),
                contracts: Contracts::default(),
                ledger: Ledger::with_capacity(self.ledger_capacity),
                watchers: self.watchers,
                tools: self.tools,
            }),
        })
    }
}

/// Everything a run will do, resolved, with nothing generated yet.
/// Preparing the same request twice gives equal plans.
#[derive(Clone, Debug, Serialize)]
pub struct Prepared {
    pub prompt: Option<PromptRef>,
    /// What the configured prompt rendered, variables included: kept on
    /// the run's record, never shown with the plan.
    #[serde(skip)]
    pub rendered: Option<RenderedPrompt>,
    pub profile: String,
    pub backend: String,
    /// The provider that runs it ([`skein_core::Provider::name`]): the one
    /// its execution was prepared with, else (a plan only) the one its
    /// backend's kind builds. Kept on the run's record, failed or not.
    #[serde(skip)]
    pub provider: String,
    pub model: String,
    pub options: GenerationOptions,
    /// The complete rendered request: history, prompt messages, caller messages.
    #[serde(skip)]
    pub thread: Thread,
    pub annotations: Annotations,
    pub tools: Vec<ToolSpec>,
    pub output_contract: Option<serde_json::Value>,
    pub session_id: Option<String>,
    /// The run whose exchange this request continues.
    pub continuation_of: Option<RunId>,
    pub repair_attempts: u32,
}

/// What resolving a request yields.
struct Resolved {
    prepared: Prepared,
    backend: BackendDef,
    profile: Profile,
    contract: Option<Arc<Contract>>,
}

/// A prepared run that can be executed exactly once: running consumes it.
pub struct PreparedExecution {
    engine: Engine,
    prepared: Prepared,
    plan: Plan,
}

impl PreparedExecution {
    /// What the run will do.
    pub fn prepared(&self) -> &Prepared {
        &self.prepared
    }

    /// Execute the run. The handle is consumed.
    pub async fn run(self) -> Result<RunOutput> {
        execute::execute(&self.engine.inner, self.prepared, self.plan).await
    }
}

/// A prompt as configured (templates unrendered).
#[derive(Clone, Debug, Serialize)]
pub struct PromptInspection {
    pub prompt: PromptDef,
    pub versions: Vec<u32>,
}

/// A backend as configured, with its free capacity now.
#[derive(Clone, Debug, Serialize)]
pub struct BackendInspection {
    pub backend: BackendDef,
    pub available_permits: usize,
}

impl Engine {
    pub fn builder(catalog: Catalog) -> EngineBuilder {
        EngineBuilder {
            catalog,
            providers: Providers::default(),
            watchers: Watchers::default(),
            tools: Vec::new(),
            ledger_capacity: crate::ledger::DEFAULT_CAPACITY,
        }
    }

    /// An engine over `catalog` with providers built from it.
    pub fn new(catalog: Catalog) -> Result<Engine> {
        Engine::builder(catalog).build()
    }

    pub fn catalog(&self) -> &Catalog {
        &self.inner.catalog
    }

    /// The tools registered with the engine, in registration order.
    pub fn tools(&self) -> &[Arc<dyn Tool>] {
        &self.inner.tools
    }

    /// A registered tool by name.
    pub fn tool(&self, name: &str) -> Option<Arc<dyn Tool>> {
        self.inner
            .tools
            .iter()
            .find(|tool| tool.spec().name == name)
            .cloned()
    }

    pub(crate) fn contracts(&self) -> &Contracts {
        &self.inner.contracts
    }

    /// The usage ledger of the runs this engine made lately.
    pub fn ledger(&self) -> &Ledger {
        &self.inner.ledger
    }

    /// Resolve and render a request without generating.
    pub fn prepare(&self, request: &Request) -> Result<Prepared> {
        self.resolve(request).map(|resolved| resolved.prepared)
    }

    /// A single-use handle that runs the prepared request.
    pub fn prepare_execution(&self, request: Request) -> Result<PreparedExecution> {
        let Resolved {
            mut prepared,
            backend,
            profile,
            contract,
        } = self.resolve(&request)?;
        let credential =
            self.inner
                .providers
                .credential(&profile, &backend, request.credential.as_ref())?;
        let provider = self.inner.providers.provider(&backend, &credential)?;
        prepared.provider = provider.name().to_string();
        refuse_attachments(&prepared, provider.attachments())?;
        let plan = Plan::new(request, provider, backend, contract);
        Ok(PreparedExecution {
            engine: self.clone(),
            prepared,
            plan,
        })
    }

    /// Prepare and execute a request.
    pub async fn run(&self, request: Request) -> Result<RunOutput> {
        self.prepare_execution(request)?.run().await
    }

    /// Execute `request` with `exchange` as its history. The exchange is
    /// not changed; any number of continuations may start from it.
    pub async fn continue_from(&self, exchange: &Exchange, request: Request) -> Result<RunOutput> {
        self.prepare_continuation(exchange, request)?.run().await
    }

    /// Prepare a continuation of `exchange` without running it.
    pub fn prepare_continuation(
        &self,
        exchange: &Exchange,
        request: Request,
    ) -> Result<PreparedExecution> {
        self.prepare_execution(continuing(exchange, request))
    }

    /// Resolve a continuation without running it.
    pub fn prepare_continuation_plan(
        &self,
        exchange: &Exchange,
        request: &Request,
    ) -> Result<Prepared> {
        self.prepare(&continuing(exchange, request.clone()))
    }

    pub fn inspect_prompt(&self, id: &str, version: Option<u32>) -> Result<PromptInspection> {
        let prompt = self.find_prompt(id, version)?;
        let versions = self
            .inner
            .catalog
            .prompts
            .get(id)
            .map(|versions| versions.keys().copied().collect())
            .unwrap_or_default();
        Ok(PromptInspection {
            prompt: prompt.clone(),
            versions,
        })
    }

    pub fn inspect_profile(&self, name: &str) -> Result<Profile> {
        self.find_profile(name).cloned()
    }

    pub fn inspect_backend(&self, name: &str) -> Result<BackendInspection> {
        let backend = self.find_backend(name, None)?;
        Ok(BackendInspection {
            available_permits: self.inner.admission.available(backend),
            backend: backend.clone(),
        })
    }

    fn resolve(&self, request: &Request) -> Result<Resolved> {
        let catalog = &self.inner.catalog;
        let prompt = match &request.prompt {
            Some((id, version)) => Some(self.find_prompt(id, *version)?),
            None => None,
        };
        let continues = request
            .history
            .as_ref()
            .is_some_and(|history| !history.thread.is_empty());
        if prompt.is_none() && request.messages.is_empty() && !continues {
            return Err(EngineError::InvalidRequest(
                "a request needs a prompt, at least one message, or a history to continue".into(),
            ));
        }
        for (position, appended) in request.messages.iter().enumerate() {
            let parts = appended.message.parts.len();
            if let Some((part, _)) = appended
                .annotations
                .iter()
                .find(|(part, _)| *part as usize >= parts)
            {
                return Err(EngineError::InvalidRequest(format!(
                    "message {position} of the request has an annotation on part {part}, \
                     but it has {parts} part(s)"
                )));
            }
        }
        if prompt.is_none() && !request.variables.is_empty() {
            return Err(EngineError::InvalidRequest(
                "variables were given but the request names no prompt".into(),
            ));
        }
        let profile_name = request
            .profile
            .clone()
            .or_else(|| prompt.and_then(|p| p.default_profile.clone()))
            .ok_or_else(|| EngineError::ProfileRequired {
                known: catalog.profile_names().map(str::to_string).collect(),
            })?;
        let profile = self.find_profile(&profile_name)?.clone();
        let backend = self
            .find_backend(&profile.backend, Some(&profile.name))?
            .clone();

        let mut thread = request
            .history
            .as_ref()
            .map_or_else(Thread::new, |history| history.thread.clone());
        let mut annotations = request
            .history
            .as_ref()
            .map(|history| history.annotations.clone())
            .unwrap_or_default();
        let mut session_id = request.session_id.clone();
        let mut rendered_nodes = Vec::new();
        if let Some(prompt) = prompt {
            let dir = catalog
                .prompt_dir(&prompt.id, prompt.version)
                .map(|p| p.as_path());
            for rendered in self
                .inner
                .renderer
                .messages(prompt, dir, &request.variables)?
            {
                thread = thread.push(rendered.message);
                let node = thread.head_id().expect("just pushed");
                rendered_nodes.push(node);
                for (part, annotation) in rendered.annotations {
                    annotations.add(node, part, annotation);
                }
            }
            if session_id.is_none() {
                session_id = self.inner.renderer.session_id(prompt, &request.variables)?;
            }
        }
        for appended in &request.messages {
            thread = thread.push(appended.message.clone());
            let node = thread.head_id().expect("just pushed");
            for (part, annotation) in &appended.annotations {
                annotations.add(node, *part, annotation.clone());
            }
        }
        let output_contract = request
            .output_contract
            .clone()
            .or_else(|| prompt.and_then(|p| p.output_contract.clone()));
        let contract = match &output_contract {
            Some(schema) => Some(self.inner.contracts.get(schema)?),
            None => None,
        };
        let options = overlay(&profile.options, &request.options);
        options.check().map_err(EngineError::InvalidRequest)?;
        let prepared = Prepared {
            prompt: prompt.map(|p| PromptRef {
                id: p.id.clone(),
                version: p.version,
            }),
            rendered: prompt.map(|p| RenderedPrompt {
                id: p.id.clone(),
                version: p.version,
                variables: request.variables.clone(),
                messages: rendered_nodes,
            }),
            profile: profile.name.clone(),
            backend: backend.name.clone(),
            provider: backend.kind.provider_name().to_string(),
            model: request
                .model
                .clone()
                .unwrap_or_else(|| profile.model.clone()),
            options,
            thread,
            annotations,
            tools: request.tools.clone(),
            output_contract,
            session_id,
            continuation_of: request
                .history
                .as_ref()
                .and_then(|history| history.run.clone()),
            repair_attempts: profile.repair_attempts,
        };
        Ok(Resolved {
            prepared,
            backend,
            profile,
            contract,
        })
    }

    fn find_prompt(&self, id: &str, version: Option<u32>) -> Result<&PromptDef> {
        self.inner
            .catalog
            .find_prompt(id, version)
            .ok_or_else(|| EngineError::PromptLoad {
                file: None,
                key: Some(match version {
                    Some(version) => format!("{id}@{version}"),
                    None => id.to_string(),
                }),
                problem: format!(
                    "no such prompt (known: {})",
                    self.inner
                        .catalog
                        .prompt_ids()
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            })
    }

    fn find_profile(&self, name: &str) -> Result<&Profile> {
        self.inner
            .catalog
            .find_profile(name)
            .ok_or_else(|| EngineError::ProfileLoad {
                file: None,
                key: Some(name.to_string()),
                problem: format!(
                    "no such profile (known: {})",
                    self.inner
                        .catalog
                        .profile_names()
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            })
    }

    fn find_backend(&self, name: &str, profile: Option<&str>) -> Result<&BackendDef> {
        self.inner
            .catalog
            .find_backend(name)
            .ok_or_else(|| EngineError::ProfileLoad {
                file: None,
                key: Some(profile.map_or_else(|| name.to_string(), |p| format!("{p}.backend"))),
                problem: format!(
                    "no such backend `{name}` (known: {})",
                    self.inner
                        .catalog
                        .backend_names()
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            })
    }
}

/// The request with `exchange` as its history and the continuation recorded.
/// The first attachment of the request thread `accepts` refuses, as an
/// error. A model that takes any attachment costs nothing here; otherwise
/// the thread is walked, as the provider would walk it to send it.
fn refuse_attachments(prepared: &Prepared, accepts: AttachmentSupport) -> Result<()> {
    if accepts == AttachmentSupport::Any {
        return Ok(());
    }
    let depth = prepared.thread.len();
    for (back, node) in prepared.thread.ancestors().enumerate() {
        for part in &node.message().parts {
            if let Part::Attachment(attachment) = part
                && !accepts.accepts(&attachment.media_type)
            {
                return Err(EngineError::AttachmentRefused {
                    model: prepared.profile.clone(),
                    media_type: attachment.media_type.clone(),
                    position: depth - 1 - back,
                    accepts,
                });
            }
        }
    }
    Ok(())
}

fn continuing(exchange: &Exchange, request: Request) -> Request {
    request.continuing(exchange)
}

/// Request options laid over the profile's, figure by figure.
fn overlay(base: &GenerationOptions, over: &GenerationOptions) -> GenerationOptions {
    GenerationOptions {
        temperature: over.temperature.or(base.temperature),
        top_p: over.top_p.or(base.top_p),
        seed: over.seed.or(base.seed),
        max_tokens: over.max_tokens.or(base.max_tokens),
    }
}
