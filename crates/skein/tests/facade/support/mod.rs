//! Shared fixtures for the facade's tests: the scripted model behind the
//! test kit's recording provider, tools, and a macro that runs one scenario
//! in its async and its blocking form.

#![allow(dead_code, reason = "each test module uses a part of the kit")]

use schemars::JsonSchema;
use serde::Deserialize;
use skein::engine::config::{BackendDef, BackendKind, Catalog, Profile};
use skein::{Engine, Model, Tool, ToolError, tool_fn};
pub use skein_testkit::Recording;
use std::sync::Arc;

/// Rules for the facade's scenarios; first match wins.
pub const SCRIPT: &str = r#"
[[rules]]
name = "fail-after-tools"
any_contains = "then fail"
last_role = "tool"
error = { kind = "server", status = 503, message = "down" }

[[rules]]
name = "after-results"
last_role = "tool"
reply = "done: {last_tool_result}"

[[rules]]
name = "explode"
last_user_contains = "explode"
tool_calls = [{ name = "explode", arguments = '{}' }]

[[rules]]
name = "use-a"
last_user_contains = "use a"
tool_offered = "a"
tool_calls = [{ name = "a", arguments = '{"x": 1}' }]

[[rules]]
name = "use-b"
last_user_contains = "use b"
tool_offered = "b"
tool_calls = [{ name = "b", arguments = '{"x": 2}' }]

[[rules]]
name = "add"
last_user_contains = "add"
tool_offered = "add"
tool_calls = [{ name = "add", arguments = '{"a": 2, "b": 3}' }]

[[rules]]
name = "down"
last_user_contains = "fail now"
error = { kind = "server", status = 503, message = "down" }

[[rules]]
name = "plain"
reply = "you said: {last_user}"
"#;

/// Two profiles (`main`, `other`) on two recorded scripted backends, with
/// the tools `a`, `b`, `c`, `add` and `explode` registered.
pub struct Fixture {
    pub engine: Engine,
    pub main: Arc<Recording>,
    pub other: Arc<Recording>,
}

impl Fixture {
    pub fn new() -> Fixture {
        Fixture::with_tools([tool("a"), tool("b"), tool("c"), add(), explode()])
    }

    /// The same two profiles with these tools registered: what another
    /// process, with other versions of the tools, would have.
    pub fn with_tools(tools: impl IntoIterator<Item = Arc<dyn Tool>>) -> Fixture {
        let main = Recording::scripted(SCRIPT);
        let other = Recording::scripted(SCRIPT);
        let catalog = Catalog::new()
            .backend(BackendDef::new("main", BackendKind::Echo))
            .backend(BackendDef::new("other", BackendKind::Echo))
            .profile(Profile::new("main", "main", "main-model"))
            .profile(Profile::new("other", "other", "other-model"));
        let mut builder = Engine::builder(catalog)
            .provider("main", main.clone())
            .provider("other", other.clone());
        for tool in tools {
            builder = builder.tool(tool);
        }
        Fixture {
            engine: builder.build().unwrap(),
            main,
            other,
        }
    }

    pub fn model(&self) -> Model {
        Model::from_profile(&self.engine, "main").unwrap()
    }

    pub fn other_model(&self) -> Model {
        Model::from_profile(&self.engine, "other").unwrap()
    }

    pub fn tool(&self, name: &str) -> Arc<dyn Tool> {
        self.engine.tool(name).unwrap()
    }
}

#[derive(Deserialize, JsonSchema)]
pub struct X {
    pub x: i64,
}

/// A tool that answers `NAME(x)`.
pub fn tool(name: &'static str) -> Arc<dyn Tool> {
    tool_fn(name, format!("Tool {name}"), move |args: X| async move {
        Ok::<_, ToolError>(format!("{name}({})", args.x))
    })
}

#[derive(Deserialize, JsonSchema)]
pub struct Add {
    pub a: i64,
    pub b: i64,
}

pub fn add() -> Arc<dyn Tool> {
    tool_fn("add", "Add two integers", |args: Add| async move {
        Ok::<_, ToolError>((args.a + args.b).to_string())
    })
}

/// `add` with another input schema (a third argument).
pub fn add_three() -> Arc<dyn Tool> {
    #[derive(Deserialize, JsonSchema)]
    struct Add3 {
        a: i64,
        b: i64,
        c: i64,
    }
    tool_fn("add", "Add three integers", |args: Add3| async move {
        Ok::<_, ToolError>((args.a + args.b + args.c).to_string())
    })
}

/// `add` with the same schema and another description.
pub fn add_reworded() -> Arc<dyn Tool> {
    tool_fn("add", "Sum two whole numbers", |args: Add| async move {
        Ok::<_, ToolError>((args.a + args.b).to_string())
    })
}

pub fn explode() -> Arc<dyn Tool> {
    #[derive(Deserialize, JsonSchema)]
    struct Nothing {}
    tool_fn("explode", "Panics", |_: Nothing| async move {
        if true {
            panic!("kaboom");
        }
        Ok::<_, ToolError>(String::new())
    })
}

/// The text of every message of a thread, role-prefixed, for comparing
/// histories.
pub fn transcript(thread: &skein::Thread) -> Vec<String> {
    thread
        .messages()
        .iter()
        .map(|message| format!("{:?}: {}", message.role, message.joined_text()))
        .collect()
}

/// Define a scenario once and run it in both forms. Inside the body,
/// `send!(builder)`, `create!(fork)`, `log!(response, store)` and
/// `load!(store, id, model)` are the async forms (`.await`) in
/// `async_form` and the `*_blocking` forms in `blocking_form`.
#[macro_export]
macro_rules! both_forms {
    ($name:ident, $body:block) => {
        mod $name {
            #[allow(unused_imports, reason = "a test body may use none of them")]
            use super::*;

            #[tokio::test]
            async fn async_form() {
                #[allow(unused_macros, reason = "a test body uses the forms it needs")]
                macro_rules! send {
                    ($e:expr) => {
                        $e.send().await
                    };
                }
                #[allow(unused_macros, reason = "a test body uses the forms it needs")]
                macro_rules! create {
                    ($e:expr) => {
                        $e.create().await
                    };
                }
                #[allow(unused_macros, reason = "a test body uses the forms it needs")]
                macro_rules! log {
                    ($r:expr, $s:expr) => {
                        $r.log($s).await
                    };
                }
                #[allow(unused_macros, reason = "a test body uses the forms it needs")]
                macro_rules! load {
                    ($s:expr, $id:expr, $m:expr) => {{
                        let id = $s.nonblocking().resolve_conversation($id).await.unwrap();
                        skein::Conversation::load($s, &id, $m).await
                    }};
                }
                $body
            }

            #[test]
            fn blocking_form() {
                #[allow(unused_macros, reason = "a test body uses the forms it needs")]
                macro_rules! send {
                    ($e:expr) => {
                        $e.send_blocking()
                    };
                }
                #[allow(unused_macros, reason = "a test body uses the forms it needs")]
                macro_rules! create {
                    ($e:expr) => {
                        $e.create_blocking()
                    };
                }
                #[allow(unused_macros, reason = "a test body uses the forms it needs")]
                macro_rules! log {
                    ($r:expr, $s:expr) => {
                        $r.log_blocking($s)
                    };
                }
                #[allow(unused_macros, reason = "a test body uses the forms it needs")]
                macro_rules! load {
                    ($s:expr, $id:expr, $m:expr) => {{
                        let id = $s.resolve_conversation($id).unwrap();
                        skein::Conversation::load($s, &id, $m).blocking()
                    }};
                }
                $body
            }
        }
    };
}
