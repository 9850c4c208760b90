/*!
`skein.Conversation`: the turn layer's `Conversation` (a named bookmark
with default tools, hooks and a chain limit, optionally attached to a
store), loaded by id or name with `Conversation::load` (its `model` for `model=`), branched
with `fork` and `Conversation::fork_at`, logged with `Conversation::log`.
*/

use crate::args::{TurnArgs, options};
use crate::errors::{check, conversation_error};
use crate::input::turn_input;
use crate::model::{Store, open, stored_conversation};
use crate::response::{ChainResponse, Response};
use crate::runtime;
use crate::tools::{after_call, before_call, tools};
use crate::values::Attachment;
use crate::values::{Message, ToolSpec};
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// A conversation: every clone is the same conversation, and each turn
/// moves its head forward (in its store too, in the same transaction as
/// the turn's messages, when it has one).
#[pyclass(frozen, module = "skein")]
pub struct Conversation {
    pub inner: skein::Conversation,
}

impl Conversation {
    pub fn new(inner: skein::Conversation) -> Conversation {
        Conversation { inner }
    }

    /// The conversation a fork makes, recorded now when it has a store.
    pub fn create(py: Python<'_>, fork: skein::Fork) -> PyResult<Conversation> {
        let created = runtime::block_on(py, fork.create())?;
        Ok(Conversation::new(check(py, created)?))
    }
}

/// The model `model=` names, opened so that its engine knows `extra` too
/// (to restore a stored conversation's tools by name).
fn chosen_model(
    py: Python<'_>,
    model: &Bound<'_, PyAny>,
    extra: Vec<std::sync::Arc<dyn skein::Tool>>,
) -> PyResult<skein::Model> {
    let named = crate::args::model(py, Some(model))?.expect("given");
    match named.is_opened_by_name() {
        true if !extra.is_empty() => open(py, named.name(), extra),
        _ => Ok(named),
    }
}

/// The package's [`skein::Home`], as the turn layer opens stored
/// conversations for every surface (`Conversation.load`,
/// `RecordedChat.load`): models opened as every surface opens them
/// ([`skein::home::open_model`]) with skein's built-in tools and `tools=`,
/// the default model when none is named; the package starts no MCP
/// servers.
pub(crate) struct PyHome {
    default: String,
    extra: Vec<std::sync::Arc<dyn skein::Tool>>,
}

impl PyHome {
    pub(crate) fn new(
        py: Python<'_>,
        extra: Vec<std::sync::Arc<dyn skein::Tool>>,
    ) -> PyResult<PyHome> {
        Ok(PyHome {
            default: default_model(py)?,
            extra,
        })
    }
}

impl skein::Home for PyHome {
    fn open(&self, name: Option<&str>) -> Result<skein::Model, skein::SurfaceError> {
        let tools = skein::builtin::all()
            .into_iter()
            .chain(self.extra.iter().cloned())
            .collect();
        skein::home::open_model(Some(name.unwrap_or(&self.default)), tools)
            .map_err(skein::SurfaceError::new)
    }

    fn default_name(&self) -> String {
        self.default.clone()
    }
}

/// The models a turn at a stored node opens: the one `model=` names (the
/// turn's and the branch's own), and what `home` finds for the node (the
/// turn layer's `ready_at` or `ready_to_ask_again`: the model of the
/// conversation the node belongs to, never the default first), with
/// `tools=`.
fn models_at_a_node(
    py: Python<'_>,
    model: Option<&Bound<'_, PyAny>>,
    tools: Option<&Bound<'_, PyAny>>,
) -> PyResult<(Option<skein::Model>, PyHome)> {
    let extra = self::tools(tools)?;
    let on_model = match model {
        Some(model) => Some(chosen_model(py, model, extra.clone())?),
        None => None,
    };
    Ok((on_model, PyHome::new(py, extra)?))
}

#[pymethods]
impl Conversation {
    /// Load a stored conversation by name or id (any unique prefix): its
    /// history, model, tools (by name, from `tools`, plus skein's built-in
    /// ones) and chain limit; it goes on recording in `store`. `model=`
    /// answers its next turns instead of the model it recorded.
    #[staticmethod]
    #[pyo3(signature = (store, id, *, model = None, tools = None))]
    fn load(
        py: Python<'_>,
        store: PyRef<'_, Store>,
        id: &str,
        model: Option<&Bound<'_, PyAny>>,
        tools: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Conversation> {
        let store = store.inner.clone();
        let stored = stored_conversation(py, &store, id)?;
        let extra = self::tools(tools)?;
        let chosen = model
            .map(|model| chosen_model(py, model, extra.clone()))
            .transpose()?;
        let home = PyHome::new(py, extra)?;
        let loaded = runtime::block_on(py, async move {
            match chosen {
                Some(model) => {
                    skein::Conversation::load(&store, &stored.id, &model)
                        .model(&model)
                        .await
                }
                // As the CLI and the web view go on with it: from its own
                // model (the turn layer's one rule), never the default first.
                None => {
                    let ready = skein::conversation::home::ready(&home, &stored, None).await?;
                    skein::Conversation::load(&store, &stored.id, &ready.home).await
                }
            }
        })?;
        Ok(Conversation::new(check(py, loaded)?))
    }

    /// Branch at any stored node (any unique id prefix): a new conversation
    /// with the settings of the conversation the node belongs to, recorded
    /// in `store` at once, or with a first turn (`prompt`, `messages` or
    /// `attachments`), by that turn (its response is returned then).
    #[staticmethod]
    #[pyo3(signature = (store, node, prompt = None, *, messages = None, attachments = None, name = None, model = None, tools = None))]
    #[allow(
        clippy::too_many_arguments,
        reason = "one argument per Python keyword argument"
    )]
    fn fork_at(
        py: Python<'_>,
        store: PyRef<'_, Store>,
        node: &str,
        prompt: Option<String>,
        messages: Option<&Bound<'_, PyAny>>,
        attachments: Option<Vec<PyRef<'_, Attachment>>>,
        name: Option<String>,
        model: Option<&Bound<'_, PyAny>>,
        tools: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let store = store.inner.clone();
        let (on_model, home) = models_at_a_node(py, model, tools)?;
        let name = crate::args::conversation_name(py, name, Some(&store))?;
        let node = node.to_string();
        let forked = runtime::block_on(py, async move {
            let node = store.nonblocking().resolve_node(&node).await?;
            match &on_model {
                Some(model) => {
                    skein::Conversation::fork_at(&store, node, model)
                        .model(model)
                        .await
                }
                None => {
                    let ready =
                        skein::conversation::home::ready_at(&store, node, &home, None).await?;
                    skein::Conversation::fork_at(&store, node, &ready.home).await
                }
            }
        })?;
        let mut fork = check(py, forked)?;
        if let Some(name) = name {
            fork = fork.name(name);
        }
        if prompt.is_none() && messages.is_none() && attachments.is_none() {
            return Ok(Py::new(py, Conversation::create(py, fork)?)?.into_any());
        }
        let input = turn_input(prompt, messages, attachments)?;
        Ok(Py::new(py, Response::pending(fork.prompt(input)))?.into_any())
    }

    /// Ask a stored message (any unique id prefix) again, as a new
    /// conversation branching where it stood: a user message retried as it
    /// was, or edited (`prompt`, `messages` or `attachments` give its new
    /// content), or a reply regenerated. The settings are those of the
    /// conversation that asked it; the one it came from never moves. The
    /// turn's response is returned (the same operation as `skein again`).
    #[staticmethod]
    #[pyo3(signature = (store, node, prompt = None, *, messages = None, attachments = None, name = None, model = None, tools = None))]
    #[allow(
        clippy::too_many_arguments,
        reason = "one argument per Python keyword argument"
    )]
    fn again_at(
        py: Python<'_>,
        store: PyRef<'_, Store>,
        node: &str,
        prompt: Option<String>,
        messages: Option<&Bound<'_, PyAny>>,
        attachments: Option<Vec<PyRef<'_, Attachment>>>,
        name: Option<String>,
        model: Option<&Bound<'_, PyAny>>,
        tools: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Response> {
        let store = store.inner.clone();
        let (on_model, home) = models_at_a_node(py, model, tools)?;
        let name = crate::args::conversation_name(py, name, Some(&store))?;
        let edited = match (&prompt, messages, &attachments) {
            (None, None, None) => None,
            _ => Some(turn_input(prompt, messages, attachments)?),
        };
        let node = node.to_string();
        let asked = runtime::block_on(py, async move {
            let node = store.nonblocking().resolve_node(&node).await?;
            let (asker, at_home) = match &on_model {
                Some(model) => (None, model.clone()),
                None => {
                    let (asker, ready) =
                        skein::conversation::home::ready_to_ask_again(&store, node, &home, None)
                            .await?;
                    (asker, ready.home)
                }
            };
            let mut again = skein::Conversation::again_at(&store, node, &at_home);
            if let Some(asker) = &asker {
                again = again.of(asker);
            }
            if let Some(model) = &on_model {
                again = again.model(model);
            }
            if let Some(name) = name {
                again = again.name(name);
            }
            if let Some(input) = edited {
                again = again.edited(input);
            }
            again.await
        })?;
        Ok(Response::pending(check(py, asked)?))
    }

    /// Its id: the same in memory and in a store (and for `skein --cid`).
    /// It changes when a turn lands in a branch because another writer
    /// moved the conversation while it ran: the handle follows its turn.
    #[getter]
    fn id(&self) -> String {
        self.inner.id().to_string()
    }

    #[getter]
    fn name(&self) -> Option<String> {
        self.inner.name()
    }

    /// The default model's name.
    #[getter]
    fn model(&self) -> String {
        self.inner.model().name().to_string()
    }

    /// The newest message's node id, `None` before the first turn.
    #[getter]
    fn head(&self) -> Option<String> {
        self.inner.head().map(|node| node.to_hex())
    }

    /// The default tools.
    #[getter]
    fn tools(&self) -> Vec<ToolSpec> {
        self.inner
            .tools()
            .iter()
            .map(|tool| ToolSpec::from(tool.spec()))
            .collect()
    }

    #[getter]
    fn chain_limit(&self) -> u32 {
        self.inner.chain_limit()
    }

    /// Whether its store holds it yet (it is written by its first turn).
    #[getter]
    fn is_stored(&self) -> bool {
        self.inner.is_stored()
    }

    /// Where it was forked from: `{"node": ..., "conversation": ...,
    /// "rerun": ...}`, or `None`.
    #[getter]
    fn origin<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        let Some(origin) = self.inner.origin() else {
            return Ok(None);
        };
        let out = PyDict::new(py);
        out.set_item("node", origin.node.map(|node| node.to_hex()))?;
        out.set_item(
            "conversation",
            origin.conversation.as_ref().map(|id| id.to_string()),
        )?;
        out.set_item("rerun", origin.rerun.as_ref().map(|id| id.to_string()))?;
        Ok(Some(out))
    }

    /// The whole history, oldest first.
    fn messages(&self) -> Vec<Message> {
        Message::all(&self.inner.thread())
    }

    /// A prompt after the head. Nothing runs until the response is read.
    #[pyo3(signature = (prompt = None, *, messages = None, attachments = None, system = None, schema = None, tools = None, model = None, temperature = None, top_p = None, seed = None, max_tokens = None))]
    #[allow(
        clippy::too_many_arguments,
        reason = "one argument per Python keyword argument"
    )]
    fn prompt(
        &self,
        py: Python<'_>,
        prompt: Option<String>,
        messages: Option<&Bound<'_, PyAny>>,
        attachments: Option<Vec<PyRef<'_, Attachment>>>,
        system: Option<String>,
        schema: Option<&Bound<'_, PyAny>>,
        tools: Option<&Bound<'_, PyAny>>,
        model: Option<&Bound<'_, PyAny>>,
        temperature: Option<f64>,
        top_p: Option<f64>,
        seed: Option<u64>,
        max_tokens: Option<u32>,
    ) -> PyResult<Response> {
        let options = options(temperature, top_p, seed, max_tokens)?;
        let args = TurnArgs::new(py, system, schema, tools, model, options)?;
        Ok(Response::pending(
            args.prompt(
                self.inner
                    .prompt(turn_input(prompt, messages, attachments)?),
            ),
        ))
    }

    /// A tool loop after the head, with the conversation's tools and hooks
    /// (or `tools=`, `before_call=` and `after_call=` for this chain only).
    #[pyo3(signature = (prompt = None, *, messages = None, attachments = None, tools = None, chain_limit = None, before_call = None, after_call = None, system = None, schema = None, model = None, temperature = None, top_p = None, seed = None, max_tokens = None))]
    #[allow(
        clippy::too_many_arguments,
        reason = "one argument per Python keyword argument"
    )]
    fn chain(
        &self,
        py: Python<'_>,
        prompt: Option<String>,
        messages: Option<&Bound<'_, PyAny>>,
        attachments: Option<Vec<PyRef<'_, Attachment>>>,
        tools: Option<&Bound<'_, PyAny>>,
        chain_limit: Option<u32>,
        before_call: Option<Py<PyAny>>,
        after_call: Option<Py<PyAny>>,
        system: Option<String>,
        schema: Option<&Bound<'_, PyAny>>,
        model: Option<&Bound<'_, PyAny>>,
        temperature: Option<f64>,
        top_p: Option<f64>,
        seed: Option<u64>,
        max_tokens: Option<u32>,
    ) -> PyResult<ChainResponse> {
        let options = options(temperature, top_p, seed, max_tokens)?;
        let mut args = TurnArgs::new(py, system, schema, tools, model, options)?;
        args.chain_limit = chain_limit;
        args.before_call = before_call;
        args.after_call = after_call;
        Ok(ChainResponse::pending(args.chain(
            self.inner.chain(turn_input(prompt, messages, attachments)?),
        )))
    }

    /// Branch at the head: a new conversation with the same history, tools,
    /// chain limit and store (never the hooks), recorded at once when there
    /// is a store.
    #[pyo3(signature = (*, name = None, model = None))]
    fn fork(
        &self,
        py: Python<'_>,
        name: Option<String>,
        model: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Conversation> {
        let mut fork = self.inner.fork();
        if let Some(name) = crate::args::conversation_name(py, name, self.inner.store())? {
            fork = fork.name(name);
        }
        if let Some(model) = crate::args::model(py, model)? {
            fork = fork.model(&model);
        }
        Conversation::create(py, fork)
    }

    /// Store the conversation up to its head in `store` (sharing every node
    /// already there), with the runs made in memory. Returns its id.
    fn log(&self, py: Python<'_>, store: PyRef<'_, Store>) -> PyResult<String> {
        let conversation = self.inner.clone();
        let store = store.inner.clone();
        let logged = runtime::block_on(py, async move { conversation.log(&store).await })?;
        logged
            .map(|id| id.to_string())
            .map_err(|error| conversation_error(py, &error))
    }

    /// Set or replace the `before_call` hook (hooks are never stored).
    fn set_before_call(&self, hook: Py<PyAny>) {
        self.inner.set_before_call(before_call(hook));
    }

    /// Set or replace the `after_call` hook.
    fn set_after_call(&self, hook: Py<PyAny>) {
        self.inner.set_after_call(after_call(hook));
    }

    fn __repr__(&self) -> String {
        format!(
            "<Conversation {}{} on {}>",
            self.inner.id().short(),
            self.inner
                .name()
                .map(|name| format!(" {name:?}"))
                .unwrap_or_default(),
            self.inner.model().name()
        )
    }
}

/// The model the command line would use: `SKEIN_MODEL`, else the
/// configuration file's `default_model`, else `smollm2`
/// ([`skein::config::default_model`], which every surface reads).
pub fn default_model(py: Python<'_>) -> PyResult<String> {
    skein::config::default_model()
        .map(|(name, _)| name)
        .map_err(|error| crate::errors::config_error(py, &error))
}
