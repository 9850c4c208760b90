"""The asyncio twins: the seed's list again through AsyncModel, and two
conversations running concurrently."""

from __future__ import annotations

import asyncio

import pytest

import skein

from .test_turns import add, lookup, other


def test_async_prompt_reply_fork_and_streaming(store: skein.Store) -> None:
    async def main() -> None:
        model = skein.AsyncModel("echo", store=store)
        first = model.prompt("Ten words about rivers.")
        assert "rivers" in await first.text()
        second = first.reply("Now about lakes.")
        chunks = [chunk async for chunk in second]
        assert "".join(chunks) == await second.text()
        assert second.conversation.id == first.conversation.id
        assert (await second.messages())[1].id == first.id
        fork = await first.fork(name="alt")
        assert isinstance(fork, skein.AsyncConversation)
        assert fork.head == first.id and fork.is_stored
        forked = await first.fork("a different angle")
        assert isinstance(forked, skein.AsyncResponse)
        await forked
        assert forked.conversation.id not in (first.conversation.id, fork.id)
        loaded = await skein.AsyncConversation.load(store, "alt")
        assert loaded.id == fork.id
        assert "again" in await loaded.prompt("again").text()

    asyncio.run(main())


def test_async_tools_override_model_override_and_drift(tools_model_name: str) -> None:
    async def main() -> None:
        model = skein.AsyncModel("echo")
        conversation = model.conversation(tools=[add])
        first = await conversation.prompt("one")
        assert [spec.name for spec in first.tools] == ["add"]
        second = await first.reply("two", tools=[lookup, other])
        assert [spec.name for spec in second.tools] == ["lookup", "other"]
        routed = await second.reply("three", model=skein.AsyncModel(tools_model_name))
        assert await routed.text() == "plain: three"

        def lookup_by_number(key: int) -> str:
            """Look up by number."""
            return str(key)

        with pytest.warns(skein.ToolSchemaDrift):
            drifted = await routed.reply("four", tools=[skein.Tool.function(lookup_by_number, name="lookup")])
            await drifted.text()
        assert [warning.tool for warning in drifted.warnings] == ["lookup"]

    asyncio.run(main())


def test_async_chain_with_async_tools_and_hooks(tools_model_name: str) -> None:
    async def main() -> None:
        model = skein.AsyncModel(tools_model_name)
        seen: list[str] = []

        async def add(a: int, b: int) -> int:
            """Add, on the event loop."""
            asyncio.get_running_loop()  # raises off the loop
            return a + b

        async def before(call: skein.ToolCall) -> None:
            seen.append(call.name)

        chain = model.chain("please add", tools=[add], before_call=before)
        assert [chunk async for chunk in chain] != []
        assert await chain.text() == "result: 5"
        assert chain.status == "completed"
        assert len(await chain.responses()) == 2
        assert seen == ["add"]
        assert await model.chain("please add", tools=[]).text() == "plain: please add"

    asyncio.run(main())


def test_two_conversations_run_concurrently(tools_model_name: str) -> None:
    """Each conversation's tool waits for the other's: they can only both
    finish if both turns are in flight at once."""

    async def main() -> None:
        model = skein.AsyncModel(tools_model_name)
        arrived = {"a": asyncio.Event(), "b": asyncio.Event()}

        def meeting(me: str, them: str) -> skein.Tool:
            async def rendezvous() -> str:
                """Wait for the other conversation."""
                arrived[me].set()
                await asyncio.wait_for(arrived[them].wait(), timeout=60)
                return f"{me} met {them}"

            return skein.Tool.function(rendezvous)

        first = model.conversation(tools=[meeting("a", "b")]).chain("rendezvous")
        second = model.conversation(tools=[meeting("b", "a")]).chain("rendezvous")
        texts = await asyncio.gather(first.text(), second.text())
        assert list(texts) == ["result: a met b", "result: b met a"]

    asyncio.run(main())


def test_cancelling_the_task_cancels_the_turn(tools_model_name: str) -> None:
    async def main() -> None:
        model = skein.AsyncModel(tools_model_name)
        started = asyncio.Event()

        async def rendezvous() -> str:
            """Never answers."""
            started.set()
            await asyncio.Event().wait()
            return "unreachable"

        chain = model.chain("rendezvous", tools=[rendezvous])
        task = asyncio.ensure_future(chain.text())
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())


def test_async_recorded_chat(advisor_model_name: str, store: skein.Store) -> None:
    from .test_recorded import SOURCES, SYSTEM, decision_changed

    async def main() -> None:
        chat = skein.AsyncRecordedChat(advisor_model_name, system=SYSTEM, sources=SOURCES, store=store)
        await chat.send("How is the position looking?")
        decision = await chat.send("Should we BUY or HOLD this position?")
        assert decision.text.startswith("BUY")
        report = await chat.reason(1)
        assert "social-sentiment" in report.removable()
        rerun = await chat.rerun_turn(
            1, ignore=["social-sentiment"], samples=2, baseline=True, comparator=decision_changed
        )
        assert rerun.verdict == "confirmed"
        fork = await chat.fork(1, from_rerun=rerun)
        assert (await fork.send("How much should we allocate?")).text.startswith("KEEP")
        loaded = await skein.AsyncRecordedChat.load(store, chat.id)
        assert len(loaded.turns) == 2

    asyncio.run(main())


def test_reading_an_async_response_before_awaiting_it_is_an_error() -> None:
    response = skein.AsyncModel("echo").prompt("x")
    with pytest.raises(RuntimeError, match="await the response first"):
        response.conversation
    with pytest.raises(RuntimeError, match="await the response first"):
        response.reply("y")
