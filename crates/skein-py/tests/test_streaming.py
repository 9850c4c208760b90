"""Streaming from a real HTTP provider: chunks reach the Python reader while
the provider still holds its reply open, not only once it has ended."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

import skein

HOLD_SECONDS = 10.0


def sse(payload: object) -> bytes:
    return f"data: {json.dumps(payload)}\n\n".encode()


def chunk(delta: dict[str, str], finish: str | None = None) -> bytes:
    return sse({
        "id": "held",
        "object": "chat.completion.chunk",
        "model": "held",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    })


class HeldStream:
    """An OpenAI-compatible server whose streamed reply sends its first
    chunk, then waits for ``release`` before sending the rest."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.timed_out = False
        held = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", "0"))
                self.rfile.read(length)
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("connection", "close")
                self.end_headers()
                self.wfile.write(chunk({"role": "assistant", "content": "Hello"}))
                self.wfile.flush()
                held.timed_out = not held.release.wait(HOLD_SECONDS)
                self.wfile.write(chunk({"content": ", world"}))
                self.wfile.write(chunk({}, finish="stop"))
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def held(monkeypatch: pytest.MonkeyPatch) -> Iterator[HeldStream]:
    server = HeldStream()
    monkeypatch.setenv("OPENAI_BASE_URL", server.url)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    yield server
    server.close()


def test_a_chunk_arrives_while_the_provider_holds_the_reply(held: HeldStream) -> None:
    response = skein.Model("openai:held").prompt("say hello")
    stream = iter(response)
    first = next(stream)
    # The provider has sent one chunk and is still waiting: the reply has
    # not ended, yet its first chunk is here.
    assert first == "Hello"
    assert not held.release.is_set()
    assert not response._finished()
    held.release.set()
    rest = list(stream)
    assert not held.timed_out
    assert "".join([first, *rest]) == "Hello, world" == response.text()


def test_an_async_reader_sees_a_chunk_before_the_reply_ends(held: HeldStream) -> None:
    import asyncio

    async def main() -> None:
        response = skein.AsyncModel("openai:held").prompt("say hello")
        chunks = aiter(response)
        first = await anext(chunks)
        assert first == "Hello"
        assert not held.release.is_set()
        held.release.set()
        rest = [piece async for piece in chunks]
        assert not held.timed_out
        assert "".join([first, *rest]) == "Hello, world" == await response.text()

    asyncio.run(main())
