"""skein's own whole-process workloads, shared by bench/anchors.py and
bench/compare: CLI start-up, a CLI turn continuing a deep conversation, and
the recording proxy's per-request time. Each takes the release binaries to
time (the `skein` CLI and the `anchors` example) and a scratch directory.
Not part of CI: see docs/performance.md.

- CLI deep turn: `skein --db DB prompt -m echo --cid ID TEXT`, the whole
  process, continuing a conversation of 300 (and 3,000) turns that
  `anchors --deep` wrote into a database of its own;
- proxy: `skein serve --proxy -m echo` on a free loopback port, sent OpenAI
  chat completions that carry the whole history, as a client does. Each
  timed request continues a conversation the proxy recorded at the given
  depth (in messages), so every request is at that depth; conversations
  of both depths are interleaved so that drift affects them alike.

Storage: `python3 bench/skein_workloads.py proxy-storage BIN [BIN ...]`
records one conversation of 1,000 requests of ~600-byte messages through
the proxy and prints, at 50, 100, 200 and 1,000 requests, the database's
size against the unique message bytes and the time per request there.

Per-request time alone: `python3 bench/skein_workloads.py proxy-requests
BIN [BIN ...]` times the proxy workload for each binary, the binaries
interleaved over three rounds, and prints each round's medians per depth
(10, 100, 800 and 3,000 messages): flat in depth is the target.

On a machine too noisy for times to mean much, the proxy's work can be
counted instead: `python3 bench/skein_workloads.py proxy-instructions BIN
[BIN ...]` runs the same requests against a server under valgrind's
callgrind, instrumented only while the timed requests run, and prints the
server's instructions per request at each depth (the same figure for the
same binary whatever else the machine does; no kernel time, so the
database's writes to disk are not in it).
"""

import glob
import http.client
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time

CLI_DEPTHS = (300, 3000)
PROXY_DEPTHS = (10, 100, 800, 3000)


def median_ms(times):
    return round(statistics.median(times) * 1e3, 3)


def run_quietly(command, **kwargs):
    """Run `command`, its output dropped; a failure raises with its stderr."""
    done = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, **kwargs)
    if done.returncode != 0:
        raise RuntimeError(f"{command[:3]} exited with {done.returncode}: {done.stderr.decode()[-2000:]}")


def timed_runs(command, runs, **kwargs):
    """Median wall time of `command` over `runs` runs, after one warm-up."""
    run_quietly(command, **kwargs)
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        run_quietly(command, **kwargs)
        times.append(time.perf_counter() - started)
    return median_ms(times)


def startup_ms(command, runs=30):
    return timed_runs(command, runs)


def question(i):
    return f"question {i}: " + "lorem ipsum dolor sit amet " * 7


def deep_conversation(anchors_bin, db, turns):
    """The id of a conversation of `turns` echo turns written into `db`."""
    out = subprocess.run([anchors_bin, "--deep", str(turns), db], check=True, stdout=subprocess.PIPE)
    return json.loads(out.stdout.decode().strip().splitlines()[-1])["conversation"]


def cli_deep_turns(skein_bin, anchors_bin, scratch, runs=15):
    """Median ms of one CLI turn continuing a conversation of each depth in
    CLI_DEPTHS turns, each in a database holding only that conversation."""
    figures = {}
    for depth in CLI_DEPTHS:
        db = os.path.join(scratch, f"cli-{depth}.db")
        cid = deep_conversation(anchors_bin, db, depth)
        command = [skein_bin, "--db", db, "prompt", "-m", "echo", "--cid", cid, question(depth)]
        figures[f"depth_{depth}"] = timed_runs(command, runs)
    return figures


class Proxy:
    """`skein serve --proxy -m echo` on a free loopback port against `db`,
    stopped on leaving the `with` block whatever happens."""

    def __init__(self, skein_bin, db, wrapper=()):
        self.command = [*wrapper, skein_bin, "--db", db, "serve", "--proxy", "-m", "echo", "--bind", "127.0.0.1:0"]

    def __enter__(self):
        self.process = subprocess.Popen(self.command, stderr=subprocess.PIPE, text=True)
        try:
            self.port = self._wait_for_port()
        except BaseException:
            self._stop()
            raise
        # Keep draining stderr so that the server never blocks writing it.
        threading.Thread(target=self.process.stderr.read, daemon=True).start()
        return self

    def __exit__(self, *_):
        self._stop()

    def _wait_for_port(self):
        lines = []
        for line in self.process.stderr:
            lines.append(line)
            found = re.search(r"serving the graph on http://[^/]*:(\d+)/", line)
            if found:
                return int(found.group(1))
        raise RuntimeError("skein serve --proxy exited before serving:\n" + "".join(lines))

    def _stop(self):
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


class Client:
    """One keep-alive connection posting chat completions, as an SDK does."""

    def __init__(self, port):
        self.connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)

    def post(self, body):
        """The reply's message, and the request's wall time in seconds (the
        body is encoded before the clock starts: that is the client's work)."""
        encoded = json.dumps(body).encode()
        headers = {"Content-Type": "application/json"}
        started = time.perf_counter()
        self.connection.request("POST", "/v1/chat/completions", encoded, headers)
        response = self.connection.getresponse()
        data = response.read()
        elapsed = time.perf_counter() - started
        if response.status != 200:
            raise RuntimeError(f"proxy answered {response.status}: {data[:500]!r}")
        return json.loads(data)["choices"][0]["message"], elapsed

    def close(self):
        self.connection.close()


def history(conversation, length):
    """A system message, then user and assistant messages in turn ending
    with a user's: `length` messages (an even number)."""
    assert length % 2 == 0, length
    messages = [{"role": "system", "content": f"conversation {conversation}"}]
    for i in range(length - 1):
        text = question(i) if i % 2 == 0 else f"answer {i} in conversation {conversation}"
        messages.append({"role": "user" if i % 2 == 0 else "assistant", "content": text})
    return messages


def proxy_requests(skein_bin, scratch, conversations=20):
    """Median ms per proxied request at each depth in PROXY_DEPTHS (messages
    in the request). Each conversation is first recorded (untimed) with a
    history one turn shorter; its timed request then adds the recorded
    reply and a new question."""
    db = os.path.join(scratch, "proxy.db")
    times = {depth: [] for depth in PROXY_DEPTHS}
    with Proxy(skein_bin, db) as proxy:
        client = Client(proxy.port)
        try:
            pending = []
            for n in range(conversations):
                for depth in PROXY_DEPTHS:
                    messages = history(f"{depth}-{n}", depth - 2)
                    reply, _ = client.post({"model": "echo", "messages": messages})
                    pending.append((depth, messages + [reply, {"role": "user", "content": question(n)}]))
            for depth, messages in pending:
                assert len(messages) == depth, (depth, len(messages))
                _, elapsed = client.post({"model": "echo", "messages": messages})
                times[depth].append(elapsed)
        finally:
            client.close()
    return {f"depth_{depth}": median_ms(times[depth]) for depth in PROXY_DEPTHS}


def whole_process(skein_bin, anchors_bin, scratch):
    """Every figure of this module for one pair of binaries."""
    return {
        "cli_ms": startup_ms([skein_bin, "--version"]),
        "cli_deep": cli_deep_turns(skein_bin, anchors_bin, scratch),
        "proxy": proxy_requests(skein_bin, scratch),
    }


def proxy_instructions(skein_bin, scratch, conversations=10):
    """Millions of instructions the server runs per proxied request at each
    depth in PROXY_DEPTHS, under callgrind (the requests of
    `proxy_requests`; instrumentation on only for the timed ones)."""
    figures = {}
    for depth in PROXY_DEPTHS:
        db = os.path.join(scratch, f"instructions-{depth}.db")
        out = os.path.join(scratch, f"callgrind-{depth}.out")
        wrapper = ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}"]
        with Proxy(skein_bin, db, wrapper) as proxy:
            client = Client(proxy.port)
            pending = []
            for n in range(conversations):
                messages = history(f"{depth}-{n}", depth - 2)
                reply, _ = client.post({"model": "echo", "messages": messages})
                pending.append(messages + [reply, {"role": "user", "content": question(n)}])
            control = ["callgrind_control", "-i"]
            subprocess.run([*control, "on", str(proxy.process.pid)], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            for messages in pending:
                client.post({"model": "echo", "messages": messages})
            subprocess.run([*control, "off", str(proxy.process.pid)], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            client.close()
        # callgrind writes its counts as the server exits.
        total = 0
        for path in glob.glob(out + "*"):
            with open(path) as counts:
                total += next(int(line.split()[1]) for line in counts if line.startswith("totals:"))
        figures[f"depth_{depth}"] = round(total / conversations / 1e6, 3)
    return figures


PROSE = (
    "river stone amber quiet north lamp orchard signal copper meadow harbor violet "
    "timber echo saffron glacier"
).split()


def prose(i, length=600):
    """About `length` bytes of varied words, different for each `i`: a
    user's message as the issue's measurement sized them."""
    state, words = i * 2654435761 + 1, [f"message {i}"]
    while sum(len(word) + 1 for word in words) < length:
        state = (state * 6364136223846793005 + 1442695040888963407) % (1 << 64)
        words.append(PROSE[state >> 60])
    return " ".join(words)


def stored_bytes(db):
    """The database's pages in use (its WAL's too, as a reader sees them),
    free pages left out: what the file holds once checkpointed."""
    import sqlite3

    connection = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        pages = connection.execute("PRAGMA page_count").fetchone()[0]
        free = connection.execute("PRAGMA freelist_count").fetchone()[0]
        size = connection.execute("PRAGMA page_size").fetchone()[0]
    finally:
        connection.close()
    return (pages - free) * size


def proxy_storage(skein_bin, scratch, marks=(50, 100, 200, 1000)):
    """One conversation recorded through the proxy, as a client that
    re-sends its whole history does: at each mark (requests so far), the
    database's size (pages in use) against the unique message bytes, and
    the median time of the ten requests before it."""
    db = os.path.join(scratch, "storage.db")
    rows = []
    with Proxy(skein_bin, db) as proxy:
        client = Client(proxy.port)
        messages = [{"role": "system", "content": "You are terse."}]
        unique = len(messages[0]["content"])
        sent = 0
        times = []
        try:
            for i in range(max(marks)):
                messages.append({"role": "user", "content": prose(i)})
                unique += len(messages[-1]["content"])
                body = {"model": "echo", "messages": messages}
                sent += len(json.dumps(body))
                reply, elapsed = client.post(body)
                times.append(elapsed)
                messages.append(reply)
                unique += len(reply.get("content") or "")
                if i + 1 in marks:
                    size = stored_bytes(db)
                    rows.append({
                        "requests": i + 1,
                        "database_mb": round(size / 1e6, 2),
                        "unique_mb": round(unique / 1e6, 3),
                        "sent_mb": round(sent / 1e6, 1),
                        "ratio": round(size / unique, 2),
                        "ms_per_request": median_ms(times[-10:]),
                    })
        finally:
            client.close()
    return rows


USAGE = """usage: python3 bench/skein_workloads.py proxy-requests SKEIN_BIN [SKEIN_BIN ...]
       python3 bench/skein_workloads.py proxy-instructions SKEIN_BIN [SKEIN_BIN ...]
       python3 bench/skein_workloads.py proxy-storage SKEIN_BIN [SKEIN_BIN ...]"""

ROUNDS = 3


def proxy_request_rounds(binaries):
    """`proxy_requests` for each binary, interleaved over ROUNDS rounds."""
    for number in range(1, ROUNDS + 1):
        for binary in binaries:
            with tempfile.TemporaryDirectory() as scratch:
                figures = proxy_requests(binary, scratch)
            print(f"round {number}, {binary}: median ms per proxied request: {figures}", flush=True)


if __name__ == "__main__":
    modes = ("proxy-requests", "proxy-instructions", "proxy-storage")
    if len(sys.argv) < 3 or sys.argv[1] not in modes:
        sys.exit(USAGE)
    if sys.argv[1] == "proxy-requests":
        proxy_request_rounds(sys.argv[2:])
        sys.exit(0)
    for binary in sys.argv[2:]:
        with tempfile.TemporaryDirectory() as scratch:
            if sys.argv[1] == "proxy-instructions":
                figures = proxy_instructions(binary, scratch)
                print(f"{binary}: M instructions per proxied request: {figures}")
            else:
                print(f"{binary}: one conversation through the proxy")
                for row in proxy_storage(binary, scratch):
                    print("  " + json.dumps(row))
