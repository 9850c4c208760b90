"""Drive skein's recording proxy with the official openai client's
Responses API: a three-turn conversation chained by previous_response_id
(streamed, once through the `responses.stream` helper), a tool round trip
(function_call, then function_call_output), an image in a turn, and a
response with store=False that nothing can continue. Prints what came back
as JSON."""

import json
import sys

import openai
from openai import OpenAI

PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="

client = OpenAI(base_url=sys.argv[1], api_key="sk-client-key-never-forwarded")
model = "gpt-test"
instructions = "Be brief."
out = {"streamed": []}

previous = None
for turn, prompt in enumerate(["hello", "tell me more", "and then?"]):
    options = {"model": model, "instructions": instructions, "input": prompt}
    if previous:
        options["previous_response_id"] = previous
    if turn == 1:
        with client.responses.stream(**options) as stream:
            pieces = [event.delta for event in stream if event.type == "response.output_text.delta"]
            final = stream.get_final_response()
    else:
        pieces, final = [], None
        for event in client.responses.create(stream=True, **options):
            if event.type == "response.output_text.delta":
                pieces.append(event.delta)
            elif event.type == "response.completed":
                final = event.response
    assert final.output_text == "".join(pieces), (final.output_text, pieces)
    out["streamed"].append(final.output_text)
    previous = final.id

tools = [
    {
        "type": "function",
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    }
]
reply = client.responses.create(
    model=model, instructions=instructions, input="what is the weather?", previous_response_id=previous, tools=tools
)
call = next(item for item in reply.output if item.type == "function_call")
out["call"] = [call.name, json.loads(call.arguments)]
reply = client.responses.create(
    model=model,
    instructions=instructions,
    previous_response_id=reply.id,
    input=[{"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}],
    tools=tools,
)
out["final"] = reply.output_text

reply = client.responses.create(
    model=model,
    instructions=instructions,
    previous_response_id=reply.id,
    input=[
        {
            "role": "user",
            "content": [
                {"type": "input_text", "text": "what is in this image?"},
                {"type": "input_image", "image_url": f"data:image/png;base64,{PNG}"},
            ],
        }
    ],
)
out["image"] = reply.output_text
out["model"] = reply.model
out["models"] = [model.id for model in client.models.list()]

unstored = client.responses.create(model=model, input="forget this", store=False)
out["unstored"] = unstored.output_text
try:
    client.responses.create(model=model, input="and this?", previous_response_id=unstored.id)
except openai.BadRequestError as error:
    out["refused"] = [error.status_code, error.body["param"], error.body["message"]]
print(json.dumps(out))
