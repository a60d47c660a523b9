"""A call retried by an orchestrator after its earlier attempt was given up for dead
(``CallContext.retried``, a Temporal activity's retry): its claim of this run without a
receipt is stale at once, even when its owner looks alive from here; a side-effecting call
is then Uncertain and never run again, a read runs again. A claim of another run is never
taken for stale by the flag."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

from oarlock.formats._models import ToolCallPart
from oarlock.governance import CallContext, GovernedExecutor, MemoryGovernanceStore, RulePolicy
from oarlock.testing import ValidatingGovernanceStore
from oarlock.tools import tool

ALLOW = RulePolicy.from_dict({"policy": "p", "rules": [{"id": "all", "effect": "allow"}]})
CTX = CallContext("run-1", "agent", {"tenantId": "acme"}, 1)


def _call(name: str, args: dict[str, Any], call_id: str = "c1") -> ToolCallPart:
    return ToolCallPart(type="tool_call", id=call_id, name=name, arguments=args)


def _tools(log: list[str], gate: asyncio.Event) -> dict[str, Any]:
    @tool(side_effect="spend")
    async def pay(order: str) -> str:
        """Pay."""
        log.append(f"pay {order}")
        await gate.wait()
        return "paid"

    @tool(side_effect="read")
    async def look(order: str) -> str:
        """Look."""
        log.append(f"look {order}")
        if len(log) == 1:
            await gate.wait()
        return "seen"

    @tool(side_effect="spend", idempotency_key=lambda args: f"order:{args['order']}")
    async def keyed_pay(order: str) -> str:
        """Pay, keyed by order."""
        log.append(f"keyed_pay {order}")
        await gate.wait()
        return "paid"

    return {"pay": pay, "look": look, "keyed_pay": keyed_pay}


async def _held_by_a_live_attempt(
    name: str, ctx: CallContext = CTX
) -> tuple[GovernedExecutor, Any, list[str], asyncio.Event, asyncio.Task[Any]]:
    log: list[str] = []
    gate = asyncio.Event()
    store = ValidatingGovernanceStore(MemoryGovernanceStore())
    executor = GovernedExecutor(store, policy=ALLOW, duplicate_wait=0.2)
    tool_ = _tools(log, gate)[name]
    args = {"order": "A"}
    first = asyncio.ensure_future(executor.execute(tool_, _call(name, args), args, ctx))
    while not log:
        await asyncio.sleep(0.01)
    return executor, tool_, log, gate, first


async def test_a_retried_side_effecting_call_is_uncertain_and_not_run_again() -> None:
    executor, pay, log, gate, first = await _held_by_a_live_attempt("pay")
    retried = dataclasses.replace(CTX, retried=True)
    result = await executor.execute(pay, _call("pay", {"order": "A"}), {"order": "A"}, retried)
    assert result.is_error
    assert "is unknown" in result.content
    assert log == ["pay A"]
    gate.set()
    await first  # its receipt comes too late: the outcome stays Uncertain
    [stored] = await executor.store.receipts()
    assert stored.receipt["status"] == "Uncertain"
    assert stored.receipt["error"]["code"] == "interrupted"


async def test_without_the_flag_a_live_claim_is_waited_for_then_refused() -> None:
    executor, pay, log, gate, first = await _held_by_a_live_attempt("pay")
    result = await executor.execute(pay, _call("pay", {"order": "A"}), {"order": "A"}, CTX)
    assert "idempotency_in_progress" in result.content
    assert log == ["pay A"]
    gate.set()
    await first


async def test_a_retried_read_runs_again() -> None:
    executor, look, log, gate, first = await _held_by_a_live_attempt("look")
    retried = dataclasses.replace(CTX, retried=True)
    result = await executor.execute(look, _call("look", {"order": "A"}), {"order": "A"}, retried)
    assert not result.is_error
    assert "seen" in result.content
    assert log == ["look A", "look A"]
    gate.set()
    await first


async def test_the_flag_never_makes_another_runs_claim_stale() -> None:
    executor, keyed, log, gate, first = await _held_by_a_live_attempt("keyed_pay")
    other = dataclasses.replace(CTX, run_id="run-2", retried=True)
    args = {"order": "A"}
    result = await executor.execute(keyed, _call("keyed_pay", args), args, other)
    assert "idempotency_in_progress" in result.content
    assert log == ["keyed_pay A"]
    gate.set()
    await first
