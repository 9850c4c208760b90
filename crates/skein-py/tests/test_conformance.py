"""The surface conformance table's rows, on the Python surface: the same
scenarios as the Rust table (crates/skein-cli/tests/cli/conformance.rs),
each leaving the same graph, read back the same way (``skein export``), and
``skein verify`` clean after each; the database's export imports into a
fresh one.

The rules the rows check, in DESIGN.md's words:

- the landing rule: extend the head; branch when the start point heads
  nothing or the head moved under the turn (the loser of a race becomes a
  branch with its origin recorded); create a conversation only once its
  first turn has succeeded;
- the failure rule: a failed model call stores its input messages and a
  failed run pointing at them, in one transaction, and moves nothing;
  ``verify`` is clean after any failure;
- a conversation name that could be read as an id is refused when set.

A graph names each node by its thread (``u:one / a:scripted: one``; a tool
call ``a:call NAME``, a tool result ``t:result``), each conversation by its
head and its origin, each run by its status, conversation, input and
output: the Rust table's names.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import skein

SCRIPT = Path(__file__).resolve().parents[2] / "skein-cli/tests/data/conformance.toml"
SCRIPTED = f"scripted:{SCRIPT}"
OTHER = f"scripted:{SCRIPT.with_name('conformance-other.toml')}"

Origin = tuple[str | None, str | None] | None
ConversationShape = tuple[str | None, Origin]
RunShape = tuple[str, str | None, str | None, str | None]


@dataclass
class Graph:
    """What a scenario left: conversations, runs and nodes, by name."""

    conversations: set[ConversationShape] = field(default_factory=set)
    runs: list[RunShape] = field(default_factory=list)
    nodes: set[str] = field(default_factory=set)

    def conversation(self, head: str, origin: Origin = None) -> Graph:
        self._thread(head)
        self.conversations.add((head, origin))
        return self

    def branch(self, head: str, at: str, of: str) -> Graph:
        return self.conversation(head, (at, of))

    def ran(self, of: str, input: str, output: str) -> Graph:
        self._thread(output)
        self.runs = sorted([*self.runs, ("succeeded", of, input, output)], key=str)
        return self

    def failed(self, of: str | None, input: str) -> Graph:
        self._thread(input)
        self.runs = sorted([*self.runs, ("failed", of, input, None)], key=str)
        return self

    def _thread(self, head: str) -> None:
        messages = head.split(" / ")
        self.nodes.update(" / ".join(messages[:end]) for end in range(1, len(messages) + 1))


@dataclass
class Place:
    """A fresh database, the ``skein`` binary on it and the scripted model."""

    binary: str
    db: Path
    config: Path

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [self.binary, "--db", str(self.db), *args],
            capture_output=True,
            text=True,
            env={**os.environ, "SKEIN_MODEL": "echo", "SKEIN_CONFIG": str(self.config)},
            check=False,
        )

    def ok(self, *args: str) -> str:
        done = self.run(*args)
        assert done.returncode == 0, done.stderr
        return done.stdout

    def json(self, *args: str) -> Any:
        return json.loads(self.ok("--json", *args))

    def setup(self, texts: list[str], tools: bool = False) -> Setup:
        """A conversation whose turns are ``texts``, made by the CLI."""
        offered = ["-T", "skein_version"] if tools else []
        first = self.json("prompt", "-m", SCRIPTED, *offered, texts[0])
        head = first["node"]
        for text in texts[1:]:
            head = self.json("prompt", "--cid", first["conversation"], text)["node"]
        return Setup(first["conversation"], first["node"], head)

    def store(self) -> skein.Store:
        return skein.Store(self.db)

    def model(self) -> skein.Model:
        return skein.Model(SCRIPTED, store=self.store())

    def graph(self) -> Graph:
        records = [json.loads(line) for line in self.ok("export").splitlines()]
        nodes = {r["id"]: r for r in records if r["kind"] == "node"}

        def name(node: str | None) -> str | None:
            messages = []
            while node is not None:
                record = nodes[node]
                messages.append(f"{record['role'][0]}:{'|'.join(part(p) for p in record['parts'])}")
                node = record["parent"]
            return " / ".join(reversed(messages)) if messages else None

        conversations = [r for r in records if r["kind"] == "conversation"]
        heads = {c["id"]: name(c["head"]) for c in conversations}
        graph = Graph(nodes={n for n in (name(node) for node in nodes) if n})
        for c in conversations:
            origin = c["origin"]
            if origin is not None:
                origin = (name(origin["node"]), heads.get(origin["conversation"]))
            graph.conversations.add((heads[c["id"]], origin))
        runs = [r for r in records if r["kind"] == "run"]
        graph.runs = sorted(
            (
                (
                    r["status"],
                    heads.get(r["conversation"]) if r["conversation"] else None,
                    name(r["input_head"]),
                    name(r["output_head"]),
                )
                for r in runs
            ),
            key=str,
        )
        return graph


def part(part: dict[str, Any]) -> str:
    kind: str = part["type"]
    if kind == "text":
        text: str = part["text"]
        return text
    if kind == "tool_call":
        return f"call {part.get('name', '?')}"
    if kind == "tool_result":
        return "result"
    return kind


@dataclass
class Setup:
    conversation: str
    first: str
    head: str


def skein_version() -> str:
    """Return the version of skein that is running"""
    return "0.1.0"


ONE = "u:one / a:scripted: one"
OTHER_TWO = f"{ONE} / u:two / a:other: two"
EDITED = "u:edited / a:scripted: edited"


def first_turn(place: Place) -> None:
    place.model().conversation().prompt("one").text()


def continuation(place: Place) -> None:
    setup = place.setup(["one"])
    skein.Conversation.load(place.store(), setup.conversation).prompt("two").text()


def inner_reply(place: Place) -> None:
    setup = place.setup(["one", "two"])
    reply = skein.Conversation.fork_at(place.store(), setup.first, "three")
    assert isinstance(reply, skein.Response)
    reply.text()


def fork(place: Place) -> None:
    setup = place.setup(["one"])
    forked = skein.Conversation.fork_at(place.store(), setup.head, "forked")
    assert isinstance(forked, skein.Response)
    forked.text()


def fork_at_another_models_reply(place: Place) -> None:
    setup = place.setup(["one"])
    two = place.json("prompt", "--cid", setup.conversation, "-m", OTHER, "two")["node"]
    forked = skein.Conversation.fork_at(place.store(), two, "forked")
    assert isinstance(forked, skein.Response)
    assert forked.text() == "other: forked", "the fork runs on the model that gave the reply"


def first_message(place: Place, setup: Setup) -> str:
    return skein.Conversation.load(place.store(), setup.conversation).messages()[0].id


def edit_first(place: Place) -> None:
    setup = place.setup(["one"])
    skein.Conversation.again_at(place.store(), first_message(place, setup), "edited").text()


def retry_first(place: Place) -> None:
    setup = place.setup(["one"])
    skein.Conversation.again_at(place.store(), first_message(place, setup)).text()
    assert skein.Conversation.load(place.store(), setup.conversation).head == setup.head


def race(place: Place) -> None:
    setup = place.setup(["one"])
    late = skein.Conversation.load(place.store(), setup.conversation)
    early = skein.Conversation.load(place.store(), setup.conversation)
    early.prompt("fast").text()
    late.prompt("slow").text()
    # The late handle followed its turn into the branch it landed in.
    assert late.id != setup.conversation
    assert early.id == setup.conversation


def failed_call(place: Place) -> None:
    setup = place.setup(["one"])
    with pytest.raises(skein.ModelError, match="the model is down"):
        skein.Conversation.load(place.store(), setup.conversation).prompt("please fail").text()
    assert_found(place, "please fail")


SCHEMA = {"type": "object", "required": ["answer"]}


def schema_exhausted(place: Place) -> None:
    setup = place.setup(["one"])
    with pytest.raises(skein.SchemaError):
        skein.Conversation.load(place.store(), setup.conversation).prompt("shaped", schema=SCHEMA).text()
    assert_found(place, "shaped")


def failed_first_turn(place: Place) -> None:
    with pytest.raises(skein.ModelError, match="the model is down"):
        place.model().conversation().prompt("please fail").text()
    assert_found(place, "please fail")


def failed_fork(place: Place) -> None:
    setup = place.setup(["one"])
    with pytest.raises(skein.ModelError, match="the model is down"):
        forked = skein.Conversation.fork_at(place.store(), setup.head, "please fail")
        assert isinstance(forked, skein.Response)
        forked.text()
    assert_found(place, "please fail")


def id_like_name(place: Place) -> None:
    place.setup(["one"])
    for name in ["0123abcd", "0123456789abcdef0123456789abcdef"]:
        with pytest.raises(skein.NameLooksLikeId):
            place.model().conversation(name=name).prompt("named").text()


def tool_loop(place: Place) -> None:
    setup = place.setup(["one"], tools=True)
    tools = [skein.Tool.function(skein_version)]
    loaded = skein.Conversation.load(place.store(), setup.conversation, tools=tools)
    with pytest.raises(skein.ModelError, match="the model is down after the tool") as raised:
        loaded.chain("loop").text()
    assert raised.value.completed == 1


def assert_found(place: Place, text: str) -> None:
    """``skein search`` finds what the user sent to a failed call."""
    found = place.store().search(text)
    assert [match["role"] for match in found["matches"]] == ["user"], found


def expect_race() -> Graph:
    main = f"{ONE} / u:fast / a:scripted: fast"
    lost = f"{ONE} / u:slow / a:scripted: slow"
    return (
        Graph()
        .conversation(main)
        .branch(lost, ONE, main)
        .ran(main, "u:one", ONE)
        .ran(main, f"{ONE} / u:fast", main)
        .ran(lost, f"{ONE} / u:slow", lost)
    )


def expect_tool_loop() -> Graph:
    called = f"{ONE} / u:loop / a:call skein_version"
    result = f"{called} / t:result"
    return (
        Graph()
        .conversation(result)
        .ran(result, "u:one", ONE)
        .ran(result, f"{ONE} / u:loop", called)
        .failed(result, result)
    )


@dataclass
class Row:
    """A scenario, how it runs on Python and the graph it must leave; or,
    for a turn Python has no way to make, why."""

    name: str
    run: Callable[[Place], None] | None
    expect: Callable[[], Graph]
    lacks: str | None = None


def one_turn() -> Graph:
    return Graph().conversation(ONE).ran(ONE, "u:one", ONE)


def two_turns() -> Graph:
    two = f"{ONE} / u:two / a:scripted: two"
    return Graph().conversation(two).ran(two, "u:one", ONE).ran(two, f"{ONE} / u:two", two)


def inner_branch() -> Graph:
    main = f"{ONE} / u:two / a:scripted: two"
    branch = f"{ONE} / u:three / a:scripted: three"
    return (
        Graph()
        .conversation(main)
        .branch(branch, ONE, main)
        .ran(main, "u:one", ONE)
        .ran(main, f"{ONE} / u:two", main)
        .ran(branch, f"{ONE} / u:three", branch)
    )


def forked() -> Graph:
    fork = f"{ONE} / u:forked / a:scripted: forked"
    return (
        Graph()
        .conversation(ONE)
        .branch(fork, ONE, ONE)
        .ran(ONE, "u:one", ONE)
        .ran(fork, f"{ONE} / u:forked", fork)
    )


ROWS = [
    Row("a first turn", first_turn, one_turn),
    Row("a continuation", continuation, two_turns),
    Row(
        "a reply at a conversation's head",
        None,
        two_turns,
        lacks="no reply at a stored node: at a head, Python loads its conversation (the continuation row)",
    ),
    Row("a reply at an inner node", inner_reply, inner_branch),
    Row("a fork", fork, forked),
    Row(
        "a fork at a reply another model gave",
        fork_at_another_models_reply,
        lambda: (
            Graph()
            .conversation(OTHER_TWO)
            .branch(f"{OTHER_TWO} / u:forked / a:other: forked", OTHER_TWO, OTHER_TWO)
            .ran(OTHER_TWO, "u:one", ONE)
            .ran(OTHER_TWO, f"{ONE} / u:two", OTHER_TWO)
            .ran(
                f"{OTHER_TWO} / u:forked / a:other: forked",
                f"{OTHER_TWO} / u:forked",
                f"{OTHER_TWO} / u:forked / a:other: forked",
            )
        ),
    ),
    Row(
        "an explanation of a reply a fork stands at",
        None,
        one_turn,
        lacks="a recorded chat is loaded by its conversation's id (RecordedChat.load), never by a node",
    ),
    Row(
        "an edit of a thread's first message",
        edit_first,
        lambda: one_turn()
        .conversation(EDITED, (None, ONE))
        .ran(EDITED, "u:edited", EDITED),
    ),
    Row(
        "a retry of a thread's first message",
        retry_first,
        lambda: one_turn().branch(ONE, "u:one", ONE).ran(ONE, "u:one", ONE),
    ),
    Row("a race at one head", race, expect_race),
    Row(
        "a failed model call",
        failed_call,
        lambda: one_turn().failed(ONE, f"{ONE} / u:please fail"),
    ),
    Row(
        "a reply that never matches its schema",
        schema_exhausted,
        lambda: one_turn().failed(ONE, f"{ONE} / u:shaped"),
    ),
    Row("a failed first turn", failed_first_turn, lambda: Graph().failed(None, "u:please fail")),
    Row(
        "a failed first turn of a fork",
        failed_fork,
        lambda: one_turn().failed(None, f"{ONE} / u:please fail"),
    ),
    Row("a name that looks like an id", id_like_name, one_turn),
    Row("a tool loop whose second call fails", tool_loop, expect_tool_loop),
]


def marks(row: Row) -> list[pytest.MarkDecorator]:
    """A row without such a turn is skipped saying why."""
    if row.lacks is not None:
        return [pytest.mark.skip(reason=f"no such turn: {row.lacks}")]
    return []


@pytest.mark.parametrize(
    "row",
    [pytest.param(row, id=row.name, marks=marks(row)) for row in ROWS],
)
def test_the_python_surface_conforms(row: Row, skein_bin: str, tmp_path: Path) -> None:
    place = Place(skein_bin, tmp_path / "skein.db", tmp_path / "config.toml")
    assert row.run is not None
    row.run(place)
    assert place.graph() == row.expect()
    place.ok("verify")
    export = tmp_path / "export.jsonl"
    export.write_text(place.ok("export"))
    fresh = Place(skein_bin, tmp_path / "fresh.db", place.config)
    fresh.ok("import", str(export))
    fresh.ok("verify")
    assert fresh.ok("export") == export.read_text()
