"""Drive skein's recording proxy with pydantic-ai (chat completions): an
agent with a tool and structured output (its `final_result` output tool)
answers a question, then a follow-up turn on the same message history,
streamed. Prints what came back as JSON."""

import asyncio
import json
import sys

from pydantic import BaseModel
from pydantic_ai import Agent
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider


class Forecast(BaseModel):
    city: str
    weather: str


model = OpenAIChatModel("gpt-test", provider=OpenAIProvider(base_url=sys.argv[1], api_key="sk-unused"))
agent = Agent(model, output_type=Forecast, instructions="Be brief.")


@agent.tool_plain
def get_weather(city: str) -> str:
    """The weather in a city."""
    return "sunny"


async def main():
    out = {}
    result = await agent.run("what is the weather in Paris?")
    out["first"] = result.output.model_dump()
    async with agent.run_stream("and now?", message_history=result.all_messages()) as stream:
        out["streamed"] = (await stream.get_output()).model_dump()
    print(json.dumps(out))


asyncio.run(main())
