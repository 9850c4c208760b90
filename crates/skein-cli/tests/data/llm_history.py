"""Write an `llm` logs.db with the real `llm` package and its `llm-echo`
model: a multi-turn conversation, a fork of it, and a tool-using chain.
Usage: python llm_history.py PATH/logs.db"""

import json
import sys

import llm
import sqlite_utils
from llm.logs import LogStore

db = sqlite_utils.Database(sys.argv[1])
model = llm.get_model("echo")

# A conversation of three turns.
conversation = model.conversation()
first = conversation.prompt("first question", system="Be brief.")
first.text()
first.log_to_db(db)
second = conversation.prompt("second question")
second.text()
second.log_to_db(db)
third = conversation.prompt("third question")
third.text()
third.log_to_db(db)

# A fork at the first reply, continued with one turn of its own.
store = LogStore(db)
tip = next(
    db.query(
        "select tip_message_hash from turns where thread_id = ? order by datetime_utc limit 1",
        [conversation.id],
    )
)["tip_message_hash"]
fork = store.fork(tip, name="the fork", forked_from=conversation.id)
store.append(fork, [llm.parts.Message(role="user", parts=[llm.parts.TextPart(text="a forked question")])])


# A chain: the echo model calls a tool, then answers with its result.
def multiply(a: int, b: int) -> int:
    "Multiply two integers."
    return a * b


chain = model.chain(
    json.dumps({"prompt": "multiply please", "tool_calls": [{"name": "multiply", "arguments": {"a": 6, "b": 7}}]}),
    tools=[multiply],
)
chain.text()
for response in chain.responses():
    response.log_to_db(db)
print(json.dumps({"conversation": conversation.id}))
