"""A small MCP server for skein's tests, on the reference `mcp` package
(its `MCPServer`, which mcp 2 renamed from `FastMCP`).

    python mcp_server.py stdio   serve on standard input and output
    python mcp_server.py http    serve streamable HTTP at /mcp on a free
                                 loopback port, printed first on stdout

Tools: `add`, `shout`, and `crash`, which ends the process in the middle
of its call. With SKEIN_TEST_MCP_LOUDER=1, `shout` takes one more argument
(its schema changes, as a server's may between two runs).
"""

import os
import socket
import sys

from mcp.server.mcpserver import MCPServer

server = MCPServer("skein-test", log_level="WARNING")


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


if os.environ.get("SKEIN_TEST_MCP_LOUDER") == "1":

    @server.tool()
    def shout(text: str, times: int = 1) -> str:
        """Upper-case a text, repeated."""
        return text.upper() * times

else:

    @server.tool()
    def shout(text: str) -> str:
        """Upper-case a text."""
        return text.upper()


@server.tool()
def crash() -> str:
    """End the server in the middle of the call."""
    print("crashing on purpose", file=sys.stderr, flush=True)
    os._exit(3)


def serve_http() -> None:
    import uvicorn

    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    # Listening before the port is told: a client that connects at once
    # waits in the backlog until uvicorn accepts.
    listener.listen()
    print(listener.getsockname()[1], flush=True)
    config = uvicorn.Config(server.streamable_http_app(), log_level="warning")
    uvicorn.Server(config).run(sockets=[listener])


if __name__ == "__main__":
    if sys.argv[1:] == ["stdio"]:
        server.run()
    elif sys.argv[1:] == ["http"]:
        serve_http()
    else:
        sys.exit("usage: mcp_server.py stdio|http")
