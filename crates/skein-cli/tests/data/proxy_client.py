"""Drive skein's recording proxy with the official openai client: a
multi-turn conversation re-sent whole each turn (content once as a string,
once as an array of text parts), a streamed reply, a tool-call round trip
and an image in a turn. Prints what came back as JSON."""

import json
import sys

from openai import OpenAI

client = OpenAI(base_url=sys.argv[1], api_key="sk-client-key-never-forwarded")
out = {}

messages = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "hello"},
]
reply = client.chat.completions.create(model="any", messages=messages)
out["first"] = reply.choices[0].message.content
messages.append({"role": "assistant", "content": out["first"]})
messages.append({"role": "user", "content": [{"type": "text", "text": "tell me more"}]})

stream = client.chat.completions.create(
    model="any", messages=messages, stream=True, stream_options={"include_usage": True}
)
pieces = []
for chunk in stream:
    if chunk.choices and chunk.choices[0].delta.content:
        pieces.append(chunk.choices[0].delta.content)
out["streamed"] = "".join(pieces)
# Re-serialised differently: the earlier turn as an array of text parts.
messages[2] = {"role": "assistant", "content": [{"type": "text", "text": out["first"]}]}
messages.append({"role": "assistant", "content": out["streamed"]})
messages.append({"role": "user", "content": "what is the weather?"})

tools = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]
reply = client.chat.completions.create(model="any", messages=messages, tools=tools)
call = reply.choices[0].message.tool_calls[0]
out["call"] = [call.function.name, json.loads(call.function.arguments)]
out["finish"] = reply.choices[0].finish_reason
messages.append(reply.choices[0].message.model_dump(exclude_none=True))
messages.append({"role": "tool", "tool_call_id": call.id, "content": "sunny"})
reply = client.chat.completions.create(model="any", messages=messages, tools=tools)
out["final"] = reply.choices[0].message.content
messages.append({"role": "assistant", "content": out["final"]})

# A 1x1 PNG.
png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
messages.append(
    {
        "role": "user",
        "content": [
            {"type": "text", "text": "what is in this image?"},
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{png}"}},
        ],
    }
)
reply = client.chat.completions.create(model="any", messages=messages)
out["image"] = reply.choices[0].message.content
print(json.dumps(out))
