"""The anthropic SDK's calls the recording proxy's models cannot honour in
full, through skein's recording proxy: `messages.count_tokens` (refused in
Anthropic's error format, which the SDK raises as `NotFoundError`), and
extended thinking (`thinking`), answered without it, whole and streamed,
and said so in the `x-skein-unhonoured` response header; then a session
named by `metadata.user_id` (argv[2]), continued by its follow-up. Prints
what came back as JSON."""

import json
import sys

import anthropic

client = anthropic.Anthropic(base_url=sys.argv[1], api_key="sk-ant-test")
model = "claude-test"
thinking = {"type": "enabled", "budget_tokens": 1024}
out = {}

try:
    client.messages.count_tokens(model=model, messages=[{"role": "user", "content": "how many?"}])
except anthropic.NotFoundError as error:
    out["count_tokens"] = [error.status_code, error.body["error"]["type"], error.body["error"]["message"]]

raw = client.messages.with_raw_response.create(
    model=model, max_tokens=2048, thinking=thinking, messages=[{"role": "user", "content": "think hard"}]
)
reply = raw.parse()
out["thinking"] = [raw.headers.get("x-skein-unhonoured"), [block.type for block in reply.content], reply.content[0].text]

with client.messages.stream(
    model=model, max_tokens=2048, thinking=thinking, messages=[{"role": "user", "content": "think again"}]
) as stream:
    text = "".join(stream.text_stream)
    out["thinking_streamed"] = [stream.response.headers.get("x-skein-unhonoured"), text]

metadata = {"user_id": sys.argv[2]}
messages = [{"role": "user", "content": "hello"}]
reply = client.messages.create(model=model, max_tokens=100, metadata=metadata, messages=messages)
messages += [{"role": "assistant", "content": reply.content}, {"role": "user", "content": "more"}]
reply = client.messages.create(model=model, max_tokens=100, metadata=metadata, messages=messages)
out["session"] = reply.content[0].text
print(json.dumps(out))
