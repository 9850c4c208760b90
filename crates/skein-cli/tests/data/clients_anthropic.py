"""The anthropic SDK's default tool runner (`client.beta.messages.tool_runner`),
which since 2.15 keeps the conversation on the server as a message thread:
a `thread: {"type": "create"}` request, then `continue`s from the last
reply's id that carry only the tool results (no `system`, no `tools`). Run
through skein's recording proxy: a loop of two tool calls and the answer.
Prints each reply's tool calls and text as JSON."""

import json
import sys

import anthropic
from anthropic import beta_tool

assert anthropic.__version__ == "2.15.0", anthropic.__version__


@beta_tool
def find_city(query: str) -> str:
    """The city a description names.

    Args:
        query: what names the city
    """
    return "Paris"


@beta_tool
def get_forecast(city: str) -> str:
    """Tomorrow's forecast for a city.

    Args:
        city: the city
    """
    return f"FORECAST {city}: sunny"


client = anthropic.Anthropic(base_url=sys.argv[1], api_key="sk-ant-test")
runner = client.beta.messages.tool_runner(
    model="claude-test",
    max_tokens=200,
    system="Be brief.",
    tools=[find_city, get_forecast],
    messages=[{"role": "user", "content": "what is tomorrow's weather in the capital of France?"}],
)
steps = []
for message in runner:
    for block in message.content:
        if block.type == "tool_use":
            steps.append([block.name, block.input])
        elif block.type == "text":
            steps.append(block.text)
print(json.dumps({"steps": steps}))
