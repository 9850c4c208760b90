/*!
Tools a model may call: the [`Tool`] trait, [`tool_fn`] to make one from a
typed Rust function (its input schema derived with `schemars`), and the
execution of one call.

Executing a call never panics and never loses the turn: an unknown tool,
arguments that are not JSON or do not match the tool's schema, a tool
error and a tool that panics all become tool results marked as errors, so
the model sees what went wrong and the history stays valid for every
provider.
*/

use crate::contract::Contracts;
use futures_util::FutureExt;
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use skein_core::{BoxFuture, ToolCall, ToolResult, ToolSpec};
use std::fmt::Display;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

/// A tool's own failure, shown to the model as an error result.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ToolError(pub String);

/// Something a model can call.
pub trait Tool: Send + Sync {
    /// Name, description and JSON Schema of the arguments.
    fn spec(&self) -> &ToolSpec;

    /// Run the tool with arguments that already match its schema.
    fn call(&self, arguments: serde_json::Value) -> BoxFuture<'_, Result<String, ToolError>>;
}

/// A tool made from an async function of typed arguments.
struct FunctionTool<A, F> {
    spec: ToolSpec,
    function: F,
    _arguments: std::marker::PhantomData<fn(A)>,
}

impl<A, F, Fut, E> Tool for FunctionTool<A, F>
where
    A: DeserializeOwned + Send + 'static,
    F: Fn(A) -> Fut + Send + Sync,
    Fut: Future<Output = Result<String, E>> + Send + 'static,
    E: Display,
{
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn call(&self, arguments: serde_json::Value) -> BoxFuture<'_, Result<String, ToolError>> {
        let parsed: Result<A, _> = serde_json::from_value(arguments);
        match parsed {
            Err(error) => {
                Box::pin(async move { Err(ToolError(format!("invalid arguments: {error}"))) })
            }
            Ok(arguments) => {
                let future = (self.function)(arguments);
                Box::pin(async move { future.await.map_err(|error| ToolError(error.to_string())) })
            }
        }
    }
}

/// A tool from an async function; the input schema comes from `A`.
///
/// ```
/// use schemars::JsonSchema;
/// use serde::Deserialize;
///
/// #[derive(Deserialize, JsonSchema)]
/// struct Add { a: i64, b: i64 }
///
/// let add = skein_engine::tools::tool_fn("add", "Add two integers", |args: Add| async move {
///     Ok::<_, std::convert::Infallible>((args.a + args.b).to_string())
/// });
/// assert_eq!(add.spec().name, "add");
/// assert!(add.spec().input_schema["properties"]["a"].is_object());
/// ```
pub fn tool_fn<A, F, Fut, E>(
    name: impl Into<String>,
    description: impl Into<String>,
    function: F,
) -> Arc<dyn Tool>
where
    A: DeserializeOwned + JsonSchema + Send + 'static,
    F: Fn(A) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<String, E>> + Send + 'static,
    E: Display + 'static,
{
    let schema =
        serde_json::to_value(schemars::schema_for!(A)).unwrap_or_else(|_| serde_json::json!({}));
    Arc::new(FunctionTool {
        spec: ToolSpec::new(name, description, schema),
        function,
        _arguments: std::marker::PhantomData,
    })
}

/// Run one call against `tools`. Every failure becomes an error result.
pub(crate) async fn execute(
    tools: &[Arc<dyn Tool>],
    contracts: &Contracts,
    call: &ToolCall,
) -> ToolResult {
    let failure = |content: String| ToolResult {
        call_id: call.id.clone(),
        content,
        is_error: true,
    };
    let Some(tool) = tools.iter().find(|tool| tool.spec().name == call.name) else {
        let known: Vec<&str> = tools.iter().map(|tool| tool.spec().name.as_str()).collect();
        return failure(format!(
            "unknown tool `{}`; available tools: {}",
            call.name,
            if known.is_empty() {
                "none".to_string()
            } else {
                known.join(", ")
            }
        ));
    };
    let text = if call.arguments.trim().is_empty() {
        "{}"
    } else {
        call.arguments.as_str()
    };
    let arguments: serde_json::Value = match serde_json::from_str(text) {
        Ok(arguments) => arguments,
        Err(error) => return failure(format!("the arguments are not valid JSON: {error}")),
    };
    match contracts.get(&tool.spec().input_schema) {
        Ok(schema) => {
            if let Err(errors) = schema.check_value(&arguments) {
                return failure(format!(
                    "the arguments do not match the tool's schema: {}",
                    errors.join("; ")
                ));
            }
        }
        Err(error) => return failure(format!("the tool's own schema is invalid: {error}")),
    }
    match AssertUnwindSafe(tool.call(arguments)).catch_unwind().await {
        Ok(Ok(content)) => ToolResult {
            call_id: call.id.clone(),
            content,
            is_error: false,
        },
        Ok(Err(error)) => failure(error.0),
        Err(panic) => {
            let message = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "no message".into());
            failure(format!("the tool panicked: {message}"))
        }
    }
}

/// Property tests of argument parsing on the execution path: whatever text
/// a model writes as arguments, executing the call returns a result (never
/// a panic), an error result unless the text is JSON matching the tool's
/// schema, and the tool's answer when it is.
#[cfg(test)]
mod properties {
    use super::*;
    use proptest::prelude::*;

    #[derive(serde::Deserialize, JsonSchema)]
    struct Add {
        a: i64,
        b: i64,
    }

    fn add() -> Arc<dyn Tool> {
        tool_fn("add", "Add two integers", |args: Add| async move {
            Ok::<_, ToolError>(args.a.wrapping_add(args.b).to_string())
        })
    }

    fn run(name: &str, arguments: &str) -> ToolResult {
        let call = ToolCall {
            id: "call_1".into(),
            name: name.into(),
            arguments: arguments.into(),
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        runtime.block_on(execute(&[add()], &Contracts::default(), &call))
    }

    /// Text that is sometimes JSON, sometimes nearly.
    fn arguments() -> impl Strategy<Value = String> {
        let piece = prop_oneof![
            Just("{".to_string()),
            Just("}".to_string()),
            Just("\"a\"".to_string()),
            Just("\"b\"".to_string()),
            Just(":".to_string()),
            Just(",".to_string()),
            Just(" ".to_string()),
            Just("null".to_string()),
            (-1000i64..1000).prop_map(|n| n.to_string()),
            Just("1e400".to_string()),
            Just("\"\\ud800\"".to_string()),
            "\\PC{0,4}",
        ];
        prop_oneof![
            proptest::collection::vec(piece, 0..12).prop_map(|p| p.concat()),
            "\\PC{0,40}",
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig {
            cases: std::env::var("PROPTEST_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(512),
            failure_persistence: None,
            ..ProptestConfig::default()
        })]

        #[test]
        fn any_argument_text_gives_a_result_and_only_valid_ones_call_the_tool(text in arguments()) {
            let result = run("add", &text);
            prop_assert_eq!(&result.call_id, "call_1");
            let parsed: Option<serde_json::Value> = if text.trim().is_empty() {
                Some(serde_json::json!({}))
            } else {
                serde_json::from_str(&text).ok()
            };
            let valid = parsed.as_ref().and_then(|value| {
                Some((value.get("a")?.as_i64()?, value.get("b")?.as_i64()?))
            });
            match valid {
                Some((a, b)) => {
                    prop_assert!(!result.is_error, "{text:?}: {}", result.content);
                    prop_assert_eq!(result.content, a.wrapping_add(b).to_string());
                }
                None => {
                    prop_assert!(result.is_error, "{text:?} called the tool: {}", result.content);
                    let why = if parsed.is_none() { "not valid JSON" } else { "do not match" };
                    prop_assert!(result.content.contains(why), "{text:?}: {}", result.content);
                }
            }
        }

        #[test]
        fn valid_arguments_in_any_layout_reach_the_tool(
            a in any::<i64>(),
            b in any::<i64>(),
            space in "[ \t\n\r]{0,3}",
            b_first in any::<bool>(),
            extra in proptest::option::of("[a-z]{1,5}"),
        ) {
            let (first, second) = if b_first { (("b", b), ("a", a)) } else { (("a", a), ("b", b)) };
            let extra = extra.map_or(String::new(), |key| format!(",{space}\"_{key}\":{space}true"));
            let text = format!(
                "{space}{{{space}\"{}\"{space}:{space}{}{space},{space}\"{}\":{}{extra}}}{space}",
                first.0, first.1, second.0, second.1
            );
            let result = run("add", &text);
            prop_assert!(!result.is_error, "{text:?}: {}", result.content);
            prop_assert_eq!(result.content, a.wrapping_add(b).to_string());
        }

        #[test]
        fn an_unknown_tool_name_is_an_error_naming_the_known_ones(name in "\\PC{0,12}") {
            prop_assume!(name != "add");
            let result = run(&name, "{\"a\": 1, \"b\": 2}");
            prop_assert!(result.is_error);
            prop_assert!(result.content.contains("available tools: add"), "{}", result.content);
        }
    }
}
