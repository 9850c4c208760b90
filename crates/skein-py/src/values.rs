/*!
Plain values handed to Python: usage figures, tool specs, calls and
results, messages, drift warnings, sources; and JSON between Python objects
and `serde_json` (through Python's `json` module, so any JSON value
round-trips exactly as Python sees it).
*/

use pyo3::prelude::*;
use pyo3::types::PyString;
use skein::core::{Message as CoreMessage, Node, Thread};

/// A Python object as JSON.
pub fn to_json(value: &Bound<'_, PyAny>) -> PyResult<serde_json::Value> {
    let text: String = value
        .py()
        .import("json")?
        .call_method1("dumps", (value,))?
        .extract()?;
    serde_json::from_str(&text)
        .map_err(|error| pyo3::exceptions::PyValueError::new_err(format!("not JSON: {error}")))
}

/// JSON as a Python object.
pub fn from_json<'py>(py: Python<'py>, value: &serde_json::Value) -> PyResult<Bound<'py, PyAny>> {
    py.import("json")?
        .call_method1("loads", (value.to_string(),))
}

/// Token counts of a model call (or of several, added up); a figure the
/// provider did not report is `None`.
#[pyclass(frozen, get_all, module = "skein")]
#[derive(Clone)]
pub struct Usage {
    pub input_tokens: Option<u64>,
    pub output_tokens: Option<u64>,
    pub cache_read_tokens: Option<u64>,
    pub cache_write_tokens: Option<u64>,
}

#[pymethods]
impl Usage {
    fn __repr__(&self) -> String {
        let show = |n: Option<u64>| n.map_or("None".to_string(), |n| n.to_string());
        format!(
            "Usage(input_tokens={}, output_tokens={})",
            show(self.input_tokens),
            show(self.output_tokens)
        )
    }
}

impl From<skein::core::Usage> for Usage {
    fn from(usage: skein::core::Usage) -> Usage {
        Usage {
            input_tokens: usage.input_tokens,
            output_tokens: usage.output_tokens,
            cache_read_tokens: usage.cache_read_tokens,
            cache_write_tokens: usage.cache_write_tokens,
        }
    }
}

/// A tool as offered to a model: its name, description and input schema.
#[pyclass(frozen, module = "skein")]
#[derive(Clone)]
pub struct ToolSpec {
    spec: skein::ToolSpec,
}

#[pymethods]
impl ToolSpec {
    #[getter]
    fn name(&self) -> &str {
        &self.spec.name
    }

    #[getter]
    fn description(&self) -> &str {
        &self.spec.description
    }

    /// The JSON Schema of the arguments.
    #[getter]
    fn input_schema<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        from_json(py, &self.spec.input_schema)
    }

    /// The hash of the schema that drift warnings compare (hex).
    #[getter]
    fn schema_hash(&self) -> String {
        self.spec.schema_hash().to_hex()
    }

    fn __repr__(&self) -> String {
        format!("ToolSpec(name={:?})", self.spec.name)
    }
}

impl From<&skein::ToolSpec> for ToolSpec {
    fn from(spec: &skein::ToolSpec) -> ToolSpec {
        ToolSpec { spec: spec.clone() }
    }
}

/// A tool call a model made.
#[pyclass(frozen, get_all, module = "skein")]
#[derive(Clone)]
pub struct ToolCall {
    /// The call's id (the provider's, or one skein derived).
    pub id: String,
    pub name: String,
    /// The arguments exactly as the model wrote them (JSON text).
    pub arguments: String,
}

#[pymethods]
impl ToolCall {
    /// The arguments parsed (a `ValueError` when they are not JSON).
    fn json<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let text = if self.arguments.trim().is_empty() {
            "{}"
        } else {
            &self.arguments
        };
        py.import("json")?.call_method1("loads", (text,))
    }

    fn __repr__(&self) -> String {
        format!(
            "ToolCall(name={:?}, arguments={:?})",
            self.name, self.arguments
        )
    }
}

impl From<&skein::ToolCall> for ToolCall {
    fn from(call: &skein::ToolCall) -> ToolCall {
        ToolCall {
            id: call.id.clone(),
            name: call.name.clone(),
            arguments: call.arguments.clone(),
        }
    }
}

/// A tool call's result, as the model sees it.
#[pyclass(frozen, get_all, module = "skein")]
#[derive(Clone)]
pub struct ToolResult {
    pub call_id: String,
    pub content: String,
    /// The call failed: unknown tool, arguments not matching the schema,
    /// an exception in the tool, or a call `before_call` cancelled.
    pub is_error: bool,
}

#[pymethods]
impl ToolResult {
    fn __repr__(&self) -> String {
        format!(
            "ToolResult(content={:?}, is_error={})",
            self.content,
            if self.is_error { "True" } else { "False" }
        )
    }
}

impl From<&skein::ToolResult> for ToolResult {
    fn from(result: &skein::ToolResult) -> ToolResult {
        ToolResult {
            call_id: result.call_id.clone(),
            content: result.content.clone(),
            is_error: result.is_error,
        }
    }
}

/// A part of a message whose content was erased (`skein redact`,
/// `Store.redact`): what the tombstone keeps in its place. The content is
/// gone; its digest, who erased it, when and why remain.
#[pyclass(frozen, get_all, module = "skein")]
#[derive(Clone)]
pub struct Erased {
    /// The part's position in its message, from 0.
    pub index: usize,
    /// What the part was: `"text"`, `"tool_call"`, `"tool_result"` or
    /// `"attachment"`.
    pub kind: String,
    /// The BLAKE3 digest of the erased content (hex).
    pub digest: String,
    pub erased_by: String,
    /// When, in Unix milliseconds.
    pub erased_at_ms: i64,
    pub reason: String,
    /// An erased tool call's id and name, a tool result's call id, an
    /// attachment's media type (kept: they are part of the node id).
    pub call_id: Option<String>,
    pub tool_name: Option<String>,
    pub media_type: Option<String>,
}

#[pymethods]
impl Erased {
    fn __repr__(&self) -> String {
        format!(
            "Erased(kind={:?}, erased_by={:?}, reason={:?})",
            self.kind, self.erased_by, self.reason
        )
    }
}

impl Erased {
    fn of(index: usize, erased: &skein::core::Erased) -> Erased {
        use skein::core::ErasedPart;
        let (kind, call_id, tool_name, media_type) = match &erased.was {
            ErasedPart::Text => ("text", None, None, None),
            ErasedPart::ToolCall { id, name } => {
                ("tool_call", Some(id.clone()), Some(name.clone()), None)
            }
            ErasedPart::ToolResult { call_id, .. } => {
                ("tool_result", Some(call_id.clone()), None, None)
            }
            ErasedPart::Attachment { media_type } => {
                ("attachment", None, None, Some(media_type.clone()))
            }
        };
        Erased {
            index,
            kind: kind.to_string(),
            digest: erased.digest.to_hex(),
            erased_by: erased.erased_by.clone(),
            erased_at_ms: erased.erased_at_ms,
            reason: erased.reason.clone(),
            call_id,
            tool_name,
            media_type,
        }
    }
}

/// One message of a conversation's history, with its node id. A turn's
/// `messages=` takes it back as it is (every part, attachments included).
#[pyclass(frozen, module = "skein")]
#[derive(Clone)]
pub struct Message {
    /// The node's id (hex): the hash of the message and its history.
    #[pyo3(get)]
    pub id: String,
    /// `"system"`, `"user"`, `"assistant"` or `"tool"`.
    #[pyo3(get)]
    pub role: String,
    /// The text parts, joined.
    #[pyo3(get)]
    pub text: String,
    #[pyo3(get)]
    pub tool_calls: Vec<ToolCall>,
    #[pyo3(get)]
    pub tool_results: Vec<ToolResult>,
    /// Its erased parts, in order (empty unless it was redacted).
    #[pyo3(get)]
    pub erased: Vec<Erased>,
    /// The message itself.
    pub inner: CoreMessage,
}

#[pymethods]
impl Message {
    fn __repr__(&self) -> String {
        if !self.erased.is_empty() {
            return format!(
                "Message(role={:?}, erased={})",
                self.role,
                self.erased.len()
            );
        }
        let text: String = self.text.chars().take(60).collect();
        format!("Message(role={:?}, text={:?})", self.role, text)
    }

    /// Whether any part of it was erased.
    #[getter]
    fn is_erased(&self) -> bool {
        !self.erased.is_empty()
    }
}

impl Message {
    pub fn of(node: &Node) -> Message {
        let message: &CoreMessage = node.message();
        Message {
            id: node.id().to_hex(),
            role: message.role.as_str().to_string(),
            text: message.joined_text(),
            tool_calls: message.tool_calls().map(ToolCall::from).collect(),
            tool_results: message.tool_results_iter().map(ToolResult::from).collect(),
            erased: message
                .parts
                .iter()
                .enumerate()
                .filter_map(|(index, part)| match part {
                    skein::core::Part::Erased(erased) => Some(Erased::of(index, erased)),
                    _ => None,
                })
                .collect(),
            inner: message.clone(),
        }
    }

    /// Every message of `thread`, oldest first.
    pub fn all(thread: &Thread) -> Vec<Message> {
        thread.nodes().into_iter().map(Message::of).collect()
    }
}

/// A tool offered under a different input schema than earlier in the
/// conversation or chain (a renamed field, say).
#[pyclass(frozen, get_all, module = "skein")]
#[derive(Clone)]
pub struct DriftWarning {
    pub tool: String,
    pub previous_schema: String,
    pub current_schema: String,
}

#[pymethods]
impl DriftWarning {
    fn __repr__(&self) -> String {
        format!("DriftWarning(tool={:?})", self.tool)
    }

    fn __str__(&self) -> String {
        format!(
            "tool `{}` is offered with a different input schema than before ({} → {})",
            self.tool,
            &self.previous_schema[..12.min(self.previous_schema.len())],
            &self.current_schema[..12.min(self.current_schema.len())]
        )
    }
}

impl From<&skein::DriftWarning> for DriftWarning {
    fn from(warning: &skein::DriftWarning) -> DriftWarning {
        DriftWarning {
            tool: warning.tool.clone(),
            previous_schema: warning.previous_schema.to_hex(),
            current_schema: warning.current_schema.to_hex(),
        }
    }
}

/// Show drift warnings as Python warnings (`skein.ToolSchemaDrift`), once
/// per response.
pub fn warn_drift(py: Python<'_>, warnings: &[skein::DriftWarning]) -> PyResult<()> {
    if warnings.is_empty() {
        return Ok(());
    }
    let category = py.import("skein._errors")?.getattr("ToolSchemaDrift")?;
    let warn = py.import("warnings")?.getattr("warn")?;
    for warning in warnings {
        let text = DriftWarning::from(warning).__str__();
        warn.call1((PyString::new(py, &text), &category, 2))?;
    }
    Ok(())
}

/// A file attached to a prompt: an image, a PDF, audio... from a `path` or
/// from `content` bytes, its media type given as `type` or told from its
/// first bytes (or its name's extension). Stored once by digest, like any
/// part; a model that cannot take it refuses the turn before the call.
#[pyclass(frozen, module = "skein")]
pub struct Attachment {
    pub inner: skein::core::Attachment,
}

#[pymethods]
impl Attachment {
    #[new]
    #[pyo3(signature = (path = None, *, content = None, r#type = None))]
    fn new(
        path: Option<std::path::PathBuf>,
        content: Option<Vec<u8>>,
        r#type: Option<String>,
    ) -> PyResult<Attachment> {
        use pyo3::exceptions::PyValueError;
        let (data, shown) = match (path, content) {
            (Some(path), None) => {
                let data = std::fs::read(&path)?;
                let shown = format!("the attachment {}", path.display());
                (data, (shown, Some(path)))
            }
            (None, Some(content)) => (content, ("the attachment's content".to_string(), None)),
            _ => {
                return Err(PyValueError::new_err(
                    "an Attachment takes a path or content=, exactly one of them",
                ));
            }
        };
        let (shown, path) = shown;
        if data.is_empty() {
            return Err(PyValueError::new_err(format!("{shown} is empty")));
        }
        let media_type = match r#type {
            Some(given) if skein::media::is_media_type(&given) => given.to_ascii_lowercase(),
            Some(given) => {
                return Err(PyValueError::new_err(format!(
                    "`{given}` is not a media type: write TYPE/SUBTYPE, e.g. image/png"
                )));
            }
            None => match skein::media::sniff(&data, path.as_deref()) {
                Some(sniffed) => sniffed.to_string(),
                None => {
                    return Err(PyValueError::new_err(format!(
                        "cannot tell what kind of file {shown} is: give its type, e.g. type=\"image/png\""
                    )));
                }
            },
        };
        Ok(Attachment {
            inner: skein::core::Attachment { media_type, data },
        })
    }

    /// The media type, e.g. `image/png`.
    #[getter]
    fn r#type(&self) -> String {
        self.inner.media_type.clone()
    }

    /// The size in bytes.
    #[getter]
    fn size(&self) -> usize {
        self.inner.data.len()
    }

    fn __repr__(&self) -> String {
        format!(
            "Attachment(type={:?}, size={})",
            self.inner.media_type,
            self.inner.data.len()
        )
    }
}
