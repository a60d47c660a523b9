"""Runs an agent file against a SQLite store in its own process and kills itself with
SIGKILL at a chosen point, so that the test can resume the run in another process.

    python crash_driver.py AGENT_FILE DB RUN_ID INPUT MODE [APPROVE_CALL_ID]

The driver starts the run; when it waits for a human and APPROVE_CALL_ID is given, it
approves that call and continues the run. MODE is one of:

* ``none``: no kill of its own; exit 0 at the end;
* ``commit:N``: SIGKILL right after the Nth commit (the run's creation is commit 1);
* ``save:N``: SIGKILL right before the Nth commit is written (after what its step ran);
* ``model:K``: SIGKILL inside the model request made with K assistant messages so far;
* ``decision``: SIGKILL right after the approval of APPROVE_CALL_ID is committed.

A tool that kills the process when ``CRASH_IN_TOOL`` names it lives in the tools module
the test writes; this driver only passes the environment on. Approvals are signed with the
key ``OARLOCK_APPROVER_KEY`` names (as ``user:test``), so that another process honours them.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path
from typing import Any

from oarlock.engine._agentfile import load_agent
from oarlock.engine._runner import Runner
from oarlock.governance._approvers import ApproverKey
from oarlock.models._base import ModelRequest, ModelResponse
from oarlock.store._postgres import PostgresStore
from oarlock.store._postgres_base import is_postgres_url
from oarlock.store._sqlite import SQLiteStore


def die() -> None:
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


class KillingModel:
    """Wraps a model; dies inside the request made with ``at`` assistant messages so far."""

    def __init__(self, inner: Any, at: int) -> None:
        self.inner, self.at = inner, at

    @property
    def model_id(self) -> str:
        return str(self.inner.model_id)

    async def respond(self, request: ModelRequest) -> ModelResponse:
        if sum(1 for m in request.messages if m.role == "assistant") == self.at:
            die()
        response: ModelResponse = await self.inner.respond(request)
        return response


async def main(
    agent_file: str, db: str, run_id: str, text: str, mode: str, approve: str | None = None
) -> int:
    kind, _, arg = mode.partition(":")
    agent_ref = str(Path(agent_file).resolve())
    agent = load_agent(agent_ref)
    if kind == "model":
        agent.model = KillingModel(agent.model, int(arg))
    commits = 0
    kill_after = int(arg) if kind == "commit" else None

    def on_commit(doc: Any, events: Any) -> None:
        nonlocal commits
        commits += 1
        if kill_after is not None and commits == kill_after:
            die()

    store = PostgresStore(db) if is_postgres_url(db) else SQLiteStore(db)
    if kind == "save":
        kill_before, writes = int(arg), [0]
        for name in ("create", "save"):
            real = getattr(store, name)

            async def write(*args: Any, _real: Any = real, **kwargs: Any) -> Any:
                writes[0] += 1
                if writes[0] == kill_before:
                    die()
                return await _real(*args, **kwargs)

            setattr(store, name, write)
    key = os.environ.get("OARLOCK_APPROVER_KEY")
    approver = ApproverKey.load(key, "user:test") if key else None
    runner = Runner(agent, store, on_commit=on_commit, approver=approver)
    doc = await runner.start(text, run_id=run_id, agent_ref=agent_ref)
    if approve:
        assert doc.status == "waiting_approval", doc.status
        if kind == "decision":
            kill_after = commits + 1
        doc = await runner.decide(run_id, approve, "approved")
        doc = await runner.resume(run_id)
    await store.close()
    print(f"{doc.id} {doc.status} commits={commits}")
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main(*sys.argv[1:7])))
