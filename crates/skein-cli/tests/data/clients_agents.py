"""Drive skein's recording proxy with openai-agents (the Responses API, the
SDK's default; tracing off): a triage agent hands the question off to a
weather specialist, which calls its tool and answers, streamed; then a
follow-up turn to the specialist on the run's history. Prints what came
back as JSON."""

import asyncio
import json
import sys

from agents import Agent, Runner, function_tool, set_default_openai_client, set_tracing_disabled
from openai import AsyncOpenAI

set_tracing_disabled(True)
set_default_openai_client(AsyncOpenAI(base_url=sys.argv[1], api_key="sk-unused", max_retries=0))


@function_tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return "sunny"


specialist = Agent(
    name="Weather specialist",
    instructions="You are the weather specialist: look the weather up.",
    model="gpt-test",
    tools=[get_weather],
)
triage = Agent(
    name="Triage",
    instructions="You are the triage agent: hand weather questions off.",
    model="gpt-test",
    handoffs=[specialist],
)


async def main():
    out = {}
    result = Runner.run_streamed(triage, "what is the weather in Paris?")
    pieces = []
    async for event in result.stream_events():
        if event.type == "raw_response_event" and event.data.type == "response.output_text.delta":
            pieces.append(event.data.delta)
    out["streamed"] = "".join(pieces)
    out["answer"] = result.final_output
    out["agent"] = result.last_agent.name
    follow_up = await Runner.run(
        result.last_agent, result.to_input_list() + [{"role": "user", "content": "thanks"}]
    )
    out["follow_up"] = follow_up.final_output
    print(json.dumps(out))


asyncio.run(main())
