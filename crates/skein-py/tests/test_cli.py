"""Python and the command line on the same database: a conversation started
in Python continues with `skein prompt --cid`, one started by the command
line continues in Python, and a rerun made in Python forks with `skein
fork --from-rerun`."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

import skein

from .test_recorded import SOURCES, SYSTEM, decision_changed


def cli(binary: str, db: Path, *args: str) -> dict[str, Any]:
    """Run `skein --db DB --json ARGS` and return its JSON record."""
    done = subprocess.run(
        [binary, "--db", str(db), "--json", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "SKEIN_MODEL": "echo"},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    record: dict[str, Any] = json.loads(done.stdout)
    return record


def test_a_conversation_started_in_python_continues_on_the_command_line(
    skein_bin: str, db: Path, store: skein.Store
) -> None:
    model = skein.Model("echo", store=store)
    conversation = model.conversation(name="from python")
    first = conversation.prompt("started in Python")
    first.text()

    record = cli(skein_bin, db, "prompt", "--cid", conversation.id, "continued by the CLI")
    assert record["conversation"] == conversation.id
    assert "history: 3 messages" in record["text"]

    loaded = skein.Conversation.load(store, "from python")
    assert loaded.head == record["node"]
    assert [m.text for m in loaded.messages()][::2] == ["started in Python", "continued by the CLI"]
    assert loaded.messages()[1].id == first.id
    # And back to Python, then the CLI again, by name.
    assert "history: 5 messages" in loaded.prompt("back in Python").text()
    record = cli(skein_bin, db, "prompt", "--cid", "from python", "and the CLI again")
    assert "history: 7 messages" in record["text"]


def test_a_conversation_started_on_the_command_line_continues_in_python(
    skein_bin: str, db: Path, store: skein.Store
) -> None:
    record = cli(skein_bin, db, "prompt", "-m", "echo", "--name", "from cli", "-T", "skein_version", "hello")
    conversation = skein.Conversation.load(store, "from cli")
    assert conversation.id == record["conversation"]
    assert conversation.model == "echo"
    # The built-in tool the CLI offered is restored by name.
    assert [spec.name for spec in conversation.tools] == ["skein_version"]
    response = conversation.prompt("from Python")
    assert "tools: 1" in response.text()
    assert response.messages()[1].id == record["node"]
    again = cli(skein_bin, db, "prompt", "--cid", record["conversation"], "CLI after Python")
    assert "history: 5 messages" in again["text"]


def test_a_rerun_made_in_python_forks_on_the_command_line(
    skein_bin: str, db: Path, store: skein.Store, advisor_model_name: str
) -> None:
    chat = skein.RecordedChat(advisor_model_name, system=SYSTEM, sources=SOURCES, store=store)
    chat.send("How is the position looking?")
    chat.send("Should we BUY or HOLD this position?")
    rerun = chat.rerun_turn(1, ignore=["social-sentiment"], samples=2, baseline=True, comparator=decision_changed)
    assert rerun.verdict == "confirmed"
    record = cli(skein_bin, db, "fork", "--from-rerun", rerun.id, "How much should we allocate?")
    assert record["text"].startswith("KEEP")
    # The command line's fork loads in Python as a recorded chat.
    fork = skein.RecordedChat.load(store, record["conversation"])
    assert fork.removed == ["social-sentiment"]
    assert fork.turns[-1].text.startswith("KEEP")


def test_usage_totals_are_the_command_line_s(skein_bin: str, db: Path, store: skein.Store) -> None:
    model = skein.Model("echo", store=store)
    first = model.conversation(name="counted").prompt("one")
    first.text()
    fork = first.fork("two")
    assert isinstance(fork, skein.Response)
    fork.text()

    conversation = store.usage(conversation="counted")
    on_the_command_line = cli(skein_bin, db, "usage", "--cid", "counted")
    assert conversation["runs"] == on_the_command_line["runs"]
    for figure in ("input_tokens", "output_tokens"):
        assert conversation[figure]["value"] == on_the_command_line[figure]["value"]
    family = store.usage(family=fork.conversation.id)
    # The fork's family counts the shared first turn once.
    assert len(family["runs"]) == 2
    assert family["input_tokens"]["value"] == (first.usage.input_tokens or 0) + (
        fork.usage.input_tokens or 0
    )
    assert family["input_tokens"]["missing_from"] == []
    assert store.usage(node=fork.id)["runs"] == store.usage(run=fork.run_id)["runs"]
    assert store.usage(sequence="no such sequence")["runs"] == []
    # Cost: echo runs on this machine, so it costs exactly nothing (a
    # whole cost, nothing unpriced); priced by the caller, the shared first
    # run is paid for once.
    free = store.usage(family=fork.conversation.id)["cost"]
    assert free["dollars"] == 0 and free["unpriced"] == [] and free["unmeasured"] == []
    assert all(model["source"] == "local" for model in free["by_model"])
    priced = store.usage(family=fork.conversation.id, prices={"echo": {"input": 1.0, "output": 2.0}})
    expected = sum(
        ((r.usage.input_tokens or 0) + 2 * (r.usage.output_tokens or 0)) / 1e6 for r in (first, fork)
    )
    assert abs(priced["cost"]["dollars"] - expected) < 1e-12
    assert priced["cost"]["unpriced"] == [] and priced["cost"]["unmeasured"] == []
    assert priced["cache_hit_rate"] == 0.0
    misspelt: Any = {"echo": {"inptu": 1.0, "output": 1.0}}
    with pytest.raises(ValueError, match="prices="):
        store.usage(run=fork.run_id, prices=misspelt)

    with pytest.raises(TypeError, match="exactly one of"):
        store.usage()
    with pytest.raises(TypeError, match="exactly one of"):
        store.usage(conversation="counted", node=fork.id)
    with pytest.raises(skein.NotFound):
        store.usage(conversation="nobody")
