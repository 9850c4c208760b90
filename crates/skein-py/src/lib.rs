/*!
The native module of the `skein` Python package (`skein._skein`), built
into a wheel by maturin (see `crates/skein-py/pyproject.toml` and
`docs/python.md`).

It binds skein's one turn layer and nothing beside it: `skein.Model`,
`Conversation`, `Response` and `ChainResponse` are the turn layer's
(`skein-conversation`) types, `RecordedChat` is `skein-recorded`'s, `Store`
is `skein-store`'s. Every call that waits releases the GIL. The Python half
of the package (`python/skein/`) holds what is more natural in Python: the
exception classes, tool schemas from type hints, and the asyncio twins.

- `runtime`: running futures for synchronous and asyncio callers;
- `turn`: a lazy, streamable turn, run once whoever reads it first;
- `model`, `conversation`, `response`, `recorded`: the classes;
- `replay`: `Store.replay` and labels;
- `tools`: Python functions as tools, and tool hooks;
- `args`: a turn's keyword arguments; `input`: what a turn adds
  (prompt, messages, attachments); `values`: plain values;
- `errors`: Rust errors as the exceptions of `skein._errors`.
*/

mod args;
mod conversation;
mod errors;
mod input;
mod model;
mod recorded;
mod replay;
mod response;
mod runtime;
mod tools;
mod turn;
mod values;

use pyo3::prelude::*;

#[pymodule]
fn _skein(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    // Keys saved with `skein keys set`, as the command line reads them.
    skein::config::use_saved_keys();
    // `[privacy]`: a configuration file that cannot be read leaves the
    // default (refusal), and the calls that read it say what is wrong.
    let _ = skein::config::use_privacy_settings();
    m.add_class::<model::Store>()?;
    m.add_class::<model::Model>()?;
    m.add_class::<conversation::Conversation>()?;
    m.add_class::<response::Response>()?;
    m.add_class::<response::ChainResponse>()?;
    m.add_class::<response::Stream>()?;
    m.add_class::<response::ChainStream>()?;
    m.add_class::<recorded::RecordedChat>()?;
    m.add_class::<recorded::Source>()?;
    m.add_class::<recorded::SourceInfo>()?;
    m.add_class::<recorded::RecordedTurn>()?;
    m.add_class::<recorded::Report>()?;
    m.add_class::<recorded::Suspect>()?;
    m.add_class::<recorded::Rerun>()?;
    m.add_class::<recorded::Sample>()?;
    m.add_class::<values::Usage>()?;
    m.add_class::<values::ToolSpec>()?;
    m.add_class::<values::ToolCall>()?;
    m.add_class::<values::ToolResult>()?;
    m.add_class::<values::Message>()?;
    m.add_class::<values::Erased>()?;
    m.add_class::<values::Attachment>()?;
    m.add_class::<values::DriftWarning>()?;
    Ok(())
}
