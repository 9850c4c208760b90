"""Drive skein's recording proxy with the official anthropic client: a
three-turn conversation streamed with `messages.stream` (each turn re-sent
whole, the replies passed back as the SDK returns them), a tool round trip
(tool_use, then tool_result), and an image in a turn with a cache_control
hint. Prints what came back as JSON."""

import json
import sys

import anthropic

# A 1x1 PNG.
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="

client = anthropic.Anthropic(base_url=sys.argv[1], api_key="sk-ant-client-key-never-forwarded")
model = "claude-test"
system = "Be brief."
out = {"streamed": []}

messages = []
for prompt in ["hello", "tell me more", "and then?"]:
    messages.append({"role": "user", "content": prompt})
    with client.messages.stream(model=model, max_tokens=100, system=system, messages=messages) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert final.content[0].text == text, (final.content, text)
    out["streamed"].append(text)
    messages.append({"role": "assistant", "content": final.content})

tools = [
    {
        "name": "get_weather",
        "description": "The weather in a city",
        "input_schema": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    }
]
messages.append({"role": "user", "content": "what is the weather?"})
reply = client.messages.create(model=model, max_tokens=100, system=system, messages=messages, tools=tools)
call = next(block for block in reply.content if block.type == "tool_use")
out["call"] = [call.name, call.input]
out["stop"] = reply.stop_reason
messages.append({"role": "assistant", "content": reply.content})
messages.append(
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "sunny"}]}
)
reply = client.messages.create(model=model, max_tokens=100, system=system, messages=messages, tools=tools)
out["final"] = reply.content[0].text
messages.append({"role": "assistant", "content": reply.content})

messages.append(
    {
        "role": "user",
        "content": [
            {"type": "text", "text": "what is in this image?"},
            {
                "type": "image",
                "source": {"type": "base64", "media_type": "image/png", "data": PNG},
                "cache_control": {"type": "ephemeral"},
            },
        ],
    }
)
reply = client.messages.create(model=model, max_tokens=100, system=system, messages=messages)
out["image"] = reply.content[0].text
out["model"] = reply.model
out["models"] = [model.id for model in client.models.list()]

try:
    client.messages.create(
        model=model,
        max_tokens=100,
        messages=[{"role": "user", "content": [{"type": "thinking", "thinking": "hm", "signature": "x"}]}],
    )
except anthropic.BadRequestError as error:
    out["refused"] = [error.status_code, error.body["error"]["type"], error.body["error"]["message"]]
print(json.dumps(out))
