"""The seed's advisor desk as a recorded chat in Python: record three turns,
explain turn 1, re-run it without `social-sentiment` with a Python
comparator (BUY flips to HOLD, verdict confirmed), fork from the
counterfactual (KEEP where the original said ADD); provenance, persistence
and failures."""

from __future__ import annotations

from pathlib import Path

import pytest

import skein

SYSTEM = "You are an investment advisor. Answer BUY or HOLD when asked."
SOURCES = [
    skein.Source.fact("fundamentals", "fundamentals: revenue flat, margins stable"),
    skein.Source.fact("social-sentiment", "social-sentiment: bullish, retail chatter at a three-month high"),
    skein.Source.document("analyst-note", "analyst-note: price target unchanged"),
]


def decision_changed(original: str, candidate: str) -> bool:
    return original.split(":")[0] != candidate.split(":")[0]


def desk(model: str, store: skein.Store | None = None) -> skein.RecordedChat:
    return skein.RecordedChat(model, system=SYSTEM, sources=SOURCES, store=store, name="advisor desk")


def test_the_advisor_desk_flips_under_rerun_and_forks_from_the_counterfactual(
    advisor_model_name: str, store: skein.Store
) -> None:
    chat = desk(advisor_model_name, store)
    chat.send("How is the position looking?")
    decision = chat.send("Should we BUY or HOLD this position?")
    assert decision.text.startswith("BUY")
    assert decision.index == 1
    assert [source.id for source in decision.sources] == ["fundamentals", "social-sentiment", "analyst-note"]
    original = chat.send("How much should we allocate?")
    assert original.text.startswith("ADD")

    report = chat.reason(1)
    assert report.is_correlational
    assert set(report.removable()) == {"fundamentals", "social-sentiment", "analyst-note"}
    assert "correlational" in report.render()

    calls: list[tuple[str, str]] = []

    def comparator(a: str, b: str) -> bool:
        calls.append((a, b))
        return decision_changed(a, b)

    rerun = chat.rerun_turn(1, ignore=["social-sentiment"], samples=2, baseline=True, comparator=comparator)
    assert rerun.verdict == "confirmed"
    assert rerun.answer.startswith("HOLD")
    assert rerun.answer_flipped and rerun.flips == 2
    assert rerun.baseline_stable is True
    assert rerun.removed == ["social-sentiment"]
    assert len(calls) == 4  # two probes and two baselines compared

    fork = chat.fork(1, from_rerun=rerun)
    assert fork.removed == ["social-sentiment"]
    allocation = fork.send("How much should we allocate?")
    assert allocation.text.startswith("KEEP")
    # The original chat is untouched.
    assert [turn.text.split(":")[0] for turn in chat.turns] == ["The position is up four percent this week on steady volume.", "BUY", "ADD"]

    # Everything is in the store: the chat loads back with its turns and
    # reruns, and the fork is a conversation of its own.
    assert chat.conversation_id is not None and fork.conversation_id is not None
    loaded = skein.RecordedChat.load(store, "advisor desk")
    assert [turn.node for turn in loaded.turns] == [turn.node for turn in chat.turns]
    again = loaded.fork(1)
    assert again.send("How much should we allocate?").text.startswith("ADD")


def test_a_fork_refuses_a_rerun_of_another_chat_or_turn(advisor_model_name: str) -> None:
    chat = desk(advisor_model_name)
    other = desk(advisor_model_name)
    for each in (chat, other):
        each.send("How is the position looking?")
        each.send("Should we BUY or HOLD this position?")
    rerun = other.rerun_turn(1, ignore=["social-sentiment"], samples=2, comparator=decision_changed)
    assert rerun.verdict is None  # no baseline, no verdict
    with pytest.raises(skein.ProvenanceError, match="another chat"):
        chat.fork(1, from_rerun=rerun)
    with pytest.raises(skein.ProvenanceError, match="turn 0"):
        other.fork(0, from_rerun=rerun)


def test_recorded_chat_failures_are_typed(advisor_model_name: str) -> None:
    chat = desk(advisor_model_name)
    with pytest.raises(skein.TurnOutOfRange, match="no turns yet"):
        chat.reason(0)
    chat.send("Should we BUY or HOLD this position?")
    with pytest.raises(skein.UnknownSource, match="removable sources"):
        chat.rerun_turn(0, ignore=["nonsense"])
    with pytest.raises(skein.NothingToIgnore):
        chat.rerun_turn(0, ignore=[])
    with pytest.raises(skein.TooFewSamples):
        chat.rerun_turn(0, ignore=["fundamentals"], samples=1)
    with pytest.raises(ValueError, match="embedder"):
        skein.RecordedChat(advisor_model_name, embedder="nope")


def test_a_comparator_that_raises_is_raised_after_the_rerun(advisor_model_name: str) -> None:
    chat = desk(advisor_model_name)
    chat.send("Should we BUY or HOLD this position?")

    def broken(a: str, b: str) -> bool:
        raise KeyError("comparator bug")

    with pytest.raises(KeyError, match="comparator bug"):
        chat.rerun_turn(0, ignore=["social-sentiment"], samples=2, comparator=broken)


def test_a_failed_turn_records_nothing_and_keeps_the_providers_message(
    tmp_path: Path, store: skein.Store
) -> None:
    rules = tmp_path / "failing.toml"
    rules.write_text(
        '[[rules]]\nlast_user_contains = "fail"\nerror = { kind = "rate_limited", message = "slow down, friend" }\n'
        '[[rules]]\nreply = "fine"\n'
    )
    chat = skein.RecordedChat(f"scripted:{rules}", store=store, sources=SOURCES)
    with pytest.raises(skein.ModelError, match="slow down, friend") as raised:
        chat.send("please fail")
    assert raised.value.kind == "rate_limited"
    assert raised.value.provider_message == "slow down, friend"
    assert chat.turns == []
    assert chat.send("ok").text == "fine"
    assert len(chat.turns) == 1


def test_a_rerun_judges_with_the_comparators_it_names(advisor_model_name: str) -> None:
    """``compare=`` takes comparator specs as ``skein rerun --compare`` and
    ``Store.replay`` do: BUY flips to HOLD, which ``exact`` calls a change
    (and a verdict with a baseline); ``length:100`` calls the same answers
    unchanged. A spec that is no comparator, or a Python comparator as
    well, is refused before anything runs."""
    chat = desk(advisor_model_name)
    chat.send("Should we BUY or HOLD this position?")
    exact = chat.rerun_turn(0, ignore=["social-sentiment"], samples=2, baseline=True, compare=["exact"])
    assert exact.answer.startswith("HOLD")
    assert exact.flips == 2 and exact.verdict == "confirmed"
    lenient = chat.rerun_turn(0, ignore=["social-sentiment"], samples=2, compare=["length:100"])
    assert lenient.flips == 0
    with pytest.raises(skein.SkeinError, match="nope"):
        chat.rerun_turn(0, ignore=["social-sentiment"], compare=["nope"])
    with pytest.raises(ValueError, match="not both"):
        chat.rerun_turn(0, ignore=["social-sentiment"], compare=["exact"], comparator=decision_changed)
