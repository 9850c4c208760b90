"""One run of an app on the official openai client whose requests name
their session with the APIs' own fields (no session header): chat
completions' `user`, chat completions' `metadata` and the Responses API's
`metadata` (`session_id`), each asked "hello" and then a follow-up.
argv[2] names the run; each session is `RUN-chat`, `RUN-meta` or
`RUN-responses`. The `user` also names the client of its requests; the
other two go through a client that names itself with the `x-skein-client`
header (`RUN-app`). Prints the follow-ups' answers as JSON."""

import json
import sys

import openai

run = sys.argv[2]
plain = openai.OpenAI(base_url=sys.argv[1], api_key="sk-test")
tagged = openai.OpenAI(base_url=sys.argv[1], api_key="sk-test", default_headers={"x-skein-client": f"{run}-app"})
model = "gpt-test"
out = {}


def chat(client, **session):
    messages = [{"role": "user", "content": "hello"}]
    reply = client.chat.completions.create(model=model, messages=messages, **session)
    messages += [{"role": "assistant", "content": reply.choices[0].message.content}, {"role": "user", "content": "more"}]
    return client.chat.completions.create(model=model, messages=messages, **session).choices[0].message.content


out["chat"] = chat(plain, user=f"{run}-chat")
out["meta"] = chat(tagged, metadata={"session_id": f"{run}-meta"})
metadata = {"session_id": f"{run}-responses"}
first = tagged.responses.create(model=model, input="hello", metadata=metadata)
out["responses"] = tagged.responses.create(
    model=model, input="more", previous_response_id=first.id, metadata=metadata
).output_text
print(json.dumps(out))
