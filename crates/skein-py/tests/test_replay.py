"""Store.replay and labels: recorded turns replayed on another model with
tool calls answered from the recording (the tool never runs again), each
judged with the comparator that decided and why, with what each side cost
("at least" where a price is missing); labels select turns for a replay and
are listed; an empty selection is refused; a source replaced in the
re-sent request, everything else as recorded."""

from __future__ import annotations

from pathlib import Path

import pytest

import skein


def test_a_replay_answers_tools_from_the_recording_and_labels_select_turns(
    store: skein.Store, tools_model_name: str
) -> None:
    calls: list[tuple[int, int]] = []

    def add(a: int, b: int) -> int:
        """Add."""
        calls.append((a, b))
        return a + b

    model = skein.Model(tools_model_name, store=store)
    conversation = model.conversation(tools=[add])
    assert conversation.chain("please add").text() == "result: 5"
    assert conversation.chain("hello there").text() == "plain: hello there"
    assert calls == [(2, 3)]

    # The same model with another system prompt: the call is answered from
    # the recording, both answers hold.
    held = store.replay(
        tools_model_name, conversations=[conversation.id], system="Be brief."
    )
    assert calls == [(2, 3)], "no tool ran in the replay"
    assert held["totals"]["held"] == 2
    assert [turn["result"] for turn in held["turns"]] == ["held", "held"]
    assert held["turns"][0]["answer"] == "result: 5"
    assert len(held["turns"][0]["runs"]) == 2, "the call, then the answer"

    # On echo, judged exactly: both changed, and the report says why.
    changed = store.replay(
        "echo",
        conversations=[conversation.id],
        compare=["exact"],
        prices={"echo": {"input": 1.0, "output": 2.0}},
    )
    assert [turn["result"] for turn in changed["turns"]] == ["changed", "changed"]
    assert all(turn["comparator"] == "exact" for turn in changed["turns"])
    assert all(turn["why"] for turn in changed["turns"])
    assert changed["turns"][1]["original"] == "plain: hello there"

    # What each side cost: the replay on priced echo is whole; the original
    # ran on a scripted model, which runs on this machine: exactly zero,
    # and whole too.
    for turn in changed["turns"]:
        usage = turn["usage"]
        assert usage is not None and turn["cost"] is not None
        expected = (usage["input_tokens"] + 2 * usage["output_tokens"]) / 1e6
        assert expected > 0
        assert abs(turn["cost"]["dollars"] - expected) < 1e-12
        assert turn["cost"]["complete"] is True
        original = turn["original_cost"]
        assert original is not None
        assert original["complete"] is True and original["dollars"] == 0
        assert original["unpriced_runs"] == [] and original["unmeasured_runs"] == []
    cost = changed["cost"]
    replayed = sum(turn["cost"]["dollars"] for turn in changed["turns"] if turn["cost"])
    assert abs(cost["replay"]["dollars"] - replayed) < 1e-12
    assert abs(cost["delta"] - replayed) < 1e-12
    assert cost["complete"] is True
    assert changed["selected"] == 2
    # The report says what changed and which questions were re-sent.
    assert changed["changes"][0].endswith("→ echo"), changed["changes"]
    assert changed["state"] == "finished"
    assert [turn["question"] for turn in changed["turns"]][1] == "hello there"

    # A label selects the turns it is on.
    second = changed["turns"][1]["turn_node"]
    assert store.label("keep", [second[:12]]) == 1
    assert store.label("keep", [second]) == 0
    assert store.labels() == [{"name": "keep", "nodes": 1}]
    assert store.labels("keep") == [second]
    labelled = store.replay(tools_model_name, labels=["keep"])
    assert [turn["turn_node"] for turn in labelled["turns"]] == [second]
    assert store.unlabel("keep", [second]) == 1
    with pytest.raises(skein.RecordedChatError):
        store.replay(tools_model_name, labels=["keep"])

    # A replay's turns, labelled in one go: those of a result, or all.
    turns = sorted(turn["turn_node"] for turn in changed["turns"])
    assert store.label("regressed", replay=changed["replay"][:8], results=["changed"]) == 2
    assert sorted(map(str, store.labels("regressed"))) == turns
    assert store.label("steady", replay=changed["replay"], results=["held"]) == 0
    assert store.unlabel("regressed", [turns[0]], replay=changed["replay"]) == 2
    assert store.labels("regressed") == []
    with pytest.raises(ValueError, match="no result"):
        store.label("x", replay=changed["replay"], results=["better"])
    with pytest.raises(TypeError, match="replay="):
        store.label("x", results=["changed"])


def test_a_replay_replaces_a_source_and_sends_everything_else_as_recorded(
    store: skein.Store, tmp_path: Path
) -> None:
    rules = tmp_path / "hotel.toml"
    rules.write_text(
        '[[rules]]\nany_contains = "Ritz"\nreply = "Sleep at the Ritz."\n\n'
        '[[rules]]\nany_contains = "Lutetia"\nreply = "Sleep at the Lutetia."\n'
    )
    model = f"scripted:{rules}"
    chat = skein.RecordedChat(
        model,
        system="You help travellers.",
        sources=[
            skein.Source.fact("hotel", "The hotel is the Lutetia."),
            skein.Source.fact("budget", "The budget is 200 euros."),
        ],
        store=store,
    )
    assert chat.send("Where do I sleep?").text == "Sleep at the Lutetia."
    assert chat.conversation_id is not None

    report = store.replay(
        model,
        conversations=[chat.conversation_id],
        replace_sources={"hotel": "The hotel is the Ritz."},
    )
    assert report["change"]["replace_sources"] == {"hotel": "The hotel is the Ritz."}
    [turn] = report["turns"]
    assert turn["result"] == "changed", turn
    assert turn["answer"] == "Sleep at the Ritz."
    assert turn["original"] == "Sleep at the Lutetia."
    # The replayed request holds the new text and the other source as
    # recorded; the old text is only in the original's request.
    assert len(store.search('"the Ritz"', replays=True)["matches"]) == 2, "its request and its answer"
    assert len(store.search('"the Ritz"')["matches"]) == 1, "a replay's answer is no history"
    assert len(store.search('"Lutetia"')["matches"]) == 2, "the original's request and answer"
    assert len(store.search('"200 euros"')["matches"]) == 2, "both requests"

    # A source the request does not have: sent as recorded, and it holds.
    unchanged = store.replay(
        model, conversations=[chat.conversation_id], replace_sources={"weather": "Rain."}
    )
    assert [t["result"] for t in unchanged["turns"]] == ["held"]
    assert unchanged["turns"][0]["answer"] == "Sleep at the Lutetia."

    replays = len(store.search('"the Ritz"')["matches"])
    with pytest.raises(skein.RecordedChatError, match="ID@VERSION"):
        store.replay(model, conversations=[chat.conversation_id], prompt_version="brief")
    with pytest.raises(TypeError):
        store.replay(
            model,
            conversations=[chat.conversation_id],
            replace_sources={"hotel": 3},  # type: ignore[dict-item]
        )
    assert len(store.search('"the Ritz"')["matches"]) == replays, "nothing replayed"


def test_a_replay_compares_models_in_one_report(store: skein.Store, tools_model_name: str) -> None:
    """``model`` as a list compares the models in one replay, as ``skein
    replay -m A -m B`` does: each turn once per model, each model's totals;
    a model named twice, or a model that is no name, is refused."""
    conversation = skein.Model(tools_model_name, store=store).conversation()
    assert conversation.chain("hello there").text() == "plain: hello there"
    assert conversation.chain("hello again").text() == "plain: hello again"
    models = [tools_model_name, "echo"]
    report = store.replay(models, conversations=[conversation.id], compare=["exact"])
    assert report["models"] == models
    assert report["selected"] == 4
    rows = {(turn["turn_node"], turn["model"]) for turn in report["turns"]}
    assert len(rows) == 4, "each turn once per model"
    totals = {model["model"]: model["totals"] for model in report["model_totals"]}
    assert (totals[tools_model_name]["held"], totals[tools_model_name]["changed"]) == (2, 0)
    assert (totals["echo"]["held"], totals["echo"]["changed"]) == (0, 2)
    assert report["totals"]["held"] == 2

    with pytest.raises(skein.RecordedChatError, match="named twice"):
        store.replay(["echo", "echo"], conversations=[conversation.id])
    with pytest.raises(TypeError, match="list of the models"):
        store.replay(3, conversations=[conversation.id])  # type: ignore[arg-type]


def test_replays_and_recorded_chats_choose_the_default_embedder_and_say_its_fallback(
    store: skein.Store,
) -> None:
    """With no ``embedder`` named, a replay and a recorded chat compare as
    every surface does (``skein_recorded::embed::choose``): MiniLM where it
    is on the machine, else the lexical embedder, said as a
    ``UserWarning`` naming ``skein models pull minilm``; naming one says
    nothing."""
    conversation = skein.Model("echo", store=store).conversation()
    conversation.prompt("name a river").text()
    # conftest's empty models directory: MiniLM is not on this machine.

    with pytest.warns(UserWarning, match="skein models pull minilm"):
        report = store.replay("echo", conversations=[conversation.id])
    assert report["totals"]["held"] == 1
    why = report["turns"][0]["why"]
    assert why is not None and "lexical" in why, why
    with pytest.warns(UserWarning, match="lexical embedder"):
        skein.RecordedChat("echo", store=store)
    with pytest.warns(UserWarning, match="lexical embedder"):
        skein.RecordedChat.load(store, conversation.id)

    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        store.replay("echo", conversations=[conversation.id], embedder="lexical")
        skein.RecordedChat("echo", store=store, embedder="lexical")
