/*!
`skein.Response` and `skein.ChainResponse`: a turn's outcome, read lazily
(see `turn.rs`), with `reply` and `fork` from the turn layer's
`Response::reply`/`fork` and `ChainResponse::reply`, and streaming by
iteration (`Stream`, `ChainStream`).
*/

use crate::args::{TurnArgs, model, options};
use crate::conversation::Conversation;
use crate::errors::check;
use crate::input::turn_input;
use crate::model::Store;
use crate::runtime;
use crate::turn::Turn;
use crate::values::{Attachment, DriftWarning, Message, ToolCall, ToolSpec, Usage, from_json};
use pyo3::prelude::*;
use pyo3::types::PyString;
use skein::{ChainPrompt, Prompt};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// One model call's response. Nothing runs until it is read: `text()`, any
/// property, iterating it (streaming the reply as it arrives) or awaiting it
/// through the asyncio API.
#[pyclass(frozen, module = "skein")]
pub struct Response {
    turn: Arc<Turn<Prompt>>,
}

impl Response {
    pub fn pending(prompt: Prompt) -> Response {
        Response {
            turn: Arc::new(Turn::new(prompt)),
        }
    }

    pub fn done(response: skein::Response) -> Response {
        Response {
            turn: Arc::new(Turn::done(response)),
        }
    }

    /// The turn-layer response, running the turn if needed.
    fn get(&self, py: Python<'_>) -> PyResult<skein::Response> {
        self.turn.get(py)
    }
}

#[pymethods]
impl Response {
    /// The reply's text (running the turn if it has not run).
    fn text(&self, py: Python<'_>) -> PyResult<String> {
        Ok(self.get(py)?.text())
    }

    /// The reply parsed as JSON: with `schema=`, the value the engine
    /// validated; otherwise the text parsed.
    fn json<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let response = self.get(py)?;
        match &response.output().value {
            Some(value) => from_json(py, value),
            None => py.import("json")?.call_method1("loads", (response.text(),)),
        }
    }

    /// The reply's node id (hex): the hash of the reply and its history.
    #[getter]
    fn id(&self, py: Python<'_>) -> PyResult<String> {
        Ok(self.get(py)?.head().to_hex())
    }

    /// The run that produced the reply.
    #[getter]
    fn run_id(&self, py: Python<'_>) -> PyResult<String> {
        Ok(self.get(py)?.run_id().to_string())
    }

    /// The conversation the response belongs to.
    #[getter]
    fn conversation(&self, py: Python<'_>) -> PyResult<Conversation> {
        Ok(Conversation::new(self.get(py)?.conversation().clone()))
    }

    #[getter]
    fn usage(&self, py: Python<'_>) -> PyResult<Usage> {
        Ok(self.get(py)?.usage().into())
    }

    /// The tools offered on this call, exactly as the run recorded them.
    #[getter]
    fn tools(&self, py: Python<'_>) -> PyResult<Vec<ToolSpec>> {
        Ok(self.get(py)?.tools().iter().map(ToolSpec::from).collect())
    }

    /// The tool calls the model made (a prompt offers tools without running
    /// them; `chain` runs them).
    fn tool_calls(&self, py: Python<'_>) -> PyResult<Vec<ToolCall>> {
        Ok(self.get(py)?.tool_calls().map(ToolCall::from).collect())
    }

    /// Tools offered under a different input schema than earlier in the
    /// conversation (also issued as `skein.ToolSchemaDrift` warnings).
    #[getter]
    fn warnings(&self, py: Python<'_>) -> PyResult<Vec<DriftWarning>> {
        Ok(self
            .get(py)?
            .warnings()
            .iter()
            .map(DriftWarning::from)
            .collect())
    }

    /// The model that answered.
    #[getter]
    fn model(&self, py: Python<'_>) -> PyResult<String> {
        let response = self.get(py)?;
        Ok(response.output().prepared.model.clone())
    }

    /// The history up to and including the reply.
    fn messages(&self, py: Python<'_>) -> PyResult<Vec<Message>> {
        Ok(Message::all(self.get(py)?.thread()))
    }

    /// Continue the conversation from this response. When the conversation
    /// has moved on since, the turn branches into a new conversation here
    /// (a bookmark never moves backwards). `tools=[]` offers no tools on this
    /// turn; `model=` sends it to another model with the same history.
    #[pyo3(signature = (prompt = None, *, messages = None, attachments = None, system = None, schema = None, tools = None, model = None, temperature = None, top_p = None, seed = None, max_tokens = None))]
    #[allow(
        clippy::too_many_arguments,
        reason = "one argument per Python keyword argument"
    )]
    fn reply(
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
                self.get(py)?
                    .reply(turn_input(prompt, messages, attachments)?),
            ),
        ))
    }

    /// Branch at this response: a new conversation with this history and
    /// the same tools, chain limit and store (never the hooks). With a
    /// prompt, its first response; without, the new conversation (recorded
    /// at once when there is a store).
    #[pyo3(signature = (prompt = None, *, messages = None, attachments = None, name = None, model = None, system = None, schema = None, tools = None, temperature = None, top_p = None, seed = None, max_tokens = None))]
    #[allow(
        clippy::too_many_arguments,
        reason = "one argument per Python keyword argument"
    )]
    fn fork(
        &self,
        py: Python<'_>,
        prompt: Option<String>,
        messages: Option<&Bound<'_, PyAny>>,
        attachments: Option<Vec<PyRef<'_, Attachment>>>,
        name: Option<String>,
        model: Option<&Bound<'_, PyAny>>,
        system: Option<String>,
        schema: Option<&Bound<'_, PyAny>>,
        tools: Option<&Bound<'_, PyAny>>,
        temperature: Option<f64>,
        top_p: Option<f64>,
        seed: Option<u64>,
        max_tokens: Option<u32>,
    ) -> PyResult<Py<PyAny>> {
        let response = self.get(py)?;
        let name = crate::args::conversation_name(py, name, response.conversation().store())?;
        let mut fork = response.fork();
        if let Some(name) = name {
            fork = fork.name(name);
        }
        if let Some(model) = self::model(py, model)? {
            fork = fork.model(&model);
        }
        if prompt.is_none() && messages.is_none() && attachments.is_none() {
            return Ok(Py::new(py, Conversation::create(py, fork)?)?.into_any());
        }
        let options = options(temperature, top_p, seed, max_tokens)?;
        let args = TurnArgs::new(py, system, schema, tools, None, options)?;
        let input = turn_input(prompt, messages, attachments)?;
        Ok(Py::new(py, Response::pending(args.prompt(fork.prompt(input))))?.into_any())
    }

    /// Store the whole thread up to this response in `store` (sharing every
    /// node already there), as its conversation, with the runs that
    /// produced it. Returns the conversation's id.
    fn log(&self, py: Python<'_>, store: PyRef<'_, Store>) -> PyResult<String> {
        let response = self.get(py)?;
        let store = store.inner.clone();
        let logged = runtime::block_on(py, async move { response.log(&store).await })?;
        Ok(check(py, logged)?.to_string())
    }

    fn __iter__(&self) -> Stream {
        Stream {
            turn: self.turn.clone(),
            index: AtomicUsize::new(0),
        }
    }

    fn __str__(&self, py: Python<'_>) -> PyResult<String> {
        self.text(py)
    }

    fn __repr__(&self) -> String {
        match self.turn.outcome() {
            None => "<Response (not run yet)>".to_string(),
            Some(Ok(response)) => format!(
                "<Response {} {:?}>",
                response.head().short(),
                response.text()
            ),
            Some(Err(error)) => format!("<Response failed: {error}>"),
        }
    }

    /// Whether the turn has ended (its outcome can be read without waiting).
    fn _finished(&self) -> bool {
        self.turn.outcome().is_some()
    }

    /// An asyncio future resolving when the turn has ended (the asyncio
    /// API's `AsyncResponse` awaits it).
    fn _done_async<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.turn.done_async(py)
    }

    /// An asyncio future of the streamed chunk at `index` (`None` at the end).
    fn _chunk_async<'py>(&self, py: Python<'py>, index: usize) -> PyResult<Bound<'py, PyAny>> {
        self.turn.chunk_async(py, index)
    }
}

/// The chunks of a response's reply, as they stream.
#[pyclass(module = "skein")]
pub struct Stream {
    turn: Arc<Turn<Prompt>>,
    index: AtomicUsize,
}

#[pymethods]
impl Stream {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Option<Py<PyString>>> {
        let index = self.index.fetch_add(1, Ordering::Relaxed);
        self.turn.next_chunk(py, index)
    }
}

/// Every model call of a tool loop. Nothing runs until it is read,
/// iterated (the text of every call, as it streams) or awaited.
#[pyclass(frozen, module = "skein")]
pub struct ChainResponse {
    turn: Arc<Turn<ChainPrompt>>,
}

impl ChainResponse {
    pub fn pending(chain: ChainPrompt) -> ChainResponse {
        ChainResponse {
            turn: Arc::new(Turn::new(chain)),
        }
    }

    fn get(&self, py: Python<'_>) -> PyResult<skein::ChainResponse> {
        self.turn.get(py)
    }
}

#[pymethods]
impl ChainResponse {
    /// The final reply's text.
    fn text(&self, py: Python<'_>) -> PyResult<String> {
        Ok(self.get(py)?.text())
    }

    /// Every model call's response, in order.
    fn responses(&self, py: Python<'_>) -> PyResult<Vec<Response>> {
        Ok(self
            .get(py)?
            .responses()
            .iter()
            .cloned()
            .map(Response::done)
            .collect())
    }

    /// `"completed"` (a reply called no tool), `"stopped"` (`before_call`
    /// raised `skein.StopChain`) or `"limit_reached"`.
    #[getter]
    fn status(&self, py: Python<'_>) -> PyResult<&'static str> {
        Ok(match self.get(py)?.status() {
            skein::ChainStatus::Completed => "completed",
            skein::ChainStatus::Stopped => "stopped",
            skein::ChainStatus::LimitReached => "limit_reached",
        })
    }

    /// The id every run of the chain is related to.
    #[getter]
    fn chain_id(&self, py: Python<'_>) -> PyResult<String> {
        Ok(self.get(py)?.id().to_string())
    }

    /// The final reply's node id.
    #[getter]
    fn id(&self, py: Python<'_>) -> PyResult<String> {
        Ok(self.get(py)?.last().head().to_hex())
    }

    /// Usage of every call together.
    #[getter]
    fn usage(&self, py: Python<'_>) -> PyResult<Usage> {
        Ok(self.get(py)?.usage().into())
    }

    #[getter]
    fn warnings(&self, py: Python<'_>) -> PyResult<Vec<DriftWarning>> {
        Ok(self
            .get(py)?
            .warnings()
            .iter()
            .map(DriftWarning::from)
            .collect())
    }

    #[getter]
    fn conversation(&self, py: Python<'_>) -> PyResult<Conversation> {
        Ok(Conversation::new(self.get(py)?.conversation().clone()))
    }

    /// The history at the end of the chain.
    fn messages(&self, py: Python<'_>) -> PyResult<Vec<Message>> {
        Ok(Message::all(self.get(py)?.thread()))
    }

    /// Continue from the end of the chain.
    #[pyo3(signature = (prompt = None, *, messages = None, attachments = None, system = None, schema = None, tools = None, model = None, temperature = None, top_p = None, seed = None, max_tokens = None))]
    #[allow(
        clippy::too_many_arguments,
        reason = "one argument per Python keyword argument"
    )]
    fn reply(
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
                self.get(py)?
                    .reply(turn_input(prompt, messages, attachments)?),
            ),
        ))
    }

    fn __iter__(&self) -> ChainStream {
        ChainStream {
            turn: self.turn.clone(),
            index: AtomicUsize::new(0),
        }
    }

    fn __str__(&self, py: Python<'_>) -> PyResult<String> {
        self.text(py)
    }

    fn __repr__(&self) -> String {
        match self.turn.outcome() {
            None => "<ChainResponse (not run yet)>".to_string(),
            Some(Ok(response)) => format!(
                "<ChainResponse {} call(s) {:?}>",
                response.responses().len(),
                response.text()
            ),
            Some(Err(error)) => format!("<ChainResponse failed: {error}>"),
        }
    }

    fn _finished(&self) -> bool {
        self.turn.outcome().is_some()
    }

    fn _done_async<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.turn.done_async(py)
    }

    fn _chunk_async<'py>(&self, py: Python<'py>, index: usize) -> PyResult<Bound<'py, PyAny>> {
        self.turn.chunk_async(py, index)
    }
}

/// The text of a chain's calls, as it streams.
#[pyclass(module = "skein")]
pub struct ChainStream {
    turn: Arc<Turn<ChainPrompt>>,
    index: AtomicUsize,
}

#[pymethods]
impl ChainStream {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Option<Py<PyString>>> {
        let index = self.index.fetch_add(1, Ordering::Relaxed);
        self.turn.next_chunk(py, index)
    }
}
