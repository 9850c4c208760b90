//! A replay that renders another version of a configured prompt: the
//! recorded run keeps what its prompt rendered (id, version, variables,
//! messages), the replayed request holds the version's messages, rendered
//! with the recorded variables and with their cache hints, in their place
//! and every other message as recorded; a turn that rendered no such
//! prompt fails and says why, a version that does not render fails its
//! turn, and a version the engine lacks is refused before anything is
//! stored.

use skein_conversation::{Conversation, Model, TurnInput};
use skein_core::{Annotation, CacheHint, Message, Role, Thread};
use skein_engine::{
    BackendDef, BackendKind, Catalog, Engine, MessageTemplate, Profile, PromptDef, RenderedPrompt,
};
use skein_recorded::RecordedError;
use skein_recorded::replay::{PromptVersion, ReplayPlan, Replayer, Selection};
use skein_store::{ReplayStatus, Store};

/// `ask` at three versions: 1 (recorded), 2 (other words, a cache hint
/// on its system message), 3 (a variable the recording never gave).
fn catalog() -> Catalog {
    let v1 = PromptDef::new(
        "ask",
        vec![
            MessageTemplate::new(Role::System, "You answer {{ topic }} questions."),
            MessageTemplate::new(Role::User, "Tell me about {{ topic }}."),
        ],
    )
    .variable("topic");
    let v2 = PromptDef {
        version: 2,
        ..PromptDef::new(
            "ask",
            vec![
                MessageTemplate::new(Role::System, "You are a poet of {{ topic }}.")
                    .cache(CacheHint::Ephemeral),
                MessageTemplate::new(Role::User, "Sing of {{ topic }}."),
            ],
        )
        .variable("topic")
    };
    let v3 = PromptDef {
        version: 3,
        ..PromptDef::new(
            "ask",
            vec![MessageTemplate::new(Role::User, "{{ topic }}, {{ mood }}")],
        )
        .variable("topic")
        .variable("mood")
    };
    Catalog::new()
        .backend(BackendDef::new("echo", BackendKind::Echo))
        .profile(Profile::new("echo", "echo", "echo"))
        .prompt(v1)
        .prompt(v2)
        .prompt(v3)
}

struct Desk {
    model: Model,
    store: Store,
    _dir: tempfile::TempDir,
}

impl Desk {
    fn new() -> Desk {
        let engine = Engine::builder(catalog()).build().unwrap();
        let dir = tempfile::tempdir().unwrap();
        Desk {
            model: Model::from_profile(&engine, "echo").unwrap(),
            store: Store::open(dir.path().join("db.sqlite")).unwrap(),
            _dir: dir,
        }
    }

    /// A plain turn, a turn rendering `ask` v1 about tides, a plain turn.
    async fn record(&self) -> Conversation {
        let conversation = Conversation::builder(self.model.clone())
            .store(&self.store)
            .build();
        conversation.prompt("hello").send().await.unwrap();
        conversation
            .prompt(
                TurnInput::configured("ask")
                    .version(1)
                    .var("topic", "tides"),
            )
            .send()
            .await
            .unwrap();
        conversation.prompt("thanks").send().await.unwrap();
        conversation
    }

    async fn replay(
        &self,
        conversation: &Conversation,
        version: u32,
    ) -> Vec<skein_store::ReplayTurn> {
        let mut plan = ReplayPlan::new("echo");
        plan.change.prompt_version = Some(PromptVersion::new("ask", version));
        let replayer = Replayer::new(&self.store, self.model.clone());
        let selection = Selection::new().conversation(conversation.id());
        let id = replayer.start(&selection, &plan).await.unwrap();
        replayer.run(&id, |_| {}).await.unwrap();
        self.store.replay_turns(&id, None, 10).unwrap()
    }
}

fn why(turn: &skein_store::ReplayTurn) -> &str {
    turn.detail["why"].as_str().unwrap_or_default()
}

fn messages(thread: &Thread) -> Vec<Message> {
    thread
        .nodes()
        .iter()
        .map(|node| node.message().clone())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_replay_renders_another_prompt_version_in_place_of_the_recorded_messages() {
    let desk = Desk::new();
    let conversation = desk.record().await;
    let runs = desk.store.runs_of_conversation(&conversation.id()).unwrap();
    let prompted: Vec<_> = runs
        .iter()
        .filter_map(|run| RenderedPrompt::of(&run.relations).map(|p| (run, p)))
        .collect();
    let [(prompt_run, rendered)] = &prompted[..] else {
        panic!("one run rendered the prompt: {runs:?}")
    };
    assert_eq!((rendered.id.as_str(), rendered.version), ("ask", 1));
    assert_eq!(rendered.variables["topic"], "tides");
    let recorded = desk
        .store
        .load_thread(prompt_run.input_head.unwrap())
        .unwrap();
    let nodes: Vec<_> = recorded.nodes().iter().map(|node| node.id()).collect();
    assert_eq!(rendered.messages, nodes[2..4], "after hello and its answer");

    let turns = desk.replay(&conversation, 2).await;
    let [hello, ask, thanks] = &turns[..] else {
        panic!("three turns: {turns:?}")
    };
    for plain in [hello, thanks] {
        assert_eq!(plain.status, ReplayStatus::Failed, "{plain:?}");
        assert!(
            why(plain).contains("rendered no configured prompt `ask`"),
            "{}",
            why(plain)
        );
        assert!(plain.runs.is_empty(), "nothing was sent for {plain:?}");
    }
    assert_eq!(ask.status, ReplayStatus::Done, "{ask:?}");
    assert_eq!(ask.decision.as_deref(), Some("changed"));
    let replayed_run = desk.store.run_record(&ask.runs[0]).unwrap();
    let replayed = desk
        .store
        .load_thread(replayed_run.input_head.unwrap())
        .unwrap();
    let mut expected = messages(&recorded);
    expected.splice(
        2..4,
        [
            Message::system("You are a poet of tides."),
            Message::user("Sing of tides."),
        ],
    );
    assert_eq!(messages(&replayed), expected, "only the prompt's messages");
    let system = replayed.nodes()[2].id();
    assert_eq!(
        replayed_run.annotations.get(system, 0).to_vec(),
        vec![Annotation::CacheHint(CacheHint::Ephemeral)],
        "the version's cache hint goes with its message"
    );
    assert!(
        desk.store
            .node(ask.answer_head.unwrap())
            .unwrap()
            .message
            .joined_text()
            .contains("Sing of tides."),
        "{:?}",
        ask.detail
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_prompt_version_that_does_not_render_fails_its_turn_and_a_missing_one_is_refused() {
    let desk = Desk::new();
    let conversation = desk.record().await;
    let turns = desk.replay(&conversation, 3).await;
    assert_eq!(turns[1].status, ReplayStatus::Failed);
    assert!(
        why(&turns[1]).contains("ask@3 does not render") && why(&turns[1]).contains("mood"),
        "{}",
        why(&turns[1])
    );

    let mut plan = ReplayPlan::new("echo");
    plan.change.prompt_version = Some(PromptVersion::new("ask", 9));
    let replayer = Replayer::new(&desk.store, desk.model.clone());
    let selection = Selection::new().conversation(conversation.id());
    let before = desk.store.all_replays().unwrap().len();
    let error = replayer.start(&selection, &plan).await.unwrap_err();
    let RecordedError::UnknownPromptVersion { known, .. } = &error else {
        panic!("{error:?}")
    };
    assert_eq!(known, &[1, 2, 3]);
    assert!(error.to_string().contains("version(s) 1, 2, 3"), "{error}");
    assert_eq!(
        desk.store.all_replays().unwrap().len(),
        before,
        "nothing stored"
    );
    plan.change.prompt_version = Some(PromptVersion::new("nope", 1));
    let error = replayer.start(&selection, &plan).await.unwrap_err();
    assert!(error.to_string().contains("has no such prompt"), "{error}");
}

#[test]
fn a_prompt_version_is_read_from_id_at_version() {
    assert_eq!(
        PromptVersion::parse("ask@2").unwrap(),
        PromptVersion::new("ask", 2)
    );
    assert_eq!(
        PromptVersion::parse("team@ask@3").unwrap(),
        PromptVersion::new("team@ask", 3)
    );
    for bad in ["ask", "@2", "ask@", "ask@two", "ask@-1"] {
        let error = PromptVersion::parse(bad).unwrap_err();
        assert!(
            matches!(error, RecordedError::BadPromptVersion(_))
                && error.to_string().contains("ID@VERSION"),
            "{bad}: {error}"
        );
    }
}
