"""One conversation through all three of skein's proxy APIs with the
official clients: chat completions (an image, a tool round trip), then the
same history, plus a turn, through Anthropic Messages (the tool call as a
tool_use block whose input the SDK re-serialises), then the same history,
plus a turn, through OpenAI Responses (as input items). The later turns
offer no tools, so the scripted model answers them in words. Prints the
replies as JSON."""

import base64
import json
import sys

import anthropic
from openai import OpenAI

base = sys.argv[1]
# Larger than the store's blob threshold, so it is stored as one blob.
image = base64.b64encode(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 20).decode()
tools = {"name": "get_weather", "description": "The weather in a city"}
schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
out = {}

chat = OpenAI(base_url=f"{base}/v1", api_key="sk-unused")
messages = [
    {"role": "system", "content": "Be brief."},
    {
        "role": "user",
        "content": [
            {"type": "text", "text": "look at this"},
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{image}"}},
        ],
    },
]
first = chat.chat.completions.create(model="gpt-test", messages=messages).choices[0].message.content
messages += [
    {"role": "assistant", "content": first},
    {"role": "user", "content": "what is the weather?"},
]
chat_tools = [{"type": "function", "function": {**tools, "parameters": schema}}]
reply = chat.chat.completions.create(model="gpt-test", messages=messages, tools=chat_tools)
call = reply.choices[0].message.tool_calls[0]
messages += [
    reply.choices[0].message.model_dump(exclude_none=True),
    {"role": "tool", "tool_call_id": call.id, "content": "sunny"},
]
answer = chat.chat.completions.create(model="gpt-test", messages=messages, tools=chat_tools).choices[0].message.content
out["chat"] = [first, call.function.arguments, answer]

claude = anthropic.Anthropic(base_url=base, api_key="sk-unused")
reply = claude.messages.create(
    model="claude-test",
    max_tokens=100,
    system="Be brief.",
    messages=[
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "look at this"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": image}},
            ],
        },
        {"role": "assistant", "content": first},
        {"role": "user", "content": "what is the weather?"},
        {
            "role": "assistant",
            "content": [
                {
                    "type": "tool_use",
                    "id": call.id,
                    "name": call.function.name,
                    "input": json.loads(call.function.arguments),
                }
            ],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "sunny"}]},
        {"role": "assistant", "content": answer},
        {"role": "user", "content": "thanks"},
    ],
)
thanks = reply.content[0].text
out["anthropic"] = thanks

responses = OpenAI(base_url=f"{base}/v1", api_key="sk-unused")
reply = responses.responses.create(
    model="gpt-test",
    instructions="Be brief.",
    input=[
        {
            "role": "user",
            "content": [
                {"type": "input_text", "text": "look at this"},
                {"type": "input_image", "image_url": f"data:image/png;base64,{image}"},
            ],
        },
        {"role": "assistant", "content": first},
        {"role": "user", "content": "what is the weather?"},
        {
            "type": "function_call",
            "call_id": call.id,
            "name": call.function.name,
            "arguments": call.function.arguments,
        },
        {"type": "function_call_output", "call_id": call.id, "output": "sunny"},
        {"role": "assistant", "content": [{"type": "output_text", "text": answer}]},
        {"role": "user", "content": "thanks"},
        {"role": "assistant", "content": thanks},
        {"role": "user", "content": "bye"},
    ],
)
out["responses"] = reply.output_text
print(json.dumps(out))
