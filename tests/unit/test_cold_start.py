"""``oarlock runs show`` and ``oarlock runs list`` start cold in a few tens of milliseconds:
with stdout not a terminal they read the database synchronously and check the document with
the shipped compiled run check, so they import neither pydantic (the models), asyncio (the
engine's runner), jsonschema nor fastjsonschema (validation), rich (the terminal table), nor
dataclasses (the store's records; importing it costs some 7 ms). Each test runs the command
in a fresh interpreter and looks at ``sys.modules`` afterwards; none times anything."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from oarlock.formats import dump_json, parse_run
from oarlock.store import Event, SQLiteStore

EXAMPLE = Path(__file__).parents[2] / "examples" / "runs" / "refund-waiting-approval.json"
RUN_ID = "cold-run"
HEAVY = (
    "pydantic",
    "pydantic_core",
    "asyncio",
    "jsonschema",
    "fastjsonschema",
    "referencing",
    "rich",
    "dataclasses",
)


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "runs.db"
    doc = parse_run({**json.loads(EXAMPLE.read_bytes()), "id": RUN_ID})
    events = [Event("approval_decided", "t", {"toolCallId": "x", "decision": "approved"})]

    async def go() -> None:
        async with SQLiteStore(path) as store:
            await store.create(doc, events)

    asyncio.run(go())
    return path


def run_cli(*argv: str) -> tuple[int, str, set[str]]:
    """``oarlock.cli.main(argv)`` in a fresh interpreter, stdout a pipe: its exit status,
    what it printed and the modules it left loaded."""
    code = (
        "import json, sys\nfrom oarlock.cli import main\n"
        f"code = main({list(argv)!r})\n"
        "print('\\n' + json.dumps(sorted(sys.modules)))\nsys.exit(code)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    printed, _, modules = out.stdout.rstrip("\n").rpartition("\n")
    return out.returncode, printed, set(json.loads(modules))


def heavy(loaded: set[str]) -> set[str]:
    return {m for m in loaded if m.split(".")[0] in HEAVY}


def test_runs_show_loads_nothing_heavy(db: Path) -> None:
    code, printed, loaded = run_cli("--db", str(db), "runs", "show", RUN_ID)
    assert code == 0
    assert printed.startswith(f"run {RUN_ID}  agent refund-desk")
    assert heavy(loaded) == set()
    assert "oarlock.engine" not in loaded
    assert "oarlock.formats._models" not in loaded


@pytest.mark.parametrize("extra", [[], ["--json"], ["--status", "waiting_approval"]])
def test_runs_list_loads_nothing_heavy(db: Path, extra: list[str]) -> None:
    code, printed, loaded = run_cli("--db", str(db), "runs", "list", *extra)
    assert code == 0
    assert RUN_ID in printed
    assert heavy(loaded) == set()


def test_runs_show_of_an_unknown_run_loads_nothing_heavy(db: Path) -> None:
    code, _, loaded = run_cli("--db", str(db), "runs", "show", "no-such-run")
    assert code == 1
    assert heavy(loaded) == set()


def test_a_document_the_quick_check_refuses_takes_the_full_check(db: Path) -> None:
    # "result": null passes the models (and so is shown), not the schema's quick check
    raw = dump_json(parse_run({**json.loads(EXAMPLE.read_bytes()), "id": RUN_ID, "result": None}))
    conn = sqlite3.connect(db)
    with conn:
        conn.execute("UPDATE runs SET document = ? WHERE id = ?", (raw, RUN_ID))
    conn.close()
    code, printed, loaded = run_cli("--db", str(db), "runs", "show", RUN_ID)
    assert code == 0
    assert printed.startswith(f"run {RUN_ID}  agent refund-desk")
    assert "pydantic" in loaded
    assert "asyncio" not in loaded
