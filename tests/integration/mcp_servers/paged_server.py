"""A low-level MCP server for the MCP tool tests: it lists its tools over three pages, its
tools have no annotations, and ``lookup`` answers with structured content and no text."""

from __future__ import annotations

from typing import Any

import anyio
from mcp.server import Server, ServerRequestContext
from mcp.server.stdio import stdio_server
from mcp.types import CallToolRequestParams, CallToolResult, ListToolsResult, Tool

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"key": {"type": "string", "minLength": 1}},
    "required": ["key"],
    "additionalProperties": False,
}
PAGES = [
    [Tool(name="lookup", description="Look a key up.", input_schema=SCHEMA)],
    [Tool(name="store", description="Store a key.", input_schema=SCHEMA)],
    [Tool(name="forget", title="Forget a key", input_schema=SCHEMA)],
]


async def list_tools(ctx: ServerRequestContext[Any], params: Any) -> ListToolsResult:
    page = int(params.cursor) if params is not None and params.cursor else 0
    cursor = str(page + 1) if page + 1 < len(PAGES) else None
    return ListToolsResult(tools=PAGES[page], next_cursor=cursor)


async def call_tool(
    ctx: ServerRequestContext[Any], params: CallToolRequestParams
) -> CallToolResult:
    key = (params.arguments or {}).get("key")
    return CallToolResult(content=[], structured_content={"tool": params.name, "key": key})


server: Server[Any] = Server("paged", on_list_tools=list_tools, on_call_tool=call_tool)


async def main() -> None:
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
