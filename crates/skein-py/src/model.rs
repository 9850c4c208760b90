/*!
`skein.Store` and `skein.Model`: the database and the model a Python
program starts from, over the same `Store::open` and `Model::open` the
command line uses (so the same locations and model names work, and each
reads and writes what the other recorded).
*/

use crate::args::{TurnArgs, options};
use crate::conversation::Conversation;
use crate::errors::check;
use crate::input::turn_input;
use crate::response::{ChainResponse, Response};
use crate::runtime;
use crate::tools::{after_call, before_call, tools};
use crate::values::Attachment;
use pyo3::prelude::*;
use std::sync::Arc;

/// A skein database: a SQLite file (created when missing) or a PostgreSQL
/// URL (`postgres://...`). Every conversation recorded in it is shared
/// with the `skein` command line (`skein --db PATH ...`). `read_url`
/// names a PostgreSQL standby of it that `search` and the other reads of
/// what is recorded use (`skein --db-read`); turns read from the database.
#[pyclass(frozen, module = "skein")]
pub struct Store {
    pub inner: skein::Store,
}

#[pymethods]
impl Store {
    #[new]
    #[pyo3(signature = (location, *, read_url = None))]
    fn new(
        py: Python<'_>,
        location: std::path::PathBuf,
        read_url: Option<String>,
    ) -> PyResult<Store> {
        let opened = py.detach(|| match &read_url {
            Some(read_url) => {
                skein::Store::open_with_reads(&location, read_url, skein::store::OpenMode::Create)
            }
            None => skein::Store::open(&location),
        });
        Ok(Store {
            inner: check(py, opened)?,
        })
    }

    /// Where the database is (a URL without its password).
    #[getter]
    fn location(&self) -> String {
        self.inner.location()
    }

    /// Token totals from the recorded runs, each run counted once, for one
    /// scope: a `conversation` (id or name; with the runs of the history it
    /// shares with the conversations it was forked from), a whole `family`
    /// (every fork, reply branch and rerun: shared work counted once), the
    /// runs that produced a `node`, one `run`, or a coordinator `sequence`.
    /// A run that reported no figures makes a figure incomplete
    /// (`complete` is false and `missing_from` names the runs), never a
    /// silent zero. `cache_hit_rate` is the share of input tokens read
    /// from a prompt cache; `cost` prices the totals at the built-in
    /// table with the configuration file's `[prices]` and then `prices`
    /// (`{model: {"input", "output", "cache_read", "cache_write"}}`, US
    /// dollars per million tokens), naming the runs it could not price.
    #[pyo3(signature = (*, conversation = None, family = None, node = None, run = None, sequence = None, prices = None))]
    #[allow(
        clippy::too_many_arguments,
        reason = "one keyword argument per scope, as Python callers name them"
    )]
    fn usage<'py>(
        &self,
        py: Python<'py>,
        conversation: Option<String>,
        family: Option<String>,
        node: Option<String>,
        run: Option<String>,
        sequence: Option<String>,
        prices: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        use skein::store::UsageScope;
        let store = &self.inner;
        let given = [&conversation, &family, &node, &run, &sequence]
            .iter()
            .filter(|scope| scope.is_some())
            .count();
        if given != 1 {
            return Err(pyo3::exceptions::PyTypeError::new_err(
                "usage() takes exactly one of conversation=, family=, node=, run= or sequence=",
            ));
        }
        let totals = py.detach(|| {
            let scope = if let Some(id) = conversation {
                UsageScope::Conversation(store.resolve_conversation(&id)?)
            } else if let Some(id) = family {
                UsageScope::Family(store.resolve_conversation(&id)?)
            } else if let Some(node) = node {
                UsageScope::Node(store.resolve_node(&node)?)
            } else if let Some(run) = run {
                UsageScope::Run(store.resolve_run(&run)?)
            } else {
                UsageScope::Sequence(sequence.unwrap_or_default())
            };
            store.usage(&scope)
        });
        let totals = check(py, totals)?;
        let table = price_table(py, prices)?;
        let encode =
            |error: serde_json::Error| pyo3::exceptions::PyRuntimeError::new_err(error.to_string());
        let mut value = serde_json::to_value(&totals).map_err(encode)?;
        value["cache_hit_rate"] = serde_json::json!(totals.cache_hit_rate());
        value["cost"] = serde_json::to_value(table.cost(&totals)).map_err(encode)?;
        crate::values::from_json(py, &value)
    }

    /// The messages whose text has the words of `text` (every word;
    /// `"phrases"` in order; `word*` a prefix), newest first, at most
    /// `limit`; with `conversation` (an id, unique prefix or name), only
    /// that conversation's thread; the answers only replays reached are
    /// left out unless `replays` (as `skein search --replays`). A dict as
    /// `skein search --json` prints: `{"matches": [{"node", "role",
    /// "snippet", "highlights", "conversations": [{"id", "name"}]}],
    /// "truncated"}`.
    #[pyo3(signature = (text, *, limit = 20, conversation = None, replays = false))]
    fn search<'py>(
        &self,
        py: Python<'py>,
        text: String,
        limit: usize,
        conversation: Option<String>,
        replays: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let found = py.detach(|| {
            let reads = self.inner.reads();
            let conversation = conversation
                .map(|id| reads.resolve_conversation(&id))
                .transpose()?;
            reads.search(
                &skein::store::SearchQuery::new(text)
                    .limit(limit)
                    .conversation(conversation)
                    .replays(replays),
            )
        });
        let results = check(py, found)?;
        let value = serde_json::to_value(&results)
            .map_err(|error| pyo3::exceptions::PyValueError::new_err(error.to_string()))?;
        crate::values::from_json(py, &value)
    }

    /// Replay recorded turns with one change and judge each against its
    /// original (see docs/replay.md). Select turns by `conversations`,
    /// `families`, `turns` (final answers' nodes), `labels`, the cases of
    /// a file `skein label export` wrote (`cases`, stored first), narrowed by
    /// `search`, `since_ms`/`until_ms` and `clients` (filters alone choose
    /// among every conversation); change the `model`, `system`,
    /// `temperature`, `seed`, `max_tokens`, remove tools (`remove_tools`)
    /// or sources (`ignore`), replace sources (`replace_sources`: id to
    /// its new text), render another version of a configured prompt
    /// (`prompt_version="ID@VERSION"`, with the recorded variables; a turn
    /// that rendered no such prompt fails); judge with `compare` (default: specifics, then
    /// embedding, by `embedder`: `"minilm"`, `"lexical"`, or by default
    /// MiniLM where it is on this machine, else the lexical embedder with
    /// a `UserWarning` saying so). Tool calls are answered from the recording; a call it
    /// lacks stops the turn as diverged. Returns the report as `skein
    /// replay --json` prints it. `model` may be a list of models to
    /// compare (as `skein replay -m A -m B`): each turn replayed once on
    /// each, one report with `models`, `model_totals` and a row per turn
    /// and model. The report: `{"replay", "model", "totals", "cost":
    /// {"original", "replay", "delta", "complete"}, "turns": [{"seq",
    /// "result", "comparator", "why", "original", "answer",
    /// "original_cost", "cost", ...}]}`, turns in selection order, each
    /// cost a lower bound unless `complete` (a run without usage or price),
    /// priced as `usage` prices (the configuration's, then `prices`).
    #[pyo3(signature = (model, *, conversations = Vec::new(), families = Vec::new(), turns = Vec::new(), labels = Vec::new(), search = None, since_ms = None, until_ms = None, clients = Vec::new(), cases = None, system = None, temperature = None, seed = None, max_tokens = None, remove_tools = Vec::new(), ignore = Vec::new(), replace_sources = std::collections::BTreeMap::new(), prompt_version = None, compare = Vec::new(), embedder = None, concurrency = None, prices = None))]
    #[allow(
        clippy::too_many_arguments,
        reason = "one keyword argument per selection, change and setting, as Python callers name them"
    )]
    fn replay<'py>(
        &self,
        py: Python<'py>,
        model: Bound<'py, PyAny>,
        conversations: Vec<String>,
        families: Vec<String>,
        turns: Vec<String>,
        labels: Vec<String>,
        search: Option<String>,
        since_ms: Option<i64>,
        until_ms: Option<i64>,
        clients: Vec<String>,
        cases: Option<std::path::PathBuf>,
        system: Option<String>,
        temperature: Option<f64>,
        seed: Option<u64>,
        max_tokens: Option<u32>,
        remove_tools: Vec<String>,
        ignore: Vec<String>,
        replace_sources: std::collections::BTreeMap<String, String>,
        prompt_version: Option<String>,
        compare: Vec<String>,
        embedder: Option<String>,
        concurrency: Option<usize>,
        prices: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let prices = price_table(py, prices)?;
        // One model, or a list of candidates to compare.
        let models = match model.extract::<String>() {
            Ok(one) => vec![one],
            Err(_) => model.extract::<Vec<String>>().map_err(|_| {
                pyo3::exceptions::PyTypeError::new_err(
                    "model is a model's name, or a list of the models to compare",
                )
            })?,
        };
        let args = crate::replay::ReplayArgs {
            models,
            conversations,
            families,
            turns,
            labels,
            search,
            since_ms,
            until_ms,
            clients,
            cases,
            system,
            temperature,
            seed,
            max_tokens,
            remove_tools,
            ignore,
            replace_sources,
            prompt_version,
            compare,
            embedder,
            concurrency,
        };
        let report = crate::replay::replay(py, &self.inner, args, &prices)?;
        crate::values::from_json(py, &report)
    }

    /// Put the label `name` on turns (each by its final answer's node id or
    /// a unique prefix) and, with `replay` (an id or unique prefix), on
    /// every turn that replay re-sent (the original turns), or with
    /// `results` only those of these results (`"changed"`, `"held"`,
    /// `"diverged"`, `"failed"`); returns how many did not carry it yet. A
    /// labelled turn is kept by deletion and `gc` until its label is
    /// removed.
    #[pyo3(signature = (name, turns = Vec::new(), *, replay = None, results = Vec::new()))]
    fn label(
        &self,
        py: Python<'_>,
        name: String,
        turns: Vec<String>,
        replay: Option<String>,
        results: Vec<String>,
    ) -> PyResult<u64> {
        let turns = crate::replay::Turns {
            nodes: turns,
            replay,
            results,
        };
        crate::replay::label(py, &self.inner, &name, &turns)
    }

    /// Take the label `name` off turns (as `label` names them); returns
    /// how many carried it.
    #[pyo3(signature = (name, turns = Vec::new(), *, replay = None, results = Vec::new()))]
    fn unlabel(
        &self,
        py: Python<'_>,
        name: String,
        turns: Vec<String>,
        replay: Option<String>,
        results: Vec<String>,
    ) -> PyResult<u64> {
        let turns = crate::replay::Turns {
            nodes: turns,
            replay,
            results,
        };
        crate::replay::unlabel(py, &self.inner, &name, &turns)
    }

    /// Every label with its number of turns (`[{"name", "nodes"}]`), or
    /// with `name`, that label's turns (node ids).
    #[pyo3(signature = (name = None))]
    fn labels<'py>(&self, py: Python<'py>, name: Option<String>) -> PyResult<Bound<'py, PyAny>> {
        let listed = crate::replay::labels(py, &self.inner, name)?;
        crate::values::from_json(py, &listed)
    }

    /// Delete conversations and every message, run, rerun, blob and
    /// cached embedding only they reached (what other conversations share
    /// stays), as `skein delete` does: the conversations given (ids,
    /// prefixes or names), or a whole `family`, or every conversation last
    /// updated before `older_than` (an age `30d`/`12h`/`45min`/`6mo` or a date
    /// `YYYY-MM-DD`) and/or recorded by the proxy (`proxy=True`) and/or
    /// holding a run a client of the proxy made (`client=NAME`, as its
    /// `x-skein-client` header, OpenAI `user` or Anthropic
    /// `metadata.user_id` named it). With
    /// `dry_run`, nothing changes and the report is the plan. A dict as
    /// `skein delete --json` prints: `{"dry_run", "conversations",
    /// "skipped", "runs", "reruns", "messages", "blobs", "embeddings",
    /// "body_pieces", "kept_messages", "shared_with": [{"id", "name"}], "more_sharers"}`.
    #[pyo3(signature = (*conversations, family = None, older_than = None, proxy = false, client = None, dry_run = false))]
    #[allow(
        clippy::too_many_arguments,
        reason = "one keyword argument per selection, as `skein delete` has one flag each"
    )]
    fn delete<'py>(
        &self,
        py: Python<'py>,
        conversations: Vec<String>,
        family: Option<String>,
        older_than: Option<String>,
        proxy: bool,
        client: Option<String>,
        dry_run: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        use skein::store::{Filter, Selection};
        let by_ids = !conversations.is_empty();
        let by_filter = older_than.is_some() || proxy || client.is_some();
        if usize::from(by_ids) + usize::from(family.is_some()) + usize::from(by_filter) != 1 {
            return Err(pyo3::exceptions::PyTypeError::new_err(
                "delete() takes conversations, or family=, or older_than=, proxy=True and/or \
                 client= (one of the three)",
            ));
        }
        let cutoff = older_than
            .map(|age| skein::retention::parse_cutoff(&age))
            .transpose()
            .map_err(pyo3::exceptions::PyValueError::new_err)?;
        let store = &self.inner;
        let done = py.detach(|| {
            let selection = if let Some(family) = family {
                Selection::Family(store.resolve_conversation(&family)?)
            } else if by_ids {
                Selection::Conversations(
                    conversations
                        .iter()
                        .map(|id| store.resolve_conversation(id))
                        .collect::<Result<_, _>>()?,
                )
            } else {
                let mut filter = Filter::default();
                if let Some(cutoff) = cutoff {
                    filter = filter.updated_before_ms(cutoff);
                }
                if proxy {
                    filter = filter.proxy_only();
                }
                if let Some(client) = client {
                    filter = filter.client(client);
                }
                Selection::Matching(filter)
            };
            store.forget(&selection, dry_run)
        });
        to_python(py, &check(py, done)?)
    }

    /// Erase one message's content in place, as `skein redact` does: it
    /// keeps its id and place in every thread, each part becoming a
    /// tombstone (`Message.erased`) with its digest, `by` (default
    /// `$USER`), when, and `reason`. A dict as `skein redact --json`
    /// prints: `{"node", "parts", "blobs", "embeddings",
    /// "body_pieces_erased", "copies": [{"table", "column", "rows"}]}`. The bytes
    /// leave the database file at the next `gc()`.
    #[pyo3(signature = (node, *, reason, by = None))]
    fn redact<'py>(
        &self,
        py: Python<'py>,
        node: String,
        reason: String,
        by: Option<String>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let by = by
            .or_else(|| std::env::var("USER").ok())
            .unwrap_or_else(|| "unknown".into());
        let store = &self.inner;
        let done = py.detach(|| {
            let node = store.resolve_node(&node)?;
            store.redact(node, &by, &reason)
        });
        to_python(py, &check(py, done)?)
    }

    /// What `skein gc` does: apply the configuration file's `[retention]`,
    /// delete every message nothing reaches, then rewrite the database so
    /// deleted and erased bytes leave its file (not in a dry run). A dict
    /// as `skein gc --json` prints: `{"retention": [[rule, report]...],
    /// "collected": report}` with `delete()`'s reports.
    #[pyo3(signature = (*, dry_run = false))]
    fn gc<'py>(&self, py: Python<'py>, dry_run: bool) -> PyResult<Bound<'py, PyAny>> {
        let rules = skein::config::get()
            .map_err(|error| crate::errors::config_error(py, &error))?
            .retention
            .clone();
        let store = &self.inner;
        let done = py.detach(|| skein::retention::gc(store, &rules, dry_run, &mut |_| {}));
        match done {
            Ok(done) => to_python(py, &done),
            Err(skein::retention::RetentionError::Store(error)) => {
                Err(crate::errors::ToPyErr::to_py(&error, py))
            }
            Err(skein::retention::RetentionError::Config(error)) => {
                Err(crate::errors::config_error(py, &error))
            }
            Err(other) => Err(pyo3::exceptions::PyValueError::new_err(other.to_string())),
        }
    }

    /// What this handle's database work has cost since `costs()` was first
    /// called on it: `{"statements": N, "rows": N}`, statements run and rows
    /// they returned, counted (never timed) so a test can state what a turn
    /// or a load may cost. SQLite only: `None` on PostgreSQL.
    fn costs<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        let Some(meter) = self.inner.meter() else {
            return Ok(None);
        };
        let costs = meter.read();
        let value = serde_json::json!({"statements": costs.statements, "rows": costs.rows});
        crate::values::from_json(py, &value).map(Some)
    }

    fn __repr__(&self) -> String {
        format!("Store({:?})", self.inner.location())
    }
}

/// A report as the dict its JSON form makes.
fn to_python<'py>(py: Python<'py>, report: &impl serde::Serialize) -> PyResult<Bound<'py, PyAny>> {
    let value = serde_json::to_value(report)
        .map_err(|error| pyo3::exceptions::PyRuntimeError::new_err(error.to_string()))?;
    crate::values::from_json(py, &value)
}

/// The stored conversation `id` names (a name or any unique id prefix).
pub fn stored_conversation(
    py: Python<'_>,
    store: &skein::Store,
    id: &str,
) -> PyResult<skein::store::ConversationRecord> {
    let store = store.clone();
    let id = id.to_string();
    let lookup = runtime::block_on(py, async move {
        let api = store.nonblocking();
        let id = api.resolve_conversation(&id).await?;
        api.conversation(&id).await
    })?;
    check(py, lookup)
}

/// Open the model `name` as every surface does ([`skein::home::open_model`]:
/// a profile of the configured engine directory, else a model name) with
/// `tools` registered (so stored conversations naming them can be loaded),
/// the GIL released (a local model loads its file).
pub fn open(
    py: Python<'_>,
    name: &str,
    extra: Vec<Arc<dyn skein::Tool>>,
) -> PyResult<skein::Model> {
    let opened = py.detach(|| {
        let tools = skein::builtin::all().into_iter().chain(extra).collect();
        skein::home::open_model(Some(name), tools)
    });
    check(py, opened)
}

/// A model, by the names the command line takes: `smollm2` (the embedded
/// model), `local:PATH` (a GGUF file), `openai:MODEL`, `anthropic:MODEL`,
/// `echo`, `scripted:PATH`.
///
/// With a `store`, every conversation started from this model is recorded
/// there, turn by turn; without one, nothing is written unless you call
/// `response.log(store)`.
#[pyclass(frozen, module = "skein")]
pub struct Model {
    pub inner: skein::Model,
    pub store: Option<skein::Store>,
}

#[pymethods]
impl Model {
    #[new]
    #[pyo3(signature = (name, *, store = None))]
    fn new(py: Python<'_>, name: &str, store: Option<PyRef<'_, Store>>) -> PyResult<Model> {
        Ok(Model {
            inner: open(py, name, Vec::new())?,
            store: store.map(|store| store.inner.clone()),
        })
    }

    /// The model's name, as conversations record it.
    #[getter]
    fn name(&self) -> &str {
        self.inner.name()
    }

    /// The store its conversations are recorded in, if any.
    #[getter]
    fn store(&self) -> Option<Store> {
        self.store.clone().map(|inner| Store { inner })
    }

    /// One prompt in a new conversation of its own. Nothing runs until the
    /// response is read, iterated or awaited.
    #[pyo3(signature = (prompt = None, *, messages = None, attachments = None, system = None, schema = None, tools = None, temperature = None, top_p = None, seed = None, max_tokens = None))]
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
        temperature: Option<f64>,
        top_p: Option<f64>,
        seed: Option<u64>,
        max_tokens: Option<u32>,
    ) -> PyResult<Response> {
        let options = options(temperature, top_p, seed, max_tokens)?;
        let args = TurnArgs::new(py, system, schema, tools, None, options)?;
        let conversation = self.builder(None, None, None, None)?.build();
        Ok(Response::pending(args.prompt(
            conversation.prompt(turn_input(prompt, messages, attachments)?),
        )))
    }

    /// A tool loop in a new conversation of its own: the model's tool calls
    /// run (Python functions as tools) until a reply calls none, the chain
    /// limit is reached, or `before_call` stops it.
    #[pyo3(signature = (prompt = None, *, messages = None, attachments = None, tools = None, chain_limit = None, before_call = None, after_call = None, system = None, schema = None, temperature = None, top_p = None, seed = None, max_tokens = None))]
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
        temperature: Option<f64>,
        top_p: Option<f64>,
        seed: Option<u64>,
        max_tokens: Option<u32>,
    ) -> PyResult<ChainResponse> {
        // `tools` go to the new conversation, whose tools a chain runs.
        let options = options(temperature, top_p, seed, max_tokens)?;
        let mut args = TurnArgs::new(py, system, schema, None, None, options)?;
        (args.before_call, args.after_call) = (before_call, after_call);
        let conversation = self.builder(None, tools, chain_limit, None)?.build();
        Ok(ChainResponse::pending(args.chain(
            conversation.chain(turn_input(prompt, messages, attachments)?),
        )))
    }

    /// A new conversation on this model (recorded in the model's store, or
    /// in `store`, once its first turn succeeds).
    #[pyo3(signature = (*, name = None, tools = None, chain_limit = None, before_call = None, after_call = None, store = None))]
    #[allow(
        clippy::too_many_arguments,
        reason = "one argument per Python keyword argument"
    )]
    fn conversation(
        &self,
        py: Python<'_>,
        name: Option<String>,
        tools: Option<&Bound<'_, PyAny>>,
        chain_limit: Option<u32>,
        before_call: Option<Py<PyAny>>,
        after_call: Option<Py<PyAny>>,
        store: Option<PyRef<'_, Store>>,
    ) -> PyResult<Conversation> {
        let store = store.map(|store| store.inner.clone());
        let name =
            crate::args::conversation_name(py, name, store.as_ref().or(self.store.as_ref()))?;
        let conversation = self.builder(name, tools, chain_limit, store)?.build();
        if let Some(hook) = before_call {
            conversation.set_before_call(self::before_call(hook));
        }
        if let Some(hook) = after_call {
            conversation.set_after_call(self::after_call(hook));
        }
        Ok(Conversation::new(conversation))
    }

    fn __repr__(&self) -> String {
        format!("Model({:?})", self.inner.name())
    }
}

impl Model {
    fn builder(
        &self,
        name: Option<String>,
        tools: Option<&Bound<'_, PyAny>>,
        chain_limit: Option<u32>,
        store: Option<skein::Store>,
    ) -> PyResult<skein::ConversationBuilder> {
        let mut builder = self.inner.conversation().tools(self::tools(tools)?);
        if let Some(name) = name {
            builder = builder.name(name);
        }
        if let Some(limit) = chain_limit {
            builder = builder.chain_limit(limit);
        }
        if let Some(store) = store.as_ref().or(self.store.as_ref()) {
            builder = builder.store(store);
        }
        Ok(builder)
    }
}

/// The configuration's prices with `extra` (a dict of model to prices)
/// over them.
pub(crate) fn price_table(
    py: Python<'_>,
    extra: Option<Bound<'_, PyAny>>,
) -> PyResult<skein::core::price::PriceTable> {
    use skein::core::price::Price;
    let table = skein::config::prices().map_err(|error| crate::errors::config_error(py, &error))?;
    let Some(extra) = extra else {
        return Ok(table);
    };
    let extra: std::collections::BTreeMap<String, Price> =
        serde_json::from_value(crate::values::to_json(&extra)?).map_err(|error| {
            pyo3::exceptions::PyValueError::new_err(format!(
                "prices= takes {{model: {{\"input\": ..., \"output\": ...}}}} in dollars per million tokens: {error}"
            ))
        })?;
    Ok(extra
        .into_iter()
        .fold(table, |table, (model, price)| table.with(model, price)))
}
