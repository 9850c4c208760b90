"""What a turn adds after the history, as seed 000's signature has it
(``prompt=None, *, messages=None``) and the turn layer's ``TurnInput``
takes it: several messages, hand-written tool results, a history's own
``skein.Message`` objects, and an empty turn that goes on from the history."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import pytest

import skein

if TYPE_CHECKING:
    from skein._skein import MessageDict


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def roles(messages: list[skein.Message]) -> list[str]:
    return [message.role for message in messages]


def test_several_messages_are_one_turn_in_order(echo: skein.Model) -> None:
    response = echo.prompt(
        messages=[{"role": "user", "content": "first"}, {"role": "user", "content": "second"}]
    )
    history = response.messages()
    assert roles(history) == ["user", "user", "assistant"]
    assert [m.text for m in history[:2]] == ["first", "second"]
    assert len(response.conversation.messages()) == 3


def test_messages_come_before_the_prompts_own_message(echo: skein.Model) -> None:
    first = echo.prompt("hello")
    second = first.reply("the question", messages=[{"role": "user", "content": "some context"}])
    history = second.messages()
    assert roles(history) == ["user", "assistant", "user", "user", "assistant"]
    assert [m.text for m in history[2:4]] == ["some context", "the question"]
    assert history[1].id == first.id


def test_hand_written_tool_results_answer_the_models_call(tools_model: skein.Model) -> None:
    # A prompt offers the tool without running it; the caller runs it.
    asked = tools_model.prompt("please add", tools=[add])
    call = asked.tool_calls()[0]
    result: MessageDict = {
        "role": "tool",
        "tool_results": [{"call_id": call.id, "content": str(add(**call.json()))}],
    }
    answered = asked.reply(messages=[result])
    assert answered.text() == "result: 5"
    tool_message = answered.messages()[-2]
    assert tool_message.role == "tool"
    assert tool_message.tool_results[0].call_id == call.id
    assert tool_message.tool_results[0].content == "5"
    assert not tool_message.tool_results[0].is_error


def test_a_whole_tool_exchange_can_be_given_by_hand(tools_model: skein.Model) -> None:
    chain = tools_model.chain(
        messages=[
            {"role": "user", "content": "please add"},
            {
                "role": "assistant",
                "tool_calls": [{"id": "c1", "name": "add", "arguments": {"a": 2, "b": 3}}],
            },
            {"role": "tool", "tool_results": [{"call_id": "c1", "content": "5", "is_error": False}]},
        ],
        tools=[add],
    )
    assert chain.text() == "result: 5"
    history = chain.messages()
    assert roles(history) == ["user", "assistant", "tool", "assistant"]
    assert history[1].tool_calls[0].json() == {"a": 2, "b": 3}


def test_an_empty_turn_goes_on_from_the_history(echo: skein.Model, store: skein.Store) -> None:
    model = skein.Model("echo", store=store)
    first = model.prompt("keep going")
    more = first.reply()
    history = more.messages()
    assert roles(history) == ["user", "assistant", "assistant"]
    assert history[1].id == first.id
    loaded = skein.Conversation.load(store, first.conversation.id)
    assert loaded.head == more.id


def test_an_empty_first_turn_has_nothing_to_go_on_from(echo: skein.Model) -> None:
    with pytest.raises(skein.EngineError, match="(?i)history|message"):
        echo.prompt().text()


def test_a_historys_messages_are_taken_back_exactly(echo: skein.Model) -> None:
    first = echo.prompt("one").reply("two")
    again = echo.prompt(messages=first.messages()[:3])
    # The same messages under the same history are the same nodes.
    assert [m.id for m in again.messages()[:3]] == [m.id for m in first.messages()[:3]]


def test_fork_and_fork_at_take_messages(echo: skein.Model, store: skein.Store) -> None:
    model = skein.Model("echo", store=store)
    first = model.prompt("root")
    forked = first.fork(messages=[{"role": "user", "content": "branch a"}])
    assert isinstance(forked, skein.Response)
    assert forked.messages()[-2].text == "branch a"
    assert forked.conversation.id != first.conversation.id
    at = skein.Conversation.fork_at(
        store, first.id, messages=[{"role": "user", "content": "branch b"}]
    )
    assert isinstance(at, skein.Response)
    assert at.messages()[-2].text == "branch b"
    assert isinstance(first.fork(), skein.Conversation)


@pytest.mark.parametrize(
    ("messages", "error", "match"),
    [
        ("just text", TypeError, "list of messages"),
        ({"role": "user", "content": "x"}, TypeError, "list of messages"),
        ([{"role": "robot", "content": "x"}], ValueError, "unknown role"),
        ([{"role": "user", "text": "x"}], ValueError, "no key `text`"),
        ([{"role": "user"}], ValueError, "needs \"content\""),
        ([{"content": "x"}], ValueError, "needs a \"role\""),
        ([42], TypeError, "is a dict"),
        ([{"role": "tool", "tool_results": [{"content": "5"}]}], ValueError, "needs \"call_id\""),
        ([{"role": "assistant", "tool_calls": [{"id": "c", "arguments": "{}"}]}], ValueError, "needs \"name\""),
    ],
)
def test_malformed_messages_are_refused_before_any_call(
    echo: skein.Model, messages: Any, error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        echo.prompt(messages=messages)


def test_the_async_twins_take_messages_and_empty_turns() -> None:
    async def main() -> None:
        model = skein.AsyncModel("echo")
        first = await model.prompt(
            messages=[{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]
        )
        assert roles(await first.messages()) == ["user", "user", "assistant"]
        more = await first.reply()
        assert roles(await more.messages()) == ["user", "user", "assistant", "assistant"]

    asyncio.run(main())
