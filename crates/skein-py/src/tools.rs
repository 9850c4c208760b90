/*!
Python callables as skein tools and tool hooks.

A tool is described in Python (`skein._tools.Tool`: the schema comes from
the function's type hints and docstring) and called through
`skein._tools._invoke` on a thread of its own: whatever the function
raises comes back as an error result (`ToolError`), which the engine hands
to the model. `before_call` and `after_call` hooks are called the same
way; their decisions map onto the engine's `CallDecision`.
*/

use crate::runtime::{event_loop, on_python_thread};
use crate::values::{ToolCall, ToolResult, to_json};
use pyo3::prelude::*;
use skein::core::BoxFuture;
use skein::{CallDecision, Tool, ToolError, ToolSpec};
use std::sync::Arc;

/// A Python function (or `skein.Tool`) as a skein tool.
pub struct PyTool {
    spec: ToolSpec,
    /// The `skein._tools.Tool` describing it.
    tool: Arc<Py<PyAny>>,
}

impl Tool for PyTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn call(&self, arguments: serde_json::Value) -> BoxFuture<'_, Result<String, ToolError>> {
        let tool = self.tool.clone();
        Box::pin(async move {
            let event_loop = event_loop();
            let answer = on_python_thread(move |py| {
                let invoke = py.import("skein._tools")?.getattr("_invoke")?;
                let event_loop = event_loop.as_ref().map(|l| l.bind(py).clone());
                let (ok, text): (bool, String) = invoke
                    .call1((tool.bind(py), arguments.to_string(), event_loop))?
                    .extract()?;
                Ok(if ok { Ok(text) } else { Err(ToolError(text)) })
            })
            .await;
            answer.unwrap_or_else(|error| Err(ToolError(error)))
        })
    }
}

/// The tools `values` name: functions or `skein.Tool`s.
pub fn tools(values: Option<&Bound<'_, PyAny>>) -> PyResult<Vec<Arc<dyn Tool>>> {
    let Some(values) = values else {
        return Ok(Vec::new());
    };
    let py = values.py();
    let as_tool = py.import("skein._tools")?.getattr("_as_tool")?;
    let mut out: Vec<Arc<dyn Tool>> = Vec::new();
    for value in values.try_iter()? {
        let tool = as_tool.call1((value?,))?;
        let name: String = tool.getattr("name")?.extract()?;
        if out.iter().any(|known| known.spec().name == name) {
            return Err(pyo3::exceptions::PyValueError::new_err(format!(
                "two tools are named `{name}`: tool names must be unique"
            )));
        }
        let description: String = tool.getattr("description")?.extract()?;
        let schema = to_json(&tool.getattr("input_schema")?)?;
        out.push(Arc::new(PyTool {
            spec: ToolSpec::new(name, description, schema),
            tool: Arc::new(tool.unbind()),
        }));
    }
    Ok(out)
}

/// A `before_call` hook: `hook(call)` returns `None` (run the call), a dict
/// (run it with these arguments) or a string of JSON arguments; raising
/// `skein.CancelToolCall` skips it (the model gets the reason as an error
/// result), `skein.StopChain` ends the chain; any other exception skips the
/// call with the exception as the reason.
pub fn before_call(
    hook: Py<PyAny>,
) -> impl for<'a> Fn(&'a skein::ToolCall) -> BoxFuture<'a, CallDecision> + Send + Sync + 'static {
    let hook = Arc::new(hook);
    move |call: &skein::ToolCall| {
        let hook = hook.clone();
        let call = call.clone();
        Box::pin(async move {
            let event_loop = event_loop();
            let seen = ToolCall::from(&call);
            let decided = on_python_thread(move |py| {
                let decide = py.import("skein._tools")?.getattr("_decide")?;
                let event_loop = event_loop.as_ref().map(|l| l.bind(py).clone());
                let (action, value): (String, Option<String>) =
                    decide.call1((hook.bind(py), seen, event_loop))?.extract()?;
                Ok((action, value))
            })
            .await;
            match decided {
                Ok((action, value)) => match action.as_str() {
                    "stop" => CallDecision::Stop,
                    "skip" => CallDecision::Skip(value.unwrap_or_default()),
                    _ => {
                        let mut call = call;
                        if let Some(arguments) = value {
                            call.arguments = arguments;
                        }
                        CallDecision::Run(call)
                    }
                },
                Err(error) => CallDecision::Skip(format!("before_call failed: {error}")),
            }
        }) as BoxFuture<'_, CallDecision>
    }
}

/// An `after_call` hook: `hook(call, result)`; what it raises is reported
/// as unraisable (the result already stands).
pub fn after_call(
    hook: Py<PyAny>,
) -> impl for<'a> Fn(&'a skein::ToolCall, &'a skein::ToolResult) -> BoxFuture<'a, ()>
+ Send
+ Sync
+ 'static {
    let hook = Arc::new(hook);
    move |call: &skein::ToolCall, result: &skein::ToolResult| {
        let hook = hook.clone();
        let seen = (ToolCall::from(call), ToolResult::from(result));
        Box::pin(async move {
            let event_loop = event_loop();
            let _ = on_python_thread(move |py| {
                let call_hook = py.import("skein._tools")?.getattr("_call_hook")?;
                let event_loop = event_loop.as_ref().map(|l| l.bind(py).clone());
                if let Err(error) = call_hook.call1((hook.bind(py), seen, event_loop)) {
                    error.write_unraisable(py, Some(hook.bind(py)));
                }
                Ok(())
            })
            .await;
        }) as BoxFuture<'_, ()>
    }
}
