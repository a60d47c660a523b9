"""A small MCP server (stdio, mcp 2.x) for the notes example: list, read and write notes."""

from __future__ import annotations

import os
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

ROOT = Path(os.environ.get("NOTES_DIR", "notes"))
server = MCPServer("notes", log_level="WARNING")


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def list_notes() -> list[str]:
    """The names of the notes."""
    return sorted(p.name for p in ROOT.glob("*.txt"))


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def read_note(name: str) -> str:
    """One note's text."""
    return (ROOT / Path(name).name).read_text("utf-8")


@server.tool(annotations=ToolAnnotations(destructive_hint=True))
def write_note(name: str, text: str) -> str:
    """Write (or replace) a note."""
    ROOT.mkdir(parents=True, exist_ok=True)
    (ROOT / Path(name).name).write_text(text, "utf-8")
    return f"wrote {name}"


if __name__ == "__main__":
    server.run()
