/*!
What a turn may set for itself (`system`, `schema`, `tools`, `model`,
generation options, a chain limit), read from Python keyword arguments and
applied to the turn layer's builders; and the name a new conversation is
given, checked where it is given.
*/

use crate::model::Model;
use crate::values::to_json;
use pyo3::prelude::*;
use skein::core::GenerationOptions;
use skein::{ChainPrompt, Prompt, Tool};
use std::sync::Arc;

/// A new conversation's `name=`, refused (as the store refuses it) before
/// any model runs: with `skein.NameLooksLikeId` when it reads as an id,
/// with `skein.NameTaken` when a conversation of `store` (the one it will
/// be stored in) has it. Both are `ValueError`s.
pub fn conversation_name(
    py: Python<'_>,
    name: Option<String>,
    store: Option<&skein::Store>,
) -> PyResult<Option<String>> {
    if let Some(name) = &name {
        crate::errors::check(py, skein::store::check_conversation_name(name))?;
        if let Some(store) = store {
            crate::errors::check(py, store.check_name_free(name))?;
        }
    }
    Ok(name)
}

/// One turn's own settings.
#[derive(Default)]
pub struct TurnArgs {
    pub system: Option<String>,
    pub schema: Option<serde_json::Value>,
    pub tools: Option<Vec<Arc<dyn Tool>>>,
    pub model: Option<skein::Model>,
    pub options: GenerationOptions,
    pub chain_limit: Option<u32>,
    /// This chain's own hooks, in place of the conversation's (which stay
    /// as they are for later turns).
    pub before_call: Option<Py<PyAny>>,
    pub after_call: Option<Py<PyAny>>,
}

impl TurnArgs {
    /// The settings a turn's keyword arguments give (`tools=None`: the
    /// conversation's; `tools=[]`: none on this turn).
    pub fn new(
        py: Python<'_>,
        system: Option<String>,
        schema: Option<&Bound<'_, PyAny>>,
        tools: Option<&Bound<'_, PyAny>>,
        model: Option<&Bound<'_, PyAny>>,
        options: GenerationOptions,
    ) -> PyResult<TurnArgs> {
        Ok(TurnArgs {
            system,
            schema: self::schema(schema)?,
            tools: tools
                .map(|tools| crate::tools::tools(Some(tools)))
                .transpose()?,
            model: self::model(py, model)?,
            options,
            ..TurnArgs::default()
        })
    }
}

/// The generation options given as keyword arguments, checked.
pub fn options(
    temperature: Option<f64>,
    top_p: Option<f64>,
    seed: Option<u64>,
    max_tokens: Option<u32>,
) -> PyResult<GenerationOptions> {
    let options = GenerationOptions {
        temperature,
        top_p,
        seed,
        max_tokens,
    };
    options
        .check()
        .map_err(pyo3::exceptions::PyValueError::new_err)?;
    Ok(options)
}

/// A `model=` argument: a `skein.Model`, or a model name to open.
pub fn model(py: Python<'_>, value: Option<&Bound<'_, PyAny>>) -> PyResult<Option<skein::Model>> {
    let Some(value) = value else {
        return Ok(None);
    };
    if let Ok(model) = value.cast::<Model>() {
        return Ok(Some(model.get().inner.clone()));
    }
    let name: String = value.extract().map_err(|_| {
        pyo3::exceptions::PyTypeError::new_err("model= takes a skein.Model or a model name")
    })?;
    Ok(Some(crate::model::open(py, &name, Vec::new())?))
}

/// A `schema=` argument: a JSON Schema as a dict (or a pydantic model
/// class, whose `model_json_schema()` is used).
pub fn schema(value: Option<&Bound<'_, PyAny>>) -> PyResult<Option<serde_json::Value>> {
    let Some(value) = value else {
        return Ok(None);
    };
    if let Ok(method) = value.getattr("model_json_schema")
        && method.is_callable()
    {
        return Ok(Some(to_json(&method.call0()?)?));
    }
    Ok(Some(to_json(value)?))
}

macro_rules! apply {
    ($builder:ident, $args:ident) => {{
        let mut builder = $builder;
        if let Some(system) = $args.system {
            builder = builder.system(system);
        }
        if let Some(schema) = $args.schema {
            builder = builder.schema(schema);
        }
        if let Some(tools) = $args.tools {
            builder = builder.tools(tools);
        }
        if let Some(model) = &$args.model {
            builder = builder.model(model);
        }
        builder.options($args.options)
    }};
}

impl TurnArgs {
    pub fn prompt(self, prompt: Prompt) -> Prompt {
        apply!(prompt, self)
    }

    pub fn chain(self, chain: ChainPrompt) -> ChainPrompt {
        let (limit, before, after) = (self.chain_limit, self.before_call, self.after_call);
        let mut chain = apply!(chain, self);
        if let Some(limit) = limit {
            chain = chain.limit(limit);
        }
        if let Some(hook) = before {
            chain = chain.before_call(crate::tools::before_call(hook));
        }
        if let Some(hook) = after {
            chain = chain.after_call(crate::tools::after_call(hook));
        }
        chain
    }
}
