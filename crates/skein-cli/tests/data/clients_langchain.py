"""Drive skein's recording proxy with langchain-openai (chat completions):
a tool round trip (the model's compact arguments `{"city":"Paris"}`, which
LangChain re-sends through `json.dumps` as `{"city": "Paris"}`), then a
streamed follow-up turn. An optional second argument names the session
(`x-skein-session` through the client's default headers). Prints what came
back as JSON."""

import json
import sys

from langchain_core.messages import HumanMessage, SystemMessage, ToolMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI


@tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return "sunny"


headers = {"x-skein-session": sys.argv[2]} if len(sys.argv) > 2 else None
llm = ChatOpenAI(
    base_url=sys.argv[1], api_key="sk-unused", model="gpt-test", default_headers=headers, max_retries=0
)
out = {}

messages = [SystemMessage("Be brief."), HumanMessage("what is the weather in Paris?")]
reply = llm.bind_tools([get_weather]).invoke(messages)
call = reply.tool_calls[0]
out["call"] = [call["name"], call["args"]]
messages += [reply, ToolMessage(get_weather.invoke(call["args"]), tool_call_id=call["id"])]
reply = llm.bind_tools([get_weather]).invoke(messages)
out["answer"] = reply.content
messages += [reply, HumanMessage("thanks")]
out["streamed"] = "".join(chunk.content for chunk in llm.stream(messages))
print(json.dumps(out))
