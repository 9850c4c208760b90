"""The asyncio API: twins of the synchronous classes, as ``llm`` has them
(``llm.get_async_model()``, ``await response.text()``, ``async for chunk in
response``).

A turn awaited here runs on skein's own runtime, not in a thread of the
event loop: the loop stays free while the model answers, several turns run
concurrently, cancelling the awaiting task cancels the turn, and ``async
def`` tools and hooks run on the loop that awaits the turn. Operations that
only touch the database (loading, forking, logging) run in a worker thread
(``asyncio.to_thread``) with the GIL released.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Generator, Iterable
from typing import Any

from ._skein import (
    ChainResponse,
    Conversation,
    DriftWarning,
    Message,
    Model,
    RecordedChat,
    RecordedTurn,
    Report,
    Rerun,
    Response,
    Store,
    ToolCall,
    ToolSpec,
    Usage,
)

__all__ = [
    "AsyncChainResponse",
    "AsyncConversation",
    "AsyncModel",
    "AsyncRecordedChat",
    "AsyncResponse",
]


def _resolve(future: asyncio.Future[Any], ok: bool, value: Any) -> None:
    """Called on the loop by the native module when a turn ends."""
    if future.done():  # cancelled meanwhile
        return
    if ok:
        future.set_result(value)
    else:
        future.set_exception(value)


class AsyncModel:
    """The asyncio twin of :class:`skein.Model`: the same model names, and
    ``prompt``/``chain``/``conversation`` returning awaitable twins."""

    def __init__(self, name: str, *, store: Store | None = None) -> None:
        self._model = Model(name, store=store)

    @classmethod
    def _of(cls, model: Model) -> AsyncModel:
        twin = cls.__new__(cls)
        twin._model = model
        return twin

    @property
    def name(self) -> str:
        """The model's name, as conversations record it."""
        return self._model.name

    @property
    def store(self) -> Store | None:
        return self._model.store

    @property
    def sync(self) -> Model:
        """The synchronous :class:`skein.Model` this twin wraps."""
        return self._model

    def prompt(self, prompt: str | None = None, **kwargs: Any) -> AsyncResponse:
        """One prompt in a new conversation (see :meth:`skein.Model.prompt`)."""
        return AsyncResponse(self._model.prompt(prompt, **kwargs))

    def chain(self, prompt: str | None = None, **kwargs: Any) -> AsyncChainResponse:
        """A tool loop in a new conversation (see :meth:`skein.Model.chain`);
        tools and hooks may be ``async def``."""
        return AsyncChainResponse(self._model.chain(prompt, **kwargs))

    def conversation(self, **kwargs: Any) -> AsyncConversation:
        """A new conversation on this model (see :meth:`skein.Model.conversation`)."""
        return AsyncConversation(self._model.conversation(**kwargs))

    def __repr__(self) -> str:
        return f"AsyncModel({self.name!r})"


def _sync_model(model: Any) -> Any:
    return model.sync if isinstance(model, AsyncModel) else model


def _turn_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    if "model" in kwargs:
        kwargs = {**kwargs, "model": _sync_model(kwargs["model"])}
    return kwargs


class _Awaitable:
    """What both response twins share: awaiting runs the turn once."""

    _response: Response | ChainResponse

    def __await__(self) -> Generator[Any, None, Any]:
        return self._complete().__await__()

    async def _complete(self) -> Any:
        if not self._response._finished():
            await self._response._done_async()
        return self

    def _done(self) -> Response | ChainResponse:
        if not self._response._finished():
            raise RuntimeError("await the response first (`await response` or `await response.text()`)")
        return self._response

    async def __aiter_chunks(self) -> AsyncIterator[str]:
        index = 0
        while True:
            chunk = await self._response._chunk_async(index)
            if chunk is None:
                break
            index += 1
            yield chunk
        self._response.text()  # raises the turn's error, if it failed

    def __aiter__(self) -> AsyncIterator[str]:
        return self.__aiter_chunks()

    async def text(self) -> str:
        """The reply's text."""
        await self._complete()
        return self._response.text()

    async def usage(self) -> Usage:
        await self._complete()
        return self._response.usage

    @property
    def id(self) -> str:
        """The reply's node id (after awaiting)."""
        return self._done().id

    @property
    def warnings(self) -> list[DriftWarning]:
        return self._done().warnings

    @property
    def conversation(self) -> AsyncConversation:
        """The conversation the response belongs to (after awaiting)."""
        return AsyncConversation(self._done().conversation)

    async def messages(self) -> list[Message]:
        await self._complete()
        return self._response.messages()


class AsyncResponse(_Awaitable):
    """The asyncio twin of :class:`skein.Response`: ``await response``
    runs the turn (once) and returns the response; ``async for chunk in
    response`` streams it; ``await response.text()``."""

    def __init__(self, response: Response) -> None:
        self._response: Response = response

    @property
    def sync(self) -> Response:
        """The synchronous :class:`skein.Response` (read it after awaiting)."""
        return self._response

    async def json(self) -> Any:
        await self._complete()
        return self._response.json()

    async def tool_calls(self) -> list[ToolCall]:
        await self._complete()
        return self._response.tool_calls()

    @property
    def run_id(self) -> str:
        return self._done().run_id  # type: ignore[union-attr]

    @property
    def tools(self) -> list[ToolSpec]:
        return self._done().tools  # type: ignore[union-attr]

    @property
    def model(self) -> str:
        return self._done().model  # type: ignore[union-attr]

    def reply(self, prompt: str | None = None, **kwargs: Any) -> AsyncResponse:
        """Continue from this response (after awaiting it); see
        :meth:`skein.Response.reply`."""
        return AsyncResponse(self._done().reply(prompt, **_turn_kwargs(kwargs)))

    async def fork(
        self, prompt: str | None = None, *, name: str | None = None, model: Any = None, **kwargs: Any
    ) -> AsyncResponse | AsyncConversation:
        """Branch here: the new conversation's first response when given a
        prompt or messages, else the new conversation (see
        :meth:`skein.Response.fork`)."""
        await self._complete()
        response = self._response
        assert isinstance(response, Response)
        if prompt is not None or kwargs.get("messages") is not None or kwargs.get("attachments") is not None:
            forked = response.fork(prompt, name=name, model=_sync_model(model), **kwargs)
            assert isinstance(forked, Response)
            return AsyncResponse(forked)
        created = await asyncio.to_thread(response.fork, name=name, model=_sync_model(model))
        assert isinstance(created, Conversation)
        return AsyncConversation(created)

    async def log(self, store: Store) -> str:
        """Store the thread up to this response (see :meth:`skein.Response.log`)."""
        await self._complete()
        return await asyncio.to_thread(self._response.log, store)

    def __repr__(self) -> str:
        return f"<AsyncResponse of {self._response!r}>"


class AsyncChainResponse(_Awaitable):
    """The asyncio twin of :class:`skein.ChainResponse`."""

    def __init__(self, response: ChainResponse) -> None:
        self._response: ChainResponse = response

    @property
    def sync(self) -> ChainResponse:
        return self._response

    async def responses(self) -> list[AsyncResponse]:
        """Every model call's response, in order."""
        await self._complete()
        return [AsyncResponse(response) for response in self._response.responses()]

    @property
    def status(self) -> str:
        """``"completed"``, ``"stopped"`` or ``"limit_reached"`` (after awaiting)."""
        return self._done().status  # type: ignore[union-attr]

    def reply(self, prompt: str | None = None, **kwargs: Any) -> AsyncResponse:
        """Continue from the end of the chain (after awaiting it)."""
        return AsyncResponse(self._done().reply(prompt, **_turn_kwargs(kwargs)))

    def __repr__(self) -> str:
        return f"<AsyncChainResponse of {self._response!r}>"


class AsyncConversation:
    """The asyncio twin of :class:`skein.Conversation`."""

    def __init__(self, conversation: Conversation) -> None:
        self._conversation = conversation

    @classmethod
    async def load(
        cls, store: Store, id: str, *, model: Any = None, tools: Iterable[Callable[..., Any]] | None = None
    ) -> AsyncConversation:
        """Load a stored conversation by name or id (see :meth:`skein.Conversation.load`)."""
        loaded = await asyncio.to_thread(
            Conversation.load, store, id, model=_sync_model(model), tools=tools
        )
        return cls(loaded)

    @property
    def sync(self) -> Conversation:
        return self._conversation

    @property
    def id(self) -> str:
        return self._conversation.id

    @property
    def name(self) -> str | None:
        return self._conversation.name

    @property
    def model(self) -> str:
        return self._conversation.model

    @property
    def head(self) -> str | None:
        return self._conversation.head

    @property
    def is_stored(self) -> bool:
        return self._conversation.is_stored

    def messages(self) -> list[Message]:
        """The whole history (kept in memory: no waiting)."""
        return self._conversation.messages()

    def prompt(self, prompt: str | None = None, **kwargs: Any) -> AsyncResponse:
        return AsyncResponse(self._conversation.prompt(prompt, **_turn_kwargs(kwargs)))

    def chain(self, prompt: str | None = None, **kwargs: Any) -> AsyncChainResponse:
        return AsyncChainResponse(self._conversation.chain(prompt, **_turn_kwargs(kwargs)))

    async def fork(self, *, name: str | None = None, model: Any = None) -> AsyncConversation:
        """Branch at the head (see :meth:`skein.Conversation.fork`)."""
        forked = await asyncio.to_thread(self._conversation.fork, name=name, model=_sync_model(model))
        return AsyncConversation(forked)

    async def log(self, store: Store) -> str:
        return await asyncio.to_thread(self._conversation.log, store)

    def __repr__(self) -> str:
        return f"<AsyncConversation {self.id[:8]}>"


class AsyncRecordedChat:
    """The asyncio twin of :class:`skein.RecordedChat`. Its operations take
    turns (one at a time per chat, as the Rust chat requires)."""

    def __init__(self, model: Any, **kwargs: Any) -> None:
        self._chat = RecordedChat(_sync_model(model), **kwargs)

    @classmethod
    def _of(cls, chat: RecordedChat) -> AsyncRecordedChat:
        twin = cls.__new__(cls)
        twin._chat = chat
        return twin

    @classmethod
    async def load(cls, store: Store, id: str, **kwargs: Any) -> AsyncRecordedChat:
        """Load a stored recorded chat (see :meth:`skein.RecordedChat.load`)."""
        if "model" in kwargs:
            kwargs["model"] = _sync_model(kwargs["model"])
        return cls._of(await asyncio.to_thread(RecordedChat.load, store, id, **kwargs))

    @property
    def sync(self) -> RecordedChat:
        return self._chat

    @property
    def id(self) -> str:
        return self._chat.id

    @property
    def conversation_id(self) -> str | None:
        return self._chat.conversation_id

    @property
    def turns(self) -> list[RecordedTurn]:
        return self._chat.turns

    @property
    def removed(self) -> list[str]:
        return self._chat.removed

    async def send(self, text: str) -> RecordedTurn:
        """Run one turn and freeze its evidence."""
        turn: RecordedTurn = await self._chat._send_async(text)
        return turn

    async def reason(self, k: int, *, max_suspects: int | None = None, fresh: bool = False) -> Report:
        report: Report = await self._chat._reason_async(k, max_suspects=max_suspects, fresh=fresh)
        return report

    async def rerun_turn(
        self,
        k: int,
        *,
        ignore: list[str],
        samples: int = 3,
        baseline: bool = False,
        comparator: Callable[[str, str], bool] | None = None,
        threshold: float | None = None,
        compare: list[str] | None = None,
    ) -> Rerun:
        rerun: Rerun = await self._chat._rerun_turn_async(
            k,
            ignore=ignore,
            samples=samples,
            baseline=baseline,
            comparator=comparator,
            threshold=threshold,
            compare=compare,
        )
        return rerun

    async def fork(self, k: int, *, from_rerun: Rerun | None = None) -> AsyncRecordedChat:
        chat: RecordedChat = await self._chat._fork_async(k, from_rerun=from_rerun)
        return AsyncRecordedChat._of(chat)

    def __repr__(self) -> str:
        return f"<AsyncRecordedChat {self.id[:8]}>"

