"""Type stubs of skein's native module (crates/skein-py/src). The classes are
re-exported by ``skein``; their docstrings are the native ones."""

import asyncio
import os
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Literal, Required, TypedDict, final

from ._tools import Tool

__version__: str

ToolLike = Callable[..., Any] | Tool
"""A tool: a function (its schema from its type hints) or a ``skein.Tool``."""
ModelLike = Model | str
BeforeCall = Callable[[ToolCall], Any]
AfterCall = Callable[[ToolCall, ToolResult], Any]
Schema = dict[str, Any] | type

class ToolCallDict(TypedDict, total=False):
    """A tool call given in a message dict (``arguments``: JSON text or a
    JSON value; ``{}`` when left out)."""

    id: Required[str]
    name: Required[str]
    arguments: Any

class ToolResultDict(TypedDict, total=False):
    """A tool result given in a message dict."""

    call_id: Required[str]
    content: Required[str]
    is_error: bool

class MessageDict(TypedDict, total=False):
    """A message given to a turn's ``messages=``: a role and at least one
    of the other keys."""

    role: Required[str]
    content: str
    tool_calls: list[ToolCallDict | ToolCall]
    tool_results: list[ToolResultDict | ToolResult]
    attachments: list[Attachment]

MessageLike = MessageDict | Message
"""A message a turn adds: a dict, or a :class:`Message` of a history."""

class UsageFigure(TypedDict):
    """One figure summed over runs; complete when ``missing_from`` is empty."""

    value: int
    missing_from: list[str]

class UsageTotals(TypedDict):
    """What :meth:`Store.usage` returns."""

    runs: list[str]
    failed: list[str]
    input_tokens: UsageFigure
    output_tokens: UsageFigure
    cache_read_tokens: UsageFigure
    cache_write_tokens: UsageFigure
    by_model: dict[str, ModelTokens]
    cache_hit_rate: float | None
    cost: Cost

class ModelTokens(TypedDict):
    """One model's share of a total: input split so no token counts twice."""

    runs: list[str]
    uncached_input: int
    cache_read: int
    cache_write: int
    output: int

class ModelCost(TypedDict):
    model: str
    priced_as: str | None
    source: str | None
    runs: int
    dollars: float | None

class Cost(TypedDict):
    """What the runs cost in US dollars: a lower bound unless ``unpriced``
    and ``unmeasured`` are empty."""

    dollars: float
    cache_savings: float
    by_model: list[ModelCost]
    unpriced: list[str]
    unmeasured: list[str]
    prices_date: str

class ReplayTotals(TypedDict):
    """How many of a replay's turns stand where."""

    pending: int
    running: int
    done: int
    diverged: int
    failed: int
    changed: int
    held: int
    lease_until_ms: int | None

class CostSummary(TypedDict):
    """A cost as reports give it (a replay's, ``skein usage --json``'s):
    ``dollars`` is a lower bound ("at least") unless ``complete``; the
    runs without a price or without usage are named."""

    dollars: float
    complete: bool
    cache_savings: float
    by_model: list[ModelCost]
    unpriced_runs: list[str]
    unmeasured_runs: list[str]
    prices_date: str

class CostDelta(TypedDict):
    """The original turns' and the replayed turns' cost, and the
    difference (replay minus original)."""

    original: CostSummary
    replay: CostSummary
    delta: float
    complete: bool

class TurnUsage(TypedDict):
    input_tokens: int
    output_tokens: int
    latency_ms: int
    calls: int

class ReplayedTurn(TypedDict):
    """One turn of :meth:`Store.replay`'s report."""

    seq: int
    model: str | None
    result: str
    conversation: str | None
    conversation_name: str | None
    question: str | None
    turn_node: str
    answer_node: str | None
    comparator: str | None
    why: str | None
    original: str | None
    answer: str | None
    original_usage: TurnUsage | None
    usage: TurnUsage | None
    original_cost: CostSummary | None
    cost: CostSummary | None
    runs: list[str]

class ModelTotals(TypedDict):
    """One candidate's part of a replay that compares models."""

    model: str
    totals: ReplayTotals
    original_usage: TurnUsage
    usage: TurnUsage
    cost: CostDelta

class ReplayReport(TypedDict):
    """What :meth:`Store.replay` returns (as ``skein replay --json``
    prints it, turns in selection order)."""

    replay: str
    model: str
    models: list[str]
    created_ms: int
    state: str
    original_models: list[str]
    changes: list[str]
    selection_text: str
    selection: dict[str, Any]
    change: dict[str, Any]
    settings: dict[str, Any]
    selected: int
    totals: ReplayTotals
    cost: CostDelta
    model_totals: list[ModelTotals]
    turns: list[ReplayedTurn]

class LabelCount(TypedDict):
    name: str
    nodes: int
class Sharer(TypedDict):
    id: str
    name: str | None

class Forgotten(TypedDict):
    """What :meth:`Store.delete` removed (or in a dry run would remove)."""

    dry_run: bool
    conversations: list[str]
    skipped: list[str]
    runs: int
    unowned_runs: int
    reruns: int
    messages: int
    blobs: int
    embeddings: int
    body_pieces: int
    replay_turns: int
    replays: int
    kept_messages: int
    labelled_messages: int
    shared_with: list[Sharer]
    more_sharers: bool

class Place(TypedDict):
    """A place outside the graph that held a copy of content, with how many
    of its rows (``skein verify --find`` and :meth:`Store.redact` name
    them so)."""

    table: str
    column: str
    rows: int

class Redacted(TypedDict):
    """What :meth:`Store.redact` erased."""

    node: str
    parts: int
    blobs: int
    embeddings: int
    body_pieces_erased: int
    copies: list[Place]

class Collected(TypedDict):
    """What :meth:`Store.gc` did: each ``[retention]`` rule's deletion, then
    the collection of what nothing reaches."""

    retention: list[tuple[str, Forgotten]]
    collected: Forgotten

class Price(TypedDict, total=False):
    input: float
    output: float
    cache_read: float
    cache_write: float

@final
class Store:
    """A skein database: a SQLite file (created when missing) or a
    PostgreSQL URL, shared with the ``skein`` command line. ``read_url``
    names a PostgreSQL standby of it that ``search`` reads from (a view a
    moment old; this process's own writes are always seen); turns read
    from the database itself."""

    def __init__(
        self, location: str | os.PathLike[str], *, read_url: str | None = None
    ) -> None: ...
    @property
    def location(self) -> str: ...
    def usage(
        self,
        *,
        conversation: str | None = None,
        family: str | None = None,
        node: str | None = None,
        run: str | None = None,
        sequence: str | None = None,
        prices: dict[str, Price] | None = None,
    ) -> UsageTotals: ...
    def costs(self) -> dict[str, int] | None:
        """What this handle's database work has cost since ``costs()`` was
        first called on it: ``{"statements": N, "rows": N}`` (statements
        run, rows they returned), counted rather than timed, for tests of
        what a turn or a load may cost. ``None`` on PostgreSQL."""
    def search(
        self,
        text: str,
        *,
        limit: int = 20,
        conversation: str | None = None,
        replays: bool = False,
    ) -> dict[str, Any]:
        """The messages whose text has the words of ``text`` (every word;
        ``"phrases"`` in order; ``word*`` a prefix), newest first; the
        answers only replays reached are left out unless ``replays``:
        ``{"matches": [{"node", "role", "snippet", "highlights",
        "conversations": [{"id", "name"}]}], "truncated"}``. A query with an
        unclosed quote or no words raises ``StoreError``."""
    def replay(
        self,
        model: str | list[str],
        *,
        conversations: list[str] = ...,
        families: list[str] = ...,
        turns: list[str] = ...,
        labels: list[str] = ...,
        search: str | None = None,
        since_ms: int | None = None,
        until_ms: int | None = None,
        clients: list[str] = ...,
        cases: str | os.PathLike[str] | None = None,
        system: str | None = None,
        temperature: float | None = None,
        seed: int | None = None,
        max_tokens: int | None = None,
        remove_tools: list[str] = ...,
        ignore: list[str] = ...,
        replace_sources: dict[str, str] = ...,
        prompt_version: str | None = None,
        compare: list[str] = ...,
        embedder: str | None = None,
        concurrency: int | None = None,
        prices: dict[str, Price] | None = None,
    ) -> ReplayReport:
        """Replay recorded turns on ``model`` with one change, each judged
        against its original (the comparator that decided and why), tool
        calls answered from the recording, with what the original and the
        replay cost, priced as :meth:`usage` prices (each side "at least"
        when a run has no usage or no price: ``complete`` is false).
        ``model`` may be a list of models to compare: each turn replayed
        once on each, one report with ``models``, ``model_totals`` and a
        row per turn and model. ``cases`` names a file ``skein label export`` wrote: its cases are
        stored first and selected, each judged by its own comparators
        unless ``compare`` names others. ``embedder`` compares by embedding:
        ``"minilm"``, ``"lexical"``, or by default MiniLM where it is on this
        machine, else the lexical embedder with a ``UserWarning`` saying so.
        An empty selection raises ``RecordedChatError``."""
    def label(
        self,
        name: str,
        turns: list[str] = ...,
        *,
        replay: str | None = None,
        results: list[str] = ...,
    ) -> int:
        """Put the label ``name`` on turns (final answers' node ids or
        prefixes) and, with ``replay``, on every turn that replay re-sent
        (or only those whose result is in ``results``: ``"changed"``,
        ``"held"``, ``"diverged"``, ``"failed"``); how many did not carry
        it. A node that ends no turn raises ``NotATurn``."""
    def unlabel(
        self,
        name: str,
        turns: list[str] = ...,
        *,
        replay: str | None = None,
        results: list[str] = ...,
    ) -> int: ...
    def labels(self, name: str | None = None) -> list[LabelCount] | list[str]: ...
    def delete(
        self,
        *conversations: str,
        family: str | None = None,
        older_than: str | None = None,
        proxy: bool = False,
        client: str | None = None,
        dry_run: bool = False,
    ) -> Forgotten:
        """Delete conversations (ids, prefixes or names), a whole ``family``,
        or every one last updated before ``older_than`` (``30d``, ``12h``,
        ``45min``, ``6mo`` or ``YYYY-MM-DD``; a bare ``m`` is refused) and/or recorded by the proxy and/or
        holding a run the proxy's ``client`` made, with every
        message, run, rerun, blob and cached embedding only they reached;
        what others share stays. ``dry_run``: the plan, nothing changed."""
    def redact(self, node: str, *, reason: str, by: str | None = None) -> Redacted:
        """Erase one message's content in place: it keeps its id and place,
        each part a tombstone (:attr:`Message.erased`)."""
    def gc(self, *, dry_run: bool = False) -> Collected:
        """``[retention]`` of the configuration file, then every message
        nothing reaches, then a rewrite of the database file."""

@final
class Model:
    """A model by the names the command line takes: ``smollm2``,
    ``local:PATH``, ``openai:MODEL``, ``anthropic:MODEL``, ``echo``,
    ``scripted:PATH``. With a ``store``, its conversations are recorded
    there turn by turn."""

    def __init__(self, name: str, *, store: Store | None = None) -> None: ...
    @property
    def name(self) -> str: ...
    @property
    def store(self) -> Store | None: ...
    def prompt(
        self,
        prompt: str | None = None,
        *,
        messages: Iterable[MessageLike] | None = None,
        attachments: Iterable[Attachment] | None = None,
        system: str | None = None,
        schema: Schema | None = None,
        tools: Iterable[ToolLike] | None = None,
        temperature: float | None = None,
        top_p: float | None = None,
        seed: int | None = None,
        max_tokens: int | None = None,
    ) -> Response: ...
    def chain(
        self,
        prompt: str | None = None,
        *,
        messages: Iterable[MessageLike] | None = None,
        attachments: Iterable[Attachment] | None = None,
        tools: Iterable[ToolLike] | None = None,
        chain_limit: int | None = None,
        before_call: BeforeCall | None = None,
        after_call: AfterCall | None = None,
        system: str | None = None,
        schema: Schema | None = None,
        temperature: float | None = None,
        top_p: float | None = None,
        seed: int | None = None,
        max_tokens: int | None = None,
    ) -> ChainResponse: ...
    def conversation(
        self,
        *,
        name: str | None = None,
        tools: Iterable[ToolLike] | None = None,
        chain_limit: int | None = None,
        before_call: BeforeCall | None = None,
        after_call: AfterCall | None = None,
        store: Store | None = None,
    ) -> Conversation: ...

@final
class Conversation:
    """A named bookmark into the graph with default tools, hooks and a chain
    limit, recorded in its store (if any) turn by turn."""

    @staticmethod
    def load(
        store: Store, id: str, *, model: ModelLike | None = None, tools: Iterable[ToolLike] | None = None
    ) -> Conversation: ...
    @staticmethod
    def fork_at(
        store: Store,
        node: str,
        prompt: str | None = None,
        *,
        messages: Iterable[MessageLike] | None = None,
        attachments: Iterable[Attachment] | None = None,
        name: str | None = None,
        model: ModelLike | None = None,
        tools: Iterable[ToolLike] | None = None,
    ) -> Conversation | Response: ...
    @staticmethod
    def again_at(
        store: Store,
        node: str,
        prompt: str | None = None,
        *,
        messages: Iterable[MessageLike] | None = None,
        attachments: Iterable[Attachment] | None = None,
        name: str | None = None,
        model: ModelLike | None = None,
        tools: Iterable[ToolLike] | None = None,
    ) -> Response: ...
    @property
    def id(self) -> str: ...
    @property
    def name(self) -> str | None: ...
    @property
    def model(self) -> str: ...
    @property
    def head(self) -> str | None: ...
    @property
    def tools(self) -> list[ToolSpec]: ...
    @property
    def chain_limit(self) -> int: ...
    @property
    def is_stored(self) -> bool: ...
    @property
    def origin(self) -> dict[str, str | None] | None: ...
    def messages(self) -> list[Message]: ...
    def prompt(
        self,
        prompt: str | None = None,
        *,
        messages: Iterable[MessageLike] | None = None,
        attachments: Iterable[Attachment] | None = None,
        system: str | None = None,
        schema: Schema | None = None,
        tools: Iterable[ToolLike] | None = None,
        model: ModelLike | None = None,
        temperature: float | None = None,
        top_p: float | None = None,
        seed: int | None = None,
        max_tokens: int | None = None,
    ) -> Response: ...
    def chain(
        self,
        prompt: str | None = None,
        *,
        messages: Iterable[MessageLike] | None = None,
        attachments: Iterable[Attachment] | None = None,
        tools: Iterable[ToolLike] | None = None,
        chain_limit: int | None = None,
        before_call: BeforeCall | None = None,
        after_call: AfterCall | None = None,
        system: str | None = None,
        schema: Schema | None = None,
        model: ModelLike | None = None,
        temperature: float | None = None,
        top_p: float | None = None,
        seed: int | None = None,
        max_tokens: int | None = None,
    ) -> ChainResponse: ...
    def fork(self, *, name: str | None = None, model: ModelLike | None = None) -> Conversation: ...
    def log(self, store: Store) -> str: ...
    def set_before_call(self, hook: BeforeCall) -> None: ...
    def set_after_call(self, hook: AfterCall) -> None: ...

@final
class Response:
    """One model call's response: lazy (runs when first read), streamed by
    iterating it."""

    def text(self) -> str: ...
    def json(self) -> Any: ...
    @property
    def id(self) -> str: ...
    @property
    def run_id(self) -> str: ...
    @property
    def conversation(self) -> Conversation: ...
    @property
    def usage(self) -> Usage: ...
    @property
    def tools(self) -> list[ToolSpec]: ...
    def tool_calls(self) -> list[ToolCall]: ...
    @property
    def warnings(self) -> list[DriftWarning]: ...
    @property
    def model(self) -> str: ...
    def messages(self) -> list[Message]: ...
    def reply(
        self,
        prompt: str | None = None,
        *,
        messages: Iterable[MessageLike] | None = None,
        attachments: Iterable[Attachment] | None = None,
        system: str | None = None,
        schema: Schema | None = None,
        tools: Iterable[ToolLike] | None = None,
        model: ModelLike | None = None,
        temperature: float | None = None,
        top_p: float | None = None,
        seed: int | None = None,
        max_tokens: int | None = None,
    ) -> Response: ...
    def fork(
        self,
        prompt: str | None = None,
        *,
        messages: Iterable[MessageLike] | None = None,
        attachments: Iterable[Attachment] | None = None,
        name: str | None = None,
        model: ModelLike | None = None,
        system: str | None = None,
        schema: Schema | None = None,
        tools: Iterable[ToolLike] | None = None,
        temperature: float | None = None,
        top_p: float | None = None,
        seed: int | None = None,
        max_tokens: int | None = None,
    ) -> Response | Conversation: ...
    def log(self, store: Store) -> str: ...
    def __iter__(self) -> Stream: ...
    def _finished(self) -> bool: ...
    def _done_async(self) -> asyncio.Future[None]: ...
    def _chunk_async(self, index: int) -> asyncio.Future[str | None]: ...

@final
class Stream(Iterator[str]):
    """The chunks of a response's reply, as they stream."""

    def __iter__(self) -> Stream: ...
    def __next__(self) -> str: ...

@final
class ChainResponse:
    """Every model call of a tool loop: lazy, streamed by iterating it."""

    def text(self) -> str: ...
    def responses(self) -> list[Response]: ...
    @property
    def status(self) -> str: ...
    @property
    def chain_id(self) -> str: ...
    @property
    def id(self) -> str: ...
    @property
    def usage(self) -> Usage: ...
    @property
    def warnings(self) -> list[DriftWarning]: ...
    @property
    def conversation(self) -> Conversation: ...
    def messages(self) -> list[Message]: ...
    def reply(
        self,
        prompt: str | None = None,
        *,
        messages: Iterable[MessageLike] | None = None,
        attachments: Iterable[Attachment] | None = None,
        system: str | None = None,
        schema: Schema | None = None,
        tools: Iterable[ToolLike] | None = None,
        model: ModelLike | None = None,
        temperature: float | None = None,
        top_p: float | None = None,
        seed: int | None = None,
        max_tokens: int | None = None,
    ) -> Response: ...
    def __iter__(self) -> ChainStream: ...
    def _finished(self) -> bool: ...
    def _done_async(self) -> asyncio.Future[None]: ...
    def _chunk_async(self, index: int) -> asyncio.Future[str | None]: ...

@final
class ChainStream(Iterator[str]):
    def __iter__(self) -> ChainStream: ...
    def __next__(self) -> str: ...

@final
class Usage:
    """Token counts; a figure the provider did not report is ``None``."""

    @property
    def input_tokens(self) -> int | None: ...
    @property
    def output_tokens(self) -> int | None: ...
    @property
    def cache_read_tokens(self) -> int | None: ...
    @property
    def cache_write_tokens(self) -> int | None: ...

@final
class ToolSpec:
    """A tool as offered to a model."""

    @property
    def name(self) -> str: ...
    @property
    def description(self) -> str: ...
    @property
    def input_schema(self) -> dict[str, Any]: ...
    @property
    def schema_hash(self) -> str: ...

@final
class ToolCall:
    """A tool call a model made; ``arguments`` exactly as written."""

    @property
    def id(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def arguments(self) -> str: ...
    def json(self) -> Any: ...

@final
class ToolResult:
    @property
    def call_id(self) -> str: ...
    @property
    def content(self) -> str: ...
    @property
    def is_error(self) -> bool: ...

@final
class Attachment:
    """A file attached to a prompt: a ``path`` or ``content`` bytes, its
    media type given as ``type`` or told from its first bytes (or name)."""

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        content: bytes | None = None,
        type: str | None = None,
    ) -> None: ...
    @property
    def type(self) -> str: ...
    @property
    def size(self) -> int: ...

@final
class Message:
    """One message of a history, with its node id."""

    @property
    def id(self) -> str: ...
    @property
    def role(self) -> str: ...
    @property
    def text(self) -> str: ...
    @property
    def tool_calls(self) -> list[ToolCall]: ...
    @property
    def tool_results(self) -> list[ToolResult]: ...
    @property
    def erased(self) -> list[Erased]:
        """Its erased parts (empty unless it was redacted)."""
    @property
    def is_erased(self) -> bool: ...

@final
class Erased:
    """An erased part's tombstone: what it was, the digest of the content,
    who erased it, when and why. The content itself is gone."""

    @property
    def index(self) -> int: ...
    @property
    def kind(self) -> Literal["text", "tool_call", "tool_result", "attachment"]: ...
    @property
    def digest(self) -> str: ...
    @property
    def erased_by(self) -> str: ...
    @property
    def erased_at_ms(self) -> int: ...
    @property
    def reason(self) -> str: ...
    @property
    def call_id(self) -> str | None: ...
    @property
    def tool_name(self) -> str | None: ...
    @property
    def media_type(self) -> str | None: ...

@final
class DriftWarning:
    """A tool offered under a different input schema than before."""

    @property
    def tool(self) -> str: ...
    @property
    def previous_schema(self) -> str: ...
    @property
    def current_schema(self) -> str: ...

@final
class Source:
    """A named piece of context a recorded chat renders, tagged."""

    def __init__(self, id: str, text: str, kind: str = "fact") -> None: ...
    @staticmethod
    def fact(id: str, text: str) -> Source: ...
    @staticmethod
    def document(id: str, text: str) -> Source: ...
    @staticmethod
    def memory(id: str, text: str) -> Source: ...
    @property
    def id(self) -> str: ...
    @property
    def text(self) -> str: ...
    @property
    def kind(self) -> str: ...

@final
class SourceInfo:
    @property
    def id(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def hook(self) -> bool: ...

@final
class RecordedTurn:
    """One recorded turn's frozen evidence."""

    @property
    def index(self) -> int: ...
    @property
    def user_text(self) -> str: ...
    @property
    def text(self) -> str: ...
    @property
    def node(self) -> str: ...
    @property
    def sources(self) -> list[SourceInfo]: ...
    @property
    def tools(self) -> list[ToolSpec]: ...
    @property
    def runs(self) -> list[str]: ...
    @property
    def usage(self) -> Usage: ...
    @property
    def request(self) -> list[Message]: ...
    @property
    def messages(self) -> list[Message]: ...

@final
class Suspect:
    @property
    def id(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def score(self) -> float: ...
    @property
    def fa(self) -> float: ...
    @property
    def avg(self) -> float | None: ...
    @property
    def persist(self) -> float | None: ...
    @property
    def depth(self) -> float: ...

@final
class Report:
    """A turn's sources ranked by resemblance to its reply (correlational)."""

    @property
    def turn(self) -> int: ...
    @property
    def node(self) -> str: ...
    @property
    def embedder(self) -> str: ...
    @property
    def max_suspects(self) -> int: ...
    @property
    def suspects(self) -> list[Suspect]: ...
    @property
    def beyond_cap(self) -> list[Suspect]: ...
    @property
    def is_correlational(self) -> bool: ...
    def removable(self) -> list[str]: ...
    def render(self) -> str: ...

@final
class Sample:
    @property
    def answer(self) -> str: ...
    @property
    def changed(self) -> bool: ...
    @property
    def similarity(self) -> float | None: ...
    @property
    def decided_by(self) -> str | None: ...
    @property
    def why(self) -> str | None: ...
    @property
    def runs(self) -> list[str]: ...

@final
class Rerun:
    """A rerun of one turn without chosen sources."""

    @property
    def id(self) -> str: ...
    @property
    def chat_id(self) -> str: ...
    @property
    def turn(self) -> int: ...
    @property
    def turn_node(self) -> str: ...
    @property
    def removed(self) -> list[str]: ...
    @property
    def original(self) -> str: ...
    @property
    def answer(self) -> str: ...
    @property
    def answers(self) -> list[str]: ...
    @property
    def samples(self) -> list[Sample]: ...
    @property
    def answer_flipped(self) -> bool: ...
    @property
    def flips(self) -> int: ...
    @property
    def summary(self) -> str: ...
    @property
    def baseline(self) -> list[Sample] | None: ...
    @property
    def baseline_stable(self) -> bool | None: ...
    @property
    def verdict(self) -> str | None: ...
    def render(self) -> str: ...

@final
class RecordedChat:
    """A chat recorded turn by turn: explain, re-run without sources, fork."""

    def __init__(
        self,
        model: ModelLike,
        *,
        system: str | None = None,
        sources: Iterable[Source] = (),
        tools: Iterable[ToolLike] | None = None,
        store: Store | None = None,
        name: str | None = None,
        embedder: str | None = None,
        chain_limit: int | None = None,
        removed: Iterable[str] = (),
        before_call: BeforeCall | None = None,
    ) -> None: ...
    @staticmethod
    def load(
        store: Store,
        id: str,
        *,
        model: ModelLike | None = None,
        tools: Iterable[ToolLike] | None = None,
        embedder: str | None = None,
        before_call: BeforeCall | None = None,
    ) -> RecordedChat: ...
    @property
    def id(self) -> str: ...
    @property
    def conversation_id(self) -> str | None: ...
    @property
    def turns(self) -> list[RecordedTurn]: ...
    @property
    def removed(self) -> list[str]: ...
    def messages(self) -> list[Message]: ...
    def send(self, text: str) -> RecordedTurn: ...
    def reason(self, k: int, *, max_suspects: int | None = None, fresh: bool = False) -> Report: ...
    def rerun_turn(
        self,
        k: int,
        *,
        ignore: list[str],
        samples: int = 3,
        baseline: bool = False,
        comparator: Callable[[str, str], bool] | None = None,
        threshold: float | None = None,
        compare: list[str] | None = None,
    ) -> Rerun: ...
    def fork(self, k: int, *, from_rerun: Rerun | None = None) -> RecordedChat: ...
    def _send_async(self, text: str) -> asyncio.Future[RecordedTurn]: ...
    def _reason_async(
        self, k: int, *, max_suspects: int | None = None, fresh: bool = False
    ) -> asyncio.Future[Report]: ...
    def _rerun_turn_async(
        self,
        k: int,
        *,
        ignore: list[str],
        samples: int = 3,
        baseline: bool = False,
        comparator: Callable[[str, str], bool] | None = None,
        threshold: float | None = None,
        compare: list[str] | None = None,
    ) -> asyncio.Future[Rerun]: ...
    def _fork_async(self, k: int, *, from_rerun: Rerun | None = None) -> asyncio.Future[RecordedChat]: ...
