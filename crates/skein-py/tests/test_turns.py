"""The seed's test list (response.reply, response.fork, model.chain, per-call
tool sets, the schema-drift warning), on the turn layer through Python.
Their async twins are in test_async.py."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

import skein


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def lookup(key: str) -> str:
    """Look a key up."""
    return f"value of {key}"


def other(flag: bool = False) -> str:
    """Another tool."""
    return "other"


def names(specs: list[skein.ToolSpec]) -> list[str]:
    return [spec.name for spec in specs]


def test_reply_extends_the_thread_through_the_response(echo: skein.Model) -> None:
    first = echo.prompt("Ten words about rivers.")
    second = first.reply("Now about lakes.")
    history = second.messages()
    assert [message.role for message in history] == ["user", "assistant", "user", "assistant"]
    # The new turn's parent chain runs through the first response's node.
    assert history[1].id == first.id
    assert history[-1].id == second.id
    assert second.conversation.id == first.conversation.id
    assert "Now about lakes." in second.text()


def test_reply_tools_override_the_conversations_tools_for_that_turn_only(echo: skein.Model) -> None:
    conversation = echo.conversation(tools=[add])
    first = conversation.prompt("one")
    assert names(first.tools) == ["add"]
    second = first.reply("two", tools=[lookup])
    assert names(second.tools) == ["lookup"]
    assert names(second.reply("three", tools=[]).tools) == []
    assert names(second.reply("four").tools) == ["add"]


def test_reply_model_routes_the_turn_and_keeps_the_history(echo: skein.Model, tools_model_name: str) -> None:
    first = echo.prompt("first question")
    other_model = skein.Model(tools_model_name)
    second = first.reply("second question", model=other_model)
    assert second.text() == "plain: second question"
    assert second.model == "scripted"
    assert [m.text for m in second.messages()[:2]] == ["first question", first.text()]
    # The conversation's own model answers the turn after.
    assert second.reply("third").text().startswith("echo:")
    # A model name works too.
    assert first.reply("by name", model=tools_model_name).text() == "plain: by name"


def test_reply_on_an_ad_hoc_response_continues_its_conversation(echo: skein.Model) -> None:
    first = echo.prompt("hello")
    assert not first.conversation.is_stored
    second = first.reply("again")
    assert second.conversation.id == first.conversation.id
    assert len(second.messages()) == 4


def test_a_reply_to_an_earlier_response_branches_instead_of_moving_back(echo: skein.Model) -> None:
    first = echo.prompt("root")
    second = first.reply("left")
    branch = first.reply("right")
    assert second.conversation.id == first.conversation.id
    assert branch.conversation.id != first.conversation.id
    assert branch.messages()[1].id == first.id


def test_fork_creates_a_stored_conversation_at_the_response(echo: skein.Model, store: skein.Store) -> None:
    model = skein.Model("echo", store=store)
    first = model.prompt("shared prefix")
    first.text()
    fork = first.fork(name="alternative")
    assert isinstance(fork, skein.Conversation)
    assert fork.id != first.conversation.id
    assert fork.head == first.id
    assert fork.is_stored
    assert fork.origin == {"node": first.id, "conversation": first.conversation.id, "rerun": None}
    loaded = skein.Conversation.load(store, "alternative")
    assert loaded.id == fork.id and loaded.head == first.id


def test_fork_with_a_prompt_returns_the_new_conversations_response(echo: skein.Model) -> None:
    first = echo.prompt("shared")
    response = first.fork("a different angle")
    assert isinstance(response, skein.Response)
    assert response.conversation.id != first.conversation.id
    assert response.messages()[1].id == first.id
    assert "a different angle" in response.text()


def test_fork_of_an_unlogged_response_works_and_logging_it_later_shares_the_prefix(
    echo: skein.Model, store: skein.Store
) -> None:
    first = echo.prompt("not stored")
    branch = first.fork("branch")
    assert isinstance(branch, skein.Response)
    first_id = first.log(store)
    branch_id = branch.log(store)
    original = skein.Conversation.load(store, first_id)
    forked = skein.Conversation.load(store, branch_id)
    assert original.messages()[1].id == forked.messages()[1].id == first.id


def test_model_chain_runs_python_tools_and_returns_a_chain_response(tools_model: skein.Model) -> None:
    chain = tools_model.chain("please add", tools=[add])
    assert chain.text() == "result: 5"
    assert chain.status == "completed"
    responses = chain.responses()
    assert len(responses) == 2
    call = responses[0].tool_calls()[0]
    assert call.name == "add" and call.json() == {"a": 2, "b": 3}
    tool_message = chain.messages()[-2]
    assert tool_message.role == "tool"
    assert tool_message.tool_results[0].content == "5"
    assert not tool_message.tool_results[0].is_error


def test_model_chain_without_tools_is_a_single_prompt(tools_model: skein.Model) -> None:
    chain = tools_model.chain("please add", tools=[])
    assert len(chain.responses()) == 1
    assert chain.text() == "plain: please add"
    assert chain.responses()[0].tools == []


def test_model_chain_limit_bounds_that_chain(tools_model: skein.Model) -> None:
    limited = tools_model.chain("please add", tools=[add], chain_limit=1)
    assert limited.status == "limit_reached"
    assert len(limited.responses()) == 1
    assert limited.conversation.chain_limit == 1
    assert limited.responses()[0].tool_calls()[0].name == "add"
    free = tools_model.chain("please add", tools=[add])
    assert free.status == "completed"
    assert len(free.responses()) == 2


def test_a_conversations_chain_limit_is_replaced_for_one_loop_only(tools_model: skein.Model) -> None:
    conversation = tools_model.conversation(tools=[add], chain_limit=1)
    raised = conversation.chain("please add", chain_limit=3)
    assert raised.status == "completed"
    assert len(raised.responses()) == 2
    assert conversation.chain_limit == 1
    again = conversation.chain("please add again")
    assert again.status == "limit_reached"
    lowered = tools_model.conversation(tools=[add]).chain("please add", chain_limit=1)
    assert lowered.status == "limit_reached"
    assert lowered.conversation.chain_limit == 10


def test_dynamic_tool_sets_keep_earlier_calls_in_the_history(tools_model: skein.Model) -> None:
    conversation = tools_model.conversation()
    first = conversation.chain("please add", tools=[add, lookup])
    assert first.text() == "result: 5"
    second = first.reply("now lookup", tools=[lookup, other])
    assert names(second.tools) == ["lookup", "other"]
    # A prompt offers tools without running them: the model's call is there.
    assert second.tool_calls()[0].name == "lookup"
    chained = conversation.chain("lookup again", tools=[lookup, other])
    assert chained.text() == "result: value of x"
    history = chained.messages()
    calls = [call.name for message in history for call in message.tool_calls]
    results = [result.content for message in history for result in message.tool_results]
    assert calls[0] == "add" and "5" in results  # call 1's pair survives
    assert names(chained.responses()[0].tools) == ["lookup", "other"]


def test_schema_drift_warns_when_a_tool_changes_its_schema(echo: skein.Model) -> None:
    def lookup_by_number(key: int) -> str:
        """Look a key up by number."""
        return str(key)

    renamed = skein.Tool.function(lookup_by_number, name="lookup")
    conversation = echo.conversation(tools=[lookup])
    first = conversation.prompt("one")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert first.warnings == []
    with pytest.warns(skein.ToolSchemaDrift, match="lookup"):
        second = first.reply("two", tools=[renamed])
        second.text()
    assert [warning.tool for warning in second.warnings] == ["lookup"]
    assert second.warnings[0].previous_schema != second.warnings[0].current_schema


def test_a_chain_response_replies_from_its_end(tools_model: skein.Model) -> None:
    chain = tools_model.chain("please add", tools=[add])
    after = chain.reply("thanks")
    assert after.text() == "plain: thanks"
    assert after.messages()[-3].id == chain.id


def test_streaming_by_iteration_gives_the_reply_in_chunks(echo: skein.Model) -> None:
    response = echo.prompt("stream this please")
    chunks = list(response)
    assert len(chunks) > 1
    assert "".join(chunks) == response.text()
    # Iterating a finished response replays it.
    assert list(response) == chunks


def test_a_response_runs_once_whoever_reads_it(echo: skein.Model, store: skein.Store) -> None:
    model = skein.Model("echo", store=store)
    response = model.prompt("once")
    assert response.id == response.id
    assert response.text() == "".join(response)
    conversation = skein.Conversation.load(store, response.conversation.id)
    assert len(conversation.messages()) == 2


def test_schema_and_options_reach_the_engine(echo: skein.Model) -> None:
    with pytest.raises(ValueError, match="temperature"):
        echo.prompt("x", temperature=5.0)
    response = echo.prompt("x", temperature=0.5, max_tokens=50, seed=3, system="Be brief.")
    assert "system: yes" in response.text()


def test_fork_at_branches_at_any_stored_node(store: skein.Store) -> None:
    model = skein.Model("echo", store=store)
    first = model.prompt("root")
    second = first.reply("next")
    second.text()
    branch = skein.Conversation.fork_at(store, first.id[:12], "elsewhere", name="at the root")
    assert isinstance(branch, skein.Response)
    assert branch.messages()[1].id == first.id
    assert branch.conversation.name == "at the root"
    assert branch.conversation.origin == {"node": first.id, "conversation": first.conversation.id, "rerun": None}
    empty = skein.Conversation.fork_at(store, second.id)
    assert isinstance(empty, skein.Conversation) and empty.head == second.id and empty.is_stored


def test_again_at_retries_edits_and_regenerates_a_stored_message(store: skein.Store) -> None:
    model = skein.Model("echo", store=store)
    first = model.conversation(name="main").prompt("root")
    second = first.reply("next")
    second.text()
    main = first.conversation.id
    root, _, following, reply = (message.id for message in second.messages())
    # An edit of the thread's first message: a branch from the start.
    edited = skein.Conversation.again_at(store, root[:12], "root, reworded", name="reworded")
    assert isinstance(edited, skein.Response)
    assert "root, reworded" in edited.text()
    assert edited.conversation.name == "reworded"
    assert edited.conversation.origin == {"node": None, "conversation": main, "rerun": None}
    # A retry of a later message: a branch at it, the message shared.
    retried = skein.Conversation.again_at(store, following)
    retried.text()
    assert retried.messages()[2].id == following
    assert retried.conversation.origin == {"node": following, "conversation": main, "rerun": None}
    # A regenerated reply: a branch at its request.
    regenerated = skein.Conversation.again_at(store, reply)
    regenerated.text()
    assert regenerated.conversation.origin == {"node": following, "conversation": main, "rerun": None}
    assert skein.Conversation.load(store, "main").head == reply, "the origin never moves"
    with pytest.raises(skein.SkeinError, match="a reply is regenerated, not edited"):
        skein.Conversation.again_at(store, reply, "new words")


def test_the_store_finds_messages_by_their_words(store: skein.Store) -> None:
    model = skein.Model("echo", store=store)
    conversation = model.conversation(name="rivers")
    conversation.prompt("Tell me about the Danube delta").text()
    conversation.prompt("and the Rhine").text()
    found = store.search("danube", limit=10)
    users = [m for m in found["matches"] if m["role"] == "user"]
    assert len(users) == 1
    assert users[0]["snippet"] == "Tell me about the Danube delta"
    assert users[0]["conversations"][0]["name"] == "rivers"
    assert found["truncated"] is False
    assert len(store.search("the", limit=1)["matches"]) == 1
    assert store.search("rhine", conversation="rivers")["matches"]
    with pytest.raises(skein.StoreError, match="unclosed quote"):
        store.search('"open')


def test_attachments_go_in_the_prompt_s_message_and_are_recorded(
    tmp_path: Path, echo: skein.Model, store: skein.Store
) -> None:
    pixel = tmp_path / "pixel.png"
    pixel.write_bytes(bytes.fromhex("89504e470d0a1a0a") + bytes(16))
    image = skein.Attachment(pixel)
    assert (image.type, image.size) == ("image/png", 24)
    notes = skein.Attachment(content=b"plain words", type="Text/Plain")
    assert notes.type == "text/plain"

    recorded = skein.Model("echo", store=store)
    first = recorded.prompt("what is this?", attachments=[image, notes])
    assert first.text().startswith(
        'echo: "what is this?" [attachment: image/png, 24 bytes] [attachment: text/plain, 11 bytes]'
    )
    # A reply and a fork take them too; the text may be left empty.
    again = first.reply("", attachments=[image])
    assert again.text().startswith('echo: "" [attachment: image/png, 24 bytes]')
    forked = first.fork("and this?", attachments=[notes])
    assert isinstance(forked, skein.Response)
    assert "[attachment: text/plain, 11 bytes]" in forked.text()
    # Stored as parts of the one user message, with the CLI's database.
    loaded = skein.Conversation.load(store, first.conversation.id)
    assert loaded.messages()[-2].role == "user"

    with pytest.raises(ValueError, match="exactly one"):
        skein.Attachment()
    with pytest.raises(ValueError, match="exactly one"):
        skein.Attachment(pixel, content=b"x")
    with pytest.raises(ValueError, match="is empty"):
        skein.Attachment(content=b"")
    with pytest.raises(ValueError, match="cannot tell what kind of file"):
        skein.Attachment(content=bytes([0, 159, 146, 150]))
    with pytest.raises(ValueError, match="not a media type"):
        skein.Attachment(content=b"x", type="png")
    with pytest.raises(FileNotFoundError):
        skein.Attachment(tmp_path / "missing.png")
