"""What a turn, a load and a fork cost from Python, counted in database
statements and the rows they return (``Store.costs()``), never timed: the
Python layer adds nothing that grows with the thread's depth or the
conversation's history, and a load reads the thread once. The Rust
facade's ``costs.rs`` states the same for the library itself
(docs/performance.md, "What a load, a turn and a fork may cost")."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import pytest

import skein

SHALLOW = 5
DEEP = 25

# A load beyond its thread: resolving the id or name, the conversation's
# row (read once here and once by the turn layer), the runs that produced
# its head and what its calls offered.
LOAD_STATEMENTS_OVER_THREAD = 8

T = TypeVar("T")


def counted(store: skein.Store, work: Callable[[], T]) -> tuple[T, dict[str, int]]:
    before = store.costs()
    assert before is not None, "costs are counted on SQLite"
    value = work()
    after = store.costs()
    assert after is not None
    return value, {key: after[key] - before[key] for key in after}


def grown(store: skein.Store, label: str, turns: int) -> skein.Conversation:
    conversation = skein.Model("echo", store=store).conversation(name=f"costs {label}")
    for turn in range(turns):
        conversation.prompt(f"{label}: turn {turn}").text()
    return conversation


@pytest.fixture
def conversations(store: skein.Store) -> tuple[skein.Conversation, skein.Conversation]:
    store.costs()  # counting starts here
    return grown(store, "shallow", SHALLOW), grown(store, "deep", DEEP)


def test_a_turn_costs_the_same_at_any_depth(
    store: skein.Store, conversations: tuple[skein.Conversation, skein.Conversation]
) -> None:
    shallow, deep = conversations
    _, at_shallow = counted(store, lambda: shallow.prompt("one more").text())
    _, at_deep = counted(store, lambda: deep.prompt("one more").text())
    assert at_deep == at_shallow, f"depth changed what a turn costs: {at_shallow} -> {at_deep}"
    assert at_shallow["statements"] > 0, "a turn writes: the counts must see it"


def test_a_reply_through_the_response_costs_what_a_turn_costs(
    store: skein.Store, conversations: tuple[skein.Conversation, skein.Conversation]
) -> None:
    _, deep = conversations
    response = deep.prompt("first")
    response.text()
    _, turn = counted(store, lambda: deep.prompt("second").text())
    _, reply = counted(store, lambda: deep.prompt("third").reply("fourth").text())
    # The reply's own turn (the second half of what was counted) costs as
    # much as a turn of the conversation.
    assert reply["statements"] == 2 * turn["statements"], (turn, reply)


def test_a_load_reads_its_thread_once(
    store: skein.Store, conversations: tuple[skein.Conversation, skein.Conversation]
) -> None:
    shallow, deep = conversations
    loaded_shallow, at_shallow = counted(store, lambda: skein.Conversation.load(store, shallow.id))
    loaded_deep, at_deep = counted(store, lambda: skein.Conversation.load(store, deep.id))
    assert len(loaded_deep.messages()) == 2 * DEEP
    assert len(loaded_shallow.messages()) == 2 * SHALLOW
    assert at_deep["statements"] == at_shallow["statements"], (at_shallow, at_deep)
    assert at_deep["rows"] - at_shallow["rows"] == 2 * (DEEP - SHALLOW), (
        f"a load reads one row per message of its thread, once: {at_shallow} -> {at_deep}"
    )
    assert at_shallow["statements"] <= LOAD_STATEMENTS_OVER_THREAD + 2, at_shallow


def test_a_fork_and_its_first_turn_read_the_thread_once(
    store: skein.Store, conversations: tuple[skein.Conversation, skein.Conversation]
) -> None:
    shallow, deep = conversations

    def fork(conversation: skein.Conversation) -> None:
        head = conversation.head
        assert head is not None
        response = skein.Conversation.fork_at(store, head, "what if")
        assert isinstance(response, skein.Response)
        response.text()

    _, at_shallow = counted(store, lambda: fork(shallow))
    _, at_deep = counted(store, lambda: fork(deep))
    assert at_deep["statements"] == at_shallow["statements"], (at_shallow, at_deep)
    assert at_deep["rows"] - at_shallow["rows"] == 2 * (DEEP - SHALLOW), (at_shallow, at_deep)
