"""Python functions as tools a model can call.

A plain function with type hints and a docstring becomes a tool, as ``llm``
does it: its name is the function's, its description the docstring (up to a
Google-style ``Args:`` section, whose entries describe the parameters), and
its input schema is derived from the parameters' type hints (``str``,
``int``, ``float``, ``bool``, ``None``, lists, tuples, sets, ``dict[str,
X]``, ``Optional``/unions, ``Literal``, ``Enum``, dataclasses, ``TypedDict``,
``Annotated[X, "description"]`` and pydantic models); a parameter without a
hint is a string, one with a default is optional.

The engine checks the model's arguments against that schema before the
function runs; whatever the function raises becomes an error result the model
sees (``"ValueError: ..."``), never an exception in your code. ``async def``
functions work too: under the asyncio API they run on the event loop that
awaits the turn.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import inspect
import json
import re
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Tool", "tool"]


@dataclass(frozen=True)
class Tool:
    """A tool: a name, a description, a JSON Schema for its arguments, and the
    Python callable that answers a call.

    Build one from a function with :meth:`Tool.function` (or the
    :func:`tool` decorator), or by hand with an explicit schema; anywhere a
    tool is accepted, a plain function is too.
    """

    name: str
    description: str
    input_schema: dict[str, Any] = field(default_factory=dict)
    implementation: Callable[..., Any] | None = None

    @classmethod
    def function(
        cls,
        function: Callable[..., Any],
        name: str | None = None,
        description: str | None = None,
    ) -> Tool:
        """The tool for ``function``: its name, its docstring as the
        description, its type hints as the input schema."""
        if not callable(function):
            raise TypeError(f"a tool needs a callable, not {type(function).__name__}")
        if isinstance(function, Tool):
            return function
        tool_name = name or getattr(function, "__name__", None)
        if not tool_name or tool_name == "<lambda>":
            raise ValueError("a tool made from a lambda needs a name: Tool.function(f, name=...)")
        summary, parameters = _parse_docstring(inspect.getdoc(function) or "")
        return cls(
            name=tool_name,
            description=description if description is not None else summary,
            input_schema=input_schema(function, parameters),
            implementation=function,
        )


def tool(function: Callable[..., Any]) -> Tool:
    """Decorator form of :meth:`Tool.function`."""
    return Tool.function(function)


def _as_tool(value: Any) -> Tool:
    """What the native module calls for each entry of ``tools=``."""
    if isinstance(value, Tool):
        if value.implementation is None:
            raise TypeError(f"tool `{value.name}` has no implementation to call")
        return value
    return Tool.function(value)


# --- schemas from type hints -------------------------------------------------


def input_schema(function: Callable[..., Any], descriptions: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The JSON Schema of ``function``'s keyword arguments."""
    descriptions = descriptions or {}
    signature = inspect.signature(function)
    try:
        hints = typing.get_type_hints(function, include_extras=True)
    except Exception as error:  # an unresolvable forward reference
        raise TypeError(f"cannot read the type hints of `{function.__name__}`: {error}") from None
    properties: dict[str, Any] = {}
    required: list[str] = []
    for name, parameter in signature.parameters.items():
        if name == "self" or parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            continue
        if parameter.kind is parameter.POSITIONAL_ONLY:
            raise TypeError(
                f"tool `{function.__name__}`: parameter `{name}` is positional-only; "
                "tools are called with keyword arguments"
            )
        schema = _schema(hints.get(name, str))
        if name in descriptions and "description" not in schema:
            schema = {**schema, "description": descriptions[name]}
        if parameter.default is inspect.Parameter.empty:
            required.append(name)
        elif _jsonable(parameter.default):
            schema = {**schema, "default": parameter.default}
        properties[name] = schema
    result: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        result["required"] = required
    return result


def _jsonable(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


_PRIMITIVES: dict[Any, dict[str, Any]] = {
    str: {"type": "string"},
    int: {"type": "integer"},
    float: {"type": "number"},
    bool: {"type": "boolean"},
    type(None): {"type": "null"},
    bytes: {"type": "string"},
}


def _schema(hint: Any) -> dict[str, Any]:
    if hint is Any or hint is inspect.Parameter.empty or hint is object:
        return {}
    if hint is None:
        return {"type": "null"}
    if hint in _PRIMITIVES:
        return dict(_PRIMITIVES[hint])
    origin = typing.get_origin(hint)
    arguments = typing.get_args(hint)
    if origin is typing.Annotated:
        schema = _schema(arguments[0])
        notes = [note for note in arguments[1:] if isinstance(note, str)]
        if notes:
            schema["description"] = " ".join(notes)
        return schema
    if origin is typing.Union or origin is types.UnionType:
        options = [_schema(argument) for argument in arguments]
        simple = [option.get("type") for option in options]
        if all(isinstance(kind, str) and len(option) == 1 for kind, option in zip(simple, options)):
            return {"type": simple}
        return {"anyOf": options}
    if origin is typing.Literal:
        return {"enum": list(arguments)}
    if origin in (list, set, frozenset, Sequence) or hint in (list, set, frozenset):
        array: dict[str, Any] = {"type": "array"}
        if arguments:
            array["items"] = _schema(arguments[0])
        if origin in (set, frozenset):
            array["uniqueItems"] = True
        return array
    if origin is tuple or hint is tuple:
        if len(arguments) == 2 and arguments[1] is Ellipsis:
            return {"type": "array", "items": _schema(arguments[0])}
        if arguments:
            items = [_schema(argument) for argument in arguments]
            return {"type": "array", "prefixItems": items, "minItems": len(items), "maxItems": len(items)}
        return {"type": "array"}
    if origin in (dict, Mapping) or hint is dict:
        mapping: dict[str, Any] = {"type": "object"}
        if len(arguments) == 2:
            mapping["additionalProperties"] = _schema(arguments[1])
        return mapping
    if isinstance(hint, type):
        if issubclass(hint, enum.Enum):
            return {"enum": [member.value for member in hint]}
        if dataclasses.is_dataclass(hint):
            return _object_schema(hint, {f.name for f in dataclasses.fields(hint) if _required_field(f)})
        if typing.is_typeddict(hint):
            return _object_schema(hint, set(getattr(hint, "__required_keys__", ())))
        model_schema = getattr(hint, "model_json_schema", None)
        if callable(model_schema):  # a pydantic model
            return dict(model_schema())
    raise TypeError(f"cannot derive a JSON Schema from the type hint {hint!r}: use a simpler type or Tool(...)")


def _required_field(f: dataclasses.Field[Any]) -> bool:
    return f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING


def _object_schema(cls: type, required: set[str]) -> dict[str, Any]:
    hints = typing.get_type_hints(cls, include_extras=True)
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {name: _schema(hint) for name, hint in hints.items()},
    }
    wanted = [name for name in hints if name in required]
    if wanted:
        schema["required"] = wanted
    return schema


_SECTION = re.compile(r"^(Args|Arguments|Parameters|Params):\s*$")
_OTHER_SECTION = re.compile(r"^(Returns?|Raises|Yields|Examples?|Notes?):\s*$")
_ENTRY = re.compile(r"^(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")


def _parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """The description (the docstring up to its ``Args:`` section) and the
    parameters' descriptions from that section (Google style)."""
    lines = doc.splitlines()
    summary: list[str] = []
    parameters: dict[str, str] = {}
    index = 0
    while index < len(lines) and not _SECTION.match(lines[index].strip()):
        summary.append(lines[index])
        index += 1
    current: str | None = None
    for line in lines[index + 1 :]:
        stripped = line.strip()
        if _OTHER_SECTION.match(stripped):
            break
        entry = _ENTRY.match(stripped)
        if entry and (line.startswith("    ") and not line.startswith("        ") or current is None):
            current = entry.group(1)
            parameters[current] = entry.group(2).strip()
        elif current and stripped:
            parameters[current] = f"{parameters[current]} {stripped}".strip()
    return "\n".join(summary).strip(), parameters


# --- calling a tool ----------------------------------------------------------


def _invoke(tool: Tool, arguments: str, loop: asyncio.AbstractEventLoop | None) -> tuple[bool, str]:
    """Run ``tool`` on the JSON ``arguments`` (already checked against its
    schema): ``(True, text)`` with its answer, or ``(False, text)`` with what
    it raised. Called by the native module on a thread of its own."""
    try:
        implementation = tool.implementation
        assert implementation is not None
        values = json.loads(arguments) if arguments.strip() else {}
        result = implementation(**_coerce(implementation, values))
        if inspect.isawaitable(result):
            result = _await(result, loop)
    except Exception as error:
        return False, f"{type(error).__name__}: {error}"
    return True, _as_text(result)


def _await(awaitable: Any, loop: asyncio.AbstractEventLoop | None) -> Any:
    """The awaitable's result: on ``loop`` when it runs (the asyncio API's
    loop, waiting for this turn), else on a loop of its own."""

    async def run() -> Any:
        return await awaitable

    if loop is not None and loop.is_running():
        return asyncio.run_coroutine_threadsafe(run(), loop).result()
    return asyncio.run(run())


def _coerce(function: Callable[..., Any], values: dict[str, Any]) -> dict[str, Any]:
    """Arguments as the hints ask: enum members, dataclasses and pydantic
    models built from their JSON."""
    try:
        hints = typing.get_type_hints(function)
    except Exception:
        return values
    out = dict(values)
    for name, value in values.items():
        hint = hints.get(name)
        if not isinstance(hint, type):
            continue
        if issubclass(hint, enum.Enum) and not isinstance(value, hint):
            out[name] = hint(value)
        elif dataclasses.is_dataclass(hint) and isinstance(value, dict):
            out[name] = hint(**value)
        elif callable(getattr(hint, "model_validate", None)) and isinstance(value, dict):
            out[name] = hint.model_validate(value)  # type: ignore[attr-defined]
    return out


def _as_text(result: Any) -> str:
    if result is None:
        return ""
    if isinstance(result, str):
        return result
    try:
        return json.dumps(result, default=str)
    except (TypeError, ValueError):
        return str(result)


def _call_hook(hook: Callable[..., Any], arguments: tuple[Any, ...], loop: asyncio.AbstractEventLoop | None) -> Any:
    """Call a ``before_call``/``after_call`` hook (awaiting it when it is a
    coroutine function); exceptions go to the caller."""
    result = hook(*arguments)
    if inspect.isawaitable(result):
        result = _await(result, loop)
    return result


def _decide(hook: Callable[..., Any], call: Any, loop: asyncio.AbstractEventLoop | None) -> tuple[str, str | None]:
    """A ``before_call`` hook's decision on ``call``: ``("run", None)``,
    ``("run", arguments_json)``, ``("skip", reason)`` or ``("stop", None)``."""
    from ._errors import CancelToolCall, StopChain

    try:
        result = _call_hook(hook, (call,), loop)
    except CancelToolCall as error:
        return "skip", str(error) or "the application cancelled this call"
    except StopChain:
        return "stop", None
    except Exception as error:
        return "skip", f"before_call failed: {type(error).__name__}: {error}"
    if result is None:
        return "run", None
    if isinstance(result, str):
        return "run", result
    if isinstance(result, dict):
        return "run", json.dumps(result)
    return "skip", f"before_call returned {type(result).__name__}; return None, a dict of arguments or a JSON string"
