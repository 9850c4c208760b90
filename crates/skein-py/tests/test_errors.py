"""Typed exceptions mirroring the Rust error enums, each keeping the whole
message (the provider's own included)."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

import skein


def test_an_unknown_model_name_suggests_the_one_meant() -> None:
    with pytest.raises(skein.UnknownModel, match="openai:gpt-4o") as raised:
        skein.Model("gpt-4o")
    assert isinstance(raised.value, ValueError)
    with pytest.raises(skein.ModelUnavailable, match="GGUF"):
        skein.Model("local:/nonexistent/model.gguf")


def test_a_failed_model_call_raises_model_error_with_the_providers_message(
    tools_model: skein.Model, store: skein.Store
) -> None:
    model = skein.Model(tools_model.name, store=store)
    response = model.prompt("fail please")
    with pytest.raises(skein.ModelError, match="upstream overloaded, try later") as raised:
        response.text()
    error = raised.value
    assert isinstance(error, skein.EngineError) and isinstance(error, skein.SkeinError)
    assert (error.kind, error.status) == ("server", 503)
    assert error.provider_message == "upstream overloaded, try later"
    assert error.run_id
    # Reading it again raises the same error, without calling the model again.
    with pytest.raises(skein.ModelError):
        list(response)


def test_a_chain_that_fails_says_how_many_calls_it_kept(tools_model: skein.Model) -> None:
    def add(a: int, b: int) -> int:
        """Add."""
        return a + b

    first = tools_model.chain("please add", tools=[add])
    first.text()
    with pytest.raises(skein.ModelError) as raised:
        first.reply("fail please").text()
    assert raised.value.completed is None
    with pytest.raises(skein.ModelError):
        tools_model.conversation().chain("fail please").text()


def test_a_lost_race_lands_in_a_branch_and_the_handle_follows(store: skein.Store) -> None:
    """The landing rule: a turn whose conversation another writer moved on
    lands in a branch at the head it started from, and the handle follows
    it there; nothing is lost and nothing raises."""
    model = skein.Model("echo", store=store)
    first = model.prompt("start")
    first.text()
    conversation_id = first.conversation.id
    one = skein.Conversation.load(store, conversation_id)
    two = skein.Conversation.load(store, conversation_id)
    one.prompt("one wins").text()
    lost = two.prompt("two loses")
    assert "two loses" in lost.text()
    assert two.id != conversation_id
    assert lost.conversation.id == two.id
    assert one.id == conversation_id
    then = two.prompt("and goes on")
    then.text()
    assert then.conversation.id == two.id
    asked = [message.text for message in two.messages() if message.role == "user"]
    assert asked == ["start", "two loses", "and goes on"]
    assert [message.text for message in one.messages() if message.role == "user"] == [
        "start",
        "one wins",
    ]


def test_lookups_that_find_nothing_are_not_found(store: skein.Store) -> None:
    with pytest.raises(skein.NotFound, match="no conversation"):
        skein.Conversation.load(store, "no such conversation")
    with pytest.raises(LookupError):
        skein.Conversation.fork_at(store, "abcdef")


def test_a_file_that_is_not_a_skein_database_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("not a database")
    with pytest.raises(skein.StoreError, match="not"):
        skein.Store(path)
    assert path.read_text() == "not a database"


def test_a_stored_tool_that_is_not_given_is_unknown_tool(store: skein.Store, echo: skein.Model) -> None:
    def secret(x: str) -> str:
        """Secret."""
        return x

    model = skein.Model("echo", store=store)
    conversation = model.conversation(tools=[secret], name="with tools")
    conversation.prompt("hi").text()
    with pytest.raises(skein.UnknownTool, match="secret") as raised:
        skein.Conversation.load(store, "with tools")
    assert raised.value.tool == "secret"
    loaded = skein.Conversation.load(store, "with tools", tools=[secret])
    assert [spec.name for spec in loaded.tools] == ["secret"]


def test_an_invalid_output_schema_is_an_engine_error(echo: skein.Model) -> None:
    with pytest.raises(skein.EngineError, match="JSON Schema"):
        echo.prompt("x", schema={"type": "no such type"}).text()


def test_a_taken_name_is_refused_before_anything_runs(db: Path, store: skein.Store) -> None:
    model = skein.Model("echo", store=store)
    first = model.conversation(name="planning")
    reply = first.prompt("hello")
    reply.text()
    assert first.head is not None
    with pytest.raises(skein.NameTaken, match="is already named `planning`") as raised:
        model.conversation(name="planning")
    assert isinstance(raised.value, ValueError) and isinstance(raised.value, skein.StoreError)
    assert raised.value.name == "planning"
    assert raised.value.conversation_id == first.id
    with pytest.raises(skein.NameTaken):
        first.fork(name="planning")
    with pytest.raises(skein.NameTaken):
        reply.fork("again", name="planning")
    with pytest.raises(skein.NameTaken):
        skein.Conversation.fork_at(store, first.head, "again", name="planning")
    with pytest.raises(skein.NameTaken):
        skein.Model("echo").conversation(name="planning", store=store)
    with sqlite3.connect(db) as rows:
        assert rows.execute("SELECT count(*) FROM conversations").fetchone() == (1,)
        assert rows.execute("SELECT count(*) FROM runs").fetchone() == (1,)
    assert skein.Conversation.load(store, "planning").id == first.id


def test_a_name_that_reads_as_an_id_is_refused_and_an_id_wins(db: Path, store: skein.Store) -> None:
    model = skein.Model("echo", store=store)
    victim = model.conversation(name="victim")
    victim.prompt("hello").text()
    assert victim.head is not None
    for name in ("0123abcd", "CAFE", victim.id, victim.id[:12]):
        with pytest.raises(skein.NameLooksLikeId, match="cannot look like an id") as raised:
            model.conversation(name=name)
        assert isinstance(raised.value, ValueError) and isinstance(raised.value, skein.StoreError)
        with pytest.raises(skein.NameLooksLikeId):
            victim.fork(name=name)
        with pytest.raises(skein.NameLooksLikeId):
            skein.Conversation.fork_at(store, victim.head, "evil", name=name)
    # Nothing was stored: the victim is still the only conversation, with its one run.
    with sqlite3.connect(db) as rows:
        assert rows.execute("SELECT count(*) FROM conversations").fetchone() == (1,)
        assert rows.execute("SELECT count(*) FROM runs").fetchone() == (1,)
    assert skein.Conversation.load(store, victim.id[:12]).id == victim.id
    assert skein.Conversation.load(store, "victim").id == victim.id


def test_the_default_model_comes_from_the_configuration_file(tmp_path: Path) -> None:
    """Without SKEIN_MODEL, Python's default model is the configuration
    file's `default_model`, as on the command line (a fresh process: the
    file is read once per process): a fork at a message no conversation's
    turn produced opens it (one at a reply would open that conversation's
    own model)."""
    config = tmp_path / "config.toml"
    config.write_text('default_model = "no-such-model-xyz"\n')
    script = (
        "import skein, sys\n"
        "store = skein.Store(sys.argv[1])\n"
        "try:\n"
        "    first = skein.Model('echo', store=store).prompt('hello')\n"
        "    first.text()\n"
        "    asked = first.messages()[0].id\n"
        "    skein.Conversation.fork_at(store, asked)\n"
        "except skein.SkeinError as error:\n"
        "    print(type(error).__name__, error)\n"
    )
    env = {key: value for key, value in os.environ.items() if key != "SKEIN_MODEL"}
    env["SKEIN_CONFIG"] = str(config)
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "skein.db")],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "no-such-model-xyz" in done.stdout, done.stdout
    config.write_text("default_modle = 1\n")
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "other.db")],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "config.toml" in done.stdout and "default_modle" in done.stdout, done.stdout
