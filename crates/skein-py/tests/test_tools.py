"""Python functions as tools: schemas from type hints and docstrings,
exceptions as error results, hooks."""

from __future__ import annotations

import asyncio
import enum
from dataclasses import dataclass
from typing import Annotated, Literal, Optional

import pytest

import skein


class Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Opaque:
    """A type no schema describes."""


@dataclass
class Point:
    x: float
    y: float = 0.0


def describe(
    name: str,
    count: int,
    ratio: float,
    tags: list[str],
    colour: Colour,
    mode: Literal["fast", "slow"] = "fast",
    note: Optional[str] = None,
    where: Point | None = None,
    scale: Annotated[float, "how much to scale"] = 1.0,
    extra: dict[str, int] | None = None,
) -> str:
    """Describe something.

    Longer text stays in the description.

    Args:
        name: what to call it
        count: how many
            (at least one)
    Returns:
        a sentence
    """
    return name


def test_a_function_becomes_a_tool_with_a_schema_from_its_hints_and_docstring() -> None:
    tool = skein.Tool.function(describe)
    assert tool.name == "describe"
    assert tool.description == "Describe something.\n\nLonger text stays in the description."
    schema = tool.input_schema
    assert schema["required"] == ["name", "count", "ratio", "tags", "colour"]
    properties = schema["properties"]
    assert properties["name"] == {"type": "string", "description": "what to call it"}
    assert properties["count"] == {"type": "integer", "description": "how many (at least one)"}
    assert properties["ratio"] == {"type": "number"}
    assert properties["tags"] == {"type": "array", "items": {"type": "string"}}
    assert properties["colour"] == {"enum": ["red", "blue"]}
    assert properties["mode"] == {"enum": ["fast", "slow"], "default": "fast"}
    assert properties["note"] == {"type": ["string", "null"], "default": None}
    assert properties["where"]["anyOf"][0] == {
        "type": "object",
        "properties": {"x": {"type": "number"}, "y": {"type": "number"}},
        "required": ["x"],
    }
    assert properties["scale"] == {"type": "number", "description": "how much to scale", "default": 1.0}
    assert properties["extra"]["anyOf"][0] == {"type": "object", "additionalProperties": {"type": "integer"}}


def test_tools_that_cannot_be_described_are_refused_with_a_reason(echo: skein.Model) -> None:
    with pytest.raises(ValueError, match="lambda"):
        skein.Tool.function(lambda x: x)

    def takes_opaque(thing: Opaque) -> str:
        return ""

    with pytest.raises(TypeError, match="JSON Schema"):
        skein.Tool.function(takes_opaque)
    with pytest.raises(ValueError, match="unique"):
        echo.prompt("x", tools=[describe, skein.Tool.function(lambda: "", name="describe")])


def test_a_python_tool_that_raises_becomes_an_error_result(tools_model: skein.Model) -> None:
    def explode(reason: str) -> str:
        """Always fails."""
        raise ValueError(f"boom: {reason}")

    chain = tools_model.chain("please explode", tools=[explode])
    assert chain.status == "completed"
    result = chain.messages()[-2].tool_results[0]
    assert result.is_error
    assert result.content == "ValueError: boom: on purpose"
    assert chain.text() == "result: ValueError: boom: on purpose"


def test_arguments_are_converted_to_the_hinted_types(tools_model: skein.Model) -> None:
    seen: list[object] = []

    def add(a: int, b: int) -> dict[str, int]:
        """Add."""
        seen.append((a, b))
        return {"sum": a + b}

    assert tools_model.chain("please add", tools=[add]).text() == 'result: {"sum": 5}'
    assert seen == [(2, 3)]


def test_before_call_can_change_cancel_or_stop_a_call_and_after_call_sees_results(
    tools_model: skein.Model,
) -> None:
    def add(a: int, b: int) -> int:
        """Add."""
        return a + b

    seen: list[tuple[str, str]] = []

    def after(call: skein.ToolCall, result: skein.ToolResult) -> None:
        seen.append((call.arguments, result.content))

    changed = tools_model.chain(
        "please add", tools=[add], before_call=lambda call: {"a": 40, "b": 2}, after_call=after
    )
    assert changed.text() == "result: 42"
    # The history keeps the call as the model wrote it, with the result of
    # the arguments the hook gave.
    assert seen == [('{"a": 2, "b": 3}', "42")]

    def cancel(call: skein.ToolCall) -> None:
        raise skein.CancelToolCall("not today")

    cancelled = tools_model.chain("please add", tools=[add], before_call=cancel)
    result = cancelled.messages()[-2].tool_results[0]
    assert result.is_error and "not today" in result.content

    def stop(call: skein.ToolCall) -> None:
        raise skein.StopChain()

    stopped = tools_model.chain("please add", tools=[add], before_call=stop)
    assert stopped.status == "stopped"

    def broken(call: skein.ToolCall) -> None:
        raise RuntimeError("hook bug")

    skipped = tools_model.chain("please add", tools=[add], before_call=broken)
    assert "before_call failed: RuntimeError: hook bug" in skipped.messages()[-2].tool_results[0].content


def test_a_chain_s_own_hooks_apply_to_that_chain_only(tools_model: skein.Model) -> None:
    def add(a: int, b: int) -> int:
        """Add."""
        return a + b

    own: list[str] = []
    conversation = tools_model.conversation(
        tools=[add], after_call=lambda call, result: own.append(result.content)
    )
    per_chain: list[str] = []
    changed = conversation.chain(
        "please add",
        before_call=lambda call: {"a": 40, "b": 2},
        after_call=lambda call, result: per_chain.append(result.content),
    )
    assert changed.text() == "result: 42"
    # The chain's hooks replaced the conversation's for that chain only.
    assert (per_chain, own) == (["42"], [])
    assert conversation.chain("please add").text() == "result: 5"
    assert (per_chain, own) == (["42"], ["5"])

    def stop(call: skein.ToolCall) -> None:
        raise skein.StopChain()

    # Each hook is replaced on its own: the conversation's after_call still
    # sees the call this chain's before_call stopped.
    assert conversation.chain("please add", before_call=stop).status == "stopped"
    assert own[:1] == ["5"] and own[1].endswith("the chain was stopped")


def test_async_def_tools_work_from_the_synchronous_api(tools_model: skein.Model) -> None:
    async def add(a: int, b: int) -> int:
        """Add, asynchronously."""
        await asyncio.sleep(0)
        return a + b

    assert tools_model.chain("please add", tools=[add]).text() == "result: 5"


def test_a_tool_may_call_skein_itself(tools_model: skein.Model, echo: skein.Model) -> None:
    def lookup(key: str) -> str:
        """Ask another model."""
        return echo.prompt(f"what is {key}").text()

    assert tools_model.chain("lookup", tools=[lookup]).text().startswith('result: echo: "what is x"')
