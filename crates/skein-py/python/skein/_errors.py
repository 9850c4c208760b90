"""skein's exceptions: one class per way an operation fails, mirroring the
Rust error enums (``skein::Error``, ``EngineError``, ``ProviderError``,
``StoreError``, ``RecordedError``), each keeping the whole message of the
Rust error (a provider's own message included) as ``str(error)``.

The native module raises these classes; they are defined here, in Python, so
that they can be subclassed, pickled and documented like any exception.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._skein import Response


class SkeinError(Exception):
    """The base class of every error skein raises.

    ``completed`` is set when the error ended a tool loop: the number of model
    calls the chain completed before it (they are kept in the conversation,
    and recorded when it has a store); ``None`` otherwise.
    """

    completed: int | None = None


# --- the engine: running a model call ---------------------------------------


class EngineError(SkeinError):
    """The engine refused or failed a run: an invalid request, a profile,
    credential, prompt or artifact that does not load, a template that does
    not render, an output schema that is not a JSON Schema."""


class ModelError(EngineError):
    """A model call failed. The provider's own message is kept.

    Attributes:
        kind: what failed, from the provider's error: ``rate_limited``,
            ``authentication``, ``bad_request``, ``server``, ``timeout``,
            ``connection``, ``malformed_response``, ``truncated_stream``,
            ``cancelled``, ``model_unavailable``, ``backend``, ``scripted``,
            ``reply_too_long`` (the reply passed a bound set on its text) or
            ``reply_too_slow`` (it passed a deadline set on it).
        status: the HTTP status, when the provider answered with one.
        provider_message: the provider's message, as it sent it.
        run_id: the failed run (recorded when the conversation has a store).
    """

    kind: str = "unknown"
    status: int | None = None
    provider_message: str | None = None
    run_id: str | None = None


class SchemaError(EngineError):
    """The reply never satisfied the output schema, after the repairs the
    profile allows. ``candidate`` is the last reply, ``errors`` what was wrong
    with it."""

    run_id: str | None = None
    attempts: int = 0
    candidate: str = ""
    errors: list[str] = []


class CapacityError(EngineError):
    """The backend is at capacity and the run was asked not to wait."""


class Cancelled(EngineError):
    """The run was cancelled (by Ctrl-C, or by cancelling the asyncio task
    awaiting it)."""


class ModelUnavailable(EngineError):
    """The model exists but cannot be used here: its file is missing (pull it
    with ``skein models pull``), its rule file does not load, or its
    credential is not set."""


class UnknownModel(SkeinError, ValueError):
    """The model name does not name a model skein knows (``smollm2``,
    ``local:PATH``, ``openai:MODEL``, ``anthropic:MODEL``, ``echo``,
    ``scripted:PATH``); the message suggests the name probably meant."""


# --- the store ---------------------------------------------------------------


class StoreError(SkeinError):
    """The database failed or refused: it is not a skein database, it is
    read-only, newer than this skein, unreachable, or damaged."""


class NotFound(StoreError, LookupError):
    """No node, conversation, run or rerun has that id, prefix or name."""


class AmbiguousId(StoreError, LookupError):
    """An id prefix or a name matches several records; the message lists
    them."""


class NameLooksLikeId(StoreError, ValueError):
    """A conversation name that reads as an id (4 to 64 hexadecimal digits)
    was refused before anything ran or was stored: an id always wins over a
    name, so such a name could only be mistaken for another conversation's
    id. Choose a name with a non-hex character."""


class NameTaken(StoreError, ValueError):
    """A conversation name another conversation already has was refused
    when set, and nothing was stored: a name finds one conversation. Choose
    another name, or continue that conversation.

    Attributes:
        name: the name refused.
        conversation_id: the conversation that has it.
    """

    name: str = ""
    conversation_id: str = ""


# --- conversations -----------------------------------------------------------


class HeadMoved(SkeinError):
    """The conversation moved on under a write that asked to be told
    (another task or process added a turn). A conversation's turns never
    raise it: they land in a branch at the head they started from, and the
    ``Conversation`` follows (its ``id`` then names the branch).

    Attributes:
        conversation_id: the conversation that moved.
        current: its head now (a node id), or ``None``.
        response: the turn's response (``None`` for a recorded chat's turn,
            which records nothing when it loses).
    """

    conversation_id: str = ""
    current: str | None = None
    response: Response | None = None


class UnknownTool(SkeinError):
    """A stored conversation names a tool that was not given: pass it in
    ``tools=`` when loading. ``tool`` is its name, ``registered`` the tools
    that were given."""

    tool: str = ""
    registered: list[str] = []


class StoredModelNamesAFile(SkeinError):
    """An imported conversation names a model file of this machine; skein
    opens such a file only when you name it: pass ``model=``."""


# --- recorded chats ----------------------------------------------------------


class RecordedChatError(SkeinError):
    """A recorded-chat operation failed; the subclasses say how."""


class TurnOutOfRange(RecordedChatError, IndexError):
    """No recorded turn has that number (turns are numbered from 0)."""


class NotATurn(RecordedChatError, LookupError):
    """The node is not the reply of a recorded turn of this chat."""


class TurnPaused(RecordedChatError):
    """The turn's tool loop was stopped by ``before_call``; a recorded turn
    cannot pause, so no turn was recorded (its model calls are kept for
    usage)."""


class ChainLimitReached(RecordedChatError):
    """The turn reached its chain limit with tool calls pending; no turn was
    recorded (its model calls are kept for usage)."""


class SourceHookError(RecordedChatError):
    """The source hook failed; nothing was recorded."""


class EmbedError(RecordedChatError):
    """The embedder failed."""


class NoEmbedder(RecordedChatError):
    """The operation needs an embedder and none was given."""


class NothingToIgnore(RecordedChatError, ValueError):
    """A rerun was asked to ignore no source; the message lists the removable
    ones."""


class UnknownSource(RecordedChatError, ValueError):
    """A rerun was asked to ignore a source the turn does not have."""


class BeyondCap(RecordedChatError, ValueError):
    """The source ranks below the report's cap of suspects: reason again with
    a larger ``max_suspects`` (and ``fresh=True``)."""


class TooFewSamples(RecordedChatError, ValueError):
    """A rerun needs at least two samples."""


class ProvenanceError(RecordedChatError):
    """A fork was asked for from a rerun this chat did not produce for that
    turn."""


class NoStore(RecordedChatError):
    """The operation needs a store and the chat has none."""


class NotRecorded(RecordedChatError):
    """The stored conversation cannot be loaded as a recorded chat."""


# --- control flow for tool hooks ---------------------------------------------


class CancelToolCall(Exception):
    """Raise in ``before_call`` to skip a tool call: the model gets an error
    result with this exception's message as the reason."""


class StopChain(Exception):
    """Raise in ``before_call`` to end the tool loop before this call (the
    chain's status becomes ``"stopped"``)."""


def _raise(name: str, message: str, attributes: dict[str, Any]) -> BaseException:
    """The exception the native module raises: class ``name`` of this module
    with ``message``, and ``attributes`` set on it."""
    error: BaseException = globals()[name](message)
    for key, value in attributes.items():
        setattr(error, key, value)
    return error


class ToolSchemaDrift(UserWarning):
    """A tool is offered under a different input schema than earlier in the
    conversation or chain (a renamed field, say): calls made against the old
    schema may no longer fit. ``response.warnings`` lists them too."""
