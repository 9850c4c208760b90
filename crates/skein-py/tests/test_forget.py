"""Deleting, erasing and collecting from Python (Store.delete, Store.redact,
Store.gc): the same store operations `skein delete`, `skein redact` and
`skein gc` run, with the same reports; an erased message shows as a typed
tombstone, never as its old text."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

import skein


def test_delete_keeps_what_a_fork_shares_and_a_dry_run_changes_nothing(store: skein.Store) -> None:
    model = skein.Model("echo", store=store)
    first = model.conversation(name="kept").prompt("one")
    first.text()
    doomed = first.fork("another question", name="doomed")
    assert isinstance(doomed, skein.Response)
    doomed.text()

    plan = store.delete("doomed", dry_run=True)
    assert plan["dry_run"] is True
    assert plan["conversations"] == [doomed.conversation.id]
    assert plan["messages"] == 2
    assert plan["kept_messages"] == 2
    assert [sharer["name"] for sharer in plan["shared_with"]] == ["kept"]
    # Nothing changed: the conversation still loads.
    assert len(skein.Conversation.load(store, "doomed").messages()) == 4

    done = store.delete(doomed.conversation.id[:10])
    assert done["dry_run"] is False
    assert done["messages"] == 2
    assert [sharer["name"] for sharer in done["shared_with"]] == ["kept"]
    with pytest.raises(skein.NotFound):
        skein.Conversation.load(store, "doomed")
    assert [m.id for m in skein.Conversation.load(store, "kept").messages()] == [
        m.id for m in first.messages()
    ]


def test_delete_refuses_an_empty_or_mixed_selection_and_a_bad_age(store: skein.Store) -> None:
    skein.Model("echo", store=store).conversation(name="only").prompt("one").text()
    with pytest.raises(TypeError):
        store.delete()
    with pytest.raises(TypeError):
        store.delete("only", family="only")
    with pytest.raises(ValueError, match="neither an age"):
        store.delete(older_than="30x")
    with pytest.raises(ValueError, match="did you mean `2min` or `2mo`"):
        store.delete(older_than="2m")
    with pytest.raises(skein.NotFound):
        store.delete("nobody")
    assert store.delete(older_than="1d")["conversations"] == []
    assert store.delete(proxy=True)["conversations"] == []
    assert len(skein.Conversation.load(store, "only").messages()) == 2


def test_delete_by_proxy_client_takes_only_that_clients_conversations(
    skein_bin: str, db: Path, store: skein.Store
) -> None:
    skein.Model("echo", store=store).conversation(name="mine").prompt("not proxied").text()
    server = subprocess.Popen(
        [skein_bin, "--db", str(db), "serve", "--proxy", "-m", "echo", "--bind", "127.0.0.1:0"],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stderr is not None
        port = None
        for line in server.stderr:
            found = re.search(r"serving the graph on http://[^/]*:(\d+)/", line)
            if found:
                port = int(found.group(1))
                break
        assert port, "the proxy did not start"
        for client in ("app-a", "app-b"):
            request = urllib.request.Request(
                f"http://127.0.0.1:{port}/v1/chat/completions",
                data=json.dumps({"model": "echo", "messages": [{"role": "user", "content": f"from {client}"}]}).encode(),
                headers={"Content-Type": "application/json", "x-skein-client": client},
            )
            with urllib.request.urlopen(request, timeout=30) as response:
                assert response.status == 200
    finally:
        server.terminate()
        server.wait(timeout=30)

    plan = store.delete(client="app-a", dry_run=True)
    assert len(plan["conversations"]) == 1
    assert store.delete(client="nobody")["conversations"] == []
    done = store.delete(client="app-a")
    assert done["conversations"] == plan["conversations"]
    assert store.delete(client="app-a", dry_run=True)["conversations"] == []
    assert len(store.delete(client="app-b", dry_run=True)["conversations"]) == 1
    assert len(skein.Conversation.load(store, "mine").messages()) == 2
    with pytest.raises(TypeError):
        store.delete("mine", client="app-a")


def test_redact_shows_a_tombstone_keeps_ids_and_refuses_a_turn_resending_it(store: skein.Store) -> None:
    model = skein.Model("echo", store=store)
    first = model.conversation(name="secret").prompt("my password is hunter2")
    first.text()
    secret = first.messages()[0]
    ids = [m.id for m in first.messages()]

    report = store.redact(secret.id[:12], reason="pasted a secret", by="ana")
    assert report["node"] == secret.id
    assert report["parts"] == 1
    # Copies outside the graph are named by place: a named conversation has
    # no title made from the prompt, and its run's events are the reply's.
    assert report["copies"] == []

    loaded = skein.Conversation.load(store, "secret").messages()
    assert [m.id for m in loaded] == ids
    erased = loaded[0]
    assert erased.is_erased
    assert "hunter2" not in erased.text
    assert "hunter2" not in repr(erased)
    [tombstone] = erased.erased
    assert isinstance(tombstone, skein.Erased)
    assert tombstone.index == 0
    assert tombstone.kind == "text"
    assert tombstone.erased_by == "ana"
    assert tombstone.reason == "pasted a secret"
    assert len(tombstone.digest) == 64
    assert tombstone.erased_at_ms > 0
    assert (tombstone.call_id, tombstone.tool_name, tombstone.media_type) == (None, None, None)
    assert not loaded[1].is_erased
    assert loaded[1].erased == []

    with pytest.raises(skein.SkeinError, match="erased_placeholder"):
        skein.Conversation.load(store, "secret").prompt("go on").text()
    with pytest.raises(skein.NotFound):
        store.redact("ffffffffffff", reason="nothing there")


def test_gc_collects_applies_retention_and_rewrites_the_file(
    tmp_path: Path, db: Path, skein_bin: str
) -> None:
    # [retention] is read from the configuration file: run in a process
    # whose SKEIN_CONFIG names one that deletes everything.
    config = tmp_path / "config.toml"
    config.write_text('[retention]\nolder_than = "0min"\n')
    store = skein.Store(db)
    skein.Model("echo", store=store).conversation(name="old").prompt("remember hunter2").text()
    # The rewrite needs the file to itself: no other open store.
    del store
    script = (
        "import json, sys, skein\n"
        "store = skein.Store(sys.argv[1])\n"
        "print(json.dumps([store.gc(dry_run=True), store.gc()]))\n"
    )
    env = {**os.environ, "SKEIN_CONFIG": str(config)}
    output = subprocess.run(
        [sys.executable, "-c", script, str(db)], env=env, capture_output=True, text=True, check=True
    )
    plan, done = json.loads(output.stdout)
    [(rule, planned)] = plan["retention"]
    assert rule == 'older_than = "0min"'
    assert planned["dry_run"] is True and len(planned["conversations"]) == 1
    [(_, deleted)] = done["retention"]
    assert deleted["messages"] == 2
    assert done["collected"]["messages"] == 0
    with pytest.raises(skein.NotFound):
        skein.Conversation.load(skein.Store(db), "old")
    verified = subprocess.run([skein_bin, "--db", str(db), "verify"], capture_output=True, text=True)
    assert verified.returncode == 0, verified.stderr
