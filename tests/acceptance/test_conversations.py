"""A conversation is one run document that keeps growing: five continues, each in a process
of its own (the command line, and Python code with a module-level agent, taking turns),
leave one run whose document is valid after every step and holds every message in order."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

TIMEOUT = 60
REPLIES = [f"reply {i}" for i in range(6)]

AGENT_MODULE = f"""
from oarlock import Agent
from oarlock.models import ScriptedModel

agent = Agent("chat", ScriptedModel([{{"text": t}} for t in {REPLIES!r}]))
"""

PYTHON_TURN = """
import asyncio, sys
from chat_agent import agent
from oarlock import Runner
from oarlock.store import SQLiteStore

async def main() -> None:
    async with SQLiteStore(sys.argv[1]) as store:
        runner = Runner(agent, store)
        if sys.argv[2] == "start":
            doc = await runner.start(sys.argv[3])
        else:
            doc = await runner.continue_run(sys.argv[2], sys.argv[3])
        print(doc.id, doc.status, doc.result)

asyncio.run(main())
"""


def _env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "OARLOCK_DB"}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp), env.get("PYTHONPATH", "")])
    return env


def _run(tmp: Path, *argv: str) -> str:
    out = subprocess.run(
        [sys.executable, *argv],
        cwd=tmp, env=_env(tmp), capture_output=True, text=True, timeout=TIMEOUT, check=False,
    )  # fmt: skip
    assert out.returncode == 0, (argv, out.stdout, out.stderr)
    return out.stdout


def _exported(tmp: Path, db: Path, run_id: str) -> dict[str, Any]:
    text = _run(tmp, "-m", "oarlock.cli", "--db", str(db), "runs", "export", run_id)
    path = tmp / "exported.json"
    path.write_text(text)
    checked = _run(tmp, "-m", "oarlock.cli", "validate", str(path))
    assert checked.strip().endswith("1 valid, 0 invalid"), checked
    doc = json.loads(text)
    assert isinstance(doc, dict)
    return doc


def test_five_continues_across_processes_stay_one_valid_document(tmp_path: Path) -> None:
    (tmp_path / "chat_agent.py").write_text(textwrap.dedent(AGENT_MODULE))
    (tmp_path / "turn.py").write_text(textwrap.dedent(PYTHON_TURN))
    db = tmp_path / "runs.db"
    started = _run(tmp_path, "turn.py", str(db), "start", "message 0")
    run_id, status, result = started.strip().split(maxsplit=2)
    assert (status, result) == ("completed", REPLIES[0])
    for i in range(1, 6):
        if i % 2:  # the command line finds the agent by where the first process found it
            said = _run(
                tmp_path, "-m", "oarlock.cli", "--db", str(db), "continue", run_id[:8],
                f"message {i}",
            )  # fmt: skip
            assert f"run {run_id}: completed" in said and REPLIES[i] in said
        else:
            said = _run(tmp_path, "turn.py", str(db), run_id, f"message {i}")
            assert said.split()[:2] == [run_id, "completed"]
        doc = _exported(tmp_path, db, run_id)
        assert (doc["status"], doc["result"], doc["turns"]) == ("completed", REPLIES[i], i + 1)
    texts = [(m["role"], m["content"][0]["text"]) for m in doc["messages"]]
    expected = [pair for i in range(6) for pair in (("user", f"message {i}"),
                                                    ("assistant", REPLIES[i]))]  # fmt: skip
    assert texts == expected
    listed = json.loads(
        _run(tmp_path, "-m", "oarlock.cli", "--db", str(db), "runs", "list", "--json")
    )
    assert [r["id"] for r in listed] == [run_id]  # one run, not six
