/*!
`skein.RecordedChat`: skein-recorded's `RecordedChat` (turns with frozen
evidence, `reason`, `rerun_turn` with a Python comparator, `fork` from a
turn or a rerun's answer, loading back from a store), with its results as
Python values. Each operation is one async function of the chat, run to
completion for the synchronous methods and as an asyncio future for the
`_*_async` ones the asyncio API awaits.
*/

use crate::errors::{ToPyErr, check};
use crate::model::{Store, stored_conversation};
use crate::runtime;
use crate::tools::{before_call, tools};
use crate::values::{Message, ToolSpec, Usage};
use pyo3::prelude::*;
use skein::recorded::{
    CachedEmbedder, Embedder, ReasonOptions, RecordedError, RerunOptions, RerunResult, SourceKind,
};
use std::future::Future;
use std::sync::{Arc, Mutex};

type Chat = Arc<tokio::sync::Mutex<skein::recorded::RecordedChat>>;

/// A named piece of context a recorded chat renders in its system message,
/// tagged so a turn can be explained and re-run without it.
#[pyclass(frozen, get_all, module = "skein")]
#[derive(Clone)]
pub struct Source {
    pub id: String,
    pub text: String,
    /// `"fact"`, `"document"`, `"memory"` or `"other"`.
    pub kind: String,
}

#[pymethods]
impl Source {
    #[new]
    #[pyo3(signature = (id, text, kind = "fact"))]
    fn new(id: String, text: String, kind: &str) -> PyResult<Source> {
        if !matches!(kind, "fact" | "document" | "memory" | "other") {
            return Err(pyo3::exceptions::PyValueError::new_err(format!(
                "unknown source kind `{kind}`: use fact, document, memory or other"
            )));
        }
        Ok(Source::of_kind(id, text, kind))
    }

    #[staticmethod]
    fn fact(id: String, text: String) -> Source {
        Source::of_kind(id, text, "fact")
    }

    #[staticmethod]
    fn document(id: String, text: String) -> Source {
        Source::of_kind(id, text, "document")
    }

    #[staticmethod]
    fn memory(id: String, text: String) -> Source {
        Source::of_kind(id, text, "memory")
    }

    fn __repr__(&self) -> String {
        format!("Source({:?}, kind={:?})", self.id, self.kind)
    }
}

impl Source {
    fn of_kind(id: String, text: String, kind: &str) -> Source {
        Source {
            id,
            text,
            kind: kind.to_string(),
        }
    }

    fn to_rust(&self) -> skein::recorded::Source {
        skein::recorded::Source::new(
            self.id.clone(),
            SourceKind::parse(&self.kind),
            self.text.clone(),
        )
    }
}

/// The embedder `name` names, or with none the one every surface defaults
/// to (`skein::recorded::embed::choose`: MiniLM where it is on this
/// machine, else the lexical embedder, said as a Python `UserWarning`),
/// cached (in `store` when there is one). What replays, reruns and
/// explanations from Python compare with.
pub(crate) fn embedder(
    py: Python<'_>,
    name: Option<&str>,
    store: Option<&skein::Store>,
) -> PyResult<Arc<dyn Embedder>> {
    let chosen = match py.detach(|| skein::recorded::embed::choose(name)) {
        Ok(chosen) => chosen,
        Err(error @ RecordedError::UnknownEmbedder(_)) => {
            return Err(pyo3::exceptions::PyValueError::new_err(error.to_string()));
        }
        Err(error) => return Err(error.to_py(py)),
    };
    if let Some(note) = &chosen.fallback {
        let category = py.get_type::<pyo3::exceptions::PyUserWarning>();
        let message = std::ffi::CString::new(note.replace('\0', " "))
            .map_err(|error| pyo3::exceptions::PyValueError::new_err(error.to_string()))?;
        PyErr::warn(py, category.as_any(), &message, 2)?;
    }
    let inner = chosen.embedder;
    Ok(Arc::new(match store {
        Some(store) => CachedEmbedder::with_store(inner, store.clone()),
        None => CachedEmbedder::new(inner),
    }))
}

/// The chat builder for `model`, as the command line makes it (the
/// conversation remembers the model, so `skein prompt --cid` goes on with
/// it).
fn builder(model: &skein::Model) -> skein::recorded::RecordedChatBuilder {
    let mut builder =
        skein::recorded::RecordedChat::builder(model.engine().clone(), model.profile())
            .remember_model(model.name(), !model.is_opened_by_name());
    if let Some(name) = model.model_override() {
        builder = builder.model(name);
    }
    builder
}

/// A chat recorded turn by turn: every reply can be explained (`reason`),
/// re-run without chosen sources (`rerun_turn`) and forked (`fork`), from
/// the exact request each turn sent.
#[pyclass(frozen, module = "skein")]
pub struct RecordedChat {
    chat: Chat,
    id: String,
    conversation: Option<String>,
}

impl RecordedChat {
    fn wrap(chat: skein::recorded::RecordedChat) -> RecordedChat {
        RecordedChat {
            id: chat.id().to_string(),
            conversation: chat.conversation().map(|id| id.to_string()),
            chat: Arc::new(tokio::sync::Mutex::new(chat)),
        }
    }

    /// Run `operation` on the chat, to completion here.
    fn run<T, F, Fut>(&self, py: Python<'_>, operation: F) -> PyResult<T>
    where
        T: Send,
        F: FnOnce(Chat) -> Fut,
        Fut: Future<Output = Result<T, RecordedError>> + Send,
    {
        let out = runtime::block_on(py, operation(self.chat.clone()))?;
        check(py, out)
    }

    /// Run `operation` on the chat as an asyncio future of `convert`ed output.
    fn run_async<'py, T, F, Fut, C>(
        &self,
        py: Python<'py>,
        operation: F,
        convert: C,
    ) -> PyResult<Bound<'py, PyAny>>
    where
        T: Send + 'static,
        F: FnOnce(Chat) -> Fut,
        Fut: Future<Output = Result<T, RecordedError>> + Send + 'static,
        C: FnOnce(Python<'_>, T) -> PyResult<Py<PyAny>> + Send + 'static,
    {
        runtime::into_future(py, None, operation(self.chat.clone()), |py, out| {
            convert(py, out.map_err(|error| error.to_py(py))?)
        })
    }
}

async fn send(chat: Chat, text: String) -> Result<RecordedTurn, RecordedError> {
    let mut chat = chat.lock_owned().await;
    Ok(RecordedTurn::of(chat.send(text).await?))
}

async fn reason(chat: Chat, k: usize, options: ReasonOptions) -> Result<Report, RecordedError> {
    let mut chat = chat.lock_owned().await;
    Ok(Report::of(&*chat.reason(k, options).await?))
}

async fn rerun(chat: Chat, k: usize, options: RerunOptions) -> Result<Rerun, RecordedError> {
    let mut chat = chat.lock_owned().await;
    Ok(Rerun::of(chat.rerun_turn(k, options).await?))
}

async fn fork(
    chat: Chat,
    k: usize,
    from: Option<RerunResult>,
) -> Result<RecordedChat, RecordedError> {
    let chat = chat.lock_owned().await;
    Ok(RecordedChat::wrap(chat.fork(k, from.as_ref()).await?))
}

/// A Python comparator as a rerun's, remembering the first exception it
/// raised (raised after the rerun, which has counted that sample as
/// changed).
fn comparator(
    compare: Py<PyAny>,
    failure: Arc<Mutex<Option<PyErr>>>,
) -> impl Fn(&str, &str) -> bool + Send + Sync + 'static {
    move |original: &str, candidate: &str| {
        Python::attach(|py| {
            match compare
                .bind(py)
                .call1((original, candidate))
                .and_then(|changed| changed.is_truthy())
            {
                Ok(changed) => changed,
                Err(error) => {
                    let mut slot = failure.lock().unwrap_or_else(|p| p.into_inner());
                    slot.get_or_insert(error);
                    true
                }
            }
        })
    }
}

/// The rerun options the keyword arguments ask for, and where a
/// comparator's exception lands; `compare` are comparator specs, as `skein
/// rerun --compare` and `Store.replay` take them (`exact`, `embedding:0.9`,
/// `length:2`, ...).
fn rerun_options(
    py: Python<'_>,
    ignore: Vec<String>,
    samples: u32,
    baseline: bool,
    comparator: Option<Py<PyAny>>,
    threshold: Option<f32>,
    compare: Option<Vec<String>>,
) -> PyResult<(RerunOptions, Arc<Mutex<Option<PyErr>>>)> {
    let failure = Arc::new(Mutex::new(None));
    let mut options = RerunOptions::ignore(ignore).samples(samples);
    if baseline {
        options = options.check_baseline();
    }
    if let Some(threshold) = threshold {
        options = options.threshold(threshold);
    }
    match (comparator, compare) {
        (Some(_), Some(_)) => {
            return Err(pyo3::exceptions::PyValueError::new_err(
                "give `comparator` (a Python function) or `compare` (comparator specs), not both",
            ));
        }
        (Some(function), None) => {
            options = options.comparator(self::comparator(function, failure.clone()));
        }
        (None, Some(specs)) => {
            let comparators = specs
                .iter()
                .map(|spec| skein::recorded::compare::Comparator::parse(spec))
                .collect::<Result<Vec<_>, _>>();
            options = options.compare(check(py, comparators)?);
        }
        (None, None) => {}
    }
    Ok((options, failure))
}

/// Raise the first exception the rerun's Python comparator raised, if any.
fn raise_comparator_failure(failure: &Mutex<Option<PyErr>>) -> PyResult<()> {
    match failure.lock().unwrap_or_else(|p| p.into_inner()).take() {
        Some(error) => Err(error),
        None => Ok(()),
    }
}

fn reason_options(max_suspects: Option<usize>, fresh: bool) -> ReasonOptions {
    let mut options = ReasonOptions::new();
    if let Some(n) = max_suspects {
        options = options.max_suspects(n);
    }
    if fresh {
        options = options.fresh();
    }
    options
}

#[pymethods]
impl RecordedChat {
    /// A new recorded chat on `model` (a `skein.Model` or a model name):
    /// each turn renders `system`, then every source as a tagged part of the
    /// system message, then the history and the user's message; `tools` are
    /// offered (each a source named by the tool). With a store (`store=`, or
    /// the model's), the chat is a conversation there, created by its first
    /// turn. `embedder` scores sources and compares answers: `"lexical"` (no
    /// model needed) or `"minilm"` (`skein models pull minilm`); by default
    /// MiniLM where it is on this machine, else the lexical embedder with a
    /// `UserWarning` saying so, as every surface chooses.
    #[new]
    #[pyo3(signature = (model, *, system = None, sources = Vec::new(), tools = None, store = None, name = None, embedder = None, chain_limit = None, removed = Vec::new(), before_call = None))]
    #[allow(
        clippy::too_many_arguments,
        reason = "one argument per Python keyword argument"
    )]
    fn new(
        py: Python<'_>,
        model: &Bound<'_, PyAny>,
        system: Option<String>,
        sources: Vec<PyRef<'_, Source>>,
        tools: Option<&Bound<'_, PyAny>>,
        store: Option<PyRef<'_, Store>>,
        name: Option<String>,
        embedder: Option<&str>,
        chain_limit: Option<u32>,
        removed: Vec<String>,
        before_call: Option<Py<PyAny>>,
    ) -> PyResult<RecordedChat> {
        let store = match store {
            Some(store) => Some(store.inner.clone()),
            None => model
                .cast::<crate::model::Model>()
                .ok()
                .and_then(|model| model.get().store.clone()),
        };
        let model = crate::args::model(py, Some(model))?.expect("given");
        let mut builder = builder(&model)
            .sources(sources.iter().map(|source| source.to_rust()))
            .removed(removed)
            .embedder(self::embedder(py, embedder, store.as_ref())?);
        for tool in self::tools(tools)? {
            builder = builder.tool(tool);
        }
        if let Some(system) = system {
            builder = builder.system(system);
        }
        if let Some(name) = crate::args::conversation_name(py, name, store.as_ref())? {
            builder = builder.name(name);
        }
        if let Some(limit) = chain_limit {
            builder = builder.chain_limit(limit);
        }
        if let Some(hook) = before_call {
            builder = builder.before_call(Arc::new(self::before_call(hook)));
        }
        if let Some(store) = store {
            builder = builder.store(store);
        }
        let built = runtime::block_on(py, builder.build())?;
        Ok(RecordedChat::wrap(check(py, built)?))
    }

    /// Load the recorded chat stored as conversation `id` (a name or any
    /// unique id prefix): its layout, removals, turns and reruns. Any
    /// conversation skein recorded loads, `skein prompt --source` ones
    /// included. `model=` answers its next turns instead of the model it
    /// recorded; `tools` are looked up by the names its turns offered;
    /// `embedder` as for the constructor.
    #[staticmethod]
    #[pyo3(signature = (store, id, *, model = None, tools = None, embedder = None, before_call = None))]
    fn load(
        py: Python<'_>,
        store: PyRef<'_, Store>,
        id: &str,
        model: Option<&Bound<'_, PyAny>>,
        tools: Option<&Bound<'_, PyAny>>,
        embedder: Option<&str>,
        before_call: Option<Py<PyAny>>,
    ) -> PyResult<RecordedChat> {
        let store = store.inner.clone();
        let stored = stored_conversation(py, &store, id)?;
        let extra = self::tools(tools)?;
        let model = match model {
            Some(model) => crate::args::model(py, Some(model))?.expect("given"),
            // As the CLI's recorded chats and `Conversation.load`: the
            // model it recorded (profile included), looked up from its home.
            None => {
                let home = crate::conversation::PyHome::new(py, extra)?;
                let home = runtime::block_on(py, async {
                    skein::conversation::home::ready(&home, &stored, None).await
                })?;
                check(
                    py,
                    home.and_then(|ready| skein::Model::of_conversation(&stored, &ready.home)),
                )?
            }
        };
        let mut builder = builder(&model)
            .store(store.clone())
            .embedder(self::embedder(py, embedder, Some(&store))?);
        if let Some(hook) = before_call {
            builder = builder.before_call(Arc::new(self::before_call(hook)));
        }
        let loaded = runtime::block_on(py, builder.load(&stored.id))?;
        Ok(RecordedChat::wrap(check(py, loaded)?))
    }

    /// The chat's id: its conversation's (stored or not).
    #[getter]
    fn id(&self) -> &str {
        &self.id
    }

    /// The conversation it is recorded as, when it has a store (for `skein
    /// --cid`).
    #[getter]
    fn conversation_id(&self) -> Option<String> {
        self.conversation.clone()
    }

    /// The recorded turns, numbered from 0.
    #[getter]
    fn turns(&self, py: Python<'_>) -> PyResult<Vec<RecordedTurn>> {
        let chat = self.chat.clone();
        runtime::block_on(py, async move {
            let chat = chat.lock().await;
            chat.turns()
                .iter()
                .map(|turn| RecordedTurn::of(turn))
                .collect()
        })
    }

    /// Sources removed from every turn and probe of this chat (a fork from a
    /// rerun carries the rerun's removals).
    #[getter]
    fn removed(&self, py: Python<'_>) -> PyResult<Vec<String>> {
        let chat = self.chat.clone();
        runtime::block_on(py, async move {
            chat.lock().await.removed().iter().cloned().collect()
        })
    }

    /// The history after the last turn.
    fn messages(&self, py: Python<'_>) -> PyResult<Vec<Message>> {
        let chat = self.chat.clone();
        runtime::block_on(py, async move { Message::all(chat.lock().await.history()) })
    }

    /// Run one turn and freeze its evidence. A turn that fails, pauses or
    /// reaches the chain limit records nothing.
    fn send(&self, py: Python<'_>, text: String) -> PyResult<RecordedTurn> {
        self.run(py, |chat| send(chat, text))
    }

    /// Rank turn `k`'s sources by how much the reply resembles them
    /// (correlational: only a rerun shows what a source caused). Memoised
    /// per turn unless `fresh`.
    #[pyo3(signature = (k, *, max_suspects = None, fresh = false))]
    fn reason(
        &self,
        py: Python<'_>,
        k: usize,
        max_suspects: Option<usize>,
        fresh: bool,
    ) -> PyResult<Report> {
        self.run(py, |chat| {
            reason(chat, k, reason_options(max_suspects, fresh))
        })
    }

    /// Re-run turn `k`'s exact request without the sources `ignore`,
    /// `samples` times (at least 2); with `baseline`, also unchanged, which
    /// unlocks a verdict. `comparator(original, candidate) -> bool` says
    /// whether an answer changed, or `compare` names comparators as `skein
    /// rerun --compare` takes them, asked in order (default: the specifics
    /// that differ, then cosine similarity of embeddings below `threshold`,
    /// 0.8).
    #[pyo3(signature = (k, *, ignore, samples = 3, baseline = false, comparator = None, threshold = None, compare = None))]
    #[allow(
        clippy::too_many_arguments,
        reason = "one argument per Python keyword argument"
    )]
    fn rerun_turn(
        &self,
        py: Python<'_>,
        k: usize,
        ignore: Vec<String>,
        samples: u32,
        baseline: bool,
        comparator: Option<Py<PyAny>>,
        threshold: Option<f32>,
        compare: Option<Vec<String>>,
    ) -> PyResult<Rerun> {
        let (options, failure) = rerun_options(
            py, ignore, samples, baseline, comparator, threshold, compare,
        )?;
        let result = self.run(py, |chat| rerun(chat, k, options))?;
        raise_comparator_failure(&failure)?;
        Ok(result)
    }

    /// A new chat continuing from turn `k`: from `from_rerun`'s answer (with
    /// its removals carried forward) or from the original reply. The
    /// original chat is untouched; a rerun another chat or turn produced is
    /// refused (`skein.ProvenanceError`).
    #[pyo3(signature = (k, *, from_rerun = None))]
    fn fork(
        &self,
        py: Python<'_>,
        k: usize,
        from_rerun: Option<PyRef<'_, Rerun>>,
    ) -> PyResult<RecordedChat> {
        let from = from_rerun.map(|rerun| rerun.result.clone());
        self.run(py, |chat| fork(chat, k, from))
    }

    fn _send_async<'py>(&self, py: Python<'py>, text: String) -> PyResult<Bound<'py, PyAny>> {
        self.run_async(
            py,
            |chat| send(chat, text),
            |py, turn| Ok(Py::new(py, turn)?.into_any()),
        )
    }

    #[pyo3(signature = (k, *, max_suspects = None, fresh = false))]
    fn _reason_async<'py>(
        &self,
        py: Python<'py>,
        k: usize,
        max_suspects: Option<usize>,
        fresh: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.run_async(
            py,
            |chat| reason(chat, k, reason_options(max_suspects, fresh)),
            |py, report| Ok(Py::new(py, report)?.into_any()),
        )
    }

    #[pyo3(signature = (k, *, ignore, samples = 3, baseline = false, comparator = None, threshold = None, compare = None))]
    #[allow(
        clippy::too_many_arguments,
        reason = "one argument per Python keyword argument"
    )]
    fn _rerun_turn_async<'py>(
        &self,
        py: Python<'py>,
        k: usize,
        ignore: Vec<String>,
        samples: u32,
        baseline: bool,
        comparator: Option<Py<PyAny>>,
        threshold: Option<f32>,
        compare: Option<Vec<String>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let (options, failure) = rerun_options(
            py, ignore, samples, baseline, comparator, threshold, compare,
        )?;
        self.run_async(
            py,
            |chat| rerun(chat, k, options),
            move |py, result| {
                raise_comparator_failure(&failure)?;
                Ok(Py::new(py, result)?.into_any())
            },
        )
    }

    #[pyo3(signature = (k, *, from_rerun = None))]
    fn _fork_async<'py>(
        &self,
        py: Python<'py>,
        k: usize,
        from_rerun: Option<PyRef<'_, Rerun>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let from = from_rerun.map(|rerun| rerun.result.clone());
        self.run_async(
            py,
            |chat| fork(chat, k, from),
            |py, chat| Ok(Py::new(py, chat)?.into_any()),
        )
    }

    fn __repr__(&self) -> String {
        format!("<RecordedChat {}>", &self.id[..8.min(self.id.len())])
    }
}

/// A source present in a turn's request.
#[pyclass(frozen, get_all, module = "skein")]
#[derive(Clone)]
pub struct SourceInfo {
    pub id: String,
    /// `"fact"`, `"document"`, `"memory"`, `"tool"`, `"tool result"` or `"other"`.
    pub kind: String,
    /// Rendered by a hook (rendered again on every probe).
    pub hook: bool,
}

#[pymethods]
impl SourceInfo {
    fn __repr__(&self) -> String {
        format!("SourceInfo({:?}, kind={:?})", self.id, self.kind)
    }
}

/// One recorded turn's frozen evidence.
#[pyclass(frozen, get_all, module = "skein")]
pub struct RecordedTurn {
    /// The turn's number, from 0.
    pub index: usize,
    pub user_text: String,
    /// The final reply's text.
    pub text: String,
    /// The final reply's node id.
    pub node: String,
    pub sources: Vec<SourceInfo>,
    pub tools: Vec<ToolSpec>,
    /// The runs of its tool loop, in order.
    pub runs: Vec<String>,
    pub usage: Usage,
    /// The exact request of its first model call (what reruns replay).
    pub request: Vec<Message>,
    /// The request, the tool loop and the reply.
    pub messages: Vec<Message>,
}

#[pymethods]
impl RecordedTurn {
    fn __repr__(&self) -> String {
        format!("<RecordedTurn {} {:?}>", self.index, self.text)
    }
}

impl RecordedTurn {
    fn of(turn: &skein::recorded::Turn) -> RecordedTurn {
        RecordedTurn {
            index: turn.index(),
            user_text: turn.user_text().to_string(),
            text: turn.text(),
            node: turn.node().to_hex(),
            sources: turn
                .sources()
                .iter()
                .map(|source| SourceInfo {
                    id: source.id.clone(),
                    kind: source.kind.as_str().to_string(),
                    hook: source.hook,
                })
                .collect(),
            tools: turn.tools().iter().map(ToolSpec::from).collect(),
            runs: turn.runs().iter().map(|run| run.to_string()).collect(),
            usage: turn.usage().into(),
            request: Message::all(turn.request()),
            messages: Message::all(turn.thread()),
        }
    }
}

/// A source and how much the reply resembles it.
#[pyclass(frozen, get_all, module = "skein")]
#[derive(Clone)]
pub struct Suspect {
    pub id: String,
    pub kind: String,
    pub score: f32,
    /// Cosine of the source to the reply.
    pub fa: f32,
    /// Mean cosine to the tool loop's intermediate outputs (`None` without any).
    pub avg: Option<f32>,
    /// Share of intermediate outputs resembling it (`None` without any).
    pub persist: Option<f32>,
    pub depth: f32,
}

#[pymethods]
impl Suspect {
    fn __repr__(&self) -> String {
        format!("Suspect({:?}, score={:.3})", self.id, self.score)
    }
}

impl From<&skein::recorded::Suspect> for Suspect {
    fn from(suspect: &skein::recorded::Suspect) -> Suspect {
        Suspect {
            id: suspect.id.clone(),
            kind: suspect.kind.as_str().to_string(),
            score: suspect.score,
            fa: suspect.signals.fa,
            avg: suspect.signals.avg,
            persist: suspect.signals.persist,
            depth: suspect.signals.depth,
        }
    }
}

/// A turn's sources ranked by resemblance to its reply (correlational).
#[pyclass(frozen, get_all, module = "skein")]
pub struct Report {
    pub turn: usize,
    pub node: String,
    pub embedder: String,
    pub max_suspects: usize,
    /// The removable sources, best first.
    pub suspects: Vec<Suspect>,
    /// Sources ranked below the cap (not removable until reasoned again
    /// with a larger `max_suspects`).
    pub beyond_cap: Vec<Suspect>,
    rendered: String,
}

#[pymethods]
impl Report {
    /// The ids a rerun may ignore, in rank order.
    fn removable(&self) -> Vec<String> {
        self.suspects.iter().map(|s| s.id.clone()).collect()
    }

    /// Always true: attribution by resemblance is correlational.
    #[getter]
    fn is_correlational(&self) -> bool {
        true
    }

    /// The report as text (what `skein explain` prints).
    fn render(&self) -> String {
        self.rendered.clone()
    }

    fn __str__(&self) -> String {
        self.rendered.clone()
    }
}

impl Report {
    fn of(report: &skein::recorded::Report) -> Report {
        Report {
            turn: report.turn,
            node: report.node.to_hex(),
            embedder: report.embedder.clone(),
            max_suspects: report.max_suspects,
            suspects: report.suspects.iter().map(Suspect::from).collect(),
            beyond_cap: report.beyond_cap.iter().map(Suspect::from).collect(),
            rendered: report.render(),
        }
    }
}

/// One probe or baseline run of a rerun.
#[pyclass(frozen, get_all, module = "skein")]
#[derive(Clone)]
pub struct Sample {
    pub answer: String,
    /// The comparator said the answer changed.
    pub changed: bool,
    /// Cosine similarity to the original reply, when an embedder compared.
    pub similarity: Option<f32>,
    /// The comparator that decided `changed` (`specifics`, `embedding`,
    /// `specifics+embedding` when both held, `custom`), and why.
    pub decided_by: Option<String>,
    pub why: Option<String>,
    pub runs: Vec<String>,
}

#[pymethods]
impl Sample {
    fn __repr__(&self) -> String {
        format!("Sample(changed={}, answer={:?})", self.changed, self.answer)
    }
}

impl From<&skein::recorded::Sample> for Sample {
    fn from(sample: &skein::recorded::Sample) -> Sample {
        Sample {
            answer: sample.answer.clone(),
            changed: sample.changed,
            similarity: sample.similarity,
            decided_by: sample.decided_by.clone(),
            why: sample.why.clone(),
            runs: sample.runs.iter().map(|run| run.to_string()).collect(),
        }
    }
}

/// A rerun of one turn without chosen sources: what changed and, with a
/// baseline, the verdict.
#[pyclass(frozen, module = "skein")]
pub struct Rerun {
    result: RerunResult,
}

impl Rerun {
    fn of(result: RerunResult) -> Rerun {
        Rerun { result }
    }
}

#[pymethods]
impl Rerun {
    /// The rerun's id (stored with its record when the chat has a store;
    /// `skein fork --from-rerun` takes it).
    #[getter]
    fn id(&self) -> String {
        self.result.id.to_string()
    }

    /// The chat that produced it.
    #[getter]
    fn chat_id(&self) -> &str {
        &self.result.chat
    }

    #[getter]
    fn turn(&self) -> usize {
        self.result.turn
    }

    #[getter]
    fn turn_node(&self) -> String {
        self.result.turn_node.to_hex()
    }

    /// The sources removed, sorted.
    #[getter]
    fn removed(&self) -> Vec<String> {
        self.result.removed.clone()
    }

    /// The original reply's text.
    #[getter]
    fn original(&self) -> &str {
        &self.result.original
    }

    /// The first sample's answer: where a fork from this rerun continues.
    #[getter]
    fn answer(&self) -> &str {
        self.result.answer()
    }

    #[getter]
    fn answers(&self) -> Vec<String> {
        self.result
            .answers()
            .into_iter()
            .map(str::to_string)
            .collect()
    }

    #[getter]
    fn samples(&self) -> Vec<Sample> {
        self.result.samples.iter().map(Sample::from).collect()
    }

    /// A strict majority of the samples changed.
    #[getter]
    fn answer_flipped(&self) -> bool {
        self.result.what_changed.answer_flipped
    }

    #[getter]
    fn flips(&self) -> u32 {
        self.result.what_changed.flips
    }

    #[getter]
    fn summary(&self) -> &str {
        &self.result.what_changed.summary
    }

    /// The baseline's samples (the request replayed unchanged), if checked.
    #[getter]
    fn baseline(&self) -> Option<Vec<Sample>> {
        self.result
            .baseline
            .as_ref()
            .map(|baseline| baseline.samples.iter().map(Sample::from).collect())
    }

    /// Whether no baseline sample changed (`None` without a baseline).
    #[getter]
    fn baseline_stable(&self) -> Option<bool> {
        self.result
            .baseline
            .as_ref()
            .map(|baseline| baseline.stable)
    }

    /// `"confirmed"`, `"not-confirmed"` or `"inconclusive"`; `None` without
    /// a baseline (scores suggest, reruns convict).
    #[getter]
    fn verdict(&self) -> Option<&'static str> {
        self.result.verdict.map(|verdict| verdict.as_str())
    }

    /// The result as text (what `skein rerun` prints).
    fn render(&self) -> String {
        self.result.render()
    }

    fn __str__(&self) -> String {
        self.result.render()
    }

    fn __repr__(&self) -> String {
        format!(
            "<Rerun {} of turn {} without {}: {}>",
            self.result.id.short(),
            self.result.turn,
            self.result.removed.join(", "),
            self.result
                .verdict
                .map_or("no verdict", |verdict| verdict.as_str())
        )
    }
}
