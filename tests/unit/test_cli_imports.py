"""The command line's modules import one another without a circle, as their source says
(every import, at the top or inside a function): the run commands and the Temporal
worker's in particular, which once held two copies of the dispatch of where a run is
driven and imported each other for it."""

from __future__ import annotations

import ast
from pathlib import Path

import oarlock.cli

CLI = Path(oarlock.cli.__file__).parent
PACKAGE = "oarlock.cli"


def _imported(source: str, modules: set[str]) -> set[str]:
    """The modules of ``modules`` (the command line's, by name) that ``source`` imports."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
        else:
            continue
        found |= {n.removeprefix(f"{PACKAGE}.") for n in names if n.startswith(f"{PACKAGE}.")}
    return found & modules


def _graph() -> dict[str, set[str]]:
    modules = {p.stem for p in CLI.glob("*.py") if p.stem != "__init__"}
    return {m: _imported((CLI / f"{m}.py").read_text("utf-8"), modules) - {m}
            for m in sorted(modules)}  # fmt: skip


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every circle of imports, each once, from its first module in order."""
    found: list[list[str]] = []
    for start in sorted(graph):
        paths = [[start]]
        while paths:
            path = paths.pop()
            for nxt in sorted(graph.get(path[-1], ())):
                if nxt == start:
                    found.append(path)
                elif nxt not in path and nxt > start:
                    paths.append([*path, nxt])
    return found


def test_the_scan_finds_every_form_of_import() -> None:
    modules = {"_runs", "_temporal", "_keys", "_show"}
    source = (
        "import oarlock.cli._runs\n"
        "from oarlock.cli import _temporal, refused\n"
        "def f():\n    from oarlock.cli._keys import principal_default\n"
        "from oarlock.cli._show import timeline as t\n"
        "from . import _nothing_relative\n"
    )
    assert _imported(source, modules) == {"_runs", "_temporal", "_keys", "_show"}
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _circles({"a": {"b"}, "b": set()}) == []


def test_the_run_commands_and_the_temporal_worker_do_not_import_each_other() -> None:
    graph = _graph()
    assert "_temporal" not in graph["_runs"]
    assert not ("_runs" in graph["_temporal"] and "_temporal" in graph["_runs"])


def test_the_command_lines_modules_import_no_circle() -> None:
    assert _circles(_graph()) == []
