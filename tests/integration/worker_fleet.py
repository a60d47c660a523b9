"""A folder of agent files for tests with real worker processes: tools that take a while
and record every effect in a file, one agent file (and script) per order, and helpers to
start, signal and read ``oarlock worker`` processes.

Each run looks its order up, pays for it (a ``spend`` tool, allowed by the policy: a
standing approval), looks it up again and answers. ``pay`` is keyed by its order
(``pay:ORDER``) and appends one line per call to ``$EFFECTS``: a line twice for one order is
a side effect made twice.

A database is an SQLite file (a ``Path``) or a PostgreSQL URL (a ``str``): the commands
and the workers take either as ``--db``; :func:`open_db` opens either in Python."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from oarlock.store import PostgresStore, SQLiteStore

Db = Path | str

TIMEOUT = 60

TOOLS = '''
import json
import os
import time

from oarlock.tools import tool


@tool(side_effect="read")
def look(order: str) -> str:
    """Look an order up."""
    time.sleep(float(os.environ.get("LOOK_SECONDS", "0.05")))
    return f"order {order}: broken"


@tool(side_effect="spend")
def pay(order: str, amount: int) -> str:
    """Refund an order."""
    time.sleep(float(os.environ.get("PAY_SECONDS", "0.1")))
    with open(os.environ["EFFECTS"], "a") as effects:
        effects.write(json.dumps({"order": order, "pid": os.getpid()}) + "\\n")
        effects.flush()
        os.fsync(effects.fileno())
    return f"refunded {amount} for {order}"


def pay_key(arguments):
    return f"pay:{arguments['order']}"
'''

POLICY = """policy: fleet
rules:
  - id: refunds
    effect: allow
    reason: refunds are pre-approved here
    match: {tool: pay}
"""


def agent_file(folder: Path, order: str, *, tenant: str = "acme", pays: bool = True,
               name: str = "fleet", approval_ttl: float | None = None) -> Path:
    """An agent file (and its script) whose run looks ``order`` up, pays for it and answers."""
    turns: list[dict[str, Any]] = [
        {"tool_calls": [{"name": "look", "arguments": {"order": order}}]}]
    if pays:
        turns.append({"tool_calls": [{"name": "pay", "arguments": {"order": order, "amount": 5}}]})
        turns.append({"tool_calls": [{"name": "look", "arguments": {"order": order}}]})
    turns.append({"text": f"done with {order}"})
    (folder / f"script-{order}.json").write_text(json.dumps({"turns": turns}))
    policy = folder / ("policy.yaml" if approval_ttl is None else f"policy-{order}.yaml")
    text = POLICY if approval_ttl is None else (
        f"policy: expiring\napproval_ttl: {approval_ttl}\nrules: []\n")
    policy.write_text(text)
    path = folder / f"agent-{order}.yaml"
    path.write_text(
        f"name: {name}\ninstructions: refund\nmodel: scripted:script-{order}.json\n"
        f"tenant: {tenant}\npolicy: {policy.name}\n"
        "limits: {max_turns: 10}\n"
        "tools:\n  - fleet_tools:look\n"
        "  - path: fleet_tools:pay\n    idempotency_key: fleet_tools:pay_key\n"
    )
    return path


def fleet_folder(tmp: Path) -> Path:
    folder = tmp / "fleet"
    folder.mkdir()
    (folder / "fleet_tools.py").write_text(TOOLS)
    return folder


def environment(tmp: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OARLOCK_")}
    env.update(
        XDG_CONFIG_HOME=str(tmp / "config"),
        XDG_DATA_HOME=str(tmp / "data"),
        EFFECTS=str(tmp / "effects.jsonl"),
        PYTHONUNBUFFERED="1",
    )
    env.update(extra)
    return env


def oarlock(db: Db, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "oarlock.cli", "--db", str(db), *args],
        env=env, capture_output=True, text=True, timeout=TIMEOUT, stdin=subprocess.DEVNULL,
        check=False,
    )


class WorkerProcess:
    """``oarlock worker`` in a process of its own; its output lines, collected as they
    come."""

    def __init__(self, db: Db, env: dict[str, str], *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "oarlock.cli", "--db", str(db), "worker", *args],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            stdin=subprocess.DEVNULL,
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for text in self.proc.stdout:
            self.lines.append(text.rstrip("\n"))

    @property
    def pid(self) -> int:
        return self.proc.pid

    def said(self, fragment: str) -> bool:
        return any(fragment in text for text in list(self.lines))

    def wait_for(self, fragment: str, timeout: float = TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while not self.said(fragment):
            assert time.monotonic() < deadline, (fragment, self.lines)
            assert self.proc.poll() is None or self.said(fragment), (fragment, self.lines)
            time.sleep(0.02)

    def signal(self, sig: int) -> None:
        os.kill(self.proc.pid, sig)

    def stop(self, timeout: float = TIMEOUT) -> int:
        """SIGTERM once it has started (its handlers are in place), then its exit status."""
        if self.proc.poll() is None:
            self.wait_for(" started: ", timeout)
            self.signal(signal.SIGTERM)
        code = self.proc.wait(timeout)
        self._reader.join(timeout)
        return code

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.signal(signal.SIGKILL)
        self.proc.wait(TIMEOUT)
        self._reader.join(TIMEOUT)


def effects(tmp: Path) -> list[dict[str, Any]]:
    path = tmp / "effects.jsonl"
    if not path.exists():
        return []
    return [json.loads(text) for text in path.read_text().splitlines() if text]


def runs(db: Db, env: dict[str, str], *args: str) -> list[dict[str, Any]]:
    out = oarlock(db, env, "runs", "list", "--json", "--limit", "1000", *args)
    assert out.returncode == 0, out.stderr
    listed: list[dict[str, Any]] = json.loads(out.stdout)
    return listed


def wait_until(check: Any, timeout: float = TIMEOUT, every: float = 0.1) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(every)


def alive(processes: list[WorkerProcess]) -> Iterator[WorkerProcess]:
    return (p for p in processes if p.proc.poll() is None)


def open_db(db: Db, *, create: bool = True) -> SQLiteStore | PostgresStore:
    """The store of ``db``: an SQLite file, or the PostgreSQL database of a URL."""
    if isinstance(db, str):
        from oarlock.store import PostgresStore

        return PostgresStore(db, create=create)
    from oarlock.store import SQLiteStore

    return SQLiteStore(db, create=create)
