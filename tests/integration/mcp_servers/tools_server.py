"""An MCP server for the MCP tool tests, built with the SDK's ``MCPServer`` (FastMCP before
mcp 2). Serves stdio by default; ``--http PORT`` serves streamable HTTP on 127.0.0.1."""

from __future__ import annotations

import argparse
import os

import anyio
from mcp.server.mcpserver import Image, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

server = MCPServer("test-tools", log_level="WARNING")

READ = ToolAnnotations(read_only_hint=True)


@server.tool(annotations=READ)
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool(annotations=ToolAnnotations(destructive_hint=True))
def delete_file(path: str) -> str:
    """Delete a file (pretends to)."""
    return f"deleted {path}"


@server.tool(annotations=ToolAnnotations(open_world_hint=True))
def post(message: str) -> str:
    """Post a message to the outside world (pretends to)."""
    return f"posted: {message}"


@server.tool(annotations=READ)
def fail() -> str:
    """Always fails."""
    raise ToolError("the tool failed on purpose")


@server.tool(annotations=READ)
def check_token() -> str:
    """Fails with an error that echoes the server's token, as a careless server might."""
    raise ToolError(f"the backend refused token {os.environ.get('SERVICE_TOKEN')}")


@server.tool(annotations=READ)
async def slow(seconds: float) -> str:
    """Sleep, then answer."""
    await anyio.sleep(seconds)
    return f"slept {seconds}"


@server.tool(annotations=READ)
def crash() -> str:
    """Kill the server process in the middle of the call."""
    os.write(2, b"crash: going down now\n")
    os._exit(1)


@server.tool(annotations=READ)
def picture() -> Image:
    """A tiny image."""
    return Image(data=b"\x89PNG\r\n\x1a\n", format="png")


@server.tool()
def pid() -> int:
    """The server's process id."""
    return os.getpid()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--http", type=int, default=None, help="serve streamable HTTP on this port")
    args = parser.parse_args()
    if args.http is None:
        server.run()
    else:
        server.run("streamable-http", host="127.0.0.1", port=args.http)


if __name__ == "__main__":
    main()
