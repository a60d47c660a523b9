"""The workflow of a run on Temporal is deterministic by construction: its module imports
Temporal's workflow API and oarlock's pure ``_types`` only, and reads no clock, no
environment, no randomness and no file; ``_types`` imports nothing of oarlock at all."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import oarlock.temporal._types as types_module
import oarlock.temporal._workflow as workflow_module

ALLOWED_IMPORTS = {
    workflow_module: {
        "__future__", "asyncio", "collections.abc", "datetime", "typing", "temporalio",
        "temporalio.common", "temporalio.exceptions", "oarlock.temporal._types",
    },
    types_module: {"__future__", "dataclasses", "typing"},
}  # fmt: skip

# names whose use in workflow code reads the outside world or breaks replay
BANNED_NAMES = {
    "time", "os", "sys", "random", "uuid", "socket", "open", "input", "print", "subprocess",
    "threading", "secrets", "environ", "getenv", "pathlib", "Path", "logging",
}  # fmt: skip
BANNED_ATTRIBUTES = {
    "now", "utcnow", "today", "time", "monotonic", "perf_counter", "sleep", "random",
    "uuid4", "getenv", "environ", "run_in_executor", "to_thread", "get_event_loop",
}  # fmt: skip
ALLOWED_CALLS = {("workflow", "now"), ("workflow", "sleep")}  # the workflow's clock and timers


def _tree(module: object) -> ast.Module:
    return ast.parse(Path(module.__file__).read_text("utf-8"))  # type: ignore[attr-defined]


def _imports(tree: ast.Module) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            found.add(node.module or "")
    return found


@pytest.mark.parametrize("module", list(ALLOWED_IMPORTS), ids=lambda m: m.__name__)
def test_imports_are_pure(module):
    assert _imports(_tree(module)) <= ALLOWED_IMPORTS[module]


def _problems(tree: ast.Module) -> list[str]:
    problems = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in BANNED_NAMES:
            problems.append(f"line {node.lineno}: {node.id}")
        elif isinstance(node, ast.Attribute) and node.attr in BANNED_ATTRIBUTES:
            owner = node.value.id if isinstance(node.value, ast.Name) else ""
            if (owner, node.attr) not in ALLOWED_CALLS:
                problems.append(f"line {node.lineno}: {owner}.{node.attr}")
    return problems


@pytest.mark.parametrize("module", list(ALLOWED_IMPORTS), ids=lambda m: m.__name__)
def test_no_clock_environment_randomness_or_io(module):
    assert _problems(_tree(module)) == []


def test_the_scan_finds_what_it_looks_for():
    code = (
        "import os\nimport time\nfrom datetime import datetime\n"
        "def f():\n    time.time()\n    os.environ['X']\n    datetime.now()\n"
        "    open('f')\n    workflow.now()\n"
    )
    tree = ast.parse(code)
    assert _imports(tree) == {"os", "time", "datetime"}
    assert sorted(_problems(tree)) == [
        "line 5: time", "line 5: time.time", "line 6: os", "line 6: os.environ",
        "line 7: datetime.now", "line 8: open",
    ]  # fmt: skip
