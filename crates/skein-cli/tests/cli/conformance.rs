//! The surface conformance suite: one table of scenarios (the rows,
//! [`SCENARIOS`]) run through every surface (the columns, [`surfaces`]: the
//! library's `Conversation` API, the CLI's `prompt`/`reply`/`fork`, the chat
//! REPL on a pseudo-terminal, the web API of `skein serve`, and the
//! recording proxy's chat completions, Responses and Messages APIs, each
//! streamed and not). The Python package runs the same rows in
//! `crates/skein-py/tests/test_conformance.py`.
//!
//! Every cell runs on one shared database (SQLite, then PostgreSQL when
//! `SKEIN_TEST_POSTGRES` names a server) served by one `skein serve
//! --proxy` process. Its texts carry a tag of their own, so the part of the
//! graph a cell made is read back apart (from the database's export, the
//! same way for every surface: [`graph`]), with the tag taken
//! out: the same scenario must give the same graph on every surface (the
//! same threads, conversations, origins and runs), the outcome each surface
//! reports must be its own way of saying the same thing (an exit code, an
//! HTTP status, a stream's last event, an error value: [`Verdict`]), and
//! `skein verify` must exit 0 after each cell. At the end the database's
//! export imports into a fresh one, which verifies.
//!
//! The rules the rows check, in DESIGN.md's words:
//!
//! - **The landing rule**: extend the head; branch when the start point
//!   heads nothing or the head moved under the turn (the loser of a race
//!   becomes a branch with its origin recorded); create a conversation only
//!   once its first turn has succeeded.
//! - **The failure rule**: a failed model call stores its input messages
//!   and a failed run pointing at them, in one transaction, and moves
//!   nothing; `verify` is clean after any failure.
//! - **Names never shadow ids**: a conversation name that could be read as
//!   an id is refused when set, before anything runs or is stored.
//!
//! A surface joins the table by implementing [`Surface`], one method per
//! kind of turn; a surface that has no way to make a turn answers
//! [`Cell::Lacks`] with the reason, which the table prints, instead of
//! skipping the row. Every turn runs on one scripted model
//! (`tests/data/conformance.toml`), but a race's slow turn, which runs on
//! a mock server that holds it until the fast one has landed ([`slow`]).

mod cli;
mod graph;
mod library;
mod proxy;
mod repl;
pub(crate) mod slow;
mod web;

use crate::serve::Server;
use graph::Graph;
use serde_json::Value;
use skein_testkit::Cli;
use std::io::Write as _;
use std::path::{Path, PathBuf};

/// What a surface said of one turn, in the table's words: each driver
/// checks its surface's own way of saying it (an exit code, an HTTP
/// status, an exception) and panics on anything else.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// The turn succeeded and was recorded (CLI exit 0, HTTP 200 with a
    /// reply, a `done` event, `Ok`).
    Landed,
    /// The model call failed (CLI exit 5, the web stream's `error` event,
    /// the proxy's 502, an engine error).
    ModelFailed,
    /// Refused before anything ran (CLI exit 2, HTTP 400,
    /// `NameLooksLikeId`).
    Refused,
}

/// One cell of the table: what the surface did, or why it has no such
/// turn.
pub(crate) enum Cell<T = Verdict> {
    Ran(T),
    Lacks(&'static str),
}

/// A conversation made for a cell through the CLI before the surface acts
/// on it: its id, its first prompt and reply (an inner node once it goes
/// on) and its head.
pub(crate) struct Setup {
    pub conversation: String,
    pub prompt: String,
    pub first: String,
    pub head: String,
}

/// The turns a surface can make. Each takes texts that carry the cell's
/// tag and reports what the surface said.
pub(crate) trait Surface {
    /// The column's name.
    fn name(&self) -> String;
    /// A first turn in a new conversation, named `name` when given.
    fn start(&self, place: &Place, text: &str, name: Option<&str>) -> Cell;
    /// The next turn of `setup`'s conversation, from its head.
    fn go_on(&self, place: &Place, setup: &Setup, text: &str) -> Cell;
    /// A turn answering `node`: the head of `setup`'s conversation, or a
    /// node that heads nothing.
    fn reply_at(&self, place: &Place, setup: &Setup, node: &str, text: &str) -> Cell;
    /// A new conversation at `setup`'s head with a first turn, named
    /// `name` when given.
    fn fork(&self, place: &Place, setup: &Setup, text: &str, name: Option<&str>) -> Cell;
    /// Two turns from `setup`'s head at once: `slow` starts first and its
    /// model (`place.slow`) answers only once `fast` has moved the head and
    /// the surface releases it.
    fn race(&self, place: &Place, setup: &Setup, slow: &str, fast: &str) -> Cell<[Verdict; 2]>;
    /// The next turn of `setup`'s conversation (which offers the
    /// `skein_version` tool) as a tool loop.
    fn tool_loop(&self, place: &Place, setup: &Setup, text: &str) -> Cell;
    /// A new text for the first message of `setup`'s conversation: a branch
    /// from the start of that conversation.
    fn edit_first(&self, place: &Place, setup: &Setup, text: &str) -> Cell;
    /// The first message of `setup`'s conversation (whose text is `text`)
    /// asked again as it was: a branch at it, which a deterministic model
    /// answers with the reply the conversation holds.
    fn retry_first(&self, place: &Place, setup: &Setup, text: &str) -> Cell;
    /// The next turn of `setup`'s conversation, asking for a reply that
    /// matches the JSON Schema `schema` (which the model never does).
    fn go_on_with_schema(&self, place: &Place, setup: &Setup, text: &str, schema: &str) -> Cell;
    /// A turn answering the inner node `node` with the very message that
    /// followed it, so a deterministic model gives the very reply the
    /// conversation ends with: a branch all the same (a retry).
    fn again_at(&self, place: &Place, setup: &Setup, node: &str, text: &str) -> Cell {
        self.reply_at(place, setup, node, text)
    }
    /// A fork at `setup`'s head, a reply another model than the
    /// conversation's gave, naming no model: it runs on the model that gave
    /// the reply (a fork's model is the response's).
    fn fork_at_another_models_reply(&self, place: &Place, setup: &Setup, text: &str) -> Cell {
        self.fork(place, setup, text, None)
    }
    /// The recorded turn whose reply is `node` explained (its sources
    /// ranked): the id of the conversation whose turn the surface found.
    fn explain(&self, place: &Place, node: &str) -> Cell<String> {
        let _ = (place, node);
        Cell::Lacks(
            "it records and continues turns; explaining one is `skein explain`'s, the library's and the web view's",
        )
    }
    /// Why the row named `scenario` is left out for this surface, when it
    /// does not conform yet and its fix lies outside the surface's own
    /// code (each such gap is a `// Gap:` comment at its surface).
    fn gap(&self, scenario: &str) -> Option<&'static str> {
        let _ = scenario;
        None
    }
}

/// The columns, in the order the table runs them.
///
/// Recorded chats (`skein prompt --source`) are no column: their turns
/// carry a tagged system message, so their graphs differ from every other
/// surface's (their race is tested in skein-recorded's
/// `persist::a_recorded_turn_that_loses_a_race_lands_in_a_branch_and_goes_on_there`).
fn surfaces() -> Vec<Box<dyn Surface>> {
    let mut all: Vec<Box<dyn Surface>> = vec![
        Box::new(library::Library),
        Box::new(cli::CommandLine),
        Box::new(repl::Repl),
        Box::new(web::WebApi),
    ];
    for api in proxy::Api::ALL {
        for streamed in [false, true] {
            all.push(Box::new(proxy::Proxy { api, streamed }));
        }
    }
    all
}

/// One row: a scenario, the rule it checks, how it runs on a surface and
/// the graph every surface must leave.
struct Scenario {
    name: &'static str,
    rule: &'static str,
    run: fn(&dyn Surface, &Place, &Tag) -> Cell<()>,
    expect: fn() -> Graph,
}

/// The name of the failed call's row.
pub(crate) const FAILED_CALL: &str = "a failed model call";

/// The rows.
const SCENARIOS: [Scenario; 17] = [
    Scenario {
        name: "a first turn",
        rule: "landing: a new conversation once its first turn succeeded",
        run: first_turn,
        expect: || {
            let main = "u:one / a:scripted: one";
            Graph::new().conversation(main).ran(main, "u:one", main)
        },
    },
    Scenario {
        name: "a continuation",
        rule: "landing: extend the head",
        run: continuation,
        expect: || {
            let two = "u:one / a:scripted: one / u:two / a:scripted: two";
            Graph::new()
                .conversation(two)
                .ran(two, "u:one", "u:one / a:scripted: one")
                .ran(two, "u:one / a:scripted: one / u:two", two)
        },
    },
    Scenario {
        name: "a reply at a conversation's head",
        rule: "landing: extend the head (on the conversation's model)",
        run: head_reply,
        expect: || {
            let two = "u:one / a:scripted: one / u:two / a:scripted: two";
            Graph::new()
                .conversation(two)
                .ran(two, "u:one", "u:one / a:scripted: one")
                .ran(two, "u:one / a:scripted: one / u:two", two)
        },
    },
    Scenario {
        name: "a reply at an inner node",
        rule: "landing: branch when the start point heads nothing (origin: that node and its conversation)",
        run: inner_reply,
        expect: || {
            let main = "u:one / a:scripted: one / u:two / a:scripted: two";
            let branch = "u:one / a:scripted: one / u:three / a:scripted: three";
            Graph::new()
                .conversation(main)
                .branch(branch, "u:one / a:scripted: one", main)
                .ran(main, "u:one", "u:one / a:scripted: one")
                .ran(main, "u:one / a:scripted: one / u:two", main)
                .ran(branch, "u:one / a:scripted: one / u:three", branch)
        },
    },
    Scenario {
        name: "a fork",
        rule: "landing: a fork is a new conversation at the node, stored with its first turn",
        run: fork,
        expect: || {
            let main = "u:one / a:scripted: one";
            let fork = "u:one / a:scripted: one / u:forked / a:scripted: forked";
            Graph::new()
                .conversation(main)
                .branch(fork, main, main)
                .ran(main, "u:one", main)
                .ran(fork, "u:one / a:scripted: one / u:forked", fork)
        },
    },
    Scenario {
        name: "a fork at a reply another model gave",
        rule: "a fork's model is the response's: the model that gave the reply, not the conversation's",
        run: fork_at_another_models_reply,
        expect: || {
            let main = "u:one / a:scripted: one / u:two / a:other: two";
            let fork =
                "u:one / a:scripted: one / u:two / a:other: two / u:forked / a:other: forked";
            Graph::new()
                .conversation(main)
                .branch(fork, main, main)
                .ran(main, "u:one", "u:one / a:scripted: one")
                .ran(main, "u:one / a:scripted: one / u:two", main)
                .ran(fork, &format!("{main} / u:forked"), fork)
        },
    },
    Scenario {
        name: "an explanation of a reply a fork stands at",
        rule: "one owner query: a recorded turn is found in the conversation whose turn produced it, never in a fork that only holds its reply",
        run: explain_shared_reply,
        expect: || {
            let main = "u:one / a:scripted: one";
            Graph::new()
                .conversation(main)
                .branch(main, main, main)
                .ran(main, "u:one", main)
        },
    },
    Scenario {
        name: "a branch whose first answer is its origin's head",
        rule: "landing: a branch is a new conversation even when its answer is the node its origin ends with (the origin unchanged)",
        run: same_answer_again,
        expect: || {
            let first = "u:one / a:scripted: one";
            let main = "u:one / a:scripted: one / u:two / a:scripted: two";
            Graph::new()
                .conversation(main)
                .branch(main, first, main)
                .ran(main, "u:one", first)
                .ran(main, "u:one / a:scripted: one / u:two", main)
                .ran(main, "u:one / a:scripted: one / u:two", main)
        },
    },
    Scenario {
        name: "an edit of a thread's first message",
        rule: "landing: a branch from the start, its origin the conversation (and no node)",
        run: edit_first,
        expect: || {
            let main = "u:one / a:scripted: one";
            let edited = "u:edited / a:scripted: edited";
            Graph::new()
                .conversation(main)
                .branch_from_start(edited, main)
                .ran(main, "u:one", main)
                .ran(edited, "u:edited", edited)
        },
    },
    Scenario {
        name: "a retry of a thread's first message",
        rule: "landing: a branch at the message (origin: it and its conversation), the origin unchanged",
        run: retry_first,
        expect: || {
            let main = "u:one / a:scripted: one";
            Graph::new()
                .conversation(main)
                .branch(main, "u:one", main)
                .ran(main, "u:one", main)
                .ran(main, "u:one", main)
        },
    },
    Scenario {
        name: "a race at one head",
        rule: "landing: branch when the head moved under the turn (the loser a branch with its origin, never an error)",
        run: race,
        expect: || {
            let start = "u:one / a:scripted: one";
            let main = "u:one / a:scripted: one / u:fast / a:scripted: fast";
            let lost = "u:one / a:scripted: one / u:slow / a:scripted: slow";
            Graph::new()
                .conversation(main)
                .branch(lost, start, main)
                .ran(main, "u:one", start)
                .ran(main, "u:one / a:scripted: one / u:fast", main)
                .ran(lost, "u:one / a:scripted: one / u:slow", lost)
        },
    },
    Scenario {
        name: FAILED_CALL,
        rule: "failure: the input stored, a failed run pointing at it, nothing moved",
        run: failed_call,
        expect: || {
            let main = "u:one / a:scripted: one";
            Graph::new()
                .conversation(main)
                .ran(main, "u:one", main)
                .failed(Some(main), "u:one / a:scripted: one / u:please fail")
        },
    },
    Scenario {
        name: "a reply that never matches its schema",
        rule: "failure: the input stored, a failed run pointing at it, nothing moved (no invalid reply kept)",
        run: schema_exhausted,
        expect: || {
            let main = "u:one / a:scripted: one";
            Graph::new()
                .conversation(main)
                .ran(main, "u:one", main)
                .failed(Some(main), "u:one / a:scripted: one / u:shaped")
        },
    },
    Scenario {
        name: "a failed first turn",
        rule: "landing and failure: no conversation created; the input and the failed run stored",
        run: failed_first_turn,
        expect: || Graph::new().failed(None, "u:please fail"),
    },
    Scenario {
        name: "a failed first turn of a fork",
        rule: "landing and failure: no conversation created; the input and the failed run stored",
        run: failed_fork,
        expect: || {
            let main = "u:one / a:scripted: one";
            Graph::new()
                .conversation(main)
                .ran(main, "u:one", main)
                .failed(None, "u:one / a:scripted: one / u:please fail")
        },
    },
    Scenario {
        name: "a name that looks like an id",
        rule: "names never shadow ids: refused when set, before anything runs",
        run: id_like_name,
        expect: || {
            let main = "u:one / a:scripted: one";
            Graph::new().conversation(main).ran(main, "u:one", main)
        },
    },
    Scenario {
        name: "a tool loop whose second call fails",
        rule: "failure: the completed call and its tool result kept (the head at the tool result), the failed run's input the tool result",
        run: tool_loop,
        expect: || {
            let main = "u:one / a:scripted: one";
            let called = "u:one / a:scripted: one / u:loop / a:call skein_version";
            let result = "u:one / a:scripted: one / u:loop / a:call skein_version / t:result";
            Graph::new()
                .conversation(result)
                .ran(result, "u:one", main)
                .ran(result, "u:one / a:scripted: one / u:loop", called)
                .failed(Some(result), result)
        },
    },
];

/// Where the table runs: one database, the binary on it, the models, and
/// one `skein serve --proxy` process serving the web API and the proxy.
pub(crate) struct Place {
    /// The database as the binary takes it: a path or a URL.
    pub db: String,
    /// The same, opened here (to read the graph back).
    pub store: skein::Store,
    pub cli: Cli,
    /// `scripted:PATH`, the model of every scenario but the race's slow
    /// turns.
    pub scripted: String,
    /// The model the race's slow turns run on.
    pub slow: slow::SlowModel,
    pub server: Server,
    pub runtime: tokio::runtime::Runtime,
}

impl Place {
    fn open(db: &str, cli: Cli) -> Place {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let slow = runtime.block_on(slow::SlowModel::start());
        let scripted = format!("scripted:{}", data("conformance.toml").display());
        let config = cli.dir().join("config.toml");
        std::fs::write(
            &config,
            format!(
                "[proxy.models]\n\"{}\" = '{}'\n\"{}\" = \"{}\"\n",
                proxy::MODEL,
                scripted,
                slow::PROXY_NAME,
                slow::MODEL
            ),
        )
        .unwrap();
        let config_path = config.display().to_string();
        let base_url = slow.base_url();
        let server = Server::start_with_env(
            Path::new(db),
            // The default model is the echo: every turn at a stored node
            // must run on the model of the conversation it goes on with.
            &["--proxy", "-m", "echo"],
            &[
                ("SKEIN_CONFIG", &config_path),
                ("OPENAI_BASE_URL", &base_url),
                ("OPENAI_API_KEY", "sk-test"),
            ],
        );
        Place {
            db: db.to_string(),
            store: skein::Store::open(db).unwrap(),
            cli: cli.config(config),
            scripted,
            slow,
            server,
            runtime,
        }
    }

    /// A conversation on the scripted model whose turns are `texts`, made
    /// through the CLI (with the `skein_version` tool when `tools`).
    fn setup(&self, texts: &[String], tools: bool) -> Setup {
        let mut args = vec!["prompt", "-m", self.scripted.as_str()];
        if tools {
            args.extend(["-T", "skein_version"]);
        }
        args.push(&texts[0]);
        let first = self.cli.json(&args);
        let conversation = first["conversation"].as_str().unwrap().to_string();
        let mut head = first["node"].as_str().unwrap().to_string();
        for text in &texts[1..] {
            head = self.cli.json(&["prompt", "--cid", &conversation, text])["node"]
                .as_str()
                .unwrap()
                .to_string();
        }
        let reply: skein::NodeId = first["node"].as_str().unwrap().parse().unwrap();
        let prompt = self.store.node(reply).unwrap().parent.unwrap();
        Setup {
            conversation,
            prompt: prompt.to_string(),
            first: reply.to_string(),
            head,
        }
    }
}

/// A test data file.
pub(crate) fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

/// The texts of one cell carry its tag, so its part of the shared
/// database is read back apart.
pub(crate) struct Tag(String);

impl Tag {
    /// `text` with the tag.
    fn on(&self, text: &str) -> String {
        format!("{text} {}", self.0)
    }

    /// `text` without it.
    pub(crate) fn strip(&self, text: &str) -> String {
        text.replace(&format!(" {}", self.0), "")
    }

    pub(crate) fn is_in(&self, text: &str) -> bool {
        text.contains(&self.0)
    }
}

fn first_turn(surface: &dyn Surface, place: &Place, tag: &Tag) -> Cell<()> {
    expect(surface.start(place, &tag.on("one"), None), Verdict::Landed)
}

fn continuation(surface: &dyn Surface, place: &Place, tag: &Tag) -> Cell<()> {
    let setup = place.setup(&[tag.on("one")], false);
    expect(
        surface.go_on(place, &setup, &tag.on("two")),
        Verdict::Landed,
    )
}

fn head_reply(surface: &dyn Surface, place: &Place, tag: &Tag) -> Cell<()> {
    let setup = place.setup(&[tag.on("one")], false);
    let head = setup.head.clone();
    expect(
        surface.reply_at(place, &setup, &head, &tag.on("two")),
        Verdict::Landed,
    )
}

fn inner_reply(surface: &dyn Surface, place: &Place, tag: &Tag) -> Cell<()> {
    let setup = place.setup(&[tag.on("one"), tag.on("two")], false);
    let inner = setup.first.clone();
    expect(
        surface.reply_at(place, &setup, &inner, &tag.on("three")),
        Verdict::Landed,
    )
}

fn same_answer_again(surface: &dyn Surface, place: &Place, tag: &Tag) -> Cell<()> {
    let setup = place.setup(&[tag.on("one"), tag.on("two")], false);
    let inner = setup.first.clone();
    let ran = expect(
        surface.again_at(place, &setup, &inner, &tag.on("two")),
        Verdict::Landed,
    );
    if let Cell::Ran(()) = ran {
        assert_origin_unchanged(place, &setup);
    }
    ran
}

/// `setup`'s conversation still ends where it did: a branch never moves
/// its origin's bookmark.
fn assert_origin_unchanged(place: &Place, setup: &Setup) {
    let origin = skein::store::ConversationId(setup.conversation.clone());
    let stored = place.store.conversation(&origin).unwrap();
    assert_eq!(
        stored.head.map(|head| head.to_string()),
        Some(setup.head.clone()),
        "the origin's bookmark stays where it was"
    );
}

fn fork(surface: &dyn Surface, place: &Place, tag: &Tag) -> Cell<()> {
    let setup = place.setup(&[tag.on("one")], false);
    expect(
        surface.fork(place, &setup, &tag.on("forked"), None),
        Verdict::Landed,
    )
}

fn fork_at_another_models_reply(surface: &dyn Surface, place: &Place, tag: &Tag) -> Cell<()> {
    let mut setup = place.setup(&[tag.on("one")], false);
    let other = format!("scripted:{}", data("conformance-other.toml").display());
    let two = tag.on("two");
    let turn = place
        .cli
        .json(&["prompt", "--cid", &setup.conversation, "-m", &other, &two]);
    setup.head = turn["node"].as_str().unwrap().to_string();
    expect(
        surface.fork_at_another_models_reply(place, &setup, &tag.on("forked")),
        Verdict::Landed,
    )
}

fn explain_shared_reply(surface: &dyn Surface, place: &Place, tag: &Tag) -> Cell<()> {
    let setup = place.setup(&[tag.on("one")], false);
    place
        .cli
        .json(&["fork", &setup.head, "--name", &tag.on("standing")]);
    match surface.explain(place, &setup.head) {
        Cell::Lacks(reason) => Cell::Lacks(reason),
        Cell::Ran(found) => {
            assert_eq!(
                found, setup.conversation,
                "the turn is the conversation's that produced the reply, not the fork's"
            );
            Cell::Ran(())
        }
    }
}

fn edit_first(surface: &dyn Surface, place: &Place, tag: &Tag) -> Cell<()> {
    let setup = place.setup(&[tag.on("one")], false);
    expect(
        surface.edit_first(place, &setup, &tag.on("edited")),
        Verdict::Landed,
    )
}

fn retry_first(surface: &dyn Surface, place: &Place, tag: &Tag) -> Cell<()> {
    let setup = place.setup(&[tag.on("one")], false);
    let ran = expect(
        surface.retry_first(place, &setup, &tag.on("one")),
        Verdict::Landed,
    );
    if let Cell::Ran(()) = ran {
        assert_origin_unchanged(place, &setup);
    }
    ran
}

fn race(surface: &dyn Surface, place: &Place, tag: &Tag) -> Cell<()> {
    let setup = place.setup(&[tag.on("one")], false);
    match surface.race(place, &setup, &tag.on("slow"), &tag.on("fast")) {
        Cell::Lacks(reason) => Cell::Lacks(reason),
        Cell::Ran(verdicts) => {
            assert_eq!(verdicts, [Verdict::Landed; 2], "both turns of a race land");
            Cell::Ran(())
        }
    }
}

fn failed_call(surface: &dyn Surface, place: &Place, tag: &Tag) -> Cell<()> {
    let setup = place.setup(&[tag.on("one")], false);
    let text = tag.on("please fail");
    let ran = expect(surface.go_on(place, &setup, &text), Verdict::ModelFailed);
    if let Cell::Ran(()) = ran {
        assert_found(place, &text);
    }
    ran
}

/// The schema no reply of the scripted model matches.
pub(crate) const SCHEMA: &str = r#"{"type": "object", "required": ["answer"]}"#;

fn schema_exhausted(surface: &dyn Surface, place: &Place, tag: &Tag) -> Cell<()> {
    let setup = place.setup(&[tag.on("one")], false);
    let text = tag.on("shaped");
    let ran = expect(
        surface.go_on_with_schema(place, &setup, &text, SCHEMA),
        Verdict::ModelFailed,
    );
    if let Cell::Ran(()) = ran {
        assert_found(place, &text);
    }
    ran
}

fn failed_first_turn(surface: &dyn Surface, place: &Place, tag: &Tag) -> Cell<()> {
    let text = tag.on("please fail");
    let ran = expect(surface.start(place, &text, None), Verdict::ModelFailed);
    if let Cell::Ran(()) = ran {
        assert_found(place, &text);
    }
    ran
}

fn failed_fork(surface: &dyn Surface, place: &Place, tag: &Tag) -> Cell<()> {
    let setup = place.setup(&[tag.on("one")], false);
    let text = tag.on("please fail");
    let ran = expect(
        surface.fork(place, &setup, &text, None),
        Verdict::ModelFailed,
    );
    if let Cell::Ran(()) = ran {
        assert_found(place, &text);
    }
    ran
}

/// A new conversation named like an id: through a first turn where the
/// surface has one, else through a fork (the graph is the setup's either
/// way).
fn id_like_name(surface: &dyn Surface, place: &Place, tag: &Tag) -> Cell<()> {
    let setup = place.setup(&[tag.on("one")], false);
    for name in ["0123abcd", "0123456789abcdef0123456789abcdef"] {
        let said = match surface.start(place, &tag.on("named"), Some(name)) {
            Cell::Lacks(_) => surface.fork(place, &setup, &tag.on("named"), Some(name)),
            said => said,
        };
        if let Cell::Lacks(reason) = expect(said, Verdict::Refused) {
            return Cell::Lacks(reason);
        }
    }
    Cell::Ran(())
}

fn tool_loop(surface: &dyn Surface, place: &Place, tag: &Tag) -> Cell<()> {
    let setup = place.setup(&[tag.on("one")], true);
    expect(
        surface.tool_loop(place, &setup, &tag.on("loop")),
        Verdict::ModelFailed,
    )
}

fn expect(cell: Cell, verdict: Verdict) -> Cell<()> {
    match cell {
        Cell::Ran(said) => {
            assert_eq!(said, verdict);
            Cell::Ran(())
        }
        Cell::Lacks(reason) => Cell::Lacks(reason),
    }
}

/// `skein search` finds what the user sent to a failed call.
fn assert_found(place: &Place, text: &str) {
    let found = place.cli.json(&["search", text]);
    let matches = found["matches"].as_array().unwrap();
    assert_eq!(matches.len(), 1, "{text:?} is found: {found}");
    assert_eq!(matches[0]["role"], "user", "{found}");
}

/// Run every row on every surface on `place`, then check the export. A
/// cell that does not conform does not stop the others: the test fails
/// naming each.
fn run_table(place: &Place) {
    let surfaces = surfaces();
    let (mut lacking, mut failures) = (Vec::new(), Vec::new());
    for (row, scenario) in SCENARIOS.iter().enumerate() {
        for (column, surface) in surfaces.iter().enumerate() {
            let tag = Tag(format!("q{row}w{column}"));
            let cell = format!(
                "{} on {} ({})",
                scenario.name,
                surface.name(),
                scenario.rule
            );
            let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                run_cell(place, scenario, surface.as_ref(), &tag)
            }));
            match ran {
                Ok(Some(reason)) => lacking.push(format!("{cell}: none, {reason}")),
                Ok(None) => {}
                Err(panic) => failures.push(format!("{cell}: {}", panic_message(&panic))),
            }
        }
    }
    let _ = writeln!(
        std::io::stderr(),
        "cells without such a turn:\n  {}",
        lacking.join("\n  ")
    );
    assert!(
        failures.is_empty(),
        "{} cells do not conform:\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
    assert_export_imports(place);
}

/// Run one cell and check what it left: `Some(reason)` when the surface
/// has no such turn.
fn run_cell(
    place: &Place,
    scenario: &Scenario,
    surface: &dyn Surface,
    tag: &Tag,
) -> Option<&'static str> {
    if let Some(gap) = surface.gap(scenario.name) {
        return Some(gap);
    }
    if let Cell::Lacks(reason) = (scenario.run)(surface, place, tag) {
        return Some(reason);
    }
    assert_eq!(Graph::read(place, tag), (scenario.expect)(), "the graph");
    let verify = place.cli.run(&["verify"]);
    assert_eq!(
        verify.status.code(),
        Some(0),
        "skein verify: {}{}",
        String::from_utf8_lossy(&verify.stdout),
        skein_testkit::cli::stderr(&verify)
    );
    None
}

fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|text| text.to_string()))
        .unwrap_or_else(|| "a panic without a message".into())
}

/// The database's export imports into a fresh SQLite database, which
/// verifies and exports the same records.
fn assert_export_imports(place: &Place) {
    let export = place.cli.ok(&["export"]);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("export.jsonl");
    std::fs::write(&file, &export).unwrap();
    let fresh = Cli::new(crate::BIN, dir.path().join("fresh.db"));
    let report: Value = fresh.json(&["import", file.to_str().unwrap()]);
    assert!(report["nodes_written"].as_u64().unwrap() > 0, "{report}");
    fresh.ok(&["verify"]);
    assert_eq!(
        fresh.ok(&["export"]),
        export,
        "the import holds every record"
    );
}

#[test]
fn every_surface_follows_the_landing_and_failure_rules_on_sqlite() {
    let cli = Cli::temp(crate::BIN);
    let db = cli.db().display().to_string();
    run_table(&Place::open(&db, cli));
}

#[cfg(feature = "postgres")]
#[test]
fn every_surface_follows_the_landing_and_failure_rules_on_postgres() {
    let Some(schema) =
        crate::postgres::scratch("every_surface_follows_the_landing_and_failure_rules_on_postgres")
    else {
        return;
    };
    let cli = Cli::temp(crate::BIN).on(schema.url());
    run_table(&Place::open(schema.url(), cli));
}
