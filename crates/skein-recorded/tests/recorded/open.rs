//! Opening stored things as every surface does: the tools a stored
//! conversation's turns may call (`skein_conversation::home::offered_tools`:
//! its settings' and every tool its runs offered, sorted, each once), and
//! a recorded turn opened for a surface (`skein_recorded::open_turn`): those
//! tools started through the surface's `Home` before any model is opened,
//! then the chosen model or the conversation's own.

use schemars::JsonSchema;
use serde::Deserialize;
use skein_conversation::home::{self, offered_tools};
use skein_conversation::{Home, Model, SurfaceError};
use skein_core::BoxFuture;
use skein_engine::{Tool, tool_fn};
use skein_recorded::{TurnAt, open_turn};
use skein_store::Store;
use std::sync::{Arc, Mutex};

/// A surface opening model names (`echo` by default) that writes down
/// what it was asked to do, in order.
#[derive(Default)]
struct Watching {
    asked: Mutex<Vec<String>>,
}

impl Watching {
    fn asked(&self) -> Vec<String> {
        std::mem::take(&mut *self.asked.lock().unwrap())
    }
}

impl Home for Watching {
    fn open(&self, name: Option<&str>) -> Result<Model, SurfaceError> {
        self.asked
            .lock()
            .unwrap()
            .push(format!("open {}", name.unwrap_or("the default")));
        Model::open_with_tools(name.unwrap_or("echo"), tools()).map_err(SurfaceError::new)
    }

    fn default_name(&self) -> String {
        "echo".into()
    }

    fn start_tools(&self, names: Vec<String>) -> BoxFuture<'static, Result<(), SurfaceError>> {
        self.asked
            .lock()
            .unwrap()
            .push(format!("start {}", names.join(" ")));
        Box::pin(async { Ok(()) })
    }
}

#[derive(Deserialize, JsonSchema)]
struct Nothing {}

fn tool(name: &str) -> Arc<dyn Tool> {
    tool_fn(name, "a tool", |_: Nothing| async {
        Ok::<_, std::convert::Infallible>(String::new())
    })
}

fn tools() -> Vec<Arc<dyn Tool>> {
    ["zeta", "alpha", "mid"].into_iter().map(tool).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recorded_turn_opens_with_every_tool_its_runs_offered_started_before_its_model() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("skein.db")).unwrap();
    let model = Model::open_with_tools("echo", tools()).unwrap();
    // The conversation's settings offer zeta and alpha; its second turn
    // offered mid and alpha instead, so mid is in no setting.
    let conversation = model
        .conversation()
        .store(&store)
        .tools([tool("zeta"), tool("alpha")])
        .build();
    let first = conversation.prompt("one").send().await.unwrap();
    let second = first
        .conversation()
        .prompt("two")
        .tools([tool("mid"), tool("alpha")])
        .send()
        .await
        .unwrap();
    let id = second.conversation().id();
    let stored = store.nonblocking().conversation(&id).await.unwrap();
    assert_eq!(stored.settings.tools, ["zeta", "alpha"]);
    assert_eq!(
        offered_tools(&store, &stored).await.unwrap(),
        ["alpha", "mid", "zeta"],
        "the settings' tools and the runs', sorted, each once"
    );

    let surface = Watching::default();
    let loaded = open_turn(&store, TurnAt::Reply(second.head()), &surface, None, None)
        .await
        .unwrap();
    assert_eq!(loaded.index(), 1);
    assert_eq!(loaded.conversation(), &id);
    let offered: Vec<&str> = loaded
        .turn()
        .tools()
        .iter()
        .map(|tool| tool.name.as_str())
        .collect();
    assert_eq!(offered, ["mid", "alpha"]);
    assert_eq!(
        surface.asked(),
        ["start alpha mid zeta", "open the default"],
        "the tools first, then the conversation's own model (echo, the default here)"
    );

    // A chosen model is opened once the tools are started, so it knows them.
    let loaded = open_turn(
        &store,
        TurnAt::Number(id.clone(), 0),
        &surface,
        None,
        Some("echo"),
    )
    .await
    .unwrap();
    assert_eq!(loaded.index(), 0);
    assert_eq!(surface.asked(), ["start alpha mid zeta", "open echo"]);

    // Going on with the conversation starts its settings' tools only.
    let ready = home::ready(&surface, &stored, Some("echo")).await.unwrap();
    assert!(ready.chosen.is_some());
    assert_eq!(surface.asked(), ["start zeta alpha", "open echo"]);
    let ready = home::ready_at(&store, second.head(), &surface, None)
        .await
        .unwrap();
    assert!(ready.chosen.is_none());
    assert_eq!(surface.asked(), ["start zeta alpha", "open the default"]);
}

/// A node that is no recorded turn is `NotATurn`, and nothing
/// is started or opened for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_of_no_turn_opens_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("skein.db")).unwrap();
    let model = Model::open("echo").unwrap();
    let reply = model
        .conversation()
        .store(&store)
        .build()
        .prompt("one")
        .send()
        .await
        .unwrap();
    let prompt = store
        .nonblocking()
        .node(reply.head())
        .await
        .unwrap()
        .parent
        .unwrap();
    let surface = Watching::default();
    let error = open_turn(&store, TurnAt::Reply(prompt), &surface, None, None)
        .await
        .unwrap_err();
    assert!(
        matches!(error, skein_recorded::RecordedError::NotATurn(node) if node == prompt),
        "{error}"
    );
    assert!(surface.asked().is_empty());
}
