"""What the tests of approvers' keys share: agent files whose ``pay`` calls need a human
(the fleet's tools: each effect a line of ``$EFFECTS``), the run's receipts and approvals
as stored, a forged approval written as the database's writer would, and processes that
start together behind a file barrier."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from worker_fleet import TIMEOUT, Db, open_db

from oarlock.governance._records import Approval, run_uuid

POLICY = "policy: humans\napproval_ttl: 3600\nrules: []\n"  # every pay waits for a human


def human_agent(
    folder: Path, name: str, turns: list[list[str]], *, approvers: str | None = None
) -> Path:
    """An agent file whose script pays for ``turns`` (each turn a list of orders, one
    ``pay`` call each, ids ``call_T_N``), then answers; every pay needs a human. It names
    the approvers file ``approvers`` when given, else none (the user's trust)."""
    script = [
        {"tool_calls": [{"name": "pay", "arguments": {"order": o, "amount": 5}} for o in orders]}
        for orders in turns
    ]
    script.append({"text": "done"})
    (folder / f"script-{name}.json").write_text(json.dumps({"turns": script}))
    (folder / "humans.yaml").write_text(POLICY)
    path = folder / f"agent-{name}.yaml"
    path.write_text(
        f"name: {name}\ninstructions: pay\nmodel: scripted:script-{name}.json\n"
        "tenant: acme\npolicy: humans.yaml\nlimits: {max_turns: 10}\n"
        + (f"approvers: {approvers}\n" if approvers else "")
        + "tools:\n  - path: fleet_tools:pay\n    idempotency_key: fleet_tools:pay_key\n"
    )
    return path


def run_id_of(out: subprocess.CompletedProcess[str]) -> str:
    """The run id an ``oarlock run`` printed."""
    assert out.returncode == 0, (out.stdout, out.stderr)
    found = re.search(r"^run (\S+): waiting_approval", out.stdout, re.M)
    assert found is not None, out.stdout
    return found.group(1)


def receipts(db: Db, run_id: str) -> dict[str, tuple[str, str | None]]:
    """Each paid order's receipt: its status and error code."""

    async def read() -> dict[str, tuple[str, str | None]]:
        async with open_db(db) as store:
            found = await store.governance().receipts(run_id=run_uuid(run_id), limit=1000)
        return {
            str(r.invocation["arguments"]["order"]): (
                r.status,
                (r.receipt.get("error") or {}).get("code"),
            )
            for r in found
        }

    return asyncio.run(read())


def human_approvals(db: Db, run_id: str) -> list[dict[str, Any]]:
    """The human approvals of a run on the ledger."""

    async def read() -> list[dict[str, Any]]:
        async with open_db(db) as store:
            ledger = await store.governance().ledger()
        return [
            e.body
            for e in ledger
            if e.kind == "approval"
            and e.body.get("decidedBy") == "human"
            and e.body.get("runId") == run_id
        ]

    return asyncio.run(read())


def forge(db: Db, run_id: str, approval: Approval) -> None:
    """What a database writer can do: store ``approval`` and mark its call approved in the
    run document, as a decision would."""
    from oarlock.engine import _core as core
    from oarlock.formats._time import now_rfc3339

    async def write() -> None:
        async with open_db(db) as store:
            await store.governance().record_approval(approval)
            stored = await store.load(run_id)
            events = core.apply_decision(
                stored.document, approval.tool_call_id, "approved", by="human", now=now_rfc3339()
            )
            await store.save(stored.document, stored.version, events)

    asyncio.run(write())


def hold(db: Db, run_id: str, owner: str = "test:holder") -> Any:
    """Take the run's lease from here (a long one), so that no worker claims it; the
    lease, to :func:`release`."""

    async def claim() -> Any:
        async with open_db(db) as store:
            return await store.claim_run(run_id, owner, lease_seconds=600)

    return asyncio.run(claim())


def release(db: Db, lease: Any) -> None:
    async def give_back() -> None:
        async with open_db(db) as store:
            await store.release(lease)

    asyncio.run(give_back())


RACER = """
import os, sys, time
from pathlib import Path
import oarlock.cli  # the heavy imports happen before the barrier: the race is the CLI's
import oarlock.cli._runs, oarlock.cli._show, oarlock.engine._agentfile, oarlock.engine._runner
import oarlock.store._sqlite, oarlock.store._postgres
folder, me, parties = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
slow = float(os.environ.get(f"RACER_SLOW_{me}", "0"))  # a process slow to decide
if slow:
    import asyncio
    from oarlock.engine._decisions import Decisions
    real = Decisions._decide
    async def _decide(self, *args, **kwargs):
        await asyncio.sleep(slow)
        return await real(self, *args, **kwargs)
    Decisions._decide = _decide
(folder / me).touch()
deadline = time.monotonic() + 50
while len(list(folder.iterdir())) < parties:
    if time.monotonic() > deadline:
        sys.exit(99)
time.sleep(float(os.environ.get(f"RACER_LATE_{me}", "0")))  # a process that starts late
if sys.argv[4] == "--python":  # a statement of Python, not a command
    exec(sys.argv[5])
    sys.exit(0)
sys.exit(oarlock.cli.main(sys.argv[4:]))
"""


def together(
    barrier: Path, env: dict[str, str], *commands: list[str]
) -> list[subprocess.CompletedProcess[str]]:
    """Start one process per command (``oarlock`` arguments, or ``["--python", CODE]``);
    each waits on a file barrier in ``barrier`` (made here), then runs it. In ``env``,
    ``RACER_SLOW_pN`` makes the N-th (from 0) wait that many seconds before it records its
    decision, ``RACER_LATE_pN`` before it starts."""
    barrier.mkdir()
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", RACER, str(barrier), f"p{i}", str(len(commands)), *cmd],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            env=env,
        )
        for i, cmd in enumerate(commands)
    ]
    done = []
    for proc, cmd in zip(procs, commands, strict=True):
        out, err = proc.communicate(timeout=TIMEOUT)
        done.append(subprocess.CompletedProcess(cmd, proc.returncode, out, err))
    return done
