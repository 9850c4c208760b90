"""Many clients, two servers, one graph: CLIENTS official `openai` clients
at once, each sending ROUNDS turns, request k of client i through server
(i + k) % 2. Clients of a topic (i % 4) share their first two turns (the
same history sent four times at once, through both servers), then go their
own ways (branches of the shared conversation). All clients start each
round together. Prints every client's transcript, its last reply included,
as JSON."""

import json
import sys
import threading

from openai import OpenAI

bases = sys.argv[1:3]
clients = int(sys.argv[3])
rounds = int(sys.argv[4])
start = threading.Barrier(clients)
transcripts = [None] * clients
errors = []


def text(i, k):
    topic = i % 4
    if k == 0:
        return f"topic {topic}"
    if k == 1:
        return f"topic {topic}, once more"
    return f"topic {topic}, client {i}, step {k}"


def run(i):
    try:
        sdk = [OpenAI(base_url=f"{base}/v1", api_key="sk-unused", max_retries=0) for base in bases]
        messages = []
        for k in range(rounds):
            messages.append({"role": "user", "content": text(i, k)})
            start.wait()
            reply = sdk[(i + k) % 2].chat.completions.create(model="echo", messages=messages)
            messages.append({"role": "assistant", "content": reply.choices[0].message.content})
        transcripts[i] = messages
    except Exception as error:  # reported below, with the client's number
        errors.append(f"client {i}: {error!r}")
        start.abort()


threads = [threading.Thread(target=run, args=(i,)) for i in range(clients)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
if errors:
    sys.exit("\n".join(errors))
print(json.dumps(transcripts))
