//! The library's column: the facade's `Conversation` API in this process,
//! on the table's database. Its verdicts are `Ok`, an engine error (the
//! model failed; in a tool loop, `ChainFailed`) and the store's
//! `NameLooksLikeId`.

use super::{Cell, Place, Setup, Surface, Verdict};
use skein::recorded::{RecordedChat, TurnAt};
use skein::store::StoreError;
use skein::{Conversation, Error, Model, Store};

pub(crate) struct Library;

/// The verdict a turn's result says.
fn verdict<T>(result: Result<T, Error>) -> Verdict {
    match result {
        Ok(_) => Verdict::Landed,
        Err(Error::Engine(_) | Error::ChainFailed { .. }) => Verdict::ModelFailed,
        Err(Error::Store(StoreError::NameLooksLikeId(_))) => Verdict::Refused,
        Err(error) => panic!("the library failed: {error}"),
    }
}

/// The table's database and a home model: the echo (every turn at a stored
/// node must run on the model of the conversation it goes on with), with
/// the `skein_version` tool, which the tool loop's conversation offers.
fn open(place: &Place) -> (Store, Model) {
    let store = Store::open(&place.db).unwrap();
    let home = Model::open_with_tools("echo", [skein::builtin::skein_version()]).unwrap();
    (store, home)
}

impl Surface for Library {
    fn name(&self) -> String {
        "the library".into()
    }

    fn start(&self, place: &Place, text: &str, name: Option<&str>) -> Cell {
        let store = Store::open(&place.db).unwrap();
        let model = Model::open(&place.scripted).unwrap();
        let mut builder = model.conversation().store(&store);
        if let Some(name) = name {
            builder = builder.name(name);
        }
        let prompt = builder.build().prompt(text);
        Cell::Ran(verdict(place.runtime.block_on(prompt.send())))
    }

    fn go_on(&self, place: &Place, setup: &Setup, text: &str) -> Cell {
        let (store, model) = open(place);
        Cell::Ran(verdict(place.runtime.block_on(async {
            Conversation::load(
                &store,
                &conversation_id(&store, &setup.conversation).await?,
                &model,
            )
            .await?
            .prompt(text)
            .send()
            .await
        })))
    }

    /// The library's reply at a node that heads nothing is a branch there
    /// (`fork_at`); at a head, the caller loads the conversation (the
    /// continuation row): it has no call that decides between the two.
    fn reply_at(&self, place: &Place, setup: &Setup, node: &str, text: &str) -> Cell {
        if node == setup.head {
            return Cell::Lacks(
                "no reply at a node: at a head, a caller loads its conversation (the continuation row)",
            );
        }
        let (store, model) = open(place);
        Cell::Ran(verdict(place.runtime.block_on(async {
            Conversation::fork_at(&store, node_id(&store, node).await?, &model)
                .await?
                .prompt(text)
                .send()
                .await
        })))
    }

    fn fork(&self, place: &Place, setup: &Setup, text: &str, name: Option<&str>) -> Cell {
        let (store, model) = open(place);
        Cell::Ran(verdict(place.runtime.block_on(async {
            let mut fork =
                Conversation::fork_at(&store, node_id(&store, &setup.head).await?, &model).await?;
            if let Some(name) = name {
                fork = fork.name(name);
            }
            fork.prompt(text).send().await
        })))
    }

    /// Two handles loaded at the same head: the fast one's turn moves it,
    /// so the slow one's turn starts from a head that moved under it and,
    /// by the library's default (the landing rule), lands in a branch,
    /// which the slow handle follows.
    fn race(&self, place: &Place, setup: &Setup, slow: &str, fast: &str) -> Cell<[Verdict; 2]> {
        let (store, model) = open(place);
        let (slow, fast) = place.runtime.block_on(async {
            let id = conversation_id(&store, &setup.conversation).await.unwrap();
            let load = || Conversation::load(&store, &id, &model);
            let (late, early) = (load().await.unwrap(), load().await.unwrap());
            let fast = verdict(early.prompt(fast).send().await);
            let slow = late.prompt(slow).send().await;
            if slow.is_ok() {
                assert_ne!(late.id(), id, "the slow handle follows its branch");
            }
            (slow, fast)
        });
        Cell::Ran([verdict(slow), fast])
    }

    fn explain(&self, place: &Place, node: &str) -> Cell<String> {
        let (store, model) = open(place);
        Cell::Ran(place.runtime.block_on(async {
            let node = node_id(&store, node).await.unwrap();
            let loaded = RecordedChat::on_model(&model)
                .store(store)
                .load_turn(TurnAt::Reply(node))
                .await
                .unwrap();
            loaded.conversation().0.clone()
        }))
    }

    fn edit_first(&self, place: &Place, setup: &Setup, text: &str) -> Cell {
        let (store, model) = open(place);
        let prompt: skein::NodeId = setup.prompt.parse().unwrap();
        Cell::Ran(verdict(place.runtime.block_on(async {
            Conversation::again_at(&store, prompt, &model)
                .edited(text)
                .await?
                .send()
                .await
        })))
    }

    fn retry_first(&self, place: &Place, setup: &Setup, _: &str) -> Cell {
        let (store, model) = open(place);
        let prompt: skein::NodeId = setup.prompt.parse().unwrap();
        Cell::Ran(verdict(place.runtime.block_on(async {
            Conversation::again_at(&store, prompt, &model)
                .await?
                .send()
                .await
        })))
    }

    fn go_on_with_schema(&self, place: &Place, setup: &Setup, text: &str, schema: &str) -> Cell {
        let (store, model) = open(place);
        let schema: serde_json::Value = serde_json::from_str(schema).unwrap();
        Cell::Ran(verdict(place.runtime.block_on(async {
            Conversation::load(
                &store,
                &conversation_id(&store, &setup.conversation).await?,
                &model,
            )
            .await?
            .prompt(text)
            .schema(schema)
            .send()
            .await
        })))
    }

    fn tool_loop(&self, place: &Place, setup: &Setup, text: &str) -> Cell {
        let (store, model) = open(place);
        Cell::Ran(verdict(place.runtime.block_on(async {
            Conversation::load(
                &store,
                &conversation_id(&store, &setup.conversation).await?,
                &model,
            )
            .await?
            .chain(text)
            .send()
            .await
        })))
    }
}

/// The conversation a table's text names, parsed once, as a surface does.
async fn conversation_id(store: &Store, text: &str) -> skein::Result<skein::core::ConversationId> {
    Ok(store.nonblocking().resolve_conversation(text).await?)
}

/// The node a table's text names, parsed once, as a surface does.
async fn node_id(store: &Store, text: &str) -> skein::Result<skein::NodeId> {
    Ok(store.nonblocking().resolve_node(text).await?)
}
