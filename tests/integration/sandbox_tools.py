"""Python tools of the ``sandbox`` class, run in the sandbox by the tests."""

from __future__ import annotations

import os

from oarlock.tools import tool


@tool(side_effect="sandbox")
def where_am_i(greeting: str) -> str:
    """Say where the call runs and what of the host's environment it sees."""
    print("a tool's own print goes to its standard error")
    return f"{greeting} from {os.getcwd()} uid={os.getuid()} key={os.environ.get('OPENAI_API_KEY')}"


@tool(side_effect="sandbox")
def fails() -> str:
    """Fail."""
    raise ValueError("no")
