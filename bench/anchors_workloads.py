"""The anchor workloads for PyPI `llm` (with `llm-echo`) and LangGraph (a
one-node graph appending a fixed reply, checkpointed by SqliteSaver), run
inside the venv that bench/anchors.py creates. Prints one JSON object.

    python anchors_workloads.py llm|langgraph
    python anchors_workloads.py llm-deep TURNS

The workloads mirror crates/skein/examples/anchors.rs: the same ~200-byte
questions and the same replies skein's `echo` model gives, so every tool
stores the same text. `llm-deep` logs a conversation of TURNS echo turns
into the `logs.db` of `$LLM_USER_PATH` (what `llm -c` continues), as
`anchors --deep` does for skein, and prints its id.
"""

import json
import os
import sqlite3
import statistics
import sys
import tempfile
import time


# Timed loads of the 1,000-message thread per tool (after each, the previous
# result is freed inside the next timing, as skein's loop does too).
LOAD_REPS = 30


def question(i):
    return f"question {i}: " + "lorem ipsum dolor sit amet " * 7


def reply(i, history):
    # Byte for byte what skein's echo model answers.
    return f'echo: "{question(i)}" (history: {history} messages, system: no, tools: 0)'


def summary(times):
    return {
        "mean_ms": round(statistics.fmean(times) * 1e3, 3),
        "median_ms": round(statistics.median(times) * 1e3, 3),
        "n": len(times),
    }


def file_size(path):
    try:
        conn = sqlite3.connect(path)
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.close()
    except sqlite3.Error:
        pass
    total = 0
    for suffix in ("", "-wal"):
        if os.path.exists(path + suffix):
            total += os.path.getsize(path + suffix)
    return total


def turns_report(times, size_250, size_500):
    return {
        "first_tenth": summary(times[:50]),
        "last_tenth": summary(times[450:]),
        "all": summary(times),
        "bytes_at_250": size_250,
        "bytes_at_500": size_500,
    }


def open_llm_db(path):
    import sqlite_utils
    from llm.migrations import migrate

    db = sqlite_utils.Database(path)
    migrate(db)
    return db


def llm_turn(conversation, db, i, text=None):
    # llm-echo answers a JSON prompt's "raw" field verbatim.
    prompt = json.dumps(
        {"prompt": text or question(i), "raw": reply(i, 2 * len(conversation.responses) + 1)}
    )
    response = conversation.prompt(prompt)
    response.text()
    response.log_to_db(db)


def run_llm_deep(turns):
    """A conversation of `turns` turns in the logs.db `llm -c` reads."""
    import llm
    from llm.cli import logs_db_path

    path = logs_db_path()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    db = open_llm_db(str(path))
    conversation = llm.get_model("echo").conversation()
    for i in range(turns):
        llm_turn(conversation, db, i)
    return {"conversation": conversation.id, "turns": turns}


def run_llm(dir):
    import llm
    from llm.cli import load_conversation

    model = llm.get_model("echo")
    open_db, turn = open_llm_db, llm_turn

    path = os.path.join(dir, "turns.db")
    db = open_db(path)
    conversation = model.conversation()
    times = []
    size_250 = 0
    for i in range(500):
        started = time.perf_counter()
        turn(conversation, db, i)
        times.append(time.perf_counter() - started)
        if i == 249:
            size_250 = file_size(path)
    turns = turns_report(times, size_250, file_size(path))
    long_id = conversation.id

    # llm 0.36 forks natively: LogStore.fork starts a thread at a stored
    # message without copying; the fork is loaded and given one prompt.
    from llm.logs import LogStore

    fork_path = os.path.join(dir, "forks.db")
    fork_db = open_db(fork_path)
    base = model.conversation()
    middle = None
    for i in range(200):
        turn(base, fork_db, i)
        if i == 99:
            middle = LogStore(fork_db).thread_tip(base.id)
    before = file_size(fork_path)
    fork_times = []
    for i in range(100):
        started = time.perf_counter()
        store = LogStore(fork_db)
        fork = model.conversation()
        fork.id = store.fork(middle)
        fork.loaded_messages = store.thread_messages(fork.id)
        assert len(fork.loaded_messages) == 200, len(fork.loaded_messages)
        turn(fork, fork_db, 100, text=f"fork {i}")
        fork_times.append(time.perf_counter() - started)
    assert len(LogStore(fork_db).thread_messages(fork.id)) == 202
    forks = {
        "per_fork": summary(fork_times),
        "bytes_before_forks": before,
        "bytes_per_fork": (file_size(fork_path) - before) / 100,
    }

    load_times = []
    for _ in range(LOAD_REPS):
        started = time.perf_counter()
        loaded = load_conversation(long_id, database=path)
        load_times.append(time.perf_counter() - started)
        assert len(loaded.loaded_messages) == 1000, len(loaded.loaded_messages)
    return {"tool": "llm", "turns": turns, "forks": forks, "load": {"conversation_load": summary(load_times)}}


def run_langgraph(dir):
    from langchain_core.messages import AIMessage, HumanMessage
    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.graph import END, START, MessagesState, StateGraph

    def build(path):
        conn = sqlite3.connect(path, check_same_thread=False)
        graph = StateGraph(MessagesState)

        def answer(state):
            history = len(state["messages"])
            i = history // 2
            return {"messages": [AIMessage(content=reply(i, history))]}

        graph.add_node("answer", answer)
        graph.add_edge(START, "answer")
        graph.add_edge("answer", END)
        return graph.compile(checkpointer=SqliteSaver(conn))

    path = os.path.join(dir, "turns.db")
    graph = build(path)
    config = {"configurable": {"thread_id": "long"}}
    times = []
    size_250 = 0
    for i in range(500):
        started = time.perf_counter()
        graph.invoke({"messages": [HumanMessage(content=question(i))]}, config)
        times.append(time.perf_counter() - started)
        if i == 249:
            size_250 = file_size(path)
    turns = turns_report(times, size_250, file_size(path))

    # A fork is LangGraph's own: invoking from an earlier checkpoint of the
    # thread branches there.
    fork_path = os.path.join(dir, "forks.db")
    fork_graph = build(fork_path)
    base = {"configurable": {"thread_id": "base"}}
    for i in range(200):
        fork_graph.invoke({"messages": [HumanMessage(content=question(i))]}, base)
    middle = next(
        state.config
        for state in fork_graph.get_state_history(base)
        if len(state.values.get("messages", [])) == 200 and not state.next
    )
    before = file_size(fork_path)
    fork_times = []
    for i in range(100):
        started = time.perf_counter()
        out = fork_graph.invoke({"messages": [HumanMessage(content=f"fork {i}")]}, middle)
        fork_times.append(time.perf_counter() - started)
        assert len(out["messages"]) == 202, len(out["messages"])
    forks = {
        "per_fork": summary(fork_times),
        "bytes_before_forks": before,
        "bytes_per_fork": (file_size(fork_path) - before) / 100,
    }

    load_times = []
    for _ in range(LOAD_REPS):
        started = time.perf_counter()
        state = graph.get_state(config)
        load_times.append(time.perf_counter() - started)
        assert len(state.values["messages"]) == 1000
    return {"tool": "langgraph", "turns": turns, "forks": forks, "load": {"conversation_load": summary(load_times)}}


if __name__ == "__main__":
    if sys.argv[1] == "llm-deep":
        print(json.dumps(run_llm_deep(int(sys.argv[2]))))
        sys.exit()
    with tempfile.TemporaryDirectory() as dir:
        run = {"llm": run_llm, "langgraph": run_langgraph}[sys.argv[1]]
        print(json.dumps(run(dir)))
