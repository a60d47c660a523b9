"""Runs one governed tool call against a database in its own process, and SIGKILLs
itself at a chosen point of the executor's protocol, so that a test can recover the call
from another process.

    python executor_driver.py DB MODE EFFECTS_FILE [TOOL]

DB is an SQLite file or a ``postgresql://`` URL (:func:`open_runs`).

TOOL is ``charge`` (a ``spend`` tool keyed by its order id, the default), ``lookup`` (a
``read`` tool, one key per call of the run, called as a drive calls it right after the
model's response, ``CallContext.fresh``: it runs first and is recorded with its claim
and receipt in one write, the store's ``record``) or ``lookup-replayed`` (the same tool
called in a replay of another run, which claims it before it runs, as ``charge`` is
claimed). Each tool's side effect is one line
appended to EFFECTS_FILE (flushed and fsynced before the tool returns), so the file
counts how often the tool really ran. MODE picks where the process dies:

* ``none``: no kill; prints one JSON line (the result the model gets, and under
  ``receipt`` the receipt now held for the call's key) and exits 0;
* ``before-claim``: on entry to the store's ``begin`` (nothing of the call is stored);
* ``after-claim``: right after ``begin`` took the claim (the invocation is committed) and
  before the tool starts;
* ``after-tool``: on entry to the store's ``finish``, or its ``record`` (the tool ran, no
  receipt is stored).

Every process makes the same call: run ``RUN_ID``, call ``CALL_ID``, turn 1, tenant
``acme``, arguments ``ARGUMENTS`` (``charge``) or ``LOOKUP_ARGUMENTS`` (the lookups).

The module also holds what the concurrency tests share with their spawned processes: the
tools, the policy, and :func:`process_worker`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from oarlock.formats._models import ToolCallPart, ToolResultPart
from oarlock.governance import CallContext, GovernedExecutor, RulePolicy
from oarlock.governance._records import Approval, Claim
from oarlock.governance._store import ClaimHeld, GovernanceStore
from oarlock.store import SQLiteStore
from oarlock.store._postgres import PostgresStore
from oarlock.store._postgres_base import is_postgres_url
from oarlock.testing import ValidatingGovernanceStore
from oarlock.tools import Tool, tool

RUN_ID = "run-crash"
CALL_ID = "c1"
REPLAYED_RUN_ID = "run-replayed"  # the run a ``lookup-replayed`` call's run replays
AGENT = "driver"
TENANT = "acme"
ARGUMENTS: dict[str, Any] = {"order_id": "A-1", "amount": 25}
LOOKUP_ARGUMENTS: dict[str, Any] = {"order_id": "A-1"}
MODES = ("none", "before-claim", "after-claim", "after-tool")

def open_runs(db: str | Path) -> SQLiteStore | PostgresStore:
    """The store of ``db``: a PostgreSQL database for a URL, else an SQLite file."""
    if isinstance(db, str) and is_postgres_url(db):
        return PostgresStore(db)
    return SQLiteStore(db)


POLICY = RulePolicy.from_dict(
    {
        "policy": "t",
        "rules": [{"id": "ok", "effect": "allow", "reason": "test", "match": {"tool": "charge"}}],
    }
)


def die() -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def append_line(path: str | os.PathLike[str], line: str) -> None:
    """The side effect: one line, on disk before the tool returns."""
    with open(path, "a", encoding="utf-8") as out:
        out.write(line + "\n")
        out.flush()
        os.fsync(out.fileno())


def charge_result(order_id: str, amount: int) -> dict[str, Any]:
    """What ``charge`` returns (deterministic, so every caller can expect it)."""
    return {"order_id": order_id, "amount": amount, "status": "charged"}


def make_charge(effects: str | os.PathLike[str], delay: float = 0.0) -> Tool:
    """A ``spend`` tool keyed by order id whose side effect is a line in ``effects``."""

    @tool(side_effect="spend", idempotency_key=lambda a: f"charge:{a['order_id']}")
    def charge(order_id: str, amount: int) -> dict[str, Any]:
        """Charge an order.

        Args:
            order_id: The order id.
            amount: The amount, in cents.
        """
        if delay:
            time.sleep(delay)
        append_line(effects, f"charge {order_id} {amount} pid={os.getpid()}")
        return charge_result(order_id, amount)

    return charge


def make_lookup(effects: str | os.PathLike[str]) -> Tool:
    """A ``read`` tool (one key per call of a run) that also leaves a line in ``effects``."""

    @tool(side_effect="read")
    def lookup(order_id: str) -> dict[str, Any]:
        """Look an order up.

        Args:
            order_id: The order id.
        """
        append_line(effects, f"lookup {order_id} pid={os.getpid()}")
        return {"order_id": order_id, "total": 25}

    return lookup


def make_call(name: str, arguments: dict[str, Any], call_id: str = CALL_ID) -> ToolCallPart:
    return ToolCallPart(type="tool_call", id=call_id, name=name, arguments=arguments)


def context(run_id: str = RUN_ID, tenant: str = TENANT, turn: int = 1) -> CallContext:
    return CallContext(run_id, AGENT, {"tenantId": tenant}, turn)


def result_json(part: ToolResultPart) -> dict[str, Any]:
    return {
        "tool_call_id": part.tool_call_id,
        "tool_name": part.tool_name,
        "content": part.content,
        "is_error": part.is_error,
    }


class CrashingStore(ValidatingGovernanceStore):
    """A governance store that validates every record, delegates every method to
    ``inner`` and SIGKILLs the process at the point ``mode`` names."""

    def __init__(self, inner: GovernanceStore, mode: str) -> None:
        if mode not in MODES:
            raise SystemExit(f"unknown mode {mode!r}; use one of {', '.join(MODES)}")
        super().__init__(inner)
        self.mode = mode

    async def begin(
        self,
        invocation: dict[str, Any],
        claim: Claim,
        *,
        approval_id: str | None,
        grant: Approval | None,
        at: str,
        fence: Any = None,
    ) -> ClaimHeld | None:
        if self.mode == "before-claim":
            die()
        held = await super().begin(
            invocation, claim, approval_id=approval_id, grant=grant, at=at, fence=fence
        )
        if held is None and self.mode == "after-claim":
            die()
        return held

    async def finish(
        self, receipt: dict[str, Any], *, result: bytes | None, at: str, fence: Any = None
    ) -> None:
        if self.mode == "after-tool":
            die()
        await super().finish(receipt, result=result, at=at, fence=fence)

    async def record(
        self,
        invocation: dict[str, Any],
        claim: Claim,
        receipt: dict[str, Any],
        *,
        result: bytes | None,
        at: str,
        fence: Any = None,
    ) -> ClaimHeld | None:
        if self.mode == "after-tool":
            die()
        return await super().record(invocation, claim, receipt, result=result, at=at, fence=fence)


async def main(db: str, mode: str, effects: str, which: str = "charge") -> int:
    if which == "charge":
        the_tool, arguments = make_charge(effects), dict(ARGUMENTS)
    elif which in ("lookup", "lookup-replayed"):
        the_tool, arguments = make_lookup(effects), dict(LOOKUP_ARGUMENTS)
    else:
        raise SystemExit(f"unknown tool {which!r}; use charge, lookup or lookup-replayed")
    runs = open_runs(db)
    store = CrashingStore(runs.governance(), mode)
    assert isinstance(store, GovernanceStore)
    executor = GovernedExecutor(store, policy=POLICY)
    call = make_call(the_tool.name, arguments)
    validated = the_tool.validate_arguments(arguments)
    ctx = context()
    if which == "lookup":  # made as a drive makes a call of the model response it just got
        ctx = dataclasses.replace(ctx, fresh=True)
    elif which == "lookup-replayed":
        ctx = dataclasses.replace(ctx, replay_of=REPLAYED_RUN_ID)
    part = await executor.execute(the_tool, call, validated, ctx)
    key = the_tool.idempotency_key(validated) if the_tool.idempotency_key else None
    held = await store.claim_of(
        ctx.tenant, the_tool.name, key or f"run:{ctx.run_id}:call:{call.id}"
    )
    await runs.close()
    # the result the model gets, and the receipt this process sees for the call's key
    print(json.dumps(result_json(part) | {"receipt": None if held is None else held.receipt}))
    return 0


# -- the concurrency tests' spawned processes ------------------------------------------


def process_worker(
    run_id: str, db: str, effects: str, barrier: Any, out: str, duplicate_wait: float
) -> None:
    """One process of a concurrent duplicate: opens its own store on ``db``, waits at the
    barrier, executes the slow ``charge`` (call ``CALL_ID`` of run ``run_id``, arguments
    ``ARGUMENTS``) once and writes what it saw to ``out`` as JSON."""

    async def go(runs: SQLiteStore | PostgresStore) -> dict[str, Any]:
        store = runs.governance()
        charge = make_charge(effects, delay=0.2)
        executor = GovernedExecutor(store, policy=POLICY, duplicate_wait=duplicate_wait)
        barrier.wait(timeout=60)
        part = await executor.execute(
            charge, make_call("charge", ARGUMENTS), dict(ARGUMENTS), context(run_id)
        )
        held = await store.claim_of(TENANT, "charge", f"charge:{ARGUMENTS['order_id']}")
        return {
            "run_id": run_id,
            "pid": os.getpid(),
            "result": result_json(part),
            "receipt": None if held is None else held.receipt,
        }

    runs = open_runs(db)
    try:
        report = asyncio.run(go(runs))
    finally:
        asyncio.run(runs.close())
    Path(out).write_text(json.dumps(report), "utf-8")


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main(*sys.argv[1:5])))
