/*!
What a turn adds after the history, from Python: the turn layer's
`TurnInput`. `prompt` is the user's text (one user message, exactly as
given, with `attachments` as its further parts); `messages` are messages of
any role given in full (several user messages, an assistant message with
tool calls, the results of calls the caller ran itself), each a dict or a
`skein.Message` read back from a history; both together put `messages`
first and the prompt's message last. Neither gives an empty turn: the model
goes on from the history as it stands (a new conversation has none, and
such a turn fails before any model call).

A message dict: `{"role": "user" | "assistant" | "system" | "tool",
"content": str, "tool_calls": [...], "tool_results": [...],
"attachments": [skein.Attachment]}`, where every key but `role` may be
left out (at least one must give a part); a tool call is
`{"id", "name", "arguments"}` (arguments as JSON text or any JSON value)
or a `skein.ToolCall`, a tool result `{"call_id", "content", "is_error"}`
(`is_error` optional) or a `skein.ToolResult`.
*/

use crate::values::{Attachment, Message, ToolCall, ToolResult, to_json};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use skein::core::{Message as CoreMessage, Part, Role};

/// The keys a message dict may have.
const MESSAGE_KEYS: [&str; 5] = [
    "role",
    "content",
    "tool_calls",
    "tool_results",
    "attachments",
];

/// A turn's input from its `prompt`, `messages` and `attachments` arguments.
pub fn turn_input(
    prompt: Option<String>,
    messages: Option<&Bound<'_, PyAny>>,
    attachments: Option<Vec<PyRef<'_, Attachment>>>,
) -> PyResult<skein::TurnInput> {
    let mut input = skein::TurnInput::new();
    if let Some(messages) = messages {
        for item in messages_list(messages)?.iter() {
            input = input.message(message(&item)?);
        }
    }
    let attachments = attachments.unwrap_or_default();
    if prompt.is_none() && attachments.is_empty() {
        return Ok(input);
    }
    let mut parts: Vec<Part> = prompt
        // An empty prompt with attachments adds no empty text part.
        .filter(|text| !text.is_empty() || attachments.is_empty())
        .map(Part::text)
        .into_iter()
        .collect();
    parts.extend(
        attachments
            .iter()
            .map(|attachment| Part::Attachment(attachment.inner.clone())),
    );
    Ok(input.message(CoreMessage::new(Role::User, parts)))
}

/// `messages=` as a list (any sequence but a string or a dict).
fn messages_list<'py>(messages: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyList>> {
    if messages.is_instance_of::<pyo3::types::PyString>() || messages.is_instance_of::<PyDict>() {
        return Err(PyTypeError::new_err(
            "messages= takes a list of messages (dicts or skein.Message), not one message",
        ));
    }
    let items: Vec<Bound<'py, PyAny>> = messages.try_iter()?.collect::<PyResult<_>>()?;
    PyList::new(messages.py(), items)
}

/// One message of `messages=`: a `skein.Message` as its history holds it,
/// or a dict.
fn message(item: &Bound<'_, PyAny>) -> PyResult<CoreMessage> {
    if let Ok(message) = item.cast::<Message>() {
        return Ok(message.get().inner.clone());
    }
    let dict = item.cast::<PyDict>().map_err(|_| {
        PyTypeError::new_err(format!(
            "a message of messages= is a dict ({{\"role\": \"user\", \"content\": \"...\"}}) or a skein.Message, not {}",
            item.get_type().name().map_or_else(|_| "this".to_string(), |n| n.to_string())
        ))
    })?;
    for key in dict.keys() {
        let key: String = key.extract()?;
        if !MESSAGE_KEYS.contains(&key.as_str()) {
            return Err(PyValueError::new_err(format!(
                "a message dict has no key `{key}` (it takes {})",
                MESSAGE_KEYS.join(", ")
            )));
        }
    }
    let role: String = dict
        .get_item("role")?
        .ok_or_else(|| PyValueError::new_err("a message dict needs a \"role\""))?
        .extract()?;
    let role: Role = role.parse().map_err(PyValueError::new_err)?;
    let mut parts = Vec::new();
    if let Some(content) = dict.get_item("content")? {
        let text: String = content
            .extract()
            .map_err(|_| PyTypeError::new_err("a message's \"content\" is its text, a str"))?;
        parts.push(Part::text(text));
    }
    for call in each(dict, "tool_calls")? {
        parts.push(Part::ToolCall(tool_call(&call)?));
    }
    for result in each(dict, "tool_results")? {
        parts.push(Part::ToolResult(tool_result(&result)?));
    }
    for attachment in each(dict, "attachments")? {
        let attachment = attachment.cast::<Attachment>().map_err(|_| {
            PyTypeError::new_err("a message's \"attachments\" are skein.Attachment objects")
        })?;
        parts.push(Part::Attachment(attachment.get().inner.clone()));
    }
    if parts.is_empty() {
        return Err(PyValueError::new_err(
            "a message dict needs \"content\", \"tool_calls\", \"tool_results\" or \"attachments\"",
        ));
    }
    Ok(CoreMessage::new(role, parts))
}

/// The items of the list under `key`, none when it is absent.
fn each<'py>(dict: &Bound<'py, PyDict>, key: &str) -> PyResult<Vec<Bound<'py, PyAny>>> {
    match dict.get_item(key)? {
        None => Ok(Vec::new()),
        Some(list) => list.try_iter()?.collect(),
    }
}

/// A tool call: a `skein.ToolCall`, or `{"id", "name", "arguments"}`.
fn tool_call(item: &Bound<'_, PyAny>) -> PyResult<skein::ToolCall> {
    if let Ok(call) = item.cast::<ToolCall>() {
        let call = call.get();
        return Ok(skein::ToolCall {
            id: call.id.clone(),
            name: call.name.clone(),
            arguments: call.arguments.clone(),
        });
    }
    let dict = item.cast::<PyDict>().map_err(|_| {
        PyTypeError::new_err(
            "a tool call is a dict {\"id\", \"name\", \"arguments\"} or a skein.ToolCall",
        )
    })?;
    let arguments = match dict.get_item("arguments")? {
        None => "{}".to_string(),
        Some(value) => match value.extract::<String>() {
            Ok(text) => text,
            Err(_) => to_json(&value)?.to_string(),
        },
    };
    Ok(skein::ToolCall {
        id: required(dict, "id", "tool call")?,
        name: required(dict, "name", "tool call")?,
        arguments,
    })
}

/// A tool result: a `skein.ToolResult`, or `{"call_id", "content",
/// "is_error"}`.
fn tool_result(item: &Bound<'_, PyAny>) -> PyResult<skein::ToolResult> {
    if let Ok(result) = item.cast::<ToolResult>() {
        let result = result.get();
        return Ok(skein::ToolResult {
            call_id: result.call_id.clone(),
            content: result.content.clone(),
            is_error: result.is_error,
        });
    }
    let dict = item.cast::<PyDict>().map_err(|_| {
        PyTypeError::new_err(
            "a tool result is a dict {\"call_id\", \"content\", \"is_error\"} or a skein.ToolResult",
        )
    })?;
    let is_error = match dict.get_item("is_error")? {
        None => false,
        Some(flag) => flag.extract()?,
    };
    Ok(skein::ToolResult {
        call_id: required(dict, "call_id", "tool result")?,
        content: required(dict, "content", "tool result")?,
        is_error,
    })
}

/// A string `key` a dict of `what` must have.
fn required(dict: &Bound<'_, PyDict>, key: &str, what: &str) -> PyResult<String> {
    dict.get_item(key)?
        .ok_or_else(|| PyValueError::new_err(format!("a {what} needs \"{key}\"")))?
        .extract()
        .map_err(|_| PyTypeError::new_err(format!("a {what}'s \"{key}\" is a str")))
}
